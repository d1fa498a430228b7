// Stall detection (spec.faultTolerance.progress) on the real node of the local cluster
// (`e2e/cluster up --real-node`), with a real program: the jax-worker image
// (e2e/tools/jax-worker/train.py), two JAX processes joined by jax.distributed over gloo, one of
// which stops inside a step so that the other blocks in the collective, as a hung host blocks a
// slice. What is real here that stall_e2e_test.cpp plays on KWOK: the supervisor's pipes and
// pattern matching on a program's real output, its stall timer, its stop of a process that is
// blocked in a collective, its report through the kubelet's termination message, the container
// restart (InPlace) or the new pods (Recreate), and the Orbax checkpoint the restarted processes
// resume from. Then the rule's acceptance cases on the real program: a hang on a node whose chip
// turns unhealthy (the hardware case, through the node agent's round on the real device plugin),
// a hang at the same step after every restart (maxStalls), and the same sole suspect twice (its
// node cordoned, or the cordon refused at the cap), a program that never prints a step (stalled
// over startupSeconds), and status.progress following a running program's step from its log
// tail. And that the supervisor's pass-through leaves what the node's container runtime logs byte
// for byte as it is without it.
//
// The node is one host, so a two-process job is a Master (process 0, the coordinator) and one
// Worker, each given its JAX_* variables; their checkpoint directory is one hostPath directory.
// TPUJOB_E2E_DIR must name a cluster started with --real-node into whose node the project image
// was imported (the real_cluster fixture of CMakeLists.txt); the jax-worker image is built (cached)
// and imported by the suite when the node lacks it.

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "e2e_env.h"
#include "operator_env.h"
#include "real_jax_env.h"
#include "real_node_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

using Json = nlohmann::json;
using std::chrono::seconds;

// "2026-12-05T01:02:03Z" as Unix seconds (-1 when it is not that).
int64_t Rfc3339Seconds(const std::string& text) {
  std::tm tm{};
  std::istringstream in(text);
  in >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%S");
  if (in.fail()) return -1;
  return static_cast<int64_t>(timegm(&tm));
}

// A container of the job that ended, as the kubelet reported it (state or lastState).
struct Termination {
  std::string pod;
  std::string uid;
  int exit_code = -1;
  std::string finished_at;
  std::string message;
};

// Every termination of the container `trainer` of every pod of a namespace, from a kubectl watch
// started before the pods exist: under Recreate the operator deletes the stalled pods moments
// after their containers ended, and under InPlace the ended state is lastState once the kubelet
// restarted the container.
class TerminationWatch {
 public:
  explicit TerminationWatch(const std::string& ns) {
    path_ = ClusterDir() + "/termination-watch-" + ns + ".log";
    // The whole containerStatuses list as JSON: a jsonpath that names fields inside it fails,
    // and ends the watch, on a pod that has none yet.
    const std::string cmd =
        ToolsBin() + "/kubectl --kubeconfig " + KubeconfigPath() + " get pods -n " + ns +
        " --watch -o jsonpath='{.metadata.name}|{.metadata.uid}|{.status.containerStatuses}"
        "{\"\\n\"}' > " +
        path_ + " 2>&1 & echo $!";
    pid_ = std::atoi(Trim(RunCommand(cmd, false).output).c_str());
  }
  ~TerminationWatch() {
    if (pid_ > 0) ::kill(pid_, SIGTERM);
    std::remove(path_.c_str());
  }
  TerminationWatch(const TerminationWatch&) = delete;
  TerminationWatch& operator=(const TerminationWatch&) = delete;

  // Every distinct termination of the container `trainer` seen so far, in state or lastState
  // (pod uid and finishedAt tell them apart).
  std::vector<Termination> All() const {
    std::vector<Termination> seen;
    std::ifstream in(path_);
    for (std::string line; std::getline(in, line);) {
      const auto first = line.find('|');
      const auto second = first == std::string::npos ? first : line.find('|', first + 1);
      if (second == std::string::npos) continue;
      const Json statuses = Json::parse(line.substr(second + 1), nullptr, false);
      if (!statuses.is_array()) continue;
      for (const Json& c : statuses) {
        if (c.value("name", "") != "trainer") continue;
        for (const char* which : {"state", "lastState"}) {
          const Json t = c.value(which, Json::object()).value("terminated", Json::object());
          if (!t.contains("exitCode")) continue;
          Termination found{line.substr(0, first), line.substr(first + 1, second - first - 1),
                            t.value("exitCode", -1), t.value("finishedAt", ""),
                            t.value("message", "")};
          bool known = false;
          for (const Termination& s : seen) {
            known = known || (s.uid == found.uid && s.finished_at == found.finished_at);
          }
          if (!known) seen.push_back(std::move(found));
        }
      }
    }
    return seen;
  }
  std::string Raw() const { return ReadFile(path_); }

 private:
  std::string path_;
  int pid_ = -1;
};

// The stall tests' jobs: a Master (process 0, the coordinator) and one Worker of the jax-worker
// program on the one real node.
class RealStallE2E : public RealJaxTest {
 protected:
  // A replica of the job: one pod running `command` in the jax-worker image as container
  // `trainer`, with the job's checkpoint directory at /ckpt and a memory-backed /dev/shm.
  std::string Replica(const std::string& type, const std::string& command,
                      const std::vector<std::pair<std::string, std::string>>& env,
                      const std::string& checkpoint_dir) const {
    std::string yaml = "    " + type +
                       ":\n      replicas: 1\n      template:\n        spec:\n"
                       "          terminationGracePeriodSeconds: 2\n"
                       // The Master asks for no chip, so the operator gives it no toleration of
                       // the TPU taint; the real node is the only one that runs containers.
                       "          tolerations: [{key: google.com/tpu, operator: Exists}]\n"
                       "          containers:\n          - name: trainer\n"
                       "            image: \"" +
                       jax_image_ +
                       "\"\n            imagePullPolicy: Never\n            command: " + command +
                       "\n            env:\n";
    for (const auto& [key, value] : env) {
      yaml += "            - {name: " + key + ", value: '" + value + "'}\n";
    }
    yaml +=
        "            volumeMounts:\n            - {name: ckpt, mountPath: /ckpt}\n"
        "            - {name: shm, mountPath: /dev/shm}\n"
        "          volumes:\n          - {name: ckpt, hostPath: {path: " +
        checkpoint_dir +
        ", type: Directory}}\n"
        "          - {name: shm, emptyDir: {medium: Memory}}\n";
    return yaml;
  }

