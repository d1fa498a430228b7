#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/clock.h"
#include "preflight/checks.h"
#include "preflight/report.h"

namespace tpujob::preflight {
namespace TPUJOB_TEST_NS {

using ::testing::HasSubstr;

ItemResult Passed(std::string item, std::string value = "v", std::string threshold = "t") {
  ItemResult r;
  r.item = std::move(item);
  r.passed = true;
  r.value = std::move(value);
  r.threshold = std::move(threshold);
  return r;
}

ItemResult Failed(std::string item, Fault fault, std::string message = "broken") {
  ItemResult r;
  r.item = std::move(item);
  r.fault = fault;
  r.value = "v";
  r.threshold = "t";
  r.message = std::move(message);
  return r;
}

void ExpectSameItems(const std::vector<ItemResult>& got, const std::vector<ItemResult>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].item, want[i].item);
    EXPECT_EQ(got[i].passed, want[i].passed);
    EXPECT_EQ(got[i].fault, want[i].fault);
    EXPECT_EQ(got[i].value, want[i].value);
    EXPECT_EQ(got[i].threshold, want[i].threshold);
    EXPECT_EQ(got[i].message, want[i].message);
  }
}

TEST(PreflightReportTest, VerdictAndExitCode) {
  EXPECT_EQ(Summarize({}), Verdict::kPass);
  EXPECT_EQ(Summarize({Passed("dns"), Passed("ulimit")}), Verdict::kPass);
  EXPECT_EQ(Summarize({Passed("ulimit"), Failed("dns", Fault::kConfig)}), Verdict::kConfigFault);
  EXPECT_EQ(Summarize({Failed("accelerator", Fault::kNode)}), Verdict::kNodeFault);
  // Both kinds: the node fault wins.
  EXPECT_EQ(Summarize({Failed("disk-size shm", Fault::kConfig), Failed("ulimit", Fault::kNode)}),
            Verdict::kNodeFault);
  EXPECT_EQ(ExitCode(Verdict::kPass), 0);
  EXPECT_EQ(ExitCode(Verdict::kNodeFault), 10);
  EXPECT_EQ(ExitCode(Verdict::kConfigFault), 11);
  EXPECT_EQ(ToString(Verdict::kNodeFault), "node-fault");
  EXPECT_EQ(ToString(Verdict::kConfigFault), "config-fault");
}

TEST(PreflightReportTest, SerializesCompactlyInTheDocumentedOrder) {
  ItemResult dns = Passed("dns", "2/2 resolved", "all 2 within 120s");
  dns.log_fields = {{"not", "serialized"}};
  const Report report =
      MakeReport("node-7", {dns, Failed("disk-size shm", Fault::kConfig, "/dev/shm is 0.07 GB")});
  EXPECT_EQ(report.verdict, Verdict::kConfigFault);
  EXPECT_EQ(SerializeReport(report),
            R"({"version":1,"node":"node-7","verdict":"config-fault","items":[)"
            R"({"item":"dns","verdict":"pass","value":"2/2 resolved","threshold":"all 2 within )"
            R"(120s","message":""},)"
            R"({"item":"disk-size shm","verdict":"fail","fault":"config","value":"v",)"
            R"("threshold":"t","message":"/dev/shm is 0.07 GB"}]})");
}

TEST(PreflightReportTest, RoundTrip) {
  const std::vector<ItemResult> items = {
      Passed("disk-size root", "120 GB", "> 32 GB"),
      Failed("ulimit", Fault::kNode, "limits too low: nofile=1024 (need > 1000000)"),
      Failed("dns", Fault::kConfig, "quote \" backslash \\ newline \n tab \t unicode \u00e9"),
  };
  const Report report = MakeReport("gke-tpu-pool-a-1", items);
  const std::optional<Report> parsed = ParseReport(SerializeReport(report));
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->version, 1);
  EXPECT_EQ(parsed->node, "gke-tpu-pool-a-1");
  EXPECT_EQ(parsed->verdict, Verdict::kNodeFault);
  ExpectSameItems(parsed->items, items);
}

