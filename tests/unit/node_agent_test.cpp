// `tpujob-operator node-agent`: flag validation, capacity parsing, the verdict of a round, the
// hysteresis between rounds and the condition, the patch body, and rounds against a fake API
// server (operator/node_agent.h).
#include "node_agent.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "cache/objects.h"
#include "fake_client.h"
#include "log_capture.h"
#include "preflight_test_util.h"

namespace tpujob::agent {
namespace {

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
  AddNode({{{"type", "TPUUnhealthy"},
            {"status", "True"},
            {"reason", "AcceleratorMissing"},
            {"message", "3 of 4"},
            {"lastTransitionTime", "2026-01-01T00:00:00Z"}}});
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

}  // namespace
}  // namespace tpujob::agent
