// What all projections share (objects.h): LabelMap, condition statuses and object keys. Each
// kind decodes in its own file: pods.cpp, nodes.cpp, jobs.cpp; the API's text formats are in
// formats.cpp.
#include "cache/objects.h"

#include <algorithm>

#include "cache/json_reader.h"

namespace tpujob::cache {

// --- LabelMap ---------------------------------------------------------------------------------

LabelMap::LabelMap(std::initializer_list<std::pair<std::string_view, std::string_view>> entries) {
  entries_.reserve(entries.size());
  for (const auto& [key, value] : entries) Set(key, value);
}

std::vector<LabelMap::Entry>::const_iterator LabelMap::find(std::string_view key) const {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), key,
                             [](const Entry& e, std::string_view k) { return e.first.view() < k; });
  if (it == entries_.end() || it->first.view() != key) return entries_.end();
  return it;
}

std::optional<std::string_view> LabelMap::Get(std::string_view key) const {
  auto it = find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second.view();
}

void LabelMap::Set(std::string_view key, std::string_view value) {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), key,
                             [](const Entry& e, std::string_view k) { return e.first.view() < k; });
  if (it != entries_.end() && it->first.view() == key) {
    it->second = InternedString::Intern(value);
    return;
  }
  entries_.emplace(it, InternedString::Intern(key), InternedString::Intern(value));
}

void LabelMap::Erase(std::string_view key) {
  auto it = std::lower_bound(entries_.begin(), entries_.end(), key,
                             [](const Entry& e, std::string_view k) { return e.first.view() < k; });
  if (it != entries_.end() && it->first.view() == key) entries_.erase(it);
}

size_t ApproximateHeapBytes(const LabelMap& map) { return decode::VectorHeapBytes(map.entries_); }

// --- Conditions -------------------------------------------------------------------------------

std::string_view ToString(ConditionStatus status) {
  switch (status) {
    case ConditionStatus::kTrue:
      return "True";
    case ConditionStatus::kFalse:
      return "False";
    case ConditionStatus::kUnknown:
      break;
  }
  return "Unknown";
}

ConditionStatus ParseConditionStatus(std::string_view text) {
  if (text == "True") return ConditionStatus::kTrue;
  if (text == "False") return ConditionStatus::kFalse;
  return ConditionStatus::kUnknown;
}

// --- Object keys ------------------------------------------------------------------------------

std::string ObjectKey(std::string_view ns, std::string_view name) {
  std::string key;
  if (ns.empty()) return std::string(name);
  key.reserve(ns.size() + 1 + name.size());
  key.append(ns);
  key += '/';
  key.append(name);
  return key;
}

}  // namespace tpujob::cache
