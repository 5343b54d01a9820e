// Logical devices made directly from executors, for tests and for vgpu-train until the device
// registry (devices/runtime.h) builds them from a RuntimeConfig: N slices of one physical device
// with a hard limit each, and CPU:0 over host memory. The allocator is a plain pass-through
// over Executor::Allocate with a limit and peak accounting (no caching; every buffer the
// strategies use is allocated once, before training).
//
// Thread safety: LimitedExecutorAllocator is thread-safe (Allocator's contract); a DeviceSet is
// immutable after creation.
#ifndef VGPU_STRATEGIES_DEVICE_SET_H_
#define VGPU_STRATEGIES_DEVICE_SET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "vgpu/allocator/allocator.h"
#include "vgpu/devices/logical_device.h"
#include "vgpu/runtime/platform.h"

namespace vgpu {
namespace strategies {

// Device memory (or, with `host_memory`, pinned host memory) from one executor, limited to
// `limit` bytes (0 = unlimited). OOM is ResourceExhausted naming the device and the numbers.
class LimitedExecutorAllocator : public Allocator {
 public:
  LimitedExecutorAllocator(Executor* executor, std::string device_name, uint64_t limit,
                           bool host_memory = false);
  ~LimitedExecutorAllocator() override;
  std::string name() const override { return device_name_; }
  AllocatorStats Stats() const override;

 private:
  absl::StatusOr<void*> DoAllocate(uint64_t bytes, uint64_t alignment) override;
  absl::Status DoDeallocate(void* ptr) override;

  struct Block {
    void* raw;
    uint64_t bytes;  // rounded, as accounted
  };
  Executor* const executor_;
  const std::string device_name_;
  const uint64_t limit_;
  const bool host_memory_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<void*, Block> blocks_ ABSL_GUARDED_BY(mu_);
  AllocatorStats stats_ ABSL_GUARDED_BY(mu_);
};

// Owns logical devices built by the functions below.
struct DeviceSet {
  std::vector<std::unique_ptr<LogicalDevice>> owned;
  std::vector<LogicalDevice*> gpus;  // GPU:0.. in order
  LogicalDevice* cpu = nullptr;      // CPU:0 when requested
};

// `sizes[i]` bytes for GPU:i, all on `platform`'s physical device `ordinal`; optionally CPU:0
// (host memory through the same executor). InvalidArgument when the sizes exceed the physical
// device's total memory.
absl::StatusOr<DeviceSet> CreateDeviceSet(Platform* platform, int ordinal,
                                          const std::vector<uint64_t>& sizes, bool with_cpu);

// One GPU:i per physical device listed (a whole-device limit each), optionally CPU:0.
absl::StatusOr<DeviceSet> CreateDeviceSetAcrossPhysical(Platform* platform,
                                                        const std::vector<int>& ordinals,
                                                        uint64_t bytes_each, bool with_cpu);

}  // namespace strategies
}  // namespace vgpu

#endif  // VGPU_STRATEGIES_DEVICE_SET_H_
