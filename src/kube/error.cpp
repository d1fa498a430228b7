#include "kube/error.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <ctime>
#include <iomanip>
#include <sstream>
#include <utility>

#include "base/strings.h"
#include "kube/json.h"

namespace tpujob::kube {
namespace {

constexpr size_t kMaxBodyExcerpt = 200;

std::string_view StatusText(int code) {
  switch (code) {
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 406:
      return "Not Acceptable";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 413:
      return "Request Entity Too Large";
    case 415:
      return "Unsupported Media Type";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "";
  }
}

// The metav1.StatusReason the API server would use for a bare HTTP status, as client-go's
// NewGenericServerResponse does for answers without a Status body.
std::string_view ReasonForCode(int code) {
  switch (code) {
    case 400:
      return "BadRequest";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "NotFound";
    case 405:
      return "MethodNotAllowed";
    case 406:
      return "NotAcceptable";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 413:
      return "RequestEntityTooLarge";
    case 415:
      return "UnsupportedMediaType";
    case 422:
      return "Invalid";
    case 429:
      return "TooManyRequests";
    case 500:
      return "InternalError";
    case 503:
      return "ServiceUnavailable";
    case 504:
      return "Timeout";
    default:
      return "";
  }
}

// The inverse, for Status objects that carry a reason but no code.
int CodeForReason(std::string_view reason) {
  static constexpr std::pair<std::string_view, int> kTable[] = {
      {"BadRequest", 400},
      {"Unauthorized", 401},
      {"Forbidden", 403},
      {"NotFound", 404},
      {"MethodNotAllowed", 405},
      {"NotAcceptable", 406},
      {"AlreadyExists", 409},
      {"Conflict", 409},
      {"Gone", 410},
      {"Expired", 410},
      {"RequestEntityTooLarge", 413},
      {"UnsupportedMediaType", 415},
      {"Invalid", 422},
      {"TooManyRequests", 429},
      {"InternalError", 500},
      {"ServiceUnavailable", 503},
      {"Timeout", 504},
  };
  for (const auto& [name, code] : kTable) {
    if (name == reason) return code;
  }
  return 0;
}

// A one-line excerpt of a body for messages: whitespace runs collapsed, at most
// kMaxBodyExcerpt bytes, never cutting a UTF-8 sequence in half.
std::string Excerpt(std::string_view body) {
  std::string out;
  bool in_space = false;
  for (char c : body) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      in_space = !out.empty();
      continue;
    }
    if (in_space) out.push_back(' ');
    in_space = false;
    out.push_back(c);
  }
  if (out.size() <= kMaxBodyExcerpt) return out;
  size_t cut = kMaxBodyExcerpt;
  while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
  out.resize(cut);
  out += "... (" + std::to_string(body.size()) + " bytes)";
  return out;
}

// Retry-After is delay-seconds or an HTTP-date (RFC 9110 section 10.2.3). Anything we cannot
// read still says "retry later", so it becomes the shortest sensible delay.
std::chrono::seconds ParseRetryAfter(std::string_view header) {
  constexpr std::chrono::seconds kFallback(1);
  header = Trim(header);
  int64_t seconds = 0;
  auto [ptr, ec] = std::from_chars(header.data(), header.data() + header.size(), seconds);
  if (ec == std::errc() && ptr == header.data() + header.size()) {
    return seconds >= 0 ? std::chrono::seconds(seconds) : kFallback;
  }
  // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT".
  std::tm tm{};
  std::istringstream in{std::string(header)};
  in.imbue(std::locale::classic());
  in >> std::get_time(&tm, "%a, %d %b %Y %H:%M:%S");
  std::string zone;
  in >> zone;
  if (in.fail() || zone != "GMT") return kFallback;
  const std::time_t at = timegm(&tm);
  if (at == static_cast<std::time_t>(-1)) return kFallback;
  // In whole seconds: system_clock's nanosecond time_point overflows for far-future dates.
  const auto now = std::chrono::floor<std::chrono::seconds>(std::chrono::system_clock::now());
  const std::chrono::seconds delay(static_cast<int64_t>(at) - now.time_since_epoch().count());
  return std::max(delay, kFallback);
}

// Whether a parsed JSON document looks like a metav1.Status rather than some other object.
bool LooksLikeStatus(const Json& doc) {
  if (!doc.is_object()) return false;
  const auto kind = doc.find("kind");
  if (kind != doc.end() && kind->is_string() && *kind == "Status") return true;
  return doc.contains("reason") || doc.contains("message") || doc.contains("code");
}

