// Stall detection (spec.faultTolerance.progress) end to end on the control plane: what the
// operator does with a supervisor's stalled report. KWOK runs no container, so the test plays the
// kubelet and each pod's tpujob-supervise (supervisor_sim.h): a stalled program is a container
// that ended with the stall code and the supervisor's report as its termination message. The
// supervisor's own detection is tested against real programs in supervisor_tests.

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cache/objects.h"
#include "e2e_env.h"
#include "operator_env.h"
#include "supervisor/protocol.h"
#include "supervisor_sim.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

using nlohmann::json;
using std::chrono::seconds;

std::string Scrape(const OperatorProcess& op) {
  return RunCommand("curl -sf http://127.0.0.1:" + std::to_string(op.metrics_port()) + "/metrics",
                    false)
      .output;
}

::testing::AssertionResult MetricShows(const OperatorProcess& op, const std::string& sample) {
  std::string metrics;
  if (Eventually(
          [&] { return (metrics = Scrape(op)).find("\n" + sample + "\n") != std::string::npos; },
          seconds(10))) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no \"" << sample << "\" in /metrics:\n" << metrics;
}

// A stall that ended at or before status.progress.stallsActedUntil (whole seconds) was acted on.
// A new stall comes at least startupSeconds (>= 1 s) after the pods the last one recreated, so
// on a cluster it always ends later; a test that plays the supervisor awaits the next second.
::testing::AssertionResult PastTheLastStall(const std::string& ns, const std::string& job) {
  const std::string acted = JobField(ns, job, "{.status.progress.stallsActedUntil}");
  const std::optional<WallTime> until = cache::ParseRfc3339(acted);
  if (!until) return ::testing::AssertionFailure() << "no stallsActedUntil: \"" << acted << "\"";
  if (Eventually([&] { return std::chrono::system_clock::now() >= *until + seconds(1); },
                 seconds(5))) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "the clock did not pass " << acted;
}

class StallE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { InstallCrd(); }

  void SetUp() override {
    static int counter = 0;
    prefix_ = "st" + std::to_string(::getpid() % 10000) + "-" + std::to_string(++counter);
    accelerator_ = "tpu-" + prefix_;
  }
  void TearDown() override {
    for (const std::string& set : node_sets_) DeleteTpuNodes(set);
  }

  void CreatePools(int pools, int hosts, const std::string& topology) {
    for (int p = 0; p < pools; ++p) {
      const std::string set = prefix_ + "-" + std::string(1, static_cast<char>('a' + p));
      node_sets_.push_back(set);
      CreateTpuNodes(set, hosts, accelerator_, topology, "pool-" + set);
    }
  }

  // A single-slice job of `hosts` workers whose program's progress is watched.
  std::string Job(const std::string& name, int hosts, const std::string& topology,
                  const std::string& fault_tolerance) const {
    return "apiVersion: tpujob.dev/v1alpha1\nkind: TPUJob\nmetadata:\n  name: " + name +
           "\nspec:\n  tpu: {accelerator: " + accelerator_ + ", topology: " + topology +
           ", chipsPerWorker: 4}\n  faultTolerance: {" + fault_tolerance +
           "}\n  replicaSpecs:\n    Worker:\n      replicas: " + std::to_string(hosts) +
           "\n      template:\n        spec:\n          containers:\n"
           "          - {name: trainer, image: busybox, command: [sh, -c, 'train']}\n";
  }

  std::string prefix_;
  std::string accelerator_;
  std::vector<std::string> node_sets_;

 public:
  std::string JobOf(const std::string& name, int hosts, const std::string& topology,
                    const std::string& fault_tolerance) const {
    return Job(name, hosts, topology, fault_tolerance);
  }
};

