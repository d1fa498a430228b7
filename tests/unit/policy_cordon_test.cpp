#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <ostream>
#include <set>
#include <string>

#include "cache/intern.h"
#include "cache/objects.h"
#include "cordon_verdict_printer.h"
#include "policy/cordon.h"

namespace tpujob::policy {
namespace TPUJOB_TEST_NS {

using cache::InternedString;
using cache::NodeInfo;
using cache::Taint;
using cache::TaintEffect;
using std::chrono::minutes;
using std::chrono::seconds;

constexpr int kManyNodes = 1000;

NodeInfo Node(const std::string& name) {
  NodeInfo node;
  node.name = name;
  node.uid = "uid-" + name;
  node.resource_version = "7";
  node.ready = cache::ConditionStatus::kTrue;
  return node;
}

Taint MakeTaint(std::string_view key, std::string_view value, TaintEffect effect) {
  return Taint{InternedString::Intern(key), InternedString::Intern(value), effect};
}

// A node the operator cordoned with `evidence`, as the cache shows it after the patch.
NodeInfo CordonedNode(const std::string& name, const std::string& evidence) {
  NodeInfo node = Node(name);
  node.unschedulable = true;
  node.taints.push_back(MakeTaint(kFaultyTaint, "PreflightFailed", TaintEffect::kNoSchedule));
  node.annotations.Set(kCordonedByAnnotation, kCordonedByOperator);
  node.annotations.Set(kCordonEvidenceAnnotation, evidence);
  return node;
}

CordonRequest Request(const std::string& node, const std::string& item = "",
                      const std::string& evidence = "pod-uid-1/dns") {
  return CordonRequest{.node = node,
                       .job = "team/llm",
                       .reason = "PreflightFailed",
                       .message = "pre-flight check dns failed",
                       .item = item,
                       .evidence = evidence};
}

// No cap, rate or breaker in the way unless a test sets one.
CordonPolicy Permissive() {
  CordonPolicy policy;
  policy.max_cordoned = kManyNodes;
  policy.max_fraction = 1.0;
  policy.rate_per_minute = 0;
  policy.breaker_nodes = 0;
  return policy;
}

class CordonSafetyTest : public ::testing::Test {
 protected:
  // Decides for a healthy node named request.node in a big cluster with nothing cordoned.
  CordonVerdict DecideFresh(CordonSafety& safety, const CordonRequest& request) {
    const NodeInfo node = Node(request.node);
    return safety.Decide(request, &node, 0, kManyNodes, now_);
  }

