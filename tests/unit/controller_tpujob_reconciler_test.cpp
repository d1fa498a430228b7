// The TPUJobReconciler against the fake API server, where what it reads from its caches and what
// the API server holds differ: a node watch that broke (an API server restart, a watch refused
// with 403 or 429 while it comes back) leaves the node cache behind, and a verdict written
// meanwhile must still decide a permanent exit inside the fault attribution window.
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
constexpr int64_t kWindow = 30;

Json NodeJson(const std::string& name, bool tpu_unhealthy) {
  Json conditions = Json::array({{{"type", "Ready"}, {"status", "True"}}});
  conditions.push_back({{"type", "TPUUnhealthy"},
                        {"status", tpu_unhealthy ? "True" : "False"},
                        {"reason", tpu_unhealthy ? "ChipError" : "ChipHealthy"},
                        {"message", tpu_unhealthy ? "chip 2 stopped answering" : ""}});
  return Json{{"apiVersion", "v1"},
              {"kind", "Node"},
              {"metadata", {{"name", name}}},
              {"status", {{"conditions", conditions}}}};
}

// A running two-worker job whose worker 1 (on node-1) exited with code 1, a permanent exit,
// kWindow + 1 seconds ago: its attribution window is over. The caches show both nodes healthy.
class StaleNodeCacheTest : public ::testing::Test {
 protected:
  StaleNodeCacheTest() {
    Json spec = fixtures::SpecJson(2);
    spec["faultTolerance"] = {{"maxJobRetries", 2}, {"faultAttributionSeconds", kWindow}};
    fixtures::PodSim sim(spec);
    sim.Step();  // Queued
    sim.Step();  // Starting: the pods are created
    sim.AllReady();
    EXPECT_EQ(sim.Step().status.phase, Phase::kRunning);
    fixtures::SetExited(sim.Worker(1), 1);
    sim.Worker(1).containers.front().finished_at = sim.now();
    sim.Advance(seconds(kWindow + 1));

    clock_ = std::make_unique<FakeClock>(TimePoint{} + std::chrono::hours(1), sim.now());
    recorder_ = std::make_unique<EventRecorder>(fake_, EventRecorderOptions{}, *clock_);
    cache::AddPodIndexers(pods_);
    AddCordonJobIndexer(nodes_);

    const Json job = fake_.Upsert(Resource::TPUJobs(), Json{{"apiVersion", "tpujob.dev/v1alpha1"},
                                                            {"kind", "TPUJob"},
                                                            {"metadata",
                                                             {{"name", fixtures::kJobName},
                                                              {"namespace", "team-a"},
                                                              {"uid", fixtures::kJobUid},
                                                              {"generation", 1}}},
                                                            {"spec", sim.job().spec},
                                                            {"status", sim.job().status}});
    auto parsed = cache::TPUJobInfo::FromJson(job);
    EXPECT_TRUE(parsed.has_value());
    if (parsed) jobs_.Update(std::make_shared<const cache::TPUJobInfo>(std::move(*parsed)));
    for (const auto& p : sim.pods()) {
      fake_.Upsert(
          Resource::Pods(),
          Json{{"metadata", {{"name", p.pod.name}, {"namespace", "team-a"}, {"uid", p.pod.uid}}}});
      // The labels the operator gives its pods (the policy fixtures' replica-type is lower-case).
      cache::PodInfo pod = p.pod;
      pod.labels = cache::LabelMap{{cache::kJobNameLabel, fixtures::kJobName},
                                   {"tpujob.dev/replica-type", "Worker"},
                                   {"tpujob.dev/replica-index", std::to_string(p.index)},
                                   {"tpujob.dev/attempt", std::to_string(p.attempt)}};
      pods_.Update(std::make_shared<const cache::PodInfo>(std::move(pod)));
    }
    for (const char* name : {"node-0", "node-1"}) {
      auto node = cache::NodeInfo::FromJson(fake_.Upsert(Resource::Nodes(), NodeJson(name, false)));
      EXPECT_TRUE(node.has_value());
      if (node) nodes_.Update(std::make_shared<const cache::NodeInfo>(std::move(*node)));
    }
    // Every cordon allowed: this test is about the decision, not the cordon limits.
    const policy::CordonPolicy cordons{
        .max_cordoned = 1000, .max_fraction = 1.0, .rate_per_minute = 0, .breaker_nodes = 0};
    cordoner_ = std::make_unique<Cordoner>(fake_, nodes_, *recorder_, cordons, *clock_);
    reconciler_ = std::make_unique<TPUJobReconciler>(
        fake_, jobs_, pods_, nodes_, *recorder_, *cordoner_, TPUJobReconcilerOptions{}, *clock_);
    fake_.ClearActions();
  }

