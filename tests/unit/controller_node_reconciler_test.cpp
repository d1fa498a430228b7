// Cordoner batches and retries, and the NodeReconciler (retrying failed cordons, automatic
// uncordon), against the fake API server.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "cache/objects.h"
#include "cache/store.h"
#include "controller/cordoner.h"
#include "controller/event_recorder.h"
#include "controller/node_reconciler.h"
#include "fake_client.h"
#include "log_capture.h"
#include "policy/cordon.h"

namespace tpujob::controller {
namespace TPUJOB_TEST_NS {

using cache::NodeInfo;
using kube::FakeClient;
using kube::Json;
using kube::Resource;
using policy::CordonPolicy;
using policy::CordonRequest;
using policy::CordonVerdict;
using std::chrono::seconds;
using ::testing::HasSubstr;

CordonRequest Request(const std::string& node, const std::string& item = "dns") {
  return CordonRequest{.node = node,
                       .job = "team/llm",
                       .reason = item.empty() ? "NodeUnhealthy" : "PreflightFailed",
                       .message = "found faulty",
                       .item = item,
                       .evidence = "uid-" + node + "/" + item};
}

CordonPolicy Permissive() {
  CordonPolicy policy;
  policy.max_cordoned = 1000;
  policy.max_fraction = 1.0;
  policy.rate_per_minute = 0;
  policy.breaker_nodes = 0;
  return policy;
}

class NodeReconcilerTest : public ::testing::Test {
 protected:
  NodeReconcilerTest() : recorder_(fake_, EventRecorderOptions{}, clock_) {
    AddCordonJobIndexer(nodes_);
  }

  void Start(CordonPolicy policy, Duration auto_uncordon_after = Duration::zero()) {
    cordoner_ = std::make_unique<Cordoner>(fake_, nodes_, recorder_, policy, clock_);
    cordoner_->SetRetryHook([this](const std::string& node) { retried_.push_back(node); });
    NodeReconcilerOptions options;
    options.auto_uncordon_after = auto_uncordon_after;
    reconciler_ =
        std::make_unique<NodeReconciler>(fake_, nodes_, *cordoner_, recorder_, options, clock_);
  }

  // A node on the API server, shown in the cache; Ready since `ready_since`.
  void AddNode(const std::string& name, WallTime ready_since, Json extra_conditions = {}) {
    Json conditions = Json::array({{{"type", "Ready"},
                                    {"status", "True"},
                                    {"lastTransitionTime", cache::FormatRfc3339(ready_since)}}});
    for (const Json& c : extra_conditions) conditions.push_back(c);
    Json node = {
        {"apiVersion", "v1"},
        {"kind", "Node"},
        {"metadata", {{"name", name}}},
        {"spec",
         {{"taints",
           Json::array(
               {{{"key", "google.com/tpu"}, {"value", "present"}, {"effect", "NoSchedule"}}})}}},
        {"status", {{"conditions", conditions}}}};
    fake_.Upsert(Resource::Nodes(), std::move(node));
    SyncCache();
  }
  void SyncCache() {
    for (const Json& node : fake_.StoredAll(Resource::Nodes())) {
      auto parsed = NodeInfo::FromJson(node);
      ASSERT_TRUE(parsed.has_value()) << node.dump();
      nodes_.Update(std::make_shared<const NodeInfo>(std::move(*parsed)));
    }
  }
  Json Stored(const std::string& name) const {
    return fake_.Stored(Resource::Nodes(), "", name).value_or(Json());
  }
  int NodePatches() const {
    int n = 0;
    for (const auto& action : fake_.actions())
      n += action.resource == "nodes" && action.verb == "patch";
    return n;
  }

