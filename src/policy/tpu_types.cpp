#include "policy/tpu_types.h"

#include <array>

namespace tpujob::policy {
namespace {

// The two lists of the table, each built from the rows of tpu_types.inc that it takes.
#define TPU_GENERATION(prefix, accelerator, tensorcores) \
  TpuGeneration{prefix, accelerator, tensorcores},
#define TPU_SLICE(prefix, topology, chips_per_host, machine_type)
constexpr std::array kGenerations = {
#include "policy/tpu_types.inc"
};
#undef TPU_GENERATION
#undef TPU_SLICE

#define TPU_GENERATION(prefix, accelerator, tensorcores)
#define TPU_SLICE(prefix, topology, chips_per_host, machine_type) \
  TpuSlice{prefix, topology, chips_per_host, machine_type},
constexpr std::array kSlices = {
#include "policy/tpu_types.inc"
};
#undef TPU_GENERATION
#undef TPU_SLICE

int64_t TopologyProduct(std::string_view topology) {
  int64_t product = 1;
  int64_t dim = 0;
  for (char c : topology) {
    if (c == 'x') {
      product *= dim;
      dim = 0;
    } else {
      dim = dim * 10 + (c - '0');
    }
  }
  return product * dim;
}

const TpuGeneration* FindGeneration(std::string_view prefix) {
  for (const TpuGeneration& generation : kGenerations) {
    if (generation.prefix == prefix) return &generation;
  }
  return nullptr;
}

std::string KnownGenerations() {
  std::string out;
  for (const TpuGeneration& generation : kGenerations) {
    if (!out.empty()) out += ", ";
    out += generation.prefix;
    if (generation.prefix == "v5litepod") out += " (v5e)";
  }
  return out;
}

}  // namespace

std::span<const TpuGeneration> TpuGenerations() { return kGenerations; }
std::span<const TpuSlice> TpuSlices() { return kSlices; }

std::string TpuTypeCountName(const TpuSlice& slice) {
  const TpuGeneration* generation = FindGeneration(slice.prefix);
  const int64_t cores =
      TopologyProduct(slice.topology) * (generation ? generation->tensorcores_per_chip : 1);
  return std::string(slice.prefix) + "-" + std::to_string(cores);
}

std::string TpuTypeTopologyName(const TpuSlice& slice) {
  return std::string(slice.prefix) + "-" + std::string(slice.topology);
}

std::string DescribeTpuTypeNames(std::string_view prefix) {
  const TpuGeneration* generation = FindGeneration(prefix);
  if (generation == nullptr) return "";
  std::string counts, topologies;
  for (const TpuSlice& slice : kSlices) {
    if (slice.prefix != prefix) continue;
    if (!counts.empty()) counts += ", ";
    counts += TpuTypeCountName(slice);
    if (!topologies.empty()) topologies += ", ";
    topologies += slice.topology;
  }
  return counts + (generation->tensorcores_per_chip == 1 ? " (chips)" : " (TensorCores)") +
         ", or " + std::string(prefix) + "-<topology> for topology " + topologies;
}

std::expected<TpuType, std::string> LookUpTpuType(std::string_view name) {
  const size_t dash = name.rfind('-');
  const std::string_view prefix = dash == std::string_view::npos ? "" : name.substr(0, dash);
  const TpuGeneration* generation = FindGeneration(prefix);
  if (generation == nullptr) {
    return std::unexpected("\"" + std::string(name) +
                           "\" is not a TPU type: the generation must be one of " +
                           KnownGenerations() + ", as in v5p-128 or v6e-2x4");
  }
  for (const TpuSlice& slice : kSlices) {
    if (slice.prefix != prefix) continue;
    if (TpuTypeTopologyName(slice) != name && TpuTypeCountName(slice) != name) continue;
    const int64_t chips = TopologyProduct(slice.topology);
    return TpuType{
        .generation = generation->prefix,
        .accelerator = generation->accelerator,
        .topology = slice.topology,
        .chips_per_host = slice.chips_per_host,
        .hosts_per_slice = static_cast<int32_t>(chips / slice.chips_per_host),
        .chips = chips,
        .tensorcores = chips * generation->tensorcores_per_chip,
        .machine_type = slice.machine_type,
    };
  }
  return std::unexpected("\"" + std::string(name) + "\" is not a " + std::string(prefix) +
                         " TPU type; " + std::string(prefix) +
                         " types are: " + DescribeTpuTypeNames(prefix));
}

}  // namespace tpujob::policy
