// Compact typed projections of the API objects the operator caches: pods, nodes and TPUJobs.
//
// The cache never keeps whole JSON documents. Each projection holds only the fields the
// reconcilers and the fault/queue policies read, with repeated texts (label keys and values,
// namespaces, node and container names, reasons) interned so that thousands of pods share one
// copy (see intern.h). A typical pod projection costs a few hundred bytes, against tens of
// kilobytes for the decoded JSON document.
//
// FromJson() decodes one object as returned by the API server (GET, LIST item or watch event).
// It never throws: a missing name, a field of the wrong type, an unparsable timestamp or
// quantity yields an Error of kind kDecode naming the offending field path. Absent optional
// fields take their documented defaults.
//
// Projections are plain values; the cache hands them out as std::shared_ptr<const T> snapshots
// that are never modified once stored, so readers need no locks.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "cache/intern.h"
#include "kube/error.h"
#include "supervisor/protocol.h"

namespace tpujob::cache {

using Json = nlohmann::json;

// The extended resource TPU workers request and nodes advertise.
inline constexpr std::string_view kTpuResource = "google.com/tpu";
// Node annotations under this prefix are kept in NodeInfo::annotations; others are dropped.
inline constexpr std::string_view kOperatorAnnotationPrefix = "tpujob.dev/";
// The label every pod of a TPUJob carries, valued with the job's name.
inline constexpr std::string_view kJobNameLabel = "tpujob.dev/job-name";
// In-place restart (policy/in_place.h): the program generation a pod is to run (a higher one than
// it runs stops its program) and the generation whose barrier is open (its program may start).
// The supervisor reads both through a downward API file; the names are those of its protocol.
inline constexpr std::string_view kGenerationAnnotation = supervisor::kGenerationAnnotation;
inline constexpr std::string_view kBarrierAnnotation = supervisor::kBarrierAnnotation;
// The variables of the generation whose barrier opens, over the pod's own (an elastic job
// restarted in place on another slice count; controller::ProgramEnvAnnotation).
inline constexpr std::string_view kProgramEnvAnnotation = supervisor::kProgramEnvAnnotation;
// Set by the operator on every pod of a job whose program stalled: the node agent of the pod's
// node runs a hardware round at once for each new value (policy/stall_rules.h).
inline constexpr std::string_view kHardwareCheckAnnotation = "tpujob.dev/hardware-check";

// A small map of interned strings sorted by key, for labels and annotations. Lookups are
// binary searches; objects carry tens of entries at most.
class LabelMap {
 public:
  using Entry = std::pair<InternedString, InternedString>;

  LabelMap() = default;
  LabelMap(std::initializer_list<std::pair<std::string_view, std::string_view>> entries);

  // Value for `key`, or std::nullopt when absent.
  std::optional<std::string_view> Get(std::string_view key) const;
  // Value for `key`, or "" when absent.
  std::string_view Value(std::string_view key) const { return Get(key).value_or(""); }
  bool Has(std::string_view key) const { return Get(key).has_value(); }
  // std::map-style lookup: the entry for `key`, or end().
  std::vector<Entry>::const_iterator find(std::string_view key) const;
  bool contains(std::string_view key) const { return find(key) != end(); }

  // Inserts or replaces.
  void Set(std::string_view key, std::string_view value);
  // Removes `key` if present.
  void Erase(std::string_view key);

  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  std::vector<Entry>::const_iterator begin() const { return entries_.begin(); }
  std::vector<Entry>::const_iterator end() const { return entries_.end(); }

  friend bool operator==(const LabelMap& a, const LabelMap& b) = default;

