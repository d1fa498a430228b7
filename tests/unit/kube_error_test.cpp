#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "kube/error.h"

namespace tpujob::kube {
namespace TPUJOB_TEST_NS {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(KubeErrorTest, NotFoundStatus) {
  const Error error = ErrorFromResponse(404, R"({
    "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
    "message": "pods \"x\" not found", "reason": "NotFound",
    "details": {"name": "x", "kind": "pods"}, "code": 404})");
  EXPECT_EQ(error.kind, ErrorKind::kApi);
  EXPECT_EQ(error.http_status, 404);
  EXPECT_EQ(error.reason, "NotFound");
  EXPECT_EQ(error.message, "pods \"x\" not found");
  EXPECT_TRUE(error.IsNotFound());
  EXPECT_FALSE(error.IsConflict());
  EXPECT_FALSE(error.IsRetryable());
  EXPECT_FALSE(error.retry_after.has_value());
  EXPECT_EQ(error.ToString(), "404 NotFound: pods \"x\" not found");
}

TEST(KubeErrorTest, ConflictIsNotAlreadyExists) {
  const Error conflict = ErrorFromResponse(409, R"({"kind":"Status","status":"Failure",
    "message":"Operation cannot be fulfilled on tpujobs.tpujob.dev \"j\": object modified",
    "reason":"Conflict","code":409})");
  EXPECT_TRUE(conflict.IsConflict());
  EXPECT_EQ(conflict.reason, "Conflict");
  EXPECT_THAT(conflict.message, HasSubstr("object modified"));
  EXPECT_FALSE(conflict.IsAlreadyExists());
  EXPECT_FALSE(conflict.IsRetryable());  // the caller must re-read, not repeat the request

  const Error exists = ErrorFromResponse(409, R"({"kind":"Status","status":"Failure",
    "message":"pods \"p\" already exists","reason":"AlreadyExists","code":409})");
  EXPECT_TRUE(exists.IsAlreadyExists());
  EXPECT_FALSE(exists.IsConflict());
  EXPECT_EQ(exists.ToString(), "409 AlreadyExists: pods \"p\" already exists");
}

TEST(KubeErrorTest, ExpiredIsGone) {
  const Error error = ErrorFromResponse(410, R"({"kind":"Status","status":"Failure",
    "message":"The provided continue parameter is too old","reason":"Expired","code":410})");
  EXPECT_TRUE(error.IsGone());
  EXPECT_EQ(error.reason, "Expired");
  EXPECT_FALSE(error.IsRetryable());
}

TEST(KubeErrorTest, TooManyRequestsWithRetryAfterSecondsInDetails) {
  const Error error = ErrorFromResponse(429, R"({"kind":"Status","status":"Failure",
    "message":"too many requests","reason":"TooManyRequests",
    "details":{"retryAfterSeconds":7},"code":429})");
  EXPECT_TRUE(error.IsTooManyRequests());
  EXPECT_TRUE(error.IsRetryable());
  ASSERT_TRUE(error.retry_after.has_value());
  EXPECT_EQ(*error.retry_after, std::chrono::seconds(7));
  EXPECT_EQ(error.ToString(), "429 TooManyRequests: too many requests (retry after 7s)");
}

TEST(KubeErrorTest, RetryAfterHeaderSecondsWinsOverDetails) {
  const std::string body =
      R"({"kind":"Status","reason":"TooManyRequests","details":{"retryAfterSeconds":7},)"
      R"("code":429})";
  const Error error = ErrorFromResponse(429, body, " 3 ");
  ASSERT_TRUE(error.retry_after.has_value());
  EXPECT_EQ(*error.retry_after, std::chrono::seconds(3));

  const Error header_only = ErrorFromResponse(503, "", "12");
  ASSERT_TRUE(header_only.retry_after.has_value());
  EXPECT_EQ(*header_only.retry_after, std::chrono::seconds(12));
}

