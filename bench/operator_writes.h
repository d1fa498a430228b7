// The operator's API writes over one recovery, read from its /metrics (the counter
// tpujob_api_requests_total), and what the recovery scenarios (in-place, slice-recovery) record
// of one recovery.
//
// Contract:
//   1. Writes are the requests of verb POST, PUT, PATCH or DELETE, summed by "VERB resource".
//   2. A read that fails (no curl, no answer within 10 s, not 200) is nullopt, never zeros.
//   3. SettledWrites waits (up to 60 s) until `settled` holds, then reads until two reads 500 ms
//      apart agree (at most 20 s): the writes of the recovery, not of its tail.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

namespace tpujob::bench {

using WriteCounts = std::map<std::string, double>;

std::optional<WriteCounts> OperatorWrites(const std::string& url);

std::optional<WriteCounts> SettledWrites(const std::string& url,
                                         const std::function<bool()>& settled);

// The counts that grew from `before` to `after`, by how much.
WriteCounts WritesSince(const WriteCounts& before, const WriteCounts& after);

// One recovery measured: milliseconds from the fault's write, and the operator's writes.
struct RecoveryRun {
  double old_gone_ms = 0, created_ms = 0, running_ms = 0, victim_gone_ms = 0;
  double scheduled = 0;  // pods of the new attempt the scheduler placed
  double created = 0;    // pods of the new attempt created, re-creations included
  double rewritten = 0;  // played container restarts written again (played_supervisors.h)
  WriteCounts writes;
  double Writes() const;
};

// " VERB resource N," for every count, then the end of the line.
void PrintWrites(const WriteCounts& writes);

}  // namespace tpujob::bench
