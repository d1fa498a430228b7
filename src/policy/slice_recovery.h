// Re-issue, of the whole job or of one slice (spec.faultTolerance.recovery Slice, the default;
// docs/api.md#slice-recovery).
//
//   1. A fault that ends the attempt re-issues it: one retry used (none for a disruption, as the
//      fault table says), or the job fails (RetriesExhausted) when none is left.
//   2. A multislice job whose fault is confined to k slices, at least one slice left
//   (ConfinedSlices:
//      every pod it names is a worker of those slices: a faulty, lost or maintained node, a worker
//      out of restarts, failed pre-flight checks) is re-issued as one attempt like any other (the
//      fault records, action ReplaceSlice, name the slices), but only those slices go back to the
//      queue: the attempt waits (Queued, first in line, under the re-issue's queue timeout) for a
//      node pool for each, none of the pools the other slices hold, which stay in
//      status.nodePools and reserved for the job.
//   3. Once a pool is found, every pod of the new attempt is created at once: the replaced
//      slice's in its new pool, the kept slices' bound to the nodes they ran on
//      (status.sliceRecovery.nodes; by scheduler in their pool when that node is no longer
//      healthy and schedulable). Pod names, slice ids and MEGASCALE_* are those of the previous
//      attempt. In place (policy/in_place.h), the kept slices' pods stay and move to the new
//      attempt once the replaced slice's old pods are gone.
//   4. A fault touching every slice or a master, a job Kueue admits
//      (LifecycleInput::replace_slices false), and recovery Job re-issue the whole job.
//   5. A node of the previous attempt found unhealthy or lost while the re-issue is carried out
//      (its pods going, the attempt queued, its kept nodes waiting) is a fault like any other
//      (FaultsInFlight): recorded (once), cordoned, one retry used; its slice joins the replaced
//      ones, or the whole job is re-issued when no slice would be kept or a master is touched.
//   6. Nothing places two workers on one host: a worker the scheduler places in a pool where other
//      workers are bound by the same plan keeps off their nodes (PodToCreate::avoid).
// The verdict is the slices ConfinedSlices returns; the members that apply it are Decider's
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

// The slices a fault is confined to, ascending, when slice recovery replaces those slices alone:
// every pod it touches is a worker of one of them, of a multislice job that holds a pool per
// slice (`node_pools`: the size of status.nodePools), and at least one slice is left to keep.
// Empty: the whole job is re-issued.
std::vector<int32_t> ConfinedSlices(const JobSpec& spec, bool replace_slices, size_t node_pools,
                                    const std::vector<const ObservedPod*>& touched);

// "slice 2", "slices 0, 1 and 3".
std::string SliceList(const std::vector<int32_t>& slices);

}  // namespace tpujob::policy
