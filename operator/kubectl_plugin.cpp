#include "kubectl_plugin.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <expected>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <thread>
#include <type_traits>

#include "kube/client.h"
#include "kube/config.h"
#include "plugin_commands.h"
#include "plugin_follow.h"
#include "plugin_render.h"
#include "plugin_subcommands.h"

namespace tpujob::plugin {
namespace {

using nlohmann::json;

// ---- the command line ------------------------------------------------------------------------

// Registers the flags of one row of the table (or the global flags) on a CLI11 command, binding
// each to a variable of the subcommand's options struct. The flags are bound in the order of the
// row, which is the order --help lists them, and every one of them: Finish() throws
// std::logic_error otherwise, which any --help finds.
class Binder {
  template <typename T>
  struct IsOptional : std::false_type {};
  template <typename T>
  struct IsOptional<std::optional<T>> : std::true_type {};

 public:
  Binder(CLI::App& command, std::span<const FlagSpec> flags) : command_(command), flags_(flags) {}

  // The required positional argument.
  CLI::Option* Argument(const ArgumentSpec& argument, std::string& variable) {
    return command_.add_option(std::string(argument.name), variable, std::string(argument.help))
        ->required();
  }

  // The next flag of the row, which must be named `name`. A std::optional is set only when the
  // flag is given; a bool makes a switch.
  template <typename T>
  CLI::Option* Flag(std::string_view name, T& variable) {
    const FlagSpec& flag = Next(name);
    if (flag.takes_value == std::is_same_v<T, bool>) {
      throw std::logic_error("flag " + std::string(name) + " bound to a variable of another kind");
    }
    if constexpr (std::is_same_v<T, bool>) {
      return command_.add_flag(std::string(flag.names), variable, std::string(flag.help));
    } else {
      CLI::Option* option = nullptr;
      if constexpr (IsOptional<T>::value) {
        option = command_.add_option_function<typename T::value_type>(
            std::string(flag.names), [&variable](const auto& value) { variable = value; },
            std::string(flag.help));
      } else {
        option = command_.add_option(std::string(flag.names), variable, std::string(flag.help));
      }
      if (flag.only_values) {
        option->check(
            CLI::IsMember(std::vector<std::string>(flag.values.begin(), flag.values.end())));
      }
      if (flag.show_default) option->capture_default_str();
      return option;
    }
  }

  void Finish() const {
    if (next_ != flags_.size()) {
      throw std::logic_error("flag " + std::string(flags_[next_].names) + " is not bound");
    }
  }

 private:
  const FlagSpec& Next(std::string_view name) {
    if (next_ >= flags_.size()) throw std::logic_error("no flag " + std::string(name) + " here");
    const std::vector<std::string> names = FlagNames(flags_[next_]);
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      throw std::logic_error("flag " + std::string(name) + " bound out of the table's order");
    }
    return flags_[next_++];
  }

  CLI::App& command_;
  std::span<const FlagSpec> flags_;
  size_t next_ = 0;
};

// The flags of every subcommand.
struct GlobalOptions {
  std::string kubeconfig;
  std::string context;
  std::string ns;

