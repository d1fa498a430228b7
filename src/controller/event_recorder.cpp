#include "controller/event_recorder.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "base/logging.h"
#include "base/utf8.h"
#include "cache/objects.h"

namespace tpujob::controller {
namespace {

// events/v1 limits: a note (message) of 1 KiB, a reason and a reportingInstance of 128
// characters, and an object name, like any, of 253.
constexpr size_t kMaxMessageBytes = 1024;
constexpr size_t kMaxReasonBytes = 128;
constexpr size_t kMaxInstanceBytes = 128;
constexpr size_t kMaxNameBytes = 253;
constexpr size_t kNameSuffixBytes = 17;  // ".<16 hex digits>"
// As client-go's correlator cache: enough for every distinct event a busy operator emits
// within the dedupe window, small enough not to matter.
constexpr size_t kMaxAggregates = 4096;

// Where events about cluster-scoped objects go, as client-go does.
constexpr std::string_view kClusterScopedEventNamespace = "default";

std::string HostName() {
  std::array<char, 256> buffer{};
  if (gethostname(buffer.data(), buffer.size() - 1) == 0 && buffer[0] != '\0') {
    return std::string(buffer.data());
  }
  const char* from_environment = std::getenv("HOSTNAME");
  return from_environment != nullptr ? std::string(from_environment) : std::string("unknown");
}

EventRecorderOptions WithDefaults(EventRecorderOptions options) {
  if (options.instance.empty()) options.instance = HostName();
  options.instance = ValidUtf8(options.instance, kMaxInstanceBytes);
  return options;
}

// "Pod/team/llm-worker-0", or "Node/node-1" for a cluster-scoped object: the form the log line
// and the aggregation key use.
std::string ObjectText(const ObjectRef& object) {
  if (object.ns.empty()) return object.kind + "/" + object.name;
  return object.kind + "/" + object.ns + "/" + object.name;
}

}  // namespace

std::string_view ToString(EventType type) {
  return type == EventType::kWarning ? "Warning" : "Normal";
}

EventRecorder::EventRecorder(kube::Client& client, EventRecorderOptions options, Clock& clock)
    : client_(client),
      options_(WithDefaults(std::move(options))),
      clock_(clock),
      rng_(options_.seed),
      thread_([this] { Run(); }) {}

EventRecorder::~EventRecorder() {
  uint64_t unwritten = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    stop_deadline_ = std::chrono::steady_clock::now() + options_.stop_timeout;
    unwritten = accepted_ - finished_;
  }
  work_.notify_all();
  if (unwritten > 0) {
    // Says why shutdown may take a moment: a slow API server holds it up to stop_timeout.
    log::Info(
        "writing pending events before stopping",
        {{"pending", unwritten},
         {"timeout_ms",
          std::chrono::duration_cast<std::chrono::milliseconds>(options_.stop_timeout).count()}});
  }
  thread_.join();
}

void EventRecorder::Record(const ObjectRef& object, EventType type, std::string reason,
                           std::string message) {
  const std::string object_text = ObjectText(object);
  log::Log(type == EventType::kWarning ? log::Level::kWarn : log::Level::kInfo, "event",
           {{"object", object_text},
            {"type", ToString(type)},
            {"reason", reason},
            {"message", message}});

  Pending event{.object = object,
                .type = type,
                .reason = std::move(reason),
                .message = std::move(message),
                .at = clock_.Now(),
                .wall_at = clock_.WallNow()};
  bool queued = false;
  bool first_drop = false;
  uint64_t burst_ended = 0;  // drops of a burst that just ended
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.recorded;
    if (queue_.size() < options_.max_pending) {
      if (dropping_) burst_ended = burst_drops_;
      dropping_ = false;
      burst_drops_ = 0;
      queue_.push_back(std::move(event));
      ++accepted_;
      queued = true;
    } else {
      ++stats_.dropped;
      ++burst_drops_;
      first_drop = !dropping_;
      dropping_ = true;
    }
  }
  if (queued) {
    work_.notify_one();
    if (burst_ended > 0) log::Info("writing events again", {{"dropped", burst_ended}});
  } else if (first_drop) {
    log::Warn(
        "dropping events: too many waiting to be written",
        {{"max_pending", options_.max_pending}, {"object", object_text}, {"reason", event.reason}});
  }
}

bool EventRecorder::Flush(Duration timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t target = accepted_;
  return progress_.wait_for(lock, timeout, [&] { return finished_ >= target; });
}

