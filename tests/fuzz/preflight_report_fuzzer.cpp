// Fuzzes preflight::ParseReport, which reads the report a pre-flight container leaves in its
// termination message: written by a program in the user's image, so untrusted.
//
// Properties: whatever it accepts serializes again within the termination-message limit, and
// that serialization parses back with the same verdict.
#include <cstddef>
#include <cstdint>

#include "fuzz_util.h"
#include "preflight/report.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tpujob::preflight;
  auto report = ParseReport(tpujob::fuzz::AsText(data, size));
  if (!report) return 0;
  const std::string again = SerializeReport(*report);
  if (again.size() > kTerminationMessageLimit) tpujob::fuzz::Violated("report over the limit");
  auto reparsed = ParseReport(again);
  if (!reparsed) tpujob::fuzz::Violated("a serialized report does not parse");
  if (reparsed->verdict != report->verdict) tpujob::fuzz::Violated("the verdict changed");
  return 0;
}
