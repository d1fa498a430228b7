// tpujob-bench: load generators for `make bench` (not part of the product).
//
//   tpujob-bench create-pods --kubeconfig K --namespace NS --count N --jobs J --nodes M
//     creates N pods labelled as J TPUJobs' workers, bound round-robin to the KWOK nodes
//     bench-node-0..M-1, with 16 threads and no client-side rate limit, and prints the rate.
//   tpujob-bench create-nodes --kubeconfig K --count M
//   tpujob-bench gang --kubeconfig K --namespace NS --name J --workers W --topology T [--finish]
//     creates a TPUJob of W workers and reports the time until the operator created all its
//     pods (seen through a watch opened before the create); with --finish it then drives the
//     job to success (worker 0 exits 0), waits for Succeeded, deletes it and waits until its
//     pods are gone: one job's whole life
//     creates M KWOK-managed fake TPU nodes.

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <set>
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

// Milliseconds since `start`.
double MsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// Polls `condition` every 10 ms for up to `seconds`.
bool WaitFor(const std::function<bool()>& condition, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

int Gang(const std::string& kubeconfig, const std::string& ns, const std::string& name, int workers,
         const std::string& topology, int chips, bool finish) {
  auto client = Connect(kubeconfig);
  tpujob::kube::ListOptions by_job;
  by_job.label_selector = "tpujob.dev/job-name=" + name;
  const std::string selector = by_job.label_selector;
  auto listed = client->List(Resource::Pods(), ns, by_job);
  if (!listed) {
    std::fprintf(stderr, "error: %s\n", listed.error().ToString().c_str());
    return 1;
  }
  tpujob::kube::WatchOptions watch_options;
  watch_options.label_selector = selector;
  watch_options.resource_version = listed->value("/metadata/resourceVersion"_json_pointer, "");
  auto watch = client->Watch(Resource::Pods(), ns, watch_options);
  if (!watch) {
    std::fprintf(stderr, "error: %s\n", watch.error().ToString().c_str());
    return 1;
  }
  Json container = {{"name", "trainer"}, {"image", "trainer:latest"}};
  Json job = {{"apiVersion", "tpujob.dev/v1alpha1"},
              {"kind", "TPUJob"},
              {"metadata", {{"name", name}}},
              {"spec",
               {{"tpu",
                 {{"accelerator", "tpu-v5-lite-podslice"},
                  {"topology", topology},
                  {"chipsPerWorker", chips}}},
                {"replicaSpecs",
                 {{"Worker",
                   {{"replicas", workers},
                    {"template", {{"spec", {{"containers", Json::array({container})}}}}}}}}}}}};
  const auto start = std::chrono::steady_clock::now();
  auto created = client->Create(Resource::TPUJobs(), ns, job);
  if (!created) {
    std::fprintf(stderr, "error: %s\n", created.error().ToString().c_str());
    return 1;
  }
  std::set<std::string> seen;
  while (static_cast<int>(seen.size()) < workers) {
    auto event = (*watch)->Next();
    if (!event || !*event) {
      // The watch broke (a busy server may drop it): count by listing instead.
      const bool all = WaitFor(
          [&] {
            auto pods = client->List(Resource::Pods(), ns, by_job);
            return pods && static_cast<int>((*pods)["items"].size()) >= workers;
          },
          120);
      if (!all) {
        std::fprintf(stderr, "error: only %zu pods were created\n", seen.size());
        return 1;
      }
      break;
    }
    if ((*event)->type == tpujob::kube::WatchEventType::kAdded) {
      seen.insert((*event)->object.value("/metadata/name"_json_pointer, ""));
    }
  }
  std::printf("%s: all %d pods created %.0f ms after the TPUJob was created\n", name.c_str(),
              workers, MsSince(start));
  if (!finish) return 0;

  const auto phase = [&] {
    auto got = client->Get(Resource::TPUJobs(), ns, name);
    return got ? got->value("/status/phase"_json_pointer, std::string()) : std::string();
  };
  if (!WaitFor([&] { return phase() == "Running"; }, 120)) {
    std::fprintf(stderr, "error: %s never Running\n", name.c_str());
    return 1;
  }
  Json status = {
      {"status",
       {{"phase", "Succeeded"},
        {"containerStatuses",
         Json::array(
             {{{"name", "trainer"},
               {"ready", false},
               {"restartCount", 0},
               {"image", "trainer:latest"},
               {"imageID", ""},
               {"state", {{"terminated", {{"exitCode", 0}, {"reason", "Completed"}}}}}}})}}}};
  tpujob::kube::PatchOptions status_options;
  status_options.subresource = "status";
  auto patched = client->Patch(Resource::Pods(), ns, name + "-worker-0",
                               tpujob::kube::PatchType::kMerge, status, status_options);
  if (!patched) {
    std::fprintf(stderr, "error: %s\n", patched.error().ToString().c_str());
    return 1;
  }
  if (!WaitFor([&] { return phase() == "Succeeded"; }, 120)) {
    std::fprintf(stderr, "error: %s never Succeeded\n", name.c_str());
    return 1;
  }
  tpujob::kube::DeleteOptions foreground;
  foreground.propagation_policy = "Foreground";
  client->Delete(Resource::TPUJobs(), ns, name, foreground);
  const bool gone = WaitFor(
      [&] {
        auto pods = client->List(Resource::Pods(), ns, by_job);
        return pods && (*pods)["items"].empty() && !client->Get(Resource::TPUJobs(), ns, name);
      },
      120);
  std::printf("%s: Running -> Succeeded -> deleted, children gone: %s\n", name.c_str(),
              gone ? "yes" : "NO");
  return gone ? 0 : 1;
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
  std::string name = "gang", topology = "16x16";
  int workers = 64, chips = 4;
  bool finish = false;
  auto* gang = app.add_subcommand("gang", "Time a TPUJob's gang creation (and its whole life).");
  gang->add_option("--kubeconfig", kubeconfig)->required();
  gang->add_option("--namespace", ns)->capture_default_str();
  gang->add_option("--name", name)->capture_default_str();
  gang->add_option("--workers", workers)->capture_default_str();
  gang->add_option("--topology", topology)->capture_default_str();
  gang->add_option("--chips-per-worker", chips)->capture_default_str();
  gang->add_flag("--finish", finish, "Drive the job to success and delete it.");
  auto* node_cmd = app.add_subcommand("create-nodes", "Create KWOK-managed fake TPU nodes.");
  node_cmd->add_option("--kubeconfig", kubeconfig)->required();
  node_cmd->add_option("--count", nodes)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (gang->parsed()) return Gang(kubeconfig, ns, name, workers, topology, chips, finish);

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