EventRecorder::Stats EventRecorder::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void EventRecorder::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything was written
    if (stopping_ && std::chrono::steady_clock::now() >= stop_deadline_) {
      const uint64_t abandoned = queue_.size();
      queue_.clear();
      stats_.dropped += abandoned;
      finished_ += abandoned;
      progress_.notify_all();
      lock.unlock();
      log::Warn("stopped with events not written", {{"dropped", abandoned}});
      return;
    }
    Pending event = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    const Outcome outcome = Write(event);
    lock.lock();
    switch (outcome) {
      case Outcome::kCreated:
        ++stats_.written;
        break;
      case Outcome::kAggregated:
        ++stats_.written;
        ++stats_.aggregated;
        break;
      case Outcome::kFailed:
        ++stats_.failed;
        break;
    }
    ++finished_;
    progress_.notify_all();
  }
}

EventRecorder::Outcome EventRecorder::Write(const Pending& event) {
  std::string message = ValidUtf8(event.message, kMaxMessageBytes);
  AggregationKey key{event.object.uid, ObjectText(event.object), event.type,
                     ValidUtf8(event.reason, kMaxReasonBytes), message};
  auto it = aggregates_.find(key);
  if (it != aggregates_.end() && event.at - it->second.last_seen <= options_.dedupe_window) {
    Aggregate& aggregate = it->second;
    const kube::Json patch{{"count", aggregate.count + 1},
                           {"lastTimestamp", cache::FormatRfc3339(event.wall_at)}};
    auto patched = client_.Patch(kube::Resource::Events(), aggregate.ns, aggregate.name,
                                 kube::PatchType::kMerge, patch);
    if (patched) {
      ++aggregate.count;
      aggregate.last_seen = event.at;
      return Outcome::kAggregated;
    }
    if (!patched.error().IsNotFound()) {
      log::Warn("updating event failed", {{"event", aggregate.ns + "/" + aggregate.name},
                                          {"reason", event.reason},
                                          {"error", patched.error().ToString()}});
      return Outcome::kFailed;
    }
    // Expired by the API server (or deleted): start a new one.
    aggregates_.erase(it);
  }
  return Create(event, std::move(key), message);
}

EventRecorder::Outcome EventRecorder::Create(const Pending& event, AggregationKey key,
                                             const std::string& message) {
  const ObjectRef& object = event.object;
  const std::string ns = object.ns.empty() ? std::string(kClusterScopedEventNamespace)
                                           : ValidUtf8(object.ns, kMaxNameBytes);
  // client-go names events "<object>.<unix nanoseconds in hex>"; a random suffix serves the
  // same purpose without colliding when two events for one object share a timestamp.
  std::array<char, kNameSuffixBytes + 1> suffix{};
  std::snprintf(suffix.data(), suffix.size(), ".%016llx", static_cast<unsigned long long>(rng_()));
  const std::string name =
      ValidUtf8(object.name, kMaxNameBytes - kNameSuffixBytes) + std::string(suffix.data());

  kube::Json involved{{"kind", ValidUtf8(object.kind, kMaxNameBytes)},
                      {"name", ValidUtf8(object.name, kMaxNameBytes)}};
  if (!object.api_version.empty()) {
    involved["apiVersion"] = ValidUtf8(object.api_version, kMaxNameBytes);
  }
  if (!object.ns.empty()) involved["namespace"] = ns;
  if (!object.uid.empty()) involved["uid"] = ValidUtf8(object.uid, kMaxNameBytes);
  const std::string now = cache::FormatRfc3339(event.wall_at);
  const kube::Json body{{"apiVersion", "v1"},
                        {"kind", "Event"},
                        {"metadata", {{"name", name}, {"namespace", ns}}},
                        {"involvedObject", std::move(involved)},
                        {"reason", std::get<3>(key)},
                        {"message", message},
                        {"type", ToString(event.type)},
                        {"source", {{"component", options_.component}}},
                        {"reportingComponent", options_.component},
                        {"reportingInstance", options_.instance},
                        {"firstTimestamp", now},
                        {"lastTimestamp", now},
                        {"count", 1}};
  auto created = client_.Create(kube::Resource::Events(), ns, body);
  if (!created) {
    log::Warn("writing event failed", {{"object", std::get<1>(key)},
                                       {"reason", event.reason},
                                       {"error", created.error().ToString()}});
    return Outcome::kFailed;
  }
  MakeRoomForAggregate(event.at);
  aggregates_[std::move(key)] = Aggregate{ns, name, 1, event.at};
  return Outcome::kCreated;
}

void EventRecorder::MakeRoomForAggregate(TimePoint now) {
  if (aggregates_.size() < kMaxAggregates) return;
  std::erase_if(aggregates_, [&](const auto& entry) {
    return now - entry.second.last_seen > options_.dedupe_window;
  });
  if (aggregates_.size() < kMaxAggregates) return;
  auto oldest = std::min_element(
      aggregates_.begin(), aggregates_.end(),
      [](const auto& a, const auto& b) { return a.second.last_seen < b.second.last_seen; });
  aggregates_.erase(oldest);
}

}  // namespace tpujob::controller
