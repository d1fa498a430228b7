#include "policy/goodput.h"

#include <algorithm>
#include <chrono>

namespace tpujob::policy {
namespace {

using std::chrono::milliseconds;

WallTime Millis(WallTime t) { return std::chrono::floor<milliseconds>(t); }

bool IsDisruption(std::string_view state) {
  return state == goodput_cause::kRestarting || state == goodput_cause::kReissue ||
         state == goodput_cause::kMaintenance || state == goodput_cause::kPreemption ||
         state == goodput_cause::kSuspended;
}

// Adds `ms` (and ms x chips) to `state`'s bucket.
void Accrue(Goodput& g, std::string_view state, int64_t ms) {
  if (ms <= 0 || state.empty()) return;
  if (state == kGoodputProductive) {
    g.productive_ms += ms;
    g.productive_chip_ms += ms * g.chips;
    if (g.missing_chips > 0) {  // running on fewer slices than the spec asks for
      g.degraded_ms += ms;
      g.lost_chip_ms[std::string(goodput_cause::kDegraded)] += ms * g.missing_chips;
    }
    return;
  }
  g.lost_ms[std::string(state)] += ms;
  g.lost_chip_ms[std::string(state)] += ms * g.chips;
}

}  // namespace

std::string_view GoodputState(const JobStatus& status, bool preflight_running) {
  switch (status.phase) {
    case Phase::kNone:
    case Phase::kSucceeded:
    case Phase::kFailed:
      return "";
    case Phase::kQueued:
      if (status.ConditionTrue(condition::kPreempted)) return goodput_cause::kPreemption;
      return status.reissued ? goodput_cause::kRequeued : goodput_cause::kQueued;
    case Phase::kStarting:
      return preflight_running ? goodput_cause::kPreflight : goodput_cause::kStarting;
    case Phase::kRunning:
      return status.ConditionTrue(condition::kStalled) ? goodput_cause::kStalled
                                                       : kGoodputProductive;
    case Phase::kSuspended:
      return goodput_cause::kSuspended;
    case Phase::kRestarting:
      break;
  }
  // Restarting: a worker restarting in place (same attempt, still admitted), or the previous
  // attempt's pods going before a re-issued attempt queues; the last fault says why.
  // A preempted attempt's pods going (not admitted; an in-place restart keeps its admission).
  if (!status.reissued && status.ConditionTrue(condition::kPreempted) &&
      !status.ConditionTrue(condition::kAdmitted)) {
    return goodput_cause::kPreemption;
  }
  if (!status.reissued && status.ConditionTrue(condition::kStalled)) return goodput_cause::kStalled;
  if (!status.reissued) return goodput_cause::kRestarting;
  if (!status.faults.empty() && status.faults.back().kind == "Maintenance") {
    return goodput_cause::kMaintenance;
  }
  return goodput_cause::kReissue;
}

// A new job first written this long after its creationTimestamp was created while no operator
// ran: a second of truncation (the timestamp has whole seconds) and a second of reaction time.
constexpr std::chrono::seconds kSeenLateAfter{2};

void AccountGoodput(const JobStatus& before, JobStatus& after, const GoodputInput& input) {
  const std::string_view state = GoodputState(after, input.preflight_running);
  const std::optional<Goodput>& old = before.goodput;
  after.goodput = old;
  if (!old && state.empty()) return;  // not started: nothing to account yet
  // With its goodput still the old one, `after` equals `before` exactly when nothing else
  // changed: then there is no write to fold into.
  if (old && old->state == state && after == before) return;
  // A finished job's account is closed: a later write (a node cordoned for its last fault, a
  // condition's message) neither adds time nor moves accountedUntil past the finish.
  if (old && old->state.empty() && state.empty()) return;

  const WallTime now = Millis(input.now);
  Goodput g = old.value_or(Goodput{});
  if (!old) {
    // The account starts now; for a new job seen late (no operator ran when it was created)
    // at its creation: that wait was the job's time too. metadata.creationTimestamp has whole
    // seconds, so a job created at 10.9 s reads 10 s: only more than a second of lag beyond
    // that second is lateness, the rest is the operator's reaction time.
    g.accounted_until = now;
    if (before.phase == Phase::kNone && input.created && now - *input.created > kSeenLateAfter) {
      g.accounted_until = std::min(now, Millis(*input.created));
    }
    g.state_since = g.accounted_until;
    g.state = std::string(state);
    g.chips = input.chips;
    g.missing_chips = input.missing_chips;
  }
  if (g.accounted_until && now > *g.accounted_until) {
    Accrue(g, g.state, std::chrono::duration_cast<milliseconds>(now - *g.accounted_until).count());
  }
  // Work since the last checkpoint is lost when a disruption ends a productive stretch: move it
  // from productive to uncheckpointed (at most what this stretch added).
  if (g.state == kGoodputProductive && IsDisruption(state) && input.last_checkpoint &&
      g.state_since) {
    const WallTime from = std::max(*g.state_since, Millis(*input.last_checkpoint));
    if (now > from) {
      const int64_t lost =
          std::min(std::chrono::duration_cast<milliseconds>(now - from).count(), g.productive_ms);
      g.productive_ms -= lost;
      g.productive_chip_ms -= std::min(g.productive_chip_ms, lost * g.chips);
      g.lost_ms[std::string(goodput_cause::kUncheckpointed)] += lost;
      g.lost_chip_ms[std::string(goodput_cause::kUncheckpointed)] += lost * g.chips;
    }
  }
  // A stall found: the time since the program's last progress was no work (at most what this
  // productive stretch added).
  if (g.state == kGoodputProductive && state == goodput_cause::kStalled && input.last_progress &&
      g.state_since) {
    const WallTime from = std::max(*g.state_since, Millis(*input.last_progress));
    if (now > from) {
      const int64_t lost =
          std::min(std::chrono::duration_cast<milliseconds>(now - from).count(), g.productive_ms);
      g.productive_ms -= lost;
      g.productive_chip_ms -= std::min(g.productive_chip_ms, lost * g.chips);
      g.lost_ms[std::string(goodput_cause::kStalled)] += lost;
      g.lost_chip_ms[std::string(goodput_cause::kStalled)] += lost * g.chips;
    }
  }
  if (g.state != state || !g.state_since) g.state_since = now;
  g.state = std::string(state);
  g.accounted_until = std::max(now, g.accounted_until.value_or(now));
  g.chips = input.chips;
  g.missing_chips = input.missing_chips;
  after.goodput = std::move(g);
}

Goodput LiveGoodput(const Goodput& account, WallTime now) {
  Goodput g = account;
  now = Millis(now);
  if (g.accounted_until && now > *g.accounted_until) {
    Accrue(g, g.state, std::chrono::duration_cast<milliseconds>(now - *g.accounted_until).count());
    g.accounted_until = now;
  }
  return g;
}

std::optional<double> GoodputRatio(const Goodput& account) {
  const int64_t total = account.TotalMs();
  if (total <= 0) return std::nullopt;
  return static_cast<double>(account.productive_ms) / static_cast<double>(total);
}

}  // namespace tpujob::policy
