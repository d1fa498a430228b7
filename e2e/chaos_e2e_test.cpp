// The fault campaign: many jobs under a seeded random schedule of overlapping faults, checked by
// an independent watcher (e2e/chaos_checker.h) against the promises the operator makes.
//
// On the local control plane with KWOK pools (24 nodes: 2 single-host pools of 4, 8 two-host
// pools), two operator replicas with leader election run a mix of jobs (TPUJOB_CHAOS_JOBS,
// default 60: single-host, multi-host, 2-slice multislice, half of those elastic (minSlices 1);
// priorities 0-200, some not preemptible; a third with pre-flight; deadlines, TTLs, some created
// suspended). The schedule
// (e2e/chaos_schedule.h, from TPUJOB_CHAOS_SEED, printed first) runs for TPUJOB_CHAOS_SECONDS
// (default 120): hardware conditions set and cleared, nodes reporting NotReady, nodes lost
// (deleted, registering again 10 s later), maintenance taints and scheduled-maintenance labels
// given and withdrawn, pods deleted by hand, people cordoning and uncordoning nodes,
// program exits (retryable, permanent, success), pre-flight failures (the real pre-flight run
// here for the pod, its report written as the kubelet would), operator replicas SIGKILLed (the
// leader among them: leadership changes), jobs created, deleted, suspended and resumed,
// kube-apiserver and etcd SIGKILLed and started again, the blackhole proxy in front of one
// replica silent for 10 s (a leader cut off loses its Lease and exits; it is started again), and
// API Priority and Fairness rejecting the replicas' requests for 15 s (`e2e/cluster apf-tight`
// on their ServiceAccount: real 429s with Retry-After). A step comes every 0.7 s on average, so
// faults overlap: a re-issue takes seconds.
//
// Hangs: a third of the KWOK jobs watch their progress (spec.faultTolerance.progress, stallSeconds
// 5-10, maxStalls 2). About every 8 s a running one of them hangs: stallSeconds later the driver
// plays what each worker's tpujob-supervise would do, the container ends with the stall code and
// the stalled report (supervisor_sim.h), unless the pods were replaced meanwhile. A quarter of
// the hangs come with a hardware fault: right after the reports, the node of one worker shows
// TPUUnhealthy, within the job's attribution window (the hardware case must win). Half of them
// pick a job that hung before, if one runs, and hang at the same step: no progress in between,
// so maxStalls in a row (Failed, reason Stalled) comes up. A quarter have one worker a step
// behind the others: the sole suspect, whose node is cordoned when it is that twice in a row.
//
// On a cluster with a real node (`e2e/cluster up --real-node`; `make chaos` starts one) the
// node takes part: a fifth of the jobs run one worker of the test workload there as a real
// process (10-30 s of steps per run, then an exit planned in the job: success, retryable or
// permanent), a node agent (`tpujob-operator node-agent`, a process here) checks the device
// nodes its device plugin makes, a hardware fault on it is a chip the device plugin reports
// unhealthy whose programs die at once (SIGKILL, before the agent's next round flags the node),
// and every other node fault, maintenance, cordon and pod deletion applies to it as to the KWOK
// nodes (a quarter of the node steps that may act on it do, not one in 25); not a node lost (its
// kubelet registers it only when it starts) and not the written exits (its kubelet owns the
// pods' status).
//
// After the first TPUJOB_CHAOS_JOBS jobs, new ones keep coming while fewer than half that number
// are unfinished, so that a long schedule has something to act on to its end.
//
// Then every fault is healed, suspended jobs resumed, and the run waits (up to
// TPUJOB_CHAOS_SETTLE_SECONDS, default 180) until every job is Succeeded or Failed, or Running or
// Queued with a reason, every finished job's goodput adds up, every counted re-issue has its
// fault record, no pod or Service is an orphan, and no node stays cordoned by the operator (it
// uncordons after 10 healthy seconds). Then every job is deleted and nothing may be left.
// Over the whole run, the recorded watch streams of pods, nodes and TPUJobs are replayed
// through the checker: no duplicate worker, no two attempts alive, no placement on a node
// cordoned for a fault, jobRetries within bounds, cordon cap, rate and breaker, every stall
// acted on in time, Failed/Stalled only after maxStalls in a row, the hardware case winning over
// a stall. Both operators' peak RSS must stay under 256 MiB. A failure names the seed, the
// invariant and the objects.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "chaos_checker.h"
#include "chaos_schedule.h"
#include "e2e_env.h"
#include "fixtures.h"
#include "kube/client.h"
#include "operator_env.h"
#include "real_node_env.h"
#include "supervisor/protocol.h"
#include "supervisor_sim.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

using chaos::Kind;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

uint64_t EnvNumber(const char* name, uint64_t fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::strtoull(value, nullptr, 10) : fallback;
}

// A job of the mix that runs on the real node: one worker of the test workload
// (e2e/tools/node/tpu-worker) as a real process, with its checkpoint in a host directory.
struct RealWorker {
  std::string accelerator;
  std::string topology;
  std::string chips;
  std::string image;
  std::string checkpoint_dir;  // on the host; /ckpt in the pod
};

// What the program on the real node does at the end of each of its runs: every exit class, as
// the process's own exit code (0 success, 42 retryable, 1 permanent).
constexpr const char* kRealExitPlans[] = {"0", "42,0", "1", "42,42,0", "0"};

