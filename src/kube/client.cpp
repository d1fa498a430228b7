// The HTTP adapter: the only file that talks to cpprestsdk. Every exception it can throw is
// caught here and turned into a kube::Error.

#include "kube/client.h"

#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "kube/http_stream.h"
#include "kube/stream.h"

// cpprestsdk defines a macro `U` that breaks fmt (used by spdlog) when it comes first, so its
// headers are included last and kept out of clang-format's include sorting.
// clang-format off
#include <boost/asio/ssl.hpp>
#include <cpprest/containerstream.h>
#include <cpprest/http_client.h>
// clang-format on

#include "base/backoff.h"
#include "base/logging.h"
#include "base/token_bucket.h"

namespace tpujob::kube {
namespace {

namespace http = web::http;

std::string_view PatchContentType(PatchType type) {
  switch (type) {
    case PatchType::kMerge:
      return "application/merge-patch+json";
    case PatchType::kJson:
      return "application/json-patch+json";
    case PatchType::kStrategicMerge:
      return "application/strategic-merge-patch+json";
    case PatchType::kApply:
      return "application/apply-patch+yaml";
  }
  return "application/merge-patch+json";
}

class QueryBuilder {
 public:
  QueryBuilder& Add(std::string_view key, std::string_view value) {
    if (value.empty()) return *this;
    query_ += query_.empty() ? '?' : '&';
    query_ += key;
    query_ += '=';
    query_ += UrlEncode(value);
    return *this;
  }
  const std::string& str() const { return query_; }

 private:
  std::string query_;
};

// Sleeps on the real clock; used between retries.
void SleepFor(Duration d) {
  std::mutex mu;
  std::condition_variable cv;
  std::unique_lock<std::mutex> lock(mu);
  const TimePoint deadline = Clock::Real().Now() + d;
  while (Clock::Real().Now() < deadline) Clock::Real().WaitUntil(cv, lock, deadline);
}

using HttpClientPtr = std::shared_ptr<http::client::http_client>;

// Holds an http_client whose pooled connections can be thrown away. After a transport error the
// pool may be full of connections the server has closed (it restarted, say), and cpprestsdk
// would hand them out one per retry; starting a fresh client gives the retry a new connection.
// Requests in flight keep their (old) client alive through the shared_ptr.
class HttpClientSlot {
 public:
  explicit HttpClientSlot(std::function<HttpClientPtr()> make) : make_(std::move(make)) {
    current_ = make_();
  }
  HttpClientPtr Get() {
    std::lock_guard<std::mutex> guard(mu_);
    return current_;
  }
  // Replaces `broken` unless another thread already did.
  void Discard(const HttpClientPtr& broken) {
    std::lock_guard<std::mutex> guard(mu_);
    if (current_ == broken) current_ = make_();
  }

 private:
  std::function<HttpClientPtr()> make_;
  std::mutex mu_;
  HttpClientPtr current_;
};

struct Request {
  http::method method;
  std::string verb;  // for logs and metrics: GET, LIST, WATCH, POST, PUT, PATCH, DELETE
  const Resource* resource;
  std::string path_and_query;
  std::optional<std::string> body;
  std::string content_type = "application/json";
  std::string accept = "application/json";
  std::function<Status()> before_send = nullptr;  // see WriteOptions::before_send
};

// Ends a streamed response (a watch, a followed log) from any thread: the pending read fails at
// once instead of waiting for bytes that may never come.
void CancelBody(pplx::cancellation_token_source& cancel, concurrency::streams::istream& body) {
  cancel.cancel();
  try {
    body.close().wait();
  } catch (const std::exception&) {
    // Closing an already-broken stream throws; there is nothing left to release.
  }
}

class CppRestClient final : public Client {
 public:
  CppRestClient(Config config, RequestObserver observer)
      : config_(std::move(config)),
        observer_(std::move(observer)),
        limiter_(config_.qps, config_.burst),
        client_([this] { return MakeClient(config_.request_timeout); }) {}

  Result<Json> Get(const Resource& r, const std::string& ns, const std::string& name,
                   const std::string& subresource) override {
    return DoJson({http::methods::GET, "GET", &r, r.ObjectPath(ns, name, subresource), {}});
  }

