// Fuzzes kube::WatchDecoder, which reads watch streams from the network: any byte sequence,
// split into chunks at arbitrary points. The first input byte picks the chunk size.
//
// Properties: no crash, no sanitizer finding; the events do not depend on how the stream was
// split (the same bytes fed in one piece give the same events, errors in the same places); the
// decoder buffers no more than the unfinished last line. With volatile fields (a node watch's), an
// event comes either decoded exactly as without them or undecoded with the line that decodes to
// it, and the same line always gets the same digest.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "kube/watch.h"

namespace {

using tpujob::kube::Result;
using tpujob::kube::VolatileFields;
using tpujob::kube::WatchDecoder;
using tpujob::kube::WatchEvent;

// One decoded item as text, for comparing two decodings.
std::string Describe(const Result<WatchEvent>& item) {
  if (!item) return "error:" + item.error().message;
  std::string out(tpujob::kube::ToString(item->type));
  out += ':';
  out += item->object.dump();
  if (item->type == tpujob::kube::WatchEventType::kError) out += ":" + item->error.message;
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t chunk = 1 + data[0] % 64;
  const std::string_view stream = tpujob::fuzz::AsText(data + 1, size - 1);

  WatchDecoder pieces;
  pieces.set_max_line_bytes(4096);
  std::vector<std::string> split;
  for (size_t at = 0; at < stream.size(); at += chunk) {
    for (const auto& item : pieces.Feed(stream.substr(at, chunk))) split.push_back(Describe(item));
  }

  WatchDecoder whole;
  whole.set_max_line_bytes(4096);
  std::vector<std::string> once;
  for (const auto& item : whole.Feed(stream)) once.push_back(Describe(item));

  if (split != once) tpujob::fuzz::Violated("events depend on how the stream was split");

  static const auto kNodeFields = std::make_shared<const VolatileFields>(std::vector<std::string>{
      "metadata.managedFields[].time", "status.conditions[].lastHeartbeatTime"});
  WatchDecoder summarizing;
  summarizing.set_max_line_bytes(4096);
  summarizing.set_volatile_fields(kNodeFields);
  WatchDecoder again;
  again.set_volatile_fields(kNodeFields);
  const std::vector<Result<WatchEvent>> summarized = summarizing.Feed(stream);
  if (summarized.size() != once.size()) {
    tpujob::fuzz::Violated("volatile fields change the number of events");
  }
  for (size_t i = 0; i < summarized.size() && i < once.size(); ++i) {
    const Result<WatchEvent>& item = summarized[i];
    if (!item || !item->undecoded) {
      if (Describe(item) != once[i]) tpujob::fuzz::Violated("a decoded event differs");
      continue;
    }
    if (!item->object.is_null()) tpujob::fuzz::Violated("an undecoded event has an object");
    if (item->type != tpujob::kube::WatchEventType::kAdded &&
        item->type != tpujob::kube::WatchEventType::kModified &&
        item->type != tpujob::kube::WatchEventType::kDeleted) {
      tpujob::fuzz::Violated("an undecoded event is not an object's");
    }
    if (item->undecoded->digest == 0) tpujob::fuzz::Violated("an undecoded event has no digest");
    if (Describe(WatchDecoder::DecodeLine(item->undecoded->line)) != once[i]) {
      tpujob::fuzz::Violated("an undecoded event's line decodes to something else");
    }
    const Result<WatchEvent> repeat = again.Decode(item->undecoded->line);
    if (!repeat || !repeat->undecoded || repeat->undecoded->digest != item->undecoded->digest) {
      tpujob::fuzz::Violated("the same line got another digest");
    }
  }
  if (pieces.pending_bytes() != whole.pending_bytes()) {
    tpujob::fuzz::Violated("buffered bytes depend on how the stream was split");
  }
  const size_t last_newline = stream.rfind('\n');
  const size_t tail =
      last_newline == std::string_view::npos ? stream.size() : stream.size() - last_newline - 1;
  if (whole.pending_bytes() > tail) tpujob::fuzz::Violated("buffered more than the last line");
  return 0;
}