  TimePoint now_ = TimePoint{} + std::chrono::hours(1);
};

TEST(CordonVerdictTest, EveryVerdictHasItsOwnName) {
  const std::set<std::string_view> names = {
      ToString(CordonVerdict::kCordon),      ToString(CordonVerdict::kAlreadyCordoned),
      ToString(CordonVerdict::kDisabled),    ToString(CordonVerdict::kDryRun),
      ToString(CordonVerdict::kCapReached),  ToString(CordonVerdict::kRateLimited),
      ToString(CordonVerdict::kSystemic),    ToString(CordonVerdict::kHumanUncordoned),
      ToString(CordonVerdict::kNodeMissing),
  };
  EXPECT_EQ(names.size(), 9u);
  EXPECT_EQ(ToString(CordonVerdict::kCapReached), "CapReached");
  EXPECT_EQ(ToString(CordonVerdict::kHumanUncordoned), "HumanUncordoned");
}

TEST_F(CordonSafetyTest, CordonsAHealthyNodeWithDefaultPolicy) {
  CordonSafety safety(CordonPolicy{});
  EXPECT_EQ(DecideFresh(safety, Request("n1", "dns")), CordonVerdict::kCordon);
}

TEST_F(CordonSafetyTest, DisabledWinsOverEveryOtherRule) {
  CordonPolicy policy;
  policy.enabled = false;
  policy.dry_run = true;
  CordonSafety safety(policy);
  EXPECT_EQ(safety.Decide(Request("n1"), nullptr, 0, 10, now_), CordonVerdict::kDisabled);
  const NodeInfo cordoned = CordonedNode("n2", "e");
  EXPECT_EQ(safety.Decide(Request("n2"), &cordoned, 0, 10, now_), CordonVerdict::kDisabled);
  EXPECT_EQ(DecideFresh(safety, Request("n3")), CordonVerdict::kDisabled);
}

TEST_F(CordonSafetyTest, NodeMissingFromTheCache) {
  CordonSafety safety(Permissive());
  EXPECT_EQ(safety.Decide(Request("gone"), nullptr, 0, 10, now_), CordonVerdict::kNodeMissing);
}

TEST_F(CordonSafetyTest, AlreadyCordonedNeedsUnschedulableAndOurTaint) {
  CordonSafety safety(Permissive());
  const NodeInfo cordoned = CordonedNode("n1", "pod-uid-0/dns");
  EXPECT_EQ(safety.Decide(Request("n1"), &cordoned, 1, 10, now_), CordonVerdict::kAlreadyCordoned);

  // Cordoned by a person (kubectl cordon/drain), without our taint: ours to mark.
  NodeInfo drained = Node("n2");
  drained.unschedulable = true;
  EXPECT_EQ(safety.Decide(Request("n2"), &drained, 0, 10, now_), CordonVerdict::kCordon);

  // Our taint on a schedulable node with no evidence annotation: cordoned again.
  NodeInfo tainted = Node("n3");
  tainted.taints.push_back(MakeTaint(kFaultyTaint, "NodeLost", TaintEffect::kNoSchedule));
  EXPECT_EQ(safety.Decide(Request("n3"), &tainted, 0, 10, now_), CordonVerdict::kCordon);
}

TEST_F(CordonSafetyTest, HumanUncordonIsRespectedUntilNewEvidence) {
  CordonSafety safety(Permissive());
  NodeInfo uncordoned = CordonedNode("n1", "pod-uid-1/dns");
  uncordoned.unschedulable = false;  // kubectl uncordon; our taint and annotations stay
  EXPECT_EQ(safety.Decide(Request("n1", "dns", "pod-uid-1/dns"), &uncordoned, 0, 10, now_),
            CordonVerdict::kHumanUncordoned);
  EXPECT_EQ(safety.Decide(Request("n1", "dns", "pod-uid-2/dns"), &uncordoned, 0, 10, now_),
            CordonVerdict::kCordon);

  // The taint removed too: the evidence annotation alone still says a person overruled us.
  uncordoned.taints.clear();
  EXPECT_EQ(safety.Decide(Request("n1", "", "pod-uid-1/dns"), &uncordoned, 0, 10, now_),
            CordonVerdict::kHumanUncordoned);
}

// The node rules alone, as the Cordoner applies them to a node read after a stale write.
TEST(NodeRulesOutCordonTest, DecisionTable) {
  NodeInfo uncordoned = CordonedNode("n", "pod-uid-1/dns");
  uncordoned.unschedulable = false;
  NodeInfo drained = Node("n");
  drained.unschedulable = true;
  NodeInfo tainted = Node("n");
  tainted.taints.push_back(MakeTaint(kFaultyTaint, "NodeLost", TaintEffect::kNoSchedule));
  const NodeInfo cordoned = CordonedNode("n", "pod-uid-0/dns");
  const NodeInfo healthy = Node("n");
  struct Case {
    std::string name;
    const NodeInfo* node;
    std::string evidence;
    std::optional<CordonVerdict> want;
  };
  const std::vector<Case> cases = {
      {"gone", nullptr, "pod-uid-1/dns", CordonVerdict::kNodeMissing},
      {"cordoned for a fault", &cordoned, "pod-uid-1/dns", CordonVerdict::kAlreadyCordoned},
      {"uncordoned by a person after this evidence", &uncordoned, "pod-uid-1/dns",
       CordonVerdict::kHumanUncordoned},
      {"uncordoned by a person, new evidence", &uncordoned, "pod-uid-2/dns", std::nullopt},
      {"drained without our taint", &drained, "pod-uid-1/dns", std::nullopt},
      {"our taint, schedulable", &tainted, "pod-uid-1/dns", std::nullopt},
      {"healthy", &healthy, "pod-uid-1/dns", std::nullopt},
  };
  for (const Case& c : cases) {
    const auto got = NodeRulesOutCordon(Request("n", "dns", c.evidence), c.node);
    EXPECT_EQ(got.has_value(), c.want.has_value()) << c.name;
    if (got && c.want) {
      EXPECT_EQ(ToString(*got), ToString(*c.want)) << c.name;
    }
  }
}

TEST_F(CordonSafetyTest, RuleOrderNodeRulesBeforeBreakerBeforeCapBeforeRate) {
  CordonPolicy policy;
  policy.max_cordoned = 1;
  policy.rate_per_minute = 1;
  policy.breaker_nodes = 2;
  CordonSafety safety(policy);
  // Empty the bucket.
  ASSERT_EQ(DecideFresh(safety, Request("n0")), CordonVerdict::kCordon);

  // Rate limited and cap reached: the cap is reported.
  const NodeInfo n1 = Node("n1");
  EXPECT_EQ(safety.Decide(Request("n1"), &n1, 1, 10, now_), CordonVerdict::kCapReached);
  EXPECT_EQ(safety.Decide(Request("n1"), &n1, 0, 10, now_), CordonVerdict::kRateLimited);

  // Trip the breaker for "dns" (two nodes); then it wins over the cap.
  EXPECT_EQ(safety.Decide(Request("n1", "dns"), &n1, 1, 10, now_), CordonVerdict::kCapReached);
  const NodeInfo n2 = Node("n2");
  EXPECT_EQ(safety.Decide(Request("n2", "dns"), &n2, 1, 10, now_), CordonVerdict::kSystemic);

  // Per-node rules come before the breaker.
  const NodeInfo cordoned = CordonedNode("n3", "pod-uid-1/dns");
  EXPECT_EQ(safety.Decide(Request("n3", "dns"), &cordoned, 1, 10, now_),
            CordonVerdict::kAlreadyCordoned);
  NodeInfo uncordoned = cordoned;
  uncordoned.unschedulable = false;
  EXPECT_EQ(safety.Decide(Request("n3", "dns", "pod-uid-1/dns"), &uncordoned, 1, 10, now_),
            CordonVerdict::kHumanUncordoned);
  EXPECT_EQ(safety.Decide(Request("n4", "dns"), nullptr, 1, 10, now_), CordonVerdict::kNodeMissing);
}

// A restarted operator (or a new leader) used to start with a full rate bucket and an empty
// breaker, so that each restart allowed another burst of cordons and another breaker's worth of
// nodes for one failing item.
TEST_F(CordonSafetyTest, RestoreReplaysTheCordonsStillOnTheNodesIntoTheRateAndTheBreaker) {
  CordonPolicy policy = Permissive();
  policy.rate_per_minute = 6;  // a burst of 6, then one every 10 s
  policy.breaker_nodes = 3;
  CordonSafety safety(policy);
  const WallTime wall_now = WallTime{} + std::chrono::hours(500000);
  const auto cordoned = [&](const std::string& name, int seconds_ago, const std::string& item) {
    NodeInfo node = CordonedNode(name, "pod-uid-" + name + "/" + item);
    node.annotations.Set(kCordonReasonAnnotation,
                         item.empty() ? "NodeUnhealthy" : "PreflightFailed");
    node.annotations.Set(kCordonedAtAnnotation,
                         cache::FormatRfc3339(wall_now - std::chrono::seconds(seconds_ago)));
    return node;
  };
  // Four cordons in the last 5 s, two of them for pre-flight item dns; one by someone else.
  const NodeInfo a = cordoned("a", 5, ""), b = cordoned("b", 4, "dns"), c = cordoned("c", 1, "dns"),
                 d = cordoned("d", 0, "");
  NodeInfo theirs = cordoned("e", 0, "");
  theirs.annotations.Set(kCordonedByAnnotation, "someone");
  EXPECT_EQ(safety.Restore({&a, &b, &c, &d, &theirs}, nullptr, wall_now, now_), "");

  // dns failed on two nodes already: a third trips the breaker.
  EXPECT_EQ(DecideFresh(safety, Request("f", "dns")), CordonVerdict::kSystemic);
  // Six tokens less four: two more cordons, then the rate limit.
  EXPECT_EQ(DecideFresh(safety, Request("g")), CordonVerdict::kCordon);
  EXPECT_EQ(DecideFresh(safety, Request("h")), CordonVerdict::kCordon);
  EXPECT_EQ(DecideFresh(safety, Request("i")), CordonVerdict::kRateLimited);
  now_ += std::chrono::seconds(10);
  EXPECT_EQ(DecideFresh(safety, Request("i")), CordonVerdict::kCordon);

  // Cordons older than the window neither count for the breaker nor use up the bucket.
  CordonSafety later(policy);
  const TimePoint much_later = now_ + std::chrono::minutes(20);
  later.Restore({&a, &b, &c, &d}, nullptr, wall_now + std::chrono::minutes(20), much_later);
  for (const char* name : {"j", "k", "l", "m", "n", "o"}) {
    const NodeInfo node = Node(name);
    EXPECT_EQ(later.Decide(Request(name, "dns"), &node, 0, kManyNodes, much_later),
              std::string_view(name) <= "k" ? CordonVerdict::kCordon : CordonVerdict::kSystemic)
        << name;
  }
}

// A change of leader: the new one restores what the old one saved. The old leader's cordons are
// gone from the nodes (auto-uncordon removed them) and its refusal never touched a node, so
// without the saved state the new leader would grant a fresh burst and cordon for an item whose
// breaker is open.
TEST_F(CordonSafetyTest, SaveAndRestoreCarryTheBucketAndTheOpenBreakerToTheNextLeader) {
  CordonPolicy policy = Permissive();
  policy.rate_per_minute = 6;  // a burst of 6, then one every 10 s
  policy.breaker_nodes = 3;
  CordonSafety old_leader(policy);
  const WallTime wall_now = WallTime{} + std::chrono::hours(500000);
  const uint64_t before = old_leader.generation();
  EXPECT_EQ(DecideFresh(old_leader, Request("a", "dns")), CordonVerdict::kCordon);
  EXPECT_EQ(DecideFresh(old_leader, Request("b", "dns")), CordonVerdict::kCordon);
  EXPECT_EQ(DecideFresh(old_leader, Request("c", "dns")), CordonVerdict::kSystemic);
  EXPECT_EQ(DecideFresh(old_leader, Request("d")), CordonVerdict::kCordon);
  EXPECT_GT(old_leader.generation(), before);
  const nlohmann::json saved = old_leader.Save(wall_now, now_);
  ASSERT_TRUE(saved.contains("items")) << saved.dump();
  EXPECT_EQ(saved["items"]["dns"]["nodes"].size(), 3u) << saved.dump();
  EXPECT_TRUE(saved["items"]["dns"].contains("openUntil")) << saved.dump();
  EXPECT_DOUBLE_EQ(saved["tokens"].get<double>(), 3.0) << saved.dump();

  // The new leader's steady clock has another origin; 5 s have passed on the wall.
  const TimePoint new_now = TimePoint{} + std::chrono::hours(3);
  const WallTime new_wall = wall_now + seconds(5);
  CordonSafety new_leader(policy);
  EXPECT_EQ(new_leader.Restore({}, nlohmann::json::parse(saved.dump()), new_wall, new_now), "");
  const NodeInfo e = Node("e");
  EXPECT_EQ(new_leader.Decide(Request("e", "dns"), &e, 0, kManyNodes, new_now),
            CordonVerdict::kSystemic);
  // 3 tokens were left, half a token came back in 5 s: three cordons, then the limit.
  for (const char* name : {"f", "g", "h", "i"}) {
    const NodeInfo node = Node(name);
    EXPECT_EQ(new_leader.Decide(Request(name), &node, 0, kManyNodes, new_now),
              std::string_view(name) < "i" ? CordonVerdict::kCordon : CordonVerdict::kRateLimited)
        << name;
  }

  // Without the saved state (what an operator restored from the nodes alone), both limits
  // would have started afresh: this is what the saved state prevents.
  CordonSafety forgetful(policy);
  EXPECT_EQ(forgetful.Restore({}, nullptr, new_wall, new_now), "");
  EXPECT_EQ(forgetful.Decide(Request("e", "dns"), &e, 0, kManyNodes, new_now),
            CordonVerdict::kCordon);

  // The breaker closes one window after it opened, on the new leader's clock too.
  const TimePoint after_window = new_now + policy.breaker_window;
  const NodeInfo j = Node("j");
  EXPECT_EQ(new_leader.Decide(Request("j", "dns"), &j, 0, kManyNodes, after_window),
            CordonVerdict::kCordon);
}

TEST_F(CordonSafetyTest, RestoreKeepsTheStricterOfTheSavedStateAndTheNodes) {
  CordonPolicy policy = Permissive();
  policy.rate_per_minute = 6;
  policy.breaker_nodes = 3;
  const WallTime wall_now = WallTime{} + std::chrono::hours(500000);
  // Saved: a full bucket, dns failed on one node. The nodes: five cordons just now, one for dns
  // on another node. Together: one token, and dns failed on two nodes.
  const nlohmann::json saved = {
      {"tokens", 6.0},
      {"at", cache::FormatRfc3339Millis(wall_now)},
      {"items", {{"dns", {{"nodes", {{"x", cache::FormatRfc3339Millis(wall_now)}}}}}}}};
  std::vector<NodeInfo> cordoned;
  for (const char* name : {"a", "b", "c", "d", "y"}) {
    NodeInfo node = CordonedNode(name, std::string("pod/") + (name[0] == 'y' ? "dns" : "disk"));
    node.annotations.Set(kCordonReasonAnnotation, "PreflightFailed");
    node.annotations.Set(kCordonedAtAnnotation, cache::FormatRfc3339(wall_now));
    cordoned.push_back(node);
  }
  std::vector<const NodeInfo*> nodes;
  for (const NodeInfo& node : cordoned) nodes.push_back(&node);
  CordonSafety safety(policy);
  EXPECT_EQ(safety.Restore(nodes, saved, wall_now, now_), "");
  EXPECT_EQ(safety.FailingNodes("dns", now_), 2);
  EXPECT_EQ(DecideFresh(safety, Request("z")), CordonVerdict::kCordon);
  EXPECT_EQ(DecideFresh(safety, Request("w")), CordonVerdict::kRateLimited);
  EXPECT_EQ(DecideFresh(safety, Request("v", "dns")), CordonVerdict::kSystemic);
}

TEST_F(CordonSafetyTest, RestoreUsesWhatItCanReadOfAMangledStateAndSaysWhatItCouldNot) {
  CordonPolicy policy = Permissive();
  policy.rate_per_minute = 6;
  policy.breaker_nodes = 2;
  const WallTime wall_now = WallTime{} + std::chrono::hours(500000);
  const std::string at = cache::FormatRfc3339Millis(wall_now);
  struct Case {
    const char* name;
    nlohmann::json saved;
    std::string problems;
    int dns_nodes;  // FailingNodes("dns") after the restore
  };
  const std::vector<Case> cases = {
      {"empty", nlohmann::json::object(), "", 0},
      {"not an object", nlohmann::json::array(), "not a JSON object", 0},
      {"bad bucket", {{"tokens", "many"}, {"at", at}}, "the rate bucket", 0},
      {"bad items", {{"items", 3}}, "the items", 0},
      {"bad item", {{"items", {{"dns", 1}, {"disk", {{"nodes", {{"n1", at}}}}}}}}, "item dns", 0},
      {"bad node time",
       {{"items", {{"dns", {{"nodes", {{"n1", "yesterday"}, {"n2", at}}}}}}}},
       "item dns node n1",
       1},
      {"bad openUntil",
       {{"items", {{"dns", {{"nodes", {{"n2", at}}}, {"openUntil", 7}}}}}},
       "item dns openUntil",
       1},
  };
  for (const Case& c : cases) {
    CordonSafety safety(policy);
    EXPECT_EQ(safety.Restore({}, c.saved, wall_now, now_), c.problems) << c.name;
    EXPECT_EQ(safety.FailingNodes("dns", now_), c.dns_nodes) << c.name;
  }
}

TEST_F(CordonSafetyTest, SaveKeepsOnlyTheRecentFailuresAndAtMostABoundedNumberPerItem) {
  CordonPolicy policy = Permissive();
  policy.breaker_nodes = 1000;  // never trips here
  CordonSafety safety(policy);
  const WallTime wall_now = WallTime{} + std::chrono::hours(500000);
  safety.RecordFailure(Request("old", "disk"), now_);
  now_ += policy.breaker_window;
  for (size_t i = 0; i < kMaxSavedNodesPerItem + 10; ++i) {
    safety.RecordFailure(Request("n" + std::to_string(i), "dns"), now_);
    now_ += std::chrono::milliseconds(10);
  }
  const nlohmann::json saved = safety.Save(wall_now, now_);
  EXPECT_FALSE(saved.contains("tokens")) << "no rate limit, no bucket";
  ASSERT_TRUE(saved.contains("items"));
  EXPECT_FALSE(saved["items"].contains("disk")) << saved.dump();
  ASSERT_EQ(saved["items"]["dns"]["nodes"].size(), kMaxSavedNodesPerItem);
  EXPECT_TRUE(
      saved["items"]["dns"]["nodes"].contains("n" + std::to_string(kMaxSavedNodesPerItem + 9)));
  EXPECT_FALSE(saved["items"]["dns"]["nodes"].contains("n0"));
  EXPECT_FALSE(saved["items"]["dns"].contains("openUntil"));
}

TEST_F(CordonSafetyTest, DryRunComesLastAndTakesNoToken) {
  CordonPolicy policy;
  policy.dry_run = true;
  policy.max_cordoned = 1;
  policy.rate_per_minute = 1;
  policy.breaker_nodes = 2;
  CordonSafety safety(policy);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(DecideFresh(safety, Request("n" + std::to_string(i))), CordonVerdict::kDryRun);
  }
  const NodeInfo n1 = Node("n1");
  EXPECT_EQ(safety.Decide(Request("n1"), &n1, 1, 10, now_), CordonVerdict::kCapReached);
  const NodeInfo cordoned = CordonedNode("n2", "e");
  EXPECT_EQ(safety.Decide(Request("n2"), &cordoned, 0, 10, now_), CordonVerdict::kAlreadyCordoned);
  EXPECT_EQ(safety.Decide(Request("n5"), nullptr, 0, 10, now_), CordonVerdict::kNodeMissing);
  EXPECT_EQ(DecideFresh(safety, Request("n6", "dns")), CordonVerdict::kDryRun);
  EXPECT_EQ(DecideFresh(safety, Request("n7", "dns")), CordonVerdict::kSystemic);
}

TEST(CordonLimitTest, TighterOfCountAndFractionWithAtLeastOne) {
  CordonPolicy policy;                   // 10 nodes, 10%
  EXPECT_EQ(CordonLimit(policy, 5), 1);  // 0.5 rounds down, but one node is always allowed
  EXPECT_EQ(CordonLimit(policy, 0), 1);
  EXPECT_EQ(CordonLimit(policy, 35), 3);
  EXPECT_EQ(CordonLimit(policy, 100), 10);
  EXPECT_EQ(CordonLimit(policy, 5000), 10);  // the count is tighter

  policy.max_fraction = 0.29;
  policy.max_cordoned = 100;
  EXPECT_EQ(CordonLimit(policy, 100), 29);  // 28.999999999999996 in floating point
  policy.max_fraction = 0;
  EXPECT_EQ(CordonLimit(policy, 100), 1);
  policy.max_fraction = 1e300;
  EXPECT_EQ(CordonLimit(policy, 100), 100);

  policy.max_cordoned = 0;
  EXPECT_EQ(CordonLimit(policy, 100), 0);
}

TEST_F(CordonSafetyTest, CapByFractionAndByCount) {
  CordonPolicy policy = Permissive();
  policy.max_cordoned = 10;
  policy.max_fraction = 0.1;
  CordonSafety safety(policy);
  const NodeInfo node = Node("n1");
  // 5 nodes at 10%: one node may be cordoned.
  EXPECT_EQ(safety.Decide(Request("n1"), &node, 0, 5, now_), CordonVerdict::kCordon);
  EXPECT_EQ(safety.Decide(Request("n1"), &node, 1, 5, now_), CordonVerdict::kCapReached);
  // 50 nodes: five.
  EXPECT_EQ(safety.Decide(Request("n1"), &node, 4, 50, now_), CordonVerdict::kCordon);
  EXPECT_EQ(safety.Decide(Request("n1"), &node, 5, 50, now_), CordonVerdict::kCapReached);
  // 1000 nodes: the count of 10 is the tighter.
  EXPECT_EQ(safety.Decide(Request("n1"), &node, 9, 1000, now_), CordonVerdict::kCordon);
  EXPECT_EQ(safety.Decide(Request("n1"), &node, 10, 1000, now_), CordonVerdict::kCapReached);

  policy.max_cordoned = 0;
  CordonSafety none(policy);
  EXPECT_EQ(none.Decide(Request("n1"), &node, 0, 1000, now_), CordonVerdict::kCapReached);
}

TEST_F(CordonSafetyTest, BreakerTripsOnDistinctNodes) {
  CordonPolicy policy = Permissive();
  policy.breaker_nodes = 3;
  CordonSafety safety(policy);
  EXPECT_EQ(DecideFresh(safety, Request("n1", "dns")), CordonVerdict::kCordon);
  EXPECT_EQ(DecideFresh(safety, Request("n2", "dns")), CordonVerdict::kCordon);
  EXPECT_EQ(DecideFresh(safety, Request("n3", "dns")), CordonVerdict::kSystemic);
  EXPECT_EQ(DecideFresh(safety, Request("n4", "dns")), CordonVerdict::kSystemic);
  EXPECT_EQ(safety.FailingNodes("dns", now_), 4);
  // Other items and requests without an item are not held back.
  EXPECT_EQ(DecideFresh(safety, Request("n5", "ulimit")), CordonVerdict::kCordon);
  EXPECT_EQ(DecideFresh(safety, Request("n6")), CordonVerdict::kCordon);
  EXPECT_EQ(safety.FailingNodes("ulimit", now_), 1);
  EXPECT_EQ(safety.FailingNodes("disk-size shm", now_), 0);
}

TEST_F(CordonSafetyTest, BreakerIgnoresTheSameNodeRepeated) {
  CordonPolicy policy = Permissive();
  policy.breaker_nodes = 3;
  CordonSafety safety(policy);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(DecideFresh(safety, Request("n1", "dns")), CordonVerdict::kCordon);
  }
  EXPECT_EQ(DecideFresh(safety, Request("n2", "dns")), CordonVerdict::kCordon);
  EXPECT_EQ(safety.FailingNodes("dns", now_), 2);
}

