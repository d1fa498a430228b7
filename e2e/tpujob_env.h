// Helpers for end-to-end tests of TPUJobs: fake TPU nodes that KWOK keeps Ready, jobs applied
// with kubectl, pod outcomes written into pod status as a kubelet would, and a kubectl watch
// that records every pod event so invariants can be checked over the whole run.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "e2e_env.h"
#include "operator_env.h"

namespace tpujob::e2e {

// Creates `count` KWOK nodes named <prefix>-<i> advertising `chips` google.com/tpu, labelled
// with the accelerator, topology and node pool, and tainted as GKE taints TPU nodes. Waits until
// every one is Ready.
inline void CreateTpuNodes(const std::string& prefix, int count, const std::string& accelerator,
                           const std::string& topology, const std::string& pool, int chips = 4) {
  std::ostringstream yaml;
  for (int i = 0; i < count; ++i) {
    yaml << "---\napiVersion: v1\nkind: Node\nmetadata:\n  name: " << prefix << "-" << i
         << "\n  annotations: {kwok.x-k8s.io/node: fake}\n  labels:\n"
         << "    cloud.google.com/gke-tpu-accelerator: " << accelerator << "\n"
         << "    cloud.google.com/gke-tpu-topology: " << topology << "\n"
         << "    cloud.google.com/gke-nodepool: " << pool << "\n"
         << "    tpujob.dev/e2e-nodes: " << prefix << "\n"
         << "spec:\n  taints:\n  - {key: google.com/tpu, value: present, effect: NoSchedule}\n"
         << "status:\n  capacity: &r {cpu: \"32\", memory: 128Gi, pods: \"110\", "
         << "google.com/tpu: \"" << chips << "\"}\n  allocatable: *r\n";
  }
  const std::string path = ClusterDir() + "/nodes-" + prefix + ".yaml";
  std::ofstream(path) << yaml.str();
  const auto applied = Kubectl("apply -f " + path);
  ASSERT_EQ(applied.exit_code, 0) << applied.output;
  const auto ready = Kubectl("wait --for=condition=Ready node -l tpujob.dev/e2e-nodes=" + prefix +
                             " --timeout=60s");
  ASSERT_EQ(ready.exit_code, 0) << ready.output;
}

// A KWOK node without TPUs or taints, for the pods that need no TPU (a Master replica).
inline void CreateCpuNode(const std::string& name) {
  const std::string yaml = "apiVersion: v1\nkind: Node\nmetadata:\n  name: " + name +
                           "\n  annotations: {kwok.x-k8s.io/node: fake}\n  labels: "
                           "{tpujob.dev/e2e-nodes: " +
                           name +
                           "}\nstatus:\n  capacity: &r {cpu: \"32\", memory: 128Gi, pods: "
                           "\"110\"}\n  allocatable: *r\n";
  const std::string path = ClusterDir() + "/node-" + name + ".yaml";
  std::ofstream(path) << yaml;
  const auto applied = Kubectl("apply -f " + path);
  ASSERT_EQ(applied.exit_code, 0) << applied.output;
  const auto ready = Kubectl("wait --for=condition=Ready node/" + name + " --timeout=60s");
  ASSERT_EQ(ready.exit_code, 0) << ready.output;
}

inline void DeleteTpuNodes(const std::string& prefix) {
  Kubectl("delete node -l tpujob.dev/e2e-nodes=" + prefix + " --wait=false");
}

// Applies `yaml` in `ns`; returns kubectl's result.
inline CommandResult ApplyYaml(const std::string& ns, const std::string& yaml) {
  static int counter = 0;
  const std::string path = ClusterDir() + "/manifest-" + std::to_string(::getpid()) + "-" +
                           std::to_string(++counter) + ".yaml";
  std::ofstream(path) << yaml;
  return Kubectl("apply -n " + ns + " -f " + path);
}

// A TPUJob manifest with `workers` workers of 4 chips on tpu-v5-lite-podslice; `extra_spec`
// is appended to the spec (indented two spaces), `annotations` to the metadata.
inline std::string JobYaml(const std::string& name, int workers, const std::string& topology,
                           const std::string& extra_spec = "", bool master = false,
                           const std::string& annotations = "",
                           const std::string& accelerator = "tpu-v5-lite-podslice") {
  std::ostringstream y;
  y << "apiVersion: tpujob.dev/v1alpha1\nkind: TPUJob\nmetadata:\n  name: " << name << "\n";
  if (!annotations.empty()) y << "  annotations:\n    " << annotations << "\n";
  y << "spec:\n  tpu: {accelerator: " << accelerator << ", topology: " << topology
    << ", chipsPerWorker: 4}\n  replicaSpecs:\n";
  const std::string tmpl =
      "      template:\n        spec:\n          containers:\n"
      "          - {name: trainer, image: busybox, command: [sh, -c, 'train']}\n";
  if (master) y << "    Master:\n      replicas: 1\n" << tmpl;
  y << "    Worker:\n      replicas: " << workers << "\n" << tmpl;
  if (!extra_spec.empty()) y << extra_spec;
  return y.str();
}

inline std::string Get(const std::string& ns, const std::string& what,
                       const std::string& jsonpath) {
  return Trim(
      Kubectl("get " + what + " -n " + ns + " -o jsonpath='" + jsonpath + "'", false).output);
}

inline std::string JobField(const std::string& ns, const std::string& job,
                            const std::string& jsonpath) {
  return Get(ns, "tpujob " + job, jsonpath);
}

// Waits until the job's field reads `want`; on timeout the failure shows the last value and
// the job.
inline ::testing::AssertionResult JobFieldBecomes(
    const std::string& ns, const std::string& job, const std::string& jsonpath,
    const std::string& want, std::chrono::seconds timeout = std::chrono::seconds(30)) {
  std::string last;
  if (Eventually([&] { return (last = JobField(ns, job, jsonpath)) == want; }, timeout,
                 std::chrono::milliseconds(100))) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << jsonpath << " of " << ns << "/" << job << " is \"" << last << "\", want \"" << want
         << "\"\n"
         << Kubectl("get tpujob " + job + " -n " + ns + " -o yaml").output
         << Kubectl("get pods -n " + ns + " -o wide").output;
}

inline nlohmann::json JobJson(const std::string& ns, const std::string& job) {
  const auto r = Kubectl("get tpujob " + job + " -n " + ns + " -o json", false);
  return nlohmann::json::parse(r.output, nullptr, false);
}

// Pod names of the job, sorted.
inline std::vector<std::string> JobPods(const std::string& ns, const std::string& job) {
  std::istringstream in(Get(ns, "pods -l tpujob.dev/job-name=" + job,
                            "{range .items[*]}{.metadata.name}{\"\\n\"}{end}"));
  std::vector<std::string> names;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) names.push_back(line);
  }
  std::sort(names.begin(), names.end());
  return names;
}

