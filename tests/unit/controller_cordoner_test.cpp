#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "cache/objects.h"
#include "cache/store.h"
#include "controller/cordoner.h"
#include "controller/event_recorder.h"
#include "cordon_verdict_printer.h"
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
using ::testing::SizeIs;

constexpr auto kWait = seconds(10);  // bound on waiting for the event recorder; never reached

CordonRequest Request(const std::string& node, const std::string& evidence = "pod-uid-1/dns",
                      const std::string& item = "dns") {
  return CordonRequest{.node = node,
                       .job = "team/llm",
                       .reason = "PreflightFailed",
                       .message = "pre-flight check dns failed: worker-1 does not resolve",
                       .item = item,
                       .evidence = evidence};
}

// Cap and rate out of the way unless a test sets them.
CordonPolicy Permissive() {
  CordonPolicy policy;
  policy.max_cordoned = 1000;
  policy.max_fraction = 1.0;
  policy.rate_per_minute = 0;
  policy.breaker_nodes = 0;
  return policy;
}

// A FakeClient whose node patches can be held: while held, each one waits (bounded) until
// released, and the client counts how many were waiting at once.
class GatedClient : public FakeClient {
 public:
  kube::Result<Json> Patch(const Resource& r, const std::string& ns, const std::string& name,
                           kube::PatchType type, const Json& body,
                           const kube::PatchOptions& options = {}) override {
    if (r.plural == "nodes") {
      std::unique_lock<std::mutex> lock(gate_mu_);
      if (held_) {
        ++waiting_;
        max_waiting_ = std::max(max_waiting_, waiting_);
        if (waiting_ >= release_waiting_) held_ = false;
        gate_cv_.notify_all();
        gate_cv_.wait_for(lock, kWait, [&] { return !held_; });
        --waiting_;
        std::optional<kube::Error> failure;
        if (!fail_held_.empty()) {
          failure = fail_held_.front();
          fail_held_.erase(fail_held_.begin());
        }
        lock.unlock();
        if (failure) return std::unexpected(*failure);
      }
    }
    return FakeClient::Patch(r, ns, name, type, body, options);
  }

  // Holds node patches; each waits until Release(), or until `together` of them wait at once.
  void Hold(int together = 1 << 30) {
    std::lock_guard<std::mutex> lock(gate_mu_);
    held_ = true;
    release_waiting_ = together;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(gate_mu_);
    held_ = false;
    gate_cv_.notify_all();
  }
  // The next held patch fails with `error` once released.
  void FailHeld(kube::Error error) {
    std::lock_guard<std::mutex> lock(gate_mu_);
    fail_held_.push_back(std::move(error));
  }
  // Blocks (bounded) until `n` patches wait at the gate.
  bool AwaitWaiting(int n) {
    std::unique_lock<std::mutex> lock(gate_mu_);
    return gate_cv_.wait_for(lock, kWait, [&] { return waiting_ >= n; });
  }
  int MaxWaiting() {
    std::lock_guard<std::mutex> lock(gate_mu_);
    return max_waiting_;
  }

 private:
  std::mutex gate_mu_;
  std::condition_variable gate_cv_;
  bool held_ = false;
  int release_waiting_ = 0;
  int waiting_ = 0;
  int max_waiting_ = 0;
  std::vector<kube::Error> fail_held_;
};

class CordonerTest : public ::testing::Test {
 protected:
  CordonerTest() : recorder_(fake_, RecorderOptions(), clock_) {}

  static EventRecorderOptions RecorderOptions() {
    EventRecorderOptions options;
    options.instance = "operator-0";
    options.seed = 7;
    return options;
  }

  void Start(CordonPolicy policy) {
    cordoner_ = std::make_unique<Cordoner>(fake_, nodes_, recorder_, policy, clock_);
  }

  // Creates a node on the API server and shows it in the cache.
  void AddNode(const std::string& name, Json taints = Json::array()) {
    Json node = {{"apiVersion", "v1"},
                 {"kind", "Node"},
                 {"metadata", {{"name", name}, {"annotations", {{"zone", "us-central2-b"}}}}},
                 {"spec", {{"taints", std::move(taints)}}}};
    nodes_.Update(Parse(fake_.Upsert(Resource::Nodes(), std::move(node))));
  }
  void AddNodes(int count) {
    for (int i = 0; i < count; ++i) AddNode("n" + std::to_string(i));
  }

  // The cache catches up with the API server.
  void SyncCache() {
    for (const Json& node : fake_.StoredAll(Resource::Nodes())) nodes_.Update(Parse(node));
  }

  static std::shared_ptr<const NodeInfo> Parse(const Json& node) {
    kube::Result<NodeInfo> parsed = NodeInfo::FromJson(node);
    EXPECT_TRUE(parsed.has_value()) << node.dump();
    return std::make_shared<const NodeInfo>(parsed.value_or(NodeInfo{}));
  }

  Json StoredNode(const std::string& name) const {
    return fake_.Stored(Resource::Nodes(), "", name).value_or(Json());
  }

