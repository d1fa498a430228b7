// What a cache holds, by identity (cache/contents.h), and the manager's /debug/cache endpoint
// that serves it only when asked to.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cache/contents.h"
#include "controller/manager.h"
#include "eventually.h"
#include "fake_client.h"
#include "log_capture.h"
#include "shell.h"

namespace tpujob::cache {
namespace TPUJOB_TEST_NS {

using kube::FakeClient;
using kube::Resource;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr auto kWait = seconds(10);  // bound on waiting for background threads; never reached

using testing_util::Eventually;

// A pod of job `job` (no label when empty), with what an identity must never show: labels,
// annotations, an environment variable holding a secret, a node, a status message.
Json PodJson(const std::string& ns, const std::string& name, const std::string& job) {
  Json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata",
               {{"namespace", ns},
                {"name", name},
                {"labels", Json::object()},
                {"annotations", {{"team", "annotation-value"}}}}},
              {"spec",
               {{"nodeName", "node-1"},
                {"containers",
                 {{{"name", "trainer"},
                   {"image", "busybox"},
                   {"env", {{{"name", "API_KEY"}, {"value", "s3cr3t-value"}}}}}}}}},
              {"status", {{"phase", "Running"}, {"message", "status-message"}}}};
  if (!job.empty()) pod["metadata"]["labels"]["tpujob.dev/job-name"] = job;
  return pod;
}

std::shared_ptr<const PodInfo> Pod(std::string ns, std::string name, std::string uid,
                                   std::string version) {
  auto pod = std::make_shared<PodInfo>();
  pod->ns = InternedString::Intern(ns);
  pod->name = std::move(name);
  pod->uid = std::move(uid);
  pod->resource_version = std::move(version);
  return pod;
}

CachedObject Identity(const Json& stored) {
  const Json& meta = stored["metadata"];
  return {meta.value("namespace", ""), meta.value("name", ""), meta.value("uid", ""),
          meta.value("resourceVersion", "")};
}

TEST(CacheContentsTest, IdentitiesOfAStoreSortedByNamespaceThenName) {
  Store<PodInfo> pods;
  AddPodIndexers(pods);
  pods.Add(Pod("b", "w-0", "u3", "30"));
  pods.Add(Pod("a", "w-1", "u2", "20"));
  pods.Add(Pod("a", "w-0", "u1", "10"));
  EXPECT_THAT(CachedObjects(pods), ElementsAre(CachedObject{"a", "w-0", "u1", "10"},
                                               CachedObject{"a", "w-1", "u2", "20"},
                                               CachedObject{"b", "w-0", "u3", "30"}));
  pods.Update(Pod("a", "w-1", "u2", "21"));
  pods.Delete("b/w-0");
  EXPECT_THAT(CachedObjects(pods), ElementsAre(CachedObject{"a", "w-0", "u1", "10"},
                                               CachedObject{"a", "w-1", "u2", "21"}));

  Store<NodeInfo> nodes;
  auto node = std::make_shared<NodeInfo>();
  node->name = "tpu-0";
  node->uid = "n1";
  node->resource_version = "7";
  nodes.Add(node);
  EXPECT_THAT(CachedObjects(nodes), ElementsAre(CachedObject{"", "tpu-0", "n1", "7"}));
  EXPECT_THAT(CachedObjects(Store<TPUJobInfo>()), IsEmpty());
}

TEST(CacheContentsTest, AnInformerNotStartedIsUnsyncedAndEmpty) {
  FakeClient fake;
  fake.Upsert(Resource::Pods(), PodJson("team", "w-0", "llm"));
  ReflectorOptions options;
  options.name = "pods";
  options.seed = 1;
  Informer<PodInfo> informer(fake, Resource::Pods(), options);
  const CacheContents contents = DescribeCache(informer);
  EXPECT_EQ(contents.resource, "pods");
  EXPECT_FALSE(contents.synced);
  EXPECT_EQ(contents.last_sync_resource_version, "");
  EXPECT_THAT(contents.objects, IsEmpty());
}

