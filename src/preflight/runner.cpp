#include "preflight/runner.h"

#include <fmt/format.h>

#include <vector>

#include "base/logging.h"

namespace tpujob::preflight {
namespace {

constexpr size_t kLogMessageLimit = 1024;

// The message, cut to kLogMessageLimit bytes between characters.
std::string LogMessage(const ItemResult& item) {
  if (item.message.size() <= kLogMessageLimit) return item.message;
  size_t keep = kLogMessageLimit;
  while (keep > 0 && (static_cast<unsigned char>(item.message[keep]) & 0xC0) == 0x80) --keep;
  return item.message.substr(0, keep) + "...";
}

// The item's fields; they point into `item` and `message` (LogMessage(item)).
std::vector<log::Field> ItemFields(const ItemResult& item, const std::string& message) {
  std::vector<log::Field> fields;
  fields.reserve(item.log_fields.size() + 4);
  fields.emplace_back("item", item.item);
  for (const auto& [key, value] : item.log_fields) fields.emplace_back(key, value);
  fields.emplace_back("verdict", item.skipped ? "skip" : item.passed ? "pass" : "fail");
  if (!item.passed) fields.emplace_back("fault", ToString(item.fault));
  if (!message.empty()) fields.emplace_back("message", message);
  return fields;
}

void LogItem(const ItemResult& item) {
  const log::Level level = item.passed ? log::Level::kInfo : log::Level::kWarn;
  if (!log::Enabled(level)) return;
  const std::string message = LogMessage(item);
  log::Write(level, "preflight", ItemFields(item, message));
}

std::string JoinProblems(const std::vector<std::string>& problems) {
  std::string out;
  for (const std::string& problem : problems) {
    if (!out.empty()) out += "; ";
    out += problem;
  }
  return out;
}

}  // namespace

std::string FormatItemLine(const ItemResult& item, log::Format format) {
  const std::string message = LogMessage(item);
  return log::EncodeBody(format, "preflight", ItemFields(item, message));
}

Report RunChecks(const Options& options, const Probes& probes, Clock& clock) {
  std::vector<ItemResult> items;
  auto add = [&items](ItemResult item) {
    LogItem(item);
    items.push_back(std::move(item));
  };
  for (Check check : options.checks) {
    switch (check) {
      case Check::kDisk:
        for (ItemResult& item : CheckDisks(options.disk, probes.filesystem)) add(std::move(item));
        break;
      case Check::kUlimit:
        add(CheckUlimit(options.ulimit, probes.limits));
        break;
      case Check::kAccelerator:
        add(CheckAccelerator(options.accelerator));
        break;
      case Check::kDns:
        add(CheckDns(options.dns, probes.resolve, clock));
        break;
    }
  }
  return MakeReport(options.node_name, std::move(items));
}

Report ConfigFaultReport(const ConfigError& error) {
  ItemResult item;
  item.item = kItemConfig;
  item.fault = Fault::kConfig;
  item.value = "invalid";
  item.threshold = "valid settings";
  item.message = JoinProblems(error.problems);
  LogItem(item);
  return MakeReport(error.node_name, {std::move(item)});
}

}  // namespace tpujob::preflight
