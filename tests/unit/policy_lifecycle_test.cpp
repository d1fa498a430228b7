#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cache/objects.h"
#include "policy/job_spec.h"
#include "policy/job_status.h"
#include "policy/lifecycle.h"
#include "policy_fixtures.h"

namespace tpujob::policy {
namespace TPUJOB_TEST_NS {

using cache::InternedString;
using fixtures::At;
using fixtures::FindEvent;
using fixtures::MakePod;
using fixtures::PodSim;
using fixtures::RemovedNames;
using fixtures::SetEvicted;
using fixtures::SetExited;
using fixtures::SetRunning;
using fixtures::SpecJson;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

constexpr ReplicaType kMaster = ReplicaType::kMaster;
constexpr ReplicaType kWorker = ReplicaType::kWorker;

Json WithFaultTolerance(Json spec, Json ft) {
  spec["faultTolerance"] = std::move(ft);
  return spec;
}

std::vector<std::pair<bool, std::string>> Events(const Plan& plan) {
  std::vector<std::pair<bool, std::string>> out;
  for (const EventToRecord& e : plan.events) out.emplace_back(e.warning, e.reason);
  return out;
}

std::pair<bool, std::string> Normal(std::string reason) { return {false, std::move(reason)}; }
std::pair<bool, std::string> Warning(std::string reason) { return {true, std::move(reason)}; }

const Condition& Cond(const JobStatus& s, std::string_view type) {
  const Condition* c = s.FindCondition(type);
  if (c == nullptr) {
    ADD_FAILURE() << "no condition " << type;
    static const Condition none;
    return none;
  }
  return *c;
}

// Brings a job through the queue to Starting with its pods created (Pending).
void StartJob(PodSim& sim) {
  ASSERT_EQ(sim.Step().status.phase, Phase::kQueued);
  const Plan plan = sim.Step();
  ASSERT_EQ(plan.status.phase, Phase::kStarting);
  ASSERT_FALSE(plan.create.empty());
}

// Brings a job to Running with every pod ready.
void RunJob(PodSim& sim) {
  StartJob(sim);
  sim.AllReady();
  ASSERT_EQ(sim.Step().status.phase, Phase::kRunning);
}

// --- ObservePod ------------------------------------------------------------------------------

TEST(PolicyObservePodTest, PendingRunningReady) {
  cache::PodInfo pod = MakePod(kWorker, 0, 1, "u");
  Termination t;
  EXPECT_EQ(ObservePod(pod, &t), PodState::kPending);
  SetRunning(pod, false);
  EXPECT_EQ(ObservePod(pod, &t), PodState::kPending);
  SetRunning(pod, true);
  EXPECT_EQ(ObservePod(pod, &t), PodState::kReady);
  EXPECT_EQ(ObservePod(pod, nullptr), PodState::kReady);
  pod.phase = cache::PodPhase::kUnknown;  // node lost: the pod is not known to have failed
  pod.ready = false;
  EXPECT_EQ(ObservePod(pod, &t), PodState::kPending);
}

TEST(PolicyObservePodTest, Succeeded) {
  cache::PodInfo pod = MakePod(kWorker, 0, 1, "u");
  SetExited(pod, 0);
  EXPECT_EQ(ObservePod(pod, nullptr), PodState::kSucceeded);
  // Every container exited 0 but the kubelet has not written the phase yet.
  pod.phase = cache::PodPhase::kRunning;
  EXPECT_EQ(ObservePod(pod, nullptr), PodState::kSucceeded);
}

TEST(PolicyObservePodTest, ContainerExitFailsThePodWhileItStillRuns) {
  cache::PodInfo pod = MakePod(kWorker, 1, 1, "u");
  SetRunning(pod, true);
  cache::ContainerInfo sidecar;
  sidecar.name = InternedString::Intern("logger");
  sidecar.state = cache::ContainerState::kRunning;
  pod.containers.push_back(sidecar);
  cache::ContainerInfo& trainer = pod.containers.front();
  trainer.state = cache::ContainerState::kTerminated;
  trainer.exit_code = 143;
  trainer.reason = InternedString::Intern("Error");
  trainer.message = cache::InternedString::Intern("SIGTERM");
  ASSERT_EQ(pod.phase, cache::PodPhase::kRunning);
  Termination t;
  EXPECT_EQ(ObservePod(pod, &t), PodState::kFailed);
  EXPECT_EQ(t.container, "trainer");
  EXPECT_FALSE(t.init_container);
  EXPECT_EQ(t.exit_code, 143);
  EXPECT_EQ(t.reason, "Error");
  EXPECT_EQ(t.message, "SIGTERM");
  // A container that finished with 0 beside a running sidecar is not the end of the pod.
  trainer.exit_code = 0;
  EXPECT_EQ(ObservePod(pod, &t), PodState::kReady);
}

TEST(PolicyObservePodTest, InitContainerExitFailsThePod) {
  cache::PodInfo pod = MakePod(kWorker, 0, 1, "u");
  cache::ContainerInfo init;
  init.name = InternedString::Intern("preflight");
  init.state = cache::ContainerState::kTerminated;
  init.exit_code = 3;
  init.reason = InternedString::Intern("Error");
  init.message = cache::InternedString::Intern(R"({"items":[{"item":"dns","ok":false}]})");
  pod.init_containers.push_back(init);
  pod.phase = cache::PodPhase::kPending;
  Termination t;
  EXPECT_EQ(ObservePod(pod, &t), PodState::kFailed);
  EXPECT_EQ(t.container, "preflight");
  EXPECT_TRUE(t.init_container);
  EXPECT_EQ(t.exit_code, 3);
  EXPECT_EQ(t.message, init.message);
  // An init container that succeeded is no failure.
  pod.init_containers.front().exit_code = 0;
  EXPECT_EQ(ObservePod(pod, &t), PodState::kPending);
}

TEST(PolicyObservePodTest, PodFailedWithoutAContainerExit) {
  cache::PodInfo pod = MakePod(kWorker, 0, 1, "u");
  SetRunning(pod, true);
  SetEvicted(pod);
  Termination t;
  EXPECT_EQ(ObservePod(pod, &t), PodState::kFailed);
  EXPECT_EQ(t.container, "");
  EXPECT_EQ(t.exit_code, std::nullopt);
  EXPECT_EQ(t.reason, "Evicted");
  EXPECT_EQ(t.message, "The node was low on resource: memory.");

  pod.reason = InternedString();
  pod.message = {};
  Termination bare;
  EXPECT_EQ(ObservePod(pod, &bare), PodState::kFailed);
  EXPECT_EQ(bare.reason, "PodFailed");
}

TEST(PolicyObservePodTest, ReplicaKey) {
  EXPECT_EQ(ReplicaKey(kWorker, 3), "Worker-3");
  EXPECT_EQ(ReplicaKey(kMaster, 0), "Master-0");
}

// --- Queue and start -------------------------------------------------------------------------

TEST(PolicyLifecycleTest, NewJobIsQueued) {
  PodSim sim(SpecJson(2));
  const Plan plan = sim.Decide();
  const JobStatus& s = plan.status;
  EXPECT_EQ(s.phase, Phase::kQueued);
  EXPECT_EQ(s.attempt, 1);
  EXPECT_EQ(s.job_retries, 0);
  EXPECT_EQ(s.observed_generation, 1);
  EXPECT_EQ(s.queued_at, At(0));
  EXPECT_EQ(s.start_time, std::nullopt);
  EXPECT_EQ(Cond(s, condition::kAdmitted),
            (Condition{"Admitted", "False", "Queued", "waiting for capacity", At(0), 1}));
  EXPECT_EQ(Cond(s, condition::kValid),
            (Condition{"Valid", "True", "SpecValid", "the spec is valid", At(0), 1}));
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_FALSE(plan.events[0].warning);
  EXPECT_EQ(plan.events[0].reason, "Queued");
  EXPECT_EQ(plan.events[0].message, "attempt 1 queued");
  EXPECT_THAT(plan.create, IsEmpty());
  EXPECT_THAT(plan.remove, IsEmpty());
  EXPECT_FALSE(plan.ensure_service);
  EXPECT_EQ(s.ready_workers, "0/2");
  EXPECT_EQ(s.replica_statuses.at("Worker"), ReplicaCounts{});
  // The slice as the operator read it; without a type, the summary is accelerator and topology.
  EXPECT_EQ(
      s.tpu,
      (TpuStatus{
          "tpu-v5-lite-podslice 2x4", "", "tpu-v5-lite-podslice", "2x4", 4, 2, 1, 1, "1/1", {}}));
}

TEST(PolicyLifecycleTest, StatusShowsTheSliceATypeImplies) {
  Json spec = SpecJson(2);
  spec["tpu"] = {{"type", "v5p-16"}, {"slices", 2}};
  spec["replicaSpecs"]["Worker"].erase("replicas");
  PodSim sim(spec);
  const Plan plan = sim.Decide();
  EXPECT_EQ(plan.status.tpu,
            (TpuStatus{"v5p-16", "v5p-16", "tpu-v5p-slice", "2x2x2", 4, 2, 2, 2, "2/2", {}}));
  EXPECT_EQ(plan.status.ready_workers, "0/4");
}

TEST(PolicyLifecycleTest, NewJobIsQueuedEvenWhenTheQueueWouldAdmitIt) {
  PodSim sim(SpecJson(2));
  EXPECT_EQ(sim.Decide(/*admit=*/true).status.phase, Phase::kQueued);
  EXPECT_THAT(sim.Decide(true).create, IsEmpty());
}

TEST(PolicyLifecycleTest, AdmittedJobStartsEveryReplicaMasterFirst) {
  PodSim sim(SpecJson(2, /*master=*/true));
  sim.Step();
  const Plan plan = sim.Step();
  const JobStatus& s = plan.status;
  EXPECT_EQ(s.phase, Phase::kStarting);
  EXPECT_EQ(s.attempt, 1);
  EXPECT_EQ(s.admitted_at, At(1));
  EXPECT_EQ(s.start_time, At(1));
  EXPECT_EQ(s.queued_at, At(0));
  EXPECT_EQ(Cond(s, condition::kAdmitted),
            (Condition{"Admitted", "True", "Admitted", "attempt 1 admitted", At(1), 1}));
  EXPECT_EQ(Cond(s, condition::kReady),
            (Condition{"Ready", "False", "WorkersNotReady", "0 of 3 pods ready", At(1), 1}));
  EXPECT_TRUE(plan.ensure_service);
  EXPECT_THAT(plan.create, ElementsAre(PodToCreate{kMaster, 0, ""}, PodToCreate{kWorker, 0, ""},
                                       PodToCreate{kWorker, 1, ""}));
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_EQ(plan.events[0].reason, "Admitted");
  EXPECT_EQ(plan.events[0].message, "attempt 1 admitted: creating 3 pods");
  EXPECT_EQ(s.ready_workers, "0/2");
  EXPECT_EQ(s.replica_statuses.at("Master"), ReplicaCounts{});
  EXPECT_EQ(s.replica_statuses.at("Worker"), ReplicaCounts{});
}

TEST(PolicyLifecycleTest, NotAdmittedStaysQueuedWithTheQueuesReason) {
  PodSim sim(SpecJson(2));
  sim.Step();
  LifecycleInput in = sim.Input(/*admit=*/false);
  in.not_admitted_reason = "InsufficientCapacity";
  in.not_admitted_message = "needs 8 google.com/tpu on tpu-v5-lite-podslice 2x4; 4 free";
  in.now = At(30);
  const Plan plan = Decide(in);
  EXPECT_EQ(plan.status.phase, Phase::kQueued);
  EXPECT_EQ(Cond(plan.status, condition::kAdmitted),
            (Condition{"Admitted", "False", "InsufficientCapacity",
                       "needs 8 google.com/tpu on tpu-v5-lite-podslice 2x4; 4 free", At(0), 1}));
  EXPECT_EQ(plan.status.queued_at, At(0));
  EXPECT_THAT(plan.create, IsEmpty());
  EXPECT_FALSE(plan.ensure_service);
  EXPECT_THAT(plan.events, IsEmpty());
}

TEST(PolicyLifecycleTest, RunningOnlyWhenEveryPodIsReady) {
  PodSim sim(SpecJson(2, /*master=*/true));
  StartJob(sim);
  SetRunning(sim.Worker(0), true);
  SetRunning(sim.Worker(1), false);
  SetRunning(sim.Master(), true);
  Plan plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kStarting);
  EXPECT_EQ(plan.status.ready_workers, "1/2");
  EXPECT_EQ(plan.status.replica_statuses.at("Worker"), (ReplicaCounts{2, 1, 0, 0, 0}));
  EXPECT_EQ(plan.status.replica_statuses.at("Master"), (ReplicaCounts{1, 1, 0, 0, 0}));
  EXPECT_EQ(Cond(plan.status, condition::kReady).message, "2 of 3 pods ready");
  EXPECT_FALSE(plan.status.running_at.has_value());
  EXPECT_THAT(plan.create, IsEmpty());
  EXPECT_THAT(plan.events, IsEmpty());

