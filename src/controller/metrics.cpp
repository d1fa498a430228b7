#include "controller/metrics.h"

#include <algorithm>
#include <string>
#include <string_view>

#include "policy/fault_table.h"
#include "version.h"

namespace tpujob::controller {
namespace {

using metrics::DefaultRegistry;

// Queue waits and recoveries take seconds to hours: 1 s to about 9 hours.
std::vector<double> LongBuckets() { return metrics::ExponentialBuckets(1, 2, 16); }

OperatorMetrics* Declare() {
  auto& r = DefaultRegistry();
  r.AddGauge("tpujob_build_info", "The operator's version; always 1.", {"version"})
      .With({TPUJOB_VERSION})
      .Set(1);
  metrics::AddProcessMetrics(r);
  return new OperatorMetrics{
      .jobs =
          r.AddGauge("tpujob_jobs", "TPUJobs in the operator's cache, by status.phase.", {"phase"}),
      .job_restarts = r.AddCounter("tpujob_job_restarts_total",
                                   "Workers restarted after a fault (pod recreated or program "
                                   "restarted in place), by fault kind.",
                                   {"reason"}),
      .job_reissues = r.AddCounter("tpujob_job_reissues_total",
                                   "Jobs re-issued as a new attempt, by fault kind.", {"reason"}),
      .job_failures =
          r.AddCounter("tpujob_job_failures_total",
                       "Jobs the operator failed after a fault, by fault kind.", {"reason"}),
      .job_preemptions = r.AddCounter(
          "tpujob_job_preemptions_total",
          "Running jobs the queue preempted for a waiting job of higher priority, by the "
          "preempted job's namespace.",
          {"job_namespace"}),
      .job_stalls = r.AddCounter(
          "tpujob_job_stalls_total",
          "Stalls acted on: a job's program made no progress for spec.faultTolerance.progress."
          "stallSeconds (startupSeconds before its first step) and was stopped, by the job's "
          "namespace.",
          {"job_namespace"}),
      .job_slice_scaling = r.AddCounter(
          "tpujob_job_slice_scaling_total",
          "Elastic slices: jobs that shrank to run on the slices they hold (direction down) or "
          "grew back to more (direction up), by the job's namespace.",
          {"job_namespace", "direction"}),
      .progress_refreshes = r.AddCounter(
          "tpujob_progress_refreshes_total",
          "Reads of a running job's worker 0 log tail that keep status.progress current (at most "
          "one per job per --progress-refresh-seconds), by result: written (the step moved, one "
          "status write), unchanged (no write), unreadable (the log could not be read or "
          "matched).",
          {"result"}),
      .node_cordons = r.AddCounter("tpujob_node_cordons_total",
                                   "Nodes the operator cordoned, by reason.", {"reason"}),
      .cordons_refused = r.AddCounter(
          "tpujob_node_cordons_refused_total",
          "Cordons the operator decided against for safety: cap, rate or breaker.", {"reason"}),
      .cordoned_nodes =
          r.AddGauge("tpujob_cordoned_nodes",
                     "Nodes held cordoned by the operator (its taint and annotation)."),
      .cordon_limit_nodes =
          r.AddGauge("tpujob_cordon_limit_nodes",
                     "The most nodes the operator may hold cordoned now (--max-cordoned-nodes and "
                     "--max-cordoned-fraction of the nodes in the cache)."),
      .node_uncordons = r.AddCounter("tpujob_node_uncordons_total",
                                     "Nodes the operator uncordoned after they stayed healthy."),
      .preflight_results = r.AddCounter(
          "tpujob_preflight_results_total",
          "Pre-flight check results read from the workers' reports, by item and result.",
          {"item", "result"}),
      .queue_length = r.AddGauge("tpujob_queue_length", "TPUJobs waiting for admission."),
      .queue_oldest_wait = r.AddGauge(
          "tpujob_queue_oldest_wait_seconds",
          "How long the longest-waiting TPUJob has been waiting for admission; 0 when none."),
      .queue_wait = r.AddHistogram("tpujob_queue_wait_seconds",
                                   "Time from status.queuedAt to admission.", {}, LongBuckets()),
      .fault_recovery = r.AddHistogram(
          "tpujob_fault_recovery_seconds",
          "Time from a fault's detection to the job Running again (restart or re-issue).", {},
          LongBuckets()),
      .reconcile_total = r.AddCounter("tpujob_reconcile_total",
                                      "Reconciles by controller and result (success, error, "
                                      "requeue).",
                                      {"controller", "result"}),
      .reconcile_errors = r.AddCounter("tpujob_reconcile_errors_total",
                                       "Reconciles that returned an error.", {"controller"}),
      .reconcile_duration = r.AddHistogram("tpujob_reconcile_duration_seconds",
                                           "Time one reconcile took.", {"controller"}),
      .workqueue_depth =
          r.AddGauge("tpujob_workqueue_depth", "Keys ready in the work queue.", {"name"}),
      .workqueue_adds = r.AddCounter("tpujob_workqueue_adds_total",
                                     "Adds that queued a key (duplicates excluded).", {"name"}),
      .workqueue_retries =
          r.AddCounter("tpujob_workqueue_retries_total",
                       "Keys queued again after an error, with backoff.", {"name"}),
      .workqueue_queue_duration =
          r.AddHistogram("tpujob_workqueue_queue_duration_seconds",
                         "Time a key waited in the work queue before a worker took it.", {"name"}),
      .workqueue_work_duration = r.AddHistogram("tpujob_workqueue_work_duration_seconds",
                                                "Time a worker held a key.", {"name"}),
      .workqueue_unfinished_work = r.AddGauge(
          "tpujob_workqueue_unfinished_work_seconds",
          "Time the keys workers hold now have been held, summed; grows steadily while a worker "
          "is stuck.",
          {"name"}),
      .workqueue_longest_running =
          r.AddGauge("tpujob_workqueue_longest_running_processor_seconds",
                     "Time the key held longest by a worker has been held; 0 when none.", {"name"}),
      .api_requests =
          r.AddCounter("tpujob_api_requests_total",
                       "Kubernetes API requests by verb, resource and HTTP status code (0: no "
                       "response).",
                       {"verb", "resource", "code"}),
      .api_request_duration =
          r.AddHistogram("tpujob_api_request_duration_seconds",
                         "Kubernetes API request latency (a watch: until its first response).",
                         {"verb", "resource"}),
      .leader = r.AddGauge("tpujob_leader",
                           "1 while this replica leads (holds the Lease, or runs without leader "
                           "election); else 0."),
      .cache_objects =
          r.AddGauge("tpujob_cache_objects", "Objects in the operator's caches.", {"resource"}),
      .watch_silences = r.AddCounter(
          "tpujob_watch_silences_total",
          "Watches given up because nothing (no event, bookmark or end) arrived within the watch "
          "idle timeout: silently dead connections, re-established from the last "
          "resourceVersion.",
          {"resource"}),
      .watch_events = r.AddCounter(
          "tpujob_watch_events_total",
          "Object events (added, modified, deleted) applied to the caches from their watches; "
          "decoded=\"false\": a node update whose digest showed that only its heartbeat times "
          "changed, applied without decoding it.",
          {"resource", "decoded"}),
      .productive_chip_seconds = r.AddCounter(
          "tpujob_productive_chip_seconds_total",
          "TPU chip-seconds TPUJobs spent Running with every worker ready (status.goodput), by "
          "the jobs' namespace; counted when the status is written.",
          {"job_namespace"}),
      .lost_chip_seconds = r.AddCounter(
          "tpujob_lost_chip_seconds_total",
          "TPU chip-seconds TPUJobs held or waited for without training (status.goodput), by "
          "namespace and cause; counted when the status is written.",
          {"job_namespace", "cause"}),
      .job_goodput = r.AddGauge(
          "tpujob_job_goodput_ratio",
          "Productive share of an unfinished, not suspended TPUJob's accounted time so far "
          "(status.goodput with the time since its last write added).",
          {"job_namespace", "tpujob"}),
      .job_lost_chip_seconds = r.AddGauge(
          "tpujob_job_lost_chip_seconds",
          "TPU chip-seconds an unfinished, not suspended TPUJob has lost so far, all causes "
          "(status.goodput with the time since its last write added).",
          {"job_namespace", "tpujob"}),
  };
}

bool Contains(const std::vector<policy::FaultRecord>& faults, const policy::FaultRecord& f) {
  return std::find(faults.begin(), faults.end(), f) != faults.end();
}

double Seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

OperatorMetrics& Metrics() {
  static OperatorMetrics* metrics = Declare();  // never destroyed: used until exit
  return *metrics;
}

void RecordStatusChange(const policy::JobStatus& before, const policy::JobStatus& after,
                        WallTime now) {
  OperatorMetrics& m = Metrics();
  for (const auto& fault : after.faults) {
    if (Contains(before.faults, fault)) continue;
    // The fault table says what each action did (policy/fault_table.h); an action this
    // version does not know counts nowhere.
    const std::optional<policy::FaultAction> action = policy::ParseFaultAction(fault.action);
    if (!action) continue;
    const policy::FaultActionTreatment& treatment = policy::Treatment(*action);
    if (treatment.restarts_worker) {
      m.job_restarts.With({fault.kind}).Inc();
    } else if (treatment.reissues_job) {
      m.job_reissues.With({fault.kind}).Inc();
    } else if (treatment.fails_job) {
      m.job_failures.With({fault.kind}).Inc();
    }
  }
  if (after.admitted_at && after.admitted_at != before.admitted_at && after.queued_at) {
    m.queue_wait.With({}).Observe(std::max(0.0, Seconds(*after.admitted_at - *after.queued_at)));
  }
  // Running again after a fault of this run: the time since the newest fault was detected.
  // A preemption is not a fault: how long the job waits depends on the job it made room for.
  if (after.phase == policy::Phase::kRunning && before.phase != policy::Phase::kRunning &&
      !after.faults.empty() && after.faults.back().action != "FailJob" &&
      after.faults.back().action != "PreemptJob") {
    m.fault_recovery.With({}).Observe(std::max(0.0, Seconds(now - after.faults.back().time)));
  }
}

void RecordPreemptions(std::string_view ns, const policy::JobStatus& before,
                       const policy::JobStatus& after) {
  if (after.preemptions > before.preemptions) {
    Metrics().job_preemptions.With({ns}).Inc(after.preemptions - before.preemptions);
  }
}

void RecordStalls(std::string_view ns, const policy::JobStatus& before,
                  const policy::JobStatus& after) {
  if (after.stalls > before.stalls) {
    Metrics().job_stalls.With({ns}).Inc(after.stalls - before.stalls);
  }
}

void RecordSliceScaling(std::string_view ns, const policy::JobStatus& before,
                        const policy::JobStatus& after) {
  if (!before.tpu || !after.tpu || before.tpu->active_slices == 0 ||
      after.tpu->active_slices == before.tpu->active_slices) {
    return;
  }
  Metrics()
      .job_slice_scaling
      .With({ns, after.tpu->active_slices < before.tpu->active_slices ? "down" : "up"})
      .Inc();
}

void RecordGoodput(std::string_view ns, const policy::JobStatus& before,
                   const policy::JobStatus& after) {
  if (!after.goodput) return;
  OperatorMetrics& m = Metrics();
  const policy::Goodput none;
  const policy::Goodput& was = before.goodput ? *before.goodput : none;
  const policy::Goodput& now = *after.goodput;
  // Checkpoint-aware loss moves time out of productive: a counter only adds, so the move shows
  // as less productive time added in this write (never negative).
  if (now.productive_chip_ms > was.productive_chip_ms) {
    m.productive_chip_seconds.With({ns}).Inc(
        static_cast<double>(now.productive_chip_ms - was.productive_chip_ms) / 1000.0);
  }
  for (const auto& [cause, ms] : now.lost_chip_ms) {
    auto it = was.lost_chip_ms.find(cause);
    const int64_t before_ms = it == was.lost_chip_ms.end() ? 0 : it->second;
    if (ms > before_ms) {
      m.lost_chip_seconds.With({ns, policy::GoodputCauseKey(cause)})
          .Inc(static_cast<double>(ms - before_ms) / 1000.0);
    }
  }
}

void RecordWorkQueue(std::string_view name, const workqueue::WorkQueueStats& stats) {
  OperatorMetrics& m = Metrics();
  m.workqueue_depth.With({name}).Set(static_cast<double>(stats.depth));
  m.workqueue_adds.With({name}).SetCumulative(static_cast<double>(stats.adds_total));
  m.workqueue_retries.With({name}).SetCumulative(static_cast<double>(stats.retries_total));
  m.workqueue_unfinished_work.With({name}).Set(Seconds(stats.unfinished_work));
  m.workqueue_longest_running.With({name}).Set(Seconds(stats.longest_running));
}

void RecordApiRequest(std::string_view verb, std::string_view resource, int status,
                      Duration latency) {
  OperatorMetrics& m = Metrics();
  m.api_requests.With({verb, resource, std::to_string(status)}).Inc();
  m.api_request_duration.With({verb, resource}).Observe(Seconds(latency));
}

}  // namespace tpujob::controller
