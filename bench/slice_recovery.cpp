// Slice recovery beside whole-job re-issue, and hot swap: a fault on a node of one slice of a
// multislice TPUJob -> the next attempt all Running (or, restarted in place, every program of the
// next generation running), with the operator's API writes over the recovery.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cache/objects.h"
#include "common.h"
#include "fault_nodes.h"
#include "fixtures.h"
#include "follower.h"
#include "operator_writes.h"
#include "played_supervisors.h"
#include "scenarios.h"

namespace tpujob::bench {
namespace {

// What the pod watch of SliceRecovery saw of one pod.
struct WatchedPod : PodLife, PlayedProgram {
  std::string attempt, node;
  bool placed_by_scheduler = false;  // created without spec.nodeName
};

}  // namespace

// Slice recovery beside whole-job re-issue: S + 1 node pools of H hosts (4 chips each), then
// `runs` times each, interleaved, a TPUJob of S slices x H hosts (grace `grace`, recovery Slice,
// then recovery Job) runs, TPUUnhealthy=True is written on a node of slice 1, and the time is taken
// through a pod watch until every pod of attempt 2 is Running, with the operator's API writes
// from its /metrics over the recovery. With `hot_swap_runs`, the spare pool is then held by a
// 1-slice job of priority 1 while the job (priority 100) runs: the replaced slice must preempt it.
// With `in_place`, the recovery Slice jobs restart in place (spec.faultTolerance.restart
// InPlace: the kept slices' pods stay, their programs restart behind the barrier; the pods'
// supervisors are played here, played_supervisors.h) and are timed until every program of the
// next generation runs; the recovery Job ones are as without it (the whole job created again).
int SliceRecovery(const std::string& kubeconfig, const std::string& ns, const std::string& prefix,
                  int slices, int hosts, int runs, int hot_swap_runs, int grace,
                  const std::string& metrics_url, const std::string& condition, bool in_place) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each run's line as it comes
  auto client = Connect(kubeconfig);
  const std::string accelerator = FaultAccelerator(prefix);
  const std::string topology = FaultTopology(hosts);
  const int pods_per_job = slices * hosts;
  // How long a job may take to run, to recover, to go: 300 s, more for the largest jobs (this
  // machine creates, schedules and deletes some 30-50 pods a second while everything runs).
  const int wait_seconds = std::max(300, pods_per_job / 8);
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

