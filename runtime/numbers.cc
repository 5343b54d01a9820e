#include "vgpu/runtime/numbers.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "vgpu/runtime/user_text.h"

namespace vgpu {
namespace {

absl::Status Bad(absl::string_view text, absl::string_view kind, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid ", kind, " ", QuoteUserText(text), ": ", why));
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Length of the longest prefix of `s` made of decimal digits.
size_t Digits(absl::string_view s, size_t from) {
  size_t i = from;
  while (i < s.size() && IsDigit(s[i])) ++i;
  return i - from;
}

}  // namespace

absl::StatusOr<double> ParseDecimal(absl::string_view text) {
  constexpr absl::string_view kKind = "number";
  constexpr absl::string_view kExpect = "expected a decimal number such as 0.5, 3 or 1e-3";
  absl::string_view s = absl::StripAsciiWhitespace(text);
  if (s.empty()) return Bad(text, kKind, absl::StrCat("empty; ", kExpect));
  // Check the grammar ourselves: from_chars alone would take "inf", "nan" and "1e" prefixes.
  size_t i = 0;
  if (s[i] == '-') ++i;
  size_t whole = Digits(s, i);
  i += whole;
  size_t frac = 0;
  if (i < s.size() && s[i] == '.') {
    frac = Digits(s, i + 1);
    i += 1 + frac;
  }
  if (whole == 0 && frac == 0) return Bad(text, kKind, kExpect);
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    size_t j = i + 1;
    if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
    size_t exp = Digits(s, j);
    if (exp == 0) return Bad(text, kKind, absl::StrCat("exponent without digits; ", kExpect));
    i = j + exp;
  }
  if (i != s.size()) return Bad(text, kKind, kExpect);
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc::result_out_of_range || !std::isfinite(v)) {
    return Bad(text, kKind, "out of range (too large or too small for a double)");
  }
  if (ec != std::errc() || end != s.data() + s.size()) return Bad(text, kKind, kExpect);
  if (v != 0 && std::fpclassify(v) == FP_SUBNORMAL) {
    return Bad(text, kKind, "out of range (too large or too small for a double)");
  }
  return v == 0 ? 0.0 : v;  // no negative zero
}

absl::StatusOr<int64_t> ParseInt64(absl::string_view text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  size_t i = !s.empty() && s[0] == '-' ? 1 : 0;
  if (s.size() == i || Digits(s, i) != s.size() - i) {
    return Bad(text, "integer", "expected decimal digits, e.g. 42");
  }
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc::result_out_of_range) {
    return Bad(text, "integer",
               absl::StrCat("out of range (", std::numeric_limits<int64_t>::min(), "..",
                            std::numeric_limits<int64_t>::max(), ")"));
  }
  if (ec != std::errc() || end != s.data() + s.size()) {
    return Bad(text, "integer", "expected decimal digits, e.g. 42");
  }
  return v;
}

absl::StatusOr<uint64_t> ParseUint64(absl::string_view text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  if (!s.empty() && s[0] == '-') return Bad(text, "count", "negative");
  if (s.empty() || Digits(s, 0) != s.size()) {
    return Bad(text, "count", "expected decimal digits, e.g. 42");
  }
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc::result_out_of_range) {
    return Bad(text, "count",
               absl::StrCat("too large (at most ", std::numeric_limits<uint64_t>::max(), ")"));
  }
  if (ec != std::errc() || end != s.data() + s.size()) {
    return Bad(text, "count", "expected decimal digits, e.g. 42");
  }
  return v;
}

absl::StatusOr<int64_t> ParseInt64InRange(absl::string_view text, int64_t min, int64_t max) {
  absl::StatusOr<int64_t> v = ParseInt64(text);
  if (v.ok() && (*v < min || *v > max)) {
    return Bad(text, "integer", absl::StrCat("outside ", min, "..", max));
  }
  return v;
}

absl::StatusOr<double> ParseDecimalInRange(absl::string_view text, double min, double max) {
  absl::StatusOr<double> v = ParseDecimal(text);
  if (v.ok() && (*v < min || *v > max)) {
    return Bad(text, "number", absl::StrCat("outside [", min, ", ", max, "]"));
  }
  return v;
}

}  // namespace vgpu
