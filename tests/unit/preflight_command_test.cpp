// The real `tpujob-operator preflight` binary, end to end: flags and environment in, exit code,
// log lines and report file out.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "log_line_parser.h"
#include "preflight/report.h"
#include "preflight_test_util.h"

namespace tpujob::preflight {
namespace TPUJOB_TEST_NS {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;

struct Outcome {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

class PreflightCommandTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    testing::TempDirTest::SetUp();
    report_ = Path("termination-log");
    volume_ = Path("volume");
    std::filesystem::create_directories(volume_);
    dev_ = MakeFakeDev();
  }

  // Runs `argv` with exactly `env` as its environment (nothing inherited, so the developer's
  // or CI's variables cannot leak in).
  Outcome Run(const std::vector<std::string>& argv,
              const std::map<std::string, std::string>& env = {}) {
    const std::string output_path = Path("output");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, output_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    std::vector<std::string> env_strings;
    for (const auto& [name, value] : env) env_strings.push_back(name + "=" + value);
    std::vector<char*> c_argv, c_env;
    for (const std::string& arg : argv) c_argv.push_back(const_cast<char*>(arg.c_str()));
    for (const std::string& var : env_strings) c_env.push_back(const_cast<char*>(var.c_str()));
    c_argv.push_back(nullptr);
    c_env.push_back(nullptr);

    Outcome outcome;
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, c_argv[0], &actions, nullptr, c_argv.data(), c_env.data());
    posix_spawn_file_actions_destroy(&actions);
    EXPECT_EQ(rc, 0) << "cannot start " << argv[0];
    if (rc != 0) return outcome;
    int status = 0;
    EXPECT_EQ(waitpid(pid, &status, 0), pid);
    outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::ifstream in(output_path);
    std::stringstream text;
    text << in.rdbuf();
    outcome.output = text.str();
    return outcome;
  }

