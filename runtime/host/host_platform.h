// The `host` platform: N simulated GPUs in host memory, for CI and GPU-less machines. It keeps
// the same contracts as `cuda` (memory accounted against each device's capacity, in-order
// asynchronous streams with events, virtual memory with granules), so code tested here
// behaves the same on a GPU.
//
// Registered as "host" (priority 0: "auto" takes it when no other platform has a device) and
// configured by VGPU_HOST_DEVICES: "2x16GiB" (two devices of 16 GiB), "16GiB,8GiB", or unset
// (one 8 GiB device), and VGPU_HOST_FAULTS (runtime/host/host_faults.h).
//
// Thread safety: as in runtime/platform.h; every class here is safe from any thread.
#ifndef VGPU_RUNTIME_HOST_HOST_PLATFORM_H_
#define VGPU_RUNTIME_HOST_HOST_PLATFORM_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "vgpu/runtime/host/host_faults.h"
#include "vgpu/runtime/platform.h"
#include "vgpu/runtime/platform_registry.h"

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

  // The host communicator (runtime/host/host_collectives.h), OpenBLAS's threads and the
  // faults below.
  bool HasCommunicator() const override { return true; }
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> CreateCommunicator(
      absl::Span<Executor* const> executors) override;
  void SetBlasThreads(int threads) override;
  absl::StatusOr<FaultInjector*> GetFaultInjector() override { return &fault_injector_; }

  HostFaultInjection& faults() { return faults_; }

 private:
  HostPlatform() = default;
  HostFaultInjection faults_;
  HostFaultInjector fault_injector_{&faults_};
  std::vector<std::unique_ptr<Executor>> executors_;
};

// The registry's factory: the devices of VGPU_HOST_DEVICES in `settings`, then its
// VGPU_HOST_FAULTS applied. InvalidArgument naming the setting when either is bad.
absl::StatusOr<std::unique_ptr<HostPlatform>> CreateHostPlatform(const SettingLookup& settings);

}  // namespace vgpu

#endif  // VGPU_RUNTIME_HOST_HOST_PLATFORM_H_