// The job a choice describes: its shape and settings, all from bits of `choice`. On the real
// node (`real` set) it is one worker of the test workload, without pre-flight.
std::string ChaosJobYaml(const std::string& name, const std::string& accelerator, uint64_t choice,
                         const RealWorker* real = nullptr) {
  // 4 single-host, 3 multi-host, 3 multislice; on the real node one host.
  const int shape = real != nullptr ? 0 : static_cast<int>(choice % 10);
  const int workers = shape < 4 ? 1 : 2;
  const std::string topology = real != nullptr ? real->topology : shape < 4 ? "2x2" : "2x4";
  const int slices = shape >= 7 ? 2 : 1;
  const int priority = static_cast<int>((choice >> 8) % 3) * 100;
  const bool preemptible = (choice >> 12) % 5 != 0;
  const bool preflight = real == nullptr && (choice >> 16) % 3 == 0;
  const int retries = static_cast<int>((choice >> 20) % 4);
  const bool deadline = (choice >> 24) % 6 == 0;
  const bool ttl = (choice >> 28) % 3 == 0;
  const bool suspended = (choice >> 32) % 10 == 0;
  // A third of the KWOK jobs watch their progress: a hang is reported 5-10 s after it starts,
  // and two in a row without progress fail the job.
  const bool progress = real == nullptr && (choice >> 52) % 3 == 0;
  const int stall_seconds = 5 + static_cast<int>((choice >> 54) % 6);
  // Half the multislice jobs are elastic: a slice that finds no pool within 2-5 s is given up
  // and the job runs on the other; it grows back when a pool is free.
  const bool elastic = slices > 1 && (choice >> 59) % 2 == 0;
  const int elastic_wait = 2 + static_cast<int>((choice >> 60) % 4);
  std::ostringstream y;
  y << "apiVersion: tpujob.dev/v1alpha1\nkind: TPUJob\nmetadata:\n  name: " << name
    << "\nspec:\n  priority: " << priority
    << "\n  preemptible: " << (preemptible ? "true" : "false")
    << "\n  tpu: {accelerator: " << (real != nullptr ? real->accelerator : accelerator)
    << ", topology: " << topology << ", chipsPerWorker: " << (real != nullptr ? real->chips : "4")
    << ", slices: " << slices << (elastic ? ", minSlices: 1" : "") << "}\n";
  if (real != nullptr) y << "  checkpoint: {path: /ckpt}\n";
  if (deadline) y << "  activeDeadlineSeconds: " << 30 + (choice >> 36) % 90 << "\n";
  if (ttl) y << "  ttlSecondsAfterFinished: " << (choice >> 40) % 20 << "\n";
  if (suspended) y << "  suspend: true\n";
  y << "  faultTolerance:\n    maxJobRetries: " << retries
    << "\n    faultAttributionSeconds: 3\n    maintenanceGracePeriodSeconds: 2\n";
  if (preflight) y << "    preflight: {enabled: true, checks: [accelerator]}\n";
  if (elastic) y << "    elastic: {waitSeconds: " << elastic_wait << "}\n";
  if (progress) {
    y << "    progress: {logPattern: 'step (\\d+)', stallSeconds: " << stall_seconds
      << ", maxStalls: 2}\n";
  }
  y << "  replicaSpecs:\n    Worker:\n      replicas: " << workers
    << "\n      template:\n        spec:\n          containers:\n";
  if (real == nullptr) {
    y << "          - {name: trainer, image: busybox, command: [sh, -c, train]}\n";
    return y.str();
  }
  // 10-30 s of steps per run, then the planned exit.
  y << "          - name: trainer\n            image: \"" << real->image
    << "\"\n            imagePullPolicy: Never\n            env:\n"
    << "            - {name: WORKER_STEP_MS, value: \"100\"}\n"
    << "            - {name: WORKER_STEPS, value: \"" << 100 + (choice >> 48) % 200 << "\"}\n"
    << "            - {name: WORKER_EXIT_CODES, value: \""
    << kRealExitPlans[(choice >> 56) % std::size(kRealExitPlans)] << "\"}\n"
    << "            volumeMounts:\n            - {name: ckpt, mountPath: /ckpt}\n"
    << "          volumes:\n          - {name: ckpt, hostPath: {path: " << real->checkpoint_dir
    << ", type: Directory}}\n";
  return y.str();
}

// Peak resident memory of a process, in KiB (VmHWM), or 0 if it is gone.
int64_t PeakRssKib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("VmHWM:")) return std::atoll(line.c_str() + 6);
  }
  return 0;
}

// The driver's reads and writes, through the project's own client. A kubectl process a call
// (two lists and a write or two a step, each a Go binary's start and a JSON round trip of every
// pod of the campaign) cost the driver seconds a step on a loaded machine: a 120 s schedule took
// up to 16 minutes to play. One try a call, as a kubectl call was: a call that fails (the API
// server restarting, etcd down) is a step that did nothing, or is made again at the next step.
class Api {
 public:
  Api() {
    kube::Config config = AdminConfig();
    config.max_retries = 0;
    config.request_timeout = std::chrono::seconds(10);
    client_ = kube::NewClient(std::move(config));
  }

  // {"items": [...]}, or {} when the list failed.
  json List(const kube::Resource& r, const std::string& ns = "",
            const std::string& selector = "") const {
    kube::ListOptions options;
    options.label_selector = selector;
    auto list = kube::ListAll(*client_, r, ns, options);
    if (!list) return json::object();
    return {{"items", std::move(list->items)}};
  }
  json Pods(const std::string& ns, const std::string& selector = "") const {
    return List(kube::Resource::Pods(), ns, selector);
  }
  json Jobs(const std::string& ns) const { return List(kube::Resource::TPUJobs(), ns); }
  json Nodes() const { return List(kube::Resource::Nodes()); }
  // The object, or {} when it could not be read.
  json Node(const std::string& name) const {
    auto node = client_->Get(kube::Resource::Nodes(), "", name);
    return node ? std::move(*node) : json::object();
  }

  bool Create(const kube::Resource& r, const std::string& ns, const json& object) const {
    return client_->Create(r, ns, object).has_value();
  }
  bool Delete(const kube::Resource& r, const std::string& ns, const std::string& name) const {
    return client_->Delete(r, ns, name).has_value();
  }
  bool Merge(const kube::Resource& r, const std::string& ns, const std::string& name,
             const json& patch, const std::string& subresource = "") const {
    kube::PatchOptions options;
    options.field_manager = "chaos";
    options.subresource = subresource;
    return client_->Patch(r, ns, name, kube::PatchType::kMerge, patch, options).has_value();
  }

  // kubectl cordon and uncordon.
  bool Cordon(const std::string& node, bool cordon) const {
    return Merge(kube::Resource::Nodes(), "", node,
                 {{"spec", {{"unschedulable", cordon ? json(true) : json(nullptr)}}}});
  }
  // kubectl label KEY=VALUE, or KEY- for "".
  bool Label(const std::string& node, const std::string& key, const std::string& value) const {
    return Merge(
        kube::Resource::Nodes(), "", node,
        {{"metadata", {{"labels", {{key, value.empty() ? json(nullptr) : json(value)}}}}}});
  }
  // kubectl taint KEY=true:NoSchedule, or KEY- when !present. Taints are one list, written
  // whole: read, change, write, as kubectl does (a conflict fails the call).
  bool Taint(const std::string& node, const std::string& key, bool present) const {
    auto object = client_->Get(kube::Resource::Nodes(), "", node);
    if (!object) return false;
    json taints = json::array();
    for (const json& taint : object->value("spec", json::object()).value("taints", json::array())) {
      if (taint.value("key", "") != key) taints.push_back(taint);
    }
    if (present) taints.push_back({{"key", key}, {"value", "true"}, {"effect", "NoSchedule"}});
    (*object)["spec"]["taints"] = std::move(taints);
    return client_->Update(kube::Resource::Nodes(), "", *object).has_value();
  }
  // SetNodeCondition of tpujob_env.h: a condition in the node's status, by type.
  bool SetNodeCondition(const std::string& node, const std::string& type, const std::string& status,
                        const std::string& reason, const std::string& message) const {
    kube::PatchOptions options;
    options.field_manager = "chaos";
    options.subresource = "status";
    const json patch = fixtures::NodeConditionPatch(
        type, status, reason, message, cache::FormatRfc3339(std::chrono::system_clock::now()));
    return client_
        ->Patch(kube::Resource::Nodes(), "", node, kube::PatchType::kStrategicMerge, patch, options)
        .has_value();
  }
  // TerminatePod of tpujob_env.h: the trainer container ended with `exit_code`.
  bool TerminatePod(const std::string& ns, const std::string& pod, int exit_code,
                    const std::string& reason = "", const std::string& message = "") const {
    return Merge(kube::Resource::Pods(), ns, pod, TerminatedPodStatus(exit_code, reason, message),
                 "status");
  }

