// Slice recovery (spec.faultTolerance.recovery Slice, policy/lifecycle.h): a fault confined to
// one slice of a multislice job replaces that slice alone; the other slices keep their pools and
// go back to the nodes they held.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "policy/lifecycle.h"
#include "policy_fixtures.h"

namespace tpujob::policy {
namespace TPUJOB_TEST_NS {

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

// Faults confined to k slices, one slice left at least: those k slices are replaced, each in a
// pool of its own, with one retry; each faulty node is recorded and cordoned.
TEST(PolicySliceRecoveryTest, FaultsInTwoSlicesAtOnceReplaceBoth) {
  PodSim sim = SliceJob();
  sim.check_fixed_point = true;
  RunAllSlices(sim);
  Queue q;
  q.nodes.Set("node-1", NodeVerdict::kUnhealthy, "TPUUnhealthy");  // slice 0
  q.nodes.Set("node-4", NodeVerdict::kUnhealthy, "TPUUnhealthy");  // slice 2
  const Plan plan = StepWith(sim, q);
  EXPECT_EQ(plan.status.attempt, 2);
  EXPECT_EQ(plan.status.job_retries, 1);
  ASSERT_EQ(plan.status.faults.size(), 2u);
  EXPECT_EQ(plan.status.faults[0].node, "node-1");
  EXPECT_EQ(plan.status.faults[0].slice, 0);
  EXPECT_EQ(plan.status.faults[1].node, "node-4");
  EXPECT_EQ(plan.status.faults[1].slice, 2);
  for (const FaultRecord& f : plan.status.faults) {
    EXPECT_EQ(f.action, "ReplaceSlice");
    EXPECT_EQ(f.attempt, 1);
  }
  ASSERT_EQ(plan.cordon.size(), 2u);
  ASSERT_TRUE(plan.status.slice_recovery.has_value());
  EXPECT_EQ(plan.status.slice_recovery->slices, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(plan.status.slice_recovery->nodes,
            (std::vector<std::string>{"", "", "node-2", "node-3", "", ""}));
  EXPECT_EQ(plan.status.node_pools, (std::vector<std::string>{"", "pool-b", ""}));
  const EventToRecord* event = FindEvent(plan, "Reissued");
  ASSERT_NE(event, nullptr);
  EXPECT_NE(event->message.find("replacing slices 0 and 2 alone as attempt 2 (retry 1 of 2): each "
                                "gets a new node pool, slice 1 keep theirs"),
            std::string::npos)
      << event->message;

  sim.FinishDeletions();
  q.admit = false;
  StepWith(sim, q);
  q.admit = true;
  q.pools = {"pool-d", "pool-e"};
  const Plan started = StepWith(sim, q);
  EXPECT_EQ(started.status.node_pools, (std::vector<std::string>{"pool-d", "pool-b", "pool-e"}));
  ASSERT_EQ(started.create.size(), 6u);
  EXPECT_TRUE(Creation(started, 2)->bind);
  EXPECT_TRUE(Creation(started, 3)->bind);
  for (int32_t i : {0, 1, 4, 5}) EXPECT_FALSE(Creation(started, i)->bind) << i;
  EXPECT_TRUE(sim.violations.empty()) << sim.violations.front();
}

// The user's case: a fault in slice 0 re-issues the job replacing slice 0; 100 ms later, its
// old pods still going, a node of slice 2 turns unhealthy. That is a fault like any other:
// recorded once (not again at the next decision), cordoned, one more retry, and slice 2 is
// replaced too, so that none of its workers is left to the scheduler next to a bound slice-mate.
TEST(PolicySliceRecoveryTest, AFaultWhileTheRecoveryIsUnderWayIsRecordedCordonedAndReplaced) {
  PodSim sim = SliceJob();
  sim.check_fixed_point = true;
  RunAllSlices(sim);
  Queue q;
  q.nodes.Set("node-0", NodeVerdict::kUnhealthy, "TPUUnhealthy");  // slice 0
  const Plan first = StepWith(sim, q);
  ASSERT_EQ(first.status.slice_recovery->slices, std::vector<int32_t>{0});
  EXPECT_EQ(first.status.job_retries, 1);
  q.cordoned = {"node-0"};  // the cordon is written

  // The old pods are still terminating: node-5 (slice 2) turns unhealthy.
  q.nodes.Set("node-5", NodeVerdict::kUnhealthy, "TPUUnhealthy");
  q.admit = false;
  const Plan second = StepWith(sim, q);
  EXPECT_EQ(second.status.attempt, 2);
  EXPECT_EQ(second.status.job_retries, 2);
  ASSERT_EQ(second.status.faults.size(), 2u);
  const FaultRecord& f = second.status.faults.back();
  EXPECT_EQ(f.node, "node-5");
  EXPECT_EQ(f.slice, 2);
  EXPECT_EQ(f.kind, "NodeUnhealthy");
  EXPECT_EQ(f.action, "ReplaceSlice");
  EXPECT_EQ(f.attempt, 1);
  EXPECT_EQ(f.pod, sim.Worker(5).name);
  ASSERT_EQ(second.cordon.size(), 1u);
  EXPECT_EQ(second.cordon[0].node, "node-5");
  EXPECT_EQ(second.cordon[0].reason, "NodeUnhealthy");
  ASSERT_TRUE(second.status.slice_recovery.has_value());
  EXPECT_EQ(second.status.slice_recovery->slices, (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(second.status.slice_recovery->nodes,
            (std::vector<std::string>{"", "", "node-2", "node-3", "", ""}));
  EXPECT_EQ(second.status.node_pools, (std::vector<std::string>{"", "pool-b", ""}));
  EXPECT_NE(FindEvent(second, "Reissued"), nullptr);
  q.cordoned = {"node-0", "node-5"};

  // Counted once: the next decisions record nothing more and cordon nothing more.
  const Plan third = StepWith(sim, q);
  EXPECT_EQ(third.status.faults.size(), 2u);
  EXPECT_EQ(third.status.job_retries, 2);
  EXPECT_TRUE(third.cordon.empty());

  // The pods are gone: the attempt asks for two pools, and binds only slice 1 to its nodes.
  sim.FinishDeletions();
  const Plan queued = StepWith(sim, q);
  EXPECT_EQ(queued.status.phase, Phase::kQueued);
  EXPECT_EQ(queued.status.faults.size(), 2u);
  q.admit = true;
  q.pools = {"pool-d"};  // an answer for the one-slice request: not taken
  EXPECT_TRUE(StepWith(sim, q).create.empty());
  q.pools = {"pool-d", "pool-e"};
  const Plan started = StepWith(sim, q);
  EXPECT_EQ(started.status.phase, Phase::kStarting);
  EXPECT_EQ(started.status.node_pools, (std::vector<std::string>{"pool-d", "pool-b", "pool-e"}));
  ASSERT_EQ(started.create.size(), 6u);
  for (int32_t i : {2, 3}) {
    EXPECT_EQ(Creation(started, i)->node, "node-" + std::to_string(i));
    EXPECT_TRUE(Creation(started, i)->bind);
  }
  for (int32_t i : {0, 1, 4, 5}) {
    EXPECT_EQ(Creation(started, i)->node, "") << i;
    EXPECT_FALSE(Creation(started, i)->bind) << i;
  }
  EXPECT_EQ(started.status.job_retries, 2);
  EXPECT_EQ(started.status.faults.size(), 2u);
  EXPECT_TRUE(sim.violations.empty()) << sim.violations.front();
}

// The same fault once the old pods are gone and the attempt waits for its pool: the kept node
// has no pod left, the record of the recovery names it.
TEST(PolicySliceRecoveryTest, AFaultOnAKeptNodeWhileQueuedJoinsTheRecovery) {
  PodSim sim = SliceJob();
  Queue q = FailSliceOne(sim, /*gone=*/true);
  q.cordoned = {"node-3"};
  q.admit = false;
  ASSERT_EQ(StepWith(sim, q).status.phase, Phase::kQueued);
  q.nodes.Set("node-4", NodeVerdict::kUnhealthy, "NodeNotReady", /*unreachable=*/true);
  q.admit = true;
  q.pools = {"pool-d"};  // the queue's answer for slice 1 alone: too late
  const Plan plan = StepWith(sim, q);
  EXPECT_TRUE(plan.create.empty());
  EXPECT_EQ(plan.status.phase, Phase::kRestarting);  // queues again with its new request
  EXPECT_EQ(plan.status.faults.back().node, "node-4");
  EXPECT_EQ(plan.status.faults.back().kind, "NodeLost");
  EXPECT_EQ(plan.status.faults.back().slice, 2);
  EXPECT_EQ(plan.status.faults.back().pod, "");
  ASSERT_EQ(plan.cordon.size(), 1u);
  EXPECT_EQ(plan.cordon[0].node, "node-4");
  EXPECT_EQ(plan.status.slice_recovery->slices, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(plan.status.node_pools, (std::vector<std::string>{"pool-a", "", ""}));
  q.admit = false;
  const Plan queued = StepWith(sim, q);
  EXPECT_EQ(queued.status.phase, Phase::kQueued);
  EXPECT_EQ(queued.status.FindCondition(condition::kAdmitted)->message,
            "attempt 2: slices 1 and 2 wait for a node pool with first priority; slice 0 keep "
            "their node pools");
  EXPECT_EQ(queued.status.faults.size(), plan.status.faults.size());
}

// A fault in flight that leaves no slice to keep, or touches a master, or comes while the whole
// job is re-issued already: the whole job, with the fault recorded and its node cordoned; no
// retry left: the job fails.
TEST(PolicySliceRecoveryTest, AFaultInFlightBeyondTheSlicesReissuesTheWholeJob) {
  struct Case {
    const char* name;
    bool master;
    std::string first;   // the fault that starts the recovery
    std::string second;  // the one in flight
    int max_retries;
    std::string action;
  };
  const std::vector<Case> cases = {
      {"no slice left", false, "node-1 node-3", "node-5", 2, "ReissueJob"},
      {"whole job already", true, "master", "node-3", 2, "ReissueJob"},
      {"no retry left", false, "node-1", "node-5", 1, "FailJob"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    PodSim sim = SliceJob("", c.master);
    sim.job().spec["faultTolerance"]["maxJobRetries"] = c.max_retries;
    sim.Reparse();
    RunAllSlices(sim);
    Queue q;
    std::string nodes = c.first;
    for (size_t at = 0; at != std::string::npos;) {
      const size_t end = nodes.find(' ', at);
      std::string node = nodes.substr(at, end == std::string::npos ? end : end - at);
      if (node == "master") node = std::string(sim.Master().node_name.view());
      q.nodes.Set(node, NodeVerdict::kUnhealthy, "TPUUnhealthy");
      at = end == std::string::npos ? end : end + 1;
    }
    const Plan first = StepWith(sim, q);
    ASSERT_EQ(first.status.attempt, 2);
    for (const NodeToCordon& done : first.cordon) q.cordoned.push_back(done.node);
    const size_t faults = first.status.faults.size();
    q.nodes.Set(c.second, NodeVerdict::kUnhealthy, "TPUUnhealthy");
    q.admit = false;
    const Plan second = StepWith(sim, q);
    ASSERT_EQ(second.status.faults.size(), faults + 1);
    EXPECT_EQ(second.status.faults.back().node, c.second);
    EXPECT_EQ(second.status.faults.back().action, c.action);
    ASSERT_EQ(second.cordon.size(), 1u);
    EXPECT_EQ(second.cordon[0].node, c.second);
    if (c.action == "FailJob") {
      EXPECT_EQ(second.status.phase, Phase::kFailed);
      EXPECT_EQ(second.status.FindCondition(condition::kFailed)->reason, "RetriesExhausted");
      continue;
    }
    EXPECT_FALSE(second.status.slice_recovery.has_value());
    EXPECT_EQ(second.status.job_retries, 2);
    sim.FinishDeletions();
    const Plan queued = StepWith(sim, q);
    EXPECT_EQ(queued.status.phase, Phase::kQueued);
    EXPECT_TRUE(queued.status.node_pools.empty());
    EXPECT_EQ(queued.status.faults.size(), faults + 1);
  }
}

// When the whole job is re-issued instead: a fault touching every slice, a master's fault, a job
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
      {"every slice", "", false, {"node-1", "node-2", "node-5"}, true},
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

TEST(PolicySliceRecoveryTest, AKeptNodeNoLongerSchedulableIsLeftToTheSchedulerOffTheBoundNodes) {
  PodSim sim = SliceJob();
  Queue q = FailSliceOne(sim, /*gone=*/true);
  q.admit = false;
  StepWith(sim, q);
  // Meanwhile node-5 (slice 2) was cordoned by a person: its worker goes where the scheduler
  // places it in its pool, off the nodes its slice-mates (and every kept worker) are bound to.
  q.cordoned = {"node-5"};
  q.admit = true;
  q.pools = {"pool-d"};
  const Plan started = StepWith(sim, q);
  ASSERT_EQ(started.create.size(), 6u);
  const PodToCreate* left = Creation(started, 5);
  ASSERT_NE(left, nullptr);
  EXPECT_EQ(left->node, "");
  EXPECT_FALSE(left->bind);
  EXPECT_EQ(left->avoid, std::vector<std::string>{"node-4"});  // its slice-mate's
  for (int32_t i : {0, 1, 4}) {
    EXPECT_TRUE(Creation(started, i)->bind);
    EXPECT_TRUE(Creation(started, i)->avoid.empty()) << i;
  }
  // The replaced slice's workers go to a pool of their own, where nothing is bound.
  for (int32_t i : {2, 3}) EXPECT_TRUE(Creation(started, i)->avoid.empty()) << i;
  EXPECT_EQ(started.status.slice_recovery->nodes,
            (std::vector<std::string>{"node-0", "node-1", "", "", "node-4", ""}));
  EXPECT_EQ(started.status.faults.size(), 1u);  // a cordon is no fault
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

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::policy
