#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kube/watch.h"

namespace tpujob::kube {
namespace TPUJOB_TEST_NS {

using ::testing::HasSubstr;

const std::string kAdded =
    R"({"type":"ADDED",)"
    R"("object":{"kind":"Pod","metadata":{"name":"p-0","resourceVersion":"11"}}})";
const std::string kModified =
    R"({"type":"MODIFIED",)"
    R"("object":{"kind":"Pod","metadata":{"name":"p-0","resourceVersion":"12"}}})";
const std::string kDeleted =
    R"({"type":"DELETED",)"
    R"("object":{"kind":"Pod","metadata":{"name":"p-1","resourceVersion":"13"}}})";
const std::string kBookmark =
    R"({"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"20"}}})";
const std::string kExpired =
    R"({"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},)"
    R"json("status":"Failure","message":"too old resource version: 5 (100)",)json"
    R"("reason":"Expired",)"
    R"("code":410}})";

std::string NameOf(const WatchEvent& event) {
  return event.object["metadata"]["name"].get<std::string>();
}

std::string ResourceVersionOf(const WatchEvent& event) {
  return event.object["metadata"]["resourceVersion"].get<std::string>();
}

TEST(KubeWatchTest, EventTypeNames) {
  EXPECT_EQ(ToString(WatchEventType::kAdded), "ADDED");
  EXPECT_EQ(ToString(WatchEventType::kModified), "MODIFIED");
  EXPECT_EQ(ToString(WatchEventType::kDeleted), "DELETED");
  EXPECT_EQ(ToString(WatchEventType::kBookmark), "BOOKMARK");
  EXPECT_EQ(ToString(WatchEventType::kError), "ERROR");
}

TEST(KubeWatchTest, DecodeLineEachType) {
  auto added = WatchDecoder::DecodeLine(kAdded);
  ASSERT_TRUE(added.has_value()) << added.error().ToString();
  EXPECT_EQ(added->type, WatchEventType::kAdded);
  EXPECT_EQ(NameOf(*added), "p-0");

  auto modified = WatchDecoder::DecodeLine(kModified);
  ASSERT_TRUE(modified.has_value());
  EXPECT_EQ(modified->type, WatchEventType::kModified);
  EXPECT_EQ(ResourceVersionOf(*modified), "12");

  auto deleted = WatchDecoder::DecodeLine(kDeleted);
  ASSERT_TRUE(deleted.has_value());
  EXPECT_EQ(deleted->type, WatchEventType::kDeleted);
  EXPECT_EQ(NameOf(*deleted), "p-1");
}

TEST(KubeWatchTest, BookmarkCarriesOnlyTheResourceVersion) {
  auto bookmark = WatchDecoder::DecodeLine(kBookmark);
  ASSERT_TRUE(bookmark.has_value());
  EXPECT_EQ(bookmark->type, WatchEventType::kBookmark);
  EXPECT_EQ(ResourceVersionOf(*bookmark), "20");
  EXPECT_FALSE(bookmark->object["metadata"].contains("name"));
}

TEST(KubeWatchTest, ErrorEventWithExpiredStatusIsGone) {
  auto event = WatchDecoder::DecodeLine(kExpired);
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->type, WatchEventType::kError);
  EXPECT_EQ(event->error.kind, ErrorKind::kApi);
  EXPECT_EQ(event->error.http_status, 410);
  EXPECT_TRUE(event->error.IsGone());
  EXPECT_EQ(event->error.message, "too old resource version: 5 (100)");
  EXPECT_EQ(event->object["reason"], "Expired");  // the raw Status is kept too
}

TEST(KubeWatchTest, InvalidLinesAreDecodeErrors) {
  auto not_json = WatchDecoder::DecodeLine("{\"type\":\"ADDED\",");
  ASSERT_FALSE(not_json.has_value());
  EXPECT_EQ(not_json.error().kind, ErrorKind::kDecode);
  EXPECT_THAT(not_json.error().message, HasSubstr("not valid JSON"));
  EXPECT_THAT(not_json.error().message, HasSubstr("{\"type\":\"ADDED\","));

  auto unknown = WatchDecoder::DecodeLine(R"({"type":"RENAMED","object":{}})");
  ASSERT_FALSE(unknown.has_value());
  EXPECT_EQ(unknown.error().kind, ErrorKind::kDecode);
  EXPECT_THAT(unknown.error().message, HasSubstr("unknown watch event type \"RENAMED\""));

  auto no_object = WatchDecoder::DecodeLine(R"({"type":"ADDED"})");
  ASSERT_FALSE(no_object.has_value());
  EXPECT_THAT(no_object.error().message, HasSubstr("has no object"));

  auto object_not_map = WatchDecoder::DecodeLine(R"({"type":"ADDED","object":"pod"})");
  ASSERT_FALSE(object_not_map.has_value());
  EXPECT_THAT(object_not_map.error().message, HasSubstr("has no object"));

  auto no_type = WatchDecoder::DecodeLine(R"({"object":{}})");
  ASSERT_FALSE(no_type.has_value());
  EXPECT_THAT(no_type.error().message, HasSubstr("has no type"));

  auto array = WatchDecoder::DecodeLine("[1,2,3]");
  ASSERT_FALSE(array.has_value());
  EXPECT_THAT(array.error().message, HasSubstr("not a JSON object"));
}

