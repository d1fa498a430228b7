// Store: the in-memory cache of one object type, keyed by "namespace/name" ("name" for
// cluster-scoped objects), with named secondary indexes.
//
// Objects are held as std::shared_ptr<const T>: immutable snapshots that callers may keep as
// long as they like, unaffected by later updates. An update replaces the pointer; it never
// modifies an object in place.
//
// Indexes map an index value to the keys of the objects that produce it. An IndexFunc returns
// the values for one object (none, one or several); the store keeps every index in step with
// Add/Update/Delete/Replace, so a pod that moves node or changes its job label leaves its old
// entry and a deleted pod leaves every index. Built-in index functions for pods (by job, by
// node) and nodes (by node pool) are declared below.
//
// The store is written by one reflector and read by any number of reconcilers.
// Thread-safety: all methods are safe to call concurrently (a shared_mutex: reads in parallel,
// writes exclusive). Index functions run under the write lock and must not call the store.
//
// Example:
//   Store<PodInfo> pods;
//   AddPodIndexers(pods);
//   for (const auto& pod : pods.ByIndex(kPodsByJobIndex, "team-a/llm-pretrain")) { ... }
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "cache/objects.h"
#include "cache/selector.h"
#include "kube/error.h"

namespace tpujob::cache {

// Hash for heterogeneous lookup of std::string keys by std::string_view. noexcept, so that the
// standard library's hash containers do not keep each element's hash beside it (8 bytes per
// cached object and per index entry); a rehash computes them again instead.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
static_assert(std::is_nothrow_invocable_v<const StringHash&, std::string_view>,
              "a hash that may throw makes the hash containers keep each element's hash");

template <typename T>
class Store {
 public:
  using Ptr = std::shared_ptr<const T>;
  using IndexFunc = std::function<std::vector<std::string>(const T&)>;

  // What Replace changed, for the reflector's synthetic events.
  struct Delta {
    std::vector<Ptr> added;
    std::vector<std::pair<Ptr, Ptr>> updated;  // {old, new}, only where resourceVersion differs
    std::vector<Ptr> deleted;                  // the last known state
  };

  Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Adds an index and fills it from the objects already stored. Fails if `name` is taken.
  kube::Status AddIndexer(std::string name, IndexFunc index) {
    std::unique_lock lock(mu_);
    if (indexes_.contains(name)) {
      return std::unexpected(kube::Error::Config("index \"" + name + "\" already exists"));
    }
    Index& added = indexes_[std::move(name)];
    added.func = std::move(index);
    for (const auto& [key, object] : objects_) Insert(added, key, *object);
    return {};
  }

  // The object stored under `key`, or null.
  Ptr Get(std::string_view key) const {
    std::shared_lock lock(mu_);
    auto it = objects_.find(key);
    return it == objects_.end() ? nullptr : it->second;
  }

  // Every object, in no particular order.
  std::vector<Ptr> List() const {
    std::shared_lock lock(mu_);
    std::vector<Ptr> out;
    out.reserve(objects_.size());
    for (const auto& [key, object] : objects_) out.push_back(object);
    return out;
  }

  // Objects whose labels match `selector`.
  std::vector<Ptr> List(const LabelSelector& selector) const {
    std::shared_lock lock(mu_);
    std::vector<Ptr> out;
    for (const auto& [key, object] : objects_) {
      if (selector.Matches(object->labels)) out.push_back(object);
    }
    return out;
  }

  // Objects matching both selectors. Fails if `fields` names a field T does not support.
  kube::Result<std::vector<Ptr>> List(const LabelSelector& labels,
                                      const FieldSelector& fields) const {
    kube::Status valid = fields.ValidateFor<T>();
    if (!valid) return std::unexpected(valid.error());
    std::shared_lock lock(mu_);
    std::vector<Ptr> out;
    for (const auto& [key, object] : objects_) {
      if (labels.Matches(object->labels) && fields.Matches(*object)) out.push_back(object);
    }
    return out;
  }

  // Objects whose index `index` contains `value`; empty for an unknown index or value.
  std::vector<Ptr> ByIndex(std::string_view index, std::string_view value) const {
    std::shared_lock lock(mu_);
    std::vector<Ptr> out;
    auto index_it = indexes_.find(index);
    if (index_it == indexes_.end()) return out;
    auto value_it = index_it->second.entries.find(value);
    if (value_it == index_it->second.entries.end()) return out;
    out.reserve(value_it->second.size());
    for (std::string_view key : value_it->second) {
      auto it = objects_.find(key);
      if (it != objects_.end()) out.push_back(it->second);
    }
    return out;
  }

  // The values index `index` currently holds (e.g. every job that has pods).
  std::vector<std::string> IndexValues(std::string_view index) const {
    std::shared_lock lock(mu_);
    std::vector<std::string> out;
    auto index_it = indexes_.find(index);
    if (index_it == indexes_.end()) return out;
    out.reserve(index_it->second.entries.size());
    for (const auto& [value, keys] : index_it->second.entries) out.push_back(value);
    return out;
  }

  // Add and Update both insert or replace, returning the previous object (null if none).
  Ptr Add(Ptr object) { return Put(std::move(object)); }
  Ptr Update(Ptr object) { return Put(std::move(object)); }