  void Bind(Binder& b) {
    b.Flag("--kubeconfig", kubeconfig);
    b.Flag("--context", context);
    b.Flag("--namespace", ns);
  }
};

// ---- talking to the API server ---------------------------------------------------------------

// The field manager of the plugin's writes, so `kubectl get -o yaml --show-managed-fields` tells
// them apart from the operator's.
constexpr const char* kFieldManager = "kubectl-tpujob";

// kubectl's way of reporting the API server's refusal: its reason and its message (for a CEL
// rule, the rule's message), so the user sees what to fix.
void PrintError(const kube::Error& error) {
  if (error.kind == kube::ErrorKind::kApi && !error.message.empty()) {
    std::fprintf(
        stderr, "Error from server (%s): %s\n",
        error.reason.empty() ? std::to_string(error.http_status).c_str() : error.reason.c_str(),
        error.message.c_str());
  } else {
    std::fprintf(stderr, "error: %s\n", error.ToString().c_str());
  }
}

void PrintNotFound(const std::string& name) {
  std::fprintf(stderr, "Error from server (NotFound): tpujobs.tpujob.dev \"%s\" not found\n",
               name.c_str());
}

void PrintObject(const json& object, const std::string& format) {
  if (format == "json") {
    std::fputs((object.dump(4) + "\n").c_str(), stdout);
  } else {
    std::fputs(ToYaml(object).c_str(), stdout);
  }
}

// The cluster the global flags name, and the namespace the subcommand acts in.
struct Cluster {
  kube::Config config;
  std::unique_ptr<kube::Client> client;
  std::string ns;
};

// Resolves the kubeconfig and connects; prints why not and returns nothing when it cannot.
std::optional<Cluster> Connect(const GlobalOptions& global) {
  auto config = kube::ResolveConfig(global.kubeconfig, global.context);
  if (!config) {
    std::fprintf(stderr, "error: %s\n", config.error().ToString().c_str());
    return std::nullopt;
  }
  Cluster cluster;
  cluster.ns = global.ns.empty() ? config->default_namespace : global.ns;
  // A watch that delivers nothing for a minute is a dead connection (FollowJob asks the server to
  // end each one within 10 s).
  config->watch_idle_timeout = std::chrono::seconds(60);
  config->user_agent = "kubectl-tpujob";
  kube::TrustOnlyTheConfiguredCa(*config);  // no thread has started yet
  cluster.config = *config;
  cluster.client = kube::NewClient(*config, {});
  return cluster;
}

// The job `name`, or nothing when it cannot be read (the reason is printed).
std::optional<json> GetJob(Cluster& cluster, const std::string& name) {
  auto job = cluster.client->Get(kube::Resource::TPUJobs(), cluster.ns, name);
  if (!job) {
    if (job.error().IsNotFound()) {
      PrintNotFound(name);
    } else {
      std::fprintf(stderr, "error: %s\n", job.error().ToString().c_str());
    }
    return std::nullopt;
  }
  return std::move(*job);
}

WallTime Now() { return std::chrono::system_clock::now(); }

// Parses a flag's text into `value` when the flag was given; false, with "error: <what><why>"
// printed, when it does not parse.
template <typename T>
bool ParseFlag(const std::string& text, std::expected<T, std::string> (*parse)(std::string_view),
               const char* what, std::optional<T>& value) {
  if (text.empty()) return true;
  auto parsed = parse(text);
  if (!parsed) {
    std::fprintf(stderr, "error: %s%s\n", what, parsed.error().c_str());
    return false;
  }
  value = *parsed;
  return true;
}

// ---- the subcommands, one options struct and one function each --------------------------------

struct ListOptions {
  bool all_namespaces = false;
  std::string status;