  SetRunning(sim.Worker(1), true);
  const WallTime now = sim.now();
  plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kRunning);
  EXPECT_EQ(plan.status.running_at, now);
  EXPECT_EQ(plan.status.ready_workers, "2/2");
  EXPECT_EQ(plan.status.replica_statuses.at("Worker"), (ReplicaCounts{2, 2, 0, 0, 0}));
  EXPECT_EQ(Cond(plan.status, condition::kReady),
            (Condition{"Ready", "True", "AllWorkersReady", "3 of 3 pods ready", now, 1}));
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_EQ(plan.events[0].reason, "Running");
  EXPECT_EQ(plan.events[0].message, "all 3 pods of attempt 1 are ready");
}

TEST(PolicyLifecycleTest, APodThatIsDeletingIsNotReady) {
  PodSim sim(SpecJson(2));
  RunJob(sim);
  sim.Worker(1).deletion_timestamp = sim.now();  // someone else deletes it
  const Plan plan = sim.Step();
  EXPECT_EQ(plan.status.ready_workers, "1/2");
  EXPECT_FALSE(plan.status.ConditionTrue(condition::kReady));
  EXPECT_THAT(plan.create, IsEmpty());  // not while the old one still exists
  sim.FinishDeletions();
  EXPECT_THAT(sim.Step().create, ElementsAre(PodToCreate{kWorker, 1, ""}));
}

// --- Success ---------------------------------------------------------------------------------

