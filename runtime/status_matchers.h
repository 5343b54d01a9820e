// gMock matchers for absl::Status and absl::StatusOr (Debian's Abseil 20220623 lacks them):
//   EXPECT_THAT(s, IsOk());
//   EXPECT_THAT(s, StatusIs(absl::StatusCode::kNotFound, HasSubstr("GPU:7")));
//   EXPECT_THAT(or, IsOkAndHolds(Eq(3)));
// Test-only (target vgpu::testing). Thread safety: matchers are immutable values.
#ifndef VGPU_RUNTIME_STATUS_MATCHERS_H_
#define VGPU_RUNTIME_STATUS_MATCHERS_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace vgpu::testing {
namespace internal {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

}  // namespace internal

MATCHER(IsOk, negation ? "is not OK" : "is OK") {
  const absl::Status& s = internal::GetStatus(arg);
  if (!s.ok()) *result_listener << "status is " << s.ToString();
  return s.ok();
}

MATCHER_P2(StatusIs, code, message_matcher,
           std::string("has code ") + absl::StatusCodeToString(code) +
               " and a message that " +
               ::testing::DescribeMatcher<std::string>(message_matcher, negation)) {
  const absl::Status& s = internal::GetStatus(arg);
  *result_listener << "status is " << s.ToString();
  if (s.code() != code) return false;
  return ::testing::ExplainMatchResult(message_matcher, std::string(s.message()),
                                       result_listener);
}

// StatusIs(code): any message.
inline auto StatusIs(absl::StatusCode code) { return StatusIs(code, ::testing::_); }

MATCHER_P(IsOkAndHolds, value_matcher,
          std::string(negation ? "is not OK or holds a value that does not match "
                               : "is OK and holds a matching value ") +
              ::testing::PrintToString(value_matcher)) {
  if (!arg.ok()) {
    *result_listener << "status is " << arg.status().ToString();
    return false;
  }
  return ::testing::ExplainMatchResult(value_matcher, *arg, result_listener);
}

}  // namespace vgpu::testing

#endif  // VGPU_RUNTIME_STATUS_MATCHERS_H_
