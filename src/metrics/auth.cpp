#include "metrics/auth.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cctype>

namespace tpujob::metrics {
namespace {

const kube::Resource kTokenReviews{"authentication.k8s.io", "v1", "tokenreviews", false};
const kube::Resource kSubjectAccessReviews{"authorization.k8s.io", "v1", "subjectaccessreviews",
                                           false};

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(data.data(), data.size(), digest, &length, EVP_sha256(), nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(length * 2);
  for (unsigned int i = 0; i < length; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 0xf];
  }
  return out;
}

}  // namespace

int AuthResult::HttpStatus() const {
  switch (outcome) {
    case AuthOutcome::kAllowed:
      return 200;
    case AuthOutcome::kUnauthenticated:
      return 401;
    case AuthOutcome::kForbidden:
      return 403;
    case AuthOutcome::kError:
      break;
  }
  return 500;
}

std::string BearerToken(std::string_view authorization) {
  constexpr std::string_view kScheme = "bearer ";
  if (authorization.size() <= kScheme.size()) return {};
  for (std::size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != kScheme[i]) return {};
  }
  std::string_view token = authorization.substr(kScheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && (token.back() == ' ' || token.back() == '\r')) token.remove_suffix(1);
  return std::string(token);
}

DelegatingAuthorizer::DelegatingAuthorizer(kube::Client& client, Clock& clock,
                                           DelegatingAuthorizerOptions options)
    : client_(client), clock_(clock), options_(options) {}

std::size_t DelegatingAuthorizer::reviews() const {
  std::lock_guard<std::mutex> guard(mu_);
  return reviews_;
}

AuthResult DelegatingAuthorizer::Authorize(std::string_view authorization, std::string_view path) {
  const std::string token = BearerToken(authorization);
  if (token.empty()) {
    return {AuthOutcome::kUnauthenticated, "", "a bearer token is required"};
  }
  const std::string key = Sha256Hex(token) + " " + std::string(path);
  {
    std::lock_guard<std::mutex> guard(mu_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      if (clock_.Now() < it->second.expires) {
        lru_.splice(lru_.begin(), lru_, it->second.lru);
        return it->second.result;
      }
      lru_.erase(it->second.lru);
      cache_.erase(it);
    }
  }
  AuthResult result = Review(token, path);
  if (result.outcome == AuthOutcome::kError) return result;  // never cached: try again next time
  std::lock_guard<std::mutex> guard(mu_);
  if (cache_.contains(key)) return result;  // a concurrent scrape filled it meanwhile
  lru_.push_front(key);
  cache_.emplace(key, Cached{result, clock_.Now() + options_.cache_ttl, lru_.begin()});
  while (cache_.size() > std::max<std::size_t>(options_.max_cache_entries, 1)) {
    cache_.erase(lru_.back());
    lru_.pop_back();
  }
  return result;
}

AuthResult DelegatingAuthorizer::Review(const std::string& token, std::string_view path) {
  {
    std::lock_guard<std::mutex> guard(mu_);
    ++reviews_;
  }
  kube::Json token_review = {{"apiVersion", "authentication.k8s.io/v1"},
                             {"kind", "TokenReview"},
                             {"spec", {{"token", token}}}};
  auto authn = client_.Create(kTokenReviews, "", token_review);
  if (!authn) {
    return {AuthOutcome::kError, "", "TokenReview failed: " + authn.error().ToString()};
  }
  const kube::Json status = authn->value("status", kube::Json::object());
  if (!status.value("authenticated", false)) {
    std::string why = kube::StringField(status, "error");
    return {AuthOutcome::kUnauthenticated, "", why.empty() ? "the token is not valid" : why};
  }
  const kube::Json user = status.value("user", kube::Json::object());
  AuthResult result;
  result.user = kube::StringField(user, "username");

  kube::Json spec = {{"user", result.user},
                     {"nonResourceAttributes", {{"path", std::string(path)}, {"verb", "get"}}}};
  if (auto uid = kube::StringField(user, "uid"); !uid.empty()) spec["uid"] = uid;
  if (auto groups = user.find("groups"); groups != user.end() && groups->is_array()) {
    spec["groups"] = *groups;
  }
  if (auto extra = user.find("extra"); extra != user.end() && extra->is_object()) {
    spec["extra"] = *extra;
  }
  kube::Json access_review = {
      {"apiVersion", "authorization.k8s.io/v1"}, {"kind", "SubjectAccessReview"}, {"spec", spec}};
  {
    std::lock_guard<std::mutex> guard(mu_);
    ++reviews_;
  }
  auto authz = client_.Create(kSubjectAccessReviews, "", access_review);
  if (!authz) {
    result.outcome = AuthOutcome::kError;
    result.reason = "SubjectAccessReview failed: " + authz.error().ToString();
    return result;
  }
  const kube::Json access = authz->value("status", kube::Json::object());
  if (access.value("allowed", false)) {
    result.outcome = AuthOutcome::kAllowed;
    return result;
  }
  result.outcome = AuthOutcome::kForbidden;
  result.reason = "user \"" + result.user + "\" may not get " + std::string(path);
  if (auto why = kube::StringField(access, "reason"); !why.empty()) result.reason += ": " + why;
  return result;
}

}  // namespace tpujob::metrics
