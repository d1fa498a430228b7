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
#include <utility>
#include <vector>

#include "supervisor/progress.h"

namespace tpujob::supervisor {

enum class Mode {
  kGenerations,  // the barrier, stop orders, in-place restarts (protocol.h kModeGenerations)
  kOnce,         // run the program once (kModeOnce)
};

struct Options {
  std::string podinfo_path;
  std::string state_dir;
  std::string message_path;
  std::chrono::milliseconds grace{std::chrono::seconds(30)};
  std::chrono::milliseconds poll{100};
  Mode mode = Mode::kGenerations;
  // Mode::kOnce: the generation reported and given to the program (kGenerationEnv, 0 if unset).
  int64_t once_generation = 0;
  ProgressOptions progress;
};

// Options from the environment (protocol.h), `getenv` looking a name up (nullptr: unset). Returns
// nullopt and sets *error for a malformed number, an unknown mode or a pattern that is not RE2
// with exactly one capture group ("<VARIABLE>: <why>").
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

// The variables of kProgramEnvAnnotation's value (NAME=VALUE lines), in order; a line without
// "=" or with an empty name is skipped.
std::vector<std::pair<std::string, std::string>> ParseProgramEnv(std::string_view text);

// What the supervisor reports in the termination message.
struct Message {
  std::string state;  // kReportBarrier, kReportRunning, ... (protocol.h)
  int64_t generation = 0;
  std::optional<int> exit_code{};
  std::optional<int64_t> next{};
  std::optional<std::string> error{};
  // Progress (protocol.h kReportStepKey and the following), when tracked.
  std::optional<int64_t> step{};
  std::optional<std::string> last_progress{};
  std::optional<int64_t> idle_seconds{};
  std::optional<int64_t> checkpoint{};
  std::optional<std::string> phase{};
};

// The report as protocol.h describes it: {"state":"...","generation":N[,"exit":C]...}. An error
// longer than kMaxReportError bytes is cut there (the termination message is at most 4096, and
// escaping can make a byte six).
inline constexpr size_t kMaxReportError = 512;
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

// The report of an invalid environment (OptionsFromEnvironment's error), written to the message
// file `getenv` names before the supervisor exits kConfigErrorExitCode.
Message ConfigErrorMessage(const std::string& error);
std::string MessagePathFromEnvironment(const std::function<const char*(const char*)>& getenv);

// The run loop: waits at the barrier, runs argv as generation N, and returns the supervisor's exit
// code (protocol.h) when the program exits, a stop order comes, the program stalls or the
// supervisor is terminated. In Mode::kOnce, runs argv once without a barrier. Installs signal
// handlers; call once per process.
int Supervise(const Options& options, const std::vector<std::string>& argv);

}  // namespace tpujob::supervisor
