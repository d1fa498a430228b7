#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "cache/reflector.h"
#include "eventually.h"
#include "fake_client.h"

namespace tpujob::cache {
namespace TPUJOB_TEST_NS {

using kube::FakeClient;
using kube::Resource;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::ElementsAre;
using ::testing::UnorderedElementsAreArray;

constexpr auto kWait = seconds(10);  // bound on waiting for the reflector thread; never reached

Json PodJson(const std::string& ns, const std::string& name, const std::string& node = "node-1",
             const std::string& job = "job") {
  return Json{
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", {{"namespace", ns}, {"name", name}, {"labels", {{"tpujob.dev/job-name", job}}}}},
      {"spec", {{"nodeName", node}, {"containers", {{{"name", "trainer"}}}}}},
      {"status", {{"phase", "Running"}}}};
}

using testing_util::Eventually;

// Records handler calls as "add ns/name", "update ns/name", "delete ns/name".
class Recorder {
 public:
  EventHandlers<PodInfo> Handlers() {
    return EventHandlers<PodInfo>{
        .on_add = [this](const auto& pod) { Record("add " + pod->Key()); },
        .on_update =
            [this](const auto& old_pod, const auto& new_pod) {
              EXPECT_EQ(old_pod->Key(), new_pod->Key());
              EXPECT_NE(old_pod->resource_version, new_pod->resource_version);
              Record("update " + new_pod->Key());
            },
        .on_delete = [this](const auto& pod) { Record("delete " + pod->Key()); },
    };
  }

  // Waits (bounded) until at least `n` events were recorded.
  bool AwaitCount(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kWait, [&] { return events_.size() >= n; });
  }

  std::vector<std::string> events() const {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }
  std::vector<std::string> EventsSince(size_t n) const {
    std::lock_guard<std::mutex> lock(mu_);
    return std::vector<std::string>(events_.begin() + static_cast<ptrdiff_t>(n), events_.end());
  }

 private:
  void Record(std::string event) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(std::move(event));
    }
    cv_.notify_all();
  }
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> events_;
};

class CacheReflectorTest : public ::testing::Test {
 protected:
  CacheReflectorTest() { AddPodIndexers(store_); }

  ReflectorOptions Options() {
    ReflectorOptions options;
    options.seed = 42;
    return options;
  }

  void StartReflector(ReflectorOptions options) {
    reflector_ = std::make_unique<Reflector<PodInfo>>(fake_, pods_, store_, options, clock_);
    reflector_->AddEventHandlers(recorder_.Handlers());
    reflector_->Start();
  }
  void StartReflector() { StartReflector(Options()); }

  // Starts and waits for the first list and the watch that follows it.
  void StartAndSync() {
    StartReflector();
    ASSERT_TRUE(reflector_->WaitForSync(kWait));
    ASSERT_TRUE(fake_.AwaitWatchCalls(1));
  }

  std::vector<std::string> StoreKeys() const {
    std::vector<std::string> keys;
    for (const auto& pod : store_.List()) keys.push_back(pod->Key());
    std::sort(keys.begin(), keys.end());
    return keys;
  }
  std::vector<std::string> TruthKeys() const {
    std::vector<std::string> keys;
    for (const Json& pod : fake_.StoredAll(pods_)) {
      keys.push_back(pod["metadata"]["namespace"].get<std::string>() + "/" +
                     pod["metadata"]["name"].get<std::string>());
    }
    return keys;
  }

  const Resource pods_ = Resource::Pods();
  FakeClient fake_;
  FakeClock clock_;
  Store<PodInfo> store_;
  Recorder recorder_;
  Recorder late_recorder_;
  std::unique_ptr<Reflector<PodInfo>> reflector_;  // last: stopped before the rest goes
};

TEST_F(CacheReflectorTest, InitialPaginatedListFillsStoreAndSyncs) {
  for (int i = 0; i < 1234; ++i) {
    fake_.Upsert(pods_,
                 PodJson("team", "pod-" + std::to_string(i), "node-" + std::to_string(i % 7)));
  }
  const std::string list_version = fake_.CurrentResourceVersion();
  StartReflector();
  ASSERT_TRUE(reflector_->WaitForSync(kWait));
  EXPECT_TRUE(reflector_->HasSynced());
  EXPECT_EQ(store_.Size(), 1234u);
  EXPECT_EQ(store_.ByIndex(kPodsByJobIndex, "team/job").size(), 1234u);
  EXPECT_EQ(store_.ByIndex(kPodsByNodeIndex, "node-3").size(), 176u);
  EXPECT_EQ(reflector_->LastSyncResourceVersion(), list_version);

  const std::vector<kube::ListOptions> lists = fake_.list_calls();
  ASSERT_EQ(lists.size(), 3u);  // 500 + 500 + 234
  for (const kube::ListOptions& list : lists) EXPECT_EQ(list.limit, 500);
  EXPECT_TRUE(lists[0].continue_token.empty());
  EXPECT_FALSE(lists[1].continue_token.empty());
  EXPECT_FALSE(lists[2].continue_token.empty());
  EXPECT_EQ(reflector_->stats().list_pages, 3u);
  EXPECT_EQ(reflector_->stats().lists, 1u);
  ASSERT_TRUE(recorder_.AwaitCount(1234));
  EXPECT_EQ(recorder_.events().size(), 1234u);

  // Then a watch from the list's resourceVersion, with bookmarks and a spread timeout.
  ASSERT_TRUE(fake_.AwaitWatchCalls(1));
  const kube::WatchOptions watch = fake_.watch_calls()[0];
  EXPECT_EQ(watch.resource_version, list_version);
  EXPECT_TRUE(watch.allow_bookmarks);
  ASSERT_TRUE(watch.timeout_seconds.has_value());
  EXPECT_GE(*watch.timeout_seconds, 300);
  EXPECT_LE(*watch.timeout_seconds, 600);
}

