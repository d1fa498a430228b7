#include "preflight_command.h"

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/logging.h"
#include "preflight/options.h"
#include "preflight/report.h"
#include "preflight/runner.h"

namespace tpujob {
namespace {

constexpr const char* kDescription =
    "Check the worker's environment before the training program starts (run by the operator "
    "as the pre-flight init container): peer DNS, disk sizes, ulimits and accelerator devices. "
    "Logs one line per item (keyword `item`) and writes a JSON report to --report-file.";

constexpr const char* kFooter = R"(Exit codes:
  0   every item passed
  10  the node's hardware is at fault: accelerator, disk-size root, disk-size cache or ulimit
      failed (the operator cordons the node and re-issues the job)
  11  not the hardware: dns or disk-size shm failed, a path to check does not exist, or a
      setting or argument is invalid (item config). The operator cordons the node for an
      item about its environment (dns; shm when the pod mounts a volume there), not for
      invalid settings, and re-issues the job.
  When both kinds fail, 10 wins; the report lists every item. A skipped item (disk-size
  cache without a volume at the cache path) logs verdict=skip and passes.
A command line CLI11 cannot parse at all (a flag missing its value) ends with CLI11's own exit
code and no report.
Every setting can also come from the environment variable named in its help; the flag wins,
and a flag given twice takes its last value. See docs/preflight.md.)";

struct PreflightState {
  // Flag values as typed: the preflight module validates them, so a bad value becomes a
  // configuration fault with a report, exactly like a bad environment variable.
  std::map<std::string, std::string> values;
  std::vector<std::pair<std::string, CLI::Option*>> options;
  std::string report_file = "/dev/termination-log";
  std::string log_level = "info";
  std::string log_format = "logfmt";
};

void WriteReport(const std::string& path, const preflight::Report& report) {
  if (path.empty()) return;
  const std::string json = preflight::SerializeReport(report);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << json;
  out.close();
  if (!out) {
    // The exit code still tells the operator which side is at fault.
    log::Warn("cannot write the pre-flight report",
              {{"path", path}, {"error", std::strerror(errno)}});
  }
}

int RunPreflight(const PreflightState& state, const std::vector<std::string>& extras) {
  std::vector<std::string> problems;
  log::Format format = log::Format::kLogfmt;
  const bool format_known = ParseLogFormat(state.log_format, format);
  const std::string format_name = format_known ? state.log_format : "logfmt";
  if (!SetupLogging(state.log_level, format_name)) {
    SetupLogging("info", format_name);
    problems.push_back("--log-level=\"" + state.log_level +
                       "\": want trace, debug, info, warn or error");
  }
  if (!format_known) {
    problems.push_back("--log-format=\"" + state.log_format + "\": want logfmt or json");
  }
  for (const std::string& extra : extras) {
    problems.push_back("unexpected argument \"" + extra + "\"");
  }

  preflight::FlagValues flags;
  for (const auto& [flag, option] : state.options) {
    if (option->count() > 0) flags[flag] = state.values.at(flag);
  }
  auto options = preflight::LoadOptions(flags, preflight::ProcessEnvironment());

  preflight::Report report;
  if (!options || !problems.empty()) {
    preflight::ConfigError error;
    if (options) {
      error.node_name = options->node_name;
    } else {
      error = std::move(options.error());
    }
    error.problems.insert(error.problems.begin(), problems.begin(), problems.end());
    report = preflight::ConfigFaultReport(error);
  } else {
    std::string checks;
    for (preflight::Check check : options->checks) {
      checks += (checks.empty() ? "" : ",") + std::string(preflight::ToString(check));
    }
    log::Info("preflight starting", {{"node", options->node_name}, {"checks", checks}});
    report = preflight::RunChecks(*options, preflight::Probes{}, Clock::Real());
  }

  WriteReport(state.report_file, report);
  const int exit_code = preflight::ExitCode(report.verdict);
  size_t failed = 0;
  for (const preflight::ItemResult& item : report.items) failed += item.passed ? 0 : 1;
  log::Info("preflight finished", {{"verdict", preflight::ToString(report.verdict)},
                                   {"exit_code", exit_code},
                                   {"items", report.items.size()},
                                   {"failed", failed},
                                   {"report", state.report_file}});
  return exit_code;
}

}  // namespace

void AddPreflightCommand(CLI::App& app) {
  auto state = std::make_shared<PreflightState>();
  CLI::App* command = app.add_subcommand("preflight", kDescription);
  command->footer(kFooter);
  for (const preflight::Setting& setting : preflight::Settings()) {
    const std::string flag(setting.flag);
    std::string help(setting.help);
    if (!setting.env.empty()) help += " Env: " + std::string(setting.env) + ".";
    CLI::Option* option = command->add_option(flag, state->values[flag], help)
                              ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    state->options.emplace_back(flag, option);
  }
  command
      ->add_option("--report-file", state->report_file,
                   "Where the JSON report goes (the container's terminationMessagePath); at "
                   "most 4096 bytes. Empty: no report.")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->capture_default_str();
  command->add_option("--log-level", state->log_level, "trace, debug, info, warn or error.")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->capture_default_str();
  command
      ->add_option("--log-format", state->log_format,
                   "logfmt (key=value) or json (one object per line).")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->capture_default_str();
  // Unknown arguments are collected instead of rejected so that they, too, end in a report
  // and exit code 11: the operator builds this command line from the job's spec.
  command->allow_extras();
  command->callback(
      [state, command] { throw CLI::RuntimeError(RunPreflight(*state, command->remaining())); });
}

}  // namespace tpujob
