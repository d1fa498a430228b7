// Helpers shared by the end-to-end tests: where the local control plane is (started by
// `e2e/cluster up` through the ctest fixture), an independent kubectl to assert with, and
// a fresh namespace per test.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "kube/client.h"
#include "kube/config.h"

namespace tpujob::e2e {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout, and stderr when asked for
};

// Runs a shell command and captures its stdout (and stderr if `with_stderr`).
inline CommandResult RunCommand(const std::string& command, bool with_stderr = true) {
  CommandResult result;
  const std::string full = command + (with_stderr ? " 2>&1" : "");
  FILE* pipe = ::popen(full.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) {
    result.output.append(buffer.data(), n);
  }
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

inline std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

// The shard a test runs on, when ctest allocated it one: the id of its resource "cluster"
// (CTEST_RESOURCE_GROUP_0_CLUSTER is "id:K,slots:1"; e2e/lib/shards.sh writes the
// specification); 0 otherwise.
inline int ShardId() {
  const char* type = std::getenv("CTEST_RESOURCE_GROUP_0");
  const char* allocation = std::getenv("CTEST_RESOURCE_GROUP_0_CLUSTER");
  if (type == nullptr || std::string(type) != "cluster" || allocation == nullptr) return 0;
  const std::string text = allocation;
  const size_t at = text.find("id:");
  return at == std::string::npos ? 0 : std::atoi(text.c_str() + at + 3);
}

// The control plane's directory: shard K of $TPUJOB_E2E_SHARD_ROOT when ctest gave the test
// shard K, else $TPUJOB_E2E_DIR (default /tmp/tpujob-e2e).
inline std::string ClusterDir() {
  const char* root = std::getenv("TPUJOB_E2E_SHARD_ROOT");
  if (const int shard = ShardId(); shard > 0 && root != nullptr) {
    return std::string(root) + "/shard-" + std::to_string(shard);
  }
  const char* dir = std::getenv("TPUJOB_E2E_DIR");
  return dir != nullptr ? dir : "/tmp/tpujob-e2e";
}

inline std::string ClusterScript() { return std::string(TPUJOB_SOURCE_DIR) + "/e2e/cluster"; }

inline std::string KubeconfigPath() {
  static const std::string path =
      Trim(RunCommand(ClusterScript() + " kubeconfig --dir " + ClusterDir(), false).output);
  return path;
}

inline std::string ToolsBin() {
  static const std::string bin =
      Trim(RunCommand(std::string(TPUJOB_SOURCE_DIR) + "/e2e/tools/build.sh", false).output);
  return bin;
}

// With TPUJOB_E2E_KUBECTL_LOG set to a file, each kubectl the tests start appends a line to it
// (the test, the first 100 characters of its arguments): kubectl costs 60-90 ms of CPU a start,
// and the suite's run on a fresh machine spent about a tenth of its CPU in kubectl.
inline void LogKubectlStart(const std::string& args) {
  static const char* const path = std::getenv("TPUJOB_E2E_KUBECTL_LOG");
  if (path == nullptr || *path == '\0') return;
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string line = std::string(test != nullptr ? test->test_suite_name() : "-") + "." +
                     (test != nullptr ? test->name() : "-") + "\t" + args.substr(0, 100);
  std::replace(line.begin(), line.end(), '\n', ' ');
  std::ofstream(path, std::ios::app) << line << "\n";
}

// kubectl against the test cluster; `args` is passed through the shell.
inline CommandResult Kubectl(const std::string& args, bool with_stderr = true) {
  LogKubectlStart(args);
  return RunCommand(ToolsBin() + "/kubectl --kubeconfig " + KubeconfigPath() + " " + args,
                    with_stderr);
}

// helm against the test cluster, with its cache and configuration under the cluster directory.
inline CommandResult Helm(const std::string& args, bool with_stderr = true) {
  const std::string home = ClusterDir() + "/helm";
  return RunCommand("HELM_CACHE_HOME=" + home + "/cache HELM_CONFIG_HOME=" + home +
                        "/config HELM_DATA_HOME=" + home + "/data " + ToolsBin() +
                        "/helm --kubeconfig " + KubeconfigPath() + " " + args,
                    with_stderr);
}

inline kube::Config AdminConfig() {
  auto config = kube::LoadKubeconfig(KubeconfigPath());
  EXPECT_TRUE(config.has_value()) << (config ? "" : config.error().ToString());
  return config.value_or(kube::Config{});
}

// A client of the test cluster (admin, no retries, 10 s a request), one per kubeconfig for the
// life of the test process: the tests' reads that poll go through it instead of a kubectl
// process each. The clients are never destroyed: a static destructor would run at exit after
// the statics cpprestsdk and OpenSSL make at the first request (later than this map), and close
// the clients' connections through them.
inline kube::Client& TestClient() {
  static std::mutex mu;
  static auto* const clients = new std::map<std::string, std::unique_ptr<kube::Client>>();
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<kube::Client>& client = (*clients)[KubeconfigPath()];
  if (!client) {
    kube::Config c = AdminConfig();
    c.max_retries = 0;
    c.request_timeout = std::chrono::seconds(10);
    client = kube::NewClient(std::move(c));
  }
  return *client;
}

// One request through TestClient() as a CommandResult: exit 0 and the answer, or exit 1 and the
// error. Repeated, as kubectl's client would, while the error is retryable (throttling, a server
// error, a connection that broke, as after the API server restarts some tests provoke), for up to
// 10 s: send only requests that may be sent twice.
inline CommandResult ApiRequest(const std::function<kube::Result<nlohmann::json>()>& request) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  CommandResult result;
  for (;;) {
    kube::Result<nlohmann::json> answer = request();
    if (answer) {
      result.exit_code = 0;
      result.output = answer->dump();
      return result;
    }
    result.exit_code = 1;
    result.output = answer.error().ToString();
    if (!answer.error().IsRetryable() || std::chrono::steady_clock::now() >= deadline) {
      return result;
    }
    const std::optional<std::chrono::seconds> asked = answer.error().retry_after;
    std::this_thread::sleep_for(
        asked ? std::min<std::chrono::milliseconds>(*asked, std::chrono::seconds(1))
              : std::chrono::milliseconds(200));
  }
}

