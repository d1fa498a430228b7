// `kubectl tpujob` run/wait/suspend/resume/list --status/logs/completion: the pure decisions, and
// the command line of the real binary where it needs no cluster (usage errors, --dry-run=client).

#include "plugin_commands.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "plugin_subcommands.h"
#include "shell.h"

namespace tpujob::plugin {
namespace TPUJOB_TEST_NS {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

RunRequest Minimal() {
  RunRequest request;
  request.name = "hello";
  request.tpu_type = "v5litepod-16";
  request.image = "busybox";
  request.command = {"sh", "-c", "echo hi"};
  return request;
}

// The plugin as kubectl runs it: the binary under the name kubectl-tpujob, next to it.
std::string Plugin() {
  const std::string binary = TPUJOB_OPERATOR_BINARY;
  return "'" + binary.substr(0, binary.rfind('/')) + "/kubectl-tpujob'";
}

// A YAML document back to JSON, scalars typed as a Kubernetes client reads them: quoted scalars
// are strings, plain ones numbers or booleans when they look like one.
json FromYaml(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& entry : node) out[entry.first.as<std::string>()] = FromYaml(entry.second);
      return out;
    }
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& item : node) out.push_back(FromYaml(item));
      return out;
    }
    case YAML::NodeType::Scalar: {
      const std::string text = node.Scalar();
      if (node.Tag() == "?") {
        if (text == "true" || text == "false") return text == "true";
        json number = json::parse(text, nullptr, false);
        if (!number.is_discarded() && number.is_number()) return number;
      }
      return text;
    }
    default:
      return nullptr;
  }
}

TEST(PluginRunTest, BuildsTheJobFromTheFlags) {
  RunRequest request = Minimal();
  request.slices = 2;
  auto job = BuildJob(request);
  ASSERT_TRUE(job) << job.error();
  const json expected = json::parse(R"({
    "apiVersion": "tpujob.dev/v1alpha1",
    "kind": "TPUJob",
    "metadata": {"name": "hello"},
    "spec": {
      "tpu": {"type": "v5litepod-16", "slices": 2},
      "replicaSpecs": {"Worker": {"template": {"spec": {"containers": [
        {"name": "trainer", "image": "busybox", "command": ["sh"], "args": ["-c", "echo hi"]}
      ]}}}}
    }})");
  EXPECT_EQ(*job, expected) << job->dump(2);
}