TEST(PolicyLifecycleTest, MasterExitZeroSucceedsAndStopsTheRest) {
  PodSim sim(SpecJson(2, /*master=*/true));
  RunJob(sim);
  // A worker that finishes first is neither the end of the job nor recreated.
  SetExited(sim.Worker(1), 0);
  Plan plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kRunning);
  EXPECT_THAT(plan.create, IsEmpty());
  EXPECT_THAT(plan.remove, IsEmpty());
  EXPECT_EQ(plan.status.replica_statuses.at("Worker"), (ReplicaCounts{1, 1, 1, 0, 0}));

  SetExited(sim.Master(), 0);
  const WallTime now = sim.now();
  plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kSucceeded);
  EXPECT_EQ(plan.status.completion_time, now);
  EXPECT_EQ(Cond(plan.status, condition::kSucceeded),
            (Condition{"Succeeded", "True", "MasterSucceeded",
                       "the master exited 0; the remaining pods are stopped", now, 1}));
  EXPECT_EQ(Cond(plan.status, condition::kReady).reason, "JobSucceeded");
  EXPECT_EQ(Cond(plan.status, condition::kReady).status, "False");
  // Only the running worker is stopped; the pods that finished stay for their logs.
  EXPECT_THAT(RemovedNames(plan), ElementsAre("train-worker-0"));
  EXPECT_THAT(Events(plan), ElementsAre(Normal("Succeeded")));
  EXPECT_THAT(plan.create, IsEmpty());

  // Afterwards: nothing created, nothing more to stop once it is deleting.
  plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kSucceeded);
  EXPECT_THAT(plan.remove, IsEmpty());
  EXPECT_THAT(plan.create, IsEmpty());
  EXPECT_THAT(plan.events, IsEmpty());
  sim.FinishDeletions();
  plan = sim.Step();
  EXPECT_THAT(plan.create, IsEmpty());
  EXPECT_FALSE(plan.ensure_service);
}

TEST(PolicyLifecycleTest, WithoutAMasterWorkerZeroDecides) {
  PodSim sim(SpecJson(2));
  RunJob(sim);
  SetExited(sim.Worker(1), 0);
  Plan plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kRunning);
  EXPECT_THAT(plan.create, IsEmpty());

  SetExited(sim.Worker(0), 0);
  plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kSucceeded);
  EXPECT_EQ(Cond(plan.status, condition::kSucceeded).message,
            "worker 0 exited 0; the remaining pods are stopped");
  EXPECT_THAT(plan.remove, IsEmpty());  // both finished
}

TEST(PolicyLifecycleTest, SingleWorkerSuccessMessageHasNoRemainingPods) {
  PodSim sim(SpecJson(1));
  RunJob(sim);
  SetExited(sim.Worker(0), 0);
  const Plan plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kSucceeded);
  EXPECT_EQ(Cond(plan.status, condition::kSucceeded).message, "worker 0 exited 0");
}

TEST(PolicyLifecycleTest, AllWorkersSucceedsOnlyWhenEveryWorkerSucceeded) {
  Json spec = SpecJson(2, /*master=*/true);
  spec["successPolicy"] = "AllWorkers";
  PodSim sim(spec);
  RunJob(sim);
  SetExited(sim.Master(), 0);
  EXPECT_EQ(sim.Step().status.phase, Phase::kRunning);
  SetExited(sim.Worker(0), 0);
  Plan plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kRunning);
  EXPECT_THAT(plan.create, IsEmpty());
  SetExited(sim.Worker(1), 0);
  plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kSucceeded);
  EXPECT_EQ(Cond(plan.status, condition::kSucceeded).reason, "AllWorkersSucceeded");
  EXPECT_EQ(Cond(plan.status, condition::kSucceeded).message, "all 2 workers exited 0");
  EXPECT_EQ(plan.status.replica_statuses.at("Worker"), (ReplicaCounts{0, 0, 2, 0, 0}));
}

TEST(PolicyLifecycleTest, AllWorkersStopsTheMasterWhenTheWorkersAreDone) {
  Json spec = SpecJson(2, /*master=*/true);
  spec["successPolicy"] = "AllWorkers";
  PodSim sim(spec);
  RunJob(sim);
  SetExited(sim.Worker(0), 0);
  SetExited(sim.Worker(1), 0);
  const Plan plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kSucceeded);
  EXPECT_THAT(RemovedNames(plan), ElementsAre("train-master-0"));
}

// --- Restart in place ------------------------------------------------------------------------

TEST(PolicyLifecycleTest, RetryableExitRestartsTheWorkerInPlace) {
  PodSim sim(SpecJson(2));
  RunJob(sim);
  cache::PodInfo& failed = sim.Worker(1);
  const std::string failed_uid = failed.uid;
  SetExited(failed, 143, "Error", "terminated by SIGTERM");
  const WallTime now = sim.now();
  const Plan plan = sim.Decide();
  const JobStatus& s = plan.status;
  EXPECT_EQ(s.phase, Phase::kRestarting);
  ASSERT_EQ(s.worker_restarts.size(), 1u);
  EXPECT_EQ(s.worker_restarts.at("Worker-1"), (RestartRecord{1, failed_uid, "node-1", 0}));
  ASSERT_EQ(plan.remove.size(), 1u);
  EXPECT_EQ(plan.remove[0].name, "train-worker-1");
  EXPECT_EQ(plan.remove[0].uid, failed_uid);
  EXPECT_THAT(plan.create, IsEmpty());
  ASSERT_EQ(s.faults.size(), 1u);
  FaultRecord want;
  want.time = now;
  want.attempt = 1;
  want.kind = "ContainerFailed";
  want.node = "node-1";
  want.pod = "train-worker-1";
  want.container = "trainer";
  want.exit_code = 143;
  want.reason = "Error";
  want.message = "terminated by SIGTERM";
  want.action = "RestartWorker";
  EXPECT_EQ(s.faults[0], want);
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_TRUE(plan.events[0].warning);
  EXPECT_EQ(plan.events[0].reason, "WorkerRestarted");
  EXPECT_EQ(plan.events[0].message,
            "worker-1 (pod train-worker-1): container trainer exited with code 143 (Error): "
            "terminated by SIGTERM; restarting it in place (1 of 5 restarts)");
  EXPECT_EQ(Cond(s, condition::kReady),
            (Condition{"Ready", "False", "WorkersNotReady", "1 of 2 pods ready", now, 1}));
  EXPECT_EQ(s.replica_statuses.at("Worker"), (ReplicaCounts{1, 1, 0, 1, 1}));
  EXPECT_EQ(s.ready_workers, "1/2");
  EXPECT_EQ(s.attempt, 1);
  EXPECT_EQ(s.job_retries, 0);
}