  std::vector<FakeClient::Action> NodeWrites() const {
    std::vector<FakeClient::Action> out;
    for (const auto& action : fake_.actions()) {
      if (action.resource == "nodes") out.push_back(action);
    }
    return out;
  }

  std::vector<Json> NodeEvents() {
    EXPECT_TRUE(recorder_.Flush(kWait));
    std::vector<Json> out;
    for (const Json& event : fake_.StoredAll(Resource::Events())) {
      if (event["involvedObject"]["kind"] == "Node") out.push_back(event);
    }
    return out;
  }

  GatedClient fake_;
  FakeClock clock_;
  cache::Store<NodeInfo> nodes_;
  EventRecorder recorder_;
  std::unique_ptr<Cordoner> cordoner_;
};

TEST_F(CordonerTest, CordonPatchesTheNodeAndRecordsAnEventOnIt) {
  AddNode("n1",
          Json::array({{{"key", "nvidia.com/gpu"}, {"value", "present"}, {"effect", "NoSchedule"}},
                       {{"key", "node.kubernetes.io/unreachable"}, {"effect", "NoExecute"}}}));
  const std::string version = StoredNode("n1")["metadata"]["resourceVersion"];
  Start(CordonPolicy{});
  const std::string at = cache::FormatRfc3339(clock_.WallNow());

  const Cordoner::Outcome outcome = cordoner_->Cordon(Request("n1"));
  EXPECT_EQ(outcome.verdict, CordonVerdict::kCordon);
  EXPECT_TRUE(outcome.cordoned());
  EXPECT_EQ(outcome.message, "cordoned node n1");
  EXPECT_FALSE(outcome.error.has_value());

  const std::vector<FakeClient::Action> writes = NodeWrites();
  ASSERT_THAT(writes, SizeIs(1));
  EXPECT_EQ(writes[0].verb, "patch");
  EXPECT_EQ(writes[0].name, "n1");
  EXPECT_EQ(writes[0].ns, "");
  const Json& body = writes[0].body;
  EXPECT_EQ(body["spec"]["unschedulable"], true);
  EXPECT_EQ(
      body["spec"]["taints"],
      Json::array({{{"key", "nvidia.com/gpu"}, {"value", "present"}, {"effect", "NoSchedule"}},
                   {{"key", "node.kubernetes.io/unreachable"}, {"effect", "NoExecute"}},
                   {{"key", "tpujob.dev/faulty"},
                    {"value", "PreflightFailed"},
                    {"effect", "NoSchedule"}}}));
  EXPECT_EQ(body["metadata"]["resourceVersion"], version);
  EXPECT_EQ(
      body["metadata"]["annotations"],
      (Json{{"tpujob.dev/cordoned-by", "tpujob-operator"},
            {"tpujob.dev/cordon-reason", "PreflightFailed"},
            {"tpujob.dev/cordon-message", "pre-flight check dns failed: worker-1 does not resolve"},
            {"tpujob.dev/cordoned-at", at},
            {"tpujob.dev/cordon-job", "team/llm"},
            {"tpujob.dev/cordon-evidence", "pod-uid-1/dns"}}));

  // The merge patch keeps annotations that are not ours.
  const Json node = StoredNode("n1");
  EXPECT_EQ(node["metadata"]["annotations"]["zone"], "us-central2-b");
  EXPECT_EQ(node["spec"]["unschedulable"], true);

  const std::vector<Json> events = NodeEvents();
  ASSERT_THAT(events, SizeIs(1));
  EXPECT_EQ(events[0]["type"], "Warning");
  EXPECT_EQ(events[0]["reason"], "NodeCordoned");
  EXPECT_EQ(events[0]["involvedObject"]["name"], "n1");
  EXPECT_EQ(events[0]["involvedObject"]["uid"], node["metadata"]["uid"]);
  EXPECT_EQ(events[0]["metadata"]["namespace"], "default");
  EXPECT_THAT(events[0]["message"].get<std::string>(),
              HasSubstr("job team/llm: PreflightFailed: pre-flight check dns failed"));

  SyncCache();
  EXPECT_EQ(cordoner_->CordonedByUs(), 1);
}

TEST_F(CordonerTest, ExistingFaultyTaintIsKept) {
  AddNode("n1",
          Json::array(
              {{{"key", "tpujob.dev/faulty"}, {"value", "NodeLost"}, {"effect", "NoSchedule"}}}));
  Start(Permissive());
  ASSERT_EQ(cordoner_->Cordon(Request("n1")).verdict, CordonVerdict::kCordon);
  EXPECT_EQ(StoredNode("n1")["spec"]["taints"],
            Json::array(
                {{{"key", "tpujob.dev/faulty"}, {"value", "NodeLost"}, {"effect", "NoSchedule"}}}));
}

