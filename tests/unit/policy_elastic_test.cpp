// Elastic slices (spec.tpu.minSlices, policy/elastic.h): a slice that finds no node pool within
// waitSeconds is given up and the job runs on the slices it holds, renumbered; it grows back,
// without using a retry, when the queue has pools again.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "policy/elastic.h"
#include "policy/lifecycle.h"
#include "policy_fixtures.h"

namespace tpujob::policy {
namespace TPUJOB_TEST_NS {

using namespace fixtures;
constexpr ReplicaType kWorker = ReplicaType::kWorker;

// 4 slices of 2 workers (job-wide indices 0..7; worker i on node-i), minSlices as given.
Json ElasticSpec(int min_slices, Json elastic = Json::object()) {
  Json spec = SpecJson(2);
  spec["tpu"]["slices"] = 4;
  spec["tpu"]["minSlices"] = min_slices;
  spec["faultTolerance"] = {{"maxJobRetries", 3}, {"maintenanceGracePeriodSeconds", 60}};
  if (elastic.is_null() || !elastic.empty()) spec["faultTolerance"]["elastic"] = elastic;
  return spec;
}

struct Answer {
  Nodes nodes;
  bool admit = false;
  std::vector<std::string> pools;
  std::vector<std::string> grow;
  std::string grow_message;
  bool replace_slices = true;
};

Plan StepWith(PodSim& sim, const Answer& a) {
  LifecycleInput in = sim.Input(a.admit);
  in.node_health = a.nodes.Fn();
  in.admit_pools = a.pools;
  in.grow_pools = a.grow;
  in.grow_message = a.grow_message;
  in.replace_slices = a.replace_slices;
  in.not_admitted_reason = "WaitingForCapacity";
  in.not_admitted_message = "needs a node pool";
  Plan plan = Decide(in);
  sim.Apply(plan);
  // Pods bound to a node run there (the simulator puts worker i on node-i otherwise).
  for (const PodToCreate& c : plan.create) {
    if (!c.bind) continue;
    for (auto& p : sim.pods()) {
      if (p.type == c.type && p.index == c.index && p.attempt == plan.status.attempt) {
        p.pod.node_name = InternedString::Intern(c.node);
      }
    }
  }
  return plan;
}

const PodToCreate* Creation(const Plan& plan, int32_t index) {
  for (const PodToCreate& c : plan.create) {
    if (c.type == kWorker && c.index == index) return &c;
  }
  return nullptr;
}

// Runs the job on pools a-d, then node-5 (slice 2) fails: slice 2 waits for a pool.
Answer RunThenLoseSliceTwo(PodSim& sim) {
  Answer a;
  StepWith(sim, a);
  a.admit = true;
  a.pools = {"pool-a", "pool-b", "pool-c", "pool-d"};
  EXPECT_EQ(StepWith(sim, a).create.size(), 8u);
  sim.AllReady();
  EXPECT_EQ(StepWith(sim, a).status.phase, Phase::kRunning);
  a = Answer{};
  a.nodes.Set("node-5", NodeVerdict::kUnhealthy, "TPUUnhealthy");
  const Plan reissued = StepWith(sim, a);
  EXPECT_EQ(reissued.status.slice_recovery->slices, std::vector<int32_t>{2});
  sim.FinishDeletions();
  EXPECT_EQ(StepWith(sim, a).status.phase, Phase::kQueued);
  return a;
}

TEST(PolicyElasticSpecTest, DefaultsAndRefusals) {
  PodSim plain(ElasticSpec(2));
  ASSERT_TRUE(plain.spec().has_value()) << plain.spec().error();
  EXPECT_EQ(plain.spec()->tpu.min_slices, 2);
  EXPECT_TRUE(plain.spec()->Elastic());
  EXPECT_EQ(plain.spec()->fault_tolerance.elastic.wait_seconds, kDefaultElasticWaitSeconds);
  EXPECT_EQ(plain.spec()->fault_tolerance.elastic.scale_up, ScaleUp::kImmediate);

  Json all = ElasticSpec(2);
  all["tpu"].erase("minSlices");
  PodSim not_elastic(all);
  ASSERT_TRUE(not_elastic.spec().has_value());
  EXPECT_EQ(not_elastic.spec()->tpu.min_slices, 4);  // default: every slice
  EXPECT_FALSE(not_elastic.spec()->Elastic());

  struct Case {
    const char* name;
    Json spec;
    const char* error;
  };
  Json job = ElasticSpec(2);
  job["faultTolerance"]["recovery"] = "Job";
  Json in_place = ElasticSpec(2);
  in_place["faultTolerance"]["restart"] = "InPlace";
  for (auto& container : in_place["replicaSpecs"]["Worker"]["template"]["spec"]["containers"]) {
    container["command"] = {"train"};
  }
  // Restart InPlace is accepted: its kept pods restart with the new slice count in place.
  PodSim in_place_sim(in_place);
  ASSERT_TRUE(in_place_sim.spec().has_value()) << in_place_sim.spec().error();
  EXPECT_TRUE(in_place_sim.spec()->Elastic());
  Json useless = ElasticSpec(4, {{"waitSeconds", 10}});
  std::vector<Case> cases = {
      {"more than slices", ElasticSpec(5),
       "spec.tpu.minSlices: 5 is more than spec.tpu.slices (4)"},
      {"zero", ElasticSpec(0), "spec.tpu.minSlices"},
      {"elastic without minSlices", useless,
       "spec.faultTolerance.elastic: has no effect unless spec.tpu.minSlices is below"},
      {"recovery Job", job, "spec.tpu.minSlices: 2 needs spec.faultTolerance.recovery Slice"},
      {"scaleUp", ElasticSpec(2, {{"scaleUp", "Later"}}),
       "spec.faultTolerance.elastic.scaleUp: \"Later\" is not Immediate, AfterCheckpoint or Never"},
      {"negative wait", ElasticSpec(2, {{"waitSeconds", -1}}),
       "spec.faultTolerance.elastic.waitSeconds"},
      {"after checkpoint without lines", ElasticSpec(2, {{"scaleUp", "AfterCheckpoint"}}),
       "AfterCheckpoint waits for the program's next checkpoint line"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    PodSim sim(c.spec);
    ASSERT_FALSE(sim.spec().has_value());
    EXPECT_NE(sim.spec().error().find(c.error), std::string::npos) << sim.spec().error();
  }
}

TEST(PolicyElasticTest, ASliceWithoutAPoolIsGivenUpAfterWaitSecondsAndTheOthersRunRenumbered) {
  PodSim sim(ElasticSpec(2, {{"waitSeconds", 60}}));
  Answer a = RunThenLoseSliceTwo(sim);
  // Waiting: the message says until when.
  const Plan waiting = StepWith(sim, a);
  const Condition* admitted = waiting.status.FindCondition(condition::kAdmitted);
  ASSERT_NE(admitted, nullptr);
  EXPECT_NE(admitted->message.find("the job runs on the other 3 slices (elastic waitSeconds 60)"),
            std::string::npos)
      << admitted->message;
  ASSERT_TRUE(waiting.requeue_after.has_value());
  EXPECT_GT(*waiting.requeue_after, std::chrono::seconds(55));
  EXPECT_LE(*waiting.requeue_after, std::chrono::seconds(61));
  EXPECT_TRUE(waiting.create.empty());

  sim.Advance(std::chrono::seconds(58));  // not yet: the wait counts from queuedAt's second end
  EXPECT_TRUE(StepWith(sim, a).create.empty());
  sim.Advance(std::chrono::seconds(2));
  const Plan shrunk = StepWith(sim, a);
  EXPECT_EQ(shrunk.status.phase, Phase::kStarting);
  EXPECT_EQ(shrunk.status.attempt, 2);
  EXPECT_EQ(shrunk.status.job_retries, 1);  // the fault's re-issue; the shrink adds none
  ASSERT_TRUE(shrunk.status.tpu.has_value());
  EXPECT_EQ(shrunk.status.tpu->slices, 4);
  EXPECT_EQ(shrunk.status.tpu->active_slices, 3);
  EXPECT_EQ(shrunk.status.tpu->slices_summary, "3/4");
  EXPECT_EQ(shrunk.status.node_pools,
            (std::vector<std::string>{"pool-a", "pool-b", "pool-d"}));  // renumbered
  // Slices 0, 1 and 3 (as 2) go back to their nodes: 6 workers, ids 0..5.
  ASSERT_EQ(shrunk.create.size(), 6u);
  const std::vector<std::string> nodes = {"node-0", "node-1", "node-2",
                                          "node-3", "node-6", "node-7"};
  for (int32_t i = 0; i < 6; ++i) {
    const PodToCreate* c = Creation(shrunk, i);
    ASSERT_NE(c, nullptr) << i;
    EXPECT_EQ(c->node, nodes[static_cast<size_t>(i)]) << i;
    EXPECT_TRUE(c->bind) << i;
  }
  const Condition* degraded = shrunk.status.FindCondition(condition::kDegraded);
  ASSERT_NE(degraded, nullptr);
  EXPECT_EQ(degraded->status, "True");
  EXPECT_EQ(degraded->reason, "RunningOnFewerSlices");
  EXPECT_EQ(degraded->message,
            "running on 3 of 4 slices: slice 2 found no node pool within 60s; it grows back to 4 "
            "when a node pool is free (scaleUp Immediate)");
  const EventToRecord* event = FindEvent(shrunk, "RunningOnFewerSlices");
  ASSERT_NE(event, nullptr);
  EXPECT_NE(event->message.find("(slice 3 runs as slice 2); every program restarts with "
                                "MEGASCALE_NUM_SLICES=3"),
            std::string::npos)
      << event->message;
  ASSERT_TRUE(shrunk.status.elastic.has_value());
  EXPECT_EQ(shrunk.status.elastic->degraded_since, sim.now() - std::chrono::seconds(1));

  // It runs on 3: Running, every one of the 6 pods ready; nothing of slice 3 is created.
  sim.AllReady();
  const Plan running = StepWith(sim, a);
  EXPECT_EQ(running.status.phase, Phase::kRunning);
  EXPECT_TRUE(running.create.empty());
  EXPECT_FALSE(running.status.slice_recovery.has_value());
  EXPECT_EQ(sim.LivePods(), 6);
  // The status survives its round trip: the next decision sees the same 3 slices.
  EXPECT_EQ(ActiveSlicesOf(*sim.spec(), sim.Status()), 3);
  EXPECT_EQ(StepWith(sim, a).status.ready_workers, running.status.ready_workers);
  // What the queue says of the missing slice's pool shows in Degraded.
  a.grow_message = "needs a node pool with 2 hosts of tpu-v5-lite-podslice 2x4 to add slice 3";
  const Plan told = StepWith(sim, a);
  const Condition* why = told.status.FindCondition(condition::kDegraded);
  ASSERT_NE(why, nullptr);
  EXPECT_EQ(why->message,
            "running on 3 of 4 slices; to grow back it needs a node pool with 2 hosts of "
            "tpu-v5-lite-podslice 2x4 to add slice 3 (scaleUp Immediate)");
}

TEST(PolicyElasticTest, ItGrowsBackWithoutARetryWhenTheQueueHasAPool) {
  PodSim sim(ElasticSpec(2, {{"waitSeconds", 60}}));
  Answer a = RunThenLoseSliceTwo(sim);
  sim.Advance(std::chrono::seconds(61));
  StepWith(sim, a);
  sim.AllReady();
  ASSERT_EQ(StepWith(sim, a).status.phase, Phase::kRunning);

  sim.Advance(std::chrono::seconds(100));
  a.grow = {"pool-e"};
  const Plan grow = StepWith(sim, a);
  EXPECT_EQ(grow.status.attempt, 3);
  EXPECT_EQ(grow.status.job_retries, 1);  // no retry used
  // Goodput: the 101 s on 3 slices (the simulator's clock moves 1 s a step) were productive on
  // 24 chips and ran without slice 3's 8.
  ASSERT_TRUE(grow.status.goodput.has_value());
  EXPECT_EQ(grow.status.goodput->degraded_ms, 101'000);
  EXPECT_EQ(grow.status.goodput->lost_chip_ms.at("Degraded"), 101'000 * 8);
  EXPECT_EQ(grow.status.goodput->missing_chips, 0);  // from now on, all 4 slices'
  EXPECT_EQ(grow.status.goodput->chips, 32);
  EXPECT_EQ(grow.status.phase, Phase::kRestarting);
  EXPECT_TRUE(grow.status.reissued);  // first in line for its new pool
  EXPECT_EQ(grow.status.tpu->active_slices, 4);
  EXPECT_EQ(grow.status.tpu->slices_summary, "4/4");
  EXPECT_EQ(grow.status.node_pools, (std::vector<std::string>{"pool-a", "pool-b", "pool-d", ""}));
  ASSERT_TRUE(grow.status.slice_recovery.has_value());
  EXPECT_EQ(grow.status.slice_recovery->slices, std::vector<int32_t>{3});
  EXPECT_EQ(grow.status.slice_recovery->nodes,
            (std::vector<std::string>{"node-0", "node-1", "node-2", "node-3", "node-6", "node-7",
                                      "", ""}));
  ASSERT_EQ(grow.remove.size(), 6u);  // every program restarts, with time to checkpoint
  for (const PodToDelete& d : grow.remove) EXPECT_EQ(d.grace_period_seconds, 60) << d.name;
  const Condition* degraded = grow.status.FindCondition(condition::kDegraded);
  ASSERT_NE(degraded, nullptr);
  EXPECT_EQ(degraded->status, "False");
  EXPECT_EQ(degraded->reason, "ScalingUp");
  EXPECT_FALSE(grow.status.elastic.has_value());
  ASSERT_NE(FindEvent(grow, "ScalingUp"), nullptr);

  // The old pods go; slice 3 waits for its pool first in line; then all 8 run, the kept 6 on
  // their nodes.
  sim.FinishDeletions();
  a.grow.clear();
  EXPECT_EQ(StepWith(sim, a).status.phase, Phase::kQueued);
  a.admit = true;
  a.pools = {"pool-e"};
  const Plan started = StepWith(sim, a);
  EXPECT_EQ(started.status.phase, Phase::kStarting);
  EXPECT_EQ(started.status.node_pools,
            (std::vector<std::string>{"pool-a", "pool-b", "pool-d", "pool-e"}));
  ASSERT_EQ(started.create.size(), 8u);
  EXPECT_EQ(Creation(started, 4)->node, "node-6");
  EXPECT_TRUE(Creation(started, 4)->bind);
  EXPECT_EQ(Creation(started, 6)->node, "");
  sim.AllReady();
  const Plan running = StepWith(sim, a);
  EXPECT_EQ(running.status.phase, Phase::kRunning);
  EXPECT_EQ(sim.LivePods(), 8);
  EXPECT_TRUE(sim.violations.empty()) << ::testing::PrintToString(sim.violations);
}

// With waitSeconds 0 a grow's added slice must not be given up before the queue answered its
// request (the pool was free a moment ago), nor while the queue preempts for a replaced slice.
TEST(PolicyElasticTest, TheSliceIsGivenUpOnlyOnTheQueuesWordThatNoPoolIsFree) {
  PodSim sim(ElasticSpec(2, {{"waitSeconds", 0}}));
  Answer a = RunThenLoseSliceTwo(sim);
  sim.Advance(std::chrono::seconds(5));
  for (const char* reason : {"Queued", "Reissued", "Preempting"}) {
    SCOPED_TRACE(reason);
    LifecycleInput in = sim.Input(false);
    in.node_health = a.nodes.Fn();
    in.not_admitted_reason = reason;
    in.not_admitted_message = "no answer";
    const Plan plan = Decide(in);
    EXPECT_EQ(plan.status.phase, Phase::kQueued);
    EXPECT_TRUE(plan.create.empty());
  }
  EXPECT_EQ(StepWith(sim, a).status.phase, Phase::kStarting);  // WaitingForCapacity
}

// Two slices lost at once, then one pool free: the job grows by one, still degraded, and by the
// other when a second pool is free.
TEST(PolicyElasticTest, ItGrowsByAsManySlicesAsHavePools) {
  PodSim sim(ElasticSpec(2, {{"waitSeconds", 0}}));
  Answer a;
  StepWith(sim, a);
  a.admit = true;
  a.pools = {"pool-a", "pool-b", "pool-c", "pool-d"};
  StepWith(sim, a);
  sim.AllReady();
  ASSERT_EQ(StepWith(sim, a).status.phase, Phase::kRunning);
  a = Answer{};
  a.nodes.Set("node-3", NodeVerdict::kUnhealthy, "TPUUnhealthy");  // slice 1
  a.nodes.Set("node-5", NodeVerdict::kUnhealthy, "TPUUnhealthy");  // slice 2
  ASSERT_EQ(StepWith(sim, a).status.slice_recovery->slices, (std::vector<int32_t>{1, 2}));
  sim.FinishDeletions();
  StepWith(sim, a);
  sim.Advance(std::chrono::seconds(1));
  const Plan shrunk = StepWith(sim, a);
  ASSERT_EQ(shrunk.status.tpu->active_slices, 2);
  EXPECT_EQ(shrunk.status.node_pools, (std::vector<std::string>{"pool-a", "pool-d"}));
  sim.AllReady();
  ASSERT_EQ(StepWith(sim, a).status.phase, Phase::kRunning);

  // The faulty nodes are repaired (the simulator puts a new worker i on node-i).
  a.nodes = Nodes{};
  a.grow = {"pool-e"};  // one of the two missing slices' pools
  const Plan grow = StepWith(sim, a);
  EXPECT_EQ(grow.status.attempt, 3);
  EXPECT_EQ(grow.status.job_retries, 1);
  EXPECT_EQ(grow.status.tpu->active_slices, 3);
  EXPECT_EQ(grow.status.tpu->slices_summary, "3/4");
  EXPECT_EQ(grow.status.slice_recovery->slices, std::vector<int32_t>{2});
  EXPECT_EQ(grow.status.node_pools, (std::vector<std::string>{"pool-a", "pool-d", ""}));
  const Condition* degraded = grow.status.FindCondition(condition::kDegraded);
  ASSERT_NE(degraded, nullptr);
  EXPECT_EQ(degraded->status, "True");
  EXPECT_EQ(degraded->message,
            "growing from 2 to 3 of 4 slices as attempt 3; the other 1 when free");
  sim.FinishDeletions();
  a.grow.clear();
  StepWith(sim, a);
  a.admit = true;
  a.pools = {"pool-e"};
  const Plan started = StepWith(sim, a);
  EXPECT_EQ(started.status.phase, Phase::kStarting);
  EXPECT_EQ(started.create.size(), 6u);
  sim.AllReady();
  ASSERT_EQ(StepWith(sim, a).status.phase, Phase::kRunning);
  // The fourth pool: all 4.
  a = Answer{};
  a.grow = {"pool-f"};
  const Plan whole = StepWith(sim, a);
  EXPECT_EQ(whole.status.tpu->active_slices, 4);
  EXPECT_EQ(whole.status.FindCondition(condition::kDegraded)->status, "False");
  EXPECT_TRUE(sim.violations.empty()) << ::testing::PrintToString(sim.violations);
}

TEST(PolicyElasticTest, AGrowThatFindsNoPoolShrinksAgainAfterWaitSeconds) {
  PodSim sim(ElasticSpec(2, {{"waitSeconds", 60}}));
  Answer a = RunThenLoseSliceTwo(sim);
  sim.Advance(std::chrono::seconds(61));
  StepWith(sim, a);
  sim.AllReady();
  StepWith(sim, a);
  a.grow = {"pool-e"};
  StepWith(sim, a);
  sim.FinishDeletions();
  a.grow.clear();
  ASSERT_EQ(StepWith(sim, a).status.phase, Phase::kQueued);  // the pool was taken meanwhile
  sim.Advance(std::chrono::seconds(61));
  const Plan shrunk = StepWith(sim, a);
  EXPECT_EQ(shrunk.status.phase, Phase::kStarting);
  EXPECT_EQ(shrunk.status.tpu->active_slices, 3);
  EXPECT_EQ(shrunk.status.job_retries, 1);
  EXPECT_EQ(shrunk.status.node_pools, (std::vector<std::string>{"pool-a", "pool-b", "pool-d"}));
  EXPECT_EQ(shrunk.create.size(), 6u);
  EXPECT_EQ(Creation(shrunk, 5)->node, "node-7");
}

TEST(PolicyElasticTest, BelowMinSlicesTheSliceWaitsUntilItsQueueTimeout) {
  PodSim sim(ElasticSpec(3, {{"waitSeconds", 60}}));
  Answer a = RunThenLoseSliceTwo(sim);
  sim.Advance(std::chrono::seconds(61));
  StepWith(sim, a);  // on 3 of 4
  sim.AllReady();
  ASSERT_EQ(StepWith(sim, a).status.phase, Phase::kRunning);
  // A fault on node-1 (slice 0): 2 would be left, fewer than minSlices 3.
  a.nodes.Set("node-1", NodeVerdict::kUnhealthy, "TPUUnhealthy");
  const Plan reissued = StepWith(sim, a);
  EXPECT_EQ(reissued.status.job_retries, 2);
  EXPECT_EQ(reissued.status.slice_recovery->slices, std::vector<int32_t>{0});
  sim.FinishDeletions();
  const Plan queued = StepWith(sim, a);
  EXPECT_EQ(queued.status.phase, Phase::kQueued);
  const Condition* admitted = queued.status.FindCondition(condition::kAdmitted);
  ASSERT_NE(admitted, nullptr);
  EXPECT_NE(admitted->message.find("the job cannot run on 2 slices (minSlices 3)"),
            std::string::npos)
      << admitted->message;
  sim.Advance(std::chrono::seconds(1));
  const Plan again = StepWith(sim, a);
  admitted = again.status.FindCondition(condition::kAdmitted);
  EXPECT_NE(admitted->message.find("the job cannot run on 2 slices (minSlices 3)"),
            std::string::npos)
      << admitted->message;
  const Condition* degraded = queued.status.FindCondition(condition::kDegraded);
  ASSERT_NE(degraded, nullptr);
  EXPECT_EQ(degraded->status, "True");
  EXPECT_NE(degraded->message.find("attempt 3 on 3 of 4 slices waits: slice 0 lost its node pool; "
                                   "the job cannot run on 2 slices"),
            std::string::npos)
      << degraded->message;
  sim.Advance(std::chrono::seconds(600));
  EXPECT_EQ(StepWith(sim, a).status.phase, Phase::kQueued);
  sim.Advance(std::chrono::seconds(kDefaultReissueQueueTimeoutSeconds));
  const Plan timed_out = StepWith(sim, a);
  EXPECT_EQ(timed_out.status.phase, Phase::kFailed);
  EXPECT_EQ(timed_out.status.FindCondition(condition::kFailed)->reason, "QueueTimeout");
}

TEST(PolicyElasticTest, ScaleUpNeverStaysOnTheSlicesItHas) {
  PodSim sim(ElasticSpec(2, {{"waitSeconds", 0}, {"scaleUp", "Never"}}));
  Answer a = RunThenLoseSliceTwo(sim);
  sim.Advance(std::chrono::seconds(1));
  const Plan shrunk = StepWith(sim, a);
  ASSERT_EQ(shrunk.status.phase, Phase::kStarting);
  EXPECT_NE(shrunk.status.FindCondition(condition::kDegraded)->message.find("(scaleUp Never)"),
            std::string::npos);
  sim.AllReady();
  a.grow = {"pool-e"};
  const Plan running = StepWith(sim, a);
  EXPECT_EQ(running.status.phase, Phase::kRunning);
  EXPECT_EQ(running.status.attempt, 2);
  EXPECT_TRUE(running.remove.empty());
}

TEST(PolicyElasticTest, AfterCheckpointGrowsAtTheFirstCheckpointAfterThePoolsAreFree) {
  Json spec = ElasticSpec(2, {{"waitSeconds", 0}, {"scaleUp", "AfterCheckpoint"}});
  spec["faultTolerance"]["progress"] = {{"logPattern", "step (\\d+)"},
                                        {"checkpointPattern", "saved (\\d+)"}};
  for (auto& container : spec["replicaSpecs"]["Worker"]["template"]["spec"]["containers"]) {
    container["command"] = {"train"};
  }
  PodSim sim(spec);
  ASSERT_TRUE(sim.spec().has_value()) << sim.spec().error();
  Answer a = RunThenLoseSliceTwo(sim);
  sim.Advance(std::chrono::seconds(1));
  StepWith(sim, a);
  sim.AllReady();
  ASSERT_EQ(StepWith(sim, a).status.phase, Phase::kRunning);
  auto set_checkpoint = [&](int64_t step) {
    JobStatus s = sim.Status();
    if (!s.progress) s.progress.emplace();
    s.progress->checkpoint_step = step;
    sim.job().status = s.ToJson();
  };
  set_checkpoint(100);
  a.grow = {"pool-e"};
  const Plan offered = StepWith(sim, a);
  EXPECT_EQ(offered.status.attempt, 2);  // not yet
  ASSERT_TRUE(offered.status.elastic.has_value());
  EXPECT_EQ(offered.status.elastic->checkpoint_at_offer, 100);
  ASSERT_NE(FindEvent(offered, "ScaleUpWaiting"), nullptr);
  EXPECT_EQ(StepWith(sim, a).status.attempt, 2);  // the same checkpoint: still waiting
  set_checkpoint(200);
  const Plan grow = StepWith(sim, a);
  EXPECT_EQ(grow.status.attempt, 3);
  EXPECT_EQ(grow.status.tpu->active_slices, 4);
  EXPECT_NE(FindEvent(grow, "ScalingUp")->message.find("after the checkpoint of step 200"),
            std::string::npos);
}

TEST(PolicyElasticTest, AJobKueueAdmitsIsRefused) {
  PodSim sim(ElasticSpec(2));
  Answer a;
  a.replace_slices = false;
  const Plan plan = StepWith(sim, a);
  const Condition* valid = plan.status.FindCondition(condition::kValid);
  ASSERT_NE(valid, nullptr);
  EXPECT_EQ(valid->status, "False");
  EXPECT_NE(valid->message.find("not supported for a job Kueue admits"), std::string::npos);
}

TEST(PolicyElasticTest, AWholeJobReissueKeepsTheSlicesItRunsOn) {
  Json spec = ElasticSpec(2, {{"waitSeconds", 0}});
  PodSim sim(spec);
  Answer a = RunThenLoseSliceTwo(sim);
  sim.Advance(std::chrono::seconds(1));
  StepWith(sim, a);
  sim.AllReady();
  ASSERT_EQ(StepWith(sim, a).status.phase, Phase::kRunning);
  // Faults on every slice it runs on: the whole job is re-issued, on 3 slices.
  a.nodes.Set("node-0", NodeVerdict::kUnhealthy, "TPUUnhealthy");
  a.nodes.Set("node-2", NodeVerdict::kUnhealthy, "TPUUnhealthy");
  a.nodes.Set("node-6", NodeVerdict::kUnhealthy, "TPUUnhealthy");
  const Plan whole = StepWith(sim, a);
  EXPECT_EQ(whole.status.attempt, 3);
  EXPECT_FALSE(whole.status.slice_recovery.has_value());
  EXPECT_EQ(whole.status.tpu->active_slices, 3);
  sim.FinishDeletions();
  ASSERT_EQ(StepWith(sim, a).status.phase, Phase::kQueued);
  a.admit = true;
  a.pools = {"pool-e", "pool-f", "pool-g"};
  const Plan started = StepWith(sim, a);
  EXPECT_EQ(started.status.phase, Phase::kStarting);
  EXPECT_EQ(started.create.size(), 6u);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::policy