  Result<Json> List(const Resource& r, const std::string& ns, const ListOptions& options) override {
    QueryBuilder q;
    q.Add("labelSelector", options.label_selector)
        .Add("fieldSelector", options.field_selector)
        .Add("resourceVersion", options.resource_version)
        .Add("resourceVersionMatch", options.resource_version_match)
        .Add("continue", options.continue_token);
    if (options.limit > 0) q.Add("limit", std::to_string(options.limit));
    return DoJson({http::methods::GET, "LIST", &r, r.CollectionPath(ns) + q.str(), {}});
  }

  Result<std::unique_ptr<WatchStream>> Watch(const Resource& r, const std::string& ns,
                                             const WatchOptions& options) override;

  // StreamGet (stream.h).
  Result<std::unique_ptr<ByteStream>> Stream(const Resource& r, const std::string& ns,
                                             const std::string& name,
                                             const std::string& subresource,
                                             const QueryParams& query, Duration read_timeout);

  Result<Json> Create(const Resource& r, const std::string& ns, const Json& object,
                      const WriteOptions& options) override {
    QueryBuilder q;
    q.Add("fieldManager", options.field_manager);
    Request request{http::methods::POST, "POST", &r, r.CollectionPath(ns) + q.str(), object.dump()};
    request.before_send = options.before_send;
    return DoJson(std::move(request));
  }

  Result<Json> Update(const Resource& r, const std::string& ns, const Json& object,
                      const WriteOptions& options) override {
    const std::string name = object.value("/metadata/name"_json_pointer, std::string{});
    if (name.empty()) return std::unexpected(Error::Config("update: object has no metadata.name"));
    QueryBuilder q;
    q.Add("fieldManager", options.field_manager);
    Request request{http::methods::PUT, "PUT", &r,
                    r.ObjectPath(ns, name, options.subresource) + q.str(), object.dump()};
    request.before_send = options.before_send;
    return DoJson(std::move(request));
  }

  Result<Json> Patch(const Resource& r, const std::string& ns, const std::string& name,
                     PatchType type, const Json& body, const PatchOptions& options) override {
    QueryBuilder q;
    q.Add("fieldManager", options.field_manager);
    if (type == PatchType::kApply && options.force) q.Add("force", "true");
    Request request{http::methods::PATCH, "PATCH", &r,
                    r.ObjectPath(ns, name, options.subresource) + q.str(), body.dump()};
    request.content_type = PatchContentType(type);
    request.before_send = options.before_send;
    return DoJson(std::move(request));
  }

  Result<Json> Delete(const Resource& r, const std::string& ns, const std::string& name,
                      const DeleteOptions& options) override {
    Json body = {{"kind", "DeleteOptions"}, {"apiVersion", "v1"}};
    if (options.grace_period_seconds) body["gracePeriodSeconds"] = *options.grace_period_seconds;
    if (!options.propagation_policy.empty()) body["propagationPolicy"] = options.propagation_policy;
    if (options.precondition_uid) body["preconditions"]["uid"] = *options.precondition_uid;
    if (options.precondition_resource_version) {
      body["preconditions"]["resourceVersion"] = *options.precondition_resource_version;
    }
    Request request{http::methods::DEL, "DELETE", &r, r.ObjectPath(ns, name), body.dump()};
    request.before_send = options.before_send;
    return DoJson(std::move(request));
  }

 private:
  // The TLS context of watches, made on the first one (a watch's error if it cannot be made).
  Result<std::shared_ptr<SSL_CTX>> StreamTlsContext() {
    std::lock_guard<std::mutex> lock(stream_tls_mu_);
    if (!stream_tls_) {
      if (!config_.server.starts_with("https://")) return std::shared_ptr<SSL_CTX>();
      auto made = MakeStreamTlsContext(config_);
      if (!made) return std::unexpected(made.error());
      stream_tls_ = std::move(*made);
    }
    return stream_tls_;
  }

