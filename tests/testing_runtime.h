// Logical devices for tests, built the way users get them: a RuntimeConfig listing the
// logical GPUs of each physical device, handed to Runtime::Create (so tests run the BFC
// allocator with growth off, the stream setup and the checks users get), plus CPU:0.
//
// Thread safety: the functions are pure; the Runtime they return is as devices/runtime.h says.
#ifndef VGPU_TESTS_TESTING_RUNTIME_H_
#define VGPU_TESTS_TESTING_RUNTIME_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "vgpu/devices/config.h"
#include "vgpu/devices/runtime.h"
#include "vgpu/runtime/platform.h"

namespace vgpu {
namespace testing {

// The logical GPUs of one physical device: `sizes[i]` bytes each, in GPU id order.
struct PhysicalSlices {
  int ordinal = 0;
  std::vector<uint64_t> sizes;
};

// Only the listed physical devices are visible, in the order given; GPU ids run through
// them in that order. Errors are Runtime::Create's (e.g. InvalidArgument when the slices do
// not fit their physical device).
inline absl::StatusOr<std::unique_ptr<Runtime>> CreateTestingRuntime(
    Platform* platform, const std::vector<PhysicalSlices>& physical) {
  RuntimeConfig config;
  config.visible_devices.emplace();
  for (const PhysicalSlices& p : physical) {
    config.visible_devices->push_back(p.ordinal);
    PhysicalDeviceConfig device;
    device.ordinal = p.ordinal;
    for (uint64_t bytes : p.sizes) {
      device.logical_devices.push_back(LogicalDeviceConfig::Bytes(bytes));
    }
    config.logical_devices.push_back(std::move(device));
  }
  return Runtime::Create(config, platform);
}

// `sizes.size()` logical GPUs on physical device `ordinal`.
inline absl::StatusOr<std::unique_ptr<Runtime>> CreateTestingRuntime(Platform* platform,
                                                                     int ordinal,
                                                                     std::vector<uint64_t> sizes) {
  return CreateTestingRuntime(platform, {PhysicalSlices{ordinal, std::move(sizes)}});
}

}  // namespace testing
}  // namespace vgpu

#endif  // VGPU_TESTS_TESTING_RUNTIME_H_
