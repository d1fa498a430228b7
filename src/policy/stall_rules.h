// Stall detection (spec.faultTolerance.progress, docs/api.md#progress): the rule that decides
// what a stall does, as a pure function of the supervisors' reports.
//
// A worker's supervisor stops its program when no progress came for stallSeconds (startupSeconds
// before the first step) and reports state "stalled" with the last step and when it came. The
// first such report of the current run starts the fault attribution window: every node of the
// job runs a hardware round (the pods are annotated, kHardwareCheckAnnotation) and a node found
// faulty meanwhile makes it the hardware case (rule 2 decides it first). Past the window:
//   - maxStalls stalls in a row with no progress in between (no step past the previous stall's)
//     fail the job (reason Stalled);
//   - the sole suspect of this stall (policy below) was the sole suspect of the previous one
//     too: its node is cordoned and the job re-issued off it, like a faulty node;
//   - otherwise the gang restarts: in place under restart InPlace, every pod recreated under
//     Recreate. Counted in status.stalls, not against maxWorkerRestarts.
// The suspect: of the workers with a report, the one alone with the lowest step, else the one
// whose progress stopped first by at least a second (the reports have whole seconds). None when
// fewer than two workers reported, or no one is alone behind.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "policy/fault_rules.h"
#include "policy/job_spec.h"
#include "policy/job_status.h"
#include "policy/plan.h"
#include "policy/pod_observation.h"

namespace tpujob::policy {

// The circuit breaker's item of a suspect's cordon (NodeToCordon::item): the sole suspects of
// stalls on --cordon-breaker-nodes distinct nodes within its window point at the program, or at
// something all those nodes share, more than at each node's hardware: no further node is cordoned
// for a stall until the window has passed.
inline constexpr std::string_view kStallCordonItem = "stall";

// What one replica's supervisor last reported.
struct WorkerProgress {
  const ObservedPod* pod = nullptr;
  SupervisorReport report;
  Termination termination;  // the container's end that carried the report
  bool stalled = false;     // a stall not acted on yet
};

struct StallSnapshot {
  std::vector<WorkerProgress> workers;
  const JobSpec* spec = nullptr;  // for the replicas' names in the message
  const ProgressSpec* progress = nullptr;
  const ProgressStatus* status = nullptr;  // nullptr: no stall was seen before
  int64_t attribution_seconds = 0;
  WallTime now{};
};

struct StallVerdict {
  enum class Outcome {
    kNone,            // no stall
    kCheckHardware,   // within the attribution window: hardware rounds, decide at recheck_in
    kRestart,         // restart the gang
    kReplaceSuspect,  // cordon the suspect's node, re-issue off it
    kFail,            // maxStalls in a row
  };
  Outcome outcome = Outcome::kNone;
  const WorkerProgress* first = nullptr;    // the stall that was reported first
  const WorkerProgress* suspect = nullptr;  // the sole suspect, or nullptr
  WallTime seen{};                          // when the stall was first seen
  std::optional<Duration> recheck_in;       // kCheckHardware
  int32_t in_a_row = 0;                     // this stall's place in a row of stalls
  std::optional<int64_t> step;              // the furthest step any worker reported
  std::optional<WallTime> last_progress;    // the latest progress any worker reported
  std::optional<int64_t> checkpoint;        // the latest checkpoint any worker reported
  std::string message;                      // what happened, for the condition and Event
};

// The verdict points into `snapshot`, which must outlive it.
StallVerdict CheckStalls(const StallSnapshot& snapshot);

// Whether `w`'s stall was acted on already: it ended at or before status.acted_until (the cache
// may still show a pod the last decision deleted).
bool StallActedOn(const WorkerProgress& w, const ProgressStatus* status);

// The sole suspect among `workers` (see above), or nullptr.
const WorkerProgress* StallSuspect(const std::vector<WorkerProgress>& workers);

// "attempt/stall": the value of kHardwareCheckAnnotation that asks for a round for this stall.
std::string HardwareCheckToken(int32_t attempt, int32_t stall);

}  // namespace tpujob::policy
