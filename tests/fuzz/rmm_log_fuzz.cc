// Fuzzes the RMM log importer: never crashes; errors name the input; an accepted log is a
// consistent trace whose vgpu text (FormatTrace) parses back to the same events and peak.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "vgpu/allocator/trace.h"
#include "vgpu/allocator/trace_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto t = vgpu::ParseRmmLog(text, "fuzz");
  if (!t.ok()) {
    if (t.status().message().rfind("fuzz", 0) != 0) std::abort();
    return 0;
  }
  auto back = vgpu::ParseTrace(vgpu::FormatTrace(*t), "fuzz");
  if (!back.ok()) std::abort();
  if (back->peak_live_bytes != t->peak_live_bytes || back->events.size() != t->events.size() ||
      back->num_streams != t->num_streams) {
    std::abort();
  }
  for (size_t i = 0; i < t->events.size(); ++i) {
    const auto& a = t->events[i];
    const auto& b = back->events[i];
    if (a.alloc != b.alloc || a.id != b.id || a.bytes != b.bytes || a.slot != b.slot ||
        a.stream != b.stream) {
      std::abort();
    }
  }
  return 0;
}
