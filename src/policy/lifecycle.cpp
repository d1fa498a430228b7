#include "policy/lifecycle.h"

#include <algorithm>
#include <map>

#include "policy/goodput.h"
#include "preflight/report.h"

namespace tpujob::policy {
namespace {

// Messages end up in conditions, Events and faults[]; keep them readable and bounded.
constexpr size_t kMaxMessage = 1024;

std::string Bounded(std::string text) {
  if (text.size() > kMaxMessage) {
    // Cut at a character boundary: a split UTF-8 sequence would make the JSON invalid.
    size_t cut = kMaxMessage - 3;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text.resize(cut);
    text += "...";
  }
  return text;
}

// "worker-3 (pod j-worker-3)"; for a multislice job "worker-7 (slice 1, pod j-worker-1-3)".
std::string Describe(const ObservedPod& p, const JobSpec* spec) {
  std::string out = std::string(LowerName(p.type)) + "-" + std::to_string(p.index) + " (";
  if (spec != nullptr && spec->Multislice() && p.type == ReplicaType::kWorker) {
    out += "slice " + std::to_string(spec->SliceOf(p.index)) + ", ";
  }
  return out + "pod " + p.pod->name + ")";
}

std::string DescribeExit(const Termination& t) {
  std::string out;
  if (!t.container.empty()) {
    out = std::string(t.init_container ? "init container " : "container ") + t.container;
    if (t.exit_code) out += " exited with code " + std::to_string(*t.exit_code);
    if (!t.reason.empty()) out += " (" + t.reason + ")";
  } else {
    out = "pod failed";
    if (!t.reason.empty()) out += " (" + t.reason + ")";
  }
  if (!t.message.empty()) out += ": " + t.message;
  return out;
}

class Decider {
 public:
  // `written` is the job's status as last written (in.job->status, parsed).
  Decider(const LifecycleInput& in, JobStatus written)
      : in_(in), job_(*in.job), gen_(job_.generation), now_(in.now) {
    plan_.status = std::move(written);
  }

  Plan Run() {
    JobStatus& s = plan_.status;
    if (job_.deleting()) return std::move(plan_);  // the garbage collector removes the children
    s.observed_generation = gen_;

    if (!in_.spec->has_value()) {
      Invalid(in_.spec->error());
      return std::move(plan_);
    }
    const JobSpec& spec = **in_.spec;
    spec_ = &spec;
    const Condition* valid = s.FindCondition(condition::kValid);
    if (valid != nullptr && valid->status == "False") {
      Event(false, "SpecValid", "the spec is valid again");
    }
    s.SetCondition(condition::kValid, true, "SpecValid", "the spec is valid", now_, gen_);
    s.tpu = TpuStatus{
        .summary =
            spec.tpu.type.empty() ? spec.tpu.accelerator + " " + spec.tpu.topology : spec.tpu.type,
        .type = spec.tpu.type,
        .accelerator = spec.tpu.accelerator,
        .topology = spec.tpu.topology,
        .chips_per_worker = spec.tpu.chips_per_worker,
        .hosts_per_slice = spec.HostsPerSlice(),
        .slices = spec.tpu.slices,
    };
    if (s.phase == Phase::kFailed) {
      const Condition* failed = s.FindCondition(condition::kFailed);
      if (failed != nullptr && failed->reason == "InvalidSpec") {
        // The job never started; now that its spec is fixed it goes through the queue.
        s.phase = Phase::kNone;
        s.RemoveCondition(condition::kFailed);
      }
    }

    RecordCordonedNodes();
    RedoLostCordon();
    for (const cache::PodInfo* stray : in_.strays) {
      ForceIfLost(*stray);
      Delete(*stray, std::nullopt, "its labels do not identify a replica");
    }
    for (const ObservedPod& p : in_.pods) ForceIfLost(*p.pod);

    if (IsTerminal(s.phase)) {
      StopActivePods("the job has finished");
      ExpireAfterFinish();
      return std::move(plan_);
    }
    if (spec.suspend) {
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
      s.phase = Phase::kQueued;
      s.attempt = std::max(1, s.attempt);
      s.queued_at = now_;
      s.SetCondition(condition::kAdmitted, false, in_.not_admitted_reason, in_.not_admitted_message,
                     now_, gen_);
      Event(false, "Queued", "attempt " + std::to_string(s.attempt) + " queued");
      UpdateCounts();
      return std::move(plan_);
    }

    // Pods of an earlier attempt are removed whatever the phase; nothing of the current attempt
    // is created while one is left.
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
        Delete(*p.pod, OnLostNode(*p.pod, GraceEnding(p.attempt)),
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
        plan_.annotate.push_back(
            {p->pod->name, p->pod->uid, s.in_place->generation, std::nullopt, s.attempt});
      }
    }

    const bool admitted = s.ConditionTrue(condition::kAdmitted);
    if (s.phase == Phase::kQueued || !admitted) {
      // Pods of the current attempt exist while it is not admitted only when the admission was
      // released (capacity raced away): they go before the attempt queues again. Except, for a
      // slice recovered in place, the kept slices' pods: they wait at the barrier.
      bool current_left = false;
      for (const ObservedPod& p : in_.pods) {
        if (p.attempt != s.attempt || KeptInPlace(p)) continue;
        current_left = true;
        if (!p.pod->deleting()) Delete(*p.pod, kBriefGraceSeconds, "the admission was released");
      }
      if (others_left || current_left) {
        UpdateCounts();
        return std::move(plan_);
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
                             " waits for a node pool with first priority; " + KeptSlices() +
                             " keep their node pools",
                         now_, gen_);
          Event(false, "Queued", attempt + ": " + replaced + " queued with first priority");
          UpdateCounts();
          return std::move(plan_);
        }
        s.node_pools.clear();
        if (s.ConditionTrue(condition::kPreempted)) {
          s.SetCondition(condition::kAdmitted, false, "Preempted",
                         attempt + " waits for capacity in priority order after a preemption", now_,
                         gen_);
          Event(false, "Queued", attempt + " queued again after a preemption");
        } else {
          s.SetCondition(condition::kAdmitted, false, "Reissued",
                         attempt + " waits for capacity with first priority", now_, gen_);
          Event(false, "Queued", attempt + " queued with first priority");
        }
        UpdateCounts();
        return std::move(plan_);
      }
      if (QueueTimedOut()) {
        UpdateCounts();
        return std::move(plan_);
      }
      if (!in_.admit) {
        s.SetCondition(condition::kAdmitted, false, in_.not_admitted_reason,
                       in_.not_admitted_message, now_, gen_);
        s.queue_position = in_.queue_position;
        UpdateCounts();
        return std::move(plan_);
      }
      std::string placed;  // slice recovery: where the replaced slices go
      if (s.slice_recovery) {
        const std::vector<int32_t>& slices = s.slice_recovery->slices;
        if (in_.admit_pools.size() != slices.size()) {
          // An answer for another request (made before this attempt asked for its slices):
          // the next plan has the right one.
          UpdateCounts();
          return std::move(plan_);
        }
        s.node_pools.resize(static_cast<size_t>(spec.tpu.slices));
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
      if (s.slice_recovery && s.slice_recovery->in_place && s.in_place &&
          s.in_place->barrier_since) {
        s.in_place->barrier_since = now_;
      }
      // A place won by preemption names its victims.
      const std::string after = in_.admitted_message.empty() ? "" : " " + in_.admitted_message;
      s.phase = Phase::kStarting;
      s.admitted_at = now_;
      if (!s.start_time) s.start_time = now_;
      s.queue_position.reset();
      const int total = spec.Replicas(ReplicaType::kMaster) + spec.Replicas(ReplicaType::kWorker);
      s.SetCondition(condition::kAdmitted, true, "Admitted",
                     "attempt " + std::to_string(s.attempt) + " admitted" +
                         (placed.empty() ? ""
                                         : ": " + placed + "; " + KeptSlices() +
                                               " restart on the nodes they hold") +
                         after,
                     now_, gen_);
      if (s.ConditionTrue(condition::kPreempted)) {
        s.SetCondition(condition::kPreempted, false, "Readmitted",
                       "attempt " + std::to_string(s.attempt) + " admitted after a preemption",
                       now_, gen_);
      }
      Event(false, "Admitted",
            "attempt " + std::to_string(s.attempt) + " admitted: creating " +
                std::to_string(total) + " pods");
    }

