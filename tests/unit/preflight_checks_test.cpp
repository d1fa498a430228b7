#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "base/clock.h"
#include "preflight/checks.h"
#include "preflight_test_util.h"

namespace tpujob::preflight {
namespace TPUJOB_TEST_NS {

using std::chrono::seconds;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

// ---------------------------------------------------------------------------------------------
// accelerator

class PreflightAcceleratorTest : public testing::TempDirTest {};

TEST_F(PreflightAcceleratorTest, FourAccelChipsSatisfyFourRequested) {
  const ItemResult r = CheckAccelerator({.dev_root = MakeFakeDev(), .chips = 4});
  EXPECT_TRUE(r.passed) << r.message;
  EXPECT_EQ(r.item, "accelerator");
  EXPECT_EQ(r.fault, Fault::kNone);
  // vfio/vfio is the container node and nvidiactl a control node: neither counts.
  EXPECT_EQ(r.value, "tpu=4 accel=4 vfio=1 gpu=1");
  EXPECT_EQ(r.threshold, "tpu>=4");
  EXPECT_THAT(r.log_fields, Contains(Pair("chips_required", "4")));
}

TEST_F(PreflightAcceleratorTest, FewerChipsThanRequestedIsANodeFault) {
  const ItemResult r = CheckAccelerator({.dev_root = MakeFakeDev(), .chips = 8});
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.fault, Fault::kNode);
  EXPECT_THAT(r.message, HasSubstr("found 4 TPU devices"));
  EXPECT_THAT(r.message, HasSubstr("need at least 8"));
}

TEST_F(PreflightAcceleratorTest, ZeroChipsRequestedNeedsAtLeastOneDevice) {
  Write("empty/null");
  const ItemResult none = CheckAccelerator({.dev_root = Path("empty"), .chips = 0});
  EXPECT_FALSE(none.passed);
  EXPECT_EQ(none.fault, Fault::kNode);
  EXPECT_EQ(none.threshold, "tpu>=1");

  // The VFIO container node alone is not a chip.
  Write("container-only/vfio/vfio");
  EXPECT_FALSE(CheckAccelerator({.dev_root = Path("container-only")}).passed);

  Write("vfio-host/vfio/vfio");
  Write("vfio-host/vfio/0");
  const ItemResult vfio = CheckAccelerator({.dev_root = Path("vfio-host")});
  EXPECT_TRUE(vfio.passed) << vfio.message;
  EXPECT_EQ(vfio.value, "tpu=1 accel=0 vfio=1 gpu=0");
}

TEST_F(PreflightAcceleratorTest, AccelNamesNeedADigitSuffix) {
  Write("dev/accel");  // not a chip: a directory or stray node of that name
  Write("dev/accelerator");
  Write("dev/accel12");
  const ItemResult r = CheckAccelerator({.dev_root = Path("dev"), .chips = 1});
  EXPECT_TRUE(r.passed);
  EXPECT_EQ(r.value, "tpu=1 accel=1 vfio=0 gpu=0");
}

TEST_F(PreflightAcceleratorTest, GpusCountOnlyNumberedNvidiaNodes) {
  const std::string dev = MakeFakeDev();
  const ItemResult one = CheckAccelerator({.dev_root = dev, .chips = 4, .gpus = 1});
  EXPECT_TRUE(one.passed) << one.message;
  EXPECT_EQ(one.threshold, "tpu>=4 gpu>=1");
  EXPECT_THAT(one.log_fields, Contains(Pair("gpu", "1")));

  // nvidiactl must not be taken for a second GPU.
  const ItemResult two = CheckAccelerator({.dev_root = dev, .chips = 4, .gpus = 2});
  EXPECT_FALSE(two.passed);
  EXPECT_EQ(two.fault, Fault::kNode);
  EXPECT_THAT(two.message, HasSubstr("found 1 GPUs"));
  EXPECT_THAT(two.message, Not(HasSubstr("TPU")));
}

TEST_F(PreflightAcceleratorTest, MissingDeviceDirectoryIsAConfigurationFault) {
  const ItemResult r = CheckAccelerator({.dev_root = Path("no-such-dev")});
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.fault, Fault::kConfig);
  EXPECT_THAT(r.message, HasSubstr("does not exist"));
}