TEST(PluginRunTest, MapsEveryOptionalFlagToItsField) {
  RunRequest request = Minimal();
  request.ns = "ml";
  request.priority = 7;
  request.max_restarts = 3;
  request.queue = "team-a";
  request.env = {"STEPS=100", "EMPTY=", "EXPR=a=b"};
  auto job = BuildJob(request);
  ASSERT_TRUE(job) << job.error();
  EXPECT_EQ((*job)["metadata"]["namespace"], "ml");
  EXPECT_EQ((*job)["metadata"]["labels"]["kueue.x-k8s.io/queue-name"], "team-a");
  EXPECT_EQ((*job)["spec"]["priority"], 7);
  EXPECT_FALSE((*job)["spec"].contains("priorityClassName"));
  EXPECT_EQ((*job)["spec"]["faultTolerance"]["maxWorkerRestarts"], 3);
  EXPECT_FALSE((*job)["spec"]["tpu"].contains("slices"));
  // No accelerator, topology, chips or replicas: the server derives them from the type.
  EXPECT_EQ((*job)["spec"]["tpu"], json({{"type", "v5litepod-16"}}));
  EXPECT_FALSE((*job)["spec"]["replicaSpecs"]["Worker"].contains("replicas"));
  const json& container =
      (*job)["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(container["env"], json::parse(R"([{"name": "STEPS", "value": "100"},
                                               {"name": "EMPTY", "value": ""},
                                               {"name": "EXPR", "value": "a=b"}])"));

  request.priority.reset();
  request.priority_class = "high";
  job = BuildJob(request);
  ASSERT_TRUE(job) << job.error();
  EXPECT_EQ((*job)["spec"]["priorityClassName"], "high");
  EXPECT_FALSE((*job)["spec"].contains("priority"));
}

TEST(PluginRunTest, RefusesWhatCannotMakeAJob) {
  auto refused = [](auto change) {
    RunRequest request = Minimal();
    change(request);
    auto job = BuildJob(request);
    return job ? std::string("accepted") : job.error();
  };
  EXPECT_THAT(refused([](RunRequest& r) { r.image.clear(); }), HasSubstr("--image is required"));
  EXPECT_THAT(refused([](RunRequest& r) { r.tpu_type.clear(); }),
              HasSubstr("--tpu-type is required"));
  EXPECT_THAT(refused([](RunRequest& r) { r.command.clear(); }),
              HasSubstr("a command is required after `--`"));
  EXPECT_THAT(refused([](RunRequest& r) { r.env = {"NOEQUALS"}; }),
              HasSubstr("invalid --env \"NOEQUALS\": expected KEY=VALUE"));
  EXPECT_THAT(refused([](RunRequest& r) { r.env = {"=x"}; }), HasSubstr("invalid --env"));
  EXPECT_THAT(refused([](RunRequest& r) {
                r.priority = 1;
                r.priority_class = "high";
              }),
              HasSubstr("cannot both be given"));
  EXPECT_THAT(refused([](RunRequest& r) { r.name = "Hello_World"; }), HasSubstr("DNS-1035"));
  EXPECT_THAT(refused([](RunRequest& r) { r.name = std::string(46, 'a'); }),
              HasSubstr("at most 45"));
  EXPECT_THAT(refused([](RunRequest& r) { r.slices = 0; }), HasSubstr("--slices"));
  EXPECT_THAT(refused([](RunRequest& r) { r.max_restarts = 101; }), HasSubstr("--max-restarts"));
}

TEST(PluginRunTest, YamlReadsBackAsTheSameObject) {
  RunRequest request = Minimal();
  request.slices = 2;
  request.priority = 5;
  // Values YAML would take for numbers, booleans or null unless quoted.
  request.env = {"A=1",
                 "B=true",
                 "C=yes",
                 "D=",
                 "E=null",
                 "F=1.5e3",
                 "G=0x1F",
                 "H=plain text",
                 "I=a: b",
                 "J=- x",
                 "K=#not a comment",
                 "L=on",
                 "M=0b101",
                 "N=-0x1F",
                 "O=-0o17",
                 "P=~",
                 "Q=.5",
                 "R=+1",
                 "S=12:30",
                 "T=1_000"};
  request.command = {"python", "-c", "print('hi')", "--steps", "10"};
  auto job = BuildJob(request);
  ASSERT_TRUE(job) << job.error();
  const std::string yaml = ToYaml(*job);
  EXPECT_EQ(FromYaml(YAML::Load(yaml)), *job) << yaml;
  EXPECT_THAT(yaml, HasSubstr("apiVersion: tpujob.dev/v1alpha1\n"));
  EXPECT_THAT(yaml, HasSubstr("slices: 2\n"));
  EXPECT_THAT(yaml, HasSubstr("value: \"1\"\n"));
  EXPECT_THAT(yaml, HasSubstr("value: \"yes\"\n"));
  EXPECT_THAT(yaml, HasSubstr("value: \"\"\n"));
  // Everything a YAML parser (go-yaml's integer forms included) could read as other than a
  // string is quoted; the read-back above would not notice, as it keeps scalars as strings.
  for (const char* value : {"1", "true", "yes", "null", "1.5e3", "0x1F", "on", "0b101", "-0x1F",
                            "-0o17", "~", ".5", "+1", "12:30", "1_000"}) {
    EXPECT_THAT(yaml, HasSubstr("value: \"" + std::string(value) + "\"\n")) << value;
  }
  EXPECT_THAT(yaml, HasSubstr("value: plain text\n"));
  EXPECT_THAT(yaml, HasSubstr("- \"10\"\n"));
  EXPECT_THAT(yaml, Not(HasSubstr("{")));  // block style throughout
}

TEST(PluginRunTest, EnvTakesOneValueSoTheNameMayFollowIt) {
  const Answer yaml = Shell(Plugin() +
                            " run --env A=1 --env B=2 hello --tpu-type v5p-8 --image busybox "
                            "--dry-run=client -o json -- sh");
  ASSERT_EQ(yaml.exit_code, 0) << yaml.output;
  const json job = json::parse(yaml.output);
  EXPECT_EQ(job["metadata"]["name"], "hello");
  EXPECT_EQ(
      job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"].size(), 2u);
}

TEST(PluginRunTest, SlicesAreLimitedAsTheApiLimitsThem) {
  RunRequest request = Minimal();
  request.slices = 64;
  EXPECT_TRUE(BuildJob(request));
  request.slices = 65;
  auto refused = BuildJob(request);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error(), "--slices must be between 1 and 64");
}

TEST(PluginRunTest, DryRunPrintsTheObjectWithoutACluster) {
  const Answer yaml =
      Shell(Plugin() +
            " run hello --tpu-type v5litepod-16 --slices 2 --image busybox "
            "--kubeconfig /nonexistent --dry-run=client -o yaml -- sh -c 'echo hi'");
  ASSERT_EQ(yaml.exit_code, 0) << yaml.output;
  auto expected = BuildJob([] {
    RunRequest r = Minimal();
    r.slices = 2;
    return r;
  }());
  ASSERT_TRUE(expected);
  EXPECT_EQ(FromYaml(YAML::Load(yaml.output)), *expected) << yaml.output;

  const Answer as_json = Shell(Plugin() +
                               " run hello -n ml --tpu-type v5litepod-16 --image busybox "
                               "--env A=1 --env B=2 --dry-run=client -o json -- sh -c 'echo hi'");
  ASSERT_EQ(as_json.exit_code, 0) << as_json.output;
  const json job = json::parse(as_json.output);
  EXPECT_EQ(job["metadata"]["namespace"], "ml");
  EXPECT_EQ(
      job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"].size(), 2u);
}

TEST(PluginRunTest, UsageErrorsExitOneWithAClearMessage) {
  const std::string base = Plugin() + " run hello --dry-run=client ";
  Answer a = Shell(base + "--tpu-type v5p-8 -- sh");
  EXPECT_EQ(a.exit_code, 1);
  EXPECT_THAT(a.output, HasSubstr("--image is required"));
  a = Shell(base + "--tpu-type v5p-8 --image busybox");
  EXPECT_EQ(a.exit_code, 1);
  EXPECT_THAT(a.output, HasSubstr("a command is required"));
  a = Shell(base + "--tpu-type v5p-8 --image busybox --env BAD -- sh");
  EXPECT_EQ(a.exit_code, 1);
  EXPECT_THAT(a.output, HasSubstr("invalid --env \"BAD\""));
  a = Shell(base + "--tpu-type v5p-8 --image busybox --no-such-flag -- sh");
  EXPECT_EQ(a.exit_code, 1);
  EXPECT_THAT(a.output, HasSubstr("--no-such-flag"));
  a = Shell(base + "--tpu-type v5p-8 --image busybox --priority 1 --priority-class x -- sh");
  EXPECT_EQ(a.exit_code, 1);
  EXPECT_THAT(a.output, HasSubstr("excludes"));
  a = Shell(Plugin() + " list -- sh");
  EXPECT_EQ(a.exit_code, 1);
  EXPECT_THAT(a.output, HasSubstr("only taken by `run`"));
  a = Shell(Plugin() + " run --help");
  EXPECT_EQ(a.exit_code, 0);
  EXPECT_THAT(a.output, HasSubstr("--tpu-type"));
}

json JobIn(const std::string& phase) {
  json job = {{"metadata", {{"name", "j"}, {"namespace", "ml"}}}};
  if (!phase.empty()) job["status"]["phase"] = phase;
  return job;
}

TEST(PluginWaitTest, ParsesDurationsAsKubectlWritesThem) {
  EXPECT_EQ(ParseDuration("30s").value(), std::chrono::seconds(30));
  EXPECT_EQ(ParseDuration("5m").value(), std::chrono::seconds(300));
  EXPECT_EQ(ParseDuration("1h").value(), std::chrono::seconds(3600));
  EXPECT_EQ(ParseDuration("1h30m").value(), std::chrono::seconds(5400));
  EXPECT_EQ(ParseDuration("1.5m").value(), std::chrono::seconds(90));
  EXPECT_EQ(ParseDuration("250ms").value(), std::chrono::seconds(1));  // rounds up
  EXPECT_EQ(ParseDuration("0").value(), std::chrono::seconds(0));
  for (const char* bad : {"", "30", "5x", "m", "-1s", "1h 30m"}) {
    EXPECT_FALSE(ParseDuration(bad)) << bad;
  }
  EXPECT_THAT(ParseDuration("soon").error(), HasSubstr("30s, 5m, 1h"));
}

TEST(PluginWaitTest, CompletionWaitsForSucceededAndFailsOnFailed) {
  for (const char* phase : {"", "Queued", "Starting", "Running", "Restarting", "Suspended"}) {
    EXPECT_EQ(DecideWait(JobIn(phase), WaitCondition::kCompletion).kind, WaitVerdict::kKeepWaiting)
        << phase;
  }
  EXPECT_EQ(DecideWait(JobIn("Succeeded"), WaitCondition::kCompletion).kind, WaitVerdict::kMet);
  EXPECT_EQ(DecideWait(JobIn("Failed"), WaitCondition::kCompletion).kind, WaitVerdict::kFailed);
}

TEST(PluginWaitTest, RunningIsMetByRunningOrAlreadySucceeded) {
  EXPECT_EQ(DecideWait(JobIn("Starting"), WaitCondition::kRunning).kind, WaitVerdict::kKeepWaiting);
  EXPECT_EQ(DecideWait(JobIn("Running"), WaitCondition::kRunning).kind, WaitVerdict::kMet);
  EXPECT_EQ(DecideWait(JobIn("Succeeded"), WaitCondition::kRunning).kind, WaitVerdict::kMet);
  EXPECT_EQ(DecideWait(JobIn("Failed"), WaitCondition::kRunning).kind, WaitVerdict::kFailed);
  EXPECT_EQ(ParseWaitCondition("running").value(), WaitCondition::kRunning);
  EXPECT_EQ(ParseWaitCondition("completion").value(), WaitCondition::kCompletion);
  EXPECT_FALSE(ParseWaitCondition("ready"));
}

TEST(PluginWaitTest, AFailureSaysWhyAndNamesTheLastFault) {
  json job = JobIn("Failed");
  job["status"]["conditions"] = json::parse(R"([
    {"type": "Ready", "status": "False", "reason": "JobFailed", "message": "not this"},
    {"type": "Failed", "status": "True", "reason": "RetriesExhausted",
     "message": "worker-1 exited 143 after 5 restarts"}])");
  job["status"]["faults"] = json::parse(R"([
    {"kind": "NodeUnhealthy", "node": "n1", "action": "ReissueJob"},
    {"kind": "ContainerFailed", "pod": "j-worker-1", "node": "n2", "container": "trainer",
     "exitCode": 143, "message": "Error", "action": "FailJob"}])");
  const WaitVerdict verdict = DecideWait(job, WaitCondition::kCompletion);
  ASSERT_EQ(verdict.kind, WaitVerdict::kFailed);
  EXPECT_EQ(verdict.message,
            "RetriesExhausted: worker-1 exited 143 after 5 restarts; last fault: ContainerFailed "
            "pod j-worker-1 node n2 container trainer exit code 143: Error (FailJob)");
  EXPECT_EQ(FailureSummary(JobIn("Failed")), "");
}

