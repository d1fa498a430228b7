#include "node_agent_command.h"

#include <fmt/format.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>

#include "base/logging.h"
#include "base/signal_waiter.h"
#include "kube/config.h"
#include "metrics/http_server.h"
#include "version.h"

namespace tpujob {
namespace agent {

using preflight::Check;

std::expected<std::vector<Check>, std::string> ParseChecks(std::string_view list) {
  bool accelerator = false, disk = false, ulimit = false;
  for (const std::string& name : preflight::SplitList(list)) {
    if (name == "accelerator") {
      accelerator = true;
    } else if (name == "disk") {
      disk = true;
    } else if (name == "ulimit") {
      ulimit = true;
    } else {
      return std::unexpected(fmt::format(
          "unknown check \"{}\" (want accelerator, disk or ulimit{})", name,
          name == "dns" ? "; dns is a pre-flight check of a job's peers, not of a node" : ""));
    }
  }
  std::vector<Check> checks;
  if (accelerator) checks.push_back(Check::kAccelerator);
  if (disk) checks.push_back(Check::kDisk);
  if (ulimit) checks.push_back(Check::kUlimit);
  if (checks.empty()) return std::unexpected("no check given (want accelerator, disk or ulimit)");
  return checks;
}

std::expected<Settings, std::vector<std::string>> Validate(
    const Flags& flags, const preflight::EnvironmentLookup& env) {
  std::vector<std::string> problems;
  Settings settings;
  settings.node_name = flags.node_name;
  if (settings.node_name.empty()) {
    if (auto name = env("NODE_NAME")) settings.node_name = *name;
  }
  if (settings.node_name.empty()) {
    problems.push_back("--node-name: required (or the environment variable NODE_NAME)");
  }
  if (flags.interval_seconds < 1) {
    problems.push_back(
        fmt::format("--interval={}: want a whole number of seconds >= 1", flags.interval_seconds));
  }
  settings.interval = std::chrono::seconds(std::max(flags.interval_seconds, 1));
  if (auto checks = ParseChecks(flags.checks)) {
    settings.checks = *checks;
  } else {
    problems.push_back(fmt::format("--checks=\"{}\": {}", flags.checks, checks.error()));
  }
  if (flags.dev_root.empty()) problems.push_back("--dev-root: must not be empty");
  if (flags.root_path.empty()) problems.push_back("--root-path: must not be empty");
  if (!(flags.root_min_gb >= 0)) {
    problems.push_back(fmt::format("--root-min-gb={}: want a number >= 0", flags.root_min_gb));
  }
  settings.dev_root = flags.dev_root;
  settings.root_path = flags.root_path;
  settings.root_min_gb = flags.root_min_gb;
  // A condition type is a (qualified) name: no spaces, no quotes, not empty.
  const bool type_ok =
      !flags.condition_type.empty() && flags.condition_type.size() <= 316 &&
      std::all_of(flags.condition_type.begin(), flags.condition_type.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
               c == '/';
      });
  if (!type_ok) {
    problems.push_back(
        fmt::format("--condition-type=\"{}\": want a condition type such as "
                    "TPUUnhealthy (letters, digits, '-', '_', '.', '/')",
                    flags.condition_type));
  }
  settings.condition_type = flags.condition_type;
  if (flags.fail_after < 1) {
    problems.push_back(fmt::format("--fail-after={}: want 1 or more rounds", flags.fail_after));
  }
  if (flags.pass_after < 1) {
    problems.push_back(fmt::format("--pass-after={}: want 1 or more rounds", flags.pass_after));
  }
  settings.fail_after = flags.fail_after;
  settings.pass_after = flags.pass_after;
  settings.watch_pods = flags.watch_pods && !flags.once;
  if (!problems.empty()) return std::unexpected(std::move(problems));
  return settings;
}

int ExitCode(NodeAgent::Outcome outcome) {
  switch (outcome) {
    case NodeAgent::Outcome::kPassed:
      return kExitPassed;
    case NodeAgent::Outcome::kFailed:
      return kExitFailed;
    case NodeAgent::Outcome::kInconclusive:
      return kExitInvalid;
    case NodeAgent::Outcome::kApiError:
      return kExitApiError;
  }
  return kExitApiError;
}

}  // namespace agent

