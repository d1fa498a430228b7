// The Kubernetes client against a real kube-apiserver: verbs, pagination, watch order, 410 Gone,
// optimistic concurrency, server-side apply, and each way of authenticating.

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <thread>
#include <vector>

#include "e2e_env.h"
#include "kube/client.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

using kube::Json;
using kube::Resource;

Json ConfigMap(const std::string& name, const std::string& value) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", name}, {"labels", {{"suite", "client"}}}}},
          {"data", {{"value", value}}}};
}

// Creates `count` ConfigMaps with a few threads; returns how many were created.
int CreateConfigMaps(kube::Client& client, const std::string& ns, int count) {
  std::atomic<int> created{0};
  std::vector<std::thread> threads;
  const int kThreads = 8;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < count; i += kThreads) {
        if (client.Create(Resource::ConfigMaps(), ns, ConfigMap("cm-" + std::to_string(i), "v"))) {
          ++created;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  return created;
}

TEST(KubeClientE2E, CreateGetUpdateDelete) {
  TestNamespace ns("client-crud");
  auto client = kube::NewClient(AdminConfig());
  auto created = client->Create(Resource::ConfigMaps(), ns.name(), ConfigMap("a", "1"));
  ASSERT_TRUE(created) << created.error().ToString();

  auto got = client->Get(Resource::ConfigMaps(), ns.name(), "a");
  ASSERT_TRUE(got) << got.error().ToString();
  EXPECT_EQ((*got)["data"]["value"], "1");

  Json updated = *got;
  updated["data"]["value"] = "2";
  ASSERT_TRUE(client->Update(Resource::ConfigMaps(), ns.name(), updated));
  EXPECT_EQ(Trim(Kubectl("get configmap a -n " + ns.name() + " -o jsonpath={.data.value}").output),
            "2");

  auto duplicate = client->Create(Resource::ConfigMaps(), ns.name(), ConfigMap("a", "1"));
  ASSERT_FALSE(duplicate);
  EXPECT_TRUE(duplicate.error().IsAlreadyExists()) << duplicate.error().ToString();

  ASSERT_TRUE(client->Delete(Resource::ConfigMaps(), ns.name(), "a"));
  auto gone = client->Get(Resource::ConfigMaps(), ns.name(), "a");
  ASSERT_FALSE(gone);
  EXPECT_TRUE(gone.error().IsNotFound());
  EXPECT_EQ(gone.error().reason, "NotFound");
}

TEST(KubeClientE2E, ListPaginatesOverMoreThan500Objects) {
  TestNamespace ns("client-pages");
  auto client = kube::NewClient(AdminConfig());
  ASSERT_EQ(CreateConfigMaps(*client, ns.name(), 620), 620);

  kube::ListOptions options;
  options.limit = 100;
  options.label_selector = "suite=client";
  auto all = kube::ListAll(*client, Resource::ConfigMaps(), ns.name(), options);
  ASSERT_TRUE(all) << all.error().ToString();
  EXPECT_EQ(all->items.size(), 620u);
  EXPECT_EQ(all->pages, 7);
  EXPECT_FALSE(all->resource_version.empty());

  // The independent count from kubectl agrees.
  const auto kubectl =
      Kubectl("get configmaps -n " + ns.name() + " -l suite=client --no-headers | wc -l");
  EXPECT_EQ(Trim(kubectl.output), "620");
}

TEST(KubeClientE2E, WatchDeliversCreateUpdateDeleteInOrder) {
  TestNamespace ns("client-watch");
  auto client = kube::NewClient(AdminConfig());
  auto list = client->List(Resource::ConfigMaps(), ns.name());
  ASSERT_TRUE(list);
  kube::WatchOptions options;
  options.resource_version = (*list)["metadata"]["resourceVersion"];
  options.timeout_seconds = 60;
  auto watch = client->Watch(Resource::ConfigMaps(), ns.name(), options);
  ASSERT_TRUE(watch) << watch.error().ToString();

  ASSERT_EQ(Kubectl("create configmap w -n " + ns.name() + " --from-literal=k=1").exit_code, 0);
  ASSERT_EQ(
      Kubectl("patch configmap w -n " + ns.name() + " -p '{\"data\":{\"k\":\"2\"}}'").exit_code, 0);
  ASSERT_EQ(Kubectl("delete configmap w -n " + ns.name()).exit_code, 0);

  std::vector<std::pair<kube::WatchEventType, std::string>> seen;
  while (seen.size() < 3) {
    auto event = (*watch)->Next();
    ASSERT_TRUE(event) << event.error().ToString();
    ASSERT_TRUE(event->has_value()) << "stream ended early";
    if ((*event)->type == kube::WatchEventType::kBookmark) continue;
    seen.emplace_back((*event)->type, (*event)->object["data"].value("k", ""));
  }
  EXPECT_EQ(seen[0], std::make_pair(kube::WatchEventType::kAdded, std::string("1")));
  EXPECT_EQ(seen[1], std::make_pair(kube::WatchEventType::kModified, std::string("2")));
  EXPECT_EQ(seen[2].first, kube::WatchEventType::kDeleted);
}

TEST(KubeClientE2E, WatchCancelUnblocksNext) {
  TestNamespace ns("client-cancel");
  auto client = kube::NewClient(AdminConfig());
  auto list = client->List(Resource::ConfigMaps(), ns.name());
  ASSERT_TRUE(list);
  kube::WatchOptions options;
  options.resource_version = (*list)["metadata"]["resourceVersion"];
  options.timeout_seconds = 300;
  auto watch = client->Watch(Resource::ConfigMaps(), ns.name(), options);
  ASSERT_TRUE(watch) << watch.error().ToString();
  // Nothing changes in the namespace, so Next() blocks until Cancel() from another thread ends
  // it with an error; without Cancel it would block for the 300 s of the watch.
  const auto start = std::chrono::steady_clock::now();
  std::thread canceller([&] { (*watch)->Cancel(); });
  kube::Result<std::optional<kube::WatchEvent>> event;
  do {
    event = (*watch)->Next();
  } while (event && event->has_value());  // skip anything that was already in flight
  canceller.join();
  ASSERT_FALSE(event.has_value()) << "the stream ended normally instead of being cancelled";
  EXPECT_EQ(event.error().kind, kube::ErrorKind::kCancelled) << event.error().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(KubeClientE2E, WatchFromCompactedVersionIsGone) {
  TestNamespace ns("client-gone");
  auto client = kube::NewClient(AdminConfig());
  auto list = client->List(Resource::ConfigMaps(), ns.name());
  ASSERT_TRUE(list);
  const std::string old_version = (*list)["metadata"]["resourceVersion"];
  ASSERT_EQ(CreateConfigMaps(*client, ns.name(), 5), 5);
  // The API server's watch cache still serves old versions after a compaction; a restart
  // rebuilds it from the compacted etcd, so the old version is then truly gone.
  const auto compact = RunCommand(ClusterScript() + " compact --dir " + ClusterDir() + " && " +
                                  ClusterScript() + " restart-apiserver --dir " + ClusterDir());
  ASSERT_EQ(compact.exit_code, 0) << compact.output;

  kube::WatchOptions options;
  options.resource_version = old_version;
  options.timeout_seconds = 30;
  auto watch = client->Watch(Resource::ConfigMaps(), ns.name(), options);
  // The API server answers 410 either up front or as the stream's first (ERROR) event.
  if (!watch) {
    EXPECT_TRUE(watch.error().IsGone()) << watch.error().ToString();
    return;
  }
  auto event = (*watch)->Next();
  ASSERT_TRUE(event) << event.error().ToString();
  ASSERT_TRUE(event->has_value());
  EXPECT_EQ((*event)->type, kube::WatchEventType::kError);
  EXPECT_TRUE((*event)->error.IsGone()) << (*event)->error.ToString();
}

TEST(KubeClientE2E, StaleUpdateConflicts) {
  TestNamespace ns("client-conflict");
  auto client = kube::NewClient(AdminConfig());
  auto created = client->Create(Resource::ConfigMaps(), ns.name(), ConfigMap("c", "1"));
  ASSERT_TRUE(created);
  Json first = *created;
  first["data"]["value"] = "from-first";
  ASSERT_TRUE(client->Update(Resource::ConfigMaps(), ns.name(), first));

  Json stale = *created;  // still carries the original resourceVersion
  stale["data"]["value"] = "from-stale";
  auto result = client->Update(Resource::ConfigMaps(), ns.name(), stale);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().http_status, 409);
  EXPECT_TRUE(result.error().IsConflict()) << result.error().ToString();
  EXPECT_EQ(Trim(Kubectl("get configmap c -n " + ns.name() + " -o jsonpath={.data.value}").output),
            "from-first");
}

TEST(KubeClientE2E, ServerSideApplyCreatesUpdatesAndRecordsManager) {
  TestNamespace ns("client-ssa");
  auto client = kube::NewClient(AdminConfig());
  kube::PatchOptions options;
  options.field_manager = "tpujob-e2e";
  auto applied = client->Patch(Resource::ConfigMaps(), ns.name(), "ssa", kube::PatchType::kApply,
                               ConfigMap("ssa", "1"), options);
  ASSERT_TRUE(applied) << applied.error().ToString();
  applied = client->Patch(Resource::ConfigMaps(), ns.name(), "ssa", kube::PatchType::kApply,
                          ConfigMap("ssa", "2"), options);
  ASSERT_TRUE(applied) << applied.error().ToString();
  EXPECT_EQ(
      Trim(Kubectl("get configmap ssa -n " + ns.name() + " -o jsonpath={.data.value}").output),
      "2");
  const auto managers =
      Kubectl("get configmap ssa -n " + ns.name() +
              " --show-managed-fields -o jsonpath={.metadata.managedFields[*].manager}");
  EXPECT_NE(managers.output.find("tpujob-e2e"), std::string::npos) << managers.output;

  // Another manager changing the same field without force conflicts.
  kube::PatchOptions other;
  other.field_manager = "someone-else";
  auto conflict = client->Patch(Resource::ConfigMaps(), ns.name(), "ssa", kube::PatchType::kApply,
                                ConfigMap("ssa", "3"), other);
  ASSERT_FALSE(conflict);
  EXPECT_EQ(conflict.error().http_status, 409);
  other.force = true;
  EXPECT_TRUE(client->Patch(Resource::ConfigMaps(), ns.name(), "ssa", kube::PatchType::kApply,
                            ConfigMap("ssa", "3"), other));
}

TEST(KubeClientE2E, MergeAndJsonPatchAndDeletePreconditions) {
  TestNamespace ns("client-patch");
  auto client = kube::NewClient(AdminConfig());
  auto created = client->Create(Resource::ConfigMaps(), ns.name(), ConfigMap("p", "1"));
  ASSERT_TRUE(created);
  ASSERT_TRUE(client->Patch(Resource::ConfigMaps(), ns.name(), "p", kube::PatchType::kMerge,
                            Json{{"data", {{"merged", "yes"}}}}));
  ASSERT_TRUE(
      client->Patch(Resource::ConfigMaps(), ns.name(), "p", kube::PatchType::kJson,
                    Json::array({{{"op", "replace"}, {"path", "/data/value"}, {"value", "j"}}})));
  auto got = client->Get(Resource::ConfigMaps(), ns.name(), "p");
  ASSERT_TRUE(got);
  EXPECT_EQ((*got)["data"]["merged"], "yes");
  EXPECT_EQ((*got)["data"]["value"], "j");

  kube::DeleteOptions wrong_uid;
  wrong_uid.precondition_uid = "00000000-0000-0000-0000-000000000000";
  auto refused = client->Delete(Resource::ConfigMaps(), ns.name(), "p", wrong_uid);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().http_status, 409);

  kube::DeleteOptions right_uid;
  right_uid.precondition_uid = (*got)["metadata"]["uid"];
  right_uid.propagation_policy = "Background";
  EXPECT_TRUE(client->Delete(Resource::ConfigMaps(), ns.name(), "p", right_uid));
  EXPECT_TRUE(client->Get(Resource::ConfigMaps(), ns.name(), "p").error().IsNotFound());
}

