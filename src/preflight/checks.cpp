#include "preflight/checks.h"

#include <fmt/format.h>
#include <netdb.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "base/strings.h"

namespace tpujob::preflight {
namespace {

namespace fs = std::filesystem;

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// Whole seconds print without decimals ("120s"); sub-second deadlines only occur in tests.
std::string FormatSeconds(Duration d) {
  return fmt::format("{}s", std::chrono::duration<double>(d).count());
}

// Log lines stay readable with thousands of peers: the first few names and a count.
std::string AbbreviatedList(const std::vector<std::string>& names, size_t keep) {
  if (names.size() <= keep) return Join(names, ",");
  std::vector<std::string> head(names.begin(), names.begin() + static_cast<ptrdiff_t>(keep));
  return fmt::format("{},+{} more", Join(head, ","), names.size() - keep);
}

bool HasDigitSuffix(std::string_view name, std::string_view prefix) {
  if (!name.starts_with(prefix) || name.size() == prefix.size()) return false;
  return std::all_of(name.begin() + static_cast<ptrdiff_t>(prefix.size()), name.end(),
                     [](unsigned char c) { return std::isdigit(c) != 0; });
}

std::string FormatLimit(const std::optional<uint64_t>& value) {
  return value ? std::to_string(*value) : "unlimited";
}

}  // namespace

std::string_view ToString(Fault fault) {
  switch (fault) {
    case Fault::kNone:
      return "";
    case Fault::kNode:
      return "node";
    case Fault::kConfig:
      return "config";
  }
  return "";
}

std::string FormatGb(uint64_t bytes) {
  std::string out = fmt::format("{:.2f}", static_cast<double>(bytes) / 1e9);
  while (out.back() == '0') out.pop_back();
  if (out.back() == '.') out.pop_back();
  return out;
}

// --- dns -------------------------------------------------------------------------------------

Resolver SystemResolver() {
  return [](const std::string& name) -> std::expected<void, std::string> {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* result = nullptr;
    const int rc = getaddrinfo(name.c_str(), nullptr, &hints, &result);
    if (rc == 0) {
      freeaddrinfo(result);
      return {};
    }
    if (rc == EAI_SYSTEM) return std::unexpected(std::string(std::strerror(errno)));
    return std::unexpected(std::string(gai_strerror(rc)));
  };
}

std::vector<std::string> ReadHostsFile(const std::string& path) {
  std::vector<std::string> names;
  if (path.empty()) return names;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    std::istringstream fields(line);
    std::string address;
    if (!(fields >> address)) continue;
    std::string name;
    while (fields >> name) names.push_back(Lower(name));
  }
  return names;
}

ItemResult CheckDns(const DnsOptions& options, const Resolver& resolve, Clock& clock) {
  ItemResult result;
  result.item = kItemDns;

  std::vector<std::string> pending;
  std::set<std::string> seen;
  for (const std::string& name : options.hostnames) {
    if (seen.insert(Lower(name)).second) pending.push_back(name);
  }
  const size_t total = pending.size();
  result.threshold = fmt::format("all {} within {}", total, FormatSeconds(options.timeout));

  const TimePoint deadline = clock.Now() + options.timeout;
  std::map<std::string, std::string> last_error;
  int rounds = 0;
  // Nothing ever notifies this pair: the wait between rounds is a plain timed wait on the
  // injected clock, which lets tests move time instead of sleeping.
  std::mutex mu;
  std::condition_variable never_notified;
  while (true) {
    ++rounds;
    const std::vector<std::string> hosts = ReadHostsFile(options.hosts_file);
    const std::set<std::string> from_file(hosts.begin(), hosts.end());
    std::erase_if(pending, [&](const std::string& name) {
      if (from_file.contains(Lower(name))) return true;
      auto resolved = resolve(name);
      if (resolved) return true;
      last_error[name] = resolved.error();
      return false;
    });
    if (pending.empty() || clock.Now() >= deadline) break;
    const TimePoint next = std::min(clock.Now() + options.poll_interval, deadline);
    std::unique_lock<std::mutex> lock(mu);
    while (clock.Now() < next) clock.WaitUntil(never_notified, lock, next);
  }

  const size_t resolved = total - pending.size();
  result.passed = pending.empty();
  result.value = fmt::format("{}/{} resolved", resolved, total);
  result.log_fields = {
      {"resolved", std::to_string(resolved)},
      {"total", std::to_string(total)},
      {"timeout_s", fmt::format("{}", std::chrono::duration<double>(options.timeout).count())},
      {"rounds", std::to_string(rounds)}};
  if (total == 0) {
    result.message = "no peer hostnames given (TPU_WORKER_HOSTNAMES is empty)";
    return result;
  }
  if (result.passed) return result;

  result.fault = Fault::kConfig;
  result.log_fields.emplace_back("unresolved", AbbreviatedList(pending, 10));
  // Grouped by reason: with thousands of peers the reason is nearly always the same.
  std::map<std::string, std::vector<std::string>> by_error;
  for (const std::string& name : pending) by_error[last_error[name]].push_back(name);
  std::vector<std::string> groups;
  for (const auto& [error, names] : by_error) {
    groups.push_back(
        fmt::format("{} ({})", Join(names, ", "), error.empty() ? "not in the hosts file" : error));
  }
  result.message = fmt::format("{} of {} peer names did not resolve within {}: {}", pending.size(),
                               total, FormatSeconds(options.timeout), Join(groups, "; "));
  return result;
}

