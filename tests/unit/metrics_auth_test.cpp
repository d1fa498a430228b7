// The delegating authorizer of /metrics: TokenReview then SubjectAccessReview, mapped to
// 200/401/403/500, with answers cached per token and path for the TTL.

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "base/clock.h"
#include "metrics/auth.h"

namespace tpujob::metrics {
namespace TPUJOB_TEST_NS {

using kube::Json;

// An API server that knows some tokens and which users may get which paths, and records the
// reviews it was asked for.
class ReviewServer : public kube::Client {
 public:
  std::map<std::string, std::string> users_by_token;     // token -> user name
  std::set<std::pair<std::string, std::string>> grants;  // (user, path)
  bool fail = false;
  std::vector<Json> requests;

  kube::Result<Json> Create(const kube::Resource& r, const std::string& ns, const Json& object,
                            const kube::WriteOptions& = {}) override {
    std::lock_guard<std::mutex> guard(mu_);
    EXPECT_EQ(ns, "");
    requests.push_back(object);
    if (fail) return std::unexpected(kube::Error::Transport("connection refused"));
    Json answer = object;
    if (r.plural == "tokenreviews") {
      EXPECT_EQ(r.group, "authentication.k8s.io");
      const std::string token = object["spec"]["token"];
      auto it = users_by_token.find(token);
      if (it == users_by_token.end()) {
        answer["status"] = {{"authenticated", false}, {"error", "invalid bearer token"}};
      } else {
        answer["status"] = {
            {"authenticated", true},
            {"user",
             {{"username", it->second}, {"uid", "uid-" + it->second}, {"groups", {"team"}}}}};
      }
      return answer;
    }
    EXPECT_EQ(r.plural, "subjectaccessreviews");
    EXPECT_EQ(r.group, "authorization.k8s.io");
    const Json& spec = object["spec"];
    EXPECT_EQ(spec["nonResourceAttributes"]["verb"], "get");
    EXPECT_EQ(spec["groups"], Json::array({"team"}));
    EXPECT_EQ(spec["uid"], "uid-" + spec["user"].get<std::string>());
    const bool allowed = grants.contains({spec["user"], spec["nonResourceAttributes"]["path"]});
    answer["status"] = {{"allowed", allowed}};
    if (!allowed) answer["status"]["reason"] = "no RBAC policy matched";
    return answer;
  }

  kube::Result<Json> Get(const kube::Resource&, const std::string&, const std::string&,
                         const std::string& = {}) override {
    return Unexpected();
  }
  kube::Result<Json> List(const kube::Resource&, const std::string&,
                          const kube::ListOptions& = {}) override {
    return Unexpected();
  }
  kube::Result<std::unique_ptr<kube::WatchStream>> Watch(const kube::Resource&, const std::string&,
                                                         const kube::WatchOptions&) override {
    return std::unexpected(kube::Error::Config("not used"));
  }
  kube::Result<Json> Update(const kube::Resource&, const std::string&, const Json&,
                            const kube::WriteOptions& = {}) override {
    return Unexpected();
  }
  kube::Result<Json> Patch(const kube::Resource&, const std::string&, const std::string&,
                           kube::PatchType, const Json&, const kube::PatchOptions& = {}) override {
    return Unexpected();
  }
  kube::Result<Json> Delete(const kube::Resource&, const std::string&, const std::string&,
                            const kube::DeleteOptions& = {}) override {
    return Unexpected();
  }

