// Fault to action: a hardware condition written on a node -> that node cordoned and every pod of
// the job on it being deleted, both seen through watches opened long before the fault; and the
// raw ceiling of the same measurement (--ceiling).

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cache/objects.h"
#include "common.h"
#include "fault_nodes.h"
#include "fixtures.h"
#include "follower.h"
#include "scenarios.h"

namespace tpujob::bench {
namespace {

// What one injected fault is waiting for, filled in by the watch threads.
struct FaultProbe {
  std::string node;            // the node the condition was written on
  std::set<std::string> pods;  // uids of the job's pods not yet seen being deleted
  std::optional<std::chrono::steady_clock::time_point> cordoned;  // node seen unschedulable
  std::optional<std::chrono::steady_clock::time_point> deleted;   // last of `pods` seen going

  bool Done() const { return cordoned && deleted; }
};

}  // namespace

// With `ceiling`, the raw ceiling of the same measurement: the condition written is one the
// operator does not act on, and this process itself cordons the node and deletes the job's pods
// (all three requests at once) the moment its fault write returns, as an operator that knew of
// the fault without a watch, and needed no status write or cache, would at best.
int FaultLatency(const std::string& kubeconfig, const std::string& ns, const std::string& prefix,
                 int faults, int workers, int burst, const std::string& condition,
                 int timeout_seconds, bool ceiling) {
  auto client = Connect(kubeconfig);
  const std::string accelerator = FaultAccelerator(prefix);
  const std::string topology = FaultTopology(workers);
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
      *client, Resource::Pods(), ns, std::string(cache::kJobNameLabel),
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

  std::vector<double> total_ms, cordon_ms, delete_ms;
  int failures = 0;
  // Deletes the job and waits until it and its pods are gone.
  const auto remove_job = [&](const std::string& name) {
    DeleteForeground(*client, Resource::TPUJobs(), ns, name);
    const bool gone = AwaitGone(*client, Resource::TPUJobs(), ns, name, JobSelector(name),
                                std::chrono::milliseconds(50));
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
      const Json job = fixtures::TPUJobManifest({.name = target.name,
                                                 .accelerator = accelerator,
                                                 .topology = topology,
                                                 .workers = workers,
                                                 .fault_tolerance = {{"maxJobRetries", 1}}});
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
      by_job.label_selector = JobSelector(target.name);
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

}  // namespace tpujob::bench
