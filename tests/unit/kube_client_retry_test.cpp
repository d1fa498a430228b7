// The real client's retry and rate-limit behaviour, against a local HTTP server that answers
// what each test scripts (no Kubernetes involved).

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <vector>

#include "kube/client.h"
#include "metrics/http_server.h"

namespace tpujob::kube {
namespace TPUJOB_TEST_NS {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr char kPath[] = "/api/v1/namespaces/default/configmaps/x";

// Serves kPath with the scripted answers in order, then repeats the last one.
class ScriptedServer {
 public:
  explicit ScriptedServer(std::vector<metrics::HttpResponse> answers)
      : answers_(std::move(answers)), server_("127.0.0.1:0") {
    server_.Handle(kPath, [this] {
      const size_t n = calls_++;
      return answers_[std::min(n, answers_.size() - 1)];
    });
    EXPECT_TRUE(server_.Start());
  }
  Config ClientConfig() const {
    Config config;
    config.server = "http://127.0.0.1:" + std::to_string(server_.port());
    config.qps = 0;
    return config;
  }
  int calls() const { return calls_.load(); }

 private:
  std::vector<metrics::HttpResponse> answers_;
  std::atomic<size_t> calls_{0};
  metrics::HttpServer server_;
};

metrics::HttpResponse Answer(int status, std::string body,
                             std::map<std::string, std::string> headers = {}) {
  return {status, "application/json", std::move(body), std::move(headers)};
}

const std::string kOk = R"({"kind":"ConfigMap","metadata":{"name":"x"}})";

std::string StatusBody(int code, const std::string& reason) {
  return R"({"kind":"Status","status":"Failure","code":)" + std::to_string(code) +
         R"(,"reason":")" + reason + R"(","message":"scripted"})";
}

TEST(KubeClientRetryTest, ServerErrorsAreRetriedUntilSuccess) {
  ScriptedServer server({Answer(503, StatusBody(503, "ServiceUnavailable")),
                         Answer(500, StatusBody(500, "InternalError")), Answer(200, kOk)});
  auto client = NewClient(server.ClientConfig());
  auto got = client->Get(Resource::ConfigMaps(), "default", "x");
  ASSERT_TRUE(got) << got.error().ToString();
  EXPECT_EQ((*got)["metadata"]["name"], "x");
  EXPECT_EQ(server.calls(), 3);
}

TEST(KubeClientRetryTest, ClientErrorsAreNotRetried) {
  ScriptedServer server({Answer(404, StatusBody(404, "NotFound")), Answer(200, kOk)});
  auto got = NewClient(server.ClientConfig())->Get(Resource::ConfigMaps(), "default", "x");
  ASSERT_FALSE(got);
  EXPECT_TRUE(got.error().IsNotFound());
  EXPECT_EQ(server.calls(), 1);
}

TEST(KubeClientRetryTest, GivesUpAfterMaxRetries) {
  ScriptedServer server({Answer(500, StatusBody(500, "InternalError"))});
  Config config = server.ClientConfig();
  config.max_retries = 2;
  auto got = NewClient(config)->Get(Resource::ConfigMaps(), "default", "x");
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().http_status, 500);
  EXPECT_EQ(server.calls(), 3);  // the first try and two retries
}

TEST(KubeClientRetryTest, TooManyRequestsWaitsForRetryAfter) {
  ScriptedServer server(
      {Answer(429, StatusBody(429, "TooManyRequests"), {{"Retry-After", "1"}}), Answer(200, kOk)});
  auto client = NewClient(server.ClientConfig());
  const auto start = steady_clock::now();
  auto got = client->Get(Resource::ConfigMaps(), "default", "x");
  ASSERT_TRUE(got) << got.error().ToString();
  EXPECT_EQ(server.calls(), 2);
  // The backoff alone would retry after ~100-150 ms; Retry-After asks for a full second.
  EXPECT_GE(steady_clock::now() - start, milliseconds(950));
}

TEST(KubeClientRetryTest, TransportErrorsAreRetriedThenReported) {
  Config config;
  {
    ScriptedServer closed({Answer(200, kOk)});
    config = closed.ClientConfig();  // the port is closed once the server is gone
  }
  config.max_retries = 1;
  auto got = NewClient(config)->Get(Resource::ConfigMaps(), "default", "x");
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().kind, ErrorKind::kTransport) << got.error().ToString();
}