TEST_F(CacheReflectorTest, ExpiredContinueTokenRestartsTheListOnce) {
  for (int i = 0; i < 1234; ++i) fake_.Upsert(pods_, PodJson("team", "pod-" + std::to_string(i)));
  fake_.FailListCall(2, kube::GoneError());  // the second page's continue token has expired
  StartReflector();
  ASSERT_TRUE(reflector_->WaitForSync(kWait));
  EXPECT_EQ(store_.Size(), 1234u);
  const std::vector<kube::ListOptions> lists = fake_.list_calls();
  ASSERT_EQ(lists.size(), 5u);  // page 1, the failed page 2, then pages 1-3 again
  EXPECT_TRUE(lists[2].continue_token.empty());
  EXPECT_EQ(lists[2].limit, 500);
  EXPECT_EQ(reflector_->stats().lists, 1u);
  EXPECT_EQ(reflector_->stats().list_pages, 3u);
  EXPECT_EQ(reflector_->stats().list_failures, 0u);
  ASSERT_TRUE(recorder_.AwaitCount(1234));
  EXPECT_EQ(recorder_.events().size(), 1234u);  // nothing from the abandoned page twice
}

TEST_F(CacheReflectorTest, FailedOrMalformedListBacksOffThenRelists) {
  fake_.Upsert(pods_, PodJson("team", "a"));
  fake_.FailNextList(kube::ApiError(500, "InternalError"));
  fake_.InjectListAnswer(Json{{"kind", "List"}, {"metadata", Json::object()}});  // no items
  StartReflector();
  ASSERT_TRUE(clock_.AwaitWaiters(1));
  EXPECT_FALSE(reflector_->HasSynced());
  clock_.Advance(seconds(2));
  ASSERT_TRUE(fake_.AwaitListCalls(2));
  ASSERT_TRUE(clock_.AwaitWaiters(1));
  EXPECT_FALSE(reflector_->HasSynced());
  EXPECT_EQ(reflector_->stats().list_failures, 2u);
  clock_.Advance(seconds(4));
  ASSERT_TRUE(reflector_->WaitForSync(kWait));
  EXPECT_THAT(StoreKeys(), ElementsAre("team/a"));
}

TEST_F(CacheReflectorTest, WatchEventsAppliedInOrder) {
  fake_.Upsert(pods_, PodJson("team", "a", "node-1"));
  fake_.Upsert(pods_, PodJson("team", "b", "node-1"));
  StartAndSync();
  ASSERT_TRUE(recorder_.AwaitCount(2));

  fake_.Upsert(pods_, PodJson("team", "c", "node-2"));               // ADDED
  fake_.Upsert(pods_, PodJson("team", "a", "node-2", "other-job"));  // MODIFIED: moved, relabelled
  fake_.Remove(pods_, "team", "b");                                  // DELETED
  fake_.Upsert(pods_, PodJson("team", "c", "node-3"));               // MODIFIED again
  ASSERT_TRUE(recorder_.AwaitCount(6));
  EXPECT_THAT(recorder_.EventsSince(2),
              ElementsAre("add team/c", "update team/a", "delete team/b", "update team/c"));
  EXPECT_THAT(StoreKeys(), ElementsAre("team/a", "team/c"));
  EXPECT_EQ(store_.Get("team/c")->node_name, "node-3");
  EXPECT_EQ(store_.ByIndex(kPodsByNodeIndex, "node-1").size(), 0u);
  EXPECT_EQ(store_.ByIndex(kPodsByNodeIndex, "node-2").size(), 1u);
  EXPECT_EQ(store_.ByIndex(kPodsByJobIndex, "team/other-job").size(), 1u);
  EXPECT_EQ(store_.ByIndex(kPodsByJobIndex, "team/job").size(), 1u);
  EXPECT_EQ(reflector_->LastSyncResourceVersion(), fake_.CurrentResourceVersion());
  // The store says which version it reflects: that of the last event, once it is applied.
  EXPECT_TRUE(Eventually([&] {
    return store_.ResourceVersion() == fake_.CurrentResourceVersion();
  })) << store_.ResourceVersion();
  EXPECT_EQ(reflector_->stats().events, 4u);
  EXPECT_EQ(fake_.watch_calls().size(), 1u);  // one watch did it all
}

