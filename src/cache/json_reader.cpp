#include "cache/json_reader.h"

namespace tpujob::cache::decode {

Metadata ReadMetadata(Reader& reader, const Json& object, const Path& root) {
  Metadata meta;
  meta.object = reader.Object(object, "metadata", root);
  const Path at = root.Child("metadata");
  if (meta.object == nullptr) {
    reader.Fail(at, "missing");
    return meta;
  }
  meta.name = reader.String(*meta.object, "name", at);
  if (meta.name.empty() && reader.ok()) reader.Fail(at.Child("name"), "missing");
  meta.ns = reader.String(*meta.object, "namespace", at);
  meta.uid = reader.String(*meta.object, "uid", at);
  meta.resource_version = reader.String(*meta.object, "resourceVersion", at);
  return meta;
}

OwnerInfo ReadControllerOwner(Reader& reader, const Json& metadata, const Path& meta_at) {
  OwnerInfo out;
  const Json* owners = reader.Array(metadata, "ownerReferences", meta_at);
  if (owners == nullptr) return out;
  const Path owners_at = meta_at.Child("ownerReferences");
  for (size_t i = 0; i < owners->size(); ++i) {
    const Json& owner = (*owners)[i];
    if (!owner.is_object()) {
      reader.Mismatch(owners_at.Item(i), "object", owner);
      break;
    }
    if (!reader.Bool(owner, "controller", owners_at.Item(i))) continue;
    out.kind = InternedString::Intern(reader.String(owner, "kind", owners_at.Item(i)));
    out.name = InternedString::Intern(reader.String(owner, "name", owners_at.Item(i)));
    out.uid = InternedString::Intern(reader.String(owner, "uid", owners_at.Item(i)));
    break;
  }
  return out;
}

size_t StringHeapBytes(const std::string& s) {
  // Short strings live inside the object (small-string optimisation).
  constexpr size_t kInline = 15;
  constexpr size_t kAllocationOverhead = 16;
  return s.capacity() > kInline ? s.capacity() + 1 + kAllocationOverhead : 0;
}

}  // namespace tpujob::cache::decode
