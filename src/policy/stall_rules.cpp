#include "policy/stall_rules.h"

#include <algorithm>
#include <chrono>

#include "policy/decider.h"

namespace tpujob::policy {
namespace {

// The reports have whole seconds: a stop that came at least this much earlier than every other
// one came first.
constexpr std::chrono::seconds kFirstByAtLeast{1};

}  // namespace

bool StallActedOn(const WorkerProgress& w, const ProgressStatus* status) {
  if (status == nullptr || !status->acted_until) return false;
  const auto& ended = w.termination.finished_at;
  return ended && *ended <= *status->acted_until;
}

std::string HardwareCheckToken(int32_t attempt, int32_t stall) {
  return std::to_string(attempt) + "/" + std::to_string(stall);
}

const WorkerProgress* StallSuspect(const std::vector<WorkerProgress>& workers) {
  if (workers.size() < 2) return nullptr;
  // Alone with the lowest step (a worker with no step at all is behind every one with a step).
  const auto step = [](const WorkerProgress& w) { return w.report.step.value_or(-1); };
  const WorkerProgress* lowest = nullptr;
  bool alone = false;
  for (const WorkerProgress& w : workers) {
    if (lowest == nullptr || step(w) < step(*lowest)) {
      lowest = &w;
      alone = true;
    } else if (step(w) == step(*lowest)) {
      alone = false;
    }
  }
  if (alone) return lowest;
  // Else the one whose progress stopped first, by a clear margin, among those at the lowest step.
  const WorkerProgress* earliest = nullptr;
  std::optional<WallTime> second;
  for (const WorkerProgress& w : workers) {
    if (step(w) != step(*lowest)) continue;
    if (!w.report.last_progress) return nullptr;  // cannot compare
    if (earliest == nullptr || *w.report.last_progress < *earliest->report.last_progress) {
      if (earliest != nullptr) second = earliest->report.last_progress;
      earliest = &w;
    } else if (!second || *w.report.last_progress < *second) {
      second = w.report.last_progress;
    }
  }
  if (earliest == nullptr || !second) return nullptr;
  return *second - *earliest->report.last_progress >= kFirstByAtLeast ? earliest : nullptr;
}

StallVerdict CheckStalls(const StallSnapshot& s) {
  StallVerdict v;
  for (const WorkerProgress& w : s.workers) {
    if (w.report.step && (!v.step || *w.report.step > *v.step)) v.step = w.report.step;
    if (w.report.last_progress &&
        (!v.last_progress || *w.report.last_progress > *v.last_progress)) {
      v.last_progress = w.report.last_progress;
    }
    if (w.report.checkpoint && (!v.checkpoint || *w.report.checkpoint > *v.checkpoint)) {
      v.checkpoint = w.report.checkpoint;
    }
    if (!w.stalled) continue;
    const auto ended = [](const WorkerProgress& x) {
      return x.termination.finished_at.value_or(WallTime::max());
    };
    if (v.first == nullptr || ended(w) < ended(*v.first)) v.first = &w;
  }
  if (v.first == nullptr || s.progress == nullptr) return v;

  v.seen = s.status != nullptr && s.status->stall_seen ? *s.status->stall_seen : s.now;
  v.suspect = StallSuspect(s.workers);
  const SupervisorReport& r = v.first->report;
  std::string what = DescribeReplica(*v.first->pod, s.spec) + " made no progress for " +
                     std::to_string(r.idle_seconds.value_or(0)) + "s";
  if (r.phase == supervisor::kPhaseStartup || !r.step) {
    what += " since its program started (no step within startupSeconds " +
            std::to_string(s.progress->startup_seconds) + ")";
  } else {
    what += " after step " + std::to_string(*r.step) + " (stallSeconds " +
            std::to_string(s.progress->stall_seconds) + ")";
  }
  // A program restarted from its checkpoint saves none before it hangs again: the last one is
  // then the one status.progress recorded from an earlier report.
  std::optional<int64_t> checkpoint = v.checkpoint;
  if (!checkpoint && s.status != nullptr) checkpoint = s.status->checkpoint_step;
  if (checkpoint) what += "; last checkpoint at step " + std::to_string(*checkpoint);
  if (v.suspect != nullptr) {
    what += "; suspect: " + DescribeReplica(*v.suspect->pod, s.spec) + " on node " +
            std::string(v.suspect->pod->pod->node_name.view()) +
            (v.suspect->report.step ? ", at step " + std::to_string(*v.suspect->report.step)
                                    : ", before its first step") +
            ", behind the others";
  }
  v.message = std::move(what);

  const WallTime deadline = v.seen + std::chrono::seconds(s.attribution_seconds);
  if (s.now < deadline) {
    v.outcome = StallVerdict::Outcome::kCheckHardware;
    v.recheck_in = std::chrono::ceil<std::chrono::milliseconds>(deadline - s.now);
    return v;
  }

  // In a row unless the program got past the previous stall's step.
  const ProgressStatus* before = s.status;
  const bool progressed =
      before == nullptr || before->stalls_in_a_row == 0 ||
      (v.step && (!before->stalled_at_step || *v.step > *before->stalled_at_step));
  v.in_a_row = progressed ? 1 : before->stalls_in_a_row + 1;
  if (v.in_a_row >= s.progress->max_stalls) {
    v.outcome = StallVerdict::Outcome::kFail;
    return v;
  }
  if (v.suspect != nullptr && before != nullptr && !before->suspect_node.empty() &&
      before->suspect_node == v.suspect->pod->pod->node_name.view()) {
    v.outcome = StallVerdict::Outcome::kReplaceSuspect;
    return v;
  }
  v.outcome = StallVerdict::Outcome::kRestart;
  return v;
}

// --- Applying the verdict (the lifecycle's rule 7) ---

// Rule 7's verdict.
bool Decider::ApplyStallVerdict(const StallVerdict& v, const std::vector<const ObservedPod*>& pods,
                                bool* gang_restart) {
  if (v.outcome == StallVerdict::Outcome::kNone) return false;
  JobStatus& s = plan_.status;
  const ProgressSpec& spec = *spec_->fault_tolerance.progress;
  ProgressStatus& p = s.progress ? *s.progress : s.progress.emplace();
  if (v.step && (!p.step || *v.step >= *p.step)) {
    p.step = v.step;
    p.time = v.last_progress;
  }
  if (v.checkpoint && (!p.checkpoint_step || *v.checkpoint > *p.checkpoint_step)) {
    p.checkpoint_step = v.checkpoint;
  }
  const int64_t window = spec_->fault_tolerance.fault_attribution_seconds;
  if (v.outcome == StallVerdict::Outcome::kCheckHardware) {
    const std::string token = HardwareCheckToken(s.attempt, s.stalls + 1);
    int nodes = 0;
    for (const ObservedPod* pod : pods) {
      if (pod->pod->deleting() || pod->pod->node_name.empty()) continue;
      ++nodes;
      if (pod->pod->hardware_check.view() == token) continue;
      PodToAnnotate a;
      a.name = pod->pod->name;
      a.uid = pod->pod->uid;
      a.hardware_check = token;
      plan_.annotate.push_back(std::move(a));
    }
    const std::string checking = "; the job's " + std::to_string(nodes) +
                                 " nodes run a hardware check, a node found faulty within " +
                                 std::to_string(window) +
                                 "s (faultAttributionSeconds) is the fault";
    if (!p.stall_seen) {
      p.stall_seen = v.seen;
      RecordEvent(true, "Stalled", v.message + checking);
    }
    s.SetCondition(condition::kStalled, true, "Stalled", BoundedMessage(v.message + checking), now_,
                   spec_generation_);
    Requeue(*v.recheck_in);
    return true;
  }

  // Acted on: counted once.
  s.stalls++;
  p.stalls_in_a_row = v.in_a_row;
  p.stalled_at_step = v.step;
  const std::string previous_suspect = p.suspect_node;
  p.suspect_node = v.suspect != nullptr ? std::string(v.suspect->pod->pod->node_name.view()) : "";
  p.stall_seen.reset();
  p.acted_until = now_;
  const std::string count = "stall " + std::to_string(v.in_a_row) + " in a row of at most " +
                            std::to_string(spec.max_stalls) + " (maxStalls)";
  const std::string no_fault =
      window > 0 ? "; no node was found faulty within " + std::to_string(window) + "s" : "";
  switch (v.outcome) {
    case StallVerdict::Outcome::kFail: {
      RecordFault(*v.first->pod, v.first->termination, FaultAction::kFailJob, "",
                  FaultKind::kStalled);
      const std::string why = v.message + no_fault + "; " + std::to_string(v.in_a_row) +
                              " stalls in a row with no progress in between (maxStalls " +
                              std::to_string(spec.max_stalls) + "): the job is not restarted again";
      s.SetCondition(condition::kStalled, true, "Stalled", BoundedMessage(why), now_,
                     spec_generation_);
      Finish(false, "Stalled", why);
      return true;
    }
    case StallVerdict::Outcome::kReplaceSuspect: {
      const WorkerProgress& suspect = *v.suspect;
      const std::string node(suspect.pod->pod->node_name.view());
      const std::string why = v.message + no_fault + "; node " + node +
                              " was the sole suspect of the previous stall too (" +
                              previous_suspect + "): it is cordoned and the job moves off it";
      Cordon({.node = node,
              .reason = std::string(FaultKindName(FaultKind::kStalled)),
              .message = "the sole suspect of two stalls in a row of TPUJob " + job_.Key() +
                         " (stalls " + std::to_string(s.stalls - 1) + " and " +
                         std::to_string(s.stalls) + ")",
              .item = std::string(kStallCordonItem),
              // The job's uid first, as for every other cordon: "stall 1/2" alone is the
              // evidence of every job's second stall, and a node a person uncordoned after one
              // job's stalls would be refused to all others as "uncordoned after the same
              // evidence".
              .evidence = job_.uid + "/stall " + HardwareCheckToken(s.attempt, s.stalls)});
      s.SetCondition(condition::kStalled, true, "Stalled", BoundedMessage(why), now_,
                     spec_generation_);
      Reissue(*suspect.pod, suspect.termination, why, FaultKind::kStalled, "", {suspect.pod});
      return true;
    }
    case StallVerdict::Outcome::kRestart:
    default:
      break;
  }
  const bool in_place = spec_->fault_tolerance.restart == RestartMode::kInPlace;
  RecordFault(*v.first->pod, v.first->termination,
              in_place ? FaultAction::kRestartInPlace : FaultAction::kRestartAllWorkers, "",
              FaultKind::kStalled);
  const std::string how = in_place ? "restarting the program in place in every pod, generation " +
                                         std::to_string(s.in_place ? s.in_place->generation + 1 : 1)
                                   : "every pod is created again";
  const std::string why = v.message + no_fault + "; " + how + " (" + count + ")";
  s.SetCondition(condition::kStalled, true, "Stalled", BoundedMessage(why), now_, spec_generation_);
  RecordEvent(true, "StallRestart", why);
  if (in_place) {
    *gang_restart = true;
    return false;
  }
  for (const ObservedPod* pod : pods) {
    if (!pod->pod->deleting()) DeletePod(*pod->pod, std::nullopt, "the job stalled: " + how);
  }
  s.phase = Phase::kRestarting;
  s.SetCondition(condition::kReady, false, "Stalled", BoundedMessage(why), now_, spec_generation_);
  return true;
}

}  // namespace tpujob::policy
