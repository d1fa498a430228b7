#include <gtest/gtest.h>

#include <chrono>

#include "controller/metrics.h"

namespace tpujob::controller {
namespace TPUJOB_TEST_NS {

using namespace std::chrono_literals;
using policy::FaultRecord;
using policy::JobStatus;
using policy::Phase;

// The registry is process-wide: every test compares deltas.
double Count(metrics::CounterFamily& family, std::initializer_list<std::string_view> labels) {
  return family.With(labels).Value();
}

uint64_t Observations(metrics::Histogram& histogram) {
  return histogram.Collect().histogram.sample_count;
}

double ObservedSum(metrics::Histogram& histogram) {
  return histogram.Collect().histogram.sample_sum;
}

FaultRecord Fault(WallTime at, const std::string& kind, const std::string& action) {
  FaultRecord f;
  f.time = at;
  f.attempt = 1;
  f.kind = kind;
  f.pod = "job-worker-1";
  f.action = action;
  return f;
}

TEST(ControllerMetricsTest, NewFaultsCountByActionAndKindOnce) {
  OperatorMetrics& m = Metrics();
  const WallTime t0 = WallTime{} + 1000h;
  const double restarts = Count(m.job_restarts, {"ContainerFailed"});
  const double reissues = Count(m.job_reissues, {"NodeUnhealthy"});
  const double failures = Count(m.job_failures, {"PodFailed"});

  JobStatus before;
  before.phase = Phase::kRunning;
  before.faults.push_back(Fault(t0, "ContainerFailed", "RestartWorker"));
  JobStatus after = before;
  after.faults.push_back(Fault(t0 + 1s, "ContainerFailed", "RestartWorker"));
  after.faults.push_back(Fault(t0 + 2s, "NodeUnhealthy", "ReissueJob"));
  RecordStatusChange(before, after, t0 + 2s);
  EXPECT_EQ(Count(m.job_restarts, {"ContainerFailed"}) - restarts, 1);  // not the old one
  EXPECT_EQ(Count(m.job_reissues, {"NodeUnhealthy"}) - reissues, 1);

  // The same status written again (a retry after a conflict) counts nothing more.
  RecordStatusChange(after, after, t0 + 3s);
  EXPECT_EQ(Count(m.job_restarts, {"ContainerFailed"}) - restarts, 1);

  JobStatus failed = after;
  failed.faults.push_back(Fault(t0 + 4s, "PodFailed", "FailJob"));
  RecordStatusChange(after, failed, t0 + 4s);
  EXPECT_EQ(Count(m.job_failures, {"PodFailed"}) - failures, 1);
}

// Both ways of restarting a worker count as a restart: recreating its pod (RestartWorker) and
// restarting its program in place behind the barrier (RestartInPlace).
TEST(ControllerMetricsTest, EveryActionThatRestartsAWorkerCountsAsARestart) {
  OperatorMetrics& m = Metrics();
  const WallTime t0 = WallTime{} + 1500h;
  const double restarts = Count(m.job_restarts, {"ContainerFailed"});
  const double reissues = Count(m.job_reissues, {"ContainerFailed"});

  JobStatus before;
  before.phase = Phase::kRunning;
  JobStatus in_place = before;
  in_place.phase = Phase::kRestarting;
  in_place.faults.push_back(Fault(t0, "ContainerFailed", "RestartInPlace"));
  RecordStatusChange(before, in_place, t0);
  EXPECT_EQ(Count(m.job_restarts, {"ContainerFailed"}) - restarts, 1);

  JobStatus recreated = in_place;
  recreated.faults.push_back(Fault(t0 + 1s, "ContainerFailed", "RestartWorker"));
  RecordStatusChange(in_place, recreated, t0 + 1s);
  RecordStatusChange(recreated, recreated, t0 + 2s);  // written again: nothing more
  EXPECT_EQ(Count(m.job_restarts, {"ContainerFailed"}) - restarts, 2);
  EXPECT_EQ(Count(m.job_reissues, {"ContainerFailed"}), reissues);
}

TEST(ControllerMetricsTest, AdmissionObservesTheQueueWaitOnce) {
  metrics::Histogram& wait = Metrics().queue_wait.With({});
  const auto before_count = Observations(wait);
  const double before_sum = ObservedSum(wait);
  const WallTime t0 = WallTime{} + 2000h;
  JobStatus queued;
  queued.phase = Phase::kQueued;
  queued.queued_at = t0;
  JobStatus admitted = queued;
  admitted.phase = Phase::kStarting;
  admitted.admitted_at = t0 + 42s;
  RecordStatusChange(queued, admitted, t0 + 42s);
  RecordStatusChange(admitted, admitted, t0 + 43s);
  EXPECT_EQ(Observations(wait) - before_count, 1u);
  EXPECT_DOUBLE_EQ(ObservedSum(wait) - before_sum, 42);
}

TEST(ControllerMetricsTest, RunningAgainAfterAFaultObservesTheRecoveryTime) {
  metrics::Histogram& recovery = Metrics().fault_recovery.With({});
  const auto count = Observations(recovery);
  const double sum = ObservedSum(recovery);
  const WallTime t0 = WallTime{} + 3000h;

  JobStatus starting;
  starting.phase = Phase::kStarting;
  JobStatus running = starting;
  running.phase = Phase::kRunning;
  RecordStatusChange(starting, running, t0);  // first start: no fault, nothing observed
  EXPECT_EQ(Observations(recovery), count);

  JobStatus restarting = running;
  restarting.phase = Phase::kRestarting;
  restarting.faults.push_back(Fault(t0 + 10s, "ContainerFailed", "RestartWorker"));
  RecordStatusChange(running, restarting, t0 + 10s);
  JobStatus recovered = restarting;
  recovered.phase = Phase::kRunning;
  RecordStatusChange(restarting, recovered, t0 + 17s);
  EXPECT_EQ(Observations(recovery) - count, 1u);
  EXPECT_DOUBLE_EQ(ObservedSum(recovery) - sum, 7);
}

TEST(ControllerMetricsTest, PreemptionsCountOnceAndAreNeitherReissuesNorRecoveries) {
  OperatorMetrics& m = Metrics();
  const double preemptions = Count(m.job_preemptions, {"team-p"});
  const double reissues = Count(m.job_reissues, {"Preempted"});
  metrics::Histogram& recovery = m.fault_recovery.With({});
  const auto recoveries = Observations(recovery);
  const WallTime t0 = WallTime{} + 4000h;

  JobStatus running;
  running.phase = Phase::kRunning;
  JobStatus preempted = running;
  preempted.phase = Phase::kRestarting;
  preempted.preemptions = 1;
  preempted.faults.push_back(Fault(t0, "Preempted", "PreemptJob"));
  RecordStatusChange(running, preempted, t0);
  RecordPreemptions("team-p", running, preempted);
  RecordPreemptions("team-p", preempted, preempted);  // written again: nothing more
  EXPECT_EQ(Count(m.job_preemptions, {"team-p"}) - preemptions, 1);
  EXPECT_EQ(Count(m.job_reissues, {"Preempted"}), reissues);

  JobStatus again = preempted;
  again.phase = Phase::kRunning;
  RecordStatusChange(preempted, again, t0 + 60s);
  EXPECT_EQ(Observations(recovery), recoveries);
}

TEST(ControllerMetricsTest, ApiRequestsCountByVerbResourceAndCode) {
  OperatorMetrics& m = Metrics();
  const double before = Count(m.api_requests, {"PATCH", "nodes", "409"});
  RecordApiRequest("PATCH", "nodes", 409, std::chrono::milliseconds(3));
  RecordApiRequest("PATCH", "nodes", 409, std::chrono::milliseconds(5));
  EXPECT_EQ(Count(m.api_requests, {"PATCH", "nodes", "409"}) - before, 2);
  const std::string text = metrics::DefaultRegistry().Render();
  EXPECT_NE(
      text.find("tpujob_api_request_duration_seconds_bucket{resource=\"nodes\",verb=\"PATCH\","
                "le=\"0.005\"} "),
      std::string::npos);
  EXPECT_NE(text.find("tpujob_build_info{version=\""), std::string::npos);
}

TEST(ControllerMetricsTest, WorkQueueStatsFillTheWorkqueueMetricsOfThatName) {
  OperatorMetrics& m = Metrics();
  workqueue::WorkQueueStats stats;
  stats.depth = 3;
  stats.adds_total = 40;
  stats.retries_total = 7;
  stats.unfinished_work = 2500ms;
  stats.longest_running = 1500ms;
  RecordWorkQueue("test-queue", stats);
  EXPECT_EQ(m.workqueue_depth.With({"test-queue"}).Value(), 3);
  EXPECT_EQ(Count(m.workqueue_adds, {"test-queue"}), 40);
  EXPECT_EQ(Count(m.workqueue_retries, {"test-queue"}), 7);
  EXPECT_DOUBLE_EQ(m.workqueue_unfinished_work.With({"test-queue"}).Value(), 2.5);
  EXPECT_DOUBLE_EQ(m.workqueue_longest_running.With({"test-queue"}).Value(), 1.5);

  // The next scrape: the work finished; cumulative counts never go back.
  stats.adds_total = 30;
  stats.unfinished_work = {};
  stats.longest_running = {};
  RecordWorkQueue("test-queue", stats);
  EXPECT_EQ(Count(m.workqueue_adds, {"test-queue"}), 40);
  const std::string text = metrics::DefaultRegistry().Render();
  EXPECT_NE(text.find("\ntpujob_workqueue_unfinished_work_seconds{name=\"test-queue\"} 0\n"),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find("\ntpujob_workqueue_longest_running_processor_seconds{name=\"test-queue\"} 0\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("\ntpujob_workqueue_adds_total{name=\"test-queue\"} 40\n"), std::string::npos)
      << text;
}

TEST(ControllerMetricsTest, EveryFamilyIsListedBeforeItHasData) {
  Metrics();
  const std::string text = metrics::DefaultRegistry().Render();
  for (const char* header : {
           "# TYPE tpujob_job_reissues_total counter\n",
           "# TYPE tpujob_node_cordons_refused_total counter\n",
           "# TYPE tpujob_reconcile_duration_seconds histogram\n",
           "# TYPE tpujob_workqueue_unfinished_work_seconds gauge\n",
           "# TYPE tpujob_workqueue_longest_running_processor_seconds gauge\n",
           "# TYPE tpujob_leader gauge\n",
           "# TYPE process_cpu_seconds_total counter\n",
       }) {
    EXPECT_NE(text.find(header), std::string::npos) << header;
  }
}

TEST(ControllerMetricsTest, GoodputCountsWhatEachWriteFoldedIn) {
  OperatorMetrics& m = Metrics();
  const double productive = Count(m.productive_chip_seconds, {"goodput-ns"});
  const double queued = Count(m.lost_chip_seconds, {"goodput-ns", "queued"});
  const double uncheckpointed = Count(m.lost_chip_seconds, {"goodput-ns", "uncheckpointed"});

  JobStatus first;
  first.goodput = policy::Goodput{};
  first.goodput->lost_chip_ms["Queued"] = 40'000;
  RecordGoodput("goodput-ns", JobStatus{}, first);
  EXPECT_DOUBLE_EQ(Count(m.lost_chip_seconds, {"goodput-ns", "queued"}) - queued, 40);

  JobStatus second = first;
  second.goodput->productive_chip_ms = 100'500;
  RecordGoodput("goodput-ns", first, second);
  RecordGoodput("goodput-ns", second, second);  // a write that folded nothing adds nothing
  EXPECT_DOUBLE_EQ(Count(m.productive_chip_seconds, {"goodput-ns"}) - productive, 100.5);
  EXPECT_DOUBLE_EQ(Count(m.lost_chip_seconds, {"goodput-ns", "queued"}) - queued, 40);

  // Work lost since the last checkpoint moves out of productive: the counter does not go back.
  JobStatus third = second;
  third.goodput->productive_chip_ms = 90'000;
  third.goodput->lost_chip_ms["Uncheckpointed"] = 10'500;
  RecordGoodput("goodput-ns", second, third);
  EXPECT_DOUBLE_EQ(Count(m.productive_chip_seconds, {"goodput-ns"}) - productive, 100.5);
  EXPECT_DOUBLE_EQ(Count(m.lost_chip_seconds, {"goodput-ns", "uncheckpointed"}) - uncheckpointed,
                   10.5);

  // No account, nothing counted.
  RecordGoodput("goodput-ns", JobStatus{}, JobStatus{});
  EXPECT_DOUBLE_EQ(Count(m.productive_chip_seconds, {"goodput-ns"}) - productive, 100.5);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::controller
