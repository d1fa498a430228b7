// TPU type names (spec.tpu.type), as XPK and the GKE documentation write them, and what each
// means for a job: the GKE node labels to select, the chips of one host and the hosts of one
// slice. The rows live in policy/tpu_types.inc, which scripts/gen-crd.py also reads for the
// CRD's CEL rules, so the API server and the operator accept the same names.
//
// Names: `<generation>-<N>` (v5litepod-16, v5p-128: N counts TensorCores, which is chips for v5e
// and v6e and twice the chips for v4, v5p and tpu7x) and `<generation>-<topology>` (v5p-4x4x4,
// v5litepod-2x4). Pure functions over constant data; safe from any thread.
#pragma once

#include <cstdint>
#include <expected>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tpujob::policy {

struct TpuGeneration {
  std::string_view prefix;       // as names spell it: "v4", "v5litepod", "v5p", "v6e", "tpu7x"
  std::string_view accelerator;  // node label cloud.google.com/gke-tpu-accelerator
  int32_t tensorcores_per_chip = 0;
};

// One slice shape of a generation.
struct TpuSlice {
  std::string_view prefix;    // its generation's prefix
  std::string_view topology;  // node label cloud.google.com/gke-tpu-topology, e.g. "4x4x4"
  int32_t chips_per_host = 0;
  std::string_view machine_type;  // the GKE machine type of its hosts, e.g. "ct5p-hightpu-4t"
};

// What a type name stands for.
struct TpuType {
  std::string_view generation;  // prefix, e.g. "v5p"
  std::string_view accelerator;
  std::string_view topology;
  int32_t chips_per_host = 0;
  int32_t hosts_per_slice = 0;
  int64_t chips = 0;        // in one slice
  int64_t tensorcores = 0;  // in one slice: the N of `<generation>-<N>`
  std::string_view machine_type;
};

// The table, in the order of policy/tpu_types.inc.
std::span<const TpuGeneration> TpuGenerations();
std::span<const TpuSlice> TpuSlices();

// The `<generation>-<N>` and `<generation>-<topology>` names of a slice shape.
std::string TpuTypeCountName(const TpuSlice& slice);
std::string TpuTypeTopologyName(const TpuSlice& slice);

// Looks a name up. On failure the message says what is wrong and lists the valid choices: the
// names of the generation when the prefix is known (`"v5p-100" is not a v5p TPU type; v5p
// types: v5p-8, v5p-16, ...`), the known generations otherwise.
std::expected<TpuType, std::string> LookUpTpuType(std::string_view name);

// "v5p-8, v5p-16, ... (TensorCores), or v5p-<topology> for topology 2x2x1, 2x2x2, ...": the
// valid names of one generation, for messages and documentation. Empty for an unknown prefix.
std::string DescribeTpuTypeNames(std::string_view prefix);

}  // namespace tpujob::policy