// Eventually's default pause between two polls: 50 ms at first, half as long again after each
// poll, up to 250 ms. Most conditions run kubectl (about 60 ms of CPU a call), and the end-to-end
// shards share two cores: a wait of many seconds polls about 4 times a second instead of 20,
// while a condition that holds soon is still seen within a few tens of milliseconds.
inline constexpr std::chrono::milliseconds kFirstPollPause{50};
inline constexpr std::chrono::milliseconds kLongestPollPause{250};

// Polls `condition` until it holds or `timeout` passes; returns whether it held. For waiting on
// another process (the API server, the operator), where no notification exists. Without
// `interval`, the pause between polls grows from kFirstPollPause to kLongestPollPause; with it,
// every pause is `interval`.
inline bool Eventually(const std::function<bool()>& condition,
                       std::chrono::milliseconds timeout = std::chrono::seconds(30),
                       std::optional<std::chrono::milliseconds> interval = std::nullopt) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::chrono::milliseconds pause = interval.value_or(kFirstPollPause);
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(pause);
    if (!interval) pause = std::min(kLongestPollPause, pause * 3 / 2);
  }
  return condition();
}

// A namespace created for one test and deleted (without waiting) after it.
class TestNamespace {
 public:
  explicit TestNamespace(const std::string& prefix) {
    static int counter = 0;
    name_ = prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(++counter);
    const auto create = [&](const kube::Resource& resource, const std::string& ns,
                            const std::string& name) {
      const nlohmann::json object = {
          {"apiVersion", "v1"},
          {"kind", resource.plural == "namespaces" ? "Namespace" : "ServiceAccount"},
          {"metadata", {{"name", name}}}};
      return ApiRequest([&]() -> kube::Result<nlohmann::json> {
        auto created = TestClient().Create(resource, ns, object);
        // A try that the server carried out but whose answer was lost.
        if (!created && created.error().IsAlreadyExists()) return nlohmann::json::object();
        return created;
      });
    };
    const CommandResult r = create({"", "v1", "namespaces", false}, "", name_);
    EXPECT_EQ(r.exit_code, 0) << "creating namespace " << name_ << ": " << r.output;
    // Pods are refused until the namespace has its default ServiceAccount. The
    // controller-manager creates it, but can lag far behind after the API server restarts the
    // tests provoke, so create it here when it is not there yet (already there is fine).
    const CommandResult sa = create({"", "v1", "serviceaccounts", true}, name_, "default");
    EXPECT_EQ(sa.exit_code, 0) << "creating " << name_ << "/default: " << sa.output;
  }
  ~TestNamespace() {
    ApiRequest([&]() -> kube::Result<nlohmann::json> {
      auto deleted = TestClient().Delete({"", "v1", "namespaces", false}, "", name_);
      if (!deleted && deleted.error().IsNotFound()) return nlohmann::json::object();
      return deleted;
    });
  }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
};

// Makes the namespace enforce (and warn about) the "restricted" Pod Security Standard.
inline void RestrictNamespace(const std::string& ns) {
  const auto labelled = Kubectl("label namespace " + ns +
                                " pod-security.kubernetes.io/enforce=restricted"
                                " pod-security.kubernetes.io/enforce-version=latest"
                                " pod-security.kubernetes.io/warn=restricted");
  ASSERT_EQ(labelled.exit_code, 0) << labelled.output;
}

// A token of the ServiceAccount from the TokenRequest API, as a pod would get it; "" on
// failure.
inline std::string ServiceAccountToken(const std::string& ns, const std::string& account) {
  const std::string token =
      Trim(Kubectl("create token " + account + " -n " + ns + " --duration=1h", false).output);
  if (token.empty() || token.find_first_of(" \n") != std::string::npos) {
    ADD_FAILURE() << "no token for " << ns << "/" << account << ": " << token;
    return "";
  }
  return token;
}

// A kubeconfig for the ServiceAccount: a token from the TokenRequest API, the cluster's CA and
// server, as the operator would get them in a pod. Returns its path; "" on failure.
inline std::string ServiceAccountKubeconfig(const std::string& ns, const std::string& account) {
  const std::string token = ServiceAccountToken(ns, account);
  const std::string server =
      Trim(Kubectl("config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}'", false)
               .output);
  const std::string ca =
      Trim(Kubectl("config view --raw --minify -o "
                   "jsonpath='{.clusters[0].cluster.certificate-authority-data}'",
                   false)
               .output);
  if (token.empty() || server.empty() || ca.empty()) {
    ADD_FAILURE() << "cannot build a kubeconfig: token=" << token << " server=" << server;
    return "";
  }
  const std::string path = ClusterDir() + "/sa-" + ns + ".kubeconfig";
  std::ofstream(path) << "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n"
                      << "    server: " << server << "\n    certificate-authority-data: " << ca
                      << "\nusers:\n- name: " << account << "\n  user:\n    token: " << token
                      << "\ncontexts:\n- name: " << account
                      << "\n  context: {cluster: e2e, user: " << account << ", namespace: " << ns
                      << "}\ncurrent-context: " << account << "\n";
  return path;
}

}  // namespace tpujob::e2e
