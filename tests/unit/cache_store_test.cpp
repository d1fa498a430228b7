#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>

#include "cache/contents.h"
#include "cache/store.h"

namespace tpujob::cache {
namespace TPUJOB_TEST_NS {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

std::shared_ptr<const PodInfo> Pod(std::string ns, std::string name, std::string job,
                                   std::string node, std::string version = "1") {
  auto pod = std::make_shared<PodInfo>();
  pod->ns = InternedString::Intern(ns);
  pod->name = std::move(name);
  pod->resource_version = std::move(version);
  if (!job.empty()) pod->labels.Set(kJobNameLabel, job);
  pod->node_name = InternedString::Intern(node);
  return pod;
}

std::vector<std::string> Names(const std::vector<std::shared_ptr<const PodInfo>>& pods) {
  std::vector<std::string> names;
  for (const auto& pod : pods) names.push_back(pod->name);
  std::sort(names.begin(), names.end());
  return names;
}

class CacheStoreTest : public ::testing::Test {
 protected:
  CacheStoreTest() { AddPodIndexers(store_); }
  Store<PodInfo> store_;
};

TEST_F(CacheStoreTest, AddGetUpdateDelete) {
  EXPECT_EQ(store_.Size(), 0u);
  EXPECT_EQ(store_.Add(Pod("a", "w-0", "job", "n1")), nullptr);
  EXPECT_EQ(store_.Add(Pod("b", "w-0", "job", "n1")), nullptr);
  EXPECT_EQ(store_.Size(), 2u);
  auto got = store_.Get("a/w-0");
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->ns, "a");
  EXPECT_EQ(store_.Get("w-0"), nullptr);
  EXPECT_EQ(store_.Get("c/w-0"), nullptr);

  auto replaced = store_.Update(Pod("a", "w-0", "job", "n1", "2"));
  ASSERT_NE(replaced, nullptr);
  EXPECT_EQ(replaced->resource_version, "1");
  EXPECT_EQ(got->resource_version, "1");  // snapshots handed out never change
  EXPECT_EQ(store_.Get("a/w-0")->resource_version, "2");
  EXPECT_EQ(store_.Size(), 2u);

