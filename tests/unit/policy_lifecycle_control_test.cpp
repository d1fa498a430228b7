// Job control in Decide(): spec.suspend, spec.activeDeadlineSeconds,
// spec.ttlSecondsAfterFinished and preemption by the queue.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>

#include "policy/goodput.h"
#include "policy/lifecycle.h"
#include "policy_fixtures.h"

namespace tpujob::policy {
namespace TPUJOB_TEST_NS {

using namespace fixtures;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

void RunJob(PodSim& sim) {
  ASSERT_EQ(sim.Step().status.phase, Phase::kQueued);
  ASSERT_EQ(sim.Step().status.phase, Phase::kStarting);
  sim.AllReady();
  ASSERT_EQ(sim.Step().status.phase, Phase::kRunning);
}

void SetSuspend(PodSim& sim, bool suspend) {
  sim.job().spec["suspend"] = suspend;
  sim.job().generation++;
  sim.Reparse();
}

const Condition* Cond(const Plan& plan, std::string_view type) {
  return plan.status.FindCondition(type);
}

TEST(PolicyJobControlTest, SuspendStopsTheJobAndResumeRunsTheSameAttemptAgain) {
  PodSim sim(SpecJson(2), cache::LabelMap{{"fault-tolerance/job-retry-num", "2"}});
  sim.check_fixed_point = true;
  RunJob(sim);
  const JobStatus running = sim.Status();

  SetSuspend(sim, true);
  Plan plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kSuspended);
  ASSERT_THAT(plan.remove, SizeIs(2));
  for (const PodToDelete& d : plan.remove) {
    EXPECT_EQ(d.grace_period_seconds, 300) << d.name;  // maintenanceGracePeriodSeconds
  }
  ASSERT_NE(Cond(plan, condition::kSuspended), nullptr);
  EXPECT_EQ(Cond(plan, condition::kSuspended)->status, "True");
  EXPECT_EQ(Cond(plan, condition::kSuspended)->reason, "JobSuspended");
  EXPECT_EQ(Cond(plan, condition::kAdmitted)->reason, "Suspended");
  EXPECT_EQ(Cond(plan, condition::kAdmitted)->status, "False");
  ASSERT_NE(FindEvent(plan, "Suspended"), nullptr);
  EXPECT_FALSE(FindEvent(plan, "Suspended")->warning);
  EXPECT_EQ(plan.status.attempt, running.attempt);
  EXPECT_EQ(plan.status.job_retries, running.job_retries);
  EXPECT_FALSE(plan.status.admitted_at.has_value());
  EXPECT_EQ(plan.status.goodput->state, goodput_cause::kSuspended);

  // The pods are gone; nothing is created while suspended, whatever the queue says.
  sim.FinishDeletions();
  plan = sim.Step(/*admit=*/true);
  EXPECT_EQ(plan.status.phase, Phase::kSuspended);
  EXPECT_THAT(plan.create, IsEmpty());
  EXPECT_THAT(plan.events, IsEmpty());

  SetSuspend(sim, false);
  plan = sim.Step(/*admit=*/false);
  EXPECT_EQ(plan.status.phase, Phase::kQueued);
  EXPECT_EQ(Cond(plan, condition::kSuspended)->status, "False");
  EXPECT_EQ(Cond(plan, condition::kSuspended)->reason, "JobResumed");
  EXPECT_FALSE(plan.status.start_time.has_value());  // the deadline counts anew
  EXPECT_FALSE(plan.status.reissued);
  ASSERT_NE(FindEvent(plan, "Resumed"), nullptr);

  plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kStarting);
  EXPECT_THAT(plan.create, SizeIs(2));
  EXPECT_EQ(plan.status.attempt, running.attempt);
  EXPECT_EQ(plan.status.job_retries, running.job_retries);
  EXPECT_TRUE(plan.status.start_time.has_value());
  EXPECT_TRUE(sim.violations.empty()) << ::testing::PrintToString(sim.violations);
}