// --- disk-size -------------------------------------------------------------------------------

FilesystemProbe SystemFilesystemProbe() {
  return [](const std::string& path) -> std::expected<FilesystemSize, FilesystemError> {
    struct statvfs stats {};
    if (statvfs(path.c_str(), &stats) != 0) {
      const int error_number = errno;
      return std::unexpected(FilesystemError{error_number, std::strerror(error_number)});
    }
    return FilesystemSize{
        .total_bytes = static_cast<uint64_t>(stats.f_blocks) * stats.f_frsize,
        .available_bytes = static_cast<uint64_t>(stats.f_bavail) * stats.f_frsize};
  };
}

ItemResult CheckDiskSize(std::string_view item, const std::string& path, double min_gb, Fault fault,
                         const FilesystemProbe& probe) {
  ItemResult result;
  result.item = item;
  result.threshold = fmt::format("> {} GB", min_gb);
  result.log_fields = {{"path", path}};

  auto size = probe(path);
  if (!size) {
    const bool missing =
        size.error().error_number == ENOENT || size.error().error_number == ENOTDIR;
    result.fault = missing ? Fault::kConfig : fault;
    result.value = missing ? "missing" : "unknown";
    result.message =
        missing ? fmt::format("{} does not exist (volume not mounted?)", path)
                : fmt::format("cannot read the size of {}: {}", path, size.error().message);
    result.log_fields.emplace_back("min_gb", fmt::format("{}", min_gb));
    return result;
  }

  const uint64_t total = size->total_bytes;
  // long double holds every uint64_t byte count exactly on x86-64, so a threshold equal to the
  // size compares equal and fails, as "more than" demands.
  result.passed = static_cast<long double>(total) > static_cast<long double>(min_gb) * 1e9L;
  result.value = FormatGb(total) + " GB";
  result.log_fields.emplace_back("value_gb", FormatGb(total));
  result.log_fields.emplace_back("min_gb", fmt::format("{}", min_gb));
  result.log_fields.emplace_back("available_gb", FormatGb(size->available_bytes));
  if (!result.passed) {
    result.fault = fault;
    result.message = fmt::format("{} is {} GB ({} bytes), need more than {} GB", path,
                                 FormatGb(total), total, min_gb);
  }
  return result;
}

namespace {

ItemResult CheckDiskCache(const DiskOptions& options, const FilesystemProbe& probe) {
  auto skipped = [&](std::string why) {
    ItemResult item;
    item.item = kItemDiskCache;
    item.passed = true;
    item.skipped = true;
    item.threshold = fmt::format("> {} GB", options.cache_min_gb);
    item.message = std::move(why);
    item.log_fields = {{"path", options.cache_path}};
    return item;
  };
  if (options.cache_volume == DiskOptions::Volume::kAbsent) {
    return skipped("not checked: the pod mounts no volume at " + options.cache_path);
  }
  if (options.cache_volume == DiskOptions::Volume::kAuto) {
    const auto size = probe(options.cache_path);
    if (!size && (size.error().error_number == ENOENT || size.error().error_number == ENOTDIR)) {
      return skipped("not checked: " + options.cache_path + " does not exist (no volume mounted)");
    }
  }
  return CheckDiskSize(kItemDiskCache, options.cache_path, options.cache_min_gb, Fault::kNode,
                       probe);
}

}  // namespace

std::vector<ItemResult> CheckDisks(const DiskOptions& options, const FilesystemProbe& probe) {
  return {
      CheckDiskSize(kItemDiskRoot, options.root_path, options.root_min_gb, Fault::kNode, probe),
      // Kubernetes gives a container a 64 MB /dev/shm unless the pod mounts an emptyDir with
      // medium Memory there: that is the job's template, not the host.
      CheckDiskSize(kItemDiskShm, options.shm_path, options.shm_min_gb, Fault::kConfig, probe),
      CheckDiskCache(options, probe),
  };
}

// --- ulimit ----------------------------------------------------------------------------------

LimitsProvider SystemLimits() {
  return []() -> std::expected<ProcessLimits, std::string> {
    auto soft = [](int resource) -> std::expected<std::optional<uint64_t>, std::string> {
      rlimit limit{};
      if (getrlimit(resource, &limit) != 0) return std::unexpected(std::strerror(errno));
      if (limit.rlim_cur == RLIM_INFINITY) return std::optional<uint64_t>();
      return std::optional<uint64_t>(limit.rlim_cur);
    };
    auto memlock = soft(RLIMIT_MEMLOCK);
    auto nofile = soft(RLIMIT_NOFILE);
    auto stack = soft(RLIMIT_STACK);
    auto nproc = soft(RLIMIT_NPROC);
    for (const auto* limit : {&memlock, &nofile, &stack, &nproc}) {
      if (!*limit) return std::unexpected("getrlimit: " + limit->error());
    }
    return ProcessLimits{*memlock, *nofile, *stack, *nproc};
  };
}

