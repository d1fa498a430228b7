#include "plugin_commands.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <regex>
#include <tuple>

#include "cache/objects.h"
#include "kube/resource.h"
#include "plugin_subcommands.h"
#include "policy/job_spec.h"
#include "policy/kueue.h"

namespace tpujob::plugin {
namespace {

using nlohmann::json;

// Whether a plain (unquoted) scalar `text` would be read back by a YAML 1.1 or 1.2 parser as
// something other than a string. kubectl's parser (sigs.k8s.io/yaml, go-yaml v2) still resolves
// YAML 1.1's yes/no/on/off, so they count too.
bool NeedsQuotes(const std::string& text) {
  if (text.empty()) return true;
  // Anything that starts like a number (a digit, a sign, a dot: 0b101, -0x1F, 1_000, .5, 12:30)
  // is quoted whether or not some parser would take it for one: cheaper than knowing every
  // parser's integer forms, and a quoted string always reads back as itself.
  const char first = text.front();
  if (std::isdigit(static_cast<unsigned char>(first)) || first == '-' || first == '+' ||
      first == '.') {
    return true;
  }
  static const std::regex kNonString(
      R"(~|null|Null|NULL|true|True|TRUE|false|False|FALSE|y|Y|yes|Yes|YES|n|N|no|No|NO|)"
      R"(on|On|ON|off|Off|OFF)");
  return std::regex_match(text, kNonString);
}

void Emit(YAML::Emitter& out, const json& value) {
  switch (value.type()) {
    case json::value_t::object:
      out << YAML::BeginMap;
      for (const auto& [key, item] : value.items()) {
        out << YAML::Key;
        if (NeedsQuotes(key)) out << YAML::DoubleQuoted;
        out << key << YAML::Value;
        Emit(out, item);
      }
      out << YAML::EndMap;
      return;
    case json::value_t::array:
      out << YAML::BeginSeq;
      for (const json& item : value) Emit(out, item);
      out << YAML::EndSeq;
      return;
    case json::value_t::string: {
      const std::string& text = value.get_ref<const std::string&>();
      if (NeedsQuotes(text)) out << YAML::DoubleQuoted;
      out << text;
      return;
    }
    case json::value_t::boolean:
      out << (value.get<bool>() ? "true" : "false");
      return;
    case json::value_t::null:
    case json::value_t::discarded:
      out << YAML::Null;
      return;
    default:  // numbers
      out << value.dump();
      return;
  }
}

bool Dns1035Label(const std::string& name) {
  static const std::regex kLabel("[a-z]([-a-z0-9]*[a-z0-9])?");
  return std::regex_match(name, kLabel);
}

}  // namespace

std::string TextAt(const json& object, const json::json_pointer& at, const std::string& fallback) {
  if (!object.contains(at)) return fallback;
  const json& v = object.at(at);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<long long>());
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  return fallback;
}

std::string TextAt(const json& object, const char* at, const std::string& fallback) {
  return TextAt(object, json::json_pointer(at), fallback);
}

std::expected<json, std::string> BuildJob(const RunRequest& request) {
  if (request.name.empty()) return std::unexpected("a job name is required: run NAME ...");
  if (!Dns1035Label(request.name) || request.name.size() > 45) {
    return std::unexpected("invalid name \"" + request.name +
                           "\": a TPUJob's name is a DNS-1035 label (lower-case letters, digits "
                           "and '-', starting with a letter) of at most 45 characters");
  }
  if (request.tpu_type.empty()) {
    return std::unexpected("--tpu-type is required (a TPU type such as v5litepod-16, v5p-128)");
  }
  if (request.image.empty()) return std::unexpected("--image is required");
  if (request.command.empty()) {
    return std::unexpected("a command is required after `--`: run NAME ... -- COMMAND [ARGS...]");
  }
  if (request.priority && !request.priority_class.empty()) {
    return std::unexpected("--priority and --priority-class cannot both be given");
  }
  if (request.slices && (*request.slices < 1 || *request.slices > policy::kMaxSlices)) {
    return std::unexpected("--slices must be between 1 and " + std::to_string(policy::kMaxSlices));
  }
  if (request.max_restarts && (*request.max_restarts < 0 || *request.max_restarts > 100)) {
    return std::unexpected("--max-restarts must be between 0 and 100");
  }
  json env = json::array();
  for (const std::string& pair : request.env) {
    const size_t eq = pair.find('=');
    if (eq == std::string::npos || eq == 0) {
      return std::unexpected("invalid --env \"" + pair + "\": expected KEY=VALUE");
    }
    env.push_back({{"name", pair.substr(0, eq)}, {"value", pair.substr(eq + 1)}});
  }

  json container = {{"name", kContainerName},
                    {"image", request.image},
                    {"command", json::array({request.command.front()})}};
  if (request.command.size() > 1) {
    container["args"] =
        std::vector<std::string>(request.command.begin() + 1, request.command.end());
  }
  if (!env.empty()) container["env"] = env;

  const kube::Resource resource = kube::Resource::TPUJobs();
  json job = {{"apiVersion", resource.group + "/" + resource.version},
              {"kind", "TPUJob"},
              {"metadata", {{"name", request.name}}}};
  if (!request.ns.empty()) job["metadata"]["namespace"] = request.ns;
  if (!request.queue.empty()) {
    job["metadata"]["labels"][std::string(policy::kueue::kQueueNameLabel)] = request.queue;
  }
  json& spec = job["spec"];
  spec["tpu"]["type"] = request.tpu_type;
  if (request.slices) spec["tpu"]["slices"] = *request.slices;
  if (request.priority) spec["priority"] = *request.priority;
  if (!request.priority_class.empty()) spec["priorityClassName"] = request.priority_class;
  if (request.max_restarts) spec["faultTolerance"]["maxWorkerRestarts"] = *request.max_restarts;
  spec["replicaSpecs"]["Worker"]["template"]["spec"]["containers"] = json::array({container});
  return job;
}