TEST_F(CordonerTest, DryRunWritesNothing) {
  AddNode("n1");
  CordonPolicy policy;
  policy.dry_run = true;
  Start(policy);
  LogCapture capture;

  const Cordoner::Outcome outcome = cordoner_->Cordon(Request("n1"));
  EXPECT_EQ(outcome.verdict, CordonVerdict::kDryRun);
  EXPECT_FALSE(outcome.cordoned());
  EXPECT_EQ(outcome.message, "would cordon node n1 (dry run)");
  EXPECT_THAT(fake_.actions(), SizeIs(0));
  EXPECT_THAT(NodeEvents(), SizeIs(0));
  EXPECT_EQ(cordoner_->CordonedByUs(), 0);
  EXPECT_THAT(capture.text(), HasSubstr("level=info msg=\"cordon\" node=n1 job=team/llm "
                                        "reason=PreflightFailed verdict=DryRun dry_run=true"));
}

TEST_F(CordonerTest, LogsOneLinePerDecision) {
  AddNode("n1");
  CordonPolicy policy = Permissive();
  policy.max_cordoned = 1;
  Start(policy);
  LogCapture capture;
  ASSERT_EQ(cordoner_->Cordon(Request("n1")).verdict, CordonVerdict::kCordon);
  ASSERT_EQ(cordoner_->Cordon(Request("missing")).verdict, CordonVerdict::kNodeMissing);
  const std::string text = capture.text();
  EXPECT_THAT(text, HasSubstr("level=info msg=\"cordon\" node=n1 job=team/llm "
                              "reason=PreflightFailed verdict=Cordon dry_run=false item=dns "
                              "evidence=pod-uid-1/dns cordoned=0 nodes=1 "
                              "detail=\"cordoned node n1\"\n"));
  EXPECT_THAT(text, HasSubstr("msg=\"cordon\" node=missing job=team/llm reason=PreflightFailed "
                              "verdict=NodeMissing dry_run=false"));
}

TEST_F(CordonerTest, CapCountsCordonsTheCacheDoesNotShowYet) {
  AddNodes(5);
  CordonPolicy policy = Permissive();
  policy.max_cordoned = 2;
  Start(policy);

  EXPECT_EQ(cordoner_->Cordon(Request("n0")).verdict, CordonVerdict::kCordon);
  EXPECT_EQ(cordoner_->Cordon(Request("n1")).verdict, CordonVerdict::kCordon);
  EXPECT_EQ(cordoner_->CordonedByUs(), 2);  // the cache still shows both schedulable
  const Cordoner::Outcome capped = cordoner_->Cordon(Request("n2"));
  EXPECT_EQ(capped.verdict, CordonVerdict::kCapReached);
  EXPECT_EQ(capped.message, "node n2 not cordoned: 2 nodes already cordoned (cap 2 of 5 nodes)");
  EXPECT_THAT(NodeWrites(), SizeIs(2));

  // Once the cache shows them they are counted once, and keep counting past the wait.
  SyncCache();
  EXPECT_EQ(cordoner_->CordonedByUs(), 2);
  clock_.Advance(kUnconfirmedCordonTtl + seconds(1));
  EXPECT_EQ(cordoner_->CordonedByUs(), 2);
  EXPECT_EQ(cordoner_->Cordon(Request("n3")).verdict, CordonVerdict::kCapReached);
}

TEST_F(CordonerTest, NodeCordonedHereIsNotCordonedTwiceWhileTheCacheLags) {
  AddNode("n1");
  Start(Permissive());
  ASSERT_EQ(cordoner_->Cordon(Request("n1", "pod-uid-1/dns")).verdict, CordonVerdict::kCordon);
  const Cordoner::Outcome again = cordoner_->Cordon(Request("n1", "pod-uid-2/ulimit", "ulimit"));
  EXPECT_EQ(again.verdict, CordonVerdict::kAlreadyCordoned);
  EXPECT_EQ(again.message, "node n1 is already cordoned");
  EXPECT_THAT(NodeWrites(), SizeIs(1));
  EXPECT_EQ(cordoner_->CordonedByUs(), 1);
}

TEST_F(CordonerTest, CordonTheCacheNeverShowsStopsCountingAfterTheWait) {
  AddNodes(2);
  Start(Permissive());
  ASSERT_EQ(cordoner_->Cordon(Request("n0")).verdict, CordonVerdict::kCordon);
  ASSERT_EQ(cordoner_->Cordon(Request("n1")).verdict, CordonVerdict::kCordon);
  EXPECT_EQ(cordoner_->CordonedByUs(), 2);

  // n0 is deleted; n1 is uncordoned by hand before the cache saw the cordon.
  nodes_.Delete("n0");
  EXPECT_EQ(cordoner_->CordonedByUs(), 1);
  clock_.Advance(kUnconfirmedCordonTtl);
  EXPECT_EQ(cordoner_->CordonedByUs(), 0);
}

