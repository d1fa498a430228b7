#include "policy/lifecycle.h"

#include <algorithm>
#include <map>

#include "policy/decider.h"
#include "policy/goodput.h"

namespace tpujob::policy {

// The phase machine, as named steps: 1. AcceptSpec, 2. KeepHouse, 3. the phases decided without
// the attempt's pods (finished, suspended, resumed, past its deadline), 4. EnterQueue,
// 5. RemoveEarlierAttempts, 6. WaitOrAdmit, 7. ConvergeAdmittedAttempt.
Plan Decider::Run() {
  JobStatus& s = plan_.status;
  if (job_.deleting()) return std::move(plan_);  // the garbage collector removes the children
  s.observed_generation = spec_generation_;
  if (!AcceptSpec()) return std::move(plan_);
  KeepHouse();

  // Step 3: the phases decided without looking at the attempt's pods.
  if (IsTerminal(s.phase)) {
    StopActivePods("the job has finished");
    ExpireAfterFinish();
    return std::move(plan_);
  }
  if (spec_->suspend) {
    Suspend();
    return std::move(plan_);
  }
  if (s.phase == Phase::kSuspended) {
    Resume();
    UpdateCounts();
    return std::move(plan_);
  }
  if (DeadlineExceeded()) {
    UpdateCounts();
    return std::move(plan_);
  }
  if (s.phase == Phase::kNone) {
    EnterQueue();
    UpdateCounts();
    return std::move(plan_);
  }

  const EarlierAttempts earlier = RemoveEarlierAttempts();
  const bool admitted = s.ConditionTrue(condition::kAdmitted);
  if ((s.phase == Phase::kQueued || !admitted) &&
      (FaultsInFlight() || !WaitOrAdmit(earlier.others_left))) {
    UpdateCounts();
    return std::move(plan_);
  }
  ConvergeAdmittedAttempt(earlier.any_left);
  return std::move(plan_);
}

// Step 1: the spec. An invalid one is reported (Valid=False) and nothing else is decided; a
// valid one is recorded (Valid, status.tpu) and a job that failed only for its spec queues again.
bool Decider::AcceptSpec() {
  JobStatus& s = plan_.status;
  if (!in_.spec->has_value()) {
    Invalid(in_.spec->error());
    return false;
  }
  const JobSpec& spec = **in_.spec;
  spec_ = &spec;
  if (spec.Elastic() && !in_.replace_slices) {
    Invalid("spec.tpu.minSlices: " + std::to_string(spec.tpu.min_slices) +
            " is not supported for a job Kueue admits: its Workload is admitted as a whole, "
            "so it cannot run on fewer slices; leave minSlices out or the queue-name label off");
    return false;
  }
  const int32_t active = ActiveSlicesOf(spec, s);      // read before status.tpu is written again
  std::vector<int32_t> slots = SliceSlotsOf(spec, s);  // likewise (elastic, in place)
  const Condition* valid = s.FindCondition(condition::kValid);
  if (valid != nullptr && valid->status == "False") {
    RecordEvent(false, "SpecValid", "the spec is valid again");
  }
  s.SetCondition(condition::kValid, true, "SpecValid", "the spec is valid", now_, spec_generation_);
  s.tpu = TpuStatus{
      .summary =
          spec.tpu.type.empty() ? spec.tpu.accelerator + " " + spec.tpu.topology : spec.tpu.type,
      .type = spec.tpu.type,
      .accelerator = spec.tpu.accelerator,
      .topology = spec.tpu.topology,
      .chips_per_worker = spec.tpu.chips_per_worker,
      .hosts_per_slice = spec.HostsPerSlice(),
      .slices = spec.tpu.slices,
      .active_slices = 0,
      .slices_summary = "",
      .slice_slots = std::move(slots),
  };
  SetActiveSlices(active);
  if (!spec.Elastic()) {
    s.elastic.reset();
    s.RemoveCondition(condition::kDegraded);
  }
  if (s.phase == Phase::kFailed) {
    const Condition* failed = s.FindCondition(condition::kFailed);
    if (failed != nullptr && failed->reason == "InvalidSpec") {
      // The job never started; now that its spec is fixed it goes through the queue.
      s.phase = Phase::kNone;
      s.RemoveCondition(condition::kFailed);
    }
  }

  return true;
}

// Step 2, whatever the phase: the operator's cordons on the job's evidence are recorded, a lost
// cordon is redone, pods whose labels identify no replica go and pods on lost nodes whose grace
// period is over are force-deleted.
void Decider::KeepHouse() {
  RecordCordonedNodes();
  RedoLostCordon();
  for (const cache::PodInfo* stray : in_.strays) {
    ForceIfLost(*stray);
    DeletePod(*stray, std::nullopt, "its labels do not identify a replica");
  }
  for (const ObservedPod& p : in_.pods) ForceIfLost(*p.pod);
}

// Step 4: a new job queues as attempt 1.
void Decider::EnterQueue() {
  JobStatus& s = plan_.status;
  s.phase = Phase::kQueued;
  s.attempt = std::max(1, s.attempt);
  s.queued_at = now_;
  s.SetCondition(condition::kAdmitted, false, in_.not_admitted_reason, in_.not_admitted_message,
                 now_, spec_generation_);
  RecordEvent(false, "Queued", "attempt " + std::to_string(s.attempt) + " queued");
}

// Step 5: pods of an earlier attempt are removed whatever the phase; nothing of the current
// attempt is created while one is left. The kept slices' pods of a slice recovered in place stay,
// and join the current attempt once the others are gone.
Decider::EarlierAttempts Decider::RemoveEarlierAttempts() {
  JobStatus& s = plan_.status;
  bool old_left = false;
  std::vector<const ObservedPod*> moving;  // slice recovery in place: kept, to relabel
  for (const ObservedPod& p : in_.pods) {
    if (p.attempt == s.attempt) continue;
    old_left = true;
    if (KeptInPlace(p)) {
      moving.push_back(&p);
      continue;
    }
    if (!p.pod->deleting()) {
      DeletePod(*p.pod, OnLostNode(*p.pod, GraceEnding(p.attempt)),
                "it belongs to attempt " + std::to_string(p.attempt));
    }
  }

  const bool others_left =
      moving.size() != static_cast<size_t>(std::count_if(
                           in_.pods.begin(), in_.pods.end(),
                           [&](const ObservedPod& p) { return p.attempt != s.attempt; }));
  if (!moving.empty() && !others_left) {
    // The replaced slice's old pods are gone: the kept ones join the new attempt.
    for (const ObservedPod* p : moving) {
      plan_.annotate.push_back({p->pod->name, p->pod->uid, s.in_place->generation, std::nullopt,
                                s.attempt, std::nullopt, std::nullopt, std::nullopt});
    }
  }

  return {old_left, others_left};
}

// Step 6: an attempt that is not admitted waits in the queue (its pods of a released admission
// go first), times out there, or is admitted now. Returns whether it was admitted.
bool Decider::WaitOrAdmit(bool others_left) {
  JobStatus& s = plan_.status;
  const JobSpec& spec = *spec_;
  // Pods of the current attempt exist while it is not admitted only when the admission was
  // released (capacity raced away): they go before the attempt queues again. Except, for a
  // slice recovered in place, the kept slices' pods: they wait at the barrier.
  bool current_left = false;
  for (const ObservedPod& p : in_.pods) {
    if (p.attempt != s.attempt || KeptInPlace(p)) continue;
    current_left = true;
    if (!p.pod->deleting()) DeletePod(*p.pod, kBriefGraceSeconds, "the admission was released");
  }
  if (others_left || current_left) {
    return false;
  }
  if (s.phase != Phase::kQueued) {
    // Restarting after a re-issue or a preemption: the old attempt is gone; queue the new
    // one (a re-issued attempt first, a preempted one by its priority).
    s.phase = Phase::kQueued;
    s.queued_at = now_;
    const std::string attempt = "attempt " + std::to_string(s.attempt);
    if (s.slice_recovery) {
      // Only the replaced slices wait for pools; the others keep theirs (reserved).
      const std::string replaced = SliceList(s.slice_recovery->slices);
      s.SetCondition(condition::kAdmitted, false, "Reissued",
                     attempt + ": " + replaced +
                         (s.slice_recovery->slices.size() == 1 ? " waits" : " wait") +
                         " for a node pool with first priority; " + KeptSlices() +
                         " keep their node pools" + ElasticWaitNote(),
                     now_, spec_generation_);
      RecordEvent(false, "Queued", attempt + ": " + replaced + " queued with first priority");
      return false;
    }
    s.node_pools.clear();
    if (s.ConditionTrue(condition::kPreempted)) {
      s.SetCondition(condition::kAdmitted, false, "Preempted",
                     attempt + " waits for capacity in priority order after a preemption", now_,
                     spec_generation_);
      RecordEvent(false, "Queued", attempt + " queued again after a preemption");
    } else {
      s.SetCondition(condition::kAdmitted, false, "Reissued",
                     attempt + " waits for capacity with first priority", now_, spec_generation_);
      RecordEvent(false, "Queued", attempt + " queued with first priority");
    }
    return false;
  }
  if (QueueTimedOut()) {
    return false;
  }
  std::string shrunk;  // elastic: the slices given up, when the job runs on the others
  if (!in_.admit) {
    shrunk = Shrink();
    if (shrunk.empty()) {
      s.SetCondition(condition::kAdmitted, false, in_.not_admitted_reason,
                     in_.not_admitted_message + ElasticWaitNote(), now_, spec_generation_);
      s.queue_position = in_.queue_position;
      return false;
    }
  }
  std::string placed;  // slice recovery: where the replaced slices go
  if (!shrunk.empty()) {
    // Shrink set the pools already: the kept slices', renumbered.
  } else if (s.slice_recovery) {
    const std::vector<int32_t>& slices = s.slice_recovery->slices;
    if (in_.admit_pools.size() != slices.size()) {
      // An answer for another request (made before this attempt asked for its slices):
      // the next plan has the right one.
      return false;
    }
    s.node_pools.resize(static_cast<size_t>(spec.ActiveSlices()));
    for (size_t i = 0; i < slices.size(); ++i) {
      s.node_pools[static_cast<size_t>(slices[i])] = in_.admit_pools[i];
      placed += std::string(i == 0 ? "" : ", ") + "slice " + std::to_string(slices[i]) +
                " in node pool " + in_.admit_pools[i];
    }
  } else {
    s.node_pools = in_.admit_pools;
  }
  if (std::all_of(s.node_pools.begin(), s.node_pools.end(),
                  [](const std::string& pool) { return pool.empty(); })) {
    s.node_pools.clear();
  }
  // The kept slices wait at the barrier from now on: its timeout counts from here.
  if (s.slice_recovery && s.slice_recovery->in_place && s.in_place && s.in_place->barrier_since) {
    s.in_place->barrier_since = now_;
  }
  // A place won by preemption names its victims.
  const std::string after = in_.admitted_message.empty() ? "" : " " + in_.admitted_message;
  s.phase = Phase::kStarting;
  s.admitted_at = now_;
  if (!s.start_time) s.start_time = now_;
  s.queue_position.reset();
  const int total = spec_->Replicas(ReplicaType::kMaster) + spec_->Replicas(ReplicaType::kWorker);
  s.SetCondition(condition::kAdmitted, true, "Admitted",
                 "attempt " + std::to_string(s.attempt) + " admitted" +
                     (!shrunk.empty()  ? " " + shrunk + "; they restart on the nodes they hold"
                      : placed.empty() ? ""
                                       : ": " + placed + "; " + KeptSlices() +
                                             " restart on the nodes they hold") +
                     after,
                 now_, spec_generation_);
  if (s.ConditionTrue(condition::kPreempted)) {
    s.SetCondition(condition::kPreempted, false, "Readmitted",
                   "attempt " + std::to_string(s.attempt) + " admitted after a preemption", now_,
                   spec_generation_);
  }
  RecordEvent(false, "Admitted",
              "attempt " + std::to_string(s.attempt) + " admitted: creating " +
                  std::to_string(total) + " pods");
  return true;
}

// spec.suspend: every pod goes (running ones with the maintenance grace period, so the
// program can checkpoint), the capacity is released and the job stays out of the queue. The
// attempt, retries and history are kept.
void Decider::Suspend() {
  JobStatus& s = plan_.status;
  const int64_t grace = spec_->fault_tolerance.maintenance_grace_period_seconds;
  if (s.phase != Phase::kSuspended) {
    const bool had_pods = std::any_of(in_.pods.begin(), in_.pods.end(), [](const ObservedPod& p) {
      return !p.pod->deleting() && !p.pod->terminated();
    });
    const std::string why =
        had_pods ? "spec.suspend is true: pods stopped with a grace period of " +
                       std::to_string(grace) + "s, capacity released"
                 : "spec.suspend is true: the job is not admitted until it is cleared";
    s.phase = Phase::kSuspended;
    s.attempt = std::max(1, s.attempt);
    s.reissued = false;
    // Resumed, the job is admitted anew: its workers go where the queue places them.
    for (auto& [key, record] : s.worker_restarts) record.node.clear();
    s.admitted_at.reset();
    s.running_at.reset();
    s.queue_position.reset();
    s.node_pools.clear();
    s.slice_recovery.reset();
    NewGeneration();
    s.SetCondition(condition::kSuspended, true, "JobSuspended", why, now_, spec_generation_);
    if (s.ConditionTrue(condition::kPreempted)) {
      s.SetCondition(condition::kPreempted, false, "Suspended", "the job is suspended", now_,
                     spec_generation_);
    }
    s.SetCondition(condition::kAdmitted, false, "Suspended", "the job is suspended", now_,
                   spec_generation_);
    s.SetCondition(condition::kReady, false, "Suspended", "the job is suspended", now_,
                   spec_generation_);
    RecordEvent(false, "Suspended", why);
  }
  for (const ObservedPod& p : in_.pods) {
    if (!p.pod->deleting()) DeletePod(*p.pod, grace, "the job is suspended");
  }
  UpdateCounts();
}

// spec.suspend cleared: the job queues again (its pods, if still going, go first). Like a
// batch/v1 Job, startTime is reset, so activeDeadlineSeconds counts from the next admission.
void Decider::Resume() {
  JobStatus& s = plan_.status;
  s.phase = Phase::kQueued;
  s.queued_at = now_;
  s.start_time.reset();
  s.SetCondition(condition::kSuspended, false, "JobResumed",
                 "spec.suspend was cleared: the job queues again", now_, spec_generation_);
  s.SetCondition(condition::kAdmitted, false, in_.not_admitted_reason, in_.not_admitted_message,
                 now_, spec_generation_);
  RecordEvent(false, "Resumed", "attempt " + std::to_string(s.attempt) + " queued again");
}

// The queue preempts the admitted attempt for a job of higher priority: stopped like a
// maintenance event (the grace period to checkpoint), not counted as a retry, and the next
// attempt queues by its priority (not first, as a re-issue: it would take the capacity back
// from the job it was stopped for).
void Decider::Preempt(const PreemptOrder& order) {
  JobStatus& s = plan_.status;
  const int64_t grace = spec_->fault_tolerance.maintenance_grace_period_seconds;
  FaultRecord f;
  f.time = now_;
  f.attempt = s.attempt;
  f.kind = FaultKindName(FaultKind::kPreempted);
  f.reason = "Preempted";
  f.message = BoundedMessage(order.message);
  f.action = FaultActionName(FaultAction::kPreemptJob);
  s.AddFault(std::move(f));
  s.preemptions++;
  s.preempted_by = order.by;
  s.preempted_at = now_;
  const std::string why = BoundedMessage(order.message);
  s.SetCondition(condition::kPreempted, true, "Preempted", why, now_, spec_generation_);
  NextAttempt(/*reissued=*/false, "Preempted", why);
  RecordEvent(true, "Preempted",
              why + "; pods stopped with a grace period of " + std::to_string(grace) +
                  "s; attempt " + std::to_string(s.attempt) +
                  " queues again by priority (a disruption: no retry used)");
  for (const ObservedPod& p : in_.pods) {
    if (!p.pod->deleting()) DeletePod(*p.pod, grace, "the job is preempted");
  }
  UpdateCounts();
}

// Step 7: the job's current attempt is admitted: observe its pods, apply the fault rules in the
// order docs/architecture.md gives them (policy/fault_rules.h), then create what is missing and
// say whether the attempt runs.
void Decider::ConvergeAdmittedAttempt(bool old_left) {
  JobStatus& s = plan_.status;
  const JobSpec& spec = *spec_;
  const bool in_place = spec.fault_tolerance.restart == RestartMode::kInPlace;
  if (in_place && !s.in_place) s.in_place = InPlaceStatus{.generation = 1, .barrier_since = {}};
  CurrentPods current;
  for (const ObservedPod& p : in_.pods) {
    if (p.attempt != s.attempt) continue;
    const int32_t index = IndexNow(p);  // an elastic shrink in place relabels some
    if (index < 0 || index >= spec.Replicas(p.type)) {
      if (!p.pod->deleting()) DeletePod(*p.pod, std::nullopt, "no such replica in the spec");
      continue;
    }
    current[{p.type, index}] = &p;
  }

  std::vector<ReplicaFailure> failures;
  std::vector<PodToCreate> missing;
  int expected = 0, done = 0;
  bool success_decider_succeeded = false;
  int workers_succeeded = 0;
  for (ReplicaType type : {ReplicaType::kMaster, ReplicaType::kWorker}) {
    for (int32_t i = 0; i < spec.Replicas(type); ++i) {
      ++expected;
      // The replica whose exit 0 ends the job under successPolicy Master.
      const bool decides_success = spec.success_policy == SuccessPolicy::kMaster &&
                                   (type == ReplicaType::kMaster ||
                                    (!spec.master && type == ReplicaType::kWorker && i == 0));
      auto it = current.find({type, i});
      if (it == current.end()) {
        missing.push_back({type, i, ""});
        continue;
      }
      const ObservedPod& p = *it->second;
      if (p.pod->deleting()) continue;
      Termination t;
      switch (Observe(*p.pod, &t)) {
        case PodState::kSucceeded:
          ++done;
          if (type == ReplicaType::kWorker) ++workers_succeeded;
          if (decides_success) success_decider_succeeded = true;
          break;
        case PodState::kReady:
          ++done;
          break;
        case PodState::kFailed: {
          const bool counted = Counted(p, t);
          failures.push_back({&p, std::move(t), counted});
          break;
        }
        case PodState::kPending:
          break;
      }
    }
  }
  std::vector<const ObservedPod*> pods;  // of the attempt, by replica
  for (const auto& [id, p] : current) pods.push_back(p);

  // Stalls are not exits: the stall rule takes them, whatever the code (policy/stall_rules.h).
  std::vector<WorkerProgress> stalls;
  std::erase_if(failures, [&](ReplicaFailure& f) {
    std::optional<SupervisorReport> report = StallOf(f.termination);
    if (!report) return false;
    WorkerProgress w{.pod = f.pod,
                     .report = std::move(*report),
                     .termination = std::move(f.termination),
                     .stalled = true};
    if (!StallActedOn(w, s.progress ? &*s.progress : nullptr)) stalls.push_back(std::move(w));
    return true;
  });

  // Rules 1 and 2 (docs/architecture.md, "Faults, in the order the policy checks them"): the
  // nodes the pods run on.
  if (ApplyNodeRules(pods)) {
    UpdateCounts();
    return;
  }
  // Rule 3: a restarted worker pinned to a node that does not take it.
  for (const Unpin& unpin : CheckPinnedUnschedulable({pods, &s.worker_restarts})) {
    const cache::PodInfo& pod = *unpin.pod->pod;
    DeletePod(pod, std::nullopt,
              "it was pinned to node " + unpin.node + ", where it cannot be scheduled" +
                  (pod.message.empty() ? std::string() : " (" + pod.message.str() + ")") +
                  "; it is created again elsewhere");
    s.worker_restarts[unpin.key].node.clear();
  }
  // Rule 4: the admission's capacity was taken.
  std::vector<std::string> removing;
  for (const PodToDelete& d : plan_.remove) removing.push_back(d.uid);
  if (const ObservedPod* stuck = CheckUnschedulable(
          {pods, std::move(removing), in_.release_unschedulable, s.admitted_at, now_})) {
    ReleaseAdmission(*stuck);
    UpdateCounts();
    return;
  }
  // Rule 5: failed pre-flight checks.
  PreflightSnapshot preflight{
      .failed = {}, .pods = pods, .spec = spec_, .admitted_at = s.admitted_at, .now = now_};
  for (const ReplicaFailure& f : failures) {
    if (f.termination.init_container && f.termination.container == kPreflightContainer &&
        !f.counted) {
      preflight.failed.push_back(&f);
    }
  }
  if (ApplyPreflightVerdict(CheckPreflight(preflight))) {
    UpdateCounts();
    return;
  }

  // Rule 6: a permanent exit ends the job, once its node has had the fault attribution window
  // to be found faulty (rules 1 and 2 take that case); until then it is held.
  const PermanentExitVerdict permanent =
      CheckPermanentExits({&failures, &spec.fault_tolerance.exit_codes,
                           spec.fault_tolerance.fault_attribution_seconds, now_});
  if (permanent.recheck_in) Requeue(*permanent.recheck_in);
  if (permanent.fails != nullptr) {
    const ReplicaFailure& f = *permanent.fails;
    plan_.confirm_nodes.insert(plan_.confirm_nodes.end(), permanent.confirm_nodes.begin(),
                               permanent.confirm_nodes.end());
    const std::string waited =
        permanent.waited ? "; its node " + std::string(f.pod->pod->node_name.view()) +
                               " was not found faulty within the fault attribution window of " +
                               std::to_string(spec.fault_tolerance.fault_attribution_seconds) + "s"
                         : "";
    RecordFault(*f.pod, f.termination, FaultAction::kFailJob);
    Finish(false, "PermanentError",
           DescribeReplica(*f.pod, spec_) + ": " + DescribeExit(f.termination) + "; exit code " +
               std::to_string(*f.termination.exit_code) + " is permanent, the job is not retried" +
               waited);
    s.worker_restarts.erase(ReplicaKey(f.pod->type, f.pod->index));
    UpdateCounts();
    return;
  }
  const std::vector<const ReplicaFailure*>& held = permanent.held;

  // Rule 7: a stall (policy/stall_rules.h), reported by the supervisors of the current run.
  bool gang_restart = false;
  if (!stalls.empty() && spec.fault_tolerance.progress) {
    const std::optional<ProgressStatus> before = s.progress;
    // The verdict points into the snapshot: it lives as long.
    const StallSnapshot snapshot{
        .workers = std::move(stalls),
        .spec = &spec,
        .progress = &*spec.fault_tolerance.progress,
        .status = before ? &*before : nullptr,
        .attribution_seconds = spec.fault_tolerance.fault_attribution_seconds,
        .now = now_};
    const StallVerdict stall = CheckStalls(snapshot);
    if (ApplyStallVerdict(stall, pods, &gang_restart)) {
      UpdateCounts();
      return;
    }
  }

  // Rule 8: success, then the queue's preemption.
  const SuccessVerdict success = CheckSuccessOrPreemption({
      .exit_held = !held.empty(),
      .success_policy = spec.success_policy,
      .has_master = spec.master.has_value(),
      .success_decider_succeeded = success_decider_succeeded,
      .workers = spec.Replicas(ReplicaType::kWorker),
      .workers_succeeded = workers_succeeded,
      .replicas = expected,
      .preempt = &in_.preempt,
      .attempt = s.attempt,
  });
  if (success.outcome == SuccessVerdict::Outcome::kSucceeded) {
    Finish(true, success.reason, success.message);
    UpdateCounts();
    return;
  }
  if (success.outcome == SuccessVerdict::Outcome::kPreempted) {
    Preempt(*in_.preempt);
    return;
  }

  // Rule 9: retryable exits restart within the worker's budget, then re-issue. In place (the
  // program restarts in every pod behind a barrier) or by recreating the failed worker's pod.
  bool restarted = false;
  const int32_t max_restarts = spec.fault_tolerance.max_worker_restarts;
  for (const RetryVerdict& step :
       CheckRetryableExits({&failures, &held, &s.worker_restarts, in_place, max_restarts})) {
    const ReplicaFailure& f = *step.failure;
    switch (step.step) {
      case RetryVerdict::Step::kDeleteCounted:
        DeletePod(*f.pod->pod, std::nullopt, in_place ? "it failed" : "it failed and is restarted");
        break;
      case RetryVerdict::Step::kRestartInPlace: {
        RestartRecord& record = s.worker_restarts[ReplicaKey(f.pod->type, f.pod->index)];
        record.count++;
        record.pod_uid = f.pod->pod->uid;
        record.node = std::string(f.pod->pod->node_name.view());
        record.generation = s.in_place->generation;
        RecordFault(*f.pod, f.termination, FaultAction::kRestartInPlace);
        if (step.delete_pod) {
          DeletePod(*f.pod->pod, std::nullopt,
                    "it failed and is created again to join the restart");
        }
        RecordEvent(true, "WorkerRestarted",
                    DescribeReplica(*f.pod, spec_) + ": " + DescribeExit(f.termination) +
                        "; restarting the program in place in every pod, generation " +
                        std::to_string(s.in_place->generation + 1) + " (" +
                        std::to_string(record.count) + " of " + std::to_string(max_restarts) +
                        " restarts)");
        gang_restart = true;
        break;
      }
      case RetryVerdict::Step::kRestartWorker: {
        RestartRecord& record = s.worker_restarts[ReplicaKey(f.pod->type, f.pod->index)];
        record.count++;
        record.pod_uid = f.pod->pod->uid;
        record.node = std::string(f.pod->pod->node_name.view());
        RecordFault(*f.pod, f.termination, FaultAction::kRestartWorker);
        RecordEvent(true, "WorkerRestarted",
                    DescribeReplica(*f.pod, spec_) + ": " + DescribeExit(f.termination) +
                        "; restarting it in place (" + std::to_string(record.count) + " of " +
                        std::to_string(max_restarts) + " restarts)");
        DeletePod(*f.pod->pod, std::nullopt, "it failed and is restarted");
        restarted = true;
        break;
      }
      case RetryVerdict::Step::kReissue:
        Reissue(*f.pod, f.termination,
                DescribeReplica(*f.pod, spec_) + ": " + DescribeExit(f.termination) +
                    "; it has used its " + std::to_string(max_restarts) + " restarts",
                std::nullopt, "", {f.pod});
        UpdateCounts();
        return;
    }
  }
  if (restarted && s.phase == Phase::kRunning) s.phase = Phase::kRestarting;
  if (gang_restart) {
    s.in_place->generation++;
    s.in_place->barrier_since = now_;
    s.phase = Phase::kRestarting;
  }
  if (in_place && InPlaceBarrier(current)) {
    UpdateCounts();
    return;
  }

  // Elastic slices: a degraded job that runs grows back when the pools are free.
  if (s.phase == Phase::kRunning && !restarted && !gang_restart && held.empty() && Grow(current)) {
    UpdateCounts();
    return;
  }

  // Create what is missing, once no pod of an earlier attempt is left; a restarted worker
  // goes back to its node while that node is healthy and schedulable.
  if (!old_left && !missing.empty()) {
    plan_.ensure_service = true;
    for (PodToCreate& want : missing) {
      want.node = RestartNode(want.type, want.index);
      if (want.node.empty()) {
        want.node = KeptNode(want.type, want.index);
        want.bind = !want.node.empty();
      }
    }
    AvoidBoundNodes(missing);
    plan_.create = missing;
  }

  // Running when every replica is up.
  const int total = expected;
  if (!held.empty()) {
    AwaitAttribution(*held.front()->pod, held.front()->termination);
  } else if (s.in_place && s.in_place->barrier_since) {
    // Restarting in place: InPlaceBarrier set Ready.
  } else if (done == total && !restarted) {
    if (s.phase != Phase::kRunning) {
      if (s.ConditionTrue(condition::kStalled)) {
        s.SetCondition(condition::kStalled, false, "Restarted",
                       "every pod runs the program again after the stall", now_, spec_generation_);
      }
      s.phase = Phase::kRunning;
      s.running_at = now_;
      s.slice_recovery.reset();  // every pod is up: the kept nodes are no longer needed
      RecordEvent(false, "Running",
                  "all " + std::to_string(total) + " pods of attempt " + std::to_string(s.attempt) +
                      " are ready");
    }
    s.SetCondition(condition::kReady, true, "AllWorkersReady",
                   std::to_string(total) + " of " + std::to_string(total) + " pods ready", now_,
                   spec_generation_);
  } else {
    s.SetCondition(condition::kReady, false, "WorkersNotReady",
                   std::to_string(done) + " of " + std::to_string(total) + " pods ready", now_,
                   spec_generation_);
  }
  UpdateCounts();
}

// Rules 1 and 2: maintenance moves the job without using a retry; an unhealthy or lost node is
// cordoned and the job re-issued. The unhealthy node decides when both apply. Returns whether
// a decision was taken.
bool Decider::ApplyNodeRules(const std::vector<const ObservedPod*>& pods) {
  if (!in_.node_health) return false;
  NodeFaultSnapshot nodes{.pods = {},
                          .job_uid = job_.uid,
                          .attempt = plan_.status.attempt,
                          .cordon_faulty_nodes = spec_->fault_tolerance.cordon_faulty_nodes};
  for (const ObservedPod* p : pods) {
    if (p->pod->deleting() || p->pod->node_name.empty()) continue;
    if (p->pod->phase == cache::PodPhase::kSucceeded) continue;
    PodOnNode on{
        .pod = p, .health = in_.node_health(p->pod->node_name.view()), .state = {}, .exit = {}};
    on.state = Observe(*p->pod, &on.exit);
    nodes.pods.push_back(std::move(on));
  }
  const MaintenanceVerdict maintenance = CheckMaintenance(nodes);
  if (maintenance.recheck_in) Requeue(*maintenance.recheck_in);  // maintenance ahead
  const FaultyNodeVerdict faulty = CheckFaultyNodes(nodes);
  if (faulty.culprit != nullptr) {
    for (const NodeToCordon& c : faulty.cordon) Cordon(c);
    const ObservedPod& culprit = *faulty.culprit->pod;
    std::vector<OtherFault> others;
    for (const PodOnNode* o : faulty.others) {
      others.push_back({o->pod, NodeVerdictAfterExit(*o),
                        o->health.unreachable ? FaultKind::kNodeLost : FaultKind::kNodeUnhealthy});
    }
    Reissue(culprit, faulty.termination,
            DescribeReplica(culprit, spec_) + ": " + faulty.termination.message +
                (faulty.lost_any ? " (lost)" : ""),
            faulty.kind, "", faulty.touched, others);
    return true;
  }
  if (maintenance.culprit != nullptr) {
    const ObservedPod& culprit = *maintenance.culprit->pod;
    Reissue(culprit, maintenance.termination,
            DescribeReplica(culprit, spec_) + ": " + maintenance.termination.message,
            FaultKind::kMaintenance, "", maintenance.touched);
    return true;
  }
  return false;
}

// Rule 5's verdict. Returns whether a decision was taken.
bool Decider::ApplyPreflightVerdict(const PreflightVerdict& v) {
  switch (v.outcome) {
    case PreflightVerdict::Outcome::kNone:
      return false;
    case PreflightVerdict::Outcome::kWait:
      Requeue(v.wait);
      return true;
    case PreflightVerdict::Outcome::kFailJob:
      RecordFault(*v.culprit, v.shown, FaultAction::kFailJob, v.items);
      Finish(false, "PreflightConfigError", v.why);
      return true;
    case PreflightVerdict::Outcome::kReissue:
      // Every node at fault in one plan, so that the circuit breaker sees the whole pattern.
      plan_.cordon.insert(plan_.cordon.end(), v.cordon.begin(), v.cordon.end());
      Reissue(*v.culprit, v.shown, v.why, std::nullopt, v.items, v.touched);
      return true;
  }
  return false;
}

Plan Decide(const LifecycleInput& input) {
  const cache::TPUJobInfo& job = *input.job;
  const JobStatus written = JobStatus::FromJson(job.status);
  Plan plan = Decider(input, written).Run();
  if (job.deleting()) return plan;
  GoodputInput goodput;
  goodput.now = input.now;
  if (input.spec->has_value()) {
    // Chips of the slices the attempt runs on; an elastic job running on fewer runs without the
    // others' (policy/elastic.h).
    const JobSpec& spec = **input.spec;
    const int64_t per_slice = int64_t{spec.worker.replicas} * spec.tpu.chips_per_worker;
    const int32_t active = ActiveSlicesOf(spec, plan.status);
    goodput.chips = per_slice * active;
    goodput.missing_chips = per_slice * (spec.tpu.slices - active);
  }
  for (const ObservedPod& p : input.pods) {
    if (p.attempt != plan.status.attempt || p.pod->deleting()) continue;
    const cache::ContainerInfo* init = p.pod->FindInitContainer(kPreflightContainer);
    if (init != nullptr && init->state == cache::ContainerState::kRunning) {
      goodput.preflight_running = true;
    }
  }
  if (auto checkpoint = job.annotations.Get(kLastCheckpointAnnotation)) {
    goodput.last_checkpoint = cache::ParseRfc3339(*checkpoint);
  }
  if (plan.status.progress) goodput.last_progress = plan.status.progress->time;
  goodput.created = job.creation_timestamp;
  AccountGoodput(written, plan.status, goodput);
  return plan;
}

}  // namespace tpujob::policy
