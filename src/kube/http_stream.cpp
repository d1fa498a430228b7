#include "kube/http_stream.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "base/strings.h"

namespace tpujob::kube {
namespace {

using SteadyClock = std::chrono::steady_clock;
using SteadyTime = SteadyClock::time_point;

constexpr size_t kBufferBytes = 64 << 10;   // one read takes whatever is there, up to this
constexpr size_t kMaxHeadBytes = 64 << 10;  // status line and headers
constexpr size_t kMaxLineBytes = 4 << 10;   // a chunk-size line or a trailer

std::string LastSslError() {
  const unsigned long code = ERR_get_error();
  ERR_clear_error();
  if (code == 0) return "unknown TLS error";
  char text[256];
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// The optional whitespace around a header field's value (RFC 9110 section 5.6.3).
constexpr std::string_view kOptionalWhitespace = " \t";

// A socket BIO whose writes never raise SIGPIPE (the operator does not ignore it): OpenSSL's own
// writes with write(2).
int BioWrite(BIO* bio, const char* data, int size) {
  BIO_clear_retry_flags(bio);
  const ssize_t n = ::send(BIO_get_fd(bio, nullptr), data, static_cast<size_t>(size), MSG_NOSIGNAL);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    BIO_set_retry_write(bio);
  }
  return static_cast<int>(n);
}

int BioRead(BIO* bio, char* data, int size) {
  BIO_clear_retry_flags(bio);
  const ssize_t n = ::recv(BIO_get_fd(bio, nullptr), data, static_cast<size_t>(size), 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    BIO_set_retry_read(bio);
  }
  return static_cast<int>(n);
}

int BioPuts(BIO* bio, const char* text) {
  return BioWrite(bio, text, static_cast<int>(std::strlen(text)));
}

const BIO_METHOD* NoSigpipeSocketMethod() {
  static const BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR,
                                 "tpujob socket");
    const BIO_METHOD* socket = BIO_s_socket();
    BIO_meth_set_write(m, BioWrite);
    BIO_meth_set_read(m, BioRead);
    BIO_meth_set_puts(m, BioPuts);
    BIO_meth_set_ctrl(m, BIO_meth_get_ctrl(socket));
    BIO_meth_set_create(m, BIO_meth_get_create(socket));
    BIO_meth_set_destroy(m, BIO_meth_get_destroy(socket));
    return m;
  }();
  return method;
}

}  // namespace

bool TrustOnlyCertificateAuthorities(SSL_CTX* ctx, const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return false;
  X509_STORE* store = X509_STORE_new();
  if (store == nullptr) {
    BIO_free(bio);
    return false;
  }
  int added = 0;
  while (X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
    if (X509_STORE_add_cert(store, cert) == 1) ++added;
    X509_free(cert);
  }
  ERR_clear_error();  // the loop ends on a "no start line" error, which is expected
  BIO_free(bio);
  // Even when empty: a CA that cannot be read trusts nothing, rather than the system bundle.
  SSL_CTX_set_cert_store(ctx, store);  // takes the store, frees the one it replaces
  return added > 0;
}

