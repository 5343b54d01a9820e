// The `host` platform: N simulated GPUs in host memory, for CI and GPU-less machines. It keeps
// the same contracts as `cuda` (memory accounted against each device's capacity, in-order
// asynchronous streams with events, virtual memory with granules), so code tested here
// behaves the same on a GPU.
//
// Configured by VGPU_HOST_DEVICES: "2x16GiB" (two devices of 16 GiB), "16GiB,8GiB", or unset
// (one 8 GiB device).
//
// Thread safety: as in runtime/platform.h; every class here is safe from any thread.
#ifndef VGPU_RUNTIME_HOST_HOST_PLATFORM_H_
#define VGPU_RUNTIME_HOST_HOST_PLATFORM_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "vgpu/runtime/platform.h"

namespace vgpu {

inline constexpr uint64_t kHostDefaultDeviceBytes = uint64_t{8} << 30;
// Simulated VMM granularity (that of current NVIDIA GPUs).
inline constexpr uint64_t kHostVmmGranularity = uint64_t{2} << 20;
// Caps on the simulated cards: their memory is mmap'ed address space, and the vmm allocator
// reserves more ranges beside it, all inside the process's 128 TiB (x86-64 user space). Half
// of it per card and in total leaves room for the reservations and the process itself.
inline constexpr uint64_t kHostMaxDeviceBytes = uint64_t{64} << 40;
inline constexpr uint64_t kHostMaxTotalBytes = uint64_t{64} << 40;
inline constexpr size_t kHostMaxDevices = 64;

// Fault injection for reliability tests. Counters are 1-based: "fail the k-th call"; 0 means
// never. Shared by all executors of the platform and safe to change while running.
struct HostFaultInjection {
  std::atomic<int64_t> fail_allocate_at{0};   // k-th Executor::Allocate/CreatePhysicalMemory
  std::atomic<int64_t> fail_memcpy_at{0};     // k-th memcpy fails with Internal
  std::atomic<int64_t> corrupt_memcpy_at{0};  // k-th memcpy flips a byte and "succeeds"
  std::atomic<int64_t> fail_stream_at{0};     // k-th CreateStream fails
  std::atomic<bool> ignore_capacity{false};   // Allocate ignores the simulated capacity
  // Simulates a kernel that does not align large mappings: the raw mmap behind
  // ReserveAddressRange lands this many bytes (rounded down to a page, modulo the granule)
  // past a granule boundary. ReserveAddressRange must still return aligned ranges.
  std::atomic<uint64_t> misalign_reservations_by{0};
  // Counters (read-only for users).
  std::atomic<int64_t> allocate_calls{0};
  std::atomic<int64_t> memcpy_calls{0};
  std::atomic<int64_t> stream_calls{0};
};

struct HostPlatformOptions {
  std::vector<uint64_t> device_bytes = {kHostDefaultDeviceBytes};
};

// Queues `task` on a host-platform stream, in order with the rest of its work; a failing task
// makes the stream's error sticky (as a CUDA fault does). InvalidArgument for other streams.
absl::Status EnqueueHostTask(Stream* stream, std::function<absl::Status()> task);

// Parses the VGPU_HOST_DEVICES grammar (decimal counts, sizes as ParseBytes; surrounding
// whitespace, a CR and a UTF-8 BOM ignored). Errors name the bad part, and refuse cards past
// the caps above.
absl::StatusOr<std::vector<uint64_t>> ParseHostDevices(absl::string_view spec);
// The caps above for API users (HostPlatform::Create checks them too): 1..64 devices of
// 2 MiB..64 TiB, at most 64 TiB in total. InvalidArgument naming the device otherwise.
absl::Status CheckHostDeviceSizes(absl::Span<const uint64_t> device_bytes);

class HostPlatform : public Platform {
 public:
  static absl::StatusOr<std::unique_ptr<HostPlatform>> Create(const HostPlatformOptions& options);
  ~HostPlatform() override;

  std::string name() const override { return "host"; }
  int DeviceCount() const override;
  std::string Summary() const override;
  absl::StatusOr<PhysicalDeviceInfo> Describe(int ordinal) override;
  absl::StatusOr<Executor*> GetExecutor(int ordinal) override;

  HostFaultInjection& faults() { return faults_; }

 private:
  HostPlatform() = default;
  HostFaultInjection faults_;
  std::vector<std::unique_ptr<Executor>> executors_;
};

}  // namespace vgpu

#endif  // VGPU_RUNTIME_HOST_HOST_PLATFORM_H_