    Active(old_left);
    return std::move(plan_);
  }

 private:
  void Event(bool warning, std::string reason, std::string message) {
    plan_.events.push_back({warning, std::move(reason), Bounded(std::move(message))});
  }

  // The queue timeout of the current attempt: spec.queueTimeoutSeconds, or for a re-issued
  // attempt kDefaultReissueQueueTimeoutSeconds. The deadline is queuedAt plus the timeout, both
  // in the status, so it survives restarts. Past it the job fails (QueueTimeout); before it the
  // plan asks to be decided again at the deadline. queuedAt is written in whole seconds (the
  // fraction cut off), so the timeout counts from the end of its second: never early, at most
  // one second late.
  bool QueueTimedOut() {
    JobStatus& s = plan_.status;
    // A preempted job was started once and stopped for someone else: waiting for its turn
    // again never fails it.
    if (s.ConditionTrue(condition::kPreempted) || !in_.queue_timeout) return false;
    std::optional<int64_t> timeout = spec_->queue_timeout_seconds;
    if (!timeout && s.reissued) timeout = kDefaultReissueQueueTimeoutSeconds;
    if (!timeout || !s.queued_at) return false;
    // queuedAt has whole seconds: counted from the end of its second, so never early.
    const WallTime deadline = *s.queued_at + std::chrono::seconds(1 + *timeout);
    if (now_ < deadline) {
      Requeue(std::chrono::duration_cast<Duration>(deadline - now_));
      return false;
    }
    const Condition* waiting = s.FindCondition(condition::kAdmitted);
    Finish(false, "QueueTimeout",
           "attempt " + std::to_string(s.attempt) + (s.reissued ? " (re-issued)" : "") +
               " waited in the queue longer than its queue timeout of " + std::to_string(*timeout) +
               "s" +
               (waiting != nullptr && !waiting->message.empty() ? ": " + waiting->message : ""));
    s.queue_position.reset();
    return true;
  }

