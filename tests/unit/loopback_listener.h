// A listening TCP socket on 127.0.0.1 and a free port, for the unit tests that play an HTTP
// server byte by byte (watch silences, streamed bodies).
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace tpujob::test_support {

// Returns the listening socket and sets `port`; failures are test failures.
inline int ListenOnLoopback(int& port) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  EXPECT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(::listen(listener, 4), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  port = ntohs(addr.sin_port);
  return listener;
}

// Reads from `conn` into `request` up to the end of the request's headers; false when the
// connection ended first.
inline bool ReadRequestHead(int conn, std::string& request) {
  char buf[4096];
  while (request.find("\r\n\r\n") == std::string::npos) {
    const ssize_t n = ::read(conn, buf, sizeof(buf));
    if (n <= 0) return false;
    request.append(buf, static_cast<size_t>(n));
  }
  return true;
}

}  // namespace tpujob::test_support