// ---------------------------------------------------------------------------------------------
// disk-size

class PreflightDiskTest : public testing::TempDirTest {
 protected:
  // The size the check must see for `path`, read independently of the code under test.
  static double TotalGb(const std::string& path) {
    struct statvfs stats {};
    EXPECT_EQ(statvfs(path.c_str(), &stats), 0);
    return static_cast<double>(static_cast<uint64_t>(stats.f_blocks) * stats.f_frsize) / 1e9;
  }
};

TEST_F(PreflightDiskTest, PassesJustBelowTheFilesystemSizeAndFailsJustAbove) {
  const std::string path = dir_.string();
  const double size_gb = TotalGb(path);
  ASSERT_GT(size_gb, 0.01);

  const ItemResult below =
      CheckDiskSize(kItemDiskRoot, path, size_gb - 0.001, Fault::kNode, SystemFilesystemProbe());
  EXPECT_TRUE(below.passed) << below.message;
  EXPECT_EQ(below.fault, Fault::kNone);
  EXPECT_THAT(below.log_fields, Contains(Pair("path", path)));

  const ItemResult above =
      CheckDiskSize(kItemDiskRoot, path, size_gb + 0.001, Fault::kNode, SystemFilesystemProbe());
  EXPECT_FALSE(above.passed);
  EXPECT_EQ(above.fault, Fault::kNode);
  EXPECT_THAT(above.message, HasSubstr("need more than"));
  EXPECT_EQ(above.value, below.value);

  // The shm item blames the job, not the node.
  const ItemResult shm =
      CheckDiskSize(kItemDiskShm, path, size_gb + 0.001, Fault::kConfig, SystemFilesystemProbe());
  EXPECT_FALSE(shm.passed);
  EXPECT_EQ(shm.fault, Fault::kConfig);
}

TEST_F(PreflightDiskTest, SizeEqualToTheMinimumFails) {
  const FilesystemProbe exactly_32gb = [](const std::string&) {
    return std::expected<FilesystemSize, FilesystemError>(
        FilesystemSize{.total_bytes = 32'000'000'000, .available_bytes = 1'000'000'000});
  };
  const ItemResult r = CheckDiskSize(kItemDiskCache, "/cache", 32, Fault::kNode, exactly_32gb);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.value, "32 GB");
  EXPECT_EQ(r.threshold, "> 32 GB");
  EXPECT_THAT(r.log_fields, ElementsAre(Pair("path", "/cache"), Pair("value_gb", "32"),
                                        Pair("min_gb", "32"), Pair("available_gb", "1")));
  EXPECT_EQ(r.message, "/cache is 32 GB (32000000000 bytes), need more than 32 GB");
  EXPECT_TRUE(CheckDiskSize(kItemDiskCache, "/cache", 31.99, Fault::kNode, exactly_32gb).passed);
}

TEST_F(PreflightDiskTest, MissingPathFailsWithAClearMessage) {
  const std::string missing = Path("not-mounted");
  const ItemResult r =
      CheckDiskSize(kItemDiskCache, missing, 32, Fault::kNode, SystemFilesystemProbe());
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.fault, Fault::kConfig);
  EXPECT_EQ(r.value, "missing");
  EXPECT_EQ(r.message, missing + " does not exist (volume not mounted?)");
}

