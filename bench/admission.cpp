// Admission planning: the queue's BuildCapacity + PlanAdmissions on a random cluster in memory
// (node pools of 4-64 nodes, about 70% of the chips used, a few nodes cordoned or unhealthy, a
// few reservations) with a queue of mixed gangs.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

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
  AdmissionCluster cluster = MakeAdmissionCluster(random, SliceKinds(), node_count, job_count,
                                                  std::chrono::system_clock::now());
  const std::vector<NodeInfo>& nodes = cluster.nodes;
  const std::vector<PodInfo>& pods = cluster.pods;
  const std::vector<policy::GangRequest>& queued = cluster.queued;
  const std::vector<policy::Reservation>& reservations = cluster.reservations;
  const int64_t chips_total = cluster.chips_total, chips_used = cluster.chips_used;
  const int pool_count = cluster.pool_count;

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