  FakeClient fake_;
  FakeClock clock_;
  cache::Store<NodeInfo> nodes_;
  EventRecorder recorder_;
  std::unique_ptr<Cordoner> cordoner_;
  std::unique_ptr<NodeReconciler> reconciler_;
  std::vector<std::string> retried_;
};

TEST_F(NodeReconcilerTest, OneBatchTripsTheBreakerBeforeTheFirstCordon) {
  CordonPolicy policy = Permissive();
  policy.breaker_nodes = 3;
  Start(policy);
  for (const char* name : {"n0", "n1", "n2"}) AddNode(name, clock_.WallNow());
  const auto outcomes = cordoner_->CordonAll({Request("n0"), Request("n1"), Request("n2")});
  ASSERT_EQ(outcomes.size(), 3u);
  for (const auto& outcome : outcomes) {
    EXPECT_EQ(outcome.verdict, CordonVerdict::kSystemic) << outcome.message;
  }
  EXPECT_EQ(NodePatches(), 0);
}

TEST_F(NodeReconcilerTest, BatchBelowTheBreakerCordonsEveryNode) {
  CordonPolicy policy = Permissive();
  policy.breaker_nodes = 3;
  Start(policy);
  for (const char* name : {"n0", "n1"}) AddNode(name, clock_.WallNow());
  for (const auto& outcome : cordoner_->CordonAll({Request("n0"), Request("n1")})) {
    EXPECT_TRUE(outcome.cordoned()) << outcome.message;
  }
  EXPECT_EQ(NodePatches(), 2);
}

TEST_F(NodeReconcilerTest, FailedCordonIsKeptAndRetriedUntilWritten) {
  Start(Permissive());
  AddNode("n1", clock_.WallNow());
  fake_.FailNext("patch", kube::Error::Api(500, "InternalError", "etcd timeout"), 2);
  const Cordoner::Outcome first = cordoner_->Cordon(Request("n1", ""));
  EXPECT_EQ(first.verdict, CordonVerdict::kCordon);
  EXPECT_FALSE(first.cordoned());
  ASSERT_TRUE(first.error.has_value());
  EXPECT_EQ(retried_, std::vector<std::string>{"n1"});
  EXPECT_EQ(cordoner_->PendingRetries(), 1u);

  // The second write fails too: the node reconciler reports the error (rate-limited retry).
  auto again = reconciler_->Reconcile("n1");
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(cordoner_->PendingRetries(), 1u);

  auto done = reconciler_->Reconcile("n1");
  ASSERT_TRUE(done.has_value()) << done.error().ToString();
  EXPECT_EQ(cordoner_->PendingRetries(), 0u);
  EXPECT_EQ(Stored("n1")["spec"]["unschedulable"], true);
  EXPECT_EQ(Stored("n1")["metadata"]["annotations"]["tpujob.dev/cordon-job"], "team/llm");
  // Nothing left to retry: a later reconcile writes nothing.
  const int patches = NodePatches();
  ASSERT_TRUE(reconciler_->Reconcile("n1").has_value());
  EXPECT_EQ(NodePatches(), patches);
}

TEST_F(NodeReconcilerTest, AutomaticUncordonIsOffByDefault) {
  Start(Permissive());
  AddNode("n1", clock_.WallNow() - std::chrono::hours(5));
  ASSERT_TRUE(cordoner_->Cordon(Request("n1", "")).cordoned());
  SyncCache();
  clock_.Advance(std::chrono::hours(24));
  auto result = reconciler_->Reconcile("n1");
  ASSERT_TRUE(result.has_value());
  EXPECT_FALSE(result->requeue_after.has_value());
  EXPECT_EQ(Stored("n1")["spec"]["unschedulable"], true);
  EXPECT_FALSE(reconciler_->Interested(*nodes_.Get("n1")));
}

TEST_F(NodeReconcilerTest, UncordonsAfterTheHealthyPeriodAndOnlyThen) {
  Start(Permissive(), seconds(600));
  AddNode("n1", clock_.WallNow() - std::chrono::hours(5));
  ASSERT_TRUE(cordoner_->Cordon(Request("n1", "")).cordoned());
  SyncCache();
  ASSERT_TRUE(reconciler_->Interested(*nodes_.Get("n1")));
  EXPECT_EQ(nodes_.ByIndex(kNodesByCordonJobIndex, "team/llm").size(), 1u);

  // Healthy since the cordon (the latest timestamp): not yet.
  clock_.Advance(seconds(300));
  auto early = reconciler_->Reconcile("n1");
  ASSERT_TRUE(early.has_value());
  ASSERT_TRUE(early->requeue_after.has_value());
  EXPECT_GE(*early->requeue_after, seconds(299));
  EXPECT_LE(*early->requeue_after, seconds(301));
  EXPECT_EQ(Stored("n1")["spec"]["unschedulable"], true);

  clock_.Advance(seconds(301));
  auto due = reconciler_->Reconcile("n1");
  ASSERT_TRUE(due.has_value()) << due.error().ToString();
  const Json node = Stored("n1");
  EXPECT_FALSE(node["spec"].value("unschedulable", false)) << node.dump();
  ASSERT_EQ(node["spec"]["taints"].size(), 1u) << node.dump();
  EXPECT_EQ(node["spec"]["taints"][0]["key"], "google.com/tpu");
  const Json annotations = node["metadata"].value("annotations", Json::object());
  for (auto it = annotations.begin(); it != annotations.end(); ++it) {
    EXPECT_FALSE(it.key().starts_with("tpujob.dev/")) << it.key();
  }
  ASSERT_TRUE(recorder_.Flush(seconds(10)));
  bool event = false;
  for (const Json& e : fake_.StoredAll(Resource::Events())) {
    event = event || (e["reason"] == "NodeUncordoned" && e["involvedObject"]["name"] == "n1");
  }
  EXPECT_TRUE(event);
  SyncCache();
  EXPECT_TRUE(nodes_.ByIndex(kNodesByCordonJobIndex, "team/llm").empty());
}

// `kubectl uncordon` alone clears spec.unschedulable and leaves our NoSchedule taint, which
// kept the node out of use for good: it no longer counted as ours, so nothing ever lifted it.
TEST_F(NodeReconcilerTest, TheTaintOfANodeAPersonUncordonedIsLiftedAfterTheHealthyPeriod) {
  Start(Permissive(), seconds(60));
  AddNode("n1", clock_.WallNow() - std::chrono::hours(5));
  ASSERT_TRUE(cordoner_->Cordon(Request("n1", "")).cordoned());
  Json uncordoned = Stored("n1");
  uncordoned["spec"].erase("unschedulable");
  fake_.Upsert(Resource::Nodes(), uncordoned);
  SyncCache();
  ASSERT_TRUE(reconciler_->Interested(*nodes_.Get("n1")));

  clock_.Advance(seconds(30));
  auto early = reconciler_->Reconcile("n1");
  ASSERT_TRUE(early.has_value());
  EXPECT_TRUE(early->requeue_after.has_value());
  EXPECT_EQ(Stored("n1")["spec"]["taints"].size(), 2u);

  clock_.Advance(seconds(31));
  auto due = reconciler_->Reconcile("n1");
  ASSERT_TRUE(due.has_value()) << due.error().ToString();
  const Json node = Stored("n1");
  ASSERT_EQ(node["spec"]["taints"].size(), 1u) << node.dump();
  EXPECT_EQ(node["spec"]["taints"][0]["key"], "google.com/tpu");
  EXPECT_FALSE(node["spec"].value("unschedulable", false)) << node.dump();
}

// A cache whose node watch is broken stays behind the node: the uncordon is decided again on
// the node as the API server holds it, rather than refused (409) until the watch comes back.
TEST_F(NodeReconcilerTest, AnUncordonRefusedAsStaleIsDecidedAgainOnTheNodeAsRead) {
  Start(Permissive(), seconds(60));
  AddNode("n1", clock_.WallNow() - std::chrono::hours(5));
  AddNode("n2", clock_.WallNow() - std::chrono::hours(5));
  ASSERT_TRUE(cordoner_->Cordon(Request("n1", "")).cordoned());
  ASSERT_TRUE(cordoner_->Cordon(Request("n2", "")).cordoned());
  SyncCache();
  // Behind the cache: n1 gains a label, n2 turns unhealthy.
  Json labelled = Stored("n1");
  labelled["metadata"]["labels"] = {{"pool", "a"}};
  fake_.Upsert(Resource::Nodes(), labelled, /*notify=*/false);
  Json unhealthy = Stored("n2");
  unhealthy["status"]["conditions"].push_back(
      {{"type", "TPUUnhealthy"},
       {"status", "True"},
       {"lastTransitionTime", cache::FormatRfc3339(clock_.WallNow())}});
  fake_.Upsert(Resource::Nodes(), unhealthy, /*notify=*/false);
  clock_.Advance(seconds(61));
  LogCapture logs;

  auto n1 = reconciler_->Reconcile("n1");
  ASSERT_TRUE(n1.has_value()) << n1.error().ToString();
  EXPECT_FALSE(Stored("n1")["spec"].value("unschedulable", false));
  EXPECT_EQ(Stored("n1")["metadata"]["labels"]["pool"], "a");
  EXPECT_THAT(logs.text(), HasSubstr("deciding the uncordon again on the node as read"));

  auto n2 = reconciler_->Reconcile("n2");
  ASSERT_TRUE(n2.has_value()) << n2.error().ToString();
  EXPECT_FALSE(n2->requeue_after.has_value());
  EXPECT_EQ(Stored("n2")["spec"]["unschedulable"], true);
  EXPECT_EQ(NodePatches(), 2 + 2 + 1);  // two cordons, two refused uncordons, one written
}

TEST_F(NodeReconcilerTest, AnUnhealthyNodeStaysCordoned) {
  Start(Permissive(), seconds(60));
  AddNode("n1", clock_.WallNow() - std::chrono::hours(5),
          Json::array({{{"type", "TPUUnhealthy"},
                        {"status", "True"},
                        {"lastTransitionTime", cache::FormatRfc3339(clock_.WallNow())}}}));
  ASSERT_TRUE(cordoner_->Cordon(Request("n1", "")).cordoned());
  SyncCache();
  clock_.Advance(std::chrono::hours(2));
  auto result = reconciler_->Reconcile("n1");
  ASSERT_TRUE(result.has_value());
  EXPECT_FALSE(result->requeue_after.has_value());
  EXPECT_EQ(Stored("n1")["spec"]["unschedulable"], true);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::controller
