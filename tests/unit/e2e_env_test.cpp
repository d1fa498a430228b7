// The end-to-end suite's own plumbing (e2e/e2e_env.h): which control plane a test runs against
// when ctest gave it a shard, and how Eventually paces its polls.
#include "e2e_env.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

// Sets the variables for one test and puts back what was there before.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::optional<std::string>>& values) {
    for (const auto& [name, value] : values) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old != nullptr ? std::optional<std::string>(old) : std::nullopt;
      Set(name, value);
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) Set(name, value);
  }

 private:
  static void Set(const std::string& name, const std::optional<std::string>& value) {
    if (value) {
      ::setenv(name.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST(E2eEnvTest, ATestGivenShardTwoRunsAgainstShardTwosControlPlane) {
  ScopedEnv env({{"CTEST_RESOURCE_GROUP_0", "cluster"},
                 {"CTEST_RESOURCE_GROUP_0_CLUSTER", "id:2,slots:1"},
                 {"TPUJOB_E2E_SHARD_ROOT", "/r/e2e-cluster"},
                 {"TPUJOB_E2E_DIR", "/r/e2e-cluster/shard-1"}});
  EXPECT_EQ(ShardId(), 2);
  EXPECT_EQ(ClusterDir(), "/r/e2e-cluster/shard-2");
}

TEST(E2eEnvTest, WithoutAShardATestUsesItsDirectory) {
  {
    ScopedEnv env({{"CTEST_RESOURCE_GROUP_0", std::nullopt},
                   {"CTEST_RESOURCE_GROUP_0_CLUSTER", std::nullopt},
                   {"TPUJOB_E2E_SHARD_ROOT", "/r/e2e-cluster"},
                   {"TPUJOB_E2E_DIR", "/r/e2e-cluster/shard-1"}});
    EXPECT_EQ(ShardId(), 0);
    EXPECT_EQ(ClusterDir(), "/r/e2e-cluster/shard-1");
  }
  {
    // The real node's tests hold resource "realnode", not a shard.
    ScopedEnv env({{"CTEST_RESOURCE_GROUP_0", "realnode"},
                   {"CTEST_RESOURCE_GROUP_0_REALNODE", "id:real,slots:1"},
                   {"CTEST_RESOURCE_GROUP_0_CLUSTER", std::nullopt},
                   {"TPUJOB_E2E_SHARD_ROOT", std::nullopt},
                   {"TPUJOB_E2E_DIR", "/r/e2e-real"}});
    EXPECT_EQ(ShardId(), 0);
    EXPECT_EQ(ClusterDir(), "/r/e2e-real");
  }
  {
    ScopedEnv env({{"CTEST_RESOURCE_GROUP_0", std::nullopt},
                   {"TPUJOB_E2E_SHARD_ROOT", std::nullopt},
                   {"TPUJOB_E2E_DIR", std::nullopt}});
    EXPECT_EQ(ClusterDir(), "/tmp/tpujob-e2e");
  }
}

// Sleeps only ever last longer than asked, so these counts are upper bounds on any machine.
TEST(E2eEnvTest, EventuallyPollsLessOftenTheLongerItWaits) {
  int polls = 0;
  EXPECT_FALSE(Eventually([&] { return ++polls < 0; }, std::chrono::milliseconds(1000)));
  // Pauses of 50, 75, 112, 168, 250, 250 and 250 ms fill the second: 8 polls and the last one
  // after the deadline. With a fixed 50 ms pause it would have been 21.
  EXPECT_LE(polls, 9);
  EXPECT_GE(polls, 2);
}

TEST(E2eEnvTest, EventuallyKeepsAnIntervalItIsGiven) {
  int polls = 0;
  EXPECT_TRUE(Eventually([&] { return ++polls == 3; }, std::chrono::seconds(5),
                         std::chrono::milliseconds(1)));
  EXPECT_EQ(polls, 3);
  polls = 0;
  EXPECT_FALSE(Eventually([&] { return ++polls < 0; }, std::chrono::milliseconds(300),
                          std::chrono::milliseconds(100)));
  EXPECT_LE(polls, 5);  // 0, 100, 200, then the one at the deadline (at most one more if late)
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
