// `tpujob-operator preflight`: the environment check run as the init container of every worker
// (docs/preflight.md).
#pragma once

namespace CLI {
class App;
}

namespace tpujob {

// Registers the `preflight` subcommand on `app`. When it is chosen, its callback runs the
// checks while app.parse() is still on the stack, writes the report, and then throws
// CLI::RuntimeError(exit_code), also for exit code 0. CLI11_PARSE in main() catches it and
// returns exactly that code without printing anything, so main() needs no other handling: the
// process exits with 0 (all passed), 10 (node at fault) or 11 (configuration at fault).
void AddPreflightCommand(CLI::App& app);

}  // namespace tpujob
