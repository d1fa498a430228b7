// The contract between the operator and tpujob-supervise, the entrypoint that runs a worker's
// program in place across generations: the pod annotations the operator sets, the environment it
// gives the container, the report the supervisor leaves as its termination message and the exit
// code it reports a stop order with. Constants only, so that both sides can include it without
// depending on each other: the operator names these through cache/objects.h and the policy, the
// supervisor includes this file directly.
#pragma once

namespace tpujob::supervisor {

// The generation the job is in: a value greater than the generation a supervisor runs is a stop
// order (its program is stopped, the supervisor exits kStoppedExitCode).
inline constexpr char kGenerationAnnotation[] = "tpujob.dev/generation";
// The barrier: a supervisor starts generation N once this annotation is >= N.
inline constexpr char kBarrierAnnotation[] = "tpujob.dev/barrier";
// Variables for the program of the generation the barrier opens, over the container's own: one
// NAME=VALUE a line. A pod's environment cannot change, and an elastic job restarted in place on
// another slice count gives its programs new MEGASCALE_* (and TPU_CONFIG, TPUJOB_ATTEMPT) values
// this way. Read once, when the supervisor leaves the barrier; a line without "=" or with an
// empty name is skipped.
inline constexpr char kProgramEnvAnnotation[] = "tpujob.dev/program-env";

// The downward API file of the pod's annotations (one key="value" per line).
inline constexpr char kPodinfoEnv[] = "TPUJOB_SUPERVISOR_PODINFO";
inline constexpr char kDefaultPodinfoPath[] = "/tpujob/podinfo/annotations";
// A directory that survives container restarts (an emptyDir): holds the file `generation`.
inline constexpr char kStateEnv[] = "TPUJOB_SUPERVISOR_STATE";
inline constexpr char kDefaultStateDir[] = "/tpujob/state";
inline constexpr char kStateFileName[] = "generation";
// The termination message file, rewritten at every state change.
inline constexpr char kMessageEnv[] = "TPUJOB_SUPERVISOR_MESSAGE";
inline constexpr char kDefaultMessagePath[] = "/dev/termination-log";
// Seconds a program gets after SIGTERM on a stop order before SIGKILL.
inline constexpr char kGraceSecondsEnv[] = "TPUJOB_SUPERVISOR_GRACE_SECONDS";
inline constexpr int kDefaultGraceSeconds = 30;
// Poll interval of the annotations file, in milliseconds.
inline constexpr char kPollMsEnv[] = "TPUJOB_SUPERVISOR_POLL_MS";
inline constexpr int kDefaultPollMs = 100;
// Set for the program: the generation it runs. In mode "once" the supervisor's own value is kept
// and reported as the generation (0 when unset).
inline constexpr char kGenerationEnv[] = "TPUJOB_GENERATION";

// How the supervisor runs the program: kModeGenerations (the default) waits at the barrier and
// restarts in place on stop orders; kModeOnce (restart: Recreate) needs no annotations file and no
// state directory: it runs the program once, reports and exits with the program's code.
inline constexpr char kModeEnv[] = "TPUJOB_SUPERVISOR_MODE";
inline constexpr char kModeGenerations[] = "generations";
inline constexpr char kModeOnce[] = "once";

// Progress tracking and stall detection, on when kProgressLogPatternEnv or
// kProgressHeartbeatFileEnv is set (the operator sets them from spec.faultTolerance.progress).
// Then the program's stdout and stderr are pipes that the supervisor copies, byte for byte, to its
// own stdout and stderr, matching each line (ended by \n or \r; its first 64 KiB) on the side.
// An RE2 regular expression with exactly one capture group, the step (decimal), matched (RE2
// PartialMatch) against every line of the program's stdout and stderr. A line whose step is
// greater than the last one seen is progress.
inline constexpr char kProgressLogPatternEnv[] = "TPUJOB_PROGRESS_LOG_PATTERN";
// An RE2 regular expression with exactly one capture group: a line saying that a checkpoint was
// saved, the group its step. Reported as kReportCheckpointKey; not progress by itself.
inline constexpr char kProgressCheckpointPatternEnv[] = "TPUJOB_PROGRESS_CHECKPOINT_PATTERN";
// A file the program rewrites: every change of it (mtime, size or first 64 bytes) is progress.
// If its content (trimmed) is a non-negative decimal integer that is the step; otherwise the step
// counts the changes. Looked at every kPollMsEnv milliseconds; the file as it is when the program
// starts is not progress.
inline constexpr char kProgressHeartbeatFileEnv[] = "TPUJOB_PROGRESS_HEARTBEAT_FILE";
// After the first progress, no new progress for this many seconds is a stall (phase "running").
inline constexpr char kProgressStallSecondsEnv[] = "TPUJOB_PROGRESS_STALL_SECONDS";
inline constexpr int kDefaultStallSeconds = 600;
// Before the first progress, this many seconds since the program started is a stall (phase
// "startup").
inline constexpr char kProgressStartupSecondsEnv[] = "TPUJOB_PROGRESS_STARTUP_SECONDS";
inline constexpr int kDefaultStartupSeconds = 1800;
// A TCP port (1-65535): with progress tracking on, the supervisor answers GET /metrics on
// 0.0.0.0:<port> in the Prometheus text format (supervisor/progress_metrics.h has the families)
// while the program runs. Unset: no endpoint. A port that cannot be bound is logged, not fatal.
inline constexpr char kProgressMetricsPortEnv[] = "TPUJOB_PROGRESS_METRICS_PORT";

// The report: the termination message, a JSON object rewritten at every state change,
//   {"state":S,"generation":N[,"exit":C][,"next":G][,"step":T][,"lastProgress":"..."]
//    [,"idleSeconds":I][,"checkpoint":K][,"phase":P][,"error":"..."]}
// with S one of the states below, well under the 4096 bytes a termination message is cut at (an
// error is cut at 512 bytes). The operator reads it from the container's state.terminated or
// lastState.terminated message. With progress tracking on, every report written after the program
// started (exited, stopped, terminated, stalled) carries step, lastProgress and checkpoint when
// known; idleSeconds and phase are in the stalled report.
inline constexpr char kReportStateKey[] = "state";
inline constexpr char kReportGenerationKey[] = "generation";
inline constexpr char kReportExitKey[] = "exit";
inline constexpr char kReportNextKey[] = "next";
inline constexpr char kReportErrorKey[] = "error";
// The last (highest) step seen; absent before the first.
inline constexpr char kReportStepKey[] = "step";
// When the last progress came, RFC 3339 UTC in seconds ("2026-12-05T01:02:03Z"); absent if none.
inline constexpr char kReportLastProgressKey[] = "lastProgress";
// Seconds since the last progress (phase "running") or since the program started ("startup").
inline constexpr char kReportIdleSecondsKey[] = "idleSeconds";
// The step of the last checkpoint seen (kProgressCheckpointPatternEnv); absent if none.
inline constexpr char kReportCheckpointKey[] = "checkpoint";
// kPhaseStartup before the first progress, kPhaseRunning after it.
inline constexpr char kReportPhaseKey[] = "phase";
inline constexpr char kPhaseStartup[] = "startup";
inline constexpr char kPhaseRunning[] = "running";
// Waits at the barrier; N is the last generation started (0: none).
inline constexpr char kReportBarrier[] = "barrier";
// Runs the program as generation N.
inline constexpr char kReportRunning[] = "running";
// The program of generation N exited with code "exit" by itself.
inline constexpr char kReportExited[] = "exited";
// A stop order: the program of generation N was stopped (code "exit") for generation "next".
inline constexpr char kReportStopped[] = "stopped";
// The supervisor was sent SIGTERM or SIGINT; "exit" is its program's code when one ran.
inline constexpr char kReportTerminated[] = "terminated";
// The program of generation N could not be started; "error" says why. Also the report of an
// invalid environment (a bad pattern, a number out of range), with generation 0, when the
// supervisor exits kConfigErrorExitCode at start: "error" is "<VARIABLE>: <why>" or
// "<VARIABLE> must be ...".
inline constexpr char kReportError[] = "error";
// No progress in time: the program of generation N was stopped (SIGTERM to its group, SIGKILL
// after the grace period; "exit" its code) and the supervisor exits kStalledExitCode. Carries
// step, lastProgress, idleSeconds, checkpoint and phase. Written once without "exit" when the
// stall is found, then again with it once the program is gone.
inline constexpr char kReportStalled[] = "stalled";

// The supervisor's exit code after a stop order or a SIGTERM with no program running
// (128 + SIGTERM).
inline constexpr int kStoppedExitCode = 143;
// The program could not be executed.
inline constexpr int kExecFailedExitCode = 127;
// The program was stopped after a stall (kReportStalled).
inline constexpr int kStalledExitCode = 124;
// A usage error or an invalid environment (reported as kReportError).
inline constexpr int kConfigErrorExitCode = 2;

}  // namespace tpujob::supervisor