  // spec.suspend: every pod goes (running ones with the maintenance grace period, so the
  // program can checkpoint), the capacity is released and the job stays out of the queue. The
  // attempt, retries and history are kept.
  void Suspend() {
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
      s.SetCondition(condition::kSuspended, true, "JobSuspended", why, now_, gen_);
      if (s.ConditionTrue(condition::kPreempted)) {
        s.SetCondition(condition::kPreempted, false, "Suspended", "the job is suspended", now_,
                       gen_);
      }
      s.SetCondition(condition::kAdmitted, false, "Suspended", "the job is suspended", now_, gen_);
      s.SetCondition(condition::kReady, false, "Suspended", "the job is suspended", now_, gen_);
      Event(false, "Suspended", why);
    }
    for (const ObservedPod& p : in_.pods) {
      if (!p.pod->deleting()) Delete(*p.pod, grace, "the job is suspended");
    }
    UpdateCounts();
  }

  // The grace period the pods of an earlier attempt are deleted with: a disruption that ended it
  // (maintenance, preemption) gives them time to checkpoint, also when the operator stopped
  // between writing the decision and deleting the pods; otherwise their own.
  std::optional<int64_t> GraceEnding(int32_t attempt) const {
    const std::vector<FaultRecord>& faults = plan_.status.faults;
    for (auto it = faults.rbegin(); it != faults.rend(); ++it) {
      if (it->attempt != attempt) continue;
      if (it->kind == "Maintenance" || it->kind == "Preempted") {
        return spec_->fault_tolerance.maintenance_grace_period_seconds;
      }
      break;
    }
    return std::nullopt;
  }

  // In-place restart: the pods are all created again, with the next program generation, so the
  // program can tell this start from the last; an in-place restart under way is over.
  void NewGeneration() {
    std::optional<InPlaceStatus>& p = plan_.status.in_place;
    if (!p) return;
    p->generation++;
    p->barrier_since.reset();
  }

  // What a pod says about its replica: in place, only a failure of the current generation counts
  // (an earlier one was acted on) and only a program of the current generation is ready.
  PodState Observe(const cache::PodInfo& pod, Termination* t) const {
    const std::optional<InPlaceStatus>& p = plan_.status.in_place;
    if (spec_ != nullptr && spec_->fault_tolerance.restart == RestartMode::kInPlace && p) {
      return ObserveInPlacePod(pod, p->generation, t);
    }
    return ObservePod(pod, t);
  }

  // Whether the failure this pod shows was counted already: the same failed pod (the cache lags
  // its deletion), or in place, the same pod in a generation already restarted.
  // Only a program's failure is told apart by generation: a failed pod (evicted) or init container
  // is replaced, so its uid identifies it.
  bool Counted(const ObservedPod& p, const Termination& t) const {
    const JobStatus& s = plan_.status;
    auto it = s.worker_restarts.find(ReplicaKey(p.type, p.index));
    if (it == s.worker_restarts.end() || it->second.pod_uid != p.pod->uid) return false;
    if (spec_->fault_tolerance.restart != RestartMode::kInPlace || !s.in_place ||
        !ProgramFailure(t)) {
      return true;
    }
    return it->second.generation >= s.in_place->generation;
  }

  // The program's own container failed (not the pod, not an init container).
  static bool ProgramFailure(const Termination& t) {
    return !t.init_container && !t.container.empty();
  }

  // The grace period a stop order gives a program: the workers' terminationGracePeriodSeconds,
  // which the template may set, else faultTolerance.maintenanceGracePeriodSeconds (BuildPod).
  int64_t ProgramGraceSeconds() const {
    const ReplicaSpec* worker = spec_->Replica(ReplicaType::kWorker);
    if (worker != nullptr && worker->template_.is_object()) {
      const Json pod = worker->template_.value("spec", Json::object());
      if (auto it = pod.find("terminationGracePeriodSeconds");
          it != pod.end() && it->is_number_integer()) {
        return it->get<int64_t>();
      }
    }
    return spec_->fault_tolerance.maintenance_grace_period_seconds;
  }

  // In-place restart: tells every pod the generation to run (a pod running an older one stops
  // it), opens the barrier once every pod waits there, and falls back to recreating the pods when
  // it stays closed for barrierTimeoutSeconds. True when it falls back: the plan is complete.
  bool InPlaceBarrier(
      const std::map<std::pair<ReplicaType, int32_t>, const ObservedPod*>& current) {
    JobStatus& s = plan_.status;
    InPlaceStatus& p = *s.in_place;
    const int32_t g = p.generation;
    int total = 0, waiting = 0;
    bool all_there = true;
    for (ReplicaType type : {ReplicaType::kMaster, ReplicaType::kWorker}) {
      for (int32_t i = 0; i < spec_->Replicas(type); ++i) {
        ++total;
        auto it = current.find({type, i});
        if (it == current.end() || it->second->pod->deleting()) {
          all_there = false;
          continue;
        }
        const ProgramObservation o = ObserveProgram(*it->second->pod);
        if (o.at_barrier && o.last_generation < g) ++waiting;
      }
    }
    if (p.barrier_since) {
      const auto waited = now_ - *p.barrier_since;
      // Counted once the programs had their grace period to stop.
      const int64_t grace = ProgramGraceSeconds();
      const auto timeout =
          std::chrono::seconds(spec_->fault_tolerance.barrier_timeout_seconds + grace);
      if (all_there && waiting == total) {
        p.barrier_since.reset();
        Event(false, "BarrierOpened",
              "all " + std::to_string(total) + " pods stopped generation " + std::to_string(g - 1) +
                  " and wait at the barrier; generation " + std::to_string(g) + " starts");
      } else if (waited >= timeout) {
        p.barrier_since.reset();
        const std::string why = std::to_string(waiting) + " of " + std::to_string(total) +
                                " pods reached the barrier of generation " + std::to_string(g) +
                                " within " +
                                std::to_string(spec_->fault_tolerance.barrier_timeout_seconds) +
                                "s (spec.faultTolerance.barrierTimeoutSeconds) after the " +
                                std::to_string(grace) + "s grace period of their programs";
        Event(true, "BarrierTimeout", why + "; falling back to recreating the pods");
        for (const auto& [id, pod] : current) {
          if (!pod->pod->deleting()) {
            Delete(*pod->pod, std::nullopt,
                   "the barrier of generation " + std::to_string(g) + " timed out");
          }
        }
        s.SetCondition(condition::kReady, false, "BarrierTimeout", why + "; recreating the pods",
                       now_, gen_);
        return true;
      } else {
        Requeue(std::chrono::duration_cast<Duration>(timeout - waited));
        s.SetCondition(condition::kReady, false, "BarrierClosed",
                       std::to_string(waiting) + " of " + std::to_string(total) +
                           " pods wait at the barrier of generation " + std::to_string(g),
                       now_, gen_);
      }
    }
    const bool open = !p.barrier_since;
    for (const auto& [id, pod] : current) {
      const cache::PodInfo& info = *pod->pod;
      if (info.deleting()) continue;
      if (info.ordered_generation < g || (open && info.barrier_generation < g)) {
        plan_.annotate.push_back({info.name, info.uid, g,
                                  open ? std::optional<int32_t>(g) : std::nullopt, std::nullopt});
      }
    }
    return false;
  }

  // The whole job moves on to a new attempt, which queues once the pods of this one are gone
  // (first when `reissued`, else by priority); `reason` and `why` go on Admitted and Ready.
  void NextAttempt(bool reissued, std::string_view reason, const std::string& why) {
    JobStatus& s = plan_.status;
    s.attempt++;
    s.reissued = reissued;
    s.worker_restarts.clear();
    s.slice_recovery.reset();
    NewGeneration();
    s.phase = Phase::kRestarting;
    s.admitted_at.reset();
    s.running_at.reset();
    s.SetCondition(condition::kAdmitted, false, reason,
                   "attempt " + std::to_string(s.attempt) +
                       " waits for the pods of the previous attempt to be gone",
                   now_, gen_);
    s.SetCondition(condition::kReady, false, reason, why, now_, gen_);
  }

  // The queue preempts the admitted attempt for a job of higher priority: stopped like a
  // maintenance event (the grace period to checkpoint), not counted as a retry, and the next
  // attempt queues by its priority (not first, as a re-issue: it would take the capacity back
  // from the job it was stopped for).
  void Preempt(const PreemptOrder& order) {
    JobStatus& s = plan_.status;
    const int64_t grace = spec_->fault_tolerance.maintenance_grace_period_seconds;
    FaultRecord f;
    f.time = now_;
    f.attempt = s.attempt;
    f.kind = "Preempted";
    f.reason = "Preempted";
    f.message = Bounded(order.message);
    f.action = "PreemptJob";
    s.AddFault(std::move(f));
    s.preemptions++;
    s.preempted_by = order.by;
    s.preempted_at = now_;
    const std::string why = Bounded(order.message);
    s.SetCondition(condition::kPreempted, true, "Preempted", why, now_, gen_);
    NextAttempt(/*reissued=*/false, "Preempted", why);
    Event(true, "Preempted",
          why + "; pods stopped with a grace period of " + std::to_string(grace) + "s; attempt " +
              std::to_string(s.attempt) +
              " queues again by priority (a disruption: no retry used)");
    for (const ObservedPod& p : in_.pods) {
      if (!p.pod->deleting()) Delete(*p.pod, grace, "the job is preempted");
    }
    UpdateCounts();
  }

  // spec.suspend cleared: the job queues again (its pods, if still going, go first). Like a
  // batch/v1 Job, startTime is reset, so activeDeadlineSeconds counts from the next admission.
  void Resume() {
    JobStatus& s = plan_.status;
    s.phase = Phase::kQueued;
    s.queued_at = now_;
    s.start_time.reset();
    s.SetCondition(condition::kSuspended, false, "JobResumed",
                   "spec.suspend was cleared: the job queues again", now_, gen_);
    s.SetCondition(condition::kAdmitted, false, in_.not_admitted_reason, in_.not_admitted_message,
                   now_, gen_);
    Event(false, "Resumed", "attempt " + std::to_string(s.attempt) + " queued again");
  }

  // spec.activeDeadlineSeconds, counted from status.startTime (the first admission). startTime
  // has whole seconds, so the count starts at the end of its second: never early.
  bool DeadlineExceeded() {
    JobStatus& s = plan_.status;
    const std::optional<int64_t> limit = spec_->active_deadline_seconds;
    if (!limit || !s.start_time) return false;
    const WallTime deadline = *s.start_time + std::chrono::seconds(1 + *limit);
    if (now_ < deadline) {
      Requeue(std::chrono::duration_cast<Duration>(deadline - now_));
      return false;
    }
    Finish(false, "DeadlineExceeded",
           "the job was active longer than its activeDeadlineSeconds of " + std::to_string(*limit) +
               "s (first admitted at " + cache::FormatRfc3339(*s.start_time) + ")");
    s.queue_position.reset();
    return true;
  }

  // spec.ttlSecondsAfterFinished, counted from status.completionTime (whole seconds: from the
  // end of its second, never early).
  void ExpireAfterFinish() {
    const std::optional<WallTime> expiry = FinishedJobExpiry(*spec_, plan_.status);
    if (!expiry) return;
    const WallTime at = *expiry;
    if (now_ >= at) {
      plan_.delete_job = true;
    } else {
      Requeue(std::chrono::duration_cast<Duration>(at - now_));
    }
  }

  void Requeue(Duration after) {
    if (after < Duration::zero()) after = Duration::zero();
    if (!plan_.requeue_after || after < *plan_.requeue_after) plan_.requeue_after = after;
  }

  // A re-issue for a faulty node is written before the node is cordoned; an operator stopped
  // in between loses the cordon, and with it nothing keeps the next attempt (and other jobs) off
  // the node. While the re-issued attempt has not started running, the node of the fault that
  // ended the previous attempt is cordoned again if it is still unhealthy and not cordoned, with
  // the same evidence (the Cordoner's rules apply as the first time).
  void RedoLostCordon() {
    const JobStatus& s = plan_.status;
    if (!in_.node_health || !in_.node_cordoned || !spec_->fault_tolerance.cordon_faulty_nodes) {
      return;
    }
    if (s.attempt < 2 || s.phase == Phase::kRunning || IsTerminal(s.phase)) return;
    for (const FaultRecord& f : s.faults) {
      if (f.attempt != s.attempt - 1 || (f.action != "ReissueJob" && f.action != "ReplaceSlice") ||
          f.node.empty() || (f.kind != "NodeUnhealthy" && f.kind != "NodeLost")) {
        continue;
      }
      if (std::find(s.cordoned_nodes.begin(), s.cordoned_nodes.end(), f.node) !=
              s.cordoned_nodes.end() ||
          in_.node_cordoned(f.node)) {
        continue;
      }
      const NodeHealth h = in_.node_health(f.node);
      if (h.verdict != NodeVerdict::kUnhealthy) continue;
      bool listed = false;
      for (const NodeToCordon& c : plan_.cordon) listed = listed || c.node == f.node;
      if (listed) continue;
      plan_.cordon.push_back({f.node, f.kind, h.message, "",
                              job_.uid + "/" + std::to_string(f.attempt) + "/" + h.reason});
    }
  }

  void RecordCordonedNodes() {
    std::vector<std::string>& nodes = plan_.status.cordoned_nodes;
    for (const std::string& node : in_.cordoned_nodes) {
      if (std::find(nodes.begin(), nodes.end(), node) == nodes.end()) nodes.push_back(node);
    }
    if (nodes.size() > kMaxCordonedNodes)
      nodes.erase(nodes.begin(), nodes.end() - kMaxCordonedNodes);
  }

  // A pod on a lost node (Ready Unknown, or the node deleted) never confirms a graceful delete:
  // its kubelet is gone. It is deleted gracefully first, as any other, because an unreachable
  // kubelet may still be running it (a network partition) and two live copies of one worker
  // must not overlap; once the grace period it was deleted with is over, it is force-deleted.
  void ForceIfLost(const cache::PodInfo& pod) {
    if (!in_.node_health || !pod.deleting() || pod.node_name.empty()) return;
    if (!in_.node_health(pod.node_name.view()).unreachable) return;
    if (now_ >= *pod.deletion_timestamp) {
      Delete(pod, 0, "its node is lost and the grace period it was deleted with is over");
    } else {
      // Timestamps have whole seconds: come back just after the deadline.
      Requeue(std::chrono::duration_cast<Duration>(*pod.deletion_timestamp - now_) +
              std::chrono::milliseconds(200));
    }
  }

  // `grace` for a pod, or kBriefGraceSeconds when its node is lost: its kubelet cannot deliver
  // SIGTERM, and the pod's own grace period would only delay what comes next.
  std::optional<int64_t> OnLostNode(const cache::PodInfo& pod, std::optional<int64_t> grace) const {
    if (!in_.node_health || pod.node_name.empty() ||
        !in_.node_health(pod.node_name.view()).unreachable) {
      return grace;
    }
    return std::min(grace.value_or(kBriefGraceSeconds), kBriefGraceSeconds);
  }

  bool Removing(const cache::PodInfo& pod) const {
    return std::any_of(plan_.remove.begin(), plan_.remove.end(),
                       [&pod](const PodToDelete& d) { return d.uid == pod.uid; });
  }

  void Delete(const cache::PodInfo& pod, std::optional<int64_t> grace, std::string why) {
    for (const PodToDelete& d : plan_.remove) {
      if (d.uid == pod.uid) return;
    }
    plan_.remove.push_back({pod.name, pod.uid, grace, std::move(why)});
  }

  // Stops every pod still holding resources; terminated pods stay for their logs.
  void StopActivePods(const std::string& why) {
    for (const ObservedPod& p : in_.pods) {
      if (!p.pod->terminated() && !p.pod->deleting()) Delete(*p.pod, std::nullopt, why);
    }
  }

  void Invalid(const std::string& message) {
    JobStatus& s = plan_.status;
    const Condition* valid = s.FindCondition(condition::kValid);
    if (valid == nullptr || valid->status != "False" || valid->message != message) {
      Event(true, "InvalidSpec", message);
    }
    s.SetCondition(condition::kValid, false, "InvalidSpec", message, now_, gen_);
    // A job that never started fails visibly (kubectl get shows Failed) but not for good: once
    // the spec is fixed it is queued. A job already running keeps its pods and waits for a fix.
    if (s.phase == Phase::kNone || s.phase == Phase::kQueued) {
      s.phase = Phase::kFailed;
      s.SetCondition(condition::kFailed, true, "InvalidSpec", message, now_, gen_);
    }
  }

  void Finish(bool success, const std::string& reason, const std::string& message) {
    JobStatus& s = plan_.status;
    s.phase = success ? Phase::kSucceeded : Phase::kFailed;
    s.completion_time = now_;
    s.slice_recovery.reset();
    s.SetCondition(success ? condition::kSucceeded : condition::kFailed, true, reason, message,
                   now_, gen_);
    s.SetCondition(condition::kReady, false, success ? "JobSucceeded" : "JobFailed",
                   "the job has finished", now_, gen_);
    Event(!success, success ? "Succeeded" : "Failed", message);
    StopActivePods(success ? "the job succeeded" : "the job failed");
  }

  void Fault(const ObservedPod& p, const Termination& t, std::string action,
             const std::string& item = "", const std::string& kind = "") {
    FaultRecord f;
    f.time = now_;
    f.attempt = plan_.status.attempt;
    f.item = item;
    if (!kind.empty()) {
      f.kind = kind;
    } else if (t.container.empty()) {
      f.kind = t.reason.starts_with("Node") ? "NodeUnhealthy" : "PodFailed";
    } else if (t.init_container) {
      f.kind = t.container == kPreflightContainer ? "PreflightFailed" : "InitContainerFailed";
    } else {
      f.kind = "ContainerFailed";
    }
    f.node = std::string(p.pod->node_name.view());
    f.pod = p.pod->name;
    if (spec_ != nullptr && spec_->Multislice() && p.type == ReplicaType::kWorker) {
      f.slice = spec_->SliceOf(p.index);
    }
    f.container = t.container;
    f.exit_code = t.exit_code;
    f.reason = t.reason;
    f.message = Bounded(t.message);
    f.action = std::move(action);
    plan_.status.AddFault(std::move(f));
  }

  // The job's current attempt is admitted: converge its pods.
  void Active(bool old_left) {
    JobStatus& s = plan_.status;
    const JobSpec& spec = *spec_;
    const bool in_place = spec.fault_tolerance.restart == RestartMode::kInPlace;
    if (in_place && !s.in_place) s.in_place = InPlaceStatus{.generation = 1, .barrier_since = {}};
    std::map<std::pair<ReplicaType, int32_t>, const ObservedPod*> current;
    for (const ObservedPod& p : in_.pods) {
      if (p.attempt != s.attempt) continue;
      if (p.index < 0 || p.index >= spec.Replicas(p.type)) {
        if (!p.pod->deleting()) Delete(*p.pod, std::nullopt, "no such replica in the spec");
        continue;
      }
      current[{p.type, p.index}] = &p;
    }

    struct Failure {
      const ObservedPod* pod;
      Termination termination;
    };
    std::vector<Failure> failures;
    std::vector<PodToCreate> missing;
    int expected = 0, done = 0;
    bool decider_succeeded = false;
    int workers_succeeded = 0;
    for (ReplicaType type : {ReplicaType::kMaster, ReplicaType::kWorker}) {
      for (int32_t i = 0; i < spec.Replicas(type); ++i) {
        ++expected;
        const bool is_decider = spec.success_policy == SuccessPolicy::kMaster &&
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
            if (is_decider) decider_succeeded = true;
            break;
          case PodState::kReady:
            ++done;
            break;
          case PodState::kFailed:
            failures.push_back({&p, std::move(t)});
            break;
          case PodState::kPending:
            break;
        }
      }
    }

    // 0. Faults of the nodes the pods run on (fault table): maintenance moves the job without
    // using a retry; an unhealthy or lost node is cordoned and the job re-issued.
    if (NodeFaults(current)) {
      UpdateCounts();
      return;
    }
    UnpinIfUnschedulable(current);
    if (ReleaseIfUnschedulable(current)) {
      UpdateCounts();
      return;
    }
    // Failed pre-flight checks: the reports say which items and whether the node is at fault.
    std::vector<std::pair<const ObservedPod*, const Termination*>> preflight;
    for (const Failure& f : failures) {
      if (!f.termination.init_container || f.termination.container != kPreflightContainer) {
        continue;
      }
      if (Counted(*f.pod, f.termination)) continue;
      preflight.emplace_back(f.pod, &f.termination);
    }
    if (!preflight.empty()) {
      if (auto wait = PreflightPending(current)) {
        Requeue(*wait);
        UpdateCounts();
        return;
      }
      PreflightFailed(preflight);
      UpdateCounts();
      return;
    }

    // 1. A permanent failure ends the job, once its node has had the fault attribution window
    // to be found faulty (NodeFaults above takes that case); until then it is held.
    std::vector<const Failure*> held;
    for (const Failure& f : failures) {
      const std::string key = ReplicaKey(f.pod->type, f.pod->index);
      if (Counted(*f.pod, f.termination)) continue;  // already counted
      if (!f.termination.exit_code ||
          ClassifyExit(spec.fault_tolerance.exit_codes, *f.termination.exit_code,
                       f.termination.reason) != ExitClass::kPermanent) {
        continue;
      }
      const std::optional<WallTime> until = AttributionDeadline(*f.pod, f.termination);
      if (until && now_ < *until) {
        held.push_back(&f);
        Requeue(std::chrono::duration_cast<Duration>(*until - now_));
        continue;
      }
      std::string waited;
      if (until) {
        // Final on the node's health: every failed pod's node is read again before it stands
        // (another one found faulty would make the whole attempt the hardware's).
        plan_.confirm_nodes.emplace_back(f.pod->pod->node_name.view());
        for (const Failure& other : failures) {
          const std::string node(other.pod->pod->node_name.view());
          if (!node.empty() && std::find(plan_.confirm_nodes.begin(), plan_.confirm_nodes.end(),
                                         node) == plan_.confirm_nodes.end()) {
            plan_.confirm_nodes.push_back(node);
          }
        }
        waited = "; its node " + std::string(f.pod->pod->node_name.view()) +
                 " was not found faulty within the fault attribution window of " +
                 std::to_string(spec.fault_tolerance.fault_attribution_seconds) + "s";
      }
      Fault(*f.pod, f.termination, "FailJob");
      Finish(false, "PermanentError",
             Describe(*f.pod, spec_) + ": " + DescribeExit(f.termination) + "; exit code " +
                 std::to_string(*f.termination.exit_code) +
                 " is permanent, the job is not retried" + waited);
      s.worker_restarts.erase(key);
      UpdateCounts();
      return;
    }
    auto is_held = [&held](const Failure& f) {
      return std::find(held.begin(), held.end(), &f) != held.end();
    };

    // 2. Success (not while a permanent failure awaits its node's verdict: it came first).
    if (!held.empty()) {
      // Neither success nor preemption is decided while a failure awaits its verdict.
    } else if (spec.success_policy == SuccessPolicy::kMaster && decider_succeeded) {
      Finish(true, "MasterSucceeded",
             std::string(spec.master ? "the master" : "worker 0") + " exited 0" +
                 (expected > 1 ? "; the remaining pods are stopped" : ""));
      UpdateCounts();
      return;
    }
    if (held.empty() && spec.success_policy == SuccessPolicy::kAllWorkers &&
        workers_succeeded == spec.Replicas(ReplicaType::kWorker)) {
      Finish(true, "AllWorkersSucceeded",
             "all " + std::to_string(spec.Replicas(ReplicaType::kWorker)) + " workers exited 0");
      UpdateCounts();
      return;
    }

    // The queue preempts the attempt (after node faults, pre-flight verdicts, a permanent
    // failure and success, which all take precedence: a job that just finished is not restarted).
    if (held.empty() && in_.preempt && in_.preempt->attempt == s.attempt) {
      Preempt(*in_.preempt);
      return;
    }

    // 3. Retryable failures: restart within the worker's budget, then re-issue. In place (the
    // program restarts in every pod behind a barrier) or by recreating the failed worker's pod.
    bool restarted = false;
    bool gang_restart = false;
    for (const Failure& f : failures) {
      if (is_held(f)) continue;
      const std::string key = ReplicaKey(f.pod->type, f.pod->index);
      RestartRecord& record = s.worker_restarts[key];
      if (in_place && Counted(*f.pod, f.termination)) {
        // A failed pod (not its program) counted already: it goes, and its replacement waits at
        // the barrier.
        if (!ProgramFailure(f.termination)) Delete(*f.pod->pod, std::nullopt, "it failed");
        continue;
      }
      if (in_place && record.count < spec.fault_tolerance.max_worker_restarts) {
        const int32_t max_restarts = spec.fault_tolerance.max_worker_restarts;
        record.count++;
        record.pod_uid = f.pod->pod->uid;
        record.node = std::string(f.pod->pod->node_name.view());
        record.generation = s.in_place->generation;
        Fault(*f.pod, f.termination, "RestartInPlace");
        // A pod that failed as a whole (evicted) or in an init container cannot restart in place:
        // it is created again, and waits at the barrier with the others.
        if (!ProgramFailure(f.termination)) {
          Delete(*f.pod->pod, std::nullopt, "it failed and is created again to join the restart");
        }
        Event(true, "WorkerRestarted",
              Describe(*f.pod, spec_) + ": " + DescribeExit(f.termination) +
                  "; restarting the program in place in every pod, generation " +
                  std::to_string(s.in_place->generation + 1) + " (" + std::to_string(record.count) +
                  " of " + std::to_string(max_restarts) + " restarts)");
        gang_restart = true;
        continue;
      }
      if (!in_place && record.pod_uid == f.pod->pod->uid) {
        // Counted before the operator could delete it (or the cache lags the delete).
        Delete(*f.pod->pod, std::nullopt, "it failed and is restarted");
        continue;
      }
      const int32_t max_restarts = spec.fault_tolerance.max_worker_restarts;
      if (record.count < max_restarts) {
        record.count++;
        record.pod_uid = f.pod->pod->uid;
        record.node = std::string(f.pod->pod->node_name.view());
        Fault(*f.pod, f.termination, "RestartWorker");
        Event(true, "WorkerRestarted",
              Describe(*f.pod, spec_) + ": " + DescribeExit(f.termination) +
                  "; restarting it in place (" + std::to_string(record.count) + " of " +
                  std::to_string(max_restarts) + " restarts)");
        Delete(*f.pod->pod, std::nullopt, "it failed and is restarted");
        restarted = true;
        continue;
      }
      // Out of restarts while a permanent exit awaits its node's verdict: that exit came first
      // and decides (a failure, or the hardware's re-issue); this one waits with it.
      if (!held.empty()) continue;
      const std::string why = Describe(*f.pod, spec_) + ": " + DescribeExit(f.termination) +
                              "; it has used its " + std::to_string(max_restarts) + " restarts";
      Reissue(*f.pod, f.termination, why, /*counts=*/true, std::nullopt, "", "", {f.pod});
      UpdateCounts();
      return;
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

    // 4. Create what is missing, once no pod of an earlier attempt is left; a restarted worker
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
      plan_.create = missing;
    }

    // 5. Running when every replica is up.
    const int total = expected;
    if (!held.empty()) {
      AwaitAttribution(*held.front()->pod, held.front()->termination);
    } else if (s.in_place && s.in_place->barrier_since) {
      // Restarting in place: InPlaceBarrier set Ready.
    } else if (done == total && !restarted) {
      if (s.phase != Phase::kRunning) {
        s.phase = Phase::kRunning;
        s.running_at = now_;
        s.slice_recovery.reset();  // every pod is up: the kept nodes are no longer needed
        Event(false, "Running",
              "all " + std::to_string(total) + " pods of attempt " + std::to_string(s.attempt) +
                  " are ready");
      }
      s.SetCondition(condition::kReady, true, "AllWorkersReady",
                     std::to_string(total) + " of " + std::to_string(total) + " pods ready", now_,
                     gen_);
    } else {
      s.SetCondition(condition::kReady, false, "WorkersNotReady",
                     std::to_string(done) + " of " + std::to_string(total) + " pods ready", now_,
                     gen_);
    }
    UpdateCounts();
  }

  // When a permanent exit of `p` is decided if its node is not found faulty first: the
  // container's finishedAt plus the fault attribution window. std::nullopt: decided at once (no
  // window, OOMKilled, no finishedAt, or the pod never ran on a node).
  std::optional<WallTime> AttributionDeadline(const ObservedPod& p, const Termination& t) const {
    const int64_t window = spec_->fault_tolerance.fault_attribution_seconds;
    if (window <= 0 || t.reason == "OOMKilled" || !t.finished_at || p.pod->node_name.empty()) {
      return std::nullopt;
    }
    return *t.finished_at + std::chrono::seconds(window);
  }

  // Ready=False while a permanent exit awaits its node's verdict, with an Event the first time.
  void AwaitAttribution(const ObservedPod& p, const Termination& t) {
    JobStatus& s = plan_.status;
    const std::optional<WallTime> until = AttributionDeadline(p, t);
    const std::string node(p.pod->node_name.view());
    const std::string message =
        Describe(p, spec_) + ": " + DescribeExit(t) + "; exit code " +
        std::to_string(t.exit_code.value_or(0)) + " is permanent unless node " + node +
        " is found faulty: waiting until " + (until ? cache::FormatRfc3339(*until) : "now") + " (" +
        std::to_string(spec_->fault_tolerance.fault_attribution_seconds) +
        "s after the exit) for its health before failing the job";
    const Condition* ready = s.FindCondition(condition::kReady);
    if (ready == nullptr || ready->reason != "AwaitingFaultAttribution" ||
        ready->message != Bounded(message)) {
      Event(true, "AwaitingFaultAttribution", message);
    }
    s.SetCondition(condition::kReady, false, "AwaitingFaultAttribution", Bounded(message), now_,
                   gen_);
  }

  // The termination recorded when a node verdict decides a pod's fault: the program's exit
  // (container, code) when it exited, with a message naming both.
  Termination NodeVerdictAfterExit(const ObservedPod& p, const NodeHealth& health) const {
    Termination exit;
    Termination t;
    t.reason = health.reason;
    t.message = health.message;
    if (Observe(*p.pod, &exit) == PodState::kFailed && !exit.container.empty()) {
      t.container = exit.container;
      t.init_container = exit.init_container;
      t.exit_code = exit.exit_code;
      t.finished_at = exit.finished_at;
      t.message = DescribeExit(exit) + "; then " + health.message;
    }
    return t;
  }

  // The node a missing replica goes back to: the node its last counted restart ran on, while
  // that node is healthy and not cordoned. "" = anywhere.
  // A node that does not take it is forgotten, so that a recorded node always means the pod was
  // created pinned to it.
  std::string RestartNode(ReplicaType type, int32_t index) {
    auto& restarts = plan_.status.worker_restarts;
    auto it = restarts.find(ReplicaKey(type, index));
    if (it == restarts.end() || it->second.count == 0 || it->second.node.empty()) return "";
    if (!NodeTakesRestart(it->second.node)) it->second.node.clear();
    return it->second.node;
  }

  bool NodeTakesRestart(const std::string& node) const {
    if (in_.node_cordoned && in_.node_cordoned(node)) return false;
    return !in_.node_health || in_.node_health(node).verdict == NodeVerdict::kHealthy;
  }

  // A restarted worker pinned to its node that the scheduler cannot place there (the node was
  // cordoned or turned unhealthy since, or its chips were taken): deleted, and its node
  // forgotten, so that it is created again wherever it fits. Before ReleaseIfUnschedulable, so
  // one pinned pod does not cost the whole attempt its admission.
  void UnpinIfUnschedulable(
      const std::map<std::pair<ReplicaType, int32_t>, const ObservedPod*>& current) {
    auto& restarts = plan_.status.worker_restarts;
    for (const auto& [id, p] : current) {
      if (p->pod->deleting() || !p->pod->node_name.empty() || !p->pod->unschedulable) continue;
      auto it = restarts.find(ReplicaKey(p->type, p->index));
      if (it == restarts.end() || it->second.node.empty() || it->second.pod_uid == p->pod->uid) {
        continue;
      }
      Delete(*p->pod, std::nullopt,
             "it was pinned to node " + it->second.node + ", where it cannot be scheduled" +
                 (p->pod->message.empty() ? std::string() : " (" + p->pod->message.str() + ")") +
                 "; it is created again elsewhere");
      it->second.node.clear();
    }
  }

  // Pods on nodes under maintenance or unhealthy. Returns whether a decision was taken.
  bool NodeFaults(const std::map<std::pair<ReplicaType, int32_t>, const ObservedPod*>& current) {
    if (!in_.node_health) return false;
    const ObservedPod* maintenance = nullptr;
    NodeHealth maintenance_health;
    std::vector<const ObservedPod*> maintained;  // every pod on a node under maintenance
    std::vector<std::pair<const ObservedPod*, NodeHealth>> unhealthy;
    for (const auto& [id, p] : current) {
      if (p->pod->deleting() || p->pod->node_name.empty()) continue;
      if (p->pod->phase == cache::PodPhase::kSucceeded) continue;
      NodeHealth h = in_.node_health(p->pod->node_name.view());
      if (h.changes_in && !p->pod->terminated()) Requeue(*h.changes_in);  // maintenance ahead
      // A failed pod counts too: its exit awaits the node's verdict (fault attribution).
      const bool failed = p->pod->terminated() && Observe(*p->pod, nullptr) == PodState::kFailed;
      if (h.verdict == NodeVerdict::kMaintenance && (!p->pod->terminated() || failed)) {
        maintained.push_back(p);
        if (maintenance == nullptr) {
          maintenance = p;
          maintenance_health = h;
        }
      } else if (h.verdict == NodeVerdict::kUnhealthy || h.verdict == NodeVerdict::kMissing) {
        unhealthy.emplace_back(p, std::move(h));
      }
    }
    if (!unhealthy.empty()) {
      // The culprit: a pod whose program exited on the faulty node, else the first one.
      auto named = unhealthy.begin();
      for (auto it = unhealthy.begin(); it != unhealthy.end(); ++it) {
        if (Observe(*it->first->pod, nullptr) == PodState::kFailed) {
          named = it;
          break;
        }
      }
      const auto& [culprit, health] = *named;
      bool lost_any = false;  // a node whose kubelet is gone
      for (const auto& [p, h] : unhealthy) {
        const std::string node(p->pod->node_name.view());
        const bool lost = h.unreachable;
        lost_any = lost_any || lost;
        bool listed = false;
        for (const NodeToCordon& c : plan_.cordon) listed = listed || c.node == node;
        if (!listed && spec_->fault_tolerance.cordon_faulty_nodes &&
            h.verdict != NodeVerdict::kMissing) {
          plan_.cordon.push_back(
              {node, lost ? "NodeLost" : "NodeUnhealthy", h.message, "",
               job_.uid + "/" + std::to_string(plan_.status.attempt) + "/" + h.reason});
        }
      }
      std::vector<const ObservedPod*> touched;
      for (const auto& [p, h] : unhealthy) touched.push_back(p);
      Termination t = NodeVerdictAfterExit(*culprit, health);
      Reissue(*culprit, t,
              Describe(*culprit, spec_) + ": " + t.message + (lost_any ? " (lost)" : ""),
              /*counts=*/true, std::nullopt, "", health.unreachable ? "NodeLost" : "NodeUnhealthy",
              touched);
      return true;
    }
    if (maintenance != nullptr) {
      Termination t = NodeVerdictAfterExit(*maintenance, maintenance_health);
      Reissue(*maintenance, t, Describe(*maintenance, spec_) + ": " + t.message,
              /*counts=*/false, spec_->fault_tolerance.maintenance_grace_period_seconds, {}, "",
              maintained);
      return true;
    }
    return false;
  }

  // A worker of the admitted attempt has been unschedulable for kUnschedulableRelease: the
  // capacity the queue counted was taken in the meantime (another scheduler's pod, a node gone).
  // The admission is released: the attempt's pods are removed and it queues again first, like a
  // re-issue (and with a re-issue's queue timeout), without using a retry.
  bool ReleaseIfUnschedulable(
      const std::map<std::pair<ReplicaType, int32_t>, const ObservedPod*>& current) {
    JobStatus& s = plan_.status;
    if (!in_.release_unschedulable) return false;
    if (!s.admitted_at || now_ - *s.admitted_at < kUnschedulableRelease) return false;
    const ObservedPod* stuck = nullptr;
    for (const auto& [id, p] : current) {
      if (!p->pod->deleting() && !Removing(*p->pod) && p->pod->unschedulable &&
          p->pod->node_name.empty()) {
        stuck = p;
        break;
      }
    }
    if (stuck == nullptr) return false;
    const std::string why =
        Describe(*stuck, spec_) + " cannot be scheduled" +
        (stuck->pod->message.empty() ? std::string() : " (" + stuck->pod->message.str() + ")") +
        "; the capacity counted at admission was taken";
    s.reissued = true;
    s.phase = Phase::kRestarting;
    s.admitted_at.reset();
    s.running_at.reset();
    s.node_pools.clear();
    s.slice_recovery.reset();  // the attempt queues again as a whole
    NewGeneration();           // its pods are all created again
    s.SetCondition(condition::kAdmitted, false, "AdmissionReleased",
                   why + "; attempt " + std::to_string(s.attempt) + " queues again first", now_,
                   gen_);
    s.SetCondition(condition::kReady, false, "AdmissionReleased", why, now_, gen_);
    Event(true, "AdmissionReleased",
          why + "; releasing the admission, attempt " + std::to_string(s.attempt) +
              " queues again with first priority (no retry used)");
    for (const ObservedPod& p : in_.pods) {
      if (p.attempt == s.attempt && !p.pod->deleting()) {
        Delete(*p.pod, kBriefGraceSeconds, "the admission was released");
      }
    }
    return true;
  }

  // When some pods of the attempt failed their pre-flight checks while scheduled peers are still
  // running theirs, the time left to wait for the peers' verdicts (see kPreflightSettle).
  std::optional<Duration> PreflightPending(
      const std::map<std::pair<ReplicaType, int32_t>, const ObservedPod*>& current) const {
    const JobStatus& s = plan_.status;
    if (!s.admitted_at) return std::nullopt;
    const auto deadline = *s.admitted_at + kPreflightSettle;
    if (now_ >= deadline) return std::nullopt;
    for (const auto& [id, p] : current) {
      const cache::PodInfo& pod = *p->pod;
      if (pod.deleting() || pod.terminated() || pod.node_name.empty()) continue;
      const cache::ContainerInfo* init = pod.FindInitContainer(kPreflightContainer);
      if (init != nullptr && init->state != cache::ContainerState::kTerminated) {
        return std::chrono::duration_cast<Duration>(deadline - now_);
      }
    }
    return std::nullopt;
  }

  // Pre-flight init containers failed (one or several pods of the attempt, seen together). Each
  // report (the termination message) names the failed items and whether the node or the job's
  // configuration is at fault; the nodes at fault are cordoned (all of them in one plan, so the
  // circuit breaker sees the whole pattern) and the job is re-issued once.
  void PreflightFailed(
      const std::vector<std::pair<const ObservedPod*, const Termination*>>& failed) {
    std::string nodes_at_fault;
    std::string all_items;
    const ObservedPod* culprit = nullptr;
    Termination shown;
    std::string culprit_items;
    bool culprit_node_fault = false;
    bool job_at_fault = true;  // every report readable, every failed item the job's own settings
    std::string first_detail;  // "item: message" of the first failed item
    for (const auto& [p, t] : failed) {
      const std::optional<preflight::Report> report = preflight::ParseReport(t->message);
      std::string items;
      bool blames_node = false;  // an item that speaks about the node, not the job's settings
      const ReplicaSpec* replica = spec_->Replica(p->type);
      for (const preflight::ItemResult& result :
           report ? report->items : std::vector<preflight::ItemResult>{}) {
        if (result.passed) continue;
        blames_node =
            blames_node || (replica != nullptr && PreflightItemBlamesNode(result, *replica));
        const std::string& item = result.item;
        if (first_detail.empty() && !result.message.empty()) {
          first_detail = item + ": " + result.message;
        }
        if (!items.empty()) items += ",";
        items += item;
        if (("," + all_items + ",").find("," + item + ",") == std::string::npos) {
          all_items += (all_items.empty() ? "" : ",") + item;
        }
      }
      // The source requirements' cases 1 and 2: a node whose hardware (exit 10) or environment
      // (exit 11 with an item about the node) failed is isolated; the circuit breaker and the
      // cordon cap keep a failure that is everywhere from cordoning everything.
      const bool hardware = t->exit_code && *t->exit_code == preflight::kExitNodeFault;
      const bool node_fault =
          hardware || (t->exit_code && *t->exit_code == preflight::kExitConfigFault && blames_node);
      job_at_fault = job_at_fault && report && !items.empty() && !node_fault &&
                     t->exit_code == preflight::kExitConfigFault;
      const std::string node(p->pod->node_name.view());
      if (node_fault && !node.empty()) {
        nodes_at_fault += (nodes_at_fault.empty() ? "" : ", ") + node;
        if (spec_->fault_tolerance.cordon_faulty_nodes) {
          plan_.cordon.push_back(
              {node, "PreflightFailed",
               Describe(*p, spec_) + ": pre-flight check failed: " +
                   (items.empty() ? "no readable report" : items) + " on node " + node +
                   (hardware ? " (the node is at fault)" : " (the node's environment is at fault)"),
               items, p->pod->uid + "/" + (items.empty() ? "preflight" : items)});
        }
      }
      // The culprit named in faults[]: a node at fault first, then the first failure.
      if (culprit == nullptr || (node_fault && !culprit_node_fault)) {
        culprit = p;
        shown = *t;
        culprit_items = items;
        culprit_node_fault = node_fault;
      }
    }
    const std::string node(culprit->pod->node_name.view());
    shown.message =
        culprit_items.empty() ? std::string("no readable report") : "failed: " + culprit_items;
    std::string why = Describe(*culprit, spec_) + ": pre-flight check " + shown.message +
                      " on node " + (node.empty() ? "<none>" : node);
    if (failed.size() > 1) {
      why += "; " + std::to_string(failed.size()) + " pods failed pre-flight (" + all_items + ")";
    }
    if (job_at_fault) {
      // The job's own settings fail on every node: a re-issue would fail the same way.
      Fault(*culprit, shown, "FailJob", culprit_items);
      Finish(false, "PreflightConfigError",
             why + (first_detail.empty() ? "" : " (" + first_detail + ")") +
                 ": the job's own settings fail pre-flight on any node, so it is not re-issued "
                 "(no retry used); fix the spec");
      return;
    }
    why += nodes_at_fault.empty() ? " (the job's configuration is at fault)"
                                  : " (node at fault: " + nodes_at_fault + ")";
    std::vector<const ObservedPod*> touched;
    for (const auto& [p, t] : failed) touched.push_back(p);
    Reissue(*culprit, shown, why, /*counts=*/true, std::nullopt, culprit_items, "", touched);
  }

  // "slice 2", "slices 0, 1 and 3".
  static std::string SliceList(const std::vector<int32_t>& slices) {
    std::string out = slices.size() == 1 ? "slice " : "slices ";
    for (size_t i = 0; i < slices.size(); ++i) {
      if (i > 0) out += i + 1 == slices.size() ? " and " : ", ";
      out += std::to_string(slices[i]);
    }
    return out;
  }

  // The slices slice recovery keeps, e.g. "slices 0, 1 and 3".
  std::string KeptSlices() const {
    std::vector<int32_t> kept;
    const std::vector<int32_t> none;
    const std::vector<int32_t>& replaced =
        plan_.status.slice_recovery ? plan_.status.slice_recovery->slices : none;
    for (int32_t slice = 0; slice < spec_->tpu.slices; ++slice) {
      if (std::find(replaced.begin(), replaced.end(), slice) == replaced.end()) {
        kept.push_back(slice);
      }
    }
    return SliceList(kept);
  }

  // The slice a fault is confined to, when slice recovery replaces that slice alone: every pod
  // it touches is a worker of that one slice of a multislice job that holds a pool per slice.
  std::optional<int32_t> ConfinedSlice(const std::vector<const ObservedPod*>& touched) const {
    const JobSpec& spec = *spec_;
    if (!spec.Multislice() || spec.fault_tolerance.recovery != Recovery::kSlice ||
        !in_.replace_slices || touched.empty() ||
        plan_.status.node_pools.size() != static_cast<size_t>(spec.tpu.slices)) {
      return std::nullopt;
    }
    std::optional<int32_t> slice;
    for (const ObservedPod* p : touched) {
      if (p->type != ReplicaType::kWorker) return std::nullopt;
      const int32_t of = spec.SliceOf(p->index);
      if (slice && *slice != of) return std::nullopt;
      slice = of;
    }
    return slice;
  }

  // The node a worker of a slice kept by slice recovery is bound to again: the one it ran on,
  // while that node is healthy and schedulable; "" = placed by the scheduler in its pool.
  std::string KeptNode(ReplicaType type, int32_t index) {
    std::optional<SliceRecovery>& recovery = plan_.status.slice_recovery;
    if (!recovery || type != ReplicaType::kWorker || index < 0 ||
        static_cast<size_t>(index) >= recovery->nodes.size()) {
      return "";
    }
    std::string& node = recovery->nodes[static_cast<size_t>(index)];
    if (!node.empty() && !NodeTakesRestart(node)) node.clear();
    return node;
  }

  void Reissue(const ObservedPod& culprit, const Termination& t, const std::string& why,
               bool counts, std::optional<int64_t> grace = std::nullopt,
               const std::string& item = "", const std::string& kind = "",
               const std::vector<const ObservedPod*>& touched = {}) {
    JobStatus& s = plan_.status;
    const int32_t max_retries = spec_->fault_tolerance.max_job_retries;
    if (counts && s.job_retries >= max_retries) {
      Fault(culprit, t, "FailJob", item, kind);
      Finish(false, "RetriesExhausted",
             why + (max_retries == 0
                        ? "; re-issue is off (spec.faultTolerance.maxJobRetries or annotation " +
                              std::string(kJobRetryAnnotation) + ")"
                        : "; the job was already re-issued " + std::to_string(s.job_retries) +
                              " times (maxJobRetries " + std::to_string(max_retries) + ")"));
      UpdateCounts();
      return;
    }
    const std::optional<int32_t> slice = ConfinedSlice(touched);
    Fault(culprit, t, slice ? "ReplaceSlice" : "ReissueJob", item, counts ? kind : "Maintenance");
    if (counts) s.job_retries++;
    std::optional<SliceRecovery> recovery;
    if (slice) {
      // Where the kept slices' workers run now: their new pods are bound there again.
      recovery.emplace();
      recovery->slices = {*slice};
      const int32_t workers = spec_->Replicas(ReplicaType::kWorker);
      if (static_cast<size_t>(workers) <= kMaxRecoveryNodes) {
        recovery->nodes.resize(static_cast<size_t>(workers));
        bool any = false;
        for (const ObservedPod& p : in_.pods) {
          if (p.attempt != s.attempt || p.type != ReplicaType::kWorker || p.index < 0 ||
              p.index >= workers || spec_->SliceOf(p.index) == *slice || p.pod->node_name.empty()) {
            continue;
          }
          recovery->nodes[static_cast<size_t>(p.index)] = std::string(p.pod->node_name.view());
          any = true;
        }
        if (!any) recovery->nodes.clear();
      }
    }
    const bool kept_in_place =
        slice && s.in_place && spec_->fault_tolerance.restart == RestartMode::kInPlace;
    NextAttempt(/*reissued=*/true, "Reissued", why);
    if (kept_in_place) {
      recovery->nodes.clear();
      recovery->in_place = true;
      s.in_place->barrier_since = now_;  // the kept slices stop and wait for the replaced one
    }
    const std::string retry = counts ? " (retry " + std::to_string(s.job_retries) + " of " +
                                           std::to_string(max_retries) + ")"
                                     : " (a disruption: no retry used)";
    if (slice) {
      s.slice_recovery = std::move(recovery);
      s.node_pools[static_cast<size_t>(*slice)].clear();
      Event(true, "Reissued",
            why + "; replacing slice " + std::to_string(*slice) + " alone as attempt " +
                std::to_string(s.attempt) + retry + ": it gets a new node pool, " + KeptSlices() +
                (kept_in_place ? " keep theirs and their pods, whose program restarts in place"
                               : " keep theirs and restart on the nodes they hold"));
    } else {
      Event(true, "Reissued",
            why + "; re-issuing the job as attempt " + std::to_string(s.attempt) + retry);
    }
    for (const ObservedPod& p : in_.pods) {
      if (p.pod->deleting()) continue;
      if (kept_in_place && KeptInPlace(p)) {
        // Its program stops (the stop order of the next generation); the pod stays.
        plan_.annotate.push_back(
            {p.pod->name, p.pod->uid, s.in_place->generation, std::nullopt, std::nullopt});
        continue;
      }
      // Pods on a lost node are force-deleted once this grace period is over (ForceIfLost).
      Delete(*p.pod, OnLostNode(*p.pod, grace), "the job is re-issued");
    }
  }

  // Slice recovery in place: a pod of the previous attempt (or, moved already, of this one) in a
  // slice the attempt keeps, not being deleted: it stays, and its program restarts in place.
  bool KeptInPlace(const ObservedPod& p) const {
    const JobStatus& s = plan_.status;
    if (!s.slice_recovery || !s.slice_recovery->in_place || !s.in_place || p.pod->deleting() ||
        (p.attempt != s.attempt && p.attempt != s.attempt - 1)) {
      return false;
    }
    if (p.type != ReplicaType::kWorker) return true;
    const std::vector<int32_t>& replaced = s.slice_recovery->slices;
    return std::find(replaced.begin(), replaced.end(), spec_->SliceOf(p.index)) == replaced.end();
  }

  // replicaStatuses and readyWorkers from the pods of the current attempt.
  void UpdateCounts() {
    JobStatus& s = plan_.status;
    std::map<std::string, ReplicaCounts, std::less<>> counts;
    if (spec_ != nullptr) {
      if (spec_->master) counts["Master"];
      counts["Worker"];
    }
    for (const ObservedPod& p : in_.pods) {
      if (p.attempt != s.attempt) continue;
      ReplicaCounts& c = counts[std::string(ToString(p.type))];
      Termination t;
      const PodState state = Observe(*p.pod, &t);
      if (state == PodState::kSucceeded) {
        c.succeeded++;
      } else if (state == PodState::kFailed) {
        c.failed++;
      } else {
        c.active++;
        if (state == PodState::kReady && !p.pod->deleting()) c.ready++;
      }
    }
    std::erase_if(s.worker_restarts, [](const auto& entry) { return entry.second.count == 0; });
    for (const auto& [key, record] : s.worker_restarts) {
      const std::string type = key.substr(0, key.find('-'));
      counts[type].restarts += record.count;
    }
    s.replica_statuses = std::move(counts);
    if (spec_ != nullptr) {
      s.ready_workers = std::to_string(s.replica_statuses["Worker"].ready) + "/" +
                        std::to_string(spec_->Replicas(ReplicaType::kWorker));
    }
  }

  const LifecycleInput& in_;
  const cache::TPUJobInfo& job_;
  const int64_t gen_;
  const WallTime now_;
  const JobSpec* spec_ = nullptr;
  Plan plan_;
};

}  // namespace

