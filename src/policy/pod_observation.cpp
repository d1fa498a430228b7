#include "policy/pod_observation.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace tpujob::policy {
namespace {

// A failed init container: its state, or, in a pod whose restartPolicy lets the kubelet run it
// again (in-place restart), the last run it recorded.
bool FailedInitContainer(const cache::PodInfo& pod, Termination& t) {
  for (const cache::ContainerInfo& c : pod.init_containers) {
    if (c.state == cache::ContainerState::kTerminated && c.exit_code != 0) {
      t = {std::string(c.name.view()),    true,         c.exit_code, std::string(c.reason.view()),
           std::string(c.message.view()), c.finished_at};
      return true;
    }
    // Only pre-flight's last run: a native sidecar (restartPolicy Always) that crashed once and
    // runs again is the template's business, as it is under restartPolicy Never.
    if (c.name.view() == kPreflightContainer && c.state != cache::ContainerState::kTerminated &&
        c.last_exit_code && *c.last_exit_code != 0) {
      t = {std::string(c.name.view()),
           true,
           c.last_exit_code,
           std::string(c.last_reason.view()),
           std::string(c.last_message.view()),
           c.last_finished_at};
      return true;
    }
  }
  return false;
}

}  // namespace

std::optional<SupervisorReport> ParseSupervisorReport(std::string_view message) {
  const Json j = Json::parse(message, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  auto state = j.find(supervisor::kReportStateKey);
  auto generation = j.find(supervisor::kReportGenerationKey);
  if (state == j.end() || !state->is_string() || generation == j.end() ||
      !generation->is_number_integer()) {
    return std::nullopt;
  }
  SupervisorReport r;
  r.state = state->get<std::string>();
  r.generation = generation->get<int32_t>();
  if (auto e = j.find(supervisor::kReportExitKey); e != j.end() && e->is_number_integer())
    r.exit = e->get<int32_t>();
  const auto integer = [&](const char* key) -> std::optional<int64_t> {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer()) return std::nullopt;
    return it->get<int64_t>();
  };
  r.step = integer(supervisor::kReportStepKey);
  r.checkpoint = integer(supervisor::kReportCheckpointKey);
  r.idle_seconds = integer(supervisor::kReportIdleSecondsKey);
  if (auto it = j.find(supervisor::kReportLastProgressKey); it != j.end() && it->is_string()) {
    r.last_progress = cache::ParseRfc3339(it->get_ref<const std::string&>());
  }
  if (auto it = j.find(supervisor::kReportPhaseKey); it != j.end() && it->is_string()) {
    r.phase = it->get<std::string>();
  }
  return r;
}

std::optional<SupervisorReport> StallOf(const Termination& termination) {
  if (termination.container.empty() || termination.init_container) return std::nullopt;
  auto report = ParseSupervisorReport(termination.message);
  if (!report || report->state != supervisor::kReportStalled) return std::nullopt;
  return report;
}

ProgramObservation ObserveProgram(const cache::PodInfo& pod) {
  ProgramObservation o;
  if (pod.containers.empty()) return o;
  const cache::ContainerInfo& c = pod.containers.front();
  // The container's last end: its state when it is terminated, else what the kubelet kept of
  // the run before the current one.
  const bool terminated = c.state == cache::ContainerState::kTerminated;
  std::optional<int32_t> code = terminated ? std::optional<int32_t>(c.exit_code) : c.last_exit_code;
  if (code) {
    const std::string_view message = terminated ? c.message.view() : c.last_message.view();
    const std::optional<SupervisorReport> report = ParseSupervisorReport(message);
    // A container that ended without a report never ran the supervisor (its exec failed): the
    // generation it was to run failed.
    o.last_generation = report ? report->generation : pod.barrier_generation;
    const std::string_view state =
        report ? std::string_view(report->state) : std::string_view(supervisor::kReportRunning);
    int32_t exit = report && report->exit ? *report->exit : *code;
    if (state == supervisor::kReportTerminated && exit == 0)
      exit = *code;  // killed: the container's code
    // "running": the supervisor died with its program (killed, out of memory); "error": it could
    // not start it.
    // "terminated": the kubelet sent SIGTERM. While the pod is being deleted that is no
    // failure; otherwise it killed the container (a liveness probe) and the program ended.
    // "stalled": it made no progress and was stopped (the stall rule, not the exit code, decides).
    if (state == supervisor::kReportStalled) exit = *code;
    const bool program_ended =
        state == supervisor::kReportExited || state == supervisor::kReportStalled ||
        state == supervisor::kReportRunning || state == supervisor::kReportError ||
        (state == supervisor::kReportTerminated && !pod.deleting());
    if (program_ended && exit == 0 && *code == 0) {
      o.succeeded = terminated;
    } else if (program_ended) {
      o.failed_generation = o.last_generation;
      o.failure = {std::string(c.name.view()),
                   false,
                   exit,
                   std::string(terminated ? c.reason.view() : c.last_reason.view()),
                   std::string(message),
                   terminated ? c.finished_at : c.last_finished_at};
    }
    // "stopped" (for a new generation), "barrier" (it died waiting there), "terminated" while the
    // pod is being deleted: no failure of the program.
  }
  if (c.state == cache::ContainerState::kRunning) {
    if (pod.barrier_generation > o.last_generation) {
      o.running_generation = pod.barrier_generation;
      o.last_generation = pod.barrier_generation;
    } else {
      o.at_barrier = true;
    }
  }
  return o;
}

