// The `async` allocator (VGPU_ALLOCATOR=async): the driver's stream-ordered memory pool
// (cuMemAllocFromPoolAsync / cuMemFreeAsync, through Executor::CreateMemoryPool) with OUR hard
// limit on top, like TensorFlow's TF_GPU_ALLOCATOR=cuda_malloc_async and RMM's
// cuda_async_memory_resource. The driver does the placement, splitting and caching; this class
// enforces the logical device's limit, rejects foreign pointers and double frees, reports stats
// and events, and on a device-level OOM waits for its stream, trims the pool and retries once.
//
// Stream order: allocations and frees are ordered on one stream (the logical device's stream,
// or one the allocator makes). A block is safe for work on that stream and, after that stream
// has reached the allocation, for the host and other streams; a freed block may be reused by
// the next allocation once the stream reaches the free, so work on OTHER streams that uses a
// block must be finished (or waited for with an event) before the block is deallocated.
//
// The limit counts bytes in use: each block's request rounded up to 256 bytes, plus
// alignment - 256 for alignments above 256. What the pool holds beyond that (cached freed
// memory, its own rounding) shows as `reserved`; the release threshold (default: the limit)
// bounds what it keeps cached across synchronizations, so logical devices sharing a card do
// not starve each other. allow_growth has no meaning here: the pool always grows on demand.
//
// Thread safety: thread-safe (see allocator.h); one mutex guards all state, and observers are
// called under it. The mutex is released while the OOM path waits for the stream.
#ifndef VGPU_ALLOCATOR_ASYNC_ALLOCATOR_H_
#define VGPU_ALLOCATOR_ASYNC_ALLOCATOR_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "vgpu/allocator/allocator.h"
#include "vgpu/allocator/factory.h"
#include "vgpu/allocator/locks.h"
#include "vgpu/runtime/platform.h"

namespace vgpu {

struct AsyncOptions {
  std::string name = "async";  // device name for messages, e.g. "/device:GPU:0 (physical GPU 0)"
  uint64_t memory_limit = 0;   // hard limit on bytes in use, > 0
  // Freed memory the pool may keep cached across synchronizations; 0 = memory_limit.
  uint64_t release_threshold = 0;
};

class AsyncAllocator final : public Allocator {
 public:
  // A pool on `executor`, ordered on `stream` (which must belong to `executor` and outlive the
  // allocator), or on a stream of its own when `stream` is null. Unimplemented when the
  // platform or driver has no stream-ordered pools.
  static absl::StatusOr<std::unique_ptr<AsyncAllocator>> Create(Executor* executor, Stream* stream,
                                                                AsyncOptions options);
  // Frees what is still live, waits for the stream and destroys the pool.
  ~AsyncAllocator() override;

  std::string name() const override { return options_.name; }
  std::string DumpMemoryLog() const override;
  absl::Status CheckInvariants() const override;
  // Events (AddObserver): alloc/free/oom of every block; map/unmap when the pool's reserved
  // memory grows or shrinks (as observed after an allocation, a trim or a Stats call).

  // Waits for the stream, then gives all cached memory back to the device.
  absl::Status Trim();
  Stream* stream() const { return stream_; }

 private:
  struct Block {
    void* base = nullptr;    // what the pool returned (the pointer handed out is aligned in it)
    uint64_t size = 0;       // bytes taken from the pool and counted in use
    uint64_t requested = 0;  // bytes asked for
    int slot = 0;            // the stream (slot, allocator.h) it was allocated and is freed on
    uint64_t streams = 0;    // recorded streams: the free waits for their work first
  };

  AsyncAllocator(AsyncOptions options, std::unique_ptr<Stream> owned_stream, Stream* stream,
                 std::unique_ptr<MemoryPool> pool);

  absl::StatusOr<void*> DoAllocate(const AllocationRequest& request, uint64_t* wait_for) override;
  absl::Status DoDeallocate(void* ptr) override;
  AllocatorStats DoStats() const override;
  void DoResetPeakStats() override;
  absl::Status DoReleaseCachedMemory() override;
  absl::Status DoRecordStream(void* ptr, int slot) override;
  // The stream of `slot` (slot 0 is the allocator's own); the allocator's own too for a slot
  // whose stream was released since (ReleaseStream waited for its work first).
  Stream* StreamOf(int slot) const {
    Stream* s = SlotStream(slot);
    return s != nullptr ? s : stream_;
  }

  absl::Status OomErrorLocked(uint64_t bytes, uint64_t rounded, absl::string_view why,
                              absl::string_view hint) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads the pool's reserved bytes and reports growth (map) or shrinkage (unmap).
  void RefreshReservedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NotifyLocked(AllocatorEventKind kind, const void* ptr, uint64_t bytes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  AllocatorStats StatsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const AsyncOptions options_;
  std::unique_ptr<Stream> owned_stream_;  // when the caller gave none
  Stream* const stream_;
  std::unique_ptr<MemoryPool> pool_;

  mutable FutexMutex mu_;
  absl::flat_hash_map<void*, Block> live_ ABSL_GUARDED_BY(mu_);  // by the pointer handed out
  uint64_t pending_ ABSL_GUARDED_BY(mu_) = 0;  // bytes of allocations waiting out a trim
  // Reserved is refreshed from the pool, also by const readers (Stats).
  mutable AllocatorCounters counters_ ABSL_GUARDED_BY(mu_);
};

// The async allocator of one logical device (options.kind ignored), ordered on
// options.stream when set.
absl::StatusOr<std::unique_ptr<Allocator>> CreateAsyncAllocator(
    Executor* executor, const DeviceAllocatorOptions& options);

}  // namespace vgpu

#endif  // VGPU_ALLOCATOR_ASYNC_ALLOCATOR_H_