TEST_F(CacheReflectorTest, BookmarkAdvancesResourceVersionWithoutTouchingStore) {
  fake_.Upsert(pods_, PodJson("team", "a"));
  StartAndSync();
  ASSERT_TRUE(recorder_.AwaitCount(1));
  const auto before = store_.Get("team/a");

  fake_.SendBookmark(pods_, "5000");
  ASSERT_TRUE(Eventually([&] { return reflector_->LastSyncResourceVersion() == "5000"; }));
  EXPECT_TRUE(Eventually([&] { return store_.ResourceVersion() == "5000"; }))
      << store_.ResourceVersion();
  EXPECT_EQ(store_.Get("team/a"), before);  // the very same snapshot
  EXPECT_EQ(store_.Size(), 1u);
  EXPECT_EQ(recorder_.events().size(), 1u);
  EXPECT_EQ(reflector_->stats().bookmarks, 1u);

  // The server ends the watch (its timeout): the reflector re-watches at once, from the bookmark.
  fake_.EndWatches(pods_);
  ASSERT_TRUE(fake_.AwaitWatchCalls(2));
  EXPECT_EQ(fake_.watch_calls()[1].resource_version, "5000");
  EXPECT_EQ(fake_.list_calls().size(), 1u);  // no relist
}

TEST_F(CacheReflectorTest, WatchEndingAtOnceWithNothingInItBacksOff) {
  StartAndSync();
  fake_.EndWatches(pods_);  // zero events, zero time: a misbehaving server, not a timeout
  ASSERT_TRUE(clock_.AwaitWaiters(1));
  EXPECT_EQ(fake_.watch_calls().size(), 1u);
  clock_.Advance(seconds(2));
  ASSERT_TRUE(fake_.AwaitWatchCalls(2));
  EXPECT_EQ(fake_.list_calls().size(), 1u);
  EXPECT_EQ(reflector_->stats().watch_failures, 1u);
}

TEST_F(CacheReflectorTest, GoneDuringWatchRelistsAndReportsWhatChangedWhileDisconnected) {
  fake_.Upsert(pods_, PodJson("team", "a"));
  fake_.Upsert(pods_, PodJson("team", "b"));
  fake_.Upsert(pods_, PodJson("team", "c"));
  StartAndSync();
  fake_.Upsert(pods_, PodJson("team", "live"));  // a watch event, so the watch was healthy
  ASSERT_TRUE(recorder_.AwaitCount(4));

  // Changes the reflector never hears about, then the history is compacted away.
  fake_.Remove(pods_, "team", "b", /*notify=*/false);
  fake_.Upsert(pods_, PodJson("team", "d"), /*notify=*/false);
  fake_.Upsert(pods_, PodJson("team", "a", "node-9"), /*notify=*/false);
  fake_.Compact();
  fake_.SendGone(pods_);

  ASSERT_TRUE(recorder_.AwaitCount(7));
  EXPECT_THAT(recorder_.EventsSince(4),
              UnorderedElementsAreArray({"add team/d", "update team/a", "delete team/b"}));
  EXPECT_EQ(StoreKeys(), TruthKeys());
  EXPECT_EQ(store_.Get("team/a")->node_name, "node-9");
  EXPECT_EQ(store_.ByIndex(kPodsByNodeIndex, "node-9").size(), 1u);
  EXPECT_EQ(reflector_->stats().gone, 1u);
  EXPECT_EQ(reflector_->stats().lists, 2u);
  ASSERT_TRUE(fake_.AwaitWatchCalls(2));
  EXPECT_EQ(fake_.watch_calls()[1].resource_version, fake_.CurrentResourceVersion());
  EXPECT_EQ(reflector_->LastSyncResourceVersion(), fake_.CurrentResourceVersion());
}

TEST_F(CacheReflectorTest, GoneFromWatchCallRightAfterListBacksOffThenRelists) {
  fake_.Upsert(pods_, PodJson("team", "a"));
  fake_.FailNextWatch(kube::GoneError());
  StartAndSync();
  // A 410 with no event since the list: relist, but only after a backoff delay, so a
  // misbehaving server cannot make the reflector spin.
  ASSERT_TRUE(clock_.AwaitWaiters(1));
  EXPECT_EQ(fake_.list_calls().size(), 1u);
  fake_.Upsert(pods_, PodJson("team", "b"), /*notify=*/false);
  clock_.Advance(seconds(2));  // the first delay is within [0.8s, 1.6s]
  ASSERT_TRUE(fake_.AwaitWatchCalls(2));
  EXPECT_EQ(fake_.list_calls().size(), 2u);
  ASSERT_TRUE(recorder_.AwaitCount(2));
  EXPECT_THAT(recorder_.events(), ElementsAre("add team/a", "add team/b"));
  EXPECT_EQ(reflector_->stats().gone, 1u);
}

