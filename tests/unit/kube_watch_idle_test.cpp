// The real client's watch idle timeout (Config::watch_idle_timeout), against a raw local TCP
// server that streams a watch response and then goes silent without closing: the half-open
// connection a network blip or a load balancer that lost its state leaves behind.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "kube/client.h"
#include "kube/resource.h"
#include "loopback_listener.h"

namespace tpujob::kube {
namespace TPUJOB_TEST_NS {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// Accepts one connection, reads the request, answers 200 with a chunked body and then writes
// one bookmark chunk every `every` for `for_how_long`, after which it stays silent (the socket
// open) until destroyed.
class WatchServer {
 public:
  WatchServer(milliseconds every, milliseconds for_how_long) {
    listener_ = tpujob::test_support::ListenOnLoopback(port_);
    thread_ = std::thread([this, every, for_how_long] { Serve(every, for_how_long); });
  }
  ~WatchServer() {
    stop_ = true;
    ::shutdown(listener_, SHUT_RDWR);
    ::close(listener_);
    thread_.join();
    if (conn_ >= 0) ::close(conn_);
  }
  Config ClientConfig(std::chrono::seconds idle) const {
    Config config;
    config.server = "http://127.0.0.1:" + std::to_string(port_);
    config.qps = 0;
    config.watch_idle_timeout = idle;
    return config;
  }

 private:
  void Serve(milliseconds every, milliseconds for_how_long) {
    conn_ = ::accept(listener_, nullptr, nullptr);
    if (conn_ < 0) return;
    std::string request;
    if (!tpujob::test_support::ReadRequestHead(conn_, request)) return;
    Send("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
    const auto until = steady_clock::now() + for_how_long;
    int rv = 1;
    do {
      const std::string event = R"({"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1",)"
                                R"("metadata":{"resourceVersion":")" +
                                std::to_string(rv++) + "\"}}}\n";
      char size[32];
      std::snprintf(size, sizeof(size), "%zx\r\n", event.size());
      Send(std::string(size) + event + "\r\n");
      std::this_thread::sleep_for(every);
    } while (steady_clock::now() < until && !stop_);
    // Silent from here on, the connection open.
  }
  void Send(const std::string& data) {
    if (::write(conn_, data.data(), data.size()) < 0) return;
  }

  int listener_ = -1;
  int conn_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(KubeWatchIdleTest, ASilentWatchFailsAsSilentAfterTheIdleTimeout) {
  WatchServer server(milliseconds(100), milliseconds(0));  // one bookmark, then silence
  auto client = NewClient(server.ClientConfig(std::chrono::seconds(1)));
  auto stream = client->Watch(Resource::Pods(), "default", WatchOptions{});
  ASSERT_TRUE(stream.has_value()) << stream.error().ToString();
  auto first = (*stream)->Next();
  ASSERT_TRUE(first.has_value()) << first.error().ToString();
  ASSERT_TRUE(first->has_value());
  EXPECT_EQ((*first)->type, WatchEventType::kBookmark);

  const auto begin = steady_clock::now();
  auto next = (*stream)->Next();
  const auto waited = steady_clock::now() - begin;
  ASSERT_FALSE(next.has_value());
  EXPECT_TRUE(next.error().IsSilent()) << next.error().ToString();
  EXPECT_TRUE(next.error().IsRetryable());
  EXPECT_GE(waited, milliseconds(900));
  EXPECT_LT(waited, milliseconds(5000));
}

TEST(KubeWatchIdleTest, AWatchThatKeepsDeliveringIsNeverSilent) {
  // Bookmarks every 300 ms for 2.5 s, more than twice the idle timeout in all.
  WatchServer server(milliseconds(300), milliseconds(2500));
  auto client = NewClient(server.ClientConfig(std::chrono::seconds(1)));
  auto stream = client->Watch(Resource::Pods(), "default", WatchOptions{});
  ASSERT_TRUE(stream.has_value()) << stream.error().ToString();
  int received = 0;
  const auto begin = steady_clock::now();
  while (steady_clock::now() - begin < milliseconds(2200)) {
    auto next = (*stream)->Next();
    ASSERT_TRUE(next.has_value()) << "after " << received << " events: " << next.error().ToString();
    ASSERT_TRUE(next->has_value());
    ++received;
  }
  EXPECT_GE(received, 6);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::kube
