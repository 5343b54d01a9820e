// vgpu-bench's address-only device (in vgpu_tools_lib, so the tests' checked fake can build on
// it): see FakeAddressExecutor in tools/vgpu_bench.h.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/status.h"
#include "vgpu/tools/vgpu_bench.h"

namespace vgpu::bench {
namespace {

absl::Status NoSuchCall(absl::string_view what) {
  return absl::UnimplementedError(
      absl::StrCat("fake-address device: ", what, " (it only hands out addresses)"));
}

// The platform every fake-address device reports: named "fake", so names built from it read
// "fake device 0" / "fake-vmm:0".
class FakePlatform final : public Platform {
 public:
  std::string name() const override { return "fake"; }
  int DeviceCount() const override { return 0; }
  std::string Summary() const override { return "fake addresses, no memory"; }
  absl::StatusOr<PhysicalDeviceInfo> Describe(int) override { return NoSuchCall("Describe"); }
  absl::StatusOr<Executor*> GetExecutor(int) override { return NoSuchCall("GetExecutor"); }
};

// A stream with no work to run (there is no memory to touch): events recorded on it are
// complete at once and waits cost nothing but the call, which is what replaying a trace with
// several streams needs to drive the allocators' stream order (slots, masks, waits).
class OrderOnlyEvent final : public Event {
 public:
  absl::StatusOr<bool> Query() override { return true; }
  absl::Status Synchronize() override { return absl::OkStatus(); }
};

class OrderOnlyStream final : public Stream {
 public:
  explicit OrderOnlyStream(Executor* executor) : executor_(executor) {}
  Executor* executor() const override { return executor_; }
  int priority() const override { return 0; }
  absl::Status MemcpyH2D(void*, const void*, uint64_t) override { return NoWork("MemcpyH2D"); }
  absl::Status MemcpyD2H(void*, const void*, uint64_t) override { return NoWork("MemcpyD2H"); }
  absl::Status MemcpyD2D(void*, const void*, uint64_t) override { return NoWork("MemcpyD2D"); }
  absl::Status Memset8(void*, uint8_t, uint64_t) override { return NoWork("Memset8"); }
  absl::Status Memset32(void*, uint32_t, uint64_t) override { return NoWork("Memset32"); }
  absl::Status RecordEvent(Event*) override { return absl::OkStatus(); }
  absl::Status WaitEvent(Event*) override { return absl::OkStatus(); }
  absl::Status LaunchHostFunc(std::function<void()> fn) override {
    fn();
    return absl::OkStatus();
  }
  absl::Status Synchronize() override { return absl::OkStatus(); }

 private:
  static absl::Status NoWork(const char* call) {
    return absl::UnimplementedError(
        absl::StrCat("the fake-address device has no memory to ", call, " (address-only)"));
  }
  Executor* const executor_;
};

}  // namespace

Platform* FakeAddressExecutor::platform() const {
  static FakePlatform* const platform = new FakePlatform();
  return platform;
}

FakeAddressExecutor::FakeAddressExecutor(uint64_t granularity, uint64_t physical_capacity,
                                         uint64_t va_base)
    : granularity_(granularity),
      physical_capacity_(physical_capacity),
      next_va_(granularity == 0 ? va_base
                                : (va_base + granularity - 1) / granularity * granularity) {}

absl::StatusOr<PhysicalDeviceInfo> FakeAddressExecutor::Describe() {
  PhysicalDeviceInfo info;
  info.name = "fake-address device";
  info.vmm_granularity = granularity_;
  return info;
}

absl::StatusOr<void*> FakeAddressExecutor::Allocate(uint64_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("fake-address device: allocation of 0 bytes");
  // Bump-allocated and 256-aligned from 1 TiB, as FakeSubAllocator hands out regions, so a
  // replay's addresses do not depend on which of the two it runs on.
  uint64_t addr = next_raw_.load(std::memory_order_relaxed), next;
  do {
    next = (addr + 255) / 256 * 256 + bytes;
  } while (!next_raw_.compare_exchange_weak(addr, next, std::memory_order_relaxed));
  return reinterpret_cast<void*>((addr + 255) / 256 * 256);
}

absl::Status FakeAddressExecutor::Free(void* /*ptr*/) { return absl::OkStatus(); }
absl::StatusOr<void*> FakeAddressExecutor::HostAllocate(uint64_t) {
  return NoSuchCall("HostAllocate");
}
absl::Status FakeAddressExecutor::HostFree(void*) { return NoSuchCall("HostFree"); }

absl::StatusOr<uint64_t> FakeAddressExecutor::VirtualMemoryGranularity() {
  if (granularity_ == 0) return NoSuchCall("no VMM granularity");
  return granularity_;
}

absl::Status FakeAddressExecutor::CheckGranularSlow(const char* what, uint64_t bytes) const {
  // A mask for the usual power-of-two granule (a division costs more than the rest of a call).
  const bool pow2 = (granularity_ & (granularity_ - 1)) == 0;
  if (bytes == 0 || (pow2 ? (bytes & (granularity_ - 1)) : bytes % granularity_) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("fake-vmm ", what, ": ", bytes,
                                                   " bytes is not a positive multiple of the "
                                                   "granularity ",
                                                   granularity_));
  }
  return absl::OkStatus();
}

