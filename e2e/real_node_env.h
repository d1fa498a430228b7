// Helpers for end-to-end tests on the real node of the local cluster (`e2e/cluster up
// --real-node`): what the cluster directory says about the node, the project image imported into
// it, the Helm chart installed around a test, and what pods are doing when they do not become
// Ready.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "e2e_env.h"
#include "operator_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {

// helm --set flags giving the operator's pods a toleration of GKE's TPU taint.
inline constexpr const char* kTolerateTpuTaint =
    "--set tolerations[0].key=google.com/tpu --set tolerations[0].operator=Exists"
    " --set tolerations[0].effect=NoSchedule";

inline const std::string kChart = std::string(TPUJOB_SOURCE_DIR) + "/charts/tpujob-operator";
inline constexpr const char* kRelease = "real";
inline constexpr const char* kFullname = "real-tpujob-operator";

// A value of a shell-sourceable KEY=VALUE file ("" when missing).
inline std::string PortsEnvOf(const std::string& file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with(key + "=")) return line.substr(key.size() + 1);
  }
  return "";
}

// A value of DIR/ports.env.
inline std::string PortsEnv(const std::string& key) {
  return PortsEnvOf(ClusterDir() + "/ports.env", key);
}

inline std::string RealNode() { return PortsEnv("REAL_NODE"); }

// The second real node, the spare (cordoned until a test takes it; "" when the cluster has
// none), and how many real nodes the cluster has: a DaemonSet runs a pod on each.
inline std::string SpareNode() { return PortsEnv("REAL_NODE_1"); }
inline int RealNodeCount() { return RealNode().empty() ? 0 : SpareNode().empty() ? 1 : 2; }

// The directory of the node's fake TPU device plugin (dev/, unhealthy, hidden).
inline std::string TpuDir() { return PortsEnv("REAL_TPU_DIR"); }

// The test workload's image (e2e/tools/node/tpu-worker), imported into the node.
inline std::string WorkerImage() {
  return PortsEnvOf(PortsEnv("REAL_NODE_TOOLS") + "/images/images.env", "WORKER_IMAGE");
}

// The directory of the jax-worker image (e2e/tools/jax-worker: a real JAX training program over
// gloo CPU collectives, with Orbax checkpoints), built and cached on first use by its build.sh
// (about 2 minutes the first time; at once after that). Not imported by `e2e/cluster up`: load
// JaxWorkerArchive() with `e2e/cluster load-image` first.
inline std::string JaxWorkerDir() {
  static const std::string dir = Trim(
      RunCommand(std::string(TPUJOB_SOURCE_DIR) + "/e2e/tools/jax-worker/build.sh", false).output);
  return dir;
}
inline std::string JaxWorkerArchive() { return JaxWorkerDir() + "/jax-worker.oci.tar"; }
inline std::string JaxWorkerImage() {
  return PortsEnvOf(JaxWorkerDir() + "/images.env", "JAX_IMAGE");
}

// Writes a chip list into one of the device plugin's files (unhealthy, hidden): "" for none,
// "0" or "1,3". SetChipsOf: of the device plugin of `node` (the real node or the spare).
inline void SetChipsOf(const std::string& node, const std::string& file, const std::string& chips) {
  const std::string dir = node == SpareNode() ? PortsEnv("REAL_TPU_DIR_1") : TpuDir();
  std::ofstream(dir + "/" + file) << chips << "\n";
}
inline void SetChips(const std::string& file, const std::string& chips) {
  SetChipsOf(RealNode(), file, chips);
}

// The project image's archive: $TPUJOB_E2E_IMAGE_ARCHIVE, else the one the fixture imported
// (DIR/image-archive names it).
inline std::string ImageArchive() {
  const char* archive = std::getenv("TPUJOB_E2E_IMAGE_ARCHIVE");
  return archive != nullptr ? archive : Trim(ReadFile(ClusterDir() + "/image-archive"));
}

