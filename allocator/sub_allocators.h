// The SubAllocators BFCAllocator takes its regions from:
//   DeviceSubAllocator     - Executor::Allocate/Free (host platform memory, cuMemAlloc on cuda)
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
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "vgpu/runtime/mutex.h"
#include "vgpu/allocator/sub_allocator.h"
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
