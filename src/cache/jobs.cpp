// TPUJobInfo and WorkloadInfo (objects.h): the job and its Kueue Workload, with spec and status
// kept as JSON.
#include "cache/json_reader.h"
#include "cache/objects.h"

namespace tpujob::cache {
namespace {

using decode::CopyIdentity;
using decode::Guarded;
using decode::KeepAll;
using decode::Metadata;
using decode::Path;
using decode::ReadControllerOwner;
using decode::Reader;
using decode::ReadMetadata;

constexpr std::string_view kLastAppliedAnnotation =
    "kubectl.kubernetes.io/last-applied-configuration";

}  // namespace

// --- TPUJobInfo -------------------------------------------------------------------------------

std::string TPUJobInfo::Key() const { return ObjectKey(ns, name); }

std::optional<std::string_view> TPUJobInfo::FieldValue(std::string_view field) const {
  if (field == "metadata.name") return name;
  if (field == "metadata.namespace") return ns.view();
  return std::nullopt;
}

bool TPUJobInfo::HasField(std::string_view field) {
  static const TPUJobInfo kProbe;
  return kProbe.FieldValue(field).has_value();
}

kube::Result<TPUJobInfo> TPUJobInfo::FromJson(const Json& object) {
  return Guarded<TPUJobInfo>("tpujob", object, [&]() -> kube::Result<TPUJobInfo> {
    Reader reader("tpujob");
    const Path root;
    TPUJobInfo job;
    Metadata meta = ReadMetadata(reader, object, root);
    if (!reader.ok()) return std::unexpected(reader.error());
    const Path meta_at = root.Child("metadata");
    CopyIdentity(reader, meta, meta_at, job);
    job.generation = reader.Int(*meta.object, "generation", meta_at).value_or(0);
    job.annotations =
        reader.StringMap(*meta.object, "annotations", meta_at,
                         [](std::string_view key) { return key != kLastAppliedAnnotation; });
    if (const Json* finalizers = reader.Array(*meta.object, "finalizers", meta_at)) {
      const Path finalizers_at = meta_at.Child("finalizers");
      for (size_t i = 0; i < finalizers->size(); ++i) {
        const Json& finalizer = (*finalizers)[i];
        if (!finalizer.is_string()) {
          reader.Mismatch(finalizers_at.Item(i), "string", finalizer);
          break;
        }
        job.finalizers.push_back(finalizer.get<std::string>());
      }
    }
    job.creation_timestamp = reader.Time(*meta.object, "creationTimestamp", meta_at);
    job.deletion_timestamp = reader.Time(*meta.object, "deletionTimestamp", meta_at);
    if (const Json* spec = reader.Object(object, "spec", root)) job.spec = *spec;
    if (const Json* status = reader.Object(object, "status", root)) job.status = *status;
    if (!reader.ok()) return std::unexpected(reader.error());
    return job;
  });
}

// --- WorkloadInfo ----------------------------------------------------------------------------

std::string WorkloadInfo::Key() const { return ObjectKey(ns, name); }

std::optional<std::string_view> WorkloadInfo::FieldValue(std::string_view field) const {
  if (field == "metadata.name") return name;
  if (field == "metadata.namespace") return ns.view();
  return std::nullopt;
}

bool WorkloadInfo::HasField(std::string_view field) {
  static const WorkloadInfo kProbe;
  return kProbe.FieldValue(field).has_value();
}

kube::Result<WorkloadInfo> WorkloadInfo::FromJson(const Json& object) {
  return Guarded<WorkloadInfo>("workload", object, [&]() -> kube::Result<WorkloadInfo> {
    Reader reader("workload");
    const Path root;
    WorkloadInfo workload;
    Metadata meta = ReadMetadata(reader, object, root);
    if (!reader.ok()) return std::unexpected(reader.error());
    const Path meta_at = root.Child("metadata");
    CopyIdentity(reader, meta, meta_at, workload);
    workload.generation = reader.Int(*meta.object, "generation", meta_at).value_or(0);
    workload.annotations = reader.StringMap(*meta.object, "annotations", meta_at, KeepAll);
    workload.deletion_timestamp = reader.Time(*meta.object, "deletionTimestamp", meta_at);
    workload.owner = ReadControllerOwner(reader, *meta.object, meta_at);
    if (const Json* owners = reader.Array(*meta.object, "ownerReferences", meta_at)) {
      workload.owner_references = owners->size();
    }
    if (const Json* spec = reader.Object(object, "spec", root)) workload.spec = *spec;
    if (const Json* status = reader.Object(object, "status", root)) workload.status = *status;
    if (!reader.ok()) return std::unexpected(reader.error());
    return workload;
  });
}

}  // namespace tpujob::cache