TEST(KubeWatchTest, DecodeErrorExcerptIsTruncated) {
  const std::string garbage(10000, 'z');
  auto result = WatchDecoder::DecodeLine(garbage);
  ASSERT_FALSE(result.has_value());
  EXPECT_LT(result.error().message.size(), 400u);
  EXPECT_THAT(result.error().message, HasSubstr("(10000 bytes)"));
}

TEST(KubeWatchTest, OneEventSplitByteByByte) {
  WatchDecoder decoder;
  const std::string wire = kAdded + "\n";
  for (size_t i = 0; i + 1 < wire.size(); ++i) {
    EXPECT_TRUE(decoder.Feed(wire.substr(i, 1)).empty()) << "at byte " << i;
    EXPECT_EQ(decoder.pending_bytes(), i + 1);
  }
  auto events = decoder.Feed("\n");
  ASSERT_EQ(events.size(), 1u);
  ASSERT_TRUE(events[0].has_value());
  EXPECT_EQ(events[0]->type, WatchEventType::kAdded);
  EXPECT_EQ(NameOf(*events[0]), "p-0");
  EXPECT_EQ(decoder.pending_bytes(), 0u);
}

TEST(KubeWatchTest, ManyEventsInOneChunkAndAPartialTail) {
  WatchDecoder decoder;
  const std::string chunk =
      kAdded + "\n" + kModified + "\n" + kBookmark + "\n" + kDeleted.substr(0, 10);
  auto events = decoder.Feed(chunk);
  ASSERT_EQ(events.size(), 3u);
  ASSERT_TRUE(events[0].has_value() && events[1].has_value() && events[2].has_value());
  EXPECT_EQ(events[0]->type, WatchEventType::kAdded);
  EXPECT_EQ(events[1]->type, WatchEventType::kModified);
  EXPECT_EQ(events[2]->type, WatchEventType::kBookmark);
  EXPECT_EQ(decoder.pending_bytes(), 10u);

  events = decoder.Feed(kDeleted.substr(10) + "\n" + kExpired + "\n");
  ASSERT_EQ(events.size(), 2u);
  ASSERT_TRUE(events[0].has_value() && events[1].has_value());
  EXPECT_EQ(events[0]->type, WatchEventType::kDeleted);
  EXPECT_EQ(NameOf(*events[0]), "p-1");
  EXPECT_EQ(events[1]->type, WatchEventType::kError);
  EXPECT_TRUE(events[1]->error.IsGone());
  EXPECT_EQ(decoder.pending_bytes(), 0u);
}

TEST(KubeWatchTest, GarbageLineYieldsErrorAndDecodingContinues) {
  WatchDecoder decoder;
  auto events = decoder.Feed(kAdded + "\nthis is not json\n" + R"({"type":"NOPE","object":{}})" +
                             "\n" + kModified + "\n");
  ASSERT_EQ(events.size(), 4u);
  ASSERT_TRUE(events[0].has_value());
  EXPECT_EQ(events[0]->type, WatchEventType::kAdded);
  ASSERT_FALSE(events[1].has_value());
  EXPECT_EQ(events[1].error().kind, ErrorKind::kDecode);
  EXPECT_THAT(events[1].error().message, HasSubstr("this is not json"));
  ASSERT_FALSE(events[2].has_value());
  EXPECT_THAT(events[2].error().message, HasSubstr("\"NOPE\""));
  ASSERT_TRUE(events[3].has_value());
  EXPECT_EQ(events[3]->type, WatchEventType::kModified);
}

