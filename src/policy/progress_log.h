// What a worker's log says of its program's progress (stall detection with a step pattern), and
// when status.progress takes it. Pure: text in, values out.
//
// Two readers use it. `kubectl tpujob describe` reads worker 0's log tail on demand and shows the
// current step and rate. The operator reads the same tail of each running job with a logPattern
// at most once per refresh interval (--progress-refresh-seconds, one minute by default) and
// writes status.progress only when RefreshProgress says the step moved: so the STEP column of
// `kubectl get tpujobs` follows the program at no more than one status write per job per
// interval, and no step of the program ever costs an API write of its own.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/clock.h"
#include "policy/job_status.h"

namespace tpujob::policy {

struct LogProgress {
  std::string source;  // "pod NAME, its last N lines"
  std::optional<int64_t> step;
  std::optional<WallTime> at;              // the kubelet's timestamp of that step's line
  std::optional<double> steps_per_second;  // over the matched lines of the tail
  std::optional<int64_t> checkpoint;       // the last checkpoint line's step, if a pattern
  std::string error;                       // why it could not be read
};

// Parses a log read with timestamps=true (each line "RFC3339Nano TEXT") against the job's step
// pattern (RE2, one capture group) and, when given, its checkpoint pattern: the last step, when
// it came, the last checkpoint, and the rate from the first to the last matched step line of the
// tail. A line without a timestamp is skipped; a pattern that does not compile sets `error`.
LogProgress ProgressFromLog(std::string_view log, std::string_view pattern,
                            std::string_view checkpoint_pattern = {});

// status.progress with what the log says, when that is news: a step line newer than the one
// status.progress holds, whose step or checkpoint differs from it. The step may go down (a
// program restarted from its checkpoint is at the checkpoint's step again). Everything stall
// detection keeps there (stalls in a row, the suspect, a stall being attributed) is kept as it
// is. nullopt: nothing to write.
std::optional<ProgressStatus> RefreshProgress(const std::optional<ProgressStatus>& current,
                                              const LogProgress& log);

}  // namespace tpujob::policy
