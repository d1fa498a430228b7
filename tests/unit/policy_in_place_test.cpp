// In-place restart (spec.faultTolerance.restart InPlace, policy/lifecycle.h): a retryable exit
// restarts the program in every pod behind a barrier, without deleting or creating a pod. The
// kubelet and the supervisors are simulated here by what they write into the pods' status.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "cache/objects.h"
#include "policy/lifecycle.h"
#include "policy_fixtures.h"
#include "supervisor/protocol.h"

namespace tpujob::policy {
namespace TPUJOB_TEST_NS {

using namespace fixtures;
constexpr ReplicaType kWorker = ReplicaType::kWorker;

Json InPlaceSpec(int workers = 4, Json fault_tolerance = Json::object()) {
  Json spec = SpecJson(workers);
  spec["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"] = {"python3",
                                                                                    "train.py"};
  fault_tolerance["restart"] = "InPlace";
  spec["faultTolerance"] = std::move(fault_tolerance);
  return spec;
}

std::string Report(std::string_view state, int32_t generation, std::optional<int32_t> exit = {}) {
  Json j = {{"state", state}, {"generation", generation}};
  if (exit) j["exit"] = *exit;
  return j.dump();
}

// The kubelet restarted the first container; the run before ended with `code` and `report`.
void Restarted(cache::PodInfo& pod, int32_t code, const std::string& report) {
  cache::ContainerInfo& c = pod.containers.front();
  c.restart_count++;
  c.last_exit_code = code;
  c.last_reason = cache::InternedString::Intern(code == 137 ? "OOMKilled" : "Error");
  c.last_message = cache::InternedString::Intern(report);
  c.last_finished_at = At(1);
  c.state = cache::ContainerState::kRunning;
}

// The program of the generation the pod runs exits with `code`: the supervisor exits with it and
// the kubelet restarts the container, whose supervisor waits at the barrier.
void ProgramExits(cache::PodInfo& pod, int32_t code) {
  const ProgramObservation o = ObserveProgram(pod);
  ASSERT_GT(o.running_generation, 0) << pod.name << " runs no program";
  Restarted(pod, code, Report("exited", o.running_generation, code));
}

// Carries out the plan's annotations, then lets every supervisor act on them: a program older
// than the ordered generation is stopped and its container restarted to the barrier.
void Supervise(PodSim& sim, const Plan& plan, bool stop = true) {
  for (const PodToAnnotate& a : plan.annotate) {
    for (auto& p : sim.pods()) {
      if (p.pod.uid != a.uid) continue;
      p.pod.ordered_generation = a.generation;
      if (a.barrier) p.pod.barrier_generation = *a.barrier;
    }
  }
  for (const PodToAnnotate& a : plan.annotate) {
    for (auto& p : sim.pods()) {
      if (p.pod.uid != a.uid) continue;
      if (a.attempt) p.attempt = *a.attempt;
      if (a.index) p.index = *a.index;  // the labels of a worker whose slice took another id
    }
  }
  if (!stop) return;
  for (auto& p : sim.pods()) {
    if (p.pod.deleting()) continue;
    const ProgramObservation o = ObserveProgram(p.pod);
    if (o.running_generation > 0 && p.pod.ordered_generation > o.running_generation) {
      Restarted(p.pod, supervisor::kStoppedExitCode, Report("stopped", o.running_generation, 0));
    }
  }
}

// New pods start as the operator creates them: annotated with the status' generation, the
// barrier open when it is.
void Annotate(PodSim& sim) {
  const JobStatus s = sim.Status();
  ASSERT_TRUE(s.in_place.has_value());
  for (auto& p : sim.pods()) {
    if (p.pod.ordered_generation != 0) continue;
    p.pod.ordered_generation = s.in_place->generation;
    if (!s.in_place->barrier_since) p.pod.barrier_generation = s.in_place->generation;
  }
}

// Runs the job until every pod runs generation 1.
void RunJob(PodSim& sim) {
  ASSERT_EQ(sim.Step(false).status.phase, Phase::kQueued);
  const Plan start = sim.Step();
  ASSERT_FALSE(start.create.empty());
  ASSERT_TRUE(start.status.in_place.has_value());
  EXPECT_EQ(start.status.in_place->generation, 1);
  Annotate(sim);
  sim.AllReady();
  ASSERT_EQ(sim.Step().status.phase, Phase::kRunning);
}

// One decision of a multislice job: the queue's pools for the slices it waits for (a queued
// answer says no pool is free), those it may grow into, and the nodes' health.
Plan StepWithPools(PodSim& sim, bool admit, const std::vector<std::string>& pools,
                   const Nodes& nodes, const std::vector<std::string>& grow = {}) {
  LifecycleInput in = sim.Input(admit);
  in.admit_pools = pools;
  in.grow_pools = grow;
  in.node_health = nodes.Fn();
  in.not_admitted_reason = "WaitingForCapacity";
  Plan plan = Decide(in);
  sim.Apply(plan);
  return plan;
}

int RunningGeneration(PodSim& sim, int32_t index) {
  return ObserveProgram(sim.Worker(index)).running_generation;
}

TEST(PolicyInPlaceTest, TheProtocolNamesTheSameAnnotationsOnBothSides) {
  EXPECT_EQ(cache::kGenerationAnnotation, supervisor::kGenerationAnnotation);
  EXPECT_EQ(cache::kBarrierAnnotation, supervisor::kBarrierAnnotation);
}

TEST(PolicyInPlaceTest, ARetryableExitRestartsEveryPodInPlaceBehindOneBarrier) {
  PodSim sim(InPlaceSpec());
  sim.check_fixed_point = true;
  RunJob(sim);
  const int created = sim.created;

  ProgramExits(sim.Worker(1), 3);
  const Plan order = sim.Step();
  EXPECT_TRUE(order.remove.empty());
  EXPECT_TRUE(order.create.empty());
  EXPECT_EQ(order.status.phase, Phase::kRestarting);
  ASSERT_TRUE(order.status.in_place.has_value());
  EXPECT_EQ(order.status.in_place->generation, 2);
  EXPECT_TRUE(order.status.in_place->barrier_since.has_value());
  EXPECT_EQ(order.status.worker_restarts.at("Worker-1").count, 1);
  EXPECT_EQ(order.status.worker_restarts.at("Worker-1").generation, 1);
  EXPECT_EQ(order.status.attempt, 1);
  EXPECT_EQ(order.status.job_retries, 0);
  ASSERT_FALSE(order.status.faults.empty());
  EXPECT_EQ(order.status.faults.back().action, "RestartInPlace");
  EXPECT_EQ(order.status.faults.back().exit_code, 3);
  const EventToRecord* restarted = FindEvent(order, "WorkerRestarted");
  ASSERT_NE(restarted, nullptr);
  EXPECT_NE(restarted->message.find("restarting the program in place in every pod, generation 2 "
                                    "(1 of 5 restarts)"),
            std::string::npos)
      << restarted->message;
  // Every pod is told generation 2; the barrier stays closed.
  ASSERT_EQ(order.annotate.size(), 4u);
  for (const PodToAnnotate& a : order.annotate) {
    EXPECT_EQ(a.generation, 2);
    EXPECT_FALSE(a.barrier.has_value());
  }
  const Condition* ready = order.status.FindCondition(condition::kReady);
  ASSERT_NE(ready, nullptr);
  EXPECT_EQ(ready->reason, "BarrierClosed");

  // Three supervisors stop their program; the barrier opens once all four wait.
  Supervise(sim, order);
  const Plan open = sim.Step();
  EXPECT_NE(FindEvent(open, "BarrierOpened"), nullptr);
  EXPECT_FALSE(open.status.in_place->barrier_since.has_value());
  ASSERT_EQ(open.annotate.size(), 4u);
  for (const PodToAnnotate& a : open.annotate) EXPECT_EQ(a.barrier, std::optional<int32_t>(2));
  Supervise(sim, open);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(RunningGeneration(sim, i), 2) << i;

  const Plan running = sim.Step();
  EXPECT_EQ(running.status.phase, Phase::kRunning);
  EXPECT_TRUE(running.annotate.empty());
  EXPECT_EQ(FindEvent(running, "BarrierOpened"), nullptr);  // once
  EXPECT_EQ(sim.created, created);                          // no pod recreated
  for (const auto& p : sim.pods()) EXPECT_FALSE(p.pod.deleting());
  EXPECT_TRUE(sim.violations.empty());
}

TEST(PolicyInPlaceTest, TheBarrierWaitsForTheLastPodAndAnOperatorRestartDecidesTheSame) {
  PodSim sim(InPlaceSpec());
  RunJob(sim);
  ProgramExits(sim.Worker(0), 3);
  const Plan order = sim.Step();
  // Worker 3's supervisor has not seen the order yet (the kubelet is slow to update its file).
  Supervise(sim, order, /*stop=*/false);
  for (int i : {1, 2}) {
    Restarted(sim.Worker(i), supervisor::kStoppedExitCode, Report("stopped", 1, 0));
  }
  const Plan waiting = sim.Step();
  EXPECT_EQ(FindEvent(waiting, "BarrierOpened"), nullptr);
  EXPECT_TRUE(waiting.status.in_place->barrier_since.has_value());
  EXPECT_TRUE(waiting.annotate.empty());  // already ordered
  EXPECT_EQ(waiting.status.FindCondition(condition::kReady)->message,
            "3 of 4 pods wait at the barrier of generation 2");
  ASSERT_TRUE(waiting.requeue_after.has_value());
  // The same snapshot decided by a restarted operator: the same status, nothing to redo.
  const Plan again = sim.Decide();
  EXPECT_EQ(again.status.ToJson(), waiting.status.ToJson());
  EXPECT_TRUE(again.events.empty());
  EXPECT_TRUE(again.annotate.empty());

  Restarted(sim.Worker(3), supervisor::kStoppedExitCode, Report("stopped", 1, 0));
  const Plan open = sim.Step();
  EXPECT_NE(FindEvent(open, "BarrierOpened"), nullptr);
  // Killed after writing the status, before annotating: the next decision annotates again.
  const Plan redo = sim.Decide();
  EXPECT_EQ(redo.annotate.size(), 4u);
  EXPECT_EQ(FindEvent(redo, "BarrierOpened"), nullptr);
}

TEST(PolicyInPlaceTest, AFailureIsCountedOnceAndTwoInOneGenerationMakeOneRestart) {
  PodSim sim(InPlaceSpec());
  RunJob(sim);
  ProgramExits(sim.Worker(1), 3);
  ProgramExits(sim.Worker(2), 4);
  const Plan order = sim.Step();
  EXPECT_EQ(order.status.in_place->generation, 2);
  EXPECT_EQ(order.status.worker_restarts.at("Worker-1").count, 1);
  EXPECT_EQ(order.status.worker_restarts.at("Worker-2").count, 1);
  // Seen again, those failures of generation 1 count for nothing.
  const Plan again = sim.Step();
  EXPECT_EQ(again.status.in_place->generation, 2);
  EXPECT_EQ(again.status.worker_restarts.at("Worker-1").count, 1);
  EXPECT_EQ(again.status.worker_restarts.at("Worker-2").count, 1);
  EXPECT_EQ(FindEvent(again, "WorkerRestarted"), nullptr);
}

TEST(PolicyInPlaceTest, AWorkerOutOfRestartsReissuesTheJobWithTheNextGeneration) {
  PodSim sim(InPlaceSpec(2, {{"maxWorkerRestarts", 1}, {"maxJobRetries", 1}}));
  RunJob(sim);
  ProgramExits(sim.Worker(0), 3);
  const Plan first = sim.Step();
  EXPECT_EQ(first.status.in_place->generation, 2);
  Supervise(sim, first);
  Supervise(sim, sim.Step());
  ASSERT_EQ(sim.Step().status.phase, Phase::kRunning);

  ProgramExits(sim.Worker(0), 3);
  const Plan reissue = sim.Step();
  EXPECT_EQ(reissue.status.attempt, 2);
  EXPECT_EQ(reissue.status.job_retries, 1);
  EXPECT_EQ(reissue.status.faults.back().action, "ReissueJob");
  EXPECT_EQ(reissue.remove.size(), 2u);
  EXPECT_EQ(reissue.status.in_place->generation, 3);
  EXPECT_FALSE(reissue.status.in_place->barrier_since.has_value());
}

TEST(PolicyInPlaceTest, APermanentExitFailsTheJobAsWithRecreate) {
  PodSim sim(InPlaceSpec(2, {{"faultAttributionSeconds", 0}}));
  RunJob(sim);
  ProgramExits(sim.Worker(1), 1);
  const Plan plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kFailed);
  EXPECT_EQ(plan.status.faults.back().action, "FailJob");
  EXPECT_EQ(plan.status.faults.back().exit_code, 1);
}

TEST(PolicyInPlaceTest, ABarrierThatNeverOpensFallsBackToRecreatingThePods) {
  PodSim sim(
      InPlaceSpec(2, {{"barrierTimeoutSeconds", 60}, {"maintenanceGracePeriodSeconds", 30}}));
  RunJob(sim);
  const int created = sim.created;
  ProgramExits(sim.Worker(0), 3);
  const Plan order = sim.Step();
  Supervise(sim, order, /*stop=*/false);  // worker 1's supervisor never stops its program
  const Plan waiting = sim.Step();
  EXPECT_TRUE(waiting.remove.empty());
  // The timeout counts after the programs' grace period: 30 + 60 s.
  sim.Advance(std::chrono::seconds(60));
  EXPECT_TRUE(sim.Step().remove.empty());
  sim.Advance(std::chrono::seconds(30));
  const Plan fallback = sim.Step();
  EXPECT_EQ(fallback.remove.size(), 2u);
  const EventToRecord* timeout = FindEvent(fallback, "BarrierTimeout");
  ASSERT_NE(timeout, nullptr);
  EXPECT_NE(timeout->message.find("1 of 2 pods reached the barrier of generation 2 within 60s "
                                  "(spec.faultTolerance.barrierTimeoutSeconds) after the 30s grace "
                                  "period of their programs"),
            std::string::npos)
      << timeout->message;
  EXPECT_EQ(fallback.status.FindCondition(condition::kReady)->reason, "BarrierTimeout");
  EXPECT_FALSE(fallback.status.in_place->barrier_since.has_value());
  EXPECT_EQ(fallback.status.attempt, 1);  // the same attempt, no retry used
  EXPECT_EQ(fallback.status.job_retries, 0);

  // The pods are recreated with generation 2, their barrier open.
  sim.FinishDeletions();
  const Plan recreate = sim.Step();
  EXPECT_EQ(recreate.create.size(), 2u);
  EXPECT_EQ(recreate.status.in_place->generation, 2);
  EXPECT_EQ(sim.created, created + 2);
  Annotate(sim);
  sim.AllReady();
  EXPECT_EQ(sim.Step().status.phase, Phase::kRunning);
  EXPECT_EQ(RunningGeneration(sim, 0), 2);
}

TEST(PolicyInPlaceTest, ANodeLostDuringTheBarrierReissuesTheJob) {
  PodSim sim(InPlaceSpec(2, {{"maxJobRetries", 1}}));
  RunJob(sim);
  ProgramExits(sim.Worker(0), 3);
  const Plan order = sim.Step();
  Supervise(sim, order, /*stop=*/false);
  Nodes nodes;
  nodes.Set("node-1", NodeVerdict::kUnhealthy, "TPUUnhealthy");
  LifecycleInput in = sim.Input();
  in.node_health = nodes.Fn();
  const Plan plan = Decide(in);
  EXPECT_EQ(plan.status.attempt, 2);
  EXPECT_EQ(plan.status.faults.back().action, "ReissueJob");
  EXPECT_EQ(plan.status.in_place->generation, 3);
  EXPECT_FALSE(plan.status.in_place->barrier_since.has_value());
  EXPECT_EQ(plan.remove.size(), 2u);
}

TEST(PolicyInPlaceTest, APodDeletedByHandDuringTheBarrierIsRecreatedToWaitThere) {
  PodSim sim(InPlaceSpec(2));
  RunJob(sim);
  ProgramExits(sim.Worker(0), 3);
  const Plan order = sim.Step();
  Supervise(sim, order, /*stop=*/false);
  sim.Worker(1).deletion_timestamp = sim.now();
  sim.FinishDeletions();
  const Plan recreate = sim.Step();
  ASSERT_EQ(recreate.create.size(), 1u);
  EXPECT_TRUE(recreate.status.in_place->barrier_since.has_value());
  Annotate(sim);  // generation 2, no barrier: its supervisor waits
  SetRunning(sim.Worker(1), true);
  EXPECT_TRUE(ObserveProgram(sim.Worker(1)).at_barrier);
  const Plan open = sim.Step();
  EXPECT_NE(FindEvent(open, "BarrierOpened"), nullptr);
}

TEST(PolicyInPlaceTest, ASupervisorKilledWithItsProgramCountsAsThatWorkersExit) {
  PodSim sim(InPlaceSpec(2, {{"exitCodes", {{"retryable", {137}}}}}));
  RunJob(sim);
  // Killed while the program ran: the report it last wrote says "running", the container 137.
  Restarted(sim.Worker(1), 137, Report("running", 1));
  sim.Worker(1).containers.front().last_reason = cache::InternedString::Intern("Error");
  const Plan order = sim.Step();
  EXPECT_EQ(order.status.in_place->generation, 2);
  EXPECT_EQ(order.status.worker_restarts.at("Worker-1").count, 1);
  EXPECT_EQ(order.status.faults.back().exit_code, 137);
  EXPECT_EQ(order.status.faults.back().action, "RestartInPlace");
  // Killed again while it waits at the barrier: nothing more is counted, the barrier opens.
  Supervise(sim, order);
  Restarted(sim.Worker(1), 137, Report("barrier", 1));
  const Plan open = sim.Step();
  EXPECT_NE(FindEvent(open, "BarrierOpened"), nullptr);
  EXPECT_EQ(open.status.worker_restarts.at("Worker-1").count, 1);
}

// Slice recovery of an in-place job: the replaced slice's pods go, the kept slices' pods stay,
// move to the new attempt once the old ones are gone, and wait at the barrier for the new slice.
TEST(PolicyInPlaceTest, SliceRecoveryKeepsTheOtherSlicesPodsAndRestartsThemInPlace) {
  Json spec = InPlaceSpec(2, {{"maxJobRetries", 2}});
  spec["tpu"]["slices"] = 3;
  PodSim sim(spec);
  const auto step = [&](bool admit, const std::vector<std::string>& pools, const Nodes& nodes) {
    return StepWithPools(sim, admit, pools, nodes);
  };
  Nodes healthy;
  ASSERT_EQ(step(false, {}, healthy).status.phase, Phase::kQueued);
  ASSERT_EQ(step(true, {"pool-a", "pool-b", "pool-c"}, healthy).create.size(), 6u);
  Annotate(sim);
  sim.AllReady();
  ASSERT_EQ(step(true, {}, healthy).status.phase, Phase::kRunning);
  std::map<int, std::string> uids;
  for (int i = 0; i < 6; ++i) uids[i] = sim.Worker(i).uid;

  Nodes faulty;
  faulty.Set("node-3", NodeVerdict::kUnhealthy, "TPUUnhealthy");  // slice 1
  const Plan reissue = step(true, {}, faulty);
  EXPECT_EQ(reissue.status.attempt, 2);
  EXPECT_EQ(reissue.status.job_retries, 1);
  EXPECT_EQ(reissue.status.faults.back().action, "ReplaceSlice");
  ASSERT_TRUE(reissue.status.slice_recovery.has_value());
  EXPECT_TRUE(reissue.status.slice_recovery->in_place);
  EXPECT_TRUE(reissue.status.slice_recovery->nodes.empty());
  EXPECT_EQ(reissue.status.in_place->generation, 2);
  EXPECT_TRUE(reissue.status.in_place->barrier_since.has_value());
  EXPECT_EQ(RemovedNames(reissue),
            (std::vector<std::string>{PodName(kWorker, 2), PodName(kWorker, 3)}));
  ASSERT_EQ(reissue.annotate.size(), 4u);  // the kept slices' stop orders
  for (const PodToAnnotate& a : reissue.annotate) {
    EXPECT_EQ(a.generation, 2);
    EXPECT_FALSE(a.attempt.has_value());
  }
  Supervise(sim, reissue);  // the kept programs stop and wait

  // Until slice 1's old pods are gone, the kept ones stay in attempt 1.
  const Plan waiting = step(false, {}, faulty);
  EXPECT_TRUE(waiting.remove.empty());
  EXPECT_TRUE(std::none_of(waiting.annotate.begin(), waiting.annotate.end(),
                           [](const PodToAnnotate& a) { return a.attempt.has_value(); }));
  sim.FinishDeletions();
  const Plan moved = step(false, {}, faulty);
  EXPECT_EQ(moved.status.phase, Phase::kQueued);
  EXPECT_TRUE(moved.remove.empty());
  ASSERT_EQ(moved.annotate.size(), 4u);
  for (const PodToAnnotate& a : moved.annotate) EXPECT_EQ(a.attempt, std::optional<int32_t>(2));
  Supervise(sim, moved);
  // Queued, the kept pods stay; the queue's answer for slice 1 creates its pods alone.
  const Plan queued = step(false, {}, faulty);
  EXPECT_TRUE(queued.remove.empty());
  // (The sim puts worker i on node-i: slice 1's new pods in pool-d are on healthy nodes.)
  const Plan admitted = step(true, {"pool-d"}, healthy);
  EXPECT_EQ(admitted.status.node_pools, (std::vector<std::string>{"pool-a", "pool-d", "pool-c"}));
  ASSERT_EQ(admitted.create.size(), 2u);
  EXPECT_EQ(admitted.create[0].index, 2);
  EXPECT_EQ(admitted.create[1].index, 3);
  Annotate(sim);  // generation 2, barrier closed: they wait
  SetRunning(sim.Worker(2), true);
  SetRunning(sim.Worker(3), true);
  const Plan open = step(true, {}, healthy);
  EXPECT_NE(FindEvent(open, "BarrierOpened"), nullptr);
  Supervise(sim, open);
  const Plan running = step(true, {}, healthy);
  EXPECT_EQ(running.status.phase, Phase::kRunning);
  EXPECT_FALSE(running.status.slice_recovery.has_value());
  for (int i : {0, 1, 4, 5}) {
    EXPECT_EQ(sim.Worker(i).uid, uids[i]) << i;  // the same pods
    EXPECT_EQ(RunningGeneration(sim, i), 2) << i;
  }
  EXPECT_NE(sim.Worker(2).uid, uids[2]);
  EXPECT_EQ(RunningGeneration(sim, 2), 2);
  EXPECT_TRUE(sim.violations.empty()) << ::testing::PrintToString(sim.violations);
}

// An elastic job under restart InPlace (policy/elastic.h): 3 slices of 2 workers, minSlices 1.
// Slice 0 loses its node and finds no pool: the job runs on 2 slices in the pods it runs in.
// Slice 1 keeps its id; slice 2 runs as slice 0, the id it fills: its pods keep their names
// (status.tpu.sliceSlots) and take the index labels of slice 0. Every program restarts with the
// variables of 2 slices as the barrier opens. A pool comes back: the job grows to 3 in the same
// pods, the added slice's pods (named as the slot no slice holds: 0) joining them.
TEST(PolicyInPlaceTest, AnElasticJobShrinksAndGrowsBackInThePodsItRunsIn) {
  Json spec = InPlaceSpec(2, {{"maxJobRetries", 2}, {"elastic", {{"waitSeconds", 5}}}});
  spec["tpu"]["slices"] = 3;
  spec["tpu"]["minSlices"] = 1;
  PodSim sim(spec);
  ASSERT_TRUE(sim.spec().has_value()) << sim.spec().error();
  const auto step = [&](bool admit, const std::vector<std::string>& pools, const Nodes& nodes,
                        const std::vector<std::string>& grow = {}) {
    return StepWithPools(sim, admit, pools, nodes, grow);
  };
  const auto annotation = [](const Plan& plan, const std::string& uid) {
    for (const PodToAnnotate& a : plan.annotate) {
      if (a.uid == uid) return a;
    }
    return PodToAnnotate{};
  };
  using Replica = std::optional<std::pair<ReplicaType, int32_t>>;
  Nodes healthy;
  ASSERT_EQ(step(false, {}, healthy).status.phase, Phase::kQueued);
  ASSERT_EQ(step(true, {"pool-a", "pool-b", "pool-c"}, healthy).create.size(), 6u);
  Annotate(sim);
  sim.AllReady();
  ASSERT_EQ(step(true, {}, healthy).status.phase, Phase::kRunning);
  std::map<int, std::string> uids;
  for (int i = 0; i < 6; ++i) uids[i] = sim.Worker(i).uid;

  // Slice 0 is replaced in place: the others stop and wait at the barrier.
  Nodes faulty;
  faulty.Set("node-0", NodeVerdict::kUnhealthy, "TPUUnhealthy");
  const Plan reissue = step(true, {}, faulty);
  ASSERT_TRUE(reissue.status.slice_recovery.has_value());
  EXPECT_EQ(reissue.status.slice_recovery->slices, std::vector<int32_t>{0});
  EXPECT_EQ(reissue.annotate.size(), 4u);
  Supervise(sim, reissue);
  sim.FinishDeletions();
  Supervise(sim, step(false, {}, faulty));  // the kept pods move to attempt 2
  EXPECT_EQ(step(false, {}, faulty).status.phase, Phase::kQueued);

  // No pool within waitSeconds: on 2 slices, nothing deleted or created. Slice 2's pods take
  // slice 0's labels and keep their names; the barrier opens at once with the new variables.
  sim.Advance(std::chrono::seconds(6));
  const Plan shrunk = step(false, {}, healthy);
  ASSERT_TRUE(shrunk.status.tpu.has_value());
  EXPECT_EQ(shrunk.status.tpu->active_slices, 2);
  EXPECT_EQ(shrunk.status.tpu->slice_slots, (std::vector<int32_t>{2, 1}));
  EXPECT_EQ(shrunk.status.node_pools, (std::vector<std::string>{"pool-c", "pool-b"}));
  EXPECT_EQ(shrunk.status.job_retries, 1);
  const EventToRecord* event = FindEvent(shrunk, "RunningOnFewerSlices");
  ASSERT_NE(event, nullptr);
  EXPECT_NE(event->message.find("(slice 2 runs as slice 0)"), std::string::npos) << event->message;
  EXPECT_TRUE(shrunk.remove.empty()) << ::testing::PrintToString(RemovedNames(shrunk));
  EXPECT_TRUE(shrunk.create.empty());
  EXPECT_NE(FindEvent(shrunk, "BarrierOpened"), nullptr);
  EXPECT_EQ(shrunk.annotate.size(), 4u);  // one patch a pod
  for (const auto& [old_index, index] : std::map<int, int>{{2, 2}, {3, 3}, {4, 0}, {5, 1}}) {
    SCOPED_TRACE(old_index);
    const PodToAnnotate a = annotation(shrunk, uids[old_index]);
    EXPECT_EQ(a.index, old_index == index ? std::nullopt : std::optional<int32_t>(index));
    EXPECT_EQ(a.barrier, std::optional<int32_t>(shrunk.status.in_place->generation));
    EXPECT_EQ(a.program_env, Replica(std::make_pair(kWorker, index)));
  }
  Supervise(sim, shrunk);
  const Plan degraded = step(true, {}, healthy);
  EXPECT_EQ(degraded.status.phase, Phase::kRunning);
  EXPECT_TRUE(degraded.remove.empty());
  EXPECT_TRUE(degraded.create.empty());
  for (const auto& [index, old_index] : std::map<int, int>{{0, 4}, {1, 5}, {2, 2}, {3, 3}}) {
    EXPECT_EQ(sim.Worker(index).uid, uids[old_index]) << index;  // the same pods
    EXPECT_EQ(RunningGeneration(sim, index), degraded.status.in_place->generation) << index;
  }

  // A pool is free: back to 3 slices, no pod deleted; the running programs stop at the barrier.
  const Plan grow = step(true, {}, healthy, {"pool-d"});
  EXPECT_EQ(grow.status.tpu->active_slices, 3);
  EXPECT_EQ(grow.status.tpu->slice_slots, (std::vector<int32_t>{2, 1, 0}));
  EXPECT_TRUE(grow.remove.empty()) << ::testing::PrintToString(RemovedNames(grow));
  EXPECT_EQ(grow.annotate.size(), 4u);
  ASSERT_TRUE(grow.status.slice_recovery.has_value());
  EXPECT_TRUE(grow.status.slice_recovery->in_place);
  EXPECT_EQ(grow.status.slice_recovery->slices, std::vector<int32_t>{2});
  EXPECT_EQ(grow.status.job_retries, 1);  // a grow uses none
  Supervise(sim, grow);
  Supervise(sim, step(false, {}, healthy));  // they move to the grown attempt
  const Plan added = step(true, {"pool-d"}, healthy);
  EXPECT_EQ(added.status.node_pools, (std::vector<std::string>{"pool-c", "pool-b", "pool-d"}));
  ASSERT_EQ(added.create.size(), 2u);
  EXPECT_EQ(added.create[0].index, 4);
  EXPECT_EQ(added.create[1].index, 5);
  Annotate(sim);
  SetRunning(sim.Worker(4), true);
  SetRunning(sim.Worker(5), true);
  const Plan reopened = step(true, {}, healthy);
  EXPECT_NE(FindEvent(reopened, "BarrierOpened"), nullptr);
  EXPECT_EQ(annotation(reopened, uids[4]).program_env, Replica(std::make_pair(kWorker, 0)));
  Supervise(sim, reopened);
  const Plan whole = step(true, {}, healthy);
  EXPECT_EQ(whole.status.phase, Phase::kRunning);
  EXPECT_EQ(whole.status.tpu->slices_summary, "3/3");
  EXPECT_EQ(whole.status.tpu->slice_slots, (std::vector<int32_t>{2, 1, 0}));
  for (const auto& [index, old_index] : std::map<int, int>{{0, 4}, {1, 5}, {2, 2}, {3, 3}}) {
    EXPECT_EQ(sim.Worker(index).uid, uids[old_index]) << index;  // through both changes
  }
  EXPECT_TRUE(sim.violations.empty()) << ::testing::PrintToString(sim.violations);
}

TEST(PolicyInPlaceTest, AnEvictedPodIsCountedOnceAndReplacedToJoinTheRestart) {
  PodSim sim(InPlaceSpec(2));
  RunJob(sim);
  SetEvicted(sim.Worker(1));
  const Plan order = sim.Step();
  EXPECT_EQ(order.status.in_place->generation, 2);
  EXPECT_EQ(order.status.worker_restarts.at("Worker-1").count, 1);
  EXPECT_EQ(RemovedNames(order), std::vector<std::string>{PodName(kWorker, 1)});
  Supervise(sim, order);
  // Seen again while it goes: not counted again, the barrier not reset.
  const Plan again = sim.Step();
  EXPECT_EQ(again.status.worker_restarts.at("Worker-1").count, 1);
  EXPECT_EQ(again.status.in_place->barrier_since, order.status.in_place->barrier_since);
  sim.FinishDeletions();
  ASSERT_EQ(sim.Step().create.size(), 1u);
  Annotate(sim);
  SetRunning(sim.Worker(1), true);
  const Plan open = sim.Step();
  EXPECT_NE(FindEvent(open, "BarrierOpened"), nullptr);
}

TEST(PolicyInPlaceTest, ANativeSidecarThatRestartedIsNotAFailure) {
  PodSim sim(InPlaceSpec(2));
  RunJob(sim);
  cache::ContainerInfo sidecar;
  sidecar.name = cache::InternedString::Intern("log-shipper");
  sidecar.state = cache::ContainerState::kRunning;
  sidecar.restart_count = 1;
  sidecar.last_exit_code = 1;
  sim.Worker(0).init_containers.push_back(sidecar);
  const Plan plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kRunning);
  EXPECT_TRUE(plan.status.faults.empty());
}

