#include "kube/watch.h"

#include <cctype>
#include <optional>

namespace tpujob::kube {
namespace {

constexpr size_t kMaxExcerpt = 200;

// The start of a line, cut at a character boundary, at most kMaxExcerpt bytes.
std::string_view Head(std::string_view line) {
  if (line.size() <= kMaxExcerpt) return line;
  size_t cut = kMaxExcerpt;
  while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) --cut;
  return line.substr(0, cut);
}

// Enough of a bad line to recognise it in a log, never the whole (possibly huge) thing.
std::string Excerpt(std::string_view line) {
  if (line.size() <= kMaxExcerpt) return std::string(line);
  return std::string(Head(line)) + "... (" + std::to_string(line.size()) + " bytes)";
}

// An overlong line, said the same whether it arrived whole or was given up part way.
Error Overlong(std::string_view line, size_t limit) {
  return Error::Decode("watch event line exceeds the limit of " + std::to_string(limit) +
                       " bytes; dropping it: " + std::string(Head(line)) + "...");
}

bool IsBlank(std::string_view line) {
  for (const char c : line) {
    if (!std::isspace(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

std::optional<WatchEventType> ParseType(std::string_view type) {
  if (type == "ADDED") return WatchEventType::kAdded;
  if (type == "MODIFIED") return WatchEventType::kModified;
  if (type == "DELETED") return WatchEventType::kDeleted;
  if (type == "BOOKMARK") return WatchEventType::kBookmark;
  if (type == "ERROR") return WatchEventType::kError;
  return std::nullopt;
}

}  // namespace

std::string_view ToString(WatchEventType type) {
  switch (type) {
    case WatchEventType::kAdded:
      return "ADDED";
    case WatchEventType::kModified:
      return "MODIFIED";
    case WatchEventType::kDeleted:
      return "DELETED";
    case WatchEventType::kBookmark:
      return "BOOKMARK";
    case WatchEventType::kError:
      return "ERROR";
  }
  return "UNKNOWN";
}

Result<WatchEvent> WatchDecoder::DecodeLine(std::string_view line) {
  nlohmann::json doc =
      nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    return std::unexpected(Error::Decode("watch event is not valid JSON: " + Excerpt(line)));
  }
  if (!doc.is_object()) {
    return std::unexpected(Error::Decode("watch event is not a JSON object: " + Excerpt(line)));
  }
  const auto type_field = doc.find("type");
  if (type_field == doc.end() || !type_field->is_string()) {
    return std::unexpected(Error::Decode("watch event has no type: " + Excerpt(line)));
  }
  const std::optional<WatchEventType> type = ParseType(type_field->get_ref<const std::string&>());
  if (!type) {
    return std::unexpected(Error::Decode("unknown watch event type \"" +
                                         type_field->get<std::string>() + "\": " + Excerpt(line)));
  }
  auto object = doc.find("object");
  if (object == doc.end() || !object->is_object()) {
    return std::unexpected(Error::Decode("watch event has no object: " + Excerpt(line)));
  }
  WatchEvent event;
  event.type = *type;
  event.object = std::move(*object);
  if (event.type == WatchEventType::kError) {
    event.error = ErrorFromStatusJson(event.object.dump());
  }
  return event;
}

std::vector<Result<WatchEvent>> WatchDecoder::Feed(std::string_view chunk) {
  std::vector<Result<WatchEvent>> events;
  // Only the new bytes can hold a newline we have not seen yet.
  size_t scan_from = buffer_.size();
  buffer_.append(chunk);
  size_t line_start = 0;
  for (size_t newline = buffer_.find('\n', scan_from); newline != std::string::npos;
       newline = buffer_.find('\n', scan_from)) {
    std::string_view line(buffer_.data() + line_start, newline - line_start);
    line_start = scan_from = newline + 1;
    if (discarding_) {  // the tail of a line already reported as too long
      discarding_ = false;
      continue;
    }
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.size() > max_line_bytes_) {
      events.push_back(std::unexpected(Overlong(line, max_line_bytes_)));
      continue;
    }
    if (IsBlank(line)) continue;
    events.push_back(DecodeLine(line));
  }
  buffer_.erase(0, line_start);
  if (discarding_) {
    buffer_.clear();
  } else if (buffer_.size() > max_line_bytes_ + 1) {  // + 1: room for a '\r' before the '\n'
    events.push_back(std::unexpected(Overlong(buffer_, max_line_bytes_)));
    buffer_.clear();
    discarding_ = true;
  }
  return events;
}

}  // namespace tpujob::kube
