// API Priority and Fairness end to end: real 429s from the API server while the operator creates
// a 64-worker gang.
//
// The operator runs as a ServiceAccount of its own (a token kubeconfig, not the admin's), and
// `e2e/cluster apf-tight` restarts the API server with 30 seats server-wide and sends that
// ServiceAccount's requests to a priority level of one seat that rejects what it cannot serve at
// once (limitResponse Reject). Everyone else (kubectl as admin, KWOK, the scheduler, the
// controller-manager) keeps working. While the operator creates the 64 workers, the API server
// answers it with 429 and a Retry-After header (1 s at first, doubled by the server while the
// rejections go on). Asserted:
//  - the 429s are real: the API server's audit log holds 429 answers to the operator's pod
//    creations (user system:serviceaccount:<ns>:<account>, responseStatus.code 429);
//  - nothing is lost and nothing doubled: the job reaches Running with exactly 64 pods, all of
//    attempt 1, every worker id 0..63 once, each owned by the job, no other pod in the namespace;
//    the audit log shows exactly 64 pod creations that succeeded and no pod deletion, and the
//    watch of every pod event never sees a pod created twice or two live pods for one worker;
//  - Retry-After is honoured: the operator logs every retry (msg "retrying API request", with
//    the error, which carries the server's Retry-After, and the delay it then sleeps). Every
//    retry of a 429 sleeps at least its Retry-After; and the sleeps did happen: the pod creations
//    all share one path, so the retries of one request cannot be told apart from the others'
//    by name, but every attempt-n line must be matched to a distinct attempt-(n-1) line of the
//    same verb and path logged at least that line's delay earlier.
// TearDown runs `e2e/cluster apf-reset` whatever happened, so the tests after this one get the
// normal API server back.
//
// TPUJOB_E2E_APF_TIGHT=0 runs the same without the tight configuration: the test then fails (no
// 429 in the audit log, no retry in the operator's log), which shows it tests the throttling.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cache/objects.h"
#include "e2e_env.h"
#include "operator_env.h"
#include "tpujob_env.h"