// A stall checks every node of the job, then restarts the gang in place: counted as a stall,
// not against maxWorkerRestarts, visible in the condition, the Events, the metrics and goodput.
TEST_F(StallE2E, InPlaceStallChecksEveryNodeThenRestartsTheGangInPlace) {
  CreatePools(1, 4, "2x8");
  TestNamespace ns("stall-ip");
  const std::string n = ns.name();
  ASSERT_EQ(ApplyYaml(n, Job("st", 4, "2x8",
                             "restart: InPlace, faultAttributionSeconds: 3, progress: {logPattern: "
                             "'completed step: (\\d+)', stallSeconds: 60}"))
                .exit_code,
            0);
  SupervisorSim sim(n, "st");
  OperatorProcess op({"--namespace", n});
  ASSERT_TRUE(JobFieldBecomes(n, "st", "{.status.phase}", "Running", seconds(60))) << op.Log();

  // The supervisor runs the program with the progress settings.
  const json pod = json::parse(Kubectl("get pod st-worker-1 -n " + n + " -o json", false).output);
  EXPECT_EQ(pod["spec"]["containers"][0]["command"],
            json::array({"/tpujob/bin/tpujob-supervise", "--", "sh", "-c", "train"}));
  std::map<std::string, std::string> env;
  for (const json& e : pod["spec"]["containers"][0]["env"]) {
    env[e.value("name", "")] = e.value("value", "");
  }
  EXPECT_EQ(env[supervisor::kProgressLogPatternEnv], "completed step: (\\d+)");
  EXPECT_EQ(env[supervisor::kProgressStallSecondsEnv], "60");
  EXPECT_EQ(env[supervisor::kProgressStartupSecondsEnv], "1800");
  EXPECT_EQ(env.count(supervisor::kModeEnv), 0u);  // generations: the in-place default

  ASSERT_TRUE(sim.ProgramStalls("st-worker-1", 41, seconds(60)));
  // Every pod is asked for a hardware round on its node.
  std::string checks;
  EXPECT_TRUE(Eventually(
      [&] {
        checks = Get(n, "pods -l " + std::string(cache::kJobNameLabel) + "=st",
                     "{range .items[*]}{.metadata.annotations.tpujob\\.dev/hardware-check} {end}");
        return Trim(checks) == "1/1 1/1 1/1 1/1";
      },
      seconds(20)))
      << checks << "\n"
      << op.Log();
  // Past the attribution window, no node faulty: the gang restarts in place.
  ASSERT_TRUE(JobFieldBecomes(n, "st", "{.status.stalls}", "1", seconds(30))) << op.Log();
  EXPECT_EQ(JobField(n, "st", "{.status.inPlace.generation}"), "2");
  EXPECT_EQ(JobField(n, "st", "{.status.faults[*].kind}/{.status.faults[*].action}"),
            "Stalled/RestartInPlace");
  EXPECT_EQ(JobField(n, "st", "{.status.progress.step}"), "41");
  EXPECT_EQ(JobField(n, "st", "{.status.workerRestarts}"), "");
  EXPECT_EQ(JobField(n, "st", "{.status.conditions[?(@.type==\"Stalled\")].status}"), "True");
  EXPECT_TRUE(MetricShows(op, "tpujob_job_stalls_total{job_namespace=\"" + n + "\"} 1"));
  EXPECT_TRUE(MetricShows(op, "tpujob_job_restarts_total{reason=\"Stalled\"} 1"));

  // The supervisors stop the old generation; the barrier opens; the job runs again.
  EXPECT_TRUE(Eventually(
      [&] {
        sim.Step();
        return JobField(n, "st", "{.status.inPlace.barrier}") == "Open";
      },
      seconds(60), std::chrono::milliseconds(200)))
      << op.Log();
  ASSERT_TRUE(JobFieldBecomes(n, "st", "{.status.phase}", "Running", seconds(60))) << op.Log();
  EXPECT_EQ(JobField(n, "st",
                     "{.status.conditions[?(@.type==\"Stalled\")].status}/"
                     "{.status.conditions[?(@.type==\"Stalled\")].reason}"),
            "False/Restarted");
  const auto events = JobEvents(n, "st");
  EXPECT_EQ(EventsWith(events, "Stalled",
                       "worker-1 (pod st-worker-1) made no progress for 60s "
                       "after step 41")
                .size(),
            1u)
      << DescribeEvents(events);
  EXPECT_EQ(EventsWith(events, "StallRestart", "restarting the program in place").size(), 1u)
      << DescribeEvents(events);
  // Goodput: the stall's time is its own cause.
  EXPECT_NE(JobField(n, "st", "{.status.goodput.lostSeconds.stalled}"), "");
}