// Fills reason, message, code and retryAfterSeconds from a Status object. `code` is only taken
// from the document when `http_status` is still 0.
void FillFromStatus(const Json& status, Error& error) {
  error.reason = StringField(status, "reason");
  error.message = StringField(status, "message");
  if (error.http_status == 0) {
    const auto code = status.find("code");
    if (code != status.end() && code->is_number_integer()) {
      const int64_t value = code->get<int64_t>();
      if (value > 0 && value < 1000) error.http_status = static_cast<int>(value);
    }
  }
  const auto details = status.find("details");
  if (details != status.end() && details->is_object()) {
    const auto retry = details->find("retryAfterSeconds");
    if (retry != details->end() && retry->is_number_integer() && retry->get<int64_t>() >= 0) {
      error.retry_after = std::chrono::seconds(retry->get<int64_t>());
    }
  }
}

std::string DefaultMessage(int http_status) {
  std::string message = "the server responded with HTTP " + std::to_string(http_status);
  if (const auto text = StatusText(http_status); !text.empty()) {
    message += " (" + std::string(text) + ")";
  }
  return message;
}

}  // namespace

bool Error::IsRetryable() const {
  switch (kind) {
    case ErrorKind::kTransport:
      return true;
    case ErrorKind::kApi:
      // 501 Not Implemented will not start working on a retry; every other 5xx may.
      return http_status == 429 || (http_status >= 500 && http_status <= 599 && http_status != 501);
    case ErrorKind::kDecode:
    case ErrorKind::kConfig:
    case ErrorKind::kCancelled:
      return false;
  }
  return false;
}

std::string Error::ToString() const {
  std::string out;
  switch (kind) {
    case ErrorKind::kApi:
      if (http_status != 0) out = std::to_string(http_status);
      if (!reason.empty()) out += (out.empty() ? "" : " ") + reason;
      if (out.empty()) out = "API error";
      if (!message.empty()) out += ": " + message;
      break;
    case ErrorKind::kTransport:
      out = "transport error: " + message;
      break;
    case ErrorKind::kDecode:
      out = "decode error: " + message;
      break;
    case ErrorKind::kConfig:
      out = "config error: " + message;
      break;
    case ErrorKind::kCancelled:
      out = message.empty() ? "cancelled" : "cancelled: " + message;
      break;
  }
  if (retry_after) out += " (retry after " + std::to_string(retry_after->count()) + "s)";
  return out;
}

Error Error::Api(int http_status, std::string reason, std::string message) {
  return Error{ErrorKind::kApi, http_status, std::move(reason), std::move(message), {}};
}

Error Error::Transport(std::string message) {
  return Error{ErrorKind::kTransport, 0, {}, std::move(message), {}};
}

Error Error::Silent(std::chrono::seconds idle) {
  return Error{ErrorKind::kTransport,
               0,
               "WatchSilent",
               "watch silent: nothing received for " + std::to_string(idle.count()) +
                   "s (no event, no bookmark, no end): the connection is taken for dead",
               {}};
}

Error Error::Decode(std::string message) {
  return Error{ErrorKind::kDecode, 0, {}, std::move(message), {}};
}

Error Error::Config(std::string message) {
  return Error{ErrorKind::kConfig, 0, {}, std::move(message), {}};
}

Error Error::Cancelled(std::string message) {
  return Error{ErrorKind::kCancelled, 0, {}, std::move(message), {}};
}

Error ErrorFromResponse(int http_status, std::string_view body,
                        std::string_view retry_after_header) {
  Error error;
  error.kind = ErrorKind::kApi;
  error.http_status = http_status;
  const Json doc = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (!doc.is_discarded() && LooksLikeStatus(doc)) {
    FillFromStatus(doc, error);
    error.http_status = http_status;  // what actually happened on the wire
    if (error.message.empty()) error.message = DefaultMessage(http_status);
  } else {
    error.message = DefaultMessage(http_status);
    if (const std::string excerpt = Excerpt(body); !excerpt.empty()) {
      error.message += ": " + excerpt;
    }
  }
  if (error.reason.empty()) error.reason = std::string(ReasonForCode(http_status));
  if (!Trim(retry_after_header).empty()) error.retry_after = ParseRetryAfter(retry_after_header);
  return error;
}

Error ErrorFromStatusJson(std::string_view status_json, int fallback_http_status) {
  const Json doc =
      Json::parse(status_json.begin(), status_json.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Error::Decode("invalid Status object: " + Excerpt(status_json));
  }
  Error error;
  error.kind = ErrorKind::kApi;
  FillFromStatus(doc, error);
  if (error.http_status == 0) error.http_status = fallback_http_status;
  if (error.http_status == 0) error.http_status = CodeForReason(error.reason);
  if (error.reason.empty()) error.reason = std::string(ReasonForCode(error.http_status));
  if (error.message.empty()) {
    error.message = error.http_status != 0 ? DefaultMessage(error.http_status)
                                           : "Status without message: " + Excerpt(status_json);
  }
  return error;
}

}  // namespace tpujob::kube
