// The fixture of the multislice end-to-end tests (multislice_e2e_test.cpp, elastic_e2e_test.cpp):
// KWOK node pools of TPU hosts with an accelerator name of the test's own, so that no other test
// competes for them, TPUJob manifests of several slices, and what the tests read of their pods.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "e2e_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {

class MultisliceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { InstallCrd(); }

  void SetUp() override {
    static int counter = 0;
    prefix_ = "ms" + std::to_string(::getpid() % 10000) + "-" + std::to_string(++counter);
    accelerator_ = "tpu-" + prefix_;
  }
  void TearDown() override {
    for (const std::string& set : node_sets_) DeleteTpuNodes(set);
  }

  // `pools` node pools ("pool-<prefix>-a", ...) of `hosts` KWOK nodes with 4 chips each.
  void CreatePools(int pools, int hosts, const std::string& topology) {
    for (int p = 0; p < pools; ++p) {
      const std::string set = prefix_ + "-" + std::string(1, static_cast<char>('a' + p));
      node_sets_.push_back(set);
      CreateTpuNodes(set, hosts, accelerator_, topology, "pool-" + set);
    }
  }
  std::string Pool(char letter) const { return "pool-" + prefix_ + "-" + letter; }

  // A TPUJob of `slices` slices of `hosts` workers with 4 chips each.
  // `extra_tpu` is added to spec.tpu (", minSlices: 2").
  std::string Job(const std::string& name, int slices, int hosts, const std::string& topology,
                  const std::string& extra_spec = "", const std::string& extra_tpu = "") const {
    return "apiVersion: tpujob.dev/v1alpha1\nkind: TPUJob\nmetadata:\n  name: " + name +
           "\nspec:\n  tpu: {accelerator: " + accelerator_ + ", topology: " + topology +
           ", chipsPerWorker: 4, slices: " + std::to_string(slices) + extra_tpu +
           "}\n  replicaSpecs:\n    Worker:\n      replicas: " + std::to_string(hosts) +
           "\n      template:\n        spec:\n          containers:\n"
           "          - {name: trainer, image: busybox, command: [sh, -c, 'train']}\n" +
           extra_spec;
  }

  // Nodes of this test that are cordoned.
  std::string CordonedNodes() const {
    std::string out;
    for (const std::string& set : node_sets_) {
      const std::string nodes = UnschedulableNodes(set);
      if (!nodes.empty()) out += (out.empty() ? "" : " ") + nodes;
    }
    return out;
  }

  static std::vector<std::string> NodePools(const std::string& ns, const std::string& job) {
    const nlohmann::json status = JobJson(ns, job).value("status", nlohmann::json::object());
    return status.value("nodePools", std::vector<std::string>{});
  }

  static std::string Worker(const std::string& job, int slice, int host) {
    return job + "-worker-" + std::to_string(slice) + "-" + std::to_string(host);
  }

  std::string prefix_;
  std::string accelerator_;
  std::vector<std::string> node_sets_;
};

// The first container's environment variables with a value.
inline std::map<std::string, std::string> EnvOf(const nlohmann::json& pod) {
  std::map<std::string, std::string> env;
  for (const nlohmann::json& var :
       pod["spec"]["containers"][0].value("env", nlohmann::json::array())) {
    env[var.value("name", "")] = var.value("value", "");
  }
  return env;
}

// Each worker pod of the job and the node it is on.
inline std::map<std::string, std::string> NodesByPod(const std::string& ns,
                                                     const std::string& job) {
  std::map<std::string, std::string> out;
  for (const std::string& pod : JobPods(ns, job)) out[pod] = NodeOf(ns, pod);
  return out;
}

inline std::string PodEnv(const std::string& ns, const std::string& pod, const std::string& name) {
  const nlohmann::json object = PodJson(ns, pod);
  if (!object.is_object()) return "<no pod " + pod + ">";
  const auto env = EnvOf(object);
  auto it = env.find(name);
  return it == env.end() ? "<unset>" : it->second;
}

}  // namespace tpujob::e2e
