#include "controller/priority_classes.h"

#include "base/logging.h"

namespace tpujob::controller {

PriorityClasses::Priority PriorityClasses::Of(const policy::JobSpec& spec) {
  if (spec.priority_class_name.empty()) return {spec.priority, true};
  const TimePoint now = clock_.Now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = classes_.find(spec.priority_class_name);
    if (it != classes_.end() && now - it->second.read_at < kTtl) {
      return {it->second.value.value_or(spec.priority), it->second.may_preempt};
    }
  }
  std::optional<int32_t> value;
  bool may_preempt = true;
  auto answer = client_.Get(kube::Resource::PriorityClasses(), "", spec.priority_class_name);
  if (answer && answer->contains("value") && (*answer)["value"].is_number_integer()) {
    value = (*answer)["value"].get<int32_t>();
    auto policy = answer->find("preemptionPolicy");
    may_preempt = policy == answer->end() || !policy->is_string() || *policy != "Never";
  } else {
    log::Warn("cannot read PriorityClass; using spec.priority",
              {{"priority_class", spec.priority_class_name},
               {"error", answer ? std::string("no integer value") : answer.error().ToString()}});
  }
  std::lock_guard<std::mutex> lock(mu_);
  classes_[spec.priority_class_name] = {value, may_preempt, now};
  return {value.value_or(spec.priority), may_preempt};
}

}  // namespace tpujob::controller
