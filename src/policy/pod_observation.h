// Reading one pod: what its status says about the replica it runs. Pure functions of a
// cache::PodInfo; they know nothing of the job's spec or status (the caller passes the one
// number they need, the in-place program generation).
//
// The rules, in the order ObservePod applies them:
//   1. kSucceeded  the pod's phase is Succeeded.
//   2. kFailed     a main container, then an init container, terminated with a non-zero code
//                  (restartPolicy is Never: the replica fails at once, even while sidecars keep
//                  the pod running), or the pod's phase is Failed without such an exit (an
//                  eviction; Termination::container is then empty).
//   3. kSucceeded  every main container terminated with code 0.
//   4. kReady / kPending  the pod's Ready condition.
// The verdict is PodState, with the failure described by a Termination.
//
// In-place restart (spec.faultTolerance.restart InPlace; docs/architecture.md#in-place-restart):
// the first container runs the program under tpujob-supervise in a pod with restartPolicy
// OnFailure. The operator tells the supervisor through two annotations (supervisor/protocol.h,
// delivered by a downward API file): kGenerationAnnotation, the program generation the pod is to
// run (a higher one than it runs stops the program, and the supervisor exits so the kubelet
// restarts the container), and kBarrierAnnotation, the generation that may start. The supervisor
// answers through what the kubelet reports anyway: the container's state, its exit code and its
// termination message, which it keeps up to date ({"state":"running","generation":3}, ...).
// ObserveProgram reads that answer (verdict ProgramObservation); ObserveInPlacePod is ObservePod
// for such a pod: kFailed only for a failure of the current generation (an earlier one was
// acted on already), kReady only while the program of that generation runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/clock.h"
#include "cache/objects.h"
#include "policy/job_spec.h"
#include "preflight/report.h"
#include "supervisor/protocol.h"

namespace tpujob::policy {

// What a pod's status says about the replica it runs.
enum class PodState { kPending, kReady, kSucceeded, kFailed };

// How a replica failed.
struct Termination {
  std::string container;  // empty when the pod failed without a container exit (eviction)
  bool init_container = false;
  std::optional<int32_t> exit_code;
  std::string reason;
  std::string message;
  std::optional<WallTime> finished_at;  // the container's finishedAt
};

PodState ObservePod(const cache::PodInfo& pod, Termination* termination);

// What the first container of an in-place pod says about the program.
struct ProgramObservation {
  // The last program generation the container's supervisor started (or, at the barrier, last
  // ran).
  int32_t last_generation = 0;
  int32_t running_generation = 0;  // the generation the program runs now; 0: none
  bool at_barrier = false;  // the supervisor runs and waits for a generation above last_generation
  bool succeeded = false;   // the program exited 0
  // The program of this generation exited non-zero (or its supervisor died while it ran).
  std::optional<int32_t> failed_generation;
  Termination failure;
};
ProgramObservation ObserveProgram(const cache::PodInfo& pod);

// ObservePod for a pod of an in-place job whose program is at `program_generation`.
PodState ObserveInPlacePod(const cache::PodInfo& pod, int32_t program_generation,
                           Termination* termination);

// The supervisor's termination message, parsed (supervisor/protocol.h kReport*).
struct SupervisorReport {
  std::string state;  // supervisor::kState*
  int32_t generation = 0;
  std::optional<int32_t> exit;
  // Progress (spec.faultTolerance.progress), when the supervisor tracked it.
  std::optional<int64_t> step;
  std::optional<WallTime> last_progress;
  std::optional<int64_t> checkpoint;
  std::optional<int64_t> idle_seconds;
  std::string phase;  // of a stalled report: supervisor::kPhaseStartup or kPhaseRunning
};
std::optional<SupervisorReport> ParseSupervisorReport(std::string_view message);

// The report of a replica that the supervisor stopped because its program made no progress
// (state supervisor::kReportStalled), else nullopt.
std::optional<SupervisorReport> StallOf(const Termination& termination);

// The pre-flight init container's name, and its exit codes (see docs/preflight.md).
inline constexpr std::string_view kPreflightContainer = "preflight";
inline constexpr int32_t kPreflightNodeFault = preflight::kExitNodeFault;
inline constexpr int32_t kPreflightConfigFault = preflight::kExitConfigFault;

// "Worker-3": the key of a replica in status.workerRestarts and in log lines.
std::string ReplicaKey(ReplicaType type, int32_t index);

}  // namespace tpujob::policy