namespace {

constexpr const char* kDescription =
    "Check this node's hardware every --interval and report it in a node condition (default "
    "TPUUnhealthy, the operator's default --hardware-condition): True when TPU devices are "
    "missing (fewer /dev/accel<N> or /dev/vfio/<N> than the node's google.com/tpu capacity), "
    "False when healthy. The operator cordons a node whose condition is True and re-issues the "
    "jobs on it. It also watches the TPUJob pods on the node and checks at once when a worker "
    "exits with a non-zero code. Runs as a DaemonSet on the TPU nodes; needs `patch` on "
    "`nodes/status`, and `list` and `watch` on pods for --watch-pods.";

constexpr const char* kFooter =
    R"(Hysteresis: the condition turns True after --fail-after failing rounds in a row
and back to False only after --pass-after passing rounds in a row. A restarted agent starts
from the condition on the node: if it is True, --pass-after passing rounds clear it.
Abnormal exits (--watch-pods): when a container or init container of a TPUJob pod on the node
terminates with a non-zero exit code (128+N for signal N), a round runs at once; if it fails,
the condition turns True at once, whatever --fail-after says, and its message names the exit.
The periodic rounds keep their schedule. Without list/watch on pods: one warning, periodic
rounds only.
Condition reasons: AcceleratorMissing, DiskTooSmall, UlimitTooLow (True: the first failing
item), HardwareRecovering (True, passing rounds accumulating), HardwareHealthy (False),
HardwareSuspect (False, failing rounds accumulating).
An item that cannot be measured at all (the device directory or the root path does not exist)
is the agent's configuration at fault: it is logged and the condition is left unchanged.
Exit codes: 0 on SIGTERM/SIGINT; with --once: 0 every item passed, 1 an item failed, 2 invalid
flags or an item could not be measured, 3 the node could not be read or written. Invalid flags
always exit 2. See docs/node-agent.md.)";

int RunNodeAgent(const agent::Flags& flags) {
  if (log::Format format; !ParseLogFormat(flags.log_format, format)) {
    std::fprintf(stderr, "error: unknown --log-format \"%s\" (want logfmt or json)\n",
                 flags.log_format.c_str());
    return agent::kExitInvalid;
  }
  if (!SetupLogging(flags.log_level, flags.log_format)) {
    std::fprintf(stderr,
                 "error: unknown --log-level \"%s\" (want trace, debug, info, warn or error)\n",
                 flags.log_level.c_str());
    return agent::kExitInvalid;
  }
  auto settings = agent::Validate(flags, preflight::ProcessEnvironment());
  if (!settings) {
    for (const std::string& problem : settings.error()) {
      log::Error("invalid flag", {{"error", problem}});
    }
    return agent::kExitInvalid;
  }
  // Before any thread starts, so all of them inherit the mask; --once keeps the default
  // dispositions, so a signal ends it at once.
  std::optional<SignalWaiter> signals;
  if (!flags.once) signals.emplace();

  auto config = kube::ResolveConfig(flags.kubeconfig, "");
  if (!config) {
    log::Error("cannot load the Kubernetes configuration", {{"error", config.error().ToString()}});
    return agent::kExitInvalid;
  }
  config->user_agent = std::string("tpujob-operator/") + TPUJOB_VERSION + " (node-agent " +
                       settings->node_name + ")";
  std::string checks;
  for (preflight::Check check : settings->checks) {
    checks += (checks.empty() ? "" : ",") + std::string(preflight::ToString(check));
  }
  log::Info("node agent starting", {{"version", TPUJOB_VERSION},
                                    {"node", settings->node_name},
                                    {"server", config->server},
                                    {"config", config->source},
                                    {"condition", settings->condition_type},
                                    {"checks", checks},
                                    {"dev_root", settings->dev_root},
                                    {"interval", settings->interval},
                                    {"fail_after", settings->fail_after},
                                    {"pass_after", settings->pass_after},
                                    {"watch_pods", settings->watch_pods},
                                    {"once", flags.once}});
  // Before any thread but the signal waiter's, which reads no environment.
  kube::TrustOnlyTheConfiguredCa(*config);
  auto client = kube::NewClient(*config);
  agent::NodeAgent node_agent(*client, *settings, agent::Probes{}, Clock::Real());

  if (flags.once) {
    const agent::NodeAgent::Round round = node_agent.RunRound();
    const int code = agent::ExitCode(round.outcome);
    log::Info("node agent finished", {{"node", settings->node_name},
                                      {"exit_code", code},
                                      {"status", round.condition_true ? "True" : "False"},
                                      {"reason", round.reason}});
    return code;
  }

  std::unique_ptr<metrics::HttpServer> health;
  if (!flags.health_address.empty()) {
    health = std::make_unique<metrics::HttpServer>(flags.health_address);
    const Duration interval = settings->interval;
    health->Handle("/healthz", [&node_agent, interval]() {
      metrics::HttpResponse response;
      const TimePoint last = node_agent.last_success();
      if (agent::Healthy(last, Clock::Real().Now(), interval)) {
        response.body = "ok\n";
      } else {
        response.status = 500;
        response.body = fmt::format(
            "no successful write of the node's status for {}s\n",
            std::chrono::duration_cast<std::chrono::seconds>(Clock::Real().Now() - last).count());
      }
      return response;
    });
    if (auto started = health->Start(); !started) {
      log::Error("cannot serve /healthz", {{"error", started.error().ToString()}});
      return 1;
    }
  }

  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  std::thread signal_thread = signals->OnSignal([&](int signal) {
    log::Info("received signal, stopping", {{"signal", strsignal(signal)}});
    node_agent.Stop();
    std::unique_lock<std::mutex> lock(mu);
    // A request in flight ends within its timeout; nothing is lost by not waiting for it.
    if (!cv.wait_for(lock, std::chrono::seconds(3), [&] { return finished; })) {
      log::Info("node agent stopped", {{"node", settings->node_name}, {"pending_request", true}});
      std::_Exit(0);
    }
  });
  node_agent.Run();
  {
    std::lock_guard<std::mutex> guard(mu);
    finished = true;
  }
  cv.notify_all();
  signal_thread.join();
  if (health) health->Stop();
  log::Info("node agent stopped", {{"node", settings->node_name}});
  return 0;
}

}  // namespace

