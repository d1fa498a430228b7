// What an informer's cache holds, by identity only: the namespace, name, uid and resourceVersion
// of every object, with the informer's scope (namespace, selectors), whether it has synced and
// the resourceVersion it last synced to. The operator serves it on /debug/cache when asked to
// (ManagerOptions::debug_cache_endpoint), so that a test or a person can compare the cache with
// a fresh `kubectl get` of the same scope.
//
// Only identities leave the cache: never labels, annotations, spec or status, which may hold
// what a job's owner put there (environment variables, commands, the pre-flight report).
//
// Consistency: the objects are one snapshot of the store, copied under its read lock
// (Store::List), so they are its content at one instant: a relist (Store::Replace) is seen whole
// or not at all, never half applied. `synced` is read before the snapshot: when true, the
// snapshot holds at least the first LIST. The reflector's last synced resourceVersion is read
// just after the snapshot and is not part of it: it may already count an event that arrived in
// between (and, in the instant a relist is being recorded, still name the previous one). It
// tells how far the reflector got, not the exact version of the objects listed; compare the
// objects themselves.
//
// Thread-safety: every function here may be called from any thread while the reflector runs.
// The store's lock is held only while its pointers are copied; the identities are copied out
// of the immutable objects afterwards, so a large cache never blocks the reflector for long.
//
// Example (JSON, one member per informer):
//   {"pods": {"namespace": "team-a", "labelSelector": "tpujob.dev/job-name",
//             "fieldSelector": "", "synced": true, "lastSyncResourceVersion": "4711",
//             "count": 1, "objects": [{"namespace": "team-a", "name": "llm-worker-0",
//                                      "uid": "0c6d…", "resourceVersion": "4702"}]},
//    "nodes": {"namespace": "", …, "objects": [{"name": "tpu-0", "uid": "…", …}]}}
// A cluster-scoped object has no "namespace" member, as in the API's own JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache/objects.h"
#include "cache/reflector.h"
#include "cache/store.h"

namespace tpujob::cache {

// One cached object's identity.
struct CachedObject {
  std::string ns;  // "" for cluster-scoped objects
  std::string name;
  std::string uid;
  std::string resource_version;
  friend bool operator==(const CachedObject&, const CachedObject&) = default;
};

struct CacheContents {
  std::string resource;  // the informer's name: "pods", "nodes", "tpujobs"
  std::string ns;        // the namespace it watches; "" = all (or cluster-scoped)
  std::string label_selector;
  std::string field_selector;
  bool synced = false;
  std::string last_sync_resource_version;  // Informer::LastSyncResourceVersion()
  std::vector<CachedObject> objects;       // by namespace, then name
};

// The identities of every object in `store`, sorted by namespace, then name: one snapshot.
template <typename T>
std::vector<CachedObject> CachedObjects(const Store<T>& store);

// The informer's scope and state, and the identities in its store.
template <typename T>
CacheContents DescribeCache(const Informer<T>& informer);

// The JSON of the example above: one member per cache, named by CacheContents::resource.
// Members are in name order, so equal contents give equal text.
nlohmann::json CacheContentsJson(const std::vector<CacheContents>& caches);

extern template std::vector<CachedObject> CachedObjects(const Store<PodInfo>&);
extern template std::vector<CachedObject> CachedObjects(const Store<NodeInfo>&);
extern template std::vector<CachedObject> CachedObjects(const Store<TPUJobInfo>&);
extern template CacheContents DescribeCache(const Informer<PodInfo>&);
extern template CacheContents DescribeCache(const Informer<NodeInfo>&);
extern template CacheContents DescribeCache(const Informer<TPUJobInfo>&);

}  // namespace tpujob::cache