std::string ToYaml(const json& object) {
  YAML::Emitter out;
  out.SetIndent(2);
  out << YAML::Block;
  Emit(out, object);
  return std::string(out.c_str()) + "\n";
}

std::expected<WaitCondition, std::string> ParseWaitCondition(std::string_view text) {
  if (text == "completion") return WaitCondition::kCompletion;
  if (text == "running") return WaitCondition::kRunning;
  return std::unexpected("invalid --for \"" + std::string(text) +
                         "\": expected completion or running");
}

std::expected<std::chrono::seconds, std::string> ParseDuration(std::string_view text) {
  auto invalid = [&] {
    return std::unexpected("invalid duration \"" + std::string(text) +
                           "\": expected a number and a unit, such as 30s, 5m, 1h or 1h30m");
  };
  if (text == "0") return std::chrono::seconds(0);
  if (text.empty()) return invalid();
  double total_ms = 0;
  size_t i = 0;
  while (i < text.size()) {
    const size_t start = i;
    while (i < text.size() &&
           (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
      ++i;
    }
    if (i == start) return invalid();
    double number = 0;
    try {
      number = std::stod(std::string(text.substr(start, i - start)));
    } catch (const std::exception&) {
      return invalid();
    }
    const size_t unit_start = i;
    while (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i]))) ++i;
    const std::string_view unit = text.substr(unit_start, i - unit_start);
    if (unit == "ms") {
      total_ms += number;
    } else if (unit == "s") {
      total_ms += number * 1000;
    } else if (unit == "m") {
      total_ms += number * 60 * 1000;
    } else if (unit == "h") {
      total_ms += number * 3600 * 1000;
    } else {
      return invalid();
    }
  }
  return std::chrono::seconds(static_cast<int64_t>(std::ceil(total_ms / 1000)));
}

std::string PhaseOf(const json& job) {
  const json::json_pointer at("/status/phase");
  if (!job.contains(at) || !job.at(at).is_string() || job.at(at).get<std::string>().empty()) {
    return "Queued";
  }
  return job.at(at).get<std::string>();
}

std::string FailureSummary(const json& job) {
  std::string out;
  const json::json_pointer conditions_at("/status/conditions");
  if (job.contains(conditions_at) && job.at(conditions_at).is_array()) {
    for (const json& c : job.at(conditions_at)) {
      if (c.value("type", "") != "Failed" || c.value("status", "") != "True") continue;
      out = c.value("reason", "");
      const std::string message = c.value("message", "");
      if (!message.empty()) out += (out.empty() ? "" : ": ") + message;
    }
  }
  const json::json_pointer faults_at("/status/faults");
  if (job.contains(faults_at) && job.at(faults_at).is_array() && !job.at(faults_at).empty()) {
    const json& f = job.at(faults_at).back();
    std::string fault = f.value("kind", "fault");
    auto add = [&](const char* label, const json::json_pointer& at) {
      if (!f.contains(at) || f.at(at).is_null()) return;
      const json& v = f.at(at);
      fault += std::string(" ") + label + (v.is_string() ? v.get<std::string>() : v.dump());
    };
    add("pod ", json::json_pointer("/pod"));
    add("node ", json::json_pointer("/node"));
    add("container ", json::json_pointer("/container"));
    add("item ", json::json_pointer("/item"));
    add("exit code ", json::json_pointer("/exitCode"));
    if (const std::string message = f.value("message", ""); !message.empty()) {
      fault += ": " + message;
    }
    if (const std::string action = f.value("action", ""); !action.empty()) {
      fault += " (" + action + ")";
    }
    out += (out.empty() ? "" : "; ") + std::string("last fault: ") + fault;
  }
  return out;
}

