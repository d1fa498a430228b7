#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "policy/preemption.h"
#include "policy/queue.h"

namespace tpujob::policy {
namespace TPUJOB_TEST_NS {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kV5e[] = "tpu-v5-lite-podslice";

WallTime At(int64_t seconds) { return WallTime{} + std::chrono::seconds(1704067200 + seconds); }

// Free chips by pool and node: {"pool-a", {{"a1", 0}, {"a2", 4}}}.
using Pools = std::map<std::string, std::vector<std::pair<std::string, int64_t>>>;

Capacity CapacityOf(const Pools& pools, const std::string& topology = "2x4") {
  Capacity capacity;
  auto& out = capacity.pools[{kV5e, topology}];
  for (const auto& [pool, nodes] : pools) {
    for (const auto& [name, free] : nodes) out[pool].push_back({name, pool, free});
  }
  return capacity;
}

GangRequest Head(const std::string& job, int32_t workers, int32_t priority,
                 const std::string& topology = "2x4") {
  GangRequest g;
  g.job = job;
  g.accelerator = kV5e;
  g.topology = topology;
  g.workers = workers;
  g.chips_per_worker = 4;
  g.priority = priority;
  g.queued_at = At(0);
  return g;
}

// A running job holding 4 chips on each of `nodes`, admitted at At(admitted).
RunningGang Running(const std::string& job, int32_t priority, int64_t admitted,
                    const std::vector<std::string>& nodes, bool preemptible = true,
                    const std::string& topology = "2x4") {
  RunningGang g;
  g.job = job;
  g.accelerator = kV5e;
  g.topology = topology;
  g.priority = priority;
  g.preemptible = preemptible;
  g.admitted_at = At(admitted);
  for (const std::string& node : nodes) g.chips.emplace_back(node, 4);
  return g;
}

PreemptorInfo NeverPreempts() {
  PreemptorInfo info;
  info.may_preempt = false;
  return info;
}

PreemptorInfo PreemptedBy(const std::string& job, int64_t at) {
  PreemptorInfo info;
  info.preempted_by = job;
  info.preempted_at = At(at);
  return info;
}

// The victims of each preemption, by preemptor.
std::map<std::string, std::vector<std::string>> Victims(const std::vector<Preemption>& plan) {
  std::map<std::string, std::vector<std::string>> out;
  for (const Preemption& p : plan) out[p.preemptor] = p.victims;
  return out;
}

// One full pool of two 4-chip nodes, held by team/low.
const Pools kFullPool = {{"pool-a", {{"a1", 0}, {"a2", 0}}}};

struct VictimCase {
  std::string name;
  Pools pools;
  std::vector<GangRequest> queued;
  std::vector<RunningGang> running;
  std::map<std::string, PreemptorInfo> preemptors;
  std::map<std::string, std::vector<std::string>> want;  // preemptor -> victims
};

class VictimSelectionTest : public ::testing::TestWithParam<VictimCase> {};

TEST_P(VictimSelectionTest, ChoosesTheExpectedVictims) {
  const VictimCase& c = GetParam();
  const auto plan = PlanPreemptions(CapacityOf(c.pools), c.queued, c.preemptors, c.running);
  EXPECT_EQ(Victims(plan), c.want);
}

INSTANTIATE_TEST_SUITE_P(
    Table, VictimSelectionTest,
    ::testing::Values(
        VictimCase{"LowerPriorityRunningJobMakesRoom",
                   kFullPool,
                   {Head("team/high", 2, 100)},
                   {Running("team/low", 10, 0, {"a1", "a2"})},
                   {},
                   {{"team/high", {"team/low"}}}},
        VictimCase{"EqualPriorityNeverPreempts",
                   kFullPool,
                   {Head("team/high", 2, 10)},
                   {Running("team/low", 10, 0, {"a1", "a2"})},
                   {},
                   {}},
        VictimCase{"HigherPriorityIsNotAVictim",
                   kFullPool,
                   {Head("team/high", 2, 10)},
                   {Running("team/low", 20, 0, {"a1", "a2"})},
                   {},
                   {}},
        VictimCase{"PreemptionPolicyNeverPreemptsNobody",
                   kFullPool,
                   {Head("team/high", 2, 100)},
                   {Running("team/low", 10, 0, {"a1", "a2"})},
                   {{"team/high", NeverPreempts()}},
                   {}},
        VictimCase{"NonPreemptibleJobIsSkipped",
                   {{"pool-a", {{"a1", 0}, {"a2", 0}, {"a3", 0}}}},
                   {Head("team/high", 1, 100)},
                   {Running("team/keep", 1, 50, {"a1"}, /*preemptible=*/false),
                    Running("team/low", 5, 0, {"a2"})},
                   {},
                   {{"team/high", {"team/low"}}}},
        VictimCase{"OnlyNonPreemptibleJobsMeansNoPreemption",
                   kFullPool,
                   {Head("team/high", 2, 100)},
                   {Running("team/keep", 10, 0, {"a1", "a2"}, /*preemptible=*/false)},
                   {},
                   {}},
        VictimCase{"LowestPriorityFirst",
                   {{"pool-a", {{"a1", 0}, {"a2", 0}}}},
                   {Head("team/high", 1, 100)},
                   {Running("team/mid", 20, 100, {"a1"}), Running("team/low", 10, 0, {"a2"})},
                   {},
                   {{"team/high", {"team/low"}}}},
        VictimCase{"MostRecentlyStartedFirstAmongEquals",
                   {{"pool-a", {{"a1", 0}, {"a2", 0}}}},
                   {Head("team/high", 1, 100)},
                   {Running("team/old", 10, 0, {"a1"}), Running("team/new", 10, 500, {"a2"})},
                   {},
                   {{"team/high", {"team/new"}}}},
        VictimCase{"NeverMoreThanNeeded",
                   // With the free node a3, one victim is enough: the newest, c; b keeps
                   // running.
                   {{"pool-a", {{"a1", 0}, {"a2", 0}, {"a3", 4}}}},
                   {Head("team/high", 2, 100)},
                   {Running("team/b", 10, 100, {"a1"}), Running("team/c", 10, 200, {"a2"})},
                   {},
                   {{"team/high", {"team/c"}}}},
        VictimCase{"AVictimNotNeededAfterAllIsGivenBack",
                   // Order: tiny (prio 1) then big (prio 2). tiny alone frees one node, not
                   // enough; big alone frees both nodes the head needs: tiny is given back.
                   {{"pool-a", {{"a1", 0}, {"a2", 0}, {"a3", 0}}}},
                   {Head("team/high", 2, 100)},
                   {Running("team/tiny", 1, 0, {"a1"}), Running("team/big", 2, 0, {"a2", "a3"})},
                   {},
                   {{"team/high", {"team/big"}}}},
        VictimCase{"FewerVictimsInAnotherPoolWin",
                   {{"pool-a", {{"a1", 0}, {"a2", 0}}}, {"pool-b", {{"b1", 0}, {"b2", 0}}}},
                   {Head("team/high", 2, 100)},
                   {Running("team/a1", 10, 0, {"a1"}), Running("team/a2", 10, 0, {"a2"}),
                    Running("team/b", 10, 0, {"b1", "b2"})},
                   {},
                   {{"team/high", {"team/b"}}}},
        VictimCase{"LowerPriorityPoolWinsOverFewerVictims",
                   {{"pool-a", {{"a1", 0}, {"a2", 0}}}, {"pool-b", {{"b1", 0}, {"b2", 0}}}},
                   {Head("team/high", 2, 100)},
                   {Running("team/a1", 1, 0, {"a1"}), Running("team/a2", 1, 0, {"a2"}),
                    Running("team/b", 50, 0, {"b1", "b2"})},
                   {},
                   {{"team/high", {"team/a1", "team/a2"}}}},
        VictimCase{"MultiHostGangNeedsOnePool",
                   // One victim in each pool would free two hosts, but not in one pool.
                   {{"pool-a", {{"a1", 0}, {"a2", 4}}}, {"pool-b", {{"b1", 0}, {"b2", 0}}}},
                   {Head("team/high", 3, 100)},
                   {Running("team/a", 10, 0, {"a1"}), Running("team/b", 10, 0, {"b1", "b2"})},
                   {},
                   {}},
        VictimCase{"NothingWhenEvenEveryCandidateWouldNotMakeRoom",
                   kFullPool,
                   {Head("team/high", 3, 100)},
                   {Running("team/low", 10, 0, {"a1", "a2"})},
                   {},
                   {}},
        VictimCase{"AHeadThatFitsPreemptsNobody",
                   {{"pool-a", {{"a1", 4}, {"a2", 4}}}},
                   {Head("team/high", 2, 100)},
                   {Running("team/low", 10, 0, {"b1"})},
                   {},
                   {}},
        VictimCase{"AJobWithAnUnboundWorkerIsNotACandidate",
                   kFullPool,
                   {Head("team/high", 2, 100)},
                   {Running("team/starting", 10, 0, {})},
                   {},
                   {}},
        VictimCase{"OtherClassesAreNotCandidates",
                   kFullPool,
                   {Head("team/high", 2, 100)},
                   {Running("team/other", 10, 0, {"a1", "a2"}, true, "4x4")},
                   {},
                   {}},
        VictimCase{"NoPingPongWithTheJobThatPreemptedIt",
                   kFullPool,
                   {Head("team/back", 2, 100)},
                   {Running("team/winner", 10, 60, {"a1", "a2"})},
                   {{"team/back", PreemptedBy("team/winner", 50)}},
                   {}},
        VictimCase{"AnOlderAdmissionOfThatJobIsFairGame",
                   // team/winner was re-admitted before team/back was preempted by it: not the
                   // admission it won by preempting.
                   kFullPool,
                   {Head("team/back", 2, 100)},
                   {Running("team/winner", 10, 10, {"a1", "a2"})},
                   {{"team/back", PreemptedBy("team/winner", 50)}},
                   {{"team/back", {"team/winner"}}}},
        VictimCase{"OnlyTheHeadOfAClassPreempts",
                   // team/second would fit by preempting too, but waits behind team/first,
                   // which cannot be helped.
                   {{"pool-a", {{"a1", 0}}}},
                   {Head("team/first", 2, 100), Head("team/second", 1, 90)},
                   {Running("team/low", 10, 0, {"a1"})},
                   {},
                   {}},
        VictimCase{"JobsAheadKeepThePoolsThePlanGaveThem",
                   // team/first (2 hosts) is admitted in pool-a, which has 4 free nodes. With
                   // team/v stopped, a fresh plan would put team/first in pool-b and team/head
                   // (4 hosts) in pool-a, but team/first stays in pool-a: stopping team/v leaves
                   // 2 + 2 free hosts, and team/head still does not fit. Nobody is preempted.
                   {{"pool-a", {{"a1", 4}, {"a2", 4}, {"a3", 4}, {"a4", 4}}},
                    {"pool-b", {{"b1", 0}, {"b2", 0}}}},
                   {[] {
                      GangRequest first = Head("team/first", 2, 100);
                      first.queued_at = At(-10);
                      return first;
                    }(),
                    Head("team/head", 4, 100)},
                   {Running("team/v", 10, 0, {"b1", "b2"})},
                   {},
                   {}},
        VictimCase{"JobsAheadInTheClassArePlacedFirst",
                   // team/first fits in the free node; team/second then needs the victim's.
                   {{"pool-a", {{"a1", 4}, {"a2", 0}}}},
                   {Head("team/first", 1, 100), Head("team/second", 1, 90)},
                   {Running("team/low", 10, 0, {"a2"})},
                   {},
                   {{"team/second", {"team/low"}}}},
        VictimCase{"TriesLeaveTheCapacityAsItWasForTheNext",
                   // Taken in order: low1 alone frees 1 host, low1 + low2 free 3. Giving back:
                   // without low2 it no longer fits, without low1 it does. Each try gives chips
                   // and takes them back; a try that left some behind would make low1 enough.
                   {{"pool-a", {{"a1", 0}, {"a2", 0}, {"a3", 0}, {"a4", 0}}}},
                   {Head("team/high", 2, 100)},
                   {Running("team/low1", 1, 0, {"a1"}), Running("team/low2", 2, 0, {"a2", "a3"}),
                    Running("team/low3", 3, 0, {"a4"})},
                   {},
                   {{"team/high", {"team/low2"}}}},
        VictimCase{"AVictimWithTwoPodsOnOneNodeFreesBoth",
                   // team/low holds all 8 chips of a1 (two 4-chip pods): two 4-chip slots.
                   {{"pool-a", {{"a1", 0}, {"a2", 0}}}},
                   {Head("team/high", 2, 100)},
                   {Running("team/low", 1, 0, {"a1", "a1"}), Running("team/mid", 5, 0, {"a2"})},
                   {},
                   {{"team/high", {"team/low"}}}}),
    [](const ::testing::TestParamInfo<VictimCase>& info) { return info.param.name; });

TEST(PreemptionTest, MessagesNameBothSidesAndTheNeed) {
  const auto plan = PlanPreemptions(CapacityOf(kFullPool), {Head("team/high", 2, 100)}, {},
                                    {Running("team/low", 10, 0, {"a1", "a2"})});
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].pool, "pool-a");
  EXPECT_EQ(plan[0].message,
            "preempting team/low (priority 10) in node pool pool-a: needs 2 hosts of "
            "tpu-v5-lite-podslice 2x4 (4 chips each) in one node pool");
  EXPECT_EQ(plan[0].victim_message,
            "preempted by team/high (priority 100), which needs 2 hosts of tpu-v5-lite-podslice "
            "2x4 (4 chips each) in one node pool");
}

TEST(PreemptionTest, EachBlockedClassGetsItsOwnPreemption) {
  Capacity capacity = CapacityOf(kFullPool);
  capacity.pools[{kV5e, "4x4"}]["pool-x"] = {{"x1", "pool-x", 0}};
  const auto plan = PlanPreemptions(
      capacity, {Head("team/big", 1, 100, "4x4"), Head("team/high", 2, 100)}, {},
      {Running("team/low", 10, 0, {"a1", "a2"}), Running("team/x", 10, 0, {"x1"}, true, "4x4")});
  EXPECT_EQ(Victims(plan), (std::map<std::string, std::vector<std::string>>{
                               {"team/big", {"team/x"}}, {"team/high", {"team/low"}}}));
}

TEST(PreemptionTest, NothingToDoWithoutQueuedOrRunningJobs) {
  EXPECT_THAT(PlanPreemptions(CapacityOf(kFullPool), {}, {}, {Running("a/b", 1, 0, {"a1"})}),
              IsEmpty());
  EXPECT_THAT(PlanPreemptions(CapacityOf(kFullPool), {Head("a/b", 1, 5)}, {}, {}), IsEmpty());
}

// Each pool's choice is tried on the pools its candidates hold, not on a copy of the whole class
// per try: among 4,000 full pools the one whose gang is the cheapest to stop is chosen. (With a
// copy per try this plan was quadratic in the pools, seconds here; `make bench`'s curves section
// prints the preemption plan's growth exponent, which caught it: no test asserts a timing.)
TEST(PreemptionTest, ManyPoolsAreTriedEachOnItsOwnNodes) {
  constexpr int kPools = 4000;
  Pools pools;
  std::vector<RunningGang> running;
  for (int p = 0; p < kPools; ++p) {
    const std::string pool = "pool-" + std::to_string(p);
    std::vector<std::string> nodes;
    for (int n = 0; n < 4; ++n) {
      nodes.push_back(pool + "-node-" + std::to_string(n));
      pools[pool].emplace_back(nodes.back(), 0);
    }
    // The most recently admitted gang, of the lowest priority, is the one to stop: pool-1234.
    running.push_back(Running("team/low-" + std::to_string(p), p == 1234 ? 0 : 1,
                              p == 1234 ? 100 : p % 100, nodes));
  }
  const Capacity capacity = CapacityOf(pools);
  const auto plan = PlanPreemptions(capacity, {Head("team/high", 4, 100)}, {}, running);
  EXPECT_EQ(Victims(plan),
            (std::map<std::string, std::vector<std::string>>{{"team/high", {"team/low-1234"}}}));
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].pool, "pool-1234");
}

