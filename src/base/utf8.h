// UTF-8 hygiene for texts the operator copies from the cluster into objects it writes.
// Messages quote what containers wrote (termination messages, exit reasons), and the JSON
// encoder refuses invalid UTF-8: one stray byte would fail the write (or throw).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tpujob {

// Length of the well-formed UTF-8 sequence starting at text[at] (Unicode table 3-7: no
// overlong forms, no surrogates, nothing above U+10FFFF), or 0 if it is not one.
size_t Utf8SequenceLength(std::string_view text, size_t at);

// `text` as valid UTF-8 of at most `max_bytes`, cut between characters; stray bytes become
// U+FFFD.
std::string ValidUtf8(std::string_view text, size_t max_bytes);

}  // namespace tpujob