Result<std::shared_ptr<SSL_CTX>> MakeStreamTlsContext(const Config& config) {
  std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(TLS_client_method()), SSL_CTX_free);
  if (!ctx) return std::unexpected(Error::Config("cannot create a TLS context: " + LastSslError()));
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  // A body's end is known from its framing (the last chunk, the length): a peer that closes
  // without a TLS close_notify ends the connection, and a truncated body is still caught.
  SSL_CTX_set_options(ctx.get(), SSL_OP_IGNORE_UNEXPECTED_EOF);
  if (config.insecure_skip_tls_verify) {
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_NONE, nullptr);
  } else {
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
    if (!config.ca_pem.empty()) {
      if (!TrustOnlyCertificateAuthorities(ctx.get(), config.ca_pem)) {
        return std::unexpected(Error::Config("no usable certificate in the configured CA bundle"));
      }
    } else if (SSL_CTX_set_default_verify_paths(ctx.get()) != 1) {
      return std::unexpected(
          Error::Config("cannot load the system's CA bundle: " + LastSslError()));
    }
  }
  if (!config.client_cert_pem.empty() && !config.client_key_pem.empty()) {
    std::unique_ptr<BIO, decltype(&BIO_free)> certs(
        BIO_new_mem_buf(config.client_cert_pem.data(),
                        static_cast<int>(config.client_cert_pem.size())),
        BIO_free);
    X509* leaf = certs ? PEM_read_bio_X509(certs.get(), nullptr, nullptr, nullptr) : nullptr;
    if (leaf == nullptr || SSL_CTX_use_certificate(ctx.get(), leaf) != 1) {
      if (leaf != nullptr) X509_free(leaf);
      return std::unexpected(Error::Config("client certificate rejected: " + LastSslError()));
    }
    X509_free(leaf);
    while (X509* intermediate = PEM_read_bio_X509(certs.get(), nullptr, nullptr, nullptr)) {
      SSL_CTX_add0_chain_cert(ctx.get(), intermediate);  // takes it
    }
    ERR_clear_error();
    std::unique_ptr<BIO, decltype(&BIO_free)> key_bio(
        BIO_new_mem_buf(config.client_key_pem.data(),
                        static_cast<int>(config.client_key_pem.size())),
        BIO_free);
    EVP_PKEY* key =
        key_bio ? PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr) : nullptr;
    const bool used = key != nullptr && SSL_CTX_use_PrivateKey(ctx.get(), key) == 1 &&
                      SSL_CTX_check_private_key(ctx.get()) == 1;
    if (key != nullptr) EVP_PKEY_free(key);
    if (!used) return std::unexpected(Error::Config("client key rejected: " + LastSslError()));
  }
  return ctx;
}

Result<ServerAddress> ParseServerAddress(std::string_view server) {
  ServerAddress address;
  std::string_view rest = server;
  if (rest.starts_with("https://")) {
    rest.remove_prefix(8);
  } else if (rest.starts_with("http://")) {
    address.tls = false;
    rest.remove_prefix(7);
  } else {
    return std::unexpected(
        Error::Config("server \"" + std::string(server) + "\" is not an http:// or https:// URL"));
  }
  const size_t slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (const size_t at = authority.rfind('@'); at != std::string_view::npos) {
    authority.remove_prefix(at + 1);  // user info is never sent, not even in Host
  }
  address.authority = std::string(authority);
  if (slash != std::string_view::npos) {
    std::string_view prefix = rest.substr(slash);
    while (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
    address.prefix = std::string(prefix);
  }
  std::string_view port;
  if (authority.starts_with('[')) {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) {
      return std::unexpected(Error::Config("server \"" + std::string(server) + "\": unclosed ["));
    }
    address.host = std::string(authority.substr(1, close - 1));
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') {
        return std::unexpected(Error::Config("server \"" + std::string(server) + "\": bad port"));
      }
      port = authority.substr(close + 2);
    }
  } else {
    const size_t colon = authority.rfind(':');
    address.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (address.host.empty()) {
    return std::unexpected(Error::Config("server \"" + std::string(server) + "\" names no host"));
  }
  if (!port.empty() &&
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::unexpected(Error::Config("server \"" + std::string(server) + "\": bad port"));
  }
  address.port = port.empty() ? (address.tls ? "443" : "80") : std::string(port);
  return address;
}

// The connection: a non-blocking socket, TLS on it or not, and an eventfd that Cancel() signals.
class HttpStream::Io {
 public:
  ~Io() {
    if (ssl_ != nullptr) SSL_free(ssl_);  // frees its BIO, which does not close the socket
    if (fd_ >= 0) ::close(fd_);
    if (cancel_fd_ >= 0) ::close(cancel_fd_);
  }