PodState ObserveInPlacePod(const cache::PodInfo& pod, int32_t program_generation,
                           Termination* termination) {
  Termination t;
  if (pod.phase == cache::PodPhase::kSucceeded) return PodState::kSucceeded;
  if (FailedInitContainer(pod, t)) {
    if (termination != nullptr) *termination = std::move(t);
    return PodState::kFailed;
  }
  if (pod.phase == cache::PodPhase::kFailed) {
    t.reason = pod.reason.empty() ? "PodFailed" : std::string(pod.reason.view());
    t.message = pod.message;
    if (termination != nullptr) *termination = std::move(t);
    return PodState::kFailed;
  }
  ProgramObservation o = ObserveProgram(pod);
  if (o.failed_generation && *o.failed_generation >= program_generation) {
    if (termination != nullptr) *termination = std::move(o.failure);
    return PodState::kFailed;
  }
  if (o.succeeded) return PodState::kSucceeded;
  return o.running_generation == program_generation && pod.ready ? PodState::kReady
                                                                 : PodState::kPending;
}

std::string ReplicaKey(ReplicaType type, int32_t index) {
  return std::string(ToString(type)) + "-" + std::to_string(index);
}

PodState ObservePod(const cache::PodInfo& pod, Termination* termination) {
  Termination t;
  auto failed_container = [&](const std::vector<cache::ContainerInfo>& list, bool init) {
    for (const cache::ContainerInfo& c : list) {
      if (c.state == cache::ContainerState::kTerminated && c.exit_code != 0) {
        t.container = std::string(c.name.view());
        t.init_container = init;
        t.exit_code = c.exit_code;
        t.reason = std::string(c.reason.view());
        t.message = c.message;
        t.finished_at = c.finished_at;
        return true;
      }
    }
    return false;
  };
  auto fail = [&] {
    if (termination != nullptr) *termination = std::move(t);
    return PodState::kFailed;
  };
  if (pod.phase == cache::PodPhase::kSucceeded) return PodState::kSucceeded;
  // A container that exited non-zero fails its replica at once (restartPolicy is Never), even
  // while sidecars keep the pod running. The main containers first: a native sidecar (an init
  // container that keeps running) stopped after the program exited, with its own code, must not
  // hide the program's exit; an init container that fails before the program runs leaves the
  // main containers without one.
  if (failed_container(pod.containers, false) || failed_container(pod.init_containers, true)) {
    return fail();
  }
  if (pod.phase == cache::PodPhase::kFailed) {
    t.reason = pod.reason.empty() ? "PodFailed" : std::string(pod.reason.view());
    t.message = pod.message;
    return fail();
  }
  if (!pod.containers.empty() &&
      std::all_of(pod.containers.begin(), pod.containers.end(), [](const auto& c) {
        return c.state == cache::ContainerState::kTerminated && c.exit_code == 0;
      })) {
    return PodState::kSucceeded;
  }
  return pod.ready ? PodState::kReady : PodState::kPending;
}

}  // namespace tpujob::policy