TEST(KubeWatchTest, BlankLinesAndCarriageReturnsAreIgnored) {
  WatchDecoder decoder;
  auto events = decoder.Feed("\n\n   \n" + kAdded + "\r\n\r\n\t\n" + kBookmark + "\n\n");
  ASSERT_EQ(events.size(), 2u);
  ASSERT_TRUE(events[0].has_value() && events[1].has_value());
  EXPECT_EQ(events[0]->type, WatchEventType::kAdded);
  EXPECT_EQ(events[1]->type, WatchEventType::kBookmark);
  EXPECT_EQ(decoder.pending_bytes(), 0u);
}

TEST(KubeWatchTest, OverlongCompleteLineIsDroppedWithOneError) {
  WatchDecoder decoder;
  decoder.set_max_line_bytes(200);
  const std::string big =
      R"({"type":"ADDED","object":{"data":")" + std::string(500, 'a') + R"("}})";
  auto events = decoder.Feed(big + "\n" + kAdded + "\n");
  ASSERT_EQ(events.size(), 2u);
  ASSERT_FALSE(events[0].has_value());
  EXPECT_EQ(events[0].error().kind, ErrorKind::kDecode);
  EXPECT_THAT(events[0].error().message, HasSubstr("exceeds the limit of 200 bytes"));
  ASSERT_TRUE(events[1].has_value());
  EXPECT_EQ(NameOf(*events[1]), "p-0");
}

TEST(KubeWatchTest, OverlongPartialLineIsDroppedUntilItsNewline) {
  WatchDecoder decoder;
  decoder.set_max_line_bytes(200);
  const std::string big =
      R"({"type":"ADDED","object":{"data":")" + std::string(1000, 'a') + R"("}})";
  std::vector<Result<WatchEvent>> all;
  for (size_t offset = 0; offset < big.size(); offset += 64) {
    for (auto& event : decoder.Feed(big.substr(offset, 64))) all.push_back(std::move(event));
    EXPECT_LE(decoder.pending_bytes(), 201u);  // memory stays bounded
  }
  ASSERT_EQ(all.size(), 1u);  // reported once, not once per chunk
  ASSERT_FALSE(all[0].has_value());
  EXPECT_THAT(all[0].error().message, HasSubstr("exceeds the limit of 200 bytes"));

  // The rest of the long line is discarded; the next line decodes normally.
  auto events = decoder.Feed("aaaa\"}}\n" + kModified + "\n");
  ASSERT_EQ(events.size(), 1u);
  ASSERT_TRUE(events[0].has_value());
  EXPECT_EQ(events[0]->type, WatchEventType::kModified);
  EXPECT_EQ(decoder.pending_bytes(), 0u);
}

// Whether an overlong line arrives whole or is given up part way, it is reported alike.
TEST(KubeWatchTest, OverlongLineSaysTheSameHoweverItArrives) {
  const std::string big =
      R"({"type":"ADDED","object":{"data":")" + std::string(1000, 'a') + R"("}})" + "\n";
  for (const size_t limit : {300u, 100u, 10u}) {  // above and below the excerpt's length
    WatchDecoder whole;
    whole.set_max_line_bytes(limit);
    auto once = whole.Feed(big);
    WatchDecoder pieces;
    pieces.set_max_line_bytes(limit);
    std::vector<Result<WatchEvent>> split;
    for (size_t offset = 0; offset < big.size(); offset += 64) {
      for (auto& event : pieces.Feed(big.substr(offset, 64))) split.push_back(std::move(event));
    }
    ASSERT_EQ(once.size(), 1u) << limit;
    ASSERT_EQ(split.size(), 1u) << limit;
    ASSERT_FALSE(once[0].has_value());
    ASSERT_FALSE(split[0].has_value());
    EXPECT_EQ(once[0].error().message, split[0].error().message) << limit;
    EXPECT_THAT(once[0].error().message,
                HasSubstr("exceeds the limit of " + std::to_string(limit) + " bytes"));
  }
}

TEST(KubeWatchTest, LineExactlyAtTheLimitIsAccepted) {
  WatchDecoder decoder;
  decoder.set_max_line_bytes(kAdded.size());
  auto events = decoder.Feed(kAdded + "\r\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(events[0].has_value());
}

// --- Undecoded events and their digest -----------------------------------------------------------

// A node event as the API server writes it; every argument is one field that may differ.
std::string NodeLine(const std::string& type, const std::string& version,
                     const std::string& heartbeat, const std::string& ready = "True",
                     const std::string& managed_time = "2026-11-29T08:00:00Z",
                     const std::string& annotation = "x",
                     const std::string& transition = "2026-11-29T07:00:00Z") {
  return R"({"type":")" + type + R"(","object":{"kind":"Node","apiVersion":"v1",)" +
         R"("metadata":{"name":"n-0","resourceVersion":")" + version +
         R"(","annotations":{"note":")" + annotation +
         R"("},"managedFields":[{"manager":"kwok","time":")" + managed_time +
         R"(","fieldsV1":{"f:status":{"f:conditions":{"f:lastHeartbeatTime":{}}}}}]},)" +
         R"("status":{"conditions":[{"lastHeartbeatTime":")" + heartbeat +
         R"(","lastTransitionTime":")" + transition + R"(","status":")" + ready +
         R"(","type":"Ready"}],"lastHeartbeatTime":"not a condition's"}}})";
}

