// Strict parsers for the operator's log lines, independent of the encoder in src/base/logging:
// a logfmt line must be `ts=<RFC 3339 UTC> level=<level> msg="<message>"` followed by
// `key=value` pairs, a JSON line one object whose first members are ts, level and msg. Used by
// the encoder's unit tests and by the check of every line the end-to-end suite's operators
// wrote (operator_log_files_test.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tpujob::testing {

using LogPairs = std::vector<std::pair<std::string, std::string>>;

namespace log_line_detail {

// Length of the well-formed UTF-8 sequence at text[at], 0 if none (no overlong forms, no
// surrogates, nothing above U+10FFFF).
inline size_t Utf8Length(std::string_view text, size_t at) {
  const auto byte = [&](size_t i) -> unsigned {
    return at + i < text.size() ? static_cast<unsigned char>(text[at + i]) : 0x100;
  };
  const unsigned b0 = byte(0);
  const auto cont = [&](size_t i) { return (byte(i) & 0xC0) == 0x80 && byte(i) < 0x100; };
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) return cont(1) ? 2 : 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    const unsigned b1 = byte(1);
    if (b0 == 0xE0 && b1 < 0xA0) return 0;
    if (b0 == 0xED && b1 > 0x9F) return 0;
    return cont(1) && cont(2) ? 3 : 0;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    const unsigned b1 = byte(1);
    if (b0 == 0xF0 && b1 < 0x90) return 0;
    if (b0 == 0xF4 && b1 > 0x8F) return 0;
    return cont(1) && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

inline bool IsKeyStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
inline bool IsKeyChar(char c) { return IsKeyStart(c) || (c >= '0' && c <= '9'); }
inline bool IsControl(unsigned char c) { return c < 0x20 || c == 0x7F; }

inline void AppendCodePoint(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// YYYY-MM-DDTHH:MM:SS.mmmZ
inline bool IsTimestamp(std::string_view text) {
  constexpr std::string_view kShape = "dddd-dd-ddTdd:dd:dd.dddZ";
  if (text.size() != kShape.size()) return false;
  for (size_t i = 0; i < text.size(); ++i) {
    if (kShape[i] == 'd' ? (text[i] < '0' || text[i] > '9') : text[i] != kShape[i]) return false;
  }
  return true;
}

inline bool IsLevel(std::string_view text) {
  static const std::set<std::string_view> kLevels = {"trace",   "debug", "info",
                                                     "warning", "error", "critical"};
  return kLevels.contains(text);
}

}  // namespace log_line_detail

// Parses one logfmt line strictly: pairs separated by exactly one space; keys
// [A-Za-z_][A-Za-z0-9_]*, each at most once; a value is either bare (one or more characters,
// none of them a space, '=', '"', '\' or a control character) or quoted (escapes \\ \" \n \r
// \t \uXXXX only, no raw control character); the whole line valid UTF-8; and the line starts
// with ts, level and msg (quoted). Returns the pairs with values unescaped, or why the line is
// not valid (with the byte offset).
inline std::expected<LogPairs, std::string> ParseLogfmtLine(std::string_view line) {
  using namespace log_line_detail;
  const auto fail = [](size_t at, std::string why) -> std::expected<LogPairs, std::string> {
    return std::unexpected("at byte " + std::to_string(at) + ": " + why);
  };
  for (size_t at = 0; at < line.size();) {
    const size_t length = Utf8Length(line, at);
    if (length == 0) return fail(at, "invalid UTF-8");
    at += length;
  }
  LogPairs pairs;
  std::set<std::string> seen;
  std::vector<bool> quoted;
  size_t at = 0;
  if (line.empty()) return fail(0, "empty line");
  while (at < line.size()) {
    if (!pairs.empty()) {
      if (line[at] != ' ') return fail(at, "expected a space between pairs");
      ++at;
    }
    const size_t key_start = at;
    if (at >= line.size() || !IsKeyStart(line[at])) return fail(at, "expected a key");
    while (at < line.size() && IsKeyChar(line[at])) ++at;
    std::string key(line.substr(key_start, at - key_start));
    if (at >= line.size() || line[at] != '=') return fail(at, "expected '=' after key " + key);
    ++at;
    if (!seen.insert(key).second) return fail(key_start, "duplicate key " + key);
    std::string value;
    if (at < line.size() && line[at] == '"') {
      ++at;
      bool closed = false;
      while (at < line.size()) {
        const unsigned char c = static_cast<unsigned char>(line[at]);
        if (c == '"') {
          closed = true;
          ++at;
          break;
        }
        if (IsControl(c)) return fail(at, "raw control character in a quoted value");
        if (c != '\\') {
          value += static_cast<char>(c);
          ++at;
          continue;
        }
        if (at + 1 >= line.size()) return fail(at, "escape at the end of the line");
        const char e = line[at + 1];
        at += 2;
        switch (e) {
          case '\\':
            value += '\\';
            break;
          case '"':
            value += '"';
            break;
          case 'n':
            value += '\n';
            break;
          case 'r':
            value += '\r';
            break;
          case 't':
            value += '\t';
            break;
          case 'u': {
            if (at + 4 > line.size()) return fail(at, "short \\u escape");
            uint32_t cp = 0;
            for (size_t i = 0; i < 4; ++i) {
              const char h = line[at + i];
              cp <<= 4;
              if (h >= '0' && h <= '9') {
                cp |= static_cast<uint32_t>(h - '0');
              } else if (h >= 'a' && h <= 'f') {
                cp |= static_cast<uint32_t>(h - 'a' + 10);
              } else if (h >= 'A' && h <= 'F') {
                cp |= static_cast<uint32_t>(h - 'A' + 10);
              } else {
                return fail(at + i, "bad hex digit in \\u escape");
              }
            }
            if (cp >= 0xD800 && cp <= 0xDFFF) return fail(at, "surrogate in \\u escape");
            AppendCodePoint(value, cp);
            at += 4;
            break;
          }
          default:
            return fail(at - 1, std::string("unknown escape \\") + e);
        }
      }
      if (!closed) return fail(at, "unterminated quoted value of " + key);
      if (at < line.size() && line[at] != ' ') return fail(at, "expected a space after a quote");
      quoted.push_back(true);
    } else {
      const size_t value_start = at;
      while (at < line.size() && line[at] != ' ') {
        const unsigned char c = static_cast<unsigned char>(line[at]);
        if (c == '=' || c == '"' || c == '\\' || IsControl(c)) {
          return fail(at, std::string("character '") + static_cast<char>(c) +
                              "' in the bare value of " + key);
        }
        ++at;
      }
      if (at == value_start) return fail(at, "empty bare value of " + key + " (quote it)");
      value = std::string(line.substr(value_start, at - value_start));
      quoted.push_back(false);
    }
    pairs.emplace_back(std::move(key), std::move(value));
  }
  if (pairs.size() < 3 || pairs[0].first != "ts" || pairs[1].first != "level" ||
      pairs[2].first != "msg") {
    return fail(0, "a line starts with ts=, level= and msg=");
  }
  if (!IsTimestamp(pairs[0].second)) return fail(0, "ts is not YYYY-MM-DDTHH:MM:SS.mmmZ");
  if (!IsLevel(pairs[1].second)) return fail(0, "unknown level " + pairs[1].second);
  if (!quoted[2]) return fail(0, "msg is not quoted");
  return pairs;
}

// Parses one JSON line strictly: a single object (valid UTF-8, no duplicate members) whose
// first members are "ts", "level" and "msg", all strings. Returns the object.
inline std::expected<nlohmann::ordered_json, std::string> ParseJsonLine(std::string_view line) {
  using namespace log_line_detail;
  std::string duplicate;
  std::vector<std::set<std::string>> keys;
  nlohmann::ordered_json::parser_callback_t callback =
      [&](int depth, nlohmann::ordered_json::parse_event_t event, nlohmann::ordered_json& parsed) {
        using Event = nlohmann::ordered_json::parse_event_t;
        if (event == Event::object_start) keys.emplace_back();
        if (event == Event::object_end) keys.pop_back();
        if (event == Event::key && !keys.back().insert(parsed.get<std::string>()).second) {
          duplicate = parsed.get<std::string>();
        }
        (void)depth;
        return true;
      };
  nlohmann::ordered_json object;
  try {
    object = nlohmann::ordered_json::parse(line, callback);
  } catch (const nlohmann::json::exception& e) {
    return std::unexpected(std::string("not JSON: ") + e.what());
  }
  if (!duplicate.empty()) return std::unexpected("duplicate member " + duplicate);
  if (!object.is_object()) return std::unexpected("not a JSON object");
  std::vector<std::string> first;
  for (auto it = object.begin(); it != object.end() && first.size() < 3; ++it) {
    first.push_back(it.key());
  }
  if (first != std::vector<std::string>{"ts", "level", "msg"}) {
    return std::unexpected("the first members are not ts, level and msg");
  }
  if (!object["ts"].is_string() || !IsTimestamp(object["ts"].get<std::string>())) {
    return std::unexpected("ts is not a YYYY-MM-DDTHH:MM:SS.mmmZ string");
  }
  if (!object["level"].is_string() || !IsLevel(object["level"].get<std::string>())) {
    return std::unexpected("level is not a known level");
  }
  if (!object["msg"].is_string()) return std::unexpected("msg is not a string");
  return object;
}

// A line that does not parse, with where it is.
struct BadLogLine {
  std::string file;
  size_t line_number = 0;
  std::string why;
  std::string line;
};

// Operator log files under `dir` (any depth): regular files whose name contains "operator" and
// ends in ".log".
inline std::vector<std::filesystem::path> OperatorLogFiles(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(
           dir, std::filesystem::directory_options::skip_permission_denied, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (it->is_regular_file() && name.find("operator") != std::string::npos &&
        name.ends_with(".log")) {
      files.push_back(it->path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Checks every line of `file`: a line starting with '{' must be a JSON line, any other a logfmt
// line. A last line without its newline is checked too (a killed process may leave one).
// Appends each bad line to `bad`; returns the number of lines read.
inline size_t CheckLogFile(const std::filesystem::path& file, std::vector<BadLogLine>& bad) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    bad.push_back({file.string(), 0, "cannot open", ""});
    return 0;
  }
  std::string line;
  size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    std::string why;
    if (!line.empty() && line.front() == '{') {
      if (auto parsed = ParseJsonLine(line); !parsed) why = parsed.error();
    } else if (auto parsed = ParseLogfmtLine(line); !parsed) {
      why = parsed.error();
    }
    if (!why.empty()) bad.push_back({file.string(), number, why, line});
  }
  return number;
}

}  // namespace tpujob::testing