// No volume at the cache path: nothing to measure, so the item is skipped (it passes with a
// note), whether the operator says so (absent) or the path does not exist (auto). A volume the
// operator says is there but is missing stays a failure.
TEST_F(PreflightDiskTest, CacheItemIsSkippedWithoutAVolume) {
  DiskOptions options;
  options.root_path = Path("");
  options.shm_path = Path("");
  options.cache_path = Path("not-mounted");
  for (const auto volume : {DiskOptions::Volume::kAuto, DiskOptions::Volume::kAbsent}) {
    options.cache_volume = volume;
    const std::vector<ItemResult> items = CheckDisks(options, SystemFilesystemProbe());
    ASSERT_EQ(items.size(), 3u);
    EXPECT_EQ(items[2].item, "disk-size cache");
    EXPECT_TRUE(items[2].passed);
    EXPECT_TRUE(items[2].skipped);
    EXPECT_THAT(items[2].message, HasSubstr("not checked"));
    EXPECT_THAT(items[2].message, HasSubstr(options.cache_path));
  }
  options.cache_volume = DiskOptions::Volume::kPresent;
  const ItemResult present = CheckDisks(options, SystemFilesystemProbe())[2];
  EXPECT_FALSE(present.passed);
  EXPECT_FALSE(present.skipped);
  EXPECT_EQ(present.fault, Fault::kConfig);

  // With the operator saying there is none, an existing path is not measured either.
  options.cache_path = Path("");
  options.cache_volume = DiskOptions::Volume::kAbsent;
  EXPECT_TRUE(CheckDisks(options, SystemFilesystemProbe())[2].skipped);
  options.cache_volume = DiskOptions::Volume::kAuto;
  EXPECT_FALSE(CheckDisks(options, SystemFilesystemProbe())[2].skipped);
}

TEST_F(PreflightDiskTest, UnreadablePathKeepsTheItemsFault) {
  const FilesystemProbe denied = [](const std::string&) {
    return std::expected<FilesystemSize, FilesystemError>(
        std::unexpect, FilesystemError{EACCES, "Permission denied"});
  };
  const ItemResult r = CheckDiskSize(kItemDiskRoot, "/", 32, Fault::kNode, denied);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.fault, Fault::kNode);
  EXPECT_THAT(r.message, HasSubstr("Permission denied"));
}

TEST_F(PreflightDiskTest, CheckDisksBlamesTheNodeForRootAndCacheAndTheJobForShm) {
  const std::map<std::string, uint64_t> sizes = {
      {"/", 20'000'000'000}, {"/dev/shm", 67'108'864}, {"/cache", 500'000'000'000}};
  const FilesystemProbe probe = [&](const std::string& path) {
    return std::expected<FilesystemSize, FilesystemError>(
        FilesystemSize{.total_bytes = sizes.at(path), .available_bytes = 0});
  };
  const std::vector<ItemResult> items = CheckDisks(DiskOptions{}, probe);
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0].item, "disk-size root");
  EXPECT_FALSE(items[0].passed);
  EXPECT_EQ(items[0].fault, Fault::kNode);
  EXPECT_EQ(items[1].item, "disk-size shm");
  EXPECT_FALSE(items[1].passed);
  EXPECT_EQ(items[1].fault, Fault::kConfig);
  EXPECT_EQ(items[1].value, "0.07 GB");
  EXPECT_EQ(items[2].item, "disk-size cache");
  EXPECT_TRUE(items[2].passed);
}

