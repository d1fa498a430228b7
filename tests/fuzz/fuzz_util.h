// Helpers shared by the libFuzzer targets in this directory (README.md there).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace tpujob::fuzz {

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A property of the code under test did not hold: report it as a crash, which libFuzzer saves
// with its input.
[[noreturn]] inline void Violated(const char* what) {
  std::fprintf(stderr, "fuzz property violated: %s\n", what);
  std::abort();
}

}  // namespace tpujob::fuzz