TEST_F(CordonerTest, HumanUncordonIsNotUndoneWithoutNewEvidence) {
  AddNode("n1");
  Start(Permissive());
  ASSERT_EQ(cordoner_->Cordon(Request("n1", "pod-uid-1/dns")).verdict, CordonVerdict::kCordon);
  SyncCache();

  Json node = StoredNode("n1");
  node["spec"]["unschedulable"] = false;  // kubectl uncordon n1
  fake_.Upsert(Resource::Nodes(), node);
  SyncCache();
  EXPECT_EQ(cordoner_->CordonedByUs(), 0);

  const Cordoner::Outcome same = cordoner_->Cordon(Request("n1", "pod-uid-1/dns"));
  EXPECT_EQ(same.verdict, CordonVerdict::kHumanUncordoned);
  EXPECT_EQ(same.message,
            "node n1 not cordoned: it was uncordoned by hand after the same evidence");
  EXPECT_THAT(NodeWrites(), SizeIs(1));

  EXPECT_EQ(cordoner_->Cordon(Request("n1", "pod-uid-9/dns")).verdict, CordonVerdict::kCordon);
  EXPECT_EQ(StoredNode("n1")["spec"]["unschedulable"], true);
  EXPECT_EQ(StoredNode("n1")["metadata"]["annotations"]["tpujob.dev/cordon-evidence"],
            "pod-uid-9/dns");
  EXPECT_THAT(StoredNode("n1")["spec"]["taints"], SizeIs(1));
}

TEST_F(CordonerTest, NodeUncordonedWithOurAnnotationsDroppedIsCordonedAgainForANewFault) {
  AddNode("n1");
  Start(Permissive());
  ASSERT_EQ(cordoner_->Cordon(Request("n1", "pod-uid-1/dns")).verdict, CordonVerdict::kCordon);
  SyncCache();  // the cache shows the cordon; no cordon decision runs meanwhile

  // Repaired and uncordoned within kUnconfirmedCordonTtl, our annotations and taint dropped (as
  // the operator's own automatic uncordon does).
  Json node = StoredNode("n1");
  node["spec"]["unschedulable"] = false;
  node["spec"]["taints"] = Json::array();
  node["metadata"]["annotations"] = {{"zone", "us-central2-b"}};
  fake_.Upsert(Resource::Nodes(), node);
  SyncCache();
  EXPECT_EQ(cordoner_->CordonedByUs(), 0);

  clock_.Advance(seconds(10));
  const Cordoner::Outcome again = cordoner_->Cordon(Request("n1", "pod-uid-2/dns"));
  EXPECT_EQ(again.verdict, CordonVerdict::kCordon) << again.message;
  EXPECT_EQ(StoredNode("n1")["spec"]["unschedulable"], true);
  EXPECT_THAT(NodeWrites(), SizeIs(2));
}

TEST_F(CordonerTest, FailedWriteIsReportedAndGivesTheTokenBack) {
  AddNodes(2);
  CordonPolicy policy = Permissive();
  policy.rate_per_minute = 1;
  Start(policy);
  fake_.FailNext("patch", kube::ApiError(500, "InternalError", "etcd timeout"));

  const Cordoner::Outcome failed = cordoner_->Cordon(Request("n0"));
  EXPECT_EQ(failed.verdict, CordonVerdict::kCordon);
  EXPECT_FALSE(failed.cordoned());
  ASSERT_TRUE(failed.error.has_value());
  EXPECT_EQ(failed.error->http_status, 500);
  EXPECT_THAT(failed.message, HasSubstr("cordoning node n0 failed: 500"));
  EXPECT_EQ(cordoner_->CordonedByUs(), 0);
  EXPECT_THAT(NodeEvents(), SizeIs(0));
  EXPECT_NE(StoredNode("n0")["spec"].value("unschedulable", false), true);

  // The retry is not rate limited by the attempt that changed nothing.
  EXPECT_TRUE(cordoner_->Cordon(Request("n0")).cordoned());
  EXPECT_EQ(cordoner_->Cordon(Request("n1")).verdict, CordonVerdict::kRateLimited);
}

// Found by the fault campaign: with the node watch broken, every cordon built on the cached
// node was refused as stale (409) until the watch came back, 60 s later, and the job's next
// attempt was placed on the faulty node meanwhile.
class StaleCacheCordonTest : public CordonerTest {
 protected:
  // The node changes on the API server without the cache hearing of it (a lost watch event);
  // returns the version the API server holds now.
  std::string ChangeBehindTheCache(const std::string& name,
                                   const std::function<void(Json&)>& edit) {
    Json node = StoredNode(name);
    edit(node);
    return fake_.Upsert(Resource::Nodes(), std::move(node),
                        /*notify=*/false)["metadata"]["resourceVersion"];
  }
};

