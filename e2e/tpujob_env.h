// Helpers for end-to-end tests of TPUJobs: fake TPU nodes that KWOK keeps Ready, jobs applied
// with kubectl, pod outcomes written into pod status as a kubelet would, a kubectl watch that
// records every pod event so invariants can be checked over the whole run, and the end state
// nothing may be missing from: the operator's caches equal to a fresh kubectl get, each job with
// exactly its desired pods, no orphans, no cordon without a recorded reason.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cache/objects.h"
#include "e2e_env.h"
#include "fixtures.h"
#include "jsonpath.h"
#include "operator_env.h"

namespace tpujob::e2e {

// Applies `yaml` in `ns`; returns kubectl's result.
inline CommandResult ApplyYaml(const std::string& ns, const std::string& yaml) {
  static int counter = 0;
  const std::string path = ClusterDir() + "/manifest-" + std::to_string(::getpid()) + "-" +
                           std::to_string(++counter) + ".yaml";
  std::ofstream(path) << yaml;
  return Kubectl("apply -n " + ns + " -f " + path);
}

// Waits until the scheduler places a probe pod on a node of `pool`, then deletes it. The
// scheduler's own cache may lag the API server, by up to its informers' backoff after an
// API-server restart in an earlier test: a pod it tries meanwhile finds no node of the pool and
// is marked unschedulable.
inline void AwaitSchedulerPlacesOn(const std::string& pool, const std::string& name) {
  const std::string probe = "probe-" + name;
  const nlohmann::json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", {{"name", probe}}},
      {"spec",
       {{"nodeSelector", {{"cloud.google.com/gke-nodepool", pool}}},
        {"tolerations", {{{"key", "google.com/tpu"}, {"operator", "Exists"}}}},
        {"containers", {{{"name", "c"}, {"image", "probe"}}}}}}};
  const CommandResult created = ApiRequest([&]() -> kube::Result<nlohmann::json> {
    auto made = TestClient().Create(kube::Resource::Pods(), "default", pod);
    if (!made && made.error().IsAlreadyExists()) return nlohmann::json::object();
    return made;
  });
  ASSERT_EQ(created.exit_code, 0) << "creating pod default/" << probe << ": " << created.output;
  const bool bound = Eventually(
      [&] {
        auto got = TestClient().Get(kube::Resource::Pods(), "default", probe);
        return got && !got->value("/spec/nodeName"_json_pointer, "").empty();
      },
      std::chrono::seconds(90), std::chrono::milliseconds(100));
  kube::DeleteOptions now;
  now.grace_period_seconds = 0;
  ApiRequest([&]() -> kube::Result<nlohmann::json> {
    auto deleted = TestClient().Delete(kube::Resource::Pods(), "default", probe, now);
    if (!deleted && deleted.error().IsNotFound()) return nlohmann::json::object();
    return deleted;
  });
  ASSERT_TRUE(bound) << "the scheduler placed no pod on a node of " << pool;
}

// Waits until the nodes with the label selector `selector` are all Ready and carry none of the
// taints the node lifecycle controller puts on a new node (node.kubernetes.io/not-ready, which
// it lifts a moment after the node reports Ready): a pod the scheduler tries meanwhile is marked
// unschedulable, and the operator would count that against the attempt.
inline void AwaitNodesSchedulable(const std::string& selector) {
  std::string seen;  // for the failure message: each node, Ready, its taints
  ASSERT_TRUE(Eventually(
      [&] {
        kube::ListOptions options;
        options.label_selector = selector;
        auto listed = TestClient().List(kube::Resource::Nodes(), "", options);
        if (!listed) {
          seen = listed.error().ToString();
          return false;
        }
        seen.clear();
        bool schedulable = !listed->value("items", nlohmann::json::array()).empty();
        for (const nlohmann::json& node : listed->value("items", nlohmann::json::array())) {
          bool ready = false;
          for (const nlohmann::json& c :
               node.value("/status/conditions"_json_pointer, nlohmann::json::array())) {
            ready = ready || (c.value("type", "") == "Ready" && c.value("status", "") == "True");
          }
          seen += node.value("/metadata/name"_json_pointer, "") +
                  (ready ? " Ready" : " not Ready") + ", taints:";
          for (const nlohmann::json& t :
               node.value("/spec/taints"_json_pointer, nlohmann::json::array())) {
            const std::string key = t.value("key", "");
            seen += " " + key;
            if (key.starts_with("node.kubernetes.io/")) schedulable = false;
          }
          seen += "\n";
          schedulable = schedulable && ready;
        }
        return schedulable;
      },
      std::chrono::seconds(60), std::chrono::milliseconds(100)))
      << "nodes " << selector << " not all Ready and schedulable:\n"
      << seen;
}

// Creates `count` KWOK nodes named <prefix>-<i> advertising `chips` google.com/tpu, labelled
// with the accelerator, topology and node pool, and tainted as GKE taints TPU nodes. Waits until
// every one is Ready and schedulable.
inline void CreateTpuNodes(const std::string& prefix, int count, const std::string& accelerator,
                           const std::string& topology, const std::string& pool, int chips = 4) {
  std::ostringstream yaml;  // one JSON document each, which kubectl reads as YAML
  for (int i = 0; i < count; ++i) {
    fixtures::FakeNode node{.name = prefix + "-" + std::to_string(i),
                            .labels = fixtures::TpuNodeLabels(accelerator, topology, pool),
                            .chips = chips};
    node.labels["tpujob.dev/e2e-nodes"] = prefix;
    yaml << "---\n" << fixtures::NodeManifest(node).dump() << "\n";
  }
  const std::string path = ClusterDir() + "/nodes-" + prefix + ".yaml";
  std::ofstream(path) << yaml.str();
  const auto applied = Kubectl("apply -f " + path);
  ASSERT_EQ(applied.exit_code, 0) << applied.output;
  AwaitNodesSchedulable("tpujob.dev/e2e-nodes=" + prefix);
  AwaitSchedulerPlacesOn(pool, prefix);
}