void AddNodeAgentCommand(CLI::App& app) {
  auto flags = std::make_shared<agent::Flags>();
  CLI::App* command = app.add_subcommand("node-agent", kDescription);
  command->footer(kFooter);
  command->add_option("--kubeconfig", flags->kubeconfig,
                      "Path to a kubeconfig file. Default: $KUBECONFIG, then the in-cluster "
                      "service account, then ~/.kube/config.");
  command->add_option("--node-name", flags->node_name,
                      "The node this agent checks and writes the condition of (required). "
                      "Default: $NODE_NAME (the chart sets it from spec.nodeName).");
  command
      ->add_option("--interval", flags->interval_seconds,
                   "Seconds between rounds of checks (a whole number, at least 1).")
      ->capture_default_str();
  command
      ->add_option("--checks", flags->checks,
                   "Comma-separated items to check: accelerator (TPU device nodes under "
                   "--dev-root, at least the node's google.com/tpu capacity, or 1 without it), "
                   "disk (disk-size root: the file system at --root-path larger than "
                   "--root-min-gb), ulimit (this container's soft limits, as the pre-flight "
                   "ulimit item).")
      ->capture_default_str();
  command
      ->add_option("--dev-root", flags->dev_root,
                   "Directory holding the host's device nodes (the chart mounts the host's /dev "
                   "read-only at /host/dev).")
      ->capture_default_str();
  command->add_option("--root-path", flags->root_path, "File system checked by the disk item.")
      ->capture_default_str();
  command
      ->add_option("--root-min-gb", flags->root_min_gb,
                   "The disk item passes when that file system is larger than this (GB of 10^9 "
                   "bytes; total size, not free space).")
      ->capture_default_str();
  command
      ->add_option("--condition-type", flags->condition_type,
                   "Type of the node condition written: True = hardware faulty. Must be one of "
                   "the operator's --hardware-condition types for it to act.")
      ->capture_default_str();
  command
      ->add_option("--fail-after", flags->fail_after,
                   "Failing rounds in a row that set the condition True.")
      ->capture_default_str();
  command
      ->add_option("--pass-after", flags->pass_after,
                   "Passing rounds in a row that clear a True condition (so a flapping device "
                   "does not flap the condition).")
      ->capture_default_str();
  command->add_flag("--once", flags->once,
                    "Run one round, write the condition and exit: 0 passed, 1 failed, 2 invalid "
                    "flags or not measurable, 3 API error.");
  command
      ->add_option("--watch-pods", flags->watch_pods,
                   "Watch the TPUJob pods on this node (needs list and watch on pods) and run a "
                   "round at once when a container exits with a non-zero code; a failing round "
                   "then sets the condition True at once. false: periodic rounds only. Never with "
                   "--once.")
      ->default_str("true");
  command->add_option("--log-level", flags->log_level, "trace, debug, info, warn or error.")
      ->capture_default_str();
  command
      ->add_option("--log-format", flags->log_format,
                   "logfmt (key=value) or json (one object per line).")
      ->capture_default_str();
  command->add_option("--health-address", flags->health_address,
                      "host:port serving /healthz: 200 while the node's status was written "
                      "within 3 intervals plus 30 s. Default: no endpoint.");
  command->callback([flags] { throw CLI::RuntimeError(RunNodeAgent(*flags)); });
}

}  // namespace tpujob