// The informer's scope, its last synced resourceVersion, and the identities of exactly the
// objects it selected, following the watch.
TEST(CacheContentsTest, DescribesAnInformerWithItsScopeFollowingTheWatch) {
  FakeClient fake;
  const Resource pods = Resource::Pods();
  const Json first = fake.Upsert(pods, PodJson("team", "llm-worker-1", "llm"));
  const Json second = fake.Upsert(pods, PodJson("team", "llm-worker-0", "llm"));
  fake.Upsert(pods, PodJson("team", "not-ours", ""));          // outside the label selector
  fake.Upsert(pods, PodJson("elsewhere", "x-worker-0", "x"));  // outside the namespace
  ReflectorOptions options;
  options.name = "pods";
  options.ns = "team";
  options.label_selector = "tpujob.dev/job-name";
  options.seed = 1;
  Informer<PodInfo> informer(fake, pods, options);
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(kWait));

  CacheContents contents = DescribeCache(informer);
  EXPECT_EQ(contents.resource, "pods");
  EXPECT_EQ(contents.ns, "team");
  EXPECT_EQ(contents.label_selector, "tpujob.dev/job-name");
  EXPECT_EQ(contents.field_selector, "");
  EXPECT_TRUE(contents.synced);
  EXPECT_EQ(contents.last_sync_resource_version, fake.CurrentResourceVersion());
  EXPECT_THAT(contents.objects, ElementsAre(Identity(second), Identity(first)));

  // A change arrives through the watch: the new resourceVersion, and the pod gone.
  ASSERT_TRUE(fake.AwaitWatchCalls(1));
  Json changed = first;
  changed["metadata"]["labels"]["extra"] = "1";
  const Json updated = fake.Upsert(pods, changed);
  ASSERT_NE(Identity(updated).resource_version, Identity(first).resource_version);
  fake.Remove(pods, "team", "llm-worker-0");
  ASSERT_TRUE(Eventually([&] {
    contents = DescribeCache(informer);
    return contents.objects == std::vector<CachedObject>{Identity(updated)};
  }));
  EXPECT_EQ(contents.last_sync_resource_version, fake.CurrentResourceVersion());
}

TEST(CacheContentsTest, JsonHoldsIdentitiesOnly) {
  FakeClient fake;
  const Json pod = fake.Upsert(Resource::Pods(), PodJson("team", "llm-worker-0", "llm"));
  ReflectorOptions options;
  options.name = "pods";
  options.ns = "team";
  options.label_selector = "tpujob.dev/job-name";
  options.seed = 1;
  Informer<PodInfo> pods(fake, Resource::Pods(), options);
  const Json node = fake.Upsert(Resource::Nodes(), {{"metadata", {{"name", "tpu-0"}}}});
  ReflectorOptions node_options;
  node_options.name = "nodes";
  node_options.seed = 2;
  Informer<NodeInfo> nodes(fake, Resource::Nodes(), node_options);
  pods.Start();
  nodes.Start();
  ASSERT_TRUE(pods.WaitForSync(kWait));
  ASSERT_TRUE(nodes.WaitForSync(kWait));

  const Json json = CacheContentsJson({DescribeCache(pods), DescribeCache(nodes)});
  const std::string version = fake.CurrentResourceVersion();
  EXPECT_EQ(json, Json::parse(R"({
    "pods": {"namespace": "team", "labelSelector": "tpujob.dev/job-name", "fieldSelector": "",
             "synced": true, "lastSyncResourceVersion": ")" +
                              version + R"(", "count": 1,
             "objects": [{"namespace": "team", "name": "llm-worker-0",
                          "uid": ")" +
                              Identity(pod).uid + R"(",
                          "resourceVersion": ")" +
                              Identity(pod).resource_version + R"("}]},
    "nodes": {"namespace": "", "labelSelector": "", "fieldSelector": "", "synced": true,
              "lastSyncResourceVersion": ")" +
                              version + R"(", "count": 1,
              "objects": [{"name": "tpu-0", "uid": ")" +
                              Identity(node).uid + R"(",
                           "resourceVersion": ")" +
                              Identity(node).resource_version + R"("}]}
  })"))
      << json.dump(2);
  // Nothing of the objects' contents, whatever it holds.
  const std::string text = json.dump();
  for (const char* content : {"s3cr3t-value", "API_KEY", "annotation-value", "status-message",
                              "node-1", "trainer", "busybox", "job-name\":"}) {
    EXPECT_THAT(text, Not(HasSubstr(content)));
  }
}

// --- The manager's endpoint ---------------------------------------------------------------------

