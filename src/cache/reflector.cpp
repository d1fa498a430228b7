#include "cache/reflector.h"

#include "base/logging.h"

namespace tpujob::cache {
namespace {

// metadata.<field> as a string, "" when absent or malformed (the object may not decode).
std::string_view MetadataString(const Json& object, std::string_view field) {
  if (!object.is_object()) return {};
  auto meta = object.find("metadata");
  if (meta == object.end() || !meta->is_object()) return {};
  auto value = meta->find(field);
  if (value == meta->end() || !value->is_string()) return {};
  return value->get_ref<const std::string&>();
}

// Whether a BOOKMARK is the one that ends a watch list's initial events.
bool IsInitialEventsEnd(const Json& object) {
  if (!object.is_object()) return false;
  auto meta = object.find("metadata");
  if (meta == object.end() || !meta->is_object()) return false;
  auto annotations = meta->find("annotations");
  if (annotations == meta->end() || !annotations->is_object()) return false;
  auto value = annotations->find(kube::kInitialEventsEndAnnotation);
  return value != annotations->end() && value->is_string() && *value == "true";
}

// Projections that say which fields change without changing them (NodeInfo: heartbeats) are
// watched undecoded, and keep the digest of the event they were decoded from.
template <typename T>
concept HasVolatileFields = requires(T object) {
  { T::VolatileFields() } -> std::convertible_to<const std::vector<std::string>&>;
  object.source_digest = uint64_t{};
};

template <typename T>
std::shared_ptr<const kube::VolatileFields> VolatileFieldsOf() {
  if constexpr (HasVolatileFields<T>) {
    static const auto kFields = std::make_shared<const kube::VolatileFields>(T::VolatileFields());
    return kFields;
  } else {
    return nullptr;
  }
}

template <typename T>
void SetSourceDigest(T& object, uint64_t digest) {
  if constexpr (HasVolatileFields<T>) object.source_digest = digest;
}

}  // namespace

template <typename T>
Reflector<T>::Reflector(kube::Client& client, kube::Resource resource, Store<T>& store,
                        ReflectorOptions options, Clock& clock)
    : client_(client),
      resource_(std::move(resource)),
      store_(store),
      options_([&] {
        if (options.name.empty()) options.name = resource_.plural;
        return std::move(options);
      }()),
      clock_(clock),
      backoff_(options_.backoff, options_.seed),
      rng_(options_.seed ^ 0x9e3779b97f4a7c15ULL),
      watch_list_(options_.watch_list),
      volatile_fields_(VolatileFieldsOf<T>()) {}

template <typename T>
Reflector<T>::~Reflector() {
  Stop();
}

template <typename T>
void Reflector<T>::AddEventHandlers(EventHandlers<T> handlers) {
  std::lock_guard<std::mutex> lock(handlers_mu_);
  if (handlers.on_add) {
    for (const Ptr& object : store_.List()) handlers.on_add(object);
  }
  handlers_.push_back(std::move(handlers));
}

template <typename T>
void Reflector<T>::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable() || stopping_) return;
  thread_ = std::thread([this] { Run(); });
}

template <typename T>
void Reflector<T>::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (stream_) stream_->Cancel();
  }
  wake_.notify_all();
  // Concurrent Stop() calls (a signal handler thread and the shutdown path, say) must not both
  // join: the second waits here until the first has joined.
  std::lock_guard<std::mutex> join_lock(join_mu_);
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

template <typename T>
bool Reflector<T>::WaitForSync(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  wake_.wait_for(lock, timeout, [&] { return HasSynced() || stopping_; });
  return HasSynced();
}

template <typename T>
std::string Reflector<T>::LastSyncResourceVersion() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_resource_version_;
}

template <typename T>
ReflectorStats Reflector<T>::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

template <typename T>
bool Reflector<T>::stopping() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stopping_;
}

