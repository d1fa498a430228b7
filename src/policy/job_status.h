// The TPUJob status as the reconciler reads and writes it.
//
// FromJson() is lenient (the status is the operator's own writing; a field it cannot read is
// taken as absent) and ToJson() is canonical: FromJson(ToJson(s)) == s, with timestamps at whole
// seconds as metav1.Time stores them. The reconciler compares the JSON it would write with
// what the cache holds and skips the write when they are equal, so a reconcile that changes
// nothing costs no API request.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"

namespace tpujob::policy {

using Json = nlohmann::json;

enum class Phase {
  kNone,
  kQueued,
  kStarting,
  kRunning,
  kRestarting,
  kSuspended,
  kSucceeded,
  kFailed
};
std::string_view ToString(Phase phase);  // "" for kNone
Phase ParsePhase(std::string_view text);
inline bool IsTerminal(Phase phase) {
  return phase == Phase::kSucceeded || phase == Phase::kFailed;
}

// Condition types and the reasons the operator uses (documented in docs/api.md).
namespace condition {
inline constexpr std::string_view kValid = "Valid";
inline constexpr std::string_view kAdmitted = "Admitted";
inline constexpr std::string_view kReady = "Ready";
inline constexpr std::string_view kSucceeded = "Succeeded";
inline constexpr std::string_view kFailed = "Failed";
inline constexpr std::string_view kSuspended = "Suspended";
// True from a preemption until the job is admitted again.
inline constexpr std::string_view kPreempted = "Preempted";
// spec.faultTolerance.progress: True from a stall (the program made no progress and was
// stopped) until the restarted attempt runs again.
inline constexpr std::string_view kStalled = "Stalled";
// Elastic slices: True while the job runs, or is admitted to run, on fewer slices than
// spec.tpu.slices (reason RunningOnFewerSlices).
inline constexpr std::string_view kDegraded = "Degraded";
}  // namespace condition

struct Condition {
  std::string type;
  std::string status;  // "True" | "False" | "Unknown"
  std::string reason;
  std::string message;
  WallTime last_transition_time{};
  int64_t observed_generation = 0;
  friend bool operator==(const Condition&, const Condition&) = default;
};

struct ReplicaCounts {
  int32_t active = 0;  // pods not terminated (including ones being deleted)
  int32_t ready = 0;
  int32_t succeeded = 0;
  int32_t failed = 0;
  int32_t restarts = 0;  // in-place restarts in the current attempt
  friend bool operator==(const ReplicaCounts&, const ReplicaCounts&) = default;
};

// In-place restarts of one replica in the current attempt. `pod_uid` is the last failed pod
// already counted, so that seeing it again (the cache lags the delete) does not count twice.
struct RestartRecord {
  int32_t count = 0;
  std::string pod_uid;
  // The node the counted pod ran on: the restarted pod goes back to it while it stays healthy
  // and schedulable.
  std::string node;
  // In-place restart: the program generation whose failure in `pod_uid` was counted (the pod
  // stays, so the pod alone does not tell one failure from the next). 0 otherwise.
  int32_t generation = 0;
  friend bool operator==(const RestartRecord&, const RestartRecord&) = default;
};

struct FaultRecord {
  WallTime time{};
  int32_t attempt = 0;
  std::string kind;  // "ContainerFailed", "PodFailed", "NodeUnhealthy", ...
  std::string node;
  std::string pod;
  std::string container;
  std::string item;              // the pre-flight item, when one failed
  std::optional<int32_t> slice;  // of a multislice job: the slice of the pod or node at fault
  std::optional<int32_t> exit_code;
  std::string reason;
  std::string message;
  std::string action;  // "RestartWorker", "ReissueJob", "ReplaceSlice", "FailJob", "PreemptJob"
  friend bool operator==(const FaultRecord&, const FaultRecord&) = default;
};

inline constexpr size_t kMaxFaults = 32;

// status.goodput (see policy/goodput.h): milliseconds by state, stored as seconds with three
// decimals. `state` is where time accrues from `accounted_until` on ("" once the job finished).
struct Goodput {
  std::string state;
  std::optional<WallTime> state_since;      // millisecond precision
  std::optional<WallTime> accounted_until;  // millisecond precision
  int64_t chips = 0;                        // chips of the current attempt
  int64_t productive_ms = 0;
  int64_t productive_chip_ms = 0;
  std::map<std::string, int64_t, std::less<>> lost_ms;  // by cause; only causes with time
  std::map<std::string, int64_t, std::less<>> lost_chip_ms;
  // Elastic slices: chips of the slices the job runs without (spec.tpu.slices less the active
  // ones). While it runs (Productive) they accrue to lost chip-seconds, cause Degraded, and the
  // time to `degraded_ms`; the time itself was productive, so lost_ms has no Degraded.
  int64_t missing_chips = 0;
  int64_t degraded_ms = 0;
  int64_t TotalMs() const;
  int64_t LostChipMs() const;  // all causes
  friend bool operator==(const Goodput&, const Goodput&) = default;
};

// "Queued" -> "queued": how a cause is spelled as a key of status.goodput.lostSeconds and as
// the `cause` label of the lost chip-seconds metric.
std::string GoodputCauseKey(std::string_view cause);

// status.tpu: the slice the operator runs the job on, as it read spec.tpu, with what
// spec.tpu.type implies filled in. Column TPU shows `summary`.
struct TpuStatus {
  std::string summary;  // spec.tpu.type, else "<accelerator> <topology>"
  std::string type;     // spec.tpu.type; "" when the spec names none
  std::string accelerator;
  std::string topology;
  int32_t chips_per_worker = 0;
  int32_t hosts_per_slice = 0;
  int32_t slices = 0;
  // Elastic slices: the slices the job runs on now (spec.tpu.minSlices..slices), and
  // `slices_summary` ("3/4", column Slices). 0 when not read.
  int32_t active_slices = 0;
  std::string slices_summary;
  // Elastic slices under restart InPlace: the slice number in the names of each slice id's pods,
  // when some differ from their id (a slice that took another id in a shrink keeps its pods, and
  // their names); empty: every slice's own.
  std::vector<int32_t> slice_slots;

