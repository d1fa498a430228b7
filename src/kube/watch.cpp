#include "kube/watch.h"

#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <functional>
#include <optional>
#include <utility>

namespace tpujob::kube {
namespace {

constexpr size_t kMaxExcerpt = 200;

// The start of a line, cut at a character boundary, at most `max` bytes.
std::string_view Head(std::string_view line, size_t max = kMaxExcerpt) {
  if (line.size() <= max) return line;
  size_t cut = max;
  while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) --cut;
  return line.substr(0, cut);
}

// Enough of a bad line to recognise it in a log, never the whole (possibly huge) thing.
std::string LineExcerpt(std::string_view line) {
  if (line.size() <= kMaxExcerpt) return std::string(line);
  return std::string(Head(line)) + "... (" + std::to_string(line.size()) + " bytes)";
}

// An overlong line, said the same whether it arrived whole or was given up part way: either
// way at least limit + 1 of its bytes are there, so no more are quoted.
Error Overlong(std::string_view line, size_t limit) {
  return Error::Decode(
      "watch event line exceeds the limit of " + std::to_string(limit) +
      " bytes; dropping it: " + std::string(Head(line, std::min(kMaxExcerpt, limit + 1))) + "...");
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

// --- Volatile fields and the digest of an undecoded event --------------------------------------

struct VolatileFields::Node {
  std::vector<std::pair<std::string, std::unique_ptr<Node>>> children;
  bool leaf = false;          // this value is left out of the digest
  bool each_element = false;  // the path goes on into every element of this value (an array)

  Node& Child(std::string_view key) {
    for (auto& [name, child] : children) {
      if (name == key) return *child;
    }
    children.emplace_back(std::string(key), std::make_unique<Node>());
    return *children.back().second;
  }
  const Node* Find(std::string_view key) const {
    for (const auto& [name, child] : children) {
      if (name == key) return child.get();
    }
    return nullptr;
  }
};

VolatileFields::VolatileFields(const std::vector<std::string>& paths)
    : root_(std::make_unique<Node>()) {
  std::vector<std::string> all = paths;
  all.push_back("metadata.resourceVersion");
  for (const std::string& path : all) {
    Node* node = root_.get();
    std::string_view rest = path;
    while (!rest.empty()) {
      const size_t dot = rest.find('.');
      std::string_view key = rest.substr(0, dot);
      rest = dot == std::string_view::npos ? std::string_view() : rest.substr(dot + 1);
      const bool each = key.ends_with("[]");
      if (each) key.remove_suffix(2);
      node = &node->Child(key);
      node->each_element = node->each_element || each;
    }
    if (node != root_.get()) node->leaf = true;
  }
}

VolatileFields::~VolatileFields() = default;

// One pass of simdjson's on-demand parser over an event line: the event's type, the object's
// identity, and the byte ranges of the values the digest leaves out. Values on no volatile
// path are skipped unread, which is what makes the pass cheap.
struct WatchDecoder::Summarizer {
  simdjson::ondemand::parser parser;
  std::string padded;  // the line, with the padding simdjson reads past its end
  std::vector<std::pair<size_t, size_t>> masked;  // [begin, end) offsets into `padded`
  size_t length = 0;                              // of the line in `padded`

  std::optional<WatchEvent> Summarize(std::string_view line, const VolatileFields& fields) {
    masked.clear();
    length = line.size();
    if (padded.size() < line.size() + simdjson::SIMDJSON_PADDING) {
      padded.resize(line.size() + simdjson::SIMDJSON_PADDING);
    }
    std::memcpy(padded.data(), line.data(), line.size());
    // simdjson may read the padding (an unterminated string does): the same line must read the
    // same whatever a longer line left there.
    std::memset(padded.data() + line.size(), 0, simdjson::SIMDJSON_PADDING);
    simdjson::ondemand::document doc;
    if (parser.iterate(padded.data(), line.size(), padded.size()).get(doc)) return std::nullopt;
    simdjson::ondemand::object event;
    if (doc.get_object().get(event)) return std::nullopt;
    std::optional<WatchEventType> type;
    UndecodedEvent undecoded;
    bool have_object = false;
    for (auto field : event) {
      std::string_view key;
      if (field.unescaped_key().get(key)) return std::nullopt;
      simdjson::ondemand::value value;
      if (field.value().get(value)) return std::nullopt;
      if (key == "type") {
        // Left out too: an object's ADDED and MODIFIED lines must digest alike.
        std::string_view text;
        if (!MaskString(value, text)) return std::nullopt;
        type = ParseType(text);
      } else if (key == "object") {
        if (have_object) return std::nullopt;  // a second one: the decoder keeps only the last
        simdjson::ondemand::object object;
        if (value.get_object().get(object)) return std::nullopt;
        if (!Walk(object, fields.root(), &undecoded)) return std::nullopt;
        have_object = true;
      }
    }
    if (!type || !have_object || undecoded.name.empty()) return std::nullopt;
    if (*type != WatchEventType::kAdded && *type != WatchEventType::kModified &&
        *type != WatchEventType::kDeleted) {
      return std::nullopt;
    }
    undecoded.digest = Digest(std::string_view(padded.data(), line.size()));
    undecoded.line = std::string(line);
    WatchEvent summarized;
    summarized.type = *type;
    summarized.object = nullptr;
    summarized.undecoded = std::move(undecoded);
    return summarized;
  }

 private:
  // Reads `value` as a string into `text` and leaves it out of the digest; false, leaving it
  // in, when it is not a well-formed string (one the decoder would accept too).
  bool MaskString(simdjson::ondemand::value& value, std::string_view& text) {
    const std::string_view raw = value.raw_json_token();
    if (value.get_string().get(text)) return false;
    Mask(raw);
    return true;
  }

  // Leaves `raw` (a token inside `padded`) out of the digest. A token of a malformed line may
  // reach into the padding; only the line's own bytes count.
  void Mask(std::string_view raw) {
    const size_t begin = std::min(static_cast<size_t>(raw.data() - padded.data()), length);
    const size_t end = std::min(begin + raw.size(), length);
    if (!masked.empty() && begin < masked.back().second) return;  // never out of order
    masked.emplace_back(begin, end);
  }

  // The fields of `object` on a volatile path under `node`; `identity` (for the object's top
  // level) also collects metadata's namespace, name and resourceVersion.
  bool Walk(simdjson::ondemand::object object, const VolatileFields::Node& node,
            UndecodedEvent* identity, bool in_metadata = false) {
    bool metadata_seen = false;
    for (auto field : object) {
      std::string_view key;
      if (field.unescaped_key().get(key)) return false;
      const VolatileFields::Node* child = node.Find(key);
      const bool identity_field =
          in_metadata && (key == "name" || key == "namespace" || key == "resourceVersion");
      if (child == nullptr && !identity_field) continue;  // skipped unread
      simdjson::ondemand::value value;
      if (field.value().get(value)) return false;
      if (identity_field) {
        std::string_view text;
        const bool ok = child != nullptr && child->leaf  // the resourceVersion
                            ? MaskString(value, text)
                            : !value.get_string().get(text);
        if (!ok) return false;
        std::string& out = key == "name"        ? identity->name
                           : key == "namespace" ? identity->ns
                                                : identity->resource_version;
        out = text;
        continue;
      }
      if (child->leaf) {
        simdjson::ondemand::json_type type;
        if (value.type().get(type)) return false;
        // Only a string is left out; any other value stays in the digest, which then only
        // decodes more often.
        std::string_view text;
        if (type == simdjson::ondemand::json_type::string && !MaskString(value, text)) {
          return false;
        }
        continue;
      }
      if (child->each_element) {
        simdjson::ondemand::array array;
        if (value.get_array().get(array)) continue;  // not an array: nothing volatile in it
        for (auto element : array) {
          simdjson::ondemand::object item;
          if (element.get_object().get(item)) continue;
          if (!Walk(item, *child, nullptr)) return false;
        }
        continue;
      }
      const bool metadata = identity != nullptr && !in_metadata && key == "metadata";
      if (metadata) {
        if (metadata_seen) return false;  // a second one: the decoder keeps only the last
        metadata_seen = true;
      }
      simdjson::ondemand::object inner;
      if (value.get_object().get(inner)) continue;
      if (!Walk(inner, *child, metadata ? identity : nullptr, metadata)) return false;
    }
    return true;
  }

  uint64_t Digest(std::string_view line) const {
    const std::hash<std::string_view> hash;
    uint64_t h = 0x9E3779B97F4A7C15ULL;
    size_t at = 0;
    for (const auto& [begin, end] : masked) {
      h = Mix(h, hash(line.substr(at, begin - at)));
      at = end;
    }
    h = Mix(h, hash(line.substr(at)));
    return h == 0 ? 1 : h;  // 0 stands for "no digest"
  }

  static uint64_t Mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    return h * 0xFF51AFD7ED558CCDULL;
  }
};

WatchDecoder::WatchDecoder() = default;
WatchDecoder::~WatchDecoder() = default;
WatchDecoder::WatchDecoder(WatchDecoder&&) noexcept = default;
WatchDecoder& WatchDecoder::operator=(WatchDecoder&&) noexcept = default;

void WatchDecoder::set_volatile_fields(std::shared_ptr<const VolatileFields> fields) {
  volatile_fields_ = std::move(fields);
  if (volatile_fields_ && !summarizer_) summarizer_ = std::make_unique<Summarizer>();
}

Result<WatchEvent> WatchDecoder::Decode(std::string_view line) {
  if (volatile_fields_) {
    if (std::optional<WatchEvent> event = summarizer_->Summarize(line, *volatile_fields_)) {
      return std::move(*event);
    }
  }
  return DecodeLine(line);
}

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
    return std::unexpected(Error::Decode("watch event is not valid JSON: " + LineExcerpt(line)));
  }
  if (!doc.is_object()) {
    return std::unexpected(Error::Decode("watch event is not a JSON object: " + LineExcerpt(line)));
  }
  const auto type_field = doc.find("type");
  if (type_field == doc.end() || !type_field->is_string()) {
    return std::unexpected(Error::Decode("watch event has no type: " + LineExcerpt(line)));
  }
  const std::optional<WatchEventType> type = ParseType(type_field->get_ref<const std::string&>());
  if (!type) {
    return std::unexpected(Error::Decode("unknown watch event type \"" +
                                         type_field->get<std::string>() +
                                         "\": " + LineExcerpt(line)));
  }
  auto object = doc.find("object");
  if (object == doc.end() || !object->is_object()) {
    return std::unexpected(Error::Decode("watch event has no object: " + LineExcerpt(line)));
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
    events.push_back(Decode(line));
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
