// Adapter over cpprestsdk's http_listener; its exceptions stay in this file.
#include "metrics/http_server.h"

#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <vector>

#include "base/logging.h"
#include "kube/client.h"

// cpprestsdk's `U` macro breaks fmt when it comes first: keep it last.
// clang-format off
#include <cpprest/http_listener.h>
// clang-format on

namespace tpujob::metrics {
namespace {

// Finds a free port for "port 0" requests: http_listener cannot report the port it bound.
int PickFreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  int port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

}  // namespace

// The certificate and key of an HTTPS listener, handed to every handshake and read again when
// their files change. Outside the anonymous namespace because HttpServer::Impl holds one (GCC's
// -Wsubobject-linkage when this file is compiled in a batch).
class CertificateReloader {
 public:
  explicit CertificateReloader(TlsFiles files) : files_(std::move(files)) {}
  ~CertificateReloader() { Clear(); }

  kube::Status Load() {
    std::lock_guard<std::mutex> guard(mu_);
    return LoadLocked();
  }

  // OpenSSL's certificate callback: runs at every handshake, before the certificate is sent.
  static int OnHandshake(SSL* ssl, void* arg) {
    return static_cast<CertificateReloader*>(arg)->Apply(ssl) ? 1 : 0;
  }

 private:
  static struct timespec ModifiedAt(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return {};
    return st.st_mtim;
  }
  static bool Same(const struct timespec& a, const struct timespec& b) {
    return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
  }

  bool Apply(SSL* ssl) {
    std::lock_guard<std::mutex> guard(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_check_) {
      next_check_ = now + files_.reload_interval;
      if (!Same(ModifiedAt(files_.cert_file), cert_modified_) ||
          !Same(ModifiedAt(files_.key_file), key_modified_)) {
        if (auto reloaded = LoadLocked(); !reloaded) {
          log::Warn("keeping the previous TLS certificate",
                    {{"file", files_.cert_file}, {"error", reloaded.error().message}});
        } else {
          log::Info("TLS certificate reloaded", {{"file", files_.cert_file}});
        }
      }
    }
    if (chain_.empty() || key_ == nullptr) return false;
    if (SSL_use_certificate(ssl, chain_.front()) != 1 || SSL_use_PrivateKey(ssl, key_) != 1) {
      return false;
    }
    for (std::size_t i = 1; i < chain_.size(); ++i) SSL_add1_chain_cert(ssl, chain_[i]);
    return true;
  }

  // Replaces the pair only when both files read and match.
  kube::Status LoadLocked() {
    const auto cert_modified = ModifiedAt(files_.cert_file);
    const auto key_modified = ModifiedAt(files_.key_file);
    std::vector<X509*> chain;
    EVP_PKEY* key = nullptr;
    auto fail = [&](const std::string& message) {
      for (X509* c : chain) X509_free(c);
      EVP_PKEY_free(key);
      ERR_clear_error();
      return std::unexpected(kube::Error::Config(message));
    };
    if (std::FILE* in = std::fopen(files_.cert_file.c_str(), "r")) {
      while (X509* cert = PEM_read_X509(in, nullptr, nullptr, nullptr)) chain.push_back(cert);
      std::fclose(in);
    }
    if (chain.empty()) return fail(files_.cert_file + " holds no PEM certificate");
    if (std::FILE* in = std::fopen(files_.key_file.c_str(), "r")) {
      key = PEM_read_PrivateKey(in, nullptr, nullptr, nullptr);
      std::fclose(in);
    }
    if (key == nullptr) return fail(files_.key_file + " holds no PEM private key");
    if (X509_check_private_key(chain.front(), key) != 1) {
      return fail(files_.key_file + " does not match " + files_.cert_file);
    }
    // Reading PEM until the end leaves "no start line" on this thread's OpenSSL error queue;
    // clear it so no later OpenSSL call on the thread mistakes it for its own error.
    ERR_clear_error();
    Clear();
    chain_ = std::move(chain);
    key_ = key;
    cert_modified_ = cert_modified;
    key_modified_ = key_modified;
    return {};
  }

  void Clear() {
    for (X509* c : chain_) X509_free(c);
    chain_.clear();
    EVP_PKEY_free(key_);
    key_ = nullptr;
  }