WatchDecoder NodeDecoder() {
  WatchDecoder decoder;
  decoder.set_volatile_fields(std::make_shared<VolatileFields>(std::vector<std::string>{
      "metadata.managedFields[].time", "status.conditions[].lastHeartbeatTime"}));
  return decoder;
}

uint64_t DigestOf(WatchDecoder& decoder, const std::string& line) {
  Result<WatchEvent> event = decoder.Decode(line);
  EXPECT_TRUE(event.has_value()) << line;
  if (!event || !event->undecoded) {
    ADD_FAILURE() << "not undecoded: " << line;
    return 0;
  }
  return event->undecoded->digest;
}

TEST(KubeWatchTest, UndecodedEventCarriesTheLineAndTheObjectsIdentity) {
  WatchDecoder decoder = NodeDecoder();
  const std::string line = NodeLine("MODIFIED", "42", "2026-11-29T08:00:10Z");
  std::vector<Result<WatchEvent>> events = decoder.Feed(line + "\n");
  ASSERT_EQ(events.size(), 1u);
  ASSERT_TRUE(events[0].has_value()) << events[0].error().ToString();
  EXPECT_EQ(events[0]->type, WatchEventType::kModified);
  EXPECT_TRUE(events[0]->object.is_null());
  ASSERT_TRUE(events[0]->undecoded.has_value());
  EXPECT_EQ(events[0]->undecoded->line, line);
  EXPECT_EQ(events[0]->undecoded->name, "n-0");
  EXPECT_EQ(events[0]->undecoded->ns, "");
  EXPECT_EQ(events[0]->undecoded->resource_version, "42");
  EXPECT_NE(events[0]->undecoded->digest, 0u);

  // The line decodes to what the decoder without volatile fields gives.
  Result<WatchEvent> decoded = WatchDecoder::DecodeLine(events[0]->undecoded->line);
  ASSERT_TRUE(decoded.has_value());
  EXPECT_EQ(decoded->object["metadata"]["resourceVersion"], "42");
}

TEST(KubeWatchTest, DigestLeavesOutOnlyTheVolatileValues) {
  WatchDecoder decoder = NodeDecoder();
  const uint64_t base = DigestOf(decoder, NodeLine("MODIFIED", "42", "2026-11-29T08:00:10Z"));
  // Heartbeat, managedFields time, resourceVersion and ADDED against MODIFIED: the same.
  EXPECT_EQ(DigestOf(decoder, NodeLine("MODIFIED", "43", "2026-11-29T08:00:50Z")), base);
  EXPECT_EQ(DigestOf(decoder, NodeLine("ADDED", "44", "2026-11-29T08:01:30Z", "True",
                                       "2026-11-29T08:01:30Z")),
            base);
  // Anything else: different.
  EXPECT_NE(DigestOf(decoder, NodeLine("MODIFIED", "45", "2026-11-29T08:00:10Z", "False")), base);
  EXPECT_NE(DigestOf(decoder, NodeLine("MODIFIED", "45", "2026-11-29T08:00:10Z", "True",
                                       "2026-11-29T08:00:00Z", "y")),
            base);
  EXPECT_NE(DigestOf(decoder, NodeLine("MODIFIED", "45", "2026-11-29T08:00:10Z", "True",
                                       "2026-11-29T08:00:00Z", "x", "2026-11-29T07:00:01Z")),
            base);
  // A key of the same name on no volatile path stays in: status.lastHeartbeatTime.
  std::string other = NodeLine("MODIFIED", "42", "2026-11-29T08:00:10Z");
  other.replace(other.find("not a condition's"), 17, "changed");
  EXPECT_NE(DigestOf(decoder, other), base);
  // A volatile key's text inside a string value is only text.
  EXPECT_NE(DigestOf(decoder, NodeLine("MODIFIED", "42", "2026-11-29T08:00:10Z", "True",
                                       "2026-11-29T08:00:00Z", R"(\"lastHeartbeatTime\":\"1\")")),
            DigestOf(decoder, NodeLine("MODIFIED", "42", "2026-11-29T08:00:10Z", "True",
                                       "2026-11-29T08:00:00Z", R"(\"lastHeartbeatTime\":\"2\")")));
}