  // `tpujob-operator preflight` with every threshold met on this machine (tiny minimums, the
  // fake /dev, localhost as the only peer), followed by `extra`.
  Outcome Preflight(const std::vector<std::string>& extra = {},
                    const std::map<std::string, std::string>& env = {{"NODE_NAME", "node-a"}}) {
    std::vector<std::string> argv = {TPUJOB_OPERATOR_BINARY, "preflight", "--report-file",  report_,
                                     "--dev-root",           dev_,        "--chips",        "4",
                                     "--hostnames",          "localhost", "--dns-timeout",  "0",
                                     "--root-path",          volume_,     "--shm-path",     volume_,
                                     "--cache-path",         volume_,     "--root-min-gb",  "0",
                                     "--shm-min-gb",         "0",         "--cache-min-gb", "0",
                                     "--memlock-min-kb",     "0",         "--nofile-min",   "0",
                                     "--stack-min-kb",       "0",         "--nproc-min",    "0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return Run(argv, env);
  }

  Report ReadReport() {
    std::ifstream in(report_);
    std::stringstream text;
    text << in.rdbuf();
    EXPECT_LE(text.str().size(), kTerminationMessageLimit);
    std::optional<Report> report = ParseReport(text.str());
    EXPECT_TRUE(report.has_value()) << "report: " << text.str();
    return report.value_or(Report{});
  }

  static const ItemResult* Find(const Report& report, std::string_view item) {
    for (const ItemResult& r : report.items) {
      if (r.item == item) return &r;
    }
    return nullptr;
  }

  // The log line of `item`, or "" when there is none.
  static std::string ItemLine(const std::string& output, const std::string& item) {
    std::istringstream lines(output);
    std::string line;
    const std::string key = "msg=\"preflight\" item=" + item + " ";
    while (std::getline(lines, line)) {
      if (line.find(key) != std::string::npos) return line;
    }
    return "";
  }

  std::string report_, volume_, dev_;
};

// By default the items of docs/preflight.md without ulimit (checked only for a
// high-speed network, which the operator asks for with --checks); a cache path with no volume
// is skipped with an item line saying so.
TEST_F(PreflightCommandTest, DefaultChecksLeaveOutUlimitAndSkipAMissingCache) {
  const Outcome out = Preflight({"--cache-path", volume_ + "/no-such-volume"});
  ASSERT_EQ(out.exit_code, 0) << out.output;
  EXPECT_EQ(ItemLine(out.output, "item=ulimit"), "") << out.output;
  EXPECT_THAT(ItemLine(out.output, "accelerator"), HasSubstr("verdict=pass"));
  const std::string cache = ItemLine(out.output, "\"disk-size cache\"");
  EXPECT_THAT(cache, HasSubstr("verdict=skip")) << out.output;
  EXPECT_THAT(cache, HasSubstr("does not exist (no volume mounted)")) << cache;
  const Report report = ReadReport();
  const ItemResult* item = Find(report, "disk-size cache");
  ASSERT_NE(item, nullptr);
  EXPECT_TRUE(item->passed);
  EXPECT_TRUE(item->skipped);

  const Outcome absent = Preflight({"--cache-volume", "absent"});
  ASSERT_EQ(absent.exit_code, 0) << absent.output;
  EXPECT_THAT(ItemLine(absent.output, "\"disk-size cache\""),
              HasSubstr("message=\"not checked: the pod mounts no volume at " + volume_));
}

TEST_F(PreflightCommandTest, AllItemsPassExitsZero) {
  const Outcome out = Preflight({"--checks", "dns,disk,ulimit,accelerator"});
  ASSERT_EQ(out.exit_code, 0) << out.output;
  for (const char* item : {"\"disk-size root\"", "\"disk-size shm\"", "\"disk-size cache\"",
                           "ulimit", "accelerator", "dns"}) {
    const std::string line = ItemLine(out.output, item);
    EXPECT_THAT(line, HasSubstr("level=info")) << item << "\n" << out.output;
    EXPECT_THAT(line, HasSubstr("verdict=pass")) << item;
  }
  EXPECT_THAT(ItemLine(out.output, "\"disk-size root\""),
              HasSubstr("path=" + volume_ + " value_gb="));
  EXPECT_THAT(ItemLine(out.output, "accelerator"), HasSubstr("tpu=4 accel=4 vfio=1"));

  const Report report = ReadReport();
  EXPECT_EQ(report.verdict, Verdict::kPass);
  EXPECT_EQ(report.node, "node-a");
  EXPECT_THAT(report.items, SizeIs(6));
}

TEST_F(PreflightCommandTest, NodeFaultExits10AndTheReportListsConfigFailuresToo) {
  const Outcome out = Preflight({"--chips", "8", "--shm-min-gb", "1000000"});
  ASSERT_EQ(out.exit_code, 10) << out.output;
  EXPECT_THAT(ItemLine(out.output, "accelerator"), HasSubstr("level=warn"));
  EXPECT_THAT(ItemLine(out.output, "accelerator"), HasSubstr("verdict=fail fault=node"));
  EXPECT_THAT(ItemLine(out.output, "\"disk-size shm\""), HasSubstr("verdict=fail fault=config"));

  const Report report = ReadReport();
  EXPECT_EQ(report.verdict, Verdict::kNodeFault);
  ASSERT_NE(Find(report, "accelerator"), nullptr);
  EXPECT_EQ(Find(report, "accelerator")->fault, Fault::kNode);
  EXPECT_EQ(Find(report, "accelerator")->threshold, "tpu>=8");
  ASSERT_NE(Find(report, "disk-size shm"), nullptr);
  EXPECT_EQ(Find(report, "disk-size shm")->fault, Fault::kConfig);
  EXPECT_TRUE(Find(report, "dns")->passed);
}

TEST_F(PreflightCommandTest, ConfigurationFaultExits11) {
  const Outcome out = Preflight({"--shm-min-gb", "1000000"});
  ASSERT_EQ(out.exit_code, 11) << out.output;
  const Report report = ReadReport();
  EXPECT_EQ(report.verdict, Verdict::kConfigFault);
  EXPECT_THAT(Find(report, "disk-size shm")->message, HasSubstr("need more than 1000000 GB"));
}

TEST_F(PreflightCommandTest, UnresolvablePeerIsAConfigurationFault) {
  const Outcome out =
      Preflight({"--hostnames", "localhost,worker-1.tpujob-preflight-test.invalid"});
  ASSERT_EQ(out.exit_code, 11) << out.output;
  EXPECT_THAT(ItemLine(out.output, "dns"),
              HasSubstr("unresolved=worker-1.tpujob-preflight-test.invalid"));
  EXPECT_EQ(ReadReport().items.back().value, "1/2 resolved");
}

TEST_F(PreflightCommandTest, BadEnvironmentValueIsAConfigurationFault) {
  const Outcome out = Preflight({}, {{"NODE_NAME", "node-b"}, {"TPUJOB_PREFLIGHT_CHECKS", "gpu"}});
  ASSERT_EQ(out.exit_code, 11) << out.output;
  EXPECT_THAT(ItemLine(out.output, "config"), HasSubstr("verdict=fail fault=config"));
  const Report report = ReadReport();
  EXPECT_EQ(report.node, "node-b");
  ASSERT_THAT(report.items, SizeIs(1));
  EXPECT_EQ(report.items[0].item, "config");
  EXPECT_THAT(report.items[0].message, HasSubstr("TPUJOB_PREFLIGHT_CHECKS=\"gpu\""));
}

TEST_F(PreflightCommandTest, BadFlagValueAndUnknownArgumentAreConfigurationFaults) {
  const Outcome out = Preflight({"--nofile-min", "lots", "--no-such-flag"});
  ASSERT_EQ(out.exit_code, 11) << out.output;
  const Report report = ReadReport();
  ASSERT_THAT(report.items, SizeIs(1));
  EXPECT_THAT(report.items[0].message, HasSubstr("unexpected argument \"--no-such-flag\""));
  EXPECT_THAT(report.items[0].message, HasSubstr("--nofile-min=\"lots\""));
}

TEST_F(PreflightCommandTest, FlagWinsOverEnvironment) {
  // The environment alone asks for more chips than the fake /dev has...
  const Outcome env_only = Run(
      {TPUJOB_OPERATOR_BINARY, "preflight", "--checks", "accelerator", "--report-file", report_},
      {{"TPUJOB_CHIPS_PER_WORKER", "8"}, {"TPUJOB_PREFLIGHT_DEV_ROOT", dev_}});
  EXPECT_EQ(env_only.exit_code, 10) << env_only.output;
  // ...and the flag overrides it.
  const Outcome with_flag =
      Run({TPUJOB_OPERATOR_BINARY, "preflight", "--checks", "accelerator", "--chips", "4",
           "--report-file", report_},
          {{"TPUJOB_CHIPS_PER_WORKER", "8"}, {"TPUJOB_PREFLIGHT_DEV_ROOT", dev_}});
  EXPECT_EQ(with_flag.exit_code, 0) << with_flag.output;
  EXPECT_THAT(ItemLine(with_flag.output, "accelerator"), HasSubstr("chips_required=4"));
}

TEST_F(PreflightCommandTest, LowOpenFilesLimitUnderPrlimitIsANodeFault) {
  std::string prlimit;
  for (const char* candidate : {"/usr/bin/prlimit", "/bin/prlimit"}) {
    if (access(candidate, X_OK) == 0) prlimit = candidate;
  }
  if (prlimit.empty()) GTEST_SKIP() << "prlimit (util-linux) is not installed";
  // Default thresholds; the other limits are whatever this machine has, so only the open-files
  // part of the line is pinned down.
  const Outcome out = Run({prlimit, "--nofile=1024:1024", TPUJOB_OPERATOR_BINARY, "preflight",
                           "--checks", "ulimit", "--report-file", report_});
  ASSERT_EQ(out.exit_code, 10) << out.output;
  const std::string line = ItemLine(out.output, "ulimit");
  EXPECT_THAT(line, HasSubstr("level=warn"));
  EXPECT_THAT(line, HasSubstr(" nofile=1024 nofile_min=1000000 "));
  EXPECT_THAT(line, ::testing::ContainsRegex(" failed=[a-z_,]*nofile[a-z_,]* verdict=fail "
                                             "fault=node message=\"limits too low: "));
  const Report report = ReadReport();
  EXPECT_EQ(report.verdict, Verdict::kNodeFault);
  ASSERT_THAT(report.items, SizeIs(1));
  EXPECT_THAT(report.items[0].value, HasSubstr(" nofile=1024 "));
  EXPECT_THAT(report.items[0].message, HasSubstr("nofile=1024 (need > 1000000)"));
}

TEST_F(PreflightCommandTest, UnwritableReportFileKeepsTheExitCode) {
  const Outcome out = Preflight({"--report-file", Path("no-such-dir/termination-log")});
  EXPECT_EQ(out.exit_code, 0) << out.output;
  EXPECT_THAT(out.output, HasSubstr("cannot write the pre-flight report"));
}

TEST_F(PreflightCommandTest, HelpDocumentsTheExitCodes) {
  const Outcome out = Run({TPUJOB_OPERATOR_BINARY, "preflight", "--help"});
  EXPECT_EQ(out.exit_code, 0) << out.output;
  EXPECT_THAT(out.output, HasSubstr("10  the node's hardware is at fault"));
  EXPECT_THAT(out.output, HasSubstr("11  not the hardware: dns or disk-size shm failed"));
  EXPECT_THAT(out.output, HasSubstr("TPUJOB_PREFLIGHT_NOFILE_MIN"));
  EXPECT_THAT(out.output, Not(HasSubstr("msg=\"preflight\"")));  // nothing ran
}

// Every line, passed and failed items alike (messages with quotes, '=' and parentheses), is
// strict logfmt.
TEST_F(PreflightCommandTest, EveryLineIsStrictLogfmt) {
  for (const Outcome& out : {Preflight(), Preflight({"--chips", "8", "--shm-min-gb", "1000000"}),
                             Preflight({"--nofile-min", "x=\"1\""})}) {
    std::istringstream lines(out.output);
    std::string line;
    size_t count = 0;
    while (std::getline(lines, line)) {
      ++count;
      auto parsed = tpujob::testing::ParseLogfmtLine(line);
      EXPECT_TRUE(parsed.has_value()) << parsed.error() << "\n" << line;
    }
    EXPECT_GE(count, 2u) << out.output;
  }
}

TEST_F(PreflightCommandTest, LogFormatJsonWritesOneObjectPerLine) {
  const Outcome out = Preflight({"--log-format", "json"});
  EXPECT_EQ(out.exit_code, 0) << out.output;
  std::istringstream lines(out.output);
  std::string line;
  std::vector<nlohmann::ordered_json> items;
  while (std::getline(lines, line)) {
    auto parsed = tpujob::testing::ParseJsonLine(line);
    ASSERT_TRUE(parsed.has_value()) << parsed.error() << "\n" << line;
    if ((*parsed)["msg"] == "preflight") items.push_back(*parsed);
  }
  ASSERT_THAT(items, SizeIs(5)) << out.output;  // no ulimit by default
  bool accelerator = false;
  for (const auto& item : items) {
    EXPECT_EQ(item["level"], "info");
    EXPECT_EQ(item["verdict"], "pass");
    if (item["item"] == "accelerator") {
      accelerator = true;
      EXPECT_EQ(item["tpu"], "4");
    }
  }
  EXPECT_TRUE(accelerator) << out.output;
}

// Like a bad --log-level: a configuration fault with a report, not a crash.
TEST_F(PreflightCommandTest, UnknownLogFormatIsAConfigFault) {
  const Outcome out = Preflight({"--log-format", "yaml"});
  EXPECT_EQ(out.exit_code, 11) << out.output;
  const Report report = ReadReport();
  ASSERT_THAT(report.items, SizeIs(1));
  EXPECT_THAT(report.items[0].message, HasSubstr("--log-format=\"yaml\": want logfmt or json"));
  EXPECT_THAT(out.output, HasSubstr("item=config"));
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::preflight
