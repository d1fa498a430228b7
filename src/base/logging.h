// Process-wide logging set-up. Log lines are logfmt: `ts=... level=... msg="..." key=value`,
// so they read well in a terminal and parse in any log pipeline. Call sites write
// `spdlog::info("msg=\"...\" key={}", value)`.
#pragma once

#include <string>

namespace tpujob {

// `level`: trace, debug, info, warn, error. Returns false (and leaves logging as it was) for an
// unknown level.
bool SetupLogging(const std::string& level);

// Quotes a value for logfmt when it contains spaces, quotes or '='.
std::string LogQuote(const std::string& value);

}  // namespace tpujob