  HttpClientPtr MakeClient(std::chrono::seconds timeout) {
    http::client::http_client_config http_config;
    http_config.set_timeout(timeout);
    http_config.set_validate_certificates(!config_.insecure_skip_tls_verify);
    http_config.set_max_redirects(0);
    if (config_.insecure_skip_tls_verify) {
      log::Warn("TLS verification is disabled by the kubeconfig", {{"server", config_.server}});
    }
    const std::string ca = config_.ca_pem;
    const std::string cert = config_.client_cert_pem;
    const std::string key = config_.client_key_pem;
    http_config.set_ssl_context_callback([ca, cert, key](boost::asio::ssl::context& ctx) {
      SSL_CTX* native = ctx.native_handle();
      if (!ca.empty() && !TrustOnlyCertificateAuthorities(native, ca)) {
        // Nothing verifies then: the handshake fails with the verification error.
        log::Error("no usable certificate in the configured CA bundle");
      }
      if (!cert.empty() && !key.empty()) {
        boost::system::error_code ec;
        ctx.use_certificate_chain(boost::asio::buffer(cert), ec);
        if (!ec) ctx.use_private_key(boost::asio::buffer(key), boost::asio::ssl::context::pem, ec);
        if (ec) log::Error("client certificate rejected", {{"error", ec.message()}});
      }
    });
    try {
      return std::make_shared<http::client::http_client>(
          utility::conversions::to_string_t(config_.server), http_config);
    } catch (const std::exception& e) {
      log::Error("invalid API server address", {{"server", config_.server}, {"error", e.what()}});
      return nullptr;
    }
  }

  // Builds the cpprest request with authentication and content headers.
  Result<http::http_request> BuildRequest(const Request& request) {
    http::http_request req(request.method);
    req.set_request_uri(utility::conversions::to_string_t(request.path_and_query));
    req.headers().add(U("Accept"), utility::conversions::to_string_t(request.accept));
    req.headers().add(U("User-Agent"), utility::conversions::to_string_t(config_.user_agent));
    if (config_.token) {
      auto token = config_.token->Token();
      if (!token) return std::unexpected(token.error());
      req.headers().add(U("Authorization"), utility::conversions::to_string_t("Bearer " + *token));
    }
    if (request.body) {
      req.set_body(*request.body, std::string(request.content_type));
    }
    return req;
  }

  void Observe(const Request& request, int status, TimePoint start) {
    if (observer_.on_request) {
      observer_.on_request(request.verb, request.resource->plural, status,
                           Clock::Real().Now() - start);
    }
  }

  // One round trip. On success returns the body; on an HTTP error the parsed Error.
  Result<std::string> RoundTrip(const Request& request) {
    HttpClientPtr client = client_.Get();
    if (client == nullptr)
      return std::unexpected(Error::Config("invalid server " + config_.server));
    auto req = BuildRequest(request);
    if (!req) return std::unexpected(req.error());
    const TimePoint start = Clock::Real().Now();
    try {
      http::http_response response = client->request(*req).get();
      std::string body = response.extract_utf8string(true).get();
      const int status = response.status_code();
      Observe(request, status, start);
      if (status >= 200 && status < 300) return body;
      std::string retry_after;
      auto it = response.headers().find(U("Retry-After"));
      if (it != response.headers().end())
        retry_after = utility::conversions::to_utf8string(it->second);
      return std::unexpected(ErrorFromResponse(status, body, retry_after));
    } catch (const std::exception& e) {
      Observe(request, 0, start);
      client_.Discard(client);
      return std::unexpected(Error::Transport(e.what()));
    }
  }

  Result<std::string> DoWithRetries(const Request& request) {
    Backoff backoff({.initial = std::chrono::milliseconds(100),
                     .max = std::chrono::seconds(10),
                     .factor = 2.0,
                     .jitter = 0.5});
    bool reloaded = false;
    for (int attempt = 0;; ++attempt) {
      limiter_.Wait();
      // After the limiter: a request can wait there for a while (seconds at a low QPS and a long
      // queue), and what allowed it may have ended meanwhile.
      if (request.before_send) {
        if (auto allowed = request.before_send(); !allowed) {
          log::Warn(attempt == 0 ? "request not sent" : "retry not sent",
                    {{"verb", request.verb},
                     {"path", request.path_and_query},
                     {"reason", allowed.error().ToString()}});
          return std::unexpected(allowed.error());
        }
      }
      auto result = RoundTrip(request);
      // A refused token may have been rotated (and the old one revoked) since it was read:
      // once per request, read it again and, if it changed, retry at once.
      if (!result && result.error().IsUnauthorized() && !reloaded && config_.token &&
          config_.token->Reload()) {
        reloaded = true;
        --attempt;
        continue;
      }
      if (result || !result.error().IsRetryable() || attempt >= config_.max_retries) {
        return result;
      }
      Duration delay = backoff.Next();
      if (result.error().retry_after) {
        delay = std::max<Duration>(delay, *result.error().retry_after);
      }
      log::Warn("retrying API request",
                {{"verb", request.verb},
                 {"path", request.path_and_query},
                 {"attempt", attempt + 1},
                 {"delay_ms", std::chrono::duration_cast<std::chrono::milliseconds>(delay).count()},
                 {"error", result.error().ToString()}});
      SleepFor(delay);
    }
  }

