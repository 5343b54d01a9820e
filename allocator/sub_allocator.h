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

namespace vgpu {

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
};

}  // namespace vgpu

#endif  // VGPU_ALLOCATOR_SUB_ALLOCATOR_H_
