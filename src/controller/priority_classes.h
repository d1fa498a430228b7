// PriorityClasses: the value and preemption policy of the PriorityClass a job names, read from
// the API server and kept for a while (classes change rarely; a job's priority is read on every
// queue plan). Shared by the operator's own queue and the Kueue Workloads it writes.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "base/clock.h"
#include "kube/client.h"
#include "policy/job_spec.h"

namespace tpujob::controller {

class PriorityClasses {
 public:
  static constexpr Duration kTtl = std::chrono::minutes(5);

  struct Priority {
    int32_t value = 0;
    bool may_preempt = true;  // the class's preemptionPolicy is not Never
  };

  PriorityClasses(kube::Client& client, Clock& clock) : client_(client), clock_(clock) {}

  // spec.priorityClassName's class, read at most once per kTtl; spec.priority when the job
  // names none, or (with a warning) when the class cannot be read. Thread-safe.
  Priority Of(const policy::JobSpec& spec);

 private:
  struct Cached {
    std::optional<int32_t> value;
    bool may_preempt = true;
    TimePoint read_at;
  };
  kube::Client& client_;
  Clock& clock_;
  std::mutex mu_;
  std::map<std::string, Cached> classes_;  // guarded by mu_
};

}  // namespace tpujob::controller