  std::string Header(const std::string& name, const std::string& fault_tolerance) const {
    return "apiVersion: tpujob.dev/v1alpha1\nkind: TPUJob\nmetadata:\n  name: " + name +
           "\nspec:\n  tpu: {accelerator: " + PortsEnv("REAL_TPU_ACCELERATOR") +
           ", topology: " + PortsEnv("REAL_TPU_TOPOLOGY") +
           ", chipsPerWorker: " + PortsEnv("REAL_TPU_CHIPS") +
           "}\n  checkpoint: {path: /ckpt}\n  faultTolerance: " + fault_tolerance +
           "\n  replicaSpecs:\n";
  }

  void RunHang(const std::string& mode);
  void RunSuspectTwice(bool cap_full);
};

// The job's faults[] entry of `kind` ({} when absent).
Json FaultOf(const std::string& ns, const std::string& job, const std::string& kind) {
  const Json status = JobJson(ns, job).value("status", Json::object());
  for (const Json& f : status.value("faults", Json::array())) {
    if (f.value("kind", "") == kind) return f;
  }
  return Json::object();
}

constexpr int kStallSeconds = 10;
constexpr int kHangStep = 8;
constexpr int kCheckpointEvery = 3;
// The last checkpoint before the hang: both processes completed step kHangStep - 1.
constexpr int kLastCheckpoint = (kHangStep - 1) / kCheckpointEvery * kCheckpointEvery;

// Process 1 stops for good inside step kHangStep, before its collective (once: the restarted
// pair runs past it); process 0 blocks in that step's all-reduce. Neither prints a step for
// kStallSeconds: both supervisors report a stall, stop their program and exit 124; the operator
// waits faultAttributionSeconds for the node agent's verdict (healthy) and restarts the gang,
// which resumes from the last Orbax checkpoint and finishes.
//
// The process blocked in the collective does not act on SIGTERM: its supervisor kills it at the end
// of the grace period (terminationGracePeriodSeconds, 2 s here), so it ends within kStallSeconds
// + 2 s + the supervisor's poll of its last step by these whole-second clocks.
//
// About 40 s per mode on the 2-core machine: JAX's start (imports, jax.distributed, the first
// jit) takes about 10 s per generation, the stall kStallSeconds, the attribution window 3 s.
void RealStallE2E::RunHang(const std::string& mode) {
  const std::string name = mode == "InPlace" ? "hang-inplace" : "hang-recreate";
  TestNamespace ns("real-" + name);
  const std::string n = ns.name();
  const std::string dir = MakeCheckpointDir(name);
  const std::vector<std::pair<std::string, std::string>> train = {
      {"TRAIN_STEPS", "40"},
      {"TRAIN_STEP_SECONDS", "0.2"},
      {"TRAIN_CHECKPOINT_EVERY", std::to_string(kCheckpointEvery)},
      {"TRAIN_HANG_AT_STEP", std::to_string(kHangStep)},
      {"TRAIN_HANG_PROCESS", "1"},
      {"TRAIN_HANG_ONCE", "1"},
      {"JAX_COORDINATOR_ADDRESS", name + "-master-0." + name},
      {"JAX_NUM_PROCESSES", "2"},
  };
  auto with_id = [&](const std::string& id) {
    auto env = train;
    env.emplace_back("JAX_PROCESS_ID", id);
    return env;
  };
  const std::string command = "[python3, /app/train.py]";
  const std::string yaml =
      Header(name, "{restart: " + mode +
                       ", maxJobRetries: 0, faultAttributionSeconds: 3, "
                       "maintenanceGracePeriodSeconds: 2, preflight: {enabled: false}, "
                       "progress: {logPattern: 'completed step: (\\d+)', checkpointPattern: "
                       "'saved checkpoint at step (\\d+)', stallSeconds: " +
                       std::to_string(kStallSeconds) + "}}") +
      Replica("Master", command, with_id("0"), dir) + Replica("Worker", command, with_id("1"), dir);
  TerminationWatch watch(n);
  const std::string selector = "tpujob.dev/job-name=" + name;
  ASSERT_EQ(ApplyYaml(n, yaml).exit_code, 0) << yaml;
  ASSERT_TRUE(JobFieldBecomes(n, name, "{.status.phase}", "Running", seconds(120)))
      << DescribePods(n, selector) << OperatorLogs();
  const std::string master = name + "-master-0", worker = name + "-worker-0";
  std::map<std::string, std::string> uids;
  for (const std::string& pod : {master, worker}) {
    uids[pod] = Get(n, "pod " + pod, "{.metadata.uid}");
    // The supervisor runs the program.
    EXPECT_NE(Get(n, "pod " + pod, "{.spec.containers[0].command[0]}").find("tpujob-supervise"),
              std::string::npos)
        << pod;
  }

  // Both containers end with the supervisor's stall code and its final stalled report.
  std::map<std::string, Termination> stalled;
  const bool both = Eventually(
      [&] {
        for (const Termination& t : watch.All()) {
          const Json report = Json::parse(t.message, nullptr, false);
          if (report.is_object() && report.value("state", "") == "stalled" &&
              report.contains("exit")) {
            stalled[t.pod] = t;
          }
        }
        return stalled.size() == 2;
      },
      seconds(150), std::chrono::milliseconds(250));
  ASSERT_TRUE(both) << watch.Raw() << DescribePods(n, selector) << OperatorLogs();
  for (const auto& [pod, t] : stalled) {
    SCOPED_TRACE(pod);
    const Json report = Json::parse(t.message);
    std::cout << "== " << pod << ": exit " << t.exit_code << " at " << t.finished_at << ", report "
              << t.message << "\n";
    EXPECT_EQ(t.exit_code, 124) << t.message;
    EXPECT_EQ(report.value("phase", ""), "running") << t.message;
    // Both completed the step before the hang and none after it.
    EXPECT_EQ(report.value("step", -1), kHangStep - 1) << t.message;
    // Stopped within stallSeconds + 5 s of the last progress (lastProgress and finishedAt are
    // whole seconds: the stall cannot be found before stallSeconds - 1 s by these clocks).
    const int64_t last = Rfc3339Seconds(report.value("lastProgress", ""));
    const int64_t finished = Rfc3339Seconds(t.finished_at);
    ASSERT_GT(last, 0) << t.message;
    ASSERT_GT(finished, 0) << t.finished_at;
    EXPECT_GE(finished - last, kStallSeconds - 1) << t.message << " finished " << t.finished_at;
    EXPECT_LE(finished - last, kStallSeconds + 5) << t.message << " finished " << t.finished_at;
    EXPECT_GE(report.value("idleSeconds", 0), kStallSeconds) << t.message;
  }
  // Process 0 saves the checkpoints and says so: its supervisor saw the last one.
  EXPECT_EQ(Json::parse(stalled[master].message, nullptr, false).value("checkpoint", -1),
            kLastCheckpoint)
      << stalled[master].message;

  // Counted as one stall, restarted after the attribution window (the node is healthy).
  ASSERT_TRUE(JobFieldBecomes(n, name, "{.status.stalls}", "1", seconds(60)))
      << JobJson(n, name).dump(2) << OperatorLogs();
  const Json fault = FaultOf(n, name, "Stalled");
  EXPECT_EQ(fault.value("action", ""), mode == "InPlace" ? "RestartInPlace" : "RestartAllWorkers")
      << fault.dump();

  // The restarted pair resumes from the checkpoint: every process says so in its log.
  for (const std::string& pod : {master, worker}) {
    SCOPED_TRACE(pod);
    std::string log;
    const std::string line = "restored checkpoint at step " + std::to_string(kLastCheckpoint);
    EXPECT_TRUE(Eventually(
        [&] {
          log = Kubectl("logs -n " + n + " " + pod + " -c trainer", false).output;
          return log.find(line) != std::string::npos;
        },
        seconds(120), std::chrono::milliseconds(300)))
        << log << DescribePods(n, selector) << OperatorLogs();
    if (mode == "InPlace") {
      EXPECT_EQ(Get(n, "pod " + pod, "{.metadata.uid}"), uids[pod]);
      EXPECT_EQ(Get(n, "pod " + pod, "{.status.containerStatuses[0].restartCount}"), "1");
      // The restarted container still begins where the checkpoint left off: no step before it.
      EXPECT_EQ(log.find("completed step: " + std::to_string(kLastCheckpoint) + ","),
                std::string::npos)
          << log;
    } else {
      EXPECT_NE(Get(n, "pod " + pod, "{.metadata.uid}"), uids[pod]);
    }
  }
  ASSERT_TRUE(JobFieldBecomes(n, name, "{.status.phase}", "Succeeded", seconds(120)))
      << DescribePods(n, selector) << OperatorLogs();
  EXPECT_EQ(JobField(n, name, "{.status.stalls}"), "1");
}