// What the pods matching `selector` are doing, for a failure message: phase, node, every
// container's state with the kubelet's reason and message, the last termination, and the
// Warning events about the pods. This is where a broken image shows what is wrong.
inline std::string DescribePods(const std::string& ns, const std::string& selector) {
  const auto r = Kubectl("get pods -n " + ns + " -l " + selector + " -o json", false);
  const nlohmann::json pods = nlohmann::json::parse(r.output, nullptr, false);
  std::ostringstream out;
  if (!pods.is_object()) return "cannot list pods: " + r.output;
  for (const auto& pod : pods["items"]) {
    const std::string name = pod["metadata"]["name"];
    out << "pod " << name << ": phase " << pod["status"].value("phase", "?") << " on "
        << pod["spec"].value("nodeName", "(not scheduled)") << "\n";
    for (const char* kind : {"initContainerStatuses", "containerStatuses"}) {
      if (!pod["status"].contains(kind)) continue;
      for (const auto& c : pod["status"][kind]) {
        out << "  container " << c.value("name", "?") << ": ready=" << c.value("ready", false)
            << " restarts=" << c.value("restartCount", 0);
        for (const char* which : {"state", "lastState"}) {
          if (!c.contains(which)) continue;
          for (const auto& [state, detail] : c[which].items()) {
            out << " " << which << "=" << state;
            if (detail.contains("reason")) out << " reason=" << detail["reason"].get<std::string>();
            if (detail.contains("exitCode")) out << " exitCode=" << detail["exitCode"].dump();
            if (detail.contains("message")) {
              out << " message=\"" << detail["message"].get<std::string>() << "\"";
            }
          }
        }
        out << "\n";
      }
    }
    const auto events =
        Kubectl("get events -n " + ns + " --field-selector involvedObject.name=" + name +
                    ",type=Warning -o custom-columns=REASON:.reason,MESSAGE:.message --no-headers",
                false);
    if (!Trim(events.output).empty()) out << "  warning events:\n" << events.output;
  }
  return out.str();
}

// `count` pods matching `selector` all Ready (every container), or why not.
inline ::testing::AssertionResult PodsBecomeReady(
    const std::string& ns, const std::string& selector, int count,
    std::chrono::seconds timeout = std::chrono::seconds(120)) {
  const bool ready = Eventually(
      [&] {
        const auto r = Kubectl("get pods -n " + ns + " -l " + selector +
                                   " -o jsonpath='{range .items[*]}{.metadata.deletionTimestamp}"
                                   "|{.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}"
                                   "{end}'",
                               false);
        std::istringstream lines(r.output);
        std::string line;
        int ready_pods = 0, pods = 0;
        while (std::getline(lines, line)) {
          if (line.empty()) continue;
          ++pods;
          if (line == "|True") ++ready_pods;
        }
        return pods == count && ready_pods == count;
      },
      timeout, std::chrono::milliseconds(500));
  if (ready) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected " << count << " Ready pods (" << selector
                                       << ") in " << ns << " within " << timeout.count() << " s:\n"
                                       << DescribePods(ns, selector);
}

inline std::vector<std::string> PodNames(const std::string& ns, const std::string& selector) {
  const auto r = Kubectl("get pods -n " + ns + " -l " + selector +
                             " -o jsonpath='{range .items[*]}{.metadata.name}{\"\\n\"}{end}'",
                         false);
  std::vector<std::string> names;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) names.push_back(line);
  }
  return names;
}

inline const std::string kOperatorSelector = std::string("app.kubernetes.io/instance=") + kRelease +
                                             ",app.kubernetes.io/component=controller";
inline const std::string kAgentSelector = std::string("app.kubernetes.io/instance=") + kRelease +
                                          ",app.kubernetes.io/component=node-agent";

// helm install/uninstall around a test (the cluster-scoped objects outlive the namespace).
class Release {
 public:
  // The operator's pods tolerate the TPU taint: the real node is the cluster's only node that
  // runs containers, and it is a TPU host.
  Release(std::string ns, const std::string& values) : ns_(std::move(ns)) {
    install_ = Helm("install " + std::string(kRelease) + " " + kChart + " -n " + ns_ +
                    " --set image.pullPolicy=Never " + kTolerateTpuTaint + " " + values);
  }
  ~Release() {
    if (!uninstalled_) Helm("uninstall " + std::string(kRelease) + " -n " + ns_ + " --wait");
  }
  const CommandResult& install() const { return install_; }
  CommandResult Uninstall() {
    uninstalled_ = true;
    return Helm("uninstall " + std::string(kRelease) + " -n " + ns_ + " --wait --timeout 120s");
  }

 private:
  std::string ns_;
  CommandResult install_;
  bool uninstalled_ = false;
};

}  // namespace tpujob::e2e
