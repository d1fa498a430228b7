// The benchmark's played supervisors (bench/played_supervisors.h): what they read of a pod's
// events, and when a container restart they wrote counts as overwritten and is written again.
#include <gtest/gtest.h>

#include <chrono>

#include "../../bench/played_supervisors.h"

namespace tpujob::bench {
namespace TPUJOB_TEST_NS {

// A pod's watch event: its generation and barrier annotations, its container's restartCount.
Json PodEvent(int generation, int barrier, int restarts) {
  return {{"metadata",
           {{"name", "job-worker-0-0"},
            {"annotations",
             {{"tpujob.dev/generation", std::to_string(generation)},
              {"tpujob.dev/barrier", std::to_string(barrier)}}}}},
          {"status", {{"containerStatuses", Json::array({{{"restartCount", restarts}}})}}}};
}

TEST(PlayedSupervisorsTest, AnEventReadsTheAnnotationsAndTheRestartCount) {
  PlayedProgram p;
  const auto at = std::chrono::steady_clock::now();
  ObservePlayedProgram(p, PodEvent(2, 1, 3), true, at);
  EXPECT_EQ(p.name, "job-worker-0-0");
  EXPECT_EQ(p.generation, 2);
  EXPECT_EQ(p.barrier, 1);
  EXPECT_EQ(p.observed_restarts, 3);
  ASSERT_TRUE(p.barrier_at.has_value());
  EXPECT_EQ(*p.barrier_at, at);
}

TEST(PlayedSupervisorsTest, ARestartIsLostOnlyWhenAnEventAfterItsOwnShowsFewerRestarts) {
  PlayedProgram p;
  const auto at = std::chrono::steady_clock::now();
  ObservePlayedProgram(p, PodEvent(1, 1, 0), true, at);
  EXPECT_FALSE(PlayedRestartLost(p)) << "nothing restarted yet";

  // SuperviseUntil writes the first restart.
  p.restarts = 1;
  p.echoed = false;
  p.pending = true;
  EXPECT_FALSE(PlayedRestartLost(p)) << "being written";
  p.pending = false;
  ObservePlayedProgram(p, PodEvent(2, 1, 0), false, at);
  EXPECT_FALSE(PlayedRestartLost(p)) << "an event from before the write came back";

  ObservePlayedProgram(p, PodEvent(2, 1, 1), false, at);
  EXPECT_TRUE(p.echoed);
  EXPECT_FALSE(PlayedRestartLost(p)) << "the write came back";

  // KWOK's pod-ready stage, run late, writes restartCount 0 over it.
  ObservePlayedProgram(p, PodEvent(2, 1, 0), false, at);
  EXPECT_TRUE(PlayedRestartLost(p));

  // Written again (SuperviseUntil): not lost until an event after it shows fewer again.
  p.echoed = false;
  EXPECT_FALSE(PlayedRestartLost(p));
  ObservePlayedProgram(p, PodEvent(2, 1, 1), false, at);
  EXPECT_FALSE(PlayedRestartLost(p));
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::bench