TEST_F(RealStallE2E, InPlaceAJaxProcessHungInACollectiveIsStoppedAndThePairResumesInPlace) {
  RunHang("InPlace");
}

TEST_F(RealStallE2E, RecreateAJaxProcessHungInACollectiveIsStoppedAndNewPodsResume) {
  RunHang("Recreate");
}

// --- The acceptance cases of stall handling, on the real node ---

// Short settings, so that each case takes as little time as the real program allows: a step every
// 0.2 s, a stall after 6 s without one.
constexpr int kShortStallSeconds = 6;

// The JAX program's settings: `steps` steps of 0.2 s, a checkpoint every `every` steps, then
// `extra` (the hang, and what else a case needs).
std::vector<std::pair<std::string, std::string>> Training(
    int every, std::vector<std::pair<std::string, std::string>> extra) {
  std::vector<std::pair<std::string, std::string>> env = {
      {"TRAIN_STEPS", "40"},
      {"TRAIN_STEP_SECONDS", "0.2"},
      {"TRAIN_CHECKPOINT_EVERY", std::to_string(every)},
  };
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

// spec.faultTolerance of the cases below: progress from the program's step lines, `more` added.
std::string StallTolerance(const std::string& more) {
  return "{" + more +
         ", maintenanceGracePeriodSeconds: 2, preflight: {enabled: false}, progress: {logPattern: "
         "'completed step: (\\d+)', checkpointPattern: 'saved checkpoint at step (\\d+)', "
         "stallSeconds: " +
         std::to_string(kShortStallSeconds) + ", maxStalls: 3}}";
}

// Puts the node back as a test found it, whatever happened: no chip unhealthy or hidden, not
// cordoned, without the operator's taint.
class NodeRestorer {
 public:
  explicit NodeRestorer(std::string node) : node_(std::move(node)) {}
  ~NodeRestorer() {
    SetChips("unhealthy", "");
    SetChips("hidden", "");
    Kubectl("uncordon " + node_, false);
    Kubectl("taint node " + node_ + " tpujob.dev/faulty- 2>/dev/null", false);
    // And the operator's cordon annotations, as its automatic uncordon leaves it: a node a person
    // uncordoned keeps them, and with them the rule against cordoning it again on that evidence.
    std::string remove;
    for (const char* a : {"cordoned-by", "cordon-reason", "cordon-message", "cordoned-at",
                          "cordon-job", "cordon-evidence"}) {
      remove += std::string(" tpujob.dev/") + a + "-";
    }
    Kubectl("annotate node " + node_ + remove, false);
  }
  NodeRestorer(const NodeRestorer&) = delete;
  NodeRestorer& operator=(const NodeRestorer&) = delete;

 private:
  std::string node_;
};

constexpr const char* kTpuUnhealthy = "{.status.conditions[?(@.type==\"TPUUnhealthy\")].status}";

// A hang on a node whose chip the device plugin marks unhealthy at the same moment is the
// hardware's fault, not a stall: not counted in status.stalls, the node cordoned with the
// hardware reason, the job re-issued. The node is the cluster's only TPU node, so the re-issued
// job waits for capacity with first priority; once the chip is healthy again and a person
// uncordons the node, it runs there again.
TEST_F(RealStallE2E, AHangOnANodeWhoseChipTurnsUnhealthyIsTheHardwareCase) {
  TestNamespace ns("real-stall-hw");
  const std::string n = ns.name(), name = "hw";
  NodeRestorer restore(node_);
  const std::string dir = MakeCheckpointDir(name);
  // One process (one Worker): it hangs in step 5 of its first run.
  const std::string yaml = Header(name, StallTolerance("restart: InPlace, maxJobRetries: 1, "
                                                       "faultAttributionSeconds: 30")) +
                           Replica("Worker", "[python3, /app/train.py]",
                                   Training(3, {{"TRAIN_HANG_AT_STEP", "5"},
                                                {"TRAIN_HANG_PROCESS", "0"},
                                                {"TRAIN_HANG_ONCE", "1"}}),
                                   dir);
  const std::string selector = "tpujob.dev/job-name=" + name;
  ASSERT_EQ(ApplyYaml(n, yaml).exit_code, 0) << yaml;
  ASSERT_TRUE(JobFieldBecomes(n, name, "{.status.phase}", "Running", seconds(120)))
      << DescribePods(n, selector) << OperatorLogs();
  // The supervisor reports the hang; the operator asks every node of the job for a hardware
  // round and waits faultAttributionSeconds (30 s) for a verdict.
  ASSERT_TRUE(JobFieldBecomes(n, name, "{.status.conditions[?(@.type==\"Stalled\")].status}",
                              "True", seconds(90)))
      << DescribePods(n, selector) << OperatorLogs();
  // The operator writes Stalled=True, then asks the pods for the round (two writes of one pass):
  // the annotation may land just after the condition is seen.
  std::string check;
  EXPECT_TRUE(Eventually(
      [&] {
        check = Get(n, "pod " + name + "-worker-0",
                    "{.metadata.annotations.tpujob\\.dev/hardware-check}");
        return check == "1/1";
      },
      seconds(20)))
      << "hardware-check: '" << check << "'\n"
      << DescribePods(n, selector);
  // Meanwhile the device plugin marks chip 0 unhealthy: the node agent finds it.
  SetChips("unhealthy", "0");
  ASSERT_TRUE(JobFieldBecomes(n, name, "{.status.attempt}", "2", seconds(60)))
      << JobJson(n, name).dump(2) << OperatorLogs();
  EXPECT_EQ(NodeField(node_, kTpuUnhealthy), "True");
  // The hardware case: cordoned with the hardware reason, re-issued, no stall counted.
  EXPECT_TRUE(Eventually([&] { return NodeField(node_, "{.spec.unschedulable}") == "true"; },
                         seconds(30), std::chrono::milliseconds(250)))
      << OperatorLogs();
  EXPECT_EQ(NodeField(node_, "{.metadata.annotations.tpujob\\.dev/cordon-reason}"),
            "NodeUnhealthy");
  EXPECT_EQ(NodeField(node_, "{.spec.taints[?(@.key==\"tpujob.dev/faulty\")].value}"),
            "NodeUnhealthy");
  const Json fault = FaultOf(n, name, "NodeUnhealthy");
  EXPECT_EQ(fault.value("node", ""), node_) << JobJson(n, name).dump(2);
  EXPECT_TRUE(FaultOf(n, name, "Stalled").empty()) << JobJson(n, name).dump(2);
  EXPECT_EQ(JobField(n, name, "{.status.stalls}"), "");
  EXPECT_EQ(JobField(n, name, "{.status.jobRetries}"), "1");
  // What a user sees: the re-issued attempt waits for capacity with first priority.
  EXPECT_TRUE(JobFieldBecomes(n, name, "{.status.phase}", "Queued", seconds(30)))
      << JobJson(n, name).dump(2);
  // Admitted=False: Reissued at once, then the queue's reason (WaitingForCapacity).
  EXPECT_EQ(JobField(n, name, "{.status.conditions[?(@.type==\"Admitted\")].status}"), "False");
  std::cout << "== while the node is cordoned: Admitted "
            << JobField(n, name,
                        "{.status.conditions[?(@.type==\"Admitted\")].reason}: "
                        "{.status.conditions[?(@.type==\"Admitted\")].message}")
            << "\n";
  const auto events = JobEvents(n, name);
  EXPECT_FALSE(EventsWith(events, "NodeCordoned").empty()) << DescribeEvents(events);
  EXPECT_FALSE(EventsWith(events, "Queued", "attempt 2 queued with first priority").empty())
      << DescribeEvents(events);
  EXPECT_TRUE(EventsWith(events, "StallRestart").empty()) << DescribeEvents(events);

  // The chip is healthy again and a person uncordons the node: attempt 2 runs there.
  SetChips("unhealthy", "");
  ASSERT_TRUE(Eventually([&] { return NodeField(node_, kTpuUnhealthy) == "False"; }, seconds(60),
                         std::chrono::milliseconds(250)))
      << NodeField(node_, kTpuUnhealthy);
  ASSERT_EQ(Kubectl("uncordon " + node_).exit_code, 0);
  ASSERT_EQ(Kubectl("taint node " + node_ + " tpujob.dev/faulty-").exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, name, "{.status.phase}", "Running", seconds(120)))
      << JobJson(n, name).dump(2) << DescribePods(n, selector) << OperatorLogs();
  EXPECT_EQ(JobField(n, name, "{.status.attempt}"), "2");
}

