// status.progress kept current from worker 0's log tail (TPUJobReconcilerOptions::read_log): at
// most one read per job per refresh interval, a status write only when the step moved, nothing
// for a job that is not running or has no logPattern, and a log that cannot be read changes
// nothing.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "cache/objects.h"
#include "cache/store.h"
#include "controller/cordoner.h"
#include "controller/event_recorder.h"
#include "controller/tpujob_reconciler.h"
#include "fake_client.h"
#include "policy/job_status.h"
#include "policy_fixtures.h"

namespace tpujob::controller {
namespace TPUJOB_TEST_NS {

using kube::FakeClient;
using kube::Json;
using kube::Resource;
using policy::Phase;
using std::chrono::seconds;
namespace fixtures = policy::fixtures;

constexpr char kJobKey[] = "team-a/train";
constexpr auto kRefresh = seconds(60);

class ProgressRefreshTest : public ::testing::Test {
 protected:
  // A running two-worker job; `progress` is its spec.faultTolerance.progress (none if null).
  void Start(const Json& progress, bool running = true) {
    Json spec = fixtures::SpecJson(2);
    spec["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"] = {"python3",
                                                                                      "train.py"};
    if (!progress.is_null()) spec["faultTolerance"] = {{"progress", progress}};
    fixtures::PodSim sim(spec);
    sim.Step();  // Queued
    sim.Step();  // Starting: the pods are created
    if (running) {
      sim.AllReady();
      EXPECT_EQ(sim.Step().status.phase, Phase::kRunning);
    }
    clock_ = std::make_unique<FakeClock>(TimePoint{} + std::chrono::hours(1), sim.now());
    recorder_ = std::make_unique<EventRecorder>(fake_, EventRecorderOptions{}, *clock_);
    cache::AddPodIndexers(pods_);
    AddCordonJobIndexer(nodes_);
    fake_.Upsert(Resource::TPUJobs(), Json{{"apiVersion", "tpujob.dev/v1alpha1"},
                                           {"kind", "TPUJob"},
                                           {"metadata",
                                            {{"name", fixtures::kJobName},
                                             {"namespace", "team-a"},
                                             {"uid", fixtures::kJobUid},
                                             {"generation", 1}}},
                                           {"spec", sim.job().spec},
                                           {"status", sim.job().status}});
    SyncJob();
    for (const auto& p : sim.pods()) {
      cache::PodInfo pod = p.pod;
      pod.labels = cache::LabelMap{{cache::kJobNameLabel, fixtures::kJobName},
                                   {"tpujob.dev/replica-type", "Worker"},
                                   {"tpujob.dev/replica-index", std::to_string(p.index)},
                                   {"tpujob.dev/attempt", std::to_string(p.attempt)}};
      pods_.Update(std::make_shared<const cache::PodInfo>(std::move(pod)));
    }
    for (const char* name : {"node-0", "node-1"}) {
      const Json node = {{"apiVersion", "v1"},
                         {"kind", "Node"},
                         {"metadata", {{"name", name}}},
                         {"status", {{"conditions", {{{"type", "Ready"}, {"status", "True"}}}}}}};
      auto parsed = cache::NodeInfo::FromJson(fake_.Upsert(Resource::Nodes(), node));
      ASSERT_TRUE(parsed.has_value());
      nodes_.Update(std::make_shared<const cache::NodeInfo>(std::move(*parsed)));
    }
    cordoner_ =
        std::make_unique<Cordoner>(fake_, nodes_, *recorder_, policy::CordonPolicy{}, *clock_);
    // What the operator writes of a job it first sees (observedGeneration, goodput...), written
    // by a reconciler without the refresh, so that the tests start from a settled status.
    TPUJobReconcilerOptions no_refresh;
    no_refresh.progress_refresh = Duration::zero();
    TPUJobReconciler settle(fake_, jobs_, pods_, nodes_, *recorder_, *cordoner_, no_refresh,
                            *clock_);
    for (int i = 0; i < 5; ++i) {
      fake_.ClearActions();
      auto settled = settle.Reconcile(kJobKey);
      EXPECT_TRUE(settled.has_value()) << settled.error().ToString();
      SyncJob();
      if (StatusWrites() == 0) break;
    }
    EXPECT_EQ(StatusWrites(), 0) << "the job's status does not settle";
    TPUJobReconcilerOptions options;
    options.progress_refresh = kRefresh;
    options.read_log = [this](const std::string& ns, const std::string& pod,
                              const std::string& container) -> kube::Result<std::string> {
      reads_.push_back(ns + "/" + pod + "/" + container);
      if (!log_error_.empty()) return std::unexpected(kube::Error::Transport(log_error_));
      return log_;
    };
    reconciler_ = std::make_unique<TPUJobReconciler>(fake_, jobs_, pods_, nodes_, *recorder_,
                                                     *cordoner_, options, *clock_);
  }