TEST_F(CacheReflectorTest, CompactedResourceVersionOnRewatchRelists) {
  fake_.Upsert(pods_, PodJson("team", "a"));
  StartAndSync();
  fake_.Upsert(pods_, PodJson("team", "b"));
  ASSERT_TRUE(recorder_.AwaitCount(2));
  const std::string seen = fake_.CurrentResourceVersion();
  // The connection breaks; while the reflector backs off, history is compacted past it.
  fake_.BreakWatches(pods_);
  ASSERT_TRUE(clock_.AwaitWaiters(1));
  fake_.Remove(pods_, "team", "a");
  fake_.Compact();
  clock_.Advance(seconds(2));
  // The re-watch from `seen` gets an ERROR 410 event, and the reflector relists.
  ASSERT_TRUE(recorder_.AwaitCount(3));
  EXPECT_EQ(recorder_.events().back(), "delete team/a");
  EXPECT_EQ(fake_.watch_calls()[1].resource_version, seen);
  EXPECT_EQ(StoreKeys(), TruthKeys());
  EXPECT_EQ(reflector_->stats().lists, 2u);
}

TEST_F(CacheReflectorTest, TransientErrorBacksOffThenRewatchesFromLastResourceVersion) {
  fake_.Upsert(pods_, PodJson("team", "a"));
  StartAndSync();
  fake_.Upsert(pods_, PodJson("team", "b"));
  ASSERT_TRUE(recorder_.AwaitCount(2));
  const std::string last = fake_.CurrentResourceVersion();
  ASSERT_EQ(reflector_->LastSyncResourceVersion(), last);

  fake_.BreakWatches(pods_, kube::TransportError("connection reset by peer"));
  ASSERT_TRUE(clock_.AwaitWaiters(1));  // parked in the backoff
  clock_.Advance(milliseconds(799));    // below the smallest possible first delay
  EXPECT_EQ(fake_.watch_calls().size(), 1u);
  // Meanwhile an event the new watch must replay from history.
  fake_.Upsert(pods_, PodJson("team", "c"));
  clock_.Advance(milliseconds(801));  // 1.6s in all: the largest possible first delay
  ASSERT_TRUE(fake_.AwaitWatchCalls(2));
  EXPECT_EQ(fake_.watch_calls()[1].resource_version, last);
  ASSERT_TRUE(recorder_.AwaitCount(3));
  EXPECT_EQ(recorder_.events().back(), "add team/c");
  EXPECT_EQ(fake_.list_calls().size(), 1u);  // no relist for a transient error
  EXPECT_EQ(reflector_->stats().watch_failures, 1u);

  // A non-410 ERROR event is transient too.
  fake_.SendError(pods_, kube::ApiError(500, "InternalError", "etcd leader changed"));
  ASSERT_TRUE(clock_.AwaitWaiters(1));
  clock_.Advance(seconds(2));
  ASSERT_TRUE(fake_.AwaitWatchCalls(3));
  EXPECT_EQ(fake_.watch_calls()[2].resource_version, fake_.CurrentResourceVersion());
  EXPECT_EQ(fake_.list_calls().size(), 1u);
}

TEST_F(CacheReflectorTest, SilentWatchIsReopenedAtOnceFromTheLastResourceVersion) {
  fake_.Upsert(pods_, PodJson("team", "a"));
  StartAndSync();
  const std::string last = fake_.CurrentResourceVersion();
  // The client gave the watch up: nothing arrived for its idle timeout (a dead connection).
  fake_.BreakWatches(pods_, kube::Error::Silent(std::chrono::seconds(50)));
  // No backoff: the server did nothing wrong. The clock is never advanced here.
  ASSERT_TRUE(fake_.AwaitWatchCalls(2));
  EXPECT_EQ(fake_.watch_calls()[1].resource_version, last);
  EXPECT_EQ(fake_.list_calls().size(), 1u);  // nothing lost, no relist
  EXPECT_EQ(reflector_->stats().silent_watches, 1u);
  EXPECT_EQ(reflector_->stats().watch_failures, 0u);
  // And it keeps working.
  fake_.Upsert(pods_, PodJson("team", "b"));
  ASSERT_TRUE(recorder_.AwaitCount(2));
  EXPECT_EQ(recorder_.events().back(), "add team/b");
}

