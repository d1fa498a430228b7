// Follower: one watch followed on a thread of its own, so that a scenario learns the moment each
// event arrived while its own thread writes.
//
// Contract:
//   1. Every event but a bookmark reaches the handler, on the follower's thread, with the
//      steady-clock time it arrived; the handler does its own locking.
//   2. No change is lost: a watch that breaks or ends is opened again from the last
//      resourceVersion seen; when the server answers 410 Gone it lists again and hands each
//      listed object to the handler as MODIFIED (ADDED if not seen before), and a DELETED of
//      each object seen before that the list no longer has, as a reflector's relist does.
//      reopened() counts those reconnections (a scenario reports them).
//   3. Stop() (and the destructor) cancels the open watch and joins the thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "cache/objects.h"
#include "common.h"

namespace tpujob::bench {

class Follower {
 public:
  using Handler =
      std::function<void(const tpujob::kube::WatchEvent&, std::chrono::steady_clock::time_point)>;

  Follower(tpujob::kube::Client& client, Resource resource, std::string ns, std::string selector,
           Handler on_event)
      : client_(client),
        resource_(std::move(resource)),
        ns_(std::move(ns)),
        selector_(std::move(selector)),
        on_event_(std::move(on_event)) {}
  ~Follower() { Stop(); }

  // Lists once (for the resourceVersion to watch from) and starts following.
  bool Start() {
    if (!Relist(false)) return false;
    thread_ = std::thread([this] { Run(); });
    return true;
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      if (stream_ != nullptr) stream_->Cancel();
    }
    if (thread_.joinable()) thread_.join();
  }

  int reopened() const { return reopened_; }

 private:
  // Lists, for the resourceVersion to watch from; with `deliver`, hands what changed since the
  // last event to the handler (contract 2).
  bool Relist(bool deliver) {
    tpujob::kube::ListOptions options;
    options.label_selector = selector_;
    auto listed = client_.List(resource_, ns_, options);
    if (!listed) {
      std::fprintf(stderr, "error: %s\n", listed.error().ToString().c_str());
      return false;
    }
    resource_version_ = listed->value("/metadata/resourceVersion"_json_pointer, "");
    if (!deliver) return true;
    std::map<std::string, Json> gone = std::move(known_);
    known_.clear();
    for (Json& item : (*listed)["items"]) {
      tpujob::kube::WatchEvent event;
      const std::string uid = item.value("/metadata/uid"_json_pointer, "");
      event.type = gone.erase(uid) > 0 ? tpujob::kube::WatchEventType::kModified
                                       : tpujob::kube::WatchEventType::kAdded;
      event.object = std::move(item);
      Deliver(event, std::chrono::steady_clock::now());
    }
    for (auto& [uid, metadata] : gone) {
      tpujob::kube::WatchEvent event;
      event.type = tpujob::kube::WatchEventType::kDeleted;
      event.object = {{"metadata", std::move(metadata)}};
      on_event_(event, std::chrono::steady_clock::now());
    }
    return true;
  }

  // Hands `event` to the handler and remembers what a relist needs of its object.
  void Deliver(const tpujob::kube::WatchEvent& event, std::chrono::steady_clock::time_point at) {
    const Json& metadata = event.object.value("metadata", Json::object());
    const std::string uid = metadata.value("uid", "");
    if (event.type == tpujob::kube::WatchEventType::kDeleted) {
      known_.erase(uid);
    } else if (!uid.empty()) {
      Json& kept = known_[uid];
      for (const char* key : {"name", "namespace", "uid", "labels"}) {
        if (auto it = metadata.find(key); it != metadata.end()) kept[key] = *it;
      }
    }
    on_event_(event, at);
  }

