// The API's text formats the projections read and the operator writes: RFC 3339 times and
// resource quantities (declared in objects.h).
#include <array>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <limits>

#include "cache/objects.h"

namespace tpujob::cache {
namespace {

bool ParseDigits(std::string_view text, size_t& pos, size_t count, int& out) {
  if (pos + count > text.size()) return false;
  int value = 0;
  for (size_t i = 0; i < count; ++i) {
    char c = text[pos + i];
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  pos += count;
  out = value;
  return true;
}

bool Expect(std::string_view text, size_t& pos, std::string_view choices) {
  if (pos >= text.size() || choices.find(text[pos]) == std::string_view::npos) return false;
  ++pos;
  return true;
}

// Multiplies with overflow detection.
bool MultiplyChecked(uint64_t& value, uint64_t factor) {
  if (factor != 0 && value > std::numeric_limits<uint64_t>::max() / factor) return false;
  value *= factor;
  return true;
}

}  // namespace

std::optional<WallTime> ParseRfc3339(std::string_view text) {
  using namespace std::chrono;
  size_t pos = 0;
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  if (!ParseDigits(text, pos, 4, year) || !Expect(text, pos, "-") ||
      !ParseDigits(text, pos, 2, month) || !Expect(text, pos, "-") ||
      !ParseDigits(text, pos, 2, day) || !Expect(text, pos, "Tt ") ||
      !ParseDigits(text, pos, 2, hour) || !Expect(text, pos, ":") ||
      !ParseDigits(text, pos, 2, minute) || !Expect(text, pos, ":") ||
      !ParseDigits(text, pos, 2, second)) {
    return std::nullopt;
  }
  const year_month_day date{std::chrono::year(year),
                            std::chrono::month(static_cast<unsigned>(month)),
                            std::chrono::day(static_cast<unsigned>(day))};
  if (!date.ok() || hour > 23 || minute > 59 || second > 60) return std::nullopt;
  nanoseconds fraction{0};
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    int64_t value = 0;
    int digits = 0;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      if (digits < 9) {
        value = value * 10 + (text[pos] - '0');
        ++digits;
      }
      ++pos;
    }
    if (digits == 0) return std::nullopt;
    for (int i = digits; i < 9; ++i) value *= 10;
    fraction = nanoseconds(value);
  }
  minutes offset{0};
  if (pos < text.size() && (text[pos] == 'Z' || text[pos] == 'z')) {
    ++pos;
  } else if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
    const bool negative = text[pos] == '-';
    ++pos;
    int offset_hours = 0, offset_minutes = 0;
    if (!ParseDigits(text, pos, 2, offset_hours) || !Expect(text, pos, ":") ||
        !ParseDigits(text, pos, 2, offset_minutes) || offset_hours > 23 || offset_minutes > 59) {
      return std::nullopt;
    }
    offset = hours(offset_hours) + minutes(offset_minutes);
    if (negative) offset = -offset;
  } else {
    return std::nullopt;
  }
  if (pos != text.size()) return std::nullopt;
  // WallTime counts nanoseconds in 64 bits (years 1677 to 2262); a time outside that is not one
  // the API server writes, and converting it would overflow.
  const sys_seconds whole =
      sys_days(date) + hours(hour) + minutes(minute) + seconds(second) - offset;
  constexpr sys_seconds kEarliest = time_point_cast<seconds>(WallTime::min()) + seconds(1);
  constexpr sys_seconds kLatest = time_point_cast<seconds>(WallTime::max()) - seconds(1);
  if (whole < kEarliest || whole > kLatest) return std::nullopt;
  const sys_time<nanoseconds> utc = whole + fraction;
  return time_point_cast<WallTime::duration>(utc);
}

std::string FormatRfc3339(WallTime time) {
  using namespace std::chrono;
  const sys_seconds whole = floor<seconds>(time);
  const sys_days day = floor<days>(whole);
  const year_month_day date(day);
  const hh_mm_ss<seconds> clock(whole - day);
  std::array<char, 32> buffer{};
  std::snprintf(buffer.data(), buffer.size(), "%04d-%02u-%02uT%02d:%02d:%02dZ",
                static_cast<int>(date.year()), static_cast<unsigned>(date.month()),
                static_cast<unsigned>(date.day()), static_cast<int>(clock.hours().count()),
                static_cast<int>(clock.minutes().count()),
                static_cast<int>(clock.seconds().count()));
  return std::string(buffer.data());
}

