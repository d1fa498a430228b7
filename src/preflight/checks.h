// The pre-flight items (docs/preflight.md): what each one measures, its threshold and who is
// to blame when it fails.
//
// Every check is a function of its options and of an injected probe (name resolver, file system
// size, process limits, device directory) and returns one ItemResult per item; none of them
// throws or logs. Faults are attributed per item: a broken host (too small a root or cache disk,
// low ulimits, missing accelerator devices) is a node fault, so the operator cordons the node;
// unresolvable peers and a small /dev/shm usually come from the job's own pod template (no
// `emptyDir: {medium: Memory}`, a wrong hostname list), so they are configuration faults and no
// node is cordoned for them. A path that does not exist at all is a configuration fault for
// every item: the volume was not mounted or the override points nowhere, which says nothing
// about the host.
//
// Thread-safety: the functions keep no state; the probes they are given must be safe to call
// from the calling thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/clock.h"

namespace tpujob::preflight {

// Item names as they appear in log lines (`item=...`) and in the report.
inline constexpr std::string_view kItemDns = "dns";
inline constexpr std::string_view kItemDiskRoot = "disk-size root";
inline constexpr std::string_view kItemDiskShm = "disk-size shm";
inline constexpr std::string_view kItemDiskCache = "disk-size cache";
inline constexpr std::string_view kItemUlimit = "ulimit";
inline constexpr std::string_view kItemAccelerator = "accelerator";
// Not a check: stands for invalid settings, so the report always names what went wrong.
inline constexpr std::string_view kItemConfig = "config";

enum class Fault { kNone, kNode, kConfig };
std::string_view ToString(Fault fault);  // "", "node", "config"

struct ItemResult {
  std::string item;
  bool passed = false;
  Fault fault = Fault::kNone;  // kNone exactly when passed
  std::string value;           // what was measured, e.g. "120.5 GB"
  std::string threshold;       // what was required, e.g. "> 32 GB"
  std::string message;         // why it failed (or a note when it passed)
  bool skipped = false;        // passed without being measured; `message` says why
  // Extra key=value pairs for the item's log line, in order (e.g. path=/ value_gb=120).
  std::vector<std::pair<std::string, std::string>> log_fields;
};

// --- dns -------------------------------------------------------------------------------------

// Resolves one host name; the error is a human-readable reason.
using Resolver = std::function<std::expected<void, std::string>(const std::string& name)>;

// getaddrinfo(3), which follows nsswitch.conf (/etc/hosts, then cluster DNS).
Resolver SystemResolver();

struct DnsOptions {
  std::vector<std::string> hostnames;  // TPU_WORKER_HOSTNAMES; duplicates are checked once
  Duration timeout = std::chrono::seconds(120);
  Duration poll_interval = std::chrono::seconds(1);
  // Optional file in /etc/hosts format whose names count as resolved. Re-read on every round
  // and allowed to be missing, so a name can appear while the check waits.
  std::string hosts_file;
};

// Resolves every name, retrying the unresolved ones every poll_interval until all resolve or
// `timeout` has passed on `clock` (peers start in parallel, so their DNS records appear over
// time). At least one round is always made, even with a zero timeout. Fails with
// Fault::kConfig.
ItemResult CheckDns(const DnsOptions& options, const Resolver& resolve, Clock& clock);

// The names in an /etc/hosts style file, lower-cased; empty when the file cannot be read.
std::vector<std::string> ReadHostsFile(const std::string& path);

// --- disk-size -------------------------------------------------------------------------------

struct FilesystemSize {
  uint64_t total_bytes = 0;      // f_blocks * f_frsize
  uint64_t available_bytes = 0;  // f_bavail * f_frsize, reported only
};
struct FilesystemError {
  int error_number = 0;  // errno; ENOENT/ENOTDIR mean the path does not exist
  std::string message;
};
using FilesystemProbe =
    std::function<std::expected<FilesystemSize, FilesystemError>(const std::string& path)>;

// statvfs(3) on the path.
FilesystemProbe SystemFilesystemProbe();

struct DiskOptions {
  std::string root_path = "/";
  std::string shm_path = "/dev/shm";
  std::string cache_path = "/cache";
  // GB are 10^9 bytes; the file system's total size must exceed the minimum. The total rather
  // than the free space is compared: it is fixed for a given host and volume, so the verdict
  // does not depend on what an earlier pod left behind.
  double root_min_gb = 32;
  double shm_min_gb = 1;
  double cache_min_gb = 32;
  // Whether a volume is mounted at cache_path. The cache item measures the job's cache volume;
  // a job that mounts none there has nothing to measure, so the item is skipped (it passes with
  // a note) rather than failing on every node. kAuto: skipped when the path does not exist.
  // The operator passes kAbsent or kPresent from the pod template's volume mounts.
  enum class Volume { kAuto, kPresent, kAbsent };
  Volume cache_volume = Volume::kAuto;
};

// One item: `item` is kItemDiskRoot/Shm/Cache, `fault` whom a too-small file system blames.
ItemResult CheckDiskSize(std::string_view item, const std::string& path, double min_gb, Fault fault,
                         const FilesystemProbe& probe);

// The three disk-size items, root, shm and cache, in that order (cache skipped as above).
std::vector<ItemResult> CheckDisks(const DiskOptions& options, const FilesystemProbe& probe);

// --- ulimit ----------------------------------------------------------------------------------

// Soft limits of this process; std::nullopt means unlimited.
struct ProcessLimits {
  std::optional<uint64_t> memlock_bytes;
  std::optional<uint64_t> nofile;
  std::optional<uint64_t> stack_bytes;
  std::optional<uint64_t> nproc;
};
using LimitsProvider = std::function<std::expected<ProcessLimits, std::string>()>;

// getrlimit(2) for RLIMIT_MEMLOCK, RLIMIT_NOFILE, RLIMIT_STACK and RLIMIT_NPROC. Soft limits are
// what the training program starts with; they are what `ulimit -a` shows.
LimitsProvider SystemLimits();

struct UlimitOptions {
  // Each limit must exceed its minimum; unlimited always passes.
  uint64_t memlock_min_kb = 16000;
  uint64_t nofile_min = 1000000;
  uint64_t stack_min_kb = 8000;
  uint64_t nproc_min = 1000000;
};

// Fails with Fault::kNode when any sub-limit is too low; the value lists all four.
ItemResult CheckUlimit(const UlimitOptions& options, const LimitsProvider& limits);

// --- accelerator -----------------------------------------------------------------------------

struct AcceleratorOptions {
  std::string dev_root = "/dev";
  int64_t chips = 0;  // TPU chips the worker requested; 0 = at least one device
  int64_t gpus = 0;   // GPUs required; 0 = GPUs are not checked
};

// Counts TPU device nodes, `<dev_root>/accel<N>` (the accel driver) and entries of
// `<dev_root>/vfio/` other than `vfio` itself (the VFIO driver; `vfio` is the container node,
// not a chip), and GPUs, `<dev_root>/nvidia<N>` (nvidiactl, nvidia-uvm and the like are
// control nodes). A host exposes its chips through one driver, so the TPU count is the larger
// of the two. Only names are looked at, not file types, so a test can build a /dev from plain
// files. Fails with Fault::kNode.
ItemResult CheckAccelerator(const AcceleratorOptions& options);

// Formats a byte count in GB (10^9) with at most two decimals: 120, 0.07, 251.96.
std::string FormatGb(uint64_t bytes);

}  // namespace tpujob::preflight