TEST_F(CacheReflectorTest, BackoffGrowsWhileFailuresRepeat) {
  ReflectorOptions options = Options();
  options.backoff.jitter = 0;  // exact delays: 800ms, 1.6s, 3.2s
  fake_.FailNextList(kube::TransportError("connection refused"));
  fake_.FailNextWatch(kube::TransportError("connection refused"), 2);
  StartReflector(options);

  ASSERT_TRUE(fake_.AwaitListCalls(1));
  ASSERT_TRUE(clock_.AwaitWaiters(1));
  EXPECT_FALSE(reflector_->HasSynced());
  clock_.Advance(milliseconds(800));
  ASSERT_TRUE(reflector_->WaitForSync(kWait));  // the second list worked
  ASSERT_TRUE(fake_.AwaitWatchCalls(1));        // and the first watch failed
  ASSERT_TRUE(clock_.AwaitWaiters(1));
  clock_.Advance(milliseconds(1599));
  EXPECT_EQ(fake_.watch_calls().size(), 1u);
  clock_.Advance(milliseconds(1));
  ASSERT_TRUE(fake_.AwaitWatchCalls(2));  // failed again
  ASSERT_TRUE(clock_.AwaitWaiters(1));
  clock_.Advance(milliseconds(3199));
  EXPECT_EQ(fake_.watch_calls().size(), 2u);
  clock_.Advance(milliseconds(1));
  ASSERT_TRUE(fake_.AwaitWatchCalls(3));
  EXPECT_EQ(fake_.OpenWatches(pods_), 1);
  EXPECT_EQ(reflector_->stats().list_failures, 1u);
  EXPECT_EQ(reflector_->stats().watch_failures, 2u);
}

TEST_F(CacheReflectorTest, StopDuringBlockedWatchReturnsPromptly) {
  fake_.Upsert(pods_, PodJson("team", "a"));
  StartAndSync();
  ASSERT_EQ(fake_.OpenWatches(pods_), 1);
  const auto start = std::chrono::steady_clock::now();
  reflector_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(2));
  EXPECT_EQ(fake_.OpenWatches(pods_), 0);  // the stream was cancelled and closed
  reflector_->Stop();                      // idempotent
  EXPECT_EQ(fake_.watch_calls().size(), 1u);
}

TEST_F(CacheReflectorTest, ConcurrentStopsBothReturn) {
  // A signal-handling thread and the shutdown path may stop the same reflector at once; both
  // calls must return (joining one thread twice would hang or crash).
  fake_.Upsert(pods_, PodJson("team", "a"));
  StartAndSync();
  std::atomic<int> returned{0};
  std::thread first([&] {
    reflector_->Stop();
    ++returned;
  });
  std::thread second([&] {
    reflector_->Stop();
    ++returned;
  });
  first.join();
  second.join();
  EXPECT_EQ(returned.load(), 2);
  EXPECT_EQ(fake_.OpenWatches(pods_), 0);
}

TEST_F(CacheReflectorTest, StopDuringBackoffReturnsWithoutTimePassing) {
  fake_.FailNextList(kube::TransportError("connection refused"));
  StartReflector();
  ASSERT_TRUE(clock_.AwaitWaiters(1));
  reflector_.reset();  // the destructor stops and joins
  EXPECT_EQ(fake_.list_calls().size(), 1u);
}

TEST_F(CacheReflectorTest, HandlersAddedLaterReplayTheStore) {
  fake_.Upsert(pods_, PodJson("team", "a"));
  fake_.Upsert(pods_, PodJson("team", "b"));
  StartAndSync();
  Recorder& late = late_recorder_;
  reflector_->AddEventHandlers(late.Handlers());
  EXPECT_THAT(late.events(), UnorderedElementsAreArray({"add team/a", "add team/b"}));
  fake_.Remove(pods_, "team", "a");
  ASSERT_TRUE(late.AwaitCount(3));
  EXPECT_EQ(late.events().back(), "delete team/a");
}

TEST_F(CacheReflectorTest, UndecodableObjectsAreSkipped) {
  fake_.Upsert(pods_, PodJson("team", "good"));
  Json bad = PodJson("team", "bad");
  bad["spec"]["containers"] = "not a list";
  fake_.Upsert(pods_, bad);
  StartAndSync();
  EXPECT_THAT(StoreKeys(), ElementsAre("team/good"));
  EXPECT_EQ(reflector_->stats().decode_errors, 1u);

  Json bad_update = PodJson("team", "good");
  bad_update["status"]["conditions"] = 7;
  fake_.Upsert(pods_, bad_update);
  fake_.Upsert(pods_, PodJson("team", "next"));
  ASSERT_TRUE(recorder_.AwaitCount(2));
  EXPECT_THAT(recorder_.events(), ElementsAre("add team/good", "add team/next"));
  EXPECT_EQ(reflector_->stats().decode_errors, 2u);
  EXPECT_EQ(reflector_->LastSyncResourceVersion(), fake_.CurrentResourceVersion());
  // A DELETED whose final state does not decode still removes the object.
  fake_.Remove(pods_, "team", "bad");  // never stored: nothing to report
  bad_update["metadata"]["name"] = "next";
  fake_.Upsert(pods_, bad_update, /*notify=*/false);
  fake_.Remove(pods_, "team", "next");
  ASSERT_TRUE(recorder_.AwaitCount(3));
  EXPECT_EQ(recorder_.events().back(), "delete team/next");
  EXPECT_THAT(StoreKeys(), ElementsAre("team/good"));
}