  void Run() {
    bool first = true;
    while (true) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
      }
      if (!first) {
        ++reopened_;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      first = false;
      tpujob::kube::WatchOptions options;
      options.label_selector = selector_;
      options.resource_version = resource_version_;
      auto watch = client_.Watch(resource_, ns_, options);
      if (!watch) {
        if (watch.error().IsGone()) Relist(true);
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
        stream_ = watch->get();
      }
      while (true) {
        auto event = (*watch)->Next();
        const auto at = std::chrono::steady_clock::now();
        if (!event || !*event) break;
        if ((*event)->type == tpujob::kube::WatchEventType::kError) {
          if ((*event)->error.IsGone()) Relist(true);
          break;
        }
        const std::string version =
            (*event)->object.value("/metadata/resourceVersion"_json_pointer, "");
        if (!version.empty()) resource_version_ = version;
        if ((*event)->type != tpujob::kube::WatchEventType::kBookmark) Deliver(**event, at);
      }
      std::lock_guard<std::mutex> lock(mu_);
      stream_ = nullptr;
    }
  }

  tpujob::kube::Client& client_;
  const Resource resource_;
  const std::string ns_;
  const std::string selector_;
  const Handler on_event_;
  std::string resource_version_;       // only the watch thread touches it once started
  std::map<std::string, Json> known_;  // by uid: the metadata a DELETED of a relist carries
  std::atomic<int> reopened_{0};
  std::mutex mu_;
  bool stopping_ = false;
  tpujob::kube::WatchStream* stream_ = nullptr;  // the open watch, to cancel it
  std::thread thread_;
};

// What a pod watch saw of one pod's life, from the moments its events arrived.
struct PodLife {
  std::string job;                                                     // its tpujob.dev/job-name
  std::optional<std::chrono::steady_clock::time_point> added;          // first event
  std::optional<std::chrono::steady_clock::time_point> running_since;  // first Running
  std::optional<std::chrono::steady_clock::time_point> gone;           // first deleted or deleting
};

// Records `event`, which arrived `at`, in `life`; true when it is the pod's first event.
inline bool ObservePodLife(PodLife& life, const kube::WatchEvent& event,
                           std::chrono::steady_clock::time_point at) {
  const Json& object = event.object;
  const bool first = !life.added;
  if (first) {
    life.added = at;
    life.job = object.value("/metadata/labels/tpujob.dev~1job-name"_json_pointer, "");
  }
  const bool going = event.type == kube::WatchEventType::kDeleted ||
                     object.contains("/metadata/deletionTimestamp"_json_pointer);
  if (going && !life.gone) life.gone = at;
  if (!going && !life.running_since &&
      object.value("/status/phase"_json_pointer, "") == "Running") {
    life.running_since = at;
  }
  return first;
}

// The pods of every TPUJob in a namespace as one watch sees them, by uid: a T (a PodLife) per
// pod, which `update` brings up to date with each event under `mu` before the waiters on
// `changed` are woken.
template <typename T>
class PodWatch {
 public:
  using Update = std::function<void(T& pod, const Json& object, bool first,
                                    std::chrono::steady_clock::time_point at)>;

  PodWatch(kube::Client& client, const std::string& ns, Update update)
      : update_(std::move(update)),
        follower_(client, Resource::Pods(), ns, std::string(cache::kJobNameLabel),
                  [this](const kube::WatchEvent& event, std::chrono::steady_clock::time_point at) {
                    std::lock_guard<std::mutex> lock(mu);
                    T& pod = pods[event.object.value("/metadata/uid"_json_pointer, "")];
                    update_(pod, event.object, ObservePodLife(pod, event, at), at);
                    changed.notify_all();
                  }) {}

  bool Start() { return follower_.Start(); }
  void Stop() { follower_.Stop(); }

  // Waits up to `seconds` until `done` holds over the pods (called with `mu` held).
  bool Await(const std::function<bool()>& done, int seconds) {
    std::unique_lock<std::mutex> lock(mu);
    return changed.wait_for(lock, std::chrono::seconds(seconds), done);
  }

  std::mutex mu;
  std::condition_variable changed;
  std::map<std::string, T> pods;  // by uid

 private:
  const Update update_;
  Follower follower_;  // last: stopped before the pods it writes go
};

}  // namespace tpujob::bench