  // Removes the object under `key`, returning it (null if absent).
  Ptr Delete(std::string_view key) {
    Ptr old;
    {
      std::unique_lock lock(mu_);
      auto it = objects_.find(key);
      if (it == objects_.end()) return nullptr;
      for (auto& [name, index] : indexes_) Remove(index, it->first, *it->second);
      old = std::move(it->second);
      objects_.erase(it);
    }
    return old;
  }

  // Replaces the whole content atomically (a relist), recording `resource_version`, and returns
  // what changed. Readers see either the old content or the new, never a mix.
  Delta Replace(std::vector<Ptr> objects, std::string resource_version) {
    Delta delta;
    Map fresh;
    fresh.reserve(objects.size());
    for (Ptr& object : objects) {
      std::string key(object->Key());
      fresh.insert_or_assign(std::move(key), std::move(object));
    }
    Map old;
    {
      std::unique_lock lock(mu_);
      for (const auto& [key, object] : fresh) {
        auto it = objects_.find(key);
        if (it == objects_.end()) {
          delta.added.push_back(object);
        } else if (it->second->resource_version != object->resource_version) {
          delta.updated.emplace_back(it->second, object);
        }
      }
      for (const auto& [key, object] : objects_) {
        if (!fresh.contains(key)) delta.deleted.push_back(object);
      }
      old = std::exchange(objects_, std::move(fresh));
      for (auto& [name, index] : indexes_) {
        index.entries.clear();
        for (const auto& [key, object] : objects_) Insert(index, key, *object);
      }
      resource_version_ = std::move(resource_version);
    }
    return delta;  // `old` is destroyed outside the lock
  }

  // The resourceVersion the content reflects: the last Replace's, advanced by Observe as the
  // reflector applies each watch event after it. Every write the API server answered with a
  // resourceVersion at or below this one has reached the store (or was undone since): a pod
  // created at version 7 is in the store once this reads 7 or more, unless it was deleted again.
  std::string ResourceVersion() const {
    std::shared_lock lock(mu_);
    return resource_version_;
  }

  // Records that the store now reflects `resource_version` (called after the event of that
  // version was applied). An empty version changes nothing.
  void Observe(std::string_view resource_version) {
    if (resource_version.empty()) return;
    std::unique_lock lock(mu_);
    resource_version_ = resource_version;
  }

  size_t Size() const {
    std::shared_lock lock(mu_);
    return objects_.size();
  }

 private:
  using Map = std::unordered_map<std::string, Ptr, StringHash, std::equal_to<>>;
  // Index keys view the key strings owned by objects_ (node-based, so they never move); an
  // entry is removed from every index before its object leaves objects_.
  using KeySet = std::unordered_set<std::string_view, StringHash>;
  struct Index {
    IndexFunc func;
    std::unordered_map<std::string, KeySet, StringHash, std::equal_to<>> entries;
  };

  Ptr Put(Ptr object) {
    std::string key(object->Key());
    Ptr old;
    {
      std::unique_lock lock(mu_);
      auto [it, inserted] = objects_.try_emplace(std::move(key));
      if (!inserted) {
        for (auto& [name, index] : indexes_) Remove(index, it->first, *it->second);
        old = std::move(it->second);
      }
      it->second = std::move(object);
      for (auto& [name, index] : indexes_) Insert(index, it->first, *it->second);
    }
    return old;
  }

  static void Insert(Index& index, std::string_view key, const T& object) {
    for (std::string& value : index.func(object)) {
      index.entries[std::move(value)].insert(key);
    }
  }

  static void Remove(Index& index, std::string_view key, const T& object) {
    for (const std::string& value : index.func(object)) {
      auto it = index.entries.find(value);
      if (it == index.entries.end()) continue;
      it->second.erase(key);
      if (it->second.empty()) index.entries.erase(it);
    }
  }

  mutable std::shared_mutex mu_;
  Map objects_;
  std::map<std::string, Index, std::less<>> indexes_;
  std::string resource_version_;
};

// --- Built-in indexes ---------------------------------------------------------------------------

// Pods by their job: "namespace/job" from the tpujob.dev/job-name label.
inline constexpr std::string_view kPodsByJobIndex = "pods-by-job";
std::vector<std::string> PodJobIndex(const PodInfo& pod);

// Pods by spec.nodeName (unscheduled pods are not indexed).
inline constexpr std::string_view kPodsByNodeIndex = "pods-by-node";
std::vector<std::string> PodNodeIndex(const PodInfo& pod);

// Nodes by their GKE node pool (label cloud.google.com/gke-nodepool), for slice-aware placement.
inline constexpr std::string_view kNodesByPoolIndex = "nodes-by-pool";
inline constexpr std::string_view kNodePoolLabel = "cloud.google.com/gke-nodepool";
std::vector<std::string> NodePoolIndex(const NodeInfo& node);

// Adds kPodsByJobIndex and kPodsByNodeIndex.
void AddPodIndexers(Store<PodInfo>& store);
// Adds kNodesByPoolIndex.
void AddNodeIndexers(Store<NodeInfo>& store);

extern template class Store<PodInfo>;
extern template class Store<NodeInfo>;
extern template class Store<TPUJobInfo>;
extern template class Store<WorkloadInfo>;

}  // namespace tpujob::cache