 private:
  friend size_t ApproximateHeapBytes(const LabelMap& map);
  std::vector<Entry> entries_;
};

enum class ConditionStatus { kUnknown, kTrue, kFalse };
std::string_view ToString(ConditionStatus status);
// "True" and "False" map to themselves; anything else is kUnknown.
ConditionStatus ParseConditionStatus(std::string_view text);

// --- Pods -------------------------------------------------------------------------------------

enum class PodPhase { kPending, kRunning, kSucceeded, kFailed, kUnknown };
std::string_view ToString(PodPhase phase);
// An absent or empty phase is kPending (a pod just created); unrecognised text is kUnknown.
PodPhase ParsePodPhase(std::string_view text);

enum class ContainerState { kNone, kWaiting, kRunning, kTerminated };  // kNone: no status yet
std::string_view ToString(ContainerState state);

struct ContainerInfo {
  InternedString name;
  int32_t restart_count = 0;
  bool ready = false;
  ContainerState state = ContainerState::kNone;
  // For kTerminated: the exit code, reason ("Error", "Completed", "OOMKilled") and message (the
  // termination message: the pre-flight report for the pre-flight init container). For
  // kWaiting: reason ("CrashLoopBackOff", "ImagePullBackOff") and message.
  int32_t exit_code = 0;
  InternedString reason;
  InternedString message;
  // For kTerminated: state.terminated.finishedAt (whole seconds, the kubelet's clock).
  std::optional<WallTime> finished_at;
  // lastState.terminated, present after the kubelet restarted the container in place.
  std::optional<int32_t> last_exit_code;
  InternedString last_reason;
  InternedString last_message;
  std::optional<WallTime> last_finished_at;
  // resources.requests[google.com/tpu] (limits when no request is given); 0 when absent.
  int64_t tpu_request = 0;
};

// The ownerReference marked controller: true.
struct OwnerInfo {
  InternedString kind;
  InternedString name;
  InternedString uid;
  bool empty() const { return uid.empty() && name.empty(); }
  friend bool operator==(const OwnerInfo&, const OwnerInfo&) = default;
};

struct PodInfo {
  InternedString ns;
  std::string name;
  std::string uid;
  std::string resource_version;
  LabelMap labels;
  OwnerInfo owner;
  InternedString node_name;  // spec.nodeName; empty until scheduled
  InternedString reason;     // status.reason, e.g. "Evicted", "NodeLost"
  InternedString message;    // status.message
  std::string pod_ip;
  PodPhase phase = PodPhase::kPending;
  bool ready = false;          // condition Ready is True
  bool unschedulable = false;  // condition PodScheduled is False with reason Unschedulable
  std::optional<WallTime> deletion_timestamp;
  std::vector<ContainerInfo> init_containers;  // spec order, merged with their statuses
  std::vector<ContainerInfo> containers;
  // Annotations kGenerationAnnotation and kBarrierAnnotation; 0 when absent or not a number.
  int32_t ordered_generation = 0;
  int32_t barrier_generation = 0;
  // Annotation kHardwareCheckAnnotation; empty when absent.
  InternedString hardware_check;

  // "namespace/name".
  std::string Key() const;
  bool deleting() const { return deletion_timestamp.has_value(); }
  // Succeeded or Failed: the pod holds no resources any more.
  bool terminated() const { return phase == PodPhase::kSucceeded || phase == PodPhase::kFailed; }
  // The pod's effective google.com/tpu request as the scheduler counts it:
  // max(sum over containers, max over init containers).
  int64_t TpuRequest() const;
  // The container or init container named `name`, or nullptr.
  const ContainerInfo* FindContainer(std::string_view name) const;
  const ContainerInfo* FindInitContainer(std::string_view name) const;

  // Field-selector support: metadata.name, metadata.namespace, spec.nodeName, status.phase,
  // status.podIP. std::nullopt for any other field.
  std::optional<std::string_view> FieldValue(std::string_view field) const;
  static bool HasField(std::string_view field);

  static kube::Result<PodInfo> FromJson(const Json& pod);
};

// --- Nodes ------------------------------------------------------------------------------------

enum class TaintEffect { kNoSchedule, kPreferNoSchedule, kNoExecute, kUnknown };
std::string_view ToString(TaintEffect effect);

struct Taint {
  InternedString key;
  InternedString value;
  TaintEffect effect = TaintEffect::kNoSchedule;
  friend bool operator==(const Taint&, const Taint&) = default;
};

struct NodeCondition {
  InternedString type;  // "Ready", "MemoryPressure", or a node-problem-detector condition
  ConditionStatus status = ConditionStatus::kUnknown;
  InternedString reason;
  InternedString message;
  std::optional<WallTime> last_transition_time;
};

struct NodeInfo {
  std::string name;
  std::string uid;
  std::string resource_version;
  LabelMap labels;
  LabelMap annotations;  // only keys starting with kOperatorAnnotationPrefix
  bool unschedulable = false;
  std::vector<Taint> taints;
  std::vector<NodeCondition> conditions;
  int64_t tpu_allocatable = 0;                        // status.allocatable[google.com/tpu]
  ConditionStatus ready = ConditionStatus::kUnknown;  // the Ready condition; kUnknown if absent
  // The digest of the watch event this was decoded from (kube::UndecodedEvent::digest); 0 when
  // it came from anything else. A later event of the node with the same digest differs from
  // that one only in its resourceVersion and VolatileFields(), none of which FromJson() reads
  // apart from the resourceVersion, so the reflector applies it without decoding it.
  uint64_t source_digest = 0;