inline std::string PodUid(const std::string& ns, const std::string& pod) {
  return Get(ns, "pod " + pod, "{.metadata.uid}");
}

// Writes a terminated main container into the pod's status, as the kubelet does when the
// program exits: phase Failed for a non-zero code, Succeeded for 0.
inline CommandResult TerminatePod(const std::string& ns, const std::string& pod, int exit_code,
                                  const std::string& reason = "", const std::string& message = "") {
  nlohmann::json terminated = {
      {"exitCode", exit_code},
      {"reason", reason.empty() ? (exit_code == 0 ? "Completed" : "Error") : reason}};
  if (!message.empty()) terminated["message"] = message;
  nlohmann::json status = {{"status",
                            {{"phase", exit_code == 0 ? "Succeeded" : "Failed"},
                             {"conditions", {{{"type", "Ready"}, {"status", "False"}}}},
                             {"containerStatuses",
                              {{{"name", "trainer"},
                                {"ready", false},
                                {"restartCount", 0},
                                {"image", "busybox"},
                                {"imageID", ""},
                                {"state", {{"terminated", terminated}}}}}}}}};
  const std::string path = ClusterDir() + "/status-" + pod + ".json";
  std::ofstream(path) << status.dump();
  return Kubectl("patch pod " + pod + " -n " + ns +
                 " --subresource=status --type=merge --patch-file " + path);
}