  PodWatch<WatchedPod> pod_watch(
      *client, ns,
      [](WatchedPod& pod, const Json& object, bool first,
         std::chrono::steady_clock::time_point at) {
        ObservePlayedProgram(pod, object, first, at);
        if (first) {
          pod.attempt = object.value("/metadata/labels/tpujob.dev~1attempt"_json_pointer, "");
          pod.placed_by_scheduler = object.value("/spec/nodeName"_json_pointer, "").empty();
        }
        pod.node = object.value("/spec/nodeName"_json_pointer, "");
      });
  if (!pod_watch.Start()) {
    delete_nodes();
    return 1;
  }
  std::mutex& mu = pod_watch.mu;
  const auto& pods = pod_watch.pods;
  const auto await = [&](const std::function<bool()>& done, int seconds) {
    return pod_watch.Await(done, seconds);
  };
  // Pods of `job` (of `attempt`, when not empty) that exist, that run.
  const auto count = [&](const std::string& job, const std::string& attempt, bool running) {
    int n = 0;
    for (const auto& [uid, pod] : pods) {
      n += pod.job == job && (attempt.empty() || pod.attempt == attempt) && !pod.gone &&
           (!running || pod.running_since);
    }
    return n;
  };
  // The latest of `when` over the pods of `job` and `attempt` (any, when empty; with `alive`,
  // over those not deleted since).
  const auto latest = [&](const std::string& job, const std::string& attempt,
                          std::optional<std::chrono::steady_clock::time_point> WatchedPod::*when,
                          bool alive) {
    std::chrono::steady_clock::time_point last{};
    for (const auto& [uid, pod] : pods) {
      if (pod.job != job || (!attempt.empty() && pod.attempt != attempt) || !(pod.*when) ||
          (alive && pod.gone)) {
        continue;
      }
      last = std::max(last, *(pod.*when));
    }
    return last;
  };
  const auto node_of = [&](const std::string& pod_name) {
    auto got = client->Get(Resource::Pods(), ns, pod_name);
    return got ? got->value("/spec/nodeName"_json_pointer, "") : std::string();
  };
  // Restarted in place: recovery Slice with in_place.
  const auto restarts_in_place = [&](const std::string& recovery) {
    return in_place && recovery == "Slice";
  };
  const auto make_job = [&](const std::string& name, int job_slices, const std::string& recovery,
                            int priority) {
    Json fault_tolerance = {
        {"maxJobRetries", 3}, {"recovery", recovery}, {"maintenanceGracePeriodSeconds", grace}};
    Json container = {{"name", "trainer"}, {"image", "trainer:latest"}};
    if (restarts_in_place(recovery)) {
      fault_tolerance["restart"] = "InPlace";
      fault_tolerance["maxWorkerRestarts"] = 100;
      container["command"] = {"python3", "train.py"};
    }
    return fixtures::TPUJobManifest({.name = name,
                                     .accelerator = accelerator,
                                     .topology = topology,
                                     .workers = hosts,
                                     .slices = job_slices,
                                     .priority = priority,
                                     .fault_tolerance = fault_tolerance,
                                     .grace = grace,
                                     .container = container});
  };
  const auto barrier_open = [&](const std::string& name) {
    auto job = client->Get(Resource::TPUJobs(), ns, name);
    return job && job->value("/status/inPlace/barrier"_json_pointer, "") == "Open";
  };
  // Creates the job and waits until its `want` pods of attempt 1 run.
  const auto start_job = [&](const Json& job, int want) {
    const std::string name = job["metadata"]["name"];
    if (auto created = client->Create(Resource::TPUJobs(), ns, job); !created) {
      std::fprintf(stderr, "error: %s\n", created.error().ToString().c_str());
      return false;
    }
    if (!await([&] { return count(name, "1", true) == want; }, wait_seconds)) {
      std::fprintf(stderr, "error: %s never had %d pods Running\n", name.c_str(), want);
      return false;
    }
    // In place, the programs of the first generation start once the barrier opens.
    if (job.value("/spec/faultTolerance/restart"_json_pointer, "") == "InPlace" &&
        !WaitFor([&] { return barrier_open(name); }, 120, std::chrono::milliseconds(100))) {
      std::fprintf(stderr, "error: %s: the barrier never opened\n", name.c_str());
      return false;
    }
    return true;
  };
  const auto remove_job = [&](const std::string& name) {
    tpujob::kube::DeleteOptions foreground;
    foreground.propagation_policy = "Foreground";
    client->Delete(Resource::TPUJobs(), ns, name, foreground);
    return await([&] { return count(name, "", false) == 0; }, wait_seconds) &&
           WaitFor([&] { return !client->Get(Resource::TPUJobs(), ns, name); }, 60,
                   std::chrono::milliseconds(100));
  };
  // The operator's writes once they have settled (two reads 500 ms apart agree; at most 20 s),
  // after the job reports attempt 2 Running with no slice recovery pending.
  const auto settled_writes = [&](const std::string& name, bool restarted_in_place) {
    return SettledWrites(metrics_url, [&] {
      auto job = client->Get(Resource::TPUJobs(), ns, name);
      return job && job->value("/status/phase"_json_pointer, "") == "Running" &&
             job->value("/status/attempt"_json_pointer, 0) == 2 &&
             !job->contains("/status/sliceRecovery"_json_pointer) &&
             (!restarted_in_place ||
              job->value("/status/inPlace/barrier"_json_pointer, "") == "Open");
    });
  };
  // One fault on a node of slice 1 of the running job `name`, measured; then the job (and
  // `victim`, if any) deleted and the node healed.
  // Nodes faulted so far: each fault goes to a node of its own, so that no fault meets what an
  // earlier one left on its node (the operator's annotations, its memory of the cordon).
  std::set<std::string> faulted;
  const auto recover = [&](const std::string& name, const std::string& victim,
                           bool restarted_in_place) -> std::optional<RecoveryRun> {
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
    } else if (restarted_in_place
                   ? !SuperviseUntil(*client, ns, pod_watch, name, 2, pods_per_job, wait_seconds)
                   : !await([&] { return count(name, "2", true) == pods_per_job; }, wait_seconds)) {
      std::fprintf(stderr, "error: %s: %s\n", name.c_str(),
                   restarted_in_place ? "the programs of generation 2 never all ran"
                                      : "attempt 2 never had all its pods Running");
      if (restarted_in_place) {
        // What the played supervisors saw of the pods that did not get there.
        std::lock_guard<std::mutex> lock(mu);
        int live = 0, told = 0, barrier = 0, stopped = 0, lost = 0, rewritten = 0;
        for (const auto& [uid, pod] : pods) {
          if (pod.job != name || pod.gone) continue;
          ++live;
          told += pod.generation >= 2;
          barrier += pod.barrier >= 2;
          stopped += pod.restarts > 0;
          lost += PlayedRestartLost(pod);
          rewritten += pod.rewritten;
        }
        std::fprintf(stderr,
                     "  live pods %d: told generation 2 %d, barrier 2 %d, restarted %d, restart "
                     "overwritten now %d, restarts written again %d\n",
                     live, told, barrier, stopped, lost, rewritten);
      }
    } else {
      auto after = settled_writes(name, restarted_in_place);
      run.emplace();
      std::lock_guard<std::mutex> lock(mu);
      run->old_gone_ms = MsBetween(t0, latest(name, "1", &WatchedPod::gone, false));
      run->created_ms = MsBetween(t0, latest(name, "2", &WatchedPod::added, true));
      // In place: the kept slices' pods stay; the last program to run is the last barrier.
      run->running_ms = restarted_in_place
                            ? MsBetween(t0, latest(name, "", &WatchedPod::barrier_at, true))
                            : MsBetween(t0, latest(name, "2", &WatchedPod::running_since, true));
      if (!victim.empty())
        run->victim_gone_ms = MsBetween(t0, latest(victim, "1", &WatchedPod::gone, false));
      for (const auto& [uid, pod] : pods) {
        run->scheduled += pod.job == name && pod.attempt == "2" && pod.placed_by_scheduler;
        run->created += pod.job == name && pod.attempt == "2";
        if (pod.job == name) run->rewritten += pod.rewritten;
      }
      if (after) run->writes = WritesSince(*before, *after);
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
                    if (taint.value("key", "") != cache::kTpuResource) return false;
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
    PrintWrites(run.writes);
    if (run.rewritten > 0) {
      std::printf(
          "    (%.0f played container restarts written again: KWOK's pod-ready stage, "
          "run late, had overwritten them)\n",
          run.rewritten);
    }
  };