namespace tpujob::e2e {
namespace TPUJOB_TEST_NS {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

bool TightApf() {
  const char* value = std::getenv("TPUJOB_E2E_APF_TIGHT");
  return value == nullptr || std::string(value) != "0";
}

std::string AuditLogFile() { return ClusterDir() + "/logs/audit.log"; }

// The writes the audit log holds from `user`, after the first `offset` bytes of the log.
std::vector<nlohmann::json> AuditedWritesOf(const std::string& user, std::streamoff offset) {
  std::vector<nlohmann::json> events;
  std::ifstream in(AuditLogFile());
  in.seekg(offset);
  const std::string needle = "\"username\":\"" + user + "\"";
  for (std::string line; std::getline(in, line);) {
    if (line.find(needle) == std::string::npos) continue;
    auto event = nlohmann::json::parse(line, nullptr, false);
    if (event.is_object() &&
        event.value("user", nlohmann::json::object()).value("username", "") == user) {
      events.push_back(std::move(event));
    }
  }
  return events;
}

std::streamoff AuditLogSize() {
  std::ifstream in(AuditLogFile(), std::ios::ate | std::ios::binary);
  return in ? static_cast<std::streamoff>(in.tellg()) : 0;
}

// One "retrying API request" line of the operator's JSON log.
struct Retry {
  WallTime logged;
  std::string request;  // verb and path
  int attempt = 0;      // 1: the first try failed
  Millis delay{0};      // what the operator sleeps before the next try
  std::string error;
  std::optional<int> retry_after;  // seconds, from the server's header, as the error carries it
};

int64_t IntField(const nlohmann::json& line, const char* key) {
  const auto it = line.find(key);
  if (it == line.end()) return -1;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) return std::atoll(it->get<std::string>().c_str());
  return -1;
}

std::vector<Retry> RetriesIn(const std::string& log) {
  std::vector<Retry> retries;
  std::istringstream lines(log);
  for (std::string text; std::getline(lines, text);) {
    const auto line = nlohmann::json::parse(text, nullptr, false);
    if (!line.is_object() || line.value("msg", "") != "retrying API request") continue;
    Retry retry;
    const auto logged = cache::ParseRfc3339(line.value("ts", ""));
    if (!logged) {
      ADD_FAILURE() << "no timestamp in " << text;
      continue;
    }
    retry.logged = *logged;
    retry.request = line.value("verb", "") + " " + line.value("path", "");
    retry.attempt = static_cast<int>(IntField(line, "attempt"));
    retry.delay = Millis(IntField(line, "delay_ms"));
    retry.error = line.value("error", "");
    if (const size_t at = retry.error.rfind("(retry after "); at != std::string::npos) {
      retry.retry_after = std::atoi(retry.error.c_str() + at + 13);
    }
    retries.push_back(std::move(retry));
  }
  return retries;
}

// Every attempt-n retry of a request must follow a distinct attempt-(n-1) retry of the same verb
// and path by at least that one's delay (1 ms for the log's millisecond timestamps). The
// earlier lines that qualify for one line qualify for every later one, so counting suffices.
::testing::AssertionResult EveryRetryWaitedItsDelay(const std::vector<Retry>& retries,
                                                    int* checked) {
  std::map<std::pair<std::string, int>, std::vector<const Retry*>> by_attempt;
  for (const Retry& r : retries) by_attempt[{r.request, r.attempt}].push_back(&r);
  *checked = 0;
  for (auto& [key, later] : by_attempt) {
    if (key.second < 2) continue;
    const auto earlier_it = by_attempt.find({key.first, key.second - 1});
    if (earlier_it == by_attempt.end()) {
      return ::testing::AssertionFailure() << "attempt " << key.second << " of " << key.first
                                           << " without an attempt " << key.second - 1;
    }
    std::vector<WallTime> ready;  // when each earlier retry's sleep was over
    for (const Retry* r : earlier_it->second) ready.push_back(r->logged + r->delay);
    std::sort(ready.begin(), ready.end());
    std::sort(later.begin(), later.end(),
              [](const Retry* a, const Retry* b) { return a->logged < b->logged; });
    for (size_t k = 0; k < later.size(); ++k) {
      const WallTime at = later[k]->logged + Millis(1);
      const size_t slept =
          static_cast<size_t>(std::upper_bound(ready.begin(), ready.end(), at) - ready.begin());
      if (slept < k + 1) {
        return ::testing::AssertionFailure()
               << "attempt " << key.second << " of " << key.first << " logged at "
               << cache::FormatRfc3339Millis(later[k]->logged) << ": only " << slept << " attempt-"
               << key.second - 1 << " retries had slept their delay by then, " << k + 1
               << " needed";
      }
      ++*checked;
    }
  }
  return ::testing::AssertionSuccess();
}

// The pods of namespace `ns` are exactly the `workers` workers of `job` (uid `uid`), attempt 1,
// one per id, each owned by the job.
::testing::AssertionResult ExactlyTheWorkersAndNothingElse(const std::string& ns,
                                                           const std::string& job,
                                                           const std::string& uid, int workers) {
  const auto list = nlohmann::json::parse(Kubectl("get pods -n " + ns + " -o json", false).output,
                                          nullptr, false);
  if (!list.is_object() || !list["items"].is_array()) {
    return ::testing::AssertionFailure() << "cannot list the pods of " << ns;
  }
  std::set<int> ids;
  for (const auto& pod : list["items"]) {
    const std::string name = pod["metadata"].value("name", "");
    const auto labels = pod["metadata"].value("labels", nlohmann::json::object());
    if (labels.value("tpujob.dev/job-name", "") != job ||
        labels.value("tpujob.dev/replica-type", "") != "Worker") {
      return ::testing::AssertionFailure() << "a pod that is no worker of " << job << ": " << name;
    }
    if (labels.value("tpujob.dev/attempt", "") != "1") {
      return ::testing::AssertionFailure()
             << name << " is of attempt " << labels.value("tpujob.dev/attempt", "");
    }
    bool owned = false;
    for (const auto& owner : pod["metadata"].value("ownerReferences", nlohmann::json::array())) {
      owned |= owner.value("kind", "") == "TPUJob" && owner.value("uid", "") == uid &&
               owner.value("controller", false);
    }
    if (!owned) return ::testing::AssertionFailure() << name << " is not owned by the job (orphan)";
    const std::string index = labels.value("tpujob.dev/replica-index", "");
    const int id = std::atoi(index.c_str());
    if (index != std::to_string(id) || id < 0 || id >= workers) {
      return ::testing::AssertionFailure() << name << " has worker id \"" << index << "\"";
    }
    if (!ids.insert(id).second) return ::testing::AssertionFailure() << "worker id twice: " << id;
  }
  if (static_cast<int>(ids.size()) != workers) {
    return ::testing::AssertionFailure() << ids.size() << " workers, want " << workers;
  }
  return ::testing::AssertionSuccess();
}

class ApfE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { InstallCrd(); }
  void SetUp() override {
    static int counter = 0;
    prefix_ = "apf" + std::to_string(::getpid() % 10000) + "-" + std::to_string(++counter);
    accelerator_ = "tpu-" + prefix_;
    CreateTpuNodes(prefix_, 64, accelerator_, "8x32", "pool-" + prefix_);
  }
  void TearDown() override {
    const auto reset = Cluster("apf-reset");
    EXPECT_EQ(reset.exit_code, 0) << reset.output;
    if (!binding_.empty()) Kubectl("delete clusterrolebinding " + binding_, false);
    DeleteTpuNodes(prefix_);
  }
  static CommandResult Cluster(const std::string& command) {
    return RunCommand(ClusterScript() + " " + command + " --dir " + ClusterDir());
  }

