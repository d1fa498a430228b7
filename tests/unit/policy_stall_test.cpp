// Stall detection (spec.faultTolerance.progress, policy/stall_rules.h): the spec's checks, the
// suspect, and what the lifecycle does with a stalled report. The supervisors are simulated by
// the reports they leave in the pods' status.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cache/objects.h"
#include "policy/lifecycle.h"
#include "policy/stall_rules.h"
#include "policy_fixtures.h"
#include "supervisor/protocol.h"

namespace tpujob::policy {
namespace TPUJOB_TEST_NS {

using namespace fixtures;

Json ProgressSpecJson(int workers, std::string_view restart, Json progress = Json::object(),
                      int64_t attribution = 10) {
  Json spec = SpecJson(workers);
  spec["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"] = {"python3",
                                                                                    "train.py"};
  if (!progress.contains("logPattern") && !progress.contains("heartbeatFile")) {
    progress["logPattern"] = "completed step: (\\d+)";
  }
  spec["faultTolerance"] = {{"restart", restart},
                            {"progress", std::move(progress)},
                            {"faultAttributionSeconds", attribution}};
  return spec;
}

std::string StalledReport(int32_t generation, std::optional<int64_t> step, WallTime last,
                          int64_t idle = 60, std::optional<int64_t> checkpoint = std::nullopt) {
  Json j = {{"state", supervisor::kReportStalled},
            {"generation", generation},
            {"exit", 143},
            {"idleSeconds", idle},
            {"phase", step ? supervisor::kPhaseRunning : supervisor::kPhaseStartup}};
  if (checkpoint) j["checkpoint"] = *checkpoint;
  if (step) {
    j["step"] = *step;
    j["lastProgress"] = cache::FormatRfc3339(last);
  }
  return j.dump();
}

std::string SpecError(Json progress) {
  Json spec = ProgressSpecJson(2, "Recreate");
  spec["faultTolerance"]["progress"] = std::move(progress);
  const auto parsed = ParseJobSpec(MakeJob(spec));
  return parsed ? std::string() : parsed.error();
}

TEST(PolicyStallSpecTest, DefaultsAndBothSources) {
  const auto parsed = ParseJobSpec(MakeJob(ProgressSpecJson(2, "Recreate")));
  ASSERT_TRUE(parsed) << parsed.error();
  ASSERT_TRUE(parsed->fault_tolerance.progress.has_value());
  const ProgressSpec& p = *parsed->fault_tolerance.progress;
  EXPECT_EQ(p.log_pattern, "completed step: (\\d+)");
  EXPECT_EQ(p.stall_seconds, 600);
  EXPECT_EQ(p.startup_seconds, 1800);
  EXPECT_EQ(p.max_stalls, 3);
  EXPECT_EQ(SpecError({{"heartbeatFile", "/tmp/beat"}, {"stallSeconds", 5}}), "");
  // Off unless set.
  EXPECT_FALSE(ParseJobSpec(MakeJob(SpecJson(2)))->fault_tolerance.progress.has_value());
}

TEST(PolicyStallSpecTest, BadPatternsAreRefusedWithTheEnginesMessage) {
  struct Case {
    Json progress;
    std::string want;
  };
  const std::vector<Case> cases = {
      {{{"logPattern", "step (\\d+"}},
       "spec.faultTolerance.progress.logPattern: \"step (\\d+\" is not a valid RE2 expression: "
       "missing ): step (\\d+"},
      {{{"logPattern", "step \\d+"}}, "has 0 capture groups; it needs exactly one"},
      {{{"logPattern", "(step) (\\d+)"}}, "has 2 capture groups"},
      // A backreference: what a backtracking engine accepts, RE2 refuses.
      {{{"logPattern", "(\\d+) \\1"}}, "is not a valid RE2 expression: invalid escape sequence"},
      {{{"logPattern", "s (\\d+)"}, {"checkpointPattern", "saved ("}},
       "spec.faultTolerance.progress.checkpointPattern: \"saved (\" is not a valid RE2"},
      {Json::object(), "spec.faultTolerance.progress: needs a source of progress"},
      {{{"heartbeatFile", "beat"}},
       "spec.faultTolerance.progress.heartbeatFile: \"beat\" is not an absolute path"},
      {{{"logPattern", "s (\\d+)"}, {"stallSeconds", 0}},
       "spec.faultTolerance.progress.stallSeconds: 0 is outside [1, 604800]"},
      {{{"logPattern", "s (\\d+)"}, {"maxStalls", 101}},
       "spec.faultTolerance.progress.maxStalls: 101 is outside [1, 100]"},
      {{{"logPattern", 7}}, "spec.faultTolerance.progress.logPattern: must be a string"},
  };
  for (const Case& c : cases) {
    const std::string error = SpecError(c.progress);
    EXPECT_NE(error.find(c.want), std::string::npos) << c.progress.dump() << "\n" << error;
  }
}

TEST(PolicyStallSpecTest, RecreateWithProgressNeedsTheCommand) {
  Json spec = ProgressSpecJson(2, "Recreate");
  spec["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].erase("command");
  const auto parsed = ParseJobSpec(MakeJob(spec));
  ASSERT_FALSE(parsed);
  EXPECT_NE(parsed.error().find("spec.faultTolerance.progress (stall detection) runs the program "
                                "under the operator's supervisor"),
            std::string::npos)
      << parsed.error();
}

// --- the suspect ---

WorkerProgress At(const ObservedPod* pod, std::optional<int64_t> step, int64_t last_second) {
  WorkerProgress w;
  w.pod = pod;
  w.report.step = step;
  w.report.last_progress = fixtures::At(last_second);
  w.stalled = true;
  return w;
}

TEST(PolicyStallSuspectTest, AloneBehindOrFirstToStopByASecond) {
  cache::PodInfo pods[3] = {MakePod(ReplicaType::kWorker, 0, 1, "a"),
                            MakePod(ReplicaType::kWorker, 1, 1, "b"),
                            MakePod(ReplicaType::kWorker, 2, 1, "c")};
  const ObservedPod o[3] = {{&pods[0], ReplicaType::kWorker, 0, 1},
                            {&pods[1], ReplicaType::kWorker, 1, 1},
                            {&pods[2], ReplicaType::kWorker, 2, 1}};
  struct Case {
    const char* name;
    std::vector<WorkerProgress> workers;
    int want;  // index, -1: none
  };
  const std::vector<Case> cases = {
      {"one behind", {At(&o[0], 10, 5), At(&o[1], 9, 5), At(&o[2], 10, 5)}, 1},
      {"one with no step", {At(&o[0], 10, 5), At(&o[1], 10, 5), At(&o[2], std::nullopt, 0)}, 2},
      {"two behind, one stopped first", {At(&o[0], 9, 3), At(&o[1], 9, 5), At(&o[2], 10, 5)}, 0},
      {"same step, same second", {At(&o[0], 10, 5), At(&o[1], 10, 5), At(&o[2], 10, 5)}, -1},
      {"same step, first by a second", {At(&o[0], 10, 6), At(&o[1], 10, 5), At(&o[2], 10, 6)}, 1},
      {"alone: nobody to compare", {At(&o[0], 3, 1)}, -1},
  };
  for (const Case& c : cases) {
    const WorkerProgress* suspect = StallSuspect(c.workers);
    const int got = suspect == nullptr ? -1 : suspect->pod->index;
    EXPECT_EQ(got, c.want) << c.name;
  }
}

// --- the lifecycle ---

void RunJob(PodSim& sim) {
  ASSERT_EQ(sim.Step(false).status.phase, Phase::kQueued);
  ASSERT_FALSE(sim.Step().create.empty());
  for (auto& p : sim.pods()) {
    p.pod.ordered_generation = 1;
    p.pod.barrier_generation = 1;
  }
  sim.AllReady();
  ASSERT_EQ(sim.Step().status.phase, Phase::kRunning);
}

// The supervisor of an in-place pod stopped its program for a stall: the kubelet restarted the
// container, whose supervisor waits at the barrier.
void StallInPlace(cache::PodInfo& pod, std::optional<int64_t> step, WallTime last, WallTime now) {
  cache::ContainerInfo& c = pod.containers.front();
  c.restart_count++;
  c.last_exit_code = supervisor::kStalledExitCode;
  c.last_reason = cache::InternedString::Intern("Error");
  c.last_message = cache::InternedString::Intern(StalledReport(1, step, last));
  c.last_finished_at = now;
  c.state = cache::ContainerState::kRunning;
  pod.ready = false;
}

// Under Recreate the supervisor exits with the stall code and the pod fails.
void StallRecreated(cache::PodInfo& pod, std::optional<int64_t> step, WallTime last, WallTime now) {
  SetExited(pod, supervisor::kStalledExitCode, "Error", StalledReport(0, step, last));
  pod.containers.front().finished_at = now;
}

void ApplyHardwareChecks(PodSim& sim, const Plan& plan) {
  for (const PodToAnnotate& a : plan.annotate) {
    if (!a.hardware_check) continue;
    for (auto& p : sim.pods()) {
      if (p.pod.uid == a.uid)
        p.pod.hardware_check = cache::InternedString::Intern(*a.hardware_check);
    }
  }
}

TEST(PolicyStallTest, InPlaceStallChecksEveryNodeThenRestartsTheGangWithoutARestartCounted) {
  PodSim sim(ProgressSpecJson(4, "InPlace"));
  sim.check_fixed_point = true;
  RunJob(sim);
  StallInPlace(sim.Worker(2), 41, sim.now() - std::chrono::seconds(60),
               sim.now() - std::chrono::seconds(1));
  StallInPlace(sim.Worker(0), 42, sim.now() - std::chrono::seconds(59), sim.now());

  const Plan check = sim.Step();
  // Every node of the job is asked for a hardware round; nothing is restarted yet.
  ASSERT_EQ(check.annotate.size(), 4u);
  for (const PodToAnnotate& a : check.annotate) {
    EXPECT_EQ(a.hardware_check, std::optional<std::string>("1/1"));
    EXPECT_EQ(a.generation, 0);  // left alone
  }
  EXPECT_EQ(check.status.in_place->generation, 1);
  EXPECT_EQ(check.status.stalls, 0);
  const Condition* stalled = check.status.FindCondition(condition::kStalled);
  ASSERT_NE(stalled, nullptr);
  EXPECT_EQ(stalled->status, "True");
  EXPECT_NE(stalled->message.find("worker-2 (pod train-worker-2) made no progress for 60s"),
            std::string::npos)
      << stalled->message;
  EXPECT_NE(stalled->message.find("after step 41"), std::string::npos) << stalled->message;
  EXPECT_NE(
      stalled->message.find("suspect: worker-2 (pod train-worker-2) on node node-2, at step 41"),
      std::string::npos)
      << stalled->message;
  ASSERT_NE(FindEvent(check, "Stalled"), nullptr);
  // Goodput: the time since the last progress was no work; the job is now in cause Stalled.
  ASSERT_TRUE(check.status.goodput.has_value());
  EXPECT_EQ(check.status.goodput->state, "Stalled");
  EXPECT_GT(check.status.goodput->lost_ms.count("Stalled"), 0u);
  ASSERT_TRUE(check.requeue_after.has_value());
  EXPECT_LE(*check.requeue_after, std::chrono::seconds(10));
  ApplyHardwareChecks(sim, check);

  const Plan waiting = sim.Step();
  EXPECT_TRUE(waiting.annotate.empty());
  EXPECT_EQ(FindEvent(waiting, "Stalled"), nullptr);  // once
  EXPECT_EQ(waiting.status.stalls, 0);

  sim.Advance(std::chrono::seconds(10));
  const Plan restart = sim.Step();
  EXPECT_EQ(restart.status.stalls, 1);
  EXPECT_EQ(restart.status.in_place->generation, 2);
  EXPECT_TRUE(restart.status.worker_restarts.empty()) << "a stall is not a worker's restart";
  EXPECT_TRUE(restart.remove.empty());
  ASSERT_FALSE(restart.status.faults.empty());
  EXPECT_EQ(restart.status.faults.back().kind, "Stalled");
  EXPECT_EQ(restart.status.faults.back().action, "RestartInPlace");
  EXPECT_EQ(restart.status.faults.back().pod, PodName(ReplicaType::kWorker, 2));
  ASSERT_TRUE(restart.status.progress.has_value());
  EXPECT_EQ(restart.status.progress->step, 42);
  EXPECT_EQ(restart.status.progress->stalls_in_a_row, 1);
  EXPECT_EQ(restart.status.progress->suspect_node, "node-2");
  EXPECT_FALSE(restart.status.progress->stall_seen.has_value());
  const EventToRecord* event = FindEvent(restart, "StallRestart");
  ASSERT_NE(event, nullptr);
  EXPECT_NE(event->message.find("restarting the program in place in every pod, generation 2 "
                                "(stall 1 in a row of at most 3 (maxStalls))"),
            std::string::npos)
      << event->message;
  // The same reports again (the next decision) are not a new stall.
  const Plan after = sim.Step();
  EXPECT_EQ(after.status.stalls, 1);
  EXPECT_EQ(FindEvent(after, "StallRestart"), nullptr);
}

TEST(PolicyStallTest, AFaultyNodeWithinTheWindowMakesItTheHardwareCase) {
  Json spec = ProgressSpecJson(4, "InPlace");
  spec["faultTolerance"]["maxJobRetries"] = 1;
  PodSim sim(spec);
  Nodes nodes;
  sim.node_health = nodes.Fn();
  RunJob(sim);
  StallInPlace(sim.Worker(1), 7, sim.now() - std::chrono::seconds(60), sim.now());
  ApplyHardwareChecks(sim, sim.Step());
  nodes.Set("node-3", NodeVerdict::kUnhealthy, "TPUUnhealthy");
  sim.node_health = nodes.Fn();
  const Plan hardware = sim.Step();
  ASSERT_FALSE(hardware.status.faults.empty());
  EXPECT_EQ(hardware.status.faults.back().kind, "NodeUnhealthy");
  EXPECT_EQ(hardware.status.faults.back().node, "node-3");
  ASSERT_EQ(hardware.cordon.size(), 1u);
  EXPECT_EQ(hardware.cordon.front().node, "node-3");
  EXPECT_EQ(hardware.status.stalls, 0);
  EXPECT_EQ(hardware.status.attempt, 2);
  ASSERT_TRUE(hardware.status.progress.has_value());
  EXPECT_FALSE(hardware.status.progress->stall_seen.has_value())
      << "the stall belongs to the attempt the node fault ended";
}

TEST(PolicyStallTest, MaxStallsInARowFailTheJobButProgressInBetweenStartsAgain) {
  Json progress = {{"logPattern", "step (\\d+)"}, {"maxStalls", 3}};
  PodSim sim(ProgressSpecJson(2, "InPlace", progress, /*attribution=*/0));
  RunJob(sim);
  const auto stall_all = [&](int64_t step) {
    const int32_t g = sim.Status().in_place->generation;
    for (int i : {0, 1}) {
      cache::PodInfo& pod = sim.Worker(i);
      StallInPlace(pod, step, sim.now() - std::chrono::seconds(30), sim.now());
      pod.containers.front().last_message = cache::InternedString::Intern(
          StalledReport(g, step, sim.now() - std::chrono::seconds(30)));
      pod.ordered_generation = g;
      pod.barrier_generation = g;
    }
    return sim.Step();
  };
  // A restarted program's pods run the new generation.
  const auto resume = [&] {
    const int32_t g = sim.Status().in_place->generation;
    for (auto& p : sim.pods()) {
      p.pod.ordered_generation = g;
      p.pod.barrier_generation = g;
    }
  };
  EXPECT_EQ(stall_all(100).status.progress->stalls_in_a_row, 1);
  resume();
  EXPECT_EQ(stall_all(100).status.progress->stalls_in_a_row, 2);  // no progress since
  resume();
  EXPECT_EQ(stall_all(150).status.progress->stalls_in_a_row, 1);  // it got past step 100
  resume();
  EXPECT_EQ(stall_all(150).status.progress->stalls_in_a_row, 2);
  resume();
  const Plan failed = stall_all(150);
  EXPECT_EQ(failed.status.phase, Phase::kFailed);
  const Condition* c = failed.status.FindCondition(condition::kFailed);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->reason, "Stalled");
  EXPECT_NE(c->message.find("3 stalls in a row with no progress in between (maxStalls 3)"),
            std::string::npos)
      << c->message;
  EXPECT_EQ(failed.status.stalls, 5);
  EXPECT_EQ(failed.status.faults.back().action, "FailJob");
}

// A program restarted from its checkpoint hangs again before it saves another: the stall's
// message still names the last checkpoint, the one an earlier report gave.
TEST(PolicyStallTest, TheLastCheckpointIsNamedWhenTheRestartedProgramSavedNone) {
  Json progress = {{"logPattern", "step (\\d+)"}, {"maxStalls", 2}};
  PodSim sim(ProgressSpecJson(1, "InPlace", progress, /*attribution=*/0));
  RunJob(sim);
  const auto stall = [&](std::optional<int64_t> checkpoint) {
    const int32_t g = sim.Status().in_place->generation;
    cache::PodInfo& pod = sim.Worker(0);
    StallInPlace(pod, 4, sim.now() - std::chrono::seconds(30), sim.now());
    pod.containers.front().last_message = cache::InternedString::Intern(
        StalledReport(g, 4, sim.now() - std::chrono::seconds(30), 60, checkpoint));
    pod.ordered_generation = g;
    pod.barrier_generation = g;
    return sim.Step();
  };
  const Plan first = stall(3);
  EXPECT_EQ(first.status.progress->checkpoint_step, 3);
  for (auto& p : sim.pods()) {
    p.pod.ordered_generation = sim.Status().in_place->generation;
    p.pod.barrier_generation = sim.Status().in_place->generation;
  }
  const Plan failed = stall(std::nullopt);
  ASSERT_EQ(failed.status.phase, Phase::kFailed);
  const Condition* c = failed.status.FindCondition(condition::kFailed);
  ASSERT_NE(c, nullptr);
  EXPECT_NE(c->message.find("after step 4 (stallSeconds 600); last checkpoint at step 3"),
            std::string::npos)
      << c->message;
}

TEST(PolicyStallTest, NeverAStepFailsOverStartupLikeAnyOtherStall) {
  Json progress = {{"logPattern", "step (\\d+)"}, {"maxStalls", 1}, {"startupSeconds", 5}};
  PodSim sim(ProgressSpecJson(2, "Recreate", progress, 0));
  RunJob(sim);
  StallRecreated(sim.Worker(0), std::nullopt, sim.now(), sim.now());
  const Plan failed = sim.Step();
  EXPECT_EQ(failed.status.phase, Phase::kFailed);
  const Condition* c = failed.status.FindCondition(condition::kFailed);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->reason, "Stalled");
  EXPECT_NE(c->message.find("since its program started (no step within startupSeconds 5)"),
            std::string::npos)
      << c->message;
}

TEST(PolicyStallTest, RecreateDeletesEveryPodOnceAndTheStalePodIsNotCountedAgain) {
  PodSim sim(ProgressSpecJson(3, "Recreate", Json::object(), 0));
  RunJob(sim);
  StallRecreated(sim.Worker(1), 20, sim.now() - std::chrono::seconds(60), sim.now());
  const Plan restart = sim.Step();
  EXPECT_EQ(restart.status.stalls, 1);
  EXPECT_EQ(RemovedNames(restart).size(), 3u);
  EXPECT_EQ(restart.status.faults.back().action, "RestartAllWorkers");
  EXPECT_EQ(restart.status.faults.back().exit_code, supervisor::kStalledExitCode);
  EXPECT_EQ(restart.status.phase, Phase::kRestarting);
  EXPECT_TRUE(restart.status.worker_restarts.empty());
  // The cache still shows the failed pod, not yet deleting.
  for (auto& p : sim.pods()) p.pod.deletion_timestamp.reset();
  const Plan stale = sim.Decide();
  EXPECT_EQ(stale.status.stalls, 1);
  EXPECT_EQ(FindEvent(stale, "StallRestart"), nullptr);
  for (auto& p : sim.pods()) p.pod.deletion_timestamp = sim.now();
  sim.FinishDeletions();
  const Plan recreate = sim.Step();
  EXPECT_EQ(recreate.create.size(), 3u);
  sim.AllReady();
  const Plan running = sim.Step();
  EXPECT_EQ(running.status.phase, Phase::kRunning);
  const Condition* c = running.status.FindCondition(condition::kStalled);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, "False");
  EXPECT_EQ(c->reason, "Restarted");
}

