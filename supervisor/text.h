// Small text helpers of the supervisor's files, which link none of src/ (supervisor.cpp says
// why): these stand in for src/base/strings.h and src/base/logging.h.
#pragma once

#include <unistd.h>

#include <string>
#include <string_view>

namespace tpujob::supervisor {

// One line to stderr, in one write so that lines of concurrent writers do not interleave.
inline void Log(const std::string& text) {
  const std::string line = "tpujob-supervise: " + text + "\n";
  const ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

// `text` without leading and trailing whitespace (the C locale's).
inline std::string_view Trim(std::string_view text) {
  const auto is_space = [](char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
  };
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

}  // namespace tpujob::supervisor