  const TlsFiles files_;
  std::mutex mu_;
  std::vector<X509*> chain_;  // guarded by mu_; leaf first
  EVP_PKEY* key_ = nullptr;   // guarded by mu_
  struct timespec cert_modified_ {};
  struct timespec key_modified_ {};
  std::chrono::steady_clock::time_point next_check_{};
};

class HttpServer::Impl {
 public:
  Impl(const std::string& uri,
       const web::http::experimental::listener::http_listener_config& config)
      : listener(utility::conversions::to_string_t(uri), config) {}
  std::shared_ptr<CertificateReloader> certificates;  // outlives the listener's contexts
  web::http::experimental::listener::http_listener listener;
};

HttpServer::HttpServer(std::string address, std::optional<TlsFiles> tls)
    : address_(std::move(address)), tls_(std::move(tls)) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Handle(const std::string& path, HttpHandler handler) {
  handlers_[path] = std::move(handler);
}

void HttpServer::Handle(const std::string& path, std::function<HttpResponse()> handler) {
  handlers_[path] = [handler = std::move(handler)](const HttpRequest&) { return handler(); };
}

kube::Status HttpServer::Start() {
  const auto colon = address_.rfind(':');
  if (colon == std::string::npos) {
    return std::unexpected(
        kube::Error::Config("listen address \"" + address_ + "\" is not host:port"));
  }
  std::string host = address_.substr(0, colon);
  if (host.empty()) host = "0.0.0.0";
  try {
    port_ = std::stoi(address_.substr(colon + 1));
  } catch (const std::exception&) {
    return std::unexpected(
        kube::Error::Config("listen address \"" + address_ + "\" has no valid port"));
  }
  if (port_ == 0) port_ = PickFreePort();
  std::shared_ptr<CertificateReloader> certificates;
  web::http::experimental::listener::http_listener_config config;
  if (tls_) {
    kube::KeepOpenSslUntilExit();
    certificates = std::make_shared<CertificateReloader>(*tls_);
    if (auto loaded = certificates->Load(); !loaded) return loaded;
    config.set_ssl_context_callback([certificates](boost::asio::ssl::context& context) {
      context.set_options(
          boost::asio::ssl::context::default_workarounds | boost::asio::ssl::context::no_sslv2 |
          boost::asio::ssl::context::no_sslv3 | boost::asio::ssl::context::no_tlsv1 |
          boost::asio::ssl::context::no_tlsv1_1);
      SSL_CTX_set_cert_cb(context.native_handle(), &CertificateReloader::OnHandshake,
                          certificates.get());
    });
  }
  const std::string scheme = tls_ ? "https" : "http";
  try {
    impl_ = std::make_unique<Impl>(scheme + "://" + host + ":" + std::to_string(port_), config);
    impl_->certificates = certificates;
    auto handlers = handlers_;
    impl_->listener.support(web::http::methods::GET, [handlers](web::http::http_request req) {
      HttpRequest request;
      request.path = utility::conversions::to_utf8string(req.relative_uri().path());
      auto it = handlers.find(request.path);
      if (it == handlers.end()) {
        req.reply(web::http::status_codes::NotFound, "not found\n").wait();
        return;
      }
      if (auto header = req.headers().find(U("Authorization")); header != req.headers().end()) {
        request.authorization = utility::conversions::to_utf8string(header->second);
      }
      HttpResponse response = it->second(request);
      web::http::http_response reply(static_cast<web::http::status_code>(response.status));
      reply.set_body(response.body, response.content_type);
      for (const auto& [name, value] : response.headers) {
        reply.headers().add(utility::conversions::to_string_t(name),
                            utility::conversions::to_string_t(value));
      }
      req.reply(reply).wait();
    });
    impl_->listener.open().wait();
  } catch (const std::exception& e) {
    impl_.reset();
    return std::unexpected(kube::Error::Config("cannot listen on " + address_ + ": " + e.what()));
  }
  log::Info(tls_ ? "serving HTTPS" : "serving HTTP",
            {{"address", host + ":" + std::to_string(port_)}});
  return {};
}

void HttpServer::Stop() {
  if (!impl_) return;
  try {
    impl_->listener.close().wait();
  } catch (const std::exception& e) {
    log::Warn("closing HTTP listener failed", {{"error", e.what()}});
  }
  impl_.reset();
}

}  // namespace tpujob::metrics