TEST(PreflightFormatTest, FormatGbKeepsAtMostTwoDecimals) {
  EXPECT_EQ(FormatGb(120'000'000'000), "120");
  EXPECT_EQ(FormatGb(120'500'000'000), "120.5");
  EXPECT_EQ(FormatGb(67'108'864), "0.07");
  EXPECT_EQ(FormatGb(0), "0");
}

// ---------------------------------------------------------------------------------------------
// ulimit

LimitsProvider FixedLimits(ProcessLimits limits) {
  return [limits] { return std::expected<ProcessLimits, std::string>(limits); };
}

constexpr uint64_t kKiB = 1024;

TEST(PreflightUlimitTest, HighAndUnlimitedLimitsPass) {
  const ItemResult r = CheckUlimit(UlimitOptions{}, FixedLimits({.memlock_bytes = std::nullopt,
                                                                 .nofile = 1048576,
                                                                 .stack_bytes = std::nullopt,
                                                                 .nproc = std::nullopt}));
  EXPECT_TRUE(r.passed) << r.message;
  EXPECT_EQ(r.value, "memlock_kb=unlimited nofile=1048576 stack_kb=unlimited nproc=unlimited");
  EXPECT_EQ(r.threshold, "memlock_kb>16000 nofile>1000000 stack_kb>8000 nproc>1000000");
}

TEST(PreflightUlimitTest, EverySubLimitIsCheckedAndReported) {
  // Typical container defaults: 8 MiB memlock, 1024 files, 8 MiB stack.
  const ItemResult r = CheckUlimit(UlimitOptions{}, FixedLimits({.memlock_bytes = 8192 * kKiB,
                                                                 .nofile = 1024,
                                                                 .stack_bytes = 8192 * kKiB,
                                                                 .nproc = 4096}));
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.fault, Fault::kNode);
  EXPECT_EQ(r.value, "memlock_kb=8192 nofile=1024 stack_kb=8192 nproc=4096");
  EXPECT_THAT(r.log_fields, Contains(Pair("failed", "memlock_kb,nofile,nproc")));
  EXPECT_THAT(r.log_fields, Contains(Pair("stack_kb", "8192")));
  EXPECT_THAT(r.log_fields, Contains(Pair("nofile_min", "1000000")));
  EXPECT_THAT(r.message, HasSubstr("nofile=1024 (need > 1000000)"));
  EXPECT_THAT(r.message, Not(HasSubstr("stack_kb")));
}

TEST(PreflightUlimitTest, EachLimitFailsAloneAtItsThreshold) {
  const ProcessLimits good = {.memlock_bytes = std::nullopt,
                              .nofile = 2'000'000,
                              .stack_bytes = std::nullopt,
                              .nproc = std::nullopt};
  struct Case {
    const char* name;
    ProcessLimits limits;
  };
  ProcessLimits memlock = good, nofile = good, stack = good, nproc = good;
  memlock.memlock_bytes = 16000 * kKiB;  // equal is not enough: "more than"
  nofile.nofile = 1'000'000;
  stack.stack_bytes = 8000 * kKiB;
  nproc.nproc = 1'000'000;
  for (const Case& c : {Case{"memlock_kb", memlock}, Case{"nofile", nofile},
                        Case{"stack_kb", stack}, Case{"nproc", nproc}}) {
    const ItemResult r = CheckUlimit(UlimitOptions{}, FixedLimits(c.limits));
    EXPECT_FALSE(r.passed) << c.name;
    EXPECT_THAT(r.log_fields, Contains(Pair("failed", c.name)));
  }
  ProcessLimits just_above = good;
  just_above.memlock_bytes = 16001 * kKiB;
  just_above.stack_bytes = 8001 * kKiB;
  just_above.nofile = 1'000'001;
  just_above.nproc = 1'000'001;
  EXPECT_TRUE(CheckUlimit(UlimitOptions{}, FixedLimits(just_above)).passed);
}

TEST(PreflightUlimitTest, ThresholdsAreConfigurable) {
  const UlimitOptions low{
      .memlock_min_kb = 0, .nofile_min = 1000, .stack_min_kb = 0, .nproc_min = 0};
  EXPECT_TRUE(CheckUlimit(low, FixedLimits({64 * kKiB, 1024, 8192 * kKiB, 100})).passed);
  const UlimitOptions high{.nofile_min = 1024};
  EXPECT_FALSE(
      CheckUlimit(high, FixedLimits({std::nullopt, 1024, std::nullopt, std::nullopt})).passed);
}

TEST(PreflightUlimitTest, ProviderErrorIsANodeFault) {
  const LimitsProvider broken = [] {
    return std::expected<ProcessLimits, std::string>(std::unexpect, "getrlimit: EPERM");
  };
  const ItemResult r = CheckUlimit(UlimitOptions{}, broken);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(r.fault, Fault::kNode);
  EXPECT_EQ(r.message, "getrlimit: EPERM");
}

TEST(PreflightUlimitTest, SystemLimitsReportsTheSoftLimits) {
  rlimit nofile{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &nofile), 0);
  auto limits = SystemLimits()();
  ASSERT_TRUE(limits.has_value()) << limits.error();
  if (nofile.rlim_cur == RLIM_INFINITY) {
    EXPECT_FALSE(limits->nofile.has_value());
  } else {
    EXPECT_EQ(limits->nofile, static_cast<uint64_t>(nofile.rlim_cur));
  }
}

// ---------------------------------------------------------------------------------------------
// dns

// Wraps a resolver, counting calls per name so a test can wait for a round to have happened
// before it moves the fake clock.
class CountingResolver {
 public:
  explicit CountingResolver(Resolver inner) : inner_(std::move(inner)) {}

  Resolver AsResolver() {
    return [this](const std::string& name) {
      auto result = inner_(name);
      {
        std::lock_guard<std::mutex> guard(mu_);
        ++calls_[name];
      }
      changed_.notify_all();
      return result;
    };
  }

  // Blocks until `name` was resolved `n` times (bounded, so a bug fails instead of hanging).
  bool AwaitCalls(const std::string& name, int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, seconds(10), [&] { return calls_[name] >= n; });
  }

  int Calls(const std::string& name) {
    std::lock_guard<std::mutex> guard(mu_);
    return calls_[name];
  }

 private:
  Resolver inner_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, int> calls_;
};

Resolver FailAll(std::string error = "Name or service not known") {
  return [error](const std::string&) {
    return std::expected<void, std::string>(std::unexpect, error);
  };
}

class PreflightDnsTest : public testing::TempDirTest {};

DnsOptions Dns(std::vector<std::string> hostnames, Duration timeout, std::string hosts_file = "") {
  DnsOptions options;
  options.hostnames = std::move(hostnames);
  options.timeout = timeout;
  options.hosts_file = std::move(hosts_file);
  return options;
}

TEST_F(PreflightDnsTest, LocalhostResolvesInTheFirstRound) {
  FakeClock clock;
  const ItemResult r = CheckDns(Dns({"localhost"}, seconds(120)), SystemResolver(), clock);
  EXPECT_TRUE(r.passed) << r.message;
  EXPECT_EQ(r.item, "dns");
  EXPECT_EQ(r.value, "1/1 resolved");
  EXPECT_EQ(r.threshold, "all 1 within 120s");
  EXPECT_THAT(r.log_fields, Contains(Pair("rounds", "1")));
}

TEST_F(PreflightDnsTest, InvalidNameFailsOnlyAfterTheDeadline) {
  FakeClock clock;
  const TimePoint start = clock.Now();
  const std::string bad = "worker-9.tpujob-preflight-test.invalid";
  CountingResolver resolver(SystemResolver());
  ItemResult result;
  std::thread check([&] {
    result = CheckDns(Dns({"localhost", bad}, seconds(3)), resolver.AsResolver(), clock);
  });
  // Rounds at t=0, 1, 2 and 3 s; after each of the first three the check parks on the clock.
  for (int round = 1; round <= 3; ++round) {
    ASSERT_TRUE(resolver.AwaitCalls(bad, round)) << "round " << round;
    ASSERT_TRUE(clock.AwaitWaiters(1)) << "round " << round;
    clock.Advance(seconds(1));
  }
  check.join();
  EXPECT_EQ(clock.Now() - start, seconds(3));
  EXPECT_EQ(resolver.Calls(bad), 4);
  EXPECT_EQ(resolver.Calls("localhost"), 1);  // resolved names are not asked again
  EXPECT_FALSE(result.passed);
  EXPECT_EQ(result.fault, Fault::kConfig);
  EXPECT_EQ(result.value, "1/2 resolved");
  EXPECT_THAT(result.log_fields, Contains(Pair("unresolved", bad)));
  EXPECT_THAT(result.log_fields, Contains(Pair("rounds", "4")));
  EXPECT_THAT(result.message, HasSubstr("1 of 2 peer names did not resolve within 3s: " + bad));
}

TEST_F(PreflightDnsTest, NameAddedToTheHostsFileMidDeadlinePasses) {
  FakeClock clock;
  const TimePoint start = clock.Now();
  const std::string peer = "Worker-1.tpujob-preflight-test.invalid";
  const std::string hosts = Path("hosts");  // does not exist yet
  CountingResolver resolver(SystemResolver());
  ItemResult result;
  std::thread check([&] {
    result = CheckDns(Dns({"localhost", peer}, seconds(120), hosts), resolver.AsResolver(), clock);
  });
  ASSERT_TRUE(resolver.AwaitCalls(peer, 1));
  ASSERT_TRUE(clock.AwaitWaiters(1));
  // The peer's pod got its address: its record appears while the check waits.
  Write("hosts",
        "# peers\n127.0.0.1 localhost\n10.4.0.9\tworker-1.tpujob-preflight-test.invalid"
        " worker-1 # case differs from the query\n");
  clock.Advance(seconds(1));
  check.join();
  EXPECT_TRUE(result.passed) << result.message;
  EXPECT_EQ(clock.Now() - start, seconds(1));
  EXPECT_EQ(resolver.Calls(peer), 1);  // the second round found it in the file
  EXPECT_THAT(result.log_fields, Contains(Pair("rounds", "2")));
}

TEST_F(PreflightDnsTest, ZeroTimeoutMakesExactlyOneRound) {
  FakeClock clock;
  CountingResolver resolver(FailAll());
  const ItemResult r = CheckDns(Dns({"a", "b"}, seconds(0)), resolver.AsResolver(), clock);
  EXPECT_FALSE(r.passed);
  EXPECT_EQ(resolver.Calls("a"), 1);
  EXPECT_EQ(resolver.Calls("b"), 1);
  EXPECT_EQ(r.message,
            "2 of 2 peer names did not resolve within 0s: a, b (Name or service not "
            "known)");
}

TEST_F(PreflightDnsTest, DuplicateNamesAreCheckedOnce) {
  FakeClock clock;
  CountingResolver resolver([](const std::string&) { return std::expected<void, std::string>(); });
  const ItemResult r =
      CheckDns(Dns({"w-0", "W-0", "w-1", "w-0"}, seconds(0)), resolver.AsResolver(), clock);
  EXPECT_TRUE(r.passed);
  EXPECT_EQ(r.value, "2/2 resolved");
  EXPECT_EQ(resolver.Calls("w-0"), 1);
  EXPECT_EQ(resolver.Calls("W-0"), 0);
}

TEST_F(PreflightDnsTest, NoHostnamesPassesWithANote) {
  FakeClock clock;
  const ItemResult r = CheckDns({}, FailAll(), clock);
  EXPECT_TRUE(r.passed);
  EXPECT_EQ(r.value, "0/0 resolved");
  EXPECT_THAT(r.message, HasSubstr("TPU_WORKER_HOSTNAMES is empty"));
}

TEST_F(PreflightDnsTest, FailuresAreGroupedByReasonAndTheLogListIsAbbreviated) {
  FakeClock clock;
  std::vector<std::string> names;
  for (int i = 0; i < 12; ++i) names.push_back("w-" + std::to_string(i));
  const Resolver resolver = [](const std::string& name) -> std::expected<void, std::string> {
    if (name == "w-0") return {};
    if (name == "w-1") return std::unexpected("Temporary failure in name resolution");
    return std::unexpected("Name or service not known");
  };
  const ItemResult r = CheckDns(Dns(names, seconds(0)), resolver, clock);
  EXPECT_THAT(r.message, HasSubstr("w-2, w-3, w-4, w-5, w-6, w-7, w-8, w-9, w-10, w-11 (Name or "
                                   "service not known); w-1 (Temporary failure"));
  EXPECT_THAT(r.log_fields,
              Contains(Pair("unresolved", "w-1,w-2,w-3,w-4,w-5,w-6,w-7,w-8,w-9,w-10,+1 more")));
}

TEST_F(PreflightDnsTest, HostsFileNamesAreLowerCasedAndCommentsIgnored) {
  const std::string path = Write("hosts",
                                 "127.0.0.1 localhost Local.Example\n"
                                 "\n"
                                 "# 10.0.0.1 commented-out\n"
                                 "10.0.0.2   Peer-A peer-a.svc   # trailing\n"
                                 "10.0.0.3\n");
  EXPECT_THAT(ReadHostsFile(path),
              ElementsAre("localhost", "local.example", "peer-a", "peer-a.svc"));
  EXPECT_TRUE(ReadHostsFile(Path("missing")).empty());
  EXPECT_TRUE(ReadHostsFile("").empty());
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::preflight
