// The queue (docs/architecture.md) as pure functions: the free TPU capacity the node and pod
// caches show, the order of waiting jobs, and which of them to admit now. No I/O, no clock.
//
// Capacity. A node offers chips to a job when it is schedulable (not spec.unschedulable),
// healthy (EvaluateNode: Ready, no hardware condition, no maintenance notice), and labelled with
// the job's accelerator (cloud.google.com/gke-tpu-accelerator) and topology
// (cloud.google.com/gke-tpu-topology). Its free chips are status.allocatable[google.com/tpu]
// minus the google.com/tpu requests of the non-terminated pods bound to it, minus the chips
// reserved for admitted workers whose pods are not bound yet (Reservation).
//
// Gang admission. An attempt is admitted only when all its workers fit at once: a worker needs
// chipsPerWorker free chips on one node (a node with 8 free chips holds two 4-chip workers). A
// multi-host attempt (more than one worker) goes to one node pool
// (cloud.google.com/gke-nodepool), which its pods are then pinned to by node selector: the
// workers of one slice talk over the slice's interconnect. Among pools that fit, the one left
// with the fewest free worker slots wins (best fit keeps big holes for big gangs); ties go to
// the pool name. A re-issued attempt (its last one ended in a fault) first takes pools in which
// no node is cordoned or unhealthy, then best fit: a pool that just lost a host may have more
// faults to come.
//
// Multislice. An attempt of N slices (spec.tpu.slices > 1) is admitted only when N different
// pools each hold a whole slice (all its workers), at once: one slice never spans two pools and
// two slices never share one, since slices are joined over the data-center network and each
// slice's workers over its own interconnect. Every slice is pinned to its pool, also a slice of
// a single host. The N pools are chosen by the same best-fit rule (fewest free slots left, then
// name) and given to the slices in name order. Nodes without a pool label cannot be pinned
// apart, so they hold no slice of a multislice job.
//
// Slice recovery. An attempt that replaces some slices of a multislice job (GangRequest::
// slice_ids) asks for a pool for each of those slices only, by the rules above, never one its
// other slices hold; those are reserved for it meanwhile (a Reservation per kept slice).
//
// Order. Re-issued attempts first (their job was already running and lost its place to a
// fault), then priority, higher first, then the time queued, earlier first, then the job's key.
// An elastic job running on fewer slices asks for its missing slices' pools in a re-issue's
// place (GangRequest::grow), but only takes what is free (as many of them as are): it holds up
// no one when none is.
//
// Head of line. Jobs are grouped into classes by (accelerator, topology): jobs of different
// classes never compete for nodes, so one class's wait never holds up another. Within a class
// the order is strict: when the first waiting job does not fit, no later job of that class is
// admitted, even one that would fit. A small job behind a big one waits; in exchange a big gang
// is never starved by a stream of small jobs that each take the chips it is waiting for, and
// the order users see is the order jobs start. The cost is capacity left idle while the head
// waits for the rest of its gang's capacity to free up; queueTimeoutSeconds bounds that wait
// for re-issued jobs (default 30 minutes).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "cache/objects.h"
#include "policy/node_health.h"

