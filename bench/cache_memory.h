// The caches' own cost, measured in this process: the heap a Store of pods (with the operator's
// pod indexes) and one of nodes hold per object, decoded from objects shaped as KWOK reports
// them (malloc's count of bytes in use: no allocator slack, no cluster). Used by the
// cache-memory and curves scenarios.
#pragma once

#include <optional>

namespace tpujob::bench {

struct CacheHeap {
  double per_pod = 0;   // bytes
  double per_node = 0;  // bytes
};

// Fills a pod store with `pods` pods bound round-robin to `nodes` nodes, and a node store with
// those nodes, one object decoded at a time as a watch list delivers them; nullopt (having said
// why on stderr) when an object does not decode.
std::optional<CacheHeap> MeasureCacheHeap(int pods, int nodes);

}  // namespace tpujob::bench
