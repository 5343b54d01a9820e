// Fuzzes the allocation-trace parser: never crashes; an accepted trace is consistent (every
// free matches a live block, peak live bytes is what the events imply); errors name the line.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "vgpu/allocator/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto t = vgpu::ParseTrace(text, "fuzz");
  if (!t.ok()) {
    if (t.status().message().rfind("fuzz", 0) != 0) std::abort();
    return 0;
  }
  absl::flat_hash_map<uint64_t, uint64_t> live;
  uint64_t bytes = 0, peak = 0;
  for (const auto& e : t->events) {
    if (e.alloc) {
      if (!live.emplace(e.id, e.bytes).second) std::abort();
      bytes += e.bytes;
      if (bytes > peak) peak = bytes;
    } else {
      auto it = live.find(e.id);
      if (it == live.end()) std::abort();
      bytes -= it->second;
      live.erase(it);
    }
  }
  if (peak != t->peak_live_bytes) std::abort();
  return 0;
}