TEST_F(CacheReflectorTest, PassesNamespaceSelectorsAndTimeoutToTheServer) {
  fake_.Upsert(pods_, PodJson("team-a", "x", "node-1", "j1"));
  fake_.Upsert(pods_, PodJson("team-a", "y", "node-1", "j2"));
  fake_.Upsert(pods_, PodJson("team-b", "x", "node-1", "j1"));
  ReflectorOptions options = Options();
  options.ns = "team-a";
  options.label_selector = "tpujob.dev/job-name=j1";
  options.field_selector = "spec.nodeName=node-1";
  options.page_size = 0;
  options.min_watch_timeout = seconds(42);
  options.max_watch_timeout = seconds(42);
  StartReflector(options);
  ASSERT_TRUE(reflector_->WaitForSync(kWait));
  EXPECT_THAT(StoreKeys(), ElementsAre("team-a/x"));
  ASSERT_TRUE(fake_.AwaitWatchCalls(1));
  const kube::ListOptions list = fake_.list_calls()[0];
  EXPECT_EQ(list.label_selector, "tpujob.dev/job-name=j1");
  EXPECT_EQ(list.field_selector, "spec.nodeName=node-1");
  EXPECT_EQ(list.limit, 0);
  const kube::WatchOptions watch = fake_.watch_calls()[0];
  EXPECT_EQ(watch.label_selector, "tpujob.dev/job-name=j1");
  EXPECT_EQ(watch.field_selector, "spec.nodeName=node-1");
  EXPECT_EQ(watch.timeout_seconds, 42);
}

// --- Watch lists (ReflectorOptions::watch_list) -------------------------------------------------

TEST_F(CacheReflectorTest, WatchListFillsTheStoreWithoutAListAndItsStreamGoesOn) {
  for (int i = 0; i < 1234; ++i) {
    fake_.Upsert(pods_,
                 PodJson("team", "pod-" + std::to_string(i), "node-" + std::to_string(i % 7)));
  }
  const std::string version = fake_.CurrentResourceVersion();
  ReflectorOptions options = Options();
  options.watch_list = true;
  StartReflector(options);
  ASSERT_TRUE(reflector_->WaitForSync(kWait));
  EXPECT_EQ(store_.Size(), 1234u);
  EXPECT_EQ(store_.ByIndex(kPodsByNodeIndex, "node-3").size(), 176u);
  EXPECT_EQ(reflector_->LastSyncResourceVersion(), version);
  EXPECT_EQ(store_.ResourceVersion(), version);
  EXPECT_TRUE(fake_.list_calls().empty());
  ASSERT_EQ(fake_.watch_calls().size(), 1u);
  const kube::WatchOptions watch = fake_.watch_calls()[0];
  EXPECT_TRUE(watch.send_initial_events);
  EXPECT_TRUE(watch.allow_bookmarks);
  EXPECT_EQ(watch.resource_version, "");  // a consistent read of the current state
  ASSERT_TRUE(recorder_.AwaitCount(1234));
  EXPECT_EQ(reflector_->stats().watch_lists, 1u);
  EXPECT_EQ(reflector_->stats().lists, 0u);
  EXPECT_EQ(reflector_->stats().events, 0u);  // the initial state is not counted as events

  // The same stream then carries the changes.
  fake_.Upsert(pods_, PodJson("team", "new"));
  fake_.Remove(pods_, "team", "pod-7");
  ASSERT_TRUE(recorder_.AwaitCount(1236));
  EXPECT_THAT(recorder_.EventsSince(1234), ElementsAre("add team/new", "delete team/pod-7"));
  EXPECT_EQ(fake_.watch_calls().size(), 1u);
  EXPECT_EQ(StoreKeys(), TruthKeys());
}