// A program that hangs at the same step after every restart from its checkpoint makes no
// progress between its stalls: the third stall in a row (maxStalls 3) fails the job with reason
// Stalled. One process, so that no worker is behind another (no suspect).
// About 60-75 s: three runs of the program, each JAX's start (about 10 s), the steps to the hang,
// the stall (6 s) and the attribution window (2 s).
TEST_F(RealStallE2E, AHangAtTheSameStepThreeTimesInARowFailsTheJobWithReasonStalled) {
  TestNamespace ns("real-stall-max");
  const std::string n = ns.name(), name = "max";
  const std::string dir = MakeCheckpointDir(name);
  // Hangs in step 5 of every run; the checkpoint at step 3 is where each restart begins.
  const std::string yaml =
      Header(name, StallTolerance("restart: InPlace, maxJobRetries: 0, "
                                  "faultAttributionSeconds: 2")) +
      Replica("Worker", "[python3, /app/train.py]",
              Training(3, {{"TRAIN_HANG_AT_STEP", "5"}, {"TRAIN_HANG_PROCESS", "0"}}), dir);
  const std::string selector = "tpujob.dev/job-name=" + name;
  ASSERT_EQ(ApplyYaml(n, yaml).exit_code, 0) << yaml;
  ASSERT_TRUE(JobFieldBecomes(n, name, "{.status.phase}", "Failed", seconds(240)))
      << JobJson(n, name).dump(2) << DescribePods(n, selector) << OperatorLogs();
  EXPECT_EQ(JobField(n, name, "{.status.stalls}"), "3");
  EXPECT_EQ(JobField(n, name, "{.status.conditions[?(@.type==\"Failed\")].reason}"), "Stalled");
  const std::string message =
      JobField(n, name, "{.status.conditions[?(@.type==\"Failed\")].message}");
  EXPECT_NE(message.find("made no progress for"), std::string::npos) << message;
  EXPECT_NE(message.find("after step 4 (stallSeconds 6)"), std::string::npos) << message;
  // The restarted runs saved no checkpoint before they hung: the first run's is named.
  EXPECT_NE(message.find("last checkpoint at step 3"), std::string::npos) << message;
  EXPECT_NE(message.find("3 stalls in a row with no progress in between (maxStalls 3)"),
            std::string::npos)
      << message;
  EXPECT_EQ(JobField(n, name, "{.status.progress.step}"), "4");
  EXPECT_EQ(JobField(n, name, "{.status.progress.checkpointStep}"), "3");
  // Every restart resumed from the checkpoint and hung again: restarted twice, in place.
  EXPECT_EQ(JobField(n, name, "{.status.faults[*].action}"),
            "RestartInPlace RestartInPlace FailJob")
      << JobJson(n, name).dump(2);
  const auto events = JobEvents(n, name);
  EXPECT_EQ(
      EventsWith(events, "StallRestart", "(stall 1 in a row of at most 3 (maxStalls))").size(), 1u)
      << DescribeEvents(events);
  EXPECT_EQ(
      EventsWith(events, "StallRestart", "(stall 2 in a row of at most 3 (maxStalls))").size(), 1u)
      << DescribeEvents(events);
  EXPECT_EQ(EventsWith(events, "Failed", "3 stalls in a row").size(), 1u) << DescribeEvents(events);
  EXPECT_FALSE(EventsWith(events, "Stalled", "run a hardware check").empty())
      << DescribeEvents(events);
  EXPECT_EQ(NodeField(node_, "{.spec.unschedulable}"), "");
}