template <typename T>
void Reflector<T>::Run() {
  bool need_list = true;
  bool list_instead = false;  // the last watch list failed: this sync is a LIST
  while (!stopping()) {
    if (need_list && (!watch_list_ || list_instead)) {
      if (!ListAndReplace()) {
        if (!WaitBackoff()) return;
        continue;
      }
      need_list = false;
      list_instead = false;
    }
    const WatchOutcome outcome = WatchOnce(need_list);
    // Still needing a list here means a watch list was tried (a plain watch never sets it).
    if (need_list && watch_list_ && outcome != WatchOutcome::kStopped) {
      // A watch list that failed before its end (an error, or the server's timeout cutting a
      // long initial state short) is followed by a LIST, as in client-go: making progress is
      // better than retrying a stream that may never fit in its timeout. The sync after that
      // tries a watch list again.
      list_instead = true;
    }
    switch (outcome) {
      case WatchOutcome::kRewatch:
        break;
      case WatchOutcome::kBackoff:
        if (!WaitBackoff()) return;
        break;
      case WatchOutcome::kRelist:
        // A 410 straight after a list (no event in between) would otherwise relist in a tight
        // loop against a misbehaving server.
        if (events_since_list_ == 0 && !WaitBackoff()) return;
        need_list = true;
        break;
      case WatchOutcome::kStopped:
        return;
    }
  }
}

template <typename T>
bool Reflector<T>::ListAndReplace() {
  // Pages are decoded as they arrive, so only one page of JSON is in memory at a time: a whole
  // LIST of 20k pods as JSON documents would be hundreds of megabytes (hence not kube::ListAll).
  kube::ListOptions list_options;
  list_options.label_selector = options_.label_selector;
  list_options.field_selector = options_.field_selector;
  list_options.limit = options_.page_size;
  std::vector<Ptr> objects;
  std::string version;
  uint64_t pages = 0;
  uint64_t decode_errors = 0;
  bool restarted = false;
  while (true) {
    kube::Result<Json> page = client_.List(resource_, options_.ns, list_options);
    if (!page) {
      // A continue token expires after etcd compaction: start over once from a new snapshot.
      if (page.error().IsGone() && !list_options.continue_token.empty() && !restarted) {
        log::Info("continue token expired, restarting the list", {{"reflector", options_.name}});
        restarted = true;
        list_options.continue_token.clear();
        objects.clear();
        pages = 0;
        decode_errors = 0;
        continue;
      }
      log::Warn("list failed", {{"reflector", options_.name}, {"error", page.error().ToString()}});
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.list_failures;
      return false;
    }
    ++pages;
    const Json* items = nullptr;
    if (page->is_object()) {
      auto it = page->find("items");
      if (it != page->end() && it->is_array()) items = &*it;
    }
    version = MetadataString(*page, "resourceVersion");
    if (items == nullptr || version.empty()) {
      log::Warn("list answer without items or resourceVersion", {{"reflector", options_.name}});
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.list_failures;
      return false;
    }
    objects.reserve(objects.size() + items->size());
    for (const Json& item : *items) {
      if (!DecodeInto(item, objects)) ++decode_errors;
    }
    list_options.continue_token = MetadataString(*page, "continue");
    if (list_options.continue_token.empty()) break;
    if (stopping()) return false;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.lists;
    stats_.list_pages += pages;
    stats_.decode_errors += decode_errors;
  }
  ReplaceAll(std::move(objects), version);
  log::Debug("listed", {{"reflector", options_.name},
                        {"objects", store_.Size()},
                        {"pages", pages},
                        {"resource_version", version}});
  return true;
}

template <typename T>
bool Reflector<T>::DecodeInto(const Json& item, std::vector<Ptr>& objects, uint64_t digest) const {
  kube::Result<T> decoded = T::FromJson(item);
  if (!decoded) {
    log::Warn("skipping an undecodable object", {{"reflector", options_.name},
                                                 {"name", MetadataString(item, "name")},
                                                 {"error", decoded.error().message}});
    return false;
  }
  SetSourceDigest(*decoded, digest);
  objects.push_back(std::make_shared<const T>(std::move(*decoded)));
  return true;
}