  friend bool operator==(const TpuStatus&, const TpuStatus&) = default;
};

// status.elastic (spec.tpu.minSlices below spec.tpu.slices, policy/elastic.h): set while the job
// runs, or waits to run, on fewer slices than its spec asks for.
struct ElasticStatus {
  std::optional<WallTime> degraded_since;  // when it last shrank
  // The queue first had pools to grow back to (scaleUp AfterCheckpoint waits for a checkpoint
  // line after this), and the last checkpoint step known then.
  std::optional<WallTime> scale_up_offered_at;
  std::optional<int64_t> checkpoint_at_offer;
  friend bool operator==(const ElasticStatus&, const ElasticStatus&) = default;
};

// status.sliceRecovery: the current attempt replaces some slices of a multislice job and
// restarts the others where they were (policy/lifecycle.h). Set when the attempt is re-issued
// for a fault confined to one slice, cleared once the attempt runs (or is ended otherwise).
struct SliceRecovery {
  std::vector<int32_t> slices;  // the slices that wait for a new node pool, ascending
  // By worker index, the node each worker of a kept slice ran on in the previous attempt, where
  // its new pod is bound; "" for the replaced slices' workers and for any worker not bound
  // then (placed by the scheduler in its slice's pool). Empty for a job of more than
  // kMaxRecoveryNodes workers: the kept slices are then pinned to their pools only.
  std::vector<std::string> nodes;
  // In-place restart: the kept slices' pods stay (moved to the new attempt once the replaced
  // slice's old pods are gone) and their program waits at the barrier; `nodes` is then empty.
  bool in_place = false;
  // `slices` is empty once an elastic job shrank to the slices it holds: nothing waits for a
  // pool, and `nodes` binds the kept workers again.
  friend bool operator==(const SliceRecovery&, const SliceRecovery&) = default;
};
inline constexpr size_t kMaxRecoveryNodes = 4096;

// status.inPlace (spec.faultTolerance.restart InPlace, policy/lifecycle.h): the program
// generation of the current attempt's pods. 1 when an attempt's pods are created; each in-place
// restart of the gang adds one. While `barrier_since` is set the barrier of `generation` is
// closed: the pods are told to stop the program of the previous generation and it starts again
// once every pod is back at the barrier.
struct InPlaceStatus {
  int32_t generation = 0;
  std::optional<WallTime> barrier_since;  // when the restart was ordered; unset: open
  friend bool operator==(const InPlaceStatus&, const InPlaceStatus&) = default;
};

// status.progress (spec.faultTolerance.progress): what the operator knows of the program's steps,
// from the supervisors' reports, and the state of stall handling.
struct ProgressStatus {
  std::optional<int64_t> step;             // the last step a report gave
  std::optional<WallTime> time;            // when that step came
  std::optional<int64_t> checkpoint_step;  // the last checkpoint a report gave
  // Stalls in a row with no progress in between (a step past the previous stall's), and the step
  // of the last one. maxStalls in a row fails the job.
  int32_t stalls_in_a_row = 0;
  std::optional<int64_t> stalled_at_step;
  // The last stall's sole suspect's node ("" when none was alone behind the others).
  std::string suspect_node;
  // A stall seen and not yet acted on: when its first report came; the fault attribution window
  // runs from there, the nodes of the job run a hardware round meanwhile.
  std::optional<WallTime> stall_seen;
  // Reports of stalls that ended at or before this time were acted on.
  std::optional<WallTime> acted_until;
  friend bool operator==(const ProgressStatus&, const ProgressStatus&) = default;
};

struct JobStatus {
  Phase phase = Phase::kNone;
  std::vector<Condition> conditions;
  int64_t observed_generation = 0;
  int32_t attempt = 0;
  int32_t job_retries = 0;
  std::string ready_workers;
  std::optional<TpuStatus> tpu;                                        // set once the spec is valid
  std::map<std::string, ReplicaCounts, std::less<>> replica_statuses;  // "Master", "Worker"
  std::map<std::string, RestartRecord, std::less<>> worker_restarts;   // "Worker-3"
  std::optional<WallTime> queued_at;
  std::optional<WallTime> admitted_at;
  std::optional<WallTime> start_time;
  std::optional<WallTime> running_at;
  std::optional<WallTime> completion_time;
  std::optional<int32_t> queue_position;
  // The node pools the current attempt's workers are pinned to, one per slice in slice order
  // (multi-host or multislice attempts), set at admission; empty otherwise. Written as
  // status.nodePools, and for a single slice also as status.nodePool (its older form).
  std::vector<std::string> node_pools;
  std::optional<SliceRecovery> slice_recovery;
  std::optional<ElasticStatus> elastic;
  std::optional<InPlaceStatus> in_place;
  std::optional<ProgressStatus> progress;
  int32_t stalls = 0;  // stalls acted on, every attempt
  bool reissued = false;
  // Times the job was preempted, and by which job (namespace/name) and when, the last time.
  int32_t preemptions = 0;
  std::string preempted_by;
  std::optional<WallTime> preempted_at;
  std::vector<FaultRecord> faults;  // oldest first, at most kMaxFaults
  std::vector<std::string> cordoned_nodes;
  std::optional<Goodput> goodput;

  static JobStatus FromJson(const Json& status);
  Json ToJson() const;

  const Condition* FindCondition(std::string_view type) const;
  bool ConditionTrue(std::string_view type) const;
  // Sets a condition; lastTransitionTime changes only when the status does.
  void SetCondition(std::string_view type, bool status, std::string_view reason,
                    std::string_view message, WallTime now, int64_t generation);
  void RemoveCondition(std::string_view type);
  // Appends, dropping the oldest beyond kMaxFaults.
  void AddFault(FaultRecord fault);

  friend bool operator==(const JobStatus&, const JobStatus&) = default;
};

}  // namespace tpujob::policy
