// The scenarios of tpujob-bench, one entry point each; bench/main.cpp maps a subcommand to each
// (`tpujob-bench --help` lists them, scripts/bench.sh runs them).
//
// Contract:
//   1. An entry point returns the process's exit code: 0 when everything it set out to measure
//      was measured, 1 otherwise (having said why on stderr).
//   2. What it prints on stdout is its result, in lines scripts/bench.sh and the docs quote:
//      their wording is part of the interface.
//   3. A scenario against a cluster removes what it created before it returns; the in-memory
//      ones (admission, preemption, cache-memory, curves) need no cluster.
#pragma once

#include <string>

namespace tpujob::bench {

// load.cpp: bulk objects with a plain client (16 threads, no client-side limit).
// Pods F..N-1 labelled as J TPUJobs' workers, bound round-robin to bench-node-0..M-1.
int CreatePods(const std::string& kubeconfig, const std::string& ns, int count, int first, int jobs,
               int nodes, int threads);
// The KWOK TPU nodes bench-node-F..M-1, four to a pool.
int CreateNodes(const std::string& kubeconfig, int count, int first);
// `count` GETs of one namespace at once from `count` threads, cold and then warm.
int ConcurrentGets(const std::string& kubeconfig, int count);

// gang.cpp: gang creation, by the operator, by a plain client, by JobSet.
int Gang(const std::string& kubeconfig, const std::string& ns, const std::string& name, int workers,
         const std::string& topology, int chips, int slices, bool finish);
int PlainGang(const std::string& kubeconfig, const std::string& ns, const std::string& name,
              int workers, const std::string& topology, int chips, int slices, int threads);
int JobSetGang(const std::string& kubeconfig, const std::string& ns, const std::string& name,
               int workers, const std::string& topology, int chips);

// fault_latency.cpp: node condition written -> node cordoned and the job's pods deleted.
int FaultLatency(const std::string& kubeconfig, const std::string& ns, const std::string& prefix,
                 int faults, int workers, int burst, const std::string& condition,
                 int timeout_seconds, bool ceiling);

// reissue.cpp: hardware fault -> the job's next attempt all Running.
int Reissue(const std::string& kubeconfig, const std::string& ns, const std::string& prefix,
            int workers, int runs, const std::string& condition);

// in_place.cpp: a program's exit -> every program of the next generation running, restart
// InPlace beside Recreate.
int InPlaceBench(const std::string& kubeconfig, const std::string& ns, const std::string& prefix,
                 int workers, int runs, const std::string& metrics_url);

// slice_recovery.cpp: a fault on one slice -> the next attempt all Running, recovery Slice beside
// recovery Job, and hot swap.
int SliceRecovery(const std::string& kubeconfig, const std::string& ns, const std::string& prefix,
                  int slices, int hosts, int runs, int hot_swap_runs, int grace,
                  const std::string& metrics_url, const std::string& condition, bool in_place);

// elastic.cpp: a job of S slices loses one with no spare pool, a pool frees T s later: running on
// S - 1 meanwhile (minSlices S - 1) beside waiting whole, and the useful work of the first W s.
int Elastic(const std::string& kubeconfig, const std::string& ns, const std::string& prefix,
            int slices, int hosts, int pool_after_seconds, int window_seconds, int wait_seconds,
            int grace);

// admission.cpp, preemption.cpp: the queue's planning on a random cluster in memory.
int AdmissionBench(int node_count, int job_count, int runs, unsigned seed);
int PreemptionBench(int node_count, int running_count, int job_count, int runs, unsigned seed);

// cache_memory.cpp: the heap the operator's caches hold per pod and per node.
int CacheMemory(int pods, int nodes);

// curves.cpp: how the pure parts (admission and preemption plans, one job's fault decision,
// slice recovery, the caches' heap) grow with the cluster and the job, in memory; every point
// also written to the TSV file `out` unless it is empty.
int Curves(const std::string& out, unsigned seed);

}  // namespace tpujob::bench