TEST_F(CordonSafetyTest, BreakerCountsFailuresOnNodesItDoesNotCordon) {
  CordonPolicy policy = Permissive();
  policy.breaker_nodes = 3;
  CordonSafety safety(policy);
  const NodeInfo cordoned = CordonedNode("n1", "e");
  EXPECT_EQ(safety.Decide(Request("n1", "dns"), &cordoned, 1, 10, now_),
            CordonVerdict::kAlreadyCordoned);
  EXPECT_EQ(safety.Decide(Request("n2", "dns"), nullptr, 1, 10, now_), CordonVerdict::kNodeMissing);
  EXPECT_EQ(DecideFresh(safety, Request("n3", "dns")), CordonVerdict::kSystemic);
}

TEST_F(CordonSafetyTest, BreakerWindowExpiresAndATripLastsOneWindow) {
  CordonPolicy policy = Permissive();
  policy.breaker_nodes = 3;
  policy.breaker_window = minutes(10);
  CordonSafety safety(policy);
  const TimePoint start = now_;
  EXPECT_EQ(DecideFresh(safety, Request("n1", "dns")), CordonVerdict::kCordon);
  now_ = start + minutes(6);
  EXPECT_EQ(DecideFresh(safety, Request("n2", "dns")), CordonVerdict::kCordon);
  now_ = start + minutes(10);  // n1's failure has just left the window
  EXPECT_EQ(DecideFresh(safety, Request("n3", "dns")), CordonVerdict::kCordon);
  EXPECT_EQ(safety.FailingNodes("dns", now_), 2);

  now_ = start + minutes(12);  // n2, n3, n4 within ten minutes: tripped until minute 22
  EXPECT_EQ(DecideFresh(safety, Request("n4", "dns")), CordonVerdict::kSystemic);
  now_ = start + minutes(21);  // only n4 and n5 in the window, but the trip holds
  EXPECT_EQ(DecideFresh(safety, Request("n5", "dns")), CordonVerdict::kSystemic);
  EXPECT_EQ(safety.FailingNodes("dns", now_), 2);
  now_ = start + minutes(22);  // the trip is over; n5 and n6 are two nodes
  EXPECT_EQ(DecideFresh(safety, Request("n6", "dns")), CordonVerdict::kCordon);
}

