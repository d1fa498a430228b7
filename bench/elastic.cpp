// Elastic slices (spec.tpu.minSlices): a job of S slices loses one with no spare pool, and a pool
// comes free T seconds after the fault. Elastic, it runs on S - 1 meanwhile and grows back; not
// elastic, it waits whole. Measured through a pod watch; the useful work of the first W seconds
// after the fault is then reckoned from the times measured.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common.h"
#include "fault_nodes.h"
#include "fixtures.h"
#include "follower.h"
#include "scenarios.h"

namespace tpujob::bench {
namespace {

// What the pod watch saw of one pod.
struct ElasticPod : PodLife {
  std::string attempt;
};

// One fault, elastic or not: milliseconds from the fault.
struct ElasticRun {
  double fewer_running_ms = 0;  // elastic: every pod of the job on S - 1 slices Running
  double fewer_stopped_ms = 0;  // elastic: the S - 1 slices stopped to grow back
  double whole_running_ms = 0;  // the job on all S slices Running again
};

}  // namespace

int Elastic(const std::string& kubeconfig, const std::string& ns, const std::string& prefix,
            int slices, int hosts, int pool_after_seconds, int window_seconds, int wait_seconds,
            int grace) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  auto client = Connect(kubeconfig);
  const std::string accelerator = FaultAccelerator(prefix);
  const std::string topology = FaultTopology(hosts);
  const int pods_per_job = slices * hosts;
  const int timeout_seconds = std::max(300, pods_per_job / 8) + pool_after_seconds;
  const auto pool = [&](int p) { return prefix + "-" + std::to_string(p); };
  // S pools, no spare; the one that comes free T seconds after each fault is made then.
  const auto delete_nodes = [&] {
    for (int p = 0; p <= slices; ++p) DeleteFaultNodes(*client, pool(p), hosts);
  };
  for (int p = 0; p < slices; ++p) {
    if (!CreateFaultNodes(*client, pool(p), accelerator, topology, hosts)) {
      delete_nodes();
      return 1;
    }
  }
  PodWatch<ElasticPod> pod_watch(
      *client, ns,
      [](ElasticPod& pod, const Json& object, bool first, std::chrono::steady_clock::time_point) {
        if (first) {
          pod.attempt = object.value("/metadata/labels/tpujob.dev~1attempt"_json_pointer, "");
        }
      });
  if (!pod_watch.Start()) {
    delete_nodes();
    return 1;
  }
  const auto& pods = pod_watch.pods;
  const auto running = [&](const std::string& job, const std::string& attempt) {
    int n = 0;
    for (const auto& [uid, pod] : pods) {
      n += pod.job == job && pod.attempt == attempt && !pod.gone && pod.running_since;
    }
    return n;
  };
  // The latest `when` over the pods of `job` and `attempt` that have one.
  const auto latest = [&](const std::string& job, const std::string& attempt,
                          std::optional<std::chrono::steady_clock::time_point> PodLife::*when) {
    std::chrono::steady_clock::time_point last{};
    for (const auto& [uid, pod] : pods) {
      if (pod.job == job && pod.attempt == attempt && pod.*when)
        last = std::max(last, *(pod.*when));
    }
    return last;
  };
  const auto earliest_gone = [&](const std::string& job, const std::string& attempt) {
    std::optional<std::chrono::steady_clock::time_point> first;
    for (const auto& [uid, pod] : pods) {
      if (pod.job == job && pod.attempt == attempt && pod.gone && (!first || *pod.gone < *first)) {
        first = pod.gone;
      }
    }
    return first.value_or(std::chrono::steady_clock::time_point{});
  };
  const auto await = [&](const std::function<bool()>& done) {
    return pod_watch.Await(done, timeout_seconds);
  };