TEST_F(CacheReflectorTest, WatchListBrokenBeforeItsEndIsFollowedByAListThenTriedAgain) {
  for (int i = 0; i < 10; ++i) fake_.Upsert(pods_, PodJson("team", "pod-" + std::to_string(i)));
  fake_.BreakNextWatchListAfter(4);
  ReflectorOptions options = Options();
  options.watch_list = true;
  StartReflector(options);
  ASSERT_TRUE(clock_.AwaitWaiters(1));  // the backoff after the broken stream
  EXPECT_FALSE(reflector_->HasSynced());
  EXPECT_EQ(store_.Size(), 0u);  // nothing half-listed reaches the store
  EXPECT_TRUE(recorder_.events().empty());
  fake_.Remove(pods_, "team", "pod-0", /*notify=*/false);
  clock_.Advance(seconds(2));
  // As client-go does, progress over retrying: this sync is a paged LIST, then a plain watch.
  ASSERT_TRUE(reflector_->WaitForSync(kWait));
  EXPECT_EQ(StoreKeys(), TruthKeys());
  EXPECT_EQ(fake_.list_calls().size(), 1u);
  ASSERT_TRUE(fake_.AwaitWatchCalls(2));
  EXPECT_FALSE(fake_.watch_calls()[1].send_initial_events);
  EXPECT_EQ(fake_.watch_calls()[1].resource_version, reflector_->LastSyncResourceVersion());
  ASSERT_TRUE(recorder_.AwaitCount(9));
  EXPECT_EQ(recorder_.events().size(), 9u);  // each object once
  EXPECT_EQ(reflector_->stats().watch_failures, 1u);
  EXPECT_EQ(reflector_->stats().watch_lists, 0u);

  // The next sync (after a 410) tries a watch list again.
  fake_.Upsert(pods_, PodJson("team", "live"));
  ASSERT_TRUE(recorder_.AwaitCount(10));
  fake_.Compact();
  fake_.SendGone(pods_);
  ASSERT_TRUE(fake_.AwaitWatchCalls(3));
  EXPECT_TRUE(fake_.watch_calls()[2].send_initial_events);
  EXPECT_TRUE(Eventually([&] { return reflector_->stats().watch_lists == 1; }));
  EXPECT_EQ(fake_.list_calls().size(), 1u);
  EXPECT_EQ(StoreKeys(), TruthKeys());
}

TEST_F(CacheReflectorTest, ServerRefusingWatchListsIsListedFromThenOn) {
  fake_.Upsert(pods_, PodJson("team", "a"));
  fake_.set_serve_watch_lists(false);
  ReflectorOptions options = Options();
  options.watch_list = true;
  StartReflector(options);
  ASSERT_TRUE(reflector_->WaitForSync(kWait));
  EXPECT_THAT(StoreKeys(), ElementsAre("team/a"));
  ASSERT_TRUE(fake_.AwaitWatchCalls(2));
  EXPECT_TRUE(fake_.watch_calls()[0].send_initial_events);  // refused with 422
  EXPECT_FALSE(fake_.watch_calls()[1].send_initial_events);
  EXPECT_EQ(fake_.watch_calls()[1].resource_version, reflector_->LastSyncResourceVersion());
  EXPECT_EQ(fake_.list_calls().size(), 1u);
  EXPECT_EQ(reflector_->stats().watch_failures, 0u);  // no backoff for a refusal

  // A later relist lists at once, without asking for a watch list again.
  fake_.Upsert(pods_, PodJson("team", "b"));
  ASSERT_TRUE(recorder_.AwaitCount(2));
  fake_.Remove(pods_, "team", "a", /*notify=*/false);
  fake_.Compact();
  fake_.SendGone(pods_);
  ASSERT_TRUE(recorder_.AwaitCount(3));
  EXPECT_EQ(recorder_.events().back(), "delete team/a");
  ASSERT_TRUE(fake_.AwaitWatchCalls(3));
  EXPECT_FALSE(fake_.watch_calls()[2].send_initial_events);
  EXPECT_EQ(fake_.list_calls().size(), 2u);
}

TEST_F(CacheReflectorTest, GoneWithWatchListsStreamsTheStateAgainAndReportsWhatChanged) {
  fake_.Upsert(pods_, PodJson("team", "a"));
  fake_.Upsert(pods_, PodJson("team", "b"));
  ReflectorOptions options = Options();
  options.watch_list = true;
  StartReflector(options);
  ASSERT_TRUE(reflector_->WaitForSync(kWait));
  fake_.Upsert(pods_, PodJson("team", "live"));
  ASSERT_TRUE(recorder_.AwaitCount(3));

  fake_.Remove(pods_, "team", "b", /*notify=*/false);
  fake_.Upsert(pods_, PodJson("team", "c"), /*notify=*/false);
  fake_.Upsert(pods_, PodJson("team", "a", "node-9"), /*notify=*/false);
  fake_.Compact();
  fake_.SendGone(pods_);

  ASSERT_TRUE(recorder_.AwaitCount(6));
  EXPECT_THAT(recorder_.EventsSince(3),
              UnorderedElementsAreArray({"add team/c", "update team/a", "delete team/b"}));
  EXPECT_EQ(StoreKeys(), TruthKeys());
  ASSERT_EQ(fake_.watch_calls().size(), 2u);
  EXPECT_TRUE(fake_.watch_calls()[1].send_initial_events);
  EXPECT_TRUE(fake_.list_calls().empty());
  EXPECT_EQ(reflector_->stats().watch_lists, 2u);
  EXPECT_EQ(reflector_->LastSyncResourceVersion(), fake_.CurrentResourceVersion());
}