template <typename T>
void Reflector<T>::ReplaceAll(std::vector<Ptr> objects, std::string version) {
  {
    std::lock_guard<std::mutex> handlers_lock(handlers_mu_);
    typename Store<T>::Delta delta = store_.Replace(std::move(objects), version);
    {
      // Bookkeeping first, so a handler already sees the reflector synced at this version.
      std::lock_guard<std::mutex> lock(mu_);
      last_resource_version_ = version;
      stats_.last_activity = clock_.Now();
      synced_.store(true, std::memory_order_release);
    }
    for (const EventHandlers<T>& h : handlers_) {
      if (h.on_add) {
        for (const Ptr& object : delta.added) h.on_add(object);
      }
      if (h.on_update) {
        for (const auto& [old_object, new_object] : delta.updated) {
          h.on_update(old_object, new_object);
        }
      }
      if (h.on_delete) {
        for (const Ptr& object : delta.deleted) h.on_delete(object);
      }
    }
  }
  wake_.notify_all();
  events_since_list_ = 0;
}

template <typename T>
typename Reflector<T>::WatchOutcome Reflector<T>::WatchOnce(bool& need_list) {
  const bool listing = need_list;  // a watch list: the whole state first, then events
  kube::WatchOptions watch_options;
  watch_options.label_selector = options_.label_selector;
  watch_options.field_selector = options_.field_selector;
  watch_options.allow_bookmarks = true;
  watch_options.send_initial_events = listing;
  watch_options.volatile_fields = volatile_fields_;
  if (!listing) {
    std::lock_guard<std::mutex> lock(mu_);
    watch_options.resource_version = last_resource_version_;
  }
  const Duration timeout =
      RandomBetween(options_.min_watch_timeout, options_.max_watch_timeout, rng_);
  watch_options.timeout_seconds = static_cast<int>(
      std::max<int64_t>(1, std::chrono::ceil<std::chrono::seconds>(timeout).count()));

  kube::Result<std::unique_ptr<kube::WatchStream>> opened =
      client_.Watch(resource_, options_.ns, watch_options);
  if (!opened) {
    const kube::Error& error = opened.error();
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return WatchOutcome::kStopped;
    if (error.IsGone()) {
      ++stats_.gone;
      log::Info(
          "resourceVersion is gone, relisting",
          {{"reflector", options_.name}, {"resource_version", watch_options.resource_version}});
      return WatchOutcome::kRelist;
    }
    if (listing && (error.http_status == 400 || error.IsInvalid())) {
      // Not served here (a server before watch lists, or the WatchList feature off): LIST.
      log::Info("the server refused a watch list, listing instead",
                {{"reflector", options_.name}, {"error", error.ToString()}});
      watch_list_ = false;
      return WatchOutcome::kRewatch;
    }
    ++stats_.watch_failures;
    log::Warn("watch failed", {{"reflector", options_.name}, {"error", error.ToString()}});
    return WatchOutcome::kBackoff;
  }
  kube::WatchStream* stream = opened->get();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return WatchOutcome::kStopped;
    stream_ = std::move(*opened);
    ++stats_.watches;
    stats_.last_activity = clock_.Now();
  }

  const TimePoint opened_at = clock_.Now();
  uint64_t received = 0;
  WatchOutcome outcome = WatchOutcome::kRewatch;
  std::vector<Ptr> initial;  // a watch list's objects, until its initial-events-end bookmark
  uint64_t initial_decode_errors = 0;
  while (true) {
    kube::Result<std::optional<kube::WatchEvent>> next = stream->Next();
    uint64_t digest = 0;  // of an event that came undecoded
    if (next && next->has_value() && (*next)->undecoded) {
      kube::UndecodedEvent& undecoded = *(*next)->undecoded;
      if (!need_list && (*next)->type == kube::WatchEventType::kModified &&
          ApplyUnchanged(undecoded)) {
        ++received;
        continue;
      }
      digest = undecoded.digest;
      kube::Result<kube::WatchEvent> decoded = kube::WatchDecoder::DecodeLine(undecoded.line);
      if (decoded) {
        **next = std::move(*decoded);
      } else {
        next = std::unexpected(std::move(decoded.error()));  // as the stream would have said
      }
    }
    if (!next) {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) {
        outcome = WatchOutcome::kStopped;
      } else if (next.error().IsGone()) {
        ++stats_.gone;
        outcome = WatchOutcome::kRelist;
      } else if (next.error().IsSilent()) {
        // A dead connection, not a failing server: watch again at once from the last
        // resourceVersion (nothing is lost; a compacted one comes back as 410 and a relist).
        ++stats_.silent_watches;
        log::Warn("watch silent, re-watching", {{"reflector", options_.name},
                                                {"resource_version", last_resource_version_},
                                                {"error", next.error().ToString()}});
        outcome = WatchOutcome::kRewatch;
      } else {
        ++stats_.watch_failures;
        log::Warn("watch broke",
                  {{"reflector", options_.name}, {"error", next.error().ToString()}});
        outcome = WatchOutcome::kBackoff;
      }
      break;
    }
    if (!next->has_value()) {
      // The server ended the watch (its timeout): re-watch at once. A watch that ends at once
      // with nothing in it points at a problem; back off rather than spin (as client-go does).
      if (received == 0 && clock_.Now() - opened_at < std::chrono::seconds(1)) {
        log::Warn("very short watch, backing off", {{"reflector", options_.name}});
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.watch_failures;
        outcome = WatchOutcome::kBackoff;
      }
      break;
    }
    ++received;
    if (need_list && (*next)->type != kube::WatchEventType::kError) {
      kube::WatchEvent& event = **next;
      if (event.type == kube::WatchEventType::kBookmark) {
        if (!IsInitialEventsEnd(event.object)) continue;
        {
          std::lock_guard<std::mutex> lock(mu_);
          ++stats_.watch_lists;
          stats_.decode_errors += initial_decode_errors;
        }
        const size_t count = initial.size();
        ReplaceAll(std::move(initial),
                   std::string(MetadataString(event.object, "resourceVersion")));
        backoff_.Reset();
        need_list = false;
        log::Debug("listed by a watch", {{"reflector", options_.name},
                                         {"objects", count},
                                         {"resource_version", LastSyncResourceVersion()}});
        continue;
      }
      // Only ADDED events come before the end of the initial state.
      if (!DecodeInto(event.object, initial, digest)) ++initial_decode_errors;
      std::lock_guard<std::mutex> lock(mu_);
      stats_.last_activity = clock_.Now();
      continue;
    }
    outcome = HandleEvent(**next, digest);
    if (outcome != WatchOutcome::kRewatch) break;
  }
  if (need_list && outcome == WatchOutcome::kRewatch) {
    // The stream ended before the whole state arrived: list instead, after the backoff.
    log::Warn("watch list ended before its initial-events-end bookmark, listing instead",
              {{"reflector", options_.name}, {"objects_received", initial.size()}});
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.watch_failures;
    outcome = WatchOutcome::kBackoff;
  }

  std::unique_ptr<kube::WatchStream> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished = std::move(stream_);
    if (stopping_) outcome = WatchOutcome::kStopped;
  }
  return outcome;  // `finished` closes the connection outside the lock
}

