// The operator's metrics, declared once in the process-wide registry (metrics::DefaultRegistry)
// and served on /metrics. docs/metrics.md lists them with their labels and meaning; the Helm
// chart's dashboard and alerts use them by name.
//
// Counters and histograms are updated where the event happens (a status write that records a
// fault, a cordon, a reconcile); gauges that mirror state (jobs by phase, queue length, cache
// sizes, work-queue depth) are filled by collectors the Manager registers, at scrape time.
#pragma once

#include <string_view>

#include "base/clock.h"
#include "metrics/registry.h"
#include "policy/job_status.h"
#include "workqueue/queue.h"

namespace tpujob::controller {

struct OperatorMetrics {
  metrics::GaugeFamily& jobs;                          // {phase}
  metrics::CounterFamily& job_restarts;                // {reason}
  metrics::CounterFamily& job_reissues;                // {reason}
  metrics::CounterFamily& job_failures;                // {reason}
  metrics::CounterFamily& job_preemptions;             // {job_namespace}
  metrics::CounterFamily& job_stalls;                  // {job_namespace}
  metrics::CounterFamily& job_slice_scaling;           // {job_namespace, direction}
  metrics::CounterFamily& progress_refreshes;          // {result}
  metrics::CounterFamily& node_cordons;                // {reason}
  metrics::CounterFamily& cordons_refused;             // {reason}: cap | rate | breaker
  metrics::GaugeFamily& cordoned_nodes;                // -
  metrics::GaugeFamily& cordon_limit_nodes;            // -
  metrics::CounterFamily& node_uncordons;              // -
  metrics::CounterFamily& preflight_results;           // {item, result}
  metrics::GaugeFamily& queue_length;                  // -
  metrics::GaugeFamily& queue_oldest_wait;             // -
  metrics::HistogramFamily& queue_wait;                // -
  metrics::HistogramFamily& fault_recovery;            // -
  metrics::CounterFamily& reconcile_total;             // {controller, result}
  metrics::CounterFamily& reconcile_errors;            // {controller}
  metrics::HistogramFamily& reconcile_duration;        // {controller}
  metrics::GaugeFamily& workqueue_depth;               // {name}
  metrics::CounterFamily& workqueue_adds;              // {name}
  metrics::CounterFamily& workqueue_retries;           // {name}
  metrics::HistogramFamily& workqueue_queue_duration;  // {name}
  metrics::HistogramFamily& workqueue_work_duration;   // {name}
  metrics::GaugeFamily& workqueue_unfinished_work;     // {name}
  metrics::GaugeFamily& workqueue_longest_running;     // {name}
  metrics::CounterFamily& api_requests;                // {verb, resource, code}
  metrics::HistogramFamily& api_request_duration;      // {verb, resource}
  metrics::GaugeFamily& leader;                        // -
  metrics::GaugeFamily& cache_objects;                 // {resource}
  metrics::CounterFamily& watch_silences;              // {resource}
  metrics::CounterFamily& watch_events;                // {resource, decoded}
  metrics::CounterFamily& productive_chip_seconds;     // {job_namespace}
  metrics::CounterFamily& lost_chip_seconds;           // {job_namespace, cause}
  metrics::GaugeFamily& job_goodput;                   // {job_namespace, tpujob}
  metrics::GaugeFamily& job_lost_chip_seconds;         // {job_namespace, tpujob}
};

// The metrics in metrics::DefaultRegistry(), declared on first use (with build_info and the
// process metrics).
OperatorMetrics& Metrics();

// Records what a successful status write changed: restarts, re-issues and failures by reason,
// pre-flight failures by item, the queue wait on admission, the fault-to-recovery time when the
// job is Running again. `now` is the time of the write.
void RecordStatusChange(const policy::JobStatus& before, const policy::JobStatus& after,
                        WallTime now);

// Counts the preemptions a successful status write recorded (status.preemptions went up) for a
// job of namespace `ns`.
void RecordPreemptions(std::string_view ns, const policy::JobStatus& before,
                       const policy::JobStatus& after);

// Adds the stalls (status.stalls) a successful status write recorded for a job of namespace `ns`.
void RecordStalls(std::string_view ns, const policy::JobStatus& before,
                  const policy::JobStatus& after);

// Elastic slices: a job that shrank to fewer slices or grew back (status.tpu.activeSlices).
void RecordSliceScaling(std::string_view ns, const policy::JobStatus& before,
                        const policy::JobStatus& after);

// Adds what a successful status write folded into status.goodput (see policy/goodput.h) to
// the chip-second counters of the job's namespace.
void RecordGoodput(std::string_view ns, const policy::JobStatus& before,
                   const policy::JobStatus& after);

// A work queue's state at scrape time, into the tpujob_workqueue_* metrics labelled `name`:
// depth, adds and retries (copied cumulative counts), unfinished work and the longest-running
// key. Called by the manager's collector.
void RecordWorkQueue(std::string_view name, const workqueue::WorkQueueStats& stats);

// One API request (kube::RequestObserver): verb, resource, HTTP status (0: no response).
void RecordApiRequest(std::string_view verb, std::string_view resource, int status,
                      Duration latency);

}  // namespace tpujob::controller
