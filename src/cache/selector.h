// Kubernetes label and field selectors, parsed and matched locally against cached objects.
//
// LabelSelector accepts the syntax of `kubectl get -l` / the labelSelector query parameter:
//   a=b  a==b  a!=b  a in (x,y)  a notin (x)  a  !a  a>3  a<5
// joined by commas (all must hold). Keys are validated as qualified names
// ([prefix/]name, name at most 63 characters) and values as label values, as the API server
// does. `a!=b` and `a notin (...)` also match objects without the label, as in Kubernetes.
//
// FieldSelector accepts `field=value`, `field==value` and `field!=value` joined by commas, where
// the supported fields depend on the object type (PodInfo::HasField and friends); checking the
// fields against a type is a separate step (ValidateFor) so one parsed selector can be reused.
// Values may escape `\,`, `\=` and `\\` as in apimachinery's fields package.
//
// Parse errors are returned as values (kube::Error of kind kDecode); matching never fails.
// Selectors are immutable after parsing and safe to share between threads.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/objects.h"
#include "kube/error.h"

namespace tpujob::cache {

enum class SelectorOp {
  kEquals,
  kNotEquals,
  kIn,
  kNotIn,
  kExists,
  kDoesNotExist,
  kGreaterThan,
  kLessThan
};

struct LabelRequirement {
  std::string key;
  SelectorOp op = SelectorOp::kEquals;
  std::vector<std::string> values;  // one for =, !=, >, <; a sorted set for in/notin; none else

  // `value` is the object's label value for `key`, std::nullopt when the label is absent.
  bool Matches(std::optional<std::string_view> value) const;
  std::string ToString() const;
};

class LabelSelector {
 public:
  // Matches everything.
  LabelSelector() = default;

  static kube::Result<LabelSelector> Parse(std::string_view text);
  // From a metav1.LabelSelector JSON object ({matchLabels: {...}, matchExpressions: [...]}).
  // A null or empty object matches everything.
  static kube::Result<LabelSelector> FromJson(const nlohmann::json& selector);
  // Equality on every pair of `labels`.
  static LabelSelector FromLabels(const LabelMap& labels);

  bool Matches(const LabelMap& labels) const;
  bool empty() const { return requirements_.empty(); }
  const std::vector<LabelRequirement>& requirements() const { return requirements_; }
  // Canonical text (requirements sorted by key), parseable again by Parse.
  std::string ToString() const;

 private:
  std::vector<LabelRequirement> requirements_;
};

struct FieldRequirement {
  std::string field;
  bool equals = true;  // false for !=
  std::string value;
};

class FieldSelector {
 public:
  // Matches everything.
  FieldSelector() = default;

  static kube::Result<FieldSelector> Parse(std::string_view text);

  // Fails naming the first field that T does not support (T::HasField).
  template <typename T>
  kube::Status ValidateFor() const {
    for (const FieldRequirement& r : requirements_) {
      if (!T::HasField(r.field)) return std::unexpected(UnsupportedField(r.field));
    }
    return {};
  }

  // An unsupported field never matches; call ValidateFor first to report it instead.
  template <typename T>
  bool Matches(const T& object) const {
    for (const FieldRequirement& r : requirements_) {
      std::optional<std::string_view> value = object.FieldValue(r.field);
      if (!value) return false;
      if ((*value == r.value) != r.equals) return false;
    }
    return true;
  }

  bool empty() const { return requirements_.empty(); }
  const std::vector<FieldRequirement>& requirements() const { return requirements_; }
  std::string ToString() const;

 private:
  static kube::Error UnsupportedField(std::string_view field);
  std::vector<FieldRequirement> requirements_;
};

}  // namespace tpujob::cache