template <typename T>
typename Reflector<T>::WatchOutcome Reflector<T>::HandleEvent(kube::WatchEvent& event,
                                                              uint64_t digest) {
  using kube::WatchEventType;
  switch (event.type) {
    case WatchEventType::kError: {
      std::lock_guard<std::mutex> lock(mu_);
      if (event.error.IsGone()) {
        ++stats_.gone;
        log::Info("watch expired, relisting",
                  {{"reflector", options_.name}, {"error", event.error.message}});
        return WatchOutcome::kRelist;
      }
      ++stats_.watch_failures;
      log::Warn("watch error event",
                {{"reflector", options_.name}, {"error", event.error.ToString()}});
      return WatchOutcome::kBackoff;
    }
    case WatchEventType::kBookmark: {
      std::string_view version = MetadataString(event.object, "resourceVersion");
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!version.empty()) last_resource_version_ = version;
        ++stats_.bookmarks;
        stats_.last_activity = clock_.Now();
      }
      store_.Observe(version);
      break;
    }
    case WatchEventType::kAdded:
    case WatchEventType::kModified:
    case WatchEventType::kDeleted: {
      kube::Result<T> decoded = T::FromJson(event.object);
      {
        // Bookkeeping first, so a handler already sees the version of its event.
        std::string_view version = MetadataString(event.object, "resourceVersion");
        std::lock_guard<std::mutex> lock(mu_);
        if (!version.empty()) last_resource_version_ = version;
        if (!decoded) ++stats_.decode_errors;
        ++stats_.events;
        stats_.last_activity = clock_.Now();
      }
      if (decoded) SetSourceDigest(*decoded, digest);
      if (!decoded) {
        log::Warn("skipping an undecodable event", {{"reflector", options_.name},
                                                    {"type", kube::ToString(event.type)},
                                                    {"error", decoded.error().message}});
      }
      if (event.type == WatchEventType::kDeleted) {
        // Remove by key even if the final state does not decode, so the store cannot keep a
        // ghost.
        const std::string key = ObjectKey(MetadataString(event.object, "namespace"),
                                          MetadataString(event.object, "name"));
        ApplyDelete(key, decoded ? std::make_shared<const T>(std::move(*decoded)) : nullptr);
      } else if (decoded) {
        ApplyUpsert(std::make_shared<const T>(std::move(*decoded)));
      }
      // After the store holds the event: ResourceVersion() never runs ahead of the content.
      store_.Observe(MetadataString(event.object, "resourceVersion"));
      break;
    }
  }
  ++events_since_list_;
  backoff_.Reset();
  return WatchOutcome::kRewatch;
}

