// tpujob-bench: load generators for `make bench` (not part of the product).
//
//   tpujob-bench create-pods --kubeconfig K --namespace NS --count N --jobs J --nodes M [--first F]
//     creates pods F..N-1, labelled as J TPUJobs' workers, bound round-robin to the KWOK nodes
//     bench-node-0..M-1, with 16 threads and no client-side rate limit, and prints the rate.
//   tpujob-bench jobset --kubeconfig K --namespace NS --name J --workers W --topology T
//     the JobSet peer of `gang`: one replicated Job of W indexed pods on the same nodes, timed
//     from the JobSet's create until all its pods exist, then deleted.
//   tpujob-bench create-nodes --kubeconfig K --count M [--first F]
//     creates the KWOK-managed fake TPU nodes bench-node-F..M-1.
//   tpujob-bench plain-gang --kubeconfig K --namespace NS --name J --workers W --topology T
//     the raw ceiling for `gang`: creates a TPUJob no operator watches, then the very pods the
//     operator would create for it (BuildPod) with a plain client, 16 threads, no client-side
//     limit, connections warm; reports the time until all were created the way `gang` does,
//     then deletes them.
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
//     of each, then deletes what it created. With --ceiling the same, but the tool itself
//     cordons and deletes as each fault write returns (the operator only runs the jobs).
//   tpujob-bench reissue --kubeconfig K --namespace NS --workers W --runs R
//     creates W + R fake TPU nodes of an accelerator of their own, then R times: runs a W-worker
//     TPUJob (termination grace 0) until Running, writes TPUUnhealthy=True on worker 0's node and
//     times until the job's attempt 2 has all W pods created and all Running; p50/p90/p99/max.
//   tpujob-bench slice-recovery --kubeconfig K --namespace NS --slices S --hosts H --runs R
//       --metrics-url URL [--hot-swap-runs N] [--grace G]
//     creates S + 1 node pools of H fake TPU nodes (4 chips each), then R times each, recovery
//     Slice and recovery Job interleaved: runs a TPUJob of S slices x H hosts (grace G) until
//     Running, writes TPUUnhealthy=True on a node of slice 1 and times, through a pod watch,
//     until attempt 2's pods are all Running (and the old ones all gone, the new ones all
//     created); counts the operator's API writes over the recovery from its /metrics at URL and
//     the new pods the scheduler placed; then deletes the job and heals the node. N more faults
//     with the spare pool held by a 1-slice job of lower priority (hot swap: the replaced slice
//     preempts it). Prints medians and the ratios Slice/Job.
//   tpujob-bench in-place --kubeconfig K --namespace NS --workers W --runs R --metrics-url URL
//     creates W fake TPU nodes, then R times each, restart InPlace and Recreate interleaved:
//     runs a W-worker TPUJob (grace 0) until Running, then a program exit, and times until every
//     program of the next generation runs. The kubelet and the supervisors of the pods are played
//     here (KWOK runs no container): in place, worker 0's program exits, and a pod told a newer
//     generation (tpujob.dev/generation) has its container restarted to the barrier, its program
//     running once tpujob.dev/barrier reaches it; recreated, every worker's program exits (worker
//     0's, then the others' as their collectives break: at once here) and the operator creates
//     every pod again. Counts the operator's API writes over each restart from its /metrics at
//     URL. Prints medians and the ratio InPlace/Recreate.
//   tpujob-bench admission --nodes 5000 --jobs 1000 [--runs 21] [--seed S]
//     needs no cluster: builds a random cluster in memory (several accelerators and topologies,
//     node pools of 4-64 nodes with 4 or 8 chips, about 70% of the chips used by pods, a few
//     nodes cordoned or unhealthy, a few reservations) and a queue of mixed gangs (a quarter of
//     the multi-host ones multislice, 2-8 slices), then times
//     the queue's BuildCapacity + PlanAdmissions per run: median, p90, min, max, and how many
//     jobs were admitted.
//   tpujob-bench cache-memory [--pods 20000] [--nodes 5000]
//     needs no cluster: decodes pods and nodes shaped as KWOK reports them into the operator's
//     stores (with their indexes) and prints the heap held per pod and per node.
//   tpujob-bench preemption --nodes 5000 --running 500 --jobs 1000 [--runs 21] [--seed S]
//     needs no cluster: 5,000 nodes in memory held by 500 running gangs (whole nodes, ~90% of
//     them), 1,000 queued gangs of mixed priority (a quarter of the multi-host ones multislice,
//     2-8 slices); times the queue's victim selection
//     (PlanPreemptions) per run beside PlanAdmissions on the same queue: median, p99.
//   tpujob-bench concurrent-gets --kubeconfig K [--count 50]
//     N GETs of one namespace at once from N threads, with a fresh connection pool and again
//     with the pool warm: each request's time, sorted (what opening connections costs).

#include <malloc.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <functional>
#include <map>
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
#include "controller/children.h"
#include "kube/client.h"
#include "kube/config.h"
#include "policy/job_spec.h"
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
  // As the operator does: otherwise every new connection parses the system CA bundle (about
  // 50 ms of CPU here), and a burst of writes from many threads waits on its own handshakes.
  tpujob::kube::TrustOnlyTheConfiguredCa(*config);
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