 private:
  std::unique_ptr<kube::Client> client_;
};

std::string Label(const json& object, const char* key) {
  return object["metadata"].value("labels", json::object()).value(key, "");
}

bool HasTaint(const json& node, const std::string& key) {
  for (const auto& t : node.value("spec", json::object()).value("taints", json::array())) {
    if (t.value("key", "") == key) return true;
  }
  return false;
}

std::string ConditionStatus(const json& node, const std::string& type) {
  for (const auto& c : node.value("status", json::object()).value("conditions", json::array())) {
    if (c.value("type", "") == type) return c.value("status", "");
  }
  return "";
}

// The n-th (choice modulo size) of `names`, or "" when there is none.
std::string Pick(const std::vector<std::string>& names, uint64_t choice) {
  return names.empty() ? std::string() : names[choice % names.size()];
}

constexpr char kMaintenanceTaint[] = "cloud.google.com/impending-node-termination";
constexpr char kScheduledMaintenanceLabel[] = "cloud.google.com/scheduled-maintenance-time";

// The node as it registers again after it was lost: its name, labels and capacity, none of what
// people or the operator wrote on it since.
json RegisteredAgain(const json& node) {
  json metadata = {{"name", node["metadata"].value("name", "")},
                   {"annotations", {{"kwok.x-k8s.io/node", "fake"}}},
                   {"labels", node["metadata"].value("labels", json::object())}};
  metadata["labels"].erase(kScheduledMaintenanceLabel);
  const json status = node.value("status", json::object());
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata", metadata},
          {"spec",
           {{"taints",
             json::array(
                 {{{"key", "google.com/tpu"}, {"value", "present"}, {"effect", "NoSchedule"}}})}}},
          {"status",
           {{"capacity", status.value("capacity", json::object())},
            {"allocatable", status.value("allocatable", json::object())}}}};
}

class ChaosE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { InstallCrd(); }
};

