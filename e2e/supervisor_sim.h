// The kubelet and the tpujob-supervise of each pod of one job, played by a test on KWOK, which
// runs no container: the pod-level protocol of supervisor/protocol.h (the operator's annotations
// in, the container's restarts and termination messages out), as supervisor/ speaks it on a
// real node (RealWorkerE2E runs it there).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cache/objects.h"
#include "e2e_env.h"
#include "supervisor/protocol.h"
#include "tpujob_env.h"

namespace tpujob::e2e {

// A stalled report, as tpujob-supervise writes it (supervisor/protocol.h): the program of
// `generation` made no progress for `idle` after `step` (none: before its first step).
inline nlohmann::json StalledReport(int generation, std::optional<int64_t> step,
                                    std::chrono::seconds idle) {
  nlohmann::json report = {
      {supervisor::kReportStateKey, supervisor::kReportStalled},
      {supervisor::kReportGenerationKey, generation},
      {supervisor::kReportExitKey, 143},
      {supervisor::kReportIdleSecondsKey, idle.count()},
      {supervisor::kReportPhaseKey, step ? supervisor::kPhaseRunning : supervisor::kPhaseStartup}};
  if (step) {
    report[supervisor::kReportStepKey] = *step;
    report[supervisor::kReportLastProgressKey] =
        cache::FormatRfc3339(std::chrono::system_clock::now() - idle);
  }
  return report;
}

// The kubelet and the supervisors of one job's pods, by pod uid.
class SupervisorSim {
  using json = nlohmann::json;

 public:
  SupervisorSim(std::string ns, std::string job) : ns_(std::move(ns)), job_(std::move(job)) {}

  // One pass over the job's pods: every supervisor told a generation above the one its program
  // runs stops it (the container restarts and waits at the barrier). Returns how many stopped.
  int Step() {
    int stopped = 0;
    for (const json& pod : Pods()) {
      const Seen seen = Read(pod);
      State& state = states_[seen.uid];
      const int running = seen.barrier > state.last ? seen.barrier : 0;
      if (running > 0 && seen.generation > running) {
        Restart(seen.name, state, supervisor::kStoppedExitCode,
                json{{supervisor::kReportStateKey, supervisor::kReportStopped},
                     {supervisor::kReportGenerationKey, running},
                     {supervisor::kReportExitKey, 0},
                     {supervisor::kReportNextKey, seen.generation}});
        state.last = running;
        ++stopped;
      }
    }
    return stopped;
  }

  // The program of `pod` exits with `code`: its supervisor exits too and the kubelet restarts
  // the container, whose supervisor waits at the barrier.
  bool ProgramExits(const std::string& pod, int code) {
    return EndProgram(pod, code, [code](int running) {
      return json{{supervisor::kReportStateKey, supervisor::kReportExited},
                  {supervisor::kReportGenerationKey, running},
                  {supervisor::kReportExitKey, code}};
    });
  }

  // The supervisor of `pod` finds its program stalled (stall detection): it stops the program and
  // exits with the stall code, reporting the last step (none: before the first) and when it came.
  bool ProgramStalls(const std::string& pod, std::optional<int64_t> step,
                     std::chrono::seconds idle) {
    return EndProgram(pod, supervisor::kStalledExitCode,
                      [&](int running) { return StalledReport(running, step, idle); });
  }

  // The generation each pod's program runs (0: it waits at the barrier), by pod name.
  std::map<std::string, int> Running() {
    std::map<std::string, int> out;
    for (const json& pod : Pods()) {
      const Seen seen = Read(pod);
      const State& state = states_[seen.uid];
      out[seen.name] = seen.barrier > state.last ? seen.barrier : 0;
    }
    return out;
  }

  int restarts() const { return restarts_; }

 private:
  struct Seen {
    std::string name, uid;
    int generation = 0, barrier = 0;
  };
  struct State {
    int last = 0;  // the last generation this pod's supervisor ran
    int count = 0;
  };

  std::vector<json> Pods() const {
    const std::string selector = std::string(cache::kJobNameLabel) + "=" + job_;
    kube::ListOptions options;
    options.label_selector = selector;
    const kube::Result<json> list = TestClient().List(kube::Resource::Pods(), ns_, options);
    std::vector<json> pods;
    if (!list || !list->contains("items")) return pods;
    for (const json& p : (*list)["items"]) {
      if (!p["metadata"].contains("deletionTimestamp")) pods.push_back(p);
    }
    return pods;
  }

  static Seen Read(const json& pod) {
    const json& meta = pod["metadata"];
    const json annotations = meta.value("annotations", json::object());
    auto number = [&](std::string_view key) {
      const std::string text = annotations.value(std::string(key), "0");
      return std::atoi(text.c_str());
    };
    return {meta.value("name", ""), meta.value("uid", ""), number(cache::kGenerationAnnotation),
            number(cache::kBarrierAnnotation)};
  }

  // The program `pod` runs ends: the container restarts with `code` and report(generation).
  // False when no program runs there.
  template <typename Report>
  bool EndProgram(const std::string& pod, int code, const Report& report) {
    for (const json& p : Pods()) {
      const Seen seen = Read(p);
      if (seen.name != pod) continue;
      State& state = states_[seen.uid];
      const int running = seen.barrier > state.last ? seen.barrier : 0;
      if (running == 0) return false;
      Restart(seen.name, state, code, report(running));
      state.last = running;
      return true;
    }
    return false;
  }

  void Restart(const std::string& pod, State& state, int code, const json& report) {
    const std::string now = cache::FormatRfc3339(std::chrono::system_clock::now());
    ++state.count;
    ++restarts_;
    const json patch = {{"status",
                         {{"containerStatuses",
                           json::array({fixtures::RestartedContainerStatus(
                               "trainer", "busybox", state.count, code, report.dump(), now)})}}}};
    const std::string path = ClusterDir() + "/inplace-" + ns_ + "-" + pod + ".json";
    std::ofstream(path) << patch.dump();
    const CommandResult r = Kubectl("patch pod " + pod + " -n " + ns_ +
                                    " --subresource=status --type=strategic --patch-file " + path);
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }

  std::string ns_, job_;
  std::map<std::string, State> states_;
  int restarts_ = 0;
};

}  // namespace tpujob::e2e
