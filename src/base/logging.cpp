#include "base/logging.h"

#include <fmt/format.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cassert>
#include <cmath>

#include "base/utf8.h"

namespace tpujob {
namespace log {
namespace {

std::atomic<Format> current_format{Format::kLogfmt};

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

spdlog::level::level_enum ToSpdlog(Level level) {
  switch (level) {
    case Level::kTrace:
      return spdlog::level::trace;
    case Level::kDebug:
      return spdlog::level::debug;
    case Level::kInfo:
      return spdlog::level::info;
    case Level::kWarn:
      return spdlog::level::warn;
    case Level::kError:
      return spdlog::level::err;
  }
  return spdlog::level::err;
}

// A character that must not appear raw in a line: ASCII and C1 controls, DEL, and the Unicode
// line and paragraph separators (some viewers break lines there).
bool IsControl(uint32_t code_point) {
  return code_point < 0x20 || code_point == 0x7F || (code_point >= 0x80 && code_point < 0xA0) ||
         code_point == 0x2028 || code_point == 0x2029;
}

uint32_t DecodeCodePoint(std::string_view text, size_t at, size_t length) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[at + i]); };
  switch (length) {
    case 1:
      return byte(0);
    case 2:
      return ((byte(0) & 0x1Fu) << 6) | (byte(1) & 0x3Fu);
    case 3:
      return ((byte(0) & 0x0Fu) << 12) | ((byte(1) & 0x3Fu) << 6) | (byte(2) & 0x3Fu);
    default:
      return ((byte(0) & 0x07u) << 18) | ((byte(1) & 0x3Fu) << 12) | ((byte(2) & 0x3Fu) << 6) |
             (byte(3) & 0x3Fu);
  }
}

// Appends `text` with the escapes logfmt and JSON share (\\ \" \n \r \t, \u00XX for other
// controls; JSON adds \b and \f), U+FFFD for each byte that starts no valid UTF-8 sequence.
void AppendEscaped(std::string& out, std::string_view text, bool json) {
  for (size_t at = 0; at < text.size();) {
    const size_t length = Utf8SequenceLength(text, at);
    if (length == 0) {
      out += kReplacement;
      ++at;
      continue;
    }
    const uint32_t code_point = DecodeCodePoint(text, at, length);
    switch (code_point) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += json ? "\\b" : "\\u0008";
        break;
      case '\f':
        out += json ? "\\f" : "\\u000c";
        break;
      default:
        if (IsControl(code_point)) {
          fmt::format_to(std::back_inserter(out), "\\u{:04x}", code_point);
        } else {
          out.append(text.substr(at, length));
        }
    }
    at += length;
  }
}

bool NeedsQuotes(std::string_view value) {
  if (value.empty()) return true;
  for (size_t at = 0; at < value.size();) {
    const size_t length = Utf8SequenceLength(value, at);
    if (length == 0) return true;
    const uint32_t code_point = DecodeCodePoint(value, at, length);
    if (code_point == ' ' || code_point == '=' || code_point == '"' || code_point == '\\' ||
        IsControl(code_point)) {
      return true;
    }
    at += length;
  }
  return false;
}

std::string DurationText(std::chrono::nanoseconds value) {
  const int64_t ns = value.count();
  if (ns == 0) return "0s";
  if (ns % 1'000'000'000 == 0) return fmt::format("{}s", ns / 1'000'000'000);
  if (ns % 1'000'000 == 0) return fmt::format("{}ms", ns / 1'000'000);
  if (ns % 1'000 == 0) return fmt::format("{}us", ns / 1'000);
  return fmt::format("{}ns", ns);
}

// NaN and the infinities as Prometheus writes them; JSON has no literal for them.
std::string_view NonFiniteText(double value) {
  if (std::isnan(value)) return "NaN";
  return value > 0 ? "+Inf" : "-Inf";
}

