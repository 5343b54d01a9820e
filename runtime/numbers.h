// Strict parsers for the numbers users type (flags, VGPU_* variables, tuning knobs): decimal
// only, locale-independent, the whole text or nothing. Hex ("0x10"), hex floats ("0x1p-1"),
// inf/nan, signs where none belong, embedded junk and values out of range are refused with an
// InvalidArgument that quotes the text. Surrounding ASCII whitespace (including a CR from a
// CRLF file) is ignored, as ParseBytes does.
//
// Thread safety: pure functions; safe from any thread.
#ifndef VGPU_RUNTIME_NUMBERS_H_
#define VGPU_RUNTIME_NUMBERS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vgpu {

// A finite decimal number: [-]digits[.digits][e[+-]digits] (or [-].digits...). Refused: empty,
// hex, inf, nan, a value whose magnitude overflows a double ("1e999") or underflows to a
// subnormal ("5e-318": too small to mean anything a user wants).
absl::StatusOr<double> ParseDecimal(absl::string_view text);

// Whole numbers: optional '-' (signed only), then decimal digits; nothing else.
absl::StatusOr<int64_t> ParseInt64(absl::string_view text);
absl::StatusOr<uint64_t> ParseUint64(absl::string_view text);

// The same with an inclusive range; the error names the range.
absl::StatusOr<int64_t> ParseInt64InRange(absl::string_view text, int64_t min, int64_t max);
absl::StatusOr<double> ParseDecimalInRange(absl::string_view text, double min, double max);

}  // namespace vgpu

#endif  // VGPU_RUNTIME_NUMBERS_H_
