// Admission planning: the queue's BuildCapacity + PlanAdmissions on a random cluster in memory
// (node pools of 4-64 nodes, about 70% of the chips used, a few nodes cordoned or unhealthy, a
// few reservations) with a queue of mixed gangs.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "cache/store.h"
#include "policy/node_health.h"
#include "policy/queue.h"
#include "scenarios.h"
#include "simulated_cluster.h"

namespace tpujob::bench {

int AdmissionBench(int node_count, int job_count, int runs, unsigned seed) {
  using tpujob::cache::NodeInfo;
  using tpujob::cache::PodInfo;
  namespace policy = tpujob::policy;
  Random random(seed);
  const std::vector<SliceKind> kinds = SliceKinds();

  // Node pools of 4-64 nodes, each of one slice kind; ~70% of the chips taken by running
  // pods, plus finished pods that no longer count; 1% cordoned, 1% NotReady.
  std::vector<NodeInfo> nodes;
  std::vector<PodInfo> pods;
  nodes.reserve(node_count);
  int64_t chips_total = 0, chips_used = 0;
  const int pool_count =
      GeneratePools(random, kinds, node_count, [&](int, const SliceKind& kind, NodeInfo node) {
        node.unschedulable = random.Chance(0.01);
        const bool not_ready = random.Chance(0.01);
        SetReady(node, not_ready ? cache::ConditionStatus::kFalse : cache::ConditionStatus::kTrue);
        chips_total += kind.chips;
        // Workers of 4 chips (2 per 8-chip node) or of the whole node.
        const int64_t pod_chips = kind.chips == 8 && random.Chance(0.5) ? 4 : kind.chips;
        for (int64_t used = 0; used < kind.chips; used += pod_chips) {
          const bool running = random.Chance(0.7);
          if (!running && !random.Chance(0.2)) continue;
          pods.push_back(TpuPod(node.name + "-pod-" + std::to_string(used), node.name,
                                running ? cache::PodPhase::kRunning : cache::PodPhase::kSucceeded,
                                pod_chips));
          if (running) chips_used += pod_chips;
        }
        nodes.push_back(std::move(node));
      });

  // The queue: mostly small gangs, some big ones; a few re-issued; priorities 0-3; queued over
  // the last hour. A few admitted gangs whose pods are not bound yet hold reservations.
  const tpujob::WallTime now = std::chrono::system_clock::now();
  std::vector<policy::GangRequest> queued;
  queued.reserve(job_count);
  for (int j = 0; j < job_count; ++j) {
    policy::GangRequest job = QueuedGang(random, kinds, j);
    job.reissued = random.Chance(0.05);
    job.priority = random.Pick(0, 3);
    job.queued_at = now - std::chrono::seconds(random.Pick(0, 3600));
    queued.push_back(std::move(job));
  }
  std::vector<policy::Reservation> reservations;
  for (int r = 0; r < 20; ++r) {
    const int n = random.Pick(0, static_cast<int>(nodes.size()) - 1);
    reservations.push_back({"team-r/started-" + std::to_string(r),
                            std::string(nodes[n].labels.Value(policy::kAcceleratorLabel)),
                            std::string(nodes[n].labels.Value(policy::kTopologyLabel)),
                            std::string(nodes[n].labels.Value(tpujob::cache::kNodePoolLabel)),
                            random.Pick(1, 4), nodes[n].tpu_allocatable});
  }

  const std::vector<const NodeInfo*> node_ptrs = Pointers(nodes);
  const std::vector<const PodInfo*> pod_ptrs = Pointers(pods);
  const policy::NodeHealthConfig health;

  std::vector<double> total_ms, build_ms, plan_ms;
  int admitted = 0, for_capacity = 0, in_line = 0, admitted_multislice = 0;
  const auto multislice = std::count_if(queued.begin(), queued.end(),
                                        [](const policy::GangRequest& j) { return j.slices > 1; });
  size_t classes = 0;
  for (int run = 0; run < runs; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    const policy::Capacity capacity = policy::BuildCapacity(
        node_ptrs, pod_ptrs, reservations, health, std::chrono::system_clock::now());
    const auto t1 = std::chrono::steady_clock::now();
    const auto plan = policy::PlanAdmissions(capacity, queued);
    const auto t2 = std::chrono::steady_clock::now();
    const auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
    build_ms.push_back(ms(t1 - t0));
    plan_ms.push_back(ms(t2 - t1));
    total_ms.push_back(ms(t2 - t0));
    admitted = for_capacity = in_line = admitted_multislice = 0;
    for (const auto& [key, a] : plan) {
      admitted += a.admit;
      admitted_multislice += a.admit && a.pools.size() > 1;
      for_capacity += a.reason == "WaitingForCapacity";
      in_line += a.reason == "WaitingInLine";
    }
    classes = capacity.pools.size();
  }

  std::printf(
      "admission planning: %zu nodes in %d pools (%zu classes offering chips), %zu pods, %.0f%% "
      "of %lld chips used, %zu reservations, %zu queued jobs (%lld multislice, 2-8 slices); %d "
      "runs\n",
      nodes.size(), pool_count, classes, pods.size(),
      chips_total > 0 ? 100.0 * static_cast<double>(chips_used) / static_cast<double>(chips_total)
                      : 0.0,
      static_cast<long long>(chips_total), reservations.size(), queued.size(),
      static_cast<long long>(multislice), runs);
  PrintPlanTimes("BuildCapacity + PlanAdmissions:", total_ms, 90);
  PrintPlanTimes("  BuildCapacity:", build_ms, 90);
  PrintPlanTimes("  PlanAdmissions:", plan_ms, 90);
  std::printf(
      "  admitted %d of %zu jobs, %d of them multislice (waiting for capacity: %d, waiting in "
      "line: %d)\n",
      admitted, queued.size(), admitted_multislice, for_capacity, in_line);
  return 0;
}

}  // namespace tpujob::bench