TEST(KubeErrorTest, RetryAfterHttpDateAndGarbage) {
  // A date in the past means "now", which we round up to the minimum delay.
  const Error past = ErrorFromResponse(503, "", "Sun, 06 Nov 1994 08:49:37 GMT");
  ASSERT_TRUE(past.retry_after.has_value());
  EXPECT_EQ(*past.retry_after, std::chrono::seconds(1));

  const Error future = ErrorFromResponse(503, "", "Fri, 31 Dec 2999 23:59:59 GMT");
  ASSERT_TRUE(future.retry_after.has_value());
  EXPECT_GT(*future.retry_after, std::chrono::hours(24 * 365 * 100));

  const Error garbage = ErrorFromResponse(429, "", "soon, please");
  ASSERT_TRUE(garbage.retry_after.has_value());
  EXPECT_EQ(*garbage.retry_after, std::chrono::seconds(1));

  const Error negative = ErrorFromResponse(429, "", "-5");
  ASSERT_TRUE(negative.retry_after.has_value());
  EXPECT_EQ(*negative.retry_after, std::chrono::seconds(1));

  EXPECT_FALSE(ErrorFromResponse(429, "", "   ").retry_after.has_value());
}

TEST(KubeErrorTest, HtmlBodyFromAProxy) {
  const std::string html =
      "<html>\n<head><title>500 Internal Server Error</title></head>\n"
      "<body>\n<center><h1>500 Internal Server Error</h1></center>\n</body>\n</html>\n";
  const Error error = ErrorFromResponse(500, html);
  EXPECT_EQ(error.kind, ErrorKind::kApi);
  EXPECT_EQ(error.http_status, 500);
  EXPECT_EQ(error.reason, "InternalError");
  EXPECT_THAT(error.message, HasSubstr("HTTP 500 (Internal Server Error)"));
  EXPECT_THAT(error.message, HasSubstr("<title>500 Internal Server Error</title>"));
  EXPECT_THAT(error.message, Not(HasSubstr("\n")));  // one line, for logs
  EXPECT_TRUE(error.IsRetryable());
}

TEST(KubeErrorTest, LongBodyIsTruncated) {
  const std::string body(100000, 'x');
  const Error error = ErrorFromResponse(502, body);
  EXPECT_LT(error.message.size(), 400u);
  EXPECT_THAT(error.message, HasSubstr("(100000 bytes)"));
  EXPECT_THAT(error.message, HasSubstr("HTTP 502 (Bad Gateway)"));
  EXPECT_TRUE(error.IsRetryable());
}

TEST(KubeErrorTest, EmptyAndNonStatusBodies) {
  const Error empty = ErrorFromResponse(503, "");
  EXPECT_EQ(empty.message, "the server responded with HTTP 503 (Service Unavailable)");
  EXPECT_EQ(empty.reason, "ServiceUnavailable");

  // JSON that is not a Status is shown like any other body.
  const Error other = ErrorFromResponse(404, R"({"items":[]})");
  EXPECT_TRUE(other.IsNotFound());
  EXPECT_EQ(other.reason, "NotFound");
  EXPECT_THAT(other.message, HasSubstr(R"({"items":[]})"));

  // A Status without a message still says what happened.
  const Error bare = ErrorFromResponse(403, R"({"kind":"Status","reason":"Forbidden"})");
  EXPECT_TRUE(bare.IsForbidden());
  EXPECT_EQ(bare.message, "the server responded with HTTP 403 (Forbidden)");
}

TEST(KubeErrorTest, HttpStatusWinsOverBodyCode) {
  const Error error = ErrorFromResponse(422, R"({"kind":"Status","reason":"Invalid","code":400,
    "message":"TPUJob.tpujob.dev \"j\" is invalid: spec.replicas: Invalid value: 0"})");
  EXPECT_EQ(error.http_status, 422);
  EXPECT_TRUE(error.IsInvalid());
}

