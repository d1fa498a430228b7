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
// How the supervisor runs the program: kModeGenerations (the default: behind the barrier,
// restarted in place) or kModeOnce (no barrier, no annotations: once, its code is the
// supervisor's; restart Recreate with stall detection).
inline constexpr char kModeEnv[] = "TPUJOB_SUPERVISOR_MODE";
inline constexpr char kModeGenerations[] = "generations";
inline constexpr char kModeOnce[] = "once";
// Stall detection (spec.faultTolerance.progress): the step pattern (RE2, one capture group)
// matched against every line of the program's stdout and stderr, the checkpoint pattern, the
// heartbeat file, and the seconds without progress after the first step and before it.
inline constexpr char kLogPatternEnv[] = "TPUJOB_PROGRESS_LOG_PATTERN";
inline constexpr char kCheckpointPatternEnv[] = "TPUJOB_PROGRESS_CHECKPOINT_PATTERN";
inline constexpr char kHeartbeatFileEnv[] = "TPUJOB_PROGRESS_HEARTBEAT_FILE";
inline constexpr char kStallSecondsEnv[] = "TPUJOB_PROGRESS_STALL_SECONDS";
inline constexpr char kStartupSecondsEnv[] = "TPUJOB_PROGRESS_STARTUP_SECONDS";
// Set for the program: the generation it runs.
inline constexpr char kGenerationEnv[] = "TPUJOB_GENERATION";

// The report: the termination message, a JSON object rewritten at every state change,
//   {"state":S,"generation":N[,"exit":C][,"next":G][,"error":"..."]}
// with S one of the states below. The operator reads it from the container's state.terminated
// or lastState.terminated message.
inline constexpr char kReportStateKey[] = "state";
inline constexpr char kReportGenerationKey[] = "generation";
inline constexpr char kReportExitKey[] = "exit";
inline constexpr char kReportNextKey[] = "next";
inline constexpr char kReportErrorKey[] = "error";
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
// The program of generation N could not be started; "error" says why.
inline constexpr char kReportError[] = "error";

// Progress (spec.faultTolerance.progress): the program stopped making progress and was stopped
// ("exit" is its code). Reports written after the program started carry what is known of its
// progress: "step" (the last step), "lastProgress" (RFC 3339, when it came), "checkpoint" (the
// last checkpoint's step); a stalled report also "idleSeconds" and "phase" ("startup": no step
// ever came; "running").
inline constexpr char kReportStalled[] = "stalled";
inline constexpr char kReportStepKey[] = "step";
inline constexpr char kReportLastProgressKey[] = "lastProgress";
inline constexpr char kReportCheckpointKey[] = "checkpoint";
inline constexpr char kReportIdleSecondsKey[] = "idleSeconds";
inline constexpr char kReportPhaseKey[] = "phase";
inline constexpr char kPhaseStartup[] = "startup";
inline constexpr char kPhaseRunning[] = "running";
// The supervisor's exit code after a stall (as timeout(1)'s).
inline constexpr int kStalledExitCode = 124;

// The supervisor's exit code after a stop order or a SIGTERM with no program running
// (128 + SIGTERM).
inline constexpr int kStoppedExitCode = 143;
// The program could not be executed.
inline constexpr int kExecFailedExitCode = 127;

}  // namespace tpujob::supervisor
