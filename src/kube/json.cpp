#include "kube/json.h"

namespace tpujob::kube {

std::string StringField(const Json& object, std::string_view key) {
  if (!object.is_object()) return {};
  const auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace tpujob::kube