// A hang on a node the hardware check then finds faulty is the hardware's: the node is
// cordoned and the job re-issued, not restarted as a stall.
TEST_F(StallE2E, AFaultyNodeWithinTheWindowMakesTheStallAHardwareFault) {
  CreatePools(2, 2, "2x4");
  TestNamespace ns("stall-hw");
  const std::string n = ns.name();
  ASSERT_EQ(ApplyYaml(n, Job("hw", 2, "2x4",
                             "restart: InPlace, maxJobRetries: 1, faultAttributionSeconds: 30, "
                             "progress: {logPattern: 'step (\\d+)'}"))
                .exit_code,
            0);
  SupervisorSim sim(n, "hw");
  OperatorProcess op({"--namespace", n});
  ASSERT_TRUE(JobFieldBecomes(n, "hw", "{.status.phase}", "Running", seconds(60))) << op.Log();
  const std::string node = NodeOf(n, "hw-worker-1");
  ASSERT_TRUE(sim.ProgramStalls("hw-worker-0", 7, seconds(600)));
  ASSERT_TRUE(JobFieldBecomes(n, "hw", "{.status.conditions[?(@.type==\"Stalled\")].status}",
                              "True", seconds(20)))
      << op.Log();
  // The device plugin's health check marks worker 1's chip unhealthy meanwhile.
  ASSERT_EQ(SetNodeCondition(node, "TPUUnhealthy", "True", "ChipHang", "chip 2 stopped").exit_code,
            0);
  ASSERT_TRUE(JobFieldBecomes(n, "hw", "{.status.attempt}", "2", seconds(30))) << op.Log();
  EXPECT_EQ(JobField(n, "hw", "{.status.stalls}"), "");  // no stall counted
  EXPECT_EQ(JobField(n, "hw", "{.status.faults[-1:].kind} {.status.faults[-1:].node}"),
            "NodeUnhealthy " + node);
  EXPECT_TRUE(
      Eventually([&] { return NodeField(node, "{.spec.unschedulable}") == "true"; }, seconds(20)))
      << op.Log();
}

// Under Recreate every pod is created again; maxStalls in a row with no progress in between
// fail the job with reason Stalled.
TEST_F(StallE2E, RecreateRestartsEveryPodThenFailsAfterMaxStallsInARow) {
  CreatePools(1, 2, "2x4");
  TestNamespace ns("stall-rc");
  const std::string n = ns.name();
  ASSERT_EQ(ApplyYaml(n, Job("rc", 2, "2x4",
                             "faultAttributionSeconds: 0, progress: {logPattern: 'step (\\d+)', "
                             "maxStalls: 2}"))
                .exit_code,
            0);
  OperatorProcess op({"--namespace", n});
  ASSERT_TRUE(JobFieldBecomes(n, "rc", "{.status.phase}", "Running", seconds(60))) << op.Log();
  const json pod = json::parse(Kubectl("get pod rc-worker-0 -n " + n + " -o json", false).output);
  EXPECT_NE(pod["spec"].value("restartPolicy", ""), "OnFailure");
  bool once = false;
  for (const json& e : pod["spec"]["containers"][0]["env"]) {
    once |= e.value("name", "") == supervisor::kModeEnv &&
            e.value("value", "") == supervisor::kModeOnce;
  }
  EXPECT_TRUE(once) << pod["spec"]["containers"][0].dump();
  const std::string uid0 = PodUid(n, "rc-worker-0");
  const std::string uid1 = PodUid(n, "rc-worker-1");

  ASSERT_EQ(TerminatePod(n, "rc-worker-1", supervisor::kStalledExitCode, "Error",
                         StalledReport(0, 10, seconds(90)).dump())
                .exit_code,
            0);
  ASSERT_TRUE(JobFieldBecomes(n, "rc", "{.status.stalls}", "1", seconds(30))) << op.Log();
  // Both pods are created again, then run.
  EXPECT_TRUE(Eventually(
      [&] {
        return PodUid(n, "rc-worker-0") != uid0 && PodUid(n, "rc-worker-1") != uid1 &&
               !PodUid(n, "rc-worker-0").empty() && !PodUid(n, "rc-worker-1").empty();
      },
      seconds(60)))
      << op.Log();
  ASSERT_TRUE(JobFieldBecomes(n, "rc", "{.status.phase}", "Running", seconds(60))) << op.Log();
  EXPECT_EQ(JobField(n, "rc", "{.status.faults[*].action}"), "RestartAllWorkers");

  // Stalled again at the same step: the second in a row of maxStalls 2.
  ASSERT_TRUE(PastTheLastStall(n, "rc"));
  ASSERT_EQ(TerminatePod(n, "rc-worker-0", supervisor::kStalledExitCode, "Error",
                         StalledReport(0, 10, seconds(90)).dump())
                .exit_code,
            0);
  ASSERT_TRUE(JobFieldBecomes(n, "rc", "{.status.phase}", "Failed", seconds(30))) << op.Log();
  EXPECT_EQ(JobField(n, "rc", "{.status.conditions[?(@.type==\"Failed\")].reason}"), "Stalled");
  EXPECT_NE(JobField(n, "rc", "{.status.conditions[?(@.type==\"Failed\")].message}")
                .find("2 stalls in a row with no progress in between (maxStalls 2)"),
            std::string::npos);
  EXPECT_EQ(JobField(n, "rc", "{.status.stalls}"), "2");
  EXPECT_TRUE(MetricShows(op, "tpujob_job_failures_total{reason=\"Stalled\"} 1"));
}

