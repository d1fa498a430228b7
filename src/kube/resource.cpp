#include "kube/resource.h"

namespace tpujob::kube {
namespace {

bool IsUnreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

void AppendPercentEncoded(std::string& out, std::string_view value, bool path_segment) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (const char ch : value) {
    const auto c = static_cast<unsigned char>(ch);
    // In a path segment ':' and '@' are plain pchars (RFC 3986 section 3.3); names such as
    // "system:node:x" then read naturally in logs.
    if (IsUnreserved(c) || (path_segment && (c == ':' || c == '@'))) {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0x0F]);
    }
  }
}

// Names of Kubernetes objects never need escaping, but a stray '/', '?' or '#' must not be
// able to change which URL is requested.
void AppendSegment(std::string& out, std::string_view segment) {
  out.push_back('/');
  AppendPercentEncoded(out, segment, /*path_segment=*/true);
}

}  // namespace

std::string Resource::GroupVersionPath() const {
  std::string out = group.empty() ? "/api" : "/apis";
  if (!group.empty()) AppendSegment(out, group);
  AppendSegment(out, version);
  return out;
}

std::string Resource::CollectionPath(std::string_view ns) const {
  std::string out = GroupVersionPath();
  if (namespaced && !ns.empty()) {
    out += "/namespaces";
    AppendSegment(out, ns);
  }
  AppendSegment(out, plural);
  return out;
}

std::string Resource::ObjectPath(std::string_view ns, std::string_view name,
                                 std::string_view subresource) const {
  std::string out = CollectionPath(ns);
  AppendSegment(out, name);
  if (!subresource.empty()) AppendSegment(out, subresource);
  return out;
}

std::string UrlEncode(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  AppendPercentEncoded(out, value, /*path_segment=*/false);
  return out;
}

}  // namespace tpujob::kube
