// Small text functions the modules share, so that each is written once: trimming, joining and
// telling an IP address from a host name. Pure functions of their arguments; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tpujob {

// What std::isspace() accepts in the C locale.
inline constexpr std::string_view kWhitespace = " \t\n\v\f\r";

// `text` without its leading and trailing characters that are in `chars`; a view into `text`.
std::string_view Trim(std::string_view text, std::string_view chars = kWhitespace);

// `parts` with `separator` between each two; "" for none. Empty parts at the front are left out
// with their separators (the text so far is empty).
std::string Join(const std::vector<std::string>& parts, std::string_view separator);

// Whether `host` is an IPv4 or IPv6 address literal (as inet_pton reads them) rather than a
// name: TLS checks an address against the certificate's IP SANs, a name against its DNS SANs.
bool IsIpAddress(const std::string& host);

}  // namespace tpujob
