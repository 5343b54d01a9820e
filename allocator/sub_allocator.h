// SubAllocator: where an allocator's regions come from (device memory, pinned host memory,
// fake addresses). Regions are large and rare; the allocator above carves them up.
//
// Thread safety: implementations are safe to call from any thread.
#ifndef VGPU_ALLOCATOR_SUB_ALLOCATOR_H_
#define VGPU_ALLOCATOR_SUB_ALLOCATOR_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace vgpu {

// A run of whole pages of a region: [region + offset, + bytes), both multiples of page_bytes().
struct PageRun {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

class SubAllocator {
 public:
  virtual ~SubAllocator() = default;
  virtual std::string name() const = 0;
  // A region of exactly `bytes` aligned to at least `alignment` (<= 4096 unless stated).
  // ResourceExhausted when the memory is not there.
  virtual absl::StatusOr<void*> Alloc(uint64_t bytes, uint64_t alignment) = 0;
  // `bytes` is the size given to Alloc. Unknown pointers are InvalidArgument.
  virtual absl::Status Free(void* ptr, uint64_t bytes) = 0;
  // True when the memory is never touched (fake addresses), so callers must not write it.
  virtual bool fake() const { return false; }

  // Page moves (optional; BFCOptions::gather_pages). Regions made of separately mapped pages
  // can lend free pages to a new address range, so free memory scattered between live blocks
  // serves a request no hole fits. 0: regions cannot (GatherPages is then Unimplemented).
  virtual uint64_t page_bytes() const { return 0; }
  // Maps the pages of `runs` (in region `region`, as Alloc returned it) back to back into a
  // new address range of their total size and unmaps them where they were; returns the range.
  // On failure nothing has moved.
  virtual absl::StatusOr<void*> GatherPages(void* region, absl::Span<const PageRun> runs);
  // The reverse: maps each page back where it was and gives the range up (`runs` as given to
  // GatherPages for `range`).
  virtual absl::Status ReturnPages(void* range, void* region, absl::Span<const PageRun> runs);

  // Edge views (optional; BFCOptions::edge_view_page_bytes, the page size here): maps the page
  // at `low` and the page at `high` (page-aligned addresses inside regions; they may be the
  // same page) back to back into a new range of two pages, where they also stay mapped;
  // returns it. UnmapEdgeView gives such a range up. Unimplemented by default.
  virtual absl::StatusOr<void*> MapEdgeView(void* low, void* high);
  virtual absl::Status UnmapEdgeView(void* view);
};

}  // namespace vgpu

#endif  // VGPU_ALLOCATOR_SUB_ALLOCATOR_H_
