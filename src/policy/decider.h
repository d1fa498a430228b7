// The decision of one job, shared by the files of the lifecycle (not part of the policy's
// interface: only src/policy/{lifecycle,decider,deadlines,in_place,slice_recovery}.cpp include
// it). A Decider reads one LifecycleInput and writes one Plan; it is used once, by Decide.
//
// Its members are grouped by the file that defines them, one concept each:
//   1. lifecycle.cpp       the phase machine (Run, as named steps), the converging of an
//                          admitted attempt and the one place that applies the fault rules'
//                          verdicts (policy/fault_rules.h), the phase changes they lead to.
//   2. decider.cpp         the effects: the only code that appends to the plan (Events, faults,
//                          deletions, cordons, requeues) and the status counts, plus how a pod
//                          of this job is observed and whether its failure was counted.
//   3. deadlines.cpp       the queue timeout, activeDeadlineSeconds and the finished job's TTL.
//   4. in_place.cpp        the in-place restart's program generations and barrier.
//   5. slice_recovery.cpp  re-issue, of the whole job or of the one slice a fault is confined to.
//   6. elastic.cpp         elastic slices: the shrink to the slices held, the grow back.
// Two generations appear here and are never mixed: spec_generation_ is the job's
// metadata.generation (what conditions record as observedGeneration); a program generation is
// status.inPlace.generation, what the in-place supervisor runs.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "cache/objects.h"
#include "policy/deadlines.h"
#include "policy/elastic.h"
#include "policy/fault_rules.h"
#include "policy/fault_table.h"
#include "policy/in_place.h"
#include "policy/job_spec.h"
#include "policy/job_status.h"
#include "policy/plan.h"
#include "policy/pod_observation.h"
#include "policy/preflight_verdict.h"
#include "policy/slice_recovery.h"
#include "policy/stall_rules.h"

namespace tpujob::policy {

// The attempt's pods, by replica (type, index).
using CurrentPods = std::map<std::pair<ReplicaType, int32_t>, const ObservedPod*>;

class Decider {
 public:
  // `written` is the job's status as last written (in.job->status, parsed).
  Decider(const LifecycleInput& in, JobStatus written)
      : in_(in), job_(*in.job), spec_generation_(job_.generation), now_(in.now) {
    plan_.status = std::move(written);
  }

  Plan Run();

 private:
  // --- lifecycle.cpp: the steps of Run (see there) and the phase changes ---
  bool AcceptSpec();
  void KeepHouse();
  void EnterQueue();
  struct EarlierAttempts {
    bool any_left = false;     // a pod of an earlier attempt is left
    bool others_left = false;  // one that is not a kept slice's pod moving to this attempt
  };
  EarlierAttempts RemoveEarlierAttempts();
  bool WaitOrAdmit(bool others_left);

  // spec.suspend: every pod goes (running ones with the maintenance grace period, so the
  // program can checkpoint), the capacity is released and the job stays out of the queue. The
  // attempt, retries and history are kept.
  void Suspend();

  // spec.suspend cleared: the job queues again (its pods, if still going, go first). Like a
  // batch/v1 Job, startTime is reset, so activeDeadlineSeconds counts from the next admission.
  void Resume();

  // The queue preempts the admitted attempt for a job of higher priority: stopped like a
  // maintenance event (the grace period to checkpoint), not counted as a retry, and the next
  // attempt queues by its priority (not first, as a re-issue: it would take the capacity back
  // from the job it was stopped for).
  void Preempt(const PreemptOrder& order);

  // The job's current attempt is admitted: converge its pods, applying the fault rules' verdicts
  // (the one place that does).
  void ConvergeAdmittedAttempt(bool old_left);

  // Rules 1 and 2: maintenance moves the job without using a retry; an unhealthy or lost node is
  // cordoned and the job re-issued. The unhealthy node decides when both apply. Returns whether
  // a decision was taken.
  bool ApplyNodeRules(const std::vector<const ObservedPod*>& pods);

  // Rule 5's verdict. Returns whether a decision was taken.
  bool ApplyPreflightVerdict(const PreflightVerdict& v);

  // --- decider.cpp: the effects ---
  void RecordEvent(bool warning, std::string reason, std::string message);

  void Requeue(Duration after);

  void DeletePod(const cache::PodInfo& pod, std::optional<int64_t> grace, std::string why);

  // A node to cordon, once per plan.
  void Cordon(const NodeToCordon& cordon);