// Sets a condition in a node's status, as node-problem-detector does (strategic merge by type,
// so the conditions KWOK keeps are left alone).
inline CommandResult SetNodeCondition(const std::string& node, const std::string& type,
                                      const std::string& status, const std::string& reason,
                                      const std::string& message) {
  const std::string now = Trim(RunCommand("date -u +%Y-%m-%dT%H:%M:%SZ", false).output);
  const nlohmann::json patch = {{"status",
                                 {{"conditions",
                                   {{{"type", type},
                                     {"status", status},
                                     {"reason", reason},
                                     {"message", message},
                                     {"lastHeartbeatTime", now},
                                     {"lastTransitionTime", now}}}}}}};
  const std::string path = ClusterDir() + "/node-condition-" + node + ".json";
  std::ofstream(path) << patch.dump();
  return Kubectl("patch node " + node + " --subresource=status --type=strategic --patch-file " +
                 path);
}

// Records every pod event of a namespace through `kubectl get --watch` and checks the
// invariants of the lifecycle over the whole record: never two live pods for one replica
// (type, index) of a job, and never a pod of attempt n+1 created while a pod of attempt n
// exists.
class PodWatch {
 public:
  explicit PodWatch(const std::string& ns) : ns_(ns) {
    path_ = ClusterDir() + "/podwatch-" + ns + ".log";
    const std::string cmd =
        ToolsBin() + "/kubectl --kubeconfig " + KubeconfigPath() + " get pods -n " + ns +
        " --watch --output-watch-events -o jsonpath='{.type} {.object.metadata.name} "
        "{.object.metadata.uid} {.object.metadata.labels.tpujob\\.dev/job-name} "
        "{.object.metadata.labels.tpujob\\.dev/replica-type} "
        "{.object.metadata.labels.tpujob\\.dev/replica-index} "
        "{.object.metadata.labels.tpujob\\.dev/attempt} "
        "grace={.object.metadata.deletionGracePeriodSeconds}{\"\\n\"}' > " +
        path_ + " 2>&1 & echo $!";
    pid_ = std::atoi(Trim(RunCommand(cmd, false).output).c_str());
    // The watch starts with the current list; wait until it is running.
    Eventually([&] { return RunCommand("test -e " + path_).exit_code == 0; });
  }
  ~PodWatch() {
    if (pid_ > 0) ::kill(pid_, SIGTERM);
  }

  struct Report {
    int events = 0;
    int creations = 0;
    std::vector<std::string> violations;
  };

  // The whole record, one event per line.
  std::string Raw() const { return ReadFile(path_); }

  Report Check() const {
    Report report;
    std::ifstream in(path_);
    struct Live {
      std::string replica;
      int attempt;
    };
    std::map<std::string, Live> live;  // uid -> identity
    std::set<std::string> seen;
    for (std::string line; std::getline(in, line);) {
      std::istringstream fields(line);
      std::string type, name, uid, job, rtype, index, attempt;
      fields >> type >> name >> uid >> job >> rtype >> index >> attempt;
      if (job.empty() || attempt.empty()) continue;
      ++report.events;
      const std::string replica = job + "/" + rtype + "-" + index;
      const int att = std::atoi(attempt.c_str());
      if (type == "DELETED") {
        live.erase(uid);
        continue;
      }
      if (live.contains(uid)) continue;  // MODIFIED, or the initial list
      if (type == "ADDED") ++report.creations;
      for (const auto& [other_uid, other] : live) {
        if (other.replica == replica) {
          report.violations.push_back("two live pods for " + replica + ": " + other_uid + " and " +
                                      uid + " (" + name + ")");
        }
        if (other.replica.substr(0, other.replica.find('/')) == job && other.attempt < att) {
          report.violations.push_back(
              "pod " + name + " of attempt " + attempt + " created while a pod of attempt " +
              std::to_string(other.attempt) + " exists (" + other.replica + ")");
        }
      }
      live[uid] = {replica, att};
    }
    return report;
  }

 private:
  std::string ns_;
  std::string path_;
  int pid_ = -1;
};

}  // namespace tpujob::e2e
