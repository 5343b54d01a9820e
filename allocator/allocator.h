// The allocator interface every device memory allocator implements (BFC, vmm, adaptors),
// RMM-style: the public non-virtual Allocate/Deallocate do the argument checks and hand the
// rest to private DoAllocate/DoDeallocate, so checks are written once. DeviceBuffer is the
// move-only RAII owner of one allocation.
//
// Thread safety: every Allocator is safe to call from any number of threads at once.
// A DeviceBuffer is a plain owner: moving or destroying one object from two threads at once
// is a data race, like any value type.
#ifndef VGPU_ALLOCATOR_ALLOCATOR_H_
#define VGPU_ALLOCATOR_ALLOCATOR_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vgpu {

inline constexpr uint64_t kDefaultAlignment = 256;

struct AllocatorStats {
  uint64_t num_allocs = 0;  // successful allocations
  uint64_t num_frees = 0;
  uint64_t bytes_in_use = 0;  // sum of (rounded) live allocations
  uint64_t peak_bytes_in_use = 0;
  uint64_t bytes_reserved = 0;  // taken from the sub-allocator / device
  uint64_t peak_bytes_reserved = 0;
  uint64_t bytes_limit = 0;  // hard limit (0 = none)
  uint64_t largest_alloc_size = 0;
  uint64_t largest_free_block = 0;  // in reserved memory
  double fragmentation = 0.0;       // 1 - largest_free_block / free bytes in the pool
  uint64_t num_ooms = 0;
  uint64_t regions_mapped = 0;    // regions (or granule mappings) taken from the device
  uint64_t regions_unmapped = 0;  // and given back
  // vmm: the granule its regions are counted in, and the executor Map calls made (one per run
  // of physically contiguous granules); 0 for allocators without mappings.
  uint64_t mapping_granularity = 0;
  uint64_t map_calls = 0;
  std::string ToString() const;  // one line, human-readable sizes
};

// One allocator event, for memory history and trace recording (allocator/memory_history.h,
// allocator/trace.h). `bytes` is the request (alloc, oom) or the block/region size.
enum class AllocatorEventKind { kAlloc, kFree, kMap, kUnmap, kOom };
struct AllocatorEvent {
  AllocatorEventKind kind = AllocatorEventKind::kAlloc;
  uint64_t ptr = 0;
  uint64_t bytes = 0;
  uint64_t bytes_in_use = 0;    // after the event
  uint64_t bytes_reserved = 0;  // after the event
};
// Receives events from an allocator, called with the allocator's lock held: implementations
// must be quick and must not call back into the allocator.
class AllocatorObserver {
 public:
  virtual ~AllocatorObserver() = default;
  virtual void OnAllocatorEvent(const std::string& allocator_name, const AllocatorEvent& e) = 0;
};

// Errors with no caller to return them to (a DeviceBuffer's free failing in its destructor, an
// allocator destroyed with live allocations, a region the device will not take back) go to the
// process-wide sink set here; with none set (the default) they are dropped: library code never
// writes to stderr. An application that wants them sets a sink (vgpu-bench: stderr). The sink
// may be called from any thread, possibly under an allocator's lock: it must be quick and must
// not call into an allocator. nullptr removes it.
void SetAllocatorErrorSink(std::function<void(absl::string_view message)> sink);
// Hands `message` ("vgpu: ..." without a newline) to the sink, if any.
void ReportAllocatorError(absl::string_view message);

class Allocator;

// Owns one allocation; frees it on destruction. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Allocator* allocator, void* data, uint64_t size)
      : allocator_(allocator), data_(data), size_(size) {}
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  uint64_t size() const { return size_; }  // bytes requested
  Allocator* allocator() const { return allocator_; }
  bool empty() const { return data_ == nullptr; }
  explicit operator bool() const { return data_ != nullptr; }

  // Frees now and reports the allocator's answer; the buffer is empty afterwards.
  absl::Status Reset();
  // Gives up ownership without freeing; the caller must Deallocate the pointer.
  void* Release();

 private:
  Allocator* allocator_ = nullptr;
  void* data_ = nullptr;
  uint64_t size_ = 0;
};

class Allocator {
 public:
  virtual ~Allocator() = default;

  // A buffer of at least `bytes`, aligned to `alignment` (a power of two; at least 256).
  // bytes == 0 gives an empty buffer (no memory), as in RMM and TensorFlow.
  // Errors: InvalidArgument for a bad alignment; ResourceExhausted (naming the device, the
  // request, the limit and the usage) when the memory is not there.
  absl::StatusOr<DeviceBuffer> Allocate(uint64_t bytes, uint64_t alignment = kDefaultAlignment);
  // The same without the RAII owner.
  absl::StatusOr<void*> AllocateRaw(uint64_t bytes, uint64_t alignment = kDefaultAlignment);
  // Frees a pointer from AllocateRaw (or a released buffer). nullptr is a no-op. A pointer
  // this allocator does not own, or one already freed, is InvalidArgument and changes
  // nothing.
  absl::Status Deallocate(void* ptr);

  virtual std::string name() const = 0;
  virtual AllocatorStats Stats() const = 0;
  // Bins, chunks and an occupancy map; for OOM reports and debugging.
  virtual std::string DumpMemoryLog() const { return name() + ": no memory log\n"; }
  // Walks all bookkeeping; Internal error describing the first inconsistency.
  virtual absl::Status CheckInvariants() const { return absl::OkStatus(); }
  // Also send this allocator's events (alloc/free/map/unmap/oom) to `observer`, which must
  // outlive the allocator or be removed first. Allocators that report no events ignore it.
  virtual void AddObserver(AllocatorObserver* /*observer*/) {}
  virtual void RemoveObserver(AllocatorObserver* /*observer*/) {}

 private:
  virtual absl::StatusOr<void*> DoAllocate(uint64_t bytes, uint64_t alignment) = 0;
  virtual absl::Status DoDeallocate(void* ptr) = 0;
};

}  // namespace vgpu

#endif  // VGPU_ALLOCATOR_ALLOCATOR_H_
