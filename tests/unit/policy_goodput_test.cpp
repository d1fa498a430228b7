// Goodput accounting (policy/goodput.h): the state table, the fold into the writes Decide() makes
// anyway, and a whole job life whose breakdown must match the script to the millisecond.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>

#include "cache/objects.h"
#include "policy/goodput.h"
#include "policy/lifecycle.h"
#include "policy_fixtures.h"

namespace tpujob::policy {
namespace TPUJOB_TEST_NS {

using namespace fixtures;
using std::chrono::milliseconds;
using std::chrono::seconds;

// --- GoodputState --------------------------------------------------------------------------

JobStatus StatusIn(Phase phase, bool reissued = false, std::string last_fault_kind = "") {
  JobStatus s;
  s.phase = phase;
  s.reissued = reissued;
  if (!last_fault_kind.empty()) {
    FaultRecord f;
    f.kind = std::move(last_fault_kind);
    s.faults.push_back(f);
  }
  return s;
}

TEST(PolicyGoodputTest, StateOfEachPhase) {
  struct Row {
    JobStatus status;
    bool preflight_running;
    std::string_view want;
  };
  const Row rows[] = {
      {StatusIn(Phase::kNone), false, ""},
      {StatusIn(Phase::kQueued), false, "Queued"},
      {StatusIn(Phase::kQueued, /*reissued=*/true), false, "Requeued"},
      {StatusIn(Phase::kStarting), false, "Starting"},
      {StatusIn(Phase::kStarting), true, "Preflight"},
      {StatusIn(Phase::kRunning), false, "Productive"},
      {StatusIn(Phase::kRestarting), false, "Restarting"},
      {StatusIn(Phase::kRestarting, true, "NodeUnhealthy"), false, "Reissue"},
      {StatusIn(Phase::kRestarting, true, "ContainerFailed"), false, "Reissue"},
      {StatusIn(Phase::kRestarting, true, "Maintenance"), false, "Maintenance"},
      {StatusIn(Phase::kRestarting, true), false, "Reissue"},
      {StatusIn(Phase::kSucceeded), false, ""},
      {StatusIn(Phase::kFailed), false, ""},
  };
  for (const Row& row : rows) {
    EXPECT_EQ(GoodputState(row.status, row.preflight_running), row.want)
        << "phase " << ToString(row.status.phase) << " reissued " << row.status.reissued;
  }
}

// --- AccountGoodput --------------------------------------------------------------------------

GoodputInput Now(WallTime now, int64_t chips = 8) {
  GoodputInput in;
  in.now = now;
  in.chips = chips;
  return in;
}

WallTime T(int64_t ms) { return fixtures::At(0) + milliseconds(ms); }

TEST(PolicyGoodputTest, FirstWriteStartsTheAccount) {
  JobStatus before;
  JobStatus after = StatusIn(Phase::kQueued);
  AccountGoodput(before, after, Now(T(1500)));
  ASSERT_TRUE(after.goodput.has_value());
  EXPECT_EQ(after.goodput->state, "Queued");
  EXPECT_EQ(after.goodput->accounted_until, T(1500));
  EXPECT_EQ(after.goodput->state_since, T(1500));
  EXPECT_EQ(after.goodput->TotalMs(), 0);
  EXPECT_EQ(after.goodput->chips, 8);
}

TEST(PolicyGoodputTest, NothingBeforeTheJobHasAStatus) {
  JobStatus before;
  JobStatus after;
  AccountGoodput(before, after, Now(T(1000)));
  EXPECT_FALSE(after.goodput.has_value());
}

TEST(PolicyGoodputTest, ANewJobSeenLateCountsFromItsCreation) {
  JobStatus before;
  JobStatus after = StatusIn(Phase::kQueued);
  GoodputInput in = Now(T(30'000));
  in.created = T(0);
  AccountGoodput(before, after, in);
  EXPECT_EQ(after.goodput->state_since, T(0));
  EXPECT_EQ(after.goodput->accounted_until, T(30'000));
  EXPECT_EQ(after.goodput->lost_ms.at("Queued"), 30'000);
  // A second of lag is the operator's reaction time, not a late start.
  JobStatus prompt = StatusIn(Phase::kQueued);
  in.now = T(800);
  AccountGoodput(before, prompt, in);
  EXPECT_EQ(prompt.goodput->state_since, T(800));
  EXPECT_EQ(prompt.goodput->TotalMs(), 0);
  // Nor is the timestamp's truncation to whole seconds: created at 0.9 s, it reads 0 s; seen
  // 0.3 s later, at 1.2 s, the job is prompt, and its account starts then, not 1.2 s earlier.
  JobStatus truncated = StatusIn(Phase::kQueued);
  in.now = T(1'200);
  AccountGoodput(before, truncated, in);
  EXPECT_EQ(truncated.goodput->state_since, T(1'200));
  EXPECT_EQ(truncated.goodput->TotalMs(), 0);
  // A job that already had a status before the account existed starts now: its past is unknown.
  JobStatus running = StatusIn(Phase::kRunning);
  JobStatus still = running;
  still.ready_workers = "2/2";
  in.now = T(30'000);
  AccountGoodput(running, still, in);
  EXPECT_EQ(still.goodput->state_since, T(30'000));
  EXPECT_EQ(still.goodput->TotalMs(), 0);
}

TEST(PolicyGoodputTest, TheClockAloneCausesNoWrite) {
  JobStatus before = StatusIn(Phase::kRunning);
  before.goodput = Goodput{"Productive", T(0), T(1000), 8, 1000, 8000, {}, {}};
  JobStatus after = before;
  AccountGoodput(before, after, Now(T(60'000)));
  EXPECT_EQ(after, before);
}

// Elastic slices: an attempt on 3 of 4 slices is productive on its 24 chips and runs without 8;
// those count as lost chip-seconds (cause Degraded) and the time as degradedSeconds, not as lost
// time (which would count the same seconds twice).
TEST(PolicyGoodputTest, RunningOnFewerSlicesLosesTheMissingChipsNotTheTime) {
  JobStatus before = StatusIn(Phase::kRunning);
  before.goodput = Goodput{"Productive", T(0), T(1000), 24, 0, 0, {}, {}, 8, 0};
  JobStatus after = before;
  after.ready_workers = "6/6";
  GoodputInput in = Now(T(11'000), 24);
  in.missing_chips = 8;
  AccountGoodput(before, after, in);
  ASSERT_TRUE(after.goodput.has_value());
  EXPECT_EQ(after.goodput->productive_ms, 10'000);
  EXPECT_EQ(after.goodput->productive_chip_ms, 10'000 * 24);
  EXPECT_EQ(after.goodput->degraded_ms, 10'000);
  EXPECT_EQ(after.goodput->lost_chip_ms.at("Degraded"), 10'000 * 8);
  EXPECT_FALSE(after.goodput->lost_ms.contains("Degraded"));
  EXPECT_EQ(after.goodput->TotalMs(), 10'000);  // still the wall time
  EXPECT_EQ(GoodputRatio(*after.goodput), 1.0);
  // The JSON keeps both, and reads them back.
  const Json j = after.ToJson();
  EXPECT_EQ(j["goodput"]["missingChips"], 8);
  EXPECT_EQ(j["goodput"]["degradedSeconds"], 10.0);
  EXPECT_EQ(j["goodput"]["lostChipSeconds"]["degraded"], 80.0);
  EXPECT_EQ(JobStatus::FromJson(j).goodput, after.goodput);
  // Grown back (no chips missing): nothing more is lost.
  JobStatus grown = after;
  grown.ready_workers = "8/8";
  AccountGoodput(after, grown, Now(T(21'000), 32));
  EXPECT_EQ(grown.goodput->degraded_ms, 20'000);  // the interval folded ran degraded still
  JobStatus later = grown;
  later.ready_workers = "x";
  AccountGoodput(grown, later, Now(T(31'000), 32));
  EXPECT_EQ(later.goodput->degraded_ms, 20'000);
  EXPECT_EQ(later.goodput->lost_chip_ms.at("Degraded"), 20'000 * 8);
  EXPECT_EQ(later.goodput->productive_chip_ms, 20'000 * 24 + 10'000 * 32);
}

TEST(PolicyGoodputTest, AWriteMadeAnywayFoldsTheOpenInterval) {
  JobStatus before = StatusIn(Phase::kStarting);
  before.goodput = Goodput{"Starting", T(0), T(1000), 8, 0, 0, {}, {}};
  JobStatus after = before;
  after.ready_workers = "1/2";  // something else changed: the status is written anyway
  AccountGoodput(before, after, Now(T(3250)));
  EXPECT_EQ(after.goodput->state, "Starting");
  EXPECT_EQ(after.goodput->state_since, T(0));  // same state: it began earlier
  EXPECT_EQ(after.goodput->accounted_until, T(3250));
  EXPECT_EQ(after.goodput->lost_ms.at("Starting"), 2250);
  EXPECT_EQ(after.goodput->lost_chip_ms.at("Starting"), 2250 * 8);
}

TEST(PolicyGoodputTest, AStateChangeFoldsIntoTheOldState) {
  JobStatus before = StatusIn(Phase::kStarting);
  before.goodput = Goodput{"Starting", T(0), T(0), 4, 0, 0, {}, {}};
  JobStatus after = StatusIn(Phase::kRunning);
  AccountGoodput(before, after, Now(T(5000), 4));
  EXPECT_EQ(after.goodput->state, "Productive");
  EXPECT_EQ(after.goodput->state_since, T(5000));
  EXPECT_EQ(after.goodput->lost_ms.at("Starting"), 5000);
  EXPECT_EQ(after.goodput->productive_ms, 0);
}

// The fault campaign's finding: a job failed, and 5 s later the node of its last fault was
// cordoned and added to status.cordonedNodes. That write moved accountedUntil on with nothing
// accrued (a finished job has no state), so the account no longer added up to its wall time.
TEST(PolicyGoodputTest, AWriteAfterTheFinishLeavesTheAccountClosed) {
  JobStatus running = StatusIn(Phase::kRunning);
  running.goodput = Goodput{"Productive", T(0), T(0), 8, 0, 0, {}, {}};
  JobStatus failed = StatusIn(Phase::kFailed);
  AccountGoodput(running, failed, Now(T(10'000)));
  ASSERT_TRUE(failed.goodput.has_value());
  EXPECT_EQ(failed.goodput->state, "");
  EXPECT_EQ(failed.goodput->accounted_until, T(10'000));
  EXPECT_EQ(failed.goodput->productive_ms, 10'000);

  JobStatus later = failed;
  later.cordoned_nodes.push_back("n1");  // written anyway
  AccountGoodput(failed, later, Now(T(15'150)));
  EXPECT_EQ(later.goodput, failed.goodput);
  EXPECT_EQ(later.goodput->TotalMs(), 10'000);
  EXPECT_EQ(*later.goodput->accounted_until - T(0),
            std::chrono::milliseconds(later.goodput->TotalMs()));
}

TEST(PolicyGoodputTest, DecidingTwiceFromTheSameStatusCountsOnce) {
  // A refused write (a stale cache) or an operator restart decides again from the last written
  // status: the interval since accountedUntil is counted once, in the write that lands.
  JobStatus before = StatusIn(Phase::kRunning);
  before.goodput = Goodput{"Productive", T(0), T(0), 8, 0, 0, {}, {}};
  JobStatus lost = StatusIn(Phase::kRestarting);
  AccountGoodput(before, lost, Now(T(4000)));  // never written
  JobStatus landed = StatusIn(Phase::kRestarting);
  AccountGoodput(before, landed, Now(T(9000)));
  EXPECT_EQ(landed.goodput->productive_ms, 9000);
  EXPECT_EQ(landed.goodput->TotalMs(), 9000);
}

TEST(PolicyGoodputTest, WorkSinceTheLastCheckpointIsLostToADisruption) {
  JobStatus before = StatusIn(Phase::kRunning);
  before.goodput = Goodput{"Productive", T(10'000), T(20'000), 2, 10'000, 20'000, {}, {}};
  JobStatus after = StatusIn(Phase::kRestarting, /*reissued=*/true, "NodeUnhealthy");
  GoodputInput in = Now(T(30'000), 2);
  in.last_checkpoint = T(26'000);
  AccountGoodput(before, after, in);
  const Goodput& g = *after.goodput;
  EXPECT_EQ(g.state, "Reissue");
  EXPECT_EQ(g.lost_ms.at("Uncheckpointed"), 4000);
  EXPECT_EQ(g.productive_ms, 20'000 - 4000);
  EXPECT_EQ(g.lost_chip_ms.at("Uncheckpointed"), 8000);
  EXPECT_EQ(g.productive_chip_ms, 40'000 - 8000);
  EXPECT_EQ(g.TotalMs(), 20'000);  // moved, not added
}

TEST(PolicyGoodputTest, ACheckpointBeforeTheStretchLosesTheWholeStretch) {
  JobStatus before = StatusIn(Phase::kRunning);
  before.goodput = Goodput{"Productive", T(10'000), T(10'000), 1, 7000, 7000, {}, {}};
  JobStatus after = StatusIn(Phase::kRestarting);
  GoodputInput in = Now(T(15'000), 1);
  in.last_checkpoint = T(2000);  // the job resumed from it when this stretch began
  AccountGoodput(before, after, in);
  EXPECT_EQ(after.goodput->lost_ms.at("Uncheckpointed"), 5000);
  EXPECT_EQ(after.goodput->productive_ms, 7000);
}

TEST(PolicyGoodputTest, SuccessAndNoCheckpointAnnotationLoseNothing) {
  JobStatus before = StatusIn(Phase::kRunning);
  before.goodput = Goodput{"Productive", T(0), T(0), 1, 0, 0, {}, {}};
  JobStatus done = StatusIn(Phase::kSucceeded);
  GoodputInput in = Now(T(8000), 1);
  in.last_checkpoint = T(1000);
  AccountGoodput(before, done, in);
  EXPECT_EQ(done.goodput->productive_ms, 8000);
  EXPECT_EQ(done.goodput->state, "");
  EXPECT_FALSE(done.goodput->lost_ms.contains("Uncheckpointed"));

  JobStatus fault = StatusIn(Phase::kRestarting);
  AccountGoodput(before, fault, Now(T(8000), 1));
  EXPECT_EQ(fault.goodput->productive_ms, 8000);
}

TEST(PolicyGoodputTest, LiveAddsTheOpenIntervalAndAFinishedAccountStops) {
  Goodput open{"Productive", T(0), T(2000), 4, 2000, 8000, {{"Queued", 1000}}, {{"Queued", 4000}}};
  const Goodput live = LiveGoodput(open, T(5500));
  EXPECT_EQ(live.productive_ms, 5500);
  EXPECT_EQ(live.productive_chip_ms, 22'000);
  EXPECT_EQ(live.TotalMs(), 6500);
  EXPECT_NEAR(*GoodputRatio(live), 5500.0 / 6500.0, 1e-9);
  Goodput finished = open;
  finished.state.clear();
  EXPECT_EQ(LiveGoodput(finished, T(99'000)).TotalMs(), 3000);
  EXPECT_FALSE(GoodputRatio(Goodput{}).has_value());
}

TEST(PolicyGoodputTest, JsonKeepsMillisecondsAndIsCanonical) {
  JobStatus s = StatusIn(Phase::kRunning);
  s.goodput = Goodput{"Productive",
                      T(1250),
                      T(61'007),
                      16,
                      12'345,
                      197'520,
                      {{"Queued", 5000}, {"Uncheckpointed", 1}},
                      {{"Queued", 80'000}, {"Uncheckpointed", 16}}};
  const Json j = s.ToJson();
  const Json& g = j["goodput"];
  EXPECT_EQ(g["state"], "Productive");
  EXPECT_EQ(g["stateSince"], "2024-01-01T00:00:01.250Z");
  EXPECT_EQ(g["accountedUntil"], "2024-01-01T00:01:01.007Z");
  EXPECT_EQ(g["chips"], 16);
  EXPECT_DOUBLE_EQ(g["productiveSeconds"].get<double>(), 12.345);
  EXPECT_EQ(g["lostSeconds"], (Json{{"queued", 5}, {"uncheckpointed", 0.001}}));
  EXPECT_EQ(g["lostChipSeconds"], (Json{{"queued", 80}, {"uncheckpointed", 0.016}}));
  EXPECT_EQ(g["ratio"], "0.712");  // 12.345 / 17.346
  EXPECT_EQ(JobStatus::FromJson(j), s) << j.dump(2);
  EXPECT_EQ(JobStatus::FromJson(j).ToJson(), j);
  // Through text, as the API server stores it.
  EXPECT_EQ(JobStatus::FromJson(Json::parse(j.dump())), s);
}

// --- A whole life through Decide() ------------------------------------------------------------

// Decides at the simulator's time with `nodes`, applies the plan (the clock moves 1 s).
Plan StepWith(PodSim& sim, const Nodes& nodes, bool admit = true) {
  LifecycleInput in = sim.Input(admit);
  in.node_health = nodes.Fn();
  Plan plan = Decide(in);
  sim.Apply(plan);
  return plan;
}

int64_t Lost(const JobStatus& s, std::string_view cause) {
  auto it = s.goodput->lost_ms.find(cause);
  return it == s.goodput->lost_ms.end() ? 0 : it->second;
}

TEST(PolicyGoodputTest, AScriptedLifeAddsUpToItsWallTime) {
  // 2 workers x 4 chips, a retry allowed. Each Step() moves the clock 1 s after deciding.
  PodSim sim(SpecJson(2), cache::LabelMap{{"fault-tolerance/job-retry-num", "1"}});
  Nodes nodes;
  const WallTime begin = sim.now();
  ASSERT_EQ(StepWith(sim, nodes, false).status.phase, Phase::kQueued);  // t=0
  sim.Advance(seconds(4));                                              // waits 5 s in all
  ASSERT_EQ(StepWith(sim, nodes).status.phase, Phase::kStarting);       // t=5: admitted
  sim.Advance(seconds(2));
  sim.AllReady();
  ASSERT_EQ(StepWith(sim, nodes).status.phase, Phase::kRunning);  // t=8: 3 s starting
  sim.Advance(seconds(9));
  // t=18 (10 s running): worker 1 exits with a retryable code and restarts in place.
  SetExited(sim.Worker(1), 143);
  ASSERT_EQ(StepWith(sim, nodes).status.phase, Phase::kRestarting);
  sim.FinishDeletions();
  ASSERT_TRUE(StepWith(sim, nodes).create.size() == 1);  // t=19: recreated
  sim.Advance(seconds(1));
  sim.AllReady();
  ASSERT_EQ(StepWith(sim, nodes).status.phase, Phase::kRunning);  // t=21: 3 s restarting
  sim.Advance(seconds(5));
  // t=27 (6 s running): node-0's hardware fails; the job is re-issued.
  nodes.Set("node-0", NodeVerdict::kUnhealthy, "TPUUnhealthy");
  ASSERT_EQ(StepWith(sim, nodes).status.phase, Phase::kRestarting);
  sim.Advance(seconds(1));
  sim.FinishDeletions();
  nodes = Nodes{};
  ASSERT_EQ(StepWith(sim, nodes, false).status.phase, Phase::kQueued);  // t=29: 2 s re-issue
  sim.Advance(seconds(3));
  ASSERT_EQ(StepWith(sim, nodes).status.phase, Phase::kStarting);  // t=33: 4 s requeued
  sim.AllReady();
  ASSERT_EQ(StepWith(sim, nodes).status.phase, Phase::kRunning);  // t=34: 1 s starting
  sim.Advance(seconds(6));
  SetExited(sim.Worker(0), 0);  // t=41 (7 s running)
  const Plan done = StepWith(sim, nodes);
  ASSERT_EQ(done.status.phase, Phase::kSucceeded);
  const WallTime end = sim.now() - seconds(1);

  const JobStatus s = done.status;
  ASSERT_TRUE(s.goodput.has_value());
  EXPECT_EQ(s.goodput->state, "");
  EXPECT_EQ(s.goodput->productive_ms, (10 + 6 + 7) * 1000);
  EXPECT_EQ(Lost(s, "Queued"), 5000);
  EXPECT_EQ(Lost(s, "Starting"), (3 + 1) * 1000);
  EXPECT_EQ(Lost(s, "Restarting"), 3000);
  EXPECT_EQ(Lost(s, "Reissue"), 2000);
  EXPECT_EQ(Lost(s, "Requeued"), 4000);
  EXPECT_EQ(s.goodput->TotalMs(), std::chrono::duration_cast<milliseconds>(end - begin).count());
  EXPECT_EQ(s.goodput->productive_chip_ms, 23'000 * 8);
  EXPECT_EQ(s.goodput->lost_chip_ms.at("Queued"), 5000 * 8);
  EXPECT_EQ(s.ToJson()["goodput"]["ratio"], "0.561");  // 23 / 41

  // Finished: deciding again later changes nothing.
  sim.Advance(seconds(100));
  EXPECT_EQ(Decide(sim.Input()).status.ToJson(), s.ToJson());
}

TEST(PolicyGoodputTest, AMaintenanceMoveIsItsOwnCause) {
  PodSim sim(SpecJson(1));
  Nodes nodes;
  StepWith(sim, nodes);  // queued
  StepWith(sim, nodes);  // starting
  sim.AllReady();
  ASSERT_EQ(StepWith(sim, nodes).status.phase, Phase::kRunning);
  sim.Advance(seconds(4));
  nodes.Set("node-0", NodeVerdict::kMaintenance, "Maintenance");
  ASSERT_EQ(StepWith(sim, nodes).status.phase, Phase::kRestarting);
  sim.Advance(seconds(2));
  sim.FinishDeletions();
  const Plan queued = StepWith(sim, Nodes{}, false);
  ASSERT_EQ(queued.status.phase, Phase::kQueued);
  EXPECT_EQ(Lost(queued.status, "Maintenance"), 3000);
  EXPECT_EQ(queued.status.goodput->productive_ms, 5000);
  EXPECT_EQ(queued.status.goodput->state, "Requeued");
}

TEST(PolicyGoodputTest, APreflightCheckRunningIsItsOwnCause) {
  PodSim sim(SpecJson(1));
  ASSERT_EQ(sim.Step().status.phase, Phase::kQueued);
  ASSERT_EQ(sim.Step().status.phase, Phase::kStarting);
  cache::ContainerInfo init;
  init.name = cache::InternedString::Intern(kPreflightContainer);
  init.state = cache::ContainerState::kRunning;
  sim.Worker(0).init_containers.push_back(init);
  Plan plan = sim.Step();  // t=2: the check runs
  EXPECT_EQ(plan.status.goodput->state, "Preflight");
  sim.Advance(seconds(6));
  sim.Worker(0).init_containers.front().state = cache::ContainerState::kTerminated;
  plan = sim.Step();  // t=9: the check passed, the pod is not ready yet
  EXPECT_EQ(plan.status.goodput->state, "Starting");
  EXPECT_EQ(Lost(plan.status, "Preflight"), 7000);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::policy