TEST(PolicyJobControlTest, ResumingBeforeThePodsAreGoneWaitsForThem) {
  PodSim sim(SpecJson(2));
  RunJob(sim);
  SetSuspend(sim, true);
  ASSERT_EQ(sim.Step().status.phase, Phase::kSuspended);
  SetSuspend(sim, false);  // at once: the pods are still terminating
  ASSERT_EQ(sim.Step().status.phase, Phase::kQueued);
  Plan plan = sim.Step(/*admit=*/true);
  EXPECT_THAT(plan.create, IsEmpty());
  sim.FinishDeletions();
  plan = sim.Step(/*admit=*/true);
  EXPECT_EQ(plan.status.phase, Phase::kStarting);
  EXPECT_THAT(plan.create, SizeIs(2));
  EXPECT_TRUE(sim.violations.empty()) << ::testing::PrintToString(sim.violations);
}

TEST(PolicyJobControlTest, AJobCreatedSuspendedWaitsWithoutBeingAdmitted) {
  Json spec = SpecJson(2);
  spec["suspend"] = true;
  PodSim sim(spec);
  sim.check_fixed_point = true;
  Plan plan = sim.Step(/*admit=*/true);
  EXPECT_EQ(plan.status.phase, Phase::kSuspended);
  EXPECT_EQ(plan.status.attempt, 1);
  EXPECT_THAT(plan.create, IsEmpty());
  EXPECT_THAT(Cond(plan, condition::kSuspended)->message,
              ::testing::HasSubstr("not admitted until it is cleared"));
  plan = sim.Step(/*admit=*/true);
  EXPECT_THAT(plan.create, IsEmpty());
  EXPECT_FALSE(plan.status.start_time.has_value());
}

TEST(PolicyJobControlTest, SuspendingAFinishedJobChangesNothing) {
  PodSim sim(SpecJson(1));
  RunJob(sim);
  SetExited(sim.Worker(0), 0);
  ASSERT_EQ(sim.Step().status.phase, Phase::kSucceeded);
  SetSuspend(sim, true);
  EXPECT_EQ(sim.Step().status.phase, Phase::kSucceeded);
}

TEST(PolicyJobControlTest, ActiveDeadlineFailsTheJobOnceItsSecondsHavePassed) {
  Json spec = SpecJson(2);
  spec["activeDeadlineSeconds"] = 10;
  PodSim sim(spec);
  RunJob(sim);  // admitted at t=1
  const WallTime start = *sim.Status().start_time;
  // startTime has whole seconds: the deadline is start + 1 + 10, never earlier.
  while (sim.now() < start + seconds(11)) {
    const Plan plan = sim.Step();
    ASSERT_EQ(plan.status.phase, Phase::kRunning) << "at start + " << (sim.now() - start).count();
    ASSERT_TRUE(plan.requeue_after.has_value());
    EXPECT_LE(*plan.requeue_after, seconds(11));
  }
  const Plan plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kFailed);
  EXPECT_EQ(Cond(plan, condition::kFailed)->reason, "DeadlineExceeded");
  EXPECT_THAT(Cond(plan, condition::kFailed)->message,
              ::testing::HasSubstr("activeDeadlineSeconds of 10s"));
  EXPECT_THAT(plan.remove, SizeIs(2));
  ASSERT_NE(FindEvent(plan, "Failed"), nullptr);
}

TEST(PolicyJobControlTest, ActiveDeadlineCountsTheQueueAfterAReissue) {
  Json spec = SpecJson(2);
  spec["activeDeadlineSeconds"] = 5;
  PodSim sim(spec, cache::LabelMap{{"fault-tolerance/job-retry-num", "1"}});
  RunJob(sim);
  Nodes sick;
  sick.Set("node-0", NodeVerdict::kUnhealthy, "TPUUnhealthy");
  LifecycleInput in = sim.Input();
  in.node_health = sick.Fn();
  Plan plan = Decide(in);
  sim.Apply(plan);
  ASSERT_EQ(plan.status.phase, Phase::kRestarting);  // re-issued
  sim.FinishDeletions();
  plan = sim.Step(/*admit=*/false);
  ASSERT_EQ(plan.status.phase, Phase::kQueued);
  sim.Advance(seconds(10));
  plan = sim.Step(/*admit=*/false);
  EXPECT_EQ(plan.status.phase, Phase::kFailed);
  EXPECT_EQ(Cond(plan, condition::kFailed)->reason, "DeadlineExceeded");
}

