// `tpujob-operator node-agent`: flag validation, capacity parsing, the verdict of a round, the
// hysteresis between rounds and the condition, the patch body, which pod updates trigger a round
// at once, and rounds against a fake API server (operator/node_agent*.h).
#include "node_agent.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "cache/objects.h"
#include "fake_client.h"
#include "log_capture.h"
#include "node_agent_command.h"
#include "preflight_test_util.h"

namespace tpujob::agent {
namespace TPUJOB_TEST_NS {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

preflight::EnvironmentLookup Env(std::map<std::string, std::string> vars) {
  return [vars](std::string_view name) -> std::optional<std::string> {
    auto it = vars.find(std::string(name));
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// ---------------------------------------------------------------------------------------------
// Flags

TEST(NodeAgentFlagsTest, DefaultsWithNodeNameFromTheEnvironment) {
  const auto settings = Validate(Flags{}, Env({{"NODE_NAME", "tpu-node-7"}}));
  ASSERT_TRUE(settings.has_value()) << ::testing::PrintToString(settings.error());
  EXPECT_EQ(settings->node_name, "tpu-node-7");
  EXPECT_EQ(settings->interval, std::chrono::seconds(60));
  EXPECT_THAT(settings->checks, ElementsAre(preflight::Check::kAccelerator));
  EXPECT_EQ(settings->dev_root, "/dev");
  EXPECT_EQ(settings->root_path, "/");
  EXPECT_EQ(settings->condition_type, "TPUUnhealthy");
  EXPECT_EQ(settings->fail_after, 1);
  EXPECT_EQ(settings->pass_after, 3);
  EXPECT_TRUE(settings->watch_pods);
}

TEST(NodeAgentFlagsTest, NoPodWatchWhenTurnedOffOrOnce) {
  Flags flags;
  flags.node_name = "n";
  flags.watch_pods = false;
  auto settings = Validate(flags, Env({}));
  ASSERT_TRUE(settings.has_value());
  EXPECT_FALSE(settings->watch_pods);
  flags.watch_pods = true;
  flags.once = true;
  settings = Validate(flags, Env({}));
  ASSERT_TRUE(settings.has_value());
  EXPECT_FALSE(settings->watch_pods);
}

TEST(NodeAgentFlagsTest, TheFlagWinsOverTheEnvironment) {
  Flags flags;
  flags.node_name = "from-flag";
  const auto settings = Validate(flags, Env({{"NODE_NAME", "from-env"}}));
  ASSERT_TRUE(settings.has_value());
  EXPECT_EQ(settings->node_name, "from-flag");
}

TEST(NodeAgentFlagsTest, EveryProblemIsReportedWithItsFlag) {
  Flags flags;
  flags.interval_seconds = 0;
  flags.checks = "accelerator,dns";
  flags.condition_type = "TPU Unhealthy";
  flags.fail_after = 0;
  flags.pass_after = -1;
  flags.dev_root = "";
  const auto settings = Validate(flags, Env({}));
  ASSERT_FALSE(settings.has_value());
  const std::vector<std::string>& problems = settings.error();
  ASSERT_THAT(problems, SizeIs(7)) << ::testing::PrintToString(problems);
  EXPECT_THAT(problems[0], HasSubstr("--node-name"));
  EXPECT_THAT(problems[1], HasSubstr("--interval=0"));
  EXPECT_THAT(problems[2], HasSubstr("--checks=\"accelerator,dns\""));
  EXPECT_THAT(problems[2], HasSubstr("not of a node"));
  EXPECT_THAT(problems[3], HasSubstr("--dev-root"));
  EXPECT_THAT(problems[4], HasSubstr("--condition-type=\"TPU Unhealthy\""));
  EXPECT_THAT(problems[5], HasSubstr("--fail-after=0"));
  EXPECT_THAT(problems[6], HasSubstr("--pass-after=-1"));
}

TEST(NodeAgentFlagsTest, ChecksAreParsedIntoCanonicalOrderOnceEach) {
  EXPECT_THAT(ParseChecks("ulimit, disk,accelerator,disk").value(),
              ElementsAre(preflight::Check::kAccelerator, preflight::Check::kDisk,
                          preflight::Check::kUlimit));
  EXPECT_THAT(ParseChecks("disk").value(), ElementsAre(preflight::Check::kDisk));
  EXPECT_FALSE(ParseChecks("").has_value());
  EXPECT_FALSE(ParseChecks(" , ").has_value());
  EXPECT_THAT(ParseChecks("accelerator,gpu").error(), HasSubstr("unknown check \"gpu\""));
}

// ---------------------------------------------------------------------------------------------
// Capacity and conditions read from the node

TEST(NodeAgentCapacityTest, ReadsGoogleTpuFromStatusCapacity) {
  struct Case {
    const char* name;
    kube::Json node;
    std::optional<int64_t> want;  // nullopt: an error
  };
  const std::vector<Case> cases = {
      {"string", {{"status", {{"capacity", {{"google.com/tpu", "4"}, {"cpu", "32"}}}}}}, 4},
      {"number", {{"status", {{"capacity", {{"google.com/tpu", 8}}}}}}, 8},
      {"zero", {{"status", {{"capacity", {{"google.com/tpu", "0"}}}}}}, 0},
      {"absent", {{"status", {{"capacity", {{"cpu", "32"}}}}}}, 0},
      {"no capacity", {{"status", kube::Json::object()}}, 0},
      {"no status", kube::Json::object(), 0},
      {"milli", {{"status", {{"capacity", {{"google.com/tpu", "500m"}}}}}}, std::nullopt},
      {"negative", {{"status", {{"capacity", {{"google.com/tpu", "-1"}}}}}}, std::nullopt},
      {"empty", {{"status", {{"capacity", {{"google.com/tpu", ""}}}}}}, std::nullopt},
  };
  for (const Case& c : cases) {
    const auto capacity = TpuCapacity(c.node);
    if (c.want) {
      ASSERT_TRUE(capacity.has_value()) << c.name << ": " << capacity.error();
      EXPECT_EQ(*capacity, *c.want) << c.name;
    } else {
      ASSERT_FALSE(capacity.has_value()) << c.name << ": " << *capacity;
      EXPECT_THAT(capacity.error(), HasSubstr("google.com/tpu")) << c.name;
    }
  }
}

TEST(NodeAgentCapacityTest, FindsTheConditionByType) {
  const kube::Json node = {{"status",
                            {{"conditions",
                              {{{"type", "Ready"}, {"status", "True"}},
                               {{"type", "TPUUnhealthy"},
                                {"status", "True"},
                                {"reason", "AcceleratorMissing"},
                                {"message", "3 of 4"},
                                {"lastTransitionTime", "2026-01-02T03:04:05Z"}}}}}}};
  const auto condition = FindCondition(node, "TPUUnhealthy");
  ASSERT_TRUE(condition.has_value());
  EXPECT_EQ(condition->status, "True");
  EXPECT_EQ(condition->reason, "AcceleratorMissing");
  EXPECT_EQ(condition->message, "3 of 4");
  EXPECT_EQ(condition->last_transition_time, "2026-01-02T03:04:05Z");
  EXPECT_FALSE(FindCondition(node, "KernelDeadlock").has_value());
  EXPECT_FALSE(FindCondition(kube::Json::object(), "TPUUnhealthy").has_value());
}

// ---------------------------------------------------------------------------------------------
// Hysteresis

NodeCondition WithStatus(std::string status, std::string last_transition_time = "") {
  NodeCondition condition;
  condition.status = std::move(status);
  condition.last_transition_time = std::move(last_transition_time);
  return condition;
}

TEST(NodeAgentHysteresisTest, Table) {
  struct Case {
    const char* name;
    bool start_unhealthy;
    int fail_after;
    int pass_after;
    std::string rounds;  // 'P' passing, 'F' failing
    std::string want;    // the condition after each round: 'T' True, 'f' False
  };
  const std::vector<Case> cases = {
      {"one failure sets at once", false, 1, 3, "F", "T"},
      {"healthy stays healthy", false, 1, 3, "PPP", "fff"},
      {"cleared after three passes", false, 1, 3, "FPPP", "TTTf"},
      {"a failure among passes restarts the count", false, 1, 3, "FPPFPPP", "TTTTTTf"},
      {"flapping never clears", false, 1, 3, "FPFPFPPFP", "TTTTTTTTT"},
      {"fail-after 2 needs two in a row", false, 2, 1, "FPFFP", "fffTf"},
      {"pass-after 1 clears at once", false, 1, 1, "FPFP", "TfTf"},
      {"restart on a True condition needs pass-after passes", true, 1, 3, "PPP", "TTf"},
      {"restart on a True condition, failing", true, 1, 3, "FPP", "TTT"},
      {"restart on False, failing", false, 1, 3, "F", "T"},
  };
  for (const Case& c : cases) {
    Hysteresis state;
    state.unhealthy = c.start_unhealthy;
    std::string got;
    for (char round : c.rounds) {
      state = Step(state, round == 'P', c.fail_after, c.pass_after);
      got += state.unhealthy ? 'T' : 'f';
    }
    EXPECT_EQ(got, c.want) << c.name;
  }
}

TEST(NodeAgentHysteresisTest, StartsFromTheNodesCondition) {
  EXPECT_TRUE(InitialState(WithStatus("True")).unhealthy);
  EXPECT_FALSE(InitialState(WithStatus("False")).unhealthy);
  EXPECT_FALSE(InitialState(WithStatus("Unknown")).unhealthy);
  EXPECT_FALSE(InitialState(std::nullopt).unhealthy);
  const Hysteresis state = InitialState(WithStatus("True"));
  EXPECT_EQ(state.failures, 0);
  EXPECT_EQ(state.passes, 0);
}

// ---------------------------------------------------------------------------------------------
// The patch body

RoundResult Failing() {
  RoundResult round;
  round.passed = false;
  round.reason = std::string(kReasonAcceleratorMissing);
  round.message = "3 of 4 TPU devices present under /dev (accel<N>: 3, vfio/<N>: 0)";
  return round;
}
RoundResult Passing() {
  RoundResult round;
  round.reason = std::string(kReasonHealthy);
  round.message = "4 of 4 TPU devices present under /dev";
  return round;
}

TEST(NodeAgentPatchTest, OneConditionMergedByTypeWithHeartbeat) {
  const WallTime now = *cache::ParseRfc3339("2026-03-04T05:06:07Z");
  const ConditionUpdate update =
      DescribeCondition({.unhealthy = true, .failures = 1}, Failing(), 1, 3);
  const kube::Json patch = ConditionPatch("TPUUnhealthy", update, std::nullopt, now);
  const kube::Json want = {
      {"status",
       {{"conditions",
         {{{"type", "TPUUnhealthy"},
           {"status", "True"},
           {"reason", "AcceleratorMissing"},
           {"message", "3 of 4 TPU devices present under /dev (accel<N>: 3, vfio/<N>: 0)"},
           {"lastHeartbeatTime", "2026-03-04T05:06:07Z"},
           {"lastTransitionTime", "2026-03-04T05:06:07Z"}}}}}}};
  EXPECT_EQ(patch, want) << patch.dump(2);
}

TEST(NodeAgentPatchTest, TransitionTimeKeptWhileTheStatusStaysAndChangedWhenItFlips) {
  const WallTime now = *cache::ParseRfc3339("2026-03-04T05:06:07Z");
  const NodeCondition was_true = {.status = "True",
                                  .reason = "AcceleratorMissing",
                                  .message = "old",
                                  .last_transition_time = "2026-03-04T05:00:00Z"};
  const NodeCondition was_false = {.status = "False",
                                   .reason = "HardwareHealthy",
                                   .message = "old",
                                   .last_transition_time = "2026-03-01T00:00:00Z"};
  auto condition = [&](bool unhealthy, const NodeCondition& previous) {
    const ConditionUpdate update = {.unhealthy = unhealthy, .reason = "R", .message = "M"};
    return ConditionPatch("TPUUnhealthy", update, previous, now)["status"]["conditions"][0];
  };
  // Still True: the transition stays where it was; the heartbeat moves.
  EXPECT_EQ(condition(true, was_true)["lastTransitionTime"], "2026-03-04T05:00:00Z");
  EXPECT_EQ(condition(true, was_true)["lastHeartbeatTime"], "2026-03-04T05:06:07Z");
  EXPECT_EQ(condition(false, was_false)["lastTransitionTime"], "2026-03-01T00:00:00Z");
  // Flipped: now.
  EXPECT_EQ(condition(false, was_true)["lastTransitionTime"], "2026-03-04T05:06:07Z");
  EXPECT_EQ(condition(true, was_false)["lastTransitionTime"], "2026-03-04T05:06:07Z");
  EXPECT_EQ(condition(false, was_true)["status"], "False");
  // Unknown (another writer) -> False is a transition too.
  EXPECT_EQ(condition(false, WithStatus("Unknown", "2026-01-01T00:00:00Z"))["lastTransitionTime"],
            "2026-03-04T05:06:07Z");
}

TEST(NodeAgentPatchTest, ReasonsAndMessagesWhileTheHysteresisHolds) {
  // True and failing: the item's reason and message.
  ConditionUpdate update = DescribeCondition({.unhealthy = true, .failures = 2}, Failing(), 1, 3);
  EXPECT_TRUE(update.unhealthy);
  EXPECT_EQ(update.reason, "AcceleratorMissing");
  EXPECT_EQ(update.message, Failing().message);
  // True and passing: recovering, with the count.
  update = DescribeCondition({.unhealthy = true, .passes = 2}, Passing(), 1, 3);
  EXPECT_TRUE(update.unhealthy);
  EXPECT_EQ(update.reason, "HardwareRecovering");
  EXPECT_EQ(update.message,
            "passing again, 2 of 3 passing rounds needed to clear: 4 of 4 TPU devices present "
            "under /dev");
  // False and failing below --fail-after: suspect.
  update = DescribeCondition({.unhealthy = false, .failures = 1}, Failing(), 2, 3);
  EXPECT_FALSE(update.unhealthy);
  EXPECT_EQ(update.reason, "HardwareSuspect");
  EXPECT_THAT(update.message, HasSubstr("failing, 1 of 2 failing rounds needed to set: 3 of 4"));
  // False and passing.
  update = DescribeCondition({.unhealthy = false, .passes = 7}, Passing(), 1, 3);
  EXPECT_FALSE(update.unhealthy);
  EXPECT_EQ(update.reason, "HardwareHealthy");
  EXPECT_EQ(update.message, "4 of 4 TPU devices present under /dev");
}

TEST(NodeAgentPatchTest, HealthyWhileWritesAreRecent) {
  const TimePoint t0 = TimePoint{} + std::chrono::hours(1);
  const Duration interval = std::chrono::seconds(10);
  EXPECT_TRUE(Healthy(t0, t0 + std::chrono::seconds(60), interval));
  EXPECT_FALSE(Healthy(t0, t0 + std::chrono::seconds(61), interval));
}

// ---------------------------------------------------------------------------------------------
// Which pod updates trigger a round at once

cache::ContainerInfo Container(const std::string& name, cache::ContainerState state,
                               int32_t exit_code = 0) {
  cache::ContainerInfo container;
  container.name = cache::InternedString::Intern(name);
  container.state = state;
  container.exit_code = exit_code;
  return container;
}

cache::PodInfo Pod(std::vector<cache::ContainerInfo> containers,
                   std::vector<cache::ContainerInfo> init_containers = {}) {
  cache::PodInfo pod;
  pod.ns = cache::InternedString::Intern("team-a");
  pod.name = "llm-worker-0";
  pod.uid = "uid-1";
  pod.node_name = cache::InternedString::Intern("tpu-0");
  pod.containers = std::move(containers);
  pod.init_containers = std::move(init_containers);
  return pod;
}

TEST(NodeAgentTriggerTest, Table) {
  using cache::ContainerState;
  struct Row {
    std::string name;
    cache::PodInfo pod;
    std::set<std::string> seen;
    std::vector<std::string> want;  // DescribeTrigger of each exit
  };
  cache::PodInfo deleting = Pod({Container("trainer", ContainerState::kTerminated, 143)});
  deleting.deletion_timestamp = WallTime{};
  // A failed pod kept for its logs, seen when the agent (re)starts its watch.
  const WallTime now = WallTime{} + std::chrono::hours(24 * 365 * 50);
  cache::PodInfo recent = Pod({Container("trainer", ContainerState::kTerminated, 1)});
  recent.containers[0].finished_at = now - std::chrono::minutes(9);
  cache::PodInfo stale = recent;
  stale.containers[0].finished_at = now - std::chrono::minutes(11);
  const std::vector<Row> rows = {
      {"exit 0", Pod({Container("trainer", ContainerState::kTerminated, 0)}), {}, {}},
      {"exit 1",
       Pod({Container("trainer", ContainerState::kTerminated, 1)}),
       {},
       {"checked at once after container trainer of pod team-a/llm-worker-0 exited with code 1"}},
      {"exit 137 (SIGKILL)",
       Pod({Container("trainer", ContainerState::kTerminated, 137)}),
       {},
       {"checked at once after container trainer of pod team-a/llm-worker-0 exited with code "
        "137"}},
      {"init container exit 10",
       Pod({Container("trainer", ContainerState::kWaiting)},
           {Container("preflight", ContainerState::kTerminated, 10)}),
       {},
       {"checked at once after init container preflight of pod team-a/llm-worker-0 exited with "
        "code 10"}},
      {"init container exit 0, container running",
       Pod({Container("trainer", ContainerState::kRunning)},
           {Container("preflight", ContainerState::kTerminated, 0)}),
       {},
       {}},
      {"running", Pod({Container("trainer", ContainerState::kRunning)}), {}, {}},
      {"waiting", Pod({Container("trainer", ContainerState::kWaiting)}), {}, {}},
      {"no status yet", Pod({Container("trainer", ContainerState::kNone)}), {}, {}},
      {"already reacted to",
       Pod({Container("trainer", ContainerState::kTerminated, 1)}),
       {"uid-1/trainer"},
       {}},
      {"another pod's container of the same name reacted to",
       Pod({Container("trainer", ContainerState::kTerminated, 1)}),
       {"uid-2/trainer"},
       {"checked at once after container trainer of pod team-a/llm-worker-0 exited with code 1"}},
      {"two containers, one reacted to",
       Pod({Container("trainer", ContainerState::kTerminated, 1),
            Container("sidecar", ContainerState::kTerminated, 2)}),
       {"uid-1/trainer"},
       {"checked at once after container sidecar of pod team-a/llm-worker-0 exited with code 2"}},
      {"being deleted: stopped on purpose", deleting, {}, {}},
      {"finished 9 minutes ago",
       recent,
       {},
       {"checked at once after container trainer of pod team-a/llm-worker-0 exited with code 1"}},
      {"finished 11 minutes ago: no decision waits for it", stale, {}, {}},
  };
  for (const Row& row : rows) {
    std::vector<std::string> got;
    for (const Trigger& trigger : AbnormalExits(row.pod, row.seen, now - kStaleExit)) {
      EXPECT_EQ(trigger.pod, "team-a/llm-worker-0") << row.name;
      EXPECT_EQ(trigger.uid, "uid-1") << row.name;
      got.push_back(DescribeTrigger(trigger));
    }
    EXPECT_EQ(got, row.want) << row.name;
  }
}

TEST(NodeAgentTriggerTest, TheOperatorsHardwareCheckAnnotationTriggersOncePerValue) {
  using cache::ContainerState;
  cache::PodInfo pod = Pod({Container("trainer", ContainerState::kRunning)});
  EXPECT_THAT(AbnormalExits(pod, {}), SizeIs(0));
  pod.hardware_check = cache::InternedString::Intern("1/1");
  const std::vector<Trigger> first = AbnormalExits(pod, {});
  ASSERT_THAT(first, SizeIs(1));
  EXPECT_EQ(first[0].Key(), "uid-1/check:1/1");
  EXPECT_EQ(first[0].hardware_check, "1/1");
  EXPECT_EQ(DescribeTrigger(first[0]),
            "checked at once: the job of pod team-a/llm-worker-0 stalled (hardware check 1/1)");

  kube::FakeClient client;
  FakeClock clock;
  Settings settings;
  settings.node_name = "tpu-0";
  NodeAgent agent(client, settings, Probes{}, clock);
  EXPECT_THAT(agent.NotePod(pod), ElementsAre(first[0]));
  EXPECT_THAT(agent.NotePod(pod), SizeIs(0));                 // the same value again
  pod.hardware_check = cache::InternedString::Intern("1/2");  // the next stall
  const std::vector<Trigger> second = agent.NotePod(pod);
  ASSERT_THAT(second, SizeIs(1));
  EXPECT_EQ(second[0].Key(), "uid-1/check:1/2");
}

TEST(NodeAgentTriggerTest, TheSameContainerTriggersOnceUntilItsPodIsDeleted) {
  using cache::ContainerState;
  const std::set<std::string> none;
  cache::PodInfo pod = Pod({Container("trainer", ContainerState::kTerminated, 1),
                            Container("sidecar", ContainerState::kRunning)});
  const std::vector<Trigger> first = AbnormalExits(pod, none);
  ASSERT_THAT(first, SizeIs(1));
  EXPECT_EQ(first[0].Key(), "uid-1/trainer");
  EXPECT_EQ(first[0].container, "trainer");
  EXPECT_FALSE(first[0].init_container);
  EXPECT_EQ(first[0].exit_code, 1);

  // Through the agent, as the pod watch's handlers call it: every update of the pod reports the
  // exit again, only the first counts.
  kube::FakeClient client;
  FakeClock clock;
  Settings settings;
  settings.node_name = "tpu-0";
  NodeAgent agent(client, settings, Probes{}, clock);
  EXPECT_THAT(agent.NotePod(pod), ElementsAre(first[0]));
  pod.resource_version = "2";
  EXPECT_THAT(agent.NotePod(pod), IsEmpty());
  EXPECT_THAT(agent.NotePod(pod), IsEmpty());
  // Another container of the same pod exits later: that one counts.
  pod.containers[1] = Container("sidecar", ContainerState::kTerminated, 137);
  const std::vector<Trigger> second = agent.NotePod(pod);
  ASSERT_THAT(second, SizeIs(1));
  EXPECT_EQ(second[0].container, "sidecar");
  EXPECT_EQ(second[0].exit_code, 137);
  EXPECT_THAT(agent.NotePod(pod), IsEmpty());
  // A deleted pod is forgotten (what is remembered stays bounded by the pods on the node).
  agent.ForgetPod(pod);
  EXPECT_THAT(agent.NotePod(pod), SizeIs(2));
  // Nothing was checked: the rounds are Run()'s.
  EXPECT_THAT(client.actions(), IsEmpty());
}

// ---------------------------------------------------------------------------------------------
// The checks of a round

class NodeAgentChecksTest : public preflight::testing::TempDirTest {
 protected:
  Settings WithDev(const std::string& dev) {
    Settings settings;
    settings.node_name = "n";
    settings.dev_root = dev;
    return settings;
  }
};

TEST_F(NodeAgentChecksTest, AllDevicesOfTheCapacityPass) {
  const std::string dev = MakeFakeDev();
  const RoundResult round = CheckNode(WithDev(dev), 4, Probes{});
  EXPECT_TRUE(round.conclusive);
  EXPECT_TRUE(round.passed);
  EXPECT_EQ(round.reason, "HardwareHealthy");
  EXPECT_EQ(round.message, "4 of 4 TPU devices present under " + dev);
  EXPECT_EQ(round.failed_items, "");
}

TEST_F(NodeAgentChecksTest, AMissingDeviceFailsWithTheNumbers) {
  const std::string dev = MakeFakeDev();
  std::filesystem::remove(dev + "/accel2");
  const RoundResult round = CheckNode(WithDev(dev), 4, Probes{});
  EXPECT_TRUE(round.conclusive);
  EXPECT_FALSE(round.passed);
  EXPECT_EQ(round.reason, "AcceleratorMissing");
  EXPECT_EQ(round.message,
            "3 of 4 TPU devices present under " + dev + " (accel<N>: 3, vfio/<N>: 1)");
  EXPECT_EQ(round.failed_items, "accelerator");
}

TEST_F(NodeAgentChecksTest, WithoutCapacityOneDeviceIsEnough) {
  const std::string dev = Path("dev");
  Write("dev/accel0");
  RoundResult round = CheckNode(WithDev(dev), 0, Probes{});
  EXPECT_TRUE(round.passed);
  EXPECT_THAT(round.message, HasSubstr("1 TPU devices present under " + dev +
                                       ", at least 1 needed (the node has no google.com/tpu"));
  std::filesystem::remove(dev + "/accel0");
  round = CheckNode(WithDev(dev), 0, Probes{});
  EXPECT_FALSE(round.passed);
  EXPECT_EQ(round.reason, "AcceleratorMissing");
}

TEST_F(NodeAgentChecksTest, AMissingDeviceDirectoryIsInconclusive) {
  const RoundResult round = CheckNode(WithDev(Path("nowhere")), 4, Probes{});
  EXPECT_FALSE(round.conclusive);
  EXPECT_THAT(round.message, HasSubstr("does not exist"));
}

TEST_F(NodeAgentChecksTest, AHardwareFailureDecidesARoundWithAnUnmeasurableItem) {
  const std::string dev = Path("dev");
  Write("dev/accel0");
  Settings settings = WithDev(dev);
  settings.checks = {preflight::Check::kAccelerator, preflight::Check::kDisk};
  Probes probes;
  probes.filesystem = [](const std::string&)
      -> std::expected<preflight::FilesystemSize, preflight::FilesystemError> {
    return std::unexpected(preflight::FilesystemError{.error_number = ENOENT, .message = "gone"});
  };
  RoundResult round = CheckNode(settings, 4, probes);
  EXPECT_TRUE(round.conclusive);
  EXPECT_FALSE(round.passed);
  EXPECT_EQ(round.reason, "AcceleratorMissing");
  EXPECT_EQ(round.failed_items, "accelerator,disk-size root");
  // The accelerator passing, the unmeasurable disk leaves the round undecided.
  for (const char* name : {"accel1", "accel2", "accel3"}) Write(std::string("dev/") + name);
  round = CheckNode(settings, 4, probes);
  EXPECT_FALSE(round.conclusive);
  EXPECT_FALSE(round.passed);
  EXPECT_THAT(round.message, HasSubstr("disk-size root: / does not exist"));
}

TEST_F(NodeAgentChecksTest, DiskAndUlimitReuseThePreflightItems) {
  Settings settings = WithDev(MakeFakeDev());
  settings.checks = {preflight::Check::kAccelerator, preflight::Check::kDisk,
                     preflight::Check::kUlimit};
  settings.root_path = "/host-root";
  Probes probes;
  std::string probed;
  probes.filesystem = [&](const std::string& path)
      -> std::expected<preflight::FilesystemSize, preflight::FilesystemError> {
    probed = path;
    return preflight::FilesystemSize{.total_bytes = 20'000'000'000, .available_bytes = 0};
  };
  probes.limits = []() -> std::expected<preflight::ProcessLimits, std::string> {
    return preflight::ProcessLimits{};  // all unlimited
  };
  const RoundResult round = CheckNode(settings, 4, probes);
  EXPECT_EQ(probed, "/host-root");
  ASSERT_THAT(round.items, SizeIs(3));
  EXPECT_EQ(round.items[1].item, "disk-size root");
  EXPECT_EQ(round.items[2].item, "ulimit");
  EXPECT_FALSE(round.passed);
  // The accelerator passed, so the disk gives the reason.
  EXPECT_EQ(round.reason, "DiskTooSmall");
  EXPECT_EQ(round.failed_items, "disk-size root");
  EXPECT_THAT(round.message, HasSubstr("4 of 4 TPU devices present"));
  EXPECT_THAT(round.message, HasSubstr("disk-size root: /host-root is 20 GB"));
}

// ---------------------------------------------------------------------------------------------
// Rounds against a fake API server

class NodeAgentRoundsTest : public preflight::testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    dev_ = MakeFakeDev();
    settings_.node_name = "tpu-0";
    settings_.dev_root = dev_;
    settings_.interval = std::chrono::seconds(5);
  }
  void AddNode(const kube::Json& conditions = kube::Json::array()) {
    client_.Upsert(
        kube::Resource::Nodes(),
        {{"metadata", {{"name", "tpu-0"}}},
         {"status", {{"capacity", {{"google.com/tpu", "4"}}}, {"conditions", conditions}}}});
  }
  // The node as an agent that set the condition left it: True, AcceleratorMissing.
  void AddNodeWithTrueCondition() {
    AddNode({{{"type", "TPUUnhealthy"},
              {"status", "True"},
              {"reason", "AcceleratorMissing"},
              {"message", "3 of 4"},
              {"lastTransitionTime", "2026-01-01T00:00:00Z"}}});
  }
  std::optional<NodeCondition> Condition() {
    auto node = client_.Get(kube::Resource::Nodes(), "", "tpu-0");
    if (!node) return std::nullopt;
    return FindCondition(*node, "TPUUnhealthy");
  }
  std::vector<kube::FakeClient::Action> Patches() {
    std::vector<kube::FakeClient::Action> patches;
    for (const auto& action : client_.actions()) {
      if (action.verb == "patch") patches.push_back(action);
    }
    return patches;
  }

  std::string dev_;
  Settings settings_;
  kube::FakeClient client_;
  FakeClock clock_;
};

TEST_F(NodeAgentRoundsTest, LearnsTheNodeWithAnEmptyStatusPatchThenWritesTheCondition) {
  AddNode();
  NodeAgent agent(client_, settings_, Probes{}, clock_);
  const NodeAgent::Round round = agent.RunRound();
  EXPECT_EQ(round.outcome, NodeAgent::Outcome::kPassed);
  EXPECT_EQ(ExitCode(round.outcome), 0);
  const auto patches = Patches();
  ASSERT_THAT(patches, SizeIs(2));
  for (const auto& patch : patches) {
    EXPECT_EQ(patch.resource, "nodes");
    EXPECT_EQ(patch.name, "tpu-0");
    EXPECT_EQ(patch.subresource, "status");
  }
  EXPECT_EQ(patches[0].body, kube::Json::object());
  EXPECT_EQ(patches[1].body["status"]["conditions"][0]["type"], "TPUUnhealthy");
  // Nothing written but the two patches, nothing listed.
  EXPECT_THAT(client_.actions(), SizeIs(2));
  EXPECT_THAT(client_.list_calls(), IsEmpty());
  const auto condition = Condition();
  ASSERT_TRUE(condition.has_value());
  EXPECT_EQ(condition->status, "False");
  EXPECT_EQ(condition->reason, "HardwareHealthy");
  EXPECT_EQ(condition->message, "4 of 4 TPU devices present under " + dev_);

  // Later rounds patch once each.
  agent.RunRound();
  EXPECT_THAT(Patches(), SizeIs(3));
}

TEST_F(NodeAgentRoundsTest, AMissingDeviceSetsTheConditionAndPassesClearItAfterPassAfter) {
  AddNode();
  LogCapture logs;
  NodeAgent agent(client_, settings_, Probes{}, clock_);
  ASSERT_EQ(agent.RunRound().outcome, NodeAgent::Outcome::kPassed);
  const std::string first_transition = Condition()->last_transition_time;

  std::filesystem::remove(dev_ + "/accel3");
  clock_.Advance(std::chrono::seconds(5));
  NodeAgent::Round round = agent.RunRound();
  EXPECT_EQ(round.outcome, NodeAgent::Outcome::kFailed);
  EXPECT_EQ(ExitCode(round.outcome), 1);
  EXPECT_TRUE(round.condition_true);
  auto condition = Condition();
  ASSERT_TRUE(condition.has_value());
  EXPECT_EQ(condition->status, "True");
  EXPECT_EQ(condition->reason, "AcceleratorMissing");
  EXPECT_THAT(condition->message, HasSubstr("3 of 4 TPU devices present under " + dev_));
  EXPECT_NE(condition->last_transition_time, first_transition);
  const std::string set_at = condition->last_transition_time;
  EXPECT_THAT(logs.text(), HasSubstr("level=warning msg=\"node check failed\" node=tpu-0 "
                                     "item=accelerator"));
  EXPECT_THAT(logs.text(), HasSubstr("msg=\"condition set\""));

  // Restored: True for two more rounds (recovering), False at the third.
  Write("dev/accel3");
  for (int i = 1; i <= 2; ++i) {
    clock_.Advance(std::chrono::seconds(5));
    round = agent.RunRound();
    EXPECT_EQ(round.outcome, NodeAgent::Outcome::kPassed);
    condition = Condition();
    EXPECT_EQ(condition->status, "True") << i;
    EXPECT_EQ(condition->reason, "HardwareRecovering") << i;
    EXPECT_EQ(condition->last_transition_time, set_at) << i;
  }
  clock_.Advance(std::chrono::seconds(5));
  round = agent.RunRound();
  EXPECT_FALSE(round.condition_true);
  condition = Condition();
  EXPECT_EQ(condition->status, "False");
  EXPECT_EQ(condition->reason, "HardwareHealthy");
  EXPECT_NE(condition->last_transition_time, set_at);
  EXPECT_THAT(logs.text(), HasSubstr("msg=\"condition cleared\""));
}

TEST_F(NodeAgentRoundsTest, ARestartedAgentStartsFromTheConditionOnTheNode) {
  AddNodeWithTrueCondition();
  NodeAgent agent(client_, settings_, Probes{}, clock_);
  for (int i = 1; i <= 2; ++i) {
    EXPECT_EQ(agent.RunRound().outcome, NodeAgent::Outcome::kPassed);
    EXPECT_EQ(Condition()->status, "True") << i;
    EXPECT_EQ(Condition()->last_transition_time, "2026-01-01T00:00:00Z") << i;
  }
  agent.RunRound();
  EXPECT_EQ(Condition()->status, "False");
}

TEST_F(NodeAgentRoundsTest, ApiErrorsAreRetriedNextRound) {
  AddNode();
  NodeAgent agent(client_, settings_, Probes{}, clock_);
  const TimePoint started = agent.last_success();
  client_.FailNext("patch", kube::TransportError());
  NodeAgent::Round round = agent.RunRound();
  EXPECT_EQ(round.outcome, NodeAgent::Outcome::kApiError);
  EXPECT_EQ(ExitCode(round.outcome), 3);
  EXPECT_FALSE(Condition().has_value());
  EXPECT_EQ(agent.last_success(), started);

  clock_.Advance(std::chrono::seconds(5));
  round = agent.RunRound();  // learns again, then writes
  EXPECT_EQ(round.outcome, NodeAgent::Outcome::kPassed);
  EXPECT_TRUE(Condition().has_value());
  EXPECT_EQ(agent.last_success(), started + std::chrono::seconds(5));

  // A failed condition write after the node is known.
  std::filesystem::remove(dev_ + "/accel0");
  client_.FailNext("patch", kube::ApiError(500, "InternalError"));
  round = agent.RunRound();
  EXPECT_EQ(round.outcome, NodeAgent::Outcome::kApiError);
  EXPECT_EQ(Condition()->status, "False");
  round = agent.RunRound();
  EXPECT_EQ(round.outcome, NodeAgent::Outcome::kFailed);
  EXPECT_EQ(Condition()->status, "True");
}

TEST_F(NodeAgentRoundsTest, AnUnmeasurableItemLeavesTheConditionAlone) {
  AddNode();
  settings_.dev_root = Path("not-mounted");
  NodeAgent agent(client_, settings_, Probes{}, clock_);
  const NodeAgent::Round round = agent.RunRound();
  EXPECT_EQ(round.outcome, NodeAgent::Outcome::kInconclusive);
  EXPECT_EQ(ExitCode(round.outcome), 2);
  EXPECT_FALSE(Condition().has_value());
  EXPECT_THAT(Patches(), SizeIs(1));  // only the empty patch that read the node
}

TEST_F(NodeAgentRoundsTest, RunsEveryIntervalUntilStopped) {
  AddNode();
  NodeAgent agent(client_, settings_, Probes{}, clock_);
  std::thread loop([&] { agent.Run(); });
  ASSERT_TRUE(clock_.AwaitWaiters(1));
  EXPECT_THAT(Patches(), SizeIs(2));  // the first round ran at once
  clock_.Advance(std::chrono::seconds(4));
  ASSERT_TRUE(clock_.AwaitWaiters(1));
  EXPECT_THAT(Patches(), SizeIs(2));  // not before the interval
  clock_.Advance(std::chrono::seconds(1));
  // The loop runs on its own thread: wait (real time, bounded) for its third patch.
  for (int i = 0; i < 1000 && Patches().size() < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_THAT(Patches(), SizeIs(3));
  agent.Stop();
  loop.join();
}

// ---------------------------------------------------------------------------------------------
// Rounds triggered by a worker's abnormal exit

Trigger TrainerExit(int32_t exit_code = 1) {
  return Trigger{.pod = "team-a/llm-worker-0",
                 .uid = "uid-1",
                 .container = "trainer",
                 .init_container = false,
                 .exit_code = exit_code,
                 .hardware_check = ""};
}

TEST_F(NodeAgentRoundsTest, ATriggeredFailingRoundSetsTheConditionAtOnceWhateverFailAfter) {
  AddNode();
  settings_.fail_after = 3;
  LogCapture logs;
  NodeAgent agent(client_, settings_, Probes{}, clock_);
  ASSERT_EQ(agent.RunRound().outcome, NodeAgent::Outcome::kPassed);
  std::filesystem::remove(dev_ + "/accel3");

  // A periodic failing round: 1 of 3.
  NodeAgent::Round round = agent.RunRound();
  EXPECT_EQ(round.outcome, NodeAgent::Outcome::kFailed);
  EXPECT_FALSE(round.triggered);
  EXPECT_FALSE(round.condition_true);
  EXPECT_EQ(Condition()->status, "False");
  EXPECT_EQ(Condition()->reason, "HardwareSuspect");

  // The program exited abnormally: the failing round it triggers is the second witness.
  round = agent.RunRound(TrainerExit());
  EXPECT_EQ(round.outcome, NodeAgent::Outcome::kFailed);
  EXPECT_TRUE(round.triggered);
  EXPECT_TRUE(round.condition_true);
  const auto condition = Condition();
  ASSERT_TRUE(condition.has_value());
  EXPECT_EQ(condition->status, "True");
  EXPECT_EQ(condition->reason, "AcceleratorMissing");
  EXPECT_EQ(condition->message,
            "3 of 4 TPU devices present under " + dev_ +
                " (accel<N>: 3, vfio/<N>: 1); checked at once after container trainer of pod "
                "team-a/llm-worker-0 exited with code 1");
  EXPECT_THAT(logs.text(), HasSubstr("msg=\"condition set\""));

  // Also as the first failing round of all, on a fresh agent.
  AddNode();
  NodeAgent fresh(client_, settings_, Probes{}, clock_);
  round = fresh.RunRound(TrainerExit(137));
  EXPECT_TRUE(round.condition_true);
  EXPECT_EQ(Condition()->status, "True");
  EXPECT_THAT(Condition()->message, HasSubstr("exited with code 137"));
}

TEST_F(NodeAgentRoundsTest, ATriggeredPassingRoundDoesNotClearTheConditionBeforePassAfter) {
  AddNodeWithTrueCondition();
  NodeAgent agent(client_, settings_, Probes{}, clock_);
  for (int i = 1; i <= 2; ++i) {
    const NodeAgent::Round round = agent.RunRound(TrainerExit());
    EXPECT_EQ(round.outcome, NodeAgent::Outcome::kPassed) << i;
    EXPECT_TRUE(round.condition_true) << i;
    const auto condition = Condition();
    EXPECT_EQ(condition->status, "True") << i;
    EXPECT_EQ(condition->reason, "HardwareRecovering") << i;
    EXPECT_THAT(condition->message, HasSubstr(std::to_string(i) + " of 3 passing rounds")) << i;
    EXPECT_THAT(condition->message, HasSubstr("; checked at once after container trainer")) << i;
    EXPECT_EQ(condition->last_transition_time, "2026-01-01T00:00:00Z") << i;
  }
  // The third passing round, periodic, clears it as any third one would.
  EXPECT_FALSE(agent.RunRound().condition_true);
  EXPECT_EQ(Condition()->status, "False");
  EXPECT_EQ(Condition()->reason, "HardwareHealthy");
}

// A pod of the fake API server on `node` with one container `trainer` (terminated with
// `exit_code`, or running).
kube::Json WorkerPod(const std::string& name, const std::string& node,
                     std::optional<int> exit_code) {
  kube::Json state = exit_code ? kube::Json{{"terminated", {{"exitCode", *exit_code}}}}
                               : kube::Json{{"running", kube::Json::object()}};
  return {{"metadata",
           {{"name", name}, {"namespace", "team-a"}, {"labels", {{"tpujob.dev/job-name", "llm"}}}}},
          {"spec", {{"nodeName", node}, {"containers", {{{"name", "trainer"}}}}}},
          {"status",
           {{"phase", exit_code ? "Failed" : "Running"},
            {"containerStatuses", {{{"name", "trainer"}, {"state", state}}}}}}};
}

// Waits (real time, bounded) until `done`.
template <typename F>
bool Within(F done, std::chrono::seconds timeout = std::chrono::seconds(10)) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// Runs `agent`'s loop on a thread of its own; stops and joins it at the latest when it goes out
// of scope (also when an ASSERT ends the test early).
class Loop {
 public:
  explicit Loop(NodeAgent& agent) : agent_(agent), thread_([&agent] { agent.Run(); }) {}
  ~Loop() { Stop(); }
  void Stop() {
    agent_.Stop();
    if (thread_.joinable()) thread_.join();
  }

 private:
  NodeAgent& agent_;
  std::thread thread_;
};

size_t Count(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

TEST_F(NodeAgentRoundsTest, AnAbnormalExitOnTheNodeRunsARoundAtOnce) {
  AddNode();
  settings_.fail_after = 3;
  LogCapture logs;
  NodeAgent agent(client_, settings_, Probes{}, clock_);
  Loop loop(agent);
  ASSERT_TRUE(clock_.AwaitWaiters(1));
  ASSERT_TRUE(Within([&] { return agent.pod_watch() == NodeAgent::PodWatch::kWatching; }))
      << logs.text();
  EXPECT_THAT(Patches(), SizeIs(2));
  // Only the TPUJob pods of this node, in every namespace.
  for (const kube::ListOptions& list : client_.list_calls()) {
    EXPECT_EQ(list.label_selector, "tpujob.dev/job-name");
    EXPECT_EQ(list.field_selector, "spec.nodeName=tpu-0");
  }
  for (const kube::WatchOptions& watch : client_.watch_calls()) {
    EXPECT_EQ(watch.label_selector, "tpujob.dev/job-name");
    EXPECT_EQ(watch.field_selector, "spec.nodeName=tpu-0");
  }

  std::filesystem::remove(dev_ + "/accel3");
  // A running worker and another node's failed worker change nothing; this node's does, at
  // once: no time passes.
  client_.Upsert(kube::Resource::Pods(), WorkerPod("llm-worker-1", "tpu-1", 1));
  client_.Upsert(kube::Resource::Pods(), WorkerPod("llm-worker-0", "tpu-0", std::nullopt));
  client_.Upsert(kube::Resource::Pods(), WorkerPod("llm-worker-0", "tpu-0", 1));
  ASSERT_TRUE(Within([&] { return Patches().size() >= 3; })) << logs.text();
  ASSERT_TRUE(clock_.AwaitWaiters(1));
  EXPECT_THAT(Patches(), SizeIs(3));
  const auto condition = Condition();
  ASSERT_TRUE(condition.has_value());
  EXPECT_EQ(condition->status, "True");  // with fail_after 3
  EXPECT_THAT(condition->message, HasSubstr("; checked at once after container trainer of pod "
                                            "team-a/llm-worker-0 exited with code 1"));
  EXPECT_THAT(logs.text(), HasSubstr("level=info msg=\"worker exited, checking the node now\" "
                                     "node=tpu-0 pod=team-a/llm-worker-0 container=trainer "
                                     "exit_code=1"));

  // Later updates of the same pod do not trigger again; the next exit does (had the update
  // triggered, this round would name llm-worker-0 again, or be merged into that one). 3 s later:
  // not yet time for the periodic round.
  clock_.Advance(std::chrono::seconds(3));
  ASSERT_TRUE(clock_.AwaitWaiters(1));
  EXPECT_THAT(Patches(), SizeIs(3));
  kube::Json updated = WorkerPod("llm-worker-0", "tpu-0", 1);
  updated["metadata"]["annotations"] = {{"note", "updated"}};
  client_.Upsert(kube::Resource::Pods(), updated);
  client_.Upsert(kube::Resource::Pods(), WorkerPod("llm-worker-2", "tpu-0", 137));
  ASSERT_TRUE(Within([&] { return Patches().size() >= 4; })) << logs.text();
  ASSERT_TRUE(clock_.AwaitWaiters(1));
  EXPECT_THAT(Patches(), SizeIs(4));
  const std::string text = logs.text();
  EXPECT_EQ(Count(text, "worker exited"), 2u) << text;
  EXPECT_THAT(text, HasSubstr("pod=team-a/llm-worker-2 container=trainer exit_code=137"));

  // The periodic schedule is unchanged: the next round one interval after the first periodic
  // one, not after the triggered ones.
  clock_.Advance(std::chrono::seconds(2));
  EXPECT_TRUE(Within([&] { return Patches().size() >= 5; }));
  loop.Stop();
  EXPECT_THAT(Patches(), SizeIs(5));
}

TEST_F(NodeAgentRoundsTest, WithoutPermissionToWatchPodsItWarnsOnceAndKeepsItsRounds) {
  for (const std::string verb : {"list", "watch"}) {
    SCOPED_TRACE(verb);
    AddNode();
    client_.ClearActions();
    const size_t lists = client_.list_calls().size();
    const size_t watches = client_.watch_calls().size();
    client_.FailNext(verb, kube::ApiError(403, "Forbidden",
                                          "pods is forbidden: User \"system:serviceaccount:ops:"
                                          "node-agent\" cannot " +
                                              verb +
                                              " resource \"pods\" in API group \"\" at "
                                              "the cluster scope"));
    LogCapture logs;
    NodeAgent agent(client_, settings_, Probes{}, clock_);
    Loop loop(agent);
    ASSERT_TRUE(Within([&] { return agent.pod_watch() == NodeAgent::PodWatch::kForbidden; }))
        << logs.text();
    // The periodic rounds go on.
    for (size_t want = 3; want <= 4; ++want) {
      ASSERT_TRUE(clock_.AwaitWaiters(1));
      clock_.Advance(std::chrono::seconds(5));
      EXPECT_TRUE(Within([&] { return Patches().size() >= want; }));
    }
    loop.Stop();
    EXPECT_THAT(Patches(), SizeIs(4));
    // One try of each verb at most, then nothing more: no retries, no spin.
    EXPECT_EQ(client_.list_calls().size(), lists + 1);
    EXPECT_EQ(client_.watch_calls().size(), watches + (verb == "watch" ? 1 : 0));
    const std::string text = logs.text();
    EXPECT_EQ(Count(text, "level=warning"), 1u) << text;
    EXPECT_THAT(text,
                HasSubstr("level=warning msg=\"cannot watch the pods on this node: the agent's "
                          "account lacks list and watch on pods in all namespaces; checking "
                          "every interval only\" node=tpu-0 denied=\"" +
                          verb + " pods\" error=\"403 Forbidden"));
  }
}

TEST_F(NodeAgentRoundsTest, NoPodWatchWhenTurnedOff) {
  AddNode();
  settings_.watch_pods = false;
  NodeAgent agent(client_, settings_, Probes{}, clock_);
  Loop loop(agent);
  ASSERT_TRUE(clock_.AwaitWaiters(1));
  loop.Stop();
  EXPECT_EQ(agent.pod_watch(), NodeAgent::PodWatch::kOff);
  EXPECT_THAT(client_.list_calls(), IsEmpty());
  EXPECT_THAT(client_.watch_calls(), IsEmpty());
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::agent