TEST(KubeClientE2E, ClientCertificateAuthenticates) {
  kube::Config config = AdminConfig();
  ASSERT_FALSE(config.client_cert_pem.empty());
  ASSERT_FALSE(config.token);
  auto client = kube::NewClient(config);
  auto ns = client->Get({"", "v1", "namespaces", false}, "", "default");
  ASSERT_TRUE(ns) << ns.error().ToString();

  // Without the certificate the same server refuses us.
  config.client_cert_pem.clear();
  config.client_key_pem.clear();
  auto anonymous = kube::NewClient(config)->Get({"", "v1", "namespaces", false}, "", "default");
  ASSERT_FALSE(anonymous);
  EXPECT_TRUE(anonymous.error().IsUnauthorized() || anonymous.error().IsForbidden())
      << anonymous.error().ToString();
}

TEST(KubeClientE2E, BearerTokenAuthenticates) {
  TestNamespace ns("client-token");
  ASSERT_EQ(Kubectl("create serviceaccount reader -n " + ns.name()).exit_code, 0);
  ASSERT_EQ(Kubectl("create rolebinding reader -n " + ns.name() +
                    " --clusterrole=view --serviceaccount=" + ns.name() + ":reader")
                .exit_code,
            0);
  ASSERT_EQ(Kubectl("create configmap visible -n " + ns.name()).exit_code, 0);
  const auto token = Kubectl("create token reader -n " + ns.name(), false);
  ASSERT_EQ(token.exit_code, 0) << token.output;

  kube::Config config = AdminConfig();
  config.client_cert_pem.clear();
  config.client_key_pem.clear();
  config.token = kube::TokenSource::Static(Trim(token.output));
  auto client = kube::NewClient(config);
  auto got = client->Get(Resource::ConfigMaps(), ns.name(), "visible");
  ASSERT_TRUE(got) << got.error().ToString();

  // The token identifies the service account: it may read but not write.
  auto write = client->Create(Resource::ConfigMaps(), ns.name(), ConfigMap("nope", "1"));
  ASSERT_FALSE(write);
  EXPECT_TRUE(write.error().IsForbidden()) << write.error().ToString();
  EXPECT_NE(write.error().message.find("system:serviceaccount:" + ns.name() + ":reader"),
            std::string::npos)
      << write.error().message;
}

