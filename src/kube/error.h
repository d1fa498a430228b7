// Errors returned by the Kubernetes client: values, never exceptions.
//
// An Error is either an API error (the server answered with a non-2xx status, normally carrying
// a metav1.Status body whose reason/message/details are parsed here), a transport error (no
// answer: connection refused or reset, TLS failure, timeout), a decode error (an answer we could
// not understand) or a configuration error (bad kubeconfig, missing file).
#pragma once

#include <chrono>
#include <expected>
#include <optional>
#include <string>
#include <string_view>

namespace tpujob::kube {

enum class ErrorKind { kApi, kTransport, kDecode, kConfig, kCancelled };

struct Error {
  ErrorKind kind = ErrorKind::kApi;
  int http_status = 0;  // 0 unless kind == kApi
  std::string reason;   // metav1.Status reason, e.g. "NotFound", "Conflict", "Expired"
  std::string message;  // human-readable, from the server or from us
  std::optional<std::chrono::seconds>
      retry_after;  // Retry-After header or details.retryAfterSeconds

  bool IsNotFound() const { return http_status == 404; }
  bool IsConflict() const { return http_status == 409 && reason != "AlreadyExists"; }
  bool IsAlreadyExists() const { return http_status == 409 && reason == "AlreadyExists"; }
  // 410 Gone, or the "Expired" reason: the resourceVersion is too old; the caller must relist.
  bool IsGone() const { return http_status == 410 || reason == "Expired" || reason == "Gone"; }
  bool IsTooManyRequests() const { return http_status == 429; }
  bool IsUnauthorized() const { return http_status == 401; }
  bool IsForbidden() const { return http_status == 403; }
  bool IsInvalid() const { return http_status == 422; }
  // A watch that delivered nothing for longer than the client's watch idle timeout.
  bool IsSilent() const { return kind == ErrorKind::kTransport && reason == "WatchSilent"; }
  // Whether repeating the same request may succeed: throttling, server errors and transport
  // failures. Conflicts and client errors are not retryable as-is.
  bool IsRetryable() const;

  // "404 NotFound: pods \"x\" not found", "transport error: connection refused", ...
  std::string ToString() const;

  // An API error as the server would report it (fakes in tests build these too).
  static Error Api(int http_status, std::string reason, std::string message);
  static Error Transport(std::string message);
  static Error Decode(std::string message);
  static Error Config(std::string message);
  static Error Cancelled(std::string message = {});
  static Error Silent(std::chrono::seconds idle);
};

template <typename T>
using Result = std::expected<T, Error>;

using Status = std::expected<void, Error>;

// Builds an Error from a non-2xx answer. `body` is normally a metav1.Status JSON document; any
// other body (HTML from a proxy, empty) still yields a useful error with the HTTP status and a
// truncated excerpt of the body. `http_status` is authoritative over the body's "code"; a
// missing reason is derived from it ("NotFound" for 404, ...).
// `retry_after_header` is the raw Retry-After header value, empty if absent: delay-seconds, or
// an HTTP-date (converted against the wall clock, at least 1s); an unparsable value means 1s.
// The header wins over the body's details.retryAfterSeconds.
Error ErrorFromResponse(int http_status, std::string_view body,
                        std::string_view retry_after_header = {});

// Parses a metav1.Status object given as JSON text (as found in watch ERROR events). The code
// comes from the Status's "code", else `fallback_http_status`, else is derived from a well-known
// reason ("Expired" -> 410). Text that is not a JSON object yields a kDecode error.
Error ErrorFromStatusJson(std::string_view status_json, int fallback_http_status = 0);

}  // namespace tpujob::kube