TEST(PreflightReportTest, SkippedItemsRoundTripAsPassedAndSkipped) {
  ItemResult skipped = Passed("disk-size cache", "", "> 32 GB");
  skipped.skipped = true;
  skipped.message = "not checked: the pod mounts no volume at /cache";
  const std::string text = SerializeReport(MakeReport("n", {skipped}));
  EXPECT_NE(text.find(R"("verdict":"pass","skipped":true)"), std::string::npos) << text;
  const std::optional<Report> parsed = ParseReport(text);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->verdict, Verdict::kPass);
  ASSERT_EQ(parsed->items.size(), 1u);
  EXPECT_TRUE(parsed->items[0].passed);
  EXPECT_TRUE(parsed->items[0].skipped);
  EXPECT_FALSE(ParseReport(R"({"version":1,"node":"n","verdict":"pass","items":[)"
                           R"({"item":"x","verdict":"pass","skipped":"yes"}]})"));
}

TEST(PreflightReportTest, ThousandFailingHostnamesStillFitTheTerminationMessage) {
  std::vector<std::string> names;
  for (int i = 0; i < 1000; ++i) {
    names.push_back("llm-pretrain-worker-" + std::to_string(i) + ".llm-pretrain.team-a.svc");
  }
  FakeClock clock;
  const Resolver fail = [](const std::string&) {
    return std::expected<void, std::string>(std::unexpect, "Name or service not known");
  };
  DnsOptions options;
  options.hostnames = names;
  options.timeout = std::chrono::seconds(0);
  const ItemResult dns = CheckDns(options, fail, clock);
  ASSERT_GT(dns.message.size(), 30000u);
  const ItemResult ulimit = Failed("ulimit", Fault::kNode, "limits too low: nofile=1024");
  const Report report =
      MakeReport("node-a", {Passed("disk-size root"), Passed("disk-size shm"),
                            Passed("disk-size cache"), ulimit, Passed("accelerator"), dns});

  const std::string json = SerializeReport(report);
  EXPECT_LE(json.size(), kTerminationMessageLimit);
  EXPECT_GT(json.size(), kTerminationMessageLimit - 200) << "shortened more than needed";
  const std::optional<Report> parsed = ParseReport(json);
  ASSERT_TRUE(parsed.has_value()) << json;
  EXPECT_EQ(parsed->verdict, Verdict::kNodeFault);
  ASSERT_EQ(parsed->items.size(), 6u);
  EXPECT_EQ(parsed->items[3].message, ulimit.message);  // only the long message was cut
  const ItemResult& got = parsed->items[5];
  EXPECT_EQ(got.item, "dns");
  EXPECT_FALSE(got.passed);
  EXPECT_EQ(got.fault, Fault::kConfig);
  EXPECT_EQ(got.value, "0/1000 resolved");
  EXPECT_THAT(got.message, HasSubstr("1000 of 1000 peer names did not resolve"));
  EXPECT_TRUE(got.message.ends_with("...")) << got.message;
}

TEST(PreflightReportTest, EverythingOversizedIsShortenedButNamesAndVerdictsStay) {
  const std::string huge(10000, 'x');
  std::vector<ItemResult> items;
  for (const char* name :
       {"disk-size root", "disk-size shm", "disk-size cache", "ulimit", "accelerator", "dns"}) {
    ItemResult item = Failed(name, Fault::kNode, huge);
    item.value = huge;
    item.threshold = huge;
    items.push_back(item);
  }
  const Report report = MakeReport(huge, items);
  const std::string json = SerializeReport(report);
  EXPECT_LE(json.size(), kTerminationMessageLimit);
  const std::optional<Report> parsed = ParseReport(json);
  ASSERT_TRUE(parsed.has_value()) << json;
  ASSERT_EQ(parsed->items.size(), 6u);
  EXPECT_EQ(parsed->items[5].item, "dns");
  EXPECT_EQ(parsed->items[5].fault, Fault::kNode);
}

