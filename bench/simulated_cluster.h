// The random clusters the in-memory scenarios (admission, preemption, curves) plan on: node pools
// of TPU slices, pods on them, running and queued gangs, all drawn from one seeded generator.
//
// Contract:
//   1. The same seed gives the same cluster: every draw comes from Random, in the order the
//      scenario makes its calls.
//   2. Nothing here is timed or talks to a cluster; the objects are the operator's own cache
//      and policy types, as its informers and queue would hold them.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "base/clock.h"
#include "cache/objects.h"
#include "policy/preemption.h"
#include "policy/queue.h"

namespace tpujob::bench {

// One kind of slice in the simulated cluster: its node labels, chips per node (and per worker)
// and the worker counts its jobs ask for.
struct SliceKind {
  const char* accelerator;
  const char* topology;
  int64_t chips;
  std::vector<int32_t> workers;
};

// The slice kinds of the simulated clusters.
std::vector<SliceKind> SliceKinds();

// The draws of one simulated cluster.
class Random {
 public:
  explicit Random(unsigned seed) : rng_(seed) {}
  bool Chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  int Pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  template <typename T>
  const T& Any(const std::vector<T>& values) {
    return values[Pick(0, static_cast<int>(values.size()) - 1)];
  }
  template <typename T>
  T& Any(std::vector<T>& values) {
    return values[Pick(0, static_cast<int>(values.size()) - 1)];
  }

 private:
  std::mt19937 rng_;
};

// Node pools pool-0, pool-1, ... of 4-64 nodes each, every pool of one kind drawn from `kinds`,
// until there are `node_count` nodes: `add(pool, kind, node)` gets each node with its name
// (pool-P-node-I), labels and chips set, to add its state. Returns the number of pools.
int GeneratePools(Random& random, const std::vector<SliceKind>& kinds, int node_count,
                  const std::function<void(int, const SliceKind&, cache::NodeInfo)>& add);

// Marks `node` Ready=`status` in its conditions as the informer decodes it.
void SetReady(cache::NodeInfo& node, cache::ConditionStatus status);

// A pod of namespace "bench" on `node` in `phase`, its one container asking for `chips`.
cache::PodInfo TpuPod(const std::string& name, const std::string& node, cache::PodPhase phase,
                      int64_t chips);

// Queued gang `j` (team-(j mod 17)/job-j) of a kind drawn from `kinds`, of one of its worker
// counts; a quarter of the multi-host ones multislice, of 2-8 slices. Priority and queue time
// are left to the caller.
policy::GangRequest QueuedGang(Random& random, const std::vector<SliceKind>& kinds, int j);

// The cluster and queue the admission plan is timed on: node pools of 4-64 nodes, ~70% of the
// chips taken by running pods plus finished pods that no longer count, 1% of the nodes cordoned
// and 1% NotReady, 20 reservations; `job_count` queued gangs (5% re-issued, priorities 0-3,
// queued over the hour before `now`).
struct AdmissionCluster {
  std::vector<cache::NodeInfo> nodes;
  std::vector<cache::PodInfo> pods;
  std::vector<policy::GangRequest> queued;
  std::vector<policy::Reservation> reservations;
  int pool_count = 0;
  int64_t chips_total = 0, chips_used = 0;
};

// `pods_per_node` 0: workers of 4 chips (two on an 8-chip node) or of the whole node, as the
// `admission` scenario has always drawn them; N > 0: N pods on every node, each of an equal
// share of its chips, all running (70% of the nodes) or all finished (the curves' 4 TPU pods
// per node).
AdmissionCluster MakeAdmissionCluster(Random& random, const std::vector<SliceKind>& kinds,
                                      int node_count, int job_count, WallTime now,
                                      int pods_per_node = 0);

// The cluster victim selection is timed on: node pools of Ready nodes, running gangs (whole
// nodes of one pool, priorities 0-3, 90% preemptible) taking nodes until `running_count` gangs
// run or ~90% of the nodes are taken, one pod per worker; `job_count` queued gangs of priorities
// 0-5.
struct PreemptionCluster {
  std::vector<cache::NodeInfo> nodes;
  std::vector<cache::PodInfo> pods;
  std::vector<policy::RunningGang> running;
  std::vector<policy::GangRequest> queued;
  size_t pool_count = 0;
  size_t taken = 0;  // nodes held by running gangs
};

PreemptionCluster MakePreemptionCluster(Random& random, const std::vector<SliceKind>& kinds,
                                        int node_count, int running_count, int job_count,
                                        WallTime now);

// "  LABEL median .. ms  pP .. ms  min .. ms  max .. ms" of the run times `ms`.
void PrintPlanTimes(const char* label, std::vector<double> ms, int percentile);

// Pointers to each of `objects`, as the policy takes them.
template <typename T>
std::vector<const T*> Pointers(const std::vector<T>& objects) {
  std::vector<const T*> out;
  for (const T& object : objects) out.push_back(&object);
  return out;
}

}  // namespace tpujob::bench