TEST(PolicyLifecycleTest, RestartIsCountedOnceThenTheReplicaIsRecreated) {
  PodSim sim(SpecJson(2));
  RunJob(sim);
  SetExited(sim.Worker(1), 143);
  const std::string failed_uid = sim.Worker(1).uid;

  // The status is written, but the cache still shows the failed pod as it was.
  Plan plan = sim.Decide();
  sim.job().status = plan.status.ToJson();
  plan = sim.Decide();
  EXPECT_EQ(plan.status.worker_restarts.at("Worker-1"),
            (RestartRecord{1, failed_uid, "node-1", 0}));
  EXPECT_EQ(plan.status.faults.size(), 1u);
  EXPECT_THAT(plan.events, IsEmpty());
  EXPECT_THAT(RemovedNames(plan), ElementsAre("train-worker-1"));  // asked again
  EXPECT_THAT(plan.create, IsEmpty());
  EXPECT_EQ(plan.status.phase, Phase::kRestarting);

  // Deleting: neither counted nor recreated.
  sim.Step();
  ASSERT_TRUE(sim.Worker(1).deleting());
  plan = sim.Step();
  EXPECT_THAT(plan.create, IsEmpty());
  EXPECT_THAT(plan.remove, IsEmpty());
  EXPECT_EQ(plan.status.worker_restarts.at("Worker-1").count, 1);

  // Gone: recreated in the same attempt.
  sim.FinishDeletions();
  plan = sim.Step();
  // On the node it ran on (PodSim puts worker 1 on node-1), healthy and schedulable.
  EXPECT_THAT(plan.create, ElementsAre(PodToCreate{kWorker, 1, "node-1"}));
  EXPECT_TRUE(plan.ensure_service);
  EXPECT_EQ(plan.status.attempt, 1);
  EXPECT_EQ(plan.status.phase, Phase::kRestarting);
  EXPECT_NE(sim.Worker(1).uid, failed_uid);

  // Ready again: Running.
  SetRunning(sim.Worker(1), true);
  plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kRunning);
  EXPECT_TRUE(plan.status.ConditionTrue(condition::kReady));
  EXPECT_THAT(Events(plan), ElementsAre(Normal("Running")));
  // The restart stays on record for the attempt.
  EXPECT_EQ(plan.status.worker_restarts.at("Worker-1"),
            (RestartRecord{1, failed_uid, "node-1", 0}));
  EXPECT_EQ(plan.status.replica_statuses.at("Worker").restarts, 1);
}

TEST(PolicyLifecycleTest, EachRestartOfTheSameWorkerCounts) {
  PodSim sim(WithFaultTolerance(SpecJson(2), {{"maxWorkerRestarts", 3}}));
  RunJob(sim);
  for (int i = 1; i <= 3; ++i) {
    SCOPED_TRACE(i);
    SetExited(sim.Worker(0), 139);
    Plan plan = sim.Step();
    EXPECT_EQ(plan.status.worker_restarts.at("Worker-0").count, i);
    EXPECT_THAT(plan.events[0].message, HasSubstr("(" + std::to_string(i) + " of 3 restarts)"));
    sim.FinishDeletions();
    sim.Step();
    sim.AllReady();
    EXPECT_EQ(sim.Step().status.phase, Phase::kRunning);
  }
}

TEST(PolicyLifecycleTest, RetryableExitWhileStartingKeepsStarting) {
  PodSim sim(SpecJson(2));
  StartJob(sim);
  SetExited(sim.Worker(0), 143);
  const Plan plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kStarting);
  EXPECT_EQ(plan.status.worker_restarts.at("Worker-0").count, 1);
  EXPECT_THAT(RemovedNames(plan), ElementsAre("train-worker-0"));
}

TEST(PolicyLifecycleTest, EvictedPodIsRetryable) {
  PodSim sim(SpecJson(2));
  RunJob(sim);
  SetEvicted(sim.Worker(0));
  const Plan plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kRestarting);
  EXPECT_EQ(plan.status.worker_restarts.at("Worker-0").count, 1);
  ASSERT_EQ(plan.status.faults.size(), 1u);
  const FaultRecord& f = plan.status.faults[0];
  EXPECT_EQ(f.kind, "PodFailed");
  EXPECT_EQ(f.container, "");
  EXPECT_EQ(f.exit_code, std::nullopt);
  EXPECT_EQ(f.reason, "Evicted");
  EXPECT_EQ(f.action, "RestartWorker");
  EXPECT_EQ(f.node, "node-0");
  EXPECT_EQ(plan.events[0].message,
            "worker-0 (pod train-worker-0): pod failed (Evicted): The node was low on resource: "
            "memory.; restarting it in place (1 of 5 restarts)");
}

TEST(PolicyLifecycleTest, InitContainerFailureIsAFailure) {
  // A user init container (the pre-flight one has rules of its own).
  PodSim sim(SpecJson(2));
  StartJob(sim);
  cache::PodInfo& pod = sim.Worker(1);
  cache::ContainerInfo init;
  init.name = InternedString::Intern("fetch-data");
  init.state = cache::ContainerState::kTerminated;
  init.exit_code = 3;
  init.reason = InternedString::Intern("Error");
  pod.init_containers.push_back(init);
  pod.phase = cache::PodPhase::kFailed;
  const Plan plan = sim.Step();
  EXPECT_EQ(plan.status.worker_restarts.at("Worker-1").count, 1);
  ASSERT_EQ(plan.status.faults.size(), 1u);
  EXPECT_EQ(plan.status.faults[0].kind, "InitContainerFailed");
  EXPECT_EQ(plan.status.faults[0].container, "fetch-data");
  EXPECT_EQ(plan.status.faults[0].exit_code, 3);
  EXPECT_THAT(plan.events[0].message, HasSubstr("init container fetch-data exited with code 3"));
}

TEST(PolicyLifecycleTest, ContainerExitWhileThePodStillRunsIsAFailure) {
  PodSim sim(SpecJson(2));
  RunJob(sim);
  cache::PodInfo& pod = sim.Worker(0);
  cache::ContainerInfo sidecar;
  sidecar.name = InternedString::Intern("logger");
  sidecar.state = cache::ContainerState::kRunning;
  pod.containers.push_back(sidecar);
  pod.containers.front().state = cache::ContainerState::kTerminated;
  pod.containers.front().exit_code = 143;
  ASSERT_EQ(pod.phase, cache::PodPhase::kRunning);
  const Plan plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kRestarting);
  EXPECT_EQ(plan.status.worker_restarts.at("Worker-0").count, 1);
  EXPECT_THAT(RemovedNames(plan), ElementsAre("train-worker-0"));
}

// --- Re-issue --------------------------------------------------------------------------------