class DebugCacheEndpointTest : public ::testing::Test {
 protected:
  DebugCacheEndpointTest() {
    pod_ = fake_.Upsert(Resource::Pods(), PodJson("team", "llm-worker-0", "llm"));
    fake_.Upsert(Resource::Pods(), PodJson("team", "not-ours", ""));
    node_ = fake_.Upsert(Resource::Nodes(), {{"metadata", {{"name", "tpu-0"}}}});
    options_.watch_namespace = "team";
    options_.health_address = "127.0.0.1:0";
    options_.metrics_address = "";  // served with the health endpoints
    options_.cache_sync_timeout = seconds(10);
  }
  ~DebugCacheEndpointTest() override {
    if (manager_) manager_->Stop();
    if (run_.joinable()) run_.join();
  }

  // Runs the manager until its caches synced.
  void StartManager() {
    manager_ = std::make_unique<controller::Manager>(fake_, options_);
    run_ = std::thread([this] { (void)manager_->Run(); });
    ASSERT_TRUE(Eventually([&] { return manager_->Ready(); })) << log_.text();
  }

  // GET `path` on the health address: "<status code>\n<body>".
  Answer Get(const std::string& path) {
    return Shell("curl -sS --max-time 10 -w '\\n%{http_code}' http://127.0.0.1:" +
                 std::to_string(manager_->health_port()) + path);
  }

  FakeClient fake_;
  Json pod_;
  Json node_;
  controller::ManagerOptions options_;
  LogCapture log_;
  std::unique_ptr<controller::Manager> manager_;
  std::thread run_;
};

TEST_F(DebugCacheEndpointTest, ServesEveryCacheWhenEnabled) {
  options_.debug_cache_endpoint = true;
  StartManager();
  EXPECT_THAT(log_.text(), HasSubstr("msg=\"serving /debug/cache"));
  const Answer answer = Get("/debug/cache");
  ASSERT_EQ(answer.exit_code, 0) << answer.output;
  ASSERT_TRUE(answer.output.ends_with("\n200")) << answer.output;
  const Json json = Json::parse(answer.output.substr(0, answer.output.rfind('\n')), nullptr, false);
  ASSERT_TRUE(json.is_object()) << answer.output;
  const std::string version = fake_.CurrentResourceVersion();

  const Json& pods = json["pods"];
  EXPECT_EQ(pods["namespace"], "team");
  EXPECT_EQ(pods["labelSelector"], "tpujob.dev/job-name");
  EXPECT_EQ(pods["synced"], true);
  EXPECT_EQ(pods["count"], 1);
  EXPECT_EQ(pods["objects"],
            Json::parse(R"([{"namespace": "team", "name": "llm-worker-0", "uid": ")" +
                        Identity(pod_).uid + R"(", "resourceVersion": ")" +
                        Identity(pod_).resource_version + R"("}])"));
  const Json& nodes = json["nodes"];
  EXPECT_EQ(nodes["namespace"], "");
  EXPECT_EQ(nodes["synced"], true);
  EXPECT_EQ(nodes["objects"], Json::parse(R"([{"name": "tpu-0", "uid": ")" + Identity(node_).uid +
                                          R"(", "resourceVersion": ")" +
                                          Identity(node_).resource_version + R"("}])"));
  const Json& jobs = json["tpujobs"];
  EXPECT_EQ(jobs["namespace"], "team");
  EXPECT_EQ(jobs["synced"], true);
  EXPECT_EQ(jobs["count"], 0);
  EXPECT_EQ(jobs["objects"], Json::array());
  for (const char* resource : {"pods", "nodes", "tpujobs"}) {
    EXPECT_EQ(json[resource]["lastSyncResourceVersion"], version) << resource;
  }
  EXPECT_THAT(answer.output, Not(HasSubstr("s3cr3t-value")));
}

TEST_F(DebugCacheEndpointTest, AbsentByDefault) {
  ASSERT_FALSE(controller::ManagerOptions{}.debug_cache_endpoint);
  StartManager();
  const Answer answer = Get("/debug/cache");
  ASSERT_EQ(answer.exit_code, 0) << answer.output;
  EXPECT_TRUE(answer.output.ends_with("\n404")) << answer.output;
  EXPECT_THAT(answer.output, Not(HasSubstr("llm-worker-0")));
  EXPECT_THAT(log_.text(), Not(HasSubstr("/debug/cache")));
  EXPECT_TRUE(Get("/healthz").output.ends_with("\n200"));  // the server itself answers
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::cache