template <typename T>
bool Reflector<T>::ApplyUnchanged(const kube::UndecodedEvent& event) {
  if constexpr (!HasVolatileFields<T>) {
    return false;
  } else {
    Ptr stored = store_.Get(ObjectKey(event.ns, event.name));
    if (!stored || stored->source_digest != event.digest) return false;
    auto updated = std::make_shared<T>(*stored);
    updated->resource_version = event.resource_version;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!event.resource_version.empty()) last_resource_version_ = event.resource_version;
      ++stats_.events;
      ++stats_.unchanged_events;
      stats_.last_activity = clock_.Now();
    }
    ApplyUpsert(std::move(updated));
    store_.Observe(event.resource_version);
    ++events_since_list_;
    backoff_.Reset();
    return true;
  }
}

template <typename T>
void Reflector<T>::ApplyUpsert(Ptr object) {
  std::lock_guard<std::mutex> lock(handlers_mu_);
  Ptr old = store_.Update(object);
  for (const EventHandlers<T>& h : handlers_) {
    if (old) {
      if (h.on_update) h.on_update(old, object);
    } else if (h.on_add) {
      h.on_add(object);
    }
  }
}

template <typename T>
void Reflector<T>::ApplyDelete(const std::string& key, Ptr final_state) {
  std::lock_guard<std::mutex> lock(handlers_mu_);
  Ptr old = store_.Delete(key);
  if (!old) return;  // never seen (or already removed): nothing to tell
  const Ptr& reported = final_state ? final_state : old;
  for (const EventHandlers<T>& h : handlers_) {
    if (h.on_delete) h.on_delete(reported);
  }
}

template <typename T>
bool Reflector<T>::WaitBackoff() {
  const Duration delay = backoff_.Next();
  std::unique_lock<std::mutex> lock(mu_);
  const TimePoint deadline = clock_.Now() + delay;
  while (!stopping_ && clock_.Now() < deadline) clock_.WaitUntil(wake_, lock, deadline);
  return !stopping_;
}

template class Reflector<PodInfo>;
template class Reflector<NodeInfo>;
template class Reflector<TPUJobInfo>;
template class Reflector<WorkloadInfo>;

}  // namespace tpujob::cache