  std::string prefix_;
  std::string accelerator_;
  std::string binding_;
};

// Over 60 s by design: the 64 creations go through a one-seat priority level that rejects, and
// every retry waits out the Retry-After the API server sent.
TEST_F(ApfE2E, RealApfRejectionsDuringA64WorkerCreationHonourRetryAfterAndLoseNothing) {
  constexpr int kWorkers = 64;
  TestNamespace ns("apf");
  const std::string n = ns.name();
  const std::string account = "operator";
  const std::string user = "system:serviceaccount:" + n + ":" + account;
  ASSERT_EQ(Kubectl("create serviceaccount " + account + " -n " + n).exit_code, 0);
  binding_ = "apf-" + n;
  ASSERT_EQ(Kubectl("create clusterrolebinding " + binding_ + " --clusterrole=cluster-admin " +
                    "--serviceaccount=" + n + ":" + account)
                .exit_code,
            0);
  const std::string kubeconfig = ServiceAccountKubeconfig(n, account);
  ASSERT_FALSE(kubeconfig.empty());
  if (TightApf()) {
    const auto tight = Cluster("apf-tight --subject serviceaccount:" + n + "/" + account);
    ASSERT_EQ(tight.exit_code, 0) << tight.output;
    std::printf("%s", tight.output.c_str());
  } else {
    std::printf("TPUJOB_E2E_APF_TIGHT=0: the API server keeps its normal configuration\n");
  }

  const std::streamoff audit_from = AuditLogSize();
  PodWatch watch(n);
  OperatorProcess op({"--namespace", n, "--kubeconfig", kubeconfig, "--log-format", "json"});
  ASSERT_EQ(ApplyYaml(n, JobYaml("gang", kWorkers, "8x32", "", false, "", accelerator_)).exit_code,
            0);
  const auto applied = Clock::now();
  ASSERT_TRUE(JobFieldBecomes(n, "gang", "{.status.phase}", "Running", std::chrono::seconds(90)))
      << op.Log();
  const double to_running = std::chrono::duration<double>(Clock::now() - applied).count();
  std::printf("job Running %.1f s after it was applied\n", to_running);

  // Nothing lost, nothing doubled.
  const std::string uid = JobField(n, "gang", "{.metadata.uid}");
  EXPECT_EQ(JobField(n, "gang", "{.status.attempt}"), "1");
  EXPECT_TRUE(ExactlyTheWorkersAndNothingElse(n, "gang", uid, kWorkers));
  const auto report = watch.CheckAfterCreations(kWorkers);
  EXPECT_TRUE(report.violations.empty()) << testing::PrintToString(report.violations);
  EXPECT_EQ(report.creations, kWorkers) << watch.Raw();

  // The API server's side: real 429s to the operator during the creation, and every pod created
  // once.
  std::map<int, int> pod_creations;  // by responseStatus.code
  std::map<std::string, int> rejected;
  int rejections = 0;
  int pod_deletions = 0;
  for (const auto& event : AuditedWritesOf(user, audit_from)) {
    const std::string verb = event.value("verb", "");
    const std::string resource =
        event.value("objectRef", nlohmann::json::object()).value("resource", "");
    const int code = event.value("responseStatus", nlohmann::json::object()).value("code", 0);
    if (resource == "pods" && verb == "create") ++pod_creations[code];
    if (resource == "pods" && verb == "delete") ++pod_deletions;
    if (code == 429) {
      ++rejections;
      ++rejected[verb + " " + resource];
    }
  }
  std::printf("audit log: %d writes of %s answered 429 (%s); pod creations by code: %s\n",
              rejections, user.c_str(), testing::PrintToString(rejected).c_str(),
              testing::PrintToString(pod_creations).c_str());
  EXPECT_GT(pod_creations[429], 0) << "the API server never answered the operator's pod "
                                      "creations with 429";
  EXPECT_EQ(pod_creations[201], kWorkers);
  EXPECT_EQ(pod_deletions, 0);

  // The operator's side: Retry-After honoured.
  const std::vector<Retry> retries = RetriesIn(op.Log());
  std::map<int, int> retry_after_seen;  // seconds -> 429 retries
  int throttled = 0;
  int pod_create_retries = 0;
  int max_attempt = 0;
  std::vector<std::string> too_soon;  // retries of a 429 planned sooner than its Retry-After
  const std::string pod_create = "POST /api/v1/namespaces/" + n + "/pods";
  for (const Retry& r : retries) {
    max_attempt = std::max(max_attempt, r.attempt);
    if (!r.error.starts_with("429")) continue;
    ++throttled;
    if (r.request == pod_create || r.request.starts_with(pod_create + "?")) ++pod_create_retries;
    if (!r.retry_after) {
      too_soon.push_back(r.request + ": a 429 without Retry-After: " + r.error);
      continue;
    }
    ++retry_after_seen[*r.retry_after];
    if (r.delay < std::chrono::seconds(*r.retry_after)) {
      too_soon.push_back(r.request + " attempt " + std::to_string(r.attempt) + ": delay " +
                         std::to_string(r.delay.count()) + " ms after Retry-After " +
                         std::to_string(*r.retry_after) + " s");
    }
  }
  int checked = 0;
  const auto waited = EveryRetryWaitedItsDelay(retries, &checked);
  std::printf(
      "operator log: %zu retries, %d of them after a 429 (%d of pod creations); Retry-After "
      "seconds -> retries: %s; highest attempt %d; %d later attempts matched to an earlier one "
      "that slept its delay\n",
      retries.size(), throttled, pod_create_retries,
      testing::PrintToString(retry_after_seen).c_str(), max_attempt, checked);
  EXPECT_GT(pod_create_retries, 0) << "no retry of a throttled pod creation in the log";
  // Each retry line answers one 429 the audit log holds (a request that ran out of retries
  // logs no line for its last one).
  EXPECT_LE(pod_create_retries, pod_creations[429]);
  const size_t too_soon_count = too_soon.size();
  if (too_soon.size() > 5) too_soon.resize(5);  // the first five tell the story
  EXPECT_EQ(too_soon_count, 0u) << "Retry-After not honoured by " << too_soon_count << " of "
                                << throttled << " retries: " << testing::PrintToString(too_soon);
  EXPECT_TRUE(waited);
  if (waited) {
    EXPECT_GT(checked, 0) << "no request was retried twice: the sleeps were not put to the test";
  }
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::e2e
