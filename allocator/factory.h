// Builds the allocator of one logical device from its configuration, so the device registry
// never depends on a particular allocator class.
//
// Thread safety: CreateDeviceAllocator is safe from any thread; the allocators it returns are
// thread-safe (see allocator.h).
#ifndef VGPU_ALLOCATOR_FACTORY_H_
#define VGPU_ALLOCATOR_FACTORY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "vgpu/allocator/allocator.h"
#include "vgpu/runtime/platform.h"

namespace vgpu {

enum class AllocatorKind {
  kBfc,    // best-fit with coalescing over regions from Executor::Allocate
  kVmm,    // granule pool with stitched virtual ranges (Executor's VMM calls)
  kAsync,  // the driver's stream-ordered pool with our limit (Executor::CreateMemoryPool)
};

// "bfc" | "vmm" | "async" (case-insensitive); InvalidArgument naming the value otherwise.
absl::StatusOr<AllocatorKind> ParseAllocatorKind(absl::string_view text);
absl::string_view AllocatorKindName(AllocatorKind kind);

struct DeviceAllocatorOptions {
  AllocatorKind kind = AllocatorKind::kBfc;
  // Used in every error message and dump, e.g.
  // "/job:localhost/replica:0/task:0/device:GPU:1 (physical GPU 0)".
  std::string device_name;
  uint64_t memory_limit = 0;  // hard limit in bytes; must be > 0
  // false: the whole limit is taken from the device when the allocator is created (TF's
  // default), so creation fails with ResourceExhausted when it is not free.
  // true: start small and grow on demand, never past memory_limit.
  bool allow_growth = false;
  bool garbage_collection = true;  // free wholly-unused regions before reporting OOM
  // async only: the stream allocations and frees are ordered on (the logical device's; it
  // must outlive the allocator), or nullptr for one of its own. allow_growth is ignored: the
  // driver's pool always grows on demand.
  Stream* stream = nullptr;
};

// An allocator over `executor`'s memory.
absl::StatusOr<std::unique_ptr<Allocator>> CreateDeviceAllocator(
    Executor* executor, const DeviceAllocatorOptions& options);

// An allocator for host memory (CPU:0): pinned through `executor` when given, plain host memory
// otherwise. Growth on, limited by `memory_limit` (0 = unlimited).
absl::StatusOr<std::unique_ptr<Allocator>> CreateHostMemoryAllocator(
    Executor* executor, absl::string_view device_name, uint64_t memory_limit);

}  // namespace vgpu

#endif  // VGPU_ALLOCATOR_FACTORY_H_
