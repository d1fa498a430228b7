// Victim selection: a cluster in memory whose nodes are held by running gangs (whole nodes, one
// pool each, priorities 0-3, 90% preemptible) with ~10% of the nodes free, and queued gangs of
// priorities 0-5; times PlanPreemptions (what the queue adds to a plan when a head is blocked)
// per run, beside PlanAdmissions on the same queue.

#include "policy/preemption.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "policy/node_health.h"
#include "policy/queue.h"
#include "scenarios.h"
#include "simulated_cluster.h"

namespace tpujob::bench {

int PreemptionBench(int node_count, int running_count, int job_count, int runs, unsigned seed) {
  using tpujob::cache::NodeInfo;
  using tpujob::cache::PodInfo;
  namespace policy = tpujob::policy;
  Random random(seed);
  const tpujob::WallTime now = std::chrono::system_clock::now();
  const PreemptionCluster cluster =
      MakePreemptionCluster(random, SliceKinds(), node_count, running_count, job_count, now);
  const std::vector<NodeInfo>& nodes = cluster.nodes;
  const std::vector<PodInfo>& pods = cluster.pods;
  const std::vector<policy::RunningGang>& running = cluster.running;
  const std::vector<policy::GangRequest>& queued = cluster.queued;
  const size_t taken = cluster.taken;

  const policy::Capacity capacity =
      policy::BuildCapacity(Pointers(nodes), Pointers(pods), {}, policy::NodeHealthConfig{}, now);

  std::vector<double> plan_ms, select_ms;
  size_t preemptions = 0, victims = 0;
  for (int run = 0; run < runs; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto plan = policy::PlanAdmissions(capacity, queued);
    const auto t1 = std::chrono::steady_clock::now();
    const auto chosen = policy::PlanPreemptions(capacity, queued, {}, running);
    const auto t2 = std::chrono::steady_clock::now();
    const auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
    plan_ms.push_back(ms(t1 - t0));
    select_ms.push_back(ms(t2 - t1));
    preemptions = chosen.size();
    victims = 0;
    for (const policy::Preemption& p : chosen) victims += p.victims.size();
  }
  std::printf(
      "victim selection: %zu nodes in %zu pools (%zu classes), %zu running gangs on %zu nodes, "
      "%zu queued jobs; %d runs\n",
      nodes.size(), cluster.pool_count, capacity.pools.size(), running.size(), taken, queued.size(),
      runs);
  PrintPlanTimes("PlanPreemptions:", select_ms, 99);
  PrintPlanTimes("PlanAdmissions (same queue):", plan_ms, 99);
  std::printf("  %zu blocked heads preempt, %zu victims in all\n", preemptions, victims);
  return 0;
}

}  // namespace tpujob::bench
