// In-place restart (spec.faultTolerance.restart InPlace; docs/architecture.md#in-place-restart):
// a retryable exit restarts the program in every pod of the attempt, behind a barrier, instead of
// recreating the failed worker's pod. The pods stay; what changes is the program generation
// (status.inPlace.generation; not the job's metadata.generation), told to each pod through the
// annotations of supervisor/protocol.h (Plan::annotate) and read back by ObserveProgram
// (policy/pod_observation.h).
//
//   1. A new attempt's pods are created at generation 1; each in-place restart of the gang adds
//      one and closes the barrier (status.inPlace.barrierSince).
//   2. While the barrier is closed every pod is told the new generation (a pod running an older
//      one stops it); the barrier opens (kBarrierAnnotation) once every pod of the attempt waits
//      there.
//   3. A barrier still closed barrierTimeoutSeconds after the restart, plus the programs' grace
//      period to stop (ProgramGraceSeconds), falls back to recreating every pod.
//   4. Anything that creates the pods again (suspend, a released admission, a re-issue) moves to
//      the next generation, so the program can tell this start from the last.
// The members that apply these rules are Decider's (policy/decider.h, in_place.cpp).
#pragma once

#include <cstdint>

#include "policy/job_spec.h"

namespace tpujob::policy {

// The grace period a stop order gives a program: the workers' terminationGracePeriodSeconds,
// which the template may set, else faultTolerance.maintenanceGracePeriodSeconds (BuildPod).
int64_t ProgramGraceSeconds(const JobSpec& spec);

}  // namespace tpujob::policy
