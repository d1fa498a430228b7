// The reflector and store against a real kube-apiserver: a burst of changes, a relist forced by
// etcd compaction (410 Gone), and an API server killed and restarted mid-watch. The truth to
// compare with comes from kubectl, not from the client under test.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "cache/reflector.h"
#include "e2e_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

using kube::Json;
using kube::Resource;

// Pods stay Pending (no node matches), which is all the cache needs.
Json Pod(const std::string& name, const std::string& generation) {
  return {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", {{"name", name}, {"labels", {{"suite", "cache"}, {"generation", generation}}}}},
      {"spec",
       {{"nodeSelector", {{"no-such-node", "true"}}},
        {"containers", Json::array({{{"name", "c"}, {"image", "busybox"}}})}}}};
}

// name -> resourceVersion of the pods in `ns`, as kubectl sees them.
std::map<std::string, std::string> KubectlPods(const std::string& ns) {
  const auto listing = Kubectl("get pods -n " + ns + " -o json", false);
  std::map<std::string, std::string> pods;
  Json parsed = Json::parse(listing.output, nullptr, false);
  if (parsed.is_discarded()) return pods;
  for (const Json& item : parsed["items"]) {
    pods[item["metadata"]["name"]] = item["metadata"]["resourceVersion"];
  }
  return pods;
}

std::map<std::string, std::string> StorePods(const cache::Store<cache::PodInfo>& store) {
  std::map<std::string, std::string> pods;
  for (const auto& pod : store.List()) pods[pod->name] = pod->resource_version;
  return pods;
}

// Runs `count` operations spread over 8 threads; returns the number that succeeded.
int Parallel(int count, const std::function<bool(int)>& operation) {
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < count; i += 8) {
        if (operation(i)) ++ok;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  return ok;
}

// Creates pods <prefix>0..<prefix>count-1 in parallel; returns how many were created.
int CreatePods(kube::Client& client, const std::string& ns, const std::string& prefix, int count) {
  return Parallel(count, [&](int i) {
    return client.Create(Resource::Pods(), ns, Pod(prefix + std::to_string(i), "0")).has_value();
  });
}

// Pages of 100; `fast_backoff` shortens the reconnect backoff for tests that break the watch.
cache::ReflectorOptions OptionsFor(const std::string& ns, bool fast_backoff = false) {
  cache::ReflectorOptions options;
  options.name = "e2e-pods";
  options.ns = ns;
  options.page_size = 100;
  if (fast_backoff) {
    options.backoff.initial = std::chrono::milliseconds(200);
    options.backoff.max = std::chrono::seconds(2);
  }
  return options;
}

TEST(CacheE2E, StoreMatchesKubectlAfterBurstOf1000Changes) {
  TestNamespace ns("cache-burst");
  auto client = kube::NewClient(AdminConfig());
  ASSERT_EQ(CreatePods(*client, ns.name(), "p", 150), 150);

  cache::Informer<cache::PodInfo> pods(*client, Resource::Pods(), OptionsFor(ns.name()));
  std::atomic<int> adds{0}, updates{0}, deletes{0};
  pods.AddEventHandlers({.on_add = [&](const auto&) { ++adds; },
                         .on_update = [&](const auto&, const auto&) { ++updates; },
                         .on_delete = [&](const auto&) { ++deletes; }});
  pods.Start();
  ASSERT_TRUE(pods.WaitForSync(std::chrono::seconds(30)));
  EXPECT_EQ(pods.store().Size(), 150u);
  EXPECT_GE(pods.stats().list_pages, 2u);  // 150 pods in pages of 100

  // 1000 changes: 400 creates, 400 label updates, 200 deletes.
  const int created = CreatePods(*client, ns.name(), "q", 400);
  const int updated = Parallel(400, [&](int i) {
    const std::string name = i < 150 ? fmt::format("p{}", i) : fmt::format("q{}", i);
    return client
        ->Patch(Resource::Pods(), ns.name(), name, kube::PatchType::kMerge,
                Json{{"metadata", {{"labels", {{"generation", "1"}}}}}})
        .has_value();
  });
  const int deleted = Parallel(200, [&](int i) {
    kube::DeleteOptions options;
    options.grace_period_seconds = 0;
    return client->Delete(Resource::Pods(), ns.name(), fmt::format("q{}", 200 + i), options)
        .has_value();
  });
  ASSERT_EQ(created + updated + deleted, 1000);

  std::map<std::string, std::string> truth;
  ASSERT_TRUE(Eventually([&] {
    truth = KubectlPods(ns.name());
    return StorePods(pods.store()) == truth;
  })) << "store has "
      << pods.store().Size() << " pods, kubectl " << truth.size();
  EXPECT_EQ(truth.size(), 150u + 400u - 200u);
  EXPECT_EQ(adds.load(), 550);
  EXPECT_EQ(deletes.load(), 200);
  EXPECT_GE(updates.load(), 400);

  // The indexes and label selectors see the updates too.
  auto selector = cache::LabelSelector::Parse("generation=1");
  ASSERT_TRUE(selector);
  // p0..p149 and q150..q199 were relabelled and survive; q200..q399 were relabelled, then deleted.
  EXPECT_EQ(pods.store().List(*selector).size(), 200u);
}