TEST(PolicyLifecycleTest, PastMaxWorkerRestartsTheJobIsReissued) {
  PodSim sim(WithFaultTolerance(SpecJson(2, /*master=*/true),
                                {{"maxWorkerRestarts", 1}, {"maxJobRetries", 2}}));
  RunJob(sim);
  SetExited(sim.Worker(1), 143);
  ASSERT_EQ(sim.Step().status.worker_restarts.at("Worker-1").count, 1);
  sim.FinishDeletions();
  sim.Step();
  sim.AllReady();
  ASSERT_EQ(sim.Step().status.phase, Phase::kRunning);

  // The second failure of worker 1 is one more than its budget.
  SetExited(sim.Worker(1), 143);
  const WallTime now = sim.now();
  Plan plan = sim.Step();
  const JobStatus& s = plan.status;
  EXPECT_EQ(s.phase, Phase::kRestarting);
  EXPECT_EQ(s.attempt, 2);
  EXPECT_EQ(s.job_retries, 1);
  EXPECT_TRUE(s.reissued);
  EXPECT_THAT(s.worker_restarts, IsEmpty());
  EXPECT_FALSE(s.admitted_at.has_value());
  EXPECT_FALSE(s.running_at.has_value());
  EXPECT_EQ(Cond(s, condition::kAdmitted),
            (Condition{"Admitted", "False", "Reissued",
                       "attempt 2 waits for the pods of the previous attempt to be gone", now, 1}));
  EXPECT_EQ(Cond(s, condition::kReady).reason, "Reissued");
  EXPECT_THAT(RemovedNames(plan),
              UnorderedElementsAre("train-master-0", "train-worker-0", "train-worker-1"));
  EXPECT_THAT(plan.create, IsEmpty());
  ASSERT_EQ(s.faults.size(), 2u);
  EXPECT_EQ(s.faults[1].action, "ReissueJob");
  EXPECT_EQ(s.faults[1].attempt, 1);  // the attempt that failed
  EXPECT_THAT(Events(plan), ElementsAre(Warning("Reissued")));
  EXPECT_EQ(plan.events[0].message,
            "worker-1 (pod train-worker-1): container trainer exited with code 143 (Error); it "
            "has used its 1 restarts; re-issuing the job as attempt 2 (retry 1 of 2)");
  EXPECT_EQ(s.replica_statuses.at("Worker"), ReplicaCounts{});  // attempt 2 has no pods yet

  // While any pod of attempt 1 is left, even one being deleted, nothing is created.
  for (int i = 0; i < 3; ++i) {
    plan = sim.Step();
    EXPECT_EQ(plan.status.phase, Phase::kRestarting);
    EXPECT_THAT(plan.create, IsEmpty());
    EXPECT_FALSE(plan.ensure_service);
    EXPECT_THAT(plan.events, IsEmpty());
  }
  // Only the master is gone: still nothing.
  std::erase_if(sim.pods(), [](const PodSim::SimPod& p) { return p.type == kMaster; });
  EXPECT_THAT(sim.Step().create, IsEmpty());

  // All gone: the new attempt queues with first priority.
  sim.FinishDeletions();
  const WallTime queued = sim.now();
  plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kQueued);
  EXPECT_EQ(plan.status.queued_at, queued);
  EXPECT_EQ(Cond(plan.status, condition::kAdmitted),
            (Condition{"Admitted", "False", "Reissued",
                       "attempt 2 waits for capacity with first priority", now, 1}));
  EXPECT_THAT(plan.create, IsEmpty());
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_EQ(plan.events[0].reason, "Queued");
  EXPECT_EQ(plan.events[0].message, "attempt 2 queued with first priority");

  // Admitted: attempt 2 is created.
  plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kStarting);
  EXPECT_EQ(plan.status.attempt, 2);
  EXPECT_THAT(plan.create, ElementsAre(PodToCreate{kMaster, 0, ""}, PodToCreate{kWorker, 0, ""},
                                       PodToCreate{kWorker, 1, ""}));
  EXPECT_TRUE(plan.ensure_service);
  for (const auto& p : sim.pods()) EXPECT_EQ(p.attempt, 2);
  sim.AllReady();
  plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kRunning);
  EXPECT_EQ(plan.status.job_retries, 1);
  EXPECT_THAT(sim.violations, IsEmpty());
}

TEST(PolicyLifecycleTest, ReissueDeletesPodsTheCacheStillShowsAlive) {
  PodSim sim(WithFaultTolerance(SpecJson(2), {{"maxWorkerRestarts", 0}, {"maxJobRetries", 1}}));
  RunJob(sim);
  SetExited(sim.Worker(0), 143);
  Plan plan = sim.Decide();
  ASSERT_EQ(plan.status.attempt, 2);
  // The status was written; the deletions were lost.
  sim.job().status = plan.status.ToJson();
  plan = sim.Decide();
  EXPECT_EQ(plan.status.attempt, 2);
  EXPECT_EQ(plan.status.job_retries, 1);
  EXPECT_THAT(RemovedNames(plan), UnorderedElementsAre("train-worker-0", "train-worker-1"));
  EXPECT_THAT(plan.create, IsEmpty());
  EXPECT_THAT(plan.events, IsEmpty());
}

TEST(PolicyLifecycleTest, ReissueOffFailsTheJob) {
  PodSim sim(WithFaultTolerance(SpecJson(2), {{"maxWorkerRestarts", 0}}));
  RunJob(sim);
  SetExited(sim.Worker(1), 143);
  const Plan plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kFailed);
  EXPECT_EQ(plan.status.attempt, 1);
  EXPECT_EQ(plan.status.job_retries, 0);
  const Condition& failed = Cond(plan.status, condition::kFailed);
  EXPECT_EQ(failed.reason, "RetriesExhausted");
  EXPECT_EQ(failed.message,
            "worker-1 (pod train-worker-1): container trainer exited with code 143 (Error); it "
            "has used its 0 restarts; re-issue is off (spec.faultTolerance.maxJobRetries or "
            "annotation fault-tolerance/job-retry-num)");
  EXPECT_THAT(RemovedNames(plan), ElementsAre("train-worker-0"));
  ASSERT_EQ(plan.status.faults.size(), 1u);
  EXPECT_EQ(plan.status.faults[0].action, "FailJob");
  EXPECT_THAT(Events(plan), ElementsAre(Warning("Failed")));
}

TEST(PolicyLifecycleTest, RetriesExhaustedAfterNReissues) {
  // The annotation is the shorthand for maxJobRetries.
  PodSim sim(WithFaultTolerance(SpecJson(1), {{"maxWorkerRestarts", 0}}),
             cache::LabelMap{{kJobRetryAnnotation, "2"}});
  ASSERT_TRUE(sim.spec().has_value()) << sim.spec().error();
  RunJob(sim);
  for (int attempt = 1; attempt <= 2; ++attempt) {
    SCOPED_TRACE(attempt);
    SetExited(sim.Worker(0), 143);
    Plan plan = sim.Step();
    ASSERT_EQ(plan.status.attempt, attempt + 1);
    ASSERT_EQ(plan.status.job_retries, attempt);
    sim.FinishDeletions();
    ASSERT_EQ(sim.Step().status.phase, Phase::kQueued);
    ASSERT_EQ(sim.Step().status.phase, Phase::kStarting);
    sim.AllReady();
    ASSERT_EQ(sim.Step().status.phase, Phase::kRunning);
  }
  SetExited(sim.Worker(0), 143);
  const Plan plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kFailed);
  EXPECT_EQ(plan.status.attempt, 3);
  EXPECT_EQ(plan.status.job_retries, 2);
  EXPECT_EQ(Cond(plan.status, condition::kFailed).reason, "RetriesExhausted");
  EXPECT_THAT(Cond(plan.status, condition::kFailed).message,
              HasSubstr("; the job was already re-issued 2 times (maxJobRetries 2)"));
  EXPECT_THAT(sim.violations, IsEmpty());
}

// --- Permanent failures ----------------------------------------------------------------------

struct PermanentCase {
  int32_t code;
  const char* reason;
};

class PolicyLifecyclePermanentTest : public ::testing::TestWithParam<PermanentCase> {};

