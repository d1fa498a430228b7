// Bulk objects with a plain client, and what opening connections costs.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "common.h"
#include "scenarios.h"

namespace tpujob::bench {
namespace {

// Creates `total` objects, the n-th made by `make(n)`, over `threads` threads (an object that
// exists already counts as created) and prints the rate.
int CreateAll(const std::string& kubeconfig, const Resource& resource, const std::string& ns,
              int total, int threads, const std::function<Json(int)>& make) {
  auto client = Connect(kubeconfig);
  const auto start = std::chrono::steady_clock::now();
  const int failures = Parallel(total, threads, [&](int n) {
    auto created = client->Create(resource, ns, make(n));
    return created.has_value() || created.error().IsAlreadyExists();
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("created %d objects in %.2f s (%.0f/s), %d failures\n", total - failures, seconds,
              (total - failures) / seconds, failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int CreatePods(const std::string& kubeconfig, const std::string& ns, int count, int first, int jobs,
               int nodes, int threads) {
  return CreateAll(kubeconfig, Resource::Pods(), ns, count - first, threads,
                   [&](int n) { return BenchWorkerPod(first + n, jobs, nodes); });
}

int CreateNodes(const std::string& kubeconfig, int count, int first) {
  return CreateAll(kubeconfig, Resource::Nodes(), "", count - first, 4,
                   [&](int n) { return BenchNode(first + n); });
}

// `count` threads each GET one namespace at once, twice (with one pooled connection, then with
// the pool the first wave left); prints each request's start-to-answer time, sorted.
int ConcurrentGets(const std::string& kubeconfig, int count) {
  auto client = Connect(kubeconfig);
  const Resource namespaces{"", "v1", "namespaces", false};
  // One connection open, as a client that has done one thing.
  if (auto first = client->Get(namespaces, "", "default"); !first) {
    std::fprintf(stderr, "error: %s\n", first.error().ToString().c_str());
    return 1;
  }
  int failures = 0;
  for (const char* wave : {"cold", "warm"}) {
    std::vector<double> ms(count);
    const auto start = std::chrono::steady_clock::now();
    failures += Parallel(count, count, [&](int i) {
      const auto begin = std::chrono::steady_clock::now();
      auto got = client->Get(namespaces, "", "default");
      ms[i] = MsSince(begin);
      return got.has_value();
    });
    const double total = MsSince(start);
    std::sort(ms.begin(), ms.end());
    std::printf("%s: %d GETs at once, all answered in %.0f ms; each:", wave, count, total);
    for (double m : ms) std::printf(" %.0f", m);
    std::printf("\n");
  }
  if (failures > 0) std::printf("failed requests: %d\n", failures);
  return failures > 0 ? 1 : 0;
}

}  // namespace tpujob::bench
