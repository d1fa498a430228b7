// Reflector: keeps a Store in step with the API server by LIST then WATCH, as client-go's
// tools/cache/reflector.go does.
//
//   1. LIST every page (`page_size` items per request, each page decoded into projections as
//      it arrives so only one page of JSON is ever held; an expired continue token restarts the
//      list once) and Replace the store atomically; differences from the previous content go to
//      the handlers as synthetic add/update/delete events. HasSynced() turns true after the
//      first successful list.
//      With `watch_list` (client-go's WatchListClient), the state comes instead as the first
//      events of a watch (kube::WatchOptions::send_initial_events), served from the API server's
//      watch cache and decoded one object at a time: cheaper for the server than pages read
//      from etcd, and no page of JSON is ever held. The objects are collected until the
//      initial-events-end bookmark, then Replace the store as a LIST would, and the same
//      stream goes on as the watch of step 2. A watch list that fails before that bookmark (an
//      error, a broken stream, or the server's timeout ending it first) is followed, after the
//      backoff, by a LIST, as in client-go, so a state too large for one watch's timeout still
//      syncs; the next sync tries a watch list again. A server that refuses watch lists (400 or
//      422: an older server, or the WatchList feature off) is listed from then on.
//   2. WATCH from the list's resourceVersion with bookmarks, with a server timeout drawn at
//      random from [min_watch_timeout, max_watch_timeout] so many watches do not expire
//      together. Each ADDED/MODIFIED/DELETED event updates the store and then the handlers; a
//      BOOKMARK only advances the resourceVersion. When the server ends the watch normally, the
//      reflector re-watches at once from the last resourceVersion (after a backoff if the watch
//      ended within a second without a single event, rather than spin).
//   3. 410 Gone (from Watch() or as an ERROR event: the resourceVersion was compacted away)
//      means events were lost: go back to 1. Any other failure (transport error, 5xx, a broken
//      stream) re-watches from the last resourceVersion after a jittered exponential backoff
//      (800 ms doubling to 30 s, jitter 1.0, like client-go); failed lists back off the same
//      way. The backoff resets once a watch delivers events. A watch the client gives up as
//      silent (kube::Config::watch_idle_timeout: nothing at all arrived, a dead connection)
//      re-watches at once from the last resourceVersion; the watch timeouts must then be shorter
//      than that idle timeout, so that a healthy watch always ends or delivers in time.
//
// Objects that fail to decode are logged, counted in stats() and skipped; they never stop the
// reflector.
//
// Handlers run on the reflector's thread, in event order, after the store already reflects the
// event. They must be quick and must not block: enqueue a key into a work queue and return
// (reconcilers then read the store). Handlers added after Start() first receive an add for
// every object already stored. Handlers cannot be removed: whatever they capture must outlive
// the reflector (or the reflector must be stopped first).
//
// Lifetime: Start() spawns the thread; Stop() (also run by the destructor) cancels the open
// watch, interrupts a backoff wait and joins, so it returns promptly except while a LIST
// request is in flight (bounded by the client's request timeout). Time for backoff waits comes
// from the injected Clock, so tests drive it with FakeClock.
//
// Thread-safety: all public methods may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/backoff.h"
#include "base/clock.h"
#include "cache/objects.h"
#include "cache/store.h"
#include "kube/client.h"

namespace tpujob::cache {

struct ReflectorOptions {
  std::string name;            // for logs; defaults to the resource plural
  std::string ns;              // "" = all namespaces (or a cluster-scoped resource)
  std::string label_selector;  // passed to LIST and WATCH
  std::string field_selector;
  int64_t page_size = 500;  // LIST limit per request; 0 = everything in one answer
  // Sync by a watch list (kube::WatchOptions::send_initial_events) instead of LIST + WATCH,
  // falling back to LIST for good if the server refuses it. See step 1 above.
  bool watch_list = false;
  Duration min_watch_timeout = std::chrono::minutes(5);
  Duration max_watch_timeout = std::chrono::minutes(10);
  BackoffPolicy backoff{std::chrono::milliseconds(800), std::chrono::seconds(30), 2.0, 1.0};
  uint64_t seed = std::random_device{}();  // for backoff jitter and watch timeouts
};

template <typename T>
struct EventHandlers {
  using Ptr = std::shared_ptr<const T>;
  std::function<void(const Ptr& object)> on_add;
  std::function<void(const Ptr& old_object, const Ptr& new_object)> on_update;
  // The object's final state as the server reported it (or the last one stored).
  std::function<void(const Ptr& object)> on_delete;
};

struct ReflectorStats {
  uint64_t lists = 0;        // successful LISTs (each may span several pages)
  uint64_t watch_lists = 0;  // syncs completed by a watch list (the initial-events-end bookmark)
  uint64_t list_pages = 0;   // pages of the successful LISTs
  uint64_t list_failures = 0;
  uint64_t watches = 0;         // watches opened
  uint64_t watch_failures = 0;  // failed Watch() calls and broken streams
  uint64_t gone = 0;            // 410 answers that forced a relist
  uint64_t events = 0;          // ADDED/MODIFIED/DELETED applied
  // Of `events`: MODIFIED events applied without decoding, their digest showing that nothing
  // but volatile fields changed (a heartbeat; see NodeInfo::source_digest).
  uint64_t unchanged_events = 0;
  uint64_t bookmarks = 0;
  uint64_t decode_errors = 0;  // objects skipped because they did not decode
  // Watches given up because nothing (no event, bookmark or end) arrived within the client's
  // watch idle timeout: silently dead connections.
  uint64_t silent_watches = 0;
  // When the server was last heard from: a LIST done, a watch opened, an event or a bookmark.
  // A watch that stays open with none of these is either idle past the bookmark interval or
  // silently dead; the health check tells them apart by how long it lasts.
  TimePoint last_activity{};
};

template <typename T>
class Reflector {
 public:
  using Ptr = std::shared_ptr<const T>;

