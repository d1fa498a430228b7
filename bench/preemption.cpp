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
  const std::vector<SliceKind> kinds = SliceKinds();

  struct Pool {
    const SliceKind* kind;
    std::vector<size_t> free;  // node indexes not taken yet
  };
  std::vector<NodeInfo> nodes;
  std::vector<Pool> pools;
  nodes.reserve(node_count);
  GeneratePools(random, kinds, node_count, [&](int pool, const SliceKind& kind, NodeInfo node) {
    if (pool == static_cast<int>(pools.size())) pools.push_back({&kind, {}});
    SetReady(node, cache::ConditionStatus::kTrue);
    pools.back().free.push_back(nodes.size());
    nodes.push_back(std::move(node));
  });

  // Running gangs take whole nodes of one pool until ~90% of the nodes are taken.
  const tpujob::WallTime now = std::chrono::system_clock::now();
  std::vector<policy::RunningGang> running;
  std::vector<PodInfo> pods;
  size_t taken = 0;
  for (int j = 0; j < running_count && taken < nodes.size() * 9 / 10; ++j) {
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
      ++taken;
      gang.chips.emplace_back(nodes[n].name, kind.chips);
      pods.push_back(
          TpuPod(gang.job.substr(gang.job.find('/') + 1) + "-worker-" + std::to_string(w),
                 nodes[n].name, cache::PodPhase::kRunning, kind.chips));
    }
    running.push_back(std::move(gang));
  }

  std::vector<policy::GangRequest> queued;
  queued.reserve(job_count);
  for (int j = 0; j < job_count; ++j) {
    policy::GangRequest job = QueuedGang(random, kinds, j);  // multislice heads too
    job.priority = random.Pick(0, 5);
    job.queued_at = now - std::chrono::seconds(random.Pick(0, 3600));
    queued.push_back(std::move(job));
  }

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
      nodes.size(), pools.size(), capacity.pools.size(), running.size(), taken, queued.size(),
      runs);
  PrintPlanTimes("PlanPreemptions:", select_ms, 99);
  PrintPlanTimes("PlanAdmissions (same queue):", plan_ms, 99);
  std::printf("  %zu blocked heads preempt, %zu victims in all\n", preemptions, victims);
  return 0;
}

}  // namespace tpujob::bench