// A field's value in either format: text (strings, durations, non-finite numbers) through
// `append_text`, which quotes it as the format needs; numbers and booleans as they are.
template <typename AppendText>
void AppendFieldValue(std::string& out, const Field::Value& value, AppendText append_text) {
  std::visit(
      [&out, &append_text](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string_view>) {
          append_text(out, v);
        } else if constexpr (std::is_same_v<T, bool>) {
          out += v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, double>) {
          if (std::isfinite(v)) {
            fmt::format_to(std::back_inserter(out), "{}", v);
          } else {
            append_text(out, NonFiniteText(v));
          }
        } else if constexpr (std::is_same_v<T, std::chrono::nanoseconds>) {
          append_text(out, DurationText(v));
        } else {
          fmt::format_to(std::back_inserter(out), "{}", v);
        }
      },
      value);
}

void AppendLogfmtField(std::string& out, const Field::Value& value) {
  AppendFieldValue(out, value,
                   [](std::string& o, std::string_view text) { AppendLogfmtValue(o, text); });
}

void AppendJsonField(std::string& out, const Field::Value& value) {
  AppendFieldValue(out, value,
                   [](std::string& o, std::string_view text) { AppendJsonString(o, text); });
}

}  // namespace

void AppendLogfmtValue(std::string& out, std::string_view value) {
  if (!NeedsQuotes(value)) {
    out += value;
    return;
  }
  out += '"';
  AppendEscaped(out, value, /*json=*/false);
  out += '"';
}

void AppendJsonString(std::string& out, std::string_view value) {
  out += '"';
  AppendEscaped(out, value, /*json=*/true);
  out += '"';
}

std::string EncodeBody(Format format, std::string_view message, std::span<const Field> fields) {
  std::string out;
  out.reserve(64 + 32 * fields.size());
  if (format == Format::kJson) {
    out += "\"msg\":";
    AppendJsonString(out, message);
    for (const Field& field : fields) {
      out += ',';
      AppendJsonString(out, field.key());
      out += ':';
      AppendJsonField(out, field.value());
    }
    return out;
  }
  out += "msg=\"";
  AppendEscaped(out, message, /*json=*/false);
  out += '"';
  for (const Field& field : fields) {
    assert(!field.key().empty() && !NeedsQuotes(field.key()));
    out += ' ';
    out += field.key();
    out += '=';
    AppendLogfmtField(out, field.value());
  }
  return out;
}

bool Enabled(Level level) { return spdlog::default_logger_raw()->should_log(ToSpdlog(level)); }

void Write(Level level, std::string_view message, std::span<const Field> fields) {
  spdlog::logger* logger = spdlog::default_logger_raw();
  const spdlog::level::level_enum spd_level = ToSpdlog(level);
  if (!logger->should_log(spd_level)) return;
  const std::string body = EncodeBody(CurrentFormat(), message, fields);
  logger->log(spd_level, spdlog::string_view_t(body.data(), body.size()));
}

Format CurrentFormat() { return current_format.load(std::memory_order_relaxed); }
void SetFormat(Format format) { current_format.store(format, std::memory_order_relaxed); }

std::string Pattern(Format format) {
  if (format == Format::kJson) {
    return R"({"ts":"%Y-%m-%dT%H:%M:%S.%eZ","level":"%l",%v})";
  }
  return "ts=%Y-%m-%dT%H:%M:%S.%eZ level=%l %v";
}

}  // namespace log

bool ParseLogFormat(std::string_view text, log::Format& format) {
  if (text == "logfmt") {
    format = log::Format::kLogfmt;
    return true;
  }
  if (text == "json") {
    format = log::Format::kJson;
    return true;
  }
  return false;
}

bool SetupLogging(const std::string& level, const std::string& format) {
  const spdlog::level::level_enum parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off") return false;
  log::Format parsed_format = log::Format::kLogfmt;
  if (!ParseLogFormat(format, parsed_format)) return false;
  auto logger = spdlog::get("tpujob-operator");
  if (logger == nullptr) logger = spdlog::stderr_logger_mt("tpujob-operator");
  logger->set_pattern(log::Pattern(parsed_format), spdlog::pattern_time_type::utc);
  logger->set_level(parsed);
  logger->flush_on(spdlog::level::info);
  log::SetFormat(parsed_format);
  spdlog::set_default_logger(logger);
  return true;
}

std::string LogQuote(std::string_view value) {
  std::string out;
  log::AppendLogfmtValue(out, value);
  return out;
}

}  // namespace tpujob
