#include "supervisor/progress_metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>

namespace tpujob::supervisor {
namespace {

void AppendFamily(std::string& out, const char* name, const char* type, const char* help,
                  const std::optional<std::string>& value) {
  out += std::string("# HELP ") + name + " " + help + "\n";
  out += std::string("# TYPE ") + name + " " + type + "\n";
  if (value) out += std::string(name) + " " + *value + "\n";
}

std::optional<std::string> Integer(const std::optional<int64_t>& value) {
  if (!value) return std::nullopt;
  return std::to_string(*value);
}

std::string Response(int status, std::string_view reason, std::string_view content_type,
                     std::string_view body) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason) + "\r\n";
  out += "Content-Type: " + std::string(content_type) + "\r\n";
  out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  out += "Connection: close\r\n\r\n";
  out += body;
  return out;
}

}  // namespace

std::string FormatProgressMetrics(const ProgressState& state) {
  std::string out;
  AppendFamily(out, kWorkerStepMetric, "gauge",
               "The last (highest) training step the worker's program reported.",
               Integer(state.step));
  std::optional<int64_t> advanced;
  if (state.step && state.first_step) advanced = *state.step - *state.first_step;
  AppendFamily(out, kWorkerStepsTotalMetric, "counter",
               "Steps the worker's program advanced since it started, from the first step it "
               "reported; rate() is the steps per second.",
               Integer(advanced));
  std::optional<std::string> last_progress;
  if (state.last_progress_time) {
    const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(
                            state.last_progress_time->time_since_epoch())
                            .count();
    char buffer[32];
    std::snprintf(buffer, sizeof(buffer), "%lld.%03lld", static_cast<long long>(millis / 1000),
                  static_cast<long long>(millis % 1000));
    last_progress = buffer;
  }
  AppendFamily(out, kWorkerLastProgressMetric, "gauge",
               "Unix time in seconds of the worker's last progress.", last_progress);
  AppendFamily(out, kWorkerCheckpointStepMetric, "gauge",
               "The step of the last checkpoint the worker's program reported saving.",
               Integer(state.checkpoint));
  return out;
}

std::optional<int> ParseMetricsPort(std::string_view text) {
  int value = 0;
  if (text.empty()) return std::nullopt;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  if (value < 1 || value > 65535) return std::nullopt;
  return value;
}

std::string AnswerRequest(std::string_view request_line, const ProgressState& state) {
  constexpr std::string_view kText = "text/plain; charset=utf-8";
  // METHOD SP TARGET SP VERSION
  const size_t first_space = request_line.find(' ');
  const size_t second_space = first_space == std::string_view::npos
                                  ? std::string_view::npos
                                  : request_line.find(' ', first_space + 1);
  if (second_space == std::string_view::npos ||
      !request_line.substr(second_space + 1).starts_with("HTTP/")) {
    return Response(400, "Bad Request", kText, "bad request\n");
  }
  const std::string_view method = request_line.substr(0, first_space);
  std::string_view target = request_line.substr(first_space + 1, second_space - first_space - 1);
  target = target.substr(0, target.find('?'));
  if (target != "/metrics") return Response(404, "Not Found", kText, "not found\n");
  if (method != "GET") return Response(405, "Method Not Allowed", kText, "use GET\n");
  return Response(200, "OK", "text/plain; version=0.0.4; charset=utf-8",
                  FormatProgressMetrics(state));
}

ProgressMetricsEndpoint::~ProgressMetricsEndpoint() {
  CloseClient();
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

bool ProgressMetricsEndpoint::Listen(int port, std::string* error) {
  const auto fail = [&](const char* call) {
    const int saved = errno;
    *error = "cannot serve the progress metrics on port " + std::to_string(port) + ": " + call +
             ": " + std::strerror(saved) + " (errno " + std::to_string(saved) + ")";
    if (listen_fd_ >= 0) ::close(listen_fd_);
    listen_fd_ = -1;
    return false;
  };
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return fail("socket");
  // A restarted container binds again while the previous one's connections are in TIME_WAIT.
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(listen_fd_, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return fail("bind");
  }
  if (::listen(listen_fd_, 16) != 0) return fail("listen");
  return true;
}

int ProgressMetricsEndpoint::PollFds(pollfd* fds) const {
  if (client_fd_ >= 0) {
    fds[0] = {
        .fd = client_fd_, .events = static_cast<short>(writing_ ? POLLOUT : POLLIN), .revents = 0};
    return 1;
  }
  if (listen_fd_ >= 0) {
    fds[0] = {.fd = listen_fd_, .events = POLLIN, .revents = 0};
    return 1;
  }
  return 0;
}

std::optional<SteadyClock::time_point> ProgressMetricsEndpoint::Deadline() const {
  if (client_fd_ < 0) return std::nullopt;
  return client_deadline_;
}

void ProgressMetricsEndpoint::Service(const pollfd* fds, int count, SteadyClock::time_point now) {
  for (int i = 0; i < count; ++i) {
    if (fds[i].revents == 0) continue;
    if (fds[i].fd == listen_fd_ && client_fd_ < 0) {
      Accept(now);
    } else if (fds[i].fd == client_fd_) {
      if (writing_) {
        Write();
      } else {
        Read();
      }
    }
  }
  if (client_fd_ >= 0 && now >= client_deadline_) CloseClient();
}

void ProgressMetricsEndpoint::Accept(SteadyClock::time_point now) {
  const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) return;  // gone already, or out of fds: the next poll tries again
  client_fd_ = fd;
  client_deadline_ = now + kRequestDeadline;
  request_.clear();
  response_.clear();
  sent_ = 0;
  writing_ = false;
  Read();  // the request has often arrived with the connection
}

void ProgressMetricsEndpoint::Read() {
  char buffer[2048];
  for (;;) {
    const ssize_t n = ::recv(client_fd_, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {  // closed before a whole request, or an error
      CloseClient();
      return;
    }
    request_.append(buffer, static_cast<size_t>(std::min<size_t>(static_cast<size_t>(n),
                                                                 kMaxRequest - request_.size())));
    // The headers end with an empty line; only the request line matters.
    const bool complete = request_.find("\r\n\r\n") != std::string::npos ||
                          request_.find("\n\n") != std::string::npos;
    if (complete || request_.size() >= kMaxRequest) {
      std::string_view line = std::string_view(request_).substr(0, request_.find('\n'));
      if (line.ends_with('\r')) line.remove_suffix(1);
      Respond(complete ? line : std::string_view());
      return;
    }
  }
}

void ProgressMetricsEndpoint::Respond(std::string_view request_line) {
  response_ = AnswerRequest(request_line, tracker_->State(SteadyClock::now()));
  sent_ = 0;
  writing_ = true;
  Write();
}

void ProgressMetricsEndpoint::Write() {
  while (sent_ < response_.size()) {
    const ssize_t n =
        ::send(client_fd_, response_.data() + sent_, response_.size() - sent_, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // POLLOUT, until the deadline
    if (n < 0) break;
    sent_ += static_cast<size_t>(n);
  }
  CloseClient();
}

void ProgressMetricsEndpoint::CloseClient() {
  if (client_fd_ >= 0) {
    ::shutdown(client_fd_, SHUT_WR);
    ::close(client_fd_);
  }
  client_fd_ = -1;
  writing_ = false;
  request_.clear();
  response_.clear();
}

}  // namespace tpujob::supervisor