bool PreflightItemBlamesNode(const preflight::ItemResult& item, const ReplicaSpec& replica) {
  if (item.passed) return false;
  if (item.fault == preflight::Fault::kNode) return true;
  if (item.item == preflight::kItemConfig) return false;  // the job's settings are invalid
  // Kubernetes gives a container a 64 MB /dev/shm unless the pod mounts a volume there: with
  // none, a small shm is the template's doing, the same on every node.
  if (item.item == preflight::kItemDiskShm) return MountsVolumeAt(replica, "/dev/shm");
  return true;
}

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

// The supervisor's termination message: {"state":"running","generation":3,"exit":0,...}.
struct SupervisorReport {
  std::string state;  // barrier, running, exited, stopped, terminated
  int32_t generation = 0;
  std::optional<int32_t> exit;
};
std::optional<SupervisorReport> ParseSupervisorReport(std::string_view message) {
  const Json j = Json::parse(message, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  auto state = j.find("state");
  auto generation = j.find("generation");
  if (state == j.end() || !state->is_string() || generation == j.end() ||
      !generation->is_number_integer()) {
    return std::nullopt;
  }
  SupervisorReport r{state->get<std::string>(), generation->get<int32_t>(), std::nullopt};
  if (auto e = j.find("exit"); e != j.end() && e->is_number_integer()) r.exit = e->get<int32_t>();
  return r;
}

}  // namespace

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
    const std::string_view state = report ? std::string_view(report->state) : "running";
    int32_t exit = report && report->exit ? *report->exit : *code;
    if (state == "terminated" && exit == 0) exit = *code;  // killed: the container's code
    // "running": the supervisor died with its program (killed, out of memory); "error": it could
    // not start it.
    // "terminated": the kubelet sent SIGTERM. While the pod is being deleted that is no
    // failure; otherwise it killed the container (a liveness probe) and the program ended.
    const bool program_ended = state == "exited" || state == "running" || state == "error" ||
                               (state == "terminated" && !pod.deleting());
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