TEST_F(CordonSafetyTest, RateLimitRefillsWithTime) {
  CordonPolicy policy = Permissive();
  policy.rate_per_minute = 5;  // burst 5, one token every 12 seconds
  CordonSafety safety(policy);
  int node = 0;
  auto next = [&] { return DecideFresh(safety, Request("n" + std::to_string(node++))); };
  for (int i = 0; i < 5; ++i) EXPECT_EQ(next(), CordonVerdict::kCordon) << i;
  EXPECT_EQ(next(), CordonVerdict::kRateLimited);

  now_ += seconds(11);
  EXPECT_EQ(next(), CordonVerdict::kRateLimited);
  now_ += seconds(1);
  EXPECT_EQ(next(), CordonVerdict::kCordon);
  EXPECT_EQ(next(), CordonVerdict::kRateLimited);

  now_ += minutes(10);  // refills to the burst, not beyond
  for (int i = 0; i < 5; ++i) EXPECT_EQ(next(), CordonVerdict::kCordon) << i;
  EXPECT_EQ(next(), CordonVerdict::kRateLimited);
}

TEST_F(CordonSafetyTest, RateBelowOnePerMinuteAllowsOneAtATime) {
  CordonPolicy policy = Permissive();
  policy.rate_per_minute = 0.5;
  CordonSafety safety(policy);
  EXPECT_EQ(DecideFresh(safety, Request("n1")), CordonVerdict::kCordon);
  EXPECT_EQ(DecideFresh(safety, Request("n2")), CordonVerdict::kRateLimited);
  now_ += minutes(1);
  EXPECT_EQ(DecideFresh(safety, Request("n2")), CordonVerdict::kRateLimited);
  now_ += minutes(1);
  EXPECT_EQ(DecideFresh(safety, Request("n2")), CordonVerdict::kCordon);
}

