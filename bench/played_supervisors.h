// The kubelet and the in-place supervisors of KWOK pods, played (KWOK runs no container), for the
// scenarios that restart programs in place (in_place.cpp, slice_recovery.cpp --restart InPlace):
// a pod told a newer program generation (tpujob.dev/generation) has its container restarted to
// the barrier, and its program runs once tpujob.dev/barrier reaches that generation.
//
// The kubelet's record of a restart is the truth about its container; KWOK's is not. At
// thousands of pods KWOK works through a backlog of minutes and can apply its pod-ready stage a
// second time from an event it queued before the pod ran, writing restartCount 0 over a restart
// played here (824 of 4,032 kept pods in a 64 x 64 run, whose barrier then never opened). A
// restart seen overwritten after its own write came back is written again, as a kubelet would
// report its container's state again.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cache/objects.h"
#include "common.h"
#include "fixtures.h"
#include "follower.h"

namespace tpujob::bench {

// What a pod watch saw of one pod's program; a pod type T of PodWatch<T> derives from it.
struct PlayedProgram {
  std::string name;
  int generation = 0, barrier = 0;  // its annotations
  int running = 0;                  // the generation its program runs, as played here
  int restarts = 0;
  bool pending = false;  // a container restart is being written
  // The restartCount the last event showed, -1 before one did; `echoed`: an event since the last
  // restart written here showed it (until then an older count is no overwrite).
  int observed_restarts = -1;
  bool echoed = true;
  int rewritten = 0;  // restarts written again after something overwrote them
  std::optional<std::chrono::steady_clock::time_point> barrier_at;  // the barrier last moved
};

// Brings `program` up to date with a watch event's `object` (seen `at`).
inline void ObservePlayedProgram(PlayedProgram& program, const Json& object, bool first,
                                 std::chrono::steady_clock::time_point at) {
  const auto annotation = [&](const char* key) {
    const std::string text =
        object.value(Json::json_pointer("/metadata/annotations/" + std::string(key)), "0");
    return std::atoi(text.c_str());
  };
  if (first) program.name = object.value("/metadata/name"_json_pointer, "");
  program.generation = annotation("tpujob.dev~1generation");
  const int barrier = annotation("tpujob.dev~1barrier");
  if (barrier != program.barrier) program.barrier_at = at;
  program.barrier = barrier;
  program.observed_restarts =
      object.value("/status/containerStatuses/0/restartCount"_json_pointer, 0);
  if (program.observed_restarts >= program.restarts) program.echoed = true;
}

// True when a restart played here was overwritten: an event after its own showed fewer restarts.
inline bool PlayedRestartLost(const PlayedProgram& program) {
  return program.restarts > 0 && !program.pending && program.echoed &&
         program.observed_restarts >= 0 && program.observed_restarts < program.restarts;
}

// The kubelet's record of a container restart in pod `name`: the run before ended with `code`
// and the supervisor's `report`, the new one runs (its supervisor at the barrier).
inline bool RestartPlayedContainer(kube::Client& client, const std::string& ns,
                                   const std::string& name, int restarts, int code,
                                   const Json& report) {
  const std::string now = cache::FormatRfc3339(std::chrono::system_clock::now());
  kube::PatchOptions status;
  status.subresource = "status";
  const Json patch = {{"status",
                       {{"containerStatuses",
                         Json::array({fixtures::RestartedContainerStatus(
                             "trainer", "trainer:latest", restarts, code, report.dump(), now)})}}}};
  return client.Patch(Resource::Pods(), ns, name, kube::PatchType::kStrategicMerge, patch, status)
      .has_value();
}

// The supervisors of job `job`'s live pods in `watch`: every pod told a generation above the one
// its program runs stops it (its container restarts), until `workers` pods run `generation`, 16
// kubelets at a time; a restart overwritten since is written again. False after `seconds`.
template <typename T>
bool SuperviseUntil(kube::Client& client, const std::string& ns, PodWatch<T>& watch,
                    const std::string& job, int generation, int workers, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  const auto live = [&] {
    std::vector<T*> out;
    for (auto& [uid, pod] : watch.pods) {
      if (pod.job == job && !pod.gone) out.push_back(&pod);
    }
    return out;
  };
  while (std::chrono::steady_clock::now() < deadline) {
    std::vector<std::pair<std::string, int>> stop;  // name, restarts
    {
      std::unique_lock<std::mutex> lock(watch.mu);
      const auto ready = [&] {
        int done = 0;
        stop.clear();
        for (T* pod : live()) {
          const int running = pod->barrier > pod->running ? pod->barrier : 0;
          if (running >= generation) ++done;
          if (running > 0 && pod->generation > running && !pod->pending) {
            pod->pending = true;
            pod->echoed = false;
            stop.emplace_back(pod->name, ++pod->restarts);
            pod->running = running;
          } else if (PlayedRestartLost(*pod)) {
            pod->pending = true;
            pod->echoed = false;
            ++pod->rewritten;
            stop.emplace_back(pod->name, pod->restarts);
          }
        }
        return done == workers || !stop.empty();
      };
      if (!watch.changed.wait_until(lock, deadline, ready)) return false;
      if (stop.empty()) return true;
    }
    Parallel(static_cast<int>(stop.size()), 16, [&](int i) {
      const bool ok = RestartPlayedContainer(
          client, ns, stop[i].first, stop[i].second, 143,
          {{"state", "stopped"}, {"generation", generation - 1}, {"exit", 0}});
      std::lock_guard<std::mutex> lock(watch.mu);
      for (T* pod : live()) {
        if (pod->name != stop[i].first) continue;
        pod->pending = false;
        // Not written: the next pass writes it again.
        if (!ok) {
          pod->echoed = true;
          pod->observed_restarts = pod->restarts - 1;
        }
      }
      return ok;
    });
  }
  return false;
}

}  // namespace tpujob::bench