// A KWOK node without TPUs or taints, for the pods that need no TPU (a Master replica).
inline void CreateCpuNode(const std::string& name) {
  const std::string manifest =
      fixtures::NodeManifest(
          {.name = name, .labels = {{"tpujob.dev/e2e-nodes", name}}, .taint_key = "", .chips = 0})
          .dump();
  const std::string path = ClusterDir() + "/node-" + name + ".yaml";
  std::ofstream(path) << manifest;
  const auto applied = Kubectl("apply -f " + path);
  ASSERT_EQ(applied.exit_code, 0) << applied.output;
  AwaitNodesSchedulable("tpujob.dev/e2e-nodes=" + name);
}

inline void DeleteTpuNodes(const std::string& prefix) {
  Kubectl("delete node -l tpujob.dev/e2e-nodes=" + prefix + " --wait=false");
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
  // A memory-backed /dev/shm, as every job whose pre-flight checks disk must mount (the
  // operator refuses one that does not: Kubernetes' 64 MB would fail disk-size shm everywhere).
  const std::string tmpl =
      "      template:\n        spec:\n"
      "          volumes: [{name: shm, emptyDir: {medium: Memory}}]\n          containers:\n"
      "          - {name: trainer, image: busybox, command: [sh, -c, 'train'], volumeMounts: "
      "[{name: shm, mountPath: /dev/shm}]}\n";
  if (master) y << "    Master:\n      replicas: 1\n" << tmpl;
  y << "    Worker:\n      replicas: " << workers << "\n" << tmpl;
  if (!extra_spec.empty()) y << extra_spec;
  return y.str();
}

// `what` read through TestClient() and printed with `jsonpath`: one object ("pod NAME", "tpujob
// NAME", "node NAME") or a list ("pods", "tpujobs", "nodes", each optionally followed by
// "-l SELECTOR"). std::nullopt when `what` is none of these or the template is outside
// JsonPathText's subset, or the read failed other than with NotFound: kubectl answers then.
inline std::optional<std::string> ReadThroughClient(const std::string& ns, const std::string& what,
                                                    const std::string& jsonpath) {
  const size_t space = what.find(' ');
  const std::string kind = what.substr(0, space);
  std::string name, selector;
  if (space != std::string::npos) {
    const std::string rest = what.substr(space + 1);
    if (rest.starts_with("-l ")) {
      selector = rest.substr(3);
      if (selector.empty() || selector.find_first_of(" '\"") != std::string::npos) {
        return std::nullopt;
      }
    } else {
      name = rest;
      if (name.empty() || name.find_first_of(" ,=/'\"") != std::string::npos || name[0] == '-') {
        return std::nullopt;
      }
    }
  }
  const bool list = name.empty();
  std::optional<kube::Resource> resource;
  if (kind == (list ? "pods" : "pod")) resource = kube::Resource::Pods();
  if (kind == (list ? "tpujobs" : "tpujob")) resource = kube::Resource::TPUJobs();
  if (kind == (list ? "nodes" : "node")) resource = kube::Resource::Nodes();
  if (!resource) return std::nullopt;
  const std::string in = resource->namespaced ? ns : "";
  kube::Result<nlohmann::json> object = nlohmann::json();
  if (list) {
    kube::ListOptions options;
    options.label_selector = selector;
    object = TestClient().List(*resource, in, options);
  } else {
    object = TestClient().Get(*resource, in, name);
  }
  if (!object) {
    // kubectl prints nothing on stdout for an object that is not there.
    if (!list && object.error().IsNotFound()) return std::string();
    return std::nullopt;
  }
  std::optional<std::string> text = JsonPathText(*object, jsonpath);
  if (text) *text = Trim(*text);
  return text;
}