 private:
  kube::Result<Json> Unexpected() {
    ADD_FAILURE() << "the authorizer only creates reviews";
    return std::unexpected(kube::Error::Config("not used"));
  }
  std::mutex mu_;
};

class DelegatingAuthorizerTest : public ::testing::Test {
 protected:
  DelegatingAuthorizerTest() {
    server.users_by_token = {{"prom-token", "system:serviceaccount:monitoring:prometheus"},
                             {"dev-token", "dev"}};
    server.grants = {{"system:serviceaccount:monitoring:prometheus", "/metrics"}};
  }
  ReviewServer server;
  FakeClock clock;
  DelegatingAuthorizer authorizer{server, clock, {std::chrono::seconds(10), 2}};
};

TEST_F(DelegatingAuthorizerTest, OutcomesMapTo401403200) {
  struct Case {
    std::string header;
    AuthOutcome outcome;
    int status;
  };
  const std::vector<Case> cases = {
      {"", AuthOutcome::kUnauthenticated, 401},
      {"Basic dXNlcjpwYXNz", AuthOutcome::kUnauthenticated, 401},
      {"Bearer ", AuthOutcome::kUnauthenticated, 401},
      {"Bearer forged", AuthOutcome::kUnauthenticated, 401},
      {"Bearer dev-token", AuthOutcome::kForbidden, 403},
      {"Bearer prom-token", AuthOutcome::kAllowed, 200},
      {"bearer  prom-token ", AuthOutcome::kAllowed, 200},  // the scheme is case-insensitive
  };
  for (const Case& c : cases) {
    const AuthResult result = authorizer.Authorize(c.header, "/metrics");
    EXPECT_EQ(result.outcome, c.outcome) << "\"" << c.header << "\": " << result.reason;
    EXPECT_EQ(result.HttpStatus(), c.status) << c.header;
  }
  const AuthResult denied = authorizer.Authorize("Bearer dev-token", "/metrics");
  EXPECT_EQ(denied.user, "dev");
  EXPECT_EQ(denied.reason, "user \"dev\" may not get /metrics: no RBAC policy matched");
  EXPECT_EQ(authorizer.Authorize("Bearer forged", "/metrics").reason, "invalid bearer token");
  // The path is part of the question.
  EXPECT_EQ(authorizer.Authorize("Bearer prom-token", "/debug").outcome, AuthOutcome::kForbidden);
}

TEST_F(DelegatingAuthorizerTest, AnswersAreCachedForTheTtlPerTokenAndPath) {
  ASSERT_EQ(authorizer.Authorize("Bearer prom-token", "/metrics").outcome, AuthOutcome::kAllowed);
  EXPECT_EQ(authorizer.reviews(), 2u);  // one TokenReview, one SubjectAccessReview
  clock.Advance(std::chrono::seconds(9));
  ASSERT_EQ(authorizer.Authorize("Bearer prom-token", "/metrics").outcome, AuthOutcome::kAllowed);
  EXPECT_EQ(authorizer.reviews(), 2u);
  // A denial is cached too, and the token is never kept in the clear.
  ASSERT_EQ(authorizer.Authorize("Bearer forged", "/metrics").outcome,
            AuthOutcome::kUnauthenticated);
  ASSERT_EQ(authorizer.Authorize("Bearer forged", "/metrics").outcome,
            AuthOutcome::kUnauthenticated);
  EXPECT_EQ(authorizer.reviews(), 3u);
  // Past the TTL the API server is asked again: a revoked token stops working.
  clock.Advance(std::chrono::seconds(2));
  server.users_by_token.erase("prom-token");
  EXPECT_EQ(authorizer.Authorize("Bearer prom-token", "/metrics").outcome,
            AuthOutcome::kUnauthenticated);
  EXPECT_EQ(authorizer.reviews(), 4u);
}

TEST_F(DelegatingAuthorizerTest, TheCacheKeepsOnlyTheMostRecentAnswers) {
  server.grants.insert({"dev", "/metrics"});
  authorizer.Authorize("Bearer prom-token", "/metrics");  // 2 reviews
  authorizer.Authorize("Bearer dev-token", "/metrics");   // 2 reviews
  authorizer.Authorize("Bearer prom-token", "/metrics");  // cached, now the most recent
  authorizer.Authorize("Bearer forged", "/metrics");      // 1 review, evicts dev-token
  EXPECT_EQ(authorizer.reviews(), 5u);
  authorizer.Authorize("Bearer prom-token", "/metrics");
  EXPECT_EQ(authorizer.reviews(), 5u);
  authorizer.Authorize("Bearer dev-token", "/metrics");
  EXPECT_EQ(authorizer.reviews(), 7u);
}

TEST_F(DelegatingAuthorizerTest, AReviewThatFailsIs500AndIsNotCached) {
  server.fail = true;
  const AuthResult failed = authorizer.Authorize("Bearer prom-token", "/metrics");
  EXPECT_EQ(failed.outcome, AuthOutcome::kError);
  EXPECT_EQ(failed.HttpStatus(), 500);
  EXPECT_NE(failed.reason.find("TokenReview failed"), std::string::npos) << failed.reason;
  server.fail = false;
  EXPECT_EQ(authorizer.Authorize("Bearer prom-token", "/metrics").outcome, AuthOutcome::kAllowed);
}

TEST(BearerTokenTest, OnlyTheBearerSchemeCarriesAToken) {
  EXPECT_EQ(BearerToken("Bearer abc.def"), "abc.def");
  EXPECT_EQ(BearerToken("BEARER abc"), "abc");
  EXPECT_EQ(BearerToken("Bearer"), "");
  EXPECT_EQ(BearerToken("Bearerabc"), "");
  EXPECT_EQ(BearerToken("Basic abc"), "");
  EXPECT_EQ(BearerToken(""), "");
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::metrics