TEST_F(StaleCacheCordonTest, ACordonRefusedAsStaleIsWrittenOnTheNodeAsTheApiServerHoldsIt) {
  AddNode("n1");
  const std::string cached = StoredNode("n1")["metadata"]["resourceVersion"];
  const std::string read = ChangeBehindTheCache("n1", [](Json& node) {
    node["metadata"]["labels"] = {{"pool", "a"}};
    node["spec"]["taints"] =
        Json::array({{{"key", "example.com/maintenance"}, {"effect", "NoSchedule"}}});
  });
  Start(Permissive());
  LogCapture logs;

  const Cordoner::Outcome outcome = cordoner_->Cordon(Request("n1"));
  EXPECT_EQ(outcome.verdict, CordonVerdict::kCordon);
  EXPECT_TRUE(outcome.cordoned()) << outcome.message;
  EXPECT_EQ(outcome.message, "cordoned node n1");

  const std::vector<FakeClient::Action> writes = NodeWrites();
  ASSERT_THAT(writes, SizeIs(2));
  EXPECT_EQ(writes[0].body["metadata"]["resourceVersion"], cached);
  EXPECT_EQ(writes[1].body["metadata"]["resourceVersion"], read);
  EXPECT_EQ(writes[1].body["metadata"]["annotations"], writes[0].body["metadata"]["annotations"]);
  // The change the cache never saw is kept, and the cordon is added to it.
  const Json node = StoredNode("n1");
  EXPECT_EQ(node["spec"]["unschedulable"], true);
  EXPECT_EQ(node["metadata"]["labels"]["pool"], "a");
  EXPECT_EQ(node["spec"]["taints"],
            Json::array({{{"key", "example.com/maintenance"}, {"effect", "NoSchedule"}},
                         {{"key", "tpujob.dev/faulty"},
                          {"value", "PreflightFailed"},
                          {"effect", "NoSchedule"}}}));
  EXPECT_THAT(NodeEvents(), SizeIs(1));
  EXPECT_THAT(logs.text(), HasSubstr("the node changed since the cache saw it"));
  EXPECT_THAT(logs.text(), HasSubstr("built_on=" + cached));

  // Counted against the cap until the cache shows it, even once the cache reaches the version
  // the cordon was rebuilt on.
  Json before = StoredNode("n1");
  before["metadata"]["resourceVersion"] = read;
  before["spec"].erase("unschedulable");
  before["metadata"]["annotations"] = {{"zone", "us-central2-b"}};
  nodes_.Update(Parse(before));
  EXPECT_EQ(cordoner_->CordonedByUs(), 1);
  SyncCache();
  EXPECT_EQ(cordoner_->CordonedByUs(), 1);
}

TEST_F(StaleCacheCordonTest, ANodeCordonedBehindTheCacheIsNotCordonedAgain) {
  AddNodes(2);
  CordonPolicy policy = Permissive();
  policy.rate_per_minute = 1;
  Start(policy);
  ChangeBehindTheCache("n0", [](Json& node) {
    node["spec"]["unschedulable"] = true;
    node["spec"]["taints"] = Json::array(
        {{{"key", "tpujob.dev/faulty"}, {"value", "NodeLost"}, {"effect", "NoSchedule"}}});
  });

  const Cordoner::Outcome outcome = cordoner_->Cordon(Request("n0"));
  EXPECT_EQ(outcome.verdict, CordonVerdict::kAlreadyCordoned);
  EXPECT_FALSE(outcome.error.has_value());
  EXPECT_EQ(outcome.message, "node n0 is already cordoned");
  EXPECT_THAT(NodeWrites(), SizeIs(1));  // the refused one
  EXPECT_THAT(NodeEvents(), SizeIs(0));
  EXPECT_EQ(cordoner_->PendingRetries(), 0u);
  EXPECT_EQ(cordoner_->CordonedByUs(), 0);
  // No rate token is spent on a cordon that was not written.
  EXPECT_TRUE(cordoner_->Cordon(Request("n1")).cordoned());
}

TEST_F(StaleCacheCordonTest, ANodeAPersonUncordonedBehindTheCacheStaysUncordoned) {
  AddNode("n1");
  Start(Permissive());
  // Cordoned, then uncordoned by a person (`kubectl uncordon n1`): the cache saw neither.
  ASSERT_TRUE(cordoner_->Cordon(Request("n1", "pod-uid-1/dns")).cordoned());
  clock_.Advance(kUnconfirmedCordonTtl);
  ChangeBehindTheCache("n1", [](Json& node) { node["spec"]["unschedulable"] = false; });

  // The same evidence again: the cache shows a node never cordoned, the API server the person's
  // decision, which stands.
  const Cordoner::Outcome outcome = cordoner_->Cordon(Request("n1", "pod-uid-1/dns"));
  EXPECT_EQ(outcome.verdict, CordonVerdict::kHumanUncordoned) << outcome.message;
  EXPECT_FALSE(outcome.error.has_value());
  EXPECT_EQ(StoredNode("n1")["spec"]["unschedulable"], false);
  EXPECT_THAT(NodeWrites(), SizeIs(2));  // the first cordon and the refused one
}

TEST_F(StaleCacheCordonTest, ANodeDeletedBehindTheCacheIsReportedMissing) {
  AddNodes(2);
  Start(Permissive());
  // Gone before the write (404)...
  fake_.Remove(Resource::Nodes(), "", "n0", /*notify=*/false);
  const Cordoner::Outcome before = cordoner_->Cordon(Request("n0"));
  EXPECT_EQ(before.verdict, CordonVerdict::kNodeMissing) << before.message;
  EXPECT_FALSE(before.error.has_value());
  EXPECT_EQ(before.message, "node n0 not cordoned: no such node");

  // ... and between a write refused as stale and the read.
  fake_.FailNext("patch", kube::ApiError(409, "Conflict", "the object has been modified"));
  fake_.Remove(Resource::Nodes(), "", "n1", /*notify=*/false);
  const Cordoner::Outcome between = cordoner_->Cordon(Request("n1"));
  EXPECT_EQ(between.verdict, CordonVerdict::kNodeMissing) << between.message;
  EXPECT_FALSE(between.error.has_value());

  EXPECT_EQ(cordoner_->PendingRetries(), 0u);
  EXPECT_EQ(cordoner_->CordonedByUs(), 0);
  EXPECT_THAT(NodeEvents(), SizeIs(0));
}

