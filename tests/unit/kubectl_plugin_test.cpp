// `kubectl tpujob`: the list and describe texts from fixed objects and a fixed `now`.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>

#include "plugin_render.h"

namespace tpujob::plugin {
namespace TPUJOB_TEST_NS {

using nlohmann::json;
using ::testing::HasSubstr;

// 2026-01-01T12:00:00Z
const WallTime kNow = std::chrono::system_clock::from_time_t(1767268800);

json Job(const std::string& name, const std::string& phase, int position, int priority,
         bool reissued = false) {
  json job = {
      {"metadata",
       {{"name", name}, {"namespace", "ml"}, {"creationTimestamp", "2026-01-01T11:00:00Z"}}},
      {"spec",
       {{"priority", priority},
        {"tpu", {{"accelerator", "tpu-v5p-slice"}, {"topology", "2x2x4"}, {"chipsPerWorker", 4}}}}},
      {"status", {{"phase", phase}, {"attempt", reissued ? 2 : 1}}}};
  if (phase == "Queued") {
    job["status"]["queuePosition"] = position;
    job["status"]["reissued"] = reissued;
    job["status"]["queuedAt"] = "2026-01-01T11:55:00Z";
    job["status"]["conditions"] = {{{"type", "Admitted"},
                                    {"status", "False"},
                                    {"reason", "InsufficientCapacity"},
                                    {"lastTransitionTime", "2026-01-01T11:55:00Z"},
                                    {"message", "needs 4 hosts in one pool; the best pool has 1"}}};
  }
  return job;
}

TEST(KubectlPluginTest, ListShowsTheQueueInOrderThenTheOthers) {
  const std::string out =
      RenderList({Job("low", "Queued", 3, 1), Job("running", "Running", 0, 5),
                  Job("again", "Queued", 1, 0, true), Job("high", "Queued", 2, 9)},
                 kNow, false);
  EXPECT_THAT(out, HasSubstr("QUEUE (3 waiting, next first)"));
  const size_t again = out.find("again");
  const size_t high = out.find("high");
  const size_t low = out.find("low");
  const size_t running = out.find("running");
  ASSERT_NE(again, std::string::npos) << out;
  EXPECT_LT(again, high) << out;
  EXPECT_LT(high, low) << out;
  EXPECT_LT(low, running) << out;
  EXPECT_THAT(out, HasSubstr("needs 4 hosts in one pool; the best pool has 1"));
  EXPECT_THAT(out, HasSubstr("ADMITTED AND FINISHED"));
  // The re-issued job says so, and the wait is measured from queuedAt.
  const std::string again_line =
      out.substr(out.rfind('\n', again) + 1, out.find('\n', again) - out.rfind('\n', again) - 1);
  EXPECT_THAT(again_line, HasSubstr("yes")) << again_line;
  EXPECT_THAT(again_line, HasSubstr("5m")) << again_line;
  EXPECT_EQ(RenderList({}, kNow, false), "No TPUJobs found.\n");
  EXPECT_THAT(RenderList({Job("x", "Queued", 1, 0)}, kNow, true), HasSubstr("ml/x"));
}

TEST(KubectlPluginTest, DescribeShowsQueueFaultsCordonsAndPods) {
  json job = Job("llm", "Queued", 2, 7, true);
  job["spec"]["faultTolerance"]["maxJobRetries"] = 3;
  job["status"]["jobRetries"] = 1;
  job["status"]["cordonedNodes"] = {"tpu-node-3"};
  job["status"]["faults"] = {{{"time", "2026-01-01T11:54:00Z"},
                              {"attempt", 1},
                              {"kind", "InitContainerFailed"},
                              {"node", "tpu-node-3"},
                              {"pod", "llm-worker-1"},
                              {"item", "disk-size shm"},
                              {"exitCode", 10},
                              {"action", "ReissueJob"},
                              {"message", "/dev/shm is 0.1 GB"}}};
  const json pod = {{"metadata",
                     {{"name", "llm-worker-0"},
                      {"creationTimestamp", "2026-01-01T11:59:00Z"},
                      {"labels", {{"tpujob.dev/attempt", "2"}}}}},
                    {"spec", {{"nodeName", "tpu-node-1"}}},
                    {"status", {{"phase", "Running"}}}};
  const std::string out = RenderDescribe(job, {pod}, kNow);
  for (const char* want : {"Name:",
                           "llm",
                           "Phase:",
                           "Queued",
                           "Job retries:",
                           "1 of 3",
                           "Position:",
                           "2 (1 = next)",
                           "yes (re-issued jobs go first)",
                           "Why it waits:",
                           "needs 4 hosts in one pool; the best pool has 1",
                           "InitContainerFailed",
                           "tpu-node-3",
                           "llm-worker-1",
                           "disk-size shm",
                           "ReissueJob",
                           "/dev/shm is 0.1 GB",
                           "Cordoned nodes:",
                           "llm-worker-0",
                           "tpu-node-1",
                           "Running",
                           "6m"}) {
    EXPECT_THAT(out, HasSubstr(want)) << out;
  }
  // A running job has no queue section, and empty parts say so.
  const std::string running = RenderDescribe(Job("r", "Running", 0, 0), {}, kNow);
  EXPECT_THAT(running, ::testing::Not(HasSubstr("Why it waits")));
  EXPECT_THAT(running, HasSubstr("Faults (oldest first):\n  <none>"));
}

TEST(KubectlPluginTest, DescribeShowsWhatATpuTypeMeans) {
  json job = Job("typed", "Queued", 1, 0);
  job["spec"]["tpu"] = {{"type", "v5p-128"}};
  EXPECT_THAT(RenderDescribe(job, {}, kNow),
              HasSubstr("v5p-128: tpu-v5p-slice 4x4x4, 4 chips per worker"));
}

TEST(KubectlPluginTest, MultisliceJobShowsItsSlicesPoolsAndTheSliceOfEachFault) {
  json job = Job("ms", "Running", 0, 0);
  job["spec"]["tpu"]["slices"] = 3;
  job["status"]["nodePools"] = {"pool-a", "pool-c", "pool-d"};
  job["status"]["faults"] = {{{"time", "2026-01-01T11:54:00Z"},
                              {"attempt", 1},
                              {"kind", "NodeUnhealthy"},
                              {"node", "tpu-node-7"},
                              {"pod", "ms-worker-1-2"},
                              {"slice", 1},
                              {"action", "ReissueJob"}}};
  const std::string out = RenderDescribe(job, {}, kNow);
  EXPECT_THAT(out, HasSubstr("4 chips per worker, 3 slices")) << out;
  EXPECT_THAT(out, HasSubstr("pool-a,pool-c,pool-d")) << out;
  const size_t header = out.find("SLICE");
  ASSERT_NE(header, std::string::npos) << out;
  const size_t row = out.find("ms-worker-1-2");
  ASSERT_NE(row, std::string::npos) << out;
  // The slice column holds 1 in the fault's row, under its header.
  const size_t row_start = out.rfind('\n', row) + 1;
  const size_t header_start = out.rfind('\n', header) + 1;
  EXPECT_EQ(out.substr(row_start + (header - header_start), 1), "1") << out;
  EXPECT_THAT(RenderList({job}, kNow, false), HasSubstr("pool-a,pool-c,pool-d"));
  // A single-slice job shows its one pool, from nodePool.
  json single = Job("one", "Running", 0, 0);
  single["status"]["nodePool"] = "pool-b";
  EXPECT_THAT(RenderDescribe(single, {}, kNow), HasSubstr("Node pool:"));
  EXPECT_THAT(RenderDescribe(single, {}, kNow), HasSubstr("pool-b"));
  EXPECT_THAT(RenderDescribe(single, {}, kNow), ::testing::Not(HasSubstr("SLICE")));
}

TEST(KubectlPluginTest, ProgressFromATimestampedLogTail) {
  const std::string log =
      "2026-01-01T11:58:00.000000000Z loading data\n"
      "2026-01-01T11:58:10.500000000Z completed step: 100, seconds: 1.2\n"
      "2026-01-01T11:58:30.500000000Z completed step: 120, seconds: 1.0\n"
      "not a timestamp completed step: 999\n"
      "2026-01-01T11:59:00.500000000Z completed step: 150, seconds: 1.0\n"
      "2026-01-01T11:59:01.000000000Z saved checkpoint at step 150";  // no newline at the end
  const LogProgress p = ProgressFromLog(log, "completed step: (\\d+)");
  EXPECT_EQ(p.error, "");
  EXPECT_EQ(p.step, 150);
  ASSERT_TRUE(p.steps_per_second.has_value());
  EXPECT_DOUBLE_EQ(*p.steps_per_second, 1.0);  // 50 steps in 50 s
  EXPECT_FALSE(ProgressFromLog("2026-01-01T11:58:00Z hello\n", "step (\\d+)").step.has_value());
  EXPECT_NE(ProgressFromLog(log, "step (").error, "");

  json job = Job("llm", "Running", 0, 0);
  job["spec"]["faultTolerance"]["progress"] = {{"logPattern", "completed step: (\\d+)"},
                                               {"stallSeconds", 300}};
  job["status"]["stalls"] = 2;
  job["status"]["progress"] = {{"step", 120},
                               {"time", "2026-01-01T11:50:00Z"},
                               {"checkpointStep", 100},
                               {"stallsInARow", 1},
                               {"suspectNode", "tpu-7"}};
  LogProgress now = p;
  now.source = "pod llm-worker-0, its last 500 log lines";
  const std::string out = RenderDescribe(job, {}, kNow, now);
  for (const char* want :
       {"Progress:\n", "Now:               step 150, 60s ago, 1 steps/s (pod llm-worker-0",
        "Last reported:     step 120, 10m ago", "Last checkpoint:   100",
        "Stalls:            2 (1 in a row of at most 3), last suspect node tpu-7",
        "Stall after:       300s without a step (1800s before the first)"}) {
    EXPECT_THAT(out, HasSubstr(want)) << out;
  }
  EXPECT_THAT(RenderDescribe(Job("q", "Running", 0, 0), {}, kNow),
              ::testing::Not(HasSubstr("Progress:")));
}

TEST(KubectlPluginTest, DescribeShowsTheGoodputBreakdownUpToNow) {
  json job = Job("llm", "Running", 0, 0);
  job["status"]["goodput"] = {{"state", "Productive"},
                              {"stateSince", "2026-01-01T11:58:00.000Z"},
                              {"accountedUntil", "2026-01-01T11:59:00.000Z"},
                              {"chips", 16},
                              {"productiveSeconds", 60},
                              {"productiveChipSeconds", 960},
                              {"lostSeconds", {{"queued", 30}, {"reissue", 30.5}}},
                              {"lostChipSeconds", {{"queued", 480}, {"reissue", 488}}}};
  const std::string out = RenderDescribe(job, {}, kNow);
  // 60 s more productive since accountedUntil: 120 of 180.5 s.
  for (const char* want : {"Goodput: 0.665 of 180.5 s (16 chips), now Productive for 2m", "STATE",
                           "CHIP-SECONDS", "  Productive   120.0     1920.0         66.5%\n",
                           "  Queued       30.0      480.0          16.6%\n",
                           "  Reissue      30.5      488.0          16.9%\n"}) {
    EXPECT_THAT(out, HasSubstr(want)) << out;
  }
  EXPECT_THAT(RenderDescribe(Job("q", "Queued", 1, 0), {}, kNow),
              HasSubstr("Goodput: <not counted yet>"));
}

TEST(KubectlPluginTest, DescribeShowsTheTimeAnElasticJobRanOnFewerSlices) {
  json job = Job("llm", "Running", 0, 0);
  job["status"]["goodput"] = {{"state", "Productive"},
                              {"stateSince", "2026-01-01T11:58:00.000Z"},
                              {"accountedUntil", "2026-01-01T11:59:00.000Z"},
                              {"chips", 48},
                              {"missingChips", 16},
                              {"degradedSeconds", 60},
                              {"productiveSeconds", 60},
                              {"productiveChipSeconds", 2880},
                              {"lostSeconds", json::object()},
                              {"lostChipSeconds", {{"degraded", 960}}}};
  const std::string out = RenderDescribe(job, {}, kNow);
  // 60 s more on 3 of 4 slices since accountedUntil: 120 s without 16 chips.
  EXPECT_THAT(out, HasSubstr("  Degraded (within Productive)   120.0     1920.0         100.0%\n"))
      << out;
}

TEST(KubectlPluginTest, DescribeShowsJobControlOnlyWhenSet) {
  json job = Job("llm", "Suspended", 0, 0);
  job["spec"]["suspend"] = true;
  job["spec"]["activeDeadlineSeconds"] = 3600;
  job["spec"]["ttlSecondsAfterFinished"] = 600;
  job["status"]["startTime"] = "2026-01-01T11:50:00Z";
  job["spec"]["preemptible"] = false;
  job["status"]["preemptions"] = 2;
  job["status"]["preemptedBy"] = "team/urgent";
  job["status"]["preemptedAt"] = "2026-01-01T11:57:00Z";
  const std::string out = RenderDescribe(job, {}, kNow);
  for (const char* want : {"Suspended:      yes (spec.suspend; clear it to queue the job again)",
                           "Deadline:       3600s from the first admission (admitted 10m ago)",
                           "Delete after:   600s once finished (ttlSecondsAfterFinished)",
                           "Preemptible:    no (spec.preemptible)",
                           "Preempted:      2 times, last by team/urgent 3m ago"}) {
    EXPECT_THAT(out, HasSubstr(want)) << out;
  }
  const std::string plain = RenderDescribe(Job("r", "Running", 0, 0), {}, kNow);
  for (const char* absent :
       {"Suspended:", "Deadline:", "Delete after:", "Preemptible:", "Preempted:"}) {
    EXPECT_THAT(plain, ::testing::Not(HasSubstr(absent))) << plain;
  }
}

TEST(KubectlPluginTest, AgeReadsLikeKubectl) {
  EXPECT_EQ(Age("2026-01-01T11:59:30Z", kNow), "30s");
  EXPECT_EQ(Age("2026-01-01T11:57:00Z", kNow), "3m");
  EXPECT_EQ(Age("2026-01-01T09:30:00Z", kNow), "2h30m");
  EXPECT_EQ(Age("2025-12-30T11:00:00Z", kNow), "2d1h");
  EXPECT_EQ(Age("garbage", kNow), "<unknown>");
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::plugin
