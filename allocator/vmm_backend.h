// VmmBackend: the six virtual-memory calls the vmm allocator needs (reserve/free an address
// range, create/release physical memory, map/unmap), behind one small interface so the same
// allocator runs on a real device (any Executor: cuMem* on cuda, memfd pages on host) and on
// pure bookkeeping (FakeVmmBackend: fake addresses, never touches memory) for replaying
// 100 GiB traces and for exact tests.
//
// Thread safety: every implementation here is safe to call from any thread.
#ifndef VGPU_ALLOCATOR_VMM_BACKEND_H_
#define VGPU_ALLOCATOR_VMM_BACKEND_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "vgpu/runtime/platform.h"

namespace vgpu {

class VmmBackend {
 public:
  virtual ~VmmBackend() = default;
  virtual std::string name() const = 0;
  // The VMM granularity: sizes and offsets below are multiples of it.
  virtual uint64_t granularity() const = 0;
  // True when addresses are fake and memory must never be touched.
  virtual bool fake() const = 0;

  virtual absl::StatusOr<void*> ReserveAddressRange(uint64_t bytes) = 0;
  virtual absl::Status FreeAddressRange(void* va, uint64_t bytes) = 0;
  virtual absl::StatusOr<PhysicalMemoryHandle> CreatePhysicalMemory(uint64_t bytes) = 0;
  virtual absl::Status ReleasePhysicalMemory(PhysicalMemoryHandle handle) = 0;
  virtual absl::Status Map(void* va, uint64_t bytes, PhysicalMemoryHandle handle,
                           uint64_t offset) = 0;
  virtual absl::Status Unmap(void* va, uint64_t bytes) = 0;
};

// Over an Executor's VMM calls. FailedPrecondition/Unimplemented from Create when the device
// has no VMM support. The executor must outlive the backend.
absl::StatusOr<std::unique_ptr<VmmBackend>> CreateExecutorVmmBackend(Executor* executor);

// Pure bookkeeping: address ranges come from a counter starting at a high fake base, physical
// memory is a counter, and every call is checked like a driver would (granular sizes, known
// handles, maps inside reservations, no double mapping), so tests see misuse as errors.
// `physical_capacity` (0 = unlimited) makes CreatePhysicalMemory fail with ResourceExhausted
// past that many bytes, like a full card. Checking costs hash lookups per granule; with
// `checked` false only the counters are kept (trace replay measures the allocator, not this).
// `va_base` is the first fake address (rounded up to the granule); give two backends
// different bases when a test needs their allocators' addresses to differ.
class FakeVmmBackend final : public VmmBackend {
 public:
  // Far from anything real, so a stray write faults.
  static constexpr uint64_t kDefaultVaBase = uint64_t{0x7e00} << 32;
  explicit FakeVmmBackend(uint64_t granularity, uint64_t physical_capacity = 0, bool checked = true,
                          uint64_t va_base = kDefaultVaBase);

  std::string name() const override { return "fake-vmm"; }
  uint64_t granularity() const override { return granularity_; }
  bool fake() const override { return true; }

  absl::StatusOr<void*> ReserveAddressRange(uint64_t bytes) override;
  absl::Status FreeAddressRange(void* va, uint64_t bytes) override;
  absl::StatusOr<PhysicalMemoryHandle> CreatePhysicalMemory(uint64_t bytes) override;
  absl::Status ReleasePhysicalMemory(PhysicalMemoryHandle handle) override;
  absl::Status Map(void* va, uint64_t bytes, PhysicalMemoryHandle handle, uint64_t offset) override;
  absl::Status Unmap(void* va, uint64_t bytes) override;

  // Observers for tests.
  uint64_t physical_bytes() const;  // created and not released
  uint64_t mapped_bytes() const;    // currently mapped
  uint64_t reserved_ranges() const;
  // The physical (handle, offset) mapped at granule-aligned `va`; NotFound when unmapped,
  // FailedPrecondition when not `checked`.
  absl::StatusOr<std::pair<uint64_t, uint64_t>> Translate(const void* va) const;

 private:
  absl::Status CheckGranular(const char* what, uint64_t bytes) const;

  const uint64_t granularity_;
  const uint64_t physical_capacity_;
  const bool checked_;
  mutable std::mutex mu_;
  // Atomics so the unchecked mode needs no lock.
  std::atomic<uint64_t> next_va_;
  std::atomic<uint64_t> next_handle_{1};
  std::atomic<uint64_t> physical_bytes_{0};
  std::atomic<uint64_t> mapped_bytes_{0};
  std::atomic<uint64_t> unchecked_ranges_{0};
  std::map<uint64_t, uint64_t> ranges_;               // va -> bytes
  absl::flat_hash_map<uint64_t, uint64_t> handles_;   // handle -> bytes
  absl::flat_hash_map<uint64_t, uint64_t> map_refs_;  // handle -> mapped granules
  // granule va -> (handle, offset): 50k entries for 100 GiB, so replays stay cheap.
  absl::flat_hash_map<uint64_t, std::pair<uint64_t, uint64_t>> granules_;
};

}  // namespace vgpu

#endif  // VGPU_ALLOCATOR_VMM_BACKEND_H_
