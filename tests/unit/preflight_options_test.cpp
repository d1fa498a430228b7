#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <map>
#include <set>
#include <string>

#include "preflight/options.h"
#include "preflight/report.h"
#include "preflight/runner.h"
#include "preflight_test_util.h"

namespace tpujob::preflight {
namespace TPUJOB_TEST_NS {

using std::chrono::seconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

EnvironmentLookup Env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

Options LoadOk(const FlagValues& flags, const EnvironmentLookup& env) {
  auto options = LoadOptions(flags, env);
  EXPECT_TRUE(options.has_value()) << ::testing::PrintToString(options.error().problems);
  return options.value_or(Options{});
}

TEST(PreflightOptionsTest, CacheVolumeIsAutoPresentOrAbsent) {
  EXPECT_EQ(LoadOk({}, Env({{"TPUJOB_PREFLIGHT_CACHE_VOLUME", "absent"}})).disk.cache_volume,
            DiskOptions::Volume::kAbsent);
  EXPECT_EQ(
      LoadOk({{"--cache-volume", "present"}}, Env({{"TPUJOB_PREFLIGHT_CACHE_VOLUME", "absent"}}))
          .disk.cache_volume,
      DiskOptions::Volume::kPresent);
  const auto bad = LoadOptions({}, Env({{"TPUJOB_PREFLIGHT_CACHE_VOLUME", "maybe"}}));
  ASSERT_FALSE(bad.has_value());
  EXPECT_THAT(bad.error().problems,
              ElementsAre("TPUJOB_PREFLIGHT_CACHE_VOLUME=\"maybe\": want auto, present or absent"));
}

TEST(PreflightOptionsTest, DefaultsFollowTheDesign) {
  const Options o = LoadOk({}, Env({}));
  // ulimit only when asked for (docs/preflight.md: it is checked for high-speed networks).
  EXPECT_THAT(o.checks, ElementsAre(Check::kDisk, Check::kAccelerator, Check::kDns));
  EXPECT_EQ(o.disk.cache_volume, DiskOptions::Volume::kAuto);
  EXPECT_EQ(o.dns.timeout, seconds(120));
  EXPECT_EQ(o.dns.poll_interval, seconds(1));
  EXPECT_THAT(o.dns.hostnames, IsEmpty());
  EXPECT_EQ(o.disk.root_path, "/");
  EXPECT_EQ(o.disk.shm_path, "/dev/shm");
  EXPECT_EQ(o.disk.cache_path, "/cache");
  EXPECT_EQ(o.disk.root_min_gb, 32);
  EXPECT_EQ(o.disk.shm_min_gb, 1);
  EXPECT_EQ(o.disk.cache_min_gb, 32);
  EXPECT_EQ(o.ulimit.memlock_min_kb, 16000u);
  EXPECT_EQ(o.ulimit.nofile_min, 1000000u);
  EXPECT_EQ(o.ulimit.stack_min_kb, 8000u);
  EXPECT_EQ(o.ulimit.nproc_min, 1000000u);
  EXPECT_EQ(o.accelerator.dev_root, "/dev");
  EXPECT_EQ(o.accelerator.chips, 0);
  EXPECT_EQ(o.accelerator.gpus, 0);
}

TEST(PreflightOptionsTest, EveryEnvironmentVariableIsRead) {
  const Options o = LoadOk({}, Env({
                                   {"TPUJOB_PREFLIGHT_CHECKS", "ulimit, dns"},
                                   {"NODE_NAME", "gke-tpu-a-1"},
                                   {"TPU_WORKER_HOSTNAMES", " w-0.svc, ,w-1.svc,"},
                                   {"TPUJOB_PREFLIGHT_DNS_TIMEOUT_SECONDS", "30"},
                                   {"TPUJOB_PREFLIGHT_ROOT_PATH", "/r"},
                                   {"TPUJOB_PREFLIGHT_SHM_PATH", "/s"},
                                   {"TPUJOB_PREFLIGHT_CACHE_PATH", "/c"},
                                   {"TPUJOB_PREFLIGHT_ROOT_MIN_GB", "100"},
                                   {"TPUJOB_PREFLIGHT_SHM_MIN_GB", "0.5"},
                                   {"TPUJOB_PREFLIGHT_CACHE_MIN_GB", "200"},
                                   {"TPUJOB_PREFLIGHT_MEMLOCK_MIN_KB", "1"},
                                   {"TPUJOB_PREFLIGHT_NOFILE_MIN", "2"},
                                   {"TPUJOB_PREFLIGHT_STACK_MIN_KB", "3"},
                                   {"TPUJOB_PREFLIGHT_NPROC_MIN", "4"},
                                   {"TPUJOB_PREFLIGHT_DEV_ROOT", "/d"},
                                   {"TPUJOB_CHIPS_PER_WORKER", "4"},
                                   {"TPUJOB_PREFLIGHT_GPUS", "8"},
                               }));
  // Run order, whatever order the list names them in.
  EXPECT_THAT(o.checks, ElementsAre(Check::kUlimit, Check::kDns));
  EXPECT_EQ(o.node_name, "gke-tpu-a-1");
  EXPECT_THAT(o.dns.hostnames, ElementsAre("w-0.svc", "w-1.svc"));
  EXPECT_EQ(o.dns.timeout, seconds(30));
  EXPECT_EQ(o.disk.root_path, "/r");
  EXPECT_EQ(o.disk.shm_path, "/s");
  EXPECT_EQ(o.disk.cache_path, "/c");
  EXPECT_EQ(o.disk.root_min_gb, 100);
  EXPECT_EQ(o.disk.shm_min_gb, 0.5);
  EXPECT_EQ(o.disk.cache_min_gb, 200);
  EXPECT_EQ(o.ulimit.memlock_min_kb, 1u);
  EXPECT_EQ(o.ulimit.nofile_min, 2u);
  EXPECT_EQ(o.ulimit.stack_min_kb, 3u);
  EXPECT_EQ(o.ulimit.nproc_min, 4u);
  EXPECT_EQ(o.accelerator.dev_root, "/d");
  EXPECT_EQ(o.accelerator.chips, 4);
  EXPECT_EQ(o.accelerator.gpus, 8);
}

TEST(PreflightOptionsTest, FlagsWinOverTheEnvironment) {
  const Options o = LoadOk({{"--chips", "8"}, {"--shm-min-gb", "2"}, {"--hostnames", "a,b"}},
                           Env({{"TPUJOB_CHIPS_PER_WORKER", "4"},
                                {"TPUJOB_PREFLIGHT_SHM_MIN_GB", "1.5"},
                                {"TPUJOB_PREFLIGHT_NOFILE_MIN", "5"},
                                {"TPU_WORKER_HOSTNAMES", "x"}}));
  EXPECT_EQ(o.accelerator.chips, 8);
  EXPECT_EQ(o.disk.shm_min_gb, 2);
  EXPECT_THAT(o.dns.hostnames, ElementsAre("a", "b"));
  EXPECT_EQ(o.ulimit.nofile_min, 5u);  // no flag: the environment applies
}

TEST(PreflightOptionsTest, EmptyValuesKeepTheDefault) {
  const Options o = LoadOk({{"--dev-root", ""}}, Env({{"TPUJOB_PREFLIGHT_ROOT_MIN_GB", ""},
                                                      {"TPUJOB_PREFLIGHT_CHECKS", ""},
                                                      {"TPUJOB_PREFLIGHT_DEV_ROOT", ""}}));
  EXPECT_EQ(o.disk.root_min_gb, 32);
  EXPECT_THAT(o.checks, SizeIs(3));
  EXPECT_EQ(o.accelerator.dev_root, "/dev");
}

TEST(PreflightOptionsTest, HostsFileIsAFlagOnly) {
  EXPECT_EQ(LoadOk({{"--hosts-file", "/tmp/h"}}, Env({})).dns.hosts_file, "/tmp/h");
}

TEST(PreflightOptionsTest, BadValuesAreAllReportedWithTheirSource) {
  auto options = LoadOptions({{"--nofile-min", "lots"}, {"--bogus", "1"}},
                             Env({{"NODE_NAME", "node-3"},
                                  {"TPUJOB_PREFLIGHT_ROOT_MIN_GB", "-1"},
                                  {"TPUJOB_PREFLIGHT_SHM_MIN_GB", "nan"},
                                  {"TPUJOB_PREFLIGHT_CACHE_MIN_GB", "1e999"},
                                  {"TPUJOB_PREFLIGHT_STACK_MIN_KB", "8000KB"},
                                  {"TPUJOB_PREFLIGHT_NPROC_MIN", "-5"},
                                  {"TPUJOB_PREFLIGHT_DNS_TIMEOUT_SECONDS", "999999"},
                                  {"TPUJOB_CHIPS_PER_WORKER", "four"},
                                  {"TPUJOB_PREFLIGHT_CHECKS", "dns,gpu,disk-size"}}));
  ASSERT_FALSE(options.has_value());
  EXPECT_EQ(options.error().node_name, "node-3");
  EXPECT_THAT(options.error().problems,
              ElementsAre(R"(TPUJOB_PREFLIGHT_CHECKS="dns,gpu,disk-size": unknown check "gpu" )"
                          "(want dns, disk, ulimit, accelerator)",
                          R"(TPUJOB_PREFLIGHT_CHECKS="dns,gpu,disk-size": unknown check )"
                          R"("disk-size" (want dns, disk, ulimit, accelerator))",
                          R"(TPUJOB_PREFLIGHT_DNS_TIMEOUT_SECONDS="999999": want an integer )"
                          "from 0 to 86400",
                          R"(TPUJOB_PREFLIGHT_ROOT_MIN_GB="-1": want a non-negative number of GB)",
                          R"(TPUJOB_PREFLIGHT_SHM_MIN_GB="nan": want a non-negative number of GB)",
                          R"(TPUJOB_PREFLIGHT_CACHE_MIN_GB="1e999": want a non-negative number )"
                          "of GB",
                          R"(--nofile-min="lots": want an integer from 0 to 9007199254740992)",
                          R"(TPUJOB_PREFLIGHT_STACK_MIN_KB="8000KB": want an integer from 0 to )"
                          "9007199254740992",
                          R"(TPUJOB_PREFLIGHT_NPROC_MIN="-5": want an integer from 0 to )"
                          "9007199254740992",
                          R"(TPUJOB_CHIPS_PER_WORKER="four": want an integer from 0 to 65536)",
                          "--bogus: unknown setting"));
}

TEST(PreflightOptionsTest, CheckListNamingNothingIsAnError) {
  auto options = LoadOptions({{"--checks", " , "}}, Env({}));
  ASSERT_FALSE(options.has_value());
  EXPECT_THAT(options.error().problems, ElementsAre(R"(--checks=" , ": names no check)"));
}

TEST(PreflightOptionsTest, SettingsTableIsConsistent) {
  std::set<std::string_view> flags, envs;
  for (const Setting& s : Settings()) {
    EXPECT_TRUE(s.flag.starts_with("--")) << s.flag;
    EXPECT_TRUE(flags.insert(s.flag).second) << s.flag;
    if (!s.env.empty()) {
      EXPECT_TRUE(envs.insert(s.env).second) << s.env;
    }
    EXPECT_FALSE(s.help.empty()) << s.flag;
  }
  for (std::string_view env :
       {"TPUJOB_PREFLIGHT_CHECKS", "TPUJOB_PREFLIGHT_ROOT_MIN_GB", "TPUJOB_PREFLIGHT_SHM_MIN_GB",
        "TPUJOB_PREFLIGHT_CACHE_MIN_GB", "TPUJOB_PREFLIGHT_MEMLOCK_MIN_KB",
        "TPUJOB_PREFLIGHT_NOFILE_MIN", "TPUJOB_PREFLIGHT_STACK_MIN_KB",
        "TPUJOB_PREFLIGHT_NPROC_MIN", "TPUJOB_PREFLIGHT_DNS_TIMEOUT_SECONDS",
        "TPUJOB_PREFLIGHT_ROOT_PATH", "TPUJOB_PREFLIGHT_SHM_PATH", "TPUJOB_PREFLIGHT_CACHE_PATH",
        "TPUJOB_PREFLIGHT_DEV_ROOT", "TPUJOB_PREFLIGHT_GPUS", "TPU_WORKER_HOSTNAMES",
        "TPUJOB_CHIPS_PER_WORKER", "NODE_NAME"}) {
    EXPECT_TRUE(envs.contains(env)) << env;
  }
}

// ---------------------------------------------------------------------------------------------
// runner

class PreflightRunnerTest : public testing::TempDirTest {
 protected:
  // RunChecks logs every item; the lines are checked through the binary, not here.
  void SetUp() override {
    testing::TempDirTest::SetUp();
    saved_level_ = spdlog::get_level();
    spdlog::set_level(spdlog::level::off);
  }
  void TearDown() override {
    spdlog::set_level(saved_level_);
    testing::TempDirTest::TearDown();
  }