// --- Multislice ---------------------------------------------------------------------------------

TEST(MultislicePreemptionTest, MultisliceHeadTakesVictimsAcrossPools) {
  // Three full pools of two hosts; a 2-slice head of 2 hosts per slice needs two whole pools.
  const Capacity capacity = CapacityOf({{"pool-a", {{"a1", 0}, {"a2", 0}}},
                                        {"pool-b", {{"b1", 0}, {"b2", 0}}},
                                        {"pool-c", {{"c1", 0}, {"c2", 0}}}});
  GangRequest head = Head("ns/ms", 2, 100);
  head.slices = 2;
  const std::vector<RunningGang> running = {Running("ns/a", 10, 1, {"a1", "a2"}),
                                            Running("ns/b", 5, 2, {"b1", "b2"}),
                                            Running("ns/c", 1, 3, {"c1", "c2"})};
  const auto plan = PlanPreemptions(capacity, {head}, {}, running);
  ASSERT_EQ(plan.size(), 1u);
  // The two lowest priorities, in the order chosen; the pools named together.
  EXPECT_THAT(plan[0].victims, ElementsAre("ns/c", "ns/b"));
  EXPECT_EQ(plan[0].pool, "pool-b, pool-c");
  EXPECT_THAT(plan[0].message, HasSubstr("in node pools pool-b, pool-c: needs 2 node pools"));
}

