// tpujob-bench: load generators for `make bench` (not part of the product).
//
//   tpujob-bench create-pods --kubeconfig K --namespace NS --count N --jobs J --nodes M
//     creates N pods labelled as J TPUJobs' workers, bound round-robin to the KWOK nodes
//     bench-node-0..M-1, with 16 threads and no client-side rate limit, and prints the rate.
//   tpujob-bench create-nodes --kubeconfig K --count M
//     creates M KWOK-managed fake TPU nodes.

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "kube/client.h"
#include "kube/config.h"

namespace {

using tpujob::kube::Json;
using tpujob::kube::Resource;

std::unique_ptr<tpujob::kube::Client> Connect(const std::string& kubeconfig) {
  auto config = tpujob::kube::LoadKubeconfig(kubeconfig);
  if (!config) {
    std::fprintf(stderr, "error: %s\n", config.error().ToString().c_str());
    std::exit(1);
  }
  config->qps = 0;  // measure the server, not our limiter
  return tpujob::kube::NewClient(*config);
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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Load generators for the tpujob-operator benchmarks.", "tpujob-bench"};
  app.require_subcommand(1);
  std::string kubeconfig, ns = "default";
  int count = 1000, jobs = 100, nodes = 20, threads = 16;
  auto* pods = app.add_subcommand("create-pods", "Create worker-like pods bound to fake nodes.");
  pods->add_option("--kubeconfig", kubeconfig)->required();
  pods->add_option("--namespace", ns)->capture_default_str();
  pods->add_option("--count", count)->capture_default_str();
  pods->add_option("--jobs", jobs)->capture_default_str();
  pods->add_option("--nodes", nodes)->capture_default_str();
  pods->add_option("--threads", threads)->capture_default_str();
  auto* node_cmd = app.add_subcommand("create-nodes", "Create KWOK-managed fake TPU nodes.");
  node_cmd->add_option("--kubeconfig", kubeconfig)->required();
  node_cmd->add_option("--count", nodes)->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  auto client = Connect(kubeconfig);
  const auto start = std::chrono::steady_clock::now();
  int failures = 0;
  int total = 0;
  if (node_cmd->parsed()) {
    total = nodes;
    failures = Parallel(nodes, 4, [&](int i) {
      Json node = {
          {"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata",
           {{"name", "bench-node-" + std::to_string(i)},
            {"annotations", {{"kwok.x-k8s.io/node", "fake"}}},
            {"labels",
             {{"type", "kwok"},
              {"cloud.google.com/gke-tpu-accelerator", "tpu-v5-lite-podslice"},
              {"cloud.google.com/gke-tpu-topology", "2x4"},
              {"cloud.google.com/gke-nodepool", "pool-" + std::to_string(i / 4)}}}}},
          {"spec",
           {{"taints",
             Json::array(
                 {{{"key", "kwok.x-k8s.io/node"}, {"value", "fake"}, {"effect", "NoSchedule"}}})}}},
          {"status",
           {{"allocatable",
             {{"cpu", "64"}, {"memory", "256Gi"}, {"pods", "1000"}, {"google.com/tpu", "4"}}},
            {"capacity",
             {{"cpu", "64"}, {"memory", "256Gi"}, {"pods", "1000"}, {"google.com/tpu", "4"}}}}}};
      auto created = client->Create(Resource::Nodes(), "", node);
      return created.has_value() || created.error().IsAlreadyExists();
    });
  } else {
    total = count;
    failures = Parallel(count, threads, [&](int i) {
      const int job = i % jobs;
      const int index = i / jobs;
      Json pod = {
          {"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", "bench-" + std::to_string(job) + "-worker-" + std::to_string(index)},
            {"labels",
             {{"tpujob.dev/job-name", "bench-" + std::to_string(job)},
              {"tpujob.dev/replica-type", "worker"},
              {"tpujob.dev/replica-index", std::to_string(index)},
              {"tpujob.dev/attempt", "1"}}}}},
          {"spec",
           {{"nodeName", "bench-node-" + std::to_string(i % nodes)},
            {"tolerations", Json::array({{{"key", "kwok.x-k8s.io/node"}, {"operator", "Exists"}}})},
            {"containers", Json::array({{{"name", "trainer"},
                                         {"image", "trainer:latest"},
                                         {"env", Json::array({{{"name", "TPU_WORKER_ID"},
                                                               {"value", std::to_string(index)}}})},
                                         {"resources",
                                          {{"requests", {{"google.com/tpu", "4"}}},
                                           {"limits", {{"google.com/tpu", "4"}}}}}}})}}}};
      auto created = client->Create(Resource::Pods(), ns, pod);
      return created.has_value() || created.error().IsAlreadyExists();
    });
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("created %d objects in %.2f s (%.0f/s), %d failures\n", total - failures, seconds,
              (total - failures) / seconds, failures);
  return failures == 0 ? 0 : 1;
}
