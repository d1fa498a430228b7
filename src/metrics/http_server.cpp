// Adapter over cpprestsdk's http_listener; its exceptions stay in this file.
#include "metrics/http_server.h"

#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

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

class HttpServer::Impl {
 public:
  explicit Impl(const std::string& uri) : listener(utility::conversions::to_string_t(uri)) {}
  web::http::experimental::listener::http_listener listener;
};

HttpServer::HttpServer(std::string address) : address_(std::move(address)) {}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Handle(const std::string& path, HttpHandler handler) {
  handlers_[path] = std::move(handler);
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
  try {
    impl_ = std::make_unique<Impl>("http://" + host + ":" + std::to_string(port_));
    auto handlers = handlers_;
    impl_->listener.support(web::http::methods::GET, [handlers](web::http::http_request req) {
      const std::string path = utility::conversions::to_utf8string(req.relative_uri().path());
      auto it = handlers.find(path);
      if (it == handlers.end()) {
        req.reply(web::http::status_codes::NotFound, "not found\n").wait();
        return;
      }
      HttpResponse response = it->second();
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
  spdlog::info("msg=\"serving HTTP\" address={}:{}", host, port_);
  return {};
}

void HttpServer::Stop() {
  if (!impl_) return;
  try {
    impl_->listener.close().wait();
  } catch (const std::exception& e) {
    spdlog::warn("msg=\"closing HTTP listener failed\" error=\"{}\"", e.what());
  }
  impl_.reset();
}

}  // namespace tpujob::metrics
