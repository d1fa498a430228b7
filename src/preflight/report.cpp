#include "preflight/report.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <nlohmann/json.hpp>

namespace tpujob::preflight {
namespace {

// Keeps the documented key order (version, node, verdict, items) so the message reads well in
// `kubectl describe pod`.
using Json = nlohmann::ordered_json;

constexpr std::string_view kEllipsis = "...";

Json ToJson(const Report& report) {
  Json items = Json::array();
  for (const ItemResult& item : report.items) {
    Json entry = {{"item", item.item}, {"verdict", item.passed ? "pass" : "fail"}};
    if (!item.passed) entry["fault"] = std::string(ToString(item.fault));
    if (item.skipped) entry["skipped"] = true;
    entry["value"] = item.value;
    entry["threshold"] = item.threshold;
    entry["message"] = item.message;
    items.push_back(std::move(entry));
  }
  return Json{{"version", report.version},
              {"node", report.node},
              {"verdict", std::string(ToString(report.verdict))},
              {"items", std::move(items)}};
}

std::string Dump(const Report& report) {
  return ToJson(report).dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Cuts `s` by at least `excess` bytes, on a UTF-8 character boundary, marking the cut with an
// ellipsis when there is room for one.
void Shorten(std::string& s, size_t excess) {
  const size_t cut = excess + kEllipsis.size();
  if (s.size() <= cut) {
    s.clear();
    return;
  }
  size_t keep = s.size() - cut;
  while (keep > 0 && (static_cast<unsigned char>(s[keep]) & 0xC0) == 0x80) --keep;
  s.resize(keep);
  s += kEllipsis;
}

std::optional<std::string> OptionalString(const nlohmann::json& object, const char* key, bool& ok) {
  auto it = object.find(key);
  if (it == object.end()) return std::nullopt;
  if (!it->is_string()) {
    ok = false;
    return std::nullopt;
  }
  return it->get<std::string>();
}

std::optional<Report> ParseReportJson(const nlohmann::json& doc) {
  if (!doc.is_object()) return std::nullopt;
  auto version = doc.find("version");
  if (version == doc.end() || !version->is_number_integer() || version->get<int64_t>() < 1) {
    return std::nullopt;
  }
  bool ok = true;
  Report report;
  report.version = static_cast<int>(std::min<int64_t>(version->get<int64_t>(), INT32_MAX));
  const auto node = OptionalString(doc, "node", ok);
  const auto verdict = OptionalString(doc, "verdict", ok);
  if (!ok || !node || !verdict) return std::nullopt;
  report.node = *node;
  if (*verdict == "pass") {
    report.verdict = Verdict::kPass;
  } else if (*verdict == "node-fault") {
    report.verdict = Verdict::kNodeFault;
  } else if (*verdict == "config-fault") {
    report.verdict = Verdict::kConfigFault;
  } else {
    return std::nullopt;
  }

  auto items = doc.find("items");
  if (items == doc.end() || !items->is_array()) return std::nullopt;
  for (const nlohmann::json& entry : *items) {
    if (!entry.is_object()) return std::nullopt;
    ItemResult item;
    const auto name = OptionalString(entry, "item", ok);
    const auto item_verdict = OptionalString(entry, "verdict", ok);
    const auto fault = OptionalString(entry, "fault", ok);
    item.value = OptionalString(entry, "value", ok).value_or("");
    item.threshold = OptionalString(entry, "threshold", ok).value_or("");
    item.message = OptionalString(entry, "message", ok).value_or("");
    if (!ok || !name || !item_verdict) return std::nullopt;
    item.item = *name;
    if (*item_verdict == "pass") {
      item.passed = true;
      if (auto s = entry.find("skipped"); s != entry.end()) {
        if (!s->is_boolean()) return std::nullopt;
        item.skipped = s->get<bool>();
      }
    } else if (*item_verdict == "fail") {
      if (fault == "node") {
        item.fault = Fault::kNode;
      } else if (fault == "config") {
        item.fault = Fault::kConfig;
      } else {
        return std::nullopt;
      }
    } else {
      return std::nullopt;
    }
    report.items.push_back(std::move(item));
  }
  return report;
}

}  // namespace

std::string_view ToString(Verdict verdict) {
  switch (verdict) {
    case Verdict::kPass:
      return "pass";
    case Verdict::kNodeFault:
      return "node-fault";
    case Verdict::kConfigFault:
      return "config-fault";
  }
  return "";
}

Verdict Summarize(const std::vector<ItemResult>& items) {
  Verdict verdict = Verdict::kPass;
  for (const ItemResult& item : items) {
    if (item.passed) continue;
    if (item.fault == Fault::kNode) return Verdict::kNodeFault;
    verdict = Verdict::kConfigFault;
  }
  return verdict;
}

int ExitCode(Verdict verdict) {
  switch (verdict) {
    case Verdict::kPass:
      return kExitPass;
    case Verdict::kNodeFault:
      return kExitNodeFault;
    case Verdict::kConfigFault:
      return kExitConfigFault;
  }
  return kExitConfigFault;
}

Report MakeReport(std::string node, std::vector<ItemResult> items) {
  Report report;
  report.node = std::move(node);
  report.verdict = Summarize(items);
  report.items = std::move(items);
  return report;
}

std::string SerializeReport(const Report& report, size_t max_bytes) {
  max_bytes = std::max<size_t>(max_bytes, 1024);
  std::string out = Dump(report);
  if (out.size() <= max_bytes) return out;

  Report shortened = report;
  // Messages carry the detail and are the first to go; values and thresholds are short and
  // what an operator greps for, the node name is needed to cordon.
  for (std::string ItemResult::*field :
       {&ItemResult::message, &ItemResult::value, &ItemResult::threshold}) {
    while (out.size() > max_bytes) {
      auto longest = std::max_element(shortened.items.begin(), shortened.items.end(),
                                      [field](const ItemResult& a, const ItemResult& b) {
                                        return (a.*field).size() < (b.*field).size();
                                      });
      if (longest == shortened.items.end() || ((*longest).*field).empty()) break;
      Shorten((*longest).*field, out.size() - max_bytes);
      out = Dump(shortened);
    }
  }
  if (out.size() > max_bytes) {
    Shorten(shortened.node, out.size() - max_bytes);
    out = Dump(shortened);
  }
  while (out.size() > max_bytes && !shortened.items.empty()) {
    auto passed = std::find_if(shortened.items.begin(), shortened.items.end(),
                               [](const ItemResult& item) { return item.passed; });
    shortened.items.erase(passed != shortened.items.end() ? passed
                                                          : std::prev(shortened.items.end()));
    out = Dump(shortened);
  }
  return out;
}

std::optional<Report> ParseReport(std::string_view json) {
  // The one place the preflight module touches nlohmann_json's parser: its exceptions stop here.
  try {
    const nlohmann::json doc = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) return std::nullopt;
    return ParseReportJson(doc);
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

}  // namespace tpujob::preflight
