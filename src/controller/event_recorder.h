// EventRecorder: writes core/v1 Events about the objects the operator manages, as client-go's
// record.EventRecorder does, so `kubectl describe tpujob` and `kubectl get events` show what the
// operator decided and why.
//
// Record() never waits for the API server: it logs the event (one logfmt line, info for Normal
// and warn for Warning, so the logs alone tell the story even when events cannot be written)
// and queues it for a background thread that writes it. Events are best effort, like
// client-go's: a failed write is logged and counted, never retried beyond the retries the
// client already makes for transient errors, and when `max_pending` events are waiting a new
// one is dropped (and counted) rather than let memory grow while the API server is slow.
//
// Aggregation follows client-go's event correlator: the same (object uid, type, reason,
// message) recorded again within `dedupe_window` of its previous occurrence does not create a
// new Event but patches the existing one's count and lastTimestamp. If that Event is gone (the
// API server expires events after an hour by default), a fresh one is created.
//
// Timestamps (firstTimestamp/lastTimestamp) and the dedupe window use the injected Clock, taken
// when Record() is called, not when the write happens. Flush() and the destructor's bounded
// wait use real time: they wait for API calls, which no fake clock drives.
//
// Thread-safety: Record(), Flush() and stats() may be called concurrently from any thread.
// The destructor flushes what is pending (for at most `stop_timeout`; whatever is still queued
// then is dropped and counted) and joins the thread; it also waits for a write in flight,
// which the client's request timeout bounds.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <tuple>

#include "base/clock.h"
#include "kube/client.h"

namespace tpujob::controller {

// The object an event is about. `ns` is empty for a cluster-scoped object (a Node); its
// events then go to the "default" namespace, as kubectl and client-go expect.
struct ObjectRef {
  std::string api_version;  // "v1", "tpujob.dev/v1alpha1"
  std::string kind;         // "Pod", "Node", "TPUJob"
  std::string ns;
  std::string name;
  std::string uid;
};

enum class EventType { kNormal, kWarning };
std::string_view ToString(EventType type);  // "Normal", "Warning"

struct EventRecorderOptions {
  std::string component = "tpujob-operator";  // source.component and reportingComponent
  std::string instance;                       // reportingInstance; "" = this host's name
  size_t max_pending = 1000;                  // events waiting to be written; more are dropped
  Duration dedupe_window = std::chrono::minutes(10);
  // How long the destructor keeps writing pending events before it gives up on the rest.
  Duration stop_timeout = std::chrono::seconds(5);
  uint64_t seed = std::random_device{}();  // for the random suffix of event names
};

class EventRecorder {
 public:
  EventRecorder(kube::Client& client, EventRecorderOptions options = {},
                Clock& clock = Clock::Real());
  ~EventRecorder();

  EventRecorder(const EventRecorder&) = delete;
  EventRecorder& operator=(const EventRecorder&) = delete;

  // `reason` is a short UpperCamelCase word ("WorkerRestarted"); `message` is for humans. The
  // written event holds at most 128 bytes of the reason and 1024 of the message (events/v1's
  // limits) as valid UTF-8; the log line keeps both whole.
  void Record(const ObjectRef& object, EventType type, std::string reason, std::string message);

  // Blocks until every event recorded before the call was written, failed or dropped, or
  // `timeout` (real time) passed. Returns whether everything got through in time.
  bool Flush(Duration timeout);

  // Every recorded event ends up counted once in written, dropped or failed (or is pending).
  struct Stats {
    uint64_t recorded = 0;    // Record() calls
    uint64_t written = 0;     // events created or patched
    uint64_t aggregated = 0;  // of those written, the ones folded into an existing event
    uint64_t dropped = 0;     // the queue was full, or the recorder stopped before writing it
    uint64_t failed = 0;      // the API server refused or could not be reached
  };
  Stats stats() const;

 private:
  struct Pending {
    ObjectRef object;
    EventType type;
    std::string reason;
    std::string message;
    TimePoint at;
    WallTime wall_at;
  };
  // The event last written for one (object, type, reason, message). The object is named by
  // uid and by Kind/namespace/name, so a caller that knows no uid still aggregates per object.
  using AggregationKey = std::tuple<std::string, std::string, EventType, std::string, std::string>;
  struct Aggregate {
    std::string ns;
    std::string name;
    int64_t count = 0;
    TimePoint last_seen;
  };

  enum class Outcome { kCreated, kAggregated, kFailed };

  void Run();
  // Writes one event: a PATCH of the aggregate it belongs to, else a POST.
  Outcome Write(const Pending& event);
  Outcome Create(const Pending& event, AggregationKey key, const std::string& message);
  // Keeps aggregates_ bounded: drops expired entries, then the least recently seen.
  void MakeRoomForAggregate(TimePoint now);

  kube::Client& client_;
  const EventRecorderOptions options_;
  Clock& clock_;

  mutable std::mutex mu_;
  std::condition_variable work_;      // Record() or the destructor to the thread
  std::condition_variable progress_;  // the thread to Flush()
  std::deque<Pending> queue_;
  uint64_t accepted_ = 0;  // events queued so far
  uint64_t finished_ = 0;  // of those, written, failed or dropped at stop
  bool dropping_ = false;  // inside a burst of drops, already logged
  uint64_t burst_drops_ = 0;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point stop_deadline_;
  Stats stats_;

  // Thread-owned.
  std::mt19937_64 rng_;
  std::map<AggregationKey, Aggregate> aggregates_;

  std::thread thread_;  // last: started once everything above is ready
};

}  // namespace tpujob::controller