TEST(KubeClientE2E, WrongCertificateAuthorityIsRefused) {
  const std::string dir = ClusterDir() + "/wrong-ca";
  const auto made =
      RunCommand("mkdir -p " + dir + " && openssl req -x509 -newkey rsa:2048 -nodes " + "-keyout " +
                 dir + "/ca.key -out " + dir + "/ca.crt -days 1 -subj /CN=wrong-ca");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  std::ifstream in(dir + "/ca.crt");
  std::string wrong_ca((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_NE(wrong_ca.find("BEGIN CERTIFICATE"), std::string::npos);

  kube::Config config = AdminConfig();
  config.ca_pem = wrong_ca;
  config.max_retries = 0;
  auto result = kube::NewClient(config)->Get({"", "v1", "namespaces", false}, "", "default");
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().kind, kube::ErrorKind::kTransport) << result.error().ToString();
}

TEST(KubeClientE2E, RequestObserverSeesEveryRequest) {
  std::atomic<int> requests{0};
  std::atomic<int> not_found{0};
  kube::RequestObserver observer;
  observer.on_request = [&](std::string_view verb, std::string_view resource, int status,
                            Duration) {
    ++requests;
    if (verb == "GET" && resource == "configmaps" && status == 404) ++not_found;
  };
  auto client = kube::NewClient(AdminConfig(), observer);
  EXPECT_FALSE(client->Get(Resource::ConfigMaps(), "default", "does-not-exist"));
  EXPECT_EQ(requests.load(), 1);
  EXPECT_EQ(not_found.load(), 1);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