  // The job cache catches up with the API server (as its watch would).
  void SyncJob() {
    const auto stored = fake_.Stored(Resource::TPUJobs(), "team-a", fixtures::kJobName);
    ASSERT_TRUE(stored.has_value());
    auto parsed = cache::TPUJobInfo::FromJson(*stored);
    ASSERT_TRUE(parsed.has_value());
    jobs_.Update(std::make_shared<const cache::TPUJobInfo>(std::move(*parsed)));
  }

  // Reconciles, then lets the cache see what was written; the result's requeue_after.
  std::optional<Duration> Reconcile() {
    auto result = reconciler_->Reconcile(kJobKey);
    EXPECT_TRUE(result.has_value()) << result.error().ToString();
    SyncJob();
    return result ? result->requeue_after : std::nullopt;
  }

  int StatusWrites() const {
    int n = 0;
    for (const auto& action : fake_.actions()) n += action.resource == "tpujobs";
    return n;
  }

  policy::JobStatus Stored() const {
    const auto job = fake_.Stored(Resource::TPUJobs(), "team-a", fixtures::kJobName);
    return policy::JobStatus::FromJson(job ? job->value("status", Json::object()) : Json());
  }

  static Json StepPattern() {
    return {{"logPattern", "completed step: (\\d+)"},
            {"checkpointPattern", "saved checkpoint at step (\\d+)"}};
  }