// Over 60 s by design: the campaign runs TPUJOB_CHAOS_SECONDS (120 s), then settles and checks.
TEST_F(ChaosE2E, SeededCampaignKeepsEveryPromise) {
  const uint64_t seed = EnvNumber("TPUJOB_CHAOS_SEED", 1);
  const int seconds = static_cast<int>(EnvNumber("TPUJOB_CHAOS_SECONDS", 120));
  const int total_jobs = static_cast<int>(EnvNumber("TPUJOB_CHAOS_JOBS", 60));
  const int settle_seconds = static_cast<int>(EnvNumber("TPUJOB_CHAOS_SETTLE_SECONDS", 180));
  std::cout << "chaos seed " << seed << " (replay: TPUJOB_CHAOS_SEED=" << seed << "), " << seconds
            << " s, " << total_jobs << " jobs" << std::endl;
  SCOPED_TRACE("chaos seed " + std::to_string(seed));
  const std::vector<chaos::Step> schedule = chaos::MakeSchedule(seed, seconds);

  TestNamespace ns("chaos");
  const std::string n = ns.name();
  const Api api;
  const std::string prefix = "ch" + std::to_string(::getpid() % 100000);
  const std::string accelerator = "tpu-" + prefix;
  const std::string dir = ClusterDir() + "/chaos-" + n;
  ASSERT_EQ(RunCommand("mkdir -p " + dir).exit_code, 0);

  // The independent record: the API server's own streams, from before anything exists.
  WatchRecorder pods_record("/api/v1/namespaces/" + n + "/pods", dir + "/pods.jsonl");
  WatchRecorder jobs_record("/apis/tpujob.dev/v1alpha1/namespaces/" + n + "/tpujobs",
                            dir + "/tpujobs.jsonl");
  WatchRecorder nodes_record("/api/v1/nodes", dir + "/nodes.jsonl");

  std::vector<std::string> pools;
  for (int i = 0; i < 2; ++i) {
    pools.push_back(prefix + "-s" + std::to_string(i));
    ASSERT_NO_FATAL_FAILURE(CreateTpuNodes(pools.back(), 4, accelerator, "2x2", pools.back()));
  }
  for (int i = 0; i < 8; ++i) {
    pools.push_back(prefix + "-m" + std::to_string(i));
    ASSERT_NO_FATAL_FAILURE(CreateTpuNodes(pools.back(), 2, accelerator, "2x4", pools.back()));
  }
  struct NodeCleanup {
    std::vector<std::string>& pools;
    ~NodeCleanup() {
      for (const auto& pool : pools) DeleteTpuNodes(pool);
    }
  } node_cleanup{pools};

  // The real node, where the cluster has one (`make chaos` starts it): a share of the jobs run
  // there as real processes of the test workload, a node agent checks the device nodes its
  // device plugin makes, and its hardware faults are real ones (see real_chip_fails below).
  const std::string real_node = WorkerImage().empty() ? std::string() : RealNode();
  std::unique_ptr<ChildProcess> node_agent;
  if (!real_node.empty()) {
    SetChips("unhealthy", "");
    SetChips("hidden", "");
    node_agent = std::make_unique<ChildProcess>(
        std::vector<std::string>{TPUJOB_OPERATOR_BINARY, "node-agent", "--kubeconfig",
                                 KubeconfigPath(), "--node-name", real_node, "--dev-root",
                                 TpuDir() + "/dev", "--interval", "2", "--pass-after", "1"},
        ClusterDir() + "/operator-node-agent-" + n + ".log");
    ASSERT_TRUE(
        Eventually([&] { return ConditionStatus(api.Node(real_node), "TPUUnhealthy") == "False"; },
                   std::chrono::seconds(30)))
        << node_agent->Log();
    std::cout << "chaos: the real node " << real_node << " takes part" << std::endl;
  }
  struct ChipsHealed {
    bool real;
    ~ChipsHealed() {
      if (real) SetChips("unhealthy", "");
    }
  } chips_healed{!real_node.empty()};
  bool real_chip_failed = false;
  // A chip of the real node dies: the device plugin reports it unhealthy and removes its device
  // node, and the programs of the campaign's pods on the node die with it (SIGKILL), before the
  // node agent's next round: the exit comes first, the node's condition after it, as on
  // hardware. Returns how many programs it killed.
  const auto real_chip_fails = [&](uint64_t choice) {
    SetChips("unhealthy", std::to_string(choice % 4));
    real_chip_failed = true;
    const std::string mark = "TPUJOB_NAMESPACE=" + n;
    int killed = 0;
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
      const std::string pid = entry.path().filename().string();
      if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
      if (Trim(ReadFile(entry.path() / "comm")) != "tpu-worker") continue;
      std::string environ = ReadFile(entry.path() / "environ");
      std::replace(environ.begin(), environ.end(), '\0', '\n');
      if (("\n" + environ).find("\n" + mark + "\n") != std::string::npos &&
          ::kill(std::stoi(pid), SIGKILL) == 0) {
        ++killed;
      }
    }
    return killed;
  };

  const int max_cordoned = 4;
  const double cordon_rate = 6;
  std::vector<std::string> operator_args = {"--namespace",
                                            n,
                                            "--leader-elect",
                                            "--leader-elect-namespace",
                                            n,
                                            "--leader-elect-id",
                                            "chaos",
                                            "--leader-elect-lease-duration",
                                            "4",
                                            "--leader-elect-renew-deadline",
                                            "3",
                                            "--leader-elect-retry-period",
                                            "1",
                                            "--auto-uncordon-after",
                                            "10",
                                            "--max-cordoned-nodes",
                                            std::to_string(max_cordoned),
                                            "--max-cordoned-fraction",
                                            "1",
                                            "--cordon-rate",
                                            std::to_string(cordon_rate)};
  // The replicas run as a ServiceAccount, as in a cluster (the admin's requests are exempt from
  // API Priority and Fairness; theirs are not). Replica 1 talks to the API server through the
  // blackhole proxy.
  const auto cluster = [](const std::string& command) {
    return RunCommand(ClusterScript() + " " + command + " --dir " + ClusterDir());
  };
  const std::string account = "operator";
  ASSERT_EQ(Kubectl("create serviceaccount " + account + " -n " + n).exit_code, 0);
  struct Binding {
    std::string name;
    ~Binding() { Kubectl("delete clusterrolebinding " + name + " --ignore-not-found", false); }
  } binding{"chaos-" + n};
  ASSERT_EQ(Kubectl("create clusterrolebinding " + binding.name + " --clusterrole=cluster-admin " +
                    "--serviceaccount=" + n + ":" + account)
                .exit_code,
            0);
  const std::string kubeconfig = ServiceAccountKubeconfig(n, account);
  ASSERT_FALSE(kubeconfig.empty());
  const auto proxy = cluster("proxy");
  ASSERT_EQ(proxy.exit_code, 0) << proxy.output;
  const std::string proxy_server = Trim(Kubectl("--kubeconfig " + ClusterDir() +
                                                    "/proxy.kubeconfig config view --minify -o "
                                                    "jsonpath='{.clusters[0].cluster.server}'",
                                                false)
                                            .output);
  ASSERT_FALSE(proxy_server.empty());
  const std::string proxied_kubeconfig = dir + "/operator-proxied.kubeconfig";
  {
    std::string text = ReadFile(kubeconfig);
    const size_t at = text.find("server: ");
    ASSERT_NE(at, std::string::npos) << text;
    text.replace(at, text.find('\n', at) - at, "server: " + proxy_server);
    std::ofstream(proxied_kubeconfig) << text;
  }
  std::vector<std::string> direct_args = operator_args;
  direct_args.insert(direct_args.end(), {"--kubeconfig", kubeconfig});
  std::vector<std::string> proxied_args = operator_args;
  proxied_args.insert(proxied_args.end(), {"--kubeconfig", proxied_kubeconfig});
  const auto start_replica = [&](int r) {
    return std::make_unique<OperatorProcess>(r == 1 ? proxied_args : direct_args);
  };
  // Should the test end early: the proxy forwarding, etcd running, API Priority and Fairness
  // back to normal.
  struct Heal {
    std::function<CommandResult(const std::string&)> cluster;
    ~Heal() {
      cluster("unblackhole");
      cluster("start-etcd");
      cluster("apf-reset");
    }
  } heal{cluster};
  // Lost nodes register again (as a replaced VM's kubelet does) 10 s after they were deleted;
  // `all` brings every one back now.
  std::map<std::string, std::pair<json, Clock::time_point>> lost;
  const auto register_again = [&](bool all) {
    for (auto it = lost.begin(); it != lost.end();) {
      if (!all && Clock::now() - it->second.second < std::chrono::seconds(10)) {
        ++it;
        continue;
      }
      // Refused while the deleted node is still being removed: tried again at the next step.
      const auto create = [&] { return api.Create(kube::Resource::Nodes(), "", it->second.first); };
      const bool back =
          all ? Eventually(create, std::chrono::seconds(60), std::chrono::milliseconds(500))
              : create();
      EXPECT_TRUE(back || !all) << it->first << " did not register again";
      it = back ? lost.erase(it) : std::next(it);
    }
  };
  const std::string apf_subject = "serviceaccount:" + n + "/" + account;
  bool throttled = false;
  Clock::time_point throttled_at;
  std::map<std::string, int> done;        // executed steps by kind
  std::map<std::string, int> done_after;  // what happened while the cluster settled
  bool settling = false;
  // What a kubelet does for the control plane's static pods: a component that exited is started
  // again (kube-scheduler exits when an API server restart left its cache corrupted).
  // The script runs only when one of them is gone (a check of their pid files here, not a bash
  // process at every step).
  const auto revive = [&] {
    bool gone = false;
    for (const char* component : {"kube-controller-manager", "kube-scheduler", "kwok"}) {
      const std::string pid = Trim(ReadFile(ClusterDir() + "/pids/" + component + ".pid"));
      gone = gone || pid.empty() || ::kill(std::atoi(pid.c_str()), 0) != 0;
    }
    if (!gone) return;
    const std::string started =
        Trim(RunCommand(ClusterScript() + " start-stopped --dir " + ClusterDir(), false).output);
    if (!started.empty()) ++(settling ? done_after : done)["restarted " + started];
  };
  bool blackholed = false;
  Clock::time_point blackholed_at;
  std::unique_ptr<OperatorProcess> replicas[2];
  Clock::time_point killed_at[2] = {};
  int64_t peak_rss_kib = 0;
  const auto sample_rss = [&] {
    for (auto& replica : replicas) {
      if (replica && replica->running()) {
        peak_rss_kib = std::max(peak_rss_kib, PeakRssKib(replica->pid()));
      }
    }
  };
  for (int r = 0; r < 2; ++r) replicas[r] = start_replica(r);
  // What the replicas' Deployment does: a replica killed two seconds ago or more comes back, and
  // so does one that exited on its own (a leader that could not renew its Lease in time exits 1,
  // by design), during the faults and after them alike.
  const auto keep_replicas = [&] {
    for (int r = 0; r < 2; ++r) {
      if (replicas[r] && replicas[r]->Exited()) {
        replicas[r].reset();
        killed_at[r] = Clock::now();
        ++(settling ? done_after : done)["replica-exited"];
      }
      if (!replicas[r] && Clock::now() - killed_at[r] > std::chrono::seconds(2)) {
        replicas[r] = start_replica(r);
      }
    }
  };

  const auto set_suspend = [&](const std::string& job, bool suspend) {
    api.Merge(kube::Resource::TPUJobs(), n, job, {{"spec", {{"suspend", suspend}}}});
  };
  int created = 0;
  int real_jobs = 0;
  std::map<std::string, int> skipped;  // steps that found nothing to act on
  const auto create_job = [&](uint64_t choice) {
    const std::string name = "j" + std::to_string(created++);
    // A fifth of the jobs go to the real node, where there is one.
    const bool on_real = !real_node.empty() && (choice >> 44) % 5 == 0;
    RealWorker real;
    if (on_real) {
      real = {PortsEnv("REAL_TPU_ACCELERATOR"), PortsEnv("REAL_TPU_TOPOLOGY"),
              PortsEnv("REAL_TPU_CHIPS"), WorkerImage(), dir + "/ckpt-" + name};
      std::filesystem::create_directories(real.checkpoint_dir);
      ++real_jobs;
    }
    const std::string yaml = ChaosJobYaml(name, accelerator, choice, on_real ? &real : nullptr);
    CommandResult applied;
    // Retried: the API server may be restarting, or etcd down.
    EXPECT_TRUE(Eventually([&] { return (applied = ApplyYaml(n, yaml)).exit_code == 0; },
                           std::chrono::seconds(60), std::chrono::milliseconds(500)))
        << applied.output;
  };
  chaos::SplitMix64 job_choices(seed ^ 0x5eedULL);
  for (int i = 0; i < total_jobs / 2; ++i) create_job(job_choices.Next());

  const auto node_ours = [&](const json& node) {
    const std::string name = node["metadata"].value("name", "");
    return name.starts_with(prefix + "-") || (!real_node.empty() && name == real_node);
  };

  // Hangs in flight: every worker of `job` stopped making progress; at `due` (stallSeconds
  // later) each one's supervisor reports the stall, unless the pods were replaced meanwhile (the
  // programs started again).
  struct Hang {
    std::string job;
    std::map<std::string, std::string> pods;  // name -> uid, when the job hung
    int64_t step = 0;                         // the last step each worker made
    int stall_seconds = 0;
    bool hardware = false;  // one of its nodes shows a hardware fault right after the reports
    uint64_t choice = 0;
    Clock::time_point due;
  };
  std::vector<Hang> hangs;
  std::map<std::string, int64_t> hung_at;  // job -> the step its last hang stopped at
  const auto report_hangs = [&] {
    for (auto it = hangs.begin(); it != hangs.end();) {
      if (Clock::now() < it->due) {
        ++it;
        continue;
      }
      const Hang hang = *it;
      it = hangs.erase(it);
      std::map<std::string, std::string> nodes;  // pod -> node, of the pods still the same
      for (const auto& pod :
           api.Pods(n, "tpujob.dev/job-name=" + hang.job).value("items", json::array())) {
        const std::string name = pod["metadata"].value("name", "");
        auto same = hang.pods.find(name);
        if (same != hang.pods.end() && same->second == pod["metadata"].value("uid", "") &&
            !pod["metadata"].contains("deletionTimestamp") &&
            pod.value("status", json::object()).value("phase", "") == "Running") {
          nodes[name] = pod["spec"].value("nodeName", "");
        }
      }
      if (nodes.size() != hang.pods.size()) {
        ++done["hang/programs-replaced-before-the-report"];
        continue;
      }
      // Every worker stopped at the same moment, so one report for all (a report each would
      // give them lastProgress times a second apart, naming a suspect by chance). A quarter of
      // the hangs have one worker a step behind the others: the sole suspect, whose node is
      // cordoned should it be the suspect of the next stall in a row too.
      const std::chrono::seconds idle(hang.stall_seconds);
      const std::string report = StalledReport(0, hang.step, idle).dump();
      const std::string behind =
          (hang.choice >> 40) % 4 == 0 && nodes.size() > 1 ? nodes.begin()->first : std::string();
      const std::string behind_report = StalledReport(0, hang.step - 1, idle).dump();
      // A pod deleted since the list above (by the operator or a step) takes its report with
      // it, as on a node.
      int reported = 0;
      for (const auto& [pod, node] : nodes) {
        reported += api.TerminatePod(n, pod, supervisor::kStalledExitCode, "Error",
                                     pod == behind ? behind_report : report);
      }
      if (reported == 0) {
        ++done["hang/programs-replaced-before-the-report"];
        continue;
      }
      ++done["hang/reported"];
      if (!behind.empty()) ++done["hang/one-worker-behind"];
      if (hang.hardware) {
        std::vector<std::string> names;
        for (const auto& [pod, node] : nodes) names.push_back(node);
        const std::string node = Pick(names, hang.choice >> 24);
        if (!node.empty() &&
            api.SetNodeCondition(node, "TPUUnhealthy", "True", "ChipHang", "chaos: a hung chip")) {
          ++done["hang/with-a-hardware-fault"];
        }
      }
    }
  };

  const Clock::time_point start = Clock::now();
  double lag_ms = 0;
  // Where the driver's time goes: each step's own work by kind, and what it does before each
  // step (replicas, components, lost nodes, hang reports, the ends of outages).
  std::map<std::string, double> spent_ms;
  const auto ms_since = [](Clock::time_point from) {
    return std::chrono::duration<double, std::milli>(Clock::now() - from).count();
  };
  for (const chaos::Step& step : schedule) {
    const auto due = start + std::chrono::milliseconds(step.at_ms);
    if (Clock::now() < due) {
      std::this_thread::sleep_until(due);  // the schedule's own time, nothing to await
    } else {
      lag_ms =
          std::max(lag_ms, std::chrono::duration<double, std::milli>(Clock::now() - due).count());
    }
    const Clock::time_point before = Clock::now();
    sample_rss();
    keep_replicas();
    revive();
    if (blackholed && Clock::now() - blackholed_at > std::chrono::seconds(10)) {
      cluster("unblackhole");
      blackholed = false;
    }
    if (throttled && Clock::now() - throttled_at > std::chrono::seconds(15)) {
      EXPECT_EQ(cluster("apf-reset").exit_code, 0);
      throttled = false;
    }
    register_again(false);
    report_hangs();
    spent_ms["(between steps)"] += ms_since(before);
    const Clock::time_point acting = Clock::now();
    const std::string kind(chaos::KindName(step.kind));
    bool acted = true;
    switch (step.kind) {
      case Kind::kHardwareFault:
      case Kind::kHardwareHeal:
      case Kind::kNodeNotReady:
      case Kind::kNodeLost:
      case Kind::kMaintenance:
      case Kind::kMaintenanceOver:
      case Kind::kHumanCordon:
      case Kind::kHumanUncordon: {
        const json nodes = api.Nodes();
        const json pods = api.Pods(n);
        std::set<std::string> busy;  // nodes running a pod of the campaign
        for (const auto& pod : pods.value("items", json::array())) {
          busy.insert(pod.value("spec", json::object()).value("nodeName", ""));
        }
        std::vector<std::string> candidates;
        for (const auto& node : nodes.value("items", json::array())) {
          if (!node_ours(node)) continue;
          const std::string name = node["metadata"].value("name", "");
          const bool unschedulable = node["spec"].value("unschedulable", false);
          const bool real = name == real_node;
          const bool faulty =
              ConditionStatus(node, "TPUUnhealthy") == "True" || (real && real_chip_failed);
          const bool maintenance =
              HasTaint(node, kMaintenanceTaint) || !Label(node, kScheduledMaintenanceLabel).empty();
          switch (step.kind) {
            case Kind::kHardwareFault:
            case Kind::kNodeNotReady:
              if (!faulty && busy.contains(name)) candidates.push_back(name);
              break;
            case Kind::kNodeLost:
              // Not the real node: a kubelet registers its node once, when it starts.
              if (!faulty && busy.contains(name) && !real) candidates.push_back(name);
              break;
            case Kind::kHardwareHeal:
              if (faulty) candidates.push_back(name);
              break;
            case Kind::kMaintenance:
              if (!maintenance && busy.contains(name)) candidates.push_back(name);
              break;
            case Kind::kMaintenanceOver:
              if (maintenance) candidates.push_back(name);
              break;
            case Kind::kHumanCordon:
              if (!unschedulable) candidates.push_back(name);
              break;
            default:  // kHumanUncordon: any cordon, the operator's included
              if (unschedulable) candidates.push_back(name);
              break;
          }
        }
        std::string node = Pick(candidates, step.choice);
        // The real node is one of 25: a quarter of the steps that may act on it do, so that its
        // real faults come up in every run.
        if (!real_node.empty() && (step.choice >> 58) % 4 == 0 &&
            std::find(candidates.begin(), candidates.end(), real_node) != candidates.end()) {
          node = real_node;
        }
        if (node.empty()) {
          acted = false;
          break;
        }
        if (node == real_node) ++done["real-node/" + kind];
        if (step.kind == Kind::kHardwareFault && node == real_node) {
          done["real-node/programs-killed-by-a-chip"] += real_chip_fails(step.choice);
        } else if (step.kind == Kind::kHardwareHeal && node == real_node) {
          SetChips("unhealthy", "");  // the node agent clears its condition after a round
          real_chip_failed = false;
        } else if (step.kind == Kind::kHardwareFault) {
          api.SetNodeCondition(node, "TPUUnhealthy", "True", "ChipError", "chaos");
        } else if (step.kind == Kind::kHardwareHeal) {
          api.SetNodeCondition(node, "TPUUnhealthy", "False", "ChipHealthy", "chaos");
        } else if (step.kind == Kind::kNodeNotReady) {
          // KWOK reports Ready again with its next heartbeat: a node that flaps.
          api.SetNodeCondition(node, "Ready", "False", "KubeletNotReady", "chaos");
        } else if (step.kind == Kind::kNodeLost) {
          const json lost_node = api.Node(node);
          if (lost_node.empty() || !api.Delete(kube::Resource::Nodes(), "", node)) {
            acted = false;
            break;
          }
          lost[node] = {RegisteredAgain(lost_node), Clock::now()};
        } else if (step.kind == Kind::kMaintenance) {
          if ((step.choice / 7919) % 2 == 0) {
            api.Taint(node, kMaintenanceTaint, true);
          } else {
            // Announced: the maintenance starts in 5 minutes, within the move window.
            api.Label(node, kScheduledMaintenanceLabel, std::to_string(std::time(nullptr) + 300));
          }
        } else if (step.kind == Kind::kMaintenanceOver) {
          api.Taint(node, kMaintenanceTaint, false);
          api.Label(node, kScheduledMaintenanceLabel, "");
        } else if (step.kind == Kind::kHumanCordon) {
          api.Cordon(node, true);
        } else {
          api.Cordon(node, false);
        }
        break;
      }
      case Kind::kDeletePod:
      case Kind::kWorkerExitRetryable:
      case Kind::kWorkerExitPermanent:
      case Kind::kPreflightFailure:
      case Kind::kJobSucceeds: {
        const json pods = api.Pods(n);
        std::vector<std::string> candidates;
        std::map<std::string, std::string> node_of;
        for (const auto& pod : pods.value("items", json::array())) {
          if (pod["metadata"].contains("deletionTimestamp")) continue;
          const std::string phase = pod.value("status", json::object()).value("phase", "");
          const bool preflight = !pod["spec"].value("initContainers", json::array()).empty();
          const std::string name = pod["metadata"].value("name", "");
          node_of[name] = pod["spec"].value("nodeName", "");
          // Worker 0 exiting 0 ends the job (no Master here).
          const bool worker0 = Label(pod, "tpujob.dev/replica-type") == "Worker" &&
                               Label(pod, "tpujob.dev/replica-index") == "0";
          // On the real node the program's exits are its own (WORKER_EXIT_CODES) and the
          // kubelet writes the pod's status: only deleting it by hand applies there.
          const bool running =
              phase == "Running" && !node_of[name].empty() && node_of[name] != real_node;
          if (step.kind == Kind::kDeletePod ||
              (running && step.kind == Kind::kPreflightFailure && preflight) ||
              (running && step.kind == Kind::kJobSucceeds && worker0) ||
              (running && (step.kind == Kind::kWorkerExitRetryable ||
                           step.kind == Kind::kWorkerExitPermanent))) {
            candidates.push_back(name);
          }
        }
        const std::string pod = Pick(candidates, step.choice);
        if (pod.empty()) {
          acted = false;
          break;
        }
        if (step.kind == Kind::kDeletePod) {
          api.Delete(kube::Resource::Pods(), n, pod);
        } else if (step.kind == Kind::kWorkerExitRetryable) {
          api.TerminatePod(n, pod, 42);
        } else if (step.kind == Kind::kWorkerExitPermanent) {
          api.TerminatePod(n, pod, 1);
        } else if (step.kind == Kind::kJobSucceeds) {
          api.TerminatePod(n, pod, 0);
        } else {
          // Its peers' names never resolve here (KWOK pods, on the host): the dns item fails at
          // once, as it would after its timeout (120 s by default, which made these steps most
          // of the driver's time).
          const PreflightRun run = RunPreflightFor(n, pod, node_of[pod], {"--dns-timeout", "0"});
          acted = run.exit_code != 0 && !run.report.empty() &&
                  FailInitContainer(n, pod, run.exit_code, run.report).exit_code == 0;
        }
        break;
      }
      case Kind::kDeleteJob:
      case Kind::kSuspend:
      case Kind::kResume: {
        const json jobs = api.Jobs(n);
        std::vector<std::string> candidates;
        for (const auto& job : jobs.value("items", json::array())) {
          const std::string phase = job.value("status", json::object()).value("phase", "");
          const bool suspend = job["spec"].value("suspend", false);
          const bool finished = phase == "Succeeded" || phase == "Failed";
          const std::string name = job["metadata"].value("name", "");
          if (step.kind == Kind::kDeleteJob ||
              (step.kind == Kind::kSuspend && !suspend && !finished) ||
              (step.kind == Kind::kResume && suspend)) {
            candidates.push_back(name);
          }
        }
        const std::string job = Pick(candidates, step.choice);
        if (job.empty()) {
          acted = false;
          break;
        }
        if (step.kind == Kind::kDeleteJob) {
          api.Delete(kube::Resource::TPUJobs(), n, job);
        } else {
          set_suspend(job, step.kind == Kind::kSuspend);
        }
        break;
      }
      case Kind::kKillOperator: {
        const int r = static_cast<int>(step.choice % 2);
        if (!replicas[r]) {
          acted = false;
          break;
        }
        replicas[r]->Kill();
        replicas[r].reset();
        killed_at[r] = Clock::now();
        break;
      }
      case Kind::kRestartApiServer:
        acted = cluster("restart-apiserver").exit_code == 0;
        break;
      case Kind::kRestartEtcd:
        acted = cluster("kill-etcd").exit_code == 0;
        EXPECT_EQ(cluster("start-etcd").exit_code, 0);
        break;
      case Kind::kBlackhole:
        if (blackholed) {
          acted = false;
          break;
        }
        acted = blackholed = cluster("blackhole").exit_code == 0;
        blackholed_at = Clock::now();
        break;
      case Kind::kApfThrottle: {
        if (throttled) {
          acted = false;
          break;
        }
        const CommandResult tight = cluster("apf-tight --subject " + apf_subject);
        EXPECT_EQ(tight.exit_code, 0) << tight.output;
        acted = throttled = tight.exit_code == 0;
        throttled_at = Clock::now();
        break;
      }
      case Kind::kHang: {
        // A running job that watches its progress and is not hung already; half of the hangs
        // pick one that hung before, where there is one, stopped at the same step.
        const json jobs = api.Jobs(n);
        std::vector<std::string> candidates, again;
        std::map<std::string, int> stall_seconds;
        for (const auto& job : jobs.value("items", json::array())) {
          const std::string name = job["metadata"].value("name", "");
          const json progress =
              job["spec"].value("faultTolerance", json::object()).value("progress", json());
          if (!progress.is_object() || job["spec"].value("suspend", false) ||
              job.value("status", json::object()).value("phase", "") != "Running" ||
              std::any_of(hangs.begin(), hangs.end(),
                          [&](const Hang& h) { return h.job == name; })) {
            continue;
          }
          stall_seconds[name] = progress.value("stallSeconds", 600);
          candidates.push_back(name);
          if (hung_at.contains(name)) again.push_back(name);
        }
        const bool repeat = (step.choice >> 16) % 2 == 0 && !again.empty();
        const std::string job = Pick(repeat ? again : candidates, step.choice);
        if (job.empty()) {
          acted = false;
          break;
        }
        Hang hang;
        hang.job = job;
        hang.stall_seconds = stall_seconds[job];
        hang.hardware = (step.choice >> 8) % 4 == 0;
        hang.choice = step.choice;
        for (const auto& pod :
             api.Pods(n, "tpujob.dev/job-name=" + job).value("items", json::array())) {
          if (pod["metadata"].contains("deletionTimestamp") ||
              pod.value("status", json::object()).value("phase", "") != "Running") {
            hang.pods.clear();
            break;
          }
          hang.pods[pod["metadata"].value("name", "")] = pod["metadata"].value("uid", "");
        }
        if (hang.pods.empty()) {
          acted = false;
          break;
        }
        // Again: stopped where it stopped before (no progress in between). Else further on.
        hang.step = repeat ? hung_at[job] : hung_at[job] + 10 + (step.choice >> 32) % 90;
        hung_at[job] = hang.step;
        hang.due = Clock::now() + std::chrono::seconds(hang.stall_seconds);
        if (repeat) ++done["hang/again-at-the-same-step"];
        if (hang.hardware) ++done["hang/to-come-with-a-hardware-fault"];
        hangs.push_back(std::move(hang));
        break;
      }
      case Kind::kCreateJob: {
        // The mix first; after it, new jobs keep coming while fewer than half of its number are
        // unfinished, so that a long run keeps something to act on to its end.
        bool room = created < total_jobs;
        if (!room) {
          const json jobs = api.Jobs(n);
          int unfinished = 0;
          for (const auto& job : jobs.is_object() ? jobs["items"] : json::array()) {
            const std::string phase = job.value("status", json::object()).value("phase", "");
            unfinished += phase != "Succeeded" && phase != "Failed";
          }
          room = jobs.is_object() && unfinished < total_jobs / 2;
        }
        if (!room) {
          acted = false;
          break;
        }
        create_job(job_choices.Next());
        break;
      }
    }
    ++(acted ? done : skipped)[kind];
    spent_ms[kind] += ms_since(acting);
  }
  // The rest of the mix, should the schedule have drawn fewer creations.
  while (created < total_jobs) create_job(job_choices.Next());
  // The faults stop: a hang not reported yet ends (its programs go on).
  done["hang/over-before-its-report"] += static_cast<int>(hangs.size());
  hangs.clear();

  // The faults stop: every node healed, every person's cordon lifted, every job resumed, both
  // replicas running.
  cluster("unblackhole");
  if (throttled) {
    EXPECT_EQ(cluster("apf-reset").exit_code, 0);
  }
  settling = true;
  for (int r = 0; r < 2; ++r) {
    if (replicas[r] && replicas[r]->Exited()) {
      replicas[r].reset();
      ++done_after["replica-exited"];
    }
    if (!replicas[r]) replicas[r] = start_replica(r);
  }
  register_again(true);
  if (!real_node.empty()) {
    SetChips("unhealthy", "");
    real_chip_failed = false;
  }
  json nodes;
  EXPECT_TRUE(Eventually([&] { return (nodes = api.Nodes()).contains("items"); },
                         std::chrono::seconds(60)));
  for (const auto& node : nodes.value("items", json::array())) {
    if (!node_ours(node)) continue;
    const std::string name = node["metadata"].value("name", "");
    if (ConditionStatus(node, "TPUUnhealthy") == "True") {
      EXPECT_TRUE(api.SetNodeCondition(name, "TPUUnhealthy", "False", "ChipHealthy", "chaos over"));
    }
    if (ConditionStatus(node, "Ready") != "True") {
      EXPECT_TRUE(api.SetNodeCondition(name, "Ready", "True", "KubeletReady", "chaos over"));
    }
    if (HasTaint(node, kMaintenanceTaint)) {
      EXPECT_TRUE(api.Taint(name, kMaintenanceTaint, false));
    }
    if (!Label(node, kScheduledMaintenanceLabel).empty()) {
      EXPECT_TRUE(api.Label(name, kScheduledMaintenanceLabel, ""));
    }
    const bool ours =
        node["metadata"].value("annotations", json::object()).value("tpujob.dev/cordoned-by", "") ==
        "tpujob-operator";
    if (node["spec"].value("unschedulable", false) && !ours) {
      EXPECT_TRUE(api.Cordon(name, false));
    }
  }
  for (const auto& job : api.Jobs(n).value("items", json::array())) {
    if (job["spec"].value("suspend", false)) {
      set_suspend(job["metadata"].value("name", ""), false);
    }
  }
  std::cout << "chaos seed " << seed << ": " << schedule.size() << " steps, "
            << "the driver at most " << static_cast<int>(lag_ms) << " ms behind; done by kind:";
  for (const auto& [kind, count] : done) std::cout << " " << kind << "=" << count;
  std::cout << "; nothing to act on:";
  for (const auto& [kind, count] : skipped) std::cout << " " << kind << "=" << count;
  std::cout << "; jobs created " << created << "; driver seconds by kind:";
  for (const auto& [kind, ms] : spent_ms) {
    std::cout << " " << kind << "=" << static_cast<int>(ms / 1000);
  }
  if (!real_node.empty()) std::cout << ", " << real_jobs << " of them on the real node";
  std::cout << std::endl;

  // Settled: every job where it may rest, nothing orphaned, every operator cordon lifted.
  const auto settled = [&] {
    const json jobs = api.Jobs(n);
    std::string problems =
        jobs.contains("items") ? chaos::FinalJobProblems(jobs) : "the jobs could not be listed\n";
    problems += OrphanProblems(n);
    revive();
    keep_replicas();
    const json nodes = api.Nodes();
    if (!nodes.contains("items")) problems += "the nodes could not be listed\n";
    for (const auto& node : nodes.value("items", json::array())) {
      // Cordoned, or still carrying the operator's taint (`kubectl uncordon` leaves it).
      if (node_ours(node) &&
          (node["spec"].value("unschedulable", false) || HasTaint(node, "tpujob.dev/faulty"))) {
        problems += "node " + node["metadata"].value("name", "") +
                    " is still cordoned: " + node["spec"].dump() + "\n";
      }
    }
    sample_rss();
    return problems;
  };
  EXPECT_TRUE(HoldsWithin(settled, std::chrono::seconds(settle_seconds)))
      << "chaos seed " << seed << ": the cluster did not settle";

  // Every job deleted: nothing of them may stay.
  Kubectl("delete tpujobs --all -n " + n + " --wait=false");
  EXPECT_TRUE(HoldsWithin(
      [&] {
        keep_replicas();
        const std::string left =
            Kubectl("get tpujobs,pods,services -n " + n + " -o name", false).output;
        return left.empty() ? std::string() : "left after every job was deleted:\n" + left;
      },
      std::chrono::seconds(120)))
      << "chaos seed " << seed;
  sample_rss();
  std::cout << "chaos seed " << seed << ": while the cluster settled and emptied:";
  for (const auto& [what, count] : done_after) std::cout << " " << what << "=" << count;
  if (done_after.empty()) std::cout << " nothing";
  std::cout << std::endl;
  std::cout << "chaos seed " << seed << ": operator peak RSS " << peak_rss_kib / 1024 << " MiB"
            << std::endl;
  EXPECT_LT(peak_rss_kib, 256 * 1024) << "chaos seed " << seed << ": operator RSS";

  // The whole record through the checker, once the recorders have caught up (the deletions
  // above are the last events they must hold).
  EXPECT_TRUE(Eventually(
      [&] {
        std::ifstream in(pods_record.path());
        const auto events = chaos::ReadEvents(in, "pods");
        return !events.empty() && events.back().type == "DELETED";
      },
      std::chrono::seconds(30)));
  chaos::Limits limits;
  limits.max_cordoned = max_cordoned;
  limits.cordon_rate_per_minute = cordon_rate;
  limits.node_prefix = prefix + "-";
  if (!real_node.empty()) limits.other_nodes.insert(real_node);
  limits.breaker_nodes = 3;  // the operator's default --cordon-breaker-nodes
  chaos::Checker checker(limits);
  std::vector<std::vector<chaos::Event>> streams;
  for (const auto* record : {&pods_record, &jobs_record, &nodes_record}) {
    std::ifstream in(record->path());
    const std::string resource = record == &pods_record   ? "pods"
                                 : record == &jobs_record ? "tpujobs"
                                                          : "nodes";
    streams.push_back(chaos::ReadEvents(in, resource));
  }
  for (const auto& event : chaos::Merge(std::move(streams))) checker.Apply(event);
  std::cout << "chaos seed " << seed << ": checker replayed " << checker.applied()
            << " events, cordons seen " << checker.cordons_seen() << "; checks:";
  for (const auto& [invariant, count] : checker.checks()) {
    std::cout << " " << invariant << "=" << count;
  }
  std::cout << std::endl;
  for (const auto& violation : checker.violations()) {
    ADD_FAILURE() << "chaos seed " << seed << ": invariant " << violation.invariant
                  << " broken: " << violation.detail;
  }
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