inline std::string Get(const std::string& ns, const std::string& what,
                       const std::string& jsonpath) {
  if (std::optional<std::string> read = ReadThroughClient(ns, what, jsonpath)) return *read;
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
  if (Eventually([&] { return (last = JobField(ns, job, jsonpath)) == want; }, timeout)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << jsonpath << " of " << ns << "/" << job << " is \"" << last << "\", want \"" << want
         << "\"\n"
         << Kubectl("get tpujob " + job + " -n " + ns + " -o yaml").output
         << Kubectl("get pods -n " + ns + " -o wide").output;
}

// The objects of `resource` in `ns` (with the label selector `selector`) as a List, read through
// TestClient(); a discarded value when they cannot be read.
inline nlohmann::json ListJson(const kube::Resource& resource, const std::string& ns,
                               const std::string& selector = "") {
  kube::ListOptions options;
  options.label_selector = selector;
  kube::Result<nlohmann::json> list = TestClient().List(resource, ns, options);
  return list ? std::move(*list) : nlohmann::json(nlohmann::json::value_t::discarded);
}

// The pod as the API server has it; a discarded value when it cannot be read.
inline nlohmann::json PodJson(const std::string& ns, const std::string& pod) {
  kube::Result<nlohmann::json> object = TestClient().Get(kube::Resource::Pods(), ns, pod);
  return object ? std::move(*object) : nlohmann::json(nlohmann::json::value_t::discarded);
}

// The job as the API server has it; a discarded value when it cannot be read.
inline nlohmann::json JobJson(const std::string& ns, const std::string& job) {
  kube::Result<nlohmann::json> object = TestClient().Get(kube::Resource::TPUJobs(), ns, job);
  if (object) return std::move(*object);
  if (object.error().IsNotFound()) return nlohmann::json(nlohmann::json::value_t::discarded);
  const auto r = Kubectl("get tpujob " + job + " -n " + ns + " -o json", false);
  return nlohmann::json::parse(r.output, nullptr, false);
}

// Pod names of the job, sorted.
inline std::vector<std::string> JobPods(const std::string& ns, const std::string& job) {
  std::istringstream in(Get(ns, "pods -l tpujob.dev/job-name=" + job, "{.items[*].metadata.name}"));
  std::vector<std::string> names;
  for (std::string name; in >> name;) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

inline std::string PodUid(const std::string& ns, const std::string& pod) {
  return Get(ns, "pod " + pod, "{.metadata.uid}");
}

// The node the pod is bound to; empty while it is not scheduled.
inline std::string NodeOf(const std::string& ns, const std::string& pod) {
  return Get(ns, "pod " + pod, "{.spec.nodeName}");
}

inline std::string NodeField(const std::string& node, const std::string& jsonpath) {
  if (std::optional<std::string> read = ReadThroughClient("", "node " + node, jsonpath)) {
    return *read;
  }
  return Trim(Kubectl("get node " + node + " -o jsonpath='" + jsonpath + "'", false).output);
}

// Names of the nodes made by CreateTpuNodes(prefix, ...) that are unschedulable (cordoned),
// each followed by a space.
inline std::string UnschedulableNodes(const std::string& prefix) {
  return Trim(Kubectl("get nodes -l tpujob.dev/e2e-nodes=" + prefix +
                          " -o jsonpath='{range .items[?(@.spec.unschedulable==true)]}"
                          "{.metadata.name} {end}'",
                      false)
                  .output);
}

// One core/v1 Event.
struct EventRecord {
  std::string type;  // Normal, Warning
  std::string reason;
  std::string message;
  int count = 0;
};

// The Events about the object `name` of `kind` in `ns` (Nodes' are in "default"), oldest first.
inline std::vector<EventRecord> EventsAbout(const std::string& ns, const std::string& kind,
                                            const std::string& name) {
  const auto r =
      Kubectl("get events -n " + ns + " --field-selector involvedObject.kind=" + kind +
                  ",involvedObject.name=" + name + " --sort-by=.metadata.creationTimestamp -o json",
              false);
  const nlohmann::json list = nlohmann::json::parse(r.output, nullptr, false);
  std::vector<EventRecord> events;
  if (!list.is_object() || !list.contains("items") || !list["items"].is_array()) return events;
  for (const auto& item : list["items"]) {
    events.push_back({item.value("type", ""), item.value("reason", ""), item.value("message", ""),
                      item.value("count", 0)});
  }
  return events;
}

inline std::vector<EventRecord> JobEvents(const std::string& ns, const std::string& job) {
  return EventsAbout(ns, "TPUJob", job);
}

// The events with this reason whose message contains `text`.
inline std::vector<EventRecord> EventsWith(const std::vector<EventRecord>& events,
                                           const std::string& reason,
                                           const std::string& text = "") {
  std::vector<EventRecord> matching;
  for (const EventRecord& e : events) {
    if (e.reason == reason && e.message.find(text) != std::string::npos) matching.push_back(e);
  }
  return matching;
}

// "Warning NodeNotCordoned: node n1 not cordoned: ...", one line each, for failure messages.
inline std::string DescribeEvents(const std::vector<EventRecord>& events) {
  std::string out;
  for (const EventRecord& e : events) {
    out += e.type + " " + e.reason + " (x" + std::to_string(e.count) + "): " + e.message + "\n";
  }
  return out;
}

// Merges `status` (an object with a "status" key) into the pod's status subresource.
inline CommandResult PatchPodStatus(const std::string& ns, const std::string& pod,
                                    const nlohmann::json& status) {
  kube::PatchOptions options;
  options.subresource = "status";
  return ApiRequest([&] {
    return TestClient().Patch(kube::Resource::Pods(), ns, pod, kube::PatchType::kMerge, status,
                              options);
  });
}

// Writes a terminated main container into the pod's status, as the kubelet does when the
// program exits: phase Failed for a non-zero code, Succeeded for 0, finishedAt now (whole
// seconds, as the kubelet writes it).
// TerminatePod's merge patch of the pod's status.
inline nlohmann::json TerminatedPodStatus(int exit_code, const std::string& reason = "",
                                          const std::string& message = "") {
  const std::string now = cache::FormatRfc3339(std::chrono::system_clock::now());
  nlohmann::json terminated = {
      {"exitCode", exit_code},
      {"reason", reason.empty() ? (exit_code == 0 ? "Completed" : "Error") : reason},
      {"startedAt", now},
      {"finishedAt", now}};
  if (!message.empty()) terminated["message"] = message;
  return {{"status",
           {{"phase", exit_code == 0 ? "Succeeded" : "Failed"},
            {"conditions", {{{"type", "Ready"}, {"status", "False"}}}},
            {"containerStatuses", nlohmann::json::array({fixtures::ContainerStatus(
                                      "trainer", {{"terminated", terminated}}, "busybox")})}}}};
}
inline CommandResult TerminatePod(const std::string& ns, const std::string& pod, int exit_code,
                                  const std::string& reason = "", const std::string& message = "") {
  return PatchPodStatus(ns, pod, TerminatedPodStatus(exit_code, reason, message));
}

// What one run of the real pre-flight command gave.
struct PreflightRun {
  int exit_code = -1;
  std::string output;  // its log lines (stdout and stderr)
  std::string report;  // the report file it wrote; empty if none
};

// Runs the real `tpujob-operator preflight` here, as the pod's first init container would run
// on `node`: with the environment the operator put in that container (NODE_NAME set to `node`,
// since the downward API does not reach this process), an empty directory as /dev (a host
// without TPU devices) and a report file of its own. `extra_args` are appended to the command
// line; a flag given there overrides the one before it.
inline PreflightRun RunPreflightFor(const std::string& ns, const std::string& pod,
                                    const std::string& node,
                                    const std::vector<std::string>& extra_args = {}) {
  PreflightRun run;
  const std::string dir = ClusterDir() + "/preflight-" + ns + "-" + pod;
  const auto made = RunCommand("rm -rf " + dir + " && mkdir -p " + dir + "/dev");
  if (made.exit_code != 0) {
    run.output = made.output;
    return run;
  }
  const auto env = Kubectl("get pod " + pod + " -n " + ns +
                           " -o jsonpath='{range .spec.initContainers[0].env[*]}{.name}={.value}"
                           "{\"\\n\"}{end}' > " +
                           dir + "/env");
  if (env.exit_code != 0) {
    run.output = env.output;
    return run;
  }
  std::string args;
  for (const std::string& arg : extra_args) args += " '" + arg + "'";
  const auto result = RunCommand(
      "bash -c 'while IFS= read -r line; do [ -n \"$line\" ] && export \"$line\"; done < " + dir +
      "/env; export NODE_NAME=" + node + "; exec " + TPUJOB_OPERATOR_BINARY +
      " preflight --dev-root " + dir + "/dev --report-file " + dir + "/report.json \"$@\"' _" +
      args);
  run.exit_code = result.exit_code;
  run.output = result.output;
  run.report = ReadFile(dir + "/report.json");
  // Beside the operators' logs, so the check of every operator log line reads it too.
  std::ofstream(dir + "/operator-preflight.log") << result.output;
  return run;
}

// Writes a failed first init container into the pod's status as the kubelet does: the
// container terminated with `exit_code` and `report` as its termination message, the main
// container still waiting, phase Failed (the pods' restartPolicy is Never).
inline CommandResult FailInitContainer(const std::string& ns, const std::string& pod, int exit_code,
                                       const std::string& report) {
  const std::string name = Get(ns, "pod " + pod, "{.spec.initContainers[0].name}");
  const std::string image = Get(ns, "pod " + pod, "{.spec.initContainers[0].image}");
  return PatchPodStatus(
      ns, pod,
      {{"status",
        {{"phase", "Failed"},
         {"initContainerStatuses",
          nlohmann::json::array({fixtures::ContainerStatus(
              name,
              {{"terminated", {{"exitCode", exit_code}, {"reason", "Error"}, {"message", report}}}},
              image)})},
         {"containerStatuses",
          nlohmann::json::array({fixtures::ContainerStatus(
              "trainer", {{"waiting", {{"reason", "PodInitializing"}}}}, "busybox")})}}}});
}

// Sets a condition in a node's status, as node-problem-detector does (strategic merge by type,
// so the conditions KWOK keeps are left alone).
inline CommandResult SetNodeCondition(const std::string& node, const std::string& type,
                                      const std::string& status, const std::string& reason,
                                      const std::string& message) {
  const std::string now = cache::FormatRfc3339(std::chrono::system_clock::now());
  const nlohmann::json patch = fixtures::NodeConditionPatch(type, status, reason, message, now);
  kube::PatchOptions options;
  options.subresource = "status";
  return ApiRequest([&] {
    return TestClient().Patch(kube::Resource::Nodes(), "", node, kube::PatchType::kStrategicMerge,
                              patch, options);
  });
}

// `kubectl tpujob ARGS` through kubectl's plugin lookup (kubectl-tpujob beside the operator
// binary on the PATH), as a user runs it.
inline std::string KubectlTpujobCommand(const std::string& args) {
  const std::string binary = TPUJOB_OPERATOR_BINARY;
  return "KUBECONFIG=" + KubeconfigPath() + " PATH=" + binary.substr(0, binary.rfind('/')) +
         ":$PATH " + ToolsBin() + "/kubectl tpujob " + args;
}
inline CommandResult KubectlTpujob(const std::string& args, bool with_stderr = true) {
  return RunCommand(KubectlTpujobCommand(args), with_stderr);
}

// A command run in the background (its own process group), its output and exit status kept
// in files: for the commands that block until something happens (`kubectl tpujob wait`,
// `logs -f`).
class BackgroundCommand {
 public:
  explicit BackgroundCommand(const std::string& command) {
    static int counter = 0;
    base_ = ClusterDir() + "/background-" + std::to_string(::getpid()) + "-" +
            std::to_string(++counter);
    std::ofstream(base_ + ".sh") << "(" << command << ") > " << base_ << ".out 2>&1\necho $? > "
                                 << base_ << ".rc\n";
    pid_ = std::atoi(
        Trim(RunCommand("setsid bash " + base_ + ".sh >/dev/null 2>&1 & echo $!", false).output)
            .c_str());
  }
  ~BackgroundCommand() {
    if (pid_ > 0) ::kill(-pid_, SIGTERM);
    RunCommand("rm -f " + base_ + ".sh " + base_ + ".out " + base_ + ".rc");
  }
  BackgroundCommand(const BackgroundCommand&) = delete;
  BackgroundCommand& operator=(const BackgroundCommand&) = delete;

  std::string Output() const { return ReadFile(base_ + ".out"); }
  // The exit status once the command has ended within `timeout`; nullopt while it runs.
  std::optional<int> ExitCode(std::chrono::seconds timeout = std::chrono::seconds(0)) const {
    std::optional<int> code;
    const auto read = [&] {
      const std::string rc = Trim(ReadFile(base_ + ".rc"));
      if (!rc.empty()) code = std::atoi(rc.c_str());
      return code.has_value();
    };
    if (!read() && timeout.count() > 0) Eventually(read, timeout, std::chrono::milliseconds(100));
    return code;
  }

 private:
  std::string base_;
  int pid_ = -1;
};

// Records every pod event of a namespace (WatchRecorder) and checks the invariants of the
// lifecycle over the whole record: never two live pods for one replica (type, index) of a job,
// and never a pod of attempt n+1 created while a pod of attempt n exists.
// Records the API server's watch stream of `api_path` (e.g. "/api/v1/namespaces/x/pods") into
// the file `path`, one JSON event per line, for as long as it lives. It loses nothing when the
// stream ends: the API server closes a watcher that falls behind a burst (a 64-pod gang on a
// loaded machine is enough), and `kubectl get --watch` would simply stop there. The loop opens
// the watch again from the resourceVersion of the last event it wrote, as a reflector does (from
// the current state, as ADDED events, should that be too old).
class WatchRecorder {
 public:
  WatchRecorder(const std::string& api_path, std::string path) : path_(std::move(path)) {
    const std::string kubectl = ToolsBin() + "/kubectl --kubeconfig " + KubeconfigPath();
    const std::string loop =
        "f=" + path_ + "; : > \"$f\"; rv=; while :; do " + kubectl + " get --raw \"" + api_path +
        "?watch=1&allowWatchBookmarks=true${rv:+&resourceVersion=$rv}\" >> \"$f\" "
        "2>> \"$f.err\"; rv=$(tail -n 1 \"$f\" | grep -o '\"resourceVersion\":\"[0-9]*\"' | "
        "head -n 1 | tr -dc 0-9); sleep 0.2; done";
    loop_ = std::make_unique<BackgroundCommand>(loop);  // ends (killed) with the recorder
    Eventually([&] { return RunCommand("test -e " + path_).exit_code == 0; });
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::unique_ptr<BackgroundCommand> loop_;
};

class PodWatch {
 public:
  explicit PodWatch(const std::string& ns)
      : ns_(ns),
        path_(ClusterDir() + "/podwatch-" + ns + ".jsonl"),
        recorder_("/api/v1/namespaces/" + ns + "/pods", path_) {}

  struct Report {
    int events = 0;
    int creations = 0;
    std::vector<std::string> violations;
  };

  // The whole record, one event per line: "TYPE name uid job replica-type replica-index attempt
  // grace=deletionGracePeriodSeconds" (bookmarks, errors and a line still being written are
  // left out).
  std::string Raw() const {
    std::ifstream in(path_);
    std::string out;
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json event = nlohmann::json::parse(line, nullptr, false);
      if (!event.is_object() || !event.contains("object")) continue;
      const std::string type = event.value("type", "");
      if (type != "ADDED" && type != "MODIFIED" && type != "DELETED") continue;
      const nlohmann::json& meta = event["object"].value("metadata", nlohmann::json::object());
      const nlohmann::json labels = meta.value("labels", nlohmann::json::object());
      const auto label = [&](const char* key) { return labels.value(key, std::string()); };
      out +=
          type + " " + meta.value("name", "") + " " + meta.value("uid", "") + " " +
          label("tpujob.dev/job-name") + " " + label("tpujob.dev/replica-type") + " " +
          label("tpujob.dev/replica-index") + " " + label("tpujob.dev/attempt") + " grace=" +
          (meta.contains("deletionGracePeriodSeconds") ? meta["deletionGracePeriodSeconds"].dump()
                                                       : std::string()) +
          "\n";
    }
    return out;
  }

  Report Check() const {
    Report report;
    std::istringstream in(Raw());
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
      if (auto it = live.find(uid); it != live.end()) {
        // MODIFIED, or the initial list. A pod the operator moved to the next attempt (slice
        // recovery in place relabels the kept slices' pods) is of that attempt from now on.
        it->second.attempt = att;
        continue;
      }
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

  // Check(), once the record holds at least `creations` creations (for at most 30 s): the
  // watching kubectl can trail the API server by seconds on a loaded machine, and a test that
  // looks as soon as the job runs would otherwise read a record cut short. A count above
  // `creations` is returned at once.
  Report CheckAfterCreations(int creations) const {
    Report report;
    Eventually([&] { return (report = Check()).creations >= creations; }, std::chrono::seconds(30),
               std::chrono::milliseconds(200));
    return report;
  }

 private:
  std::string ns_;
  std::string path_;
  WatchRecorder recorder_;
};

// --- The end state: nothing lost, nothing left behind --------------------------------------------

// Polls `problems` (what is wrong; "" when nothing is) every 250 ms until it answers "" or
// `timeout` passes; the failure shows its last answer. The operator and the API server settle a
// little after the moment a test looks, so each check below is polled, never slept for.
inline ::testing::AssertionResult HoldsWithin(
    const std::function<std::string()>& problems,
    std::chrono::seconds timeout = std::chrono::seconds(30)) {
  std::string last;
  if (Eventually([&] { return (last = problems()).empty(); }, timeout,
                 std::chrono::milliseconds(250))) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "still after " << timeout.count() << " s:\n" << last;
}

// An object's "uid=... resourceVersion=..." by "namespace/name" ("name" when cluster-scoped).
using Identities = std::map<std::string, std::string>;

inline std::string IdentityKey(const std::string& ns, const std::string& name) {
  return ns.empty() ? name : ns + "/" + name;
}

// The identities of `kubectl get <what> -o json`; std::nullopt (and why, in `error`) on failure.
inline std::optional<Identities> KubectlIdentities(const std::string& what, std::string& error) {
  const auto listed = Kubectl("get " + what + " -o json", false);
  const nlohmann::json list = nlohmann::json::parse(listed.output, nullptr, false);
  if (listed.exit_code != 0 || !list.is_object() || !list.contains("items")) {
    error = "kubectl get " + what + " failed (" + std::to_string(listed.exit_code) +
            "): " + listed.output.substr(0, 500);
    return std::nullopt;
  }
  Identities identities;
  for (const auto& item : list["items"]) {
    const nlohmann::json& meta = item["metadata"];
    identities[IdentityKey(meta.value("namespace", ""), meta.value("name", ""))] =
        "uid=" + meta.value("uid", "") + " resourceVersion=" + meta.value("resourceVersion", "");
  }
  return identities;
}

// One line per object that differs between the operator's cache and the API server.
inline std::string IdentityDifferences(const std::string& resource, const Identities& cache,
                                       const Identities& api) {
  std::string out;
  for (const auto& [key, identity] : api) {
    auto cached = cache.find(key);
    if (cached == cache.end()) {
      out +=
          "  " + resource + " " + key + ": missing from the cache (API server: " + identity + ")\n";
    } else if (cached->second != identity) {
      out += "  " + resource + " " + key + ": cache " + cached->second + ", API server " +
             identity + "\n";
    }
  }
  for (const auto& [key, identity] : cache) {
    if (!api.contains(key)) {
      out += "  " + resource + " " + key + ": only in the cache (" + identity + ")\n";
    }
  }
  return out;
}

// The operator's caches (pods, nodes, tpujobs) hold exactly what a fresh `kubectl get` of the
// same scope lists, object for object, uid and resourceVersion included: nothing missed, nothing
// stale, nothing kept after its deletion. The operator must run with kDebugCacheFlag and
// `--namespace ns`; pods are compared within its pod informer's label selector (only the pods it
// created). Each resource is compared on its own and polled until it matches, up to `timeout`:
// every informer is a watch of its own, a little behind the API server, and KWOK's node
// heartbeats change some node every few hundred milliseconds, so the three need never match at
// one instant. The failure lists every difference of the last comparison.
inline ::testing::AssertionResult CacheEqualsApiServer(
    OperatorProcess& op, const std::string& ns,
    std::chrono::seconds timeout = std::chrono::seconds(30)) {
  struct Scope {
    std::string resource;  // the member of /debug/cache
    std::string kubectl;   // what to get
    std::string ns;        // the informer's namespace, as the endpoint reports it
    std::string label_selector;
  };
  const std::vector<Scope> scopes = {
      {"pods", "pods -n " + ns + " -l tpujob.dev/job-name", ns, "tpujob.dev/job-name"},
      {"nodes", "nodes", "", ""},
      {"tpujobs", "tpujobs -n " + ns, ns, ""},
  };
  std::map<std::string, std::string> differences;  // by resource, until it matched once
  for (const Scope& scope : scopes) differences[scope.resource] = "not compared yet";
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    for (const Scope& scope : scopes) {
      if (!differences.contains(scope.resource)) continue;
      std::string error;
      const std::optional<Identities> api = KubectlIdentities(scope.kubectl, error);
      if (!api) {
        differences[scope.resource] = "  " + error + "\n";
        continue;
      }
      // The cache is read after the API server: its watch has had the time to catch up.
      const auto served = RunCommand(
          "curl -sf --max-time 5 http://127.0.0.1:" + std::to_string(op.port()) + "/debug/cache",
          false);
      const nlohmann::json dump = nlohmann::json::parse(served.output, nullptr, false);
      if (served.exit_code != 0 || !dump.is_object() || !dump.contains(scope.resource)) {
        differences[scope.resource] = "  /debug/cache of the operator on port " +
                                      std::to_string(op.port()) + " did not answer (curl " +
                                      std::to_string(served.exit_code) + "; started with " +
                                      kDebugCacheFlag + "?)\n";
        continue;
      }
      const nlohmann::json& cache = dump[scope.resource];
      if (cache.value("namespace", "?") != scope.ns ||
          cache.value("labelSelector", "?") != scope.label_selector) {
        differences[scope.resource] = "  the " + scope.resource + " informer watches namespace \"" +
                                      cache.value("namespace", "?") + "\" with selector \"" +
                                      cache.value("labelSelector", "?") + "\", not \"" + scope.ns +
                                      "\" with \"" + scope.label_selector + "\"\n";
        continue;
      }
      if (!cache.value("synced", false)) {
        differences[scope.resource] = "  the " + scope.resource + " cache has not synced\n";
        continue;
      }
      Identities cached;
      for (const auto& object : cache["objects"]) {
        cached[IdentityKey(object.value("namespace", ""), object.value("name", ""))] =
            "uid=" + object.value("uid", "") +
            " resourceVersion=" + object.value("resourceVersion", "");
      }
      const std::string differs = IdentityDifferences(scope.resource, cached, *api);
      if (differs.empty()) {
        differences.erase(scope.resource);
      } else {
        differences[scope.resource] = differs + "  (the " + scope.resource +
                                      " cache last synced at resourceVersion " +
                                      cache.value("lastSyncResourceVersion", "?") + ")\n";
      }
    }
    if (differences.empty()) return ::testing::AssertionSuccess();
    if (op.Exited() || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  auto failure = ::testing::AssertionFailure();
  failure << "the operator's cache differs from kubectl get"
          << (op.running() ? " after " + std::to_string(timeout.count()) + " s"
                           : std::string(": the operator exited"))
          << ":\n";
  for (const auto& [resource, differs] : differences) failure << differs;
  return failure;
}

// What keeps a TPUJob of `ns` from having exactly its desired pods; "" when nothing does. A
// Running job has one pod per replica of its current attempt (`spec.replicaSpecs`, `replicas`
// each, Master 1 by default), none of another attempt, none twice, none being deleted; a
// Succeeded or Failed job keeps only terminated pods of its last attempt, at most one per
// replica. A job in any other phase has not settled, which is a problem here too.
// (A multislice job has replicas * spec.tpu.slices workers.)
inline std::string JobPodProblems(const std::string& ns) {
  const nlohmann::json jobs = ListJson(kube::Resource::TPUJobs(), ns);
  const nlohmann::json pods = ListJson(kube::Resource::Pods(), ns);
  if (!jobs.is_object() || !pods.is_object()) return "cannot list tpujobs and pods of " + ns;
  std::string out;
  for (const auto& job : jobs["items"]) {
    const std::string name = job["metadata"].value("name", "");
    const nlohmann::json status = job.value("status", nlohmann::json::object());
    const std::string phase = status.value("phase", "");
    const std::string attempt = std::to_string(status.value("attempt", 0));
    std::set<std::string> desired;
    // Workers are numbered job-wide across slices (tpujob.dev/replica-index).
    const int slices = job["spec"].value("tpu", nlohmann::json::object()).value("slices", 1);
    // Workers per slice: the spec's, else what the operator derived from spec.tpu.type.
    const int hosts = status.value("tpu", nlohmann::json::object()).value("hostsPerSlice", 1);
    for (const auto& [type, replica] : job["spec"]["replicaSpecs"].items()) {
      const int count = type == "Worker" ? replica.value("replicas", hosts) * slices
                                         : replica.value("replicas", 1);
      for (int i = 0; i < count; ++i) {
        desired.insert(type + "-" + std::to_string(i));
      }
    }
    const bool running = phase == "Running";
    const bool finished = phase == "Succeeded" || phase == "Failed";
    if (!running && !finished) {
      out +=
          "job " + name + " has not settled: phase " + (phase.empty() ? "none yet" : phase) + "\n";
    }
    std::set<std::string> seen;
    for (const auto& pod : pods["items"]) {
      const auto labels = pod["metadata"].value("labels", nlohmann::json::object());
      if (labels.value("tpujob.dev/job-name", "") != name) continue;
      const std::string pod_name = pod["metadata"].value("name", "");
      const std::string replica = labels.value("tpujob.dev/replica-type", "?") + "-" +
                                  labels.value("tpujob.dev/replica-index", "?");
      const std::string pod_phase =
          pod.value("status", nlohmann::json::object()).value("phase", "");
      if (labels.value("tpujob.dev/attempt", "") != attempt) {
        out += "job " + name + " (attempt " + attempt + "): pod " + pod_name + " of attempt " +
               labels.value("tpujob.dev/attempt", "?") + "\n";
      }
      if (!desired.contains(replica)) {
        out += "job " + name + ": pod " + pod_name + " is no desired replica (" + replica + ")\n";
      }
      if (!seen.insert(replica).second) {
        out += "job " + name + ": a second pod for " + replica + ": " + pod_name + "\n";
      }
      if (running && pod["metadata"].contains("deletionTimestamp")) {
        out += "job " + name + " is Running but pod " + pod_name + " is being deleted\n";
      }
      if (finished && pod_phase != "Succeeded" && pod_phase != "Failed") {
        out += "job " + name + " is " + phase + " but pod " + pod_name + " is " + pod_phase + "\n";
      }
    }
    if (running) {
      for (const std::string& replica : desired) {
        if (!seen.contains(replica)) out += "job " + name + " is Running without " + replica + "\n";
      }
    }
  }
  return out;
}

// Pods and Services of `ns` not controlled by an existing TPUJob of the same name as their
// tpujob.dev/job-name label (the garbage collector removes those of a deleted job); "" when none.
inline std::string OrphanProblems(const std::string& ns) {
  const auto jobs = nlohmann::json::parse(
      Kubectl("get tpujobs -n " + ns + " -o json", false).output, nullptr, false);
  const auto children = nlohmann::json::parse(
      Kubectl("get pods,services -n " + ns + " -o json", false).output, nullptr, false);
  if (!jobs.is_object() || !children.is_object()) return "cannot list the objects of " + ns;
  std::map<std::string, std::string> job_uids;  // name -> uid
  for (const auto& job : jobs["items"]) {
    job_uids[job["metadata"].value("name", "")] = job["metadata"].value("uid", "");
  }
  std::string out;
  for (const auto& child : children["items"]) {
    const nlohmann::json& meta = child["metadata"];
    const std::string what = child.value("kind", "?") + " " + meta.value("name", "");
    const std::string labelled =
        meta.value("labels", nlohmann::json::object()).value("tpujob.dev/job-name", "");
    nlohmann::json controller;  // the ownerReference marked controller: true
    for (const auto& owner : meta.value("ownerReferences", nlohmann::json::array())) {
      if (owner.value("controller", false)) controller = owner;
    }
    if (controller.is_null()) {
      out += what + " has no controller (job label \"" + labelled + "\")\n";
      continue;
    }
    const std::string owner = controller.value("name", "");
    auto job = job_uids.find(owner);
    if (controller.value("kind", "") != "TPUJob" || job == job_uids.end() ||
        job->second != controller.value("uid", "")) {
      out += what + " is controlled by " + controller.value("kind", "") + " " + owner + " (uid " +
             controller.value("uid", "") + "), which does not exist\n";
    } else if (labelled != owner) {
      out += what + " is controlled by TPUJob " + owner + " but labelled for job \"" + labelled +
             "\"\n";
    }
  }
  return out;
}

// Nodes among those of CreateTpuNodes(prefix, ...) for each prefix that are cordoned
// (unschedulable, or tainted tpujob.dev/faulty) without a recorded reason: the operator's
// tpujob.dev/cordoned-by, a tpujob.dev/cordon-reason, and a tpujob.dev/cordon-job whose job (if
// it still exists) lists the node in status.cordonedNodes. "" when none.
inline std::string CordonProblems(const std::vector<std::string>& prefixes) {
  std::string selector;
  for (const std::string& prefix : prefixes) selector += (selector.empty() ? "" : ",") + prefix;
  const auto nodes = nlohmann::json::parse(
      Kubectl("get nodes -l 'tpujob.dev/e2e-nodes in (" + selector + ")' -o json", false).output,
      nullptr, false);
  if (!nodes.is_object()) return "cannot list the nodes " + selector;
  std::string out;
  for (const auto& node : nodes["items"]) {
    const std::string name = node["metadata"].value("name", "");
    const nlohmann::json spec = node.value("spec", nlohmann::json::object());
    const auto taints = spec.value("taints", nlohmann::json::array());
    const bool tainted = std::any_of(taints.begin(), taints.end(), [](const auto& taint) {
      return taint.value("key", "") == "tpujob.dev/faulty";
    });
    if (!spec.value("unschedulable", false) && !tainted) continue;
    const auto annotations = node["metadata"].value("annotations", nlohmann::json::object());
    if (annotations.value("tpujob.dev/cordoned-by", "") != "tpujob-operator") {
      out += "node " + name + " is cordoned, not by the operator\n";
      continue;
    }
    if (annotations.value("tpujob.dev/cordon-reason", "").empty()) {
      out += "node " + name + " is cordoned without a reason\n";
    }
    const std::string job = annotations.value("tpujob.dev/cordon-job", "");
    const size_t slash = job.find('/');
    if (slash == std::string::npos) {
      out += "node " + name + " is cordoned for no job (cordon-job \"" + job + "\")\n";
      continue;
    }
    const auto got = Kubectl(
        "get tpujob " + job.substr(slash + 1) + " -n " + job.substr(0, slash) + " -o json", true);
    if (got.output.find("NotFound") != std::string::npos)
      continue;  // the job's record went with it
    const auto recorded = nlohmann::json::parse(got.output, nullptr, false);
    const auto listed = recorded.is_object() ? recorded.value("status", nlohmann::json::object())
                                                   .value("cordonedNodes", nlohmann::json::array())
                                             : nlohmann::json::array();
    if (std::find(listed.begin(), listed.end(), name) == listed.end()) {
      out += "node " + name + " is cordoned for job " + job +
             ", whose status.cordonedNodes does not list it: " + listed.dump() + "\n";
    }
  }
  return out;
}

// Each job of `ns` has exactly its desired pods, no pod or Service is an orphan, and no node of
// `node_sets` (CreateTpuNodes prefixes) is cordoned without a recorded reason.
inline void ExpectNothingLeftBehind(const std::string& ns,
                                    const std::vector<std::string>& node_sets) {
  EXPECT_TRUE(HoldsWithin([&] { return JobPodProblems(ns); })) << "each job has its pods";
  EXPECT_TRUE(HoldsWithin([&] { return OrphanProblems(ns); })) << "no orphans";
  EXPECT_TRUE(HoldsWithin([&] { return CordonProblems(node_sets); })) << "no cordon unexplained";
}

}  // namespace tpujob::e2e
