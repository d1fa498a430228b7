#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "base/logging.h"
#include "base/utf8.h"
#include "log_capture.h"
#include "log_line_parser.h"

namespace tpujob {
namespace TPUJOB_TEST_NS {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

constexpr std::string_view kPrefix = "ts=2024-05-01T12:00:00.000Z level=info ";

// Texts that break naive quoting: every one must survive both encoders unchanged (after
// invalid UTF-8 became U+FFFD).
const std::vector<std::string>& NastyValues() {
  static const std::vector<std::string> values = {
      "",
      " ",
      "plain",
      "two words",
      "a=b",
      "=",
      "say \"hi\"",
      "\"",
      "back\\slash",
      "\\",
      "trailing\\",
      "line\nbreak",
      "cr\rlf\r\n",
      "tab\there",
      std::string("nul\0byte", 8),
      "bell\x07 escape\x1b[31m del\x7f",
      "\xff\xfe invalid",
      "cut \xe2\x82",       // a truncated three-byte sequence
      "overlong \xc0\xaf",  // an overlong '/'
      "surrogate \xed\xa0\x80",
      "h\xc3\xa9llo \xe2\x86\x92 \xf0\x9f\x9a\x80",  // héllo → 🚀
      "c1 \xc2\x85 next line",
      "separator \xe2\x80\xa8 here",
      "unterminated \"quote",
      "key=\"value\" other=1",
      "error=\"cannot get pods: 403 \"Forbidden\"\"\n  at line 2",
  };
  return values;
}

std::string Expected(const std::string& value) {
  return ValidUtf8(value, std::numeric_limits<size_t>::max());
}

TEST(LogfmtValueTest, BareWhenSafeQuotedOtherwise) {
  EXPECT_EQ(LogQuote("Running"), "Running");
  EXPECT_EQ(LogQuote("default/llm"), "default/llm");
  EXPECT_EQ(LogQuote("<none>"), "<none>");
  EXPECT_EQ(LogQuote("h\xc3\xa9llo"), "h\xc3\xa9llo");
  EXPECT_EQ(LogQuote(""), R"("")");
  EXPECT_EQ(LogQuote("two words"), R"("two words")");
  EXPECT_EQ(LogQuote("a=b"), R"("a=b")");
  EXPECT_EQ(LogQuote("say \"hi\""), R"("say \"hi\"")");
  EXPECT_EQ(LogQuote("back\\slash"), R"("back\\slash")");
  EXPECT_EQ(LogQuote("a\nb\rc\td"), R"("a\nb\rc\td")");
  EXPECT_EQ(LogQuote(std::string("\0\x1b\x7f", 3)), R"("\u0000\u001b\u007f")");
  EXPECT_EQ(LogQuote("\xc2\x85"), R"("\u0085")");
  EXPECT_EQ(LogQuote("x\xffy"), "\"x\xef\xbf\xbdy\"");
}

TEST(LogfmtValueTest, NastyValuesParseBackStrictly) {
  for (const std::string& value : NastyValues()) {
    const log::Field fields[] = {{"value", value}, {"after", 1}};
    const std::string line =
        std::string(kPrefix) + log::EncodeBody(log::Format::kLogfmt, value, fields);
    auto parsed = testing::ParseLogfmtLine(line);
    ASSERT_TRUE(parsed.has_value()) << parsed.error() << "\n" << line;
    ASSERT_EQ(parsed->size(), 5u) << line;
    EXPECT_EQ((*parsed)[2], (std::pair<std::string, std::string>{"msg", Expected(value)}));
    EXPECT_EQ((*parsed)[3], (std::pair<std::string, std::string>{"value", Expected(value)}));
    EXPECT_EQ((*parsed)[4], (std::pair<std::string, std::string>{"after", "1"}));
    EXPECT_EQ(line.find('\n'), std::string::npos);
  }
}

TEST(JsonValueTest, NastyValuesParseBackWithNlohmann) {
  for (const std::string& value : NastyValues()) {
    const log::Field fields[] = {{"value", value}, {"after", 1}};
    const std::string line = R"({"ts":"2024-05-01T12:00:00.000Z","level":"info",)" +
                             log::EncodeBody(log::Format::kJson, value, fields) + "}";
    auto parsed = testing::ParseJsonLine(line);
    ASSERT_TRUE(parsed.has_value()) << parsed.error() << "\n" << line;
    EXPECT_EQ((*parsed)["msg"], Expected(value));
    EXPECT_EQ((*parsed)["value"], Expected(value));
    EXPECT_EQ((*parsed)["after"], 1);
    EXPECT_EQ(line.find('\n'), std::string::npos);
  }
}

TEST(LogEncodeTest, TypedValues) {
  const log::Field fields[] = {
      {"int", -42},
      {"size", size_t{7}},
      {"max", std::numeric_limits<uint64_t>::max()},
      {"yes", true},
      {"no", false},
      {"ratio", 0.25},
      {"nan", std::numeric_limits<double>::quiet_NaN()},
      {"inf", std::numeric_limits<double>::infinity()},
      {"lease", std::chrono::seconds(15)},
      {"delay", std::chrono::milliseconds(250)},
      {"tiny", std::chrono::nanoseconds(3)},
      {"zero", std::chrono::seconds(0)},
      {"cstr", "<none>"},
      {"view", std::string_view("a b")},
  };
  EXPECT_EQ(log::EncodeBody(log::Format::kLogfmt, "typed", fields),
            R"(msg="typed" int=-42 size=7 max=18446744073709551615 yes=true no=false )"
            R"(ratio=0.25 nan=NaN inf=+Inf lease=15s delay=250ms tiny=3ns zero=0s cstr=<none> )"
            R"(view="a b")");
  EXPECT_EQ(log::EncodeBody(log::Format::kJson, "typed", fields),
            R"("msg":"typed","int":-42,"size":7,"max":18446744073709551615,"yes":true,)"
            R"("no":false,"ratio":0.25,"nan":"NaN","inf":"+Inf","lease":"15s",)"
            R"("delay":"250ms","tiny":"3ns","zero":"0s","cstr":"<none>","view":"a b")");
}

TEST(LogEncodeTest, MessageIsAlwaysQuotedInLogfmt) {
  EXPECT_EQ(log::EncodeBody(log::Format::kLogfmt, "stopped", {}), R"(msg="stopped")");
  EXPECT_EQ(log::EncodeBody(log::Format::kJson, "stopped", {}), R"("msg":"stopped")");
}

TEST(LogFormatTest, ParsesKnownNamesOnly) {
  log::Format format = log::Format::kJson;
  EXPECT_TRUE(ParseLogFormat("logfmt", format));
  EXPECT_EQ(format, log::Format::kLogfmt);
  EXPECT_TRUE(ParseLogFormat("json", format));
  EXPECT_EQ(format, log::Format::kJson);
  EXPECT_FALSE(ParseLogFormat("JSON", format));
  EXPECT_FALSE(ParseLogFormat("text", format));
  EXPECT_FALSE(ParseLogFormat("", format));
}

TEST(LogWriteTest, LinesThroughTheLoggerParseInBothFormats) {
  for (log::Format format : {log::Format::kLogfmt, log::Format::kJson}) {
    LogCapture capture(format);
    log::Info("phase changed",
              {{"tpujob", "default/llm"}, {"from", "Starting"}, {"to", "Running"}, {"attempt", 1}});
    log::Warn("list failed", {{"reflector", "pods"}, {"error", "say \"no\"\nthen \xff"}});
    log::Debug("not written at info", {{"n", 1}});
    const std::string text = capture.text();
    std::vector<std::string> lines;
    for (size_t at = 0; at < text.size();) {
      const size_t end = text.find('\n', at);
      ASSERT_NE(end, std::string::npos) << "the last line has no newline: " << text;
      lines.push_back(text.substr(at, end - at));
      at = end + 1;
    }
    ASSERT_EQ(lines.size(), 2u) << text;
    if (format == log::Format::kLogfmt) {
      EXPECT_THAT(lines[0], HasSubstr(" level=info msg=\"phase changed\" tpujob=default/llm "
                                      "from=Starting to=Running attempt=1"));
      for (const std::string& line : lines) {
        auto parsed = testing::ParseLogfmtLine(line);
        EXPECT_TRUE(parsed.has_value()) << parsed.error() << "\n" << line;
      }
    } else {
      auto first = testing::ParseJsonLine(lines[0]);
      ASSERT_TRUE(first.has_value()) << first.error() << "\n" << lines[0];
      EXPECT_EQ((*first)["level"], "info");
      EXPECT_EQ((*first)["msg"], "phase changed");
      EXPECT_EQ((*first)["attempt"], 1);
      auto second = testing::ParseJsonLine(lines[1]);
      ASSERT_TRUE(second.has_value()) << second.error() << "\n" << lines[1];
      EXPECT_EQ((*second)["level"], "warning");
      EXPECT_EQ((*second)["error"], "say \"no\"\nthen \xef\xbf\xbd");
    }
  }
  EXPECT_EQ(log::CurrentFormat(), log::Format::kLogfmt);
}

TEST(LogWriteTest, DisabledLevelsWriteNothing) {
  LogCapture capture;
  EXPECT_FALSE(log::Enabled(log::Level::kDebug));
  EXPECT_TRUE(log::Enabled(log::Level::kInfo));
  log::Debug("hidden", {{"n", 1}});
  log::Log(log::Level::kTrace, "hidden too");
  EXPECT_THAT(capture.text(), IsEmpty());
  log::Error("shown");
  EXPECT_THAT(capture.text(), StartsWith("ts="));
}

// The checker the end-to-end suite's logs go through must refuse what the operator used to
// write, and accept what it writes now.
TEST(LogLineParserTest, RefusesLinesThatAreNotLogfmt) {
  const std::vector<std::string> bad = {
      "ts=2024-05-01T12:00:00.000Z level=warning reflector pods: list failed: timed out",
      R"(ts=2024-05-01T12:00:00.000Z level=error msg="client certificate rejected" )"
      R"(error="key "x" is bad")",
      "ts=2024-05-01T12:00:00.000Z level=warning msg=\"retrying API request\" error=\"a\nb\"",
      R"(ts=2024-05-01T12:00:00.000Z level=info msg="deleting pod" grace=pod's own)",
      R"(ts=2024-05-01T12:00:00.000Z level=info msg="api requests" total=3 )",
      R"(ts=2024-05-01T12:00:00.000Z level=info msg=stopped)",
      R"(ts=2024-05-01T12:00:00.000Z level=info msg="x" a=1 a=2)",
      R"(ts=2024-05-01T12:00:00.000Z level=info msg="x" path=)",
      R"(ts=2024-05-01T12:00:00.000Z level=info msg="x" bad="\q")",
      R"(ts=2024-05-01T12:00:00.000Z level=info msg="x"  two=spaces)",
      R"(level=info ts=2024-05-01T12:00:00.000Z msg="x")",
      R"(ts=yesterday level=info msg="x")",
      R"(ts=2024-05-01T12:00:00.000Z level=loud msg="x")",
      "ts=2024-05-01T12:00:00.000Z level=info msg=\"x\" v=\xff",
      "error: unknown --log-format \"yaml\" (want logfmt or json)",
      "",
  };
  for (const std::string& line : bad) {
    EXPECT_FALSE(testing::ParseLogfmtLine(line).has_value()) << line;
  }
  auto good = testing::ParseLogfmtLine(
      R"(ts=2024-05-01T12:00:00.000Z level=info msg="x" a="" b="q\"\\\u00e9" c=<none>)");
  ASSERT_TRUE(good.has_value()) << good.error();
  EXPECT_EQ((*good)[3].second, "");
  EXPECT_EQ((*good)[4].second, "q\"\\\xc3\xa9");
  EXPECT_EQ((*good)[5].second, "<none>");

  EXPECT_FALSE(testing::ParseJsonLine(R"({"ts":"2024-05-01T12:00:00.000Z","level":"info"})"));
  EXPECT_FALSE(testing::ParseJsonLine(
      R"({"ts":"2024-05-01T12:00:00.000Z","level":"info","msg":"x","a":1,"a":2})"));
  EXPECT_FALSE(
      testing::ParseJsonLine("{\"ts\":\"2024-05-01T12:00:00.000Z\",\"level\":\"info\","
                             "\"msg\":\"\xff\"}"));
  EXPECT_TRUE(testing::ParseJsonLine(
      R"({"ts":"2024-05-01T12:00:00.000Z","level":"info","msg":"x","a":{"b":1}})"));
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob
