// In-place restart beside pod recreation: a program's exit -> every program of the next
// generation running. KWOK runs no container, so the kubelet and the pods' supervisors are
// played here (played_supervisors.h).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
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

// What the pod watch of InPlaceBench saw of one pod.
struct RestartedPod : PodLife, PlayedProgram {};

}  // namespace

int InPlaceBench(const std::string& kubeconfig, const std::string& ns, const std::string& prefix,
                 int workers, int runs, const std::string& metrics_url) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  auto client = Connect(kubeconfig);
  const std::string accelerator = FaultAccelerator(prefix);
  const std::string topology = FaultTopology(workers);
  if (!CreateFaultNodes(*client, prefix, accelerator, topology, workers)) {
    DeleteFaultNodes(*client, prefix, workers);
    return 1;
  }
  PodWatch<RestartedPod> pod_watch(*client, ns, ObservePlayedProgram);
  if (!pod_watch.Start()) {
    DeleteFaultNodes(*client, prefix, workers);
    return 1;
  }
  std::mutex& mu = pod_watch.mu;
  auto& pods = pod_watch.pods;
  const auto await = [&](const std::function<bool()>& done, int seconds) {
    return pod_watch.Await(done, seconds);
  };
  const auto live = [&](const std::string& job) {
    std::vector<RestartedPod*> out;
    for (auto& [uid, pod] : pods) {
      if (pod.job == job && !pod.gone) out.push_back(&pod);
    }
    return out;
  };
  // Writes `patch` on the pod's status subresource, as the kubelet does.
  const auto patch_status = [&](const std::string& name, const Json& patch) {
    tpujob::kube::PatchOptions status;
    status.subresource = "status";
    return client
        ->Patch(Resource::Pods(), ns, name, tpujob::kube::PatchType::kStrategicMerge, patch, status)
        .has_value();
  };
  const auto restart_container = [&](const std::string& name, int restarts, int code,
                                     const Json& report) {
    return RestartPlayedContainer(*client, ns, name, restarts, code, report);
  };
  const auto exit_recreated = [&](const std::string& name) {
    const std::string now = tpujob::cache::FormatRfc3339(std::chrono::system_clock::now());
    const Json terminated = {
        {"exitCode", 3}, {"reason", "Error"}, {"startedAt", now}, {"finishedAt", now}};
    return patch_status(
        name, {{"status",
                {{"phase", "Failed"},
                 {"containerStatuses",
                  Json::array({fixtures::ContainerStatus("trainer", {{"terminated", terminated}},
                                                         "trainer:latest")})}}}});
  };
  // The supervisors, until every program runs `generation`.
  const auto supervise = [&](const std::string& job, int generation, int seconds) {
    return SuperviseUntil(*client, ns, pod_watch, job, generation, workers, seconds);
  };
  const auto make_job = [&](const std::string& name, const std::string& restart) {
    return fixtures::TPUJobManifest({.name = name,
                                     .accelerator = accelerator,
                                     .topology = topology,
                                     .workers = workers,
                                     .fault_tolerance = {{"restart", restart},
                                                         {"maxWorkerRestarts", 100},
                                                         {"maintenanceGracePeriodSeconds", 0}},
                                     .grace = 0,
                                     .container = {{"name", "trainer"},
                                                   {"image", "trainer:latest"},
                                                   {"command", {"python3", "train.py"}}}});
  };
  const auto job_running = [&](const std::string& name, bool barrier_open) {
    auto job = client->Get(Resource::TPUJobs(), ns, name);
    return job && job->value("/status/phase"_json_pointer, "") == "Running" &&
           (!barrier_open || job->value("/status/inPlace/barrier"_json_pointer, "") == "Open");
  };
  const auto remove_job = [&](const std::string& name) {
    tpujob::kube::DeleteOptions foreground;
    foreground.propagation_policy = "Foreground";
    client->Delete(Resource::TPUJobs(), ns, name, foreground);
    return await([&] { return live(name).empty(); }, 300) &&
           WaitFor([&] { return !client->Get(Resource::TPUJobs(), ns, name); }, 60,
                   std::chrono::milliseconds(100));
  };

  std::printf("in-place restart beside pod recreation, %d workers (4 chips each), grace 0 s:\n",
              workers);
  std::map<std::string, std::vector<RecoveryRun>> results;
  int failures = 0;
  for (int run = 0; run < runs && failures == 0; ++run) {
    for (const std::string restart : {"InPlace", "Recreate"}) {
      const std::string name = RunJobName(prefix, restart, run);
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
                for (RestartedPod* pod : live(name)) n += pod->running_since.has_value();
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
              for (RestartedPod* pod : live(name))
                n += pod->added > t0 && pod->running_since.has_value();
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
          const auto at = in_place ? pod->barrier_at : pod->running_since;
          if (at) last = std::max(last, *at);
          measured.created += pod->added > t0;
        }
        measured.running_ms = MsBetween(t0, last);
      }
      auto after = SettledWrites(metrics_url, [&] { return job_running(name, in_place); });
      if (after && before) measured.writes = WritesSince(*before, *after);
      std::printf(
          "  %-8s %d: fault -> every program of the next generation running %6.0f ms; "
          "pods created %.0f; operator writes %.0f:",
          restart.c_str(), run + 1, measured.running_ms, measured.created, measured.Writes());
      PrintWrites(measured.writes);
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

}  // namespace tpujob::bench
