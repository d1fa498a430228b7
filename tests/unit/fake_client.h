// FakeClient: an in-memory kube::Client for unit tests of the cache and the reconcilers.
//
// It behaves like a small API server: every write bumps one global resourceVersion (as etcd
// does), objects live per resource in key order, LIST pages through them with `limit` and a
// continue token, and WATCH replays the recorded history after the requested resourceVersion
// and then delivers changes live. The test controls everything else:
//
//   - the truth: Upsert/Remove (optionally without notifying open watches, to simulate events
//     lost while a watch was disconnected), Compact (older resourceVersions become 410 Gone);
//   - the streams: SendEvent/SendBookmark/SendGone/BreakWatches/EndWatches push onto every
//     open watch of a resource;
//   - failures: FailNextList/FailNextWatch/FailNext(verb) return injected errors;
//   - observation: the options each LIST/WATCH was called with, the writes performed, and
//     Await* helpers that block (bounded, real time) until the code under test got there.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kube/client.h"

namespace tpujob::kube {

inline Error ApiError(int http_status, std::string reason, std::string message = {}) {
  Error error;
  error.kind = ErrorKind::kApi;
  error.http_status = http_status;
  error.reason = std::move(reason);
  error.message = message.empty() ? error.reason : std::move(message);
  return error;
}
inline Error GoneError() { return ApiError(410, "Expired", "too old resource version"); }
inline Error TransportError(std::string message = "connection reset by peer") {
  Error error;
  error.kind = ErrorKind::kTransport;
  error.message = std::move(message);
  return error;
}

class FakeClient : public Client {
 public:
  using StreamItem = Result<std::optional<WatchEvent>>;

  // A write the code under test performed.
  struct Action {
    std::string verb;  // "create", "update", "patch", "delete"
    std::string resource;
    std::string ns;
    std::string name;
    std::string subresource;
    Json body;
  };

  FakeClient() = default;

  // --- The truth ----------------------------------------------------------------------------

  // Creates or replaces `object` in `r`, assigning metadata.resourceVersion (and a uid when
  // absent). Records the ADDED/MODIFIED event and, if `notify`, delivers it to open watches.
  // Returns the stored object.
  Json Upsert(const Resource& r, Json object, bool notify = true) {
    std::lock_guard<std::mutex> lock(mu_);
    return UpsertLocked(r, std::move(object), notify);
  }

  // Removes an object; records DELETED (delivered if `notify`). False if absent.
  bool Remove(const Resource& r, const std::string& ns, const std::string& name,
              bool notify = true) {
    std::lock_guard<std::mutex> lock(mu_);
    return RemoveLocked(r, ns, name, notify).has_value();
  }

  std::optional<Json> Stored(const Resource& r, const std::string& ns,
                             const std::string& name) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = collections_.find(ResourceId(r));
    if (it == collections_.end()) return std::nullopt;
    auto object = it->second.objects.find(Key(ns, name));
    if (object == it->second.objects.end()) return std::nullopt;
    return object->second;
  }