TEST(PluginSuspendTest, PatchesOnlySpecSuspend) {
  EXPECT_EQ(SuspendPatch(true), json::parse(R"({"spec": {"suspend": true}})"));
  EXPECT_EQ(SuspendPatch(false), json::parse(R"({"spec": {"suspend": false}})"));
}

TEST(PluginListTest, StatusFilterTakesAnyCaseAndNamesTheValidPhases) {
  EXPECT_EQ(ParsePhase("running").value(), "Running");
  EXPECT_EQ(ParsePhase("SUCCEEDED").value(), "Succeeded");
  EXPECT_EQ(ParsePhase("Queued").value(), "Queued");
  EXPECT_EQ(ParsePhase("suspended").value(), "Suspended");
  auto bad = ParsePhase("Pending");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error(),
            "unknown phase \"Pending\": expected one of Queued, Starting, Running, Restarting, "
            "Suspended, Succeeded, Failed");

  std::vector<json> jobs = {JobIn("Running"), JobIn(""), JobIn("Failed"), JobIn("Running")};
  jobs[0]["metadata"]["name"] = "a";
  jobs[3]["metadata"]["name"] = "b";
  const std::vector<json> running = FilterByPhase(jobs, "Running");
  ASSERT_EQ(running.size(), 2u);
  EXPECT_EQ(running[0]["metadata"]["name"], "a");
  EXPECT_EQ(running[1]["metadata"]["name"], "b");
  // No status yet counts as Queued, as `list` shows it.
  EXPECT_EQ(FilterByPhase(jobs, "Queued").size(), 1u);
}