  // `client`, `store` and `clock` must outlive the reflector.
  Reflector(kube::Client& client, kube::Resource resource, Store<T>& store,
            ReflectorOptions options = {}, Clock& clock = Clock::Real());
  ~Reflector();

  Reflector(const Reflector&) = delete;
  Reflector& operator=(const Reflector&) = delete;

  // Registers handlers; replays the current content as adds when there is any.
  void AddEventHandlers(EventHandlers<T> handlers);

  // Starts the LIST/WATCH loop on its own thread. Call once.
  void Start();
  // Stops the loop and joins its thread. Idempotent.
  void Stop();

  // True once the first LIST is in the store.
  bool HasSynced() const { return synced_.load(std::memory_order_acquire); }
  // Blocks the caller (real time, at most `timeout`) until HasSynced() or Stop().
  bool WaitForSync(std::chrono::milliseconds timeout) const;

  // The resourceVersion of the last LIST, watch event or bookmark applied.
  std::string LastSyncResourceVersion() const;
  ReflectorStats stats() const;
  // What it lists and watches (name, namespace, selectors), as given (name defaulted).
  const ReflectorOptions& options() const { return options_; }

 private:
  enum class WatchOutcome { kRewatch, kBackoff, kRelist, kStopped };

  void Run();
  bool ListAndReplace();
  // Decodes one listed object onto `objects`; false (logged) if it does not decode.
  // `digest`: of the watch event it came in (0 for a listed one).
  bool DecodeInto(const Json& item, std::vector<Ptr>& objects, uint64_t digest = 0) const;
  // Replaces the store with a complete listing at `version` and tells the handlers what changed.
  void ReplaceAll(std::vector<Ptr> objects, std::string version);
  // Watches from the last resourceVersion; with `need_list`, a watch list that first streams
  // the whole state, and clears `need_list` once that state is in the store.
  WatchOutcome WatchOnce(bool& need_list);
  WatchOutcome HandleEvent(kube::WatchEvent& event, uint64_t digest);
  // Applies a MODIFIED event whose digest matches the stored object's source digest (only its
  // resourceVersion changes); false, doing nothing, when it does not match.
  bool ApplyUnchanged(const kube::UndecodedEvent& event);
  void ApplyUpsert(Ptr object);
  void ApplyDelete(const std::string& key, Ptr final_state);
  // Waits the next backoff delay on the clock; false if stopped meanwhile.
  bool WaitBackoff();
  bool stopping() const;

  kube::Client& client_;
  const kube::Resource resource_;
  Store<T>& store_;
  const ReflectorOptions options_;
  Clock& clock_;

  // Guards the loop's shared state below; wake_ interrupts backoff waits.
  mutable std::mutex mu_;
  mutable std::condition_variable wake_;
  bool stopping_ = false;
  std::unique_ptr<kube::WatchStream> stream_;  // the open watch, for Stop() to cancel
  std::string last_resource_version_;
  ReflectorStats stats_;

  // Held while the store changes and handlers run, so a handler added meanwhile sees each
  // object exactly once (in the replay or as an event).
  std::mutex handlers_mu_;
  std::vector<EventHandlers<T>> handlers_;

  // Touched only by the loop thread.
  Backoff backoff_;
  std::mt19937_64 rng_;
  uint64_t events_since_list_ = 0;
  bool watch_list_ = false;  // options_.watch_list, until the server refuses one
  // T's fields that may change without changing its projection; null for most types.
  const std::shared_ptr<const kube::VolatileFields> volatile_fields_;

  std::atomic<bool> synced_{false};
  std::mutex join_mu_;  // serialises joining thread_
  std::thread thread_;
};

// A store with the reflector that fills it: what a controller needs for one resource.
//
//   Informer<PodInfo> pods(client, kube::Resource::Pods());
//   AddPodIndexers(pods.store());
//   pods.AddEventHandlers({.on_add = ..., .on_update = ..., .on_delete = ...});
//   pods.Start();
//   pods.WaitForSync(std::chrono::seconds(30));
template <typename T>
class Informer {
 public:
  Informer(kube::Client& client, kube::Resource resource, ReflectorOptions options = {},
           Clock& clock = Clock::Real())
      : reflector_(client, std::move(resource), store_, std::move(options), clock) {}

  Store<T>& store() { return store_; }
  const Store<T>& store() const { return store_; }
  void AddEventHandlers(EventHandlers<T> handlers) {
    reflector_.AddEventHandlers(std::move(handlers));
  }
  void Start() { reflector_.Start(); }
  void Stop() { reflector_.Stop(); }
  bool HasSynced() const { return reflector_.HasSynced(); }
  bool WaitForSync(std::chrono::milliseconds timeout) const {
    return reflector_.WaitForSync(timeout);
  }
  std::string LastSyncResourceVersion() const { return reflector_.LastSyncResourceVersion(); }
  ReflectorStats stats() const { return reflector_.stats(); }
  const ReflectorOptions& options() const { return reflector_.options(); }

 private:
  Store<T> store_;  // declared first: the reflector (destroyed first) writes into it
  Reflector<T> reflector_;
};

extern template class Reflector<PodInfo>;
extern template class Reflector<NodeInfo>;
extern template class Reflector<TPUJobInfo>;
extern template class Reflector<WorkloadInfo>;

}  // namespace tpujob::cache
