// The decisions behind the `kubectl tpujob` subcommands that change or follow a job (run, wait,
// suspend/resume, list --status, logs, completion), as pure functions: flags and objects in,
// objects, text or a verdict out. kubectl_plugin.cpp parses the command line, talks to the API
// server and prints; everything here is tested without a cluster (tests/unit/plugin_commands_test).
//
// None of these functions keeps state or touches the network; all are safe to call from any
// thread. Errors are values: a message meant for the user, printed after "error: ".
#pragma once

#include <chrono>
#include <expected>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tpujob::plugin {

// ---- run -------------------------------------------------------------------------------------

// What `kubectl tpujob run` was given.
struct RunRequest {
  std::string name;
  std::string ns;  // empty: leave metadata.namespace out (the request's namespace applies)
  std::string tpu_type;
  std::optional<int> slices;
  std::string image;
  std::optional<int> priority;
  std::string priority_class;
  std::optional<int> max_restarts;
  std::string queue;
  std::vector<std::string> env;      // "KEY=VALUE" each
  std::vector<std::string> command;  // COMMAND then its ARGS (what follows `--`)
};

// The name of the job's one container, as in examples/: the operator gives the TPU chips to the
// first container of the Worker template, whatever its name.
inline constexpr std::string_view kContainerName = "trainer";

// The label that hands a job to Kueue (docs/kueue.md).
inline constexpr std::string_view kQueueLabel = "kueue.x-k8s.io/queue-name";

// The TPUJob `run` creates, or why it cannot: a missing name, --tpu-type, --image or command, a
// name that is not a DNS-1035 label of at most 45 characters, both --priority and
// --priority-class, an --env without '=' or with an empty key, --slices or --max-restarts out of
// bounds. The TPU type is sent as written: the API server knows the types and refuses unknown
// ones with its own message.
std::expected<nlohmann::json, std::string> BuildJob(const RunRequest& request);

// `object` as YAML that `kubectl apply -f -` reads back as the same JSON: block style, keys sorted
// (apiVersion, kind, metadata, spec), and every string that YAML would read as something else (a
// number, a bool, null, empty) double-quoted.
std::string ToYaml(const nlohmann::json& object);

}  // namespace tpujob::plugin
