#include "vgpu/runtime/bytes.h"

#include <cmath>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "vgpu/runtime/user_text.h"

namespace vgpu {

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < kKiB) return absl::StrCat(bytes, " B");
  int unit = 0;
  long double value = static_cast<long double>(bytes);
  while (value >= 1024.0L && unit < 6) {
    value /= 1024.0L;
    ++unit;
  }
  std::string s = absl::StrFormat("%.2Lf", value);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return absl::StrCat(s, " ", kUnits[unit]);
}

namespace {

// The examples show a percentage only where one is accepted (a total is known).
absl::Status BadBytes(absl::string_view text, absl::string_view why, bool percent_ok) {
  return absl::InvalidArgumentError(absl::StrCat("invalid byte size ", QuoteUserText(text), ": ",
                                                 why, " (examples: 1024, ", "512MiB, 1.5GiB, 4GB",
                                                 percent_ok ? ", 40%" : "", ")"));
}

}  // namespace

absl::StatusOr<uint64_t> ParseBytes(absl::string_view text, std::optional<uint64_t> total) {
  auto Bad = [&](absl::string_view text, absl::string_view why) {
    return BadBytes(text, why, total.has_value());
  };
  absl::string_view s = absl::StripAsciiWhitespace(text);
  if (s.empty()) return Bad(text, "empty");
  if (s[0] == '-') return Bad(text, "negative");
  if (s[0] == '+') return Bad(text, "sign not allowed");
  // Integer part and optional fraction, parsed exactly (no strtod locale surprises).
  size_t i = 0;
  unsigned __int128 integer = 0;
  bool any_digit = false;
  while (i < s.size() && absl::ascii_isdigit(s[i])) {
    integer = integer * 10 + (s[i] - '0');
    if (integer > std::numeric_limits<uint64_t>::max()) return Bad(text, "too large");
    any_digit = true;
    ++i;
  }
  uint64_t frac_num = 0, frac_den = 1;
  bool has_fraction = false;
  if (i < s.size() && s[i] == '.') {
    has_fraction = true;
    ++i;
    bool frac_digit = false;
    while (i < s.size() && absl::ascii_isdigit(s[i])) {
      if (frac_den < 1000000000000000000ULL) {  // keep 18 digits, ignore the rest
        frac_num = frac_num * 10 + (s[i] - '0');
        frac_den *= 10;
      }
      frac_digit = true;
      ++i;
    }
    if (!frac_digit) return Bad(text, "no digits after the decimal point");
  }
  if (!any_digit) return Bad(text, "no number");
  absl::string_view unit = s.substr(i);
  if (!unit.empty() && unit[0] == ' ') unit.remove_prefix(1);
  if (unit == "%") {
    if (!total.has_value()) return Bad(text, "a percentage needs a known total");
    long double pct = static_cast<long double>(integer) +
                      static_cast<long double>(frac_num) / static_cast<long double>(frac_den);
    if (pct > 100.0L) return Bad(text, "percentage above 100%");
    return static_cast<uint64_t>(std::floor(pct / 100.0L * static_cast<long double>(*total)));
  }
  std::string lower = absl::AsciiStrToLower(unit);
  unsigned __int128 multiplier;
  if (lower.empty() || lower == "b") {
    multiplier = 1;
  } else if (lower == "kib" || lower == "k") {
    multiplier = kKiB;
  } else if (lower == "mib" || lower == "m") {
    multiplier = kMiB;
  } else if (lower == "gib" || lower == "g") {
    multiplier = kGiB;
  } else if (lower == "tib" || lower == "t") {
    multiplier = kGiB * kKiB;
  } else if (lower == "kb") {
    multiplier = 1000;
  } else if (lower == "mb") {
    multiplier = 1000 * 1000;
  } else if (lower == "gb") {
    multiplier = 1000ULL * 1000 * 1000;
  } else if (lower == "tb") {
    multiplier = 1000ULL * 1000 * 1000 * 1000;
  } else {
    return Bad(text,
               absl::StrCat("unknown unit ", QuoteUserText(unit), " (use B, KiB, MiB, GiB, TiB, ",
                            "KB, MB, GB", total.has_value() ? ", TB or %)" : " or TB)"));
  }
  if (has_fraction && multiplier == 1) return Bad(text, "fraction of a byte");
  unsigned __int128 whole = integer * multiplier;
  unsigned __int128 part = static_cast<unsigned __int128>(frac_num) * multiplier / frac_den;
  unsigned __int128 result = whole + part;
  if (result > std::numeric_limits<uint64_t>::max()) return Bad(text, "too large");
  return static_cast<uint64_t>(result);
}

}  // namespace vgpu