  void Bind(Binder& b, const ArgumentSpec& /*none*/) {
    b.Flag("--all-namespaces", all_namespaces);
    b.Flag("--status", status);
  }
};

int List(const GlobalOptions& global, const ListOptions& options) {
  std::optional<std::string> phase;
  if (!ParseFlag(options.status, ParsePhase, "", phase)) return 1;
  auto cluster = Connect(global);
  if (!cluster) return 1;
  std::vector<json> jobs;
  auto listed = kube::ListAll(*cluster->client, kube::Resource::TPUJobs(),
                              options.all_namespaces ? "" : cluster->ns, {});
  if (!listed) {
    std::fprintf(stderr, "error: %s\n", listed.error().ToString().c_str());
    return 1;
  }
  for (auto& item : listed->items) jobs.push_back(std::move(item));
  if (phase) {
    jobs = FilterByPhase(std::move(jobs), *phase);
    if (jobs.empty()) {
      std::printf("No TPUJobs in phase %s.\n", phase->c_str());
      return 0;
    }
  }
  std::fputs(RenderList(jobs, Now(), options.all_namespaces).c_str(), stdout);
  return 0;
}

// Stall detection with a step pattern: the current step and rate, from the log tail of worker 0
// of the current attempt (the first container's, with the kubelet's timestamps). Read here, on
// demand, so that no step ever costs an API write.
std::optional<LogProgress> ReadLogProgress(const Cluster& cluster, const json& job,
                                           const std::vector<json>& pods) {
  const std::string pattern = TextAt(job, "/spec/faultTolerance/progress/logPattern");
  if (pattern.empty()) return std::nullopt;
  constexpr int kTailLines = 500;
  const std::string attempt = TextAt(job, "/status/attempt", "1");
  const json* worker0 = nullptr;
  for (const json& pod : pods) {
    if (TextAt(pod, "/metadata/labels/tpujob.dev~1replica-type") == "Worker" &&
        TextAt(pod, "/metadata/labels/tpujob.dev~1replica-index") == "0" &&
        TextAt(pod, "/metadata/labels/tpujob.dev~1attempt") == attempt) {
      worker0 = &pod;
    }
  }
  LogProgress none;
  if (worker0 == nullptr) {
    none.source = "worker 0 of attempt " + attempt;
    none.error = "no such pod";
    return none;
  }
  const std::string name = TextAt(*worker0, "/metadata/name");
  const std::string container = TextAt(*worker0, "/spec/containers/0/name");
  auto text = kube::GetText(cluster.config, kube::Resource::Pods(), cluster.ns, name, "log",
                            {{"container", container},
                             {"timestamps", "true"},
                             {"tailLines", std::to_string(kTailLines)},
                             {"limitBytes", std::to_string(4 << 20)}},
                            std::chrono::seconds(30));
  const std::string error = text ? "" : text.error().ToString();
  LogProgress progress = text ? ProgressFromLog(*text, pattern) : none;
  progress.source = "pod " + name + ", its last " + std::to_string(kTailLines) + " log lines";
  if (!error.empty()) progress.error = "cannot read its log: " + error;
  return progress;
}

struct DescribeOptions {
  std::string name;

  void Bind(Binder& b, const ArgumentSpec& argument) { b.Argument(argument, name); }
};

int Describe(const GlobalOptions& global, const DescribeOptions& options) {
  auto cluster = Connect(global);
  if (!cluster) return 1;
  const WallTime now = Now();
  auto job = GetJob(*cluster, options.name);
  if (!job) return 1;
  kube::ListOptions pod_options;
  pod_options.label_selector = JobPodSelector(options.name);
  std::vector<json> pods;
  auto listed = kube::ListAll(*cluster->client, kube::Resource::Pods(), cluster->ns, pod_options);
  if (listed) {
    for (auto& item : listed->items) pods.push_back(std::move(item));
  }
  std::fputs(RenderDescribe(*job, pods, now, ReadLogProgress(*cluster, *job, pods)).c_str(),
             stdout);
  return 0;
}

struct RunOptions {
  RunRequest request;  // but for `command` and `ns`, which are not its flags
  std::string dry_run = "none";
  std::string output;
  std::vector<std::string> command;  // the words after `--`

  void Bind(Binder& b, const ArgumentSpec& argument) {
    b.Argument(argument, request.name);
    b.Flag("--tpu-type", request.tpu_type);
    b.Flag("--slices", request.slices);
    b.Flag("--image", request.image);
    CLI::Option* priority = b.Flag("--priority", request.priority);
    priority->excludes(b.Flag("--priority-class", request.priority_class));
    b.Flag("--max-restarts", request.max_restarts);
    b.Flag("--queue", request.queue);
    // One value per --env (repeatable): a vector option would otherwise also take the words
    // after it, such as the job's name in `run --env A=1 NAME ...`.
    b.Flag("--env", request.env)
        ->expected(1)
        ->allow_extra_args(false)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    b.Flag("--dry-run", dry_run);
    b.Flag("--output", output);
  }
};

int RunJob(const GlobalOptions& global, const RunOptions& options) {
  RunRequest request = options.request;
  request.command = options.command;
  request.ns = global.ns;  // only when given: kubectl apply then uses the current namespace
  auto job = BuildJob(request);
  if (!job) {
    std::fprintf(stderr, "error: %s\n", job.error().c_str());
    return 1;
  }
  if (options.dry_run == "client") {
    PrintObject(*job, options.output.empty() ? "yaml" : options.output);
    return 0;
  }
  auto cluster = Connect(global);
  if (!cluster) return 1;
  kube::WriteOptions write;
  write.field_manager = kFieldManager;
  auto created = cluster->client->Create(kube::Resource::TPUJobs(), cluster->ns, *job, write);
  if (!created) {
    PrintError(created.error());
    return 1;
  }
  if (!options.output.empty()) {
    PrintObject(*created, options.output);
  } else {
    std::printf("tpujob.tpujob.dev/%s created\n", request.name.c_str());
  }
  return 0;
}

struct WaitOptions {
  std::string name;
  std::string condition = "completion";
  std::string timeout;

