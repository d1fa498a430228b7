// The operator's log lines as a log pipeline sees them: `run --log-format` on the real binary,
// and the check of every line the end-to-end suite's operators wrote.
//
// OperatorLogFiles.EveryLineTheEndToEndSuiteWrote reads the directory in
// $TPUJOB_OPERATOR_LOG_DIR (the e2e cluster directory; ctest's e2e_operator_logs sets it and runs
// it after the end-to-end tests) and is skipped without it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "log_line_parser.h"

namespace tpujob {
namespace TPUJOB_TEST_NS {

using ::testing::HasSubstr;
using ::testing::SizeIs;

namespace fs = std::filesystem;

struct CommandOutput {
  int exit_code = -1;
  std::vector<std::string> lines;  // stdout and stderr together
};

// Runs the operator binary with `args` in an empty environment.
CommandOutput RunOperator(const std::string& args) {
  const std::string command =
      std::string("env -i PATH=/usr/bin:/bin ") + TPUJOB_OPERATOR_BINARY + " " + args + " 2>&1";
  CommandOutput out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  std::string text;
  char buffer[4096];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) text.append(buffer, n);
  const int status = ::pclose(pipe);
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) out.lines.push_back(line);
  return out;
}

class OperatorLogsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tpujob-operator-logs-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Write(const fs::path& relative, const std::string& text) {
    fs::create_directories((dir_ / relative).parent_path());
    std::ofstream(dir_ / relative, std::ios::binary) << text;
  }

  fs::path dir_;
};

TEST_F(OperatorLogsTest, RunLogsStrictLogfmtByDefault) {
  const CommandOutput out = RunOperator("run --kubeconfig " + (dir_ / "missing").string());
  EXPECT_EQ(out.exit_code, 1);
  ASSERT_THAT(out.lines, SizeIs(1));
  auto parsed = testing::ParseLogfmtLine(out.lines[0]);
  ASSERT_TRUE(parsed.has_value()) << parsed.error() << "\n" << out.lines[0];
  EXPECT_EQ((*parsed)[1].second, "error");
  EXPECT_EQ((*parsed)[2].second, "cannot load the Kubernetes configuration");
}

TEST_F(OperatorLogsTest, RunLogFormatJson) {
  const CommandOutput out =
      RunOperator("run --log-format json --kubeconfig '" + (dir_ / "missing \"x\"").string() + "'");
  EXPECT_EQ(out.exit_code, 1);
  ASSERT_THAT(out.lines, SizeIs(1));
  auto parsed = testing::ParseJsonLine(out.lines[0]);
  ASSERT_TRUE(parsed.has_value()) << parsed.error() << "\n" << out.lines[0];
  EXPECT_EQ((*parsed)["level"], "error");
  EXPECT_EQ((*parsed)["msg"], "cannot load the Kubernetes configuration");
  ASSERT_TRUE((*parsed)["error"].is_string());
  EXPECT_THAT((*parsed)["error"].get<std::string>(), HasSubstr("missing"));
}

TEST_F(OperatorLogsTest, RunRefusesAnUnknownLogFormat) {
  const CommandOutput out = RunOperator("run --log-format yaml --kubeconfig /nonexistent");
  EXPECT_EQ(out.exit_code, 2);
  ASSERT_THAT(out.lines, SizeIs(1));
  EXPECT_EQ(out.lines[0], R"(error: unknown --log-format "yaml" (want logfmt or json))");
}

// The e2e check finds operator logs at any depth by name, and reports each bad line with its
// file and number; the line the reflector used to write fails it.
TEST_F(OperatorLogsTest, CheckerFindsOperatorLogsAndReportsBadLines) {
  const std::string good =
      "ts=2024-05-01T12:00:00.000Z level=info msg=\"caches synced\" pods=1 nodes=2 tpujobs=0\n";
  Write("operator-1234.log", good + good);
  Write("chart-operator-99.log", good);
  Write("preflight-ns-pod/operator-preflight.log",
        good + "ts=2024-05-01T12:00:00.000Z level=warning reflector pods: list failed: EOF\n" +
            "{\"ts\":\"2024-05-01T12:00:00.000Z\",\"level\":\"info\",\"msg\":\"x\"}\n");
  Write("operator-1234.log.stacks", "Thread 1 (LWP 1):\n");
  Write("logs/kube-apiserver.log", "I0501 12:00:00.000000 1 server.go:1] not logfmt\n");
  Write("prometheus.log", "not logfmt\n");

  const std::vector<fs::path> files = testing::OperatorLogFiles(dir_);
  ASSERT_THAT(files, SizeIs(3));
  std::vector<testing::BadLogLine> bad;
  size_t lines = 0;
  for (const fs::path& file : files) lines += testing::CheckLogFile(file, bad);
  EXPECT_EQ(lines, 6u);
  ASSERT_THAT(bad, SizeIs(1));
  EXPECT_EQ(bad[0].file, (dir_ / "preflight-ns-pod/operator-preflight.log").string());
  EXPECT_EQ(bad[0].line_number, 2u);
  EXPECT_THAT(bad[0].line, HasSubstr("reflector pods: list failed"));
}

TEST(OperatorLogFiles, EveryLineTheEndToEndSuiteWrote) {
  const char* dir = std::getenv("TPUJOB_OPERATOR_LOG_DIR");
  if (dir == nullptr || *dir == 0) GTEST_SKIP() << "TPUJOB_OPERATOR_LOG_DIR is not set";
  const std::vector<fs::path> files = testing::OperatorLogFiles(dir);
  std::vector<testing::BadLogLine> bad;
  size_t lines = 0;
  for (const fs::path& file : files) lines += testing::CheckLogFile(file, bad);
  std::printf("checked %zu lines in %zu operator log files under %s\n", lines, files.size(), dir);
  std::string report;
  for (size_t i = 0; i < bad.size() && i < 50; ++i) {
    report += bad[i].file + ":" + std::to_string(bad[i].line_number) + ": " + bad[i].why +
              "\n    " + bad[i].line + "\n";
  }
  if (bad.size() > 50) report += "... and " + std::to_string(bad.size() - 50) + " more\n";
  EXPECT_TRUE(bad.empty()) << bad.size() << " lines are not strict logfmt or JSON:\n" << report;
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob
