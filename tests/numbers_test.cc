// Strict number parsing (runtime/numbers.h): what users type is read exactly, the rest refused.
#include "vgpu/runtime/numbers.h"

#include <clocale>
#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu {
namespace {

using ::testing::DoubleEq;
using ::testing::HasSubstr;
using ::vgpu::testing::IsOkAndHolds;
using ::vgpu::testing::StatusIs;

TEST(ParseDecimal, AcceptsDecimalForms) {
  EXPECT_THAT(ParseDecimal("0.5"), IsOkAndHolds(DoubleEq(0.5)));
  EXPECT_THAT(ParseDecimal("3"), IsOkAndHolds(DoubleEq(3)));
  EXPECT_THAT(ParseDecimal(".25"), IsOkAndHolds(DoubleEq(0.25)));
  EXPECT_THAT(ParseDecimal("2."), IsOkAndHolds(DoubleEq(2)));
  EXPECT_THAT(ParseDecimal("1e-3"), IsOkAndHolds(DoubleEq(1e-3)));
  EXPECT_THAT(ParseDecimal("1E+2"), IsOkAndHolds(DoubleEq(100)));
  EXPECT_THAT(ParseDecimal("-0.75"), IsOkAndHolds(DoubleEq(-0.75)));
  EXPECT_THAT(ParseDecimal(" 0.5\r\n"), IsOkAndHolds(DoubleEq(0.5)));  // CRLF files
}

TEST(ParseDecimal, RefusesWhatIsNotPlainDecimal) {
  for (const char* bad : {"",
                          " ",
                          "0x10",
                          "0x1p-1",
                          "inf",
                          "-inf",
                          "nan",
                          "NaN",
                          "infinity",
                          "+1",
                          "1.5.2",
                          "1e",
                          "1e+",
                          "e5",
                          ".",
                          "-",
                          "1,5",
                          "1 5",
                          "0.5x",
                          "1e999",
                          "-1e999",
                          "5e-318",
                          "1_000",
                          "\xef\xbb\xbf"
                          "1"}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(ParseDecimal(bad), StatusIs(absl::StatusCode::kInvalidArgument));
  }
  EXPECT_THAT(ParseDecimal("0x10"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"0x10\"")));
  EXPECT_THAT(ParseDecimal("1e999"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("out of range")));
}

TEST(ParseDecimal, IgnoresTheLocale) {
  // A locale with a decimal comma must not change what "0.5" means (or make "0,5" valid).
  // Built from glibc's sources into a private folder (LOCPATH), so no system change is needed.
  std::string dir = ::testing::TempDir() + "/numbers_test_locale";
  std::string cmd = "mkdir -p '" + dir + "' && localedef -i de_DE -f UTF-8 '" + dir +
                    "/de_DE.UTF-8' >/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    GTEST_SKIP() << "localedef cannot build de_DE.UTF-8 (Debian package 'locales')";
  }
  setenv("LOCPATH", dir.c_str(), 1);
  const char* old = std::setlocale(LC_NUMERIC, nullptr);
  std::string saved = old ? old : "C";
  ASSERT_NE(std::setlocale(LC_NUMERIC, "de_DE.UTF-8"), nullptr);
  ASSERT_STREQ(std::localeconv()->decimal_point, ",");  // the hostile setting is in force
  EXPECT_THAT(ParseDecimal("0.5"), IsOkAndHolds(DoubleEq(0.5)));
  EXPECT_THAT(ParseDecimal("1e-3"), IsOkAndHolds(DoubleEq(1e-3)));
  EXPECT_THAT(ParseDecimal("0,5"), StatusIs(absl::StatusCode::kInvalidArgument));
  std::setlocale(LC_NUMERIC, saved.c_str());
  unsetenv("LOCPATH");
}

TEST(ParseInt, StrictDigits) {
  EXPECT_THAT(ParseInt64("42"), IsOkAndHolds(42));
  EXPECT_THAT(ParseInt64("-7"), IsOkAndHolds(-7));
  EXPECT_THAT(ParseInt64("9223372036854775807"), IsOkAndHolds(INT64_MAX));
  EXPECT_THAT(ParseUint64("18446744073709551615"), IsOkAndHolds(UINT64_MAX));
  for (const char* bad : {"", "+3", "0x10", "1e3", "3.0", "12a", "- 1", "--1"}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(ParseInt64(bad), StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(ParseUint64(bad), StatusIs(absl::StatusCode::kInvalidArgument));
  }
  EXPECT_THAT(ParseInt64("9223372036854775808"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("out of range")));
  EXPECT_THAT(ParseUint64("18446744073709551616"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("too large")));
  EXPECT_THAT(ParseUint64("-1"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("negative")));
}

TEST(ParseInRange, NamesTheRange) {
  EXPECT_THAT(ParseInt64InRange("5", 1, 16), IsOkAndHolds(5));
  EXPECT_THAT(ParseInt64InRange("17", 1, 16),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside 1..16")));
  EXPECT_THAT(ParseDecimalInRange("1.5", 0, 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside [0, 1]")));
  EXPECT_THAT(ParseDecimalInRange("0.5", 0, 1), IsOkAndHolds(DoubleEq(0.5)));
}

}  // namespace
}  // namespace vgpu
