// Watch events and the decoder for the watch stream's wire format (one JSON object per line,
// {"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": {...}}), which arrives in chunks
// that split and join lines arbitrarily.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "kube/error.h"

namespace tpujob::kube {

enum class WatchEventType { kAdded, kModified, kDeleted, kBookmark, kError };

std::string_view ToString(WatchEventType type);

struct WatchEvent {
  WatchEventType type = WatchEventType::kAdded;
  nlohmann::json object;  // for kError: the metav1.Status
  // For kError: the parsed status (IsGone() tells the reflector to relist).
  Error error;
};

// Incremental decoder. Not thread-safe; one per stream.
class WatchDecoder {
 public:
  // Feeds the next chunk; returns every event completed by it, in order. A complete line that
  // is not a valid event yields an Error (kind kDecode) in its place; decoding continues after
  // it. Blank lines are ignored, as is a trailing '\r'. A line longer than the limit yields one
  // kDecode error; its bytes are dropped up to and including its newline.
  std::vector<Result<WatchEvent>> Feed(std::string_view chunk);

  // Bytes buffered waiting for the end of a line.
  size_t pending_bytes() const { return buffer_.size(); }

  // Limit on one line, to bound memory on a misbehaving server (default 64 MiB).
  void set_max_line_bytes(size_t n) { max_line_bytes_ = n; }

  // Decodes one complete line (without the newline).
  static Result<WatchEvent> DecodeLine(std::string_view line);

 private:
  std::string buffer_;
  size_t max_line_bytes_ = 64u << 20;
  bool discarding_ = false;  // inside an overlong line: drop bytes until its newline
};

}  // namespace tpujob::kube