TEST(PluginListTest, UnknownPhaseAndBadWaitFlagsExitOne) {
  Answer a = Shell(Plugin() + " list --status pending --kubeconfig /nonexistent");
  EXPECT_EQ(a.exit_code, 1);
  EXPECT_THAT(a.output, HasSubstr("expected one of Queued"));
  a = Shell(Plugin() + " wait j --timeout soon --kubeconfig /nonexistent");
  EXPECT_EQ(a.exit_code, 1);
  EXPECT_THAT(a.output, HasSubstr("--timeout"));
  a = Shell(Plugin() + " wait j --for=ready");
  EXPECT_EQ(a.exit_code, 1);
  for (const char* sub : {"wait", "suspend", "resume", "list"}) {
    a = Shell(Plugin() + " " + sub + " --help");
    EXPECT_EQ(a.exit_code, 0) << sub << a.output;
  }
}

std::vector<std::string> Complete(const std::vector<std::string>& words) {
  return CompletionCandidates(words, [] { return std::vector<std::string>{"alpha", "beta"}; });
}

TEST(PluginCompletionTest, OffersSubcommandsFlagsValuesAndJobNames) {
  using ::testing::ElementsAre;
  using ::testing::IsEmpty;
  using ::testing::UnorderedElementsAre;
  EXPECT_THAT(Complete({""}), ElementsAre("list", "describe", "run", "wait", "suspend", "resume",
                                          "logs", "completion"));
  EXPECT_THAT(Complete({"su"}), ElementsAre("suspend"));
  EXPECT_THAT(Complete({"wait", ""}), ElementsAre("alpha", "beta"));
  EXPECT_THAT(Complete({"-n", "ml", "describe", "a"}), ElementsAre("alpha"));
  EXPECT_THAT(Complete({"wait", "alpha", ""}), IsEmpty());  // the name is given
  EXPECT_THAT(Complete({"run", ""}), IsEmpty());            // a new name: nothing to offer
  EXPECT_THAT(Complete({"wait", "alpha", "--f"}), ElementsAre("--for"));
  EXPECT_THAT(Complete({"wait", "alpha", "--for", ""}), ElementsAre("completion", "running"));
  EXPECT_THAT(Complete({"wait", "alpha", "--for=r"}), ElementsAre("--for=running"));
  // bash splits at '='.
  EXPECT_THAT(Complete({"wait", "alpha", "--for", "=", "r"}), ElementsAre("running"));
  EXPECT_THAT(Complete({"wait", "alpha", "--for", "="}), ElementsAre("completion", "running"));
  EXPECT_THAT(Complete({"list", "--status", "S"}),
              UnorderedElementsAre("Starting", "Suspended", "Succeeded"));
  EXPECT_THAT(Complete({"run", "x", "-o", ""}), ElementsAre("yaml", "json"));
  EXPECT_THAT(Complete({"run", "x", "--image", ""}), IsEmpty());
  EXPECT_THAT(Complete({"run", "x", "--", ""}), IsEmpty());
  EXPECT_THAT(Complete({"completion", ""}), ElementsAre("bash", "zsh"));
  EXPECT_THAT(Complete({"logs", "alpha", "--w"}), ElementsAre("--worker"));
  EXPECT_THAT(Complete({"--kube"}), ElementsAre("--kubeconfig"));
  EXPECT_THAT(Complete({"nosuch", ""}), IsEmpty());
  EXPECT_EQ(CompletionOutput({"a", "b"}), "a\nb\n:4\n");
}