// The token file was rotated and the old token revoked before the client's next scheduled
// re-read: the 401 makes it read the file again and retry at once, once.
TEST(KubeClientRetryTest, UnauthorizedReadsARotatedTokenAgainAndRetriesOnce) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("tpujob-token-" + std::to_string(::getpid())))
          .string();
  std::ofstream(path) << "old";
  std::atomic<int> calls{0};
  metrics::HttpServer server("127.0.0.1:0");
  server.Handle(kPath, [&] {
    if (calls++ == 0) {
      std::ofstream(path) << "new";  // rotated while the request was on its way
      return Answer(401, StatusBody(401, "Unauthorized"));
    }
    return Answer(200, kOk);
  });
  ASSERT_TRUE(server.Start());
  Config config;
  config.server = "http://127.0.0.1:" + std::to_string(server.port());
  config.qps = 0;
  config.token = TokenSource::FromFile(path);
  auto client = NewClient(config);
  auto got = client->Get(Resource::ConfigMaps(), "default", "x");
  EXPECT_TRUE(got.has_value()) << got.error().ToString();
  EXPECT_EQ(calls.load(), 2);

  // A token that is refused and has not changed: no retry, the 401 is the answer.
  std::atomic<int> refused{0};
  metrics::HttpServer refusing("127.0.0.1:0");
  refusing.Handle(kPath, [&] {
    refused++;
    return Answer(401, StatusBody(401, "Unauthorized"));
  });
  ASSERT_TRUE(refusing.Start());
  config.server = "http://127.0.0.1:" + std::to_string(refusing.port());
  got = NewClient(config)->Get(Resource::ConfigMaps(), "default", "x");
  ASSERT_FALSE(got.has_value());
  EXPECT_TRUE(got.error().IsUnauthorized());
  EXPECT_EQ(refused.load(), 1);
  std::filesystem::remove(path);
}

TEST(KubeClientRetryTest, BeforeSendIsAskedBeforeEveryAttemptOfAWriteAndCanStopIt) {
  Config config;
  {
    ScriptedServer closed({Answer(200, kOk)});
    config = closed.ClientConfig();  // the port is closed: every attempt is a transport error
  }
  config.max_retries = 3;
  auto client = NewClient(config);

  // Allowed every time: asked before the first attempt and before each of the 3 retries.
  int asked = 0;
  PatchOptions allow;
  allow.before_send = [&]() -> Status {
    ++asked;
    return {};
  };
  auto patched = client->Patch(Resource::ConfigMaps(), "default", "x", PatchType::kMerge,
                               Json::object(), allow);
  ASSERT_FALSE(patched);
  EXPECT_EQ(patched.error().kind, ErrorKind::kTransport) << patched.error().ToString();
  EXPECT_EQ(asked, 4);

  // Refused: nothing is sent and the hook's error is returned.
  ScriptedServer server({Answer(200, kOk)});
  auto live = NewClient(server.ClientConfig());
  asked = 0;
  DeleteOptions refuse;
  refuse.before_send = [&]() -> Status {
    ++asked;
    return std::unexpected(Error::Cancelled("this replica may not write"));
  };
  auto deleted = live->Delete(Resource::ConfigMaps(), "default", "x", refuse);
  ASSERT_FALSE(deleted);
  EXPECT_EQ(deleted.error().kind, ErrorKind::kCancelled) << deleted.error().ToString();
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(server.calls(), 0);

  WriteOptions create;
  asked = 0;
  create.before_send = refuse.before_send;
  auto created = client->Create(Resource::ConfigMaps(), "default",
                                Json{{"metadata", {{"name", "x"}}}}, create);
  EXPECT_EQ(created.error().kind, ErrorKind::kCancelled);
  auto updated = client->Update(Resource::ConfigMaps(), "default",
                                Json{{"metadata", {{"name", "x"}}}}, create);
  EXPECT_EQ(updated.error().kind, ErrorKind::kCancelled);
  EXPECT_EQ(asked, 2);
}

// A write that waits in the rate limiter is checked once its turn comes, not before it waited:
// leader election's fence must judge the moment the request goes out.
TEST(KubeClientRetryTest, BeforeSendIsAskedAfterTheRateLimiterLetTheRequestThrough) {
  ScriptedServer server({Answer(200, kOk)});
  Config config = server.ClientConfig();
  config.qps = 2;  // one token at once, the next 500 ms later
  config.burst = 1;
  auto client = NewClient(config);
  ASSERT_TRUE(client->Get(Resource::ConfigMaps(), "default", "x"));

  steady_clock::time_point asked_at;
  DeleteOptions refuse;
  refuse.before_send = [&]() -> Status {
    asked_at = steady_clock::now();
    return std::unexpected(Error::Cancelled("the lease expired while the write waited"));
  };
  const auto issued_at = steady_clock::now();
  auto deleted = client->Delete(Resource::ConfigMaps(), "default", "x", refuse);
  ASSERT_FALSE(deleted);
  EXPECT_EQ(deleted.error().kind, ErrorKind::kCancelled);
  EXPECT_GE(asked_at - issued_at, milliseconds(400));
  EXPECT_EQ(server.calls(), 1);  // only the GET
}

TEST(KubeClientRetryTest, QpsLimitSpacesRequestsAndZeroTurnsItOff) {
  ScriptedServer server({Answer(200, kOk)});
  Config limited = server.ClientConfig();
  limited.qps = 10;
  limited.burst = 1;
  auto client = NewClient(limited);
  const auto start = steady_clock::now();
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(client->Get(Resource::ConfigMaps(), "default", "x"));
  // One token at once, then one every 100 ms: five waits.
  EXPECT_GE(steady_clock::now() - start, milliseconds(450));

  Config unlimited = server.ClientConfig();  // qps = 0
  auto fast = NewClient(unlimited);
  int done = 0;
  const auto fast_start = steady_clock::now();
  for (int i = 0; i < 6; ++i) done += fast->Get(Resource::ConfigMaps(), "default", "x") ? 1 : 0;
  EXPECT_EQ(done, 6);
  EXPECT_LT(steady_clock::now() - fast_start, steady_clock::now() - start);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::kube
