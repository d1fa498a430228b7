// A small HTTP(S) server for the operator's own endpoints (/metrics, /healthz, /readyz).
//
// Handlers are registered before Start(); each gets the request's path and Authorization header
// and returns the status code, content type and body. Only GET is served.
//
// With TLS files the server speaks HTTPS only (TLS 1.2 or newer). The certificate and key are
// read again when either file changes (checked at most every 10 s, at a handshake), so a
// certificate renewed in a mounted Secret is picked up without a restart; a renewal that cannot
// be read keeps the previous pair and is logged.
//
// The server is an RAII handle: destroying it stops listening. Thread-safety: handlers are called
// on the listener's threads and must be thread-safe themselves.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "kube/error.h"
#include "metrics/tls.h"

namespace tpujob::metrics {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::map<std::string, std::string> headers;  // extra response headers
};

struct HttpRequest {
  std::string path;
  std::string authorization;  // the Authorization header, "" when absent
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

class HttpServer {
 public:
  // `address` is host:port, e.g. "0.0.0.0:8080" or "127.0.0.1:0" (0 picks a free port). With
  // `tls`, the server speaks HTTPS with that certificate and key.
  explicit HttpServer(std::string address, std::optional<TlsFiles> tls = std::nullopt);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void Handle(const std::string& path, HttpHandler handler);
  // For handlers that need nothing from the request.
  void Handle(const std::string& path, std::function<HttpResponse()> handler);

  // Starts listening; an error names the address when it cannot be bound.
  kube::Status Start();
  void Stop();

  // The port actually bound (useful when asked for port 0).
  int port() const { return port_; }

 private:
  class Impl;
  std::string address_;
  std::optional<TlsFiles> tls_;
  int port_ = 0;
  std::map<std::string, HttpHandler> handlers_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpujob::metrics
