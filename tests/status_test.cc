#include "vgpu/runtime/status.h"

#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::IsOkAndHolds;
using ::vgpu::testing::StatusIs;

absl::Status FailIf(bool fail) {
  return fail ? absl::NotFoundError("GPU:7 not found") : absl::OkStatus();
}

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

int calls_after = 0;

absl::Status Chain(bool fail) {
  VGPU_RETURN_IF_ERROR(FailIf(fail));
  ++calls_after;
  return absl::OkStatus();
}

absl::StatusOr<int> Quarter(int x) {
  VGPU_ASSIGN_OR_RETURN(int h, Half(x));
  VGPU_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

absl::StatusOr<std::unique_ptr<int>> MakeBox(int v) { return std::make_unique<int>(v); }

absl::StatusOr<int> Unbox(int v) {
  VGPU_ASSIGN_OR_RETURN(std::unique_ptr<int> box, MakeBox(v));  // move-only value
  return *box;
}

TEST(StatusMacros, ReturnIfErrorStopsAtTheFirstError) {
  calls_after = 0;
  EXPECT_THAT(Chain(false), IsOk());
  EXPECT_EQ(calls_after, 1);
  EXPECT_THAT(Chain(true), StatusIs(absl::StatusCode::kNotFound, HasSubstr("GPU:7")));
  EXPECT_EQ(calls_after, 1);
}

TEST(StatusMacros, AssignOrReturnPropagatesAndAssigns) {
  EXPECT_THAT(Quarter(8), IsOkAndHolds(2));
  EXPECT_THAT(Quarter(6), StatusIs(absl::StatusCode::kInvalidArgument, "odd"));
  EXPECT_THAT(Quarter(3), Not(IsOk()));
  EXPECT_THAT(Unbox(5), IsOkAndHolds(5));
}

TEST(StatusMatchers, DescribeMismatches) {
  absl::Status s = absl::ResourceExhaustedError("out of memory on GPU:1");
  EXPECT_THAT(s, Not(StatusIs(absl::StatusCode::kNotFound, HasSubstr("GPU:1"))));
  EXPECT_THAT(s, Not(StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("GPU:2"))));
  EXPECT_THAT(absl::StatusOr<int>(3), Not(IsOkAndHolds(4)));
  EXPECT_THAT(absl::StatusOr<int>(absl::InternalError("x")), Not(IsOkAndHolds(4)));
  EXPECT_THAT(absl::StatusOr<int>(absl::InternalError("x")), Not(IsOk()));
}

}  // namespace
}  // namespace vgpu