  FakeClient fake_;
  std::unique_ptr<FakeClock> clock_;
  std::unique_ptr<EventRecorder> recorder_;
  cache::Store<cache::TPUJobInfo> jobs_;
  cache::Store<cache::PodInfo> pods_;
  cache::Store<cache::NodeInfo> nodes_;
  std::unique_ptr<Cordoner> cordoner_;
  std::unique_ptr<TPUJobReconciler> reconciler_;
  std::vector<std::string> reads_;
  std::string log_;
  std::string log_error_;
};

TEST_F(ProgressRefreshTest, AMovedStepIsWrittenOncePerIntervalAndAnUnmovedOneNotAtAll) {
  Start(StepPattern());
  log_ =
      "2026-01-01T11:58:00.000000000Z completed step: 100\n"
      "2026-01-01T11:58:30.000000000Z saved checkpoint at step 100\n"
      "2026-01-01T11:59:00.000000000Z completed step: 150\n";
  fake_.ClearActions();
  auto requeue = Reconcile();
  ASSERT_EQ(reads_.size(), 1u);
  EXPECT_EQ(reads_[0].rfind("team-a/train-worker-0/", 0), 0u) << reads_[0];
  EXPECT_EQ(StatusWrites(), 1);
  auto status = Stored();
  ASSERT_TRUE(status.progress.has_value());
  EXPECT_EQ(status.progress->step, 150);
  EXPECT_EQ(status.progress->checkpoint_step, 100);
  ASSERT_TRUE(status.progress->time.has_value());
  EXPECT_EQ(cache::FormatRfc3339(*status.progress->time), "2026-01-01T11:59:00Z");
  ASSERT_TRUE(requeue.has_value());
  EXPECT_LE(*requeue, kRefresh);

  // Within the interval: no read, no write, and the requeue names what is left of it.
  fake_.ClearActions();
  clock_->Advance(seconds(20));
  requeue = Reconcile();
  EXPECT_EQ(reads_.size(), 1u);
  EXPECT_EQ(StatusWrites(), 0);
  ASSERT_TRUE(requeue.has_value());
  EXPECT_LE(*requeue, seconds(40));

  // The interval over, the same tail: read, not written.
  clock_->Advance(seconds(40));
  requeue = Reconcile();
  EXPECT_EQ(reads_.size(), 2u);
  EXPECT_EQ(StatusWrites(), 0);

  // The step moved: written, once.
  log_ += "2026-01-01T12:00:00.000000000Z completed step: 210\n";
  clock_->Advance(kRefresh);
  Reconcile();
  EXPECT_EQ(reads_.size(), 3u);
  EXPECT_EQ(StatusWrites(), 1);
  EXPECT_EQ(Stored().progress->step, 210);
  EXPECT_EQ(Stored().progress->checkpoint_step, 100);
}

TEST_F(ProgressRefreshTest, KeepsWhatStallDetectionKeptInStatusProgress) {
  Start(StepPattern());
  Json stored = *fake_.Stored(Resource::TPUJobs(), "team-a", fixtures::kJobName);
  stored["status"]["stalls"] = 1;
  stored["status"]["progress"] = {{"step", 90},
                                  {"time", "2026-01-01T11:00:00Z"},
                                  {"stallsInARow", 1},
                                  {"stalledAtStep", 90},
                                  {"suspectNode", "node-1"}};
  fake_.Upsert(Resource::TPUJobs(), stored);
  SyncJob();
  log_ = "2026-01-01T11:59:00.000000000Z completed step: 95\n";
  Reconcile();
  const auto status = Stored();
  ASSERT_TRUE(status.progress.has_value());
  EXPECT_EQ(status.progress->step, 95);
  EXPECT_EQ(status.progress->stalls_in_a_row, 1);
  EXPECT_EQ(status.progress->stalled_at_step, 90);
  EXPECT_EQ(status.progress->suspect_node, "node-1");
  EXPECT_EQ(status.stalls, 1);
}

TEST_F(ProgressRefreshTest, NoReadWithoutALogPatternOrARunningJob) {
  Start(Json{{"heartbeatFile", "/tmp/heartbeat"}});
  log_ = "2026-01-01T11:59:00.000000000Z completed step: 150\n";
  Reconcile();
  clock_->Advance(kRefresh * 2);
  Reconcile();
  EXPECT_TRUE(reads_.empty());
}

TEST_F(ProgressRefreshTest, NoReadBeforeTheJobRuns) {
  Start(StepPattern(), /*running=*/false);
  log_ = "2026-01-01T11:59:00.000000000Z completed step: 150\n";
  Reconcile();
  EXPECT_NE(Stored().phase, Phase::kRunning);
  EXPECT_TRUE(reads_.empty());
}

TEST_F(ProgressRefreshTest, AnUnreadableLogChangesNothingAndIsReadAgainNextInterval) {
  Start(StepPattern());
  log_error_ = "connection refused";
  fake_.ClearActions();
  auto result = reconciler_->Reconcile(kJobKey);
  ASSERT_TRUE(result.has_value()) << "an unreadable log is no reconcile error";
  EXPECT_EQ(reads_.size(), 1u);
  EXPECT_EQ(StatusWrites(), 0);
  log_error_.clear();
  log_ = "2026-01-01T11:59:00.000000000Z completed step: 7\n";
  clock_->Advance(kRefresh);
  Reconcile();
  EXPECT_EQ(reads_.size(), 2u);
  EXPECT_EQ(Stored().progress->step, 7);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::controller
