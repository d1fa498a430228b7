#include "policy/progress_log.h"

#include <re2/re2.h>

#include <memory>

#include "cache/objects.h"

namespace tpujob::policy {
namespace {

std::unique_ptr<RE2> Compile(std::string_view pattern) {
  RE2::Options options;
  options.set_log_errors(false);
  auto re = std::make_unique<RE2>(re2::StringPiece(pattern.data(), pattern.size()), options);
  if (!re->ok() || re->NumberOfCapturingGroups() != 1) return nullptr;
  return re;
}

}  // namespace

LogProgress ProgressFromLog(std::string_view log, std::string_view pattern,
                            std::string_view checkpoint_pattern) {
  LogProgress out;
  const auto step_re = Compile(pattern);
  if (step_re == nullptr) {
    out.error = "the step pattern does not compile";
    return out;
  }
  std::unique_ptr<RE2> checkpoint_re;
  if (!checkpoint_pattern.empty()) {
    checkpoint_re = Compile(checkpoint_pattern);
    if (checkpoint_re == nullptr) {
      out.error = "the checkpoint pattern does not compile";
      return out;
    }
  }
  std::optional<std::pair<WallTime, int64_t>> first, last;
  while (!log.empty()) {
    const size_t end = log.find('\n');
    std::string_view line = log.substr(0, end);
    log = end == std::string_view::npos ? std::string_view() : log.substr(end + 1);
    const size_t space = line.find(' ');
    if (space == std::string_view::npos) continue;
    const std::optional<WallTime> at = cache::ParseRfc3339(line.substr(0, space));
    if (!at) continue;
    line.remove_prefix(space + 1);
    const re2::StringPiece text(line.data(), line.size());
    int64_t step = 0;
    if (RE2::PartialMatch(text, *step_re, &step)) {
      if (!first) first = {*at, step};
      last = {*at, step};
    }
    if (checkpoint_re != nullptr && RE2::PartialMatch(text, *checkpoint_re, &step)) {
      out.checkpoint = step;
    }
  }
  if (!last) return out;
  out.step = last->second;
  out.at = last->first;
  const double seconds = std::chrono::duration<double>(last->first - first->first).count();
  if (seconds > 0 && last->second >= first->second) {
    out.steps_per_second = static_cast<double>(last->second - first->second) / seconds;
  }
  return out;
}

std::optional<ProgressStatus> RefreshProgress(const std::optional<ProgressStatus>& current,
                                              const LogProgress& log) {
  if (!log.error.empty() || !log.step || !log.at) return std::nullopt;
  ProgressStatus next = current.value_or(ProgressStatus{});
  // Reports and earlier reads are as new or newer: the log tail has nothing to add.
  if (next.time && *log.at <= *next.time) return std::nullopt;
  const bool moved =
      next.step != log.step || (log.checkpoint && next.checkpoint_step != log.checkpoint);
  if (!moved) return std::nullopt;
  next.step = log.step;
  next.time = log.at;
  if (log.checkpoint) next.checkpoint_step = log.checkpoint;
  return next;
}

}  // namespace tpujob::policy