TEST(CacheE2E, RelistsAfterCompactionMakesItsVersionGone) {
  TestNamespace ns("cache-gone");
  auto client = kube::NewClient(AdminConfig());
  ASSERT_EQ(CreatePods(*client, ns.name(), "g", 20), 20);
  cache::Informer<cache::PodInfo> pods(*client, Resource::Pods(),
                                       OptionsFor(ns.name(), /*fast_backoff=*/true));
  pods.Start();
  ASSERT_TRUE(pods.WaitForSync(std::chrono::seconds(30)));
  const auto lists_before = pods.stats().lists;

  // With the API server down (so the reflector can see nothing more, not even a bookmark),
  // compact etcd past every version handed out so far; the restarted server rebuilds its watch
  // cache from the compacted store, so the reflector's re-watch gets 410 and must relist.
  const std::string cluster = ClusterScript() + " --dir " + ClusterDir() + " ";
  const auto result = RunCommand(cluster + "kill-apiserver && " + cluster + "compact && " +
                                 cluster + "start-apiserver");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  ASSERT_EQ(Kubectl("delete pod g0 g1 -n " + ns.name() + " --grace-period=0 --force").exit_code, 0);
  ASSERT_TRUE(client->Create(Resource::Pods(), ns.name(), Pod("after", "0")));

  ASSERT_TRUE(Eventually([&] { return StorePods(pods.store()) == KubectlPods(ns.name()); },
                         std::chrono::seconds(60)));
  EXPECT_EQ(pods.store().Get(ns.name() + "/g0"), nullptr);
  EXPECT_NE(pods.store().Get(ns.name() + "/after"), nullptr);
  const auto stats = pods.stats();
  EXPECT_GT(stats.lists, lists_before) << "no relist happened";
  EXPECT_GE(stats.gone, 1u) << "the reflector never saw 410 Gone";
}

TEST(CacheE2E, NothingMissedWhenApiServerIsKilledMidWatch) {
  TestNamespace ns("cache-restart");
  auto client = kube::NewClient(AdminConfig());
  cache::Informer<cache::PodInfo> pods(*client, Resource::Pods(),
                                       OptionsFor(ns.name(), /*fast_backoff=*/true));
  pods.Start();
  ASSERT_TRUE(pods.WaitForSync(std::chrono::seconds(30)));

  // Writers keep going while the API server dies and comes back; failed writes are retried
  // by the client and otherwise simply not counted.
  std::atomic<bool> stop{false};
  std::atomic<int> written{0};
  std::thread writer([&] {
    for (int i = 0; !stop; ++i) {
      if (client->Create(Resource::Pods(), ns.name(), Pod(fmt::format("r{}", i), "0"))) {
        ++written;
      }
    }
  });
  ASSERT_TRUE(Eventually([&] { return written.load() >= 20; }));
  const auto restart = RunCommand(ClusterScript() + " restart-apiserver --dir " + ClusterDir());
  ASSERT_EQ(restart.exit_code, 0) << restart.output;
  const int after_restart = written.load();
  ASSERT_TRUE(Eventually([&] { return written.load() >= after_restart + 20; }));
  stop = true;
  writer.join();

  std::map<std::string, std::string> truth;
  ASSERT_TRUE(Eventually(
      [&] {
        truth = KubectlPods(ns.name());
        return StorePods(pods.store()) == truth;
      },
      std::chrono::seconds(60)))
      << "store " << pods.store().Size() << " vs kubectl " << truth.size();
  // A create whose answer was lost in the restart exists without being counted.
  EXPECT_GE(static_cast<int>(truth.size()), written.load());
  EXPECT_GE(pods.stats().watch_failures, 1u) << "the watch never broke: was the server restarted?";
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
