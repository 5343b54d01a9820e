// The host platform's faults for reliability tests: the counters its executors and streams
// check (HostFaultInjection, for tests that include this backend), and the neutral
// FaultInjector over them (runtime/fault_injector.h) that tools reach through
// Platform::GetFaultInjector. The platform applies VGPU_HOST_FAULTS="name=value,..." to it
// when it is created.
//
// Thread safety: every field is atomic; safe to change from any thread while devices run.
#ifndef VGPU_RUNTIME_HOST_HOST_FAULTS_H_
#define VGPU_RUNTIME_HOST_HOST_FAULTS_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "vgpu/runtime/fault_injector.h"

namespace vgpu {

// The setting the host platform reads its faults from.
inline constexpr char kHostFaultsEnv[] = "VGPU_HOST_FAULTS";

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

// FaultInjector names: corrupt_memcpy_at, fail_memcpy_at, fail_allocate_at, fail_stream_at,
// ignore_capacity (0 or not); Get also reads allocate_calls, memcpy_calls and stream_calls.
class HostFaultInjector : public FaultInjector {
 public:
  explicit HostFaultInjector(HostFaultInjection* faults) : faults_(faults) {}
  absl::Status Set(absl::string_view name, int64_t value) override;
  absl::StatusOr<int64_t> Get(absl::string_view name) const override;
  std::vector<std::string> FaultNames() const override;

 private:
  HostFaultInjection* faults_;
};

}  // namespace vgpu

#endif  // VGPU_RUNTIME_HOST_HOST_FAULTS_H_
