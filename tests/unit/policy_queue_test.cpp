#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cache/intern.h"
#include "cache/objects.h"
#include "cache/store.h"
#include "policy/node_health.h"
#include "policy/queue.h"

namespace tpujob::policy {
namespace TPUJOB_TEST_NS {

using cache::InternedString;
using cache::NodeInfo;
using cache::PodInfo;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kV5e[] = "tpu-v5-lite-podslice";
constexpr char kV4[] = "tpu-v4-podslice";

WallTime At(int64_t seconds) { return WallTime{} + std::chrono::seconds(1704067200 + seconds); }

// A schedulable, Ready TPU node; `pool` empty leaves the pool label off.
NodeInfo TpuNode(const std::string& name, const std::string& pool, int64_t chips,
                 const std::string& accelerator = kV5e, const std::string& topology = "2x4") {
  NodeInfo node;
  node.name = name;
  node.uid = "uid-" + name;
  node.resource_version = "1";
  node.ready = cache::ConditionStatus::kTrue;
  node.conditions.push_back({InternedString::Intern("Ready"),
                             cache::ConditionStatus::kTrue,
                             InternedString::Intern("KubeletReady"),
                             {},
                             std::nullopt});
  if (!accelerator.empty()) node.labels.Set(kAcceleratorLabel, accelerator);
  if (!topology.empty()) node.labels.Set(kTopologyLabel, topology);
  if (!pool.empty()) node.labels.Set(cache::kNodePoolLabel, pool);
  node.tpu_allocatable = chips;
  return node;
}

// A pod bound to `node` (none when empty) asking for `chips`.
PodInfo PodOn(const std::string& name, const std::string& node, int64_t chips,
              cache::PodPhase phase = cache::PodPhase::kRunning) {
  PodInfo pod;
  pod.ns = InternedString::Intern("team");
  pod.name = name;
  pod.uid = "uid-" + name;
  pod.node_name = InternedString::Intern(node);
  pod.phase = phase;
  cache::ContainerInfo c;
  c.name = InternedString::Intern("trainer");
  c.tpu_request = chips;
  pod.containers.push_back(std::move(c));
  return pod;
}

GangRequest Gang(const std::string& job, int32_t workers, int64_t chips = 4,
                 const std::string& topology = "2x4", const std::string& accelerator = kV5e) {
  GangRequest g;
  g.job = job;
  g.accelerator = accelerator;
  g.topology = topology;
  g.workers = workers;
  g.chips_per_worker = chips;
  g.queued_at = At(0);
  return g;
}

GangRequest With(GangRequest g, int32_t priority, int64_t queued_at, bool reissued = false) {
  g.priority = priority;
  g.queued_at = At(queued_at);
  g.reissued = reissued;
  return g;
}

Capacity Build(const std::vector<NodeInfo>& nodes, const std::vector<PodInfo>& pods = {},
               const std::vector<Reservation>& reservations = {},
               const NodeHealthConfig& health = {}, WallTime now = At(0)) {
  std::vector<const NodeInfo*> node_ptrs;
  for (const NodeInfo& n : nodes) node_ptrs.push_back(&n);
  std::vector<const PodInfo*> pod_ptrs;
  for (const PodInfo& p : pods) pod_ptrs.push_back(&p);
  return BuildCapacity(node_ptrs, pod_ptrs, reservations, health, now);
}

// `count` nodes "<pool>-<i>" of `chips` chips in `pool`.
void AddPool(std::vector<NodeInfo>& nodes, const std::string& pool, int count, int64_t chips,
             const std::string& accelerator = kV5e, const std::string& topology = "2x4") {
  for (int i = 0; i < count; ++i) {
    nodes.push_back(TpuNode(pool + "-" + std::to_string(i), pool, chips, accelerator, topology));
  }
}

// Free chips by node name, over every class and pool.
std::map<std::string, int64_t> FreeByNode(const Capacity& capacity) {
  std::map<std::string, int64_t> out;
  for (const auto& [cls, pools] : capacity.pools) {
    for (const auto& [pool, nodes] : pools) {
      for (const NodeCapacity& n : nodes) out[n.name] = n.free_chips;
    }
  }
  return out;
}

// The pool of the first slice ("" when none: not admitted, or not pinned).
std::string FirstPool(const Admission& a) { return a.pools.empty() ? "" : a.pools.front(); }

std::string Show(const Admission& a) {
  return std::string(a.admit ? "admit" : "wait") + " pool=" + FirstPool(a) + " reason=" + a.reason +
         " position=" + std::to_string(a.position) + " message=" + a.message;
}

std::map<std::string, std::string> ShowAll(const std::map<std::string, Admission>& plan) {
  std::map<std::string, std::string> out;
  for (const auto& [job, a] : plan) out[job] = Show(a);
  return out;
}

// --- Order ------------------------------------------------------------------------------------

TEST(QueueOrderTest, ReissuedGoFirstThenPriorityThenTimeThenKey) {
  const GangRequest reissued_low = With(Gang("ns/r", 1), 0, 50, true);
  const GangRequest high_late = With(Gang("ns/h", 1), 10, 40);
  const GangRequest low_early = With(Gang("ns/e", 1), 0, 10);
  const GangRequest low_late_a = With(Gang("ns/a", 1), 0, 20);
  const GangRequest low_late_b = With(Gang("ns/b", 1), 0, 20);

  EXPECT_TRUE(QueueBefore(reissued_low, high_late));
  EXPECT_FALSE(QueueBefore(high_late, reissued_low));
  EXPECT_TRUE(QueueBefore(high_late, low_early));
  EXPECT_FALSE(QueueBefore(low_early, high_late));
  EXPECT_TRUE(QueueBefore(low_early, low_late_a));
  EXPECT_TRUE(QueueBefore(low_late_a, low_late_b));
  EXPECT_FALSE(QueueBefore(low_late_b, low_late_a));
  EXPECT_FALSE(QueueBefore(low_late_a, low_late_a));
  // Among re-issued attempts priority still counts.
  EXPECT_TRUE(QueueBefore(With(Gang("ns/z", 1), 5, 90, true), With(Gang("ns/a", 1), 1, 0, true)));
  // Negative priorities go after the default.
  EXPECT_TRUE(QueueBefore(With(Gang("ns/z", 1), 0, 90), With(Gang("ns/a", 1), -1, 0)));
}

TEST(QueueOrderTest, PositionsFollowTheOrderWhateverTheInputOrder) {
  std::vector<NodeInfo> nodes;
  AddPool(nodes, "pool-a", 8, 4);
  const Capacity capacity = Build(nodes);
  const std::vector<GangRequest> queued = {
      With(Gang("ns/low-early", 1), 0, 10), With(Gang("ns/high", 1), 3, 99),
      With(Gang("ns/reissued", 1), -5, 500, true), With(Gang("ns/low-b", 1), 0, 20),
      With(Gang("ns/low-a", 1), 0, 20)};
  const auto plan = PlanAdmissions(capacity, queued);
  ASSERT_EQ(plan.size(), 5u);
  EXPECT_EQ(plan.at("ns/reissued").position, 1);
  EXPECT_EQ(plan.at("ns/high").position, 2);
  EXPECT_EQ(plan.at("ns/low-early").position, 3);
  EXPECT_EQ(plan.at("ns/low-a").position, 4);
  EXPECT_EQ(plan.at("ns/low-b").position, 5);
  std::vector<GangRequest> reversed(queued.rbegin(), queued.rend());
  EXPECT_EQ(ShowAll(PlanAdmissions(capacity, reversed)), ShowAll(plan));
}

TEST(QueueOrderTest, ReissuedJobTakesTheCapacityFirst) {
  std::vector<NodeInfo> nodes;
  AddPool(nodes, "pool-a", 4, 4);
  const auto plan = PlanAdmissions(
      Build(nodes), {With(Gang("ns/new", 4), 100, 0), With(Gang("ns/again", 4), 0, 60, true)});
  EXPECT_TRUE(plan.at("ns/again").admit);
  EXPECT_EQ(plan.at("ns/again").position, 1);
  EXPECT_FALSE(plan.at("ns/new").admit);
  EXPECT_EQ(plan.at("ns/new").reason, "WaitingForCapacity");
}

// --- Capacity ---------------------------------------------------------------------------------

// Announced maintenance (GKE's label, Unix seconds): nodes whose maintenance starts within the
// avoid window (default 60 minutes) offer nothing to new admissions and are named in the
// message; one further ahead counts, and the capacity says when it will stop counting.
TEST(QueueCapacityTest, NodesWithMaintenanceSoonAreLeftOutAndNamed) {
  const int64_t now_unix = 1704067200;  // At(0)
  std::vector<NodeInfo> nodes;
  AddPool(nodes, "pool-a", 3, 4);
  nodes[0].labels.Set(kScheduledMaintenanceLabel, std::to_string(now_unix + 5 * 60));
  nodes[1].labels.Set(kScheduledMaintenanceLabel, std::to_string(now_unix + 90 * 60));
  nodes[2].labels.Set(kScheduledMaintenanceLabel, "soon");  // not a time: ignored

  const Capacity capacity = Build(nodes);
  EXPECT_EQ(FreeByNode(capacity),
            (std::map<std::string, int64_t>{{"pool-a-1", 4}, {"pool-a-2", 4}}));
  EXPECT_THAT(capacity.avoided.at({kV5e, "2x4"}), ElementsAre("pool-a-0"));
  ASSERT_TRUE(capacity.changes_in);
  EXPECT_EQ(*capacity.changes_in, std::chrono::minutes(30));  // pool-a-1: 90 - 60 minutes

  auto plan = PlanAdmissions(capacity, {Gang("ns/three", 3)});
  EXPECT_FALSE(plan.at("ns/three").admit);
  EXPECT_EQ(plan.at("ns/three").message,
            "needs 3 hosts of tpu-v5-lite-podslice 2x4 (4 chips each) in one node pool; the best "
            "pool, pool-a, has 2 free; 1 node left out: maintenance scheduled within 60m "
            "(pool-a-0)");
  plan = PlanAdmissions(capacity, {Gang("ns/two", 2)});
  EXPECT_TRUE(plan.at("ns/two").admit);

  // Thirty minutes later pool-a-1 is within the window too.
  const Capacity later = Build(nodes, {}, {}, {}, At(30 * 60));
  EXPECT_THAT(later.avoided.at({kV5e, "2x4"}), ElementsAre("pool-a-0", "pool-a-1"));
  EXPECT_FALSE(later.changes_in);

  // A zero window turns it off; maintenance already under way is the node health's business.
  NodeHealthConfig off;
  off.maintenance_avoid_window = Duration::zero();
  off.maintenance_move_window = Duration::zero();
  EXPECT_EQ(FreeByNode(Build(nodes, {}, {}, off)).size(), 3u);
  EXPECT_TRUE(Build(nodes, {}, {}, off).avoided.empty());
}

// A Ready node still carrying a NoSchedule taint Kubernetes sets on nodes unfit for new pods
// (node.kubernetes.io/not-ready on every new node until the node controller sees it Ready; at
// thousands of new nodes, for minutes) offers nothing: the scheduler would leave an admitted
// gang's pods there unschedulable, and the admission would be released. Other taints (the TPU
// taint every pod tolerates, a NoExecute one tolerated for 300 s, one of another prefix) do not.
TEST(QueueCapacityTest, NodesWithANoScheduleTaintOfKubernetesAreLeftOutAndNamed) {
  const auto taint = [](const std::string& key, cache::TaintEffect effect) {
    return cache::Taint{InternedString::Intern(key), InternedString::Intern(""), effect};
  };
  std::vector<NodeInfo> nodes;
  AddPool(nodes, "pool-a", 4, 4);
  nodes[0].taints.push_back(taint("google.com/tpu", cache::TaintEffect::kNoSchedule));
  nodes[0].taints.push_back(taint("node.kubernetes.io/not-ready", cache::TaintEffect::kNoSchedule));
  nodes[1].taints.push_back(
      taint("node.kubernetes.io/disk-pressure", cache::TaintEffect::kNoSchedule));
  nodes[2].taints.push_back(taint("node.kubernetes.io/not-ready", cache::TaintEffect::kNoExecute));
  nodes[3].taints.push_back(taint("example.com/not-ready", cache::TaintEffect::kNoSchedule));

  EXPECT_EQ(LifecycleTaint(nodes[0])->key.str(), "node.kubernetes.io/not-ready");
  EXPECT_EQ(LifecycleTaint(nodes[2]), nullptr);
  const Capacity capacity = Build(nodes);
  EXPECT_EQ(FreeByNode(capacity),
            (std::map<std::string, int64_t>{{"pool-a-2", 4}, {"pool-a-3", 4}}));
  EXPECT_THAT(capacity.tainted.at({kV5e, "2x4"}),
              ElementsAre("pool-a-0 node.kubernetes.io/not-ready",
                          "pool-a-1 node.kubernetes.io/disk-pressure"));
  EXPECT_TRUE(capacity.faulty_pools.empty());  // it is not a fault: the job waits, nothing moves

  auto plan = PlanAdmissions(capacity, {Gang("ns/four", 4)});
  EXPECT_FALSE(plan.at("ns/four").admit);
  EXPECT_EQ(plan.at("ns/four").message,
            "needs 4 hosts of tpu-v5-lite-podslice 2x4 (4 chips each) in one node pool; the best "
            "pool, pool-a, has 2 free; 2 nodes left out until Kubernetes lifts a NoSchedule taint "
            "(pool-a-0 node.kubernetes.io/not-ready, pool-a-1 node.kubernetes.io/disk-pressure)");
  // Once the node controller lifted them, the gang fits.
  for (NodeInfo& node : nodes) {
    std::erase_if(node.taints,
                  [](const cache::Taint& t) { return t.key.str().starts_with("node.kubernetes"); });
  }
  EXPECT_TRUE(PlanAdmissions(Build(nodes), {Gang("ns/four", 4)}).at("ns/four").admit);
}

// The move window: a node whose maintenance starts within it is under maintenance (its jobs
// move); before that it is healthy and says when that changes.
TEST(NodeHealthTest, AnnouncedMaintenanceCountsWithinTheMoveWindow) {
  const int64_t now_unix = 1704067200;
  NodeInfo node = TpuNode("n", "pool-a", 4);
  node.labels.Set(kScheduledMaintenanceLabel, std::to_string(now_unix + 20 * 60));
  const NodeHealthConfig config;  // move window 15 minutes
  NodeHealth h = EvaluateNode(&node, config, At(0));
  EXPECT_EQ(h.verdict, NodeVerdict::kHealthy);
  ASSERT_TRUE(h.changes_in);
  EXPECT_EQ(*h.changes_in, std::chrono::minutes(5));

  h = EvaluateNode(&node, config, At(5 * 60));
  EXPECT_EQ(h.verdict, NodeVerdict::kMaintenance);
  EXPECT_EQ(h.reason, "Maintenance");
  EXPECT_EQ(h.message,
            "node n is scheduled for maintenance at 2024-01-01T00:20:00Z (in 15m0s), within the "
            "15m0s window (cloud.google.com/scheduled-maintenance-time)");

  NodeHealthConfig off;
  off.maintenance_move_window = Duration::zero();
  h = EvaluateNode(&node, off, At(19 * 60));
  EXPECT_EQ(h.verdict, NodeVerdict::kHealthy);
  EXPECT_FALSE(h.changes_in);

  // A broken node is broken whatever its maintenance plans.
  node.ready = cache::ConditionStatus::kFalse;
  node.conditions[0].status = cache::ConditionStatus::kFalse;
  h = EvaluateNode(&node, config, At(0));
  EXPECT_EQ(h.verdict, NodeVerdict::kUnhealthy);
  EXPECT_FALSE(h.changes_in);
}

TEST(QueueCapacityTest, OnlySchedulableHealthyLabelledNodesOfferChips) {
  std::vector<NodeInfo> nodes;
  nodes.push_back(TpuNode("good", "pool-a", 4));
  nodes.push_back(TpuNode("cordoned", "pool-a", 4));
  nodes.back().unschedulable = true;
  nodes.push_back(TpuNode("not-ready", "pool-a", 4));
  nodes.back().ready = cache::ConditionStatus::kFalse;
  nodes.back().conditions[0].status = cache::ConditionStatus::kFalse;
  nodes.push_back(TpuNode("unreachable", "pool-a", 4));
  nodes.back().ready = cache::ConditionStatus::kUnknown;
  nodes.back().conditions[0].status = cache::ConditionStatus::kUnknown;
  nodes.push_back(TpuNode("broken-chip", "pool-a", 4));
  nodes.back().conditions.push_back({InternedString::Intern("TPUUnhealthy"),
                                     cache::ConditionStatus::kTrue,
                                     InternedString::Intern("ChipError"),
                                     {},
                                     std::nullopt});
  nodes.push_back(TpuNode("maintenance", "pool-a", 4));
  nodes.back().taints.push_back(
      {InternedString::Intern("cloud.google.com/impending-node-termination"), InternedString(),
       cache::TaintEffect::kNoSchedule});
  nodes.push_back(TpuNode("no-accelerator", "pool-a", 4, ""));
  nodes.push_back(TpuNode("no-topology", "pool-a", 4, kV5e, ""));
  nodes.push_back(TpuNode("cpu-only", "pool-a", 0, "", ""));

  const Capacity capacity = Build(nodes);
  EXPECT_EQ(FreeByNode(capacity), (std::map<std::string, int64_t>{{"good", 4}}));
  ASSERT_EQ(capacity.pools.size(), 1u);
  EXPECT_EQ(capacity.pools.begin()->first, (Capacity::Class{kV5e, "2x4"}));

  // A broken chip among them makes no difference to a 2-worker job: only "good" counts.
  const auto plan = PlanAdmissions(capacity, {Gang("ns/two", 2)});
  EXPECT_FALSE(plan.at("ns/two").admit);
  EXPECT_EQ(plan.at("ns/two").message,
            "needs 2 hosts of tpu-v5-lite-podslice 2x4 (4 chips each) in one node pool; the best "
            "pool, pool-a, has 1 free");
}

TEST(QueueCapacityTest, HardwareConditionsComeFromTheHealthConfig) {
  std::vector<NodeInfo> nodes = {TpuNode("n", "p", 4)};
  nodes[0].conditions.push_back({InternedString::Intern("KernelDeadlock"),
                                 cache::ConditionStatus::kTrue,
                                 InternedString(),
                                 {},
                                 std::nullopt});
  EXPECT_EQ(FreeByNode(Build(nodes)).size(), 1u);
  NodeHealthConfig health;
  health.hardware_conditions.push_back("KernelDeadlock");
  EXPECT_TRUE(FreeByNode(Build(nodes, {}, {}, health)).empty());
}

TEST(QueueCapacityTest, PodsTakeChipsUntilTheyTerminate) {
  std::vector<NodeInfo> nodes = {TpuNode("a", "p", 8), TpuNode("b", "p", 8), TpuNode("c", "p", 8),
                                 TpuNode("d", "p", 8)};
  std::vector<PodInfo> pods;
  pods.push_back(PodOn("running", "a", 4));
  pods.push_back(PodOn("pending-bound", "a", 2, cache::PodPhase::kPending));
  pods.push_back(PodOn("succeeded", "b", 4, cache::PodPhase::kSucceeded));
  pods.push_back(PodOn("failed", "b", 4, cache::PodPhase::kFailed));
  pods.push_back(PodOn("deleting", "c", 4));
  pods.back().deletion_timestamp = At(0);
  pods.push_back(PodOn("unbound", "", 8, cache::PodPhase::kPending));
  pods.push_back(PodOn("elsewhere", "cpu-node", 8));
  pods.push_back(PodOn("too-much", "d", 4));
  pods.push_back(PodOn("too-much-2", "d", 8));
  // Init containers count as the scheduler counts them: the larger of the two.
  pods.push_back(PodOn("init", "c", 1));
  cache::ContainerInfo init;
  init.tpu_request = 3;
  pods.back().init_containers.push_back(init);

  EXPECT_EQ(FreeByNode(Build(nodes, pods)),
            (std::map<std::string, int64_t>{{"a", 2}, {"b", 8}, {"c", 1}, {"d", 0}}));
}

TEST(QueueCapacityTest, ANodeListedTwiceCountsOnce) {
  // "dup" twice, in different pools: it counts in the first pool by name, once; its pods count
  // once too.
  const std::vector<NodeInfo> nodes = {TpuNode("x", "pool-a", 4), TpuNode("dup", "pool-c", 8),
                                       TpuNode("dup", "pool-b", 8), TpuNode("y", "pool-c", 4)};
  const Capacity capacity = Build(nodes, {PodOn("p", "dup", 4)});
  std::vector<std::string> names;
  for (const auto& [pool, list] : capacity.pools.at({kV5e, "2x4"})) {
    for (const NodeCapacity& n : list) {
      names.push_back(pool + ":" + n.name + "=" + std::to_string(n.free_chips));
    }
  }
  EXPECT_THAT(names, ElementsAre("pool-a:x=4", "pool-b:dup=4", "pool-c:y=4"));
}

// "pool:node=free" for every node of the class, pools and nodes in the capacity's order.
std::vector<std::string> ShowClass(const Capacity& capacity,
                                   const Capacity::Class& key = {kV5e, "2x4"}) {
  std::vector<std::string> out;
  auto it = capacity.pools.find(key);
  if (it == capacity.pools.end()) return out;
  for (const auto& [pool, list] : it->second) {
    for (const NodeCapacity& n : list) {
      out.push_back(pool + ":" + n.name + "=" + std::to_string(n.free_chips));
    }
  }
  return out;
}

TEST(QueueCapacityTest, NodesAndPodsCountTheSameInAnyOrder) {
  struct Case {
    const char* name;
    std::vector<NodeInfo> nodes;
    std::vector<PodInfo> pods;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"pods of one node one after another, and apart",
       {TpuNode("b", "pool-a", 8), TpuNode("a", "pool-a", 8), TpuNode("c", "pool-b", 8)},
       {PodOn("p1", "a", 2), PodOn("p2", "a", 2), PodOn("p3", "b", 4), PodOn("p4", "a", 1),
        PodOn("p5", "c", 8), PodOn("p6", "b", 1)},
       {"pool-a:a=3", "pool-a:b=3", "pool-b:c=0"}},
      {"pods that take nothing: no chips, finished, unbound, on a node not listed",
       {TpuNode("a", "pool-a", 8), TpuNode("b", "pool-a", 4)},
       {PodOn("zero", "a", 0), PodOn("done", "a", 8, cache::PodPhase::kSucceeded),
        PodOn("failed", "b", 4, cache::PodPhase::kFailed), PodOn("unbound", "", 4),
        PodOn("elsewhere", "gone", 4), PodOn("runs", "b", 1)},
       {"pool-a:a=8", "pool-a:b=3"}},
      {"more asked than there is, and a node with negative allocatable",
       {TpuNode("a", "pool-a", 4), TpuNode("n", "pool-a", -4)},
       {PodOn("p1", "a", 3), PodOn("p2", "a", 3), PodOn("p3", "n", 1)},
       {"pool-a:a=0", "pool-a:n=0"}},
      {"classes and pools apart, unlabelled pool first",
       {TpuNode("x", "pool-b", 4), TpuNode("w", "", 4), TpuNode("v", "pool-a", 4),
        TpuNode("u", "pool-a", 4, kV4, "2x2x1"), TpuNode("t", "pool-b", 4, kV5e, "4x4")},
       {PodOn("p1", "x", 1), PodOn("p2", "u", 4), PodOn("p3", "w", 2)},
       {":w=2", "pool-a:v=4", "pool-b:x=3"}},
  };
  for (const Case& c : cases) {
    // As listed, reversed and rotated: the same capacity.
    for (int order = 0; order < 3; ++order) {
      std::vector<NodeInfo> nodes = c.nodes;
      std::vector<PodInfo> pods = c.pods;
      if (order == 1) {
        std::reverse(nodes.begin(), nodes.end());
        std::reverse(pods.begin(), pods.end());
      } else if (order == 2) {
        std::rotate(nodes.begin(), nodes.begin() + 1, nodes.end());
        std::rotate(pods.begin(), pods.begin() + 1, pods.end());
      }
      EXPECT_EQ(ShowClass(Build(nodes, pods)), c.expected) << c.name << ", order " << order;
    }
  }
}

TEST(QueueCapacityTest, ANodeListedTwiceInOnePoolCountsAsFirstListed) {
  struct Case {
    std::vector<NodeInfo> nodes;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {{TpuNode("dup", "pool-a", 8), TpuNode("a", "pool-a", 4), TpuNode("dup", "pool-a", 4)},
       {"pool-a:a=4", "pool-a:dup=6"}},
      {{TpuNode("dup", "pool-a", 4), TpuNode("a", "pool-a", 4), TpuNode("dup", "pool-a", 8)},
       {"pool-a:a=4", "pool-a:dup=2"}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ShowClass(Build(c.nodes, {PodOn("p", "dup", 2)})), c.expected);
  }
}

TEST(QueueCapacityTest, ManyNodesEachGetTheirOwnPods) {
  // Enough names that some share a bucket of the name index; every node's pods are its own.
  std::vector<NodeInfo> nodes;
  std::vector<PodInfo> pods;
  std::map<std::string, int64_t> expected;
  for (int i = 0; i < 3000; ++i) {
    const std::string name = "pool-" + std::to_string(i % 37) + "-node-" + std::to_string(i);
    nodes.push_back(TpuNode(name, "pool-" + std::to_string(i % 37), 8));
    const int64_t used = i % 9;
    for (int64_t p = 0; p < used; ++p)
      pods.push_back(PodOn(name + "-" + std::to_string(p), name, 1));
    expected[name] = 8 - std::min<int64_t>(used, 8);
  }
  std::shuffle(pods.begin(), pods.end(), std::mt19937(7));
  EXPECT_EQ(FreeByNode(Build(nodes, pods)), expected);
}

TEST(QueueCapacityTest, PoolsAndNodesInNameOrderUnlabelledNodesInPoolEmpty) {
  const std::vector<NodeInfo> nodes = {TpuNode("z", "pool-b", 4),
                                       TpuNode("y", "", 4),
                                       TpuNode("b", "pool-a", 4),
                                       TpuNode("a", "pool-a", 4),
                                       TpuNode("v4", "pool-a", 4, kV4, "2x2x1"),
                                       TpuNode("x", "pool-a", 4, kV5e, "4x4")};
  const Capacity capacity = Build(nodes);
  ASSERT_EQ(capacity.pools.size(), 3u);
  const auto& pools = capacity.pools.at({kV5e, "2x4"});
  std::vector<std::string> names;
  for (const auto& [pool, list] : pools) {
    for (const NodeCapacity& n : list) {
      EXPECT_EQ(n.pool, pool);
      names.push_back(pool + ":" + n.name);
    }
  }
  EXPECT_THAT(names, ElementsAre(":y", "pool-a:a", "pool-a:b", "pool-b:z"));
}

TEST(QueueCapacityTest, ReservationTakesSlotsOfItsPoolInNodeNameOrder) {
  const std::vector<NodeInfo> nodes = {TpuNode("a-2", "pool-a", 8), TpuNode("a-1", "pool-a", 8),
                                       TpuNode("b-1", "pool-b", 8)};
  const Reservation r{.job = "ns/started",
                      .accelerator = kV5e,
                      .topology = "2x4",
                      .pool = "pool-a",
                      .workers = 3,
                      .chips_per_worker = 4};
  EXPECT_EQ(FreeByNode(Build(nodes, {}, {r})),
            (std::map<std::string, int64_t>{{"a-1", 0}, {"a-2", 4}, {"b-1", 8}}));
}

TEST(QueueCapacityTest, ReservationWithoutPoolTakesFromAnyPoolInNodeNameOrder) {
  const std::vector<NodeInfo> nodes = {TpuNode("n-3", "pool-a", 4), TpuNode("n-1", "pool-b", 4),
                                       TpuNode("n-2", "pool-c", 2), TpuNode("n-0", "", 4)};
  const Reservation r{.job = "ns/single",
                      .accelerator = kV5e,
                      .topology = "2x4",
                      .pool = "",
                      .workers = 2,
                      .chips_per_worker = 4};
  // n-0 and n-1 by name; n-2 is too small for a worker.
  EXPECT_EQ(FreeByNode(Build(nodes, {}, {r})),
            (std::map<std::string, int64_t>{{"n-0", 0}, {"n-1", 0}, {"n-2", 2}, {"n-3", 4}}));
}

TEST(QueueCapacityTest, ReservationThatNoLongerFitsTakesWhatThereIs) {
  const std::vector<NodeInfo> nodes = {TpuNode("a-1", "pool-a", 4), TpuNode("a-2", "pool-a", 6),
                                       TpuNode("b-1", "pool-b", 8)};
  const Reservation r{.job = "ns/started",
                      .accelerator = kV5e,
                      .topology = "2x4",
                      .pool = "pool-a",
                      .workers = 4,
                      .chips_per_worker = 4};
  // Two whole slots in pool-a; the 2 chips left on a-2 hold no worker; pool-b is untouched.
  EXPECT_EQ(FreeByNode(Build(nodes, {}, {r})),
            (std::map<std::string, int64_t>{{"a-1", 0}, {"a-2", 2}, {"b-1", 8}}));
}

TEST(QueueCapacityTest, ReservationsApplyInAFixedOrderAndOnlyToTheirClass) {
  const std::vector<NodeInfo> nodes = {TpuNode("a-1", "pool-a", 4), TpuNode("b-1", "pool-b", 4),
                                       TpuNode("v4-1", "pool-a", 4, kV4, "2x2x1")};
  // Both want a-1: ns/a (any pool, so the first node by name) goes first by its key and gets
  // it; ns/b, pinned to pool-a, then finds nothing there.
  const Reservation any{.job = "ns/a",
                        .accelerator = kV5e,
                        .topology = "2x4",
                        .pool = "",
                        .workers = 1,
                        .chips_per_worker = 4};
  const Reservation pinned{.job = "ns/b",
                           .accelerator = kV5e,
                           .topology = "2x4",
                           .pool = "pool-a",
                           .workers = 1,
                           .chips_per_worker = 4};
  const Reservation other{.job = "ns/c",
                          .accelerator = kV5e,
                          .topology = "4x4",
                          .pool = "pool-a",
                          .workers = 1,
                          .chips_per_worker = 4};
  const auto one = FreeByNode(Build(nodes, {}, {any, pinned, other}));
  const auto two = FreeByNode(Build(nodes, {}, {other, pinned, any}));
  EXPECT_EQ(one, two);
  EXPECT_EQ(one, (std::map<std::string, int64_t>{{"a-1", 0}, {"b-1", 4}, {"v4-1", 4}}));
}

TEST(QueueCapacityTest, ReservedChipsAreNotAdmittedAgain) {
  std::vector<NodeInfo> nodes;
  AddPool(nodes, "pool-a", 4, 4);
  const Reservation r{.job = "ns/started",
                      .accelerator = kV5e,
                      .topology = "2x4",
                      .pool = "pool-a",
                      .workers = 2,
                      .chips_per_worker = 4};
  const auto free_plan = PlanAdmissions(Build(nodes), {Gang("ns/next", 4)});
  EXPECT_TRUE(free_plan.at("ns/next").admit);
  const auto plan = PlanAdmissions(Build(nodes, {}, {r}), {Gang("ns/next", 4)});
  EXPECT_FALSE(plan.at("ns/next").admit);
  EXPECT_THAT(plan.at("ns/next").message, HasSubstr("the best pool, pool-a, has 2 free"));
}

// --- Admission --------------------------------------------------------------------------------

TEST(QueueAdmissionTest, MultiHostGangGoesToOnePoolNeverSplit) {
  std::vector<NodeInfo> nodes;
  AddPool(nodes, "pool-c", 3, 4);
  AddPool(nodes, "pool-b", 2, 4);
  AddPool(nodes, "pool-a", 3, 4);
  // 8 free hosts in all, but at most 3 in one pool; the message names the first of the two
  // fullest pools.
  const auto plan = PlanAdmissions(Build(nodes), {Gang("team/big", 4)});
  const Admission& a = plan.at("team/big");
  EXPECT_FALSE(a.admit);
  EXPECT_EQ(FirstPool(a), "");
  EXPECT_EQ(a.reason, "WaitingForCapacity");
  EXPECT_EQ(a.message,
            "needs 4 hosts of tpu-v5-lite-podslice 2x4 (4 chips each) in one node pool; the best "
            "pool, pool-a, has 3 free");
  EXPECT_EQ(a.position, 1);
}

TEST(QueueAdmissionTest, AdmittedMultiHostGangIsPinnedToItsPool) {
  std::vector<NodeInfo> nodes;
  AddPool(nodes, "pool-a", 2, 4);
  AddPool(nodes, "pool-b", 4, 4);
  const auto plan = PlanAdmissions(Build(nodes), {Gang("team/big", 4)});
  EXPECT_TRUE(plan.at("team/big").admit);
  EXPECT_EQ(FirstPool(plan.at("team/big")), "pool-b");
  EXPECT_EQ(plan.at("team/big").reason, "");
  EXPECT_EQ(plan.at("team/big").message, "");
}

TEST(QueueAdmissionTest, BestFitPicksThePoolLeftWithFewestSlotsTiesByName) {
  std::vector<NodeInfo> nodes;
  AddPool(nodes, "pool-a", 8, 4);
  AddPool(nodes, "pool-b", 5, 4);
  AddPool(nodes, "pool-c", 3, 4);
  AddPool(nodes, "pool-d", 5, 4);
  // 4 workers: a leaves 4, b and d leave 1, c does not fit: b by name.
  auto plan = PlanAdmissions(Build(nodes), {Gang("ns/four", 4)});
  EXPECT_EQ(FirstPool(plan.at("ns/four")), "pool-b");
  // Then 5 workers: b has 1 left, d 5, a 8: d.
  plan = PlanAdmissions(Build(nodes), {Gang("ns/four", 4), With(Gang("ns/five", 5), 0, 1)});
  EXPECT_EQ(FirstPool(plan.at("ns/four")), "pool-b");
  EXPECT_EQ(FirstPool(plan.at("ns/five")), "pool-d");
}

TEST(QueueAdmissionTest, EightChipNodeHoldsTwoFourChipWorkers) {
  const std::vector<NodeInfo> nodes = {TpuNode("n-1", "pool-a", 8), TpuNode("n-2", "pool-a", 8)};
  std::vector<PodInfo> pods = {PodOn("p", "n-2", 2)};
  // 2 slots on n-1, 1 on n-2 (6 free).
  auto plan = PlanAdmissions(Build(nodes, pods), {Gang("ns/three", 3)});
  EXPECT_TRUE(plan.at("ns/three").admit);
  plan = PlanAdmissions(Build(nodes, pods), {Gang("ns/four", 4)});
  EXPECT_FALSE(plan.at("ns/four").admit);
  EXPECT_THAT(plan.at("ns/four").message, HasSubstr("pool-a, has 3 free"));
  // Two-chip workers: 4 + 3 slots.
  plan = PlanAdmissions(Build(nodes, pods), {Gang("ns/seven", 7, 2)});
  EXPECT_TRUE(plan.at("ns/seven").admit);
}

TEST(QueueAdmissionTest, SingleHostJobTakesAnyPoolAndIsNotPinned) {
  std::vector<NodeInfo> nodes = {TpuNode("a-1", "pool-a", 4), TpuNode("b-1", "pool-b", 4),
                                 TpuNode("b-2", "pool-b", 4), TpuNode("u-1", "", 4)};
  const auto plan =
      PlanAdmissions(Build(nodes), {Gang("ns/s1", 1, 4, "2x4"), With(Gang("ns/s2", 1), 0, 1),
                                    With(Gang("ns/s3", 1), 0, 2), With(Gang("ns/s4", 1), 0, 3),
                                    With(Gang("ns/s5", 1), 0, 4)});
  for (const char* job : {"ns/s1", "ns/s2", "ns/s3", "ns/s4"}) {
    EXPECT_TRUE(plan.at(job).admit) << job;
    EXPECT_EQ(FirstPool(plan.at(job)), "") << job;
  }
  EXPECT_FALSE(plan.at("ns/s5").admit);
  EXPECT_EQ(plan.at("ns/s5").reason, "WaitingForCapacity");
  EXPECT_EQ(plan.at("ns/s5").message,
            "needs 1 host of tpu-v5-lite-podslice 2x4 with 4 free chips; none has (the most free "
            "on one node is 0)");
}

TEST(QueueAdmissionTest, SingleHostJobsFillTheTightestPoolFirst) {
  // Single-host jobs take the pool left with fewest slots (pool-small), which keeps pool-big
  // whole for the gang behind them.
  std::vector<NodeInfo> nodes;
  AddPool(nodes, "pool-big", 4, 4);
  AddPool(nodes, "pool-small", 2, 4);
  const auto plan = PlanAdmissions(Build(nodes), {Gang("ns/s1", 1), With(Gang("ns/s2", 1), 0, 1),
                                                  With(Gang("ns/gang", 4), 0, 2)});
  EXPECT_TRUE(plan.at("ns/s1").admit);
  EXPECT_TRUE(plan.at("ns/s2").admit);
  EXPECT_TRUE(plan.at("ns/gang").admit);
  EXPECT_EQ(FirstPool(plan.at("ns/gang")), "pool-big");
}

TEST(QueueAdmissionTest, UnlabelledNodesFormAPoolOfTheirOwn) {
  std::vector<NodeInfo> nodes = {TpuNode("u-1", "", 4), TpuNode("u-2", "", 4),
                                 TpuNode("a-1", "pool-a", 4)};
  auto plan = PlanAdmissions(Build(nodes), {Gang("ns/two", 2)});
  EXPECT_TRUE(plan.at("ns/two").admit);
  EXPECT_EQ(FirstPool(plan.at("ns/two")), "");
  plan = PlanAdmissions(Build(nodes), {Gang("ns/three", 3)});
  EXPECT_FALSE(plan.at("ns/three").admit);
  EXPECT_THAT(plan.at("ns/three").message,
              HasSubstr("the best pool, (nodes without a node pool label), has 2 free"));
}

TEST(QueueAdmissionTest, AdmittedGangsConsumeCapacityAsThePlanGoes) {
  std::vector<NodeInfo> nodes;
  AddPool(nodes, "pool-a", 6, 4);
  const auto plan =
      PlanAdmissions(Build(nodes), {Gang("ns/first", 4), With(Gang("ns/second", 4), 0, 1)});
  EXPECT_TRUE(plan.at("ns/first").admit);
  EXPECT_FALSE(plan.at("ns/second").admit);
  EXPECT_EQ(plan.at("ns/second").reason, "WaitingForCapacity");
  EXPECT_EQ(plan.at("ns/second").message,
            "needs 4 hosts of tpu-v5-lite-podslice 2x4 (4 chips each) in one node pool; the best "
            "pool, pool-a, has 2 free");
  EXPECT_EQ(plan.at("ns/second").position, 2);
}

TEST(QueueAdmissionTest, HeadOfLineBlocksLaterJobsOfItsClass) {
  std::vector<NodeInfo> nodes;
  AddPool(nodes, "pool-a", 3, 4);
  const auto plan = PlanAdmissions(
      Build(nodes), {With(Gang("team/big", 4), 5, 0), With(Gang("team/small", 1), 0, 1),
                     With(Gang("team/small-2", 2), 0, 2)});
  EXPECT_FALSE(plan.at("team/big").admit);
  EXPECT_EQ(plan.at("team/big").reason, "WaitingForCapacity");
  EXPECT_FALSE(plan.at("team/small").admit);
  EXPECT_EQ(plan.at("team/small").reason, "WaitingInLine");
  EXPECT_EQ(plan.at("team/small").message,
            "waiting behind team/big (position 1), which needs 4 hosts of tpu-v5-lite-podslice "
            "2x4 (4 chips each) in one node pool; the best pool, pool-a, has 3 free");
  EXPECT_EQ(plan.at("team/small").position, 2);
  EXPECT_EQ(plan.at("team/small-2").reason, "WaitingInLine");
  EXPECT_THAT(plan.at("team/small-2").message, HasSubstr("waiting behind team/big (position 1)"));
  EXPECT_EQ(plan.at("team/small-2").position, 3);
}

TEST(QueueAdmissionTest, HeadPositionIsItsPlaceInTheWholeQueue) {
  std::vector<NodeInfo> nodes;
  AddPool(nodes, "pool-a", 3, 4);
  AddPool(nodes, "v4", 1, 4, kV4, "2x2x1");
  const auto plan = PlanAdmissions(
      Build(nodes),
      {With(Gang("ns/v4-a", 1, 4, "2x2x1", kV4), 9, 0), With(Gang("ns/big", 4), 5, 0),
       With(Gang("ns/v4-b", 1, 4, "2x2x1", kV4), 0, 0), With(Gang("ns/small", 1), 0, 1)});
  EXPECT_TRUE(plan.at("ns/v4-a").admit);
  EXPECT_EQ(plan.at("ns/big").position, 2);
  EXPECT_EQ(plan.at("ns/v4-b").reason, "WaitingForCapacity");
  EXPECT_EQ(plan.at("ns/v4-b").position, 3);
  EXPECT_THAT(plan.at("ns/small").message, HasSubstr("waiting behind ns/big (position 2)"));
  EXPECT_EQ(plan.at("ns/small").position, 4);
}

TEST(QueueAdmissionTest, OtherClassesAreNotHeldUp) {
  std::vector<NodeInfo> nodes;
  AddPool(nodes, "pool-a", 2, 4);
  AddPool(nodes, "pool-16", 2, 4, kV5e, "4x4");
  AddPool(nodes, "pool-v4", 2, 4, kV4, "2x4");
  const auto plan = PlanAdmissions(
      Build(nodes), {With(Gang("ns/big", 4), 9, 0), With(Gang("ns/square", 2, 4, "4x4"), 0, 1),
                     With(Gang("ns/v4", 2, 4, "2x4", kV4), 0, 2), With(Gang("ns/small", 1), 0, 3)});
  EXPECT_FALSE(plan.at("ns/big").admit);
  EXPECT_EQ(plan.at("ns/small").reason, "WaitingInLine");
  EXPECT_TRUE(plan.at("ns/square").admit);
  EXPECT_EQ(FirstPool(plan.at("ns/square")), "pool-16");
  EXPECT_TRUE(plan.at("ns/v4").admit);
  EXPECT_EQ(FirstPool(plan.at("ns/v4")), "pool-v4");
}

TEST(QueueAdmissionTest, ClassWithoutNodesSaysSo) {
  std::vector<NodeInfo> nodes;
  AddPool(nodes, "pool-a", 2, 4);
  const auto plan = PlanAdmissions(
      Build(nodes), {Gang("ns/multi", 4, 4, "4x4"), With(Gang("ns/single", 1, 4, "2x2"), 0, 1),
                     With(Gang("ns/behind", 1, 4, "4x4"), 0, 2)});
  EXPECT_EQ(plan.at("ns/multi").reason, "WaitingForCapacity");
  EXPECT_EQ(plan.at("ns/multi").message,
            "needs 4 hosts of tpu-v5-lite-podslice 4x4 (4 chips each) in one node pool; no "
            "schedulable, healthy node has tpu-v5-lite-podslice 4x4");
  EXPECT_EQ(plan.at("ns/single").message,
            "needs 1 host of tpu-v5-lite-podslice 2x2 with 4 free chips; no schedulable, healthy "
            "node has tpu-v5-lite-podslice 2x2");
  EXPECT_EQ(plan.at("ns/behind").reason, "WaitingInLine");
  EXPECT_THAT(plan.at("ns/behind").message,
              HasSubstr("waiting behind ns/multi (position 1), which needs 4 hosts"));
}

TEST(QueueAdmissionTest, SingleHostMessageGivesTheMostFreeChipsOnOneNode) {
  const std::vector<NodeInfo> nodes = {TpuNode("a", "pool-a", 8), TpuNode("b", "pool-b", 8)};
  const std::vector<PodInfo> pods = {PodOn("p1", "a", 6), PodOn("p2", "b", 5)};
  const auto plan = PlanAdmissions(Build(nodes, pods), {Gang("ns/one", 1, 4)});
  EXPECT_EQ(plan.at("ns/one").message,
            "needs 1 host of tpu-v5-lite-podslice 2x4 with 4 free chips; none has (the most free "
            "on one node is 3)");
}

TEST(QueueAdmissionTest, MixedWorkerSizesInOneClassShareTheChips) {
  // A 4-chip worker on an 8-chip node leaves room for exactly two 2-chip workers there.
  const std::vector<NodeInfo> nodes = {TpuNode("a-1", "pool-a", 8)};
  const auto plan =
      PlanAdmissions(Build(nodes), {Gang("ns/four", 1, 4), With(Gang("ns/twos", 2, 2), 0, 1),
                                    With(Gang("ns/one-more", 1, 2), 0, 2)});
  EXPECT_TRUE(plan.at("ns/four").admit);
  EXPECT_TRUE(plan.at("ns/twos").admit);
  EXPECT_EQ(FirstPool(plan.at("ns/twos")), "pool-a");
  EXPECT_FALSE(plan.at("ns/one-more").admit);
}

TEST(QueueAdmissionTest, SlotsOfEveryWorkerSizeFollowEachPlacement) {
  // ns/eight fills x-1; ns/four takes half of x-2, which then holds no 8-chip worker; only x-3
  // does, so the 2-host 8-chip gang behind them does not fit.
  const std::vector<NodeInfo> nodes = {TpuNode("x-1", "pool-x", 8), TpuNode("x-2", "pool-x", 8),
                                       TpuNode("x-3", "pool-x", 8)};
  const auto plan = PlanAdmissions(
      Build(nodes), {Gang("ns/eight", 1, 8), With(Gang("ns/four", 1, 4), 0, 1),
                     With(Gang("ns/pair", 2, 8), 0, 2), With(Gang("ns/fours", 3, 4), 0, 3)});
  EXPECT_TRUE(plan.at("ns/eight").admit);
  EXPECT_TRUE(plan.at("ns/four").admit);
  EXPECT_FALSE(plan.at("ns/pair").admit);
  EXPECT_EQ(plan.at("ns/pair").message,
            "needs 2 hosts of tpu-v5-lite-podslice 2x4 (8 chips each) in one node pool; the best "
            "pool, pool-x, has 1 free");
  EXPECT_EQ(plan.at("ns/fours").reason, "WaitingInLine");
}

TEST(QueueAdmissionTest, EmptyQueueAndEmptyCluster) {
  EXPECT_TRUE(PlanAdmissions(Capacity{}, {}).empty());
  const auto plan = PlanAdmissions(Capacity{}, {Gang("ns/a", 2)});
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_FALSE(plan.at("ns/a").admit);
  EXPECT_EQ(plan.at("ns/a").position, 1);
}

// --- Properties over random clusters ----------------------------------------------------------

struct RandomCase {
  std::vector<NodeInfo> nodes;
  std::vector<PodInfo> pods;
  std::vector<GangRequest> queued;
  std::map<Capacity::Class, int64_t> chips;  // each class's worker size
};

RandomCase MakeRandomCase(std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  RandomCase c;
  const std::vector<Capacity::Class> classes = {
      {kV5e, "2x4"}, {kV5e, "4x4"}, {kV4, "2x2x2"}, {kV4, "2x2x1"}};
  for (const auto& cls : classes) c.chips[cls] = std::vector<int64_t>{1, 2, 4, 4, 8}[pick(0, 4)];
  int node_id = 0;
  const int class_count = pick(1, 3);  // the last class never has nodes
  for (int k = 0; k < class_count; ++k) {
    const auto& [accelerator, topology] = classes[k];
    const int pools = pick(0, 4);
    for (int p = 0; p <= pools; ++p) {
      // p == pools: nodes without a pool label, sometimes.
      if (p == pools && pick(0, 2) != 0) break;
      const std::string pool = p == pools ? "" : "pool-" + std::to_string(pick(0, 9));
      const int64_t node_chips = pick(0, 1) ? 8 : 4;
      const int count = pick(1, 6);
      for (int n = 0; n < count; ++n) {
        NodeInfo node =
            TpuNode("node-" + std::to_string(node_id++), pool, node_chips, accelerator, topology);
        switch (pick(0, 11)) {
          case 0:
            node.unschedulable = true;
            break;
          case 1:
            node.ready = cache::ConditionStatus::kFalse;
            node.conditions[0].status = cache::ConditionStatus::kFalse;
            break;
          case 2:
            node.labels.Erase(kTopologyLabel);
            break;
          default:
            break;
        }
        const int pods = pick(0, 3);
        for (int i = 0; i < pods; ++i) {
          const auto phase =
              pick(0, 4) == 0 ? cache::PodPhase::kSucceeded : cache::PodPhase::kRunning;
          c.pods.push_back(
              PodOn("pod-" + std::to_string(c.pods.size()), node.name, pick(1, 4), phase));
          if (pick(0, 5) == 0) c.pods.back().deletion_timestamp = At(0);
        }
        c.nodes.push_back(std::move(node));
      }
    }
  }
  const int jobs = pick(0, 30);
  for (int j = 0; j < jobs; ++j) {
    const auto& cls = classes[pick(0, static_cast<int>(classes.size()) - 1)];
    GangRequest g = Gang("ns/job-" + std::to_string(j), pick(0, 3) == 0 ? 1 : pick(2, 6),
                         c.chips[cls], cls.second, cls.first);
    g.priority = pick(-1, 2);
    g.queued_at = At(pick(0, 5));
    g.reissued = pick(0, 5) == 0;
    c.queued.push_back(std::move(g));
  }
  return c;
}

// Free worker slots of `chips` chips per pool of one class.
std::map<std::string, int64_t> SlotsByPool(const Capacity& capacity, const Capacity::Class& cls,
                                           int64_t chips) {
  std::map<std::string, int64_t> out;
  auto it = capacity.pools.find(cls);
  if (it == capacity.pools.end()) return out;
  for (const auto& [pool, nodes] : it->second) {
    for (const NodeCapacity& n : nodes) out[pool] += n.free_chips / chips;
  }
  return out;
}

class QueuePropertyTest : public ::testing::Test {
 protected:
  static constexpr int kCases = 500;
  std::mt19937 rng_{20240611};
};

TEST_F(QueuePropertyTest, CapacityMatchesAPlainRecount) {
  for (int i = 0; i < kCases; ++i) {
    const RandomCase c = MakeRandomCase(rng_);
    std::map<std::string, int64_t> expected;
    for (const NodeInfo& n : c.nodes) {
      if (n.unschedulable || n.ready != cache::ConditionStatus::kTrue ||
          !n.labels.Has(kTopologyLabel)) {
        continue;
      }
      int64_t used = 0;
      for (const PodInfo& p : c.pods) {
        if (p.node_name == n.name && !p.terminated()) used += p.containers[0].tpu_request;
      }
      expected[n.name] = std::max<int64_t>(n.tpu_allocatable - used, 0);
    }
    ASSERT_EQ(FreeByNode(Build(c.nodes, c.pods)), expected) << "case " << i;
  }
}

TEST_F(QueuePropertyTest, AdmittedGangsFitTogetherAndMultiHostOnesInOnePool) {
  int admitted_multi = 0, admitted_single = 0, refused_heads = 0;
  for (int i = 0; i < kCases; ++i) {
    const RandomCase c = MakeRandomCase(rng_);
    const Capacity capacity = Build(c.nodes, c.pods);
    const auto plan = PlanAdmissions(capacity, c.queued);
    ASSERT_EQ(plan.size(), c.queued.size());

    std::vector<GangRequest> ordered = c.queued;
    std::sort(ordered.begin(), ordered.end(), [&](const GangRequest& a, const GangRequest& b) {
      return plan.at(a.job).position < plan.at(b.job).position;
    });
    // Per class: multi-host workers pinned to each pool, and single-host workers, so far.
    std::map<Capacity::Class, std::map<std::string, int64_t>> multi;
    std::map<Capacity::Class, int64_t> single;
    for (const GangRequest& job : ordered) {
      const Capacity::Class cls{job.accelerator, job.topology};
      const auto slots = SlotsByPool(capacity, cls, c.chips.at(cls));
      const Admission& a = plan.at(job.job);
      if (a.admit && job.workers > 1) {
        ++admitted_multi;
        // (b) its pool exists and, after the gangs pinned there before it, holds all of it.
        ASSERT_TRUE(slots.contains(FirstPool(a)))
            << "case " << i << " " << job.job << " " << Show(a);
        multi[cls][FirstPool(a)] += job.workers;
        ASSERT_LE(multi[cls][FirstPool(a)], slots.at(FirstPool(a)))
            << "case " << i << " " << job.job;
      } else if (a.admit) {
        ++admitted_single;
        ASSERT_EQ(FirstPool(a), "") << "case " << i;
        single[cls] += 1;
      }
      // (a) Everything admitted so far fits at once: the pinned gangs in their pools, the
      // single hosts in what the pools have left (one worker size per class, so any placement
      // of a worker takes exactly one slot).
      int64_t left = 0;
      for (const auto& [pool, n] : slots) left += n - multi[cls][pool];
      ASSERT_LE(single[cls], left) << "case " << i << " " << job.job;

      if (!a.admit && a.reason == "WaitingForCapacity") {
        ++refused_heads;
        // The head really does not fit, whichever pools the single hosts took.
        if (job.workers == 1) {
          EXPECT_EQ(single[cls], left) << "case " << i << " " << job.job << " " << Show(a);
        } else {
          for (const auto& [pool, n] : slots) {
            EXPECT_LT(n - multi[cls][pool], job.workers + single[cls])
                << "case " << i << " " << job.job << " pool " << pool << " " << Show(a);
          }
        }
      }
    }
  }
  // The random cases exercise every branch.
  EXPECT_GT(admitted_multi, 100);
  EXPECT_GT(admitted_single, 100);
  EXPECT_GT(refused_heads, 100);
}

TEST_F(QueuePropertyTest, HeadOfLineAndPositionsFollowTheOrder) {
  for (int i = 0; i < kCases; ++i) {
    const RandomCase c = MakeRandomCase(rng_);
    const auto plan = PlanAdmissions(Build(c.nodes, c.pods), c.queued);
    ASSERT_EQ(plan.size(), c.queued.size());

    // Positions: a permutation of 1..n, in QueueBefore order.
    std::vector<const GangRequest*> by_position(c.queued.size(), nullptr);
    for (const GangRequest& job : c.queued) {
      const int32_t p = plan.at(job.job).position;
      ASSERT_GE(p, 1);
      ASSERT_LE(p, static_cast<int32_t>(c.queued.size()));
      ASSERT_EQ(by_position[p - 1], nullptr) << "case " << i << ": position " << p << " twice";
      by_position[p - 1] = &job;
    }
    for (size_t k = 1; k < by_position.size(); ++k) {
      ASSERT_TRUE(QueueBefore(*by_position[k - 1], *by_position[k])) << "case " << i;
    }

    // Within a class: admitted jobs are a prefix; the first one not admitted waits for
    // capacity, and every later one waits in line behind it.
    std::map<Capacity::Class, const GangRequest*> head;
    for (const GangRequest* job : by_position) {
      const Capacity::Class cls{job->accelerator, job->topology};
      const Admission& a = plan.at(job->job);
      auto it = head.find(cls);
      if (it == head.end()) {
        if (!a.admit) {
          EXPECT_EQ(a.reason, "WaitingForCapacity") << "case " << i;
          EXPECT_THAT(a.message, HasSubstr("needs " + std::to_string(job->workers) + " host"));
          head[cls] = job;
        } else {
          EXPECT_EQ(a.reason, "");
          EXPECT_EQ(a.message, "");
        }
        continue;
      }
      EXPECT_FALSE(a.admit) << "case " << i << ": " << job->job << " admitted behind "
                            << it->second->job;
      EXPECT_EQ(a.reason, "WaitingInLine");
      EXPECT_EQ(a.message, "waiting behind " + it->second->job + " (position " +
                               std::to_string(plan.at(it->second->job).position) + "), which " +
                               plan.at(it->second->job).message);
    }
  }
}

TEST_F(QueuePropertyTest, SameInputInAnyOrderSamePlan) {
  for (int i = 0; i < kCases; ++i) {
    RandomCase c = MakeRandomCase(rng_);
    // Some reservations, so that their order is shuffled too.
    std::vector<Reservation> reservations;
    for (const GangRequest& g : c.queued) {
      if (reservations.size() < 3 && g.reissued) {
        reservations.push_back({.job = g.job + "-started",
                                .accelerator = g.accelerator,
                                .topology = g.topology,
                                .pool = "",
                                .workers = g.workers,
                                .chips_per_worker = g.chips_per_worker});
      }
    }
    const Capacity capacity = Build(c.nodes, c.pods, reservations);
    const auto plan = ShowAll(PlanAdmissions(capacity, c.queued));
    std::shuffle(c.nodes.begin(), c.nodes.end(), rng_);
    std::shuffle(c.pods.begin(), c.pods.end(), rng_);
    std::shuffle(c.queued.begin(), c.queued.end(), rng_);
    std::shuffle(reservations.begin(), reservations.end(), rng_);
    const Capacity again = Build(c.nodes, c.pods, reservations);
    ASSERT_EQ(FreeByNode(again), FreeByNode(capacity)) << "case " << i;
    ASSERT_EQ(ShowAll(PlanAdmissions(again, c.queued)), plan) << "case " << i;
  }
}

// --- Multislice ---------------------------------------------------------------------------------

GangRequest Slices(GangRequest g, int32_t slices) {
  g.slices = slices;
  return g;
}

// One row of the multislice admission table: the pools (nodes of 4 chips each, by pool), the
// queued jobs and what each one gets.
struct MultisliceCase {
  std::string name;
  std::map<std::string, int> pools;  // pool -> nodes of 4 chips
  std::vector<GangRequest> queued;
  // job -> "admit pool-a,pool-b" or "wait <reason>: <message>"
  std::map<std::string, std::string> want;
};

std::string Outcome(const Admission& a) {
  if (!a.admit) return "wait " + a.reason + ": " + a.message;
  std::string pools;
  for (const std::string& p : a.pools) pools += (pools.empty() ? "" : ",") + p;
  return "admit " + pools;
}

class MultisliceAdmissionTest : public ::testing::TestWithParam<MultisliceCase> {};

TEST_P(MultisliceAdmissionTest, AdmitsOnlyWhenEverySliceHasAPoolOfItsOwn) {
  const MultisliceCase& c = GetParam();
  std::vector<NodeInfo> nodes;
  for (const auto& [pool, count] : c.pools) AddPool(nodes, pool, count, 4);
  const auto plan = PlanAdmissions(Build(nodes), c.queued);
  std::map<std::string, std::string> got;
  for (const auto& [job, a] : plan) got[job] = Outcome(a);
  EXPECT_EQ(got, c.want);
}

const std::string kNeeds3x4 =
    "needs 3 node pools with 4 hosts each of tpu-v5-lite-podslice 2x4 (4 chips each), one per "
    "slice";

INSTANTIATE_TEST_SUITE_P(
    Table, MultisliceAdmissionTest,
    ::testing::Values(
        MultisliceCase{"Fits",
                       {{"pool-a", 4}, {"pool-b", 4}, {"pool-c", 4}, {"pool-d", 4}},
                       {Slices(Gang("ns/ms", 4), 3)},
                       {{"ns/ms", "admit pool-a,pool-b,pool-c"}}},
        MultisliceCase{"DoesNotFitTwoPoolsFree",
                       {{"pool-a", 4}, {"pool-b", 4}, {"pool-c", 3}},
                       {Slices(Gang("ns/ms", 4), 3)},
                       {{"ns/ms", "wait WaitingForCapacity: " + kNeeds3x4 +
                                      "; 2 pools have room (pool-a, pool-b)"}}},
        MultisliceCase{
            "NoPoolAtAll",
            {},
            {Slices(Gang("ns/ms", 4), 3)},
            {{"ns/ms", "wait WaitingForCapacity: " + kNeeds3x4 + "; 0 pools have room"}}},
        // 12 free hosts in all, but no slice may span two pools: fragmentation keeps it out.
        MultisliceCase{
            "FragmentedCapacityIsNotEnough",
            {{"pool-a", 6}, {"pool-b", 3}, {"pool-c", 3}},
            {Slices(Gang("ns/ms", 4), 3)},
            {{"ns/ms", "wait WaitingForCapacity: " + kNeeds3x4 + "; 1 pool has room (pool-a)"}}},
        // Two slices never share a pool, even one with room for both.
        MultisliceCase{"TwoSlicesNeverShareAPool",
                       {{"pool-big", 8}},
                       {Slices(Gang("ns/ms", 4), 2)},
                       {{"ns/ms",
                         "wait WaitingForCapacity: needs 2 node pools with 4 hosts each of "
                         "tpu-v5-lite-podslice 2x4 (4 chips each), one per slice; 1 pool has "
                         "room (pool-big)"}}},
        // Best fit per slice: the pools left with the fewest free hosts, then the name; the
        // slices get them in name order.
        MultisliceCase{"BestFitThenNameSlicesInNameOrder",
                       {{"pool-a", 8}, {"pool-b", 5}, {"pool-c", 4}, {"pool-d", 4}},
                       {Slices(Gang("ns/ms", 4), 3)},
                       {{"ns/ms", "admit pool-b,pool-c,pool-d"}}},
        // Single-host slices are pinned too, each to a pool of its own.
        MultisliceCase{"SingleHostSlicesArePinned",
                       {{"pool-a", 1}, {"pool-b", 1}},
                       {Slices(Gang("ns/ms", 1), 2)},
                       {{"ns/ms", "admit pool-a,pool-b"}}},
        // Priority order with mixed slice counts: the 2-slice job of priority 10 goes first and
        // takes two pools; the 3-slice job (priority 5) then finds two left and waits; the
        // single-slice job behind it waits in line although a pool would fit it.
        MultisliceCase{
            "PriorityOrderWithMixedSliceCounts",
            {{"pool-a", 4}, {"pool-b", 4}, {"pool-c", 4}, {"pool-d", 4}},
            {With(Slices(Gang("ns/three", 4), 3), 5, 0), With(Slices(Gang("ns/two", 4), 2), 10, 1),
             With(Gang("ns/one", 4), 1, 2)},
            {{"ns/two", "admit pool-a,pool-b"},
             {"ns/three",
              "wait WaitingForCapacity: " + kNeeds3x4 + "; 2 pools have room (pool-c, pool-d)"},
             {"ns/one", "wait WaitingInLine: waiting behind ns/three (position 2), which " +
                            kNeeds3x4 + "; 2 pools have room (pool-c, pool-d)"}}},
        // A re-issued multislice attempt goes first, before higher priority.
        MultisliceCase{"ReissuedFirst",
                       {{"pool-a", 4}, {"pool-b", 4}, {"pool-c", 4}},
                       {With(Gang("ns/high", 4), 100, 0),
                        With(Slices(Gang("ns/ms", 4), 3), 0, 5, /*reissued=*/true)},
                       {{"ns/ms", "admit pool-a,pool-b,pool-c"},
                        {"ns/high",
                         "wait WaitingForCapacity: needs 4 hosts of tpu-v5-lite-podslice 2x4 "
                         "(4 chips each) in one node pool; the best pool, pool-a, has 0 free"}}}),
    [](const auto& info) { return info.param.name; });

TEST(MultisliceAdmissionTest, NodesWithoutAPoolLabelHoldNoSlice) {
  std::vector<NodeInfo> nodes;
  AddPool(nodes, "pool-a", 4, 4);
  for (int i = 0; i < 4; ++i) nodes.push_back(TpuNode("bare-" + std::to_string(i), "", 4));
  const auto plan = PlanAdmissions(Build(nodes), {Slices(Gang("ns/ms", 4), 2)});
  EXPECT_FALSE(plan.at("ns/ms").admit);
  EXPECT_THAT(plan.at("ns/ms").message, HasSubstr("1 pool has room (pool-a)"));
  // The same nodes serve a single-slice gang.
  EXPECT_TRUE(PlanAdmissions(Build(nodes), {Gang("ns/one", 4)}).at("ns/one").admit);
}

TEST(MultisliceAdmissionTest, ReservationsHoldEachSliceInItsOwnPool) {
  std::vector<NodeInfo> nodes;
  AddPool(nodes, "pool-a", 4, 4);
  AddPool(nodes, "pool-b", 4, 4);
  AddPool(nodes, "pool-c", 4, 4);
  // An admitted 2-slice job whose pods are not bound yet: slice 0 in pool-a, slice 1 in pool-c.
  const std::vector<Reservation> held = {{.job = "ns/ms",
                                          .accelerator = kV5e,
                                          .topology = "2x4",
                                          .pool = "pool-a",
                                          .workers = 4,
                                          .chips_per_worker = 4,
                                          .slice = 0},
                                         {.job = "ns/ms",
                                          .accelerator = kV5e,
                                          .topology = "2x4",
                                          .pool = "pool-c",
                                          .workers = 3,
                                          .chips_per_worker = 4,
                                          .slice = 1}};
  const Capacity capacity = Build(nodes, {}, held);
  const auto free = FreeByNode(capacity);
  EXPECT_EQ(free.at("pool-a-3"), 0);
  EXPECT_EQ(free.at("pool-b-0"), 4);
  EXPECT_EQ(free.at("pool-c-2"), 0);
  EXPECT_EQ(free.at("pool-c-3"), 4);  // slice 1 has a worker bound already
  const auto plan = PlanAdmissions(capacity, {Slices(Gang("ns/next", 4), 2)});
  EXPECT_FALSE(plan.at("ns/next").admit);
  EXPECT_THAT(plan.at("ns/next").message, HasSubstr("1 pool has room (pool-b)"));
}

// Slice recovery: a request for the replaced slice only, never in a pool the job's other slices
// keep, first in line as any re-issued attempt.
GangRequest Replacing(GangRequest g, std::vector<int32_t> slices, std::vector<std::string> held) {
  g.slices = static_cast<int32_t>(slices.size());
  g.slice_ids = std::move(slices);
  g.held_pools = std::move(held);
  g.reissued = true;
  return g;
}

// The reservations JobQueue makes for a job's kept slices: 2 workers of 4 chips in each pool.
std::vector<Reservation> Held(const std::string& job,
                              const std::vector<std::pair<std::string, int32_t>>& pools) {
  std::vector<Reservation> held;
  for (const auto& [pool, slice] : pools) {
    held.push_back({.job = job,
                    .accelerator = kV5e,
                    .topology = "2x4",
                    .pool = pool,
                    .workers = 2,
                    .chips_per_worker = 4,
                    .slice = slice});
  }
  return held;
}

TEST(MultisliceAdmissionTest, AReplacedSliceGetsAPoolItsOtherSlicesDoNotHold) {
  std::vector<NodeInfo> nodes;
  AddPool(nodes, "pool-a", 2, 4);  // held by slice 0, whose pods are gone: free again
  AddPool(nodes, "pool-b", 2, 4);  // held by slice 2
  AddPool(nodes, "pool-c", 4, 4);
  AddPool(nodes, "pool-d", 2, 4);
  const GangRequest r = Replacing(Gang("ns/ms", 2), {1}, {"pool-a", "pool-b"});
  // The queue reserves the held pools for the job (JobQueue: a Reservation per kept slice).
  const std::vector<Reservation> held = Held("ns/ms", {{"pool-a", 0}, {"pool-b", 2}});
  // Best fit among the pools not held: pool-d (no host left over), pinned by name; the job of
  // higher priority behind it gets what is left.
  auto plan = PlanAdmissions(Build(nodes, {}, held), {With(Gang("ns/high", 2), 100, 0), r});
  EXPECT_EQ(Outcome(plan.at("ns/ms")), "admit pool-d");
  EXPECT_EQ(Outcome(plan.at("ns/high")), "admit pool-c");  // behind it, although higher
  // With no pool but held ones, it waits and says for which slice and what it keeps.
  std::vector<NodeInfo> held_only;
  AddPool(held_only, "pool-a", 2, 4);
  AddPool(held_only, "pool-b", 2, 4);
  plan = PlanAdmissions(Build(held_only), {r});
  EXPECT_EQ(Outcome(plan.at("ns/ms")),
            "wait WaitingForCapacity: needs a node pool with 2 hosts of tpu-v5-lite-podslice 2x4 "
            "(4 chips each) to replace slice 1 (its other slices keep pool-a, pool-b); 0 pools "
            "have room");
  // A single-host slice is pinned to a pool as well (never "": any pool).
  std::vector<NodeInfo> small;
  AddPool(small, "pool-a", 1, 4);
  AddPool(small, "pool-e", 1, 4);
  plan = PlanAdmissions(Build(small), {Replacing(Gang("ns/ms", 1), {3}, {"pool-a"})});
  EXPECT_EQ(Outcome(plan.at("ns/ms")), "admit pool-e");
}

// Elastic slices: a running job that shrank asks for its missing slices first, as a re-issue;
// when they are not free it holds up no one behind it.
TEST(MultisliceAdmissionTest, AGrowTakesAFreePoolFirstAndHoldsUpNoOneWhenNoneIsFree) {
  GangRequest grow = Replacing(Gang("ns/el", 2), {2}, {"pool-a", "pool-b"});
  grow.grow = true;
  std::vector<NodeInfo> nodes;
  AddPool(nodes, "pool-a", 2, 4);
  AddPool(nodes, "pool-b", 2, 4);
  AddPool(nodes, "pool-c", 2, 4);
  const std::vector<Reservation> held = Held("ns/el", {{"pool-a", 0}, {"pool-b", 1}});
  auto plan = PlanAdmissions(Build(nodes, {}, held), {With(Gang("ns/high", 2), 100, 0), grow});
  EXPECT_EQ(Outcome(plan.at("ns/el")), "admit pool-c");
  EXPECT_TRUE(Outcome(plan.at("ns/high")).starts_with("wait WaitingForCapacity"))
      << Outcome(plan.at("ns/high"));
  // No pool free for it: the jobs behind it are planned as if it were not there.
  AddPool(nodes, "pool-d", 1, 4);  // one host: too small for a slice, enough for a small job
  std::vector<NodeInfo> without_c;
  for (const NodeInfo& n : nodes) {
    if (!n.name.starts_with("pool-c")) without_c.push_back(n);
  }
  plan = PlanAdmissions(Build(without_c, {}, held), {grow, With(Gang("ns/small", 1), 0, 5)});
  EXPECT_EQ(Outcome(plan.at("ns/el")),
            "wait WaitingForCapacity: needs a node pool with 2 hosts of tpu-v5-lite-podslice 2x4 "
            "(4 chips each) to add slice 2 (its other slices keep pool-a, pool-b); 0 pools have "
            "room");
  EXPECT_EQ(Outcome(plan.at("ns/small")), "admit ");  // a single host: not pinned
  // Two slices missing, one pool free: it takes that one.
  GangRequest two = Replacing(Gang("ns/el", 2), {2, 3}, {"pool-a", "pool-b"});
  two.grow = true;
  plan = PlanAdmissions(Build(nodes, {}, held), {two});
  EXPECT_EQ(Outcome(plan.at("ns/el")), "admit pool-c");
  // The same request without `grow` (a replaced slice) holds the line.
  grow.grow = false;
  plan = PlanAdmissions(Build(without_c, {}, held), {grow, With(Gang("ns/small", 1), 0, 5)});
  EXPECT_TRUE(Outcome(plan.at("ns/small")).starts_with("wait WaitingInLine"))
      << Outcome(plan.at("ns/small"));
}

TEST(MultisliceAdmissionTest, DescribeNeedsNamesSlicesAndHosts) {
  EXPECT_EQ(DescribeNeeds(Slices(Gang("ns/ms", 1), 4)),
            "needs 4 node pools with 1 host each of tpu-v5-lite-podslice 2x4 (4 chips each), one "
            "per slice");
  EXPECT_EQ(DescribeNeeds(Gang("ns/one", 4)),
            "needs 4 hosts of tpu-v5-lite-podslice 2x4 (4 chips each) in one node pool");
}

TEST(QueueAdmissionTest, ReissuedAttemptTakesPoolsWithoutAFaultyNodeFirst) {
  // pool-a: 5 nodes, one cordoned (4 free hosts: the tightest fit for 4 workers); pool-b: 6
  // healthy nodes.
  std::vector<NodeInfo> nodes;
  AddPool(nodes, "pool-a", 5, 4);
  nodes.back().unschedulable = true;
  AddPool(nodes, "pool-b", 6, 4);
  const Capacity capacity = Build(nodes);
  EXPECT_EQ(capacity.faulty_pools.at({kV5e, "2x4"}), (std::set<std::string>{"pool-a"}));
  // A new job keeps best fit; a re-issued one goes to the clean pool.
  EXPECT_EQ(FirstPool(PlanAdmissions(capacity, {Gang("ns/new", 4)}).at("ns/new")), "pool-a");
  EXPECT_EQ(
      FirstPool(PlanAdmissions(capacity, {With(Gang("ns/again", 4), 0, 0, true)}).at("ns/again")),
      "pool-b");
  // When only the faulty pool fits, a re-issued job still takes it.
  std::vector<NodeInfo> small;
  AddPool(small, "pool-a", 5, 4);
  small.back().unschedulable = true;
  EXPECT_TRUE(
      PlanAdmissions(Build(small), {With(Gang("ns/again", 4), 0, 0, true)}).at("ns/again").admit);
}

TEST(MultisliceAdmissionTest, ReissuedAttemptPrefersPoolsWithoutAnUnhealthyNode) {
  // Five pools of 5 nodes; pool-b has a NotReady node and still holds a 4-host slice (the
  // tightest fit). A re-issued 3-slice job leaves it out; a new one does not.
  std::vector<NodeInfo> nodes;
  for (const char* pool : {"pool-a", "pool-b", "pool-c", "pool-d", "pool-e"}) {
    AddPool(nodes, pool, 5, 4);
  }
  nodes[9].ready = cache::ConditionStatus::kFalse;  // pool-b-4
  nodes[9].conditions.front().status = cache::ConditionStatus::kFalse;
  const Capacity capacity = Build(nodes);
  const auto again =
      PlanAdmissions(capacity, {With(Slices(Gang("ns/ms", 4), 3), 0, 0, /*reissued=*/true)});
  EXPECT_EQ(again.at("ns/ms").pools, (std::vector<std::string>{"pool-a", "pool-c", "pool-d"}));
  const auto fresh = PlanAdmissions(capacity, {Slices(Gang("ns/ms", 4), 3)});
  EXPECT_EQ(fresh.at("ns/ms").pools, (std::vector<std::string>{"pool-a", "pool-b", "pool-c"}));
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::policy
