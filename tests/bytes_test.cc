#include "vgpu/runtime/bytes.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu {
namespace {

using ::testing::HasSubstr;
using ::vgpu::testing::IsOkAndHolds;
using ::vgpu::testing::StatusIs;

TEST(FormatBytes, HumanReadable) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1024), "1 KiB");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(8 * kGiB), "8 GiB");
  EXPECT_EQ(FormatBytes(kGiB + kGiB / 4), "1.25 GiB");
  EXPECT_EQ(FormatBytes(uint64_t{3} << 40), "3 TiB");
  EXPECT_EQ(FormatBytes(~uint64_t{0}), "16 EiB");
}

TEST(ParseBytes, AcceptsUnitsAndFractions) {
  EXPECT_THAT(ParseBytes("1024"), IsOkAndHolds(1024u));
  EXPECT_THAT(ParseBytes("0"), IsOkAndHolds(0u));
  EXPECT_THAT(ParseBytes("1.5GiB"), IsOkAndHolds(kGiB + kGiB / 2));
  EXPECT_THAT(ParseBytes("512MiB"), IsOkAndHolds(512 * kMiB));
  EXPECT_THAT(ParseBytes("512 MiB"), IsOkAndHolds(512 * kMiB));
  EXPECT_THAT(ParseBytes("4gb"), IsOkAndHolds(4000000000u));
  EXPECT_THAT(ParseBytes("1KB"), IsOkAndHolds(1000u));
  EXPECT_THAT(ParseBytes("2KiB"), IsOkAndHolds(2048u));
  EXPECT_THAT(ParseBytes("1TiB"), IsOkAndHolds(kGiB * 1024));
  EXPECT_THAT(ParseBytes("7B"), IsOkAndHolds(7u));
  EXPECT_THAT(ParseBytes(" 16GiB "), IsOkAndHolds(16 * kGiB));
  EXPECT_THAT(ParseBytes("0.5KiB"), IsOkAndHolds(512u));
  EXPECT_THAT(ParseBytes("18446744073709551615"), IsOkAndHolds(~uint64_t{0}));
}

TEST(ParseBytes, Percentages) {
  EXPECT_THAT(ParseBytes("40%", 1000), IsOkAndHolds(400u));
  EXPECT_THAT(ParseBytes("100%", 8 * kGiB), IsOkAndHolds(8 * kGiB));
  EXPECT_THAT(ParseBytes("12.5%", 800), IsOkAndHolds(100u));
  EXPECT_THAT(ParseBytes("40%"), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("needs a known total")));
  EXPECT_THAT(ParseBytes("101%", 1000),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("above 100%")));
}

TEST(ParseBytes, RejectsBadInputNamingIt) {
  for (const char* bad : {"", "  ", "-1", "-1GiB", "+5", "GiB", "1.", ".5", "1.5", "12XB",
                          "1GiBx", "1 2", "1e9", "0x10", "1,5GiB", "nan", "1..5GiB", "5 %x"}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(ParseBytes(bad, 1000),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("invalid byte size")));
  }
  EXPECT_THAT(ParseBytes("12XB"), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("unknown unit \"XB\"")));
  EXPECT_THAT(ParseBytes("-1"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("negative")));
}

TEST(ParseBytes, RejectsOverflow) {
  EXPECT_THAT(ParseBytes("18446744073709551616"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("too large")));
  EXPECT_THAT(ParseBytes("99999999999999999999999999"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("too large")));
  EXPECT_THAT(ParseBytes("17179869184GiB"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("too large")));
  EXPECT_THAT(ParseBytes("16EiB"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ParseBytes, RoundTripsFormat) {
  for (uint64_t v : {uint64_t{1}, uint64_t{1024}, 3 * kMiB, 8 * kGiB, 5 * kGiB / 4}) {
    std::string s = FormatBytes(v);
    s.erase(std::remove(s.begin(), s.end(), ' '), s.end());
    EXPECT_THAT(ParseBytes(s), IsOkAndHolds(v)) << s;
  }
}

}  // namespace
}  // namespace vgpu