TEST_F(CordonSafetyTest, ReturnedTokenAllowsTheNextCordon) {
  CordonPolicy policy = Permissive();
  policy.rate_per_minute = 1;
  CordonSafety safety(policy);
  EXPECT_EQ(DecideFresh(safety, Request("n1")), CordonVerdict::kCordon);
  EXPECT_EQ(DecideFresh(safety, Request("n2")), CordonVerdict::kRateLimited);
  safety.ReturnToken();  // the write for n1 failed
  EXPECT_EQ(DecideFresh(safety, Request("n1")), CordonVerdict::kCordon);
  safety.ReturnToken();
  safety.ReturnToken();  // never beyond the burst
  EXPECT_EQ(DecideFresh(safety, Request("n2")), CordonVerdict::kCordon);
  EXPECT_EQ(DecideFresh(safety, Request("n3")), CordonVerdict::kRateLimited);
}

TEST_F(CordonSafetyTest, ZeroRateMeansNoRateLimit) {
  CordonSafety safety(Permissive());
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(DecideFresh(safety, Request("n" + std::to_string(i))), CordonVerdict::kCordon);
  }
}

TEST(CordonNodeTest, IsCordonedByUsNeedsOurAnnotationAndUnschedulable) {
  NodeInfo node = CordonedNode("n1", "e");
  EXPECT_TRUE(IsCordonedByUs(node));
  EXPECT_TRUE(IsCordonedForFault(node));
  node.unschedulable = false;
  EXPECT_FALSE(IsCordonedByUs(node));
  EXPECT_FALSE(IsCordonedForFault(node));
  node.unschedulable = true;
  node.annotations.Erase(kCordonedByAnnotation);
  EXPECT_FALSE(IsCordonedByUs(node));
  EXPECT_TRUE(IsCordonedForFault(node));
}