// Elastic slices: a degraded job's grow never preempts, even for the lowest priority, and the job
// of higher priority behind it in the same class is the head that may.
TEST(MultislicePreemptionTest, AGrowNeverPreemptsAndTheJobBehindItMay) {
  const Capacity capacity = CapacityOf({{"pool-a", {{"a1", 0}, {"a2", 0}}},
                                        {"pool-c", {{"c1", 0}, {"c2", 0}}},
                                        {"pool-e", {{"e1", 0}, {"e2", 0}}}});
  GangRequest grow = Head("ns/el", 2, 100);
  grow.reissued = true;
  grow.grow = true;
  grow.slice_ids = {2};
  grow.held_pools = {"pool-a", "pool-c"};
  const std::vector<RunningGang> running = {Running("ns/low", 1, 1, {"e1", "e2"})};
  EXPECT_TRUE(PlanPreemptions(capacity, {grow}, {}, running).empty());
  // Without `grow` the same request (a replaced slice) is a head that takes ns/low's pool.
  GangRequest replace = grow;
  replace.grow = false;
  EXPECT_EQ(Victims(PlanPreemptions(capacity, {replace}, {}, running)).at("ns/el"),
            std::vector<std::string>{"ns/low"});
  // Behind the grow, a job of higher priority than ns/low preempts it.
  const auto plan = PlanPreemptions(capacity, {grow, Head("ns/high", 2, 50)}, {}, running);
  EXPECT_EQ(Victims(plan),
            (std::map<std::string, std::vector<std::string>>{{"ns/high", {"ns/low"}}}));
}

