// Fuzzes kube::HttpStream's reading of a response (status line, headers, chunked, sized or
// read-to-close body), which comes from the network: any bytes, written to a socket pair whose
// writing end is then closed.
//
// Properties: no crash, no sanitizer finding, no hang (the input's end always ends the read);
// the body read is never longer than the input.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "kube/http_stream.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (64u << 10)) return 0;  // stays within one socket buffer, written at once
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) return 0;
  size_t written = 0;
  while (written < size) {
    const ssize_t n = ::write(pair[0], data + written, size - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  ::shutdown(pair[0], SHUT_WR);
  auto stream = tpujob::kube::HttpStream::FromSocket(pair[1], std::chrono::seconds(5));
  if (stream) {
    size_t body = 0;
    while (true) {
      auto piece = (*stream)->Read(std::chrono::seconds(5));
      if (!piece) {
        if (piece.error().IsSilent()) tpujob::fuzz::Violated("waited for bytes after the end");
        break;
      }
      if (piece->empty()) break;
      body += piece->size();
      if (body > size) tpujob::fuzz::Violated("read a longer body than the input");
    }
  }
  ::close(pair[0]);  // pair[1] belongs to the stream, and was closed with it on a failure too
  return 0;
}