absl::Status FakeAddressExecutor::RefuseCreate(uint64_t bytes, uint64_t created) const {
  return absl::ResourceExhaustedError(absl::StrCat(
      "fake-vmm CreatePhysicalMemory of ", FormatBytes(bytes), ": ", FormatBytes(created), " of ",
      FormatBytes(physical_capacity_), " already created"));
}

uint64_t FakeAddressExecutor::NextRange(uint64_t bytes) {
  // Leave one granule unreserved between ranges so an overrun is caught as "not reserved".
  return next_va_.fetch_add(bytes + granularity_);
}

absl::StatusOr<void*> FakeAddressExecutor::ReserveAddressRange(uint64_t bytes) {
  VGPU_RETURN_IF_ERROR(CheckGranular("ReserveAddressRange", bytes));
  ++ranges_;
  return reinterpret_cast<void*>(NextRange(bytes));
}

absl::Status FakeAddressExecutor::FreeAddressRange(void*, uint64_t) {
  --ranges_;
  return absl::OkStatus();
}

absl::StatusOr<PhysicalMemoryHandle> FakeAddressExecutor::CreatePhysicalMemory(uint64_t bytes) {
  PhysicalMemoryHandle h;
  VGPU_RETURN_IF_ERROR(FakeAddressExecutor::CreatePhysicalMemories(bytes, 1, &h).status());
  return h;
}

absl::Status FakeAddressExecutor::ReleasePhysicalMemory(PhysicalMemoryHandle handle) {
  physical_bytes_ -= handle.bytes;
  return absl::OkStatus();
}

absl::StatusOr<size_t> FakeAddressExecutor::CreatePhysicalMemories(uint64_t bytes, size_t n,
                                                                   PhysicalMemoryHandle* out) {
  if (n == 0) return 0;
  VGPU_RETURN_IF_ERROR(CheckGranular("CreatePhysicalMemory", bytes));
  n = std::min<uint64_t>(n, UINT64_MAX / bytes);  // so n * bytes cannot wrap
  // Counters only, no lock: the capacity check and the update are one compare-exchange.
  uint64_t created = physical_bytes_.load(std::memory_order_relaxed);
  size_t k;
  do {
    k = n;
    if (physical_capacity_ != 0) {
      const uint64_t room = created < physical_capacity_ ? physical_capacity_ - created : 0;
      k = std::min<uint64_t>(n, room / bytes);
      if (k == 0) return RefuseCreate(bytes, created);
    }
  } while (!physical_bytes_.compare_exchange_weak(created, created + k * bytes));
  const uint64_t first = next_handle_.fetch_add(k);
  for (size_t i = 0; i < k; ++i) out[i] = PhysicalMemoryHandle{first + i, bytes};
  return k;
}

absl::Status FakeAddressExecutor::ReleasePhysicalMemories(const PhysicalMemoryHandle* handles,
                                                          size_t n, size_t* released) {
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) total += handles[i].bytes;
  physical_bytes_ -= total;
  *released = n;
  return absl::OkStatus();
}

absl::Status FakeAddressExecutor::Map(void*, uint64_t bytes, PhysicalMemoryHandle handle,
                                      uint64_t offset) {
  VGPU_RETURN_IF_ERROR(CheckGranular("Map", bytes));
  VGPU_RETURN_IF_ERROR(CheckMapsWholeAllocation(handle, offset, bytes));
  mapped_bytes_ += bytes;
  return absl::OkStatus();
}

absl::Status FakeAddressExecutor::MapAll(void*, const PhysicalMemoryHandle* handles, size_t n) {
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    VGPU_RETURN_IF_ERROR(CheckGranular("Map", handles[i].bytes));
    total += handles[i].bytes;
  }
  mapped_bytes_ += total;
  return absl::OkStatus();
}

absl::Status FakeAddressExecutor::Unmap(void*, uint64_t bytes) {
  VGPU_RETURN_IF_ERROR(CheckGranular("Unmap", bytes));
  mapped_bytes_ -= bytes;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int>> FakeAddressExecutor::PartitionSms(absl::Span<const int>) {
  return NoSuchCall("PartitionSms");
}
absl::StatusOr<std::unique_ptr<Stream>> FakeAddressExecutor::CreateStream(const StreamOptions&) {
  return std::unique_ptr<Stream>(std::make_unique<OrderOnlyStream>(this));
}
absl::StatusOr<std::unique_ptr<Event>> FakeAddressExecutor::CreateEvent() {
  return std::unique_ptr<Event>(std::make_unique<OrderOnlyEvent>());
}
absl::StatusOr<Blas*> FakeAddressExecutor::GetBlas() { return NoSuchCall("GetBlas"); }
absl::StatusOr<Kernels*> FakeAddressExecutor::GetKernels() { return NoSuchCall("GetKernels"); }

}  // namespace vgpu::bench