TEST(CordonPatchTest, MergesTaintsAndWritesAnnotations) {
  NodeInfo node = Node("n1");
  node.taints.push_back(MakeTaint("nvidia.com/gpu", "present", TaintEffect::kNoSchedule));
  node.taints.push_back(MakeTaint("node.kubernetes.io/unreachable", "", TaintEffect::kNoExecute));
  const CordonRequest request = Request("n1", "dns", "pod-uid-1/dns");
  const WallTime at = WallTime{} + seconds(1704067200);  // 2024-01-01T00:00:00Z

  const nlohmann::json patch = CordonPatch(request, node, at);
  const nlohmann::json expected = {
      {"metadata",
       {{"resourceVersion", "7"},
        {"annotations",
         {{"tpujob.dev/cordoned-by", "tpujob-operator"},
          {"tpujob.dev/cordon-reason", "PreflightFailed"},
          {"tpujob.dev/cordon-message", "pre-flight check dns failed"},
          {"tpujob.dev/cordoned-at", "2024-01-01T00:00:00Z"},
          {"tpujob.dev/cordon-job", "team/llm"},
          {"tpujob.dev/cordon-evidence", "pod-uid-1/dns"}}}}},
      {"spec",
       {{"unschedulable", true},
        {"taints",
         {{{"key", "nvidia.com/gpu"}, {"value", "present"}, {"effect", "NoSchedule"}},
          {{"key", "node.kubernetes.io/unreachable"}, {"effect", "NoExecute"}},
          {{"key", "tpujob.dev/faulty"},
           {"value", "PreflightFailed"},
           {"effect", "NoSchedule"}}}}}}};
  EXPECT_EQ(patch, expected) << patch.dump(2);
}