  // Records a fault of `p` in status.faults[]; its kind is `kind`, or the one its termination
  // says (KindOfTermination).
  void RecordFault(const ObservedPod& p, const Termination& t, FaultAction action,
                   const std::string& item = "", std::optional<FaultKind> kind = std::nullopt);

  void Finish(bool success, const std::string& reason, const std::string& message);

  void Invalid(const std::string& message);

  // Stops every pod still holding resources; terminated pods stay for their logs.
  void StopActivePods(const std::string& why);

  // replicaStatuses and readyWorkers from the pods of the current attempt.
  void UpdateCounts();

  // What a pod says about its replica: in place, only a failure of the current generation counts
  // (an earlier one was acted on) and only a program of the current generation is ready.
  PodState Observe(const cache::PodInfo& pod, Termination* t) const;

  // Whether the failure this pod shows was counted already: the same failed pod (the cache lags
  // its deletion), or in place, the same pod in a generation already restarted.
  // Only a program's failure is told apart by generation: a failed pod (evicted) or init container
  // is replaced, so its uid identifies it.
  bool Counted(const ObservedPod& p, const Termination& t) const;

  // The grace period the pods of an earlier attempt are deleted with: a disruption that ended it
  // (maintenance, preemption) gives them time to checkpoint, also when the operator stopped
  // between writing the decision and deleting the pods; otherwise their own.
  std::optional<int64_t> GraceEnding(int32_t attempt) const;

  // A re-issue for a faulty node is written before the node is cordoned; an operator stopped
  // in between loses the cordon, and with it nothing keeps the next attempt (and other jobs) off
  // the node. While the re-issued attempt has not started running, the node of the fault that
  // ended the previous attempt is cordoned again if it is still unhealthy and not cordoned, with
  // the same evidence (the Cordoner's rules apply as the first time).
  void RedoLostCordon();

  void RecordCordonedNodes();

  // A pod on a lost node (Ready Unknown, or the node deleted) never confirms a graceful delete:
  // its kubelet is gone. It is deleted gracefully first, as any other, because an unreachable
  // kubelet may still be running it (a network partition) and two live copies of one worker
  // must not overlap; once the grace period it was deleted with is over, it is force-deleted.
  void ForceIfLost(const cache::PodInfo& pod);

  // `grace` for a pod, or kBriefGraceSeconds when its node is lost: its kubelet cannot deliver
  // SIGTERM, and the pod's own grace period would only delay what comes next.
  std::optional<int64_t> OnLostNode(const cache::PodInfo& pod, std::optional<int64_t> grace) const;

  // The node a missing replica goes back to: the node its last counted restart ran on, while
  // that node is healthy and not cordoned. "" = anywhere.
  // A node that does not take it is forgotten, so that a recorded node always means the pod was
  // created pinned to it.
  std::string RestartNode(ReplicaType type, int32_t index);

  bool NodeTakesRestart(const std::string& node) const;

  // The whole job moves on to a new attempt, which queues once the pods of this one are gone
  // (first when `reissued`, else by priority); `reason` and `why` go on Admitted and Ready.
  void NextAttempt(bool reissued, std::string_view reason, const std::string& why);

  // Rule 4: a worker of the admitted attempt has been unschedulable for kUnschedulableRelease:
  // the capacity the queue counted was taken in the meantime (another scheduler's pod, a node
  // gone). The admission is released: the attempt's pods are removed and it queues again first,
  // like a re-issue (and with a re-issue's queue timeout), without using a retry.
  void ReleaseAdmission(const ObservedPod& stuck);

  // Ready=False while a permanent exit awaits its node's verdict, with an Event the first time.
  void AwaitAttribution(const ObservedPod& p, const Termination& t);

  // --- deadlines.cpp ---
  // The queue timeout of the current attempt: spec.queueTimeoutSeconds, or for a re-issued
  // attempt kDefaultReissueQueueTimeoutSeconds. The deadline is queuedAt plus the timeout, both
  // in the status, so it survives restarts. Past it the job fails (QueueTimeout); before it the
  // plan asks to be decided again at the deadline. queuedAt is written in whole seconds (the
  // fraction cut off), so the timeout counts from the end of its second: never early, at most
  // one second late.
  bool QueueTimedOut();

  // spec.activeDeadlineSeconds, counted from status.startTime (the first admission). startTime
  // has whole seconds, so the count starts at the end of its second: never early.
  bool DeadlineExceeded();

  // spec.ttlSecondsAfterFinished, counted from status.completionTime (whole seconds: from the
  // end of its second, never early).
  void ExpireAfterFinish();

  // --- in_place.cpp ---
  // In-place restart: the pods are all created again, with the next program generation, so the
  // program can tell this start from the last; an in-place restart under way is over.
  void NewGeneration();

