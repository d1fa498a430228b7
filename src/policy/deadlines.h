// The lifecycle's deadlines, each counted from a time the status records (so an operator
// restarted in between decides the same) and from the end of that time's whole second (the
// status has whole seconds): never early, at most one second late. Before a deadline the plan
// asks to be decided again at it (Plan::requeue_after).
//
//   1. Queue timeout: a waiting attempt fails the job (QueueTimeout) after
//      spec.queueTimeoutSeconds from status.queuedAt, or for a re-issued attempt
//      kDefaultReissueQueueTimeoutSeconds when the spec sets none. A preempted job, or one
//      Kueue evicted (LifecycleInput::queue_timeout false), never times out waiting.
//   2. Active deadline: spec.activeDeadlineSeconds from status.startTime (the first admission)
//      fails the job (DeadlineExceeded), whatever its phase.
//   3. TTL: a finished job is deleted spec.ttlSecondsAfterFinished after
//      status.completionTime (Plan::delete_job).
// The members that apply them are Decider's (policy/decider.h, deadlines.cpp); the verdict of
// the TTL is also needed outside the decision:
#pragma once

#include <optional>

#include "base/clock.h"
#include "policy/job_spec.h"
#include "policy/job_status.h"

namespace tpujob::policy {

// When a finished job is to be deleted: spec.ttlSecondsAfterFinished after status.completionTime
// (counted from the end of its whole second, never early); std::nullopt without either.
std::optional<WallTime> FinishedJobExpiry(const JobSpec& spec, const JobStatus& status);

}  // namespace tpujob::policy
