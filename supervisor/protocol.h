// The contract between the operator and tpujob-supervise, the entrypoint that runs a worker's
// program in place across generations: the pod annotations the operator sets, the environment it
// gives the container and the exit code the supervisor reports a stop order with. Constants only,
// so that both sides can include it without depending on each other.
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
// Set for the program: the generation it runs.
inline constexpr char kGenerationEnv[] = "TPUJOB_GENERATION";

// The termination message the supervisor keeps up to date, which the operator reads back
// (policy/pod_observation.h): {"state":"running","generation":3[,"exit":0][,"next":4][,...]}.
inline constexpr char kReportState[] = "state";
inline constexpr char kReportGeneration[] = "generation";
inline constexpr char kReportExit[] = "exit";
// The states it reports.
inline constexpr char kStateBarrier[] = "barrier";        // waits for the barrier to open
inline constexpr char kStateRunning[] = "running";        // the program runs
inline constexpr char kStateExited[] = "exited";          // the program exited by itself
inline constexpr char kStateStopped[] = "stopped";        // stopped on a stop order
inline constexpr char kStateTerminated[] = "terminated";  // the kubelet sent SIGTERM
inline constexpr char kStateError[] = "error";            // the program could not be started

// The supervisor's exit code after a stop order or a SIGTERM with no program running
// (128 + SIGTERM).
inline constexpr int kStoppedExitCode = 143;
// The program could not be executed.
inline constexpr int kExecFailedExitCode = 127;

}  // namespace tpujob::supervisor
