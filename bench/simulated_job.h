// One TPUJob in memory for the curves of the lifecycle decision (policy::Decide): a job of
// `slices` slices x `hosts` hosts (tpu-v6e-slice 16x16 slices, 4 chips per host), brought to
// Running by Decide itself, the way the controller commits its plans (queued, admitted to pools
// pool-0.., its pods created on the nodes pool-S-node-H and all Running and ready).
//
// Contract:
//   1. Nothing here is timed or talks to a cluster; the objects are the operator's own cache and
//      policy types, as its informers would hold them.
//   2. A LifecycleInput from FaultInput() points into this object: keep it alive and unchanged
//      while the input is in use.
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <vector>

#include "cache/objects.h"
#include "policy/lifecycle.h"

namespace tpujob::bench {

class RunningJob {
 public:
  // recovery: spec.faultTolerance.recovery, "Slice" or "Job". The job allows 3 re-issues.
  RunningJob(int32_t slices, int32_t hosts, const std::string& recovery);

  // Whether the job got to Running; error() says where it stopped otherwise.
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

  int32_t workers() const { return static_cast<int32_t>(pods_.size()); }

  // The input Decide() sees once the node of worker `worker` turned TPUUnhealthy (the cache's
  // health of that node; every other node healthy and schedulable).
  policy::LifecycleInput FaultInput(int32_t worker) const;

 private:
  policy::LifecycleInput Input() const;
  // Writes the plan's status and creates its pods, bound to their slice's nodes, Running.
  void Apply(const policy::Plan& plan);

  int32_t hosts_;
  cache::TPUJobInfo job_;
  std::expected<policy::JobSpec, std::string> spec_;
  std::vector<cache::PodInfo> pods_;  // reserved up front, never moved
  std::vector<int32_t> indexes_;      // the worker index of each of pods_
  int32_t attempt_ = 0;               // the attempt the pods were created for
  std::string faulty_node_;
  WallTime now_;
  std::string error_;
};

}  // namespace tpujob::bench