// Drives job `name` (3 workers over 2x6, already Running) through two stalls in a row with the
// same sole suspect: every worker stalls, the one on the suspect node one step behind (the job's
// faultAttributionSeconds must leave time for all three reports). Returns
// the suspect node once the second stall re-issued the job ("" on failure).
// `on_node`: the worker on that node is the one behind (default: worker 1's node).
std::string SameSuspectTwice(const std::string& n, const std::string& name,
                             const OperatorProcess& op, const std::string& on_node = "") {
  std::string first_behind = name + "-worker-1";
  for (int i = 0; i < 3 && !on_node.empty(); ++i) {
    const std::string pod = name + "-worker-" + std::to_string(i);
    if (NodeOf(n, pod) == on_node) first_behind = pod;
  }
  const std::string suspect = NodeOf(n, first_behind);
  const auto stall = [&](const std::string& behind) {
    bool ok = true;
    for (int i = 0; i < 3; ++i) {
      const std::string pod = name + "-worker-" + std::to_string(i);
      ok = ok && TerminatePod(n, pod, supervisor::kStalledExitCode, "Error",
                              StalledReport(0, pod == behind ? 19 : 20, seconds(90)).dump())
                         .exit_code == 0;
    }
    return ok;
  };
  EXPECT_TRUE(stall(first_behind));
  if (!JobFieldBecomes(n, name, "{.status.progress.suspectNode}", suspect, seconds(30))) {
    ADD_FAILURE() << op.Log();
    return "";
  }
  if (!JobFieldBecomes(n, name, "{.status.phase}", "Running", seconds(60))) {
    ADD_FAILURE() << op.Log();
    return "";
  }
  // The pod now on the suspect node falls behind again.
  std::string behind;
  for (int i = 0; i < 3; ++i) {
    const std::string pod = name + "-worker-" + std::to_string(i);
    if (NodeOf(n, pod) == suspect) behind = pod;
  }
  // Three workers in the job's pool of three nodes: one is back on the suspect node.
  if (behind.empty()) {
    ADD_FAILURE() << "no worker on " << suspect;
    return "";
  }
  EXPECT_TRUE(PastTheLastStall(n, name));
  EXPECT_TRUE(stall(behind));
  if (!JobFieldBecomes(n, name, "{.status.attempt}", "2", seconds(30))) {
    ADD_FAILURE() << op.Log();
    return "";
  }
  return suspect;
}

