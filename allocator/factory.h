// The one allocator factory: every allocator (a logical device's bfc/vmm/async, CPU:0's host
// memory, vgpu-bench's) is built here from one DeviceAllocatorOptions, so the device registry
// and the tools never depend on a particular allocator class. Adding an allocator is its class
// (with a Create*(Executor*, const DeviceAllocatorOptions&) function), a value in
// AllocatorKind and one row in the table in factory.cc (docs/architecture.md).
//
// Thread safety: CreateDeviceAllocator is safe from any thread; the allocators it returns are
// thread-safe (see allocator.h).
#ifndef VGPU_ALLOCATOR_FACTORY_H_
#define VGPU_ALLOCATOR_FACTORY_H_

#include <cstdint>
#include <memory>
#include <optional>
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
  // BFC over host memory for CPU:0: pinned through the executor when there is one, plain host
  // memory otherwise; growth always on; memory_limit 0 = unlimited. Not a VGPU_ALLOCATOR value.
  kHostMemory,
};

// "bfc" | "vmm" | "async" (case-insensitive); InvalidArgument naming the value otherwise.
// (kHostMemory is chosen by the runtime for CPU:0, never by a user.)
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
  // The allocator's default stream (Allocator::SetDefaultStream): what Allocate without a
  // stream is ordered on; the logical device's, which must outlive the allocator. nullptr:
  // host-synchronous use (bfc, vmm), or a stream of its own (async; its allow_growth is
  // ignored: the driver's pool always grows on demand).
  Stream* stream = nullptr;

  // Tuning knobs (docs/allocator.md, docs/vmm.md "Tuning knobs"; vgpu-bench sets them from its
  // flags and VGPU_BFC_* / VGPU_VMM_* variables); unset = the allocator's default.
  std::optional<uint64_t> bfc_small_request_bytes;        // requests carved from a chunk's high end
  std::optional<uint64_t> bfc_small_from_top_bytes;       // small requests from the pool's top
  std::optional<uint64_t> bfc_small_from_top_hole_bytes;  // ... instead of a hole this large
  std::optional<uint64_t> bfc_min_split_bytes;            // smaller remainders are not split off
  std::optional<double> bfc_min_split_fraction;           // ... nor those below this x the request
  std::optional<bool> bfc_park_slivers;                   // ... but split off and parked
  std::optional<bool> bfc_reclaim_slivers;            // ... or given to the next hole at its free
  std::optional<uint64_t> bfc_segment_bytes;          // growth: larger requests get own regions
  std::optional<uint64_t> bfc_segment_waste_divisor;  // ... if whole pages waste <= 1/N of them
  std::optional<uint64_t> bfc_segment_waste_divisor_before_free;  // ... 1/N before any free
  std::optional<bool> bfc_gather_pages;         // growth off: pages (default on with VMM)
  std::optional<uint64_t> vmm_slab_bytes;       // slab size, whole granules
  std::optional<uint64_t> vmm_page_bytes;       // the vmm allocator's granule (VmmOptions)
  std::optional<uint64_t> vmm_small_block_max;  // smaller blocks come from slabs
  std::optional<bool> vmm_reclaim_slivers;      // slab slivers reclaimed near the limit
  std::optional<bool> vmm_mid_blocks;           // mid-size blocks in open parts, near the limit
  std::optional<bool> vmm_inner_blocks;         // blocks below a granule in gaps of shared ones
  std::optional<bool> vmm_edge_best_fit;        // slab edge views in best fit, near the limit
  std::optional<uint64_t> vmm_whole_granule_divisor;  // whole granules when they waste <= 1/N
  // vmm with growth: a quiet allocator gives back after this many ms (VmmOptions::
  // quiet_give_back_ms; unset = off; the runtime's logical devices set it).
  std::optional<uint64_t> vmm_quiet_give_back_ms;
};

// The allocator of `options.kind` over `executor`'s memory (the executor must outlive it).
// InvalidArgument without an executor (kHostMemory excepted) or with a zero limit (device kinds).
absl::StatusOr<std::unique_ptr<Allocator>> CreateDeviceAllocator(
    Executor* executor, const DeviceAllocatorOptions& options);

// CreateDeviceAllocator with kind kHostMemory: CPU:0's allocator, pinned through `executor`
// when given, plain host memory otherwise. Growth on, limited by `memory_limit` (0 = unlimited).
absl::StatusOr<std::unique_ptr<Allocator>> CreateHostMemoryAllocator(Executor* executor,
                                                                     absl::string_view device_name,
                                                                     uint64_t memory_limit);

}  // namespace vgpu

#endif  // VGPU_ALLOCATOR_FACTORY_H_
