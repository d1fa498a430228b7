// Elastic slices (spec.tpu.minSlices below spec.tpu.slices; docs/api.md#elastic-slices): a
// multislice job keeps training on the slices it holds while a slice waits for a node pool, and
// grows back when pools are free.
//
//   1. Shrink. A slice replaced by slice recovery (policy/slice_recovery.h) that finds no pool
//      within spec.faultTolerance.elastic.waitSeconds of queueing, with at least minSlices
//      slices left, gives up its place once the queue says no pool is free (WaitingForCapacity
//      or WaitingInLine: not before it answered, nor while it preempts for the slice): the attempt
//      is admitted on the slices that hold their pools, their ids kept contiguous (0..k-1) with
//      as few changes as can be: a kept slice below k keeps its id, the kept slices from k on
//      fill the ids the lost ones leave, in order. Each worker is bound to the node it ran on.
//      Every program restarts with MEGASCALE_NUM_SLICES = k: under restart InPlace in the pods
//      that stay, told their new variables by the supervisor (PodToAnnotate::program_env, as the
//      barrier opens). A slice that takes another id in place keeps its pods and their names:
//      their index labels follow the new id (PodToAnnotate::index), and status.tpu.sliceSlots
//      names each id's pods (JobSpec::SlotOf, through DegradedSpec). No retry beyond the
//      re-issue's own: the fault counted it. Below minSlices the slice waits as any other, queue
//      timeout included.
//   2. Degraded. status.tpu.activeSlices (and the Slices column, "3/4") say what it runs on,
//      condition Degraded=True (RunningOnFewerSlices) what it waits for; the spec the attempt
//      runs is the job's with ActiveSlices() = k (WithActiveSlices), for the pods' names,
//      environment and count, and the queue's reservations.
//   3. Grow. While degraded and running, the queue is asked for pools for the missing slices
//      with a re-issue's place (first in the job's class) and never by preemption. When it has
//      them, or some of them (LifecycleInput::grow_pools: as many as are free), per scaleUp
//      (Immediate; AfterCheckpoint: once a checkpoint line newer than the one known when the
//      pools were first free is reported; Never: not at all) the job moves to a new attempt on
//      that many more slices without using a retry: the running pods stop with the maintenance
//      grace period (time to checkpoint; in place, their programs stop and the pods stay), the
//      added slices (the highest ids; in place, their pods named after the slice numbers no pod
//      of the job carries) wait for their pools first in line (the kept ones keep
//      theirs, bound to their nodes), and a grow that then finds no pool within waitSeconds
//      shrinks again.
// A whole-job re-issue, a preemption or a suspension keeps the count: the job queues again for
// the slices it ran on, and grows from there.
// Refused: a job Kueue admits (Valid=False: its Workload is admitted as a whole).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "policy/job_spec.h"
#include "policy/job_status.h"

namespace tpujob::policy {

// The slices the job's current attempt runs on: status.tpu.activeSlices when the spec is elastic
// and it is within 1..spec.tpu.slices-1, else spec.tpu.slices.
int32_t ActiveSlicesOf(const JobSpec& spec, const JobStatus& status);

// status.tpu.sliceSlots when it names the slices the current attempt runs on (ActiveSlicesOf of
// them) of an elastic job; else empty: every slice's pods carry its own number.
std::vector<int32_t> SliceSlotsOf(const JobSpec& spec, const JobStatus& status);

// `spec` as an attempt on `active` slices runs it (JobSpec::ActiveSlices() == active).
JobSpec WithActiveSlices(const JobSpec& spec, int32_t active);

// The spec the current attempt of a job that runs on fewer slices than `spec` asks for runs
// (WithActiveSlices of ActiveSlicesOf), with the names its slices' pods carry
// (status.tpu.sliceSlots, JobSpec::SlotOf); nullopt when it runs on all of them under their own
// names: use `spec`.
std::optional<JobSpec> DegradedSpec(const JobSpec& spec, const JobStatus& status);

// "3/4": the Slices column.
std::string SlicesSummary(int32_t active, int32_t slices);

}  // namespace tpujob::policy