TEST(PolicyStallTest, TheSameSoleSuspectTwiceIsCordonedAndTheJobMovesOffIt) {
  Json spec = ProgressSpecJson(3, "Recreate", Json::object(), 0);
  spec["faultTolerance"]["maxJobRetries"] = 2;
  PodSim sim(spec);
  RunJob(sim);
  const auto stall = [&](int64_t behind_step) {
    const WallTime last = sim.now() - std::chrono::seconds(60);
    StallRecreated(sim.Worker(0), 50, last, sim.now());
    StallRecreated(sim.Worker(1), behind_step, last, sim.now());
    StallRecreated(sim.Worker(2), 50, last, sim.now());
    return sim.Step();
  };
  const Plan first = stall(49);
  EXPECT_EQ(first.status.progress->suspect_node, "node-1");
  EXPECT_TRUE(first.cordon.empty());
  sim.FinishDeletions();
  sim.Step();
  sim.AllReady();
  ASSERT_EQ(sim.Step().status.phase, Phase::kRunning);
  const Plan second = stall(49);
  ASSERT_EQ(second.cordon.size(), 1u);
  EXPECT_EQ(second.cordon.front().node, "node-1");
  EXPECT_EQ(second.cordon.front().reason, "Stalled");
  // Counted by the circuit breaker: suspects on many nodes at once are not each node's fault.
  EXPECT_EQ(second.cordon.front().item, kStallCordonItem);
  // This job's evidence: a person's uncordon after another job's second stall does not refuse it.
  EXPECT_EQ(second.cordon.front().evidence, std::string(kJobUid) + "/stall 1/2");
  EXPECT_NE(second.cordon.front().message.find("the sole suspect of two stalls in a row"),
            std::string::npos)
      << second.cordon.front().message;
  EXPECT_EQ(second.status.attempt, 2);
  EXPECT_EQ(second.status.job_retries, 1);
  EXPECT_EQ(second.status.faults.back().kind, "Stalled");
  EXPECT_EQ(second.status.faults.back().node, "node-1");
}

TEST(PolicyStallTest, NoSuspectTwiceWhenTheWorkersStopTogether) {
  PodSim sim(ProgressSpecJson(3, "Recreate", Json::object(), 0));
  RunJob(sim);
  for (int round = 0; round < 2; ++round) {
    const WallTime last = sim.now() - std::chrono::seconds(60);
    for (int i : {0, 1, 2}) StallRecreated(sim.Worker(i), 50 + round * 10, last, sim.now());
    const Plan plan = sim.Step();
    EXPECT_TRUE(plan.cordon.empty());
    EXPECT_EQ(plan.status.progress->suspect_node, "");
    sim.FinishDeletions();
    sim.Step();
    sim.AllReady();
    sim.Step();
  }
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::policy
