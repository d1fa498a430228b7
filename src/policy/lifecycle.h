// The TPUJob lifecycle as a pure function: from a snapshot of one job (its spec, its last
// written status and the pods it owns) to a Plan (the status to write, pods to create and
// delete, Events to record). No I/O and no clock: the caller passes `now`.
//
// The controller commits a Plan in a fixed order: first the status (with the job's
// resourceVersion as a precondition, so a decision taken on a stale cache is refused by the
// API server), then Events, deletions and creations. Every decision that must be counted once
// (a worker restart, a re-issue) is recorded in the status before the action that follows
// from it, and Decide() recognises an action already taken (the failed pod already counted,
// the old attempt's pods already deleting), so the operator can be killed between any two
// requests and converge without duplicating anything.
//
// The fault rules, in the order Decide checks them, are policy/fault_rules.h (pure functions
// returning verdicts) and their treatment policy/fault_table.h; Decide applies the verdicts in
// one place (lifecycle.cpp). This header includes every header of the decision, so that a
// caller needs only this one: plan.h (the types), pod_observation.h, fault_table.h,
// preflight_verdict.h and deadlines.h.
//
// Fault attribution (rule 6): a dying chip usually kills the training program before any health
// check flags its node. A worker's exit that the exit-code rules call permanent (not OOMKilled,
// whose cause the kernel names) therefore fails the job only once its node has had
// spec.faultTolerance.faultAttributionSeconds, counted from the container's finishedAt, to be
// found faulty: a node found unhealthy, NotReady, lost or deleted in that time makes it the
// hardware case of the fault table (cordon, re-issue against maxJobRetries, the fault record
// naming the exit and the node's verdict), a node under maintenance a disruption (re-issue, no
// retry used); a node still healthy at the end fails the job with PermanentError, the message
// saying how long it waited. That last verdict is final, so it is not taken on the cache alone:
// the plan names the node in confirm_nodes, and the caller reads it from the API server and
// decides again with what it read (a node watch that broke and could not be opened again
// would otherwise hide a verdict written inside the window). Meanwhile nothing else waits: the
// other workers run, retryable exits restart at once; only success and preemption are not decided
// while a verdict is due. The deadline comes from the pod's status, so an operator restarted inside
// the window decides the same, once. A terminated container without finishedAt is decided at once.
//
// Slice recovery (a fault confined to one slice of a multislice job replaces that slice alone):
// policy/slice_recovery.h. In-place restart: policy/in_place.h. Deadlines: policy/deadlines.h.
//
// Phases: Queued -> Starting -> Running -> Succeeded | Failed, with Restarting while a worker
// is restarted in place (same attempt) or while the previous attempt's pods are removed before
// a re-issued attempt queues again. A new attempt's pods are created only once no pod of an
// earlier attempt is left; pod names are deterministic (<job>-worker-<i>), so the API server
// itself also refuses a second pod for one worker id.
#pragma once

#include "base/clock.h"
#include "policy/deadlines.h"
#include "policy/fault_table.h"
#include "policy/job_spec.h"
#include "policy/job_status.h"
#include "policy/plan.h"
#include "policy/pod_observation.h"
#include "policy/preflight_verdict.h"
#include "preflight/report.h"

namespace tpujob::policy {

Plan Decide(const LifecycleInput& input);

}  // namespace tpujob::policy