TEST(PolicyInPlaceTest, ObserveProgramReadsTheSupervisorsReports) {
  struct Case {
    const char* name;
    cache::ContainerState state;
    int32_t restarts;
    std::optional<int32_t> code;
    std::string message;
    int32_t barrier;
    ProgramObservation want;
  };
  auto obs = [](int32_t last, int32_t running, bool at_barrier, bool succeeded,
                std::optional<int32_t> failed) {
    ProgramObservation o;
    o.last_generation = last;
    o.running_generation = running;
    o.at_barrier = at_barrier;
    o.succeeded = succeeded;
    o.failed_generation = failed;
    return o;
  };
  using S = cache::ContainerState;
  const std::vector<Case> cases = {
      {"first run, barrier open", S::kRunning, 0, {}, "", 1, obs(1, 1, false, false, {})},
      {"first run, barrier closed", S::kRunning, 0, {}, "", 0, obs(0, 0, true, false, {})},
      {"stopped, at the barrier", S::kRunning, 1, 143, Report("stopped", 1, 0), 1,
       obs(1, 0, true, false, {})},
      {"stopped, barrier opened", S::kRunning, 1, 143, Report("stopped", 1, 0), 2,
       obs(2, 2, false, false, {})},
      {"failed, at the barrier", S::kRunning, 1, 3, Report("exited", 1, 3), 1,
       obs(1, 0, true, false, 1)},
      {"failed, back-off", S::kWaiting, 1, 3, Report("exited", 1, 3), 1,
       obs(1, 0, false, false, 1)},
      {"terminated, failed", S::kTerminated, 0, 3, Report("exited", 2, 3), 2,
       obs(2, 0, false, false, 2)},
      {"succeeded", S::kTerminated, 0, 0, Report("exited", 2, 0), 2, obs(2, 0, false, true, {})},
      {"supervisor killed", S::kRunning, 1, 137, Report("running", 3), 3,
       obs(3, 0, true, false, 3)},
      {"died at the barrier", S::kRunning, 1, 137, Report("barrier", 2), 2,
       obs(2, 0, true, false, {})},
      {"no report (exec failed)", S::kWaiting, 1, 128, "exec: not found", 4,
       obs(4, 0, false, false, 4)},
      {"could not start", S::kTerminated, 0, 1, Report("error", 2), 2, obs(2, 0, false, false, 2)},
      {"killed by the kubelet (liveness)", S::kRunning, 1, 143, Report("terminated", 2, 0), 2,
       obs(2, 0, true, false, 2)},
  };
  for (const Case& c : cases) {
    cache::PodInfo pod = MakePod(kWorker, 0, 1, "uid");
    pod.barrier_generation = c.barrier;
    cache::ContainerInfo& info = pod.containers.front();
    info.state = c.state;
    info.restart_count = c.restarts;
    if (c.state == S::kTerminated) {
      info.exit_code = *c.code;
      info.message = cache::InternedString::Intern(c.message);
    } else if (c.code) {
      info.last_exit_code = c.code;
      info.last_message = cache::InternedString::Intern(c.message);
    }
    const ProgramObservation o = ObserveProgram(pod);
    EXPECT_EQ(o.last_generation, c.want.last_generation) << c.name;
    EXPECT_EQ(o.running_generation, c.want.running_generation) << c.name;
    EXPECT_EQ(o.at_barrier, c.want.at_barrier) << c.name;
    EXPECT_EQ(o.succeeded, c.want.succeeded) << c.name;
    EXPECT_EQ(o.failed_generation, c.want.failed_generation) << c.name;
  }
}