TEST_F(StaleCacheCordonTest, ANodeThatKeepsChangingIsRetriedLaterWithBackOff) {
  AddNode("n1");
  Start(Permissive());
  fake_.FailNext("patch", kube::ApiError(409, "Conflict", "the object has been modified"),
                 kCordonWriteAttempts);

  const Cordoner::Outcome outcome = cordoner_->Cordon(Request("n1"));
  EXPECT_EQ(outcome.verdict, CordonVerdict::kCordon);
  ASSERT_TRUE(outcome.error.has_value());
  EXPECT_TRUE(outcome.error->IsConflict());
  EXPECT_THAT(NodeWrites(), SizeIs(kCordonWriteAttempts));
  EXPECT_EQ(cordoner_->PendingRetries(), 1u);
  EXPECT_EQ(cordoner_->CordonedByUs(), 0);

  const std::optional<Cordoner::Outcome> retried = cordoner_->Retry("n1");
  ASSERT_TRUE(retried.has_value());
  EXPECT_TRUE(retried->cordoned()) << retried->message;
  EXPECT_EQ(StoredNode("n1")["spec"]["unschedulable"], true);
}

TEST_F(StaleCacheCordonTest, AReadThatFailsKeepsTheCordonForRetry) {
  AddNode("n1");
  Start(Permissive());
  ChangeBehindTheCache("n1", [](Json& node) { node["metadata"]["labels"] = {{"pool", "a"}}; });
  fake_.FailNext("get", kube::ApiError(429, "TooManyRequests", "too many requests"));

  const Cordoner::Outcome outcome = cordoner_->Cordon(Request("n1"));
  EXPECT_EQ(outcome.verdict, CordonVerdict::kCordon);
  ASSERT_TRUE(outcome.error.has_value());
  EXPECT_EQ(outcome.error->http_status, 429);
  EXPECT_EQ(cordoner_->PendingRetries(), 1u);
  ASSERT_TRUE(cordoner_->Retry("n1").value().cordoned());
  EXPECT_EQ(StoredNode("n1")["metadata"]["labels"]["pool"], "a");
  EXPECT_EQ(StoredNode("n1")["spec"]["unschedulable"], true);
}

TEST_F(CordonerTest, MessagesForRefusedCordons) {
  AddNodes(4);
  CordonPolicy policy = Permissive();
  policy.breaker_nodes = 2;
  policy.rate_per_minute = 1;
  Start(policy);
  EXPECT_EQ(cordoner_->Cordon(Request("n0", "e0", "")).message, "cordoned node n0");
  EXPECT_EQ(cordoner_->Cordon(Request("n1", "e1", "")).message,
            "node n1 not cordoned: more than 1 new cordons per minute (rate limit)");
  EXPECT_EQ(cordoner_->Cordon(Request("gone")).message, "node gone not cordoned: no such node");
  EXPECT_EQ(cordoner_->Cordon(Request("n2", "e2", "disk-size shm")).verdict,
            CordonVerdict::kRateLimited);
  const Cordoner::Outcome systemic = cordoner_->Cordon(Request("n3", "e3", "disk-size shm"));
  EXPECT_EQ(systemic.verdict, CordonVerdict::kSystemic);
  EXPECT_EQ(systemic.message,
            "node n3 not cordoned: pre-flight item disk-size shm failed on 2 nodes within 10m, a "
            "configuration problem rather than faulty hardware (circuit breaker)");

  CordonPolicy off;
  off.enabled = false;
  Cordoner disabled(fake_, nodes_, recorder_, off, clock_);
  EXPECT_EQ(disabled.Cordon(Request("n1")).message,
            "node n1 not cordoned: cordoning faulty nodes is disabled");
  EXPECT_THAT(NodeWrites(), SizeIs(1));
}

TEST_F(CordonerTest, ConcurrentCordonsNeverExceedTheCap) {
  constexpr int kThreads = 8;
  constexpr int kNodesPerThread = 6;
  AddNodes(kThreads * kNodesPerThread);
  CordonPolicy policy = Permissive();
  policy.max_cordoned = 5;
  Start(policy);

  std::atomic<int> cordoned{0};
  std::atomic<int> capped{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < kNodesPerThread; ++i) {
        const std::string node = "n" + std::to_string(t * kNodesPerThread + i);
        const Cordoner::Outcome outcome = cordoner_->Cordon(Request(node, "pod-" + node + "/dns"));
        if (outcome.cordoned()) ++cordoned;
        if (outcome.verdict == CordonVerdict::kCapReached) ++capped;
      }
    });
  }
  for (std::thread& worker : workers) worker.join();

  EXPECT_EQ(cordoned.load(), 5);
  EXPECT_EQ(capped.load(), kThreads * kNodesPerThread - 5);
  EXPECT_THAT(NodeWrites(), SizeIs(5));
  EXPECT_EQ(cordoner_->CordonedByUs(), 5);
  int unschedulable = 0;
  for (const Json& node : fake_.StoredAll(Resource::Nodes())) {
    unschedulable += node["spec"].value("unschedulable", false) ? 1 : 0;
  }
  EXPECT_EQ(unschedulable, 5);
  EXPECT_THAT(NodeEvents(), SizeIs(5));
}

