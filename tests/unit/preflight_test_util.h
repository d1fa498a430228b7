// Helpers shared by the preflight_*_test.cpp files: a temporary directory and a fake /dev.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace tpujob::preflight::testing {

// A fresh directory under $TMPDIR, removed with everything in it when the fixture ends.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "preflight_test.XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // Writes `content` to `relative` under the temp dir, creating directories, and returns the
  // absolute path.
  std::string Write(const std::string& relative, const std::string& content = "") {
    const std::filesystem::path path = dir_ / relative;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
    return path.string();
  }

  std::string Path(const std::string& relative) const { return (dir_ / relative).string(); }

  // A /dev of plain files: four accel chips, one VFIO group plus the VFIO container node, one
  // GPU and its control node.
  std::string MakeFakeDev(const std::string& relative = "dev") {
    for (const char* name : {"accel0", "accel1", "accel2", "accel3", "vfio/0", "vfio/vfio",
                             "nvidia0", "nvidiactl", "null"}) {
      Write(relative + "/" + name);
    }
    return Path(relative);
  }

  std::filesystem::path dir_;
};

}  // namespace tpujob::preflight::testing
