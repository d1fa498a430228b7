#include "preflight/options.h"

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "base/strings.h"

namespace tpujob::preflight {
namespace {

constexpr std::array kSettings = {
    Setting{"--checks", "TPUJOB_PREFLIGHT_CHECKS",
            "Comma-separated checks to run: dns, disk, ulimit, accelerator. Default: dns, disk, "
            "accelerator (ulimit only when asked for: it matters for high-speed networks)."},
    Setting{"--node-name", "NODE_NAME", "Name of the node, recorded in the report."},
    Setting{"--hostnames", "TPU_WORKER_HOSTNAMES",
            "Comma-separated peer host names the dns check resolves."},
    Setting{"--coordinator", "MEGASCALE_COORDINATOR_ADDRESS",
            "Host name (or host:port) of a multislice job's coordinator, slice 0's first worker; "
            "the dns check resolves it along with the peers."},
    Setting{"--dns-timeout", "TPUJOB_PREFLIGHT_DNS_TIMEOUT_SECONDS",
            "Seconds the dns check keeps retrying (every second) until every peer resolves; "
            "0 tries once. Default 120."},
    Setting{"--hosts-file", "",
            "File in /etc/hosts format whose names count as resolved; re-read on every retry "
            "and allowed to be missing."},
    Setting{"--root-path", "TPUJOB_PREFLIGHT_ROOT_PATH",
            "File system checked by 'disk-size root'. Default /."},
    Setting{"--root-min-gb", "TPUJOB_PREFLIGHT_ROOT_MIN_GB",
            "The root file system must be larger than this many GB (10^9 bytes; total size, "
            "not free space). Default 32."},
    Setting{"--shm-path", "TPUJOB_PREFLIGHT_SHM_PATH",
            "File system checked by 'disk-size shm'. Default /dev/shm."},
    Setting{"--shm-min-gb", "TPUJOB_PREFLIGHT_SHM_MIN_GB",
            "The shm file system must be larger than this many GB. Default 1."},
    Setting{"--cache-path", "TPUJOB_PREFLIGHT_CACHE_PATH",
            "File system checked by 'disk-size cache'. Default /cache."},
    Setting{"--cache-min-gb", "TPUJOB_PREFLIGHT_CACHE_MIN_GB",
            "The cache file system must be larger than this many GB. Default 32."},
    Setting{"--cache-volume", "TPUJOB_PREFLIGHT_CACHE_VOLUME",
            "Whether a volume is mounted at the cache path: present (check it), absent (skip "
            "'disk-size cache') or auto (skip it when the path does not exist). Default auto."},
    Setting{"--memlock-min-kb", "TPUJOB_PREFLIGHT_MEMLOCK_MIN_KB",
            "The max-locked-memory soft limit must exceed this many KiB. Default 16000."},
    Setting{"--nofile-min", "TPUJOB_PREFLIGHT_NOFILE_MIN",
            "The open-files soft limit must exceed this. Default 1000000."},
    Setting{"--stack-min-kb", "TPUJOB_PREFLIGHT_STACK_MIN_KB",
            "The stack-size soft limit must exceed this many KiB. Default 8000."},
    Setting{"--nproc-min", "TPUJOB_PREFLIGHT_NPROC_MIN",
            "The max-user-processes soft limit must exceed this. Default 1000000."},
    Setting{"--dev-root", "TPUJOB_PREFLIGHT_DEV_ROOT",
            "Directory holding the device nodes. Default /dev."},
    Setting{"--chips", "TPUJOB_CHIPS_PER_WORKER",
            "TPU devices required (accel<N> or vfio/<N>); 0 means at least one. Default 0."},
    Setting{"--gpus", "TPUJOB_PREFLIGHT_GPUS",
            "GPU devices required (nvidia<N>); 0 skips the GPU check. Default 0."},
};

// Finds a setting's value: the flag if given, else its environment variable.
class Source {
 public:
  Source(const FlagValues& flags, const EnvironmentLookup& env) : flags_(flags), env_(env) {}

  struct Value {
    std::string origin;  // "--flag" or "ENV_NAME", for messages
    std::string text;
  };

  std::optional<Value> Get(std::string_view flag) const {
    const Setting* setting = nullptr;
    for (const Setting& s : kSettings) {
      if (s.flag == flag) setting = &s;
    }
    if (setting == nullptr) return std::nullopt;
    if (auto it = flags_.find(flag); it != flags_.end() && !it->second.empty()) {
      return Value{std::string(flag), it->second};
    }
    if (setting->env.empty()) return std::nullopt;
    std::optional<std::string> text = env_(setting->env);
    if (!text || text->empty()) return std::nullopt;
    return Value{std::string(setting->env), *text};
  }

 private:
  const FlagValues& flags_;
  const EnvironmentLookup& env_;
};

}  // namespace

std::vector<std::string> SplitList(std::string_view text) {
  std::vector<std::string> out;
  while (true) {
    const size_t comma = text.find(',');
    const std::string_view part = Trim(text.substr(0, comma));
    if (!part.empty()) out.emplace_back(part);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return out;
}

namespace {

std::string Problem(const Source::Value& value, std::string_view what) {
  return fmt::format("{}=\"{}\": {}", value.origin, value.text, what);
}

class Loader {
 public:
  Loader(const FlagValues& flags, const EnvironmentLookup& env) : source_(flags, env) {}

  void String(std::string_view flag, std::string& out) {
    if (auto value = source_.Get(flag)) out = value->text;
  }

  void CacheVolume(DiskOptions::Volume& out) {
    auto value = source_.Get("--cache-volume");
    if (!value) return;
    const std::string_view text = Trim(value->text);
    if (text == "auto") {
      out = DiskOptions::Volume::kAuto;
    } else if (text == "present") {
      out = DiskOptions::Volume::kPresent;
    } else if (text == "absent") {
      out = DiskOptions::Volume::kAbsent;
    } else {
      problems_.push_back(Problem(*value, "want auto, present or absent"));
    }
  }

  void Gb(std::string_view flag, double& out) {
    auto value = source_.Get(flag);
    if (!value) return;
    const std::string_view text = Trim(value->text);
    double parsed = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), parsed);
    if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(parsed) ||
        parsed < 0 || text.empty()) {
      problems_.push_back(Problem(*value, "want a non-negative number of GB"));
      return;
    }
    out = parsed;
  }

