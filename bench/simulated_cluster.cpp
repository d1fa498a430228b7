#include "simulated_cluster.h"

#include <algorithm>
#include <cstdio>

#include "cache/store.h"
#include "common.h"

namespace tpujob::bench {

// The slice kinds of the simulated clusters.
std::vector<SliceKind> SliceKinds() {
  return {
      {"tpu-v5-lite-podslice", "2x2", 4, {1}},
      {"tpu-v5-lite-podslice", "2x4", 8, {1}},
      {"tpu-v5-lite-podslice", "4x4", 4, {4}},
      {"tpu-v5-lite-podslice", "8x8", 4, {16}},
      {"tpu-v4-podslice", "2x2x4", 4, {4}},
      {"tpu-v5p-slice", "4x4x4", 4, {16}},
      {"tpu-v6e-slice", "4x8", 4, {8}},
      {"tpu-v6e-slice", "16x16", 4, {2, 4, 8, 16, 32, 64}},  // some ask for part of a pod
  };
}

int GeneratePools(Random& random, const std::vector<SliceKind>& kinds, int node_count,
                  const std::function<void(int, const SliceKind&, cache::NodeInfo)>& add) {
  int pools = 0, nodes = 0;
  while (nodes < node_count) {
    const SliceKind& kind = random.Any(kinds);
    const int pool = pools++;
    const std::string pool_name = "pool-" + std::to_string(pool);
    const int size = std::min(random.Pick(4, 64), node_count - nodes);
    for (int i = 0; i < size; ++i, ++nodes) {
      cache::NodeInfo node;
      node.name = pool_name + "-node-" + std::to_string(i);
      node.labels.Set(policy::kAcceleratorLabel, kind.accelerator);
      node.labels.Set(policy::kTopologyLabel, kind.topology);
      node.labels.Set(cache::kNodePoolLabel, pool_name);
      node.tpu_allocatable = kind.chips;
      add(pool, kind, std::move(node));
    }
  }
  return pools;
}

void SetReady(cache::NodeInfo& node, cache::ConditionStatus status) {
  node.ready = status;
  node.conditions.push_back(
      {cache::InternedString::Intern("Ready"), status, cache::InternedString(), {}, std::nullopt});
}

cache::PodInfo TpuPod(const std::string& name, const std::string& node, cache::PodPhase phase,
                      int64_t chips) {
  cache::PodInfo pod;
  pod.ns = cache::InternedString::Intern("bench");
  pod.name = name;
  pod.node_name = cache::InternedString::Intern(node);
  pod.phase = phase;
  cache::ContainerInfo c;
  c.name = cache::InternedString::Intern("trainer");
  c.tpu_request = chips;
  pod.containers.push_back(std::move(c));
  return pod;
}

policy::GangRequest QueuedGang(Random& random, const std::vector<SliceKind>& kinds, int j) {
  const SliceKind& kind = random.Any(kinds);
  policy::GangRequest job;
  job.job = "team-" + std::to_string(j % 17) + "/job-" + std::to_string(j);
  job.accelerator = kind.accelerator;
  job.topology = kind.topology;
  job.workers = random.Any(kind.workers);
  job.chips_per_worker = kind.chips;
  if (job.workers > 1 && random.Chance(0.25)) job.slices = random.Pick(2, 8);
  return job;
}

void PrintPlanTimes(const char* label, std::vector<double> ms, int percentile) {
  std::sort(ms.begin(), ms.end());
  std::printf("  %-34s median %.2f ms  p%d %.2f ms  min %.2f ms  max %.2f ms\n", label,
              Percentile(ms, 50), percentile, Percentile(ms, percentile), ms.front(), ms.back());
}

}  // namespace tpujob::bench