  Status Open(const Config& config, const ServerAddress& address, SSL_CTX* tls,
              SteadyTime deadline) {
    if (Status made = MakeCancelFd(); !made) return made;
    if (Status connected = Connect(address, deadline); !connected) return connected;
    if (!address.tls) return {};
    if (tls == nullptr) return std::unexpected(Error::Config("https server without TLS context"));
    ssl_ = SSL_new(tls);
    BIO* bio = ssl_ != nullptr ? BIO_new(NoSigpipeSocketMethod()) : nullptr;
    if (bio == nullptr) return Transport("cannot start TLS: " + LastSslError());
    BIO_set_fd(bio, fd_, BIO_NOCLOSE);
    SSL_set_bio(ssl_, bio, bio);
    const std::string& name =
        config.tls_server_name.empty() ? address.host : config.tls_server_name;
    const bool ip = IsIpAddress(name);
    if (!ip) SSL_set_tlsext_host_name(ssl_, name.c_str());
    if (!config.insecure_skip_tls_verify) {
      const int named = ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_), name.c_str())
                           : SSL_set1_host(ssl_, name.c_str());
      if (named != 1) return Transport("cannot verify the server as " + name);
    }
    while (true) {
      const int r = SSL_connect(ssl_);
      if (r == 1) return {};
      const int error = SSL_get_error(ssl_, r);
      auto again = WaitIfSslWants(error, deadline, "TLS handshake");
      if (!again) return std::unexpected(again.error());
      if (*again) continue;
      const long verify = SSL_get_verify_result(ssl_);
      if (verify != X509_V_OK) {
        ERR_clear_error();
        return Transport(std::string("TLS handshake: certificate verify failed: ") +
                         X509_verify_cert_error_string(verify));
      }
      return Transport("TLS handshake: " + Describe(error));
    }
  }

  Status Adopt(int fd) {
    fd_ = fd;
    if (Status made = MakeCancelFd(); !made) return made;
    const int flags = ::fcntl(fd_, F_GETFL);
    if (flags < 0 || ::fcntl(fd_, F_SETFL, flags | O_NONBLOCK) < 0) {
      return Transport(std::string("fcntl: ") + std::strerror(errno));
    }
    return {};
  }

  Status WriteAll(std::string_view data, SteadyTime deadline) {
    while (!data.empty()) {
      if (ssl_ != nullptr) {
        const int n = SSL_write(ssl_, data.data(), static_cast<int>(data.size()));
        if (n > 0) {
          data.remove_prefix(static_cast<size_t>(n));
          continue;
        }
        const int error = SSL_get_error(ssl_, n);
        auto again = WaitIfSslWants(error, deadline, "request");
        if (!again) return std::unexpected(again.error());
        if (*again) continue;
        return Transport("sending the request: " + Describe(error));
      }
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n > 0) {
        data.remove_prefix(static_cast<size_t>(n));
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        if (Status ready = Wait(POLLOUT, deadline, "request"); !ready) return ready;
      } else {
        return Transport(std::string("sending the request: ") + std::strerror(errno));
      }
    }
    return {};
  }

  // Up to `size` bytes, waiting until `deadline` (or forever when it is max()); 0 at the end.
  Result<size_t> ReadSome(char* data, size_t size, SteadyTime deadline, const char* what) {
    const int chunk = static_cast<int>(std::min<size_t>(size, 1 << 30));
    while (true) {
      if (cancelled_.load(std::memory_order_relaxed)) return std::unexpected(Cancelled());
      if (ssl_ != nullptr) {
        errno = 0;
        const int n = SSL_read(ssl_, data, chunk);
        if (n > 0) return static_cast<size_t>(n);
        const int error = SSL_get_error(ssl_, n);
        if (error == SSL_ERROR_ZERO_RETURN) return 0;
        auto again = WaitIfSslWants(error, deadline, what);
        if (!again) return std::unexpected(again.error());
        if (*again) continue;
        if (error == SSL_ERROR_SYSCALL && errno == 0) return 0;  // closed without close_notify
        return std::unexpected(Transport(std::string(what) + ": " + Describe(error)).error());
      }
      const ssize_t n = ::recv(fd_, data, static_cast<size_t>(chunk), 0);
      if (n >= 0) return static_cast<size_t>(n);
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        if (Status ready = Wait(POLLIN, deadline, what); !ready) {
          return std::unexpected(ready.error());
        }
        continue;
      }
      return std::unexpected(Error::Transport(std::string(what) + ": " + std::strerror(errno)));
    }
  }

  void Cancel() {
    if (cancelled_.exchange(true)) return;
    const uint64_t one = 1;
    if (cancel_fd_ >= 0 && ::write(cancel_fd_, &one, sizeof(one)) < 0) {
      // Cannot happen for an eventfd below its maximum; the flag above is seen by the next wait.
    }
  }

  // Set when a wait ran out of time (Wait's error then has reason "Timeout").
  static bool IsTimeout(const Error& error) {
    return error.kind == ErrorKind::kTransport && error.reason == "Timeout";
  }

 private:
  static std::unexpected<Error> Transport(std::string message) {
    return std::unexpected(Error::Transport(std::move(message)));
  }
  static Error Cancelled() { return Error::Cancelled("stream cancelled"); }

  std::string Describe(int ssl_error) {
    if (ssl_error == SSL_ERROR_SYSCALL) {
      const std::string queued = ERR_peek_error() != 0 ? LastSslError() : "";
      if (!queued.empty()) return queued;
      return errno != 0 ? std::strerror(errno) : "connection closed";
    }
    return LastSslError();
  }

  Status Connect(const ServerAddress& address, SteadyTime deadline) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int resolved = ::getaddrinfo(address.host.c_str(), address.port.c_str(), &hints, &found);
    if (resolved != 0) {
      return Transport("cannot resolve " + address.host + ": " + ::gai_strerror(resolved));
    }
    std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> list(found, freeaddrinfo);
    std::string last_error = "no address";
    for (const addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
      const int fd =
          ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
      if (fd < 0) {
        last_error = std::strerror(errno);
        continue;
      }
      fd_ = fd;
      const int on = 1;
      ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
      ::setsockopt(fd_, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
      if (::connect(fd_, ai->ai_addr, ai->ai_addrlen) == 0) return {};
      if (errno == EINPROGRESS) {
        Status ready = Wait(POLLOUT, deadline, "connect");
        if (!ready && ready.error().kind == ErrorKind::kCancelled) return ready;
        int error = 0;
        socklen_t length = sizeof(error);
        if (ready && ::getsockopt(fd_, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0) {
          return {};
        }
        last_error = ready ? std::strerror(error) : ready.error().message;
      } else {
        last_error = std::strerror(errno);
      }
      ::close(fd_);
      fd_ = -1;
    }
    return Transport("cannot connect to " + address.authority + ": " + last_error);
  }

  // When an OpenSSL call asked to be called again once the socket can be read or written
  // (SSL_ERROR_WANT_READ/WRITE): waits for that and returns true. Other errors: false.
  Result<bool> WaitIfSslWants(int ssl_error, SteadyTime deadline, const char* what) {
    if (ssl_error != SSL_ERROR_WANT_READ && ssl_error != SSL_ERROR_WANT_WRITE) return false;
    Status ready = Wait(ssl_error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline, what);
    if (!ready) return std::unexpected(ready.error());
    return true;
  }

  Status MakeCancelFd() {
    cancel_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (cancel_fd_ < 0) return Transport(std::string("eventfd: ") + std::strerror(errno));
    return {};
  }

  // Waits for the socket to be ready for `events`, Cancel(), or the deadline.
  Status Wait(short events, SteadyTime deadline, const char* what) {
    while (true) {
      if (cancelled_.load(std::memory_order_relaxed)) return std::unexpected(Cancelled());
      int timeout_ms = -1;
      if (deadline != SteadyTime::max()) {
        const auto left =
            std::chrono::ceil<std::chrono::milliseconds>(deadline - SteadyClock::now());
        if (left.count() <= 0) {
          Error timeout = Error::Transport(std::string(what) + ": timed out");
          timeout.reason = "Timeout";
          return std::unexpected(std::move(timeout));
        }
        timeout_ms = static_cast<int>(std::min<int64_t>(left.count(), 1 << 30));
      }
      pollfd fds[2] = {{fd_, events, 0}, {cancel_fd_, POLLIN, 0}};
      const int n = ::poll(fds, 2, timeout_ms);
      if (n < 0 && errno != EINTR) {
        return Transport(std::string(what) + ": poll: " + std::strerror(errno));
      }
      if (n > 0 && (fds[1].revents & POLLIN) != 0) return std::unexpected(Cancelled());
      // Ready, or in error (the next read or write says which error).
      if (n > 0 && fds[0].revents != 0) return {};
    }
  }

  int fd_ = -1;
  int cancel_fd_ = -1;
  SSL* ssl_ = nullptr;
  std::atomic<bool> cancelled_{false};
};