// A program that never prints a step line stalls over startupSeconds (15 s), not stallSeconds
// (6 s): the supervisor's report says phase startup and no step, and with maxStalls 1 the job
// fails with reason Stalled at once, its message naming startupSeconds. About 30 s: JAX's start,
// then the 15 s.
TEST_F(RealStallE2E, AProgramThatNeverPrintsAStepStallsOverStartupSeconds) {
  TestNamespace ns("real-stall-startup");
  const std::string n = ns.name(), name = "quiet";
  const std::string dir = MakeCheckpointDir(name);
  constexpr int kStartupSeconds = 15;
  const std::string tolerance =
      "{restart: InPlace, maxJobRetries: 0, faultAttributionSeconds: 2, "
      "maintenanceGracePeriodSeconds: 2, preflight: {enabled: false}, progress: {logPattern: "
      "'completed step: (\\d+)', stallSeconds: " +
      std::to_string(kShortStallSeconds) + ", startupSeconds: " + std::to_string(kStartupSeconds) +
      ", maxStalls: 1}}";
  const std::string yaml =
      Header(name, tolerance) +
      Replica("Worker", "[python3, /app/train.py]",
              {{"TRAIN_STEPS", "0"}, {"TRAIN_STEP_SECONDS", "0.2"}, {"TRAIN_SILENT", "1"}}, dir);
  TerminationWatch watch(n);
  const std::string selector = "tpujob.dev/job-name=" + name;
  ASSERT_EQ(ApplyYaml(n, yaml).exit_code, 0) << yaml;
  ASSERT_TRUE(JobFieldBecomes(n, name, "{.status.phase}", "Failed", seconds(180)))
      << JobJson(n, name).dump(2) << DescribePods(n, selector) << OperatorLogs();
  EXPECT_EQ(JobField(n, name, "{.status.conditions[?(@.type==\"Failed\")].reason}"), "Stalled");
  const std::string message =
      JobField(n, name, "{.status.conditions[?(@.type==\"Failed\")].message}");
  EXPECT_NE(message.find("no step within startupSeconds " + std::to_string(kStartupSeconds)),
            std::string::npos)
      << message;
  EXPECT_EQ(JobField(n, name, "{.status.progress.step}"), "");
  // The supervisor's report: stalled before the first step, idle at least startupSeconds.
  std::optional<Termination> stalled;
  ASSERT_TRUE(Eventually(
      [&] {
        for (const Termination& t : watch.All()) {
          const Json report = Json::parse(t.message, nullptr, false);
          if (report.is_object() && report.value("state", "") == "stalled") stalled = t;
        }
        return stalled.has_value();
      },
      seconds(30), std::chrono::milliseconds(250)))
      << watch.Raw();
  const Json report = Json::parse(stalled->message);
  EXPECT_EQ(stalled->exit_code, 124) << stalled->message;
  EXPECT_EQ(report.value("phase", ""), "startup") << stalled->message;
  EXPECT_FALSE(report.contains("step")) << stalled->message;
  EXPECT_GE(report.value("idleSeconds", 0), kStartupSeconds) << stalled->message;
}

// While the program runs, status.progress (the STEP column) follows worker 0's step from its log
// tail (the release refreshes every 2 s): a step, then a later one, each with the kubelet's time
// of its line, and no stall. About 10 s: JAX's start, then two refreshes.
TEST_F(RealStallE2E, TheStepInTheStatusFollowsTheRunningProgram) {
  TestNamespace ns("real-stall-step");
  const std::string n = ns.name(), name = "steps";
  const std::string dir = MakeCheckpointDir(name);
  const std::string yaml =
      Header(name, StallTolerance("restart: InPlace, maxJobRetries: 0, "
                                  "faultAttributionSeconds: 2")) +
      Replica(
          "Worker", "[python3, /app/train.py]",
          {{"TRAIN_STEPS", "0"}, {"TRAIN_STEP_SECONDS", "0.2"}, {"TRAIN_CHECKPOINT_EVERY", "5"}},
          dir);
  const std::string selector = "tpujob.dev/job-name=" + name;
  ASSERT_EQ(ApplyYaml(n, yaml).exit_code, 0) << yaml;
  ASSERT_TRUE(JobFieldBecomes(n, name, "{.status.phase}", "Running", seconds(120)))
      << DescribePods(n, selector) << OperatorLogs();
  int64_t first = -1;
  ASSERT_TRUE(Eventually(
      [&] {
        const std::string step = JobField(n, name, "{.status.progress.step}");
        if (step.empty()) return false;
        first = std::stoll(step);
        return first > 0;
      },
      seconds(90), std::chrono::milliseconds(250)))
      << JobJson(n, name).dump(2) << OperatorLogs();
  EXPECT_GT(Rfc3339Seconds(JobField(n, name, "{.status.progress.time}")), 0)
      << JobJson(n, name).dump(2);
  int64_t later = -1;
  EXPECT_TRUE(Eventually(
      [&] {
        const std::string step = JobField(n, name, "{.status.progress.step}");
        later = step.empty() ? -1 : std::stoll(step);
        return later > first;
      },
      seconds(60), std::chrono::milliseconds(250)))
      << "status.progress.step stayed at " << first << "\n"
      << OperatorLogs();
  // The checkpoint lines too (every 5 steps).
  EXPECT_NE(JobField(n, name, "{.status.progress.checkpointStep}"), "") << JobJson(n, name).dump(2);
  const std::string stalls = JobField(n, name, "{.status.stalls}");
  EXPECT_TRUE(stalls.empty() || stalls == "0") << stalls;
  EXPECT_EQ(JobField(n, name, "{.status.phase}"), "Running");
}