TEST(MultislicePreemptionTest, AReplacedSliceTakesALowerPriorityJobsPoolNotOneItHolds) {
  // Hot swap: a job of priority 100 lost slice 1; its slices 0 and 2 hold pool-a and pool-c
  // (reserved: no free chips). The only other pool runs a 1-slice job of priority 10.
  const Capacity capacity = CapacityOf({{"pool-a", {{"a1", 0}, {"a2", 0}}},
                                        {"pool-c", {{"c1", 0}, {"c2", 0}}},
                                        {"pool-e", {{"e1", 0}, {"e2", 0}}}});
  GangRequest head = Head("ns/big", 2, 100);
  head.reissued = true;
  head.slices = 1;
  head.slice_ids = {1};
  head.held_pools = {"pool-a", "pool-c"};
  const std::vector<RunningGang> running = {Running("ns/low", 10, 1, {"e1", "e2"})};
  const auto plan = PlanPreemptions(capacity, {head}, {}, running);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_THAT(plan[0].victims, ElementsAre("ns/low"));
  EXPECT_EQ(plan[0].pool, "pool-e");
  EXPECT_EQ(plan[0].taken, "preempting ns/low (priority 10) in node pool pool-e");
  EXPECT_THAT(plan[0].message, HasSubstr("preempting ns/low (priority 10) in node pool pool-e: "
                                         "needs a node pool with 2 hosts"));
  EXPECT_THAT(plan[0].victim_message, HasSubstr("to replace slice 1"));
  // A pool it holds is never a victim's: a job in its own reserved pool is not worth stopping.
  head.held_pools = {"pool-a", "pool-c", "pool-e"};
  EXPECT_TRUE(PlanPreemptions(capacity, {head}, {}, running).empty());
}

