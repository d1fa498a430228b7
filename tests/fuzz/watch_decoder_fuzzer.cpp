// Fuzzes kube::WatchDecoder, which reads watch streams from the network: any byte sequence,
// split into chunks at arbitrary points. The first input byte picks the chunk size.
//
// Properties: no crash, no sanitizer finding; the events do not depend on how the stream was
// split (the same bytes fed in one piece give the same events, errors in the same places); the
// decoder buffers no more than the unfinished last line.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "kube/watch.h"

namespace {

using tpujob::kube::Result;
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
  if (pieces.pending_bytes() != whole.pending_bytes()) {
    tpujob::fuzz::Violated("buffered bytes depend on how the stream was split");
  }
  const size_t last_newline = stream.rfind('\n');
  const size_t tail =
      last_newline == std::string_view::npos ? stream.size() : stream.size() - last_newline - 1;
  if (whole.pending_bytes() > tail) tpujob::fuzz::Violated("buffered more than the last line");
  return 0;
}