TEST(KubeWatchTest, BookmarksErrorsAndUnreadableLinesAreDecodedAsBefore) {
  WatchDecoder decoder = NodeDecoder();
  Result<WatchEvent> bookmark = decoder.Decode(kBookmark);
  ASSERT_TRUE(bookmark.has_value());
  EXPECT_EQ(bookmark->type, WatchEventType::kBookmark);
  EXPECT_FALSE(bookmark->undecoded.has_value());
  EXPECT_EQ(ResourceVersionOf(*bookmark), "20");

  Result<WatchEvent> expired = decoder.Decode(kExpired);
  ASSERT_TRUE(expired.has_value());
  EXPECT_FALSE(expired->undecoded.has_value());
  EXPECT_TRUE(expired->error.IsGone());

  // Not JSON, not an object, an unknown type, no object, no name: DecodeLine's own answers.
  for (const std::string& line :
       {std::string("{not json"), std::string("[1,2]"),
        std::string(R"({"type":"RENAMED","object":{"metadata":{"name":"a"}}})"),
        std::string(R"({"type":"ADDED"})"),
        std::string(R"({"type":"ADDED","object":{"metadata":{"resourceVersion":"1"}}})")}) {
    Result<WatchEvent> summarized = decoder.Decode(line);
    Result<WatchEvent> plain = WatchDecoder::DecodeLine(line);
    ASSERT_EQ(summarized.has_value(), plain.has_value()) << line;
    if (!plain) {
      EXPECT_EQ(summarized.error().ToString(), plain.error().ToString()) << line;
    } else {
      EXPECT_FALSE(summarized->undecoded.has_value()) << line;
    }
  }
}

// What the decoder would refuse, or read otherwise than the pass, is decoded: a malformed
// heartbeat time, and a second "object" or "metadata" (the decoder keeps only the last).
TEST(KubeWatchTest, MalformedOrRepeatedFieldsAreDecodedAsBefore) {
  WatchDecoder decoder = NodeDecoder();
  std::string bad_escape = NodeLine("MODIFIED", "42", "2026-11-29T08:00:10Z");
  bad_escape.replace(bad_escape.find("2026-11-29T08:00:10Z"), 20, R"(\q)");
  Result<WatchEvent> refused = decoder.Decode(bad_escape);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().ToString(), WatchDecoder::DecodeLine(bad_escape).error().ToString());

  // Not a string: kept in the digest, so it cannot match a well-formed heartbeat's.
  const uint64_t good = DigestOf(decoder, NodeLine("MODIFIED", "42", "2026-11-29T08:00:10Z"));
  std::string not_string = NodeLine("MODIFIED", "42", "2026-11-29T08:00:10Z");
  not_string.replace(not_string.find(R"("2026-11-29T08:00:10Z")"), 22, "true");
  EXPECT_NE(DigestOf(decoder, not_string), good);

  for (const std::string& line :
       {std::string(
            R"({"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"5"}},)"
            R"("object":{"metadata":{"name":"b","resourceVersion":"6"}}})"),
        std::string(R"({"type":"MODIFIED","object":{"metadata":{"name":"a","resourceVersion":"5"},)"
                    R"("metadata":{"name":"a"}}})")}) {
    Result<WatchEvent> event = decoder.Decode(line);
    ASSERT_TRUE(event.has_value()) << line;
    EXPECT_FALSE(event->undecoded.has_value()) << line;
  }
}

TEST(KubeWatchTest, NamespacedObjectsCarryTheirNamespace) {
  WatchDecoder decoder = NodeDecoder();
  Result<WatchEvent> event = decoder.Decode(
      R"({"type":"DELETED","object":{"metadata":{"namespace":"team-a","name":"p","resourceVersion":"7"}}})");
  ASSERT_TRUE(event.has_value());
  ASSERT_TRUE(event->undecoded.has_value());
  EXPECT_EQ(event->type, WatchEventType::kDeleted);
  EXPECT_EQ(event->undecoded->ns, "team-a");
  EXPECT_EQ(event->undecoded->name, "p");
  EXPECT_EQ(event->undecoded->resource_version, "7");
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::kube
