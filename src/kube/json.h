// The JSON type API objects are read and written as, and the lenient read of one string member
// that code outside the cache's checked decoders (cache/json_reader.h) uses. Never throws.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace tpujob::kube {

using Json = nlohmann::json;

// object[key] when `object` is an object and that member is a string, else "" (Json::value()
// would throw on a member of another type, operator[] on an object that is none).
std::string StringField(const Json& object, std::string_view key);

}  // namespace tpujob::kube