// The TPUJob both `gang` and `plain-gang` describe: W workers per slice, S slices.
Json GangJob(const std::string& name, int workers, const std::string& topology, int chips,
             int slices) {
  Json container = {{"name", "trainer"}, {"image", "trainer:latest"}};
  return {{"apiVersion", "tpujob.dev/v1alpha1"},
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

// The JobSet peer: the equivalent JobSet (one replicated Job of W indexed pods, each asking for
// `chips` google.com/tpu on the same nodes a TPUJob's workers would go to), created and timed the
// way Gang times a TPUJob: from the create until all its pods were created (by the JobSet
// controller's Job, through kube-controller-manager's Job controller). Every field JobSet's
// defaulting webhook would set is given, so the controller runs without its webhooks. Then the
// JobSet is deleted and its pods awaited gone.
int JobSetGang(const std::string& kubeconfig, const std::string& ns, const std::string& name,
               int workers, const std::string& topology, int chips) {
  const tpujob::kube::Resource jobsets{"jobset.x-k8s.io", "v1alpha2", "jobsets", true};
  const std::string selector = "jobset.sigs.k8s.io/jobset-name=" + name;
  const Json tpu = {{"google.com/tpu", std::to_string(chips)}};
  // The same TPU_WORKER_HOSTNAMES list every worker of a TPUJob carries (and GKE's TPU webhook
  // adds to a JobSet's pods): one hostname per worker, so the pods are as large as ours.
  std::string hostnames;
  for (int i = 0; i < workers; ++i) {
    hostnames += (i == 0 ? "" : ",") + name + "-worker-0-" + std::to_string(i) + "." + name;
  }
  Json pod_spec = {
      {"restartPolicy", "Never"},
      {"terminationGracePeriodSeconds", 0},
      {"nodeSelector",
       {{"cloud.google.com/gke-tpu-accelerator", "tpu-v5-lite-podslice"},
        {"cloud.google.com/gke-tpu-topology", topology}}},
      {"containers",
       Json::array(
           {{{"name", "trainer"},
             {"image", "trainer:latest"},
             {"env", Json::array({{{"name", "TPU_WORKER_HOSTNAMES"}, {"value", hostnames}}})},
             {"resources", {{"requests", tpu}, {"limits", tpu}}}}})}};
  Json jobset = {
      {"apiVersion", "jobset.x-k8s.io/v1alpha2"},
      {"kind", "JobSet"},
      {"metadata", {{"name", name}}},
      {"spec",
       {{"suspend", false},
        {"successPolicy", {{"operator", "All"}}},
        {"startupPolicy", {{"startupPolicyOrder", "AnyOrder"}}},
        {"failurePolicy", {{"maxRestarts", 0}, {"restartStrategy", "Recreate"}}},
        {"network", {{"enableDNSHostnames", true}, {"publishNotReadyAddresses", true}}},
        {"replicatedJobs", Json::array({{{"name", "worker"},
                                         {"groupName", "default"},
                                         {"replicas", 1},
                                         {"template",
                                          {{"spec",
                                            {{"parallelism", workers},
                                             {"completions", workers},
                                             {"completionMode", "Indexed"},
                                             {"backoffLimit", 0},
                                             {"template", {{"spec", pod_spec}}}}}}}}})}}}};
  auto client = Connect(kubeconfig);
  auto watch = WatchPods(*client, ns, selector);
  if (!watch) return 1;
  const auto start = std::chrono::steady_clock::now();
  if (auto created = client->Create(jobsets, ns, jobset); !created) {
    std::fprintf(stderr, "error: %s\n", created.error().ToString().c_str());
    return 1;
  }
  if (!AwaitPods(*client, *watch, ns, selector, workers)) return 1;
  std::printf("%s: all %d pods created %.0f ms after the JobSet was created\n", name.c_str(),
              workers, MsSince(start));
  tpujob::kube::DeleteOptions foreground;
  foreground.propagation_policy = "Foreground";
  client->Delete(jobsets, ns, name, foreground);
  tpujob::kube::ListOptions by_jobset;
  by_jobset.label_selector = selector;
  const bool gone = WaitFor(
      [&] {
        auto pods = client->List(Resource::Pods(), ns, by_jobset);
        return pods && (*pods)["items"].empty() && !client->Get(jobsets, ns, name);
      },
      120, std::chrono::milliseconds(100));
  if (!gone)
    std::fprintf(stderr, "error: %s and its pods not gone 120 s after its deletion\n",
                 name.c_str());
  return gone ? 0 : 1;
}

// The raw ceiling for a gang: the very pods the operator creates for GangJob (BuildPod, with the
// operator's default options, owned by a TPUJob of the same spec in a namespace no operator
// watches), created by a plain client on `threads` threads with no client-side limit, timed the
// way Gang times the operator.
int PlainGang(const std::string& kubeconfig, const std::string& ns, const std::string& name,
              int workers, const std::string& topology, int chips, int slices, int threads) {
  auto client = Connect(kubeconfig);
  auto owner =
      client->Create(Resource::TPUJobs(), ns, GangJob(name, workers, topology, chips, slices));
  if (!owner) {
    std::fprintf(stderr, "error: %s\n", owner.error().ToString().c_str());
    return 1;
  }
  auto info = tpujob::cache::TPUJobInfo::FromJson(*owner);
  if (!info) {
    std::fprintf(stderr, "error: %s\n", info.error().ToString().c_str());
    return 1;
  }
  auto spec = tpujob::policy::ParseJobSpec(*info);
  if (!spec) {
    std::fprintf(stderr, "error: %s\n", spec.error().c_str());
    return 1;
  }
  std::vector<Json> pods;
  for (int i = 0; i < spec->Replicas(tpujob::policy::ReplicaType::kWorker); ++i) {
    Json pod =
        tpujob::controller::BuildPod(*info, *spec, tpujob::policy::ReplicaType::kWorker, i, 1);
    pods.push_back(std::move(pod));
  }
  auto watch = WatchPods(*client, ns, "tpujob.dev/job-name=" + name);
  if (!watch) return 1;
  // Warm, like a running operator's: a connection per thread is open before the clock starts.
  tpujob::kube::ListOptions none;
  none.label_selector = "tpujob.dev/job-name=" + name;
  Parallel(threads, threads,
           [&](int) { return client->List(Resource::Pods(), ns, none).has_value(); });
  const auto start = std::chrono::steady_clock::now();
  const int failures = Parallel(static_cast<int>(pods.size()), threads, [&](int i) {
    auto created = client->Create(Resource::Pods(), ns, pods[static_cast<size_t>(i)]);
    if (!created) std::fprintf(stderr, "error: %s\n", created.error().ToString().c_str());
    return created.has_value();
  });
  if (failures > 0 || !AwaitPods(*client, *watch, ns, "tpujob.dev/job-name=" + name,
                                 static_cast<int>(pods.size()))) {
    return 1;
  }
  std::printf(
      "%s: all %zu pods (%d x %d) created %.0f ms after the first create (plain client,"
      " %d threads)\n",
      name.c_str(), pods.size(), slices, workers, MsSince(start), threads);
  // Gone again, and awaited gone, so that the next run starts from a quiet cluster.
  tpujob::kube::DeleteOptions options;
  options.grace_period_seconds = 0;
  Parallel(static_cast<int>(pods.size()), threads, [&](int i) {
    auto deleted = client->Delete(Resource::Pods(), ns,
                                  pods[static_cast<size_t>(i)]["metadata"]["name"], options);
    return deleted.has_value() || deleted.error().IsNotFound();
  });
  client->Delete(Resource::TPUJobs(), ns, name);
  tpujob::kube::ListOptions by_job;
  by_job.label_selector = "tpujob.dev/job-name=" + name;
  const bool gone = WaitFor(
      [&] {
        auto left = client->List(Resource::Pods(), ns, by_job);
        return left && (*left)["items"].empty() && !client->Get(Resource::TPUJobs(), ns, name);
      },
      120, std::chrono::milliseconds(100));
  if (!gone)
    std::fprintf(stderr, "error: %s and its pods not gone 120 s after deletion\n", name.c_str());
  return gone ? 0 : 1;
}

int Gang(const std::string& kubeconfig, const std::string& ns, const std::string& name, int workers,
         const std::string& topology, int chips, int slices, bool finish) {
  const int pods_wanted = workers * slices;
  auto client = Connect(kubeconfig);
  auto watch = WatchPods(*client, ns, "tpujob.dev/job-name=" + name);
  if (!watch) return 1;
  const Json job = GangJob(name, workers, topology, chips, slices);
  const auto start = std::chrono::steady_clock::now();
  auto created = client->Create(Resource::TPUJobs(), ns, job);
  if (!created) {
    std::fprintf(stderr, "error: %s\n", created.error().ToString().c_str());
    return 1;
  }
  if (!AwaitPods(*client, *watch, ns, "tpujob.dev/job-name=" + name, pods_wanted)) return 1;
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
  tpujob::kube::ListOptions by_job;
  by_job.label_selector = "tpujob.dev/job-name=" + name;
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

constexpr std::string_view kBenchNodesLabel = "tpujob.dev/bench-nodes";

// Deletes the nodes CreateFaultNodes made.
void DeleteFaultNodes(tpujob::kube::Client& client, const std::string& prefix, int count) {
  Parallel(count, 4, [&](int i) {
    auto deleted = client.Delete(Resource::Nodes(), "", prefix + "-node-" + std::to_string(i));
    return deleted.has_value() || deleted.error().IsNotFound();
  });
}

// Creates `count` fresh fake TPU nodes `prefix`-node-N of 4 chips, of an accelerator no other job
// asks for, in one pool, tainted as GKE taints TPU nodes, and waits until KWOK has them Ready.
// On failure says why and removes them again.
bool CreateFaultNodes(tpujob::kube::Client& client, const std::string& prefix,
                      const std::string& accelerator, const std::string& topology, int count) {
  const int node_failures = Parallel(count, 4, [&](int i) {
    Json node = {
        {"apiVersion", "v1"},
        {"kind", "Node"},
        {"metadata",
         {{"name", prefix + "-node-" + std::to_string(i)},
          {"annotations", {{"kwok.x-k8s.io/node", "fake"}}},
          {"labels",
           {{"type", "kwok"},
            {std::string(kBenchNodesLabel), prefix},
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
    auto created = client.Create(Resource::Nodes(), "", node);
    return created.has_value() || created.error().IsAlreadyExists();
  });
  if (node_failures > 0) {
    std::fprintf(stderr, "error: %d of %d nodes not created\n", node_failures, count);
    DeleteFaultNodes(client, prefix, count);
    return false;
  }
  tpujob::kube::ListOptions by_nodes;
  by_nodes.label_selector = std::string(kBenchNodesLabel) + "=" + prefix;
  const bool ready = WaitFor(
      [&] {
        auto nodes = client.List(Resource::Nodes(), "", by_nodes);
        if (!nodes) return false;
        int ready_nodes = 0;
        for (const auto& node : (*nodes)["items"]) {
          for (const auto& c : node.value("/status/conditions"_json_pointer, Json::array())) {
            ready_nodes += c.value("type", "") == "Ready" && c.value("status", "") == "True";
          }
        }
        return ready_nodes >= count;
      },
      300, std::chrono::milliseconds(500));  // KWOK takes minutes with thousands of nodes
  if (!ready) {
    std::fprintf(stderr, "error: the %d nodes did not all become Ready\n", count);
    DeleteFaultNodes(client, prefix, count);
  }
  return ready;
}

// Writes `condition`=`status` on `node` as node-problem-detector reports it: a strategic merge on
// the status subresource, which merges conditions by type and leaves the ones KWOK keeps alone.
tpujob::kube::Status WriteNodeCondition(tpujob::kube::Client& client, const std::string& node,
                                        const std::string& condition, const std::string& status,
                                        const std::string& reason, const std::string& message) {
  const std::string now = UtcNow();
  Json patch = {{"status",
                 {{"conditions", Json::array({{{"type", condition},
                                               {"status", status},
                                               {"reason", reason},
                                               {"message", message},
                                               {"lastHeartbeatTime", now},
                                               {"lastTransitionTime", now}}})}}}};
  tpujob::kube::PatchOptions status_options;
  status_options.subresource = "status";
  auto written = client.Patch(Resource::Nodes(), "", node, tpujob::kube::PatchType::kStrategicMerge,
                              patch, status_options);
  if (!written) return std::unexpected(written.error());
  return {};
}

// Writes the hardware fault `condition`=True on `node`.
tpujob::kube::Status WriteNodeFault(tpujob::kube::Client& client, const std::string& node,
                                    const std::string& condition) {
  return WriteNodeCondition(client, node, condition, "True", "ChipError",
                            "injected by tpujob-bench");
}

// With `ceiling`, the raw ceiling of the same measurement: the condition written is one the
// operator does not act on, and this process itself cordons the node and deletes the job's pods
// (all three requests at once) the moment its fault write returns, as an operator that knew of
// the fault without a watch, and needed no status write or cache, would at best.
int FaultLatency(const std::string& kubeconfig, const std::string& ns, const std::string& prefix,
                 int faults, int workers, int burst, const std::string& condition,
                 int timeout_seconds, bool ceiling) {
  auto client = Connect(kubeconfig);
  const std::string accelerator = "tpu-" + prefix;
  const std::string topology = "2x" + std::to_string(2 * workers);  // 4 chips per worker
  // One node cordoned per fault, `burst` jobs running at once, plus room.
  const int node_count = faults + (burst + 3) * workers;

  const auto delete_nodes = [&] { DeleteFaultNodes(*client, prefix, node_count); };
  if (!CreateFaultNodes(*client, prefix, accelerator, topology, node_count)) return 1;
  tpujob::kube::ListOptions by_nodes;
  by_nodes.label_selector = std::string(kBenchNodesLabel) + "=" + prefix;

  // The faults in flight, by node; a pod's uid leads to its fault's node. Both watches run for
  // the whole benchmark, so each is open long before its fault.
  std::mutex mu;
  std::condition_variable changed;
  std::map<std::string, FaultProbe> probes;
  std::map<std::string, std::string> node_of_pod;
  Follower node_watch(
      *client, Resource::Nodes(), "", by_nodes.label_selector,
      [&](const tpujob::kube::WatchEvent& event, std::chrono::steady_clock::time_point at) {
        std::lock_guard<std::mutex> lock(mu);
        auto it = probes.find(event.object.value("/metadata/name"_json_pointer, ""));
        if (it == probes.end() || it->second.cordoned ||
            !event.object.value("/spec/unschedulable"_json_pointer, false)) {
          return;
        }
        it->second.cordoned = at;
        changed.notify_all();
      });
  Follower pod_watch(
      *client, Resource::Pods(), ns, "tpujob.dev/job-name",
      [&](const tpujob::kube::WatchEvent& event, std::chrono::steady_clock::time_point at) {
        std::lock_guard<std::mutex> lock(mu);
        const bool going = event.type == tpujob::kube::WatchEventType::kDeleted ||
                           event.object.contains("/metadata/deletionTimestamp"_json_pointer);
        const std::string uid = event.object.value("/metadata/uid"_json_pointer, "");
        auto pod = node_of_pod.find(uid);
        if (!going || pod == node_of_pod.end()) return;
        auto it = probes.find(pod->second);
        node_of_pod.erase(pod);
        if (it == probes.end() || it->second.pods.erase(uid) == 0) return;
        if (it->second.pods.empty()) {
          it->second.deleted = at;
          changed.notify_all();
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
  // One fault's job, Running: its name, its pods (names by uid) and worker 0's node.
  struct Target {
    std::string name;
    std::map<std::string, std::string> pods;  // name by uid
    std::string node;
    std::chrono::steady_clock::time_point written;
    bool ok = false;
  };
  const auto bench_start = std::chrono::steady_clock::now();
  for (int first = 0; first < faults && failures == 0; first += burst) {
    const int round = std::min(burst, faults - first);
    std::vector<Target> targets(static_cast<size_t>(round));
    // The round's jobs, created together and awaited Running.
    failures += Parallel(round, std::min(round, 16), [&](int k) {
      Target& target = targets[static_cast<size_t>(k)];
      target.name = prefix + "-" + std::to_string(first + k);
      Json job = {
          {"apiVersion", "tpujob.dev/v1alpha1"},
          {"kind", "TPUJob"},
          {"metadata", {{"name", target.name}}},
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
        return false;
      }
      const bool running = WaitFor(
          [&] {
            auto got = client->Get(Resource::TPUJobs(), ns, target.name);
            return got && got->value("/status/phase"_json_pointer, "") == "Running";
          },
          120, std::chrono::milliseconds(50));
      tpujob::kube::ListOptions by_job;
      by_job.label_selector = "tpujob.dev/job-name=" + target.name;
      if (auto pods = client->List(Resource::Pods(), ns, by_job); running && pods) {
        for (const auto& pod : (*pods)["items"]) {
          if (pod.contains("/metadata/deletionTimestamp"_json_pointer)) continue;
          target.pods[pod.value("/metadata/uid"_json_pointer, "")] =
              pod.value("/metadata/name"_json_pointer, "");
          if (pod.value("/metadata/name"_json_pointer, "") == target.name + "-worker-0") {
            target.node = pod.value("/spec/nodeName"_json_pointer, "");
          }
        }
      }
      target.ok =
          running && !target.node.empty() && static_cast<int>(target.pods.size()) == workers;
      if (!target.ok) {
        std::fprintf(stderr, "error: %s never Running with %d pods (node of worker 0: \"%s\")\n",
                     target.name.c_str(), workers, target.node.c_str());
      }
      return target.ok;
    });
    if (failures == 0) {
      {
        std::lock_guard<std::mutex> lock(mu);
        for (const auto& target : targets) {
          FaultProbe& probe = probes[target.node];
          probe.node = target.node;
          for (const auto& [uid, name] : target.pods) {
            probe.pods.insert(uid);
            node_of_pod[uid] = target.node;
          }
        }
      }
      // All of the round's faults at once, each timed from its own write.
      failures += Parallel(round, round, [&](int k) {
        Target& target = targets[static_cast<size_t>(k)];
        target.written = std::chrono::steady_clock::now();
        auto written = WriteNodeFault(*client, target.node, condition);
        if (!written) std::fprintf(stderr, "error: %s\n", written.error().ToString().c_str());
        if (!written || !ceiling) return written.has_value();
        const std::vector<std::pair<std::string, std::string>> pods(target.pods.begin(),
                                                                    target.pods.end());
        const int acted = Parallel(
            static_cast<int>(pods.size()) + 1, static_cast<int>(pods.size()) + 1, [&](int i) {
              if (i == 0) {
                return client
                    ->Patch(Resource::Nodes(), "", target.node, tpujob::kube::PatchType::kMerge,
                            Json{{"spec", {{"unschedulable", true}}}})
                    .has_value();
              }
              tpujob::kube::DeleteOptions options;
              options.precondition_uid = pods[static_cast<size_t>(i - 1)].first;
              options.propagation_policy = "Background";
              return client
                  ->Delete(Resource::Pods(), ns, pods[static_cast<size_t>(i - 1)].second, options)
                  .has_value();
            });
        return acted == 0;
      });
      std::unique_lock<std::mutex> lock(mu);
      changed.wait_for(lock, std::chrono::seconds(timeout_seconds), [&] {
        return std::all_of(probes.begin(), probes.end(),
                           [](const auto& p) { return p.second.Done(); });
      });
      for (const auto& target : targets) {
        const FaultProbe& probe = probes[target.node];
        const auto ms = [&](std::chrono::steady_clock::time_point t) {
          return std::chrono::duration<double, std::milli>(t - target.written).count();
        };
        if (probe.cordoned) cordon_ms.push_back(ms(*probe.cordoned));
        if (probe.deleted) delete_ms.push_back(ms(*probe.deleted));
        if (probe.Done()) {
          total_ms.push_back(ms(std::max(*probe.cordoned, *probe.deleted)));
        } else {
          std::fprintf(stderr, "error: %s: no %s within %d s of %s=True on node %s\n",
                       target.name.c_str(), probe.cordoned ? "pod deletion" : "cordon",
                       timeout_seconds, condition.c_str(), target.node.c_str());
          ++failures;
        }
      }
      probes.clear();
      node_of_pod.clear();
    }
    // Gone, with their re-issued pods, before the next round, so each is timed on quiet jobs.
    failures += Parallel(round, std::min(round, 16), [&](int k) {
      return targets[static_cast<size_t>(k)].name.empty() ||
             remove_job(targets[static_cast<size_t>(k)].name);
    });
  }
  node_watch.Stop();
  pod_watch.Stop();
  delete_nodes();

  std::printf(
      "%sfault-to-action latency over %zu faults, %s (%d-worker TPUJobs; %s=True written on "
      "worker 0's node -> that node cordoned and the job's %d pods deleted), %.0f s in all:\n",
      ceiling ? "raw ceiling (tpujob-bench cordons and deletes as its fault write returns), " : "",
      total_ms.size(),
      burst > 1 ? ("in bursts of " + std::to_string(burst) + " at once").c_str() : "one at a time",
      workers, condition.c_str(), workers, MsSince(bench_start) / 1000);
  PrintLatencies("cordon + pods deleted:", total_ms);
  PrintLatencies("node cordoned:", cordon_ms);
  PrintLatencies("pods deleted:", delete_ms);
  if (burst == 1) {
    std::printf("  samples (ms, cordon + pods deleted):");
    for (double ms : total_ms) std::printf(" %.0f", ms);
    std::printf("\n");
  }
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
      node.conditions.push_back({ready, node.ready, InternedString(), {}, std::nullopt});
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
      node.conditions.push_back({ready, node.ready, InternedString(), {}, std::nullopt});
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

// Bytes of heap in use (malloc's count, not the resident size).
size_t HeapInUse() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

// A worker pod as the API server returns it once KWOK runs it: the fields BuildPod sets, the
// API server's defaults and KWOK's status.
Json KwokPod(int i, int nodes) {
  char uid[40];
  std::snprintf(uid, sizeof uid, "%08x-a3b5-46a5-b72b-%012x", i, i * 7919);
  const std::string job = "bench-" + std::to_string(i % 100);
  const std::string at = "2026-11-26T04:30:17Z";
  const Json condition = {
      {"lastProbeTime", nullptr}, {"lastTransitionTime", at}, {"status", "True"}};
  Json initialized = condition, ready = condition, containers_ready = condition;
  initialized["type"] = "Initialized";
  ready["type"] = "Ready";
  containers_ready["type"] = "ContainersReady";
  const std::string ip = "10.244." + std::to_string(i / 250) + "." + std::to_string(i % 250);
  return {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"creationTimestamp", at},
        {"generation", 1},
        {"labels",
         {{"tpujob.dev/attempt", "1"},
          {"tpujob.dev/job-name", job},
          {"tpujob.dev/replica-index", std::to_string(i / 100)},
          {"tpujob.dev/replica-type", "worker"}}},
        {"name", job + "-worker-" + std::to_string(i / 100)},
        {"namespace", "bench"},
        {"resourceVersion", std::to_string(100000 + i)},
        {"uid", uid}}},
      {"spec",
       {{"containers",
         {{{"env", {{{"name", "TPU_WORKER_ID"}, {"value", std::to_string(i / 100)}}}},
           {"image", "trainer:latest"},
           {"name", "trainer"},
           {"resources",
            {{"limits", {{"google.com/tpu", "4"}}}, {"requests", {{"google.com/tpu", "4"}}}}}}}},
        {"nodeName", "bench-node-" + std::to_string(i % nodes)},
        {"restartPolicy", "Always"},
        {"tolerations", {{{"key", "kwok.x-k8s.io/node"}, {"operator", "Exists"}}}}}},
      {"status",
       {{"conditions", {initialized, ready, containers_ready}},
        {"containerStatuses",
         {{{"image", "trainer:latest"},
           {"lastState", Json::object()},
           {"name", "trainer"},
           {"ready", true},
           {"restartCount", 0},
           {"state", {{"running", {{"startedAt", at}}}}}}}},
        {"phase", "Running"},
        {"podIP", ip},
        {"podIPs", {{{"ip", ip}}}},
        {"qosClass", "BestEffort"},
        {"startTime", at}}}};
}

// A KWOK TPU node as the API server returns it: bench-node-i's labels and taint, KWOK's status.
Json KwokNode(int i) {
  char uid[40];
  std::snprintf(uid, sizeof uid, "%08x-d071-4b5d-9a2d-%012x", i, i * 104729);
  const std::string at = "2026-11-26T04:30:15Z";
  Json conditions = Json::array();
  for (const auto& [type, status, reason, message] : std::vector<std::array<std::string, 4>>{
           {"Ready", "True", "KubeletReady", "kubelet is posting ready status"},
           {"MemoryPressure", "False", "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available"},
           {"DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"},
           {"PIDPressure", "False", "KubeletHasSufficientPID",
            "kubelet has sufficient PID available"},
           {"NetworkUnavailable", "False", "RouteCreated", "RouteController created a route"}}) {
    conditions.push_back({{"lastHeartbeatTime", at},
                          {"lastTransitionTime", at},
                          {"message", message},
                          {"reason", reason},
                          {"status", status},
                          {"type", type}});
  }
  const Json resources = {
      {"cpu", "64"}, {"google.com/tpu", "4"}, {"memory", "256Gi"}, {"pods", "1k"}};
  return {
      {"apiVersion", "v1"},
      {"kind", "Node"},
      {"metadata",
       {{"annotations", {{"kwok.x-k8s.io/node", "fake"}, {"node.alpha.kubernetes.io/ttl", "15"}}},
        {"creationTimestamp", at},
        {"labels",
         {{"cloud.google.com/gke-nodepool", "pool-" + std::to_string(i / 4)},
          {"cloud.google.com/gke-tpu-accelerator", "tpu-v5-lite-podslice"},
          {"cloud.google.com/gke-tpu-topology", "2x4"},
          {"type", "kwok"}}},
        {"name", "bench-node-" + std::to_string(i)},
        {"resourceVersion", std::to_string(200000 + i)},
        {"uid", uid}}},
      {"spec",
       {{"taints",
         {{{"effect", "NoSchedule"}, {"key", "kwok.x-k8s.io/node"}, {"value", "fake"}}}}}},
      {"status",
       {{"allocatable", resources},
        {"capacity", resources},
        {"conditions", conditions},
        {"nodeInfo", {{"architecture", "amd64"}, {"kubeletVersion", "kwok-0.7.0"}}},
        {"phase", "Running"}}}};
}

// Fills a store with `count` objects made by `make`, one decoded at a time as a watch list
// delivers them, and returns the heap bytes the store then holds per object.
template <typename T>
double CacheBytesPerObject(int count, const std::function<Json(int)>& make,
                           const std::function<void(tpujob::cache::Store<T>&)>& add_indexes) {
  tpujob::cache::Store<T> store;
  add_indexes(store);
  const size_t before = HeapInUse();
  std::vector<std::shared_ptr<const T>> objects;
  objects.reserve(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    auto decoded = T::FromJson(make(i));
    if (!decoded) {
      std::fprintf(stderr, "error: %s\n", decoded.error().ToString().c_str());
      return -1;
    }
    objects.push_back(std::make_shared<const T>(std::move(*decoded)));
  }
  store.Replace(std::move(objects), "1");
  return static_cast<double>(HeapInUse() - before) / count;
}

// The cache's own cost per object: the heap a Store of pods (with the operator's pod indexes)
// and one of nodes hold per object, measured in this process (no cluster, no allocator slack).
int CacheMemory(int pods, int nodes) {
  const double per_pod = CacheBytesPerObject<tpujob::cache::PodInfo>(
      pods, [&](int i) { return KwokPod(i, nodes); }, tpujob::cache::AddPodIndexers);
  const double per_node =
      CacheBytesPerObject<tpujob::cache::NodeInfo>(nodes, KwokNode, tpujob::cache::AddNodeIndexers);
  if (per_pod < 0 || per_node < 0) return 1;
  std::printf(
      "cache heap per object (in memory, %d pods, %d nodes, as KWOK reports them): "
      "pod %.0f B, node %.0f B; JSON text: pod %zu B, node %zu B\n",
      pods, nodes, per_pod, per_node, KwokPod(1, nodes).dump().size(), KwokNode(1).dump().size());
  return 0;
}

// Fault to replacement: `runs` times, a W-worker TPUJob (pods with a termination grace period of
// 0) runs on fresh nodes of its own, a hardware fault is written on worker 0's node, and the time
// is taken until the job's next attempt has all W pods Running (polled every 20 ms); then the job
// is deleted. One spare node per run.
int Reissue(const std::string& kubeconfig, const std::string& ns, const std::string& prefix,
            int workers, int runs, const std::string& condition) {
  auto client = Connect(kubeconfig);
  const std::string accelerator = "tpu-" + prefix;
  const std::string topology = "2x" + std::to_string(2 * workers);  // 4 chips per worker
  const int node_count = workers + runs;
  if (!CreateFaultNodes(*client, prefix, accelerator, topology, node_count)) return 1;
  std::vector<double> replaced_ms, recreated_ms;
  int failures = 0;
  for (int run = 0; run < runs && failures == 0; ++run) {
    const std::string name = prefix + "-" + std::to_string(run);
    tpujob::kube::ListOptions by_job;
    by_job.label_selector = "tpujob.dev/job-name=" + name;
    Json container = {{"name", "trainer"}, {"image", "trainer:latest"}};
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
              {"template",
               {{"spec",
                 {{"terminationGracePeriodSeconds", 0},
                  {"containers", Json::array({container})}}}}}}}}}}}};
    // Running pods of `attempt`, and worker 0's node among them.
    const auto running_pods = [&](const std::string& attempt, std::string* node) {
      auto pods = client->List(Resource::Pods(), ns, by_job);
      int count = 0;
      if (!pods) return -1;
      for (const auto& pod : (*pods)["items"]) {
        if (pod.value("/metadata/labels/tpujob.dev~1attempt"_json_pointer, "") != attempt ||
            pod.contains("/metadata/deletionTimestamp"_json_pointer) ||
            pod.value("/status/phase"_json_pointer, "") != "Running") {
          continue;
        }
        ++count;
        if (node != nullptr && pod.value("/metadata/name"_json_pointer, "") == name + "-worker-0") {
          *node = pod.value("/spec/nodeName"_json_pointer, "");
        }
      }
      return count;
    };
    std::string node;
    if (auto created = client->Create(Resource::TPUJobs(), ns, job); !created) {
      std::fprintf(stderr, "error: %s\n", created.error().ToString().c_str());
      ++failures;
      break;
    }
    if (!WaitFor([&] { return running_pods("1", &node) == workers && !node.empty(); }, 120,
                 std::chrono::milliseconds(100))) {
      std::fprintf(stderr, "error: %s never had %d pods Running\n", name.c_str(), workers);
      ++failures;
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::optional<double> all_created;
    if (failures == 0) {
      if (auto written = WriteNodeFault(*client, node, condition); !written) {
        std::fprintf(stderr, "error: %s\n", written.error().ToString().c_str());
        ++failures;
      }
    }
    if (failures == 0) {
      const bool replaced = WaitFor(
          [&] {
            auto pods = client->List(Resource::Pods(), ns, by_job);
            int created_of_2 = 0;
            if (pods) {
              for (const auto& pod : (*pods)["items"]) {
                created_of_2 +=
                    pod.value("/metadata/labels/tpujob.dev~1attempt"_json_pointer, "") == "2";
              }
            }
            if (!all_created && created_of_2 == workers) all_created = MsSince(t0);
            return running_pods("2", nullptr) == workers;
          },
          120, std::chrono::milliseconds(20));
      if (replaced) {
        replaced_ms.push_back(MsSince(t0));
        recreated_ms.push_back(all_created.value_or(replaced_ms.back()));
        std::printf(
            "%s: fault on %s -> attempt 2 all %d pods created %.0f ms, all Running %.0f ms\n",
            name.c_str(), node.c_str(), workers, recreated_ms.back(), replaced_ms.back());
      } else {
        std::fprintf(stderr, "error: %s: attempt 2 never had %d pods Running\n", name.c_str(),
                     workers);
        ++failures;
      }
    }
    tpujob::kube::DeleteOptions foreground;
    foreground.propagation_policy = "Foreground";
    client->Delete(Resource::TPUJobs(), ns, name, foreground);
    WaitFor(
        [&] {
          auto pods = client->List(Resource::Pods(), ns, by_job);
          return pods && (*pods)["items"].empty() && !client->Get(Resource::TPUJobs(), ns, name);
        },
        120, std::chrono::milliseconds(100));
  }
  DeleteFaultNodes(*client, prefix, node_count);
  if (!replaced_ms.empty()) {
    std::printf("fault to replacement, %d workers, grace 0, %zu runs:\n", workers,
                replaced_ms.size());
    PrintLatencies("all pods created", recreated_ms);
    PrintLatencies("all pods Running", replaced_ms);
  }
  return failures == 0 ? 0 : 1;
}

// Undoes the operator's cordon of `node` the way a person would after a repair: schedulable
// again, without the tpujob.dev/faulty taint and without the operator's annotations (which would
// otherwise make it treat the next fault there as the same evidence).
tpujob::kube::Status UncordonNode(tpujob::kube::Client& client, const std::string& node) {
  auto got = client.Get(Resource::Nodes(), "", node);
  if (!got) return std::unexpected(got.error());
  Json taints = Json::array();
  for (const auto& taint : got->value("/spec/taints"_json_pointer, Json::array())) {
    if (taint.value("key", "") != "tpujob.dev/faulty") taints.push_back(taint);
  }
  const Json ours = got->value("/metadata/annotations"_json_pointer, Json::object());
  Json annotations = Json::object();
  for (const auto& [key, value] : ours.items()) {
    if (key.starts_with("tpujob.dev/")) annotations[key] = nullptr;
  }
  Json patch = {{"metadata", {{"annotations", annotations}}},
                {"spec", {{"unschedulable", false}, {"taints", taints}}}};
  auto written = client.Patch(Resource::Nodes(), "", node, tpujob::kube::PatchType::kMerge, patch,
                              tpujob::kube::PatchOptions{});
  if (!written) return std::unexpected(written.error());
  return {};
}

// The operator's API write requests so far (POST, PUT, PATCH, DELETE), by "VERB resource", read
// from its /metrics at `url`; nullopt when it cannot be read.
std::optional<std::map<std::string, double>> OperatorWrites(const std::string& url) {
  const std::string command = "curl -sf --max-time 10 '" + url + "'";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  std::string text;
  std::array<char, 65536> buffer;
  for (size_t n; (n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0;) {
    text.append(buffer.data(), n);
  }
  if (pclose(pipe) != 0) return std::nullopt;
  const auto label = [](const std::string& line, const std::string& name) {
    const size_t at = line.find(name + "=\"");
    if (at == std::string::npos) return std::string();
    const size_t from = at + name.size() + 2;
    return line.substr(from, line.find('"', from) - from);
  };
  std::map<std::string, double> writes;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    if (!line.starts_with("tpujob_api_requests_total{")) continue;
    std::string verb = label(line, "verb");
    std::transform(verb.begin(), verb.end(), verb.begin(),
                   [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    if (verb != "POST" && verb != "PUT" && verb != "PATCH" && verb != "DELETE") continue;
    writes[verb + " " + label(line, "resource")] +=
        std::strtod(line.c_str() + line.rfind(' '), nullptr);
  }
  return writes;
}

// What the pod watch of SliceRecovery saw of one pod.
struct WatchedPod {
  std::string job, attempt, node;
  bool placed_by_scheduler = false;  // created without spec.nodeName
  std::optional<std::chrono::steady_clock::time_point> added, running, gone;
};

// One recovery measured: milliseconds from the fault's write, and the operator's writes.
struct RecoveryRun {
  double old_gone_ms = 0, created_ms = 0, running_ms = 0, victim_gone_ms = 0;
  double scheduled = 0;  // pods of the new attempt the scheduler placed
  double created = 0;    // pods of the new attempt created, re-creations included
  std::map<std::string, double> writes;
  double Writes() const {
    double n = 0;
    for (const auto& [key, count] : writes) n += count;
    return n;
  }
};

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

// What the pod watch of InPlaceBench saw of one pod.
struct RestartedPod {
  std::string job, name;
  int generation = 0, barrier = 0;  // its annotations
  int running = 0;                  // the generation its program runs, as played here
  int restarts = 0;
  bool pending = false;  // a container restart is being written
  std::optional<std::chrono::steady_clock::time_point> added, ready, gone, barrier_at;
};

int InPlaceBench(const std::string& kubeconfig, const std::string& ns, const std::string& prefix,
                 int workers, int runs, const std::string& metrics_url) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  auto client = Connect(kubeconfig);
  const std::string accelerator = "tpu-" + prefix;
  const std::string topology = "2x" + std::to_string(2 * workers);  // 4 chips per worker
  if (!CreateFaultNodes(*client, prefix, accelerator, topology, workers)) {
    DeleteFaultNodes(*client, prefix, workers);
    return 1;
  }
  std::mutex mu;
  std::condition_variable changed;
  std::map<std::string, RestartedPod> pods;  // by uid
  const auto annotation = [](const Json& object, const char* key) {
    const std::string text =
        object.value(Json::json_pointer("/metadata/annotations/" + std::string(key)), "0");
    return std::atoi(text.c_str());
  };
  Follower pod_watch(
      *client, Resource::Pods(), ns, "tpujob.dev/job-name",
      [&](const tpujob::kube::WatchEvent& event, std::chrono::steady_clock::time_point at) {
        const Json& object = event.object;
        std::lock_guard<std::mutex> lock(mu);
        RestartedPod& pod = pods[object.value("/metadata/uid"_json_pointer, "")];
        if (!pod.added) {
          pod.added = at;
          pod.job = object.value("/metadata/labels/tpujob.dev~1job-name"_json_pointer, "");
          pod.name = object.value("/metadata/name"_json_pointer, "");
        }
        pod.generation = annotation(object, "tpujob.dev~1generation");
        const int barrier = annotation(object, "tpujob.dev~1barrier");
        if (barrier != pod.barrier) pod.barrier_at = at;
        pod.barrier = barrier;
        const bool going = event.type == tpujob::kube::WatchEventType::kDeleted ||
                           object.contains("/metadata/deletionTimestamp"_json_pointer);
        if (going && !pod.gone) pod.gone = at;
        if (!going && !pod.ready && object.value("/status/phase"_json_pointer, "") == "Running") {
          pod.ready = at;
        }
        changed.notify_all();
      });
  if (!pod_watch.Start()) {
    DeleteFaultNodes(*client, prefix, workers);
    return 1;
  }
  const auto await = [&](const std::function<bool()>& done, int seconds) {
    std::unique_lock<std::mutex> lock(mu);
    return changed.wait_for(lock, std::chrono::seconds(seconds), done);
  };
  const auto live = [&](const std::string& job) {
    std::vector<RestartedPod*> out;
    for (auto& [uid, pod] : pods) {
      if (pod.job == job && !pod.gone) out.push_back(&pod);
    }
    return out;
  };
  // The kubelet's record of a container restart: the run before ended with `code` and the
  // supervisor's `report`, the new one runs (its supervisor at the barrier).
  const auto restart_container = [&](const std::string& name, int restarts, int code,
                                     const Json& report) {
    const std::string now = tpujob::cache::FormatRfc3339(std::chrono::system_clock::now());
    const Json patch = {
        {"status",
         {{"containerStatuses", Json::array({{{"name", "trainer"},
                                              {"ready", true},
                                              {"restartCount", restarts},
                                              {"image", "trainer:latest"},
                                              {"imageID", ""},
                                              {"state", {{"running", {{"startedAt", now}}}}},
                                              {"lastState",
                                               {{"terminated",
                                                 {{"exitCode", code},
                                                  {"reason", "Error"},
                                                  {"message", report.dump()},
                                                  {"startedAt", now},
                                                  {"finishedAt", now}}}}}}})}}}};
    tpujob::kube::PatchOptions status;
    status.subresource = "status";
    return client
        ->Patch(Resource::Pods(), ns, name, tpujob::kube::PatchType::kStrategicMerge, patch, status)
        .has_value();
  };
  const auto exit_recreated = [&](const std::string& name) {
    const std::string now = tpujob::cache::FormatRfc3339(std::chrono::system_clock::now());
    const Json patch = {{"status",
                         {{"phase", "Failed"},
                          {"containerStatuses", Json::array({{{"name", "trainer"},
                                                              {"ready", false},
                                                              {"restartCount", 0},
                                                              {"image", "trainer:latest"},
                                                              {"imageID", ""},
                                                              {"state",
                                                               {{"terminated",
                                                                 {{"exitCode", 3},
                                                                  {"reason", "Error"},
                                                                  {"startedAt", now},
                                                                  {"finishedAt", now}}}}}}})}}}};
    tpujob::kube::PatchOptions status;
    status.subresource = "status";
    return client
        ->Patch(Resource::Pods(), ns, name, tpujob::kube::PatchType::kStrategicMerge, patch, status)
        .has_value();
  };
  // The supervisors: every pod told a generation above the one its program runs stops it (its
  // container restarts), until every program runs `generation`, 16 kubelets at a time.
  const auto supervise = [&](const std::string& job, int generation, int seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (std::chrono::steady_clock::now() < deadline) {
      std::vector<std::pair<std::string, int>> stop;  // name, restarts
      {
        std::unique_lock<std::mutex> lock(mu);
        const auto ready = [&] {
          int done = 0;
          stop.clear();
          for (RestartedPod* pod : live(job)) {
            const int running = pod->barrier > pod->running ? pod->barrier : 0;
            if (running >= generation) ++done;
            if (running > 0 && pod->generation > running && !pod->pending) {
              pod->pending = true;
              stop.emplace_back(pod->name, ++pod->restarts);
              pod->running = running;
            }
          }
          return done == workers || !stop.empty();
        };
        if (!changed.wait_until(lock, deadline, ready)) return false;
        if (stop.empty()) return true;
      }
      Parallel(static_cast<int>(stop.size()), 16, [&](int i) {
        const bool ok =
            restart_container(stop[i].first, stop[i].second, 143,
                              {{"state", "stopped"}, {"generation", generation - 1}, {"exit", 0}});
        std::lock_guard<std::mutex> lock(mu);
        for (RestartedPod* pod : live(job)) {
          if (pod->name == stop[i].first) pod->pending = false;
        }
        return ok;
      });
    }
    return false;
  };
  const auto make_job = [&](const std::string& name, const std::string& restart) {
    return Json{
        {"apiVersion", "tpujob.dev/v1alpha1"},
        {"kind", "TPUJob"},
        {"metadata", {{"name", name}}},
        {"spec",
         {{"tpu", {{"accelerator", accelerator}, {"topology", topology}, {"chipsPerWorker", 4}}},
          {"faultTolerance",
           {{"restart", restart},
            {"maxWorkerRestarts", 100},
            {"maintenanceGracePeriodSeconds", 0}}},
          {"replicaSpecs",
           {{"Worker",
             {{"replicas", workers},
              {"template",
               {{"spec",
                 {{"terminationGracePeriodSeconds", 0},
                  {"containers", Json::array({{{"name", "trainer"},
                                               {"image", "trainer:latest"},
                                               {"command", {"python3", "train.py"}}}})}}}}}}}}}}}};
  };
  const auto job_running = [&](const std::string& name, bool barrier_open) {
    auto job = client->Get(Resource::TPUJobs(), ns, name);
    return job && job->value("/status/phase"_json_pointer, "") == "Running" &&
           (!barrier_open || job->value("/status/inPlace/barrier"_json_pointer, "") == "Open");
  };
  const auto settled_writes = [&](const std::string& name, bool in_place) {
    WaitFor([&] { return job_running(name, in_place); }, 60, std::chrono::milliseconds(100));
    std::optional<std::map<std::string, double>> last = OperatorWrites(metrics_url);
    for (int i = 0; i < 40; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      auto now = OperatorWrites(metrics_url);
      if (now == last) break;
      last = now;
    }
    return last;
  };
  const auto remove_job = [&](const std::string& name) {
    tpujob::kube::DeleteOptions foreground;
    foreground.propagation_policy = "Foreground";
    client->Delete(Resource::TPUJobs(), ns, name, foreground);
    return await([&] { return live(name).empty(); }, 300) &&
           WaitFor([&] { return !client->Get(Resource::TPUJobs(), ns, name); }, 60,
                   std::chrono::milliseconds(100));
  };
  const auto ms_from = [](std::chrono::steady_clock::time_point t0,
                          std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(t - t0).count();
  };

  std::printf("in-place restart beside pod recreation, %d workers (4 chips each), grace 0 s:\n",
              workers);
  std::map<std::string, std::vector<RecoveryRun>> results;
  int failures = 0;
  for (int run = 0; run < runs && failures == 0; ++run) {
    for (const std::string restart : {"InPlace", "Recreate"}) {
      std::string name = prefix + "-" + restart + "-" + std::to_string(run);
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      const bool in_place = restart == "InPlace";
      if (auto created = client->Create(Resource::TPUJobs(), ns, make_job(name, restart));
          !created) {
        std::fprintf(stderr, "error: %s\n", created.error().ToString().c_str());
        ++failures;
        break;
      }
      if (!await(
              [&] {
                int n = 0;
                for (RestartedPod* pod : live(name)) n += pod->ready.has_value();
                return n == workers;
              },
              300) ||
          !WaitFor([&] { return job_running(name, in_place); }, 60,
                   std::chrono::milliseconds(100))) {
        std::fprintf(stderr, "error: %s never ran\n", name.c_str());
        ++failures;
        remove_job(name);
        break;
      }
      std::vector<std::string> old_pods;
      {
        std::lock_guard<std::mutex> lock(mu);
        for (RestartedPod* pod : live(name)) old_pods.push_back(pod->name);
      }
      auto before = OperatorWrites(metrics_url);
      const auto t0 = std::chrono::steady_clock::now();
      bool done = false;
      if (in_place) {
        int restarts = 0;
        {
          std::lock_guard<std::mutex> lock(mu);
          for (RestartedPod* pod : live(name)) {
            if (pod->name == name + "-worker-0") {
              pod->running = pod->barrier;
              restarts = ++pod->restarts;
            }
          }
        }
        done = restart_container(name + "-worker-0", restarts, 3,
                                 {{"state", "exited"}, {"generation", 1}, {"exit", 3}}) &&
               supervise(name, 2, 300);
      } else {
        Parallel(static_cast<int>(old_pods.size()), 16,
                 [&](int i) { return exit_recreated(old_pods[static_cast<size_t>(i)]); });
        done = await(
            [&] {
              int n = 0;
              for (RestartedPod* pod : live(name)) n += pod->added > t0 && pod->ready.has_value();
              return n == workers;
            },
            300);
      }
      if (!done) {
        std::fprintf(stderr, "error: %s: the next generation never ran in every pod\n",
                     name.c_str());
        ++failures;
        remove_job(name);
        break;
      }
      RecoveryRun measured;
      {
        std::lock_guard<std::mutex> lock(mu);
        std::chrono::steady_clock::time_point last = t0;
        for (RestartedPod* pod : live(name)) {
          const auto at = in_place ? pod->barrier_at : pod->ready;
          if (at) last = std::max(last, *at);
          measured.created += pod->added > t0;
        }
        measured.running_ms = ms_from(t0, last);
      }
      if (auto after = settled_writes(name, in_place); after && before) {
        for (const auto& [key, n] : *after) {
          const double delta = n - (before->contains(key) ? before->at(key) : 0);
          if (delta > 0) measured.writes[key] = delta;
        }
      }
      std::printf(
          "  %-8s %d: fault -> every program of the next generation running %6.0f ms; "
          "pods created %.0f; operator writes %.0f:",
          restart.c_str(), run + 1, measured.running_ms, measured.created, measured.Writes());
      for (const auto& [key, n] : measured.writes) std::printf(" %s %.0f,", key.c_str(), n);
      std::printf("\n");
      results[restart].push_back(measured);
      if (!remove_job(name)) {
        std::fprintf(stderr, "error: %s: not cleaned up\n", name.c_str());
        ++failures;
      }
    }
  }
  pod_watch.Stop();
  DeleteFaultNodes(*client, prefix, workers);
  const auto median = [&](const std::string& key,
                          const std::function<double(const RecoveryRun&)>& field) {
    std::vector<double> values;
    for (const auto& run : results[key]) values.push_back(field(run));
    return Median(values);
  };
  if (!results["InPlace"].empty() && !results["Recreate"].empty()) {
    const auto time = [](const RecoveryRun& r) { return r.running_ms; };
    const auto writes = [](const RecoveryRun& r) { return r.Writes(); };
    const double in_place_ms = median("InPlace", time), recreate_ms = median("Recreate", time);
    std::printf(
        "in-place restart, %d workers, medians of %zu + %zu runs: fault -> every program of the "
        "next generation running: InPlace %.0f ms, Recreate %.0f ms, ratio in-place/recreate %.2f "
        "(goal <= 0.25); operator API writes per restart: InPlace %.0f, Recreate %.0f\n",
        workers, results["InPlace"].size(), results["Recreate"].size(), in_place_ms, recreate_ms,
        in_place_ms / recreate_ms, median("InPlace", writes), median("Recreate", writes));
  }
  return failures == 0 ? 0 : 1;
}

// Slice recovery beside whole-job re-issue: S + 1 node pools of H hosts (4 chips each), then
// `runs` times each, interleaved, a TPUJob of S slices x H hosts (grace `grace`, recovery Slice,
// then recovery Job) runs, TPUUnhealthy=True is written on a node of slice 1, and the time is taken
// through a pod watch until every pod of attempt 2 is Running, with the operator's API writes
// from its /metrics over the recovery. With `hot_swap_runs`, the spare pool is then held by a
// 1-slice job of priority 1 while the job (priority 100) runs: the replaced slice must preempt it.
//
// KWOK (v0.7) sometimes deletes a pod of the new attempt right after its creation: the previous
// attempt's pod of the same name on the same node (slice recovery binds the kept slices' pods
// there at once) had its deletion played by KWOK, and the new one gets it too; the operator
// creates it again, at times over and over for seconds. No kubelet does that, so the summary
// gives the medians over the runs without such re-creations as well.
int SliceRecovery(const std::string& kubeconfig, const std::string& ns, const std::string& prefix,
                  int slices, int hosts, int runs, int hot_swap_runs, int grace,
                  const std::string& metrics_url, const std::string& condition) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each run's line as it comes
  auto client = Connect(kubeconfig);
  const std::string accelerator = "tpu-" + prefix;
  const std::string topology = "2x" + std::to_string(2 * hosts);  // 4 chips per host
  const int pods_per_job = slices * hosts;
  const auto pool = [&](int p) { return prefix + "-" + std::to_string(p); };
  const auto delete_nodes = [&] {
    for (int p = 0; p <= slices; ++p) DeleteFaultNodes(*client, pool(p), hosts);
  };
  for (int p = 0; p <= slices; ++p) {
    if (!CreateFaultNodes(*client, pool(p), accelerator, topology, hosts)) {
      delete_nodes();
      return 1;
    }
  }

  std::mutex mu;
  std::condition_variable changed;
  std::map<std::string, WatchedPod> pods;  // by uid
  Follower pod_watch(
      *client, Resource::Pods(), ns, "tpujob.dev/job-name",
      [&](const tpujob::kube::WatchEvent& event, std::chrono::steady_clock::time_point at) {
        const Json& object = event.object;
        std::lock_guard<std::mutex> lock(mu);
        WatchedPod& pod = pods[object.value("/metadata/uid"_json_pointer, "")];
        if (!pod.added) {
          pod.added = at;
          pod.job = object.value("/metadata/labels/tpujob.dev~1job-name"_json_pointer, "");
          pod.attempt = object.value("/metadata/labels/tpujob.dev~1attempt"_json_pointer, "");
          pod.placed_by_scheduler = object.value("/spec/nodeName"_json_pointer, "").empty();
        }
        pod.node = object.value("/spec/nodeName"_json_pointer, "");
        const bool going = event.type == tpujob::kube::WatchEventType::kDeleted ||
                           object.contains("/metadata/deletionTimestamp"_json_pointer);
        if (going && !pod.gone) pod.gone = at;
        if (!going && !pod.running && object.value("/status/phase"_json_pointer, "") == "Running") {
          pod.running = at;
        }
        changed.notify_all();
      });
  if (!pod_watch.Start()) {
    delete_nodes();
    return 1;
  }
  // Waits until `done` holds over the watched pods (called under the lock).
  const auto await = [&](const std::function<bool()>& done, int seconds) {
    std::unique_lock<std::mutex> lock(mu);
    return changed.wait_for(lock, std::chrono::seconds(seconds), done);
  };
  // Pods of `job` (of `attempt`, when not empty) that exist, that run.
  const auto count = [&](const std::string& job, const std::string& attempt, bool running) {
    int n = 0;
    for (const auto& [uid, pod] : pods) {
      n += pod.job == job && (attempt.empty() || pod.attempt == attempt) && !pod.gone &&
           (!running || pod.running);
    }
    return n;
  };
  // The latest of `when` over the pods of `job` and `attempt` (with `alive`, over those not
  // deleted since: a pod KWOK deleted again does not count).
  const auto latest = [&](const std::string& job, const std::string& attempt,
                          std::optional<std::chrono::steady_clock::time_point> WatchedPod::*when,
                          bool alive) {
    std::chrono::steady_clock::time_point last{};
    for (const auto& [uid, pod] : pods) {
      if (pod.job != job || pod.attempt != attempt || !(pod.*when) || (alive && pod.gone)) continue;
      last = std::max(last, *(pod.*when));
    }
    return last;
  };
  const auto node_of = [&](const std::string& pod_name) {
    auto got = client->Get(Resource::Pods(), ns, pod_name);
    return got ? got->value("/spec/nodeName"_json_pointer, "") : std::string();
  };
  Json container = {{"name", "trainer"}, {"image", "trainer:latest"}};
  const auto make_job = [&](const std::string& name, int job_slices, const std::string& recovery,
                            int priority) {
    return Json{{"apiVersion", "tpujob.dev/v1alpha1"},
                {"kind", "TPUJob"},
                {"metadata", {{"name", name}}},
                {"spec",
                 {{"tpu",
                   {{"accelerator", accelerator},
                    {"topology", topology},
                    {"chipsPerWorker", 4},
                    {"slices", job_slices}}},
                  {"priority", priority},
                  {"faultTolerance",
                   {{"maxJobRetries", 3},
                    {"recovery", recovery},
                    {"maintenanceGracePeriodSeconds", grace}}},
                  {"replicaSpecs",
                   {{"Worker",
                     {{"replicas", hosts},
                      {"template",
                       {{"spec",
                         {{"terminationGracePeriodSeconds", grace},
                          {"containers", Json::array({container})}}}}}}}}}}}};
  };
  // Creates the job and waits until its `want` pods of attempt 1 run.
  const auto start_job = [&](const Json& job, int want) {
    const std::string name = job["metadata"]["name"];
    if (auto created = client->Create(Resource::TPUJobs(), ns, job); !created) {
      std::fprintf(stderr, "error: %s\n", created.error().ToString().c_str());
      return false;
    }
    if (!await([&] { return count(name, "1", true) == want; }, 300)) {
      std::fprintf(stderr, "error: %s never had %d pods Running\n", name.c_str(), want);
      return false;
    }
    return true;
  };
  const auto remove_job = [&](const std::string& name) {
    tpujob::kube::DeleteOptions foreground;
    foreground.propagation_policy = "Foreground";
    client->Delete(Resource::TPUJobs(), ns, name, foreground);
    return await([&] { return count(name, "", false) == 0; }, 300) &&
           WaitFor([&] { return !client->Get(Resource::TPUJobs(), ns, name); }, 60,
                   std::chrono::milliseconds(100));
  };
  // The operator's writes once they have settled (two reads 500 ms apart agree; at most 20 s),
  // after the job reports attempt 2 Running with no slice recovery pending.
  const auto settled_writes = [&](const std::string& name) {
    WaitFor(
        [&] {
          auto job = client->Get(Resource::TPUJobs(), ns, name);
          return job && job->value("/status/phase"_json_pointer, "") == "Running" &&
                 job->value("/status/attempt"_json_pointer, 0) == 2 &&
                 !job->contains("/status/sliceRecovery"_json_pointer);
        },
        60, std::chrono::milliseconds(100));
    std::optional<std::map<std::string, double>> last = OperatorWrites(metrics_url);
    for (int i = 0; i < 40; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      auto now = OperatorWrites(metrics_url);
      if (now == last) break;
      last = now;
    }
    return last;
  };
  const auto ms_from = [](std::chrono::steady_clock::time_point t0,
                          std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double, std::milli>(t - t0).count();
  };
  // One fault on a node of slice 1 of the running job `name`, measured; then the job (and
  // `victim`, if any) deleted and the node healed.
  // Nodes faulted so far: each fault goes to a node of its own, so that no fault meets what an
  // earlier one left on its node (the operator's annotations, its memory of the cordon).
  std::set<std::string> faulted;
  const auto recover = [&](const std::string& name,
                           const std::string& victim) -> std::optional<RecoveryRun> {
    std::string node;
    for (int host = 0; host < hosts && (node.empty() || faulted.contains(node)); ++host) {
      node = node_of(name + "-worker-1-" + std::to_string(host));
    }
    faulted.insert(node);
    auto before = OperatorWrites(metrics_url);
    if (node.empty() || !before) {
      std::fprintf(stderr, "error: no node for %s's slice 1 or no operator metrics at %s\n",
                   name.c_str(), metrics_url.c_str());
      return std::nullopt;
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::optional<RecoveryRun> run;
    if (auto written = WriteNodeFault(*client, node, condition); !written) {
      std::fprintf(stderr, "error: %s\n", written.error().ToString().c_str());
    } else if (!await([&] { return count(name, "2", true) == pods_per_job; }, 300)) {
      std::fprintf(stderr, "error: %s: attempt 2 never had %d pods Running\n", name.c_str(),
                   pods_per_job);
    } else {
      auto after = settled_writes(name);
      run.emplace();
      std::lock_guard<std::mutex> lock(mu);
      run->old_gone_ms = ms_from(t0, latest(name, "1", &WatchedPod::gone, false));
      run->created_ms = ms_from(t0, latest(name, "2", &WatchedPod::added, true));
      run->running_ms = ms_from(t0, latest(name, "2", &WatchedPod::running, true));
      if (!victim.empty())
        run->victim_gone_ms = ms_from(t0, latest(victim, "1", &WatchedPod::gone, false));
      for (const auto& [uid, pod] : pods) {
        run->scheduled += pod.job == name && pod.attempt == "2" && pod.placed_by_scheduler;
        run->created += pod.job == name && pod.attempt == "2";
      }
      if (after) {
        for (const auto& [key, n] : *after) {
          const double delta = n - (before->contains(key) ? before->at(key) : 0);
          if (delta > 0) run->writes[key] = delta;
        }
      }
    }
    // The victim first: once the job is gone, it would be admitted again onto the freed pools.
    bool clean = (victim.empty() || remove_job(victim)) && remove_job(name);
    clean =
        WriteNodeCondition(*client, node, condition, "False", "Repaired", "cleared by tpujob-bench")
            .has_value() &&
        clean;
    clean = UncordonNode(*client, node).has_value() && clean;
    // Healed as the next fault's job will see it: the node controller drops its own
    // node.kubernetes.io/unschedulable taint a moment after the uncordon.
    clean = clean &&
            WaitFor(
                [&] {
                  auto got = client->Get(Resource::Nodes(), "", node);
                  if (!got || got->value("/spec/unschedulable"_json_pointer, false)) {
                    return false;
                  }
                  for (const auto& taint : got->value("/spec/taints"_json_pointer, Json::array())) {
                    if (taint.value("key", "") != "google.com/tpu") return false;
                  }
                  return true;
                },
                60, std::chrono::milliseconds(100));
    if (!clean) {
      std::fprintf(stderr, "error: %s: not cleaned up (job, pods or node %s)\n", name.c_str(),
                   node.c_str());
      return std::nullopt;
    }
    return run;
  };
  const auto print_run = [&](const std::string& label, const RecoveryRun& run) {
    std::printf("  %-9s old pods gone %6.0f ms, new all created %6.0f ms, all Running %6.0f ms",
                label.c_str(), run.old_gone_ms, run.created_ms, run.running_ms);
    if (run.victim_gone_ms > 0) std::printf(" (victim's pods gone %.0f ms)", run.victim_gone_ms);
    std::printf("; pods created %.0f for %d, scheduled %.0f; operator writes %.0f:", run.created,
                pods_per_job, run.scheduled, run.Writes());
    for (const auto& [key, n] : run.writes) std::printf(" %s %.0f,", key.c_str(), n);
    std::printf("\n");
  };

  const auto bench_start = std::chrono::steady_clock::now();
  std::printf(
      "slice recovery, %d slices x %d hosts (%d pods, 4 chips each), grace %d s, %d + 1 pools:\n",
      slices, hosts, pods_per_job, grace, slices);
  std::map<std::string, std::vector<RecoveryRun>> results;
  int failures = 0;
  for (int run = 0; run < runs && failures == 0; ++run) {
    for (const std::string recovery : {"Slice", "Job"}) {
      std::string name = prefix + "-" + recovery + "-" + std::to_string(run);
      std::transform(name.begin(), name.end(), name.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      if (!start_job(make_job(name, slices, recovery, 100), pods_per_job)) {
        ++failures;
        remove_job(name);
        break;
      }
      auto measured = recover(name, "");
      if (!measured) {
        ++failures;
        break;
      }
      print_run(recovery + " " + std::to_string(run + 1), *measured);
      results[recovery].push_back(*measured);
    }
  }
  for (int run = 0; run < hot_swap_runs && failures == 0; ++run) {
    const std::string name = prefix + "-swap-" + std::to_string(run);
    const std::string victim = prefix + "-low-" + std::to_string(run);
    if (!start_job(make_job(name, slices, "Slice", 100), pods_per_job) ||
        !start_job(make_job(victim, 1, "Slice", 1), hosts)) {
      ++failures;
      remove_job(name);
      remove_job(victim);
      break;
    }
    auto measured = recover(name, victim);
    if (!measured) {
      ++failures;
      break;
    }
    print_run("hot swap " + std::to_string(run + 1), *measured);
    results["swap"].push_back(*measured);
  }
  pod_watch.Stop();
  delete_nodes();

  // Medians over the runs of `key`, or over those without re-created pods only.
  const auto median = [&](const std::string& key, bool clean_only,
                          const std::function<double(const RecoveryRun&)>& field) {
    std::vector<double> values;
    for (const auto& run : results[key]) {
      if (!clean_only || run.created == pods_per_job) values.push_back(field(run));
    }
    return std::make_pair(Median(values), values.size());
  };
  const auto running = [](const RecoveryRun& run) { return run.running_ms; };
  const auto writes = [](const RecoveryRun& run) { return run.Writes(); };
  const auto scheduled = [](const RecoveryRun& run) { return run.scheduled; };
  for (const bool clean_only : {false, true}) {
    const auto [slice_ms, slice_runs] = median("Slice", clean_only, running);
    const auto [job_ms, job_runs] = median("Job", clean_only, running);
    if (slice_runs == 0 || job_runs == 0) continue;
    const double slice_writes = median("Slice", clean_only, writes).first;
    const double job_writes = median("Job", clean_only, writes).first;
    std::printf(
        "slice recovery %dx%d, medians of %zu + %zu runs%s: fault -> all Running: Slice %.0f ms, "
        "Job %.0f ms, ratio slice/job %.2f; operator API writes: Slice %.0f, Job %.0f, ratio "
        "%.2f (1/slices = %.2f); pods scheduled: Slice %.0f, Job %.0f\n",
        slices, hosts, slice_runs, job_runs, clean_only ? " without re-created pods" : "", slice_ms,
        job_ms, slice_ms / job_ms, slice_writes, job_writes, slice_writes / job_writes,
        1.0 / slices, median("Slice", clean_only, scheduled).first,
        median("Job", clean_only, scheduled).first);
  }
  if (!results["swap"].empty()) {
    const double swap_ms = median("swap", false, running).first;
    const double slice_ms = median("Slice", false, running).first;
    std::printf(
        "hot swap %dx%d, median of %zu runs: fault -> all Running %.0f ms (victim's pods gone "
        "%.0f ms); ratio hot swap/slice recovery with a free pool %.2f\n",
        slices, hosts, results["swap"].size(), swap_ms,
        median("swap", false, [](const RecoveryRun& run) { return run.victim_gone_ms; }).first,
        slice_ms > 0 ? swap_ms / slice_ms : 0.0);
  }
  std::printf(
      "  (pods created beyond the job's count: pods of the new attempt deleted by KWOK (its late "
      "delete of the previous attempt's pod of the same name) and created again)\n");
  std::printf("  (%.0f s in all)\n", MsSince(bench_start) / 1000);
  return failures == 0 ? 0 : 1;
}

}  // namespace

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

int main(int argc, char** argv) {
  CLI::App app{"Load generators for the tpujob-operator benchmarks.", "tpujob-bench"};
  app.require_subcommand(1);
  std::string kubeconfig, ns = "default";
  int count = 1000, jobs = 100, nodes = 20, threads = 16, first = 0;
  auto* pods = app.add_subcommand("create-pods", "Create worker-like pods bound to fake nodes.");
  pods->add_option("--kubeconfig", kubeconfig)->required();
  pods->add_option("--namespace", ns)->capture_default_str();
  pods->add_option("--count", count)->capture_default_str();
  pods->add_option("--jobs", jobs)->capture_default_str();
  pods->add_option("--nodes", nodes)->capture_default_str();
  pods->add_option("--threads", threads)->capture_default_str();
  pods->add_option("--first", first, "Start at pod number F (the ones before exist already).")
      ->capture_default_str();
  std::string name = "gang", topology = "16x16";
  int workers = 64, chips = 4, slices = 1;
  bool finish = false;
  // The options of the gang-shaped commands: where, what name, and the shape of the gang.
  const auto gang_options = [&](CLI::App* cmd) {
    cmd->add_option("--kubeconfig", kubeconfig)->required();
    cmd->add_option("--namespace", ns)->capture_default_str();
    cmd->add_option("--name", name)->capture_default_str();
    cmd->add_option("--workers", workers, "Workers (TPU hosts) per slice.")->capture_default_str();
    cmd->add_option("--topology", topology)->capture_default_str();
    cmd->add_option("--chips-per-worker", chips)->capture_default_str();
  };
  auto* gang = app.add_subcommand("gang", "Time a TPUJob's gang creation (and its whole life).");
  gang_options(gang);
  gang->add_option("--slices", slices, "Slices of --workers hosts each (spec.tpu.slices).")
      ->capture_default_str();
  gang->add_flag("--finish", finish, "Drive the job to success and delete it.");
  auto* plain_gang = app.add_subcommand(
      "plain-gang", "Time a plain client creating the pods the operator would for `gang`.");
  gang_options(plain_gang);
  plain_gang->add_option("--slices", slices)->capture_default_str();
  plain_gang->add_option("--threads", threads)->capture_default_str();
  auto* jobset_cmd = app.add_subcommand(
      "jobset", "Time the equivalent JobSet's pod creation (the JobSet controller must run).");
  gang_options(jobset_cmd);
  int probe_count = 50;
  auto* probe_cmd = app.add_subcommand(
      "concurrent-gets", "Time N GETs at once from N threads, with a fresh and a warm pool.");
  probe_cmd->add_option("--kubeconfig", kubeconfig)->required();
  probe_cmd->add_option("--count", probe_count)->check(CLI::Range(1, 1000))->capture_default_str();
  auto* node_cmd = app.add_subcommand("create-nodes", "Create KWOK-managed fake TPU nodes.");
  node_cmd->add_option("--kubeconfig", kubeconfig)->required();
  node_cmd->add_option("--count", nodes)->capture_default_str();
  node_cmd->add_option("--first", first, "Start at node number F (the ones before exist already).")
      ->capture_default_str();
  std::string prefix = "fault-latency", condition = "TPUUnhealthy";
  int faults = 50, fault_workers = 2, fault_burst = 1, timeout_seconds = 30;
  bool fault_ceiling = false;
  auto* fault_cmd = app.add_subcommand(
      "fault-latency",
      "Time node condition written -> node cordoned and the job's pods deleted, per fault.");
  fault_cmd->add_option("--kubeconfig", kubeconfig)->required();
  fault_cmd->add_option("--namespace", ns)->capture_default_str();
  fault_cmd->add_option("--prefix", prefix, "Names of the nodes and jobs it creates.")
      ->capture_default_str();
  fault_cmd->add_option("--faults", faults, "Faults injected, one per TPUJob, --burst at a time.")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  fault_cmd->add_option("--burst", fault_burst, "Faults written at once (one job each).")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  fault_cmd->add_flag("--ceiling", fault_ceiling,
                      "The raw ceiling: write a condition the operator ignores and cordon the "
                      "node and delete the pods from here as each fault write returns.");
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
  int reissue_workers = 64, reissue_runs = 5;
  auto* reissue_cmd = app.add_subcommand(
      "reissue", "Time hardware fault -> the next attempt all Running (grace 0), per run.");
  reissue_cmd->add_option("--kubeconfig", kubeconfig)->required();
  reissue_cmd->add_option("--namespace", ns)->capture_default_str();
  reissue_cmd->add_option("--prefix", prefix, "Names of the nodes and jobs it creates.")
      ->capture_default_str();
  reissue_cmd->add_option("--workers", reissue_workers, "Workers (TPU hosts) of the TPUJob.")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  reissue_cmd->add_option("--runs", reissue_runs, "Faults, one TPUJob each.")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  int in_place_workers = 64, in_place_runs = 3;
  auto* in_place_cmd = app.add_subcommand(
      "in-place",
      "Time fault -> every program of the next generation running and count the operator's API "
      "writes, restart InPlace beside Recreate, interleaved.");
  in_place_cmd->add_option("--kubeconfig", kubeconfig)->required();
  in_place_cmd->add_option("--namespace", ns)->capture_default_str();
  in_place_cmd->add_option("--prefix", prefix, "Names of the nodes and jobs it creates.")
      ->capture_default_str();
  in_place_cmd->add_option("--workers", in_place_workers, "Workers (TPU hosts) of the TPUJob.")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  in_place_cmd->add_option("--runs", in_place_runs, "Restarts of each kind, one TPUJob each.")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  int slice_count = 4, slice_hosts = 16, slice_runs = 3, hot_swap_runs = 0, slice_grace = 0;
  std::string metrics_url;
  auto* slice_cmd = app.add_subcommand(
      "slice-recovery",
      "Time fault -> the next attempt all Running and count the operator's API writes, recovery "
      "Slice beside recovery Job, interleaved; and hot swap.");
  slice_cmd->add_option("--kubeconfig", kubeconfig)->required();
  slice_cmd->add_option("--namespace", ns)->capture_default_str();
  slice_cmd->add_option("--prefix", prefix, "Names of the nodes and jobs it creates.")
      ->capture_default_str();
  slice_cmd->add_option("--slices", slice_count, "Slices of the TPUJob (spec.tpu.slices).")
      ->check(CLI::Range(2, 64))
      ->capture_default_str();
  slice_cmd->add_option("--hosts", slice_hosts, "Hosts (workers) per slice.")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  slice_cmd->add_option("--runs", slice_runs, "Faults per recovery mode.")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  slice_cmd
      ->add_option("--hot-swap-runs", hot_swap_runs,
                   "Faults with the spare pool held by a "
                   "lower-priority job.")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  slice_cmd->add_option("--grace", slice_grace, "The pods' grace period, seconds.")
      ->check(CLI::Range(0, 300))
      ->capture_default_str();
  slice_cmd
      ->add_option("--metrics-url", metrics_url,
                   "The operator's plain-HTTP /metrics (--metrics-secure=false).")
      ->required();
  in_place_cmd
      ->add_option("--metrics-url", metrics_url,
                   "The operator's plain-HTTP /metrics (--metrics-secure=false).")
      ->required();
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
  int memory_pods = 20000, memory_nodes = 5000;
  auto* memory_cmd = app.add_subcommand(
      "cache-memory", "Heap the cache holds per pod and per node (in memory, no cluster).");
  memory_cmd->add_option("--pods", memory_pods)
      ->check(CLI::Range(1, 10000000))
      ->capture_default_str();
  memory_cmd->add_option("--nodes", memory_nodes)
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (probe_cmd->parsed()) return ConcurrentGets(kubeconfig, probe_count);
  if (memory_cmd->parsed()) return CacheMemory(memory_pods, memory_nodes);
  if (admission_cmd->parsed()) return AdmissionBench(admission_nodes, admission_jobs, runs, seed);
  if (preemption_cmd->parsed()) {
    return PreemptionBench(admission_nodes, preemption_running, admission_jobs, runs, seed);
  }
  if (jobset_cmd->parsed()) return JobSetGang(kubeconfig, ns, name, workers, topology, chips);
  if (plain_gang->parsed()) {
    return PlainGang(kubeconfig, ns, name, workers, topology, chips, slices, threads);
  }
  if (gang->parsed()) return Gang(kubeconfig, ns, name, workers, topology, chips, slices, finish);
  if (reissue_cmd->parsed()) {
    return Reissue(kubeconfig, ns, prefix, reissue_workers, reissue_runs, condition);
  }
  if (in_place_cmd->parsed()) {
    return InPlaceBench(kubeconfig, ns, prefix, in_place_workers, in_place_runs, metrics_url);
  }
  if (slice_cmd->parsed()) {
    return SliceRecovery(kubeconfig, ns, prefix, slice_count, slice_hosts, slice_runs,
                         hot_swap_runs, slice_grace, metrics_url, condition);
  }
  if (fault_cmd->parsed()) {
    if (fault_ceiling) condition = "TPUJobBenchCeiling";  // a condition the operator ignores
    return FaultLatency(kubeconfig, ns, prefix, faults, fault_workers, fault_burst, condition,
                        timeout_seconds, fault_ceiling);
  }

  auto client = Connect(kubeconfig);
  const auto start = std::chrono::steady_clock::now();
  int failures = 0;
  int total = 0;
  if (node_cmd->parsed()) {
    total = nodes - first;
    failures = Parallel(total, 4, [&](int n) {
      const int i = first + n;
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
    total = count - first;
    failures = Parallel(total, threads, [&](int n) {
      const int i = first + n;
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
