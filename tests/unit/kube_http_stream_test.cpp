// The watch transport (kube/http_stream.h) against a raw local server that writes the answer
// byte by byte as a test scripts it: HTTP/1.1 framing split at every possible place, bodies that
// break off, refusals, silence and cancellation; and the client's watches on top of it.

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "kube/client.h"
#include "kube/http_stream.h"
#include "kube/resource.h"
#include "loopback_listener.h"

namespace tpujob::kube {
namespace TPUJOB_TEST_NS {

using std::chrono::milliseconds;
using std::chrono::seconds;
using std::chrono::steady_clock;

// Accepts one connection, keeps the request, writes `pieces` one write each (`pause` between
// them), then closes the connection or, with `stay_open`, keeps it open until destroyed.
class ScriptedServer {
 public:
  ScriptedServer(std::vector<std::string> pieces, milliseconds pause, bool stay_open)
      : pieces_(std::move(pieces)) {
    listener_ = test_support::ListenOnLoopback(port_);
    thread_ = std::thread([this, pause, stay_open] { Serve(pause, stay_open); });
  }
  ~ScriptedServer() {
    stop_ = true;
    ::shutdown(listener_, SHUT_RDWR);
    ::close(listener_);
    thread_.join();
    if (conn_ >= 0) ::close(conn_);
  }
  Config ClientConfig(std::string prefix = "") const {
    Config config;
    config.server = "http://127.0.0.1:" + std::to_string(port_) + prefix;
    config.qps = 0;
    return config;
  }
  // The request as received (complete once the first piece was written).
  std::string request() {
    while (!request_done_ && !stop_) std::this_thread::sleep_for(milliseconds(5));
    return request_;
  }

 private:
  void Serve(milliseconds pause, bool stay_open) {
    conn_ = ::accept(listener_, nullptr, nullptr);
    if (conn_ < 0) return;
    if (!test_support::ReadRequestHead(conn_, request_)) return;
    request_done_ = true;
    for (const std::string& piece : pieces_) {
      if (stop_) return;
      if (::send(conn_, piece.data(), piece.size(), MSG_NOSIGNAL) < 0) return;
      if (pause.count() > 0) std::this_thread::sleep_for(pause);
    }
    if (!stay_open) {
      ::close(conn_);
      conn_ = -1;
    }
  }

