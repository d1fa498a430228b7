// Readable gtest output for cordon verdicts, shared by the tests that compare them (one
// definition, so that the files can be compiled together in one batch).
#pragma once

#include <ostream>

#include "policy/cordon.h"

namespace tpujob::policy {
inline void PrintTo(CordonVerdict verdict, std::ostream* os) { *os << ToString(verdict); }
}  // namespace tpujob::policy
