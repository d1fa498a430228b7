// What /healthz reports: a stuck reconcile or a silent watch, judged from a snapshot.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "controller/health.h"

namespace tpujob::controller {
namespace TPUJOB_TEST_NS {

using std::chrono::minutes;
using std::chrono::seconds;

TEST(HealthProblemsTest, Table) {
  const TimePoint start = TimePoint{} + std::chrono::hours(1);
  const HealthLimits limits{minutes(5), minutes(11)};
  struct Case {
    std::string name;
    std::vector<WatchActivity> watches;
    std::vector<QueueActivity> queues;
    Duration elapsed;  // since the informers started
    std::vector<std::string> problems;
  };
  const std::vector<Case> cases = {
      {"idle and fresh", {{"pods", start + minutes(20)}}, {{"tpujob", {}}}, minutes(21), {}},
      {"reconcile at the limit", {}, {{"tpujob", minutes(5)}}, minutes(30), {}},
      {"reconcile stuck",
       {},
       {{"tpujob", seconds(301)}, {"node", seconds(1)}},
       minutes(30),
       {"work queue tpujob: a reconcile has been running for 301s (limit 300s)"}},
      {"watch quiet but within a watch timeout",
       {{"nodes", start + minutes(10)}},
       {},
       minutes(21),
       {}},
      {"watch silent",
       {{"pods", start + minutes(29)}, {"nodes", start + minutes(1)}},
       {},
       minutes(30),
       {"watch nodes: nothing heard from the API server for 1740s (limit 660s)"}},
      {"never heard: judged from the start", {{"tpujobs", TimePoint{}}}, {}, minutes(11), {}},
      {"never heard, too long",
       {{"tpujobs", TimePoint{}}},
       {},
       minutes(12),
       {"watch tpujobs: nothing heard from the API server for 720s (limit 660s)"}},
      {"both",
       {{"pods", start}},
       {{"node", minutes(6)}},
       minutes(12),
       {"work queue node: a reconcile has been running for 360s (limit 300s)",
        "watch pods: nothing heard from the API server for 720s (limit 660s)"}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(HealthProblems(c.watches, c.queues, start, start + c.elapsed, limits), c.problems)
        << c.name;
  }
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::controller
