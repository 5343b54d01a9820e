// Fuzzes the pickle reader and the PyTorch snapshot importer on the same bytes: never crashes,
// leaks or hangs; errors name the input; an accepted snapshot is a consistent trace (every free
// matches a live block, the peak is what the events imply, streams are dense).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "vgpu/allocator/trace_import.h"
#include "vgpu/runtime/pickle_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  // Small limits so that the fuzzer explores them too.
  vgpu::PickleLimits limits;
  limits.max_values = 4096;
  limits.max_marks = 64;
  limits.max_memo = 256;
  auto doc = vgpu::ParsePickle(bytes, "fuzz", limits);
  if (!doc.ok()) {
    if (doc.status().message().rfind("fuzz: pickle at offset ", 0) != 0) std::abort();
  } else if ((*doc)->values() > limits.max_values) {
    std::abort();
  }
  auto t = vgpu::ParseTorchSnapshot(bytes, "fuzz");
  if (!t.ok()) {
    if (t.status().message().rfind("fuzz", 0) != 0) std::abort();
    return 0;
  }
  absl::flat_hash_map<uint64_t, uint64_t> live;
  uint64_t bytes_live = 0, peak = 0;
  for (const auto& e : t->events) {
    if (e.stream >= t->num_streams) std::abort();
    if (e.alloc) {
      if (!live.emplace(e.id, e.bytes).second) std::abort();
      bytes_live += e.bytes;
      if (bytes_live > peak) peak = bytes_live;
    } else {
      auto it = live.find(e.id);
      if (it == live.end()) std::abort();
      bytes_live -= it->second;
      live.erase(it);
    }
  }
  if (peak != t->peak_live_bytes) std::abort();
  return 0;
}
