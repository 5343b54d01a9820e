// Byte sizes as people write them: a formatter ("1.5 GiB") and a strict parser used by every
// configuration grammar ("1.5GiB", "512MiB", "4GB", "1024", "40%" of a known total).
//
// Thread safety: pure functions; safe from any thread.
#ifndef VGPU_RUNTIME_BYTES_H_
#define VGPU_RUNTIME_BYTES_H_

#include <cstdint>
#include <optional>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace vgpu {

inline constexpr uint64_t kKiB = uint64_t{1} << 10;
inline constexpr uint64_t kMiB = uint64_t{1} << 20;
inline constexpr uint64_t kGiB = uint64_t{1} << 30;

// "0 B", "512 B", "1.5 KiB", "8 GiB", "1.25 TiB": binary units, at most 2 decimals, trailing
// zeros dropped.
std::string FormatBytes(uint64_t bytes);

// Parses a size. Accepted: a non-negative decimal number (fraction allowed with a unit)
// followed by an optional unit B, KiB, MiB, GiB, TiB (binary) or KB, MB, GB, TB (decimal),
// case-insensitive, optional single space before the unit; or "N%" of `total` when `total`
// is given. Rejected with InvalidArgument naming the text: empty, negative, unknown unit,
// trailing junk, a fraction of a byte count without unit, overflow past 2^64-1, and "%"
// without a total. Whole bytes: fractional results are rounded down.
absl::StatusOr<uint64_t> ParseBytes(absl::string_view text,
                                    std::optional<uint64_t> total = std::nullopt);

}  // namespace vgpu

#endif  // VGPU_RUNTIME_BYTES_H_
