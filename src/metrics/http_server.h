// A small HTTP server for the operator's own endpoints (/metrics, /healthz, /readyz).
//
// Handlers are registered before Start(); each returns the status code, content type and body.
// The server is an RAII handle: destroying it stops listening. Thread-safety: handlers are called
// on the listener's threads and must be thread-safe themselves.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "kube/error.h"

namespace tpujob::metrics {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::map<std::string, std::string> headers;  // extra response headers
};

using HttpHandler = std::function<HttpResponse()>;

class HttpServer {
 public:
  // `address` is host:port, e.g. "0.0.0.0:8080" or "127.0.0.1:0" (0 picks a free port).
  explicit HttpServer(std::string address);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void Handle(const std::string& path, HttpHandler handler);

  // Starts listening; an error names the address when it cannot be bound.
  kube::Status Start();
  void Stop();

  // The port actually bound (useful when asked for port 0).
  int port() const { return port_; }

 private:
  class Impl;
  std::string address_;
  int port_ = 0;
  std::map<std::string, HttpHandler> handlers_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpujob::metrics
