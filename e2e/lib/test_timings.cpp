// Each end-to-end test's shard, start and end, for the time table at the end of `make test`
// (scripts/test-report.py): when $TPUJOB_E2E_TIMINGS names a file, every test appends one line
//   SUITE.NAME <tab> SHARD <tab> START <tab> END <tab> passed|failed
// to it (times in seconds since the epoch, with milliseconds; SHARD is the shard's number, "real"
// for the tests that hold the real node, "-" for a test run outside ctest's allocation). Lines
// are written with one append each, so the tests of every shard can share the file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "e2e_env.h"

namespace tpujob::e2e {
namespace {

double EpochSeconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

class TimingListener : public ::testing::EmptyTestEventListener {
 public:
  explicit TimingListener(std::string path) : path_(std::move(path)) {}

  void OnTestStart(const ::testing::TestInfo&) override { start_ = EpochSeconds(); }

  void OnTestEnd(const ::testing::TestInfo& info) override {
    const char* group = std::getenv("CTEST_RESOURCE_GROUP_0");
    const std::string shard = ShardId() > 0 ? std::to_string(ShardId())
                              : group != nullptr && std::string(group) == "realnode" ? "real"
                                                                                     : "-";
    char line[1024];
    const int n = std::snprintf(line, sizeof line, "%s.%s\t%s\t%.3f\t%.3f\t%s\n",
                                info.test_suite_name(), info.name(), shard.c_str(), start_,
                                EpochSeconds(), info.result()->Passed() ? "passed" : "failed");
    if (n <= 0 || static_cast<size_t>(n) >= sizeof line) return;
    const int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    [[maybe_unused]] const ssize_t written = ::write(fd, line, static_cast<size_t>(n));
    ::close(fd);
  }

 private:
  std::string path_;
  double start_ = 0;
};

// Registered before main() runs the tests (gtest_main): listeners may be added at any time
// before RUN_ALL_TESTS.
const bool registered = [] {
  const char* path = std::getenv("TPUJOB_E2E_TIMINGS");
  if (path == nullptr || *path == '\0') return false;
  ::testing::UnitTest::GetInstance()->listeners().Append(new TimingListener(path));
  return true;
}();

}  // namespace
}  // namespace tpujob::e2e