// The same node alone behind the others in two stalls in a row is cordoned, naming both, and
// the job re-issued off it.
TEST_F(StallE2E, TheSameSoleSuspectNodeTwiceIsCordoned) {
  CreatePools(2, 3, "2x6");
  TestNamespace ns("stall-sus");
  const std::string n = ns.name();
  ASSERT_EQ(ApplyYaml(n, Job("su", 3, "2x6",
                             "maxJobRetries: 1, faultAttributionSeconds: 3, progress: "
                             "{logPattern: 'step (\\d+)'}"))
                .exit_code,
            0);
  OperatorProcess op({"--namespace", n});
  ASSERT_TRUE(JobFieldBecomes(n, "su", "{.status.phase}", "Running", seconds(60))) << op.Log();
  const std::string suspect = SameSuspectTwice(n, "su", op);
  ASSERT_FALSE(suspect.empty());
  EXPECT_TRUE(Eventually([&] { return NodeField(suspect, "{.spec.unschedulable}") == "true"; },
                         seconds(20)))
      << op.Log();
  EXPECT_EQ(JobField(n, "su", "{.status.faults[-1:].kind} {.status.faults[-1:].node}"),
            "Stalled " + suspect);
  const auto events = JobEvents(n, "su");
  EXPECT_FALSE(
      EventsWith(events, "Reissued", "was the sole suspect of the previous stall too").empty())
      << DescribeEvents(events);
}

// A person uncordons a node the operator cordoned for one job's stalls: another job's stalls
// with the same suspect there are new evidence, and cordon it again (each job's evidence names
// the job; when it did not, every job's second stall was "stall 1/2", and the cordon was refused
// as "uncordoned by hand after the same evidence").
TEST_F(StallE2E, ANodeUncordonedAfterOneJobsStallsIsCordonedForAnothersStalls) {
  CreatePools(2, 3, "2x6");
  TestNamespace ns("stall-again");
  const std::string n = ns.name();
  OperatorProcess op({"--namespace", n});
  const std::string ft =
      "maxJobRetries: 1, faultAttributionSeconds: 3, progress: {logPattern: 'step (\\d+)'}";
  ASSERT_EQ(ApplyYaml(n, Job("ua", 3, "2x6", ft)).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "ua", "{.status.phase}", "Running", seconds(60))) << op.Log();
  const std::string node = SameSuspectTwice(n, "ua", op);
  ASSERT_FALSE(node.empty());
  ASSERT_TRUE(
      Eventually([&] { return NodeField(node, "{.spec.unschedulable}") == "true"; }, seconds(20)))
      << op.Log();
  // The re-issued job runs on the other pool; a person takes the node back (the operator's
  // annotations stay).
  ASSERT_TRUE(JobFieldBecomes(n, "ua", "{.status.phase}", "Running", seconds(60))) << op.Log();
  ASSERT_EQ(Kubectl("uncordon " + node).exit_code, 0);
  ASSERT_EQ(Kubectl("taint node " + node + " tpujob.dev/faulty-").exit_code, 0);
  ASSERT_EQ(NodeField(node, "{.metadata.annotations.tpujob\\.dev/cordon-reason}"), "Stalled");

  // Another job, on the node's pool, behind there twice.
  ASSERT_EQ(ApplyYaml(n, Job("ub", 3, "2x6", ft)).exit_code, 0);
  ASSERT_TRUE(JobFieldBecomes(n, "ub", "{.status.phase}", "Running", seconds(60))) << op.Log();
  ASSERT_EQ(SameSuspectTwice(n, "ub", op, node), node);
  std::vector<EventRecord> events;
  EXPECT_TRUE(Eventually(
      [&] {
        events = JobEvents(n, "ub");
        return !EventsWith(events, "NodeCordoned", node).empty();
      },
      seconds(20)))
      << DescribeEvents(events) << op.Log();
  EXPECT_EQ(NodeField(node, "{.spec.unschedulable}"), "true");
  EXPECT_NE(NodeField(node, "{.metadata.annotations.tpujob\\.dev/cordon-job}"), "");
  EXPECT_NE(NodeField(node, "{.metadata.annotations.tpujob\\.dev/cordon-message}")
                .find("TPUJob " + n + "/ub (stalls 1 and 2)"),
            std::string::npos)
      << NodeField(node, "{.metadata.annotations.tpujob\\.dev/cordon-message}");
}

