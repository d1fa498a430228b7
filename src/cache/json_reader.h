// Decoding one API object into its projection (objects.h): the checked JSON accessors and the
// pieces every projection's FromJson() shares, with the heap-size arithmetic of
// ApproximateBytes(). Only the cache's own sources include this.
//
// The contract of a decode:
//   1. A Reader is made for one object, named by its kind ("pod", "node"); it is never shared
//      between objects or threads.
//   2. Every accessor takes the parent object, a key and the Path of the parent. A missing or
//      null member is "absent" and yields the accessor's default (an empty text, nullopt, 0,
//      false, nullptr); it is no error.
//   3. The first member of the wrong type (or a malformed timestamp or quantity, an integer out
//      of range) is remembered as the error, "<kind>: <path>: <what>". Every later accessor
//      still answers with its default, so a decoder reads straight through and checks ok() once
//      at the end; only the first error is reported.
//   4. Guarded() runs a whole decode: an object that is not a JSON object, or an exception that
//      nlohmann_json still raises, becomes a kDecode error instead of escaping.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/objects.h"
#include "kube/error.h"

namespace tpujob::cache::decode {

// Where a field sits in the document. Built on the stack as decoding descends and rendered to
// text only when an error is reported, so successful decodes pay nothing for it.
struct Path {
  const Path* parent = nullptr;
  std::string_view key;
  int64_t index = -1;

  Path Child(std::string_view child) const { return Path{this, child, -1}; }
  Path Item(size_t i) const { return Path{this, {}, static_cast<int64_t>(i)}; }

  std::string ToString() const {
    std::string out = parent != nullptr ? parent->ToString() : std::string();
    if (index >= 0) {
      out += '[';
      out += std::to_string(index);
      out += ']';
    } else if (!key.empty()) {
      if (!out.empty()) out += '.';
      out += key;
    }
    return out;
  }
};

// Checked accessors over a JSON document. The first type error is remembered and every later
// accessor returns a default, so decoders read straight through and check ok() once at the end.
class Reader {
 public:
  explicit Reader(std::string_view kind) : kind_(kind) {}

  bool ok() const { return !error_.has_value(); }
  kube::Error error() const { return kube::Error::Decode(*error_); }

  void Fail(const Path& at, std::string_view what) {
    if (error_) return;
    std::string where = at.ToString();
    error_ = std::string(kind_) + ": " + (where.empty() ? std::string("<root>") : where) + ": " +
             std::string(what);
  }

  // The member `key` of `object` (which must be an object), or nullptr when absent or null.
  static const Json* Find(const Json& object, std::string_view key) {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) return nullptr;
    return &*it;
  }

  const Json* Object(const Json& parent, std::string_view key, const Path& at) {
    return Typed(parent, key, at, Json::value_t::object, "object");
  }
  const Json* Array(const Json& parent, std::string_view key, const Path& at) {
    return Typed(parent, key, at, Json::value_t::array, "array");
  }

  std::string_view String(const Json& parent, std::string_view key, const Path& at) {
    const Json* value = Find(parent, key);
    if (value == nullptr) return {};
    if (!value->is_string()) {
      Mismatch(at.Child(key), "string", *value);
      return {};
    }
    return value->get_ref<const std::string&>();
  }

  std::optional<int64_t> Int(const Json& parent, std::string_view key, const Path& at) {
    const Json* value = Find(parent, key);
    if (value == nullptr) return std::nullopt;
    if (value->is_number_integer()) {
      if (value->is_number_unsigned() &&
          value->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        Fail(at.Child(key), "integer out of range");
        return std::nullopt;
      }
      return value->get<int64_t>();
    }
    Mismatch(at.Child(key), "integer", *value);
    return std::nullopt;
  }

  int32_t Int32(const Json& parent, std::string_view key, const Path& at) {
    std::optional<int64_t> value = Int(parent, key, at);
    if (!value) return 0;
    if (*value < std::numeric_limits<int32_t>::min() ||
        *value > std::numeric_limits<int32_t>::max()) {
      Fail(at.Child(key), "integer out of range");
      return 0;
    }
    return static_cast<int32_t>(*value);
  }

  bool Bool(const Json& parent, std::string_view key, const Path& at) {
    const Json* value = Find(parent, key);
    if (value == nullptr) return false;
    if (!value->is_boolean()) {
      Mismatch(at.Child(key), "boolean", *value);
      return false;
    }
    return value->get<bool>();
  }

