// Slice recovery (spec.faultTolerance.recovery Slice, policy/lifecycle.h): a fault confined to
// one slice of a multislice job replaces that slice alone; the other slices keep their pools and
// go back to the nodes they held.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "policy/lifecycle.h"
#include "policy_fixtures.h"

namespace tpujob::policy {
namespace {

using namespace fixtures;
constexpr ReplicaType kWorker = ReplicaType::kWorker;

// 3 slices of 2 workers (job-wide indices 0..5; worker i on node-i); recovery as given.
PodSim SliceJob(std::string recovery = "", bool master = false) {
  Json spec = SpecJson(2, master);
  spec["tpu"]["slices"] = 3;
  spec["faultTolerance"] = {{"maxJobRetries", 2}, {"maintenanceGracePeriodSeconds", 60}};
  if (!recovery.empty()) spec["faultTolerance"]["recovery"] = recovery;
  return PodSim(spec);
}

struct Queue {
  Nodes nodes;
  std::vector<std::string> cordoned;  // nodes the cache shows unschedulable
  bool admit = true;
  std::vector<std::string> pools;
  bool replace_slices = true;
  std::string reason = "WaitingForCapacity";
  std::string message = "needs a node pool";
  std::string admitted_message;
};

Plan StepWith(PodSim& sim, const Queue& q) {
  LifecycleInput in = sim.Input(q.admit);
  in.node_health = q.nodes.Fn();
  in.node_cordoned = [cordoned = q.cordoned](std::string_view node) {
    return std::find(cordoned.begin(), cordoned.end(), node) != cordoned.end();
  };
  in.admit_pools = q.pools;
  in.replace_slices = q.replace_slices;
  in.not_admitted_reason = q.reason;
  in.not_admitted_message = q.message;
  in.admitted_message = q.admitted_message;
  Plan plan = Decide(in);
  sim.Apply(plan);
  return plan;
}

void RunAllSlices(PodSim& sim) {
  Queue q;
  q.admit = false;
  ASSERT_EQ(StepWith(sim, q).status.phase, Phase::kQueued);
  q.admit = true;
  q.pools = {"pool-a", "pool-b", "pool-c"};
  ASSERT_EQ(StepWith(sim, q).create.size(), sim.spec()->Replicas(ReplicaType::kMaster) + 6u);
  sim.AllReady();
  ASSERT_EQ(StepWith(sim, q).status.phase, Phase::kRunning);
}

// Runs the job, then fails node-3 (slice 1): slice 1 is to be replaced; with `gone`, the old
// attempt's pods are then gone.
Queue FailSliceOne(PodSim& sim, bool gone) {
  RunAllSlices(sim);
  Queue q;
  q.nodes.Set("node-3", NodeVerdict::kUnhealthy, "TPUUnhealthy");
  StepWith(sim, q);
  if (gone) sim.FinishDeletions();
  return q;
}

const PodToCreate* Creation(const Plan& plan, int32_t index) {
  for (const PodToCreate& c : plan.create) {
    if (c.type == kWorker && c.index == index) return &c;
  }
  return nullptr;
}

TEST(PolicySliceRecoveryTest, HardwareFaultInOneSliceReplacesOnlyThatSlice) {
  PodSim sim = SliceJob();
  sim.check_fixed_point = true;
  RunAllSlices(sim);
  Queue q;
  q.nodes.Set("node-3", NodeVerdict::kUnhealthy, "TPUUnhealthy");  // slice 1, host 1
  const Plan plan = StepWith(sim, q);
  EXPECT_EQ(plan.status.attempt, 2);
  EXPECT_EQ(plan.status.job_retries, 1);  // one re-issue, counted once
  ASSERT_EQ(plan.cordon.size(), 1u);
  EXPECT_EQ(plan.cordon[0].node, "node-3");
  EXPECT_EQ(plan.remove.size(), 6u);  // every program restarts: the kept slices too
  ASSERT_FALSE(plan.status.faults.empty());
  EXPECT_EQ(plan.status.faults.back().action, "ReplaceSlice");
  EXPECT_EQ(plan.status.faults.back().slice, 1);
  EXPECT_EQ(plan.status.faults.back().kind, "NodeUnhealthy");
  ASSERT_TRUE(plan.status.slice_recovery.has_value());
  EXPECT_EQ(plan.status.slice_recovery->slices, std::vector<int32_t>{1});
  EXPECT_EQ(plan.status.slice_recovery->nodes,
            (std::vector<std::string>{"node-0", "node-1", "", "", "node-4", "node-5"}));
  EXPECT_EQ(plan.status.node_pools, (std::vector<std::string>{"pool-a", "", "pool-c"}));
  const EventToRecord* event = FindEvent(plan, "Reissued");
  ASSERT_NE(event, nullptr);
  EXPECT_NE(event->message.find("replacing slice 1 alone as attempt 2 (retry 1 of 2): it gets a "
                                "new node pool, slices 0 and 2 keep theirs"),
            std::string::npos)
      << event->message;

  // The old pods go; the attempt then waits for a pool for slice 1 only, keeping the others.
  sim.FinishDeletions();
  q.admit = false;
  const Plan queued = StepWith(sim, q);
  EXPECT_EQ(queued.status.phase, Phase::kQueued);
  EXPECT_TRUE(queued.status.reissued);
  EXPECT_EQ(queued.status.node_pools, (std::vector<std::string>{"pool-a", "", "pool-c"}));
  const Condition* admitted = queued.status.FindCondition(condition::kAdmitted);
  ASSERT_NE(admitted, nullptr);
  EXPECT_EQ(admitted->reason, "Reissued");
  EXPECT_EQ(admitted->message,
            "attempt 2: slice 1 waits for a node pool with first priority; slices 0 and 2 keep "
            "their node pools");
  const Plan waiting = StepWith(sim, q);
  EXPECT_EQ(waiting.status.phase, Phase::kQueued);
  EXPECT_TRUE(waiting.create.empty());

  // A pool for slice 1: every pod is created at once, the kept slices' bound to their nodes.
  q.admit = true;
  q.pools = {"pool-d"};
  const Plan started = StepWith(sim, q);
  EXPECT_EQ(started.status.phase, Phase::kStarting);
  EXPECT_EQ(started.status.node_pools, (std::vector<std::string>{"pool-a", "pool-d", "pool-c"}));
  ASSERT_EQ(started.create.size(), 6u);
  for (int32_t i : {0, 1, 4, 5}) {
    const PodToCreate* c = Creation(started, i);
    ASSERT_NE(c, nullptr) << i;
    EXPECT_EQ(c->node, "node-" + std::to_string(i));
    EXPECT_TRUE(c->bind) << i;
  }
  for (int32_t i : {2, 3}) {
    const PodToCreate* c = Creation(started, i);
    ASSERT_NE(c, nullptr) << i;
    EXPECT_EQ(c->node, "");
    EXPECT_FALSE(c->bind);
  }
  admitted = started.status.FindCondition(condition::kAdmitted);
  ASSERT_NE(admitted, nullptr);
  EXPECT_EQ(admitted->message,
            "attempt 2 admitted: slice 1 in node pool pool-d; slices 0 and 2 restart on the nodes "
            "they hold");

  // Running again (slice 1 now on pool-d's nodes): the record of the kept nodes is dropped.
  sim.Worker(2).node_name = cache::InternedString::Intern("pool-d-0");
  sim.Worker(3).node_name = cache::InternedString::Intern("pool-d-1");
  sim.AllReady();
  const Plan running = StepWith(sim, q);
  EXPECT_EQ(running.status.phase, Phase::kRunning);
  EXPECT_FALSE(running.status.slice_recovery.has_value());
  EXPECT_FALSE(running.status.ToJson().contains("sliceRecovery"));
  EXPECT_EQ(running.status.job_retries, 1);
  EXPECT_TRUE(sim.violations.empty()) << sim.violations.front();
}

TEST(PolicySliceRecoveryTest, TheRecordSurvivesTheStatusRoundTrip) {
  PodSim sim = SliceJob();
  RunAllSlices(sim);
  Queue q;
  q.nodes.Set("node-0", NodeVerdict::kUnhealthy, "TPUUnhealthy");  // slice 0: the coordinator's
  const Plan plan = StepWith(sim, q);
  const Json written = plan.status.ToJson();
  EXPECT_EQ(written["sliceRecovery"]["slices"], Json::array({0}));
  EXPECT_EQ(written["sliceRecovery"]["nodes"],
            Json::array({"", "", "node-2", "node-3", "node-4", "node-5"}));
  EXPECT_EQ(written["nodePools"], Json::array({"", "pool-b", "pool-c"}));
  EXPECT_EQ(JobStatus::FromJson(written), plan.status);
}

TEST(PolicySliceRecoveryTest, MaintenanceOnOneSliceReplacesItWithoutUsingARetry) {
  PodSim sim = SliceJob();
  RunAllSlices(sim);
  Queue q;
  q.nodes.Set("node-4", NodeVerdict::kMaintenance, "Maintenance");  // slice 2, host 0
  const Plan plan = StepWith(sim, q);
  EXPECT_EQ(plan.status.attempt, 2);
  EXPECT_EQ(plan.status.job_retries, 0);
  EXPECT_TRUE(plan.cordon.empty());
  ASSERT_EQ(plan.remove.size(), 6u);
  for (const PodToDelete& d : plan.remove) EXPECT_EQ(d.grace_period_seconds, 60) << d.name;
  EXPECT_EQ(plan.status.faults.back().kind, "Maintenance");
  EXPECT_EQ(plan.status.faults.back().action, "ReplaceSlice");
  EXPECT_EQ(plan.status.faults.back().slice, 2);
  ASSERT_TRUE(plan.status.slice_recovery.has_value());
  EXPECT_EQ(plan.status.slice_recovery->slices, std::vector<int32_t>{2});
}

TEST(PolicySliceRecoveryTest, AWorkerOutOfRestartsReplacesItsSlice) {
  Json spec = SpecJson(2);
  spec["tpu"]["slices"] = 3;
  spec["faultTolerance"] = {{"maxJobRetries", 2}, {"maxWorkerRestarts", 0}};
  PodSim sim(spec);
  RunAllSlices(sim);
  SetExited(sim.Worker(5), 3);  // slice 2; a retryable code
  const Plan plan = StepWith(sim, Queue{});
  EXPECT_EQ(plan.status.attempt, 2);
  EXPECT_EQ(plan.status.faults.back().action, "ReplaceSlice");
  EXPECT_EQ(plan.status.faults.back().slice, 2);
  ASSERT_TRUE(plan.status.slice_recovery.has_value());
  EXPECT_EQ(plan.status.slice_recovery->slices, std::vector<int32_t>{2});
}

// When the whole job is re-issued instead: a fault touching two slices, a master's fault, a job
// Kueue admits, recovery Job.
TEST(PolicySliceRecoveryTest, FaultsBeyondOneSliceReissueTheWholeJob) {
  struct Case {
    const char* name;
    std::string recovery;
    bool master;
    std::vector<std::string> faulty;
    bool replace_slices;
  };
  const std::vector<Case> cases = {
      {"two slices", "", false, {"node-1", "node-2"}, true},
      {"recovery Job", "Job", false, {"node-3"}, true},
      {"Kueue admits it", "", false, {"node-3"}, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    PodSim sim = SliceJob(c.recovery, c.master);
    RunAllSlices(sim);
    Queue q;
    q.replace_slices = c.replace_slices;
    for (const std::string& node : c.faulty) q.nodes.Set(node, NodeVerdict::kUnhealthy, "TPU");
    const Plan plan = StepWith(sim, q);
    EXPECT_EQ(plan.status.attempt, 2);
    EXPECT_EQ(plan.status.faults.back().action, "ReissueJob");
    EXPECT_FALSE(plan.status.slice_recovery.has_value());
    sim.FinishDeletions();
    q.admit = false;
    const Plan queued = StepWith(sim, q);
    EXPECT_EQ(queued.status.phase, Phase::kQueued);
    EXPECT_TRUE(queued.status.node_pools.empty());
  }
}

TEST(PolicySliceRecoveryTest, AMastersFaultReissuesTheWholeJob) {
  PodSim sim = SliceJob("", /*master=*/true);
  RunAllSlices(sim);
  Queue q;
  q.nodes.Set(std::string(sim.Master().node_name.view()), NodeVerdict::kUnhealthy, "TPU");
  const Plan plan = StepWith(sim, q);
  EXPECT_EQ(plan.status.faults.back().action, "ReissueJob");
  EXPECT_FALSE(plan.status.slice_recovery.has_value());
}

TEST(PolicySliceRecoveryTest, AKeptNodeNoLongerHealthyOrSchedulableIsLeftToTheScheduler) {
  PodSim sim = SliceJob();
  Queue q = FailSliceOne(sim, /*gone=*/true);
  q.admit = false;
  StepWith(sim, q);
  // Meanwhile node-0 (slice 0) turned unhealthy and node-5 (slice 2) was cordoned by a person.
  q.nodes.Set("node-0", NodeVerdict::kUnhealthy, "TPUUnhealthy");
  q.cordoned = {"node-5"};
  q.admit = true;
  q.pools = {"pool-d"};
  const Plan started = StepWith(sim, q);
  ASSERT_EQ(started.create.size(), 6u);
  for (int32_t i : {0, 5}) {
    const PodToCreate* c = Creation(started, i);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->node, "") << i;
    EXPECT_FALSE(c->bind) << i;
  }
  EXPECT_TRUE(Creation(started, 1)->bind);
  EXPECT_TRUE(Creation(started, 4)->bind);
  EXPECT_EQ(started.status.slice_recovery->nodes,
            (std::vector<std::string>{"", "node-1", "", "", "node-4", ""}));
}

TEST(PolicySliceRecoveryTest, AnAnswerForTheWholeJobDoesNotAdmitASliceRecovery) {
  PodSim sim = SliceJob();
  Queue q = FailSliceOne(sim, /*gone=*/true);
  q.pools = {"pool-a", "pool-d", "pool-c"};  // made before the attempt asked for one slice
  const Plan plan = StepWith(sim, q);
  EXPECT_EQ(plan.status.phase, Phase::kQueued);
  EXPECT_TRUE(plan.create.empty());
  EXPECT_EQ(plan.status.node_pools, (std::vector<std::string>{"pool-a", "", "pool-c"}));
}

TEST(PolicySliceRecoveryTest, SuspendDropsTheRecovery) {
  PodSim sim = SliceJob();
  Queue q = FailSliceOne(sim, /*gone=*/false);
  sim.job().spec["suspend"] = true;
  sim.Reparse();
  const Plan suspended = StepWith(sim, q);
  EXPECT_EQ(suspended.status.phase, Phase::kSuspended);
  EXPECT_FALSE(suspended.status.slice_recovery.has_value());
  EXPECT_TRUE(suspended.status.node_pools.empty());
}

TEST(PolicySliceRecoveryTest, APlaceWonByPreemptionNamesTheVictim) {
  PodSim sim = SliceJob();
  Queue q = FailSliceOne(sim, /*gone=*/true);
  q.admit = false;
  q.reason = "Preempting";
  q.message =
      "preempting team-b/low (priority 10) in node pool pool-d: needs a node pool with 2 hosts";
  StepWith(sim, q);
  const Plan preempting = StepWith(sim, q);
  EXPECT_EQ(preempting.status.FindCondition(condition::kAdmitted)->reason, "Preempting");
  q.admit = true;
  q.pools = {"pool-d"};
  q.admitted_message = "after preempting team-b/low (priority 10) in node pool pool-d";
  const Plan started = StepWith(sim, q);
  const Condition* admitted = started.status.FindCondition(condition::kAdmitted);
  ASSERT_NE(admitted, nullptr);
  EXPECT_EQ(admitted->message,
            "attempt 2 admitted: slice 1 in node pool pool-d; slices 0 and 2 restart on the nodes "
            "they hold after preempting team-b/low (priority 10) in node pool pool-d");
}

}  // namespace
}  // namespace tpujob::policy