TEST(PluginCompletionTest, JobNamesAreListedOnlyWhenANameMayFollow) {
  int calls = 0;
  auto names = [&] {
    ++calls;
    return std::vector<std::string>{"x"};
  };
  CompletionCandidates({"run", ""}, names);
  CompletionCandidates({"wait", "--for", ""}, names);
  CompletionCandidates({"list", ""}, names);
  EXPECT_EQ(calls, 0);
  CompletionCandidates({"suspend", ""}, names);
  EXPECT_EQ(calls, 1);
}

TEST(PluginCompletionTest, ScriptsAskTheBinaryAndRegisterTheCommand) {
  auto bash = CompletionScript("bash");
  ASSERT_TRUE(bash);
  EXPECT_THAT(*bash, HasSubstr("kubectl-tpujob __complete"));
  EXPECT_THAT(*bash, HasSubstr("complete -F _kubectl_tpujob kubectl-tpujob"));
  auto zsh = CompletionScript("zsh");
  ASSERT_TRUE(zsh);
  EXPECT_THAT(*zsh, HasSubstr("#compdef kubectl-tpujob"));
  EXPECT_THAT(*zsh, HasSubstr("kubectl-tpujob __complete"));
  EXPECT_THAT(*zsh, HasSubstr("compdef _kubectl_tpujob kubectl-tpujob"));
  EXPECT_THAT(CompletionScript("fish").error(), HasSubstr("expected bash or zsh"));
}