  // In-place restart: tells every pod the generation to run (a pod running an older one stops
  // it), opens the barrier once every pod waits there, and falls back to recreating the pods when
  // it stays closed for barrierTimeoutSeconds. True when it falls back: the plan is complete.
  bool InPlaceBarrier(const CurrentPods& current);

  // --- stall_rules.cpp ---
  // Rule 7's verdict (policy/stall_rules.h). Returns whether the plan is complete; a restart in
  // place sets *gang_restart for the barrier to carry out.
  bool ApplyStallVerdict(const StallVerdict& v, const std::vector<const ObservedPod*>& pods,
                         bool* gang_restart);

  // --- slice_recovery.cpp ---
  // The slices slice recovery keeps, e.g. "slices 0, 1 and 3".
  std::string KeptSlices() const;

  // The node a worker of a slice kept by slice recovery is bound to again: the one it ran on,
  // while that node is healthy and schedulable; "" = placed by the scheduler in its pool.
  std::string KeptNode(ReplicaType type, int32_t index);

  // The attempt ends for a fault of `kind` (by default the one `t` says) that `culprit` shows:
  // the job, or the slices the fault is confined to, queues again as the next attempt, or the
  // job fails when the fault uses a retry and none is left. The fault table says whether it uses
  // a retry and the grace period of the pods it deletes.
  // `others`: the other faults of the same decision (another faulty node), recorded with the
  // same action; one retry for them all.
  struct OtherFault {
    const ObservedPod* pod = nullptr;
    Termination termination;
    FaultKind kind = FaultKind::kNodeUnhealthy;
  };
  void Reissue(const ObservedPod& culprit, const Termination& t, const std::string& why,
               std::optional<FaultKind> kind, const std::string& item,
               const std::vector<const ObservedPod*>& touched,
               const std::vector<OtherFault>& others = {});

  // A node of the previous attempt found unhealthy or lost while its re-issue is carried out
  // (the attempt not admitted yet) is a fault like any other: recorded once, cordoned, one retry
  // used; its slice joins the replaced ones, or the whole job is re-issued. Returns whether it
  // decided something (the plan then admits nothing).
  bool FaultsInFlight();

  // The nodes the workers of `create` bound to a node are bound to: a worker of the same slice
  // the scheduler places keeps off them (PodToCreate::avoid).
  void AvoidBoundNodes(std::vector<PodToCreate>& create) const;

  // Slice recovery in place: a pod of the previous attempt (or, moved already, of this one) in a
  // slice the attempt keeps, not being deleted: it stays, and its program restarts in place.
  bool KeptInPlace(const ObservedPod& p) const;

  // --- elastic.cpp (policy/elastic.h) ---
  // The attempt runs on `active` slices from now on: spec_ and status.tpu say so.
  void SetActiveSlices(int32_t active);
  // When the slices waiting for a pool are given up; nullopt: never (not elastic, nothing
  // waiting, or fewer than minSlices would be left).
  std::optional<WallTime> ShrinkDue() const;
  // What the not-admitted message of a waiting slice adds: when the job shrinks, or why not
  // (the Degraded condition of a job that shrank already says so too).
  std::string ElasticWaitNote();
  // Admits the attempt on the slices it holds once ShrinkDue has passed; what it did, for the
  // Admitted condition ("" = nothing).
  std::string Shrink();
  // A degraded, running job grows back when the queue has the pools (per scaleUp). Returns
  // whether it did (the plan is complete).
  bool Grow(const CurrentPods& current);
  // A kept worker's pod whose slice takes another id in place: its index from now on.
  void Relabel(const ObservedPod& p, int32_t index);
  int32_t IndexNow(const ObservedPod& p) const;

  const LifecycleInput& in_;
  const cache::TPUJobInfo& job_;
  const int64_t spec_generation_;  // the job's metadata.generation
  const WallTime now_;
  // The spec as the current attempt runs it: the job's, or while an elastic job runs on fewer
  // slices, active_spec_ (WithActiveSlices).
  const JobSpec* spec_ = nullptr;
  std::optional<JobSpec> active_spec_;
  // Pods this plan relabels (Relabel): uid -> worker index. Usually empty.
  std::map<std::string, int32_t> relabeled_;
  Plan plan_;
  // The uids in plan_.remove: DeletePod asks once per pod, and a scan of plan_.remove each time
  // made a decision that deletes every pod of a 4,096-worker job quadratic (~20 ms).
  std::unordered_set<std::string> removing_;
};

}  // namespace tpujob::policy