  template <typename Int>
  void Integer(std::string_view flag, Int& out, uint64_t max) {
    auto value = source_.Get(flag);
    if (!value) return;
    const std::string_view text = Trim(value->text);
    uint64_t parsed = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), parsed);
    if (ec != std::errc() || end != text.data() + text.size() || text.empty() || parsed > max) {
      problems_.push_back(Problem(*value, fmt::format("want an integer from 0 to {}", max)));
      return;
    }
    out = static_cast<Int>(parsed);
  }

  void Checks(std::vector<Check>& out) {
    auto value = source_.Get("--checks");
    if (!value) return;
    bool wanted[4] = {false, false, false, false};
    bool bad = false;
    for (const std::string& name : SplitList(value->text)) {
      bool known = false;
      for (Check check : {Check::kDisk, Check::kUlimit, Check::kAccelerator, Check::kDns}) {
        if (name == ToString(check)) {
          wanted[static_cast<int>(check)] = true;
          known = true;
        }
      }
      if (!known) {
        problems_.push_back(Problem(
            *value,
            fmt::format("unknown check \"{}\" (want dns, disk, ulimit, accelerator)", name)));
        bad = true;
      }
    }
    if (bad) return;
    out.clear();
    for (Check check : {Check::kDisk, Check::kUlimit, Check::kAccelerator, Check::kDns}) {
      if (wanted[static_cast<int>(check)]) out.push_back(check);
    }
    if (out.empty()) problems_.push_back(Problem(*value, "names no check"));
  }

  void List(std::string_view flag, std::vector<std::string>& out) {
    if (auto value = source_.Get(flag)) out = SplitList(value->text);
  }

  std::vector<std::string>& problems() { return problems_; }

 private:
  Source source_;
  std::vector<std::string> problems_;
};

constexpr uint64_t kMaxThreshold = uint64_t{1} << 53;  // beyond any real limit, exact in JSON
constexpr uint64_t kMaxDnsTimeoutSeconds = 24 * 3600;
constexpr uint64_t kMaxDevices = 1 << 16;

}  // namespace

std::string_view ToString(Check check) {
  switch (check) {
    case Check::kDisk:
      return "disk";
    case Check::kUlimit:
      return "ulimit";
    case Check::kAccelerator:
      return "accelerator";
    case Check::kDns:
      return "dns";
  }
  return "";
}

std::span<const Setting> Settings() { return kSettings; }

EnvironmentLookup ProcessEnvironment() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* value = std::getenv(std::string(name).c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

std::expected<Options, ConfigError> LoadOptions(const FlagValues& flags,
                                                const EnvironmentLookup& env) {
  Options options;
  Loader load(flags, env);
  load.Checks(options.checks);
  load.String("--node-name", options.node_name);

  load.List("--hostnames", options.dns.hostnames);
  std::string coordinator;
  load.String("--coordinator", coordinator);
  // "host:port" or "host" (a bracketed IPv6 address keeps its brackets off).
  if (coordinator.starts_with('[')) {
    coordinator = coordinator.substr(1, coordinator.find(']') - 1);
  } else if (const size_t colon = coordinator.find(':');
             colon != std::string::npos && coordinator.find(':', colon + 1) == std::string::npos) {
    coordinator.resize(colon);
  }
  if (!coordinator.empty()) options.dns.hostnames.push_back(coordinator);
  uint64_t dns_timeout_seconds =
      std::chrono::duration_cast<std::chrono::seconds>(options.dns.timeout).count();
  load.Integer("--dns-timeout", dns_timeout_seconds, kMaxDnsTimeoutSeconds);
  options.dns.timeout = std::chrono::seconds(dns_timeout_seconds);
  load.String("--hosts-file", options.dns.hosts_file);

  load.String("--root-path", options.disk.root_path);
  load.Gb("--root-min-gb", options.disk.root_min_gb);
  load.String("--shm-path", options.disk.shm_path);
  load.Gb("--shm-min-gb", options.disk.shm_min_gb);
  load.String("--cache-path", options.disk.cache_path);
  load.Gb("--cache-min-gb", options.disk.cache_min_gb);
  load.CacheVolume(options.disk.cache_volume);

  load.Integer("--memlock-min-kb", options.ulimit.memlock_min_kb, kMaxThreshold);
  load.Integer("--nofile-min", options.ulimit.nofile_min, kMaxThreshold);
  load.Integer("--stack-min-kb", options.ulimit.stack_min_kb, kMaxThreshold);
  load.Integer("--nproc-min", options.ulimit.nproc_min, kMaxThreshold);

  load.String("--dev-root", options.accelerator.dev_root);
  load.Integer("--chips", options.accelerator.chips, kMaxDevices);
  load.Integer("--gpus", options.accelerator.gpus, kMaxDevices);

  for (const auto& [flag, value] : flags) {
    bool known = false;
    for (const Setting& setting : kSettings) known = known || setting.flag == flag;
    if (!known) load.problems().push_back(fmt::format("{}: unknown setting", flag));
  }
  if (!load.problems().empty()) {
    return std::unexpected(ConfigError{options.node_name, std::move(load.problems())});
  }
  return options;
}

}  // namespace tpujob::preflight