TEST(PreflightReportTest, SmallLimitsDropPassedItemsBeforeFailedOnes) {
  std::vector<ItemResult> items;
  for (int i = 0; i < 40; ++i) items.push_back(Passed("passed-item-" + std::to_string(i), "", ""));
  items.push_back(Failed("accelerator", Fault::kNode, ""));
  const std::string json = SerializeReport(MakeReport("n", items), 1024);
  EXPECT_LE(json.size(), 1024u);
  const std::optional<Report> parsed = ParseReport(json);
  ASSERT_TRUE(parsed.has_value()) << json;
  EXPECT_EQ(parsed->items.back().item, "accelerator");
  EXPECT_LT(parsed->items.size(), items.size());
}

TEST(PreflightReportTest, CutsOnCharacterBoundariesAndRepairsInvalidUtf8) {
  // Two-byte characters: a cut in the middle of one would leave invalid UTF-8 behind.
  std::string accents;
  for (int i = 0; i < 3000; ++i) accents += "\u00e9";
  const std::string json = SerializeReport(
      MakeReport("node", {Failed("dns", Fault::kConfig, accents),
                          Failed("ulimit", Fault::kNode, std::string("bad \xff\xfe bytes"))}));
  EXPECT_LE(json.size(), kTerminationMessageLimit);
  const std::optional<Report> parsed = ParseReport(json);
  ASSERT_TRUE(parsed.has_value()) << json;
  EXPECT_TRUE(parsed->items[0].message.starts_with("\u00e9\u00e9"));
  EXPECT_THAT(parsed->items[1].message, HasSubstr("bad "));
}

TEST(PreflightReportTest, ParseIgnoresUnknownFieldsAndAcceptsLaterVersions) {
  const std::optional<Report> parsed = ParseReport(R"({
      "version": 2, "node": "n", "verdict": "pass", "durationSeconds": 3,
      "items": [{"item": "dns", "verdict": "pass", "extra": [1, 2]}]})");
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->version, 2);
  ASSERT_EQ(parsed->items.size(), 1u);
  EXPECT_TRUE(parsed->items[0].passed);
  EXPECT_EQ(parsed->items[0].value, "");
}

TEST(PreflightReportTest, ParseRejectsAnythingElse) {
  const std::string valid = SerializeReport(MakeReport("n", {Failed("dns", Fault::kConfig)}));
  ASSERT_TRUE(ParseReport(valid).has_value());
  for (const std::string& input : std::vector<std::string>{
           "",
           "not json",
           "Error: container failed",
           "[]",
           "{}",
           "null",
           R"({"version":1})",
           valid.substr(0, valid.size() / 2),  // cut short
           // The format of an earlier draft, seen in old pod statuses.
           R"({"node":"n","items":[{"item":"dns","ok":false,"detail":"x"}]})",
           R"({"version":"1","node":"n","verdict":"pass","items":[]})",
           R"({"version":0,"node":"n","verdict":"pass","items":[]})",
           R"({"version":1.5,"node":"n","verdict":"pass","items":[]})",
           R"({"version":1,"node":7,"verdict":"pass","items":[]})",
           R"({"version":1,"node":"n","verdict":"maybe","items":[]})",
           R"({"version":1,"node":"n","verdict":"pass","items":{}})",
           R"({"version":1,"node":"n","verdict":"pass","items":["dns"]})",
           R"({"version":1,"node":"n","verdict":"pass","items":[{"verdict":"pass"}]})",
           R"({"version":1,"node":"n","verdict":"pass","items":[{"item":"dns","verdict":"ok"}]})",
           R"({"version":1,"node":"n","verdict":"node-fault",)"
           R"("items":[{"item":"dns","verdict":"fail"}]})",
           R"({"version":1,"node":"n","verdict":"node-fault",)"
           R"("items":[{"item":"dns","verdict":"fail","fault":"user"}]})",
           R"({"version":1,"node":"n","verdict":"pass",)"
           R"("items":[{"item":"dns","verdict":"pass","message":3}]})",
       }) {
    EXPECT_FALSE(ParseReport(input).has_value()) << input;
  }
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::preflight