TEST(CacheInformerTest, NodesSyncAndFollowEvents) {
  FakeClient fake;
  FakeClock clock;
  const Resource nodes = Resource::Nodes();
  fake.Upsert(nodes, Json{{"metadata", {{"name", "n1"}}}});
  ReflectorOptions options;
  options.seed = 1;
  Informer<NodeInfo> informer(fake, nodes, options, clock);
  AddNodeIndexers(informer.store());
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> seen;
  informer.AddEventHandlers(EventHandlers<NodeInfo>{
      .on_add = {},
      .on_update =
          [&](const auto&, const auto& node) {
            std::lock_guard<std::mutex> lock(mu);
            seen.push_back(node->name + (node->unschedulable ? " cordoned" : ""));
            cv.notify_all();
          },
      .on_delete = {},
  });
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(kWait));
  ASSERT_TRUE(fake.AwaitWatchCalls(1));
  fake.Upsert(nodes, Json{{"metadata", {{"name", "n1"}}}, {"spec", {{"unschedulable", true}}}});
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, kWait, [&] { return !seen.empty(); }));
  EXPECT_THAT(seen, ElementsAre("n1 cordoned"));
  EXPECT_TRUE(informer.store().Get("n1")->unschedulable);
}

Json NodeWithHeartbeat(const std::string& heartbeat, const std::string& ready) {
  return Json{{"metadata",
               {{"name", "n1"}, {"managedFields", {{{"manager", "kwok"}, {"time", heartbeat}}}}}},
              {"status",
               {{"conditions",
                 {{{"type", "Ready"},
                   {"status", ready},
                   {"lastHeartbeatTime", heartbeat},
                   {"lastTransitionTime", "2026-11-29T07:00:00Z"}}}}}}};
}

// Heartbeats (only times that nothing reads change) are applied from their digest without
// decoding; every other change is decoded, a change back to an earlier state included.
TEST(CacheInformerTest, NodeHeartbeatsAreAppliedUndecodedAndChangesStillDecoded) {
  FakeClient fake;
  FakeClock clock;
  const Resource nodes = Resource::Nodes();
  fake.Upsert(nodes, NodeWithHeartbeat("2026-11-29T08:00:00Z", "True"));
  ReflectorOptions options;
  options.seed = 1;
  Informer<NodeInfo> informer(fake, nodes, options, clock);
  std::atomic<int> updates{0};
  informer.AddEventHandlers(EventHandlers<NodeInfo>{
      .on_add = {},
      .on_update = [&](const auto&, const auto&) { ++updates; },
      .on_delete = {},
  });
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(kWait));
  ASSERT_TRUE(fake.AwaitWatchCalls(1));
  ASSERT_TRUE(fake.watch_calls()[0].volatile_fields != nullptr);

  // Writes `node` and waits until the store holds its resourceVersion.
  auto write = [&](const Json& node) {
    fake.Upsert(nodes, node);
    const std::string version =
        fake.Stored(nodes, "", "n1")->at("metadata").at("resourceVersion").get<std::string>();
    EXPECT_TRUE(Eventually([&] {
      auto stored = informer.store().Get("n1");
      return stored && stored->resource_version == version;
    })) << version;
  };

  write(NodeWithHeartbeat("2026-11-29T08:00:10Z", "True"));  // stored from a LIST: decoded
  EXPECT_EQ(informer.stats().unchanged_events, 0u);
  const uint64_t digest = informer.store().Get("n1")->source_digest;
  EXPECT_NE(digest, 0u);

  write(NodeWithHeartbeat("2026-11-29T08:00:20Z", "True"));  // a heartbeat
  EXPECT_EQ(informer.stats().unchanged_events, 1u);
  EXPECT_EQ(informer.store().Get("n1")->source_digest, digest);
  EXPECT_EQ(informer.store().Get("n1")->ready, ConditionStatus::kTrue);

  write(NodeWithHeartbeat("2026-11-29T08:00:30Z", "False"));  // a change
  EXPECT_EQ(informer.stats().unchanged_events, 1u);
  EXPECT_EQ(informer.store().Get("n1")->ready, ConditionStatus::kFalse);

  write(NodeWithHeartbeat("2026-11-29T08:00:40Z", "True"));  // back to the first state
  EXPECT_EQ(informer.stats().unchanged_events, 1u);
  EXPECT_EQ(informer.store().Get("n1")->ready, ConditionStatus::kTrue);
  EXPECT_EQ(informer.store().Get("n1")->source_digest, digest);

  write(NodeWithHeartbeat("2026-11-29T08:00:50Z", "True"));  // a heartbeat again
  EXPECT_EQ(informer.stats().unchanged_events, 2u);
  EXPECT_EQ(informer.stats().events, 5u);
  EXPECT_EQ(informer.stats().decode_errors, 0u);
  EXPECT_EQ(updates.load(), 5);
  EXPECT_EQ(informer.LastSyncResourceVersion(),
            fake.Stored(nodes, "", "n1")->at("metadata").at("resourceVersion").get<std::string>());
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::cache
