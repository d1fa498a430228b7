// The subcommands of `kubectl tpujob`, as one table of data: for each subcommand its name, its
// help, its one positional argument, and its flags with their help and the values they take.
//
// Two readers, so that they cannot drift apart:
//   1. kubectl_plugin.cpp registers the command line with CLI11 from this table, row by row and
//      in its order: the subcommands, their arguments and flags with these names and help texts,
//      the values a flag refuses others than, and the defaults --help shows. Each subcommand
//      binds its own options struct to its row's flags by their names (Binder, in
//      kubectl_plugin.cpp), and every flag of a row must be bound exactly once.
//   2. CompletionCandidates (plugin_commands.h) offers the subcommands, the flags of the one
//      typed, the values of a flag, the values of an argument or the job names, from this table.
//
// Pure data: no CLI11, no network; nothing here changes after static initialisation, so it is
// safe to read from any thread. The order of the rows is the order of `kubectl tpujob --help`
// and of the subcommands completion offers; within a row, the flags are in the order --help
// lists them.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tpujob::plugin {

// One flag. `names` is written as CLI11 takes it: "--tpu-type", "-o,--output".
struct FlagSpec {
  std::string_view names = {};
  std::string_view help = {};
  bool takes_value = true;  // false: a switch (-A, -f)
  // The values completion offers after the flag; with `only_values`, also the only ones the
  // command line accepts (CLI11 refuses others, and --help lists them).
  std::vector<std::string_view> values = {};
  bool only_values = false;
  bool show_default = false;  // --help shows the options struct's initial value
};

// The positional argument a subcommand requires ("NAME", "SHELL"); none when `name` is empty.
struct ArgumentSpec {
  std::string_view name = {};
  std::string_view help = {};
  bool job_name = false;                      // completion lists the namespace's jobs
  std::vector<std::string_view> values = {};  // else, these
};

struct SubcommandSpec {
  std::string_view name = {};
  std::string_view help = {};
  ArgumentSpec argument = {};
  std::vector<FlagSpec> flags = {};
  // Takes the words after `--` (the job's command): any other subcommand refuses them.
  bool takes_command = false;
};

// The one-line description of `kubectl tpujob` itself, and the name --help shows for it.
inline constexpr std::string_view kPluginDescription =
    "kubectl tpujob: TPUJobs as the tpujob-operator sees them: the queue in order, and for one "
    "job its attempts, faults, cordoned nodes, pods and why it waits; and a job run, followed, "
    "waited for, suspended and resumed from the command line.";
inline constexpr std::string_view kPluginName = "kubectl tpujob";

// The flags every subcommand takes (the parent's; they may come before or after the
// subcommand, as in kubectl). CLI11's own -h,--help is not among them: see kHelpFlags.
std::span<const FlagSpec> GlobalFlags();

// The help flag CLI11 adds to the parent and to every subcommand; completion offers it too.
inline constexpr std::string_view kHelpFlags[] = {"-h", "--help"};

// The table, in the order of --help.
std::span<const SubcommandSpec> Subcommands();

// The row named `name`, or nullptr.
const SubcommandSpec* FindSubcommand(std::string_view name);

// The flag one of whose names is `name` ("-o" or "--output"), among the global flags and every
// subcommand's; nullptr when none. A name means the same in every subcommand that has it.
const FlagSpec* FindFlag(std::string_view name);

// "-o,--output" -> {"-o", "--output"}.
std::vector<std::string> FlagNames(const FlagSpec& flag);

}  // namespace tpujob::plugin
