// Fuzzes kube::ParseKubeconfig, the kubeconfig loader (YAML). Relative file references resolve
// against a directory that does not exist, so nothing outside the input is read.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "kube/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(tpujob::fuzz::AsText(data, size));
  (void)tpujob::kube::ParseKubeconfig(text, "", "/nonexistent-kubeconfig-dir");
  (void)tpujob::kube::ParseKubeconfig(text, "fuzz", "/nonexistent-kubeconfig-dir");
  return 0;
}