// The flags completion offers are the flags each subcommand's --help lists.
TEST(PluginCompletionTest, FlagsMatchTheSubcommandsHelp) {
  for (const char* sub : {"list", "describe", "run", "wait", "suspend", "resume", "logs"}) {
    const Answer help = Shell(Plugin() + " " + sub + " --help");
    ASSERT_EQ(help.exit_code, 0) << sub << help.output;
    std::set<std::string> listed;
    std::istringstream lines(help.output);
    static const std::regex kOption(R"(^  (-[A-Za-z],)?(--[a-z][a-z-]*))");
    for (std::string line; std::getline(lines, line);) {
      std::smatch match;
      if (!std::regex_search(line, match, kOption)) continue;
      if (match[1].matched) listed.insert(match[1].str().substr(0, 2));
      listed.insert(match[2]);
    }
    // The global flags are the parent's: completion offers them after every subcommand.
    listed.insert({"-n", "--namespace", "--kubeconfig", "--context"});
    std::vector<std::string> words = {sub, "-"};
    if (std::string(sub) != "list" && std::string(sub) != "run")
      words.insert(words.begin() + 1, "x");
    const std::vector<std::string> offered = Complete(words);
    const std::set<std::string> offered_set(offered.begin(), offered.end());
    EXPECT_EQ(offered_set, listed) << sub << "\n" << help.output;
  }
}

// Completion offers, after each subcommand of the table, exactly the names of its row's flags and
// the global ones; a flag's values and an argument's come from the table too.
TEST(PluginCompletionTest, TheTableOfSubcommandsIsWhatCompletionOffers) {
  std::vector<std::string> global;
  for (const FlagSpec& flag : GlobalFlags()) {
    for (const std::string& name : FlagNames(flag)) global.push_back(name);
  }
  EXPECT_THAT(global, ::testing::ElementsAre("--kubeconfig", "--context", "-n", "--namespace"));
  std::vector<std::string> names;
  for (const SubcommandSpec& spec : Subcommands()) {
    names.emplace_back(spec.name);
    std::vector<std::string> expected;
    for (const FlagSpec& flag : spec.flags) {
      for (const std::string& name : FlagNames(flag)) expected.push_back(name);
    }
    expected.insert(expected.end(), global.begin(), global.end());
    expected.insert(expected.end(), {"-h", "--help"});
    std::vector<std::string> words = {std::string(spec.name)};
    if (spec.argument.job_name) words.push_back("x");
    words.push_back("-");
    EXPECT_EQ(Complete(words), expected) << spec.name;
    for (const FlagSpec& flag : spec.flags) {
      EXPECT_EQ(FindFlag(FlagNames(flag).front()), &flag) << flag.names;
      if (!flag.takes_value) continue;
      const std::vector<std::string> values(flag.values.begin(), flag.values.end());
      EXPECT_EQ(Complete({std::string(spec.name), FlagNames(flag).back(), ""}), values)
          << flag.names;
    }
    if (!spec.argument.job_name) {
      const std::vector<std::string> values(spec.argument.values.begin(),
                                            spec.argument.values.end());
      EXPECT_EQ(Complete({std::string(spec.name), ""}), values) << spec.name;
    }
    EXPECT_EQ(FindSubcommand(spec.name), &spec);
  }
  EXPECT_EQ(Complete({""}), names);
  EXPECT_EQ(FindSubcommand("nosuch"), nullptr);
  EXPECT_EQ(FindFlag("--nosuch"), nullptr);
  EXPECT_THAT(FlagNames(*FindFlag("-o")), ::testing::ElementsAre("-o", "--output"));
  EXPECT_FALSE(FindFlag("--follow")->takes_value);
  EXPECT_TRUE(FindFlag("--since")->takes_value);
}

