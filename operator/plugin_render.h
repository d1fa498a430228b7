// The texts of `kubectl tpujob list` and `describe`: pure functions from objects and a fixed `now`
// to text, tested without a cluster (tests/unit/kubectl_plugin_test.cpp).
//
//   1. `list` shows the waiting jobs first, in the operator's queue order (status.queuePosition,
//      written with the order of src/policy/queue.h: re-issued first, then priority, then time
//      queued) with why each waits (the Admitted condition's message), then the admitted and
//      finished jobs by namespace and name.
//   2. `describe` shows one job: its head (phase, attempt, retries, priority, TPU, node pools,
//      age, and job control when set), its place in the queue while Queued, conditions,
//      replicas, progress (stall detection: the last step reported, stalls, and the current step
//      and rate when read from a worker's log), goodput as of `now`, faults (a SLICE column in a
//      multislice job), cordoned nodes and pods.
//   3. Tables are aligned columns three spaces apart, as kubectl prints them; a missing field
//      prints "-" or "<none>", never an error.
//
// Thread-safety: none of these functions keeps state; all are safe to call from any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "policy/progress_log.h"

namespace tpujob::plugin {

// The table of `list`: waiting jobs first in queue order, then the others by namespace and name.
std::string RenderList(const std::vector<nlohmann::json>& jobs, WallTime now, bool all_namespaces);

// What a worker's log tail says of its program's progress (src/policy/progress_log.h), read on
// demand by `describe` for a job with spec.faultTolerance.progress.logPattern.
using policy::LogProgress;
using policy::ProgressFromLog;

// The text of `describe` for one job and its pods; `progress`, when read, adds the program's
// current step and rate to the Progress section.
std::string RenderDescribe(const nlohmann::json& job, const std::vector<nlohmann::json>& pods,
                           WallTime now, const std::optional<LogProgress>& progress = std::nullopt);

// "3m12s", "2h5m", "4d1h": the age from an RFC 3339 time to `now`; "<unknown>" if unparsable.
std::string Age(const std::string& rfc3339, WallTime now);

}  // namespace tpujob::plugin
