// MemoryHistory: an optional ring buffer of timestamped allocator events (alloc, free, map,
// unmap, oom) with the bytes in use and reserved after each, for any number of allocators
// (events are tagged with the allocator's name). Attach it with Allocator::AddObserver (or
// AttachMemoryHistory below); export as JSON, which `vgpu-info --timeline` draws as an SVG.
//
// JSON format (stable):
//   {"capacity":N,"recorded":N,"dropped":N,"limits":{"GPU:0":BYTES,...},"allocators":["GPU:0",...],
//    "events":[{"t_ns":T,"allocator":I,"kind":"alloc|free|map|unmap|oom","ptr":"0x..",
//               "bytes":B,"in_use":U,"reserved":R,"largest_free":L}, ...]}
// largest_free is the largest free block after the event (0 where the allocator does not
// say): external fragmentation is 1 - largest_free / (reserved - in_use).
// t_ns counts from the history's creation (steady clock); events are oldest first; once the
// ring is full the oldest are dropped and counted in "dropped".
//
// Thread safety: thread-safe; events from several allocators and threads may interleave.
#ifndef VGPU_ALLOCATOR_MEMORY_HISTORY_H_
#define VGPU_ALLOCATOR_MEMORY_HISTORY_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "vgpu/allocator/allocator.h"
#include "vgpu/allocator/locks.h"

namespace vgpu {

absl::string_view AllocatorEventKindName(AllocatorEventKind kind);

class MemoryHistory final : public AllocatorObserver {
 public:
  struct Entry {
    int64_t t_ns = 0;
    uint32_t allocator = 0;  // index into allocator_names()
    AllocatorEvent event;
  };

  explicit MemoryHistory(size_t capacity = 1 << 16);
  void OnAllocatorEvent(const std::string& allocator_name, const AllocatorEvent& e) override;

  size_t capacity() const { return capacity_; }
  std::vector<Entry> Events() const;  // oldest first
  std::vector<std::string> allocator_names() const;
  uint64_t recorded() const;  // all events ever seen
  uint64_t dropped() const;   // overwritten by newer ones
  void Clear();
  // The limit of an allocator, exported as "limits":{"name":bytes} so the timeline can draw it.
  void SetLimit(const std::string& allocator_name, uint64_t bytes);
  std::string ToJson() const;
  // ToJson() to `path`; gzip-compressed when the name ends in .gz (`vgpu-info timeline` reads
  // either).
  absl::Status WriteJson(const std::string& path) const;

 private:
  const size_t capacity_;
  const std::chrono::steady_clock::time_point start_;
  mutable StdMutex mu_;
  std::vector<Entry> ring_ ABSL_GUARDED_BY(mu_);
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;  // slot of the next write once the ring is full
  uint64_t recorded_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> names_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<std::string, uint64_t>> limits_ ABSL_GUARDED_BY(mu_);
};

// Sends `allocator`'s events to `history` (which must outlive it, or be detached).
inline void AttachMemoryHistory(Allocator& allocator, MemoryHistory* history) {
  allocator.AddObserver(history);
}
inline void DetachMemoryHistory(Allocator& allocator, MemoryHistory* history) {
  allocator.RemoveObserver(history);
}

}  // namespace vgpu

#endif  // VGPU_ALLOCATOR_MEMORY_HISTORY_H_
