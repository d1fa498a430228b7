// Fault attribution (policy/lifecycle.h): a worker's permanent exit waits up to
// faultAttributionSeconds for its node's verdict; restarts go back to the node they ran on; the
// job's own pre-flight mistakes are refused before any pod exists.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "policy/job_spec.h"
#include "policy/lifecycle.h"
#include "policy_fixtures.h"

namespace tpujob::policy {
namespace TPUJOB_TEST_NS {

using namespace fixtures;
using std::chrono::seconds;
constexpr ReplicaType kWorker = ReplicaType::kWorker;

PodSim AttributionJob(int64_t window = 30, int workers = 2) {
  Json spec = SpecJson(workers);
  spec["faultTolerance"] = {{"maxJobRetries", 2}, {"faultAttributionSeconds", window}};
  return PodSim(spec);
}

void RunJob(PodSim& sim) {
  ASSERT_EQ(sim.Step().status.phase, Phase::kQueued);
  ASSERT_EQ(sim.Step().status.phase, Phase::kStarting);
  sim.AllReady();
  ASSERT_EQ(sim.Step().status.phase, Phase::kRunning);
}

// The main container of `pod` exited with `code` at `finished` (as the kubelet reports it).
void ExitAt(cache::PodInfo& pod, int32_t code, WallTime finished, std::string_view reason = "") {
  SetExited(pod, code, reason);
  pod.containers.front().finished_at = finished;
}

Plan DecideWith(PodSim& sim, const Nodes& nodes, std::vector<std::string> cordoned = {}) {
  LifecycleInput in = sim.Input();
  in.node_health = nodes.Fn();
  in.node_cordoned = [cordoned](std::string_view node) {
    return std::find(cordoned.begin(), cordoned.end(), node) != cordoned.end();
  };
  return Decide(in);
}

// The replica's template mounts nothing at /dev/shm (the fixtures' templates do).
void WithoutShm(Json& spec, const char* replica) {
  spec["replicaSpecs"][replica]["template"]["spec"]["containers"][0].erase("volumeMounts");
}

enum class Outcome { kHeld, kFailed, kReissuedCounted, kReissuedFree, kRestarted };

std::string_view Name(Outcome o) {
  switch (o) {
    case Outcome::kHeld:
      return "held";
    case Outcome::kFailed:
      return "failed";
    case Outcome::kReissuedCounted:
      return "re-issued, retry counted";
    case Outcome::kReissuedFree:
      return "re-issued, no retry used";
    case Outcome::kRestarted:
      return "restarted in place";
  }
  return "?";
}

Outcome Classify(const Plan& plan) {
  const JobStatus& s = plan.status;
  if (s.phase == Phase::kFailed) return Outcome::kFailed;
  if (s.attempt == 2)
    return s.job_retries == 1 ? Outcome::kReissuedCounted : Outcome::kReissuedFree;
  if (!s.worker_restarts.empty()) return Outcome::kRestarted;
  return Outcome::kHeld;
}

// Exit kinds × node verdicts × window elapsed or not, with a 30 s window and worker 1 exiting.
TEST(PolicyFaultAttributionTest, DecisionTable) {
  struct Case {
    const char* name;
    int32_t code;
    const char* reason;  // the container's termination reason
    NodeVerdict verdict;
    bool unreachable;
    int64_t seconds_after_exit;  // when the operator decides
    int64_t window;
    Outcome want;
  };
  constexpr auto H = NodeVerdict::kHealthy;
  constexpr auto U = NodeVerdict::kUnhealthy;
  constexpr auto M = NodeVerdict::kMaintenance;
  constexpr auto X = NodeVerdict::kMissing;
  const Case cases[] = {
      // A permanent exit on a healthy node: held inside the window, failed at its end.
      {"exit 1, healthy, in the window", 1, "Error", H, false, 5, 30, Outcome::kHeld},
      {"exit 1, healthy, 1 s before the end", 1, "Error", H, false, 29, 30, Outcome::kHeld},
      {"exit 1, healthy, window over", 1, "Error", H, false, 30, 30, Outcome::kFailed},
      {"exit 1, window 0", 1, "Error", H, false, 0, 0, Outcome::kFailed},
      {"SIGKILL 137, healthy, in the window", 137, "Error", H, false, 5, 30, Outcome::kHeld},
      {"OOMKilled 137: the kernel named the cause", 137, "OOMKilled", H, false, 0, 30,
       Outcome::kFailed},
      // The node found faulty in the window: the hardware's fault.
      {"exit 1, node unhealthy", 1, "Error", U, false, 5, 30, Outcome::kReissuedCounted},
      {"exit 1, node lost", 1, "Error", U, true, 5, 30, Outcome::kReissuedCounted},
      {"exit 1, node deleted", 1, "Error", X, false, 5, 30, Outcome::kReissuedCounted},
      {"exit 1, node unhealthy, window 0", 1, "Error", U, false, 0, 0, Outcome::kReissuedCounted},
      {"exit 1, node under maintenance", 1, "Error", M, false, 5, 30, Outcome::kReissuedFree},
      {"SIGKILL 137, node unhealthy", 137, "Error", U, false, 10, 30, Outcome::kReissuedCounted},
      // Retryable exits (143, and signals not listed as permanent) are never held.
      {"SIGTERM 143, healthy", 143, "Error", H, false, 0, 30, Outcome::kRestarted},
      {"SIGSEGV 139, healthy", 139, "Error", H, false, 0, 30, Outcome::kRestarted},
      {"SIGABRT 134, node unhealthy", 134, "Error", U, false, 0, 30, Outcome::kReissuedCounted},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    PodSim sim = AttributionJob(c.window);
    RunJob(sim);
    const WallTime exited = sim.now();
    ExitAt(sim.Worker(1), c.code, exited, c.reason);
    sim.Advance(seconds(c.seconds_after_exit));
    Nodes nodes;
    if (c.verdict != H) nodes.Set("node-1", c.verdict, "TPUUnhealthy", c.unreachable);
    const Plan plan = DecideWith(sim, nodes);
    EXPECT_EQ(Name(Classify(plan)), Name(c.want));
    // Only a failure that rests on the node not being found faulty in the window asks for the
    // node to be read from the API server before it is committed.
    const bool waited_failure =
        c.want == Outcome::kFailed && c.window > 0 && std::string_view(c.reason) != "OOMKilled";
    EXPECT_EQ(plan.confirm_nodes,
              waited_failure ? std::vector<std::string>{"node-1"} : std::vector<std::string>{});
    const JobStatus& s = plan.status;
    switch (c.want) {
      case Outcome::kHeld: {
        EXPECT_EQ(s.phase, Phase::kRunning) << "the phase changed while the verdict is due";
        EXPECT_TRUE(s.faults.empty());
        EXPECT_TRUE(plan.remove.empty()) << "nothing is deleted while the verdict is due";
        ASSERT_TRUE(plan.requeue_after.has_value());
        EXPECT_EQ(*plan.requeue_after, seconds(c.window - c.seconds_after_exit));
        const Condition* ready = s.FindCondition(condition::kReady);
        ASSERT_NE(ready, nullptr);
        EXPECT_EQ(ready->reason, "AwaitingFaultAttribution");
        EXPECT_NE(ready->message.find("node-1"), std::string::npos) << ready->message;
        EXPECT_NE(FindEvent(plan, "AwaitingFaultAttribution"), nullptr);
        break;
      }
      case Outcome::kFailed: {
        const Condition* failed = s.FindCondition(condition::kFailed);
        ASSERT_NE(failed, nullptr);
        EXPECT_EQ(failed->reason, "PermanentError");
        const bool waited = c.window > 0 && std::string_view(c.reason) != "OOMKilled";
        EXPECT_EQ(failed->message.find("fault attribution window of 30s") != std::string::npos,
                  waited)
            << failed->message;
        EXPECT_EQ(s.faults.back().action, "FailJob");
        break;
      }
      case Outcome::kReissuedCounted:
      case Outcome::kReissuedFree: {
        const FaultRecord& f = s.faults.back();
        EXPECT_EQ(f.action, "ReissueJob");
        EXPECT_EQ(f.node, "node-1");
        // The record names both the program's exit and the node's verdict.
        EXPECT_EQ(f.container, "trainer");
        EXPECT_EQ(f.exit_code, c.code);
        EXPECT_NE(f.message.find("exited with code " + std::to_string(c.code)), std::string::npos)
            << f.message;
        EXPECT_NE(f.message.find("node node-1: TPUUnhealthy"), std::string::npos) << f.message;
        const bool hardware = c.want == Outcome::kReissuedCounted;
        EXPECT_EQ(plan.cordon.size(), hardware && c.verdict != X ? 1u : 0u);
        EXPECT_EQ(f.kind,
                  hardware ? (c.unreachable ? "NodeLost" : "NodeUnhealthy") : "Maintenance");
        break;
      }
      case Outcome::kRestarted:
        EXPECT_EQ(s.worker_restarts.at("Worker-1").count, 1);
        break;
    }
  }
}

// Two permanent exits past their window: the failure asks for both nodes to be read again, the
// deciding one first.
TEST(PolicyFaultAttributionTest, AFailureAsksForEveryFailedPodsNodeToBeReadAgain) {
  PodSim sim = AttributionJob(10);
  RunJob(sim);
  ExitAt(sim.Worker(1), 1, sim.now());
  ExitAt(sim.Worker(0), 137, sim.now());
  sim.Advance(seconds(10));
  const Plan plan = DecideWith(sim, Nodes{});
  EXPECT_EQ(plan.status.phase, Phase::kFailed);
  ASSERT_EQ(plan.confirm_nodes.size(), 2u);
  EXPECT_EQ(std::set<std::string>(plan.confirm_nodes.begin(), plan.confirm_nodes.end()),
            (std::set<std::string>{"node-0", "node-1"}));
  // Read again, node-0 is faulty: the hardware's, re-issued.
  Nodes nodes;
  nodes.Set("node-0", NodeVerdict::kUnhealthy, "TPUUnhealthy");
  const Plan again = DecideWith(sim, nodes);
  EXPECT_NE(again.status.phase, Phase::kFailed);
  EXPECT_EQ(again.status.attempt, 2);
  EXPECT_TRUE(again.confirm_nodes.empty());
}

// Exit 1, the hardware condition 5 s later: re-issued once, and Failed never shows in between;
// each decision in the window is a fixed point (no status change, no repeated Event).
TEST(PolicyFaultAttributionTest, ExitThenFlagFiveSecondsLaterReissuesWithoutFailing) {
  PodSim sim = AttributionJob();
  RunJob(sim);
  sim.check_fixed_point = true;
  ExitAt(sim.Worker(1), 1, sim.now());
  Nodes nodes;
  for (int i = 0; i < 5; ++i) {
    const Plan plan = sim.Step();
    ASSERT_NE(plan.status.phase, Phase::kFailed) << i << " s after the exit";
    EXPECT_EQ(plan.status.attempt, 1);
    EXPECT_EQ(plan.events.empty(), i != 0) << "the waiting Event once, at the first decision";
  }
  sim.check_fixed_point = false;
  nodes.Set("node-1", NodeVerdict::kUnhealthy, "TPUUnhealthy");
  Plan plan = DecideWith(sim, nodes);
  sim.Apply(plan);
  EXPECT_EQ(plan.status.attempt, 2);
  EXPECT_EQ(plan.status.job_retries, 1);
  ASSERT_EQ(plan.cordon.size(), 1u);
  EXPECT_EQ(plan.cordon[0].node, "node-1");
  // Decided once: deciding again changes nothing more.
  plan = DecideWith(sim, nodes);
  EXPECT_EQ(plan.status.attempt, 2);
  EXPECT_EQ(plan.status.job_retries, 1);
  EXPECT_EQ(plan.status.faults.size(), 1u);
}

// While the verdict is due the other workers go on: a retryable exit restarts at once, and
// success is not decided (the permanent failure came first).
TEST(PolicyFaultAttributionTest, NothingElseWaitsButSuccessIsNotDecided) {
  Json spec = SpecJson(3, /*master=*/true);
  spec["faultTolerance"] = {{"faultAttributionSeconds", 30}};
  PodSim sim(spec);
  RunJob(sim);
  ExitAt(sim.Worker(1), 1, sim.now());
  ExitAt(sim.Worker(2), 143, sim.now());
  SetExited(sim.Master(), 0);
  const Plan plan = DecideWith(sim, Nodes{});
  EXPECT_NE(plan.status.phase, Phase::kSucceeded);
  EXPECT_NE(plan.status.phase, Phase::kFailed);
  EXPECT_EQ(plan.status.worker_restarts.at("Worker-2").count, 1);
  EXPECT_EQ(RemovedNames(plan), std::vector<std::string>{PodName(kWorker, 2)});
  EXPECT_EQ(plan.status.worker_restarts.count("Worker-1"), 0u);
  EXPECT_EQ(plan.status.FindCondition(condition::kSucceeded), nullptr);
}

// An operator restarted inside the window decides from the pod's finishedAt, not from when it
// first saw the exit: the same deadline, one decision.
TEST(PolicyFaultAttributionTest, TheDeadlineComesFromThePodSoARestartDecidesTheSame) {
  PodSim sim = AttributionJob(10);
  RunJob(sim);
  const WallTime exited = sim.now();
  ExitAt(sim.Worker(0), 1, exited);
  sim.Advance(seconds(4));
  Plan first = DecideWith(sim, Nodes{});
  ASSERT_TRUE(first.requeue_after);
  EXPECT_EQ(*first.requeue_after, seconds(6));
  // A new operator, 3 s later, with the status the first one wrote.
  sim.Apply(first);
  sim.Advance(seconds(2));
  Plan second = DecideWith(sim, Nodes{});
  ASSERT_TRUE(second.requeue_after);
  EXPECT_EQ(exited + seconds(10), sim.now() + *second.requeue_after);
  sim.Apply(second);
  sim.Advance(seconds(2));
  ASSERT_EQ(sim.now(), exited + seconds(10));
  Plan decided = DecideWith(sim, Nodes{});
  EXPECT_EQ(decided.status.phase, Phase::kFailed);
  EXPECT_EQ(decided.status.faults.size(), 1u);
  sim.Apply(decided);
  EXPECT_EQ(DecideWith(sim, Nodes{}).status.faults.size(), 1u);
}

// A retryable exit: the pod is created again on the node it ran on while that node is healthy
// and schedulable; elsewhere once it is cordoned or unhealthy.
TEST(PolicyFaultAttributionTest, RestartGoesBackToItsNodeWhileItIsSchedulable) {
  struct Case {
    const char* name;
    bool cordoned;
    NodeVerdict verdict;
    std::string want;
  };
  const Case cases[] = {
      {"healthy", false, NodeVerdict::kHealthy, "node-1"},
      {"cordoned", true, NodeVerdict::kHealthy, ""},
      {"under maintenance", false, NodeVerdict::kMaintenance, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    PodSim sim = AttributionJob();
    RunJob(sim);
    ExitAt(sim.Worker(1), 143, sim.now());
    Plan plan = DecideWith(sim, Nodes{});
    EXPECT_EQ(plan.status.worker_restarts.at("Worker-1").node, "node-1");
    EXPECT_EQ(plan.status.ToJson()["workerRestarts"]["Worker-1"]["node"], "node-1");
    sim.Apply(plan);
    sim.FinishDeletions();
    Nodes nodes;
    if (c.verdict != NodeVerdict::kHealthy) nodes.Set("node-1", c.verdict, "x");
    // The pod is gone: no pod runs on node-1, so its verdict only decides where the new one goes.
    plan = DecideWith(sim, nodes,
                      c.cordoned ? std::vector<std::string>{"node-1"} : std::vector<std::string>{});
    ASSERT_EQ(plan.create.size(), 1u);
    EXPECT_EQ(plan.create[0].index, 1);
    EXPECT_EQ(plan.create[0].node, c.want);
    // A node that does not take it is forgotten: a recorded node means the pod was pinned.
    EXPECT_EQ(plan.status.worker_restarts.at("Worker-1").node, c.want);
  }
}

// An unpinned restart that cannot be scheduled (the cluster is full) is left to the admission's
// own rules: it is not deleted as if it were pinned.
TEST(PolicyFaultAttributionTest, AnUnpinnedRestartIsNotUnpinned) {
  PodSim sim = AttributionJob();
  RunJob(sim);
  ExitAt(sim.Worker(1), 143, sim.now());
  sim.Apply(DecideWith(sim, Nodes{}));
  sim.FinishDeletions();
  sim.Apply(DecideWith(sim, Nodes{}, {"node-1"}));  // created unpinned: node-1 is cordoned
  cache::PodInfo& pod = sim.Worker(1);
  pod.node_name = {};
  pod.unschedulable = true;
  const Plan plan = DecideWith(sim, Nodes{});  // node-1 uncordoned again meanwhile
  EXPECT_TRUE(plan.remove.empty()) << plan.remove[0].why;
}

// A native sidecar (an init container that keeps running) stopped with its own code after the
// program's permanent exit does not turn that exit into a retryable one while it is held.
TEST(PolicyFaultAttributionTest, ASidecarStoppedAfterTheProgramDoesNotHideItsExit) {
  PodSim sim = AttributionJob();
  RunJob(sim);
  cache::PodInfo& pod = sim.Worker(1);
  ExitAt(pod, 1, sim.now());
  cache::ContainerInfo sidecar;
  sidecar.name = cache::InternedString::Intern("gcsfuse");
  sidecar.state = cache::ContainerState::kTerminated;
  sidecar.exit_code = 143;
  sidecar.reason = cache::InternedString::Intern("Error");
  pod.init_containers = {sidecar};
  Termination t;
  ASSERT_EQ(ObservePod(pod, &t), PodState::kFailed);
  EXPECT_EQ(t.container, "trainer");
  EXPECT_EQ(t.exit_code, 1);
  const Plan plan = DecideWith(sim, Nodes{});
  EXPECT_TRUE(plan.status.worker_restarts.empty()) << "restarted as if retryable";
  EXPECT_EQ(plan.status.FindCondition(condition::kReady)->reason, "AwaitingFaultAttribution");
}

// Another worker out of restarts while a permanent exit awaits its verdict: that exit came first
// and decides; no retry is spent on a re-issue meanwhile.
TEST(PolicyFaultAttributionTest, NoReissueForRestartsWhileAnExitAwaitsItsVerdict) {
  Json spec = SpecJson(2);
  spec["faultTolerance"] = {
      {"maxJobRetries", 2}, {"maxWorkerRestarts", 0}, {"faultAttributionSeconds", 30}};
  PodSim sim(spec);
  RunJob(sim);
  const WallTime exited = sim.now();
  ExitAt(sim.Worker(0), 1, exited);
  ExitAt(sim.Worker(1), 143, exited);
  Plan plan = DecideWith(sim, Nodes{});
  EXPECT_EQ(plan.status.attempt, 1);
  EXPECT_EQ(plan.status.job_retries, 0);
  sim.Apply(plan);
  sim.Advance(seconds(30));
  plan = DecideWith(sim, Nodes{});
  EXPECT_EQ(plan.status.phase, Phase::kFailed);
  EXPECT_EQ(plan.status.FindCondition(condition::kFailed)->reason, "PermanentError");
  EXPECT_EQ(plan.status.job_retries, 0);
}

// Pods of an earlier attempt on a lost node get the brief grace period also when the operator
// that decided the re-issue stopped before deleting them.
TEST(PolicyFaultAttributionTest, LostNodePodsOfAnEarlierAttemptGetTheBriefGraceAfterARestart) {
  PodSim sim = AttributionJob();
  RunJob(sim);
  Nodes nodes;
  nodes.Set("node-1", NodeVerdict::kUnhealthy, "NodeUnreachable", /*unreachable=*/true);
  Plan plan = DecideWith(sim, nodes);
  ASSERT_EQ(plan.status.attempt, 2);
  plan.remove.clear();  // the operator stopped after writing the status
  sim.Apply(plan);
  plan = DecideWith(sim, nodes);
  ASSERT_EQ(plan.remove.size(), 2u);
  for (const PodToDelete& d : plan.remove) {
    if (d.name == PodName(kWorker, 1)) {
      EXPECT_EQ(d.grace_period_seconds, kBriefGraceSeconds);
    } else {
      EXPECT_FALSE(d.grace_period_seconds) << d.name;
    }
  }
}

// Suspended and resumed, a job is admitted anew: its restarted workers are not pinned to the
// nodes of the run before.
TEST(PolicyFaultAttributionTest, ASuspendForgetsThePins) {
  PodSim sim = AttributionJob();
  RunJob(sim);
  ExitAt(sim.Worker(1), 143, sim.now());
  sim.Apply(DecideWith(sim, Nodes{}));
  ASSERT_EQ(sim.Status().worker_restarts.at("Worker-1").node, "node-1");
  sim.job().spec["suspend"] = true;
  sim.Reparse();
  const Plan plan = DecideWith(sim, Nodes{});
  ASSERT_EQ(plan.status.phase, Phase::kSuspended);
  EXPECT_EQ(plan.status.worker_restarts.at("Worker-1").node, "");
  EXPECT_EQ(plan.status.worker_restarts.at("Worker-1").count, 1);
}

// Pinned to its node, the restarted pod that the scheduler cannot place there (the node
// cordoned meanwhile, or its chips taken) is deleted and created again unpinned, without
// releasing the attempt's admission.
TEST(PolicyFaultAttributionTest, APinnedRestartThatCannotBeScheduledIsCreatedAgainElsewhere) {
  for (bool cordoned : {true, false}) {
    SCOPED_TRACE(cordoned ? "node cordoned" : "node full");
    PodSim sim = AttributionJob();
    RunJob(sim);
    ExitAt(sim.Worker(1), 143, sim.now());
    sim.Apply(DecideWith(sim, Nodes{}));
    sim.FinishDeletions();
    Plan plan = DecideWith(sim, Nodes{});
    ASSERT_EQ(plan.create.size(), 1u);
    ASSERT_EQ(plan.create[0].node, "node-1");
    sim.Apply(plan);
    cache::PodInfo& pinned = sim.Worker(1);
    pinned.node_name = {};
    plan = DecideWith(sim, Nodes{});
    EXPECT_TRUE(plan.remove.empty()) << "deleted before the scheduler said it does not fit";
    pinned.unschedulable = true;
    sim.Advance(seconds(60));  // long past the admission's unschedulable grace
    const std::vector<std::string> cordons =
        cordoned ? std::vector<std::string>{"node-1"} : std::vector<std::string>{};
    plan = DecideWith(sim, Nodes{}, cordons);
    EXPECT_EQ(RemovedNames(plan), std::vector<std::string>{PodName(kWorker, 1)});
    EXPECT_TRUE(plan.status.ConditionTrue(condition::kAdmitted)) << "the admission was released";
    EXPECT_EQ(plan.status.worker_restarts.at("Worker-1").node, "");
    EXPECT_EQ(plan.status.worker_restarts.at("Worker-1").count, 1);
    sim.Apply(plan);
    sim.FinishDeletions();
    plan = DecideWith(sim, Nodes{}, cordons);
    ASSERT_EQ(plan.create.size(), 1u);
    EXPECT_EQ(plan.create[0].node, "");
  }
}

// Pre-flight with disk-size shm on, and nothing mounted at /dev/shm: refused at validation.
TEST(PolicyFaultAttributionTest, PreflightThatFailsOnEveryNodeIsRefusedAtValidation) {
  struct Case {
    const char* name;
    Json fault_tolerance;
    bool shm_volume;
    bool master_checks_disk;
    const char* error;  // "" = valid
  };
  const Json on = {{"preflight", {{"enabled", true}}}};
  const Case cases[] = {
      {"default checks, no volume", on, false, false, "spec.replicaSpecs.Worker.template"},
      {"default checks, volume", on, true, false, ""},
      {"disk listed, no volume",
       {{"preflight", {{"enabled", true}, {"checks", {"dns", "disk"}}}}},
       false,
       false,
       "mount an emptyDir with medium: Memory at /dev/shm"},
      {"disk not listed",
       {{"preflight", {{"enabled", true}, {"checks", {"dns"}}}}},
       false,
       false,
       ""},
      {"shm threshold 0",
       {{"preflight", {{"enabled", true}, {"thresholds", {{"shmGB", 0}}}}}},
       false,
       false,
       ""},
      {"pre-flight off", Json::object(), false, false, ""},
      {"annotation turns it on", Json::object(), false, false, "/dev/shm"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Json spec = SpecJson(2);
    spec["faultTolerance"] = c.fault_tolerance;
    if (!c.shm_volume) WithoutShm(spec, "Worker");
    cache::LabelMap annotations;
    if (std::string_view(c.name) == "annotation turns it on") {
      annotations = cache::LabelMap{{std::string(kJobRetryAnnotation), "1"}};
    }
    const auto parsed = ParseJobSpec(MakeJob(spec, Json::object(), annotations));
    if (std::string_view(c.error).empty()) {
      EXPECT_TRUE(parsed.has_value()) << parsed.error();
    } else {
      ASSERT_FALSE(parsed.has_value());
      EXPECT_NE(parsed.error().find(c.error), std::string::npos) << parsed.error();
    }
  }
  // The master checks disk only when the job lists it.
  Json spec = SpecJson(2, /*master=*/true);
  spec["faultTolerance"] = {{"preflight", {{"enabled", true}, {"checks", {"disk"}}}}};
  EXPECT_TRUE(ParseJobSpec(MakeJob(spec)).has_value());
  WithoutShm(spec, "Master");
  const auto parsed = ParseJobSpec(MakeJob(spec));
  ASSERT_FALSE(parsed.has_value());
  EXPECT_NE(parsed.error().find("spec.replicaSpecs.Master.template"), std::string::npos)
      << parsed.error();
}

// An invalid spec creates no pod and uses no retry: Valid=False with the fix.
TEST(PolicyFaultAttributionTest, ARefusedSpecCreatesNoPod) {
  Json spec = SpecJson(2);
  spec["faultTolerance"] = {{"maxJobRetries", 1}, {"preflight", {{"enabled", true}}}};
  WithoutShm(spec, "Worker");
  PodSim sim(spec);
  const Plan plan = sim.Step();
  EXPECT_TRUE(plan.create.empty());
  EXPECT_EQ(plan.status.job_retries, 0);
  const Condition* valid = plan.status.FindCondition(condition::kValid);
  ASSERT_NE(valid, nullptr);
  EXPECT_EQ(valid->status, "False");
  EXPECT_NE(valid->message.find("mount an emptyDir with medium: Memory at /dev/shm, or leave disk "
                                "out of the checks"),
            std::string::npos)
      << valid->message;
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::policy