  // What changes on every heartbeat (a kubelet's or KWOK's status update) and nothing here
  // reads: the conditions' lastHeartbeatTime and the managedFields entries' times.
  static const std::vector<std::string>& VolatileFields();

  // The node's name (nodes are cluster-scoped).
  const std::string& Key() const { return name; }
  const NodeCondition* FindCondition(std::string_view type) const;
  // The first taint with `key`, or nullptr.
  const Taint* FindTaint(std::string_view key) const;

  // Field-selector support: metadata.name, spec.unschedulable ("true"/"false").
  std::optional<std::string_view> FieldValue(std::string_view field) const;
  static bool HasField(std::string_view field);

  static kube::Result<NodeInfo> FromJson(const Json& node);
};

// --- TPUJobs ----------------------------------------------------------------------------------

// TPUJobs are few and small, so spec and status are kept as JSON for the reconciler to read.
struct TPUJobInfo {
  InternedString ns;
  std::string name;
  std::string uid;
  std::string resource_version;
  int64_t generation = 0;
  LabelMap labels;
  // All annotations except kubectl's last-applied-configuration (a copy of the spec).
  LabelMap annotations;
  std::vector<std::string> finalizers;
  std::optional<WallTime> creation_timestamp;
  std::optional<WallTime> deletion_timestamp;
  Json spec = Json::object();
  Json status = Json::object();

  std::string Key() const;
  bool deleting() const { return deletion_timestamp.has_value(); }

  // Field-selector support: metadata.name, metadata.namespace.
  std::optional<std::string_view> FieldValue(std::string_view field) const;
  static bool HasField(std::string_view field);

  static kube::Result<TPUJobInfo> FromJson(const Json& job);
};

// A Kueue Workload (kueue.x-k8s.io/v1beta2), as the operator creates one for a TPUJob
// labelled kueue.x-k8s.io/queue-name (policy/kueue.h reads spec and status).
struct WorkloadInfo {
  InternedString ns;
  std::string name;
  std::string uid;
  std::string resource_version;
  int64_t generation = 0;
  LabelMap labels;
  LabelMap annotations;
  OwnerInfo owner;              // the controlling owner
  size_t owner_references = 0;  // how many metadata.ownerReferences it has
  std::optional<WallTime> deletion_timestamp;
  Json spec = Json::object();
  Json status = Json::object();

  std::string Key() const;
  bool deleting() const { return deletion_timestamp.has_value(); }

  // Field-selector support: metadata.name, metadata.namespace.
  std::optional<std::string_view> FieldValue(std::string_view field) const;
  static bool HasField(std::string_view field);

  static kube::Result<WorkloadInfo> FromJson(const Json& workload);
};

// --- Helpers ----------------------------------------------------------------------------------

// "namespace/name", or "name" when `ns` is empty (cluster-scoped objects).
std::string ObjectKey(std::string_view ns, std::string_view name);

// Parses an RFC 3339 timestamp as written by the API server ("2024-05-01T10:00:00Z",
// optionally with fractional seconds and a numeric offset). std::nullopt if malformed.
std::optional<WallTime> ParseRfc3339(std::string_view text);
// Formats as "2024-05-01T10:00:00Z" (UTC, whole seconds), the form metav1.Time uses.
std::string FormatRfc3339(WallTime time);
// Formats as "2024-05-01T10:00:00.250Z" (UTC, milliseconds).
std::string FormatRfc3339Millis(WallTime time);

// Parses a resource quantity ("4", "8k", "2Ki", "1e3", "500m") to an integer, rounding a
// fractional value up as Quantity.Value() does. std::nullopt if malformed or out of range.
std::optional<int64_t> ParseQuantity(std::string_view text);

// Approximate bytes the projection occupies, its own heap allocations included. Interned
// strings count only the reference each holder keeps (their text is shared); a cache's total
// is therefore a slight underestimate, by the size of the shared pool.
size_t ApproximateBytes(const PodInfo& pod);
size_t ApproximateBytes(const NodeInfo& node);
size_t ApproximateHeapBytes(const LabelMap& map);

}  // namespace tpujob::cache