// A suspect's cordon goes through the Cordoner's limits like any other. Two jobs, each with the
// same sole suspect twice: the first one's node is cordoned, the second one's is refused by the
// limit `operator_args` set (the Event NodeNotCordoned says which, `refusal`), and that job is
// re-issued all the same. A stall cordon that bypassed the limits would cordon both nodes.
void SuspectCordonsWithinLimits(StallE2E& test, const std::vector<std::string>& operator_args,
                                const std::string& refusal) {
  TestNamespace ns("stall-lim");
  const std::string n = ns.name();
  // A cordon state of its own: the rate bucket and the breaker's memory of another test's
  // operator (the same test process) must not count here.
  std::vector<std::string> args = {"--namespace", n, "--cordon-state-configmap=cordon-state-" + n};
  args.insert(args.end(), operator_args.begin(), operator_args.end());
  OperatorProcess op(args);
  std::vector<std::string> suspects;
  for (const std::string name : {"la", "lb"}) {
    SCOPED_TRACE(name);
    ASSERT_EQ(ApplyYaml(n, test.JobOf(name, 3, "2x6",
                                      "maxJobRetries: 1, faultAttributionSeconds: 3, progress: "
                                      "{logPattern: 'step (\\d+)'}"))
                  .exit_code,
              0);
    ASSERT_TRUE(JobFieldBecomes(n, name, "{.status.phase}", "Running", seconds(60))) << op.Log();
    suspects.push_back(SameSuspectTwice(n, name, op));
    ASSERT_FALSE(suspects.back().empty());
  }
  // The first: cordoned with reason Stalled.
  EXPECT_TRUE(Eventually([&] { return NodeField(suspects[0], "{.spec.unschedulable}") == "true"; },
                         seconds(20)))
      << op.Log();
  EXPECT_EQ(NodeField(suspects[0], "{.metadata.annotations.tpujob\\.dev/cordon-reason}"),
            "Stalled");
  // The second: held back by the limit, said so on the job; the node stays schedulable.
  std::vector<EventRecord> events;
  EXPECT_TRUE(Eventually(
      [&] {
        events = JobEvents(n, "lb");
        return !EventsWith(events, "NodeNotCordoned",
                           "node " + suspects[1] + " not cordoned: " + refusal)
                    .empty();
      },
      seconds(20)))
      << DescribeEvents(events) << op.Log();
  EXPECT_EQ(NodeField(suspects[1], "{.spec.unschedulable}"), "");
  EXPECT_EQ(NodeField(suspects[1], "{.metadata.annotations.tpujob\\.dev/cordon-reason}"), "");
  EXPECT_EQ(JobField(n, "lb", "{.status.faults[-1:].kind} {.status.faults[-1:].node}"),
            "Stalled " + suspects[1]);
  const std::string verdict = refusal.find("cap") != std::string::npos       ? "CapReached"
                              : refusal.find("breaker") != std::string::npos ? "Systemic"
                                                                             : "RateLimited";
  EXPECT_NE(op.Log().find("verdict=" + verdict), std::string::npos) << op.Log();
}

// The cap: one node held cordoned at most (--max-cordoned-nodes 1).
TEST_F(StallE2E, ASuspectCordonIsRefusedAtTheCordonCap) {
  CreatePools(3, 3, "2x6");
  SuspectCordonsWithinLimits(*this, {"--max-cordoned-nodes", "1", "--cordon-rate", "0"},
                             "1 nodes already cordoned (cap 1 of");
}

// The rate: one new cordon, then none for minutes (--cordon-rate 0.1: a burst of 1, a token
// every 10 minutes).
TEST_F(StallE2E, ASuspectCordonIsRefusedByTheCordonRateLimit) {
  CreatePools(3, 3, "2x6");
  SuspectCordonsWithinLimits(
      *this, {"--max-cordoned-nodes", "10", "--max-cordoned-fraction", "1", "--cordon-rate", "0.1"},
      "more than 0.1 new cordons per minute");
}

// The breaker: sole suspects of stalls on two distinct nodes within its window (--cordon-breaker-
// nodes 2) point at the programs, not at each node: the second is not cordoned.
TEST_F(StallE2E, ASuspectCordonIsRefusedByTheCircuitBreaker) {
  CreatePools(3, 3, "2x6");
  SuspectCordonsWithinLimits(*this,
                             {"--max-cordoned-nodes", "10", "--max-cordoned-fraction", "1",
                              "--cordon-rate", "0", "--cordon-breaker-nodes", "2"},
                             "2 nodes were the sole suspect of a job's stalls within 10m, more "
                             "likely the programs or something the nodes share than each node's "
                             "hardware (circuit breaker)");
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