  const auto bench_start = std::chrono::steady_clock::now();
  std::printf(
      "slice recovery, %d slices x %d hosts (%d pods, 4 chips each), grace %d s, %d + 1 pools:\n",
      slices, hosts, pods_per_job, grace, slices);
  std::map<std::string, std::vector<RecoveryRun>> results;
  int failures = 0;
  for (int run = 0; run < runs && failures == 0; ++run) {
    for (const std::string recovery : {"Slice", "Job"}) {
      const std::string name = RunJobName(prefix, recovery, run);
      if (!start_job(make_job(name, slices, recovery, 100), pods_per_job)) {
        ++failures;
        remove_job(name);
        break;
      }
      auto measured = recover(name, "", restarts_in_place(recovery));
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
    auto measured = recover(name, victim, restarts_in_place("Slice"));
    if (!measured) {
      ++failures;
      break;
    }
    print_run("hot swap " + std::to_string(run + 1), *measured);
    results["swap"].push_back(*measured);
  }
  pod_watch.Stop();
  delete_nodes();

  // Medians over the runs of `key`.
  const auto median = [&](const std::string& key,
                          const std::function<double(const RecoveryRun&)>& field) {
    std::vector<double> values;
    for (const auto& run : results[key]) values.push_back(field(run));
    return Median(values);
  };
  const auto running = [](const RecoveryRun& run) { return run.running_ms; };
  const auto writes = [](const RecoveryRun& run) { return run.Writes(); };
  const auto scheduled = [](const RecoveryRun& run) { return run.scheduled; };
  if (!results["Slice"].empty() && !results["Job"].empty()) {
    const double slice_ms = median("Slice", running), job_ms = median("Job", running);
    const double slice_writes = median("Slice", writes), job_writes = median("Job", writes);
    std::printf(
        "slice recovery %dx%d%s, medians of %zu + %zu runs: fault -> %s: Slice %.0f ms, Job %.0f "
        "ms, ratio slice/job %.2f; operator API writes: Slice %.0f, Job %.0f, ratio %.3f "
        "(1/slices = %.3f); pods scheduled: Slice %.0f, Job %.0f\n",
        slices, hosts, in_place ? " in place" : "", results["Slice"].size(), results["Job"].size(),
        in_place ? "every program running (Slice), all Running (Job)" : "all Running", slice_ms,
        job_ms, slice_ms / job_ms, slice_writes, job_writes, slice_writes / job_writes,
        1.0 / slices, median("Slice", scheduled), median("Job", scheduled));
  }
  if (!results["swap"].empty()) {
    const double swap_ms = median("swap", running);
    const double slice_ms = median("Slice", running);
    std::printf(
        "hot swap %dx%d, median of %zu runs: fault -> all Running %.0f ms (victim's pods gone "
        "%.0f ms); ratio hot swap/slice recovery with a free pool %.2f\n",
        slices, hosts, results["swap"].size(), swap_ms,
        median("swap", [](const RecoveryRun& run) { return run.victim_gone_ms; }),
        slice_ms > 0 ? swap_ms / slice_ms : 0.0);
  }
  std::printf("  (%.0f s in all)\n", MsSince(bench_start) / 1000);
  return failures == 0 ? 0 : 1;
}

}  // namespace tpujob::bench