  Result<Json> DoJson(Request request) {
    auto body = DoWithRetries(request);
    if (!body) return std::unexpected(body.error());
    Json parsed = Json::parse(*body, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) {
      return std::unexpected(Error::Decode(request.verb + " " + request.path_and_query +
                                           ": response is not JSON: " + body->substr(0, 200)));
    }
    return parsed;
  }

  Config config_;
  RequestObserver observer_;
  TokenBucket limiter_;
  HttpClientSlot client_;
  std::mutex stream_tls_mu_;
  std::shared_ptr<SSL_CTX> stream_tls_;
};

// A watch: the response body read by the reflector's own thread over a connection of its own
// (kube/http_stream.h says why not through cpprestsdk), decoded as it comes.
class DirectWatchStream final : public WatchStream {
 public:
  // `on_silent` runs when the watch is given up as silent.
  DirectWatchStream(std::unique_ptr<HttpStream> body, std::chrono::seconds idle_timeout,
                    std::shared_ptr<const VolatileFields> volatile_fields,
                    std::function<void()> on_silent)
      : body_(std::move(body)), idle_timeout_(idle_timeout), on_silent_(std::move(on_silent)) {
    decoder_.set_volatile_fields(std::move(volatile_fields));
  }

  ~DirectWatchStream() override { Cancel(); }

  Result<std::optional<WatchEvent>> Next() override {
    while (true) {
      if (!ready_.empty()) {
        Result<WatchEvent> event = std::move(ready_.front());
        ready_.pop_front();
        if (!event) return std::unexpected(event.error());
        return std::optional<WatchEvent>(std::move(*event));
      }
      if (cancelled_) return std::unexpected(Error::Cancelled("watch cancelled"));
      if (ended_) return std::optional<WatchEvent>{};
      // Nothing at all, not even the bookmark or the end the server owes us, for the idle
      // timeout: the connection is dead without having said so.
      Result<std::string_view> chunk = body_->Read(idle_timeout_);
      if (!chunk) {
        ended_ = true;
        if (cancelled_ || chunk.error().kind == ErrorKind::kCancelled) continue;
        if (chunk.error().IsSilent()) {
          Cancel();
          if (on_silent_) on_silent_();
          return std::unexpected(chunk.error());
        }
        return std::unexpected(Error::Transport("watch stream broken: " + chunk.error().message));
      }
      if (chunk->empty()) {
        ended_ = true;
        if (decoder_.pending_bytes() > 0) {
          return std::unexpected(Error::Decode("watch stream ended inside an event"));
        }
        continue;
      }
      for (Result<WatchEvent>& event : decoder_.Feed(*chunk)) ready_.push_back(std::move(event));
    }
  }

  void Cancel() override {
    if (!cancelled_.exchange(true)) body_->Cancel();
  }