TEST(MultislicePreemptionTest, MultisliceVictimIsACandidateInEachOfItsPools) {
  // A 2-slice victim in pool-a and pool-b; a single-slice head of 2 hosts fits in either pool
  // once it is gone. The other candidate, in pool-b only, has a higher priority.
  const Capacity capacity = CapacityOf({{"pool-a", {{"a1", 0}, {"a2", 0}}},
                                        {"pool-b", {{"b1", 0}, {"b2", 0}, {"b3", 0}, {"b4", 0}}}});
  const std::vector<RunningGang> running = {Running("ns/ms", 1, 1, {"a1", "a2", "b1", "b2"}),
                                            Running("ns/mid", 50, 1, {"b3", "b4"})};
  const auto plan = PlanPreemptions(capacity, {Head("ns/head", 2, 100)}, {}, running);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_THAT(plan[0].victims, ElementsAre("ns/ms"));
}

TEST(MultislicePreemptionTest, TheNamedPoolIsWhereTheHeadLandsOnceTheVictimIsGone) {
  // The 2-slice victim holds a1 (pool-a) and b1, b2 (pool-b); a2 is held by a job of higher
  // priority. Stopping the victim makes room only in pool-b, which the plan names.
  const Capacity capacity =
      CapacityOf({{"pool-a", {{"a1", 0}, {"a2", 0}}}, {"pool-b", {{"b1", 0}, {"b2", 0}}}});
  const std::vector<RunningGang> running = {Running("ns/ms", 1, 1, {"a1", "b1", "b2"}),
                                            Running("ns/mid", 50, 1, {"a2"})};
  const auto plan = PlanPreemptions(capacity, {Head("ns/head", 2, 100)}, {}, running);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_THAT(plan[0].victims, ElementsAre("ns/ms"));
  EXPECT_EQ(plan[0].pool, "pool-b");
  EXPECT_THAT(plan[0].message, HasSubstr("in node pool pool-b:"));
}

TEST(MultislicePreemptionTest, NoPreemptionWhenEvenAllCandidatesLeaveTooFewPools) {
  const Capacity capacity =
      CapacityOf({{"pool-a", {{"a1", 0}, {"a2", 0}}}, {"pool-b", {{"b1", 0}, {"b2", 0}}}});
  GangRequest head = Head("ns/ms", 2, 100);
  head.slices = 3;
  const std::vector<RunningGang> running = {Running("ns/a", 1, 1, {"a1", "a2"}),
                                            Running("ns/b", 1, 2, {"b1", "b2"})};
  EXPECT_THAT(PlanPreemptions(capacity, {head}, {}, running), IsEmpty());
}

TEST(MultislicePreemptionTest, AdmittedMultisliceJobAheadKeepsAllItsPools) {
  // ns/first (re-issued, so ahead of the head) is admitted into pool-a and pool-b, which are
  // free; the head must then take its victim in pool-c, not in the pools ns/first was given.
  const Capacity capacity = CapacityOf({{"pool-a", {{"a1", 4}, {"a2", 4}}},
                                        {"pool-b", {{"b1", 4}, {"b2", 4}}},
                                        {"pool-c", {{"c1", 0}, {"c2", 0}}}});
  GangRequest first = Head("ns/first", 2, 0);
  first.slices = 2;
  first.reissued = true;
  const std::vector<RunningGang> running = {Running("ns/low", 1, 1, {"c1", "c2"})};
  const auto plan = PlanPreemptions(capacity, {first, Head("ns/head", 2, 100)}, {}, running);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].preemptor, "ns/head");
  EXPECT_EQ(plan[0].pool, "pool-c");
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::policy