  // Probes that pass every default threshold.
  Probes HealthyProbes() {
    Probes probes;
    probes.resolve = [](const std::string&) { return std::expected<void, std::string>(); };
    probes.filesystem = [](const std::string&) {
      return std::expected<FilesystemSize, FilesystemError>(
          FilesystemSize{.total_bytes = 100'000'000'000, .available_bytes = 50'000'000'000});
    };
    probes.limits = [] {
      return std::expected<ProcessLimits, std::string>(ProcessLimits{});  // all unlimited
    };
    return probes;
  }

  Options HealthyOptions() {
    Options options;
    options.node_name = "node-a";
    options.checks = {Check::kDisk, Check::kUlimit, Check::kAccelerator, Check::kDns};
    options.dns.hostnames = {"w-0", "w-1"};
    options.accelerator = {.dev_root = MakeFakeDev(), .chips = 4};
    return options;
  }

  spdlog::level::level_enum saved_level_ = spdlog::level::info;
};

TEST_F(PreflightRunnerTest, HealthyNodePassesEveryItem) {
  FakeClock clock;
  const Report report = RunChecks(HealthyOptions(), HealthyProbes(), clock);
  EXPECT_EQ(report.verdict, Verdict::kPass);
  EXPECT_EQ(report.node, "node-a");
  std::vector<std::string> names;
  for (const ItemResult& item : report.items) {
    names.push_back(item.item);
    EXPECT_TRUE(item.passed) << item.item << ": " << item.message;
  }
  EXPECT_THAT(names, ElementsAre("disk-size root", "disk-size shm", "disk-size cache", "ulimit",
                                 "accelerator", "dns"));
}

TEST_F(PreflightRunnerTest, NodeFaultWinsAndEveryFailureIsListed) {
  FakeClock clock;
  Options options = HealthyOptions();
  options.accelerator.chips = 8;  // node
  options.disk.shm_min_gb = 500;  // configuration
  const Report report = RunChecks(options, HealthyProbes(), clock);
  EXPECT_EQ(report.verdict, Verdict::kNodeFault);
  EXPECT_EQ(ExitCode(report.verdict), 10);
  std::vector<std::string> failed;
  for (const ItemResult& item : report.items) {
    if (!item.passed) failed.push_back(item.item);
  }
  EXPECT_THAT(failed, ElementsAre("disk-size shm", "accelerator"));
}

TEST_F(PreflightRunnerTest, OnlyConfigurationFailuresExitWith11) {
  FakeClock clock;
  Options options = HealthyOptions();
  options.checks = {Check::kDisk, Check::kAccelerator};
  options.disk.shm_min_gb = 500;
  const Report report = RunChecks(options, HealthyProbes(), clock);
  EXPECT_THAT(report.items, SizeIs(4));
  EXPECT_EQ(report.verdict, Verdict::kConfigFault);
  EXPECT_EQ(ExitCode(report.verdict), 11);
}

TEST_F(PreflightRunnerTest, ConfigFaultReportNamesEveryProblem) {
  const Report report = ConfigFaultReport({"node-3", {"--nofile-min=\"x\": bad", "--gpus: bad"}});
  EXPECT_EQ(report.verdict, Verdict::kConfigFault);
  EXPECT_EQ(report.node, "node-3");
  ASSERT_THAT(report.items, SizeIs(1));
  EXPECT_EQ(report.items[0].item, "config");
  EXPECT_EQ(report.items[0].fault, Fault::kConfig);
  EXPECT_EQ(report.items[0].message, "--nofile-min=\"x\": bad; --gpus: bad");
}

TEST(PreflightLogLineTest, OneLogfmtLinePerItem) {
  ItemResult root;
  root.item = "disk-size root";
  root.passed = true;
  root.log_fields = {{"path", "/"}, {"value_gb", "120"}, {"min_gb", "32"}};
  EXPECT_EQ(FormatItemLine(root),
            R"(msg="preflight" item="disk-size root" path=/ value_gb=120 min_gb=32 verdict=pass)");

  ItemResult ulimit;
  ulimit.item = "ulimit";
  ulimit.fault = Fault::kNode;
  ulimit.log_fields = {{"nofile", "1024"}, {"failed", "nofile"}};
  ulimit.message = "limits too low: nofile=1024 (need > 1000000)";
  EXPECT_EQ(FormatItemLine(ulimit),
            R"(msg="preflight" item=ulimit nofile=1024 failed=nofile verdict=fail fault=node )"
            R"x(message="limits too low: nofile=1024 (need > 1000000)")x");

  ulimit.message = std::string(5000, 'm');
  EXPECT_LT(FormatItemLine(ulimit).size(), 1200u);
}

TEST(PreflightOptionsTest, TheMultisliceCoordinatorIsResolvedWithThePeers) {
  EXPECT_THAT(LoadOk({}, Env({{"TPU_WORKER_HOSTNAMES", "j-worker-1-0.j,j-worker-1-1.j"},
                              {"MEGASCALE_COORDINATOR_ADDRESS", "j-worker-0-0.j"}}))
                  .dns.hostnames,
              ElementsAre("j-worker-1-0.j", "j-worker-1-1.j", "j-worker-0-0.j"));
  // host:port and [IPv6]:port give the host; a bare IPv6 address is kept whole.
  EXPECT_THAT(LoadOk({{"--coordinator", "coord.j:8080"}}, Env({})).dns.hostnames,
              ElementsAre("coord.j"));
  EXPECT_THAT(LoadOk({{"--coordinator", "[fd00::1]:8080"}}, Env({})).dns.hostnames,
              ElementsAre("fd00::1"));
  EXPECT_THAT(LoadOk({{"--coordinator", "fd00::1"}}, Env({})).dns.hostnames,
              ElementsAre("fd00::1"));
  EXPECT_THAT(LoadOk({}, Env({})).dns.hostnames, IsEmpty());
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::preflight
