// Fuzzes the VGPU_HOST_DEVICES grammar: never crashes, accepted lists are 1..64 devices of at
// least 2 MiB, and errors name the variable.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "vgpu/runtime/host/host_platform.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto devices = vgpu::ParseHostDevices(text);
  if (devices.ok()) {
    if (devices->empty() || devices->size() > 64) std::abort();
    for (uint64_t b : *devices) {
      if (b < vgpu::kHostVmmGranularity) std::abort();
    }
  } else if (devices.status().message().find("VGPU_HOST_DEVICES") == std::string::npos) {
    std::abort();
  }
  return 0;
}