std::string FormatRfc3339Millis(WallTime time) {
  std::string text = FormatRfc3339(time);  // "...:SSZ"
  const auto ms = std::chrono::floor<std::chrono::milliseconds>(time) -
                  std::chrono::floor<std::chrono::seconds>(time);
  std::array<char, 8> fraction{};
  std::snprintf(fraction.data(), fraction.size(), ".%03dZ", static_cast<int>(ms.count()));
  text.pop_back();
  return text + fraction.data();
}

std::optional<int64_t> ParseQuantity(std::string_view text) {
  if (text.empty()) return std::nullopt;
  size_t pos = 0;
  bool negative = false;
  if (text[pos] == '+' || text[pos] == '-') {
    negative = text[pos] == '-';
    ++pos;
  }
  // The number as an exact integer mantissa times 10^exponent10 times 2^exponent2.
  uint64_t mantissa = 0;
  int exponent10 = 0;
  int exponent2 = 0;
  size_t digits = 0;
  bool seen_point = false;
  for (; pos < text.size(); ++pos) {
    const char c = text[pos];
    if (c == '.' && !seen_point) {
      seen_point = true;
      continue;
    }
    if (c < '0' || c > '9') break;
    ++digits;
    if (mantissa > (std::numeric_limits<uint64_t>::max() - 9) / 10) {
      if (!seen_point) ++exponent10;  // drop low-order integer digits: far out of range anyway
      continue;
    }
    mantissa = mantissa * 10 + static_cast<uint64_t>(c - '0');
    if (seen_point) --exponent10;
  }
  if (digits == 0) return std::nullopt;
  std::string_view suffix = text.substr(pos);
  static constexpr std::array<std::pair<std::string_view, int>, 6> kBinary = {
      {{"Ki", 10}, {"Mi", 20}, {"Gi", 30}, {"Ti", 40}, {"Pi", 50}, {"Ei", 60}}};
  static constexpr std::array<std::pair<std::string_view, int>, 9> kDecimal = {{{"n", -9},
                                                                                {"u", -6},
                                                                                {"m", -3},
                                                                                {"", 0},
                                                                                {"k", 3},
                                                                                {"M", 6},
                                                                                {"G", 9},
                                                                                {"T", 12},
                                                                                {"P", 15}}};
  bool matched = false;
  for (const auto& [name, shift] : kBinary) {
    if (suffix == name) exponent2 = shift, matched = true;
  }
  for (const auto& [name, shift] : kDecimal) {
    if (!matched && suffix == name) exponent10 += shift, matched = true;
  }
  if (!matched && suffix == "E") exponent10 += 18, matched = true;
  if (!matched && (suffix.starts_with('e') || suffix.starts_with('E'))) {
    int exponent = 0;
    std::string_view digits_part = suffix.substr(1);
    if (!digits_part.empty() && digits_part.front() == '+') digits_part.remove_prefix(1);
    auto [end, ec] =
        std::from_chars(digits_part.data(), digits_part.data() + digits_part.size(), exponent);
    if (ec != std::errc() || end != digits_part.data() + digits_part.size() ||
        digits_part.empty()) {
      return std::nullopt;
    }
    if (exponent > 100 || exponent < -100) return std::nullopt;
    exponent10 += exponent;
    matched = true;
  }
  if (!matched) return std::nullopt;

  // Multiply first, then divide rounding up, so 0.5Ki is exactly 512.
  uint64_t value = mantissa;
  for (int i = 0; i < exponent2; ++i) {
    if (!MultiplyChecked(value, 2)) return std::nullopt;
  }
  for (; exponent10 > 0; --exponent10) {
    if (!MultiplyChecked(value, 10)) return std::nullopt;
  }
  if (exponent10 < 0) {
    bool remainder = false;
    for (; exponent10 < 0 && value > 0; ++exponent10) {
      remainder = remainder || value % 10 != 0;
      value /= 10;
    }
    if (remainder) ++value;
  }
  if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  const auto result = static_cast<int64_t>(value);
  return negative ? -result : result;
}

}  // namespace tpujob::cache
