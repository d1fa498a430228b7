// tpujob-bench: load generators for `make bench` (not part of the product).
//
//   tpujob-bench create-pods --kubeconfig K --namespace NS --count N --jobs J --nodes M
//     creates N pods labelled as J TPUJobs' workers, bound round-robin to the KWOK nodes
//     bench-node-0..M-1, with 16 threads and no client-side rate limit, and prints the rate.
//   tpujob-bench create-nodes --kubeconfig K --count M
//     creates M KWOK-managed fake TPU nodes.
//   tpujob-bench gang --kubeconfig K --namespace NS --name J --workers W --topology T
//       [--slices S] [--finish]
//     creates a TPUJob of W workers (per slice, S slices) and reports the time until the operator
//     created all its pods (seen through a watch opened before the create); with --finish it then
//     drives the job to success (worker 0 exits 0), waits for Succeeded, deletes it and waits until
//     its pods are gone: one job's whole life
//   tpujob-bench fault-latency --kubeconfig K --namespace NS --faults F [--workers W]
//     creates F + 4W fake TPU nodes of an accelerator of their own, then F times: runs a
//     W-worker TPUJob until Running, writes the hardware condition TPUUnhealthy=True on worker
//     0's node and times, through watches opened beforehand, how long until that node is
//     cordoned and every pod of the job is being deleted; prints p50/p90/p99/max of both and
//     of each, then deletes what it created.
//   tpujob-bench admission --nodes 5000 --jobs 1000 [--runs 21] [--seed S]
//     needs no cluster: builds a random cluster in memory (several accelerators and topologies,
//     node pools of 4-64 nodes with 4 or 8 chips, about 70% of the chips used by pods, a few
//     nodes cordoned or unhealthy, a few reservations) and a queue of mixed gangs (a quarter of
//     the multi-host ones multislice, 2-8 slices), then times
//     the queue's BuildCapacity + PlanAdmissions per run: median, p90, min, max, and how many
//     jobs were admitted.
//   tpujob-bench preemption --nodes 5000 --running 500 --jobs 1000 [--runs 21] [--seed S]
//     needs no cluster: 5,000 nodes in memory held by 500 running gangs (whole nodes, ~90% of
//     them), 1,000 queued gangs of mixed priority (a quarter of the multi-host ones multislice,
//     2-8 slices); times the queue's victim selection
//     (PlanPreemptions) per run beside PlanAdmissions on the same queue: median, p99.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cache/intern.h"
#include "cache/objects.h"
#include "cache/store.h"
#include "kube/client.h"
#include "kube/config.h"
#include "policy/node_health.h"
#include "policy/preemption.h"
#include "policy/queue.h"

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

// Polls `condition` every `interval` for up to `seconds`.
bool WaitFor(const std::function<bool()>& condition, int seconds,
             std::chrono::milliseconds interval = std::chrono::milliseconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(interval);
  }
  return false;
}

int Gang(const std::string& kubeconfig, const std::string& ns, const std::string& name, int workers,
         const std::string& topology, int chips, int slices, bool finish) {
  const int pods_wanted = workers * slices;
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
                  {"chipsPerWorker", chips},
                  {"slices", slices}}},
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
  while (static_cast<int>(seen.size()) < pods_wanted) {
    auto event = (*watch)->Next();
    if (!event || !*event) {
      // The watch broke (a busy server may drop it): count by listing instead.
      const bool all = WaitFor(
          [&] {
            auto pods = client->List(Resource::Pods(), ns, by_job);
            return pods && static_cast<int>((*pods)["items"].size()) >= pods_wanted;
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
  std::printf("%s: all %d pods (%d x %d) created %.0f ms after the TPUJob was created\n",
              name.c_str(), pods_wanted, slices, workers, MsSince(start));
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
  auto patched =
      client->Patch(Resource::Pods(), ns, name + (slices > 1 ? "-worker-0-0" : "-worker-0"),
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

// Follows one watch on a thread of its own and hands every event to `on_event` together with
// the moment it arrived. A watch that breaks or ends is opened again from the last
// resourceVersion seen (relisting after 410 Gone), so no event is lost; `reopened()` counts
// those reconnections.
class Follower {
 public:
  using Handler =
      std::function<void(const tpujob::kube::WatchEvent&, std::chrono::steady_clock::time_point)>;

  Follower(tpujob::kube::Client& client, Resource resource, std::string ns, std::string selector,
           Handler on_event)
      : client_(client),
        resource_(std::move(resource)),
        ns_(std::move(ns)),
        selector_(std::move(selector)),
        on_event_(std::move(on_event)) {}
  ~Follower() { Stop(); }

  // Lists once (for the resourceVersion to watch from) and starts following.
  bool Start() {
    if (!Relist()) return false;
    thread_ = std::thread([this] { Run(); });
    return true;
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      if (stream_ != nullptr) stream_->Cancel();
    }
    if (thread_.joinable()) thread_.join();
  }

  int reopened() const { return reopened_; }

 private:
  bool Relist() {
    tpujob::kube::ListOptions options;
    options.label_selector = selector_;
    auto listed = client_.List(resource_, ns_, options);
    if (!listed) {
      std::fprintf(stderr, "error: %s\n", listed.error().ToString().c_str());
      return false;
    }
    resource_version_ = listed->value("/metadata/resourceVersion"_json_pointer, "");
    return true;
  }

  void Run() {
    bool first = true;
    while (true) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
      }
      if (!first) {
        ++reopened_;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      first = false;
      tpujob::kube::WatchOptions options;
      options.label_selector = selector_;
      options.resource_version = resource_version_;
      auto watch = client_.Watch(resource_, ns_, options);
      if (!watch) {
        if (watch.error().IsGone()) Relist();
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
        stream_ = watch->get();
      }
      while (true) {
        auto event = (*watch)->Next();
        const auto at = std::chrono::steady_clock::now();
        if (!event || !*event) break;
        if ((*event)->type == tpujob::kube::WatchEventType::kError) {
          if ((*event)->error.IsGone()) Relist();
          break;
        }
        const std::string version =
            (*event)->object.value("/metadata/resourceVersion"_json_pointer, "");
        if (!version.empty()) resource_version_ = version;
        if ((*event)->type != tpujob::kube::WatchEventType::kBookmark) on_event_(**event, at);
      }
      std::lock_guard<std::mutex> lock(mu_);
      stream_ = nullptr;
    }
  }

  tpujob::kube::Client& client_;
  const Resource resource_;
  const std::string ns_;
  const std::string selector_;
  const Handler on_event_;
  std::string resource_version_;  // only the watch thread touches it once started
  std::atomic<int> reopened_{0};
  std::mutex mu_;
  bool stopping_ = false;
  tpujob::kube::WatchStream* stream_ = nullptr;  // the open watch, to cancel it
  std::thread thread_;
};

// What one injected fault is waiting for, filled in by the watch threads.
struct FaultProbe {
  std::mutex mu;
  std::condition_variable changed;
  std::string node;            // the node the condition was written on
  std::set<std::string> pods;  // uids of the job's pods not yet seen being deleted
  std::optional<std::chrono::steady_clock::time_point> cordoned;  // node seen unschedulable
  std::optional<std::chrono::steady_clock::time_point> deleted;   // last of `pods` seen going

  bool Done() const { return cordoned && deleted; }
};

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

int FaultLatency(const std::string& kubeconfig, const std::string& ns, const std::string& prefix,
                 int faults, int workers, const std::string& condition, int timeout_seconds) {
  auto client = Connect(kubeconfig);
  const std::string accelerator = "tpu-" + prefix;
  const std::string topology = "2x" + std::to_string(2 * workers);  // 4 chips per worker
  const std::string node_label = "tpujob.dev/bench-nodes";
  const int node_count = faults + 4 * workers;  // one node cordoned per fault, plus room

  // Fresh nodes of an accelerator no other job asks for, tainted as GKE taints TPU nodes.
  const int node_failures = Parallel(node_count, 4, [&](int i) {
    Json node = {
        {"apiVersion", "v1"},
        {"kind", "Node"},
        {"metadata",
         {{"name", prefix + "-node-" + std::to_string(i)},
          {"annotations", {{"kwok.x-k8s.io/node", "fake"}}},
          {"labels",
           {{"type", "kwok"},
            {node_label, prefix},
            {"cloud.google.com/gke-tpu-accelerator", accelerator},
            {"cloud.google.com/gke-tpu-topology", topology},
            {"cloud.google.com/gke-nodepool", prefix}}}}},
        {"spec",
         {{"taints",
           Json::array(
               {{{"key", "google.com/tpu"}, {"value", "present"}, {"effect", "NoSchedule"}}})}}},
        {"status",
         {{"allocatable",
           {{"cpu", "32"}, {"memory", "128Gi"}, {"pods", "110"}, {"google.com/tpu", "4"}}},
          {"capacity",
           {{"cpu", "32"}, {"memory", "128Gi"}, {"pods", "110"}, {"google.com/tpu", "4"}}}}}};
    auto created = client->Create(Resource::Nodes(), "", node);
    return created.has_value() || created.error().IsAlreadyExists();
  });
  const auto delete_nodes = [&] {
    Parallel(node_count, 4, [&](int i) {
      auto deleted = client->Delete(Resource::Nodes(), "", prefix + "-node-" + std::to_string(i));
      return deleted.has_value() || deleted.error().IsNotFound();
    });
  };
  if (node_failures > 0) {
    std::fprintf(stderr, "error: %d of %d nodes not created\n", node_failures, node_count);
    delete_nodes();
    return 1;
  }
  tpujob::kube::ListOptions by_nodes;
  by_nodes.label_selector = node_label + "=" + prefix;
  const bool ready = WaitFor(
      [&] {
        auto nodes = client->List(Resource::Nodes(), "", by_nodes);
        if (!nodes) return false;
        int count = 0;
        for (const auto& node : (*nodes)["items"]) {
          for (const auto& c : node.value("/status/conditions"_json_pointer, Json::array())) {
            count += c.value("type", "") == "Ready" && c.value("status", "") == "True";
          }
        }
        return count >= node_count;
      },
      60, std::chrono::milliseconds(200));
  if (!ready) {
    std::fprintf(stderr, "error: the %d nodes did not all become Ready\n", node_count);
    delete_nodes();
    return 1;
  }

  // Both watches run for the whole benchmark, so each is open long before its fault.
  FaultProbe probe;
  Follower node_watch(
      *client, Resource::Nodes(), "", by_nodes.label_selector,
      [&](const tpujob::kube::WatchEvent& event, std::chrono::steady_clock::time_point at) {
        std::lock_guard<std::mutex> lock(probe.mu);
        if (probe.cordoned || probe.node.empty() ||
            event.object.value("/metadata/name"_json_pointer, "") != probe.node ||
            !event.object.value("/spec/unschedulable"_json_pointer, false)) {
          return;
        }
        probe.cordoned = at;
        probe.changed.notify_all();
      });
  Follower pod_watch(
      *client, Resource::Pods(), ns, "tpujob.dev/job-name",
      [&](const tpujob::kube::WatchEvent& event, std::chrono::steady_clock::time_point at) {
        std::lock_guard<std::mutex> lock(probe.mu);
        const bool going = event.type == tpujob::kube::WatchEventType::kDeleted ||
                           event.object.contains("/metadata/deletionTimestamp"_json_pointer);
        if (!going || probe.pods.erase(event.object.value("/metadata/uid"_json_pointer, "")) == 0) {
          return;
        }
        if (probe.pods.empty()) {
          probe.deleted = at;
          probe.changed.notify_all();
        }
      });
  if (!node_watch.Start() || !pod_watch.Start()) {
    delete_nodes();
    return 1;
  }

  Json container = {{"name", "trainer"}, {"image", "trainer:latest"}};
  std::vector<double> total_ms, cordon_ms, delete_ms;
  int failures = 0;
  // Deletes the job and waits until it and its pods are gone.
  const auto remove_job = [&](const std::string& name) {
    tpujob::kube::DeleteOptions foreground;
    foreground.propagation_policy = "Foreground";
    client->Delete(Resource::TPUJobs(), ns, name, foreground);
    tpujob::kube::ListOptions by_job;
    by_job.label_selector = "tpujob.dev/job-name=" + name;
    const bool gone = WaitFor(
        [&] {
          auto pods = client->List(Resource::Pods(), ns, by_job);
          return pods && (*pods)["items"].empty() && !client->Get(Resource::TPUJobs(), ns, name);
        },
        120, std::chrono::milliseconds(50));
    if (!gone) {
      std::fprintf(stderr, "error: %s and its pods not gone 120 s after its deletion\n",
                   name.c_str());
    }
    return gone;
  };
  const auto bench_start = std::chrono::steady_clock::now();
  for (int fault = 0; fault < faults; ++fault) {
    const std::string name = prefix + "-" + std::to_string(fault);
    tpujob::kube::ListOptions by_job;
    by_job.label_selector = "tpujob.dev/job-name=" + name;
    Json job = {
        {"apiVersion", "tpujob.dev/v1alpha1"},
        {"kind", "TPUJob"},
        {"metadata", {{"name", name}}},
        {"spec",
         {{"tpu", {{"accelerator", accelerator}, {"topology", topology}, {"chipsPerWorker", 4}}},
          {"faultTolerance", {{"maxJobRetries", 1}}},
          {"replicaSpecs",
           {{"Worker",
             {{"replicas", workers},
              {"template", {{"spec", {{"containers", Json::array({container})}}}}}}}}}}}};
    auto created = client->Create(Resource::TPUJobs(), ns, job);
    if (!created) {
      std::fprintf(stderr, "error: %s\n", created.error().ToString().c_str());
      ++failures;
      break;
    }
    const bool running = WaitFor(
        [&] {
          auto got = client->Get(Resource::TPUJobs(), ns, name);
          return got && got->value("/status/phase"_json_pointer, "") == "Running";
        },
        120, std::chrono::milliseconds(50));
    // The pods the fault must remove, and worker 0's node.
    std::set<std::string> uids;
    std::string node;
    if (auto pods = client->List(Resource::Pods(), ns, by_job); running && pods) {
      for (const auto& pod : (*pods)["items"]) {
        if (pod.contains("/metadata/deletionTimestamp"_json_pointer)) continue;
        uids.insert(pod.value("/metadata/uid"_json_pointer, ""));
        if (pod.value("/metadata/name"_json_pointer, "") == name + "-worker-0") {
          node = pod.value("/spec/nodeName"_json_pointer, "");
        }
      }
    }
    if (!running || node.empty() || static_cast<int>(uids.size()) != workers) {
      std::fprintf(stderr, "error: %s never Running with %d pods (node of worker 0: \"%s\")\n",
                   name.c_str(), workers, node.c_str());
      ++failures;
      remove_job(name);
      break;
    }

    {
      std::lock_guard<std::mutex> lock(probe.mu);
      probe.node = node;
      probe.pods = uids;
      probe.cordoned.reset();
      probe.deleted.reset();
    }
    // As node-problem-detector reports it: a strategic merge on the status subresource,
    // which merges conditions by type and leaves the ones KWOK keeps alone.
    const std::string now = UtcNow();
    Json patch = {{"status",
                   {{"conditions", Json::array({{{"type", condition},
                                                 {"status", "True"},
                                                 {"reason", "ChipError"},
                                                 {"message", "injected by tpujob-bench"},
                                                 {"lastHeartbeatTime", now},
                                                 {"lastTransitionTime", now}}})}}}};
    tpujob::kube::PatchOptions status_options;
    status_options.subresource = "status";
    const auto t0 = std::chrono::steady_clock::now();
    auto written = client->Patch(Resource::Nodes(), "", node,
                                 tpujob::kube::PatchType::kStrategicMerge, patch, status_options);
    if (!written) {
      std::fprintf(stderr, "error: %s\n", written.error().ToString().c_str());
      ++failures;
      remove_job(name);
      break;
    }
    {
      std::unique_lock<std::mutex> lock(probe.mu);
      probe.changed.wait_for(lock, std::chrono::seconds(timeout_seconds),
                             [&] { return probe.Done(); });
      const auto ms = [&](std::chrono::steady_clock::time_point t) {
        return std::chrono::duration<double, std::milli>(t - t0).count();
      };
      if (probe.cordoned) cordon_ms.push_back(ms(*probe.cordoned));
      if (probe.deleted) delete_ms.push_back(ms(*probe.deleted));
      if (probe.Done()) {
        total_ms.push_back(ms(std::max(*probe.cordoned, *probe.deleted)));
      } else {
        std::fprintf(stderr, "error: %s: no %s within %d s of %s=True on node %s\n", name.c_str(),
                     probe.cordoned ? "pod deletion" : "cordon", timeout_seconds, condition.c_str(),
                     node.c_str());
        ++failures;
      }
      probe.node.clear();
      probe.pods.clear();
    }

    // Gone, with its re-issued pods, before the next fault, so each is timed on a quiet job.
    if (!remove_job(name)) {
      ++failures;
      break;
    }
  }
  node_watch.Stop();
  pod_watch.Stop();
  delete_nodes();

  std::printf(
      "fault-to-action latency over %zu faults (%d-worker TPUJobs; %s=True written on worker "
      "0's node -> that node cordoned and the job's %d pods deleted), %.0f s in all:\n",
      total_ms.size(), workers, condition.c_str(), workers, MsSince(bench_start) / 1000);
  PrintLatencies("cordon + pods deleted:", total_ms);
  PrintLatencies("node cordoned:", cordon_ms);
  PrintLatencies("pods deleted:", delete_ms);
  std::printf("  samples (ms, cordon + pods deleted):");
  for (double ms : total_ms) std::printf(" %.0f", ms);
  std::printf("\n");
  if (node_watch.reopened() + pod_watch.reopened() > 0) {
    std::printf("  watches reopened: %d\n", node_watch.reopened() + pod_watch.reopened());
  }
  if (failures > 0) std::printf("  faults not measured: %d\n", failures);
  return failures == 0 ? 0 : 1;
}

// One kind of slice in the simulated cluster: its node labels, chips per node (and per worker)
// and the worker counts its jobs ask for.
struct SliceKind {
  const char* accelerator;
  const char* topology;
  int64_t chips;
  std::vector<int32_t> workers;
};

// The slice kinds of the simulated clusters.
std::vector<SliceKind> SliceKinds() {
  return {
      {"tpu-v5-lite-podslice", "2x2", 4, {1}},
      {"tpu-v5-lite-podslice", "2x4", 8, {1}},
      {"tpu-v5-lite-podslice", "4x4", 4, {4}},
      {"tpu-v5-lite-podslice", "8x8", 4, {16}},
      {"tpu-v4-podslice", "2x2x4", 4, {4}},
      {"tpu-v5p-slice", "4x4x4", 4, {16}},
      {"tpu-v6e-slice", "4x8", 4, {8}},
      {"tpu-v6e-slice", "16x16", 4, {2, 4, 8, 16, 32, 64}},  // some ask for part of a pod
  };
}

int AdmissionBench(int node_count, int job_count, int runs, unsigned seed) {
  using tpujob::cache::InternedString;
  using tpujob::cache::NodeInfo;
  using tpujob::cache::PodInfo;
  namespace policy = tpujob::policy;
  std::mt19937 rng(seed);
  const auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };

  const std::vector<SliceKind> kinds = SliceKinds();
  const InternedString ready = InternedString::Intern("Ready");
  const InternedString trainer = InternedString::Intern("trainer");
  const InternedString ns = InternedString::Intern("bench");

  // Node pools of 4-64 nodes, each of one slice kind; ~70% of the chips taken by running
  // pods, plus finished pods that no longer count; 1% cordoned, 1% NotReady.
  std::vector<NodeInfo> nodes;
  std::vector<PodInfo> pods;
  nodes.reserve(node_count);
  int pool_count = 0;
  int64_t chips_total = 0, chips_used = 0;
  while (static_cast<int>(nodes.size()) < node_count) {
    const SliceKind& kind = kinds[pick(0, static_cast<int>(kinds.size()) - 1)];
    const std::string pool = "pool-" + std::to_string(pool_count++);
    const int size = std::min(pick(4, 64), node_count - static_cast<int>(nodes.size()));
    for (int i = 0; i < size; ++i) {
      NodeInfo node;
      node.name = pool + "-node-" + std::to_string(i);
      node.labels.Set(policy::kAcceleratorLabel, kind.accelerator);
      node.labels.Set(policy::kTopologyLabel, kind.topology);
      node.labels.Set(tpujob::cache::kNodePoolLabel, pool);
      node.tpu_allocatable = kind.chips;
      node.unschedulable = chance(0.01);
      node.ready = chance(0.01) ? tpujob::cache::ConditionStatus::kFalse
                                : tpujob::cache::ConditionStatus::kTrue;
      node.conditions.push_back({ready, node.ready, InternedString(), "", std::nullopt});
      chips_total += kind.chips;
      // Workers of 4 chips (2 per 8-chip node) or of the whole node.
      const int64_t pod_chips = kind.chips == 8 && chance(0.5) ? 4 : kind.chips;
      for (int64_t used = 0; used < kind.chips; used += pod_chips) {
        const bool running = chance(0.7);
        if (!running && !chance(0.2)) continue;
        PodInfo pod;
        pod.ns = ns;
        pod.name = node.name + "-pod-" + std::to_string(used);
        pod.node_name = InternedString::Intern(node.name);
        pod.phase =
            running ? tpujob::cache::PodPhase::kRunning : tpujob::cache::PodPhase::kSucceeded;
        tpujob::cache::ContainerInfo c;
        c.name = trainer;
        c.tpu_request = pod_chips;
        pod.containers.push_back(std::move(c));
        pods.push_back(std::move(pod));
        if (running) chips_used += pod_chips;
      }
      nodes.push_back(std::move(node));
    }
  }

  // The queue: mostly small gangs, some big ones; a few re-issued; priorities 0-3; queued over
  // the last hour. A few admitted gangs whose pods are not bound yet hold reservations.
  const tpujob::WallTime now = std::chrono::system_clock::now();
  std::vector<policy::GangRequest> queued;
  queued.reserve(job_count);
  for (int j = 0; j < job_count; ++j) {
    const SliceKind& kind = kinds[pick(0, static_cast<int>(kinds.size()) - 1)];
    policy::GangRequest job;
    job.job = "team-" + std::to_string(j % 17) + "/job-" + std::to_string(j);
    job.accelerator = kind.accelerator;
    job.topology = kind.topology;
    job.workers = kind.workers[pick(0, static_cast<int>(kind.workers.size()) - 1)];
    job.chips_per_worker = kind.chips;
    // A quarter of the multi-host jobs are multislice, of 2-8 slices.
    if (job.workers > 1 && chance(0.25)) job.slices = pick(2, 8);
    job.reissued = chance(0.05);
    job.priority = pick(0, 3);
    job.queued_at = now - std::chrono::seconds(pick(0, 3600));
    queued.push_back(std::move(job));
  }
  std::vector<policy::Reservation> reservations;
  for (int r = 0; r < 20; ++r) {
    const int n = pick(0, static_cast<int>(nodes.size()) - 1);
    reservations.push_back({"team-r/started-" + std::to_string(r),
                            std::string(nodes[n].labels.Value(policy::kAcceleratorLabel)),
                            std::string(nodes[n].labels.Value(policy::kTopologyLabel)),
                            std::string(nodes[n].labels.Value(tpujob::cache::kNodePoolLabel)),
                            pick(1, 4), nodes[n].tpu_allocatable});
  }

  std::vector<const NodeInfo*> node_ptrs;
  for (const NodeInfo& node : nodes) node_ptrs.push_back(&node);
  std::vector<const PodInfo*> pod_ptrs;
  for (const PodInfo& pod : pods) pod_ptrs.push_back(&pod);
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
  const auto print = [](const char* label, std::vector<double> ms) {
    std::sort(ms.begin(), ms.end());
    std::printf("  %-34s median %.2f ms  p90 %.2f ms  min %.2f ms  max %.2f ms\n", label,
                Percentile(ms, 50), Percentile(ms, 90), ms.front(), ms.back());
  };
  print("BuildCapacity + PlanAdmissions:", total_ms);
  print("  BuildCapacity:", build_ms);
  print("  PlanAdmissions:", plan_ms);
  std::printf(
      "  admitted %d of %zu jobs, %d of them multislice (waiting for capacity: %d, waiting in "
      "line: %d)\n",
      admitted, queued.size(), admitted_multislice, for_capacity, in_line);
  return 0;
}

// Victim selection: a cluster in memory whose nodes are held by `running_count` running gangs
// (whole nodes, one pool each, priorities 0-3, 90% preemptible) with ~10% of the nodes free,
// and `job_count` queued gangs of priorities 0-5; times PlanPreemptions (what the queue adds
// to a plan when a head is blocked) per run.
int PreemptionBench(int node_count, int running_count, int job_count, int runs, unsigned seed) {
  using tpujob::cache::InternedString;
  using tpujob::cache::NodeInfo;
  using tpujob::cache::PodInfo;
  namespace policy = tpujob::policy;
  std::mt19937 rng(seed);
  const auto chance = [&](double p) { return std::bernoulli_distribution(p)(rng); };
  const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const std::vector<SliceKind> kinds = SliceKinds();
  const InternedString ready = InternedString::Intern("Ready");
  const InternedString trainer = InternedString::Intern("trainer");
  const InternedString ns = InternedString::Intern("bench");

  struct Pool {
    const SliceKind* kind;
    std::vector<size_t> free;  // node indexes not taken yet
  };
  std::vector<NodeInfo> nodes;
  std::vector<Pool> pools;
  nodes.reserve(node_count);
  while (static_cast<int>(nodes.size()) < node_count) {
    const SliceKind& kind = kinds[pick(0, static_cast<int>(kinds.size()) - 1)];
    const std::string pool = "pool-" + std::to_string(pools.size());
    pools.push_back({&kind, {}});
    const int size = std::min(pick(4, 64), node_count - static_cast<int>(nodes.size()));
    for (int i = 0; i < size; ++i) {
      NodeInfo node;
      node.name = pool + "-node-" + std::to_string(i);
      node.labels.Set(policy::kAcceleratorLabel, kind.accelerator);
      node.labels.Set(policy::kTopologyLabel, kind.topology);
      node.labels.Set(tpujob::cache::kNodePoolLabel, pool);
      node.tpu_allocatable = kind.chips;
      node.ready = tpujob::cache::ConditionStatus::kTrue;
      node.conditions.push_back({ready, node.ready, InternedString(), "", std::nullopt});
      pools.back().free.push_back(nodes.size());
      nodes.push_back(std::move(node));
    }
  }

  // Running gangs take whole nodes of one pool until ~90% of the nodes are taken.
  const tpujob::WallTime now = std::chrono::system_clock::now();
  std::vector<policy::RunningGang> running;
  std::vector<PodInfo> pods;
  size_t taken = 0;
  for (int j = 0; j < running_count && taken < nodes.size() * 9 / 10; ++j) {
    Pool* pool = nullptr;
    for (int tries = 0; tries < 100 && pool == nullptr; ++tries) {
      Pool& p = pools[pick(0, static_cast<int>(pools.size()) - 1)];
      if (!p.free.empty()) pool = &p;
    }
    if (pool == nullptr) break;
    const SliceKind& kind = *pool->kind;
    int32_t workers = kind.workers[pick(0, static_cast<int>(kind.workers.size()) - 1)];
    workers = std::min<int32_t>(workers, static_cast<int32_t>(pool->free.size()));
    policy::RunningGang gang;
    gang.job = "team-" + std::to_string(j % 17) + "/running-" + std::to_string(j);
    gang.accelerator = kind.accelerator;
    gang.topology = kind.topology;
    gang.priority = pick(0, 3);
    gang.preemptible = chance(0.9);
    gang.admitted_at = now - std::chrono::seconds(pick(60, 86400));
    for (int32_t w = 0; w < workers; ++w) {
      const size_t n = pool->free.back();
      pool->free.pop_back();
      ++taken;
      gang.chips.emplace_back(nodes[n].name, kind.chips);
      PodInfo pod;
      pod.ns = ns;
      pod.name = gang.job.substr(gang.job.find('/') + 1) + "-worker-" + std::to_string(w);
      pod.node_name = InternedString::Intern(nodes[n].name);
      pod.phase = tpujob::cache::PodPhase::kRunning;
      tpujob::cache::ContainerInfo c;
      c.name = trainer;
      c.tpu_request = kind.chips;
      pod.containers.push_back(std::move(c));
      pods.push_back(std::move(pod));
    }
    running.push_back(std::move(gang));
  }

  std::vector<policy::GangRequest> queued;
  queued.reserve(job_count);
  for (int j = 0; j < job_count; ++j) {
    const SliceKind& kind = kinds[pick(0, static_cast<int>(kinds.size()) - 1)];
    policy::GangRequest job;
    job.job = "team-" + std::to_string(j % 17) + "/job-" + std::to_string(j);
    job.accelerator = kind.accelerator;
    job.topology = kind.topology;
    job.workers = kind.workers[pick(0, static_cast<int>(kind.workers.size()) - 1)];
    job.chips_per_worker = kind.chips;
    if (job.workers > 1 && chance(0.25)) job.slices = pick(2, 8);  // multislice heads too
    job.priority = pick(0, 5);
    job.queued_at = now - std::chrono::seconds(pick(0, 3600));
    queued.push_back(std::move(job));
  }

  std::vector<const NodeInfo*> node_ptrs;
  for (const NodeInfo& node : nodes) node_ptrs.push_back(&node);
  std::vector<const PodInfo*> pod_ptrs;
  for (const PodInfo& pod : pods) pod_ptrs.push_back(&pod);
  const policy::Capacity capacity =
      policy::BuildCapacity(node_ptrs, pod_ptrs, {}, policy::NodeHealthConfig{}, now);

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
  const auto print = [](const char* label, std::vector<double> ms) {
    std::sort(ms.begin(), ms.end());
    std::printf("  %-34s median %.2f ms  p99 %.2f ms  min %.2f ms  max %.2f ms\n", label,
                Percentile(ms, 50), Percentile(ms, 99), ms.front(), ms.back());
  };
  print("PlanPreemptions:", select_ms);
  print("PlanAdmissions (same queue):", plan_ms);
  std::printf("  %zu blocked heads preempt, %zu victims in all\n", preemptions, victims);
  return 0;
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
  int workers = 64, chips = 4, slices = 1;
  bool finish = false;
  auto* gang = app.add_subcommand("gang", "Time a TPUJob's gang creation (and its whole life).");
  gang->add_option("--kubeconfig", kubeconfig)->required();
  gang->add_option("--namespace", ns)->capture_default_str();
  gang->add_option("--name", name)->capture_default_str();
  gang->add_option("--workers", workers)->capture_default_str();
  gang->add_option("--topology", topology)->capture_default_str();
  gang->add_option("--chips-per-worker", chips)->capture_default_str();
  gang->add_option("--slices", slices, "Slices of --workers hosts each (spec.tpu.slices).")
      ->capture_default_str();
  gang->add_flag("--finish", finish, "Drive the job to success and delete it.");
  auto* node_cmd = app.add_subcommand("create-nodes", "Create KWOK-managed fake TPU nodes.");
  node_cmd->add_option("--kubeconfig", kubeconfig)->required();
  node_cmd->add_option("--count", nodes)->capture_default_str();
  std::string prefix = "fault-latency", condition = "TPUUnhealthy";
  int faults = 50, fault_workers = 2, timeout_seconds = 30;
  auto* fault_cmd = app.add_subcommand(
      "fault-latency",
      "Time node condition written -> node cordoned and the job's pods deleted, per fault.");
  fault_cmd->add_option("--kubeconfig", kubeconfig)->required();
  fault_cmd->add_option("--namespace", ns)->capture_default_str();
  fault_cmd->add_option("--prefix", prefix, "Names of the nodes and jobs it creates.")
      ->capture_default_str();
  fault_cmd->add_option("--faults", faults, "Faults injected, one per TPUJob, one at a time.")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  fault_cmd->add_option("--workers", fault_workers, "Workers (TPU hosts) of each TPUJob.")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  fault_cmd
      ->add_option("--condition", condition,
                   "Node condition written True (the operator's "
                   "--hardware-condition).")
      ->capture_default_str();
  fault_cmd->add_option("--timeout", timeout_seconds, "Seconds to wait for the action per fault.")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  int admission_nodes = 5000, admission_jobs = 1000, runs = 21;
  unsigned seed = 1;
  int preemption_running = 500;
  // The in-memory benchmarks' options: the cluster's size, the queue's, the runs, the seed.
  const auto in_memory_options = [&](CLI::App* cmd) {
    cmd->add_option("--nodes", admission_nodes, "TPU nodes.")
        ->check(CLI::Range(1, 1000000))
        ->capture_default_str();
    cmd->add_option("--jobs", admission_jobs, "Queued jobs.")
        ->check(CLI::Range(0, 1000000))
        ->capture_default_str();
    cmd->add_option("--runs", runs, "Timed runs.")
        ->check(CLI::Range(1, 10000))
        ->capture_default_str();
    cmd->add_option("--seed", seed, "Random seed of the cluster and queue.")->capture_default_str();
  };
  auto* admission_cmd = app.add_subcommand(
      "admission", "Time the queue's admission plan on a random in-memory cluster (no cluster).");
  in_memory_options(admission_cmd);
  auto* preemption_cmd = app.add_subcommand(
      "preemption", "Time victim selection on a random in-memory cluster (no cluster).");
  in_memory_options(preemption_cmd);
  preemption_cmd->add_option("--running", preemption_running, "Running gangs (whole nodes).")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (admission_cmd->parsed()) return AdmissionBench(admission_nodes, admission_jobs, runs, seed);
  if (preemption_cmd->parsed()) {
    return PreemptionBench(admission_nodes, preemption_running, admission_jobs, runs, seed);
  }
  if (gang->parsed()) return Gang(kubeconfig, ns, name, workers, topology, chips, slices, finish);
  if (fault_cmd->parsed()) {
    return FaultLatency(kubeconfig, ns, prefix, faults, fault_workers, condition, timeout_seconds);
  }

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
