// The fixture of the end-to-end tests of a real JAX program on the real nodes of the local
// cluster (`e2e/cluster up --real-node`): RealStallE2E (real_stall_e2e_test.cpp) and
// RealElasticE2E (real_elastic_e2e_test.cpp). TPUJOB_E2E_DIR must name a cluster started with
// --real-node into whose nodes the project image was imported (the real_cluster fixture of
// CMakeLists.txt); the jax-worker image is built (cached) and imported by the suite when the
// nodes lack it.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "e2e_env.h"
#include "operator_env.h"
#include "real_node_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {

// The fixture of the tests that run the jax-worker program (e2e/tools/jax-worker/train.py) on the
// real nodes: the operator (one replica) and the node agent (a pod on each real node), installed
// once for the suite, and the jax-worker image on the nodes.
class RealJaxTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (RealNode().empty() || ImageArchive().empty()) return;
    // Built once and cached (about 3 minutes the first time), imported once per cluster (about
    // 20 s): `e2e/cluster up` does not import it.
    const std::string image = JaxWorkerImage();
    if (image.empty()) return;
    bool imported = true;
    for (const char* socket : {"CONTAINERD_SOCKET", "CONTAINERD1_SOCKET"}) {
      if (PortsEnv(socket).empty()) continue;
      const std::string ctr = "ctr --address " + PortsEnv(socket) + " -n k8s.io ";
      imported = imported &&
                 RunCommand(ctr + "images ls -q | grep -qxF '" + image + "'", false).exit_code == 0;
    }
    if (!imported) {
      const auto load = RunCommand(std::string(TPUJOB_SOURCE_DIR) + "/e2e/cluster load-image " +
                                       JaxWorkerArchive() + " --dir " + ClusterDir(),
                                   false);
      if (load.exit_code != 0) {
        std::cerr << "could not import " << JaxWorkerArchive() << ":\n" << load.output;
        return;
      }
    }
    jax_image_ = image;
    ops_ = std::make_unique<TestNamespace>("real-jax");
    agents_ = std::make_unique<TestNamespace>("real-jax-agent");  // hostPath: privileged
    release_ = std::make_unique<Release>(
        ops_->name(), "--set replicaCount=1 --set nodeAgent.namespace=" + agents_->name() +
                          " --set nodeAgent.devPath=" + TpuDir() +
                          "/dev --set nodeAgent.intervalSeconds=2 --set nodeAgent.passAfter=1"
                          // status.progress from worker 0's log tail every 2 s, not 60.
                          " --set operator.progressRefreshSeconds=2");
  }
  static void TearDownTestSuite() {
    release_.reset();
    agents_.reset();
    ops_.reset();
  }

  void SetUp() override {
    ASSERT_FALSE(RealNode().empty())
        << ClusterDir() << " has no real node: start it with e2e/cluster up --real-node";
    ASSERT_FALSE(jax_image_.empty())
        << "no jax-worker image on the node (e2e/tools/jax-worker/build.sh, then "
           "e2e/cluster load-image)";
    ASSERT_NE(release_, nullptr) << "no image archive: set TPUJOB_E2E_IMAGE_ARCHIVE to the one "
                                    "make image wrote, or write its path to "
                                 << ClusterDir() << "/image-archive";
    ASSERT_EQ(release_->install().exit_code, 0) << release_->install().output;
    ASSERT_TRUE(PodsBecomeReady(ops_->name(), kOperatorSelector, 1));
    // One on each real node.
    ASSERT_TRUE(PodsBecomeReady(agents_->name(), kAgentSelector, RealNodeCount()));
    node_ = RealNode();
    Kubectl("uncordon " + node_, false);
    // The chips are free: no job pod of an earlier test is left on the node.
    ASSERT_TRUE(Eventually(
        [&] {
          return Trim(Kubectl("get pods -A -l tpujob.dev/job-name --field-selector spec.nodeName=" +
                                  node_ + " -o name",
                              false)
                          .output)
              .empty();
        },
        std::chrono::seconds(90), std::chrono::milliseconds(250)))
        << Kubectl("get pods -A -l tpujob.dev/job-name -o wide").output;
  }

  static std::string OperatorLogs() {
    return Kubectl("logs -n " + ops_->name() + " -l " + kOperatorSelector + " --tail=40").output;
  }

  std::string MakeCheckpointDir(const std::string& name) {
    const std::string dir = ClusterDir() + "/ckpt-" + name + "-" + std::to_string(::getpid());
    RunCommand("rm -rf " + dir + " && mkdir -p " + dir);
    dirs_.push_back(dir);
    return dir;
  }
  void TearDown() override {
    for (const std::string& dir : dirs_) RunCommand("rm -rf " + dir, false);
  }

  inline static std::unique_ptr<TestNamespace> ops_;
  inline static std::unique_ptr<TestNamespace> agents_;
  inline static std::unique_ptr<Release> release_;
  inline static std::string jax_image_;
  std::string node_;
  std::vector<std::string> dirs_;
};

}  // namespace tpujob::e2e
