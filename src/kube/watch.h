// Watch events and the decoder for the watch stream's wire format (one JSON object per line,
// {"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": {...}}), which arrives in chunks
// that split and join lines arbitrarily.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kube/error.h"

namespace tpujob::kube {

enum class WatchEventType { kAdded, kModified, kDeleted, kBookmark, kError };

std::string_view ToString(WatchEventType type);

// The values a digest of a watch event leaves out: fields that change without changing anything
// the reader keeps, such as a node's heartbeat times. Paths are below the event's object, keys
// separated by '.', with "[]" after a key whose value is an array to mean every element of it:
// "status.conditions[].lastHeartbeatTime". metadata.resourceVersion is always left out.
class VolatileFields {
 public:
  explicit VolatileFields(const std::vector<std::string>& paths);
  ~VolatileFields();
  VolatileFields(const VolatileFields&) = delete;
  VolatileFields& operator=(const VolatileFields&) = delete;

  struct Node;  // a trie of the paths
  const Node& root() const { return *root_; }

 private:
  std::unique_ptr<Node> root_;
};

// An ADDED, MODIFIED or DELETED event whose object has not been decoded (see
// WatchDecoder::set_volatile_fields).
struct UndecodedEvent {
  std::string line;  // the event as received; WatchDecoder::DecodeLine decodes it
  // A hash of the line with the volatile fields' values left out: two lines of the same object
  // with the same digest differ at most in those values (up to a 2^-64 chance of collision).
  uint64_t digest = 0;
  std::string ns;    // the object's metadata.namespace ("" for cluster-scoped objects)
  std::string name;  // metadata.name
  std::string resource_version;
};

struct WatchEvent {
  WatchEventType type = WatchEventType::kAdded;
  nlohmann::json object;  // for kError: the metav1.Status; null while `undecoded` is set
  // For kError: the parsed status (IsGone() tells the reflector to relist).
  Error error;
  // Set instead of `object` by a decoder given volatile fields.
  std::optional<UndecodedEvent> undecoded;
};

// Incremental decoder. Not thread-safe; one per stream.
class WatchDecoder {
 public:
  WatchDecoder();
  ~WatchDecoder();
  WatchDecoder(WatchDecoder&&) noexcept;
  WatchDecoder& operator=(WatchDecoder&&) noexcept;

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

  // With volatile fields, ADDED, MODIFIED and DELETED events are not decoded into a JSON
  // document: they come with `undecoded` set (the line, its digest, the object's namespace, name
  // and resourceVersion, found by one pass of simdjson's on-demand parser over the line), and
  // the reader decodes the line only when the digest says something it keeps may have changed.
  // A line that pass cannot read (not JSON, no object, no metadata.name) is decoded as without
  // them, with the same errors. BOOKMARK and ERROR events are always decoded.
  void set_volatile_fields(std::shared_ptr<const VolatileFields> fields);

  // Decodes one complete line as Feed() does.
  Result<WatchEvent> Decode(std::string_view line);

 private:
  struct Summarizer;  // simdjson's parser and a padded copy of the line, reused
  std::shared_ptr<const VolatileFields> volatile_fields_;
  std::unique_ptr<Summarizer> summarizer_;
  std::string buffer_;
  size_t max_line_bytes_ = 64u << 20;
  bool discarding_ = false;  // inside an overlong line: drop bytes until its newline
};

}  // namespace tpujob::kube
