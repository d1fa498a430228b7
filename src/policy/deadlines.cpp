#include "policy/deadlines.h"

#include "policy/decider.h"

namespace tpujob::policy {

// The queue timeout of the current attempt: spec.queueTimeoutSeconds, or for a re-issued
// attempt kDefaultReissueQueueTimeoutSeconds. The deadline is queuedAt plus the timeout, both
// in the status, so it survives restarts. Past it the job fails (QueueTimeout); before it the
// plan asks to be decided again at the deadline. queuedAt is written in whole seconds (the
// fraction cut off), so the timeout counts from the end of its second: never early, at most
// one second late.
bool Decider::QueueTimedOut() {
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

// spec.activeDeadlineSeconds, counted from status.startTime (the first admission). startTime
// has whole seconds, so the count starts at the end of its second: never early.
bool Decider::DeadlineExceeded() {
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
void Decider::ExpireAfterFinish() {
  const std::optional<WallTime> expiry = FinishedJobExpiry(*spec_, plan_.status);
  if (!expiry) return;
  const WallTime at = *expiry;
  if (now_ >= at) {
    plan_.delete_job = true;
  } else {
    Requeue(std::chrono::duration_cast<Duration>(at - now_));
  }
}

std::optional<WallTime> FinishedJobExpiry(const JobSpec& spec, const JobStatus& status) {
  const std::optional<int64_t> ttl = spec.ttl_seconds_after_finished;
  if (!ttl || !status.completion_time) return std::nullopt;
  return *status.completion_time + std::chrono::seconds(1 + *ttl);
}

}  // namespace tpujob::policy
