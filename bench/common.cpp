#include "common.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <set>
#include <thread>

#include "cache/objects.h"
#include "fixtures.h"
#include "kube/config.h"

namespace tpujob::bench {

std::unique_ptr<kube::Client> Connect(const std::string& kubeconfig) {
  auto config = kube::LoadKubeconfig(kubeconfig);
  if (!config) {
    std::fprintf(stderr, "error: %s\n", config.error().ToString().c_str());
    std::exit(1);
  }
  config->qps = 0;  // measure the server, not our limiter
  // As the operator does: otherwise every new connection parses the system CA bundle (about
  // 50 ms of CPU here), and a burst of writes from many threads waits on its own handshakes.
  kube::TrustOnlyTheConfiguredCa(*config);
  return kube::NewClient(*config);
}

// Runs `count` calls of `work(i)` over `threads` threads; returns failures.
int Parallel(int count, int threads, const std::function<bool(int)>& work) {
  std::atomic<int> next{0}, failures{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i = next++; i < count; i = next++) {
        if (!work(i)) ++failures;
      }
    });
  }
  for (auto& thread : pool) thread.join();
  return failures;
}

// Milliseconds since `start`.
double MsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

double MsBetween(std::chrono::steady_clock::time_point t0,
                 std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(t - t0).count();
}

std::string RunJobName(const std::string& prefix, const std::string& mode, int run) {
  std::string name = prefix + "-" + mode + "-" + std::to_string(run);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return name;
}

// Polls `condition` every `interval` for up to `seconds`.
bool WaitFor(const std::function<bool()>& condition, int seconds,
             std::chrono::milliseconds interval) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(interval);
  }
  return false;
}

// "2025-01-02T03:04:05Z": now, as the API's date-time fields want it.
std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// Nearest-rank percentile of sorted `values` (p in (0, 100]).
double Percentile(const std::vector<double>& sorted, double p) {
  const size_t rank = static_cast<size_t>(std::ceil(p / 100 * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

void PrintLatencies(const char* label, std::vector<double> ms) {
  if (ms.empty()) {
    std::printf("  %-22s no samples\n", label);
    return;
  }
  std::sort(ms.begin(), ms.end());
  std::printf("  %-22s n=%zu  p50 %.0f ms  p90 %.0f ms  p99 %.0f ms  max %.0f ms\n", label,
              ms.size(), Percentile(ms, 50), Percentile(ms, 90), Percentile(ms, 99), ms.back());
}

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

std::string JobSelector(const std::string& job) {
  return std::string(cache::kJobNameLabel) + "=" + job;
}

// Opens a watch on the pods of `selector` in `ns` (from a LIST, so no earlier pod counts), for
// AwaitPods.
std::unique_ptr<tpujob::kube::WatchStream> WatchPods(tpujob::kube::Client& client,
                                                     const std::string& ns,
                                                     const std::string& selector) {
  tpujob::kube::ListOptions by_job;
  by_job.label_selector = selector;
  auto listed = client.List(Resource::Pods(), ns, by_job);
  if (!listed) {
    std::fprintf(stderr, "error: %s\n", listed.error().ToString().c_str());
    return nullptr;
  }
  tpujob::kube::WatchOptions watch_options;
  watch_options.label_selector = by_job.label_selector;
  watch_options.resource_version = listed->value("/metadata/resourceVersion"_json_pointer, "");
  auto watch = client.Watch(Resource::Pods(), ns, watch_options);
  if (!watch) {
    std::fprintf(stderr, "error: %s\n", watch.error().ToString().c_str());
    return nullptr;
  }
  return std::move(*watch);
}

// Waits until `wanted` pods of `selector` were added, seen through `watch` (or, should the
// watch break, by listing).
bool AwaitPods(tpujob::kube::Client& client, tpujob::kube::WatchStream& watch,
               const std::string& ns, const std::string& selector, int wanted) {
  tpujob::kube::ListOptions by_job;
  by_job.label_selector = selector;
  std::set<std::string> seen;
  while (static_cast<int>(seen.size()) < wanted) {
    auto event = watch.Next();
    if (!event || !*event) {
      // The watch broke (a busy server may drop it): count by listing instead.
      const bool all = WaitFor(
          [&] {
            auto pods = client.List(Resource::Pods(), ns, by_job);
            return pods && static_cast<int>((*pods)["items"].size()) >= wanted;
          },
          120);
      if (!all) std::fprintf(stderr, "error: only %zu pods were created\n", seen.size());
      return all;
    }
    if ((*event)->type == tpujob::kube::WatchEventType::kAdded) {
      seen.insert((*event)->object.value("/metadata/name"_json_pointer, ""));
    }
  }
  return true;
}

void DeleteForeground(kube::Client& client, const Resource& resource, const std::string& ns,
                      const std::string& name) {
  kube::DeleteOptions foreground;
  foreground.propagation_policy = "Foreground";
  client.Delete(resource, ns, name, foreground);
}

bool AwaitGone(kube::Client& client, const Resource& resource, const std::string& ns,
               const std::string& name, const std::string& selector,
               std::chrono::milliseconds interval) {
  kube::ListOptions by_selector;
  by_selector.label_selector = selector;
  return WaitFor(
      [&] {
        auto pods = client.List(Resource::Pods(), ns, by_selector);
        return pods && (*pods)["items"].empty() && !client.Get(resource, ns, name);
      },
      120, interval);
}

Json BenchNode(int i) {
  fixtures::FakeNode node{.name = "bench-node-" + std::to_string(i),
                          .labels = fixtures::TpuNodeLabels("tpu-v5-lite-podslice", "2x4",
                                                            "pool-" + std::to_string(i / 4)),
                          .taint_key = "kwok.x-k8s.io/node",
                          .taint_value = "fake",
                          .cpu = "64",
                          .memory = "256Gi",
                          .pods = "1000"};
  node.labels["type"] = "kwok";
  return fixtures::NodeManifest(node);
}

Json BenchWorkerPod(int i, int jobs, int nodes) {
  return fixtures::WorkerPodManifest({.job = "bench-" + std::to_string(i % jobs),
                                      .index = i / jobs,
                                      .node = "bench-node-" + std::to_string(i % nodes)});
}

}  // namespace tpujob::bench