  // Every stored object of `r`, in key order.
  std::vector<Json> StoredAll(const Resource& r) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Json> out;
    auto it = collections_.find(ResourceId(r));
    if (it == collections_.end()) return out;
    for (const auto& [key, object] : it->second.objects) out.push_back(object);
    return out;
  }

  std::string CurrentResourceVersion() const {
    std::lock_guard<std::mutex> lock(mu_);
    return std::to_string(resource_version_);
  }

  // The next successful create of `name` in `r` is followed at once by its deletion (as a fake
  // kubelet that deletes by name, without a UID precondition, can do to a pod that replaced one
  // of the same name): the creator gets 201 and watchers see ADDED then DELETED.
  void RemoveRightAfterCreate(const Resource& r, const std::string& ns, const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    remove_after_create_.insert(ResourceId(r) + "|" + Key(ns, name));
  }

  // Forgets the history up to now: a watch from an older resourceVersion gets 410 Gone.
  void Compact() {
    std::lock_guard<std::mutex> lock(mu_);
    compacted_ = resource_version_;
    for (auto& [id, collection] : collections_) collection.history.clear();
  }

  // Whether a watch from a compacted resourceVersion fails in Watch() (false: the default, as
  // the API server does, the watch opens and its first event is an ERROR with 410).
  void set_gone_from_watch_call(bool value) {
    std::lock_guard<std::mutex> lock(mu_);
    gone_from_watch_call_ = value;
  }

  // Whether watch lists (WatchOptions::send_initial_events) are served (true: the default, as
  // a current API server does); false answers them 422, as a server with WatchList off does.
  void set_serve_watch_lists(bool value) {
    std::lock_guard<std::mutex> lock(mu_);
    serve_watch_lists_ = value;
  }

  // The next watch list delivers only its first `events` objects, then breaks (a connection
  // reset) before the bookmark that would end its initial state.
  void BreakNextWatchListAfter(size_t events) {
    std::lock_guard<std::mutex> lock(mu_);
    break_watch_list_after_ = events;
  }

  // Continue tokens issued so far stop working (410 Expired), as after etcd compaction.
  void ExpireContinueTokens() {
    std::lock_guard<std::mutex> lock(mu_);
    ++token_generation_;
  }

  // --- The streams ----------------------------------------------------------------------------

  // Pushes `item` onto every open watch of `r`.
  void SendToWatches(const Resource& r, StreamItem item) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::shared_ptr<WatchState>& watch : LiveWatches(ResourceId(r))) {
      watch->Push(item);
    }
  }
  void SendEvent(const Resource& r, WatchEventType type, Json object) {
    WatchEvent event;
    event.type = type;
    event.object = std::move(object);
    SendToWatches(r, std::optional<WatchEvent>(std::move(event)));
  }
  // A BOOKMARK at `resource_version` (default: the current one).
  void SendBookmark(const Resource& r, std::string resource_version = {}) {
    if (resource_version.empty()) resource_version = CurrentResourceVersion();
    SendEvent(r, WatchEventType::kBookmark,
              Json{{"kind", "Bookmark"}, {"metadata", {{"resourceVersion", resource_version}}}});
  }
  // An ERROR event carrying `error` (default 410 Gone).
  void SendError(const Resource& r, Error error = GoneError()) {
    WatchEvent event;
    event.type = WatchEventType::kError;
    event.object = Json{{"kind", "Status"},
                        {"status", "Failure"},
                        {"code", error.http_status},
                        {"reason", error.reason},
                        {"message", error.message}};
    event.error = std::move(error);
    SendToWatches(r, std::optional<WatchEvent>(std::move(event)));
  }
  void SendGone(const Resource& r) { SendError(r, GoneError()); }
  // Next() on every open watch returns `error` (a broken connection).
  void BreakWatches(const Resource& r, Error error = TransportError()) {
    SendToWatches(r, std::unexpected(std::move(error)));
  }
  // The server ends every open watch normally (its timeout).
  void EndWatches(const Resource& r) { SendToWatches(r, std::optional<WatchEvent>()); }

  // --- Failures -------------------------------------------------------------------------------

  void FailNextList(Error error, int times = 1) { FailNext("list", std::move(error), times); }
  // The next LIST call returns `answer` verbatim (after any injected failure).
  void InjectListAnswer(Json answer) {
    std::lock_guard<std::mutex> lock(mu_);
    list_answers_.push_back(std::move(answer));
  }
  // The `nth` LIST call from now on (1 = the next one) fails with `error`, e.g. a 410 for an
  // expired continue token in the middle of a paginated list.
  void FailListCall(size_t nth, Error error) {
    std::lock_guard<std::mutex> lock(mu_);
    list_call_failures_[list_calls_.size() + nth] = std::move(error);
  }
  void FailNextWatch(Error error, int times = 1) { FailNext("watch", std::move(error), times); }
  // verb: "get", "list", "watch", "create", "update", "patch", "delete".
  void FailNext(const std::string& verb, Error error, int times = 1) {
    std::lock_guard<std::mutex> lock(mu_);
    for (int i = 0; i < times; ++i) failures_[verb].push_back(error);
  }

  // --- Observation ----------------------------------------------------------------------------

  std::vector<ListOptions> list_calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return list_calls_;
  }
  std::vector<WatchOptions> watch_calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return watch_calls_;
  }
  std::vector<Action> actions() const {
    std::lock_guard<std::mutex> lock(mu_);
    return actions_;
  }
  // Forgets the recorded actions (a test step's writes counted from here).
  void ClearActions() {
    std::lock_guard<std::mutex> lock(mu_);
    actions_.clear();
  }
  // Watches of `r` opened and not yet finished (ended, broken, cancelled or destroyed).
  int OpenWatches(const Resource& r) const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(LiveWatches(ResourceId(r)).size());
  }

  // Block (real time, bounded) until at least `n` LIST/WATCH calls were made. The calls are
  // recorded, and watches registered, before they return to the caller.
  bool AwaitListCalls(size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, timeout, [&] { return list_calls_.size() >= n; });
  }
  bool AwaitWatchCalls(size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, timeout, [&] { return watch_calls_.size() >= n; });
  }

  // --- Client ---------------------------------------------------------------------------------

  Result<Json> Get(const Resource& r, const std::string& ns, const std::string& name,
                   const std::string& subresource = {}) override {
    (void)subresource;
    std::lock_guard<std::mutex> lock(mu_);
    if (auto error = TakeFailure("get")) return std::unexpected(*error);
    const Json* object = Find(r, ns, name);
    if (object == nullptr) return std::unexpected(NotFound(r, name));
    return *object;
  }

  Result<Json> List(const Resource& r, const std::string& ns,
                    const ListOptions& options = {}) override {
    std::lock_guard<std::mutex> lock(mu_);
    list_calls_.push_back(options);
    changed_.notify_all();
    if (auto error = TakeFailure("list")) return std::unexpected(*error);
    if (auto it = list_call_failures_.find(list_calls_.size()); it != list_call_failures_.end()) {
      Error error = std::move(it->second);
      list_call_failures_.erase(it);
      return std::unexpected(std::move(error));
    }
    if (!list_answers_.empty()) {
      Json answer = std::move(list_answers_.front());
      list_answers_.pop_front();
      return answer;
    }
    std::string after;
    std::string list_version = std::to_string(resource_version_);
    if (!options.continue_token.empty()) {
      // "<generation>|<list resourceVersion>|<last key returned>"
      size_t first = options.continue_token.find('|');
      size_t second = options.continue_token.find('|', first + 1);
      if (first == std::string::npos || second == std::string::npos) {
        return std::unexpected(ApiError(400, "BadRequest", "malformed continue token"));
      }
      if (std::stoull(options.continue_token.substr(0, first)) != token_generation_) {
        return std::unexpected(ApiError(410, "Expired", "continue token expired"));
      }
      list_version = options.continue_token.substr(first + 1, second - first - 1);
      after = options.continue_token.substr(second + 1);
    }
    Json items = Json::array();
    std::string last_key;
    bool more = false;
    auto collection = collections_.find(ResourceId(r));
    if (collection != collections_.end()) {
      auto it = after.empty() ? collection->second.objects.begin()
                              : collection->second.objects.upper_bound(after);
      for (; it != collection->second.objects.end(); ++it) {
        if (!Selected(it->second, ns, options.label_selector, options.field_selector)) continue;
        if (options.limit > 0 && static_cast<int64_t>(items.size()) >= options.limit) {
          more = true;
          break;
        }
        items.push_back(it->second);
        last_key = it->first;
      }
    }
    Json list = {{"kind", "List"},
                 {"apiVersion", "v1"},
                 {"metadata", {{"resourceVersion", list_version}}},
                 {"items", std::move(items)}};
    if (more) {
      list["metadata"]["continue"] =
          std::to_string(token_generation_) + "|" + list_version + "|" + last_key;
    }
    return list;
  }

  Result<std::unique_ptr<WatchStream>> Watch(const Resource& r, const std::string& ns,
                                             const WatchOptions& options) override {
    std::lock_guard<std::mutex> lock(mu_);
    watch_calls_.push_back(options);
    changed_.notify_all();
    if (auto error = TakeFailure("watch")) return std::unexpected(*error);
    auto state = std::make_shared<WatchState>();
    state->ns = ns;
    state->label_selector = options.label_selector;
    state->field_selector = options.field_selector;
    state->volatile_fields = options.volatile_fields;
    Collection& collection = collections_[ResourceId(r)];
    const std::string& version = options.resource_version;
    if (options.send_initial_events) {
      if (!serve_watch_lists_) {
        return std::unexpected(ApiError(422, "Invalid",
                                        "sendInitialEvents is forbidden for watch unless the "
                                        "WatchList feature gate is enabled"));
      }
      // The current state as ADDED events, then the bookmark that ends it.
      const std::optional<size_t> break_after = std::exchange(break_watch_list_after_, {});
      size_t sent = 0;
      for (const auto& [key, object] : collection.objects) {
        if (break_after && sent == *break_after) break;
        WatchEvent event;
        event.type = WatchEventType::kAdded;
        event.object = object;
        state->Deliver(event);
        ++sent;
      }
      if (break_after) {
        state->Push(std::unexpected(TransportError("connection reset by peer")));
        collection.watches.push_back(state);
        return std::unique_ptr<WatchStream>(new Stream(state));
      }
      WatchEvent end;
      end.type = WatchEventType::kBookmark;
      end.object = {{"kind", r.plural},
                    {"metadata",
                     {{"resourceVersion", std::to_string(resource_version_)},
                      {"annotations", {{std::string(kInitialEventsEndAnnotation), "true"}}}}}};
      state->Push(std::optional<WatchEvent>(std::move(end)));
    } else if (version.empty() || version == "0") {
      // Start with the current state as synthetic ADDED events.
      for (const auto& [key, object] : collection.objects) {
        WatchEvent event;
        event.type = WatchEventType::kAdded;
        event.object = object;
        state->Deliver(event);
      }
    } else {
      const uint64_t from = std::stoull(version);
      if (from < compacted_) {
        if (gone_from_watch_call_) return std::unexpected(GoneError());
        WatchEvent event;
        event.type = WatchEventType::kError;
        event.object = Json{{"kind", "Status"}, {"code", 410}, {"reason", "Expired"}};
        event.error = GoneError();
        state->Push(std::optional<WatchEvent>(std::move(event)));
      } else {
        for (const auto& [at, event] : collection.history) {
          if (at > from) state->Deliver(event);
        }
      }
    }
    collection.watches.push_back(state);
    return std::unique_ptr<WatchStream>(new Stream(state));
  }

  Result<Json> Create(const Resource& r, const std::string& ns, const Json& object,
                      const WriteOptions& options = {}) override {
    std::lock_guard<std::mutex> lock(mu_);
    Json body = object;
    if (!ns.empty()) body["metadata"]["namespace"] = ns;
    const std::string name = body["metadata"].value("name", "");
    Record("create", r, ns, name, options.subresource, body);
    if (auto error = TakeFailure("create")) return std::unexpected(*error);
    if (Find(r, ns, name) != nullptr) return std::unexpected(ApiError(409, "AlreadyExists"));
    body["metadata"].erase("resourceVersion");
    Json created = UpsertLocked(r, std::move(body), true);
    if (remove_after_create_.erase(ResourceId(r) + "|" + Key(ns, name)) > 0) {
      RemoveLocked(r, ns, name, true);
    }
    return created;
  }

  Result<Json> Update(const Resource& r, const std::string& ns, const Json& object,
                      const WriteOptions& options = {}) override {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string name = MetaString(object, "name");
    Record("update", r, ns, name, options.subresource, object);
    if (auto error = TakeFailure("update")) return std::unexpected(*error);
    const Json* current = Find(r, ns, name);
    if (current == nullptr) return std::unexpected(NotFound(r, name));
    const std::string wanted = MetaString(object, "resourceVersion");
    if (!wanted.empty() && wanted != (*current)["metadata"].value("resourceVersion", "")) {
      return std::unexpected(ApiError(409, "Conflict", "the object has been modified"));
    }
    Json updated = *current;
    if (options.subresource == "status") {
      updated["status"] = object.value("status", Json::object());
    } else {
      Json status = current->value("status", Json());
      updated = object;
      if (!status.is_null()) updated["status"] = status;
      updated["metadata"]["uid"] = (*current)["metadata"]["uid"];
    }
    return UpsertLocked(r, std::move(updated), true);
  }

  Result<Json> Patch(const Resource& r, const std::string& ns, const std::string& name,
                     PatchType type, const Json& body, const PatchOptions& options = {}) override {
    std::lock_guard<std::mutex> lock(mu_);
    Record("patch", r, ns, name, options.subresource, body);
    if (auto error = TakeFailure("patch")) return std::unexpected(*error);
    const Json* current = Find(r, ns, name);
    Json patched;
    if (current == nullptr) {
      if (type != PatchType::kApply) return std::unexpected(NotFound(r, name));
      patched = body;
      patched["metadata"]["name"] = name;
      if (!ns.empty()) patched["metadata"]["namespace"] = ns;
    } else {
      // As the API server: a patch that names a resourceVersion applies only to that version.
      if (type != PatchType::kJson && body.is_object() && body.contains("metadata") &&
          body["metadata"].is_object()) {
        const std::string wanted = body["metadata"].value("resourceVersion", "");
        if (!wanted.empty() && wanted != (*current)["metadata"].value("resourceVersion", "")) {
          return std::unexpected(ApiError(
              409, "Conflict",
              "the object has been modified; please apply your changes to the latest version "
              "and try again"));
        }
      }
      patched = *current;
      Json patch = body;
      if (options.subresource == "status" && patch.is_object()) {
        patch = Json{{"status", body.value("status", Json::object())}};
      }
      try {
        if (type == PatchType::kJson) {
          patched = patched.patch(patch);
        } else {
          patched.merge_patch(patch);  // strategic merge and apply approximated by merge
        }
      } catch (const Json::exception& e) {
        return std::unexpected(ApiError(422, "Invalid", e.what()));
      }
    }
    return UpsertLocked(r, std::move(patched), true);
  }

  Result<Json> Delete(const Resource& r, const std::string& ns, const std::string& name,
                      const DeleteOptions& options = {}) override {
    std::lock_guard<std::mutex> lock(mu_);
    Record("delete", r, ns, name, {}, Json());
    if (auto error = TakeFailure("delete")) return std::unexpected(*error);
    const Json* current = Find(r, ns, name);
    if (current == nullptr) return std::unexpected(NotFound(r, name));
    if (options.precondition_uid &&
        *options.precondition_uid != (*current)["metadata"].value("uid", "")) {
      return std::unexpected(ApiError(409, "Conflict", "precondition failed: uid"));
    }
    if (options.precondition_resource_version &&
        *options.precondition_resource_version !=
            (*current)["metadata"].value("resourceVersion", "")) {
      return std::unexpected(ApiError(409, "Conflict", "precondition failed: resourceVersion"));
    }
    return *RemoveLocked(r, ns, name, true);
  }

 private:
  // The shared state of one watch: a queue of stream items that Next() drains.
  struct WatchState {
    std::string ns;
    std::string label_selector;
    std::string field_selector;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<StreamItem> queue;
    bool cancelled = false;
    bool finished = false;  // ended, broke, cancelled or destroyed: no more deliveries

    void Push(StreamItem item) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (finished) return;
        queue.push_back(std::move(item));
      }
      cv.notify_all();
    }
    // Volatile fields the watch was opened with: its object events then come undecoded, as
    // the real client's do (the event written as a line and summarised by a WatchDecoder).
    std::shared_ptr<const VolatileFields> volatile_fields;

    // Pushes an object event if it passes this watch's namespace and selectors.
    void Deliver(const WatchEvent& event) {
      if (!Selected(event.object, ns, label_selector, field_selector)) return;
      if (volatile_fields) {
        WatchDecoder decoder;
        decoder.set_volatile_fields(volatile_fields);
        const std::string line =
            Json{{"type", std::string(ToString(event.type))}, {"object", event.object}}.dump();
        Result<WatchEvent> summarized = decoder.Decode(line);
        if (!summarized) {
          Push(std::unexpected(summarized.error()));
        } else {
          Push(std::optional<WatchEvent>(std::move(*summarized)));
        }
        return;
      }
      Push(std::optional<WatchEvent>(event));
    }
    bool Live() {
      std::lock_guard<std::mutex> lock(mu);
      return !finished;
    }
  };

  class Stream : public WatchStream {
   public:
    explicit Stream(std::shared_ptr<WatchState> state) : state_(std::move(state)) {}
    ~Stream() override {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->finished = true;
    }
    Result<std::optional<WatchEvent>> Next() override {
      std::unique_lock<std::mutex> lock(state_->mu);
      state_->cv.wait(lock, [&] { return state_->cancelled || !state_->queue.empty(); });
      if (state_->cancelled) {
        state_->finished = true;
        Error error;
        error.kind = ErrorKind::kCancelled;
        error.message = "watch cancelled";
        return std::unexpected(error);
      }
      StreamItem item = std::move(state_->queue.front());
      state_->queue.pop_front();
      if (!item || !item->has_value()) state_->finished = true;  // broke or ended
      return item;
    }
    void Cancel() override {
      {
        std::lock_guard<std::mutex> lock(state_->mu);
        state_->cancelled = true;
      }
      state_->cv.notify_all();
    }

   private:
    std::shared_ptr<WatchState> state_;
  };

  struct Collection {
    std::map<std::string, Json> objects;  // by "namespace/name"
    std::vector<std::pair<uint64_t, WatchEvent>> history;
    std::vector<std::shared_ptr<WatchState>> watches;
  };

  static std::string ResourceId(const Resource& r) { return r.group + "/" + r.plural; }
  static std::string Key(const std::string& ns, const std::string& name) {
    return ns.empty() ? name : ns + "/" + name;
  }

  static std::string MetaString(const Json& object, const char* field) {
    if (!object.is_object() || !object.contains("metadata")) return {};
    const Json& meta = object["metadata"];
    return meta.is_object() ? meta.value(field, "") : std::string();
  }

  static Error NotFound(const Resource& r, const std::string& name) {
    return ApiError(404, "NotFound", r.plural + " \"" + name + "\" not found");
  }

  // A dotted path ("spec.nodeName") into `object`, as a string; "" when absent.
  static std::string FieldOf(const Json& object, const std::string& path) {
    const Json* at = &object;
    size_t start = 0;
    while (start <= path.size()) {
      size_t end = path.find('.', start);
      if (end == std::string::npos) end = path.size();
      if (!at->is_object()) return {};
      auto it = at->find(path.substr(start, end - start));
      if (it == at->end()) return {};
      at = &*it;
      start = end + 1;
    }
    if (at->is_string()) return at->get<std::string>();
    if (at->is_boolean()) return at->get<bool>() ? "true" : "false";
    return at->is_null() ? std::string() : at->dump();
  }

  // Namespace, equality-based label selectors ("a=b,c!=d", "a", "!a") and field selectors.
  static bool Selected(const Json& object, const std::string& ns, const std::string& labels,
                       const std::string& fields) {
    if (!ns.empty() && FieldOf(object, "metadata.namespace") != ns) return false;
    auto each_term = [](const std::string& text, auto&& term_matches) {
      size_t start = 0;
      while (start < text.size()) {
        size_t end = text.find(',', start);
        if (end == std::string::npos) end = text.size();
        if (!term_matches(text.substr(start, end - start))) return false;
        start = end + 1;
      }
      return true;
    };
    auto compare = [](const std::string& term, auto&& value_of) {
      size_t neq = term.find("!=");
      if (neq != std::string::npos) {
        std::optional<std::string> have = value_of(term.substr(0, neq));
        return !have || *have != term.substr(neq + 2);
      }
      size_t eq = term.find('=');
      if (eq != std::string::npos) {
        std::optional<std::string> have = value_of(term.substr(0, eq));
        size_t value_at = term.compare(eq, 2, "==") == 0 ? eq + 2 : eq + 1;
        return have && *have == term.substr(value_at);
      }
      if (!term.empty() && term[0] == '!') return !value_of(term.substr(1)).has_value();
      return value_of(term).has_value();
    };
    const Json empty = Json::object();
    const Json* object_labels = &empty;
    if (object.contains("metadata") && object["metadata"].contains("labels")) {
      object_labels = &object["metadata"]["labels"];
    }
    auto label_of = [&](const std::string& key) -> std::optional<std::string> {
      auto it = object_labels->find(key);
      if (it == object_labels->end() || !it->is_string()) return std::nullopt;
      return it->get<std::string>();
    };
    auto field_of = [&](const std::string& path) -> std::optional<std::string> {
      return FieldOf(object, path);
    };
    return each_term(labels, [&](const std::string& t) { return compare(t, label_of); }) &&
           each_term(fields, [&](const std::string& t) { return compare(t, field_of); });
  }

  const Json* Find(const Resource& r, const std::string& ns, const std::string& name) const {
    auto it = collections_.find(ResourceId(r));
    if (it == collections_.end()) return nullptr;
    auto object = it->second.objects.find(Key(ns, name));
    return object == it->second.objects.end() ? nullptr : &object->second;
  }

  std::vector<std::shared_ptr<WatchState>> LiveWatches(const std::string& id) const {
    std::vector<std::shared_ptr<WatchState>> out;
    auto it = collections_.find(id);
    if (it == collections_.end()) return out;
    for (const std::shared_ptr<WatchState>& watch : it->second.watches) {
      if (watch->Live()) out.push_back(watch);
    }
    return out;
  }

  Json UpsertLocked(const Resource& r, Json object, bool notify) {
    Collection& collection = collections_[ResourceId(r)];
    Json& meta = object["metadata"];
    const std::string key = Key(meta.value("namespace", ""), meta.value("name", ""));
    auto existing = collection.objects.find(key);
    const bool added = existing == collection.objects.end();
    if (!meta.contains("uid")) {
      meta["uid"] = added ? "uid-" + std::to_string(++uid_counter_)
                          : existing->second["metadata"].value("uid", "");
    }
    meta["resourceVersion"] = std::to_string(++resource_version_);
    collection.objects[key] = object;
    Record(collection, added ? WatchEventType::kAdded : WatchEventType::kModified, object, notify);
    return object;
  }

  std::optional<Json> RemoveLocked(const Resource& r, const std::string& ns,
                                   const std::string& name, bool notify) {
    Collection& collection = collections_[ResourceId(r)];
    auto it = collection.objects.find(Key(ns, name));
    if (it == collection.objects.end()) return std::nullopt;
    Json object = std::move(it->second);
    collection.objects.erase(it);
    object["metadata"]["resourceVersion"] = std::to_string(++resource_version_);
    Record(collection, WatchEventType::kDeleted, object, notify);
    return object;
  }

  void Record(Collection& collection, WatchEventType type, const Json& object, bool notify) {
    WatchEvent event;
    event.type = type;
    event.object = object;
    collection.history.emplace_back(resource_version_, event);
    if (!notify) return;
    for (const std::shared_ptr<WatchState>& watch : collection.watches) watch->Deliver(event);
    std::erase_if(collection.watches,
                  [](const std::shared_ptr<WatchState>& watch) { return !watch->Live(); });
  }

  void Record(std::string verb, const Resource& r, const std::string& ns, const std::string& name,
              const std::string& subresource, const Json& body) {
    actions_.push_back(Action{std::move(verb), r.plural, ns, name, subresource, body});
  }

  std::optional<Error> TakeFailure(const std::string& verb) {
    auto it = failures_.find(verb);
    if (it == failures_.end() || it->second.empty()) return std::nullopt;
    Error error = std::move(it->second.front());
    it->second.pop_front();
    return error;
  }

  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, Collection> collections_;
  uint64_t resource_version_ = 1000;
  uint64_t compacted_ = 0;
  uint64_t uid_counter_ = 0;
  uint64_t token_generation_ = 0;
  bool serve_watch_lists_ = true;
  std::optional<size_t> break_watch_list_after_;
  bool gone_from_watch_call_ = false;
  std::map<std::string, std::deque<Error>> failures_;
  std::set<std::string> remove_after_create_;   // "resource|ns/name"
  std::map<size_t, Error> list_call_failures_;  // by 1-based index into list_calls_
  std::deque<Json> list_answers_;
  std::vector<ListOptions> list_calls_;
  std::vector<WatchOptions> watch_calls_;
  std::vector<Action> actions_;
};

}  // namespace tpujob::kube
