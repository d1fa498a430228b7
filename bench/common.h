// What every scenario of tpujob-bench uses: a client that measures the server (no client-side
// limit), work spread over threads, polling with a deadline, pods watched until they exist, jobs
// deleted until they are gone, and the statistics the scenarios print.
//
// Contract:
//   1. A function that fails says why on stderr ("error: ...") and returns false, nullptr or a
//      count of failures; only Connect exits (there is nothing to measure without a client).
//   2. Times are the steady clock's, in milliseconds; percentiles are nearest-rank.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kube/client.h"

namespace tpujob::bench {

using kube::Json;
using kube::Resource;

// A client for `kubeconfig` with no client-side rate limit that trusts only the configured CA,
// as the operator's does; exits with the error when the kubeconfig cannot be loaded.
std::unique_ptr<kube::Client> Connect(const std::string& kubeconfig);

// Runs `count` calls of `work(i)` over `threads` threads; returns failures.
int Parallel(int count, int threads, const std::function<bool(int)>& work);

// Milliseconds since `start`.
double MsSince(std::chrono::steady_clock::time_point start);

// Milliseconds from `t0` to `t`.
double MsBetween(std::chrono::steady_clock::time_point t0, std::chrono::steady_clock::time_point t);

// "`prefix`-`mode`-`run`" in lower case: the name of one run's TPUJob of a scenario that compares
// modes (InPlace and Recreate, Slice and Job).
std::string RunJobName(const std::string& prefix, const std::string& mode, int run);

// Polls `condition` every `interval` for up to `seconds`.
bool WaitFor(const std::function<bool()>& condition, int seconds,
             std::chrono::milliseconds interval = std::chrono::milliseconds(10));

// "2025-01-02T03:04:05Z": now, as the API's date-time fields want it.
std::string UtcNow();

// Nearest-rank percentile of sorted `values` (p in (0, 100]).
double Percentile(const std::vector<double>& sorted, double p);

// The median of `values`; 0 when there are none.
double Median(std::vector<double> values);

// "  LABEL n=N  p50 .. ms  p90 .. ms  p99 .. ms  max .. ms", or "no samples".
void PrintLatencies(const char* label, std::vector<double> ms);

// The label selector of one TPUJob's pods.
std::string JobSelector(const std::string& job);

// Opens a watch on the pods of `selector` in `ns` (from a LIST, so no earlier pod counts), for
// AwaitPods.
std::unique_ptr<kube::WatchStream> WatchPods(kube::Client& client, const std::string& ns,
                                             const std::string& selector);

// Waits until `wanted` pods of `selector` were added, seen through `watch` (or, should the
// watch break, by listing).
bool AwaitPods(kube::Client& client, kube::WatchStream& watch, const std::string& ns,
               const std::string& selector, int wanted);

// Deletes `name` with foreground propagation (its children first).
void DeleteForeground(kube::Client& client, const Resource& resource, const std::string& ns,
                      const std::string& name);

// Waits up to 120 s, polling every `interval`, until no pod of `selector` is left in `ns` and
// `name` of `resource` is gone.
bool AwaitGone(kube::Client& client, const Resource& resource, const std::string& ns,
               const std::string& name, const std::string& selector,
               std::chrono::milliseconds interval);

// The KWOK node bench-node-`i` that create-nodes makes (four to a pool, tainted as KWOK's own, with
// room for 1000 pods), and pod `i` of create-pods: worker i / `jobs` of TPUJob bench-(i mod
// `jobs`), bound to bench-node-(i mod `nodes`).
Json BenchNode(int i);
Json BenchWorkerPod(int i, int jobs, int nodes);

}  // namespace tpujob::bench
