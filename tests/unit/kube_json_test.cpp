#include <gtest/gtest.h>

#include "kube/json.h"

namespace tpujob::kube {
namespace TPUJOB_TEST_NS {

TEST(KubeJsonTest, StringFieldReadsAStringMemberAndNothingElse) {
  const Json object = {{"reason", "NotFound"}, {"code", 404}, {"details", Json::object()}};
  EXPECT_EQ(StringField(object, "reason"), "NotFound");
  EXPECT_EQ(StringField(object, "code"), "");     // a number
  EXPECT_EQ(StringField(object, "details"), "");  // an object
  EXPECT_EQ(StringField(object, "missing"), "");
  EXPECT_EQ(StringField(Json::array({"reason"}), "reason"), "");  // not an object
  EXPECT_EQ(StringField(Json(), "reason"), "");
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::kube
