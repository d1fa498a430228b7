// `tpujob-operator node-agent`: the subcommand's flags, their validation and the exit codes
// (AddNodeAgentCommand, declared in node_agent.h, registers it and runs the agent).
//
//   1. Flags is the command line as typed; Validate checks every flag and returns all problems
//      together, each naming its flag, or the Settings the agent runs with.
//   2. The agent runs until SIGTERM or SIGINT (exit 0); with --once it runs one round and exits
//      with ExitCode of its outcome: kExitPassed, kExitFailed, kExitInvalid (also for invalid
//      flags, always), kExitApiError.
//
// Thread-safety: the functions here keep no state.
#pragma once

#include <expected>
#include <string>
#include <string_view>
#include <vector>

#include "node_agent.h"
#include "node_agent_round.h"
#include "preflight/checks.h"
#include "preflight/options.h"

namespace tpujob::agent {

// Exit codes of `node-agent --once` (the loop exits 0 on SIGTERM/SIGINT, 2 on invalid flags).
inline constexpr int kExitPassed = 0;    // every item passed
inline constexpr int kExitFailed = 1;    // an item failed
inline constexpr int kExitInvalid = 2;   // invalid flags or configuration; an item not measurable
inline constexpr int kExitApiError = 3;  // the node could not be read or written

// The command line as typed.
struct Flags {
  std::string kubeconfig;  // "" = $KUBECONFIG, then in-cluster, then ~/.kube/config
  std::string node_name;   // "" = $NODE_NAME
  int interval_seconds = 60;
  std::string checks = "accelerator";
  std::string dev_root = "/dev";
  std::string root_path = "/";
  double root_min_gb = 32;
  std::string condition_type = "TPUUnhealthy";
  int fail_after = 1;
  int pass_after = 3;
  bool once = false;
  bool watch_pods = true;
  std::string log_level = "info";
  std::string log_format = "logfmt";
  std::string health_address;  // "" = no health endpoint
};

// Checks every flag and returns all problems together, each naming its flag. `env` supplies
// NODE_NAME when --node-name is not given.
std::expected<Settings, std::vector<std::string>> Validate(const Flags& flags,
                                                           const preflight::EnvironmentLookup& env);

// "accelerator,disk" -> the checks in canonical order; an error names an unknown entry.
std::expected<std::vector<preflight::Check>, std::string> ParseChecks(std::string_view list);

int ExitCode(NodeAgent::Outcome outcome);

}  // namespace tpujob::agent