  auto removed = store_.Delete("a/w-0");
  ASSERT_NE(removed, nullptr);
  EXPECT_EQ(removed->resource_version, "2");
  EXPECT_EQ(store_.Delete("a/w-0"), nullptr);
  EXPECT_EQ(store_.Size(), 1u);
  EXPECT_THAT(Names(store_.List()), ElementsAre("w-0"));
}

TEST_F(CacheStoreTest, IndexesFollowRelabelMoveAndDelete) {
  store_.Add(Pod("team", "w-0", "llm", "node-1"));
  store_.Add(Pod("team", "w-1", "llm", "node-2"));
  store_.Add(Pod("team", "x-0", "other", "node-1"));
  store_.Add(Pod("team", "pending", "llm", ""));
  store_.Add(Pod("elsewhere", "w-0", "llm", "node-1"));  // same job name, other namespace

  EXPECT_THAT(Names(store_.ByIndex(kPodsByJobIndex, "team/llm")),
              ElementsAre("pending", "w-0", "w-1"));
  EXPECT_THAT(Names(store_.ByIndex(kPodsByJobIndex, "elsewhere/llm")), ElementsAre("w-0"));
  EXPECT_THAT(Names(store_.ByIndex(kPodsByNodeIndex, "node-1")), ElementsAre("w-0", "w-0", "x-0"));
  EXPECT_THAT(store_.IndexValues(kPodsByNodeIndex), UnorderedElementsAre("node-1", "node-2"));

  // The pod moves node: it leaves its old node's entry; node-2 empties and disappears.
  store_.Update(Pod("team", "w-1", "llm", "node-3"));
  EXPECT_THAT(store_.ByIndex(kPodsByNodeIndex, "node-2"), IsEmpty());
  EXPECT_THAT(Names(store_.ByIndex(kPodsByNodeIndex, "node-3")), ElementsAre("w-1"));
  EXPECT_THAT(store_.IndexValues(kPodsByNodeIndex), UnorderedElementsAre("node-1", "node-3"));

  // Relabelled to another job, and a label removed entirely.
  store_.Update(Pod("team", "w-0", "other", "node-1"));
  store_.Update(Pod("team", "pending", "", ""));
  EXPECT_THAT(Names(store_.ByIndex(kPodsByJobIndex, "team/llm")), ElementsAre("w-1"));
  EXPECT_THAT(Names(store_.ByIndex(kPodsByJobIndex, "team/other")), ElementsAre("w-0", "x-0"));

  // Deletion removes every index entry.
  store_.Delete("team/w-1");
  EXPECT_THAT(store_.ByIndex(kPodsByJobIndex, "team/llm"), IsEmpty());
  EXPECT_THAT(store_.ByIndex(kPodsByNodeIndex, "node-3"), IsEmpty());
  EXPECT_THAT(store_.IndexValues(kPodsByJobIndex),
              UnorderedElementsAre("team/other", "elsewhere/llm"));
  EXPECT_THAT(store_.ByIndex("no-such-index", "x"), IsEmpty());
}

TEST_F(CacheStoreTest, AddIndexerIndexesExistingObjectsAndRejectsDuplicates) {
  store_.Add(Pod("team", "w-0", "llm", "node-1"));
  store_.Add(Pod("team", "w-1", "llm", "node-2"));
  ASSERT_TRUE(
      store_
          .AddIndexer(
              "by-name-prefix",
              [](const PodInfo& pod) {
                return std::vector<std::string>{pod.name.substr(0, 1), pod.name.substr(0, 3)};
              })
          .has_value());
  EXPECT_THAT(Names(store_.ByIndex("by-name-prefix", "w")), ElementsAre("w-0", "w-1"));
  EXPECT_THAT(Names(store_.ByIndex("by-name-prefix", "w-1")), ElementsAre("w-1"));
  EXPECT_FALSE(store_.AddIndexer(std::string(kPodsByJobIndex), PodJobIndex).has_value());
}

TEST_F(CacheStoreTest, ReplaceIsAtomicAndReportsDifferences) {
  store_.Add(Pod("t", "kept", "j", "n1", "1"));
  store_.Add(Pod("t", "changed", "j", "n1", "1"));
  store_.Add(Pod("t", "gone", "j", "n2", "1"));
  auto delta =
      store_.Replace({Pod("t", "kept", "j", "n1", "1"), Pod("t", "changed", "j", "n3", "5"),
                      Pod("t", "new", "k", "n2", "6")},
                     "600");
  EXPECT_EQ(store_.ResourceVersion(), "600");
  EXPECT_EQ(store_.Size(), 3u);
  ASSERT_EQ(delta.added.size(), 1u);
  EXPECT_EQ(delta.added[0]->name, "new");
  ASSERT_EQ(delta.updated.size(), 1u);  // "kept" has the same resourceVersion: not reported
  EXPECT_EQ(delta.updated[0].first->node_name, "n1");
  EXPECT_EQ(delta.updated[0].second->node_name, "n3");
  ASSERT_EQ(delta.deleted.size(), 1u);
  EXPECT_EQ(delta.deleted[0]->name, "gone");
  // Indexes were rebuilt from the new content.
  EXPECT_THAT(Names(store_.ByIndex(kPodsByNodeIndex, "n2")), ElementsAre("new"));
  EXPECT_THAT(Names(store_.ByIndex(kPodsByNodeIndex, "n1")), ElementsAre("kept"));
  EXPECT_THAT(Names(store_.ByIndex(kPodsByJobIndex, "t/j")), ElementsAre("changed", "kept"));

  auto cleared = store_.Replace({}, "700");
  EXPECT_EQ(cleared.deleted.size(), 3u);
  EXPECT_EQ(store_.Size(), 0u);
  EXPECT_THAT(store_.IndexValues(kPodsByJobIndex), IsEmpty());
}

TEST_F(CacheStoreTest, ListBySelectors) {
  auto pod = [](std::string name, std::string tier, std::string node, PodPhase phase) {
    auto p = std::make_shared<PodInfo>();
    p->ns = InternedString::Intern("t");
    p->name = std::move(name);
    p->labels.Set("tier", tier);
    p->node_name = InternedString::Intern(node);
    p->phase = phase;
    return std::shared_ptr<const PodInfo>(std::move(p));
  };
  store_.Add(pod("m-0", "master", "n1", PodPhase::kRunning));
  store_.Add(pod("w-0", "worker", "n1", PodPhase::kRunning));
  store_.Add(pod("w-1", "worker", "n2", PodPhase::kFailed));
  EXPECT_THAT(Names(store_.List(*LabelSelector::Parse("tier=worker"))), ElementsAre("w-0", "w-1"));
  EXPECT_THAT(Names(store_.List(*LabelSelector::Parse("tier notin (worker)"))), ElementsAre("m-0"));
  auto selected =
      store_.List(*LabelSelector::Parse("tier=worker"), *FieldSelector::Parse("spec.nodeName=n1"));
  ASSERT_TRUE(selected.has_value());
  EXPECT_THAT(Names(*selected), ElementsAre("w-0"));
  selected = store_.List(LabelSelector(), *FieldSelector::Parse("status.phase!=Failed"));
  ASSERT_TRUE(selected.has_value());
  EXPECT_THAT(Names(*selected), ElementsAre("m-0", "w-0"));
  EXPECT_FALSE(store_.List(LabelSelector(), *FieldSelector::Parse("spec.hostname=x")).has_value());
}

TEST(CacheStoreNodeTest, ClusterScopedKeysAndPoolIndex) {
  Store<NodeInfo> nodes;
  AddNodeIndexers(nodes);
  auto node = [](std::string name, std::string pool) {
    auto n = std::make_shared<NodeInfo>();
    n->name = std::move(name);
    if (!pool.empty()) n->labels.Set(kNodePoolLabel, pool);
    return std::shared_ptr<const NodeInfo>(std::move(n));
  };
  nodes.Add(node("a", "pool-1"));
  nodes.Add(node("b", "pool-1"));
  nodes.Add(node("c", ""));
  ASSERT_NE(nodes.Get("a"), nullptr);
  EXPECT_EQ(nodes.ByIndex(kNodesByPoolIndex, "pool-1").size(), 2u);
  nodes.Update(node("b", "pool-2"));
  EXPECT_EQ(nodes.ByIndex(kNodesByPoolIndex, "pool-1").size(), 1u);
  EXPECT_EQ(nodes.ByIndex(kNodesByPoolIndex, "pool-2").size(), 1u);
}

TEST_F(CacheStoreTest, ConcurrentReadersSeeConsistentSnapshots) {
  // Writers move pods between two nodes while readers check each index answer agrees with the
  // snapshots it returns. Run under TSan to catch races; here it checks consistency.
  std::atomic<bool> done{false};
  std::atomic<int> inconsistencies{0};
  std::thread writer([&] {
    for (int i = 0; i < 2000; ++i) {
      const std::string node = i % 2 == 0 ? "n1" : "n2";
      store_.Update(Pod("t", fmt::format("p{}", i % 10), "j", node, std::to_string(i)));
      if (i % 100 == 99) store_.Replace({Pod("t", "p0", "j", "n1", "r")}, std::to_string(i));
    }
    done = true;
  });
  std::thread reader([&] {
    while (!done) {
      for (const auto& pod : store_.ByIndex(kPodsByNodeIndex, "n1")) {
        if (pod->node_name != "n1") ++inconsistencies;
      }
      for (const auto& pod : store_.ByIndex(kPodsByJobIndex, "t/j")) {
        if (pod->labels.Value(kJobNameLabel) != "j") ++inconsistencies;
      }
    }
  });
  writer.join();
  reader.join();
  EXPECT_EQ(inconsistencies.load(), 0);
  EXPECT_EQ(store_.ByIndex(kPodsByJobIndex, "t/j").size(), store_.Size());
}

TEST_F(CacheStoreTest, IdentityListingsAreSnapshotsOfOneInstant) {
  // A relist replaces every pod at once with a new resourceVersion: a listing taken meanwhile
  // (as /debug/cache takes them) must show one relist or the next, never a mix, and every pod.
  // Run under TSan to catch races; here it checks consistency.
  constexpr int kPods = 50;
  const auto relist = [&](int round) {
    std::vector<std::shared_ptr<const PodInfo>> pods;
    for (int i = 0; i < kPods; ++i) {
      pods.push_back(Pod("t", fmt::format("p{:02}", i), "j", "n1", std::to_string(round)));
    }
    store_.Replace(std::move(pods), std::to_string(round));
  };
  relist(0);
  std::atomic<bool> done{false};
  std::atomic<int> listings{0};
  std::atomic<int> inconsistencies{0};
  std::thread writer([&] {
    for (int round = 1; round <= 500; ++round) relist(round);
    done = true;
  });
  std::thread reader([&] {
    while (!done || listings == 0) {
      const std::vector<CachedObject> objects = CachedObjects(store_);
      ++listings;
      if (objects.size() != kPods) ++inconsistencies;
      for (const CachedObject& object : objects) {
        if (object.resource_version != objects.front().resource_version) ++inconsistencies;
      }
    }
  });
  writer.join();
  reader.join();
  EXPECT_GT(listings.load(), 0);
  EXPECT_EQ(inconsistencies.load(), 0);
  const std::vector<CachedObject> last = CachedObjects(store_);
  ASSERT_EQ(last.size(), static_cast<size_t>(kPods));
  EXPECT_EQ(last.front().name, "p00");
  EXPECT_EQ(last.back().resource_version, "500");
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::cache
