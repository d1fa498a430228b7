// The caches' own cost: the heap a Store of pods (with the operator's pod indexes) and one of
// nodes hold per object, decoded from objects shaped as KWOK reports them, measured in this
// process (no cluster, no allocator slack).

#include "cache_memory.h"

#include <malloc.h>

#include <array>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/objects.h"
#include "cache/store.h"
#include "common.h"
#include "scenarios.h"

namespace tpujob::bench {
namespace {

// Bytes of heap in use (malloc's count, not the resident size).
size_t HeapInUse() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

// A worker pod as the API server returns it once KWOK runs it: the fields BuildPod sets, the
// API server's defaults and KWOK's status.
Json KwokPod(int i, int nodes) {
  char uid[40];
  std::snprintf(uid, sizeof uid, "%08x-a3b5-46a5-b72b-%012x", i, i * 7919);
  const std::string at = "2026-11-26T04:30:17Z";
  const Json condition = {
      {"lastProbeTime", nullptr}, {"lastTransitionTime", at}, {"status", "True"}};
  Json initialized = condition, ready = condition, containers_ready = condition;
  initialized["type"] = "Initialized";
  ready["type"] = "Ready";
  containers_ready["type"] = "ContainersReady";
  const std::string ip = "10.244." + std::to_string(i / 250) + "." + std::to_string(i % 250);
  Json pod = BenchWorkerPod(i, 100, nodes);
  pod["metadata"].update({{"creationTimestamp", at},
                          {"generation", 1},
                          {"namespace", "bench"},
                          {"resourceVersion", std::to_string(100000 + i)},
                          {"uid", uid}});
  pod["spec"]["restartPolicy"] = "Always";
  pod["status"] = {{"conditions", {initialized, ready, containers_ready}},
                   {"containerStatuses",
                    {{{"image", "trainer:latest"},
                      {"lastState", Json::object()},
                      {"name", "trainer"},
                      {"ready", true},
                      {"restartCount", 0},
                      {"state", {{"running", {{"startedAt", at}}}}}}}},
                   {"phase", "Running"},
                   {"podIP", ip},
                   {"podIPs", {{{"ip", ip}}}},
                   {"qosClass", "BestEffort"},
                   {"startTime", at}};
  return pod;
}

// A KWOK TPU node as the API server returns it: bench-node-i's labels and taint, KWOK's status.
Json KwokNode(int i) {
  char uid[40];
  std::snprintf(uid, sizeof uid, "%08x-d071-4b5d-9a2d-%012x", i, i * 104729);
  const std::string at = "2026-11-26T04:30:15Z";
  Json conditions = Json::array();
  for (const auto& [type, status, reason, message] : std::vector<std::array<std::string, 4>>{
           {"Ready", "True", "KubeletReady", "kubelet is posting ready status"},
           {"MemoryPressure", "False", "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available"},
           {"DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"},
           {"PIDPressure", "False", "KubeletHasSufficientPID",
            "kubelet has sufficient PID available"},
           {"NetworkUnavailable", "False", "RouteCreated", "RouteController created a route"}}) {
    conditions.push_back({{"lastHeartbeatTime", at},
                          {"lastTransitionTime", at},
                          {"message", message},
                          {"reason", reason},
                          {"status", status},
                          {"type", type}});
  }
  Json node = BenchNode(i);
  node["metadata"]["annotations"]["node.alpha.kubernetes.io/ttl"] = "15";
  node["metadata"].update(
      {{"creationTimestamp", at}, {"resourceVersion", std::to_string(200000 + i)}, {"uid", uid}});
  // The API server's canonical quantity.
  node["status"]["allocatable"]["pods"] = node["status"]["capacity"]["pods"] = "1k";
  node["status"].update(
      {{"conditions", conditions},
       {"nodeInfo", {{"architecture", "amd64"}, {"kubeletVersion", "kwok-0.7.0"}}},
       {"phase", "Running"}});
  return node;
}

// Fills a store with `count` objects made by `make`, one decoded at a time as a watch list
// delivers them, and returns the heap bytes the store then holds per object.
template <typename T>
double CacheBytesPerObject(int count, const std::function<Json(int)>& make,
                           const std::function<void(tpujob::cache::Store<T>&)>& add_indexes) {
  tpujob::cache::Store<T> store;
  add_indexes(store);
  const size_t before = HeapInUse();
  std::vector<std::shared_ptr<const T>> objects;
  objects.reserve(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    auto decoded = T::FromJson(make(i));
    if (!decoded) {
      std::fprintf(stderr, "error: %s\n", decoded.error().ToString().c_str());
      return -1;
    }
    objects.push_back(std::make_shared<const T>(std::move(*decoded)));
  }
  store.Replace(std::move(objects), "1");
  return static_cast<double>(HeapInUse() - before) / count;
}

}  // namespace

std::optional<CacheHeap> MeasureCacheHeap(int pods, int nodes) {
  const double per_pod = CacheBytesPerObject<tpujob::cache::PodInfo>(
      pods, [&](int i) { return KwokPod(i, nodes); }, tpujob::cache::AddPodIndexers);
  const double per_node =
      CacheBytesPerObject<tpujob::cache::NodeInfo>(nodes, KwokNode, tpujob::cache::AddNodeIndexers);
  if (per_pod < 0 || per_node < 0) return std::nullopt;
  return CacheHeap{per_pod, per_node};
}

// The cache's own cost per object: the heap a Store of pods (with the operator's pod indexes)
// and one of nodes hold per object, measured in this process (no cluster, no allocator slack).
int CacheMemory(int pods, int nodes) {
  const std::optional<CacheHeap> heap = MeasureCacheHeap(pods, nodes);
  if (!heap) return 1;
  std::printf(
      "cache heap per object (in memory, %d pods, %d nodes, as KWOK reports them): "
      "pod %.0f B, node %.0f B; JSON text: pod %zu B, node %zu B\n",
      pods, nodes, heap->per_pod, heap->per_node, KwokPod(1, nodes).dump().size(),
      KwokNode(1).dump().size());
  return 0;
}

}  // namespace tpujob::bench