  std::optional<WallTime> Time(const Json& parent, std::string_view key, const Path& at) {
    std::string_view text = String(parent, key, at);
    if (text.empty()) return std::nullopt;
    std::optional<WallTime> time = ParseRfc3339(text);
    if (!time) Fail(at.Child(key), "malformed RFC 3339 timestamp \"" + std::string(text) + "\"");
    return time;
  }

  // A map of strings to strings (labels, annotations). `keep` filters keys.
  template <typename Keep>
  LabelMap StringMap(const Json& parent, std::string_view key, const Path& at, Keep keep) {
    LabelMap map;
    const Json* object = Object(parent, key, at);
    if (object == nullptr) return map;
    const Path here = at.Child(key);
    for (auto it = object->begin(); it != object->end(); ++it) {
      if (!it->is_string()) {
        Mismatch(here.Child(it.key()), "string", *it);
        return map;
      }
      if (keep(std::string_view(it.key()))) {
        map.Set(it.key(), it->get_ref<const std::string&>());
      }
    }
    return map;
  }

  // resources[kTpuResource] from a ResourceList object (values are quantity strings, or numbers
  // when written by hand). 0 when absent.
  int64_t TpuQuantity(const Json* resource_list, const Path& at) {
    if (resource_list == nullptr) return 0;
    const Json* value = Find(*resource_list, kTpuResource);
    if (value == nullptr) return 0;
    if (value->is_number_integer()) return value->get<int64_t>();
    if (value->is_string()) {
      std::optional<int64_t> quantity = ParseQuantity(value->get_ref<const std::string&>());
      if (!quantity) Fail(at.Child(kTpuResource), "malformed quantity");
      return quantity.value_or(0);
    }
    Mismatch(at.Child(kTpuResource), "quantity", *value);
    return 0;
  }

  void Mismatch(const Path& at, std::string_view expected, const Json& got) {
    Fail(at, "expected " + std::string(expected) + ", got " + got.type_name());
  }

 private:
  const Json* Typed(const Json& parent, std::string_view key, const Path& at, Json::value_t type,
                    std::string_view type_name) {
    const Json* value = Find(parent, key);
    if (value == nullptr) return nullptr;
    if (value->type() != type) {
      Mismatch(at.Child(key), type_name, *value);
      return nullptr;
    }
    return value;
  }

  std::string_view kind_;
  std::optional<std::string> error_;
};

// Keeps every key of a string map.
inline bool KeepAll(std::string_view) { return true; }

// The fields of metadata every projection reads.
struct Metadata {
  std::string_view ns;
  std::string_view name;
  std::string_view uid;
  std::string_view resource_version;
  const Json* object = nullptr;
};

// metadata's name (required), namespace, uid and resourceVersion; a decode error when
// metadata or its name is missing.
Metadata ReadMetadata(Reader& reader, const Json& object, const Path& root);

// Copies the identity every projection carries (namespace when it has one, name, uid,
// resourceVersion, labels) out of the metadata just read.
template <typename T>
void CopyIdentity(Reader& reader, const Metadata& meta, const Path& meta_at, T& out) {
  if constexpr (requires { out.ns; }) out.ns = InternedString::Intern(meta.ns);
  out.name = meta.name;
  out.uid = meta.uid;
  out.resource_version = meta.resource_version;
  out.labels = reader.StringMap(*meta.object, "labels", meta_at, KeepAll);
}

// The ownerReference marked controller: true (empty when there is none).
OwnerInfo ReadControllerOwner(Reader& reader, const Json& metadata, const Path& meta_at);

// Runs `decode` and turns any exception nlohmann_json might still raise into a decode error.
template <typename T, typename Decode>
kube::Result<T> Guarded(std::string_view kind, const Json& object, Decode decode) {
  if (!object.is_object()) {
    return std::unexpected(
        kube::Error::Decode(std::string(kind) + ": expected object, got " + object.type_name()));
  }
  try {
    return decode();
  } catch (const Json::exception& e) {
    return std::unexpected(kube::Error::Decode(std::string(kind) + ": " + e.what()));
  }
}

// Heap bytes a string owns (0 while it fits in the object), for ApproximateBytes().
size_t StringHeapBytes(const std::string& s);

// Heap bytes a vector's buffer occupies (its elements' own allocations not included).
template <typename T>
size_t VectorHeapBytes(const std::vector<T>& v) {
  constexpr size_t kAllocationOverhead = 16;
  return v.capacity() > 0 ? v.capacity() * sizeof(T) + kAllocationOverhead : 0;
}

}  // namespace tpujob::cache::decode
