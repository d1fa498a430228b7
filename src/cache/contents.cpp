#include "cache/contents.h"

#include <algorithm>
#include <tuple>

namespace tpujob::cache {

template <typename T>
std::vector<CachedObject> CachedObjects(const Store<T>& store) {
  const std::vector<std::shared_ptr<const T>> snapshot = store.List();
  std::vector<CachedObject> objects;
  objects.reserve(snapshot.size());
  for (const auto& object : snapshot) {
    CachedObject identity;
    if constexpr (requires { object->ns; }) identity.ns = std::string(object->ns.view());
    identity.name = object->name;
    identity.uid = object->uid;
    identity.resource_version = object->resource_version;
    objects.push_back(std::move(identity));
  }
  std::sort(objects.begin(), objects.end(), [](const CachedObject& a, const CachedObject& b) {
    return std::tie(a.ns, a.name) < std::tie(b.ns, b.name);
  });
  return objects;
}

template <typename T>
CacheContents DescribeCache(const Informer<T>& informer) {
  const ReflectorOptions& options = informer.options();
  CacheContents contents;
  contents.resource = options.name;
  contents.ns = options.ns;
  contents.label_selector = options.label_selector;
  contents.field_selector = options.field_selector;
  // In this order: see the header on consistency.
  contents.synced = informer.HasSynced();
  contents.objects = CachedObjects(informer.store());
  contents.last_sync_resource_version = informer.LastSyncResourceVersion();
  return contents;
}

nlohmann::json CacheContentsJson(const std::vector<CacheContents>& caches) {
  nlohmann::json out = nlohmann::json::object();
  for (const CacheContents& cache : caches) {
    nlohmann::json objects = nlohmann::json::array();
    for (const CachedObject& object : cache.objects) {
      nlohmann::json entry = nlohmann::json::object();
      if (!object.ns.empty()) entry["namespace"] = object.ns;
      entry["name"] = object.name;
      entry["uid"] = object.uid;
      entry["resourceVersion"] = object.resource_version;
      objects.push_back(std::move(entry));
    }
    out[cache.resource] = {{"namespace", cache.ns},
                           {"labelSelector", cache.label_selector},
                           {"fieldSelector", cache.field_selector},
                           {"synced", cache.synced},
                           {"lastSyncResourceVersion", cache.last_sync_resource_version},
                           {"count", cache.objects.size()},
                           {"objects", std::move(objects)}};
  }
  return out;
}

template std::vector<CachedObject> CachedObjects(const Store<PodInfo>&);
template std::vector<CachedObject> CachedObjects(const Store<NodeInfo>&);
template std::vector<CachedObject> CachedObjects(const Store<TPUJobInfo>&);
template CacheContents DescribeCache(const Informer<PodInfo>&);
template CacheContents DescribeCache(const Informer<NodeInfo>&);
template CacheContents DescribeCache(const Informer<TPUJobInfo>&);

}  // namespace tpujob::cache
