// LogCapture: what spdlog's default logger writes, captured for assertions.
#pragma once

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "base/logging.h"

namespace tpujob {

// Replaces the default logger while it lives (restoring the previous one and the previous
// format on destruction) with one that keeps every line as the operator writes it in `format`
// ("ts=... level=<level> msg=...\n" by default), at level info and above. Lines may come from
// any thread.
class LogCapture {
 public:
  explicit LogCapture(log::Format format = log::Format::kLogfmt)
      : previous_(spdlog::default_logger()),
        previous_format_(log::CurrentFormat()),
        sink_(std::make_shared<Sink>()) {
    auto logger = std::make_shared<spdlog::logger>("capture", sink_);
    logger->set_pattern(log::Pattern(format), spdlog::pattern_time_type::utc);
    logger->set_level(spdlog::level::info);
    log::SetFormat(format);
    spdlog::set_default_logger(logger);
  }
  ~LogCapture() {
    spdlog::set_default_logger(previous_);
    log::SetFormat(previous_format_);
  }

  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // Everything logged so far.
  std::string text() const {
    std::lock_guard<std::mutex> lock(sink_->mu);
    return sink_->text;
  }

  // Blocks until a line containing `needle` was logged or `timeout` passed; returns whether it
  // was. For lines written by another thread.
  bool AwaitLine(const std::string& needle,
                 std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock(sink_->mu);
    return sink_->logged.wait_for(lock, timeout,
                                  [&] { return sink_->text.find(needle) != std::string::npos; });
  }

 private:
  struct Sink : spdlog::sinks::base_sink<std::mutex> {
    void sink_it_(const spdlog::details::log_msg& message) override {
      spdlog::memory_buf_t formatted;
      formatter_->format(message, formatted);
      {
        std::lock_guard<std::mutex> lock(mu);
        text.append(formatted.data(), formatted.size());
      }
      logged.notify_all();
    }
    void flush_() override {}

    std::mutex mu;
    std::condition_variable logged;
    std::string text;
  };

  std::shared_ptr<spdlog::logger> previous_;
  log::Format previous_format_;
  std::shared_ptr<Sink> sink_;
};

}  // namespace tpujob