TEST(KubeErrorTest, RetryabilityByStatus) {
  for (int status : {429, 500, 502, 503, 504}) {
    EXPECT_TRUE(ErrorFromResponse(status, "").IsRetryable()) << status;
  }
  for (int status : {400, 401, 403, 404, 405, 409, 410, 422, 501}) {
    EXPECT_FALSE(ErrorFromResponse(status, "").IsRetryable()) << status;
  }
  EXPECT_TRUE(Error::Transport("connection refused").IsRetryable());
  EXPECT_FALSE(Error::Decode("bad json").IsRetryable());
  EXPECT_FALSE(Error::Config("no server").IsRetryable());
  EXPECT_FALSE(Error::Cancelled().IsRetryable());
}

TEST(KubeErrorTest, PredicatesOnApiFactory) {
  EXPECT_TRUE(Error::Api(401, "Unauthorized", "").IsUnauthorized());
  EXPECT_TRUE(Error::Api(403, "Forbidden", "").IsForbidden());
  EXPECT_TRUE(Error::Api(422, "Invalid", "").IsInvalid());
  EXPECT_TRUE(Error::Api(410, "Gone", "").IsGone());
  EXPECT_FALSE(Error::Api(404, "NotFound", "").IsGone());
}

TEST(KubeErrorTest, ToStringByKind) {
  EXPECT_EQ(Error::Transport("connection refused").ToString(),
            "transport error: connection refused");
  EXPECT_EQ(Error::Decode("unexpected end").ToString(), "decode error: unexpected end");
  EXPECT_EQ(Error::Config("kubeconfig /x: bad").ToString(), "config error: kubeconfig /x: bad");
  EXPECT_EQ(Error::Cancelled().ToString(), "cancelled");
  EXPECT_EQ(Error::Cancelled("watch stopped").ToString(), "cancelled: watch stopped");
  EXPECT_EQ(Error::Api(0, "Expired", "too old").ToString(), "Expired: too old");
  EXPECT_EQ(Error::Transport("x").kind, ErrorKind::kTransport);
  EXPECT_EQ(Error::Decode("x").kind, ErrorKind::kDecode);
  EXPECT_EQ(Error::Config("x").kind, ErrorKind::kConfig);
  EXPECT_EQ(Error::Cancelled().kind, ErrorKind::kCancelled);
}

TEST(KubeErrorTest, StatusJsonFromWatchErrorEvent) {
  const Error error = ErrorFromStatusJson(
      R"json({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
          "message":"too old resource version: 5 (100)","reason":"Expired","code":410})json");
  EXPECT_EQ(error.kind, ErrorKind::kApi);
  EXPECT_EQ(error.http_status, 410);
  EXPECT_TRUE(error.IsGone());
  EXPECT_EQ(error.message, "too old resource version: 5 (100)");
  EXPECT_EQ(error.ToString(), "410 Expired: too old resource version: 5 (100)");
}

TEST(KubeErrorTest, StatusJsonWithoutCode) {
  // The code comes from the fallback when given...
  const Error fallback = ErrorFromStatusJson(R"({"message":"boom"})", 500);
  EXPECT_EQ(fallback.http_status, 500);
  EXPECT_EQ(fallback.reason, "InternalError");
  EXPECT_TRUE(fallback.IsRetryable());
  // ...else from a well-known reason.
  const Error expired = ErrorFromStatusJson(R"({"reason":"Expired","message":"too old"})");
  EXPECT_EQ(expired.http_status, 410);
  EXPECT_TRUE(expired.IsGone());
  // The document's own code beats the fallback.
  EXPECT_EQ(ErrorFromStatusJson(R"({"code":429,"reason":"TooManyRequests"})", 500).http_status,
            429);
}

TEST(KubeErrorTest, StatusJsonThatIsNotJsonIsADecodeError) {
  const Error error = ErrorFromStatusJson("not json at all");
  EXPECT_EQ(error.kind, ErrorKind::kDecode);
  EXPECT_THAT(error.message, HasSubstr("not json at all"));
  EXPECT_EQ(ErrorFromStatusJson("[1,2]").kind, ErrorKind::kDecode);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::kube