WaitVerdict DecideWait(const json& job, WaitCondition condition) {
  const std::string phase = PhaseOf(job);
  if (phase == "Failed") return {WaitVerdict::kFailed, FailureSummary(job)};
  if (phase == "Succeeded") return {WaitVerdict::kMet, ""};
  if (condition == WaitCondition::kRunning && phase == "Running") return {WaitVerdict::kMet, ""};
  return {WaitVerdict::kKeepWaiting, ""};
}

json SuspendPatch(bool suspend) { return {{"spec", {{"suspend", suspend}}}}; }

std::expected<std::string, std::string> ParsePhase(std::string_view text) {
  auto lower = [](std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
  };
  std::string valid;
  for (std::string_view phase : kPhases) {
    if (lower(phase) == lower(text)) return std::string(phase);
    valid += (valid.empty() ? "" : ", ") + std::string(phase);
  }
  return std::unexpected("unknown phase \"" + std::string(text) + "\": expected one of " + valid);
}

std::vector<json> FilterByPhase(std::vector<json> jobs, const std::string& phase) {
  std::erase_if(jobs, [&](const json& job) { return PhaseOf(job) != phase; });
  return jobs;
}

namespace {

// The global flags, then the help flag, every name of each.
std::vector<std::string> GlobalFlagNames() {
  std::vector<std::string> names;
  for (const FlagSpec& flag : GlobalFlags()) {
    for (std::string& name : FlagNames(flag)) names.push_back(std::move(name));
  }
  names.insert(names.end(), std::begin(kHelpFlags), std::end(kHelpFlags));
  return names;
}

// Flags that take a value (the next word), of every subcommand.
bool TakesValue(std::string_view flag) {
  const FlagSpec* spec = FindFlag(flag);
  return spec != nullptr && spec->takes_value;
}

std::vector<std::string> ValuesOf(std::string_view flag) {
  const FlagSpec* spec = FindFlag(flag);
  if (spec == nullptr) return {};
  return std::vector<std::string>(spec->values.begin(), spec->values.end());
}

}  // namespace

std::vector<std::string> CompletionCandidates(
    const std::vector<std::string>& words,
    const std::function<std::vector<std::string>()>& job_names) {
  std::vector<std::string> args(words.begin(), words.end());
  if (args.empty()) args.push_back("");
  std::string current = args.back();
  args.pop_back();
  std::vector<std::string> out;
  auto offer = [&](const std::vector<std::string>& candidates, const std::string& prefix = "") {
    for (const std::string& c : candidates) {
      if ((prefix + c).starts_with(current)) out.push_back(prefix + c);
    }
  };

  // bash splits "--for=ru" into "--for", "=", "ru" (and "--for=" into "--for", "=").
  // Readline completes the text after the '=', which is empty here: every value fits.
  if (current == "=" && !args.empty()) return ValuesOf(args.back());
  if (args.size() >= 2 && args.back() == "=") {
    offer(ValuesOf(args[args.size() - 2]));
    return out;
  }
  // "--for=ru" in one word.
  if (current.starts_with("--") && current.find('=') != std::string::npos) {
    const std::string flag = current.substr(0, current.find('='));
    offer(ValuesOf(flag), flag + "=");
    return out;
  }
  if (!args.empty() && TakesValue(args.back())) {
    offer(ValuesOf(args.back()));
    return out;
  }

  // The subcommand, and whether a positional argument was given after it.
  const SubcommandSpec* sub = nullptr;
  bool has_positional = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& word = args[i];
    if (word == "--") return out;  // the command of `run`: nothing to offer
    if (word.starts_with("-")) {
      if (TakesValue(word) && word.find('=') == std::string::npos) ++i;
      continue;
    }
    if (word == "=") continue;
    if (sub == nullptr) {
      sub = FindSubcommand(word);
      if (sub == nullptr) return out;  // unknown subcommand
    } else {
      has_positional = true;
    }
  }
  if (sub == nullptr) {
    if (current.starts_with("-")) {
      offer(GlobalFlagNames());
      return out;
    }
    std::vector<std::string> names;
    for (const SubcommandSpec& spec : Subcommands()) names.emplace_back(spec.name);
    offer(names);
    return out;
  }
  if (current.starts_with("-")) {
    std::vector<std::string> flags;
    for (const FlagSpec& flag : sub->flags) {
      for (std::string& name : FlagNames(flag)) flags.push_back(std::move(name));
    }
    for (std::string& name : GlobalFlagNames()) flags.push_back(std::move(name));
    offer(flags);
    return out;
  }
  if (has_positional) return out;
  if (sub->argument.job_name) {
    offer(job_names());
  } else {
    offer(std::vector<std::string>(sub->argument.values.begin(), sub->argument.values.end()));
  }
  return out;
}

