// Fuzzes the TPUJob spec parser (policy::ParseJobSpec over the cache's TPUJobInfo projection):
// a TPUJob's spec and annotations are user input that the CRD schema constrains only partly
// (annotations, pod templates, anything written before a schema change).
//
// Property: a spec it accepts has at least one worker.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "cache/objects.h"
#include "fuzz_util.h"
#include "policy/job_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using tpujob::cache::Json;
  const Json json = Json::parse(tpujob::fuzz::AsText(data, size), nullptr,
                                /*allow_exceptions=*/false);
  if (json.is_discarded()) return 0;
  auto job = tpujob::cache::TPUJobInfo::FromJson(json);
  if (!job) return 0;
  auto spec = tpujob::policy::ParseJobSpec(*job);
  if (!spec) return 0;
  if (spec->worker.replicas < 1) tpujob::fuzz::Violated("accepted a job without workers");
  return 0;
}
