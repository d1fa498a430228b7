#include <gtest/gtest.h>

#include <chrono>

#include "controller/metrics.h"

namespace tpujob::controller {
namespace {

using namespace std::chrono_literals;
using policy::FaultRecord;
using policy::JobStatus;
using policy::Phase;

// The registry is process-wide: every test compares deltas.
double Count(metrics::CounterFamily& family, std::initializer_list<std::string_view> labels) {
  return family.With(labels).Value();
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

TEST(ControllerMetricsTest, AdmissionObservesTheQueueWaitOnce) {
  metrics::Histogram& wait = Metrics().queue_wait.With({});
  const auto before_count = wait.Take().count;
  const double before_sum = wait.Take().sum;
  const WallTime t0 = WallTime{} + 2000h;
  JobStatus queued;
  queued.phase = Phase::kQueued;
  queued.queued_at = t0;
  JobStatus admitted = queued;
  admitted.phase = Phase::kStarting;
  admitted.admitted_at = t0 + 42s;
  RecordStatusChange(queued, admitted, t0 + 42s);
  RecordStatusChange(admitted, admitted, t0 + 43s);
  EXPECT_EQ(wait.Take().count - before_count, 1u);
  EXPECT_DOUBLE_EQ(wait.Take().sum - before_sum, 42);
}

TEST(ControllerMetricsTest, RunningAgainAfterAFaultObservesTheRecoveryTime) {
  metrics::Histogram& recovery = Metrics().fault_recovery.With({});
  const auto count = recovery.Take().count;
  const double sum = recovery.Take().sum;
  const WallTime t0 = WallTime{} + 3000h;

  JobStatus starting;
  starting.phase = Phase::kStarting;
  JobStatus running = starting;
  running.phase = Phase::kRunning;
  RecordStatusChange(starting, running, t0);  // first start: no fault, nothing observed
  EXPECT_EQ(recovery.Take().count, count);

  JobStatus restarting = running;
  restarting.phase = Phase::kRestarting;
  restarting.faults.push_back(Fault(t0 + 10s, "ContainerFailed", "RestartWorker"));
  RecordStatusChange(running, restarting, t0 + 10s);
  JobStatus recovered = restarting;
  recovered.phase = Phase::kRunning;
  RecordStatusChange(restarting, recovered, t0 + 17s);
  EXPECT_EQ(recovery.Take().count - count, 1u);
  EXPECT_DOUBLE_EQ(recovery.Take().sum - sum, 7);
}

TEST(ControllerMetricsTest, ApiRequestsCountByVerbResourceAndCode) {
  OperatorMetrics& m = Metrics();
  const double before = Count(m.api_requests, {"PATCH", "nodes", "409"});
  RecordApiRequest("PATCH", "nodes", 409, std::chrono::milliseconds(3));
  RecordApiRequest("PATCH", "nodes", 409, std::chrono::milliseconds(5));
  EXPECT_EQ(Count(m.api_requests, {"PATCH", "nodes", "409"}) - before, 2);
  const std::string text = metrics::DefaultRegistry().Render();
  EXPECT_NE(
      text.find("tpujob_api_request_duration_seconds_bucket{verb=\"PATCH\",resource=\"nodes\","
                "le=\"0.005\"}"),
      std::string::npos);
  EXPECT_NE(text.find("tpujob_build_info{version=\""), std::string::npos);
}

}  // namespace
}  // namespace tpujob::controller