std::string CompletionOutput(const std::vector<std::string>& candidates) {
  std::string out;
  for (const std::string& c : candidates) out += c + "\n";
  return out + ":4\n";
}

std::expected<std::string, std::string> CompletionScript(std::string_view shell) {
  if (shell == "bash") {
    return R"(# bash completion for kubectl-tpujob: source it, or save it in
# /etc/bash_completion.d/kubectl-tpujob. Completes subcommands, flags, flag values and job names;
# the binary answers (`kubectl-tpujob __complete WORDS...`).
_kubectl_tpujob() {
  local IFS=$'\n' line
  local -a candidates=()
  while IFS= read -r line; do
    [[ $line == :* ]] && continue
    candidates+=("$line")
  done < <(kubectl-tpujob __complete "${COMP_WORDS[@]:1:COMP_CWORD}" 2>/dev/null)
  COMPREPLY=("${candidates[@]}")
}
complete -F _kubectl_tpujob kubectl-tpujob
)";
  }
  if (shell == "zsh") {
    return R"(#compdef kubectl-tpujob
# zsh completion for kubectl-tpujob: source it, or save it as _kubectl-tpujob in a directory of
# $fpath. Completes subcommands, flags, flag values and job names; the binary answers
# (`kubectl-tpujob __complete WORDS...`).
_kubectl_tpujob() {
  local -a candidates
  candidates=("${(@f)$(kubectl-tpujob __complete "${(@)words[2,CURRENT]}" 2>/dev/null)}")
  candidates=("${(@)candidates:#:*}")
  compadd -Q -- "${(@)candidates}"
}
compdef _kubectl_tpujob kubectl-tpujob
)";
  }
  return std::unexpected("unsupported shell \"" + std::string(shell) + "\": expected bash or zsh");
}

