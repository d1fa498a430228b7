#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cache/objects.h"
#include "controller/event_recorder.h"
#include "fake_client.h"
#include "log_capture.h"

namespace tpujob::controller {
namespace TPUJOB_TEST_NS {

using kube::FakeClient;
using kube::Json;
using kube::Resource;
using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::SizeIs;

constexpr auto kWait = seconds(10);  // bound on waiting for the recorder's thread; never reached

// A client whose writes wait at a gate the test opens and closes: a slow or hung API server.
class GatedClient : public kube::Client {
 public:
  explicit GatedClient(FakeClient& inner) : inner_(inner) {}

  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = false;
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  // Blocks (bounded) until `n` writes wait at the closed gate.
  bool AwaitWaiting(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kWait, [&] { return waiting_ >= n; });
  }

  kube::Result<Json> Get(const Resource& r, const std::string& ns, const std::string& name,
                         const std::string& subresource) override {
    return inner_.Get(r, ns, name, subresource);
  }
  kube::Result<Json> List(const Resource& r, const std::string& ns,
                          const kube::ListOptions& options) override {
    return inner_.List(r, ns, options);
  }
  kube::Result<std::unique_ptr<kube::WatchStream>> Watch(
      const Resource& r, const std::string& ns, const kube::WatchOptions& options) override {
    return inner_.Watch(r, ns, options);
  }
  kube::Result<Json> Create(const Resource& r, const std::string& ns, const Json& object,
                            const kube::WriteOptions& options) override {
    Pass();
    return inner_.Create(r, ns, object, options);
  }
  kube::Result<Json> Update(const Resource& r, const std::string& ns, const Json& object,
                            const kube::WriteOptions& options) override {
    Pass();
    return inner_.Update(r, ns, object, options);
  }
  kube::Result<Json> Patch(const Resource& r, const std::string& ns, const std::string& name,
                           kube::PatchType type, const Json& body,
                           const kube::PatchOptions& options) override {
    Pass();
    return inner_.Patch(r, ns, name, type, body, options);
  }
  kube::Result<Json> Delete(const Resource& r, const std::string& ns, const std::string& name,
                            const kube::DeleteOptions& options) override {
    Pass();
    return inner_.Delete(r, ns, name, options);
  }

 private:
  void Pass() {
    std::unique_lock<std::mutex> lock(mu_);
    ++waiting_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
    --waiting_;
  }

  FakeClient& inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  int waiting_ = 0;
};

ObjectRef PodRef(const std::string& name = "llm-worker-0") {
  return ObjectRef{"v1", "Pod", "team", name, "uid-" + name};
}

class EventRecorderTest : public ::testing::Test {
 protected:
  EventRecorderOptions Options() {
    EventRecorderOptions options;
    options.instance = "operator-7d9f";
    options.seed = 42;
    return options;
  }
  void Start(EventRecorderOptions options) {
    recorder_ = std::make_unique<EventRecorder>(fake_, std::move(options), clock_);
  }
  void Start() { Start(Options()); }

  std::vector<Json> Events() const { return fake_.StoredAll(events_); }
  size_t CountActions(const std::string& verb) const {
    size_t n = 0;
    for (const auto& action : fake_.actions()) n += action.verb == verb ? 1 : 0;
    return n;
  }

