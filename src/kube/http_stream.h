// A GET whose body the server streams for a long time (a watch), read by the calling thread
// itself over a connection of its own: HTTP/1.1 (chunked, sized or read-to-close bodies), TLS by
// OpenSSL, every wait bounded by poll() and ended at once by Cancel() from another thread.
//
// Why not cpprestsdk, which carries every other request: it hands each piece of a streamed body
// from the socket to the reader through its thread pool (TLS read, chunk header, chunk data,
// the task continuation, the reader's wake-up), about 19 thread switches per watch event with
// its default 40 threads, and half of the operator's CPU while nothing but node heartbeats
// happens. Here one event costs one wake-up of the thread that decodes it.
//
// Thread-safety: one thread uses a stream; Cancel() may be called from any thread.
#pragma once

#include <openssl/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kube/config.h"
#include "kube/error.h"

namespace tpujob::kube {

// Makes the certificates of a PEM bundle the context's only trust anchors, as client-go does
// with a configured CA. Returns whether any certificate was read; a bundle with none leaves a
// context that trusts nothing (rather than the system bundle).
bool TrustOnlyCertificateAuthorities(SSL_CTX* ctx, const std::string& pem);

// The TLS settings of `config` (CA or the system trust store, client certificate and key,
// verification unless the kubeconfig turned it off), shared by every stream to that server.
Result<std::shared_ptr<SSL_CTX>> MakeStreamTlsContext(const Config& config);

// Where a server URL points: "https://host:port/prefix".
struct ServerAddress {
  bool tls = true;
  std::string host;       // without brackets for IPv6
  std::string port;       // "443" when the URL names none
  std::string authority;  // for the Host header: as written in the URL
  std::string prefix;     // path before the API's, without a trailing '/'; usually empty
};
Result<ServerAddress> ParseServerAddress(std::string_view server);

class HttpStream {
 public:
  using Headers = std::vector<std::pair<std::string, std::string>>;

  // Connects to `config.server`, sends `GET prefix + path_and_query` with `headers` (Host is
  // added) and reads the response's status line and headers, all within `timeout`. `tls` is
  // required for an https server. Errors are kTransport (no answer; the message says what
  // failed: resolution, connection, TLS handshake or verification, timeout).
  static Result<std::unique_ptr<HttpStream>> Get(const Config& config, SSL_CTX* tls,
                                                 const std::string& path_and_query,
                                                 const Headers& headers,
                                                 std::chrono::milliseconds timeout);
  // Reads a response from `fd`, a connected socket speaking plain HTTP, which the stream then
  // owns (it is closed on a failure too). The fuzz target feeds it bytes through a socket pair.
  static Result<std::unique_ptr<HttpStream>> FromSocket(int fd, std::chrono::milliseconds timeout);

  ~HttpStream();
  HttpStream(const HttpStream&) = delete;
  HttpStream& operator=(const HttpStream&) = delete;

  int status() const { return status_; }
  // The first header of that name (case-insensitive); empty when absent.
  std::string_view Header(std::string_view name) const;

  // The next bytes of the body, waiting at most `idle` for some (0: no limit). An empty view:
  // the body ended. The view is valid until the next call. Errors: Error::Silent(idle) when
  // nothing came in time, kCancelled after Cancel(), kTransport for a broken connection or a
  // body that breaks HTTP's framing (a truncated chunk, a bad chunk size).
  Result<std::string_view> Read(std::chrono::seconds idle);

  // The rest of the body (an error answer's Status), at most `limit` bytes, within `timeout`.
  Result<std::string> ReadAll(size_t limit, std::chrono::milliseconds timeout);

  // Ends a blocked or later Read at once. Any thread; any number of times.
  void Cancel();

 private:
  HttpStream() = default;
  class Io;
  enum class Framing { kChunked, kSized, kToClose };
  enum class ChunkState { kSize, kData, kDataEnd, kTrailers };

  Status ReadHead(std::chrono::steady_clock::time_point deadline);
  // Reads more bytes into the buffer; 0 at the end of the connection.
  Result<size_t> Fill(std::chrono::steady_clock::time_point deadline, std::chrono::seconds idle);
  // The buffered bytes up to a CRLF, or nullopt when none is buffered yet.
  std::optional<std::string_view> TakeLine();

  std::unique_ptr<Io> io_;
  int status_ = 0;
  Headers headers_;
  Framing framing_ = Framing::kToClose;
  ChunkState chunk_ = ChunkState::kSize;
  unsigned long long remaining_ = 0;  // of the chunk, or of a sized body
  bool ended_ = false;
  std::vector<char> buffer_;
  size_t begin_ = 0;  // unread bytes are buffer_[begin_, end_)
  size_t end_ = 0;
};

}  // namespace tpujob::kube