// The Worker (process 1) stops printing steps two steps before it hangs in step 8, where the
// Master (process 0) blocks in the collective: the Worker reports step 5, the Master step 7, so
// the Worker is alone behind, the sole suspect, in both stalls (each run resumes from the
// checkpoint at step 4 and behaves the same). Its node is cordoned with reason Stalled, naming
// both stalls, when the cap allows it; the job is re-issued either way (maxJobRetries 1).
// `cap_full`: another node the operator holds cordoned fills the default cap (one node on a
// cluster this small), so the cordon is refused (CapReached), the re-issued job runs on the same
// node again, hangs again and fails after its third stall in a row. (On a cluster of a few nodes
// the default cap alone never refuses: one node is always allowed, CordonLimit.)
// About 70 s (cap_full: about 100 s, a third run): two runs of the pair (JAX's start about 10 s
// each, the stall 6 s, the attribution window 8 s, long enough for the Master's report, which comes
// a grace period after the Worker's), then the re-issue.
void RealStallE2E::RunSuspectTwice(bool cap_full) {
  const std::string name = cap_full ? "sus-cap" : "sus";
  TestNamespace ns("real-stall-" + name);
  const std::string n = ns.name();
  NodeRestorer restore(node_);
  const std::string other = "tpujob-e2e-held-" + std::to_string(::getpid());
  if (cap_full) {
    // A node the operator cordoned before (unschedulable, under its annotation): the default cap
    // (--max-cordoned-nodes 10, --max-cordoned-fraction 0.1) allows max(1, 0.1 x 3) = 1 node.
    const std::string node_yaml =
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: " + other +
        "\n  annotations: {tpujob.dev/cordoned-by: tpujob-operator, tpujob.dev/cordon-reason: "
        "NodeLost}\nspec:\n  unschedulable: true\n  taints: [{key: tpujob.dev/faulty, value: "
        "NodeLost, effect: NoSchedule}]\n";
    ASSERT_EQ(ApplyYaml("default", node_yaml).exit_code, 0) << node_yaml;
  }
  struct NodeDeleter {
    std::string node;
    bool created;
    ~NodeDeleter() {
      if (created) Kubectl("delete node " + node + " --wait=false", false);
    }
  } deleter{other, cap_full};

  const std::string dir = MakeCheckpointDir(name);
  const auto pair = [&](const std::string& id) {
    return Training(4, {{"TRAIN_HANG_AT_STEP", "8"},
                        {"TRAIN_HANG_PROCESS", "1"},
                        {"TRAIN_HANG_QUIET_STEPS", "2"},
                        {"JAX_COORDINATOR_ADDRESS", name + "-master-0." + name},
                        {"JAX_NUM_PROCESSES", "2"},
                        {"JAX_PROCESS_ID", id}});
  };
  const std::string command = "[python3, /app/train.py]";
  const std::string yaml = Header(name, StallTolerance("restart: InPlace, maxJobRetries: 1, "
                                                       "faultAttributionSeconds: 8")) +
                           Replica("Master", command, pair("0"), dir) +
                           Replica("Worker", command, pair("1"), dir);
  const std::string selector = "tpujob.dev/job-name=" + name;
  ASSERT_EQ(ApplyYaml(n, yaml).exit_code, 0) << yaml;
  ASSERT_TRUE(JobFieldBecomes(n, name, "{.status.phase}", "Running", seconds(120)))
      << DescribePods(n, selector) << OperatorLogs();
  const std::string worker = name + "-worker-0";

  // The first stall names the Worker as behind: restarted in place, its node the suspect.
  ASSERT_TRUE(JobFieldBecomes(n, name, "{.status.stalls}", "1", seconds(120)))
      << JobJson(n, name).dump(2) << DescribePods(n, selector) << OperatorLogs();
  EXPECT_EQ(JobField(n, name, "{.status.progress.suspectNode}"), node_) << JobJson(n, name).dump(2);
  const std::string behind =
      "suspect: worker-0 (pod " + worker + ") on node " + node_ + ", at step 5, behind the others";
  auto events = JobEvents(n, name);
  EXPECT_EQ(EventsWith(events, "StallRestart", behind).size(), 1u) << DescribeEvents(events);
  EXPECT_EQ(JobField(n, name, "{.status.attempt}"), "1");

  // The second: the same sole suspect, so its node is to be cordoned and the job re-issued.
  ASSERT_TRUE(JobFieldBecomes(n, name, "{.status.attempt}", "2", seconds(120)))
      << JobJson(n, name).dump(2) << DescribePods(n, selector) << OperatorLogs();
  EXPECT_EQ(JobField(n, name, "{.status.stalls}"), "2");
  const Json status = JobJson(n, name).value("status", Json::object());
  const Json last = status.value("faults", Json::array()).back();
  EXPECT_EQ(last.value("kind", ""), "Stalled") << last.dump();
  EXPECT_EQ(last.value("node", ""), node_) << last.dump();
  EXPECT_EQ(last.value("pod", ""), worker) << last.dump();
  events = JobEvents(n, name);
  EXPECT_FALSE(EventsWith(events, "Reissued", behind).empty()) << DescribeEvents(events);
  EXPECT_FALSE(
      EventsWith(events, "Reissued", "was the sole suspect of the previous stall too").empty())
      << DescribeEvents(events);
  if (!cap_full) {
    ASSERT_TRUE(Eventually([&] { return NodeField(node_, "{.spec.unschedulable}") == "true"; },
                           seconds(30), std::chrono::milliseconds(250)))
        << OperatorLogs();
    EXPECT_EQ(NodeField(node_, "{.metadata.annotations.tpujob\\.dev/cordon-reason}"), "Stalled");
    EXPECT_EQ(NodeField(node_, "{.spec.taints[?(@.key==\"tpujob.dev/faulty\")].value}"), "Stalled");
    const std::string why = NodeField(node_, "{.metadata.annotations.tpujob\\.dev/cordon-message}");
    EXPECT_NE(why.find("the sole suspect of two stalls in a row of TPUJob " + n + "/" + name +
                       " (stalls 1 and 2)"),
              std::string::npos)
        << why;
    EXPECT_TRUE(Eventually(
        [&] {
          events = JobEvents(n, name);
          return !EventsWith(events, "NodeCordoned", node_).empty();
        },
        seconds(30)))
        << DescribeEvents(events);
    // Off the only TPU node: the re-issued attempt waits for capacity.
    EXPECT_TRUE(JobFieldBecomes(n, name, "{.status.phase}", "Queued", seconds(30)))
        << JobJson(n, name).dump(2);
    return;
  }
  // The cap holds: the cordon is refused and said so; the node stays schedulable, and the
  // re-issued job runs on it again. The program hangs there as before, past no step of the
  // previous stall: the stalls in a row go on across the re-issue, and the third (maxStalls 3)
  // fails the job.
  EXPECT_TRUE(Eventually(
      [&] {
        events = JobEvents(n, name);
        return !EventsWith(events, "NodeNotCordoned",
                           "node " + node_ + " not cordoned: 1 nodes already cordoned (cap 1 of ")
                    .empty();
      },
      seconds(30)))
      << DescribeEvents(events) << OperatorLogs();
  EXPECT_EQ(NodeField(node_, "{.spec.unschedulable}"), "");
  EXPECT_EQ(NodeField(node_, "{.metadata.annotations.tpujob\\.dev/cordon-reason}"), "");
  ASSERT_TRUE(JobFieldBecomes(n, name, "{.status.phase}", "Running", seconds(120)))
      << JobJson(n, name).dump(2) << DescribePods(n, selector) << OperatorLogs();
  EXPECT_EQ(NodeOf(n, worker), node_);
  ASSERT_TRUE(JobFieldBecomes(n, name, "{.status.phase}", "Failed", seconds(120)))
      << JobJson(n, name).dump(2) << DescribePods(n, selector) << OperatorLogs();
  EXPECT_EQ(JobField(n, name, "{.status.stalls}"), "3");
  EXPECT_EQ(JobField(n, name, "{.status.attempt}"), "2");
  EXPECT_EQ(JobField(n, name, "{.status.conditions[?(@.type==\"Failed\")].reason}"), "Stalled");
  EXPECT_NE(JobField(n, name, "{.status.conditions[?(@.type==\"Failed\")].message}")
                .find("3 stalls in a row with no progress in between (maxStalls 3)"),
            std::string::npos);
  EXPECT_EQ(NodeField(node_, "{.spec.unschedulable}"), "");
}

