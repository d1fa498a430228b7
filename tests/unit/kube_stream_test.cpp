// The streamed GET (kube/stream.h), against a raw local TCP server: the request it
// sends (path, query, verb, Accept) and the body handed over in the chunks the server writes, up to
// its end; a refusal comes back as the server's error.

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "kube/resource.h"
#include "kube/stream.h"
#include "loopback_listener.h"

namespace tpujob::kube {
namespace TPUJOB_TEST_NS {

using ::testing::HasSubstr;

// Accepts one connection, keeps the request, and answers with `head` followed by each of
// `chunks` as one HTTP chunk, 50 ms apart, then the last chunk.
class StreamServer {
 public:
  StreamServer(std::string head, std::vector<std::string> chunks) {
    listener_ = tpujob::test_support::ListenOnLoopback(port_);
    thread_ = std::thread(
        [this, head = std::move(head), chunks = std::move(chunks)] { Serve(head, chunks); });
  }
  ~StreamServer() {
    ::shutdown(listener_, SHUT_RDWR);
    ::close(listener_);
    thread_.join();
    if (conn_ >= 0) ::close(conn_);
  }
  Config ClientConfig() const {
    Config config;
    config.server = "http://127.0.0.1:" + std::to_string(port_);
    config.max_retries = 0;
    return config;
  }
  // The request as received (after the body was served).
  const std::string& request() const { return request_; }

 private:
  void Serve(const std::string& head, const std::vector<std::string>& chunks) {
    conn_ = ::accept(listener_, nullptr, nullptr);
    if (conn_ < 0) return;
    if (!tpujob::test_support::ReadRequestHead(conn_, request_)) return;
    Send(head);
    for (const std::string& chunk : chunks) {
      char size[32];
      std::snprintf(size, sizeof(size), "%zx\r\n", chunk.size());
      Send(std::string(size) + chunk + "\r\n");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (head.find("chunked") != std::string::npos) Send("0\r\n\r\n");
  }
  void Send(const std::string& data) {
    // MSG_NOSIGNAL: a client that gave up must not end the test with SIGPIPE.
    if (::send(conn_, data.data(), data.size(), MSG_NOSIGNAL) < 0) return;
  }

  int listener_ = -1;
  int conn_ = -1;
  int port_ = 0;
  std::string request_;
  std::thread thread_;
};

constexpr const char* kChunkedHead =
    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n";

TEST(KubeStreamTest, StreamsTheBodyAsItComesUntilItsEnd) {
  std::string body;
  std::string request;
  {
    StreamServer server(kChunkedHead, {"step 1\nst", "ep 2\n", "done\n"});
    auto stream = StreamGet(server.ClientConfig(), Resource::Pods(), "ml", "job-worker-0", "log",
                            {{"container", "trainer"}, {"follow", "true"}, {"sinceSeconds", "60"}});
    ASSERT_TRUE(stream.has_value()) << stream.error().ToString();
    while (true) {
      auto chunk = (*stream)->Read();
      ASSERT_TRUE(chunk.has_value()) << chunk.error().ToString();
      if (!chunk->has_value()) break;
      body += **chunk;
    }
    // Reading after the end keeps saying so.
    auto again = (*stream)->Read();
    ASSERT_TRUE(again.has_value());
    EXPECT_FALSE(again->has_value());
    stream->reset();
    request = server.request();
  }
  EXPECT_EQ(body, "step 1\nstep 2\ndone\n");
  EXPECT_THAT(request, HasSubstr("GET /api/v1/namespaces/ml/pods/job-worker-0/log?"
                                 "container=trainer&follow=true&sinceSeconds=60 HTTP/1.1"));
  EXPECT_THAT(request, HasSubstr("Accept:*/*\r\n"));  // cpprestsdk writes no space
}

TEST(KubeStreamTest, ARefusalIsTheServersError) {
  const std::string status =
      R"({"kind":"Status","apiVersion":"v1","status":"Failure","message":"container \"trainer\")"
      R"( in pod \"p\" is waiting to start: ContainerCreating","reason":"BadRequest","code":400})";
  StreamServer server(
      "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
          std::to_string(status.size()) + "\r\n\r\n" + status,
      {});
  auto stream = StreamGet(server.ClientConfig(), Resource::Pods(), "ml", "p", "log",
                          {{"container", "trainer"}});
  ASSERT_FALSE(stream.has_value());
  EXPECT_EQ(stream.error().http_status, 400);
  EXPECT_THAT(stream.error().message, HasSubstr("is waiting to start"));
}

TEST(KubeStreamTest, GetTextReadsABoundedAnswerWhole) {
  StreamServer server(kChunkedHead, {"2026-01-01T00:00:00Z completed step: 1\n",
                                     "2026-01-01T00:00:01Z completed step: 2\n"});
  auto text = GetText(server.ClientConfig(), Resource::Pods(), "ml", "p", "log",
                      {{"container", "trainer"}, {"timestamps", "true"}, {"tailLines", "200"}},
                      std::chrono::seconds(30));
  ASSERT_TRUE(text.has_value()) << text.error().ToString();
  EXPECT_EQ(*text,
            "2026-01-01T00:00:00Z completed step: 1\n2026-01-01T00:00:01Z completed step: 2\n");
  EXPECT_THAT(server.request(), HasSubstr("/log?container=trainer&timestamps=true&tailLines=200"));
}

// A body that keeps trickling (50 ms a piece, 3 s in all) is given up at the timeout, not read to
// its end: a kubelet that streams forever cannot hold the reader.
TEST(KubeStreamTest, GetTextGivesUpABodyThatDoesNotEnd) {
  StreamServer server(kChunkedHead, std::vector<std::string>(60, "x\n"));
  auto text = GetText(server.ClientConfig(), Resource::Pods(), "ml", "p", "log", {},
                      std::chrono::milliseconds(300));
  // Read to its end, it would have been a text.
  ASSERT_FALSE(text.has_value());
  EXPECT_THAT(text.error().ToString(), HasSubstr("no end of log of p"));
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::kube
