// Authentication and authorization of scrapes, delegated to the API server.
//
// As kube-rbac-proxy and controller-runtime's secure metrics filter do: the scraper presents a
// bearer token (normally its service-account token); a TokenReview
// (authentication.k8s.io/v1) tells who it is, and a SubjectAccessReview
// (authorization.k8s.io/v1) whether that identity may `get` the non-resource URL (`/metrics`).
// Grant it with a ClusterRole rule `nonResourceURLs: ["/metrics"], verbs: ["get"]` (the Helm
// chart ships one, `<release>-metrics-reader`).
//
// Outcomes map to HTTP as the API server's own do: no token or a token the API server rejects
// is 401, an identity without the permission is 403, a review that could not be made is 500.
// Answers (allowed and denied alike, never errors) are cached for `cache_ttl` per token and
// path, keyed by a SHA-256 of the token so no token is kept in memory, so a Prometheus scraping
// every few seconds costs the API server two requests per `cache_ttl`, not two per scrape.
//
// Thread-safety: Authorize may be called concurrently; it holds no lock while reviews run.
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "base/clock.h"
#include "kube/client.h"

namespace tpujob::metrics {

enum class AuthOutcome { kAllowed, kUnauthenticated, kForbidden, kError };

struct AuthResult {
  AuthOutcome outcome = AuthOutcome::kError;
  std::string user;    // the authenticated user name, when known
  std::string reason;  // why not allowed (for the response body and the log)

  int HttpStatus() const;  // 200, 401, 403 or 500
};

class RequestAuthorizer {
 public:
  virtual ~RequestAuthorizer() = default;
  // `authorization` is the request's Authorization header ("" when absent); `path` the URL
  // path asked for; the verb is always "get".
  virtual AuthResult Authorize(std::string_view authorization, std::string_view path) = 0;
};

struct DelegatingAuthorizerOptions {
  Duration cache_ttl = std::chrono::seconds(10);
  std::size_t max_cache_entries = 1024;  // the least recently used answer goes first
};

class DelegatingAuthorizer final : public RequestAuthorizer {
 public:
  // `client` must not be fenced by leader election: a standby replica answers scrapes too.
  DelegatingAuthorizer(kube::Client& client, Clock& clock,
                       DelegatingAuthorizerOptions options = {});
  AuthResult Authorize(std::string_view authorization, std::string_view path) override;

  // Reviews made so far (TokenReviews plus SubjectAccessReviews), for tests of the cache.
  std::size_t reviews() const;

 private:
  AuthResult Review(const std::string& token, std::string_view path);
  struct Cached {
    AuthResult result;
    TimePoint expires;
    std::list<std::string>::iterator lru;
  };
  kube::Client& client_;
  Clock& clock_;
  DelegatingAuthorizerOptions options_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Cached> cache_;  // guarded by mu_
  std::list<std::string> lru_;                     // guarded by mu_; front = most recent
  std::size_t reviews_ = 0;                        // guarded by mu_
};

// "Bearer <token>" → "<token>"; "" for anything else (the scheme is case-insensitive).
std::string BearerToken(std::string_view authorization);

}  // namespace tpujob::metrics
