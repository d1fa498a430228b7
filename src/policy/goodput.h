// Goodput: the share of a job's wall time (and chip time) spent Running with every worker ready,
// and where the rest went, as a pure function of the status before and after a decision.
//
// The account lives in status.goodput. Time accrues to the job's current state (`state`) from
// `accountedUntil` on; whenever the operator writes the status anyway, or the state changes, the
// time since `accountedUntil` is folded into that state's bucket and `accountedUntil` moves to
// now. Nothing is written just to advance the clock: a job that stays Running costs no write,
// and readers (metrics, `kubectl tpujob describe`) add the open interval themselves (Live()).
// Because every fold starts from the last written `accountedUntil`, an operator restart or a
// refused write never counts an interval twice; time while no operator ran is counted in the
// state the job was last seen in.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/clock.h"
#include "policy/job_status.h"

namespace tpujob::policy {

// The annotation a training program (or a sidecar) may set on its TPUJob after each checkpoint it
// completes: an RFC 3339 time. Work done after it and lost to a disruption counts as
// `uncheckpointed` instead of productive.
inline constexpr std::string_view kLastCheckpointAnnotation = "tpujob.dev/last-checkpoint-time";

// The states time accrues to: productive, or one of the causes of lost time.
inline constexpr std::string_view kGoodputProductive = "Productive";
namespace goodput_cause {
inline constexpr std::string_view kQueued = "Queued";            // first admission
inline constexpr std::string_view kRequeued = "Requeued";        // queued again after a re-issue
inline constexpr std::string_view kPreflight = "Preflight";      // a pre-flight check running
inline constexpr std::string_view kStarting = "Starting";        // admitted, not all ready
inline constexpr std::string_view kRestarting = "Restarting";    // a worker restarting in place
inline constexpr std::string_view kReissue = "Reissue";          // old pods going after a fault
inline constexpr std::string_view kMaintenance = "Maintenance";  // old pods going: a disruption
inline constexpr std::string_view kPreemption = "Preemption";    // preempted: going, queued
inline constexpr std::string_view kSuspended = "Suspended";      // spec.suspend
// Work done since the last checkpoint and lost to a disruption (moved out of productive).
inline constexpr std::string_view kUncheckpointed = "Uncheckpointed";
// A stall (condition Stalled): from the program's last progress until it runs again after the
// restart (the time between its last progress and the stall's report moves out of productive).
inline constexpr std::string_view kStalled = "Stalled";
// Elastic slices: chip-seconds of the slices a job ran without while it ran on the others. Not
// a state (the time was productive): chip-seconds only, the time in Goodput::degraded_ms.
inline constexpr std::string_view kDegraded = "Degraded";
}  // namespace goodput_cause
inline constexpr std::array<std::string_view, 12> kGoodputCauses = {
    goodput_cause::kQueued,         goodput_cause::kRequeued,   goodput_cause::kPreflight,
    goodput_cause::kStarting,       goodput_cause::kRestarting, goodput_cause::kReissue,
    goodput_cause::kMaintenance,    goodput_cause::kPreemption, goodput_cause::kSuspended,
    goodput_cause::kUncheckpointed, goodput_cause::kStalled,    goodput_cause::kDegraded};

struct GoodputInput {
  WallTime now{};
  // Chips the attempt holds (workers x chips per worker): chip-seconds accrue at this rate.
  int64_t chips = 0;
  // Elastic slices: chips of the slices the job runs without (0 when it runs on all).
  int64_t missing_chips = 0;
  // A pre-flight init container of the current attempt is running.
  bool preflight_running = false;
  // The job's kLastCheckpointAnnotation, when set and readable.
  std::optional<WallTime> last_checkpoint;
  // status.progress.time: when the program last made progress, as its supervisors reported.
  std::optional<WallTime> last_progress;
  // When the job was created (metadata.creationTimestamp, whole seconds): where the account
  // starts if the operator first writes the job's status more than 2 s later (it was not
  // running then).
  std::optional<WallTime> created;
};

// The state `status` is in: kGoodputProductive, a cause, or "" (not started, or finished).
std::string_view GoodputState(const JobStatus& status, bool preflight_running);

// Folds the time since before.goodput's `accountedUntil` into `after.goodput` when `after` is
// written anyway (it differs from `before` outside goodput) or the state changes; otherwise
// leaves after.goodput equal to before.goodput, so no write is caused by the clock alone. Once
// the job has finished (state ""), the account stays as the finishing write left it.
void AccountGoodput(const JobStatus& before, JobStatus& after, const GoodputInput& input);

// The account as of `now`: the open interval since `accountedUntil` added to the current state.
Goodput LiveGoodput(const Goodput& account, WallTime now);

// productive / (productive + lost), or nullopt before any time was counted.
std::optional<double> GoodputRatio(const Goodput& account);

}  // namespace tpujob::policy