namespace {

// A label's value as a number; `label` as written ("tpujob.dev/attempt").
std::optional<int> IntLabel(const json& pod, std::string_view label) {
  std::string escaped;  // a '/' in a JSON pointer's key is written "~1"
  for (char c : label) escaped += c == '/' ? std::string("~1") : std::string(1, c);
  const json::json_pointer at("/metadata/labels/" + escaped);
  if (!pod.contains(at) || !pod.at(at).is_string()) return std::nullopt;
  try {
    size_t used = 0;
    const std::string text = pod.at(at).get<std::string>();
    const int value = std::stoi(text, &used);
    if (used != text.size()) return std::nullopt;
    return value;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string StringAt(const json& object, const char* at) {
  const json::json_pointer pointer(at);
  if (!object.contains(pointer) || !object.at(pointer).is_string()) return "";
  return object.at(pointer).get<std::string>();
}

bool IsMaster(const json& pod) {
  return StringAt(pod, "/metadata/labels/tpujob.dev~1replica-type") == "Master";
}

// The worker's index within its slice: TPU_WORKER_ID from its first container's environment (the
// operator sets it), else the last number of its name (`<job>-worker-<slice>-<host>`), else the
// job-wide index.
int WorkerIndex(const json& pod) {
  const json::json_pointer env_at("/spec/containers/0/env");
  if (pod.contains(env_at) && pod.at(env_at).is_array()) {
    for (const json& var : pod.at(env_at)) {
      if (var.value("name", "") != "TPU_WORKER_ID" || !var.contains("value")) continue;
      try {
        return std::stoi(var.value("value", ""));
      } catch (const std::exception&) {
      }
    }
  }
  const std::string name = StringAt(pod, "/metadata/name");
  const size_t dash = name.rfind('-');
  if (dash != std::string::npos && dash + 1 < name.size() &&
      name.find_first_not_of("0123456789", dash + 1) == std::string::npos) {
    return std::stoi(name.substr(dash + 1));
  }
  return IntLabel(pod, "tpujob.dev/replica-index").value_or(0);
}

}  // namespace

std::string JobPodSelector(std::string_view job_name) {
  return std::string(cache::kJobNameLabel) + "=" + std::string(job_name);
}

int CurrentAttempt(const json& job) {
  const json::json_pointer at("/status/attempt");
  if (job.contains(at) && job.at(at).is_number_integer()) return job.at(at).get<int>();
  return 1;
}

std::string LogPrefix(const json& pod) {
  if (IsMaster(pod)) {
    return "[master-" + std::to_string(IntLabel(pod, "tpujob.dev/replica-index").value_or(0)) +
           "] ";
  }
  const std::string worker = "worker-" + std::to_string(WorkerIndex(pod));
  if (auto slice = IntLabel(pod, "tpujob.dev/slice-index")) {
    return "[slice-" + std::to_string(*slice) + "/" + worker + "] ";
  }
  return "[" + worker + "] ";
}

std::vector<LogSource> SelectLogSources(const std::vector<json>& pods, int attempt,
                                        const LogSelection& selection) {
  struct Ranked {
    std::tuple<int, int, int> rank;  // master first, then slice, then worker
    LogSource source;
  };
  std::vector<Ranked> ranked;
  for (const json& pod : pods) {
    if (IntLabel(pod, "tpujob.dev/attempt").value_or(1) != attempt) continue;
    const bool master = IsMaster(pod);
    const int slice = IntLabel(pod, "tpujob.dev/slice-index").value_or(0);
    const int worker = master ? 0 : WorkerIndex(pod);
    if (selection.worker || selection.slice) {
      if (master) continue;
      if (selection.worker && *selection.worker != worker) continue;
      if (selection.slice && *selection.slice != slice) continue;
    }
    LogSource source;
    source.pod = StringAt(pod, "/metadata/name");
    source.uid = StringAt(pod, "/metadata/uid");
    source.container = StringAt(pod, "/spec/containers/0/name");
    source.prefix = LogPrefix(pod);
    const json::json_pointer statuses_at("/status/containerStatuses");
    if (pod.contains(statuses_at) && pod.at(statuses_at).is_array()) {
      for (const json& status : pod.at(statuses_at)) {
        if (status.value("name", "") != source.container) continue;
        const json state = status.value("state", json::object());
        source.started = state.contains("running") || state.contains("terminated");
      }
    }
    ranked.push_back({{master ? 0 : 1, slice, worker}, std::move(source)});
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const Ranked& a, const Ranked& b) { return a.rank < b.rank; });
  std::vector<LogSource> out;
  for (Ranked& r : ranked) out.push_back(std::move(r.source));
  return out;
}

std::vector<std::string> LineSplitter::Feed(std::string_view chunk) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (true) {
    const size_t newline = chunk.find('\n', start);
    if (newline == std::string_view::npos) break;
    partial_.append(chunk.substr(start, newline - start));
    lines.push_back(std::move(partial_));
    partial_.clear();
    start = newline + 1;
  }
  partial_.append(chunk.substr(start));
  return lines;
}

std::optional<std::string> LineSplitter::Flush() {
  if (partial_.empty()) return std::nullopt;
  std::string last = std::move(partial_);
  partial_.clear();
  return last;
}

std::string AttemptBanner(const json& job, int ended, int next) {
  std::string reason;
  const json::json_pointer faults_at("/status/faults");
  if (job.contains(faults_at) && job.at(faults_at).is_array()) {
    for (const json& f : job.at(faults_at)) {
      if (f.contains("attempt") && f["attempt"].is_number_integer() &&
          f["attempt"].get<int>() != ended) {
        continue;
      }
      reason = f.value("kind", "fault");
      if (const std::string node = f.value("node", ""); !node.empty()) reason += " on node " + node;
      if (const std::string message = f.value("message", ""); !message.empty()) {
        reason += ": " + message;
      }
    }
  }
  if (reason.empty()) {
    const json::json_pointer conditions_at("/status/conditions");
    if (job.contains(conditions_at) && job.at(conditions_at).is_array()) {
      for (const json& c : job.at(conditions_at)) {
        if (c.value("type", "") != "Ready") continue;
        reason = c.value("reason", "");
        if (const std::string message = c.value("message", ""); !message.empty()) {
          reason += (reason.empty() ? "" : ": ") + message;
        }
      }
    }
  }
  return "--- attempt " + std::to_string(ended) + " ended" +
         (reason.empty() ? "" : " (" + reason + ")") + "; following attempt " +
         std::to_string(next) + " ---";
}

}  // namespace tpujob::plugin