Result<std::unique_ptr<HttpStream>> HttpStream::Get(const Config& config, SSL_CTX* tls,
                                                    const std::string& path_and_query,
                                                    const Headers& headers,
                                                    std::chrono::milliseconds timeout) {
  auto address = ParseServerAddress(config.server);
  if (!address) return std::unexpected(address.error());
  const SteadyTime deadline = SteadyClock::now() + timeout;
  std::unique_ptr<HttpStream> stream(new HttpStream());
  stream->io_ = std::make_unique<Io>();
  stream->buffer_.resize(kBufferBytes);
  if (Status opened = stream->io_->Open(config, *address, tls, deadline); !opened) {
    return std::unexpected(opened.error());
  }
  std::string request = "GET " + address->prefix + path_and_query +
                        " HTTP/1.1\r\nHost: " + address->authority + "\r\n";
  for (const auto& [name, value] : headers) request += name + ": " + value + "\r\n";
  request += "\r\n";
  if (Status sent = stream->io_->WriteAll(request, deadline); !sent) {
    return std::unexpected(sent.error());
  }
  if (Status head = stream->ReadHead(deadline); !head) return std::unexpected(head.error());
  return stream;
}

Result<std::unique_ptr<HttpStream>> HttpStream::FromSocket(int fd,
                                                           std::chrono::milliseconds timeout) {
  std::unique_ptr<HttpStream> stream(new HttpStream());
  stream->io_ = std::make_unique<Io>();
  stream->buffer_.resize(kBufferBytes);
  if (Status adopted = stream->io_->Adopt(fd); !adopted) return std::unexpected(adopted.error());
  if (Status head = stream->ReadHead(SteadyClock::now() + timeout); !head) {
    return std::unexpected(head.error());
  }
  return stream;
}

