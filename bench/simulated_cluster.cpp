#include "simulated_cluster.h"

#include <algorithm>
#include <chrono>
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

AdmissionCluster MakeAdmissionCluster(Random& random, const std::vector<SliceKind>& kinds,
                                      int node_count, int job_count, WallTime now,
                                      int pods_per_node) {
  AdmissionCluster c;
  c.nodes.reserve(node_count);
  if (pods_per_node > 0) c.pods.reserve(static_cast<size_t>(node_count) * pods_per_node);
  c.pool_count = GeneratePools(
      random, kinds, node_count, [&](int, const SliceKind& kind, cache::NodeInfo node) {
        node.unschedulable = random.Chance(0.01);
        const bool not_ready = random.Chance(0.01);
        SetReady(node, not_ready ? cache::ConditionStatus::kFalse : cache::ConditionStatus::kTrue);
        c.chips_total += kind.chips;
        if (pods_per_node > 0) {
          // The node's workers all running (70%) or all finished.
          const bool running = random.Chance(0.7);
          const int64_t pod_chips = std::max<int64_t>(1, kind.chips / pods_per_node);
          for (int p = 0; p < pods_per_node; ++p) {
            c.pods.push_back(TpuPod(
                node.name + "-pod-" + std::to_string(p), node.name,
                running ? cache::PodPhase::kRunning : cache::PodPhase::kSucceeded, pod_chips));
            if (running) c.chips_used += pod_chips;
          }
          c.nodes.push_back(std::move(node));
          return;
        }
        // Workers of 4 chips (2 per 8-chip node) or of the whole node.
        const int64_t pod_chips = kind.chips == 8 && random.Chance(0.5) ? 4 : kind.chips;
        for (int64_t used = 0; used < kind.chips; used += pod_chips) {
          const bool running = random.Chance(0.7);
          if (!running && !random.Chance(0.2)) continue;
          c.pods.push_back(TpuPod(node.name + "-pod-" + std::to_string(used), node.name,
                                  running ? cache::PodPhase::kRunning : cache::PodPhase::kSucceeded,
                                  pod_chips));
          if (running) c.chips_used += pod_chips;
        }
        c.nodes.push_back(std::move(node));
      });

  // Mostly small gangs, some big ones; a few re-issued. A few admitted gangs whose pods are not
  // bound yet hold reservations.
  c.queued.reserve(job_count);
  for (int j = 0; j < job_count; ++j) {
    policy::GangRequest job = QueuedGang(random, kinds, j);
    job.reissued = random.Chance(0.05);
    job.priority = random.Pick(0, 3);
    job.queued_at = now - std::chrono::seconds(random.Pick(0, 3600));
    c.queued.push_back(std::move(job));
  }
  for (int r = 0; r < 20; ++r) {
    const cache::NodeInfo& node = c.nodes[random.Pick(0, static_cast<int>(c.nodes.size()) - 1)];
    c.reservations.push_back({"team-r/started-" + std::to_string(r),
                              std::string(node.labels.Value(policy::kAcceleratorLabel)),
                              std::string(node.labels.Value(policy::kTopologyLabel)),
                              std::string(node.labels.Value(cache::kNodePoolLabel)),
                              random.Pick(1, 4), node.tpu_allocatable});
  }
  return c;
}

PreemptionCluster MakePreemptionCluster(Random& random, const std::vector<SliceKind>& kinds,
                                        int node_count, int running_count, int job_count,
                                        WallTime now) {
  struct Pool {
    const SliceKind* kind;
    std::vector<size_t> free;  // node indexes not taken yet
  };
  PreemptionCluster c;
  std::vector<Pool> pools;
  c.nodes.reserve(node_count);
  GeneratePools(random, kinds, node_count,
                [&](int pool, const SliceKind& kind, cache::NodeInfo node) {
                  if (pool == static_cast<int>(pools.size())) pools.push_back({&kind, {}});
                  SetReady(node, cache::ConditionStatus::kTrue);
                  pools.back().free.push_back(c.nodes.size());
                  c.nodes.push_back(std::move(node));
                });
  c.pool_count = pools.size();

  // Running gangs take whole nodes of one pool until ~90% of the nodes are taken.
  for (int j = 0; j < running_count && c.taken < c.nodes.size() * 9 / 10; ++j) {
    Pool* pool = nullptr;
    for (int tries = 0; tries < 100 && pool == nullptr; ++tries) {
      Pool& p = random.Any(pools);
      if (!p.free.empty()) pool = &p;
    }
    if (pool == nullptr) break;
    const SliceKind& kind = *pool->kind;
    int32_t workers = random.Any(kind.workers);
    workers = std::min<int32_t>(workers, static_cast<int32_t>(pool->free.size()));
    policy::RunningGang gang;
    gang.job = "team-" + std::to_string(j % 17) + "/running-" + std::to_string(j);
    gang.accelerator = kind.accelerator;
    gang.topology = kind.topology;
    gang.priority = random.Pick(0, 3);
    gang.preemptible = random.Chance(0.9);
    gang.admitted_at = now - std::chrono::seconds(random.Pick(60, 86400));
    for (int32_t w = 0; w < workers; ++w) {
      const size_t n = pool->free.back();
      pool->free.pop_back();
      ++c.taken;
      gang.chips.emplace_back(c.nodes[n].name, kind.chips);
      c.pods.push_back(
          TpuPod(gang.job.substr(gang.job.find('/') + 1) + "-worker-" + std::to_string(w),
                 c.nodes[n].name, cache::PodPhase::kRunning, kind.chips));
    }
    c.running.push_back(std::move(gang));
  }

  c.queued.reserve(job_count);
  for (int j = 0; j < job_count; ++j) {
    policy::GangRequest job = QueuedGang(random, kinds, j);  // multislice heads too
    job.priority = random.Pick(0, 5);
    job.queued_at = now - std::chrono::seconds(random.Pick(0, 3600));
    c.queued.push_back(std::move(job));
  }
  return c;
}

void PrintPlanTimes(const char* label, std::vector<double> ms, int percentile) {
  std::sort(ms.begin(), ms.end());
  std::printf("  %-34s median %.2f ms  p%d %.2f ms  min %.2f ms  max %.2f ms\n", label,
              Percentile(ms, 50), percentile, Percentile(ms, percentile), ms.front(), ms.back());
}

}  // namespace tpujob::bench