  const Resource events_ = Resource::Events();
  FakeClient fake_;
  FakeClock clock_;
  std::unique_ptr<EventRecorder> recorder_;  // last: stopped before the rest goes
};

TEST_F(EventRecorderTest, CreatesEventWithAllFields) {
  Start();
  const std::string at = cache::FormatRfc3339(clock_.WallNow());
  recorder_->Record(ObjectRef{"tpujob.dev/v1alpha1", "TPUJob", "team", "llm", "uid-llm"},
                    EventType::kWarning, "WorkerRestarted", "worker 3 exited with code 143");
  ASSERT_TRUE(recorder_->Flush(kWait));

  const std::vector<Json> events = Events();
  ASSERT_THAT(events, SizeIs(1));
  const Json& event = events[0];
  EXPECT_EQ(event["apiVersion"], "v1");
  EXPECT_EQ(event["kind"], "Event");
  EXPECT_THAT(event["metadata"]["name"].get<std::string>(), MatchesRegex("llm\\.[0-9a-f]{16}"));
  EXPECT_EQ(event["metadata"]["namespace"], "team");
  EXPECT_EQ(event["involvedObject"], (Json{{"apiVersion", "tpujob.dev/v1alpha1"},
                                           {"kind", "TPUJob"},
                                           {"namespace", "team"},
                                           {"name", "llm"},
                                           {"uid", "uid-llm"}}));
  EXPECT_EQ(event["reason"], "WorkerRestarted");
  EXPECT_EQ(event["message"], "worker 3 exited with code 143");
  EXPECT_EQ(event["type"], "Warning");
  EXPECT_EQ(event["source"], (Json{{"component", "tpujob-operator"}}));
  EXPECT_EQ(event["reportingComponent"], "tpujob-operator");
  EXPECT_EQ(event["reportingInstance"], "operator-7d9f");
  EXPECT_EQ(event["firstTimestamp"], at);
  EXPECT_EQ(event["lastTimestamp"], at);
  EXPECT_EQ(event["count"], 1);
  EXPECT_FALSE(event.contains("eventTime"));

  const EventRecorder::Stats stats = recorder_->stats();
  EXPECT_EQ(stats.recorded, 1u);
  EXPECT_EQ(stats.written, 1u);
  EXPECT_EQ(stats.aggregated, 0u);
  EXPECT_EQ(stats.dropped, 0u);
  EXPECT_EQ(stats.failed, 0u);
}

TEST_F(EventRecorderTest, InstanceDefaultsToHostName) {
  EventRecorderOptions options = Options();
  options.instance.clear();
  Start(options);
  recorder_->Record(PodRef(), EventType::kNormal, "Created", "created pod");
  ASSERT_TRUE(recorder_->Flush(kWait));
  ASSERT_THAT(Events(), SizeIs(1));
  EXPECT_FALSE(Events()[0]["reportingInstance"].get<std::string>().empty());
}

TEST_F(EventRecorderTest, LogsEveryEventAsOneLogfmtLine) {
  LogCapture capture;
  Start();
  recorder_->Record(PodRef(), EventType::kNormal, "Created", "created pod llm-worker-0");
  recorder_->Record(ObjectRef{"v1", "Node", "", "node-1", "uid-n"}, EventType::kWarning, "Cordoned",
                    "pre-flight failed");
  ASSERT_TRUE(recorder_->Flush(kWait));
  const std::string text = capture.text();
  EXPECT_THAT(text, HasSubstr("level=info msg=\"event\" object=Pod/team/llm-worker-0 type=Normal "
                              "reason=Created message=\"created pod llm-worker-0\"\n"));
  EXPECT_THAT(text, HasSubstr("level=warning msg=\"event\" object=Node/node-1 type=Warning "
                              "reason=Cordoned message=\"pre-flight failed\"\n"));
}

TEST_F(EventRecorderTest, RepeatWithinWindowIncrementsCount) {
  Start();
  const std::string first = cache::FormatRfc3339(clock_.WallNow());
  recorder_->Record(PodRef(), EventType::kWarning, "BackOff", "restarting");
  ASSERT_TRUE(recorder_->Flush(kWait));
  clock_.Advance(minutes(4));
  recorder_->Record(PodRef(), EventType::kWarning, "BackOff", "restarting");
  clock_.Advance(minutes(4));
  const std::string last = cache::FormatRfc3339(clock_.WallNow());
  recorder_->Record(PodRef(), EventType::kWarning, "BackOff", "restarting");
  ASSERT_TRUE(recorder_->Flush(kWait));

  const std::vector<Json> events = Events();
  ASSERT_THAT(events, SizeIs(1));
  EXPECT_EQ(events[0]["count"], 3);
  EXPECT_EQ(events[0]["firstTimestamp"], first);
  EXPECT_EQ(events[0]["lastTimestamp"], last);
  EXPECT_NE(first, last);
  EXPECT_EQ(CountActions("create"), 1u);
  EXPECT_EQ(CountActions("patch"), 2u);
  const EventRecorder::Stats stats = recorder_->stats();
  EXPECT_EQ(stats.written, 3u);
  EXPECT_EQ(stats.aggregated, 2u);
}

TEST_F(EventRecorderTest, DifferentMessageReasonTypeOrObjectIsANewEvent) {
  Start();
  recorder_->Record(PodRef(), EventType::kWarning, "BackOff", "restarting");
  recorder_->Record(PodRef(), EventType::kWarning, "BackOff", "restarting again");
  recorder_->Record(PodRef(), EventType::kWarning, "Failed", "restarting");
  recorder_->Record(PodRef(), EventType::kNormal, "BackOff", "restarting");
  recorder_->Record(PodRef("llm-worker-1"), EventType::kWarning, "BackOff", "restarting");
  ASSERT_TRUE(recorder_->Flush(kWait));
  EXPECT_THAT(Events(), SizeIs(5));
  EXPECT_EQ(recorder_->stats().aggregated, 0u);
}

TEST_F(EventRecorderTest, RepeatAfterWindowIsANewEvent) {
  Start();
  recorder_->Record(PodRef(), EventType::kWarning, "BackOff", "restarting");
  ASSERT_TRUE(recorder_->Flush(kWait));
  clock_.Advance(minutes(10) + seconds(1));
  recorder_->Record(PodRef(), EventType::kWarning, "BackOff", "restarting");
  ASSERT_TRUE(recorder_->Flush(kWait));
  const std::vector<Json> events = Events();
  ASSERT_THAT(events, SizeIs(2));
  EXPECT_EQ(events[0]["count"], 1);
  EXPECT_EQ(events[1]["count"], 1);
  EXPECT_NE(events[0]["metadata"]["name"], events[1]["metadata"]["name"]);
}

TEST_F(EventRecorderTest, AggregateGoneFromServerIsCreatedAgain) {
  Start();
  recorder_->Record(PodRef(), EventType::kWarning, "BackOff", "restarting");
  ASSERT_TRUE(recorder_->Flush(kWait));
  ASSERT_THAT(Events(), SizeIs(1));
  const std::string name = Events()[0]["metadata"]["name"];
  ASSERT_TRUE(fake_.Remove(events_, "team", name));  // expired by the API server

  recorder_->Record(PodRef(), EventType::kWarning, "BackOff", "restarting");
  ASSERT_TRUE(recorder_->Flush(kWait));
  const std::vector<Json> events = Events();
  ASSERT_THAT(events, SizeIs(1));
  EXPECT_NE(events[0]["metadata"]["name"], name);
  EXPECT_EQ(events[0]["count"], 1);
  EXPECT_EQ(CountActions("patch"), 1u);
  EXPECT_EQ(recorder_->stats().written, 2u);
  EXPECT_EQ(recorder_->stats().failed, 0u);
}

TEST_F(EventRecorderTest, FailuresAreCountedNotRetried) {
  Start();
  fake_.FailNext("create", kube::ApiError(403, "Forbidden"));
  recorder_->Record(PodRef(), EventType::kNormal, "Created", "created pod");
  ASSERT_TRUE(recorder_->Flush(kWait));
  EXPECT_THAT(Events(), SizeIs(0));
  EXPECT_EQ(CountActions("create"), 1u);

  recorder_->Record(PodRef(), EventType::kNormal, "Created", "created pod");
  ASSERT_TRUE(recorder_->Flush(kWait));
  fake_.FailNext("patch", kube::ApiError(500, "InternalError"));
  recorder_->Record(PodRef(), EventType::kNormal, "Created", "created pod");
  ASSERT_TRUE(recorder_->Flush(kWait));
  const std::vector<Json> events = Events();
  ASSERT_THAT(events, SizeIs(1));
  EXPECT_EQ(events[0]["count"], 1);
  const EventRecorder::Stats stats = recorder_->stats();
  EXPECT_EQ(stats.recorded, 3u);
  EXPECT_EQ(stats.written, 1u);
  EXPECT_EQ(stats.failed, 2u);
}

TEST_F(EventRecorderTest, ClusterScopedObjectGoesToDefaultNamespace) {
  Start();
  recorder_->Record(ObjectRef{"v1", "Node", "", "node-1", "uid-n"}, EventType::kWarning, "Cordoned",
                    "pre-flight check dns failed");
  ASSERT_TRUE(recorder_->Flush(kWait));
  const std::vector<Json> events = Events();
  ASSERT_THAT(events, SizeIs(1));
  EXPECT_EQ(events[0]["metadata"]["namespace"], "default");
  EXPECT_FALSE(events[0]["involvedObject"].contains("namespace"));
  EXPECT_EQ(events[0]["involvedObject"]["name"], "node-1");
}

TEST_F(EventRecorderTest, LongMessageIsCutToValidUtf8) {
  Start();
  // 1023 ASCII bytes, then a 2-byte character that would end past the limit.
  const std::string message = std::string(1023, 'x') + "\xC3\xA9" + "tail";
  recorder_->Record(PodRef(), EventType::kNormal, "Long", message);
  recorder_->Record(PodRef(), EventType::kNormal, "Binary", "exit \xFF\xFE code");
  ASSERT_TRUE(recorder_->Flush(kWait));
  const std::vector<Json> events = Events();
  ASSERT_THAT(events, SizeIs(2));
  for (const Json& event : events) {
    if (event["reason"] == "Long") {
      EXPECT_EQ(event["message"], std::string(1023, 'x'));
    } else {
      EXPECT_EQ(event["message"], "exit \xEF\xBF\xBD\xEF\xBF\xBD code");
    }
  }
  EXPECT_EQ(recorder_->stats().failed, 0u);
}

TEST_F(EventRecorderTest, FlushWaitsForTheWrite) {
  GatedClient gated(fake_);
  EventRecorder recorder(gated, Options(), clock_);
  gated.Close();
  recorder.Record(PodRef(), EventType::kNormal, "Created", "created pod");
  ASSERT_TRUE(gated.AwaitWaiting(1));
  EXPECT_FALSE(recorder.Flush(milliseconds(20)));
  EXPECT_THAT(Events(), SizeIs(0));
  gated.Open();
  EXPECT_TRUE(recorder.Flush(kWait));
  EXPECT_THAT(Events(), SizeIs(1));
  EXPECT_TRUE(recorder.Flush(milliseconds(0)));  // nothing pending
}

TEST_F(EventRecorderTest, DropsWhenTooManyArePendingAndRecordNeverBlocks) {
  LogCapture capture;
  GatedClient gated(fake_);
  EventRecorderOptions options = Options();
  options.max_pending = 2;
  EventRecorder recorder(gated, options, clock_);
  gated.Close();
  recorder.Record(PodRef("p0"), EventType::kNormal, "Created", "0");
  ASSERT_TRUE(gated.AwaitWaiting(1));  // p0 in flight, stuck in the API call
  for (int i = 1; i <= 5; ++i) {
    recorder.Record(PodRef("p" + std::to_string(i)), EventType::kNormal, "Created",
                    std::to_string(i));
  }
  EventRecorder::Stats stats = recorder.stats();
  EXPECT_EQ(stats.recorded, 6u);
  EXPECT_EQ(stats.dropped, 3u);  // p1 and p2 wait; p3..p5 do not fit

  gated.Open();
  ASSERT_TRUE(recorder.Flush(kWait));
  stats = recorder.stats();
  EXPECT_EQ(stats.written, 3u);
  EXPECT_EQ(stats.dropped, 3u);
  std::vector<std::string> involved;
  for (const Json& event : Events()) involved.push_back(event["involvedObject"]["name"]);
  EXPECT_THAT(involved, ::testing::UnorderedElementsAre("p0", "p1", "p2"));

  // There is room again: new events are written.
  recorder.Record(PodRef("p6"), EventType::kNormal, "Created", "6");
  ASSERT_TRUE(recorder.Flush(kWait));
  EXPECT_EQ(recorder.stats().written, 4u);

  // One warning for the burst, one line when it ended.
  const std::string text = capture.text();
  const std::string warning = "msg=\"dropping events: too many waiting to be written\"";
  EXPECT_EQ(text.find(warning), text.rfind(warning));
  EXPECT_THAT(text, HasSubstr("level=warning " + warning + " max_pending=2 object=Pod/team/p3"));
  EXPECT_THAT(text, HasSubstr("msg=\"writing events again\" dropped=3\n"));
}

TEST_F(EventRecorderTest, DestructorWritesWhatIsPending) {
  GatedClient gated(fake_);
  {
    EventRecorder recorder(gated, Options(), clock_);
    gated.Close();
    for (int i = 0; i < 3; ++i) {
      recorder.Record(PodRef("p" + std::to_string(i)), EventType::kNormal, "Created", "created");
    }
    ASSERT_TRUE(gated.AwaitWaiting(1));
    gated.Open();
  }
  EXPECT_THAT(Events(), SizeIs(3));
}

TEST_F(EventRecorderTest, DestructorGivesUpAfterStopTimeout) {
  GatedClient gated(fake_);
  EventRecorderOptions options = Options();
  options.stop_timeout = milliseconds(0);
  auto recorder = std::make_unique<EventRecorder>(gated, options, clock_);
  gated.Close();
  for (int i = 0; i < 3; ++i) {
    recorder->Record(PodRef("p" + std::to_string(i)), EventType::kNormal, "Created", "created");
  }
  ASSERT_TRUE(gated.AwaitWaiting(1));
  // Once the destructor has begun, the write in flight completes; the stop timeout has passed
  // by then, so the two events queued behind it are dropped.
  LogCapture capture;
  std::thread opener([&] {
    EXPECT_TRUE(capture.AwaitLine("msg=\"writing pending events before stopping\" pending=3"));
    gated.Open();
  });
  recorder.reset();
  opener.join();
  EXPECT_THAT(Events(), SizeIs(1));
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::controller