TEST_F(RealStallE2E, TheSameSoleSuspectTwiceIsCordonedWithReasonStalledNamingBothStalls) {
  RunSuspectTwice(false);
}

TEST_F(RealStallE2E, TheSameSoleSuspectTwiceIsNotCordonedPastTheCap) { RunSuspectTwice(true); }

// A program whose output is hard to pass on: ~50 MB in all, stdout and stderr written in turns,
// lines split over several writes while the other stream writes (partial lines), 1 MB lines,
// lines ended by \r, empty lines, bytes of every value but \n and \r inside lines, and lines the
// supervisor's pattern matches. Never "\r\n": the container runtime logs that line ending as
// "\n" (with or without the supervisor), and the test compares what it logged with the program's
// own hash of what it wrote. Deterministic (a seeded generator). It ends each stream with
// "END-OF-STREAM <bytes before> <sha256 before>\n" and then sleeps, so that its pod and the
// container runtime's log file stay until the test has read them (a finished job's pods are
// deleted, and their logs with them).
constexpr const char* kFirehose = R"PY(import hashlib, os, random, time
rng = random.Random(20261205)
seen = {1: hashlib.sha256(), 2: hashlib.sha256()}
size = {1: 0, 2: 0}
def write(fd, data):
    seen[fd].update(data)
    size[fd] += len(data)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
pool = rng.randbytes(1 << 21).translate(bytes(b if b not in (10, 13) else 65 for b in range(256)))
def body(n):
    start = rng.randrange(0, len(pool) - n)
    return pool[start:start + n]
step = 0
big = {1: 0, 2: 0}
while size[1] + size[2] < 50 * 1000 * 1000:
    fd = rng.choice((1, 2))
    kind = rng.random()
    if kind < 0.02 and big[fd] < 12:
        big[fd] += 1
        write(fd, body(1 << 20) + b"\n")
    elif kind < 0.30:
        # One line in 2-6 writes, the other stream writing between them.
        line = body(rng.randrange(1, 200000)) + b"\n"
        cuts = sorted(rng.randrange(1, len(line)) for _ in range(rng.randrange(1, 6)))
        last = 0
        for cut in cuts + [len(line)]:
            write(fd, line[last:cut])
            last = cut
            if rng.random() < 0.5:
                write(3 - fd, body(rng.randrange(0, 3000)) + b"\n")
    elif kind < 0.40:
        write(fd, b"".join(b"progress %d%%\r" % p for p in range(0, 100, rng.randrange(1, 20))) + b"done\n")
    elif kind < 0.45:
        write(fd, b"\n" * rng.randrange(1, 5))
    elif kind < 0.60:
        step += 1
        write(fd, b"completed step: %d, seconds: 0.100, loss: 0.5\n" % step)
    else:
        write(fd, b"".join(body(rng.randrange(0, 300)) + b"\n" for _ in range(rng.randrange(1, 200))))
for fd in (1, 2):
    os.write(fd, b"END-OF-STREAM %d %s\n" % (size[fd], seen[fd].hexdigest().encode()))
while True:
    time.sleep(3600)
)PY";

// The container runtime's log of a container, whole: the kubelet rotates 0.log past its size
// limit (renaming it 0.log.<time>, gzipping the older ones), so the files in their order, written
// to `out`. False when a rotation happened while they were read (the listing changed).
bool ReadCriLog(const std::string& dir, const std::string& out) {
  return RunCommand("cd " + dir + " && a=$(ls) && { for f in $(ls 0.log.* 2>/dev/null | sort); " +
                        "do case $f in *.gz) zcat -- \"$f\" ;; *) cat -- \"$f\" ;; esac; done; " +
                        "cat 0.log; } > " + out + " && b=$(ls) && [ \"$a\" = \"$b\" ]",
                    false)
             .exit_code == 0;
}

