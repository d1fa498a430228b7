// What Decide() does with the queue's answers: admission with a node pool, the queue position
// while waiting, the queue timeout, and releasing an admission whose pods cannot be scheduled.
#include <gtest/gtest.h>

#include "policy/lifecycle.h"
#include "policy_fixtures.h"

namespace tpujob::policy {
namespace TPUJOB_TEST_NS {

using namespace fixtures;
using std::chrono::seconds;

Plan StepQueue(PodSim& sim, bool admit, std::string pool = "",
               std::optional<int32_t> position = std::nullopt, std::string message = "") {
  LifecycleInput in = sim.Input(admit);
  in.admit_pools = {std::move(pool)};
  in.queue_position = position;
  if (!message.empty()) {
    in.not_admitted_reason = "WaitingForCapacity";
    in.not_admitted_message = std::move(message);
  }
  Plan plan = Decide(in);
  sim.Apply(plan);
  return plan;
}

TEST(PolicyQueueLifecycleTest, WaitingJobShowsTheQueuesReasonAndPosition) {
  PodSim sim(SpecJson(2));
  ASSERT_EQ(StepQueue(sim, false).status.phase, Phase::kQueued);
  Plan plan = StepQueue(sim, false, "", 3, "needs 2 hosts; the best pool, p1, has 1 free");
  EXPECT_EQ(plan.status.phase, Phase::kQueued);
  EXPECT_EQ(plan.status.queue_position, 3);
  const Condition* admitted = plan.status.FindCondition(condition::kAdmitted);
  ASSERT_NE(admitted, nullptr);
  EXPECT_EQ(admitted->reason, "WaitingForCapacity");
  EXPECT_EQ(admitted->message, "needs 2 hosts; the best pool, p1, has 1 free");
  EXPECT_TRUE(plan.create.empty());
  EXPECT_FALSE(plan.requeue_after.has_value()) << "a new job has no queue timeout by default";
}

TEST(PolicyQueueLifecycleTest, AdmissionPinsThePoolAndClearsThePosition) {
  PodSim sim(SpecJson(2));
  StepQueue(sim, false);
  StepQueue(sim, false, "", 1, "waiting");
  const Plan plan = StepQueue(sim, true, "pool-b");
  EXPECT_EQ(plan.status.phase, Phase::kStarting);
  EXPECT_EQ(plan.status.node_pools, std::vector<std::string>{"pool-b"});
  EXPECT_FALSE(plan.status.queue_position.has_value());
  EXPECT_EQ(plan.status.ToJson()["nodePool"], "pool-b");
  EXPECT_EQ(plan.create.size(), 2u);
}

// status.queuedAt has whole seconds: the timeout counts from the end of its second, so the job
// fails one second after queuedAt + the timeout, never before the timeout has really passed.
TEST(PolicyQueueLifecycleTest, QueueTimeoutFailsTheJobAtTheEndOfTheDeadlinesSecond) {
  Json spec = SpecJson(2);
  spec["queueTimeoutSeconds"] = 20;
  PodSim sim(spec);
  StepQueue(sim, false);  // queued at t=0
  const WallTime queued = sim.now() - seconds(1);
  Plan plan = StepQueue(sim, false, "", 1, "waiting");
  ASSERT_TRUE(plan.requeue_after.has_value());
  EXPECT_EQ(*plan.requeue_after, seconds(20));  // now is t=1, the deadline t=21
  sim.Advance(seconds(17));
  plan = StepQueue(sim, false, "", 1, "waiting");
  EXPECT_EQ(plan.status.phase, Phase::kQueued);
  EXPECT_EQ(*plan.requeue_after, seconds(2));
  ASSERT_EQ(sim.now(), queued + seconds(20));
  plan = StepQueue(sim, false, "", 1, "waiting");
  EXPECT_EQ(plan.status.phase, Phase::kQueued) << "queuedAt + timeout may be early";
  EXPECT_EQ(*plan.requeue_after, seconds(1));
  ASSERT_EQ(sim.now(), queued + seconds(21));
  plan = StepQueue(sim, false, "", 1, "needs 2 hosts");
  EXPECT_EQ(plan.status.phase, Phase::kFailed);
  const Condition* failed = plan.status.FindCondition(condition::kFailed);
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->reason, "QueueTimeout");
  EXPECT_NE(failed->message.find("queue timeout of 20s"), std::string::npos) << failed->message;
  EXPECT_NE(FindEvent(plan, "Failed"), nullptr);
}

// Queued at 0.7 s past a whole second (written as that second): 4.9 s later, before the 5 s
// timeout has passed, the job still waits; at 5.3 s it fails.
TEST(PolicyQueueLifecycleTest, QueueTimeoutIsNeverEarlyWhenQueuedMidSecond) {
  Json spec = SpecJson(2);
  spec["queueTimeoutSeconds"] = 5;
  cache::TPUJobInfo job = MakeJob(spec);
  const std::expected<JobSpec, std::string> parsed = ParseJobSpec(job);
  auto decide = [&](WallTime now) {
    LifecycleInput in;
    in.job = &job;
    in.spec = &parsed;
    in.now = now;
    in.admit = false;
    Plan plan = Decide(in);
    job.status = plan.status.ToJson();
    return plan;
  };
  const WallTime queued = At(100) + std::chrono::milliseconds(700);
  ASSERT_EQ(decide(queued).status.phase, Phase::kQueued);
  Plan plan = decide(queued + std::chrono::milliseconds(4900));
  EXPECT_EQ(plan.status.phase, Phase::kQueued) << "failed 4.9 s after the job was queued";
  ASSERT_TRUE(plan.requeue_after.has_value());
  EXPECT_GE(queued + std::chrono::milliseconds(4900) + *plan.requeue_after, queued + seconds(5));
  EXPECT_EQ(decide(queued + std::chrono::milliseconds(5300)).status.phase, Phase::kFailed);
}

TEST(PolicyQueueLifecycleTest, ReissuedJobHasTheDefaultQueueTimeout) {
  Json spec = SpecJson(2);
  spec["faultTolerance"] = {{"maxJobRetries", 1}, {"maxWorkerRestarts", 0}};
  PodSim sim(spec);
  StepQueue(sim, false);
  StepQueue(sim, true);
  sim.AllReady();
  StepQueue(sim, true);
  SetExited(sim.Worker(0), 143);
  ASSERT_EQ(StepQueue(sim, true).status.attempt, 2);
  sim.FinishDeletions();
  Plan plan = StepQueue(sim, false);
  ASSERT_EQ(plan.status.phase, Phase::kQueued);
  ASSERT_TRUE(plan.status.reissued);
  plan = StepQueue(sim, false, "", 1, "waiting");
  ASSERT_TRUE(plan.requeue_after.has_value());
  EXPECT_EQ(*plan.requeue_after, seconds(kDefaultReissueQueueTimeoutSeconds));
  sim.Advance(seconds(kDefaultReissueQueueTimeoutSeconds));
  EXPECT_EQ(StepQueue(sim, false, "", 1, "waiting").status.phase, Phase::kFailed);
}

TEST(PolicyQueueLifecycleTest, UnschedulablePodsReleaseTheAdmissionAfterTheGrace) {
  PodSim sim(SpecJson(2));
  StepQueue(sim, false);
  ASSERT_EQ(StepQueue(sim, true, "pool-a").status.phase, Phase::kStarting);
  for (auto& p : sim.pods()) {
    p.pod.node_name = {};
    p.pod.unschedulable = true;
    p.pod.message =
        cache::InternedString::Intern("0/8 nodes are available: 8 Insufficient google.com/tpu.");
  }
  // Within the grace: the scheduler may still place them.
  Plan plan = StepQueue(sim, true);
  EXPECT_EQ(plan.status.phase, Phase::kStarting);
  EXPECT_TRUE(plan.remove.empty());

  sim.Advance(std::chrono::duration_cast<seconds>(kUnschedulableRelease));
  plan = StepQueue(sim, true);
  EXPECT_EQ(plan.status.phase, Phase::kRestarting);
  EXPECT_EQ(plan.status.attempt, 1) << "a released admission is not a new attempt";
  EXPECT_EQ(plan.status.job_retries, 0);
  EXPECT_TRUE(plan.status.reissued) << "it queues again first";
  EXPECT_TRUE(plan.status.node_pools.empty());
  EXPECT_EQ(plan.remove.size(), 2u);
  // Not the pods' own (the maintenance grace period): this attempt never ran as a whole.
  for (const PodToDelete& d : plan.remove) EXPECT_EQ(d.grace_period_seconds, kBriefGraceSeconds);
  const EventToRecord* released = FindEvent(plan, "AdmissionReleased");
  ASSERT_NE(released, nullptr);
  EXPECT_NE(released->message.find("Insufficient google.com/tpu"), std::string::npos);

  // Nothing is created while the released pods are still there; then it queues again.
  plan = StepQueue(sim, true);
  EXPECT_TRUE(plan.create.empty());
  EXPECT_EQ(plan.status.phase, Phase::kRestarting);
  sim.FinishDeletions();
  plan = StepQueue(sim, false);
  EXPECT_EQ(plan.status.phase, Phase::kQueued);
  plan = StepQueue(sim, true, "pool-c");
  EXPECT_EQ(plan.status.phase, Phase::kStarting);
  EXPECT_EQ(plan.status.node_pools, std::vector<std::string>{"pool-c"});
  EXPECT_EQ(plan.create.size(), 2u);
}

TEST(PolicyQueueLifecycleTest, AKueueAdmissionIsNotReleasedForUnschedulablePods) {
  PodSim sim(SpecJson(2));
  StepQueue(sim, false);
  ASSERT_EQ(StepQueue(sim, true).status.phase, Phase::kStarting);
  for (auto& p : sim.pods()) {
    p.pod.node_name = {};
    p.pod.unschedulable = true;
  }
  sim.Advance(std::chrono::duration_cast<seconds>(kUnschedulableRelease) * 10);
  LifecycleInput in = sim.Input(true);
  in.release_unschedulable = false;
  const Plan plan = Decide(in);
  EXPECT_EQ(plan.status.phase, Phase::kStarting);
  EXPECT_TRUE(plan.remove.empty());
  EXPECT_EQ(FindEvent(plan, "AdmissionReleased"), nullptr);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::policy