  // The node agent flagged node-1 on the API server; the cache never saw it (watch broken).
  void FlagNodeOneBehindTheCache() {
    fake_.Upsert(Resource::Nodes(), NodeJson("node-1", true), /*notify=*/false);
  }

  policy::JobStatus StoredStatus() const {
    const auto job = fake_.Stored(Resource::TPUJobs(), "team-a", fixtures::kJobName);
    return policy::JobStatus::FromJson(job ? job->value("status", Json::object()) : Json());
  }

  int StatusWrites() const {
    int n = 0;
    for (const auto& action : fake_.actions()) n += action.resource == "tpujobs";
    return n;
  }

  FakeClient fake_;
  std::unique_ptr<FakeClock> clock_;
  std::unique_ptr<EventRecorder> recorder_;
  cache::Store<cache::TPUJobInfo> jobs_;
  cache::Store<cache::PodInfo> pods_;
  cache::Store<cache::NodeInfo> nodes_;
  std::unique_ptr<Cordoner> cordoner_;
  std::unique_ptr<TPUJobReconciler> reconciler_;
};

// The case the cache alone gets wrong: the API server shows node-1 faulty, so the exit was the
// hardware's. The job is re-issued (one retry counted), the node cordoned, and never Failed.
TEST_F(StaleNodeCacheTest, ANodeFlaggedBehindTheCacheReissuesInsteadOfFailing) {
  FlagNodeOneBehindTheCache();
  auto result = reconciler_->Reconcile(kJobKey);
  ASSERT_TRUE(result.has_value()) << result.error().ToString();
  const policy::JobStatus status = StoredStatus();
  EXPECT_NE(status.phase, Phase::kFailed);
  EXPECT_EQ(status.attempt, 2);
  EXPECT_EQ(status.job_retries, 1);
  ASSERT_FALSE(status.faults.empty());
  EXPECT_EQ(status.faults.back().kind, "NodeUnhealthy");
  EXPECT_EQ(status.faults.back().node, "node-1");
  EXPECT_EQ(status.faults.back().exit_code, 1);
  const auto node = fake_.Stored(Resource::Nodes(), "", "node-1");
  ASSERT_TRUE(node.has_value());
  EXPECT_TRUE(node->value("spec", Json::object()).value("unschedulable", false)) << node->dump();
}

// The API server agrees with the cache: the window is over and the node healthy, so the job
// fails with PermanentError, as without the read.
TEST_F(StaleNodeCacheTest, ANodeHealthyOnTheAPIServerFailsTheJob) {
  auto result = reconciler_->Reconcile(kJobKey);
  ASSERT_TRUE(result.has_value()) << result.error().ToString();
  const policy::JobStatus status = StoredStatus();
  EXPECT_EQ(status.phase, Phase::kFailed);
  const policy::Condition* failed = status.FindCondition(policy::condition::kFailed);
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->reason, "PermanentError");
  EXPECT_EQ(status.attempt, 1);
}

// The read fails (the API server is back but throttling): nothing is decided, nothing written;
// the error sends the key back to the queue, and the next try decides on what it reads.
TEST_F(StaleNodeCacheTest, AFailedReadDecidesNothingUntilTheNodeCanBeRead) {
  FlagNodeOneBehindTheCache();
  fake_.FailNext("get", kube::ApiError(429, "TooManyRequests", "too many requests"));
  auto first = reconciler_->Reconcile(kJobKey);
  ASSERT_FALSE(first.has_value());
  EXPECT_TRUE(first.error().IsTooManyRequests()) << first.error().ToString();
  EXPECT_EQ(StatusWrites(), 0);
  EXPECT_EQ(StoredStatus().phase, Phase::kRunning);

  auto second = reconciler_->Reconcile(kJobKey);
  ASSERT_TRUE(second.has_value()) << second.error().ToString();
  EXPECT_EQ(StoredStatus().attempt, 2);
  EXPECT_NE(StoredStatus().phase, Phase::kFailed);
}

// A node deleted on the API server while the cache still shows it: a lost node, the hardware's
// fault, not the program's.
TEST_F(StaleNodeCacheTest, ANodeDeletedBehindTheCacheIsLostNotTheProgramsFault) {
  ASSERT_TRUE(fake_.Remove(Resource::Nodes(), "", "node-1", /*notify=*/false));
  auto result = reconciler_->Reconcile(kJobKey);
  ASSERT_TRUE(result.has_value()) << result.error().ToString();
  const policy::JobStatus status = StoredStatus();
  EXPECT_NE(status.phase, Phase::kFailed);
  EXPECT_EQ(status.attempt, 2);
  ASSERT_FALSE(status.faults.empty());
  EXPECT_EQ(status.faults.back().node, "node-1");
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::controller
