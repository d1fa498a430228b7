// Settings of the pre-flight command, from command-line flags and from the environment the
// operator injects into the init container (built from spec.faultTolerance.preflight). A flag
// wins over its environment variable; an empty value counts as not given, so an optional
// variable rendered as "" keeps the default.
//
// Every setting is validated up front and all problems are returned together: a non-numeric or
// negative threshold, an unknown check name, a value out of range. They are the job's
// configuration at fault, not the node's (docs/preflight.md), and end the command with exit
// code 11 before any check runs.
#pragma once

#include <expected>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "preflight/checks.h"

namespace tpujob::preflight {

enum class Check { kDisk, kUlimit, kAccelerator, kDns };
std::string_view ToString(Check check);  // "disk", "ulimit", "accelerator", "dns"

// "a, b,,c " -> {"a", "b", "c"}: entries trimmed of blanks, empty ones dropped.
std::vector<std::string> SplitList(std::string_view text);

struct Options {
  // Each check at most once, in the order they run: the local ones first, dns last because it
  // may wait for peers for up to its timeout.
  // ulimit is not a default: the limits matter only to the RDMA libraries of a high-speed
  // network, so the operator adds the check for jobs on one (spec.tpu.highSpeedNetwork; as the
  // managed training platform's fault-tolerance check does, docs/api.md "The four cases").
  std::vector<Check> checks = {Check::kDisk, Check::kAccelerator, Check::kDns};
  std::string node_name;  // NODE_NAME, recorded in the report
  DnsOptions dns;
  DiskOptions disk;
  UlimitOptions ulimit;
  AcceleratorOptions accelerator;
};

// One setting: its flag, its environment variable (empty for flag-only settings) and the help
// text, which states the default.
struct Setting {
  std::string_view flag;
  std::string_view env;
  std::string_view help;
};

// All settings, in the order --help lists them.
std::span<const Setting> Settings();

// Looks up an environment variable; std::nullopt when it is not set.
using EnvironmentLookup = std::function<std::optional<std::string>(std::string_view name)>;

// getenv(3).
EnvironmentLookup ProcessEnvironment();

// Values given on the command line, keyed by flag ("--root-min-gb"). Flags absent from the map
// were not given.
using FlagValues = std::map<std::string, std::string, std::less<>>;

struct ConfigError {
  std::string node_name;              // so even a broken configuration names its node in the report
  std::vector<std::string> problems;  // each names its source, e.g. `--nofile-min="x": ...`
};

std::expected<Options, ConfigError> LoadOptions(const FlagValues& flags,
                                                const EnvironmentLookup& env);

}  // namespace tpujob::preflight
