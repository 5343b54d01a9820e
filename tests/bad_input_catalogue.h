// Helpers for the bad-input catalogue tests (tests/bad_input*_test.cc): a case runs, its status
// must have the listed code and contain the listed text, and docs/bad-input.md must have a
// row starting with the case id that names the same code and text.
#ifndef VGPU_TESTS_BAD_INPUT_CATALOGUE_H_
#define VGPU_TESTS_BAD_INPUT_CATALOGUE_H_

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu::testing {

struct CatalogueCase {
  std::string id;        // "A02"
  std::string what;      // kind of bad input
  std::string example;   // the input, as a user writes it
  absl::StatusCode code;
  std::string message;   // a substring of the exact error
  std::function<absl::Status()> run;
};

// "InvalidArgument", as docs/bad-input.md writes codes.
inline std::string CodeName(absl::StatusCode code) {
  std::string s = absl::StatusCodeToString(code);  // "INVALID_ARGUMENT"
  std::string out;
  bool upper = true;
  for (char ch : s) {
    if (ch == '_') {
      upper = true;
      continue;
    }
    out += upper ? ch : static_cast<char>(std::tolower(ch));
    upper = false;
  }
  return out == "Ok" ? "OK" : out;
}

inline void RunCatalogue(const std::vector<CatalogueCase>& cases) {
  for (const CatalogueCase& c : cases) {
    SCOPED_TRACE(c.id + ": " + c.what);
    absl::Status s = c.run();
    EXPECT_THAT(s, StatusIs(c.code, ::testing::HasSubstr(c.message)));
    if (!s.ok()) EXPECT_FALSE(s.message().empty());
  }
}

inline std::string ReadDoc() {
  const char* root = std::getenv("VGPU_TEST_SRCDIR");
  std::string path = std::string(root ? root : ".") + "/docs/bad-input.md";
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Markdown escapes '|' in table cells as '\|'.
inline std::string CellText(const std::string& s) { return absl::StrReplaceAll(s, {{"|", "\\|"}}); }

inline void CheckDocumented(const std::vector<CatalogueCase>& cases) {
  std::string doc = ReadDoc();
  ASSERT_FALSE(doc.empty()) << "docs/bad-input.md not found (VGPU_TEST_SRCDIR)";
  for (const CatalogueCase& c : cases) {
    SCOPED_TRACE(c.id);
    size_t at = doc.find("| " + c.id + " |");
    ASSERT_NE(at, std::string::npos) << c.id << " is missing from docs/bad-input.md";
    std::string row = doc.substr(at, doc.find('\n', at) - at);
    EXPECT_THAT(row, ::testing::HasSubstr(CodeName(c.code)));
    EXPECT_THAT(row, ::testing::HasSubstr(CellText(c.message)));
  }
}

// Rows for docs/bad-input.md with the real messages (run the DISABLED_Print* tests).
inline void PrintCatalogue(const std::vector<CatalogueCase>& cases) {
  for (const CatalogueCase& c : cases) {
    absl::Status s = c.run();
    std::printf("| %s | %s | %s | %s | %s |\n", c.id.c_str(), CellText(c.what).c_str(),
                CellText(c.example).c_str(), CodeName(s.code()).c_str(),
                s.ok() ? "(no error)" : CellText(std::string(s.message())).c_str());
  }
}

}  // namespace vgpu::testing

#endif  // VGPU_TESTS_BAD_INPUT_CATALOGUE_H_
