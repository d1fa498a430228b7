// Fuzzes the cache's projections of API objects (cache::PodInfo, NodeInfo, TPUJobInfo::FromJson),
// which read whatever the API server sends, and the value parsers they use (quantities, RFC 3339
// timestamps). The input is JSON text; objects the projection accepts are then used the way
// the operator uses them (keys, field selectors, TPU requests, size accounting).
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "cache/objects.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tpujob::cache;
  const std::string_view text = tpujob::fuzz::AsText(data, size);
  // The value parsers see raw strings from objects too.
  (void)ParseQuantity(text);
  if (auto time = ParseRfc3339(text)) (void)FormatRfc3339Millis(*time);

  const Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return 0;

  if (auto pod = PodInfo::FromJson(json)) {
    (void)pod->Key();
    (void)pod->TpuRequest();
    (void)ApproximateBytes(*pod);
    for (const char* field : {"metadata.name", "spec.nodeName", "status.phase", "status.podIP"}) {
      if (!pod->FieldValue(field)) tpujob::fuzz::Violated("a supported pod field has no value");
    }
  }
  if (auto node = NodeInfo::FromJson(json)) {
    (void)node->Key();
    (void)ApproximateBytes(*node);
  }
  if (auto job = TPUJobInfo::FromJson(json)) {
    (void)job->Key();
    if (!job->FieldValue("metadata.name"))
      tpujob::fuzz::Violated("a TPUJob has no metadata.name value");
  }
  return 0;
}
