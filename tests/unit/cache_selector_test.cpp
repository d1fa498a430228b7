#include <gtest/gtest.h>

#include "cache/selector.h"

namespace tpujob::cache {
namespace TPUJOB_TEST_NS {

const LabelMap kLabels{{"app", "trainer"},
                       {"tier", "worker"},
                       {"tpujob.dev/job-name", "llm"},
                       {"index", "7"},
                       {"empty", ""}};

TEST(CacheLabelSelectorTest, MatchesTable) {
  struct Case {
    const char* selector;
    bool matches;
  };
  const Case cases[] = {
      {"", true},
      {"app=trainer", true},
      {"app==trainer", true},
      {"app=other", false},
      {"app!=other", true},
      {"app!=trainer", false},
      {"missing!=x", true},  // != also matches objects without the label
      {"app in (trainer,server)", true},
      {"app in (server)", false},
      {"app notin (server, db)", true},
      {"app notin (trainer)", false},
      {"missing notin (x)", true},
      {"missing in (x)", false},
      {"app", true},
      {"missing", false},
      {"!missing", true},
      {"!app", false},
      {"index>5", true},
      {"index>7", false},
      {"index<8", true},
      {"app>1", false},  // not an integer label value
      {"empty=", true},
      {"empty in ()", true},
      {"app=trainer,tier=worker,tpujob.dev/job-name=llm", true},
      {"app=trainer,tier=master", false},
      {"  app = trainer ,  !missing , tier in ( worker )  ", true},
  };
  for (const Case& c : cases) {
    kube::Result<LabelSelector> selector = LabelSelector::Parse(c.selector);
    ASSERT_TRUE(selector.has_value()) << c.selector << ": " << selector.error().message;
    EXPECT_EQ(selector->Matches(kLabels), c.matches) << c.selector;
    // The canonical form parses back to the same meaning.
    kube::Result<LabelSelector> again = LabelSelector::Parse(selector->ToString());
    ASSERT_TRUE(again.has_value()) << selector->ToString();
    EXPECT_EQ(again->ToString(), selector->ToString());
    EXPECT_EQ(again->Matches(kLabels), c.matches) << selector->ToString();
  }
}

TEST(CacheLabelSelectorTest, CanonicalFormIsSortedByKey) {
  kube::Result<LabelSelector> selector = LabelSelector::Parse("z=1, b notin (y,x,y), !a, c");
  ASSERT_TRUE(selector.has_value());
  EXPECT_EQ(selector->ToString(), "!a,b notin (x,y),c,z=1");
  EXPECT_EQ(selector->requirements().size(), 4u);
  EXPECT_TRUE(LabelSelector().empty());
  EXPECT_TRUE(LabelSelector().Matches(kLabels));
}

TEST(CacheLabelSelectorTest, ParseErrorsAreValues) {
  const char* bad[] = {
      "app=trainer,",        // trailing comma
      ",app",                // leading comma
      "app trainer",         // no operator
      "app in trainer",      // no parentheses
      "app in (a,b",         // unclosed set
      "app in (a,,b)",       // empty element
      "app notin",           // no set
      "!",                   // no key
      "!app=x",              // ! takes no value
      "=x",                  // no key
      "app=x=y",             // two operators
      "app>x",               // not an integer
      "app>",                // no value
      "-bad=x",              // key must start alphanumeric
      "Bad_Prefix.com/x=y",  // prefix must be a lowercase DNS subdomain
      "a/b/c=d",             // two slashes
      "app=-x",              // value must start alphanumeric
      "app=has space",       // one token per value
      "app=(x)",
      "toolongtoolongtoolongtoolongtoolongtoolongtoolongtoolongtoolongx=1",  // 64 characters
  };
  for (const char* text : bad) {
    kube::Result<LabelSelector> selector = LabelSelector::Parse(text);
    ASSERT_FALSE(selector.has_value()) << text << " parsed as " << selector->ToString();
    EXPECT_EQ(selector.error().kind, kube::ErrorKind::kDecode);
    EXPECT_NE(selector.error().message.find("invalid selector"), std::string::npos);
  }
}

TEST(CacheLabelSelectorTest, FromJsonAndFromLabels) {
  nlohmann::json json = {{"matchLabels", {{"app", "trainer"}}},
                         {"matchExpressions",
                          {{{"key", "tier"}, {"operator", "In"}, {"values", {"worker", "master"}}},
                           {{"key", "missing"}, {"operator", "DoesNotExist"}}}}};
  kube::Result<LabelSelector> selector = LabelSelector::FromJson(json);
  ASSERT_TRUE(selector.has_value()) << selector.error().message;
  EXPECT_EQ(selector->ToString(), "app=trainer,!missing,tier in (master,worker)");
  EXPECT_TRUE(selector->Matches(kLabels));
  EXPECT_TRUE(LabelSelector::FromJson(nullptr)->empty());
  EXPECT_TRUE(LabelSelector::FromJson(nlohmann::json::object())->empty());
  EXPECT_FALSE(LabelSelector::FromJson(
                   nlohmann::json{{"matchExpressions", {{{"key", "a"}, {"operator", "In"}}}}})
                   .has_value());
  EXPECT_FALSE(LabelSelector::FromJson(
                   nlohmann::json{{"matchExpressions",
                                   {{{"key", "a"}, {"operator", "Gt"}, {"values", {"1"}}}}}})
                   .has_value());
  EXPECT_FALSE(LabelSelector::FromJson(nlohmann::json{{"matchLabels", {{"a", 1}}}}).has_value());
  EXPECT_FALSE(LabelSelector::FromJson(nlohmann::json::array()).has_value());

  LabelSelector exact = LabelSelector::FromLabels(LabelMap{{"app", "trainer"}, {"tier", "worker"}});
  EXPECT_TRUE(exact.Matches(kLabels));
  EXPECT_FALSE(exact.Matches(LabelMap{{"app", "trainer"}}));
}

PodInfo MakePod(std::string name, std::string node, PodPhase phase) {
  PodInfo pod;
  pod.ns = InternedString::Intern("team-a");
  pod.name = std::move(name);
  pod.node_name = InternedString::Intern(node);
  pod.phase = phase;
  return pod;
}

TEST(CacheFieldSelectorTest, MatchesPods) {
  const PodInfo running = MakePod("w-0", "node-1", PodPhase::kRunning);
  const PodInfo pending = MakePod("w-1", "", PodPhase::kPending);
  struct Case {
    const char* selector;
    bool running_matches;
    bool pending_matches;
  };
  const Case cases[] = {
      {"", true, true},
      {"spec.nodeName=node-1", true, false},
      {"spec.nodeName==node-1", true, false},
      {"spec.nodeName=", false, true},  // unscheduled
      {"spec.nodeName!=", true, false},
      {"status.phase!=Running", false, true},
      {"status.phase!=Succeeded,status.phase!=Failed", true, true},
      {"metadata.name=w-1,metadata.namespace=team-a", false, true},
      {"metadata.namespace=team-b", false, false},
  };
  for (const Case& c : cases) {
    kube::Result<FieldSelector> selector = FieldSelector::Parse(c.selector);
    ASSERT_TRUE(selector.has_value()) << c.selector << ": " << selector.error().message;
    ASSERT_TRUE(selector->ValidateFor<PodInfo>().has_value()) << c.selector;
    EXPECT_EQ(selector->Matches(running), c.running_matches) << c.selector;
    EXPECT_EQ(selector->Matches(pending), c.pending_matches) << c.selector;
  }
}

TEST(CacheFieldSelectorTest, EscapesAndErrors) {
  kube::Result<FieldSelector> escaped = FieldSelector::Parse(R"(metadata.name=a\,b\=c\\d)");
  ASSERT_TRUE(escaped.has_value()) << escaped.error().message;
  ASSERT_EQ(escaped->requirements().size(), 1u);
  EXPECT_EQ(escaped->requirements()[0].value, R"(a,b=c\d)");
  EXPECT_EQ(escaped->ToString(), R"(metadata.name=a\,b\=c\\d)");
  EXPECT_TRUE(escaped->Matches(MakePod("a,b=c\\d", "", PodPhase::kPending)));

  for (const char* bad : {"spec.nodeName", "=x", "a=b=c", R"(a=\x)", R"(a=b\)", "!=x"}) {
    kube::Result<FieldSelector> selector = FieldSelector::Parse(bad);
    EXPECT_FALSE(selector.has_value()) << bad;
    if (!selector) {
      EXPECT_EQ(selector.error().kind, kube::ErrorKind::kDecode);
    }
  }

  // Syntax is type-independent; support for a field is checked per type.
  kube::Result<FieldSelector> unsupported = FieldSelector::Parse("spec.schedulerName=x");
  ASSERT_TRUE(unsupported.has_value());
  kube::Status valid = unsupported->ValidateFor<PodInfo>();
  ASSERT_FALSE(valid.has_value());
  EXPECT_NE(valid.error().message.find("spec.schedulerName"), std::string::npos);
  EXPECT_FALSE(unsupported->Matches(MakePod("p", "", PodPhase::kPending)));

  kube::Result<FieldSelector> node_fields = FieldSelector::Parse("spec.unschedulable=true");
  ASSERT_TRUE(node_fields.has_value());
  EXPECT_TRUE(node_fields->ValidateFor<NodeInfo>().has_value());
  EXPECT_FALSE(node_fields->ValidateFor<PodInfo>().has_value());
  NodeInfo cordoned;
  cordoned.name = "n";
  cordoned.unschedulable = true;
  EXPECT_TRUE(node_fields->Matches(cordoned));
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::cache