  // One fault on a node of slice 1, the pool coming free T seconds later; then everything the
  // run made is removed and the node healed.
  const auto run = [&](bool elastic) -> std::optional<ElasticRun> {
    const std::string name = prefix + (elastic ? "-elastic" : "-whole");
    Json fault_tolerance = {{"maxJobRetries", 3}, {"maintenanceGracePeriodSeconds", grace}};
    if (elastic) fault_tolerance["elastic"] = {{"waitSeconds", wait_seconds}};
    Json job =
        fixtures::TPUJobManifest({.name = name,
                                  .accelerator = accelerator,
                                  .topology = topology,
                                  .workers = hosts,
                                  .slices = slices,
                                  .priority = 100,
                                  .fault_tolerance = fault_tolerance,
                                  .grace = grace,
                                  .container = {{"name", "trainer"}, {"image", "trainer:latest"}}});
    if (elastic) job["spec"]["tpu"]["minSlices"] = slices - 1;
    if (auto created = client->Create(Resource::TPUJobs(), ns, job); !created) {
      std::fprintf(stderr, "error: %s\n", created.error().ToString().c_str());
      return std::nullopt;
    }
    std::optional<ElasticRun> out;
    std::string node;
    const auto spare = pool(slices);
    if (!await([&] { return running(name, "1") == pods_per_job; })) {
      std::fprintf(stderr, "error: %s never had %d pods Running\n", name.c_str(), pods_per_job);
    } else if (auto got = client->Get(Resource::Pods(), ns, name + "-worker-1-0"); !got) {
      std::fprintf(stderr, "error: no pod %s-worker-1-0\n", name.c_str());
    } else if (node = got->value("/spec/nodeName"_json_pointer, "");
               !WriteNodeFault(*client, node, "TPUUnhealthy")) {
      std::fprintf(stderr, "error: cannot write the fault on %s\n", node.c_str());
    } else {
      const auto t0 = std::chrono::steady_clock::now();
      ElasticRun r;
      bool ok = true;
      if (elastic) {
        ok = await([&] { return running(name, "2") == (slices - 1) * hosts; });
        if (!ok)
          std::fprintf(stderr, "error: %s never ran on %d slices\n", name.c_str(), slices - 1);
        std::lock_guard<std::mutex> lock(pod_watch.mu);
        r.fewer_running_ms = MsBetween(t0, latest(name, "2", &PodLife::running_since));
      }
      std::this_thread::sleep_until(t0 + std::chrono::seconds(pool_after_seconds));
      ok = ok && CreateFaultNodes(*client, spare, accelerator, topology, hosts);
      const std::string whole = elastic ? "3" : "2";
      if (ok && !await([&] { return running(name, whole) == pods_per_job; })) {
        std::fprintf(stderr, "error: %s: attempt %s never had %d pods Running\n", name.c_str(),
                     whole.c_str(), pods_per_job);
        ok = false;
      }
      if (ok) {
        std::lock_guard<std::mutex> lock(pod_watch.mu);
        r.whole_running_ms = MsBetween(t0, latest(name, whole, &PodLife::running_since));
        if (elastic) r.fewer_stopped_ms = MsBetween(t0, earliest_gone(name, "2"));
        out = r;
      }
    }
    tpujob::kube::DeleteOptions foreground;
    foreground.propagation_policy = "Foreground";
    client->Delete(Resource::TPUJobs(), ns, name, foreground);
    bool clean = pod_watch.Await(
        [&] {
          for (const auto& [uid, pod] : pods) {
            if (pod.job == name && !pod.gone) return false;
          }
          return true;
        },
        timeout_seconds);
    DeleteFaultNodes(*client, spare, hosts);
    if (!node.empty()) {
      clean = WriteNodeCondition(*client, node, "TPUUnhealthy", "False", "Repaired",
                                 "cleared by tpujob-bench")
                  .has_value() &&
              UncordonNode(*client, node).has_value() && clean;
      clean = clean && WaitFor(
                           [&] {
                             auto got = client->Get(Resource::Nodes(), "", node);
                             return got && !got->value("/spec/unschedulable"_json_pointer, false);
                           },
                           60, std::chrono::milliseconds(100));
    }
    if (!clean) {
      std::fprintf(stderr, "error: %s: not cleaned up\n", name.c_str());
      return std::nullopt;
    }
    return out;
  };

  std::printf(
      "elastic slices, %d slices x %d hosts (4 chips each), no spare pool, a pool free %d s after "
      "the fault; minSlices %d, waitSeconds %d, grace %d s:\n",
      slices, hosts, pool_after_seconds, slices - 1, wait_seconds, grace);
  ElasticRun e, w;
  bool measured = false;
  if (const auto elastic = run(true)) {
    e = *elastic;
    if (const auto whole = run(false)) {
      w = *whole;
      measured = true;
    }
  }
  pod_watch.Stop();
  delete_nodes();
  if (!measured) return 1;
  const ElasticRun* elastic = &e;
  const ElasticRun* whole = &w;
  std::printf(
      "  elastic: fault -> running on %d slices %.0f ms; stopped to grow back %.0f ms; on all %d "
      "slices again %.0f ms\n",
      slices - 1, elastic->fewer_running_ms, elastic->fewer_stopped_ms, slices,
      elastic->whole_running_ms);
  std::printf("  not elastic: fault -> on all %d slices again %.0f ms\n", slices,
              whole->whole_running_ms);
  // Useful slice-seconds in the window after the fault: each slice running is one slice-second
  // a second; the no-fault figure is every slice for the whole window.
  const double window_ms = window_seconds * 1000.0;
  const auto clip = [&](double ms) { return std::clamp(ms, 0.0, window_ms); };
  const double no_fault = slices * window_ms;
  const double with_elastic =
      (slices - 1) * (clip(elastic->fewer_stopped_ms) - clip(elastic->fewer_running_ms)) +
      slices * (window_ms - clip(elastic->whole_running_ms));
  const double without = slices * (window_ms - clip(whole->whole_running_ms));
  std::printf(
      "elastic %dx%d: fault -> running on %d of %d slices %.0f ms (waitSeconds %d), vs fault -> "
      "whole job Running once a pool frees after %d s: %.0f ms; useful chip-seconds in the first "
      "%d s, of the no-fault figure: elastic %.3f, not elastic %.3f (goal >= 0.8 elastic)\n",
      slices, hosts, slices - 1, slices, elastic->fewer_running_ms, wait_seconds,
      pool_after_seconds, whole->whole_running_ms, window_seconds, with_elastic / no_fault,
      without / no_fault);
  return 0;
}

}  // namespace tpujob::bench
