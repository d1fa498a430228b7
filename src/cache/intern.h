// InternedString: an immutable string shared by every cached object that holds the same text.
//
// Thousands of cached pods and nodes repeat the same label keys and values, namespaces, node
// names, container names and reasons. Interning stores each distinct text once, in a
// process-wide pool, and each holder keeps a 16-byte reference instead of its own copy. The
// pool forgets a text when its last holder goes away, so churn (pods created and deleted with
// unique label values) does not grow it without bound.
//
// Thread-safety: Intern() and the destruction of the last reference to a text take the pool's
// mutex; everything else (reading, copying, comparing) is lock-free. InternedString values are
// immutable and safe to share between threads.
//
// Example:
//   InternedString a = InternedString::Intern("tpujob.dev/job-name");
//   InternedString b = InternedString::Intern("tpujob.dev/job-name");
//   assert(a.SharesStorageWith(b) && a == "tpujob.dev/job-name");
#pragma once

#include <compare>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace tpujob::cache {

class InternedString {
 public:
  // The empty string; costs no pool entry.
  InternedString() = default;

  // Returns the pooled copy of `text`, adding it to the pool if it is new. The empty string is
  // never pooled.
  static InternedString Intern(std::string_view text);

  std::string_view view() const { return text_ ? std::string_view(*text_) : std::string_view(); }
  const std::string& str() const;
  operator std::string_view() const { return view(); }  // NOLINT(google-explicit-constructor)
  bool empty() const { return !text_ || text_->empty(); }
  size_t size() const { return text_ ? text_->size() : 0; }

  // Whether both refer to the same pooled text (true for equal interned texts).
  bool SharesStorageWith(const InternedString& other) const { return text_ == other.text_; }

  friend bool operator==(const InternedString& a, const InternedString& b) {
    return a.text_ == b.text_ || a.view() == b.view();
  }
  friend bool operator==(const InternedString& a, std::string_view b) { return a.view() == b; }
  friend std::strong_ordering operator<=>(const InternedString& a, const InternedString& b) {
    return a.view() <=> b.view();
  }
  friend std::strong_ordering operator<=>(const InternedString& a, std::string_view b) {
    return a.view() <=> b;
  }

  // Number of distinct texts currently pooled (for tests and memory metrics).
  static size_t PoolSize();

 private:
  explicit InternedString(std::shared_ptr<const std::string> text) : text_(std::move(text)) {}
  std::shared_ptr<const std::string> text_;
};

}  // namespace tpujob::cache