TEST(PolicyJobControlTest, TtlDeletesAFinishedJobNeverEarly) {
  Json spec = SpecJson(1);
  spec["ttlSecondsAfterFinished"] = 5;
  PodSim sim(spec);
  RunJob(sim);
  SetExited(sim.Worker(0), 0);
  Plan plan = sim.Step();
  ASSERT_EQ(plan.status.phase, Phase::kSucceeded);
  EXPECT_FALSE(plan.delete_job);
  const WallTime done = *plan.status.completion_time;
  while (sim.now() < done + seconds(6)) {
    plan = sim.Step();
    EXPECT_FALSE(plan.delete_job) << "at completion + " << (sim.now() - done).count();
    ASSERT_TRUE(plan.requeue_after.has_value());
  }
  plan = sim.Step();
  EXPECT_TRUE(plan.delete_job);
  // Decided again later (an operator that was down then): still deleted.
  sim.Advance(seconds(3600));
  EXPECT_TRUE(sim.Decide().delete_job);
}

TEST(PolicyJobControlTest, WithoutTtlAFinishedJobIsKept) {
  PodSim sim(SpecJson(1));
  RunJob(sim);
  SetExited(sim.Worker(0), 0);
  ASSERT_EQ(sim.Step().status.phase, Phase::kSucceeded);
  sim.Advance(seconds(86400));
  const Plan plan = sim.Decide();
  EXPECT_FALSE(plan.delete_job);
  EXPECT_FALSE(plan.requeue_after.has_value());
}

TEST(PolicyJobControlTest, PreemptionStopsTheJobLikeMaintenanceAndQueuesItByPriority) {
  Json spec = SpecJson(2);
  spec["queueTimeoutSeconds"] = 20;
  PodSim sim(spec, cache::LabelMap{{"fault-tolerance/job-retry-num", "1"}});
  sim.check_fixed_point = true;
  RunJob(sim);
  const JobStatus running = sim.Status();

  sim.preempt =
      PreemptOrder{"team-b/high", "preempted by team-b/high (priority 100), which needs", 1, ""};
  Plan plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kRestarting);
  ASSERT_THAT(plan.remove, SizeIs(2));
  for (const PodToDelete& d : plan.remove) {
    EXPECT_EQ(d.grace_period_seconds, 300) << d.name;  // maintenanceGracePeriodSeconds
  }
  EXPECT_EQ(plan.status.attempt, running.attempt + 1);
  EXPECT_EQ(plan.status.job_retries, running.job_retries);  // not a retry
  EXPECT_FALSE(plan.status.reissued);                       // queues by priority, not first
  EXPECT_EQ(plan.status.preemptions, 1);
  EXPECT_EQ(plan.status.preempted_by, "team-b/high");
  EXPECT_TRUE(plan.status.preempted_at.has_value());
  ASSERT_NE(Cond(plan, condition::kPreempted), nullptr);
  EXPECT_EQ(Cond(plan, condition::kPreempted)->status, "True");
  EXPECT_EQ(Cond(plan, condition::kPreempted)->reason, "Preempted");
  EXPECT_THAT(Cond(plan, condition::kPreempted)->message, HasSubstr("team-b/high"));
  EXPECT_EQ(Cond(plan, condition::kAdmitted)->status, "False");
  ASSERT_NE(FindEvent(plan, "Preempted"), nullptr);
  EXPECT_TRUE(FindEvent(plan, "Preempted")->warning);
  EXPECT_THAT(FindEvent(plan, "Preempted")->message, HasSubstr("no retry used"));
  ASSERT_FALSE(plan.status.faults.empty());
  EXPECT_EQ(plan.status.faults.back().kind, "Preempted");
  EXPECT_EQ(plan.status.faults.back().action, "PreemptJob");
  EXPECT_EQ(plan.status.faults.back().attempt, running.attempt);
  EXPECT_EQ(plan.status.goodput->state, goodput_cause::kPreemption);

  // The queue no longer names it once its status shows it preempted.
  sim.preempt.reset();
  sim.FinishDeletions();
  plan = sim.Step(/*admit=*/false);
  EXPECT_EQ(plan.status.phase, Phase::kQueued);
  EXPECT_EQ(Cond(plan, condition::kAdmitted)->reason, "Preempted");
  EXPECT_EQ(plan.status.goodput->state, goodput_cause::kPreemption);
  ASSERT_NE(FindEvent(plan, "Queued"), nullptr);
  EXPECT_THAT(FindEvent(plan, "Queued")->message, HasSubstr("after a preemption"));

  // Past its queueTimeoutSeconds it still waits: being preempted never fails a job.
  for (int i = 0; i < 30; ++i) plan = sim.Step(/*admit=*/false);
  EXPECT_EQ(plan.status.phase, Phase::kQueued);

  plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kStarting);
  EXPECT_THAT(plan.create, SizeIs(2));
  EXPECT_EQ(Cond(plan, condition::kPreempted)->status, "False");
  EXPECT_EQ(Cond(plan, condition::kPreempted)->reason, "Readmitted");
  EXPECT_EQ(plan.status.job_retries, running.job_retries);
  EXPECT_EQ(plan.status.preemptions, 1);
  EXPECT_TRUE(sim.violations.empty()) << ::testing::PrintToString(sim.violations);
}

