#include "plugin_subcommands.h"

#include <iterator>

#include "plugin_commands.h"

namespace tpujob::plugin {
namespace {

// The argument of the subcommands that act on an existing job.
ArgumentSpec JobName() { return {.name = "NAME", .help = "The TPUJob's name.", .job_name = true}; }

std::vector<std::string_view> Phases() { return {std::begin(kPhases), std::end(kPhases)}; }

}  // namespace

std::span<const FlagSpec> GlobalFlags() {
  static const std::vector<FlagSpec> kGlobal = {
      {.names = "--kubeconfig",
       .help = "Path to the kubeconfig file. Default: $KUBECONFIG, then ~/.kube/config."},
      {.names = "--context", .help = "kubeconfig context. Default: the current context."},
      {.names = "-n,--namespace", .help = "Namespace. Default: the context's namespace."},
  };
  return kGlobal;
}

std::span<const SubcommandSpec> Subcommands() {
  static const std::vector<SubcommandSpec> kTable = {
      {.name = "list",
       .help = "The queue in order (next first, with why each job waits), then the other jobs.",
       .flags = {{.names = "-A,--all-namespaces",
                  .help = "Jobs of every namespace.",
                  .takes_value = false},
                 {.names = "--status",
                  .help = "Only jobs in this phase: Queued, Starting, Running, Restarting, "
                          "Suspended, Succeeded or Failed (any case).",
                  .values = Phases()}}},
      {.name = "describe",
       .help = "One job: phase, conditions, attempts, goodput by cause, faults with nodes and "
               "pre-flight items, cordoned nodes, pods, suspend/deadline/TTL, and its place in the "
               "queue and why it waits.",
       .argument = JobName()},
      {.name = "run",
       .help = "Create a TPUJob from the command line: NAME --tpu-type T --image IMG [flags] -- "
               "COMMAND [ARGS...]. The Worker template gets one container (\"trainer\") running "
               "COMMAND with ARGS; the API server derives accelerator, topology, chips and hosts "
               "from the TPU type. Prints `tpujob.tpujob.dev/NAME created`; with --dry-run=client "
               "prints the object instead (-o yaml|json), ready for `kubectl apply -f -`. Exit 1 "
               "when the server refuses the job.",
       // A new name: nothing to complete.
       .argument = {.name = "NAME", .help = "The TPUJob's name."},
       .flags = {{.names = "--tpu-type",
                  .help = "TPU type: v5litepod-16, v5p-128, v6e-8, ... (spec.tpu.type). Required."},
                 {.names = "--slices",
                  .help = "Slices of that type, for multislice (spec.tpu.slices)."},
                 {.names = "--image", .help = "The container image. Required."},
                 {.names = "--priority", .help = "Queue priority, higher first (spec.priority)."},
                 {.names = "--priority-class",
                  .help = "Take the priority from this PriorityClass (spec.priorityClassName)."},
                 {.names = "--max-restarts",
                  .help = "In-place restarts of one worker for a retryable exit "
                          "(spec.faultTolerance.maxWorkerRestarts)."},
                 {.names = "--queue",
                  .help = "Kueue LocalQueue to submit to (label kueue.x-k8s.io/queue-name)."},
                 {.names = "--env",
                  .help = "KEY=VALUE for the container's environment (repeatable)."},
                 {.names = "--dry-run",
                  .help = "client: print the object without sending it; none: create it.",
                  .values = {"none", "client"},
                  .only_values = true,
                  .show_default = true},
                 {.names = "-o,--output",
                  .help = "yaml or json: print the object (the server's answer, or with "
                          "--dry-run=client the object that would be sent).",
                  .values = {"yaml", "json"},
                  .only_values = true}},
       .takes_command = true},
      {.name = "wait",
       .help = "Wait for a job: exit 0 once it Succeeded (--for=completion) or is Running "
               "(--for=running; a job already Succeeded counts), 1 when it Failed (printing the "
               "reason and the last fault) or was deleted, 2 on --timeout.",
       .argument = JobName(),
       .flags = {{.names = "--for",
                  .help = "completion or running.",
                  .values = {"completion", "running"},
                  .only_values = true,
                  .show_default = true},
                 {.names = "--timeout",
                  .help = "Give up after this long (30s, 5m, 1h, 1h30m) and exit 2. Default: no "
                          "limit."}}},
      {.name = "suspend",
       .help = "Suspend a job (spec.suspend=true): its pods stop after the maintenance grace "
               "period and it leaves the queue, keeping its attempt, retries and goodput.",
       .argument = JobName()},
      {.name = "resume",
       .help = "Resume a suspended job (spec.suspend=false): it queues again.",
       .argument = JobName()},
      {.name = "logs",
       .help = "The logs of the job's pods (the Master, then the workers by slice and index), "
               "each line prefixed \"[worker-W] \", \"[slice-S/worker-W] \" in a multislice job, "
               "or \"[master-0] \". Without -f one pod after the other; with -f all at once, "
               "following the job's next attempts until it finishes.",
       .argument = JobName(),
       .flags = {{.names = "--worker",
                  .help = "Only the worker with this index within its slice (TPU_WORKER_ID)."},
                 {.names = "--slice", .help = "Only the workers of this slice (multislice jobs)."},
                 {.names = "--attempt",
                  .help = "The pods of this attempt. Default: the job's current attempt."},
                 {.names = "-f,--follow",
                  .help = "Stream the logs as they are written, across new attempts, until the "
                          "job finishes.",
                  .takes_value = false},
                 {.names = "--since",
                  .help = "Only lines newer than this (30s, 5m, 1h), as the log API's "
                          "sinceSeconds."}}},
      {.name = "completion",
       .help = "Print a completion script for bash or zsh (subcommands, flags, values, job "
               "names). Source it, e.g. `source <(kubectl tpujob completion bash)`; for `kubectl "
               "tpujob <TAB>` (kubectl 1.26 or later) put an executable named "
               "kubectl_complete-tpujob on the PATH: a symbolic link to this binary.",
       .argument = {.name = "SHELL", .help = "bash or zsh.", .values = {"bash", "zsh"}}},
  };
  return kTable;
}

const SubcommandSpec* FindSubcommand(std::string_view name) {
  for (const SubcommandSpec& spec : Subcommands()) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

std::vector<std::string> FlagNames(const FlagSpec& flag) {
  std::vector<std::string> names;
  std::string_view rest = flag.names;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    names.emplace_back(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
  }
  return names;
}

const FlagSpec* FindFlag(std::string_view name) {
  auto named = [&](const FlagSpec& flag) {
    for (const std::string& n : FlagNames(flag)) {
      if (n == name) return true;
    }
    return false;
  };
  for (const FlagSpec& flag : GlobalFlags()) {
    if (named(flag)) return &flag;
  }
  for (const SubcommandSpec& spec : Subcommands()) {
    for (const FlagSpec& flag : spec.flags) {
      if (named(flag)) return &flag;
    }
  }
  return nullptr;
}

}  // namespace tpujob::plugin