TEST(CordonPatchTest, KeepsOurTaintWhenPresent) {
  NodeInfo node = Node("n1");
  node.taints.push_back(MakeTaint(kFaultyTaint, "NodeLost", TaintEffect::kNoSchedule));
  const nlohmann::json patch = CordonPatch(Request("n1"), node, WallTime{});
  const nlohmann::json expected_taints = {
      {{"key", "tpujob.dev/faulty"}, {"value", "NodeLost"}, {"effect", "NoSchedule"}}};
  EXPECT_EQ(patch["spec"]["taints"], expected_taints);

  // The same key with another effect is another taint: ours is added beside it.
  node.taints[0].effect = TaintEffect::kPreferNoSchedule;
  EXPECT_EQ(CordonPatch(Request("n1"), node, WallTime{})["spec"]["taints"].size(), 2u);
}

TEST(CordonPatchTest, BoundsTextsAndMakesTheTaintValueALabelValue) {
  CordonRequest request = Request("n1");
  request.message = std::string(2000, 'x') + "tail";
  request.reason = "Pre-flight failed: disk/shm!";
  request.evidence = "pod\xFF/dns";
  NodeInfo node = Node("n1");
  node.resource_version.clear();
  const nlohmann::json patch = CordonPatch(request, node, WallTime{});
  const nlohmann::json& annotations = patch["metadata"]["annotations"];
  EXPECT_EQ(annotations["tpujob.dev/cordon-message"], std::string(kMaxCordonMessageBytes, 'x'));
  EXPECT_EQ(annotations["tpujob.dev/cordon-evidence"], "pod\xEF\xBF\xBD/dns");
  EXPECT_EQ(annotations["tpujob.dev/cordon-reason"], "Pre-flight failed: disk/shm!");
  EXPECT_EQ(patch["spec"]["taints"][0]["value"], "Pre-flight-failed--disk-shm");
  EXPECT_FALSE(patch["metadata"].contains("resourceVersion"));
  EXPECT_NO_THROW(patch.dump());

  request.reason = std::string(100, 'R');
  EXPECT_EQ(CordonPatch(request, node, WallTime{})["spec"]["taints"][0]["value"],
            std::string(63, 'R'));
}

// --- Automatic uncordon ----------------------------------------------------------------------

