// The SubAllocators BFCAllocator takes its regions from:
//   DeviceSubAllocator     - Executor::Allocate/Free (host platform memory, cuMemAlloc on cuda)
//   PagedDeviceSubAllocator - regions of separately mapped pages (the Executor's VMM calls:
//                            cuMemCreate + cuMemMap per page), which can lend free pages to a
//                            new address range (SubAllocator::GatherPages)
//   PinnedHostSubAllocator - Executor::HostAllocate/HostFree (page-locked host memory, CPU:0)
//   HostMemorySubAllocator - plain aligned host memory (CPU:0 without an executor)
//   FakeSubAllocator       - fake addresses that are never touched: tests and trace replay, so
//                            a 100 GiB trace replays on any machine. Optional capacity and an
//                            optional "fail every call after the first N" for failure tests.
//
// Thread safety: all are safe to call from any thread.
#ifndef VGPU_ALLOCATOR_SUB_ALLOCATORS_H_
#define VGPU_ALLOCATOR_SUB_ALLOCATORS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "vgpu/allocator/sub_allocator.h"
#include "vgpu/runtime/mutex.h"
#include "vgpu/runtime/platform.h"

namespace vgpu {

class DeviceSubAllocator final : public SubAllocator {
 public:
  explicit DeviceSubAllocator(Executor* executor) : executor_(executor) {}
  std::string name() const override;
  absl::StatusOr<void*> Alloc(uint64_t bytes, uint64_t alignment) override;
  absl::Status Free(void* ptr, uint64_t bytes) override;

 private:
  Executor* const executor_;
};

// One physical allocation per page of the device's VMM granularity, mapped back to back into a
// reserved range: on a card the memory is as taken as by cuMemAlloc (it counts against the card
// from Alloc on), but a page can be mapped elsewhere, which a cuMemAlloc'd region cannot.
class PagedDeviceSubAllocator final : public SubAllocator {
 public:
  // FailedPrecondition when the device has no VMM calls (VirtualMemoryGranularity 0 or an error).
  static absl::StatusOr<std::unique_ptr<PagedDeviceSubAllocator>> Create(Executor* executor);
  ~PagedDeviceSubAllocator() override;
  std::string name() const override;
  // A region of `bytes` rounded up to whole pages (the device keeps the last page's tail, as
  // cuMemAlloc rounds to its pages).
  absl::StatusOr<void*> Alloc(uint64_t bytes, uint64_t alignment) override;
  absl::Status Free(void* ptr, uint64_t bytes) override;
  uint64_t page_bytes() const override { return page_; }
  absl::StatusOr<void*> GatherPages(void* region, absl::Span<const PageRun> runs) override;
  absl::Status ReturnPages(void* range, void* region, absl::Span<const PageRun> runs) override;

 private:
  PagedDeviceSubAllocator(Executor* executor, uint64_t page) : executor_(executor), page_(page) {}
  struct PagedRegion {
    uint64_t bytes = 0;  // whole pages
    std::vector<PhysicalMemoryHandle> pages;
  };
  // InvalidArgument unless `run` is whole pages inside region r (at `region`), for GatherPages
  // and ReturnPages alike.
  absl::Status CheckRun(const PageRun& run, const PagedRegion& r, const void* region) const;
  // Releases handles[0, n) (after a failed Alloc or at Free).
  void ReleaseHandles(const PhysicalMemoryHandle* handles, size_t n);

  Executor* const executor_;
  const uint64_t page_;
  vgpu::Mutex mu_;
  std::map<uint64_t, PagedRegion> regions_ ABSL_GUARDED_BY(mu_);  // by address
  absl::flat_hash_map<uint64_t, uint64_t> ranges_
      ABSL_GUARDED_BY(mu_);  // gathered: address -> bytes
};

class PinnedHostSubAllocator final : public SubAllocator {
 public:
  explicit PinnedHostSubAllocator(Executor* executor) : executor_(executor) {}
  std::string name() const override;
  absl::StatusOr<void*> Alloc(uint64_t bytes, uint64_t alignment) override;
  absl::Status Free(void* ptr, uint64_t bytes) override;

 private:
  Executor* const executor_;
};

class HostMemorySubAllocator final : public SubAllocator {
 public:
  std::string name() const override { return "host memory"; }
  absl::StatusOr<void*> Alloc(uint64_t bytes, uint64_t alignment) override;
  absl::Status Free(void* ptr, uint64_t bytes) override;

 private:
  vgpu::Mutex mu_;
  absl::flat_hash_map<void*, uint64_t> live_ ABSL_GUARDED_BY(mu_);  // validates Free
};

struct FakeSubAllocatorOptions {
  uint64_t capacity = 0;  // total bytes it may hand out at once; 0 = unlimited
  // Every Alloc call after the first `fail_after_calls` fails (ResourceExhausted); -1 = never.
  int64_t fail_after_calls = -1;
  // First address handed out. Addresses are bump-allocated and never reused, so tests can
  // predict them.
  uint64_t base_address = uint64_t{1} << 40;
};

class FakeSubAllocator final : public SubAllocator {
 public:
  FakeSubAllocator() : FakeSubAllocator(FakeSubAllocatorOptions{}) {}
  explicit FakeSubAllocator(FakeSubAllocatorOptions options);
  std::string name() const override { return "fake"; }
  absl::StatusOr<void*> Alloc(uint64_t bytes, uint64_t alignment) override;
  absl::Status Free(void* ptr, uint64_t bytes) override;
  bool fake() const override { return true; }

  // Counters for tests.
  int64_t alloc_calls() const;
  int64_t free_calls() const;
  uint64_t bytes_outstanding() const;
  uint64_t regions_outstanding() const;

 private:
  const FakeSubAllocatorOptions options_;
  mutable vgpu::Mutex mu_;
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t alloc_calls_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t free_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, uint64_t> live_ ABSL_GUARDED_BY(mu_);  // address -> bytes
};

}  // namespace vgpu

#endif  // VGPU_ALLOCATOR_SUB_ALLOCATORS_H_