 private:
  std::unique_ptr<HttpStream> body_;
  const std::chrono::seconds idle_timeout_;
  std::function<void()> on_silent_;
  WatchDecoder decoder_;
  std::deque<Result<WatchEvent>> ready_;
  std::atomic<bool> cancelled_{false};
  bool ended_ = false;
};

Result<std::unique_ptr<WatchStream>> CppRestClient::Watch(const Resource& r, const std::string& ns,
                                                          const WatchOptions& options) {
  QueryBuilder q;
  q.Add("watch", "1")
      .Add("labelSelector", options.label_selector)
      .Add("fieldSelector", options.field_selector)
      .Add("resourceVersion", options.resource_version);
  if (options.allow_bookmarks) q.Add("allowWatchBookmarks", "true");
  if (options.send_initial_events) {
    q.Add("sendInitialEvents", "true").Add("resourceVersionMatch", "NotOlderThan");
  }
  if (options.timeout_seconds) q.Add("timeoutSeconds", std::to_string(*options.timeout_seconds));
  Request request{http::methods::GET, "WATCH", &r, r.CollectionPath(ns) + q.str(), {}};
  HttpStream::Headers headers = {{"Accept", request.accept}, {"User-Agent", config_.user_agent}};
  if (config_.token) {
    auto token = config_.token->Token();
    if (!token) return std::unexpected(token.error());
    headers.emplace_back("Authorization", "Bearer " + *token);
  }
  auto tls = StreamTlsContext();
  if (!tls) return std::unexpected(tls.error());
  // With an idle timeout, a server that answers nothing fails as soon; without one the wait
  // for the response is as long as a watch may be quiet.
  const std::chrono::seconds head_timeout = config_.watch_idle_timeout.count() > 0
                                                ? config_.watch_idle_timeout
                                                : std::chrono::seconds(std::chrono::minutes(15));
  limiter_.Wait();
  const TimePoint start = Clock::Real().Now();
  auto body = HttpStream::Get(config_, tls->get(), request.path_and_query, headers, head_timeout);
  if (!body) {
    Observe(request, 0, start);
    return std::unexpected(body.error());
  }
  const int status = (*body)->status();
  Observe(request, status, start);
  // A refused token may have been rotated: the next watch (after the reflector's backoff) uses
  // the file's new one.
  if (status == 401 && config_.token) config_.token->Reload();
  if (status != 200) {
    auto text = (*body)->ReadAll(1 << 20, head_timeout);
    return std::unexpected(
        ErrorFromResponse(status, text ? *text : std::string{}, (*body)->Header("Retry-After")));
  }
  return std::unique_ptr<WatchStream>(std::make_unique<DirectWatchStream>(
      std::move(*body), config_.watch_idle_timeout, options.volatile_fields, [this] {
        // The path to the server may be dead for every connection, the pooled ones of other
        // requests too (as an HTTP/2 client closes its one connection when a ping goes
        // unanswered): start over with fresh connections.
        client_.Discard(client_.Get());
      }));
}

// A streamed body (a followed log): chunks as they arrive, no decoding, no read timeout.
class CppRestByteStream final : public ByteStream {
 public:
  CppRestByteStream(HttpClientPtr client, http::http_response response,
                    pplx::cancellation_token_source cancel)
      : client_(std::move(client)),
        response_(std::move(response)),
        body_(response_.body()),
        cancel_(std::move(cancel)) {}

  ~CppRestByteStream() override { Cancel(); }

  Result<std::optional<std::string>> Read() override {
    if (cancelled_) return std::unexpected(Error::Cancelled("stream cancelled"));
    if (ended_) return std::optional<std::string>{};
    try {
      // As for a watch: ask for what is buffered, or for one byte to wait for more.
      const size_t available = body_.streambuf().in_avail();
      const size_t want = available > 0 ? std::min<size_t>(available, 1 << 20) : 1;
      concurrency::streams::container_buffer<std::string> chunk;
      const size_t n = body_.read(chunk, want).get();
      if (n == 0) {
        ended_ = true;
        return std::optional<std::string>{};
      }
      return std::optional<std::string>(std::move(chunk.collection()));
    } catch (const std::exception& e) {
      ended_ = true;
      if (cancelled_) return std::unexpected(Error::Cancelled("stream cancelled"));
      return std::unexpected(Error::Transport(std::string("stream broken: ") + e.what()));
    }
  }

  void Cancel() override {
    if (!cancelled_.exchange(true)) CancelBody(cancel_, body_);
  }