TEST(PluginObjectsTest, TextAtWritesStringsNumbersAndBoolsAndFallsBackOtherwise) {
  const json job = json::parse(R"({"spec": {"priority": 5, "suspend": true, "queue": "q",
                                            "tpu": {"slices": 2}, "list": [1], "ratio": 0.5}})");
  EXPECT_EQ(TextAt(job, "/spec/queue"), "q");
  EXPECT_EQ(TextAt(job, "/spec/priority"), "5");
  EXPECT_EQ(TextAt(job, "/spec/suspend"), "true");
  EXPECT_EQ(TextAt(job, json::json_pointer("/spec/tpu/slices")), "2");
  EXPECT_EQ(TextAt(job, "/spec/list", "-"), "-");
  EXPECT_EQ(TextAt(job, "/spec/ratio", "-"), "-");
  EXPECT_EQ(TextAt(job, "/status/phase", "Queued"), "Queued");
  EXPECT_EQ(TextAt(job, "/status/phase"), "");
}

TEST(PluginLogsTest, TheJobsPodsAreSelectedByTheJobNameLabel) {
  EXPECT_EQ(JobPodSelector("train"), "tpujob.dev/job-name=train");
}

json Pod(const std::string& name, const std::string& type, int index, int attempt,
         std::optional<int> slice = std::nullopt, std::optional<int> worker_id = std::nullopt,
         bool started = true) {
  json pod = {{"metadata",
               {{"name", name},
                {"uid", "uid-" + name + "-" + std::to_string(attempt)},
                {"labels",
                 {{"tpujob.dev/job-name", "j"},
                  {"tpujob.dev/replica-type", type},
                  {"tpujob.dev/replica-index", std::to_string(index)},
                  {"tpujob.dev/attempt", std::to_string(attempt)}}}}},
              {"spec", {{"containers", {{{"name", "trainer"}}}}}}};
  if (slice) pod["metadata"]["labels"]["tpujob.dev/slice-index"] = std::to_string(*slice);
  if (worker_id) {
    pod["spec"]["containers"][0]["env"] = {
        {{"name", "TPU_WORKER_ID"}, {"value", std::to_string(*worker_id)}}};
  }
  pod["status"]["containerStatuses"] = {
      {{"name", "trainer"},
       {"state", started ? json{{"running", json::object()}} : json{{"waiting", json::object()}}}}};
  return pod;
}

std::vector<std::string> Prefixes(const std::vector<LogSource>& sources) {
  std::vector<std::string> out;
  for (const LogSource& s : sources) out.push_back(s.prefix);
  return out;
}

TEST(PluginLogsTest, PrefixesNameTheWorkerWithinItsSlice) {
  EXPECT_EQ(LogPrefix(Pod("j-worker-3", "Worker", 3, 1, std::nullopt, 3)), "[worker-3] ");
  // Without TPU_WORKER_ID, the name's last number.
  EXPECT_EQ(LogPrefix(Pod("j-worker-1-2", "Worker", 6, 1, 1)), "[slice-1/worker-2] ");
  EXPECT_EQ(LogPrefix(Pod("j-worker-1-2", "Worker", 6, 1, 1, 2)), "[slice-1/worker-2] ");
  EXPECT_EQ(LogPrefix(Pod("j-master-0", "Master", 0, 1)), "[master-0] ");
}

TEST(PluginLogsTest, SelectsTheAttemptsPodsMasterFirstThenBySliceAndWorker) {
  const std::vector<json> pods = {
      Pod("j-worker-1-1", "Worker", 5, 2, 1, 1), Pod("j-worker-0-10", "Worker", 10, 2, 0, 10),
      Pod("j-worker-0-2", "Worker", 2, 2, 0, 2), Pod("j-master-0", "Master", 0, 2),
      Pod("j-worker-1-0", "Worker", 4, 2, 1, 0), Pod("j-worker-0-2", "Worker", 2, 1, 0, 2),
  };
  EXPECT_THAT(Prefixes(SelectLogSources(pods, 2, {})),
              ::testing::ElementsAre("[master-0] ", "[slice-0/worker-2] ", "[slice-0/worker-10] ",
                                     "[slice-1/worker-0] ", "[slice-1/worker-1] "));
  // Another attempt's pods.
  EXPECT_THAT(Prefixes(SelectLogSources(pods, 1, {})),
              ::testing::ElementsAre("[slice-0/worker-2] "));
  // --worker and --slice leave the Master out.
  LogSelection selection;
  selection.slice = 1;
  EXPECT_THAT(Prefixes(SelectLogSources(pods, 2, selection)),
              ::testing::ElementsAre("[slice-1/worker-0] ", "[slice-1/worker-1] "));
  selection.worker = 1;
  EXPECT_THAT(Prefixes(SelectLogSources(pods, 2, selection)),
              ::testing::ElementsAre("[slice-1/worker-1] "));
  selection.slice.reset();
  selection.worker = 2;
  const auto sources = SelectLogSources(pods, 2, selection);
  ASSERT_EQ(sources.size(), 1u);
  EXPECT_EQ(sources[0].pod, "j-worker-0-2");
  EXPECT_EQ(sources[0].uid, "uid-j-worker-0-2-2");
  EXPECT_EQ(sources[0].container, "trainer");
  EXPECT_TRUE(sources[0].started);
  EXPECT_FALSE(
      SelectLogSources({Pod("j-worker-0", "Worker", 0, 1, std::nullopt, 0, false)}, 1, {})[0]
          .started);
}