ItemResult CheckUlimit(const UlimitOptions& options, const LimitsProvider& limits) {
  ItemResult result;
  result.item = kItemUlimit;
  result.threshold =
      fmt::format("memlock_kb>{} nofile>{} stack_kb>{} nproc>{}", options.memlock_min_kb,
                  options.nofile_min, options.stack_min_kb, options.nproc_min);
  auto got = limits();
  if (!got) {
    result.fault = Fault::kNode;
    result.value = "unknown";
    result.message = got.error();
    return result;
  }

  struct SubLimit {
    std::string_view name;      // also the log key
    std::string_view min_name;  // log key of the threshold
    std::optional<uint64_t> value;
    uint64_t min;
  };
  auto kib = [](const std::optional<uint64_t>& bytes) {
    return bytes ? std::optional<uint64_t>(*bytes / 1024) : std::nullopt;
  };
  const SubLimit sub_limits[] = {
      {"memlock_kb", "memlock_min_kb", kib(got->memlock_bytes), options.memlock_min_kb},
      {"nofile", "nofile_min", got->nofile, options.nofile_min},
      {"stack_kb", "stack_min_kb", kib(got->stack_bytes), options.stack_min_kb},
      {"nproc", "nproc_min", got->nproc, options.nproc_min},
  };
  std::vector<std::string> values;
  std::vector<std::string> failed;
  std::vector<std::string> reasons;
  for (const SubLimit& limit : sub_limits) {
    const std::string value = FormatLimit(limit.value);
    values.push_back(fmt::format("{}={}", limit.name, value));
    result.log_fields.emplace_back(limit.name, value);
    result.log_fields.emplace_back(limit.min_name, std::to_string(limit.min));
    if (limit.value && *limit.value <= limit.min) {
      failed.emplace_back(limit.name);
      reasons.push_back(fmt::format("{}={} (need > {})", limit.name, value, limit.min));
    }
  }
  result.value = Join(values, " ");
  result.passed = failed.empty();
  if (!result.passed) {
    result.fault = Fault::kNode;
    result.log_fields.emplace_back("failed", Join(failed, ","));
    result.message = "limits too low: " + Join(reasons, ", ");
  }
  return result;
}

// --- accelerator -----------------------------------------------------------------------------

ItemResult CheckAccelerator(const AcceleratorOptions& options) {
  ItemResult result;
  result.item = kItemAccelerator;
  const int64_t tpu_required = options.chips > 0 ? options.chips : 1;
  result.threshold = fmt::format("tpu>={}", tpu_required);
  if (options.gpus > 0) result.threshold += fmt::format(" gpu>={}", options.gpus);
  result.log_fields = {{"dev_root", options.dev_root}};

  std::error_code ec;
  if (!fs::is_directory(options.dev_root, ec)) {
    result.fault = Fault::kConfig;
    result.value = "missing";
    result.message = fmt::format("device directory {} does not exist", options.dev_root);
    return result;
  }

  int64_t accel = 0;
  int64_t gpus = 0;
  for (fs::directory_iterator it(options.dev_root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (HasDigitSuffix(name, "accel")) ++accel;
    if (HasDigitSuffix(name, "nvidia")) ++gpus;
  }
  int64_t vfio = 0;
  const fs::path vfio_dir = fs::path(options.dev_root) / "vfio";
  if (fs::is_directory(vfio_dir, ec)) {
    for (fs::directory_iterator it(vfio_dir, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->path().filename() != "vfio") ++vfio;
    }
  }
  const int64_t tpus = std::max(accel, vfio);

  result.value = fmt::format("tpu={} accel={} vfio={} gpu={}", tpus, accel, vfio, gpus);
  result.log_fields.emplace_back("tpu", std::to_string(tpus));
  result.log_fields.emplace_back("accel", std::to_string(accel));
  result.log_fields.emplace_back("vfio", std::to_string(vfio));
  result.log_fields.emplace_back("chips_required", std::to_string(tpu_required));
  if (options.gpus > 0) {
    result.log_fields.emplace_back("gpu", std::to_string(gpus));
    result.log_fields.emplace_back("gpus_required", std::to_string(options.gpus));
  }

  std::vector<std::string> reasons;
  if (tpus < tpu_required) {
    reasons.push_back(
        fmt::format("found {} TPU devices under {} (accel<N>: {}, vfio/<N>: {}), need at least {}",
                    tpus, options.dev_root, accel, vfio, tpu_required));
  }
  if (options.gpus > 0 && gpus < options.gpus) {
    reasons.push_back(fmt::format("found {} GPUs under {} (nvidia<N>), need at least {}", gpus,
                                  options.dev_root, options.gpus));
  }
  result.passed = reasons.empty();
  if (!result.passed) {
    result.fault = Fault::kNode;
    result.message = Join(reasons, "; ");
  }
  return result;
}

}  // namespace tpujob::preflight