namespace tpujob::policy {

inline constexpr std::string_view kAcceleratorLabel = "cloud.google.com/gke-tpu-accelerator";
inline constexpr std::string_view kTopologyLabel = "cloud.google.com/gke-tpu-topology";
// The node pool label is cache::kNodePoolLabel ("cloud.google.com/gke-nodepool").

// What one attempt of a queued job asks for, and where it stands in the order.
struct GangRequest {
  std::string job;  // "namespace/name"
  std::string accelerator;
  std::string topology;
  int32_t workers = 0;  // of one slice
  int64_t chips_per_worker = 0;
  int32_t slices = 1;
  bool reissued = false;
  int32_t priority = 0;  // resolved from spec.priority or the PriorityClass
  WallTime queued_at{};
  // Slice recovery (policy/lifecycle.h): the attempt asks only for pools for these slices of a
  // multislice job (`slices` of them), each in a labelled pool of its own as any multislice
  // attempt, and none of `held_pools`, which its other slices keep (reserved for it meanwhile).
  std::vector<int32_t> slice_ids;
  std::vector<std::string> held_pools;
  // Elastic slices: the slices asked for are added to a running job that shrank
  // (policy/elastic.h). Planned in its place (a re-issue's: first); admitted with as many pools
  // as are free (at least one; Admission::pools may then be fewer than `slice_ids`, for the
  // first of them); when none is, it holds up no one behind it; it never preempts.
  bool grow = false;
};

// "needs 4 hosts of tpu-v5-lite-podslice 2x4 (4 chips each) in one node pool"; "needs 3 node
// pools with 4 hosts each of tpu-v5-lite-podslice 2x4 (4 chips each), one per slice".
std::string DescribeNeeds(const GangRequest& job);

// Whether `a` goes before `b` (the order above). A strict weak order; equal only for equal keys.
bool QueueBefore(const GangRequest& a, const GangRequest& b);

// Chips held for an admitted attempt whose worker pods are not all bound to nodes yet: taken out
// of `pool` (any pool when empty) before anything else is placed.
struct Reservation {
  std::string job;
  std::string accelerator;
  std::string topology;
  std::string pool;
  int32_t workers = 0;  // workers still to be bound
  int64_t chips_per_worker = 0;
  int32_t slice = 0;  // of a multislice job: one reservation per slice, each in its pool
};

// One node's share of the capacity.
struct NodeCapacity {
  std::string name;
  std::string pool;  // "" when the node has no pool label
  int64_t free_chips = 0;
};

// Free capacity by class (accelerator, topology) and pool; nodes in name order.
struct Capacity {
  using Class = std::pair<std::string, std::string>;  // accelerator, topology
  std::map<Class, std::map<std::string, std::vector<NodeCapacity>>> pools;
  // Schedulable, healthy nodes of a class left out because their announced maintenance starts
  // within NodeHealthConfig::maintenance_avoid_window, in name order; named in the messages.
  std::map<Class, std::vector<std::string>> avoided;
  // Ready, healthy nodes of a class left out while they carry a NoSchedule taint Kubernetes puts
  // on a node unfit for new pods (LifecycleTaint), in name order; named in the messages. The
  // node controller puts node.kubernetes.io/not-ready on every new node and lifts it once it saw
  // the node Ready, seconds later or, with thousands of new nodes, minutes later.
  std::map<Class, std::vector<std::string>> tainted;
  // Pools of a class with a node that is cordoned (spec.unschedulable) or unhealthy: a
  // re-issued attempt takes other pools first.
  std::map<Class, std::set<std::string>> faulty_pools;
  Duration avoid_window{};
  // When the earliest node enters its avoid window: the capacity changes then without any
  // event, so the caller builds it again.
  std::optional<Duration> changes_in;
};

// The first taint of `node` that Kubernetes itself sets on a node unfit for new pods and that
// the scheduler honours for the pods the operator makes: a node.kubernetes.io/ key (not-ready,
// unreachable, memory-, disk- or pid-pressure, network-unavailable, ...) with effect NoSchedule.
// nullptr when there is none. The NoExecute ones are tolerated for 300 s by every pod.
const cache::Taint* LifecycleTaint(const cache::NodeInfo& node);

// Builds the capacity from the caches' snapshots. `pods` may include pods of any job and pods
// not bound yet (those are ignored); terminated pods are ignored; a pod that is being deleted
// still holds its chips until it is gone. Reservations are then taken out. Nodes that
// AvoidForMaintenance at `now` offer nothing (Capacity::avoided), nor do nodes with a
// LifecycleTaint (Capacity::tainted): the scheduler would leave an admitted job's pods there
// unschedulable, and the admission would be released after kUnschedulableRelease. A node name
// listed twice counts once: in the first pool by name, and within one pool as first listed.
Capacity BuildCapacity(const std::vector<const cache::NodeInfo*>& nodes,
                       const std::vector<const cache::PodInfo*>& pods,
                       const std::vector<Reservation>& reservations, const NodeHealthConfig& health,
                       WallTime now);

// Takes the reservations out of `capacity`, in a fixed order whatever order they come in: each
// takes its workers' slots from the nodes of its class (of its pool when set) in name order, one
// slot at a time. One that no longer fits takes the whole slots there are; its other workers are
// left out. (BuildCapacity ends with this.)
void Reserve(Capacity& capacity, const std::vector<Reservation>& reservations);

// The queue's answer for one waiting job.
struct Admission {
  bool admit = false;
  // Admitted: per slice, the pool to pin its workers to ("" = a single-host, single-slice job:
  // any pool).
  std::vector<std::string> pools;
  std::string reason;    // not admitted: "WaitingForCapacity" or "WaitingInLine"
  std::string message;   // not admitted, with numbers, e.g. "needs 4 hosts of
                         // tpu-v5-lite-podslice 2x4 (4 chips each) in one node pool; the best
                         // pool, pool-a, has 3 free"; or "waiting behind team/big (position 1),
                         // which needs ..."
  int32_t position = 0;  // 1-based place in the whole queue order
  // Admitted: per slice, the pool its workers were counted in, also for a single-host job
  // (which is not pinned); for planning on top of this plan (preemption).
  std::vector<std::string> placed_pools;
};

// Decides every waiting job at once, in queue order, placing admitted gangs as it goes.
// `queued` may be in any order. The result has one entry per job of `queued`.
std::map<std::string, Admission> PlanAdmissions(const Capacity& capacity,
                                                std::vector<GangRequest> queued);

}  // namespace tpujob::policy