// A burst of faults on many nodes: each cordon's write does not wait for the one before it.
TEST_F(CordonerTest, CordonsOfDifferentNodesAreWrittenAtTheSameTime) {
  constexpr int kNodes = 4;
  AddNodes(kNodes);
  Start(Permissive());
  fake_.Hold(/*together=*/kNodes);  // each write is answered once all four are in flight
  std::vector<std::thread> workers;
  std::vector<Cordoner::Outcome> outcomes(kNodes);
  for (int i = 0; i < kNodes; ++i) {
    workers.emplace_back([&, i] {
      outcomes[i] = cordoner_->Cordon(Request("n" + std::to_string(i), "e" + std::to_string(i)));
    });
  }
  for (std::thread& worker : workers) worker.join();
  EXPECT_EQ(fake_.MaxWaiting(), kNodes);
  for (const auto& outcome : outcomes) EXPECT_TRUE(outcome.cordoned()) << outcome.message;
  EXPECT_EQ(cordoner_->CordonedByUs(), kNodes);
}

// While a cordon's write is on its way it counts against the cap and answers a second request
// for the same node; when it fails, both are given back.
TEST_F(CordonerTest, CordonBeingWrittenCountsAgainstTheCapUntilItFails) {
  AddNodes(3);
  CordonPolicy policy = Permissive();
  policy.max_cordoned = 1;
  policy.rate_per_minute = 1;
  Start(policy);
  fake_.Hold();
  fake_.FailHeld(kube::ApiError(500, "InternalError", "etcdserver: request timed out"));
  Cordoner::Outcome first;
  std::thread writer([&] { first = cordoner_->Cordon(Request("n0")); });
  ASSERT_TRUE(fake_.AwaitWaiting(1));

  EXPECT_EQ(cordoner_->CordonedByUs(), 1);
  EXPECT_EQ(cordoner_->Cordon(Request("n1", "e1")).verdict, CordonVerdict::kCapReached);
  EXPECT_EQ(cordoner_->Cordon(Request("n0", "e0b")).verdict, CordonVerdict::kAlreadyCordoned);
  // The node changes meanwhile (a heartbeat): the write still counts.
  SyncCache();
  nodes_.Update(Parse(fake_.Upsert(Resource::Nodes(), StoredNode("n0"))));
  EXPECT_EQ(cordoner_->CordonedByUs(), 1);

  fake_.Release();
  writer.join();
  EXPECT_EQ(first.verdict, CordonVerdict::kCordon);
  ASSERT_TRUE(first.error.has_value()) << first.message;
  EXPECT_EQ(cordoner_->CordonedByUs(), 0);
  EXPECT_EQ(cordoner_->PendingRetries(), 1u);
  // The cap's place and the rate token are free again.
  EXPECT_TRUE(cordoner_->Cordon(Request("n1", "e1")).cordoned());
  EXPECT_EQ(cordoner_->CordonedByUs(), 1);
}

// The safety limits kept in a ConfigMap: what the next leader needs and the nodes cannot tell.
class CordonerStateTest : public CordonerTest {
 protected:
  static constexpr char kNamespace[] = "tpujob-system";
  static constexpr char kName[] = "tpujob-operator-cordon-state";

  static CordonPolicy Limits() {
    CordonPolicy policy = Permissive();
    policy.rate_per_minute = 6;
    policy.breaker_nodes = 3;
    return policy;
  }
  std::unique_ptr<Cordoner> Leader(bool keep_state = true) {
    auto cordoner = std::make_unique<Cordoner>(fake_, nodes_, recorder_, Limits(), clock_);
    if (keep_state) cordoner->KeepStateIn({kNamespace, kName});
    return cordoner;
  }
  Json SavedState() const {
    const auto configmap = fake_.Stored(Resource::ConfigMaps(), kNamespace, kName);
    if (!configmap) return Json();
    return Json::parse((*configmap)["data"][std::string(kCordonStateKey)].get<std::string>());
  }
  // Automatic uncordon of `name`: the node as it was before, none of our annotations left.
  void Uncordon(const std::string& name) { AddNode(name); }
};