  void Bind(Binder& b, const ArgumentSpec& argument) {
    b.Argument(argument, name);
    b.Flag("--for", condition);
    b.Flag("--timeout", timeout);
  }
};

void PrintTimedOut(const std::string& name) {
  std::fprintf(stderr, "error: timed out waiting for the condition on tpujobs/%s\n", name.c_str());
}

int Wait(const GlobalOptions& global, const WaitOptions& options) {
  const std::string& name = options.name;
  std::optional<std::chrono::seconds> timeout;
  if (!ParseFlag(options.timeout, ParseDuration, "--timeout: ", timeout)) return 1;
  auto cluster = Connect(global);
  if (!cluster) return 1;
  const WaitCondition condition = *ParseWaitCondition(options.condition);
  WaitVerdict verdict;
  std::string error;
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // Whoever decides first prints: the wait below, or the watchdog at the deadline, which keeps
  // the timeout even while a request hangs (a GET being retried, a watch whose answer does not
  // come) by ending the process with the timeout's exit code.
  static std::atomic<bool> decided{false};
  if (timeout) deadline = std::chrono::steady_clock::now() + *timeout;
  if (timeout && timeout->count() > 0) {  // 0: one look at the job, nothing to cut short
    std::thread([until = *deadline, name] {
      std::this_thread::sleep_until(until);
      if (decided.exchange(true)) return;
      PrintTimedOut(name);
      std::fflush(stdout);
      std::_Exit(2);
    }).detach();
  }
  const FollowEnd end = FollowJob(
      *cluster->client, cluster->ns, name, deadline,
      [&](const json& job) {
        verdict = DecideWait(job, condition);
        return verdict.kind != WaitVerdict::kKeepWaiting;
      },
      error);
  if (decided.exchange(true)) std::this_thread::sleep_for(std::chrono::hours(1));  // exiting
  switch (end) {
    case FollowEnd::kDone:
      if (verdict.kind == WaitVerdict::kMet) {
        std::printf("tpujob.tpujob.dev/%s condition met\n", name.c_str());
        return 0;
      }
      std::fprintf(stderr, "error: tpujob.tpujob.dev/%s failed%s\n", name.c_str(),
                   verdict.message.empty() ? "" : (": " + verdict.message).c_str());
      return 1;
    case FollowEnd::kDeleted:
      std::fprintf(stderr, "error: tpujob.tpujob.dev/%s was deleted\n", name.c_str());
      return 1;
    case FollowEnd::kNotFound:
      if (error.empty()) {
        PrintNotFound(name);
      } else {
        std::fprintf(stderr, "error: %s\n", error.c_str());
      }
      return 1;
    case FollowEnd::kTimedOut:
      PrintTimedOut(name);
      return 2;
  }
  return 1;
}

// `suspend` and `resume`: the one flag they set, spec.suspend.
struct SuspendOptions {
  std::string name;

  void Bind(Binder& b, const ArgumentSpec& argument) { b.Argument(argument, name); }
};

int SetSuspend(const GlobalOptions& global, const SuspendOptions& options, bool suspend) {
  auto cluster = Connect(global);
  if (!cluster) return 1;
  kube::PatchOptions patch;
  patch.field_manager = kFieldManager;
  auto patched = cluster->client->Patch(kube::Resource::TPUJobs(), cluster->ns, options.name,
                                        kube::PatchType::kMerge, SuspendPatch(suspend), patch);
  if (!patched) {
    if (patched.error().IsNotFound()) {
      PrintNotFound(options.name);
    } else {
      PrintError(patched.error());
    }
    return 1;
  }
  std::printf("tpujob.tpujob.dev/%s %s\n", options.name.c_str(), suspend ? "suspended" : "resumed");
  return 0;
}

int Suspend(const GlobalOptions& global, const SuspendOptions& options) {
  return SetSuspend(global, options, true);
}

int Resume(const GlobalOptions& global, const SuspendOptions& options) {
  return SetSuspend(global, options, false);
}

struct LogsOptions {
  std::string name;
  LogSelection selection;
  bool follow = false;
  std::string since;