TEST_P(PolicyLifecyclePermanentTest, FailsTheJobAtOnce) {
  const PermanentCase& c = GetParam();
  PodSim sim(WithFaultTolerance(SpecJson(2, /*master=*/true), {{"maxJobRetries", 3}}));
  RunJob(sim);
  SetExited(sim.Worker(1), c.code, c.reason, "CUDA error");
  const WallTime now = sim.now();
  const Plan plan = sim.Step();
  const JobStatus& s = plan.status;
  EXPECT_EQ(s.phase, Phase::kFailed);
  EXPECT_EQ(s.completion_time, now);
  EXPECT_EQ(s.attempt, 1);
  EXPECT_EQ(s.job_retries, 0);
  EXPECT_THAT(s.worker_restarts, IsEmpty());
  const std::string code = std::to_string(c.code);
  const Condition& failed = Cond(s, condition::kFailed);
  EXPECT_EQ(failed.status, "True");
  EXPECT_EQ(failed.reason, "PermanentError");
  EXPECT_EQ(failed.last_transition_time, now);
  const std::string exit = "worker-1 (pod train-worker-1): container trainer exited with code " +
                           code + " (" + c.reason + "): CUDA error";
  if (std::string_view(c.reason) == "Error") {
    EXPECT_EQ(failed.message,
              exit + "; exit code " + code + " is permanent, the job is not retried");
  } else {
    EXPECT_THAT(failed.message, ::testing::StartsWith(exit));
  }
  EXPECT_EQ(Cond(s, condition::kReady).reason, "JobFailed");
  ASSERT_EQ(s.faults.size(), 1u);
  EXPECT_EQ(s.faults[0].action, "FailJob");
  EXPECT_EQ(s.faults[0].exit_code, c.code);
  EXPECT_EQ(s.faults[0].container, "trainer");
  EXPECT_THAT(RemovedNames(plan), UnorderedElementsAre("train-master-0", "train-worker-0"));
  EXPECT_THAT(plan.create, IsEmpty());
  EXPECT_THAT(Events(plan), ElementsAre(Warning("Failed")));
}

INSTANTIATE_TEST_SUITE_P(PolicyLifecycle, PolicyLifecyclePermanentTest,
                         ::testing::Values(PermanentCase{1, "Error"}, PermanentCase{137, "Error"},
                                           PermanentCase{137, "OOMKilled"},
                                           PermanentCase{143, "OOMKilled"}),
                         [](const ::testing::TestParamInfo<PermanentCase>& info) {
                           return std::to_string(info.param.code) + info.param.reason;
                         });

TEST(PolicyLifecycleTest, PermanentWinsOverASimultaneousSuccess) {
  PodSim sim(SpecJson(2, /*master=*/true));
  RunJob(sim);
  SetExited(sim.Master(), 0);
  SetExited(sim.Worker(0), 1);
  const Plan plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kFailed);
  EXPECT_EQ(Cond(plan.status, condition::kFailed).reason, "PermanentError");
  EXPECT_EQ(plan.status.FindCondition(condition::kSucceeded), nullptr);
  EXPECT_THAT(RemovedNames(plan), ElementsAre("train-worker-1"));
}

TEST(PolicyLifecycleTest, ConfiguredRetryableCodeRestartsInsteadOfFailing) {
  PodSim sim(WithFaultTolerance(SpecJson(2), {{"exitCodes", {{"retryable", {1}}}}}));
  RunJob(sim);
  SetExited(sim.Worker(0), 1);
  const Plan plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kRestarting);
  EXPECT_EQ(plan.status.worker_restarts.at("Worker-0").count, 1);
}

// --- Invalid spec ----------------------------------------------------------------------------

TEST(PolicyLifecycleTest, InvalidSpecOnANewJobFailsItUntilFixed) {
  Json bad = SpecJson(2);
  bad["replicaSpecs"]["PS"] = {{"replicas", 1}};
  PodSim sim(bad);
  ASSERT_FALSE(sim.spec().has_value());
  const std::string message = sim.spec().error();

  Plan plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kFailed);
  EXPECT_EQ(Cond(plan.status, condition::kValid),
            (Condition{"Valid", "False", "InvalidSpec", message, At(0), 1}));
  EXPECT_EQ(Cond(plan.status, condition::kFailed),
            (Condition{"Failed", "True", "InvalidSpec", message, At(0), 1}));
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_TRUE(plan.events[0].warning);
  EXPECT_EQ(plan.events[0].reason, "InvalidSpec");
  EXPECT_EQ(plan.events[0].message, message);
  EXPECT_THAT(plan.create, IsEmpty());
  EXPECT_EQ(plan.status.attempt, 0);

  // The same problem again: no second Event, no change.
  const Json written = sim.job().status;
  plan = sim.Step();
  EXPECT_THAT(plan.events, IsEmpty());
  EXPECT_EQ(plan.status.ToJson(), written);

  // A different problem: a new Event.
  sim.job().spec["replicaSpecs"].erase("PS");
  sim.job().spec["replicaSpecs"]["Worker"]["replicas"] = 5;
  sim.Reparse();
  plan = sim.Step();
  EXPECT_THAT(Events(plan), ElementsAre(Warning("InvalidSpec")));
  EXPECT_THAT(plan.events[0].message, HasSubstr("5 workers"));
  EXPECT_EQ(plan.status.phase, Phase::kFailed);

  // Fixed: it goes through the queue.
  sim.job().spec = SpecJson(2);
  sim.Reparse();
  plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kQueued);
  EXPECT_EQ(plan.status.attempt, 1);
  EXPECT_EQ(plan.status.FindCondition(condition::kFailed), nullptr);
  EXPECT_TRUE(plan.status.ConditionTrue(condition::kValid));
  EXPECT_THAT(Events(plan), ElementsAre(Normal("SpecValid"), Normal("Queued")));
  EXPECT_EQ(sim.Step().status.phase, Phase::kStarting);
}

TEST(PolicyLifecycleTest, InvalidSpecOnARunningJobKeepsItRunning) {
  PodSim sim(SpecJson(2));
  RunJob(sim);
  SetExited(sim.Worker(1), 143);  // even a failure waits for the spec to be fixed
  sim.job().spec["successPolicy"] = "Whatever";
  sim.Reparse();
  ASSERT_FALSE(sim.spec().has_value());
  Plan plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kRunning);
  EXPECT_EQ(Cond(plan.status, condition::kValid).status, "False");
  EXPECT_EQ(plan.status.FindCondition(condition::kFailed), nullptr);
  EXPECT_THAT(plan.create, IsEmpty());
  EXPECT_THAT(plan.remove, IsEmpty());
  EXPECT_THAT(Events(plan), ElementsAre(Warning("InvalidSpec")));
  EXPECT_THAT(sim.Step().events, IsEmpty());

  sim.job().spec = SpecJson(2);
  sim.Reparse();
  plan = sim.Step();
  EXPECT_THAT(Events(plan), ElementsAre(Normal("SpecValid"), Warning("WorkerRestarted")));
  EXPECT_EQ(plan.status.phase, Phase::kRestarting);
}

// --- Terminal, deleted, strays ---------------------------------------------------------------

TEST(PolicyLifecycleTest, TerminalJobCreatesNothingAndStopsActivePods) {
  for (Phase phase : {Phase::kSucceeded, Phase::kFailed}) {
    SCOPED_TRACE(ToString(phase));
    PodSim sim(SpecJson(2, /*master=*/true));
    RunJob(sim);
    JobStatus s = sim.Status();
    s.phase = phase;
    sim.job().status = s.ToJson();
    SetExited(sim.Worker(0), 0);
    // Worker 1 missing; master still running.
    std::erase_if(sim.pods(), [](const PodSim::SimPod& p) { return p.index == 1; });
    const Plan plan = sim.Step();
    EXPECT_EQ(plan.status.phase, phase);
    EXPECT_THAT(plan.create, IsEmpty());
    EXPECT_FALSE(plan.ensure_service);
    EXPECT_THAT(RemovedNames(plan), ElementsAre("train-master-0"));
    EXPECT_THAT(plan.events, IsEmpty());
  }
}

