// tpujob-supervise: runs a worker's program as its child and restarts it in place across
// generations, coordinated by the pod's annotations (protocol.h). The pure functions are here so
// that they can be tested without processes; Supervise is the run loop.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tpujob::supervisor {

struct Options {
  std::string podinfo_path;
  std::string state_dir;
  std::string message_path;
  std::chrono::milliseconds grace{std::chrono::seconds(30)};
  std::chrono::milliseconds poll{100};
};

// Options from the environment (protocol.h), `getenv` looking a name up (nullptr: unset). Returns
// nullopt and sets *error for a malformed number.
std::optional<Options> OptionsFromEnvironment(const std::function<const char*(const char*)>& getenv,
                                              std::string* error);

// Unquotes a Go strconv.Quote'd string ("..." with escapes). Unknown escapes are kept literally.
// nullopt when `quoted` is not a double-quoted string.
std::optional<std::string> UnquoteGo(std::string_view quoted);

// Parses a downward API annotations file: key="value" lines; lines that are not are skipped.
std::map<std::string, std::string> ParseAnnotations(std::string_view text);

// Reads and parses the annotations file; an unreadable file has no annotations.
std::map<std::string, std::string> ReadAnnotations(const std::string& path);

// A non-negative decimal integer (the whole of `text`), or nullopt.
std::optional<int64_t> ParseGeneration(std::string_view text);

// The integer value of an annotation; 0 when missing or not a non-negative integer.
int64_t AnnotationGeneration(const std::map<std::string, std::string>& annotations,
                             const std::string& key);

// What the supervisor reports in the termination message.
struct Message {
  std::string state;  // kReportBarrier, kReportRunning, ... (protocol.h)
  int64_t generation = 0;
  std::optional<int> exit_code{};
  std::optional<int64_t> next{};
  std::optional<std::string> error{};
};

// The report as protocol.h describes it: {"state":"...","generation":N[,"exit":C]...}.
std::string FormatMessage(const Message& message);
// JSON string escaping (quotes included).
std::string JsonQuote(std::string_view text);

// The last generation started, from STATE/generation; 0 if missing or unreadable.
int64_t ReadStateGeneration(const std::string& state_dir);
// Writes STATE/generation (temporary file + rename). False with *error on failure.
bool WriteStateGeneration(const std::string& state_dir, int64_t generation, std::string* error);
// Truncates and rewrites the message file. False on failure.
bool WriteMessage(const std::string& path, const Message& message);

// A wait status as an exit code: the exit status, or 128 + the signal.
int ExitCodeFromWaitStatus(int status);

// The run loop: waits at the barrier, runs argv as generation N, and returns the supervisor's exit
// code (protocol.h) when the program exits, a stop order comes or the supervisor is terminated.
// Installs signal handlers; call once per process.
int Supervise(const Options& options, const std::vector<std::string>& argv);

}  // namespace tpujob::supervisor
