// Fuzzes zip input (runtime/zip.h) and the trace importer behind it on the same bytes: never
// crashes, leaks or hangs; errors name the input; no member read passes the cap or its stated
// size; an archive whose directory cannot be read is refused by the importer too.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "vgpu/allocator/trace_import.h"
#include "vgpu/runtime/zip.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Zip inputs, whatever the fuzzer mutates: a local header's signature first.
  std::string bytes = "PK\x03\x04";
  bytes.append(reinterpret_cast<const char*>(data), size);
  constexpr uint64_t kCap = 1 << 20;  // small, so the fuzzer reaches it too
  auto members = vgpu::ListZip(bytes, "fuzz");
  if (!members.ok() && members.status().message().rfind("fuzz: ", 0) != 0) std::abort();
  if (members.ok()) {
    for (const vgpu::ZipMember& m : *members) {
      auto out = vgpu::ReadZipMember(bytes, m, kCap, "fuzz");
      if (!out.ok() && out.status().message().rfind("fuzz: ", 0) != 0) std::abort();
      if (out.ok() && (out->size() > kCap || out->size() != m.bytes)) std::abort();
    }
  }
  auto t = vgpu::ParseAnyTrace(bytes, "fuzz");
  if (!t.ok() && t.status().message().rfind("fuzz", 0) != 0) std::abort();
  if (!members.ok() && t.ok()) std::abort();
  return 0;
}