TEST(PolicyLifecycleTest, JobBeingDeletedGetsAnEmptyPlan) {
  PodSim sim(SpecJson(2));
  RunJob(sim);
  SetExited(sim.Worker(0), 1);
  sim.AddStray("train-debug");
  sim.job().deletion_timestamp = sim.now();
  const Json written = sim.job().status;
  const Plan plan = sim.Decide();
  EXPECT_EQ(plan.status.ToJson(), written);
  EXPECT_THAT(plan.create, IsEmpty());
  EXPECT_THAT(plan.remove, IsEmpty());
  EXPECT_THAT(plan.events, IsEmpty());
  EXPECT_FALSE(plan.ensure_service);
}

TEST(PolicyLifecycleTest, StraysAreRemoved) {
  PodSim sim(SpecJson(2));
  RunJob(sim);
  const std::string uid = sim.AddStray("train-debug").uid;
  Plan plan = sim.Decide();
  ASSERT_EQ(plan.remove.size(), 1u);
  EXPECT_EQ(plan.remove[0].name, "train-debug");
  EXPECT_EQ(plan.remove[0].uid, uid);
  EXPECT_EQ(plan.status.phase, Phase::kRunning);
  // Also once the job has finished.
  JobStatus s = sim.Status();
  s.phase = Phase::kSucceeded;
  sim.job().status = s.ToJson();
  plan = sim.Decide();
  EXPECT_THAT(RemovedNames(plan),
              UnorderedElementsAre("train-debug", "train-worker-0", "train-worker-1"));
}

TEST(PolicyLifecycleTest, PodOfAReplicaBeyondTheSpecIsRemoved) {
  PodSim sim(SpecJson(2));
  RunJob(sim);
  SetRunning(sim.AddPod(kWorker, 2, 1), true);
  SetRunning(sim.AddPod(kMaster, 0, 1), true);  // the spec has no Master
  const Plan plan = sim.Step();
  EXPECT_THAT(RemovedNames(plan), UnorderedElementsAre("train-worker-2", "train-master-0"));
  EXPECT_THAT(plan.create, IsEmpty());
  EXPECT_EQ(plan.status.phase, Phase::kRunning);
  // Deleting: not asked again.
  EXPECT_THAT(sim.Step().remove, IsEmpty());
}

TEST(PolicyLifecycleTest, PodOfAnEarlierAttemptIsRemovedAndBlocksCreation) {
  PodSim sim(SpecJson(2));
  StartJob(sim);
  // A left-over of attempt 0 for worker 1, and worker 1 of the current attempt missing.
  std::erase_if(sim.pods(), [](const PodSim::SimPod& p) { return p.index == 1; });
  const std::string old_uid = sim.AddPod(kWorker, 1, 0).uid;
  Plan plan = sim.Step();
  ASSERT_EQ(plan.remove.size(), 1u);
  EXPECT_EQ(plan.remove[0].uid, old_uid);
  EXPECT_THAT(plan.create, IsEmpty());
  EXPECT_THAT(sim.Step().create, IsEmpty());  // still there, deleting
  sim.FinishDeletions();
  EXPECT_THAT(sim.Step().create, ElementsAre(PodToCreate{kWorker, 1, ""}));
}

// --- Idempotence -----------------------------------------------------------------------------

// A whole life, checking at every step that deciding again on the written status with the same
// pods changes nothing and records no Event.
TEST(PolicyLifecycleTest, WalkThroughIsAFixedPointAtEveryStep) {
  PodSim sim(WithFaultTolerance(SpecJson(2, /*master=*/true),
                                {{"maxWorkerRestarts", 1}, {"maxJobRetries", 1}}));
  sim.check_fixed_point = true;
  std::vector<Phase> phases;
  auto step = [&](bool admit = true) {
    const Plan plan = sim.Step(admit);
    phases.push_back(plan.status.phase);
    return plan;
  };
  step(false);  // Queued
  step(false);  // still Queued
  step();       // Starting
  step();       // Starting, pods pending
  SetRunning(sim.Master(), true);
  step();  // Starting, one ready
  sim.AllReady();
  step();  // Running
  step();  // Running, nothing new
  SetEvicted(sim.Worker(0));
  step();  // Restarting: worker 0 restarted in place
  step();  // the failed pod deleting
  sim.FinishDeletions();
  step();  // worker 0 recreated
  sim.AllReady();
  step();  // Running
  SetExited(sim.Worker(0), 143);
  step();  // re-issued
  step();  // old pods deleting
  sim.FinishDeletions();
  step(false);  // Queued, attempt 2
  step(false);
  step();  // Starting attempt 2
  sim.AllReady();
  step();  // Running
  SetExited(sim.Worker(1), 0);
  step();  // a worker done, still Running
  SetExited(sim.Master(), 0);
  step();  // Succeeded
  step();
  sim.FinishDeletions();
  step();
  EXPECT_THAT(phases,
              ElementsAre(Phase::kQueued, Phase::kQueued, Phase::kStarting, Phase::kStarting,
                          Phase::kStarting, Phase::kRunning, Phase::kRunning, Phase::kRestarting,
                          Phase::kRestarting, Phase::kRestarting, Phase::kRunning,
                          Phase::kRestarting, Phase::kRestarting, Phase::kQueued, Phase::kQueued,
                          Phase::kStarting, Phase::kRunning, Phase::kRunning, Phase::kSucceeded,
                          Phase::kSucceeded, Phase::kSucceeded));
  EXPECT_EQ(sim.Status().attempt, 2);
  EXPECT_THAT(sim.violations, IsEmpty());
}

// The failure paths are fixed points too.
TEST(PolicyLifecycleTest, FailurePathsAreFixedPoints) {
  {
    PodSim sim(SpecJson(2, /*master=*/true));
    sim.check_fixed_point = true;
    sim.Step();
    sim.Step();
    sim.AllReady();
    sim.Step();
    SetExited(sim.Worker(1), 1);
    EXPECT_EQ(sim.Step().status.phase, Phase::kFailed);
    sim.Step();
    sim.FinishDeletions();
    sim.Step();
  }
  {
    PodSim sim(WithFaultTolerance(SpecJson(2), {{"maxWorkerRestarts", 0}}));
    sim.check_fixed_point = true;
    sim.Step();
    sim.Step();
    sim.AllReady();
    sim.Step();
    SetExited(sim.Worker(1), 143);
    EXPECT_EQ(sim.Step().status.phase, Phase::kFailed);
  }
  {
    Json bad = SpecJson(2);
    bad["tpu"]["topology"] = "2x";
    PodSim sim(bad);
    sim.check_fixed_point = true;
    EXPECT_EQ(sim.Step().status.phase, Phase::kFailed);
    sim.Step();
  }
}

// The Queued status of a new job already carries the counts: a job waiting in the queue costs no
// second status write.
TEST(PolicyLifecycleTest, QueuedNewJobIsAFixedPoint) {
  PodSim sim(SpecJson(2));
  const Plan queued = sim.Step();
  ASSERT_EQ(queued.status.phase, Phase::kQueued);
  const Plan again = sim.Decide(/*admit=*/false);
  EXPECT_EQ(again.status.ToJson(), queued.status.ToJson());
}

// The pass that restarts a worker writes the Ready condition the next pass (same pods, the failed
// one already counted) would write, so the restart costs one status write, not two.
TEST(PolicyLifecycleTest, RestartDecisionIsAFixedPoint) {
  PodSim sim(SpecJson(2));
  RunJob(sim);
  SetExited(sim.Worker(0), 143);
  const Plan restart = sim.Decide();
  ASSERT_EQ(restart.status.phase, Phase::kRestarting);
  sim.job().status = restart.status.ToJson();
  const Plan again = sim.Decide();
  EXPECT_EQ(again.status.ToJson(), restart.status.ToJson());
  EXPECT_THAT(again.events, IsEmpty());
}

