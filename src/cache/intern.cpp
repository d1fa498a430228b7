#include "cache/intern.h"

#include <mutex>
#include <unordered_map>

namespace tpujob::cache {
namespace {

// The pool maps each text to the one live copy. Keys view the pooled strings themselves; an
// entry is erased before its string is freed, so no key ever dangles.
struct Pool {
  struct Entry {
    const std::string* raw;
    std::weak_ptr<const std::string> weak;
  };
  std::mutex mu;
  std::unordered_map<std::string_view, Entry> entries;
};

// Never destroyed: references released during static destruction still find it.
Pool& GetPool() {
  static Pool* pool = new Pool;
  return *pool;
}

// Runs when the last reference goes away. A concurrent Intern() of the same text may already
// have replaced the expired entry with a fresh copy; that entry is left alone.
struct Release {
  void operator()(const std::string* text) const {
    Pool& pool = GetPool();
    {
      std::lock_guard<std::mutex> lock(pool.mu);
      auto it = pool.entries.find(std::string_view(*text));
      if (it != pool.entries.end() && it->second.raw == text) pool.entries.erase(it);
    }
    delete text;
  }
};

}  // namespace

InternedString InternedString::Intern(std::string_view text) {
  if (text.empty()) return InternedString();
  Pool& pool = GetPool();
  std::lock_guard<std::mutex> lock(pool.mu);
  auto it = pool.entries.find(text);
  if (it != pool.entries.end()) {
    if (std::shared_ptr<const std::string> live = it->second.weak.lock()) {
      return InternedString(std::move(live));
    }
    // Expired but not yet released: replace it; its Release will see a different entry.
    pool.entries.erase(it);
  }
  auto* raw = new std::string(text);
  std::shared_ptr<const std::string> live(raw, Release{});
  pool.entries.emplace(std::string_view(*raw), Pool::Entry{raw, live});
  return InternedString(std::move(live));
}

const std::string& InternedString::str() const {
  static const std::string* const kEmpty = new std::string();
  return text_ ? *text_ : *kEmpty;
}

size_t InternedString::PoolSize() {
  Pool& pool = GetPool();
  std::lock_guard<std::mutex> lock(pool.mu);
  return pool.entries.size();
}

}  // namespace tpujob::cache