TEST(PolicyInPlaceTest, TheSpecNeedsTheProgramsCommand) {
  Json spec = InPlaceSpec();
  spec["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].erase("command");
  const auto parsed = ParseJobSpec(MakeJob(spec));
  ASSERT_FALSE(parsed.has_value());
  EXPECT_NE(parsed.error().find("needs the first container's command"), std::string::npos)
      << parsed.error();
  spec = InPlaceSpec();
  spec["faultTolerance"]["restart"] = "Pod";
  const auto unknown = ParseJobSpec(MakeJob(spec));
  ASSERT_FALSE(unknown.has_value());
  EXPECT_EQ(unknown.error(), "spec.faultTolerance.restart: \"Pod\" is not InPlace or Recreate");
  const auto valid = ParseJobSpec(MakeJob(InPlaceSpec(4, {{"barrierTimeoutSeconds", 90}})));
  ASSERT_TRUE(valid.has_value()) << valid.error();
  EXPECT_EQ(valid->fault_tolerance.restart, RestartMode::kInPlace);
  EXPECT_EQ(valid->fault_tolerance.barrier_timeout_seconds, 90);
  const auto plain = ParseJobSpec(MakeJob(SpecJson()));
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(plain->fault_tolerance.restart, RestartMode::kRecreate);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::policy
