// Re-issue, of the whole job or of one slice (spec.faultTolerance.recovery Slice, the default;
// docs/api.md#slice-recovery).
//
//   1. A fault that ends the attempt re-issues it: one retry used (none for a disruption, as the
//      fault table says), or the job fails (RetriesExhausted) when none is left.
//   2. A multislice job whose fault is confined to one slice (ConfinedSlice: every pod it names
//      is a worker of that slice: a faulty, lost or maintained node, a worker out of restarts,
//      failed pre-flight checks) is re-issued as one attempt like any other (the fault record,
//      action ReplaceSlice, names the slice), but only that slice goes back to the queue: the
//      attempt waits (Queued, first in line, under the re-issue's queue timeout) for a node pool
//      for it, none of the pools the other slices hold, which stay in status.nodePools and
//      reserved for the job.
//   3. Once a pool is found, every pod of the new attempt is created at once: the replaced
//      slice's in its new pool, the kept slices' bound to the nodes they ran on
//      (status.sliceRecovery.nodes; by scheduler in their pool when that node is no longer
//      healthy and schedulable). Pod names, slice ids and MEGASCALE_* are those of the previous
//      attempt. In place (policy/in_place.h), the kept slices' pods stay and move to the new
//      attempt once the replaced slice's old pods are gone.
//   4. A fault touching several slices or a master, a job Kueue admits
//      (LifecycleInput::replace_slices false), and recovery Job re-issue the whole job.
// The verdict is the slice ConfinedSlice returns; the members that apply it are Decider's
// (policy/decider.h, slice_recovery.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "policy/job_spec.h"
#include "policy/plan.h"

namespace tpujob::policy {

// The slice a fault is confined to, when slice recovery replaces that slice alone: every pod it
// touches is a worker of that one slice of a multislice job that holds a pool per slice
// (`node_pools`: the size of status.nodePools). std::nullopt: the whole job is re-issued.
std::optional<int32_t> ConfinedSlice(const JobSpec& spec, bool replace_slices, size_t node_pools,
                                     const std::vector<const ObservedPod*>& touched);

// "slice 2", "slices 0, 1 and 3".
std::string SliceList(const std::vector<int32_t>& slices);

}  // namespace tpujob::policy