  void Bind(Binder& b, const ArgumentSpec& argument) {
    b.Argument(argument, name);
    b.Flag("--worker", selection.worker);
    b.Flag("--slice", selection.slice);
    b.Flag("--attempt", selection.attempt);
    b.Flag("--follow", follow);
    b.Flag("--since", since);
  }
};

int Logs(const GlobalOptions& global, const LogsOptions& options) {
  const std::string& name = options.name;
  std::optional<std::chrono::seconds> since;
  if (!ParseFlag(options.since, ParseDuration, "--since: ", since)) return 1;
  std::optional<int64_t> since_seconds;
  if (since) since_seconds = std::max<int64_t>(1, since->count());
  auto cluster = Connect(global);
  if (!cluster) return 1;
  auto job = GetJob(*cluster, name);
  if (!job) return 1;
  if (options.follow) {
    return FollowLogs(*cluster->client, cluster->config, cluster->ns, name, *job, options.selection,
                      since_seconds);
  }
  const int attempt = options.selection.attempt.value_or(CurrentAttempt(*job));
  kube::ListOptions pod_options;
  pod_options.label_selector = JobPodSelector(name);
  auto pods = kube::ListAll(*cluster->client, kube::Resource::Pods(), cluster->ns, pod_options);
  if (!pods) {
    PrintError(pods.error());
    return 1;
  }
  const std::vector<LogSource> sources = SelectLogSources(pods->items, attempt, options.selection);
  if (sources.empty()) {
    const std::string phase = PhaseOf(*job);
    if (phase == "Succeeded" || phase == "Failed") {
      // The operator deletes a finished job's pods, and their logs go with them.
      std::fprintf(stderr,
                   "error: tpujob.tpujob.dev/%s %s and its pods are gone, with their logs; "
                   "follow a job with -f while it runs to keep them\n",
                   name.c_str(), phase.c_str());
    } else {
      std::fprintf(stderr,
                   "error: no pods of attempt %d of tpujob.tpujob.dev/%s match (phase %s)\n",
                   attempt, name.c_str(), phase.c_str());
    }
    return 1;
  }
  LinePrinter printer;
  int rc = 0;
  for (const LogSource& source : sources) {
    if (!source.started) {
      printer.Error(source.prefix + "(" + source.pod + ": not started yet)");
      continue;
    }
    if (auto copied =
            CopyLog(cluster->config, cluster->ns, source, /*follow=*/false, since_seconds, printer);
        !copied) {
      printer.Error("error: " + source.prefix + copied.error().ToString());
      rc = 1;
    }
  }
  return rc;
}

struct CompletionOptions {
  std::string shell;

  void Bind(Binder& b, const ArgumentSpec& argument) { b.Argument(argument, shell); }
};

int PrintCompletionScript(const GlobalOptions& /*unused*/, const CompletionOptions& options) {
  auto script = CompletionScript(options.shell);
  if (!script) {
    std::fprintf(stderr, "error: %s\n", script.error().c_str());
    return 1;
  }
  std::fputs(script->c_str(), stdout);
  return 0;
}

// ---- the table, registered -------------------------------------------------------------------

// What runs one row of the table: the binding of its options struct and its function.
struct Action {
  std::function<void(Binder&, const ArgumentSpec&)> bind;
  std::function<int()> run;
};

template <typename Options>
Action ActOn(const GlobalOptions& global, Options& options,
             int (*run)(const GlobalOptions&, const Options&)) {
  return {[&options](Binder& b, const ArgumentSpec& argument) { options.Bind(b, argument); },
          [&global, &options, run] { return run(global, options); }};
}

// Every subcommand's options, and the action of each row of the table (plugin_subcommands.h)
// by the row's name.
struct CommandLine {
  GlobalOptions global;
  ListOptions list;
  DescribeOptions describe;
  RunOptions run;
  WaitOptions wait;
  SuspendOptions suspend;
  SuspendOptions resume;
  LogsOptions logs;
  CompletionOptions completion;