PodState ObserveInPlacePod(const cache::PodInfo& pod, int32_t generation,
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
  if (o.failed_generation && *o.failed_generation >= generation) {
    if (termination != nullptr) *termination = std::move(o.failure);
    return PodState::kFailed;
  }
  if (o.succeeded) return PodState::kSucceeded;
  return o.running_generation == generation && pod.ready ? PodState::kReady : PodState::kPending;
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

std::optional<WallTime> FinishedJobExpiry(const JobSpec& spec, const JobStatus& status) {
  const std::optional<int64_t> ttl = spec.ttl_seconds_after_finished;
  if (!ttl || !status.completion_time) return std::nullopt;
  return *status.completion_time + std::chrono::seconds(1 + *ttl);
}

Plan Decide(const LifecycleInput& input) {
  const cache::TPUJobInfo& job = *input.job;
  const JobStatus written = JobStatus::FromJson(job.status);
  Plan plan = Decider(input, written).Run();
  if (job.deleting()) return plan;
  GoodputInput goodput;
  goodput.now = input.now;
  if (input.spec->has_value()) {
    const JobSpec& spec = **input.spec;
    goodput.chips =
        static_cast<int64_t>(spec.Replicas(ReplicaType::kWorker)) * spec.tpu.chips_per_worker;
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
  goodput.created = job.creation_timestamp;
  AccountGoodput(written, plan.status, goodput);
  return plan;
}

}  // namespace tpujob::policy