// The case the fault campaign found: the old leader cordoned two nodes for item dns and the
// breaker refused the third; auto-uncordon then lifted both cordons, and the leader changed.
TEST_F(CordonerStateTest, ANewLeaderKeepsTheBreakerTheOldOneTrippedAfterItsCordonsWereLifted) {
  AddNodes(6);
  {
    auto old_leader = Leader();
    EXPECT_TRUE(old_leader->Cordon(Request("n0")).cordoned());
    EXPECT_TRUE(old_leader->Cordon(Request("n1", "pod-uid-2/dns")).cordoned());
    EXPECT_EQ(old_leader->Cordon(Request("n2", "pod-uid-3/dns")).verdict, CordonVerdict::kSystemic);
  }
  const Json saved = SavedState();
  ASSERT_TRUE(saved.is_object()) << "nothing saved";
  EXPECT_EQ(saved["items"]["dns"]["nodes"].size(), 3u) << saved.dump();
  Uncordon("n0");
  Uncordon("n1");
  clock_.Advance(seconds(15));

  auto new_leader = Leader();
  fake_.ClearActions();
  const Cordoner::Outcome refused = new_leader->Cordon(Request("n3", "pod-uid-4/dns"));
  EXPECT_EQ(refused.verdict, CordonVerdict::kSystemic) << refused.message;
  EXPECT_THAT(NodeWrites(), SizeIs(0));

  // A leader that keeps nothing would have cordoned it: the nodes no longer show the cordons.
  auto forgetful = Leader(/*keep_state=*/false);
  EXPECT_TRUE(forgetful->Cordon(Request("n4", "pod-uid-5/dns")).cordoned());
}

TEST_F(CordonerStateTest, ANewLeaderKeepsTheRateTheOldOneUsedUp) {
  AddNodes(10);
  {
    auto old_leader = Leader();
    for (int i = 0; i < 6; ++i) {
      const std::string node = "n" + std::to_string(i);
      EXPECT_TRUE(old_leader->Cordon(Request(node, "pod/" + node, "")).cordoned()) << node;
    }
  }
  for (int i = 0; i < 6; ++i) Uncordon("n" + std::to_string(i));
  clock_.Advance(seconds(5));  // half a token
  auto new_leader = Leader();
  EXPECT_EQ(new_leader->Cordon(Request("n6", "pod/n6", "")).verdict, CordonVerdict::kRateLimited);
  clock_.Advance(seconds(5));
  EXPECT_TRUE(new_leader->Cordon(Request("n6", "pod/n6", "")).cordoned());
}

TEST_F(CordonerStateTest, NoNodeIsCordonedWhileTheStateCannotBeRead) {
  AddNodes(2);
  auto leader = Leader();
  fake_.FailNext("get", kube::ApiError(403, "Forbidden", "configmaps is forbidden"));
  const Cordoner::Outcome failed = leader->Cordon(Request("n0"));
  EXPECT_FALSE(failed.cordoned());
  ASSERT_TRUE(failed.error.has_value());
  EXPECT_THAT(failed.message, HasSubstr("reading the cordon safety state"));
  EXPECT_THAT(failed.message, HasSubstr("forbidden"));
  EXPECT_THAT(NodeWrites(), SizeIs(0));
  EXPECT_EQ(leader->PendingRetries(), 1u);

  const std::optional<Cordoner::Outcome> retried = leader->Retry("n0");
  ASSERT_TRUE(retried.has_value());
  EXPECT_TRUE(retried->cordoned()) << retried->message;
  EXPECT_TRUE(SavedState().is_object());
}

TEST_F(CordonerStateTest, NoNodeIsCordonedWhileTheStateCannotBeSaved) {
  AddNodes(2);
  auto leader = Leader();
  // Saving patches the ConfigMap first (404: created then); this patch fails outright.
  fake_.FailNext("patch", kube::ApiError(500, "InternalError", "etcdserver: request timed out"));
  const Cordoner::Outcome failed = leader->Cordon(Request("n0"));
  EXPECT_FALSE(failed.cordoned());
  EXPECT_THAT(failed.message, HasSubstr("saving the cordon safety state"));
  EXPECT_THAT(NodeWrites(), SizeIs(0));
  EXPECT_EQ(leader->CordonedByUs(), 0) << "the reservation is dropped";

  const std::optional<Cordoner::Outcome> retried = leader->Retry("n0");
  ASSERT_TRUE(retried.has_value());
  EXPECT_TRUE(retried->cordoned()) << retried->message;
  // The failed attempt's token came back: of six, one is used.
  EXPECT_NEAR(SavedState()["tokens"].get<double>(), 5.0, 1e-6) << SavedState().dump();
  const auto configmap = fake_.Stored(Resource::ConfigMaps(), kNamespace, kName);
  ASSERT_TRUE(configmap.has_value());
  EXPECT_EQ((*configmap)["metadata"]["labels"]["app.kubernetes.io/managed-by"], "tpujob-operator");
}

TEST_F(CordonerStateTest, AStateThatIsNotJsonIsIgnoredAndOverwritten) {
  AddNodes(1);
  fake_.Upsert(Resource::ConfigMaps(),
               Json{{"apiVersion", "v1"},
                    {"kind", "ConfigMap"},
                    {"metadata", {{"name", kName}, {"namespace", kNamespace}}},
                    {"data", {{std::string(kCordonStateKey), "{not json"}}}});
  auto leader = Leader();
  EXPECT_TRUE(leader->Cordon(Request("n0")).cordoned());
  EXPECT_TRUE(SavedState().contains("items")) << SavedState().dump();
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::controller
