#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "policy/tpu_types.h"

namespace tpujob::policy {
namespace TPUJOB_TEST_NS {

using ::testing::HasSubstr;
using ::testing::Not;

struct Row {
  std::string name;
  std::string accelerator;
  std::string topology;
  int32_t chips_per_host;
  int32_t hosts_per_slice;
  std::string generation;
};

void PrintTo(const Row& row, std::ostream* os) { *os << row.name; }

class PolicyTpuTypesRowTest : public ::testing::TestWithParam<Row> {};

TEST_P(PolicyTpuTypesRowTest, NameDerivesTheSlice) {
  const Row& row = GetParam();
  auto type = LookUpTpuType(row.name);
  ASSERT_TRUE(type.has_value()) << type.error();
  EXPECT_EQ(type->accelerator, row.accelerator);
  EXPECT_EQ(type->topology, row.topology);
  EXPECT_EQ(type->chips_per_host, row.chips_per_host);
  EXPECT_EQ(type->hosts_per_slice, row.hosts_per_slice);
  EXPECT_EQ(type->generation, row.generation);
  EXPECT_EQ(type->chips, int64_t{row.chips_per_host} * row.hosts_per_slice);
}

// Explicit rows, written from GKE's machine types (hosts of 4 chips, v5e/v6e hosts of 1, 4 or 8
// chips), not computed from the table.
INSTANTIATE_TEST_SUITE_P(
    Generations, PolicyTpuTypesRowTest,
    ::testing::Values(
        // v4: TensorCores, two per chip; ct4p-hightpu-4t hosts of 4 chips.
        Row{"v4-8", "tpu-v4-podslice", "2x2x1", 4, 1, "v4"},
        Row{"v4-16", "tpu-v4-podslice", "2x2x2", 4, 2, "v4"},
        Row{"v4-32", "tpu-v4-podslice", "2x2x4", 4, 4, "v4"},
        Row{"v4-128", "tpu-v4-podslice", "4x4x4", 4, 16, "v4"},
        Row{"v4-4096", "tpu-v4-podslice", "8x16x16", 4, 512, "v4"},
        Row{"v4-4x4x8", "tpu-v4-podslice", "4x4x8", 4, 32, "v4"},
        // v5e: chips; single hosts of 1, 4 and 8 chips, then hosts of 4.
        Row{"v5litepod-1", "tpu-v5-lite-podslice", "1x1", 1, 1, "v5litepod"},
        Row{"v5litepod-4", "tpu-v5-lite-podslice", "2x2", 4, 1, "v5litepod"},
        Row{"v5litepod-8", "tpu-v5-lite-podslice", "2x4", 8, 1, "v5litepod"},
        Row{"v5litepod-2x4", "tpu-v5-lite-podslice", "2x4", 8, 1, "v5litepod"},
        Row{"v5litepod-16", "tpu-v5-lite-podslice", "4x4", 4, 4, "v5litepod"},
        Row{"v5litepod-32", "tpu-v5-lite-podslice", "4x8", 4, 8, "v5litepod"},
        Row{"v5litepod-256", "tpu-v5-lite-podslice", "16x16", 4, 64, "v5litepod"},
        Row{"v5litepod-8x16", "tpu-v5-lite-podslice", "8x16", 4, 32, "v5litepod"},
        // v5p: TensorCores; v5p-128 is XPK's default 4x4x4 (not 2x4x8).
        Row{"v5p-8", "tpu-v5p-slice", "2x2x1", 4, 1, "v5p"},
        Row{"v5p-16", "tpu-v5p-slice", "2x2x2", 4, 2, "v5p"},
        Row{"v5p-64", "tpu-v5p-slice", "2x4x4", 4, 8, "v5p"},
        Row{"v5p-128", "tpu-v5p-slice", "4x4x4", 4, 16, "v5p"},
        Row{"v5p-4x4x4", "tpu-v5p-slice", "4x4x4", 4, 16, "v5p"},
        Row{"v5p-256", "tpu-v5p-slice", "4x4x8", 4, 32, "v5p"},
        Row{"v5p-1024", "tpu-v5p-slice", "8x8x8", 4, 128, "v5p"},
        Row{"v5p-12288", "tpu-v5p-slice", "16x16x24", 4, 1536, "v5p"},
        Row{"v5p-4x4x116", "tpu-v5p-slice", "4x4x116", 4, 464, "v5p"},
        // v6e: chips, like v5e.
        Row{"v6e-1", "tpu-v6e-slice", "1x1", 1, 1, "v6e"},
        Row{"v6e-4", "tpu-v6e-slice", "2x2", 4, 1, "v6e"},
        Row{"v6e-8", "tpu-v6e-slice", "2x4", 8, 1, "v6e"},
        Row{"v6e-16", "tpu-v6e-slice", "4x4", 4, 4, "v6e"},
        Row{"v6e-64", "tpu-v6e-slice", "8x8", 4, 16, "v6e"},
        Row{"v6e-256", "tpu-v6e-slice", "16x16", 4, 64, "v6e"},
        Row{"v6e-16x16", "tpu-v6e-slice", "16x16", 4, 64, "v6e"},
        // tpu7x (Ironwood): TensorCores, two per chip; tpu7x-standard-4t hosts of 4 chips.
        Row{"tpu7x-2", "tpu7x", "1x1x1", 1, 1, "tpu7x"},
        Row{"tpu7x-8", "tpu7x", "2x2x1", 4, 1, "tpu7x"},
        Row{"tpu7x-16", "tpu7x", "2x2x2", 4, 2, "tpu7x"},
        Row{"tpu7x-128", "tpu7x", "4x4x4", 4, 16, "tpu7x"},
        Row{"tpu7x-4x4x4", "tpu7x", "4x4x4", 4, 16, "tpu7x"},
        Row{"tpu7x-1024", "tpu7x", "8x8x8", 4, 128, "tpu7x"},
        Row{"tpu7x-16384", "tpu7x", "16x16x32", 4, 2048, "tpu7x"}),
    [](const ::testing::TestParamInfo<Row>& info) {
      std::string name = info.param.name;
      for (char& c : name) {
        if (c == '-') c = '_';
      }
      return name;
    });

TEST(PolicyTpuTypesTest, UnknownNameOfAGenerationListsThatGenerationsNames) {
  auto type = LookUpTpuType("v5p-100");
  ASSERT_FALSE(type.has_value());
  EXPECT_THAT(type.error(), HasSubstr("\"v5p-100\" is not a v5p TPU type"));
  EXPECT_THAT(type.error(), HasSubstr("v5p-8, v5p-16, v5p-32, v5p-64, v5p-128, v5p-256"));
  EXPECT_THAT(type.error(), HasSubstr("(TensorCores), or v5p-<topology> for topology 2x2x1, "));
  EXPECT_THAT(type.error(), Not(HasSubstr("v6e")));

  auto lite = LookUpTpuType("v5litepod-2");
  ASSERT_FALSE(lite.has_value());
  EXPECT_THAT(lite.error(), HasSubstr("v5litepod-1, v5litepod-4, v5litepod-8, v5litepod-16, "
                                      "v5litepod-32, v5litepod-64, v5litepod-128, v5litepod-256 "
                                      "(chips), or v5litepod-<topology> for topology 1x1, 2x2, "
                                      "2x4, 4x4, 4x8, 8x8, 8x16, 16x16"));
  // A topology the generation does not have: 2-D for a 3-D generation, and a shape not listed.
  EXPECT_FALSE(LookUpTpuType("v5p-2x4").has_value());
  EXPECT_FALSE(LookUpTpuType("v5p-2x4x8").has_value());
  EXPECT_FALSE(LookUpTpuType("v6e-2x2x1").has_value());
}

TEST(PolicyTpuTypesTest, UnknownGenerationListsTheGenerations) {
  for (const char* name : {"v5e-8", "v3-8", "v5p", "", "-8", "tpu7-8", "V5P-8"}) {
    auto type = LookUpTpuType(name);
    ASSERT_FALSE(type.has_value()) << name;
    EXPECT_THAT(type.error(),
                HasSubstr("the generation must be one of v4, v5litepod (v5e), v5p, v6e, tpu7x"))
        << name;
  }
}

TEST(PolicyTpuTypesTest, EveryNameIsUniqueAndConsistent) {
  std::set<std::string> names;
  for (const TpuSlice& slice : TpuSlices()) {
    for (const std::string& name : {TpuTypeCountName(slice), TpuTypeTopologyName(slice)}) {
      EXPECT_TRUE(names.insert(name).second) << name << " names two slices";
      auto type = LookUpTpuType(name);
      ASSERT_TRUE(type.has_value()) << type.error();
      EXPECT_EQ(type->topology, slice.topology) << name;
      EXPECT_EQ(type->chips % type->chips_per_host, 0) << name;
      EXPECT_LE(type->chips_per_host, 8) << name;  // spec.tpu.chipsPerWorker's bound
    }
  }
  EXPECT_EQ(names.size(), 2 * TpuSlices().size());
  EXPECT_EQ(TpuGenerations().size(), 5u);
}

// docs/api.md's table of TPU types is the C++ table, row for row: edit src/policy/tpu_types.inc,
// then the table between the tpu-types markers (this test prints the rows it expects).
TEST(PolicyTpuTypesTest, DocsTableIsTheTable) {
  std::ifstream file(std::string(TPUJOB_SOURCE_DIR) + "/docs/api.md");
  ASSERT_TRUE(file.good());
  std::stringstream text;
  text << file.rdbuf();
  const std::string doc = text.str();
  const std::string begin_marker = "<!-- tpu-types: begin";
  const size_t begin = doc.find(begin_marker);
  ASSERT_NE(begin, std::string::npos) << "docs/api.md has no " << begin_marker << " marker";
  const size_t table = doc.find('\n', begin) + 1;
  const size_t end = doc.find("<!-- tpu-types: end -->", table);
  ASSERT_NE(end, std::string::npos);

  std::string expected =
      "| Type | Also | Accelerator | Topology | Chips per host | Hosts per slice | Machine type "
      "|\n|---|---|---|---|---|---|---|\n";
  for (const TpuSlice& slice : TpuSlices()) {
    auto type = LookUpTpuType(TpuTypeCountName(slice));
    ASSERT_TRUE(type.has_value()) << type.error();
    expected += "| `" + TpuTypeCountName(slice) + "` | `" + TpuTypeTopologyName(slice) + "` | `" +
                std::string(type->accelerator) + "` | " + std::string(slice.topology) + " | " +
                std::to_string(slice.chips_per_host) + " | " +
                std::to_string(type->hosts_per_slice) + " | " + std::string(slice.machine_type) +
                " |\n";
  }
  EXPECT_EQ(doc.substr(table, end - table), expected);
}

}  // namespace TPUJOB_TEST_NS
}  // namespace tpujob::policy