WallTime T(int64_t seconds) { return WallTime{} + std::chrono::seconds(1'700'000'000 + seconds); }

cache::NodeCondition Condition(std::string_view type, cache::ConditionStatus status,
                               WallTime since) {
  cache::NodeCondition c;
  c.type = InternedString::Intern(type);
  c.status = status;
  c.last_transition_time = since;
  return c;
}

NodeInfo CordonedAt(WallTime at, WallTime ready_since) {
  NodeInfo node = CordonedNode("n1", "e1");
  node.annotations.Set(kCordonedAtAnnotation, cache::FormatRfc3339(at));
  node.conditions.push_back(Condition("Ready", cache::ConditionStatus::kTrue, ready_since));
  return node;
}

TEST(UncordonTest, WaitsForTheHealthyPeriodFromTheLatestTimestamp) {
  const NodeHealthConfig health;
  const auto period = std::chrono::seconds(600);
  // Cordoned at 100, Ready since long before: healthy since the cordon.
  NodeInfo node = CordonedAt(T(100), T(0));
  UncordonDecision d = DecideUncordon(node, health, period, T(400));
  EXPECT_FALSE(d.uncordon);
  ASSERT_TRUE(d.wait.has_value());
  EXPECT_EQ(*d.wait, std::chrono::seconds(300));
  EXPECT_TRUE(DecideUncordon(node, health, period, T(700)).uncordon);

  // The hardware condition cleared at 500: the period counts from then.
  node.conditions.push_back(Condition("TPUUnhealthy", cache::ConditionStatus::kFalse, T(500)));
  d = DecideUncordon(node, health, period, T(700));
  EXPECT_FALSE(d.uncordon);
  ASSERT_TRUE(d.wait.has_value());
  EXPECT_EQ(*d.wait, std::chrono::seconds(400));
  d = DecideUncordon(node, health, period, T(1100));
  EXPECT_TRUE(d.uncordon);
  EXPECT_NE(d.message.find("TPUUnhealthy last changed"), std::string::npos) << d.message;

  // Ready flapped at 1000.
  node.conditions[0].last_transition_time = T(1000);
  EXPECT_FALSE(DecideUncordon(node, health, period, T(1100)).uncordon);
}

TEST(UncordonTest, ANodeAPersonUncordonedKeepsOurTaintUntilTheHealthyPeriodLiftsIt) {
  const NodeHealthConfig health;
  const auto period = std::chrono::seconds(600);
  NodeInfo node = CordonedAt(T(100), T(0));
  node.unschedulable = false;          // `kubectl uncordon`: the taint and annotations stay
  ASSERT_FALSE(IsCordonedByUs(node));  // no longer counted against the cap
  ASSERT_TRUE(HoldsOurFaultyTaint(node));
  EXPECT_FALSE(DecideUncordon(node, health, period, T(400)).uncordon);
  EXPECT_TRUE(DecideUncordon(node, health, period, T(700)).uncordon);
  const nlohmann::json patch = UncordonPatch(node);
  for (const nlohmann::json& taint : patch["spec"]["taints"]) EXPECT_NE(taint["key"], kFaultyTaint);

  // Not ours: a person's cordon and taint are theirs to lift.
  node.annotations.Set(kCordonedByAnnotation, "someone");
  EXPECT_FALSE(HoldsOurFaultyTaint(node));
  EXPECT_FALSE(DecideUncordon(node, health, period, T(700)).uncordon);
}

TEST(UncordonTest, NeverWhileUnhealthyOrNotOurs) {
  const NodeHealthConfig health;
  NodeInfo sick = CordonedAt(T(0), T(0));
  sick.conditions.push_back(Condition("TPUUnhealthy", cache::ConditionStatus::kTrue, T(0)));
  UncordonDecision d = DecideUncordon(sick, health, std::chrono::seconds(1), T(100000));
  EXPECT_FALSE(d.uncordon);
  EXPECT_FALSE(d.wait.has_value());

  NodeInfo maintenance = CordonedAt(T(0), T(0));
  maintenance.taints.push_back(
      MakeTaint("cloud.google.com/impending-node-termination", "", TaintEffect::kNoSchedule));
  EXPECT_FALSE(DecideUncordon(maintenance, health, std::chrono::seconds(1), T(100000)).uncordon);

  NodeInfo by_person = Node("n2");  // unschedulable without our annotations
  by_person.unschedulable = true;
  by_person.taints.push_back(MakeTaint(kFaultyTaint, "x", TaintEffect::kNoSchedule));
  EXPECT_FALSE(DecideUncordon(by_person, health, std::chrono::seconds(1), T(100000)).uncordon);

  NodeInfo no_taint = CordonedAt(T(0), T(0));  // ours, but a person removed the taint
  no_taint.taints.clear();
  EXPECT_FALSE(DecideUncordon(no_taint, health, std::chrono::seconds(1), T(100000)).uncordon);
}

TEST(UncordonTest, PatchRemovesOurTaintAndAnnotationsOnly) {
  NodeInfo node = CordonedAt(T(0), T(0));
  node.taints.insert(node.taints.begin(),
                     MakeTaint("google.com/tpu", "present", TaintEffect::kNoSchedule));
  const nlohmann::json patch = UncordonPatch(node);
  EXPECT_EQ(patch["metadata"]["resourceVersion"], "7");
  EXPECT_TRUE(patch["spec"]["unschedulable"].is_null());
  ASSERT_EQ(patch["spec"]["taints"].size(), 1u);
  EXPECT_EQ(patch["spec"]["taints"][0]["key"], "google.com/tpu");
  for (std::string_view key : {kCordonedByAnnotation, kCordonEvidenceAnnotation,
                               kCordonJobAnnotation, kCordonedAtAnnotation}) {
    ASSERT_TRUE(patch["metadata"]["annotations"].contains(std::string(key))) << key;
    EXPECT_TRUE(patch["metadata"]["annotations"][std::string(key)].is_null()) << key;
  }
}

TEST_F(CordonSafetyTest, RecordedFailuresTripTheBreakerForTheFirstDecision) {
  CordonPolicy policy = Permissive();
  policy.breaker_nodes = 3;
  CordonSafety safety(policy);
  for (const char* node : {"n1", "n2", "n3"}) safety.RecordFailure(Request(node, "dns"), now_);
  const NodeInfo node = Node("n1");
  EXPECT_EQ(safety.Decide(Request("n1", "dns"), &node, 0, kManyNodes, now_),
            CordonVerdict::kSystemic);
  // Other items are not affected.
  EXPECT_EQ(safety.Decide(Request("n1", "ulimit"), &node, 0, kManyNodes, now_),
            CordonVerdict::kCordon);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::policy