 private:
  HttpClientPtr client_;  // its own connection, kept open while the body is read
  http::http_response response_;
  concurrency::streams::istream body_;
  pplx::cancellation_token_source cancel_;
  std::atomic<bool> cancelled_{false};
  bool ended_ = false;
};

Result<std::unique_ptr<ByteStream>> CppRestClient::Stream(const Resource& r, const std::string& ns,
                                                          const std::string& name,
                                                          const std::string& subresource,
                                                          const QueryParams& query,
                                                          Duration read_timeout) {
  QueryBuilder q;
  for (const auto& [key, value] : query) q.Add(key, value);
  Request request{http::methods::GET, "GET", &r, r.ObjectPath(ns, name, subresource) + q.str(), {}};
  request.accept = "*/*";  // logs are text/plain
  // A client of its own per stream: its timeout bounds the wait for the headers and each read of
  // the body (a followed log may be quiet for a long time).
  HttpClientPtr client = MakeClient(
      std::max(std::chrono::ceil<std::chrono::seconds>(read_timeout), std::chrono::seconds(1)));
  if (client == nullptr) return std::unexpected(Error::Config("invalid server " + config_.server));
  auto req = BuildRequest(request);
  if (!req) return std::unexpected(req.error());
  limiter_.Wait();
  const TimePoint start = Clock::Real().Now();
  pplx::cancellation_token_source cancel;
  try {
    http::http_response response = client->request(*req, cancel.get_token()).get();
    const int status = response.status_code();
    Observe(request, status, start);
    if (status < 200 || status >= 300) {
      std::string body = response.extract_utf8string(true).get();
      return std::unexpected(ErrorFromResponse(status, body));
    }
    return std::unique_ptr<ByteStream>(
        std::make_unique<CppRestByteStream>(client, std::move(response), std::move(cancel)));
  } catch (const std::exception& e) {
    Observe(request, 0, start);
    return std::unexpected(Error::Transport(e.what()));
  }
}

}  // namespace

Result<std::unique_ptr<ByteStream>> StreamGet(const Config& config, const Resource& r,
                                              const std::string& ns, const std::string& name,
                                              const std::string& subresource,
                                              const QueryParams& query, Duration read_timeout) {
  // The stream holds its own http_client; the CppRestClient only builds the request.
  CppRestClient client(config, {});
  return client.Stream(r, ns, name, subresource, query, read_timeout);
}

Result<std::string> GetText(const Config& config, const Resource& r, const std::string& ns,
                            const std::string& name, const std::string& subresource,
                            const QueryParams& query, Duration timeout) {
  auto stream = StreamGet(config, r, ns, name, subresource, query, timeout);
  if (!stream) return std::unexpected(stream.error());
  // A watchdog ends a body that keeps trickling: Cancel() unblocks the Read below.
  std::mutex mu;
  std::condition_variable done_cv;
  bool done = false;
  bool expired = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> lock(mu);
    if (!done_cv.wait_for(lock, timeout, [&] { return done; })) {
      expired = true;
      (*stream)->Cancel();
    }
  });
  std::string text;
  std::optional<Error> error;
  while (true) {
    auto chunk = (*stream)->Read();
    if (!chunk) {
      error = chunk.error();
      break;
    }
    if (!*chunk) break;
    text += **chunk;
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
  }
  done_cv.notify_one();
  watchdog.join();
  if (expired) {
    return std::unexpected(Error::Transport(
        "no end of " + subresource + " of " + name + " after " +
        std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout).count()) + " s"));
  }
  if (error) return std::unexpected(*error);
  return text;
}

Result<ListAllResult> ListAll(Client& client, const Resource& r, const std::string& ns,
                              ListOptions options) {
  ListAllResult result;
  const ListOptions first = options;
  bool restarted = false;
  while (true) {
    auto page = client.List(r, ns, options);
    if (!page) {
      // A continue token expires after etcd compaction; start again once without paging so a
      // busy cluster still yields a consistent list.
      if (page.error().IsGone() && !options.continue_token.empty() && !restarted) {
        restarted = true;
        result = {};
        options = first;
        options.limit = 0;
        continue;
      }
      return std::unexpected(page.error());
    }
    ++result.pages;
    Json& items = (*page)["items"];
    if (items.is_array()) {
      for (Json& item : items) result.items.push_back(std::move(item));
    }
    const Json& metadata = (*page)["metadata"];
    result.resource_version = metadata.value("resourceVersion", std::string{});
    options.continue_token = metadata.value("continue", std::string{});
    if (options.continue_token.empty()) return result;
    // Later pages are served from the first page's snapshot; a version may not be repeated.
    options.resource_version.clear();
    options.resource_version_match.clear();
  }
}

void KeepOpenSslUntilExit() {
  static std::once_flag once;
  std::call_once(once, [] { OPENSSL_init_ssl(OPENSSL_INIT_NO_ATEXIT, nullptr); });
}

std::unique_ptr<Client> NewClient(Config config, RequestObserver observer) {
  KeepOpenSslUntilExit();
  return std::make_unique<CppRestClient>(std::move(config), std::move(observer));
}

}  // namespace tpujob::kube
