// Structured logs: one line per event, a fixed message and typed key/value fields.
//
//   log::Info("phase changed", {{"tpujob", key}, {"from", "Starting"}, {"to", "Running"},
//                               {"attempt", 1}});
//
// writes, in the default logfmt format,
//
//   ts=2024-05-01T12:00:00.000Z level=info msg="phase changed" tpujob=default/llm from=Starting
//   to=Running attempt=1
//
// and with `--log-format=json` one JSON object per line,
//
//   {"ts":"2024-05-01T12:00:00.000Z","level":"info","msg":"phase changed",
//    "tpujob":"default/llm","from":"Starting","to":"Running","attempt":1}
//
// Every value is encoded here, so no text a field carries (an API error with quotes or
// newlines, bytes that are not UTF-8) can break a line: logfmt values are quoted when they
// need it and escaped inside the quotes, JSON strings are escaped, and invalid UTF-8 becomes
// U+FFFD in both. `msg` is always quoted in logfmt, so `msg="event"` greps work for one-word
// messages too. Keys are identifiers chosen by the caller (`[a-z][a-z0-9_]*` by convention);
// they are written as given.
//
// Thread-safe (spdlog's default logger underneath serializes lines). Cheap when the level is
// off: a Field only points at its key and value, and nothing is encoded unless the line is
// written. A Field must not outlive the call it is passed to.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <variant>

namespace tpujob {

namespace log {

enum class Level { kTrace, kDebug, kInfo, kWarn, kError };
enum class Format { kLogfmt, kJson };

// One key/value pair of a line. Values: text (std::string, string_view, C string), integers,
// doubles, bools and std::chrono durations (written like "15s", "250ms": the largest unit that
// keeps them exact).
class Field {
 public:
  Field(std::string_view key, std::string_view value) : key_(key), value_(value) {}
  Field(std::string_view key, const std::string& value) : key_(key), value_(value) {}
  Field(std::string_view key, const char* value)
      : key_(key), value_(value == nullptr ? std::string_view() : std::string_view(value)) {}
  Field(std::string_view key, bool value) : key_(key), value_(value) {}
  Field(std::string_view key, double value) : key_(key), value_(value) {}
  template <std::integral T>
  requires(!std::same_as<T, bool>) Field(std::string_view key, T value) : key_(key) {
    if constexpr (std::is_signed_v<T>) {
      value_ = static_cast<int64_t>(value);
    } else {
      value_ = static_cast<uint64_t>(value);
    }
  }
  template <typename Rep, typename Period>
  Field(std::string_view key, std::chrono::duration<Rep, Period> value)
      : key_(key), value_(std::chrono::duration_cast<std::chrono::nanoseconds>(value)) {}

  using Value =
      std::variant<std::string_view, int64_t, uint64_t, double, bool, std::chrono::nanoseconds>;
  std::string_view key() const { return key_; }
  const Value& value() const { return value_; }

 private:
  std::string_view key_;
  Value value_;
};

// Whether a line at `level` would be written now.
bool Enabled(Level level);

// Writes one line (when `level` is enabled). Prefer the helpers below.
void Write(Level level, std::string_view message, std::span<const Field> fields);

inline void Log(Level level, std::string_view message, std::initializer_list<Field> fields = {}) {
  if (Enabled(level)) Write(level, message, std::span<const Field>(fields.begin(), fields.size()));
}
inline void Debug(std::string_view message, std::initializer_list<Field> fields = {}) {
  Log(Level::kDebug, message, fields);
}
inline void Info(std::string_view message, std::initializer_list<Field> fields = {}) {
  Log(Level::kInfo, message, fields);
}
inline void Warn(std::string_view message, std::initializer_list<Field> fields = {}) {
  Log(Level::kWarn, message, fields);
}
inline void Error(std::string_view message, std::initializer_list<Field> fields = {}) {
  Log(Level::kError, message, fields);
}

// The part of a line after `ts` and `level`, as Write hands it to the logger: logfmt
// `msg="..." key=value ...`, or JSON members `"msg":"...","key":value,...` (the logger's
// pattern adds the braces). Exposed for tests.
std::string EncodeBody(Format format, std::string_view message, std::span<const Field> fields);

// The format lines are written in now (set by SetupLogging; logfmt until then).
Format CurrentFormat();
void SetFormat(Format format);

// The spdlog pattern that puts `ts` and `level` around a body encoded in `format`.
std::string Pattern(Format format);

// Appends `value` as a logfmt value: bare when it is non-empty valid UTF-8 without spaces,
// '=', '"', '\\' or control characters, otherwise quoted with \\ \" \n \r \t and \u00XX
// escapes.
void AppendLogfmtValue(std::string& out, std::string_view value);
// Appends `value` as a JSON string (quotes included).
void AppendJsonString(std::string& out, std::string_view value);

}  // namespace log

// `level`: trace, debug, info, warn, error (or off); `format`: logfmt or json. Returns false
// (and leaves logging as it was) when either is unknown.
bool SetupLogging(const std::string& level, const std::string& format = "logfmt");

// Parses a --log-format value: "logfmt" or "json".
bool ParseLogFormat(std::string_view text, log::Format& format);

// Quotes a value for logfmt when it needs it (log::AppendLogfmtValue). For lines still built by
// hand; new code writes fields.
std::string LogQuote(std::string_view value);

}  // namespace tpujob
