// A temporary directory for one test, removed with everything in it when the object goes out
// of scope, so repeated test runs leave nothing behind in /tmp (or TEST_TMPDIR).
//
// Thread safety: each object is used by one thread; distinct objects are independent.
#ifndef VGPU_TESTS_SCOPED_TEMP_DIR_H_
#define VGPU_TESTS_SCOPED_TEMP_DIR_H_

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include "gtest/gtest.h"

namespace vgpu::testing {

class ScopedTempDir {
 public:
  // A fresh directory named `prefix` plus six random characters.
  explicit ScopedTempDir(const std::string& prefix) {
    const char* base = std::getenv("TEST_TMPDIR");
    path_ = std::string(base != nullptr ? base : "/tmp") + "/" + prefix + "_XXXXXX";
    EXPECT_NE(mkdtemp(path_.data()), nullptr) << path_;
  }
  ~ScopedTempDir() {
    std::error_code ignored;  // best effort: a test that failed half-way may have left anything
    std::filesystem::remove_all(path_, ignored);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace vgpu::testing

#endif  // VGPU_TESTS_SCOPED_TEMP_DIR_H_
