#include "preflight/runner.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/logging.h"

namespace tpujob::preflight {
namespace {

constexpr size_t kLogMessageLimit = 1024;

void LogItem(const ItemResult& item) {
  const std::string line = FormatItemLine(item);
  if (item.passed) {
    spdlog::info("{}", line);
  } else {
    spdlog::warn("{}", line);
  }
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

std::string FormatItemLine(const ItemResult& item) {
  std::string line = "msg=\"preflight\" item=" + LogQuote(item.item);
  for (const auto& [key, value] : item.log_fields) line += " " + key + "=" + LogQuote(value);
  line += item.passed ? " verdict=pass" : " verdict=fail";
  if (!item.passed) line += " fault=" + std::string(ToString(item.fault));
  if (!item.message.empty()) {
    std::string message = item.message;
    if (message.size() > kLogMessageLimit) {
      size_t keep = kLogMessageLimit;
      while (keep > 0 && (static_cast<unsigned char>(message[keep]) & 0xC0) == 0x80) --keep;
      message.resize(keep);
      message += "...";
    }
    line += " message=" + LogQuote(message);
  }
  return line;
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