HttpStream::~HttpStream() = default;

void HttpStream::Cancel() { io_->Cancel(); }

std::string_view HttpStream::Header(std::string_view name) const {
  for (const auto& [key, value] : headers_) {
    if (EqualsIgnoreCase(key, name)) return value;
  }
  return {};
}

Result<size_t> HttpStream::Fill(SteadyTime deadline, std::chrono::seconds idle) {
  if (begin_ == end_) {
    begin_ = end_ = 0;
  } else if (end_ == buffer_.size()) {
    std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (end_ == buffer_.size()) return std::unexpected(Error::Transport("HTTP line too long"));
  auto n = io_->ReadSome(buffer_.data() + end_, buffer_.size() - end_, deadline, "reading");
  if (!n) {
    if (idle.count() > 0 && Io::IsTimeout(n.error())) {
      return std::unexpected(Error::Silent(idle));
    }
    return std::unexpected(n.error());
  }
  end_ += *n;
  return *n;
}

std::optional<std::string_view> HttpStream::TakeLine() {
  const std::string_view unread(buffer_.data() + begin_, end_ - begin_);
  const size_t crlf = unread.find("\r\n");
  if (crlf == std::string_view::npos) return std::nullopt;
  begin_ += crlf + 2;
  return unread.substr(0, crlf);
}

Status HttpStream::ReadHead(SteadyTime deadline) {
  while (true) {
    const std::string_view unread(buffer_.data() + begin_, end_ - begin_);
    if (unread.find("\r\n\r\n") != std::string_view::npos) break;
    if (unread.size() >= kMaxHeadBytes) {
      return std::unexpected(Error::Transport("response headers longer than 64 KiB"));
    }
    auto n = Fill(deadline, std::chrono::seconds(0));
    if (!n) {
      Error error = n.error();
      if (Io::IsTimeout(error)) error.message = "waiting for the response: timed out";
      return std::unexpected(std::move(error));
    }
    if (*n == 0) return std::unexpected(Error::Transport("connection closed before a response"));
  }
  const std::string_view status_line = *TakeLine();
  // "HTTP/1.1 200 OK"
  if (!status_line.starts_with("HTTP/1.") || status_line.size() < 12 || status_line[8] != ' ') {
    return std::unexpected(
        Error::Transport("not an HTTP/1.x response: " + std::string(status_line.substr(0, 64))));
  }
  status_ = 0;
  for (size_t i = 9; i < 12; ++i) {
    const char c = status_line[i];
    if (c < '0' || c > '9') {
      return std::unexpected(
          Error::Transport("bad HTTP status line: " + std::string(status_line.substr(0, 64))));
    }
    status_ = status_ * 10 + (c - '0');
  }
  while (true) {
    const std::string_view line = *TakeLine();
    if (line.empty()) break;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    headers_.emplace_back(std::string(Trim(line.substr(0, colon), kOptionalWhitespace)),
                          std::string(Trim(line.substr(colon + 1), kOptionalWhitespace)));
  }
  const std::string_view encoding = Header("Transfer-Encoding");
  const std::string_view length = Header("Content-Length");
  if (!encoding.empty() && encoding.find("chunked") != std::string_view::npos) {
    framing_ = Framing::kChunked;
  } else if (!length.empty()) {
    framing_ = Framing::kSized;
    remaining_ = 0;
    for (const char c : length) {
      if (c < '0' || c > '9' || remaining_ > (1ull << 50)) {
        return std::unexpected(Error::Transport("bad Content-Length: " + std::string(length)));
      }
      remaining_ = remaining_ * 10 + static_cast<unsigned>(c - '0');
    }
  } else {
    framing_ = Framing::kToClose;
  }
  if (status_ == 204 || status_ == 304) ended_ = true;
  return {};
}

Result<std::string_view> HttpStream::Read(std::chrono::seconds idle) {
  // Each wait for bytes is bounded by `idle`, counted from when that wait starts.
  const auto deadline = [&] {
    return idle.count() > 0 ? SteadyClock::now() + idle : SteadyTime::max();
  };
  while (!ended_) {
    const size_t buffered = end_ - begin_;
    if (framing_ == Framing::kToClose) {
      if (buffered > 0) {
        const std::string_view out(buffer_.data() + begin_, buffered);
        begin_ = end_;
        return out;
      }
    } else if (framing_ == Framing::kSized || chunk_ == ChunkState::kData) {
      if (remaining_ == 0) {
        if (framing_ == Framing::kSized) {
          ended_ = true;
          break;
        }
        chunk_ = ChunkState::kDataEnd;
        continue;
      }
      if (buffered > 0) {
        const size_t n = static_cast<size_t>(std::min<unsigned long long>(remaining_, buffered));
        const std::string_view out(buffer_.data() + begin_, n);
        begin_ += n;
        remaining_ -= n;
        return out;
      }
    } else if (std::optional<std::string_view> line = TakeLine()) {
      if (chunk_ == ChunkState::kDataEnd) {
        if (!line->empty()) return std::unexpected(Error::Transport("chunk not ended by CRLF"));
        chunk_ = ChunkState::kSize;
      } else if (chunk_ == ChunkState::kSize) {
        // "1a2b[;extension]"
        unsigned long long size = 0;
        size_t digits = 0;
        for (const char c : *line) {
          int v = -1;
          if (c >= '0' && c <= '9') v = c - '0';
          if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
          if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
          if (v < 0) break;
          if (++digits > 15) return std::unexpected(Error::Transport("chunk size too large"));
          size = size * 16 + static_cast<unsigned>(v);
        }
        if (digits == 0) {
          return std::unexpected(
              Error::Transport("bad chunk size line: " + std::string(line->substr(0, 32))));
        }
        remaining_ = size;
        chunk_ = size == 0 ? ChunkState::kTrailers : ChunkState::kData;
      } else if (chunk_ == ChunkState::kTrailers) {
        if (line->empty()) ended_ = true;
      }
      continue;
    } else if (buffered > kMaxLineBytes) {
      return std::unexpected(Error::Transport("chunk framing line too long"));
    }
    auto n = Fill(deadline(), idle);
    if (!n) return std::unexpected(n.error());
    if (*n == 0) {
      if (framing_ == Framing::kToClose) {
        ended_ = true;
        break;
      }
      return std::unexpected(Error::Transport("connection closed inside the body"));
    }
  }
  return std::string_view{};
}

Result<std::string> HttpStream::ReadAll(size_t limit, std::chrono::milliseconds timeout) {
  std::string body;
  const SteadyTime deadline = SteadyClock::now() + timeout;
  while (body.size() < limit) {
    const auto left = std::chrono::ceil<std::chrono::seconds>(deadline - SteadyClock::now());
    if (left.count() <= 0) return std::unexpected(Error::Transport("reading the body: timed out"));
    auto piece = Read(left);
    if (!piece && piece.error().IsSilent()) {
      return std::unexpected(Error::Transport("reading the body: timed out"));
    }
    if (!piece) return std::unexpected(piece.error());
    if (piece->empty()) break;
    body.append(piece->substr(0, limit - body.size()));
  }
  return body;
}

}  // namespace tpujob::kube
