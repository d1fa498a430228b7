// Runs the configured pre-flight checks and logs one line per item as it completes:
//
//   ts=... level=info msg="preflight" item="disk-size root" path=/ value_gb=120 min_gb=32
//     available_gb=88.1 verdict=pass
//   ts=... level=warning msg="preflight" item=ulimit memlock_kb=64 memlock_min_kb=16000 ...
//     failed=memlock_kb verdict=fail fault=node message="limits too low: ..."
//
// Passed items log at info, failed ones at warn (printed level=warning). Every item runs even after
// one failed, so the report names every problem of the node at once.
//
// Thread-safety: RunChecks blocks the caller for up to the dns timeout and keeps no state.
#pragma once

#include <string>

#include "base/clock.h"
#include "base/logging.h"
#include "preflight/checks.h"
#include "preflight/options.h"
#include "preflight/report.h"

namespace tpujob::preflight {

struct Probes {
  Resolver resolve = SystemResolver();
  FilesystemProbe filesystem = SystemFilesystemProbe();
  LimitsProvider limits = SystemLimits();
};

Report RunChecks(const Options& options, const Probes& probes, Clock& clock);

// The report for settings that could not be loaded: a single failed `config` item listing the
// problems, verdict config-fault. Logs the item like RunChecks does.
Report ConfigFaultReport(const ConfigError& error);

// The body of an item's log line (everything after `level=...`): `msg="preflight" item=...`,
// the item's log_fields, verdict, fault and message, with the message cut to 1024 bytes so one
// item cannot flood the log with thousands of peer names.
std::string FormatItemLine(const ItemResult& item, log::Format format = log::Format::kLogfmt);

}  // namespace tpujob::preflight