  std::vector<std::string> pieces_;
  std::string request_;
  std::atomic<bool> request_done_{false};
  int listener_ = -1;
  int conn_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::vector<std::string> OneBytePieces(const std::string& text) {
  std::vector<std::string> pieces;
  for (const char c : text) pieces.emplace_back(1, c);
  return pieces;
}

// Reads the body to its end; an error fails the test.
std::string ReadBody(HttpStream& stream) {
  std::string body;
  while (true) {
    auto piece = stream.Read(seconds(5));
    EXPECT_TRUE(piece.has_value())
        << "after " << body.size() << " bytes: " << piece.error().ToString();
    if (!piece || piece->empty()) return body;
    body.append(*piece);
  }
}

Result<std::unique_ptr<HttpStream>> Open(ScriptedServer& server, const std::string& path,
                                         const std::string& prefix = "") {
  return HttpStream::Get(server.ClientConfig(prefix), nullptr, path,
                         {{"Accept", "application/json"}}, seconds(5));
}

TEST(ServerAddressTest, SchemeHostPortAndPrefix) {
  struct Case {
    std::string server;
    bool tls;
    std::string host, port, authority, prefix;
  };
  const std::vector<Case> cases = {
      {"https://127.0.0.1:6443", true, "127.0.0.1", "6443", "127.0.0.1:6443", ""},
      {"https://kube.example", true, "kube.example", "443", "kube.example", ""},
      {"http://localhost", false, "localhost", "80", "localhost", ""},
      {"https://[::1]:6443/", true, "::1", "6443", "[::1]:6443", ""},
      {"https://[fd00::1]", true, "fd00::1", "443", "[fd00::1]", ""},
      {"https://rancher.example/k8s/clusters/c-1/", true, "rancher.example", "443",
       "rancher.example", "/k8s/clusters/c-1"},
      {"https://user:secret@kube.example:6443", true, "kube.example", "6443", "kube.example:6443",
       ""},
  };
  for (const Case& c : cases) {
    auto address = ParseServerAddress(c.server);
    ASSERT_TRUE(address) << c.server << ": " << address.error().ToString();
    EXPECT_EQ(address->tls, c.tls) << c.server;
    EXPECT_EQ(address->host, c.host) << c.server;
    EXPECT_EQ(address->port, c.port) << c.server;
    EXPECT_EQ(address->authority, c.authority) << c.server;
    EXPECT_EQ(address->prefix, c.prefix) << c.server;
  }
  for (const std::string bad : {"127.0.0.1:6443", "ftp://x", "https://", "https://[::1",
                                "https://host:64x3", "https://[::1]x"}) {
    auto address = ParseServerAddress(bad);
    ASSERT_FALSE(address) << bad << " was accepted";
    EXPECT_EQ(address.error().kind, ErrorKind::kConfig) << bad;
  }
}

TEST(HttpStreamTest, AChunkedBodySplitAtEveryByteReadsWhole) {
  const std::string body = "{\"type\":\"ADDED\"}\n{\"type\":\"MODIFIED\"}\n";
  const std::string answer =
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
      "11;ext=1\r\n" +
      body.substr(0, 17) + "\r\n" + "14\r\n" + body.substr(17) + "\r\n" +
      "0\r\nX-Trailer: yes\r\n\r\n";
  ScriptedServer server(OneBytePieces(answer), milliseconds(0), /*stay_open=*/true);
  auto stream = Open(server, "/api/v1/pods?watch=1", "/prefix");
  ASSERT_TRUE(stream) << stream.error().ToString();
  EXPECT_EQ((*stream)->status(), 200);
  EXPECT_EQ((*stream)->Header("content-type"), "application/json");
  // The last chunk ends the body although the connection stays open.
  EXPECT_EQ(ReadBody(**stream), body);
  const std::string request = server.request();
  EXPECT_TRUE(request.starts_with("GET /prefix/api/v1/pods?watch=1 HTTP/1.1\r\n")) << request;
  EXPECT_NE(request.find("\r\nHost: 127.0.0.1:"), std::string::npos) << request;
  EXPECT_NE(request.find("\r\nAccept: application/json\r\n"), std::string::npos) << request;
}

TEST(HttpStreamTest, SizedAndCloseDelimitedBodies) {
  {
    ScriptedServer server({"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel", "lo"},
                          milliseconds(20), /*stay_open=*/true);
    auto stream = Open(server, "/x");
    ASSERT_TRUE(stream) << stream.error().ToString();
    EXPECT_EQ(ReadBody(**stream), "hello");
  }
  {
    ScriptedServer server({"HTTP/1.0 200 OK\r\n\r\nuntil ", "the end"}, milliseconds(20),
                          /*stay_open=*/false);
    auto stream = Open(server, "/x");
    ASSERT_TRUE(stream) << stream.error().ToString();
    EXPECT_EQ(ReadBody(**stream), "until the end");
  }
}

TEST(HttpStreamTest, ABodyThatBreaksOffOrBreaksTheFramingIsAnError) {
  const std::string head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {head + "10\r\nonly six", "connection closed inside the body"},
      {head + "zz\r\n", "bad chunk size"},
      {head + "3\r\nabcXY\r\n", "chunk not ended by CRLF"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "connection closed inside the body"},
  };
  for (const auto& [answer, expected] : cases) {
    ScriptedServer server({answer}, milliseconds(0), /*stay_open=*/false);
    auto stream = Open(server, "/x");
    ASSERT_TRUE(stream) << stream.error().ToString();
    Result<std::string_view> piece;
    do {
      piece = (*stream)->Read(seconds(5));
    } while (piece && !piece->empty());
    ASSERT_FALSE(piece) << "no error for: " << answer;
    EXPECT_EQ(piece.error().kind, ErrorKind::kTransport);
    EXPECT_NE(piece.error().message.find(expected), std::string::npos)
        << piece.error().message << " for: " << answer;
  }
}

TEST(HttpStreamTest, NoAnswerIsATransportErrorNamingWhatFailed) {
  {  // closed before any response
    ScriptedServer server({}, milliseconds(0), /*stay_open=*/false);
    auto stream = Open(server, "/x");
    ASSERT_FALSE(stream);
    EXPECT_EQ(stream.error().kind, ErrorKind::kTransport);
    EXPECT_NE(stream.error().message.find("closed before a response"), std::string::npos)
        << stream.error().message;
  }
  {  // not HTTP
    ScriptedServer server({"SSH-2.0-OpenSSH\r\n\r\n"}, milliseconds(0), /*stay_open=*/false);
    auto stream = Open(server, "/x");
    ASSERT_FALSE(stream);
    EXPECT_NE(stream.error().message.find("not an HTTP/1.x response"), std::string::npos)
        << stream.error().message;
  }
  {  // nobody listening
    int port = 0;
    const int listener = test_support::ListenOnLoopback(port);
    ::close(listener);
    Config config;
    config.server = "http://127.0.0.1:" + std::to_string(port);
    auto stream = HttpStream::Get(config, nullptr, "/x", {}, seconds(5));
    ASSERT_FALSE(stream);
    EXPECT_NE(stream.error().message.find("cannot connect to 127.0.0.1:"), std::string::npos)
        << stream.error().message;
  }
}

TEST(HttpStreamTest, CancelEndsABlockedReadAtOnce) {
  ScriptedServer server({"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"}, milliseconds(0),
                        /*stay_open=*/true);
  auto stream = Open(server, "/x");
  ASSERT_TRUE(stream) << stream.error().ToString();
  std::thread canceller([&] {
    std::this_thread::sleep_for(milliseconds(200));
    (*stream)->Cancel();
  });
  const auto begin = steady_clock::now();
  auto piece = (*stream)->Read(seconds(0));  // no idle limit: only Cancel ends it
  const auto waited = steady_clock::now() - begin;
  canceller.join();
  ASSERT_FALSE(piece);
  EXPECT_EQ(piece.error().kind, ErrorKind::kCancelled) << piece.error().ToString();
  EXPECT_LT(waited, seconds(5));
  // And every read after it.
  EXPECT_EQ((*stream)->Read(seconds(1)).error().kind, ErrorKind::kCancelled);
}

TEST(HttpStreamTest, NothingWithinTheIdleTimeIsSilent) {
  ScriptedServer server({"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"},
                        milliseconds(0), /*stay_open=*/true);
  auto stream = Open(server, "/x");
  ASSERT_TRUE(stream) << stream.error().ToString();
  auto first = (*stream)->Read(seconds(1));
  ASSERT_TRUE(first) << first.error().ToString();
  EXPECT_EQ(*first, "abc");
  const auto begin = steady_clock::now();
  auto next = (*stream)->Read(seconds(1));
  ASSERT_FALSE(next);
  EXPECT_TRUE(next.error().IsSilent()) << next.error().ToString();
  EXPECT_GE(steady_clock::now() - begin, milliseconds(900));
}

// The client's watch on this transport: events split across chunks, the server's refusal as
// its Status (410 makes the reflector relist), the end of the watch.
TEST(HttpStreamTest, TheClientsWatchDecodesEventsAndReportsRefusals) {
  {
    const std::string events =
        R"({"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"5"}}})"
        "\n"
        R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"6"}}})"
        "\n";
    std::vector<std::string> pieces = {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"};
    for (size_t at = 0; at < events.size(); at += 13) {  // chunks that cut events anywhere
      const std::string part = events.substr(at, 13);
      char size[16];
      std::snprintf(size, sizeof(size), "%zx\r\n", part.size());
      pieces.push_back(size + part + "\r\n");
    }
    pieces.push_back("0\r\n\r\n");
    ScriptedServer server(pieces, milliseconds(1), /*stay_open=*/true);
    auto stream = NewClient(server.ClientConfig())->Watch(Resource::Pods(), "default", {});
    ASSERT_TRUE(stream) << stream.error().ToString();
    auto added = (*stream)->Next();
    ASSERT_TRUE(added && added->has_value());
    EXPECT_EQ((*added)->type, WatchEventType::kAdded);
    EXPECT_EQ((*added)->object["metadata"]["name"], "a");
    auto bookmark = (*stream)->Next();
    ASSERT_TRUE(bookmark && bookmark->has_value());
    EXPECT_EQ((*bookmark)->type, WatchEventType::kBookmark);
    auto end = (*stream)->Next();
    ASSERT_TRUE(end) << end.error().ToString();
    EXPECT_FALSE(end->has_value()) << "the watch did not end with its body";
    EXPECT_NE(server.request().find("GET /api/v1/namespaces/default/pods?watch=1"),
              std::string::npos)
        << server.request();
  }
  {
    const std::string status =
        R"j({"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 1 (20)","reason":"Expired","code":410})j";
    ScriptedServer server({"HTTP/1.1 410 Gone\r\nContent-Type: application/json\r\n"
                           "Content-Length: " +
                           std::to_string(status.size()) + "\r\n\r\n" + status},
                          milliseconds(0), /*stay_open=*/true);
    auto stream = NewClient(server.ClientConfig())->Watch(Resource::Pods(), "default", {});
    ASSERT_FALSE(stream);
    EXPECT_TRUE(stream.error().IsGone()) << stream.error().ToString();
    EXPECT_NE(stream.error().message.find("too old resource version"), std::string::npos);
  }
  {
    ScriptedServer server({"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                           "5\r\n{\"typ\r\n0\r\n\r\n"},
                          milliseconds(0), /*stay_open=*/true);
    auto stream = NewClient(server.ClientConfig())->Watch(Resource::Pods(), "default", {});
    ASSERT_TRUE(stream) << stream.error().ToString();
    auto cut = (*stream)->Next();
    ASSERT_FALSE(cut);
    EXPECT_EQ(cut.error().kind, ErrorKind::kDecode) << cut.error().ToString();
  }
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::kube
