// Fuzzes gzip input (runtime/gzip.h) and the trace importer behind it on the same bytes: never
// crashes, leaks or hangs; errors name the input; the output never passes the cap; a stream
// Gunzip refuses is refused by the importer too (never read as text).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "vgpu/allocator/trace_import.h"
#include "vgpu/runtime/gzip.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Gzip inputs, whatever the fuzzer mutates: the magic bytes first.
  std::string bytes = "\x1f\x8b";
  bytes.append(reinterpret_cast<const char*>(data), size);
  constexpr uint64_t kCap = 1 << 20;  // small, so the fuzzer reaches it too
  auto out = vgpu::Gunzip(bytes, kCap, "fuzz");
  if (!out.ok() && out.status().message().rfind("fuzz: ", 0) != 0) std::abort();
  if (out.ok() && out->size() > kCap) std::abort();
  auto t = vgpu::ParseAnyTrace(bytes, "fuzz");
  if (!t.ok() && t.status().message().rfind("fuzz", 0) != 0) std::abort();
  if (absl::IsInvalidArgument(out.status()) && t.ok()) std::abort();
  return 0;
}
