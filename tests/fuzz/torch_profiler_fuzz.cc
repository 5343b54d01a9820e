// Fuzzes PyTorch profiler trace import (allocator/trace_import.h, ParseTorchProfilerTrace):
// never crashes, leaks or hangs (the scanner bounds its nesting without recursing); errors name
// the input; a trace it reads has frees that match its allocations.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "vgpu/allocator/trace_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (int device : {-1, 0, 1}) {
    vgpu::ImportOptions options;
    if (device >= 0) options.device = device;
    auto t = vgpu::ParseTorchProfilerTrace(text, "fuzz", options);
    if (!t.ok()) {
      if (t.status().message().rfind("fuzz", 0) != 0) std::abort();
      continue;
    }
    uint64_t allocs = 0, frees = 0;
    for (const auto& e : t->events) (e.alloc ? allocs : frees)++;
    if (allocs == 0 || allocs != t->allocations || frees > allocs) std::abort();
  }
  return 0;
}