// A retryable failure seen in the pass that ends the job is not counted, and leaves no empty
// record behind (workerRestarts {"Worker-1": {"count": 0}}).
TEST(PolicyLifecycleTest, FinishingPassLeavesNoEmptyRestartRecord) {
  PodSim sim(SpecJson(2, /*master=*/true));
  RunJob(sim);
  SetExited(sim.Master(), 0);
  SetExited(sim.Worker(1), 143);
  const Plan plan = sim.Step();
  ASSERT_EQ(plan.status.phase, Phase::kSucceeded);
  EXPECT_THAT(plan.status.worker_restarts, IsEmpty());
  EXPECT_FALSE(plan.status.ToJson().contains("workerRestarts"));

  // Nor when another replica's permanent failure ends it.
  PodSim other(SpecJson(2));
  RunJob(other);
  SetExited(other.Worker(0), 143);
  SetExited(other.Worker(1), 1);
  const Plan failed = other.Step();
  ASSERT_EQ(failed.status.phase, Phase::kFailed);
  EXPECT_THAT(failed.status.worker_restarts, IsEmpty());
}

TEST(PolicyLifecycleTest, LongMessagesAreBounded) {
  PodSim sim(SpecJson(2));
  RunJob(sim);
  SetExited(sim.Worker(0), 143, "Error", std::string(5000, 'x'));
  const Plan plan = sim.Step();
  ASSERT_EQ(plan.status.faults.size(), 1u);
  const std::string& fault = plan.status.faults[0].message;
  EXPECT_EQ(fault.size(), 1024u);
  EXPECT_EQ(fault.substr(1021), "...");
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_EQ(plan.events[0].message.size(), 1024u);
  EXPECT_EQ(plan.events[0].message.substr(1021), "...");
}

// A message is cut at a character boundary: a split UTF-8 sequence would make
// nlohmann::json::dump() throw (type_error.316) when the status is sent.
TEST(PolicyLifecycleTest, BoundedMessagesStayValidUtf8) {
  PodSim sim(SpecJson(2));
  RunJob(sim);
  std::string message(1020, 'x');
  for (int i = 0; i < 10; ++i) message += "\xc3\xa9";  // "é": bytes 1020-1021 are one character
  SetExited(sim.Worker(0), 143, "Error", message);
  const Plan plan = sim.Step();
  ASSERT_EQ(plan.status.faults.size(), 1u);
  EXPECT_EQ(plan.status.faults[0].message, std::string(1020, 'x') + "...");
  EXPECT_NO_THROW(plan.status.ToJson().dump());
  for (const EventToRecord& e : plan.events) {
    EXPECT_LE(e.message.size(), 1024u);
    EXPECT_NO_THROW(Json(e.message).dump());
  }
  // Whatever the offset of the cut.
  for (size_t pad = 1010; pad < 1030; ++pad) {
    SCOPED_TRACE(pad);
    std::string text(pad, 'x');
    for (int i = 0; i < 20; ++i) text += "\xe4\xb8\xad";  // a 3-byte character
    PodSim other(SpecJson(1));
    RunJob(other);
    SetExited(other.Worker(0), 143, "Error", text);
    const Plan p = other.Step();
    ASSERT_EQ(p.status.faults.size(), 1u);
    EXPECT_LE(p.status.faults[0].message.size(), 1024u);
    EXPECT_NO_THROW(p.status.ToJson().dump());
    for (const EventToRecord& e : p.events) EXPECT_NO_THROW(Json(e.message).dump());
  }
}

// --- Property: random pod outcomes ------------------------------------------------------------

TEST(PolicyLifecyclePropertyTest, RandomOutcomesKeepTheInvariants) {
  int finished = 0, reissued = 0, restarted = 0;
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
    const int workers = std::array{1, 2, 4}[rng() % 3];
    const bool master = chance(0.5);
    const int max_restarts = static_cast<int>(rng() % 3);
    const int max_retries = static_cast<int>(rng() % 4);
    Json spec = WithFaultTolerance(SpecJson(workers, master), {{"maxWorkerRestarts", max_restarts},
                                                               {"maxJobRetries", max_retries}});
    if (chance(0.3)) spec["successPolicy"] = "AllWorkers";
    PodSim sim(spec);
    ASSERT_TRUE(sim.spec().has_value()) << sim.spec().error();

    Phase terminal = Phase::kNone;
    for (int step = 0;
         step < 400 && sim.LivePods() + static_cast<int>(terminal == Phase::kNone) > 0; ++step) {
      // The pods move on.
      for (auto& p : sim.pods()) {
        if (p.pod.deleting() || p.pod.terminated() || !chance(0.3)) continue;
        const double r = std::uniform_real_distribution<double>(0, 1)(rng);
        if (r < 0.55) {
          SetRunning(p.pod, true);
        } else if (r < 0.8) {
          SetExited(p.pod, chance(0.5) ? 143 : 2);
        } else if (r < 0.87) {
          SetEvicted(p.pod);
        } else if (r < 0.9) {
          SetExited(p.pod, 1);
        } else if (r < 0.93) {
          SetExited(p.pod, 137, "OOMKilled");
        } else {
          SetExited(p.pod, 0);
        }
      }
      // Some deletions finish.
      std::erase_if(sim.pods(),
                    [&](const PodSim::SimPod& p) { return p.pod.deleting() && chance(0.5); });

      const Plan plan = sim.Decide(/*admit=*/chance(0.8));
      if (chance(0.15)) {
        // The status is written but the pod requests are lost (or the cache lags them).
        sim.job().status = plan.status.ToJson();
        if (plan.status.attempt > sim.max_attempt_seen) sim.max_attempt_seen = plan.status.attempt;
      } else {
        sim.Apply(plan);
      }
      const Phase phase = plan.status.phase;
      if (terminal != Phase::kNone) {
        ASSERT_EQ(phase, terminal) << "a finished job changed phase";
        ASSERT_THAT(plan.create, IsEmpty());
      }
      if (IsTerminal(phase)) terminal = phase;
      for (const auto& [key, record] : plan.status.worker_restarts) {
        ASSERT_LE(record.count, max_restarts) << key;
        restarted += record.count > 0;
      }
      ASSERT_GE(plan.status.attempt, 1);
      ASSERT_LE(plan.status.attempt, 1 + max_retries);
      ASSERT_EQ(plan.status.attempt, 1 + plan.status.job_retries);
      ASSERT_THAT(sim.violations, IsEmpty());
      // Never two pods for one replica id.
      std::set<std::pair<ReplicaType, int32_t>> ids;
      for (const auto& p : sim.pods()) {
        ASSERT_TRUE(ids.insert({p.type, p.index}).second)
            << "two pods for " << fixtures::PodName(p.type, p.index);
      }
    }
    finished += terminal != Phase::kNone;
    reissued += sim.max_attempt_seen > 1;
    EXPECT_LE(sim.max_restarts_seen, max_restarts);
    EXPECT_LE(sim.max_attempt_seen, 1 + max_retries);
  }
  // The sequences reach every kind of outcome.
  EXPECT_GT(finished, 250);
  EXPECT_GT(reissued, 30);
  EXPECT_GT(restarted, 30);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::policy