TEST(PluginLogsTest, LinesAreSplitAcrossChunksAndTheLastOneIsKept) {
  LineSplitter splitter;
  EXPECT_THAT(splitter.Feed("step 1\nst"), ::testing::ElementsAre("step 1"));
  EXPECT_THAT(splitter.Feed("ep"), ::testing::IsEmpty());
  EXPECT_THAT(splitter.Feed(" 2\n\nprogress\r\nlast"),
              ::testing::ElementsAre("step 2", "", "progress\r"));
  EXPECT_EQ(splitter.Flush(), "last");
  EXPECT_EQ(splitter.Flush(), std::nullopt);
}

TEST(PluginLogsTest, TheBannerSaysWhyTheAttemptEnded) {
  json job = {{"status", {{"attempt", 2}, {"faults", json::parse(R"([
                   {"attempt": 1, "kind": "NodeUnhealthy", "node": "n1",
                    "message": "TPUUnhealthy=True"},
                   {"attempt": 2, "kind": "ContainerFailed", "message": "not this one"}])")}}}};
  EXPECT_EQ(AttemptBanner(job, 1, 2),
            "--- attempt 1 ended (NodeUnhealthy on node n1: TPUUnhealthy=True); following "
            "attempt 2 ---");
  json no_faults = {{"status",
                     {{"conditions",
                       {{{"type", "Ready"},
                         {"status", "False"},
                         {"reason", "Preempted"},
                         {"message", "by ml/urgent"}}}}}}};
  EXPECT_EQ(AttemptBanner(no_faults, 1, 2),
            "--- attempt 1 ended (Preempted: by ml/urgent); following attempt 2 ---");
  EXPECT_EQ(AttemptBanner(json::object(), 3, 4), "--- attempt 3 ended; following attempt 4 ---");
  EXPECT_EQ(CurrentAttempt(job), 2);
  EXPECT_EQ(CurrentAttempt(json::object()), 1);
}

TEST(PluginLogsTest, UsageErrorsExitOne) {
  Answer a = Shell(Plugin() + " logs j --since forever --kubeconfig /nonexistent");
  EXPECT_EQ(a.exit_code, 1);
  EXPECT_THAT(a.output, HasSubstr("--since"));
  a = Shell(Plugin() + " logs");
  EXPECT_EQ(a.exit_code, 1);
  EXPECT_THAT(a.output, HasSubstr("NAME"));
}

TEST(PluginCompletionTest, TheSubcommandAndKubectlsEntryPointAnswer) {
  Answer a = Shell(Plugin() + " completion fish");
  EXPECT_EQ(a.exit_code, 1);
  EXPECT_THAT(a.output, HasSubstr("expected bash or zsh"));
  a = Shell(Plugin() + " completion bash");
  EXPECT_EQ(a.exit_code, 0);
  EXPECT_THAT(a.output, HasSubstr("complete -F _kubectl_tpujob kubectl-tpujob"));
  // kubectl's completion of the plugin, through the binary's other name.
  const std::string binary = TPUJOB_OPERATOR_BINARY;
  a = Shell("'" + binary.substr(0, binary.rfind('/')) +
            "/kubectl_complete-tpujob' wait x --for ''");
  EXPECT_EQ(a.exit_code, 0);
  EXPECT_EQ(a.output, "completion\nrunning\n:4\n");
  a = Shell(Plugin() + " __complete res");
  EXPECT_EQ(a.output, "resume\n:4\n");
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::plugin