TEST(PolicyJobControlTest, PreemptionOfAJobWithoutRetriesStillRequeuesIt) {
  PodSim sim(SpecJson(1));  // maxJobRetries 0: a fault would fail it
  RunJob(sim);
  sim.preempt = PreemptOrder{"team-b/high", "preempted", 1, ""};
  const Plan plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kRestarting);
  EXPECT_EQ(Cond(plan, condition::kFailed), nullptr);
}

TEST(PolicyJobControlTest, AnOrderForAJobNotAdmittedIsIgnored) {
  PodSim sim(SpecJson(1));
  ASSERT_EQ(sim.Step(/*admit=*/false).status.phase, Phase::kQueued);
  sim.preempt = PreemptOrder{"team-b/high", "preempted", 1, ""};
  const Plan plan = sim.Step(/*admit=*/false);
  EXPECT_EQ(plan.status.phase, Phase::kQueued);
  EXPECT_EQ(plan.status.preemptions, 0);
}

TEST(PolicyJobControlTest, AJobThatJustSucceededIsNotPreempted) {
  PodSim sim(SpecJson(2));
  RunJob(sim);
  SetExited(sim.Worker(0), 0);
  sim.preempt = PreemptOrder{"team-b/high", "preempted", 1, ""};
  const Plan plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kSucceeded);
  EXPECT_EQ(plan.status.preemptions, 0);
}

TEST(PolicyJobControlTest, AnOrderForAnotherAttemptIsIgnored) {
  PodSim sim(SpecJson(2));
  RunJob(sim);
  sim.preempt = PreemptOrder{"team-b/high", "preempted", 7, ""};
  const Plan plan = sim.Step();
  EXPECT_EQ(plan.status.phase, Phase::kRunning);
  EXPECT_EQ(plan.status.preemptions, 0);
}

// The operator wrote the preemption and stopped before deleting the pods: the next decision
// deletes them with the same grace period, and counts nothing twice.
TEST(PolicyJobControlTest, PodsLeftByACrashAfterThePreemptionKeepTheirGracePeriod) {
  PodSim sim(SpecJson(2));
  RunJob(sim);
  sim.preempt = PreemptOrder{"team-b/high", "preempted", 1, ""};
  Plan written = sim.Decide();
  ASSERT_THAT(written.remove, SizeIs(2));
  written.remove.clear();  // never sent
  sim.Apply(written);
  sim.preempt.reset();  // the queue sees the status: no order any more
  const Plan plan = sim.Step();
  ASSERT_THAT(plan.remove, SizeIs(2));
  for (const PodToDelete& d : plan.remove) EXPECT_EQ(d.grace_period_seconds, 300) << d.name;
  EXPECT_EQ(plan.status.preemptions, 1);
  EXPECT_EQ(plan.status.attempt, 2);
}

// The preemptor's Admitted condition says whom it preempts (its Event comes from the victim's
// reconcile, which carries the preemption out).
TEST(PolicyJobControlTest, ThePreemptorSaysWhomItPreempts) {
  PodSim sim(SpecJson(2));
  sim.check_fixed_point = true;
  ASSERT_EQ(sim.Step(/*admit=*/false).status.phase, Phase::kQueued);
  LifecycleInput in = sim.Input(/*admit=*/false);
  in.not_admitted_reason = "Preempting";
  in.not_admitted_message = "preempting team-a/low (priority 1) in node pool pool-a: needs";
  Plan plan = Decide(in);
  EXPECT_EQ(Cond(plan, condition::kAdmitted)->reason, "Preempting");
  EXPECT_EQ(Cond(plan, condition::kAdmitted)->message, in.not_admitted_message);
  EXPECT_EQ(FindEvent(plan, "Preempting"), nullptr);
  sim.ExpectFixedPoint(plan, /*admit=*/false);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::policy
