// The tests' fake VMM device: an Executor whose virtual-memory calls are pure bookkeeping
// (fake addresses, counted calls, never touching memory), checked like a driver checks them
// (granular sizes, known handles, maps inside reservations, no double mapping), so tests see
// misuse as errors and can look up what is mapped where. With `checked` false it is vgpu-bench's
// address-only device (counters only), for replays. Also: the helpers that build a vmm allocator
// (or a BFC over its pages) over one and compare its granule counts with the device's, and
// PhysicalMap, which proves that no physical byte belongs to two live blocks.
//
// Thread safety: FakeVmmExecutor is safe to call from any thread (one mutex in checked mode,
// atomics otherwise); the helpers and PhysicalMap are called from the test's thread.
#ifndef VGPU_TESTS_FAKE_VMM_EXECUTOR_H_
#define VGPU_TESTS_FAKE_VMM_EXECUTOR_H_

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "vgpu/allocator/bfc_allocator.h"
#include "vgpu/allocator/vmm_allocator.h"
#include "vgpu/runtime/mutex.h"
#include "vgpu/tools/vgpu_bench.h"

namespace vgpu::testing {

// `physical_capacity` (0 = unlimited) makes CreatePhysicalMemory fail with ResourceExhausted
// past that many bytes, like a full card. `va_base` is the first fake address (rounded up to
// the granule); give two devices different bases when a test needs their allocators'
// addresses to differ.
class FakeVmmExecutor : public bench::FakeAddressExecutor {
 public:
  explicit FakeVmmExecutor(uint64_t granularity, uint64_t physical_capacity = 0,
                           bool checked = true, uint64_t va_base = kDefaultVaBase);

  absl::StatusOr<void*> ReserveAddressRange(uint64_t bytes) override;
  absl::Status FreeAddressRange(void* va, uint64_t bytes) override;
  absl::StatusOr<PhysicalMemoryHandle> CreatePhysicalMemory(uint64_t bytes) override;
  absl::Status ReleasePhysicalMemory(PhysicalMemoryHandle handle) override;
  // Checked: one by one through the two above (Executor's loops); else the fast batch.
  absl::StatusOr<size_t> CreatePhysicalMemories(uint64_t bytes, size_t n,
                                                PhysicalMemoryHandle* out) override;
  absl::Status ReleasePhysicalMemories(const PhysicalMemoryHandle* handles, size_t n,
                                       size_t* released) override;
  absl::Status Map(void* va, uint64_t bytes, PhysicalMemoryHandle handle, uint64_t offset) override;
  // Checked: one checked Map per allocation (Executor's loop), so each is verified.
  absl::Status MapAll(void* va, const PhysicalMemoryHandle* handles, size_t n) override;
  absl::Status Unmap(void* va, uint64_t bytes) override;

  uint64_t reserved_ranges() const;
  // The physical (handle, offset) mapped at granule-aligned `va`; NotFound when unmapped,
  // FailedPrecondition when not `checked`.
  absl::StatusOr<std::pair<uint64_t, uint64_t>> Translate(const void* va) const;

 private:
  const bool checked_;
  mutable vgpu::Mutex mu_;
  std::map<uint64_t, uint64_t> ranges_ ABSL_GUARDED_BY(mu_);               // va -> bytes
  absl::flat_hash_map<uint64_t, uint64_t> handles_ ABSL_GUARDED_BY(mu_);   // handle -> bytes
  absl::flat_hash_map<uint64_t, uint64_t> map_refs_ ABSL_GUARDED_BY(mu_);  // handle -> granules
  // granule va -> (handle, offset): 50k entries for 100 GiB, so replays stay cheap.
  absl::flat_hash_map<uint64_t, std::pair<uint64_t, uint64_t>> granules_ ABSL_GUARDED_BY(mu_);
};

// The physical bytes of live blocks on a checked device, to prove that no byte belongs to two
// of them: each block's virtual range is translated granule by granule through the device's
// page table (tail sharing, edge views and gathered pages map one physical granule at several
// addresses, so virtual addresses alone prove nothing). Not thread-safe.
class PhysicalMap {
 public:
  explicit PhysicalMap(const FakeVmmExecutor* device) : device_(device) {}

  // Adds the block of `bytes` at `p`; InternalError (nothing added) when a byte of it is not
  // mapped or is already a live block's, this block's own included.
  absl::Status Add(const void* p, uint64_t bytes);
  // Takes out the block added at `p`; NotFound when none is.
  absl::Status Remove(const void* p);

 private:
  struct Piece {
    uint64_t handle, lo, hi;  // bytes [lo, hi) of physical allocation `handle`
  };
  const FakeVmmExecutor* device_;
  absl::flat_hash_map<uint64_t, std::map<uint64_t, uint64_t>> by_handle_;  // lo -> hi
  absl::flat_hash_map<uint64_t, std::vector<Piece>> pieces_;               // block -> pieces
};

// A vmm allocator over its own fake device (destroyed after the allocator).
struct FakeVmm {
  std::unique_ptr<FakeVmmExecutor> backend;
  std::unique_ptr<VmmAllocator> alloc;
};
// Over a checked (or not) fake device of `granularity`; the allocator is null when Create
// fails, and `status` says why.
FakeVmm MakeFakeVmm(uint64_t granularity, VmmOptions options, uint64_t capacity = 0,
                    bool checked = true, uint64_t va_base = FakeVmmExecutor::kDefaultVaBase,
                    absl::Status* status = nullptr);
// An allocator that owns its unchecked fake device, for replays and suites that take a plain
// std::unique_ptr<Allocator> (the device lives until the end of the test program).
absl::StatusOr<std::unique_ptr<Allocator>> CreateFakeVmmAllocator(uint64_t granularity,
                                                                  VmmOptions options);
// BFC without growth over PagedDeviceSubAllocator on `executor`, gathering pages or not
// (BFCOptions::gather_pages): what the factory builds where a device has VMM calls.
absl::StatusOr<std::unique_ptr<BFCAllocator>> CreatePagedBfc(Executor* executor, uint64_t limit,
                                                             bool gather = true);
// The same over its own checked fake device of `page` bytes whose addresses start at va_base,
// for suites that own only the allocator (the device lives until the end of the test program).
absl::StatusOr<std::unique_ptr<Allocator>> CreateFakePagedBfc(uint64_t page, uint64_t va_base,
                                                              uint64_t limit);
// The allocator's CheckInvariants, then its granule counts against the device's: bytes mapped
// and physical bytes held must agree.
absl::Status CheckFakeVmm(const FakeVmm& f);
absl::Status CheckFakeVmm(const VmmAllocator& alloc, const FakeVmmExecutor& backend);

}  // namespace vgpu::testing

#endif  // VGPU_TESTS_FAKE_VMM_EXECUTOR_H_
