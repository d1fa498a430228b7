// The pre-flight report: the overall verdict, the process exit code, and the JSON document the
// init container leaves in its termination message for the operator to read back from
// `status.initContainerStatuses[].state.terminated.message`.
//
//   {"version":1,"node":"gke-tpu-a-1","verdict":"node-fault","items":[
//     {"item":"accelerator","verdict":"fail","fault":"node","value":"tpu=2 accel=2 vfio=0 gpu=0",
//      "threshold":"tpu>=4","message":"found 2 TPU devices under /dev ..."},
//     {"item":"dns","verdict":"pass","value":"4/4 resolved","threshold":"all 4 within 120s",
//      "message":""}]}
//
// Exit codes: 0 all items passed; 10 the node is at fault (at least one item failed with
// Fault::kNode; the operator cordons the node); 11 the job's configuration is at fault (only
// kConfig failures). When both kinds fail, the node fault wins and the report lists all items.
//
// The kubelet keeps at most 4096 bytes of a termination message, so SerializeReport shortens
// the report until it fits; the result stays valid JSON.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "preflight/checks.h"

namespace tpujob::preflight {

inline constexpr int kExitPass = 0;
inline constexpr int kExitNodeFault = 10;
inline constexpr int kExitConfigFault = 11;

inline constexpr size_t kTerminationMessageLimit = 4096;
inline constexpr int kReportVersion = 1;

enum class Verdict { kPass, kNodeFault, kConfigFault };
std::string_view ToString(Verdict verdict);  // "pass", "node-fault", "config-fault"

struct Report {
  int version = kReportVersion;
  std::string node;  // NODE_NAME
  Verdict verdict = Verdict::kPass;
  // log_fields are not part of the document and come back empty from ParseReport.
  std::vector<ItemResult> items;
};

// kNodeFault if any item failed with Fault::kNode, else kConfigFault if any failed, else kPass.
Verdict Summarize(const std::vector<ItemResult>& items);

int ExitCode(Verdict verdict);

// Builds a report with the verdict computed from the items.
Report MakeReport(std::string node, std::vector<ItemResult> items);

// Compact JSON of at most `max_bytes` bytes (taken as 1024 when smaller). Over the limit, the
// longest messages are cut first (marked with "..."), then values, thresholds and the node
// name; only if the items' names alone do not fit are items dropped, passed ones first.
// Strings that are not valid UTF-8 are repaired (U+FFFD), not rejected.
std::string SerializeReport(const Report& report, size_t max_bytes = kTerminationMessageLimit);

// Reads a report written by SerializeReport of this or a later version (unknown fields are
// ignored). std::nullopt for anything else: not JSON, another document, a missing or mistyped
// field, an unknown verdict or fault.
std::optional<Report> ParseReport(std::string_view json);

}  // namespace tpujob::preflight
