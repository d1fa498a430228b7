// policy/progress_log.h: what a timestamped log tail says of a program's progress, and when
// status.progress takes it.
#include <gtest/gtest.h>

#include <string>

#include "cache/objects.h"
#include "policy/progress_log.h"

namespace tpujob::policy {
namespace TPUJOB_TEST_NS {

WallTime At(const std::string& rfc3339) { return *cache::ParseRfc3339(rfc3339); }

TEST(PolicyProgressLogTest, StepCheckpointAndRateFromATail) {
  const std::string log =
      "2026-01-01T11:58:00.000000000Z loading data\n"
      "2026-01-01T11:58:10.500000000Z completed step: 100, seconds: 1.2\n"
      "2026-01-01T11:58:20.000000000Z saved checkpoint at step 100\n"
      "not a timestamp completed step: 999\n"
      "2026-01-01T11:59:10.500000000Z completed step: 160, seconds: 1.0\n"
      "2026-01-01T11:59:11.000000000Z saved checkpoint at step 160";  // no newline at the end
  const LogProgress p =
      ProgressFromLog(log, "completed step: (\\d+)", "saved checkpoint at step (\\d+)");
  EXPECT_EQ(p.error, "");
  EXPECT_EQ(p.step, 160);
  EXPECT_EQ(p.checkpoint, 160);
  ASSERT_TRUE(p.at.has_value());
  EXPECT_EQ(*p.at, At("2026-01-01T11:59:10.5Z"));
  ASSERT_TRUE(p.steps_per_second.has_value());
  EXPECT_DOUBLE_EQ(*p.steps_per_second, 1.0);  // 60 steps in 60 s
  EXPECT_FALSE(ProgressFromLog(log, "completed step: (\\d+)").checkpoint.has_value());
}

TEST(PolicyProgressLogTest, PatternsThatDoNotCompileAreAnError) {
  const std::string log = "2026-01-01T11:58:00Z step 1\n";
  EXPECT_NE(ProgressFromLog(log, "step (").error, "");
  EXPECT_NE(ProgressFromLog(log, "step (\\d+)", "checkpoint (").error, "");
  EXPECT_NE(ProgressFromLog(log, "step \\d+").error, "") << "no capture group";
  EXPECT_FALSE(ProgressFromLog("2026-01-01T11:58:00Z hello\n", "step (\\d+)").step.has_value());
}

TEST(PolicyProgressLogTest, RefreshWritesOnlyNewsAndKeepsStallState) {
  ProgressStatus held;
  held.step = 150;
  held.time = At("2026-01-01T12:00:00Z");
  held.checkpoint_step = 100;
  held.stalls_in_a_row = 2;
  held.stalled_at_step = 150;
  held.suspect_node = "node-3";
  auto read = [](int64_t step, const std::string& at, std::optional<int64_t> checkpoint = {}) {
    LogProgress p;
    p.step = step;
    p.at = At(at);
    p.checkpoint = checkpoint;
    return p;
  };
  struct Case {
    const char* name;
    std::optional<ProgressStatus> current;
    LogProgress log;
    bool written;
  };
  LogProgress unreadable = read(200, "2026-01-01T12:01:00Z");
  unreadable.error = "cannot read";
  const Case cases[] = {
      {"nothing held yet", std::nullopt, read(5, "2026-01-01T12:01:00Z"), true},
      {"the step moved", held, read(200, "2026-01-01T12:01:00Z"), true},
      {"back to the checkpoint after a restart", held, read(101, "2026-01-01T12:01:00Z"), true},
      {"only the checkpoint moved", held, read(150, "2026-01-01T12:01:00Z", 150), true},
      {"the same step", held, read(150, "2026-01-01T12:01:00Z", 100), false},
      {"a line older than what is held", held, read(200, "2026-01-01T11:59:00Z"), false},
      {"no step in the tail", held, LogProgress{}, false},
      {"the log could not be read", held, unreadable, false},
  };
  for (const Case& c : cases) {
    const auto next = RefreshProgress(c.current, c.log);
    EXPECT_EQ(next.has_value(), c.written) << c.name;
    if (!next) continue;
    EXPECT_EQ(next->step, c.log.step) << c.name;
    EXPECT_EQ(next->time, c.log.at) << c.name;
    if (c.current) {
      EXPECT_EQ(next->stalls_in_a_row, 2) << c.name;
      EXPECT_EQ(next->stalled_at_step, 150) << c.name;
      EXPECT_EQ(next->suspect_node, "node-3") << c.name;
      EXPECT_EQ(next->checkpoint_step, c.log.checkpoint.value_or(100)) << c.name;
    }
  }
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::policy