  std::map<std::string_view, Action> Actions() {
    return {{"list", ActOn(global, list, List)},
            {"describe", ActOn(global, describe, Describe)},
            {"run", ActOn(global, run, RunJob)},
            {"wait", ActOn(global, wait, Wait)},
            {"suspend", ActOn(global, suspend, Suspend)},
            {"resume", ActOn(global, resume, Resume)},
            {"logs", ActOn(global, logs, Logs)},
            {"completion", ActOn(global, completion, PrintCompletionScript)}};
  }
};

}  // namespace

int Complete(const std::vector<std::string>& words) {
  auto job_names = [&]() -> std::vector<std::string> {
    std::string kubeconfig;
    std::string context;
    std::string ns;
    for (size_t i = 0; i + 1 < words.size(); ++i) {
      const std::string& w = words[i];
      const std::string& next = words[i + 1];
      if (w == "-n" || w == "--namespace") ns = next;
      if (w == "--kubeconfig") kubeconfig = next;
      if (w == "--context") context = next;
      if (w.starts_with("--namespace=")) ns = w.substr(12);
      if (w.starts_with("--kubeconfig=")) kubeconfig = w.substr(13);
      if (w.starts_with("--context=")) context = w.substr(10);
    }
    auto config = kube::ResolveConfig(kubeconfig, context);
    if (!config) return {};
    if (ns.empty()) ns = config->default_namespace;
    config->max_retries = 0;  // a completion that waits is worse than none
    config->request_timeout = std::chrono::seconds(5);
    kube::TrustOnlyTheConfiguredCa(*config);
    auto client = kube::NewClient(*config, {});
    auto listed = client->List(kube::Resource::TPUJobs(), ns, {});
    std::vector<std::string> names;
    if (!listed || !(*listed)["items"].is_array()) return names;
    for (const json& job : (*listed)["items"]) names.push_back(TextAt(job, "/metadata/name"));
    std::sort(names.begin(), names.end());
    return names;
  };
  std::fputs(CompletionOutput(CompletionCandidates(words, job_names)).c_str(), stdout);
  return 0;
}

int Run(int argc, char** argv) {
  // The shell completion scripts ask the binary what may come next (see plugin_commands.h).
  if (argc >= 2 && std::string_view(argv[1]) == "__complete") {
    return Complete(std::vector<std::string>(argv + 2, argv + argc));
  }
  CommandLine line;
  // Everything after the first `--` is the command of `run`; CLI11 never sees it, so flags of the
  // command (`sh -c ...`) are not taken for the plugin's.
  int plugin_argc = argc;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--") {
      plugin_argc = i;
      line.run.command.assign(argv + i + 1, argv + argc);
      break;
    }
  }
  const bool has_separator = plugin_argc != argc;

  CLI::App app{std::string(kPluginDescription), std::string(kPluginName)};
  app.require_subcommand(1);
  app.fallthrough();  // the global flags may follow the subcommand, as in kubectl
  Binder globals(app, GlobalFlags());
  line.global.Bind(globals);
  globals.Finish();
  std::map<std::string_view, Action> actions = line.Actions();
  std::vector<std::pair<const SubcommandSpec*, CLI::App*>> registered;
  for (const SubcommandSpec& spec : Subcommands()) {
    CLI::App* command = app.add_subcommand(std::string(spec.name), std::string(spec.help));
    Binder binder(*command, spec.flags);
    actions.at(spec.name).bind(binder, spec.argument);
    binder.Finish();
    registered.emplace_back(&spec, command);
  }

  try {
    app.parse(plugin_argc, argv);
  } catch (const CLI::ParseError& e) {
    // kubectl's convention: a usage error exits 1; --help exits 0.
    return app.exit(e) == 0 ? 0 : 1;
  }
  for (const auto& [spec, command] : registered) {
    if (!command->parsed()) continue;
    if (has_separator && !spec->takes_command) {
      std::fprintf(stderr, "error: arguments after `--` are only taken by `run`\n");
      return 1;
    }
    return actions.at(spec->name).run();
  }
  return 1;  // not reached: CLI11 requires one subcommand
}

}  // namespace tpujob::plugin
