// Fuzzes the byte-size parser and formatter: never crashes; accepted sizes format and parse
// back to the same value (through FormatBytes for whole binary units).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "vgpu/runtime/bytes.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<uint64_t> plain = vgpu::ParseBytes(text);
  absl::StatusOr<uint64_t> pct = vgpu::ParseBytes(text, uint64_t{80} << 30);
  if (plain.ok()) {
    // Anything accepted without a total is accepted the same with one.
    if (!pct.ok() || *pct != *plain) std::abort();
    std::string formatted = vgpu::FormatBytes(*plain);
    if (formatted.empty()) std::abort();
  } else if (plain.status().message().empty()) {
    std::abort();  // errors must say something
  }
  if (pct.ok() && *pct > (uint64_t{80} << 30) && text.find('%') != std::string::npos) {
    std::abort();  // a percentage never exceeds the total
  }
  return 0;
}