// A stream as the container runtime logged it: the contents of its records in the CRI log file
// (RFC3339NANO timestamp, stream, P for a part of a line or F for its end, the bytes), each full
// record's line ended again by \n.
std::string StreamOfCriLog(const std::string& file, const std::string& stream) {
  std::ifstream in(file, std::ios::binary);
  std::string out;
  for (std::string record; std::getline(in, record);) {
    const auto a = record.find(' ');
    const auto b = a == std::string::npos ? a : record.find(' ', a + 1);
    const auto c = b == std::string::npos ? b : record.find(' ', b + 1);
    if (c == std::string::npos) {
      // A record of a line that is only its tag ("... stdout F"): an empty line.
      if (b != std::string::npos && record.substr(a + 1, b - a - 1) == stream &&
          record.substr(b + 1) == "F") {
        out += "\n";
      }
      continue;
    }
    if (record.substr(a + 1, b - a - 1) != stream) continue;
    out.append(record, c + 1, std::string::npos);
    if (record.substr(b + 1, c - b - 1) == "F") out += "\n";
  }
  return out;
}

// The supervisor passes the program's stdout and stderr on byte for byte: what the node's
// container runtime logs of each stream is the same with it (progress set) as without it.
// Per stream, not the interleaving of the two: the runtime reads stdout and stderr with one reader
// each and writes whichever has data first, so even without the supervisor the order of the
// records of the two streams in the file varies from run to run (as it does for a program's two
// streams on a terminal); within a stream the order is the bytes' own.
// The supervisor's own log lines, which it writes on stderr before the program's first byte, are
// taken off the front of the supervised stderr first: they are its, not the program's.
TEST_F(RealStallE2E, TheSupervisorPassesStdoutAndStderrOnByteForByte) {
  TestNamespace ns("real-bytes");
  const std::string n = ns.name();
  std::map<std::string, std::map<std::string, std::string>> streams;  // run -> stream -> bytes
  for (const std::string run : {"plain", "supervised"}) {
    SCOPED_TRACE(run);
    const std::string name = "bytes-" + run;
    const std::string dir = MakeCheckpointDir(name);
    std::ofstream(dir + "/firehose.py") << kFirehose;
    const std::string progress =
        run == "supervised"
            ? ", progress: {logPattern: 'completed step: (\\d+)', stallSeconds: 3600}"
            : "";
    const std::string yaml =
        Header(name, "{maxJobRetries: 0, preflight: {enabled: false}" + progress + "}") +
        Replica("Worker", "[python3, /ckpt/firehose.py]", {}, dir);
    ASSERT_EQ(ApplyYaml(n, yaml).exit_code, 0) << yaml;
    const std::string pod = name + "-worker-0";
    ASSERT_TRUE(JobFieldBecomes(n, name, "{.status.phase}", "Running", seconds(120)))
        << DescribePods(n, "tpujob.dev/job-name=" + name) << OperatorLogs();
    const std::string command = Get(n, "pod " + pod, "{.spec.containers[0].command[0]}");
    EXPECT_EQ(command.find("tpujob-supervise") != std::string::npos, run == "supervised")
        << command;
    const std::string uid = Get(n, "pod " + pod, "{.metadata.uid}");
    const std::string logs =
        ClusterDir() + "/node/pod-logs/" + n + "_" + pod + "_" + uid + "/trainer";
    const std::string file = dir + "/cri.log";
    // Until both streams' last lines are in the log.
    std::map<std::string, std::string> logged;
    const bool ended = Eventually(
        [&] {
          if (!ReadCriLog(logs, file)) return false;
          for (const std::string stream : {"stdout", "stderr"}) {
            logged[stream] = StreamOfCriLog(file, stream);
            if (logged[stream].find("END-OF-STREAM ") == std::string::npos) return false;
          }
          return true;
        },
        seconds(120), std::chrono::milliseconds(1000));
    ASSERT_TRUE(ended) << RunCommand("ls -la " + logs, false).output
                       << DescribePods(n, "tpujob.dev/job-name=" + name);
    for (const std::string stream : {"stdout", "stderr"}) {
      std::string bytes = std::move(logged[stream]);
      if (run == "supervised" && stream == "stderr") {
        // The supervisor's own log lines (supervisor/main.cpp: "Log lines go to stderr") come
        // first, whole lines written before it passes on the first byte of the program's.
        std::string own;
        while (bytes.starts_with("tpujob-supervise: ")) {
          const auto eol = bytes.find('\n');
          own += bytes.substr(0, eol + 1);
          bytes.erase(0, eol + 1);
        }
        std::cout << "== the supervisor's own lines on stderr:\n" << own;
        EXPECT_NE(own.find("tpujob-supervise: started the program"), std::string::npos) << own;
      }
      // The program's own count and hash of what it wrote before its last line.
      const auto end = bytes.rfind("END-OF-STREAM ");
      ASSERT_NE(end, std::string::npos) << stream;
      std::istringstream last(bytes.substr(end + 14));
      size_t count = 0;
      std::string sha;
      last >> count >> sha;
      EXPECT_EQ(end, count) << stream;
      const std::string copy = dir + "/" + stream;
      std::ofstream(copy, std::ios::binary) << bytes.substr(0, end);
      EXPECT_EQ(Trim(RunCommand("sha256sum < " + copy + " | cut -d' ' -f1", false).output), sha)
          << stream << " of the " << run << " run is not what the program wrote";
      std::cout << "== " << run << " " << stream << ": " << bytes.size() << " bytes\n";
      streams[run][stream] = std::move(bytes);
    }
    ASSERT_EQ(Kubectl("delete tpujob " + name + " -n " + n + " --wait").exit_code, 0);
    ASSERT_TRUE(Eventually([&] { return JobPods(n, name).empty(); }, seconds(60)));
  }
  for (const std::string stream : {"stdout", "stderr"}) {
    const std::string& plain = streams["plain"][stream];
    const std::string& supervised = streams["supervised"][stream];
    EXPECT_GT(plain.size(), 20u * 1000 * 1000) << stream;
    size_t differ = 0;
    while (differ < plain.size() && differ < supervised.size() &&
           plain[differ] == supervised[differ]) {
      ++differ;
    }
    EXPECT_TRUE(plain == supervised)
        << stream << ": " << plain.size() << " bytes without the supervisor, " << supervised.size()
        << " with it; the first difference at byte " << differ;
  }
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
