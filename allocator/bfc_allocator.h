// BFCAllocator: best-fit with coalescing over regions taken from a SubAllocator (TensorFlow's
// design, our own implementation). Requests are rounded to 256 bytes; free chunks live in 21
// size-class bins, each an intrusive treap ordered by (size, address), so a request takes the
// smallest free chunk that fits, lowest address first. Chunks are split when the remainder is
// worth keeping and coalesced with free neighbours on free.
//
// Bookkeeping grows with the number of chunks, not with the pool: chunk records live in one
// pooled vector with intrusive links, and live pointers are found through a hash map, so a
// 64 GiB pool costs the same to set up as a 2 MiB one. Nothing is heap-allocated per operation
// once the pools have grown to the working set.
//
// Policies: hard memory_limit; allow_growth (first region small, then doubling, backing off
// when the sub-allocator refuses, never past the limit) or one region of the whole limit up
// front; garbage collection of wholly free regions before an OOM is reported. Placement
// policy: small requests are carved from the high end of a free chunk and large ones from the
// low end, so short-lived small blocks do not pin holes between large ones.
//
// Thread safety: thread-safe; one mutex per allocator. Observers are called under it.
#ifndef VGPU_ALLOCATOR_BFC_ALLOCATOR_H_
#define VGPU_ALLOCATOR_BFC_ALLOCATOR_H_

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "allocator/allocator.h"
#include "allocator/sub_allocator.h"

namespace vgpu {

struct BFCOptions {
  std::string name;                         // device name for messages
  uint64_t memory_limit = 0;                // hard limit, > 0
  bool allow_growth = true;                 // false: one region of the whole limit up front
  uint64_t initial_region_bytes = 2 << 20;  // first region when growing, then doubling
  bool garbage_collection = true;           // free empty regions before reporting OOM
  // Requests of at most this many bytes are "small": carved from the high end of a free
  // chunk (large ones from the low end). 0 disables the segregation.
  uint64_t small_request_bytes = 1 << 20;
  // A free remainder smaller than this is left inside the allocated chunk instead of being
  // split off as a sliver nobody can use.
  uint64_t min_split_bytes = 256;
};

class BFCAllocator final : public Allocator {
 public:
  static constexpr uint64_t kMinAllocationSize = 256;
  static constexpr int kNumBins = 21;

  // Growth off: takes the whole limit from the sub-allocator here; if that fails every
  // allocation fails with init_status(). Prefer Create(), which returns that error instead.
  BFCAllocator(std::unique_ptr<SubAllocator> sub_allocator, BFCOptions options);
  ~BFCAllocator() override;
  static absl::StatusOr<std::unique_ptr<BFCAllocator>> Create(
      std::unique_ptr<SubAllocator> sub_allocator, BFCOptions options);

  absl::Status init_status() const { return init_status_; }
  std::string name() const override { return options_.name; }
  const BFCOptions& options() const { return options_; }
  SubAllocator* sub_allocator() const { return sub_allocator_.get(); }
  AllocatorStats Stats() const override;
  std::string DumpMemoryLog() const override;
  absl::Status CheckInvariants() const override;

  // Gives every wholly free region back to the sub-allocator; returns the bytes released.
  // (The vmm allocator calls this to return slab granules to its pool.)
  absl::StatusOr<uint64_t> ReleaseEmptyRegions();
  // Rounded size of a live allocation (the chunk it occupies); NotFound for other pointers.
  absl::StatusOr<uint64_t> AllocatedSize(const void* ptr) const;
  // Events (alloc/free/map/unmap/oom) go to `observer` too; nullptr detaches. The observer
  // must outlive the allocator or be detached first.
  void AddObserver(AllocatorObserver* observer) override;
  void RemoveObserver(AllocatorObserver* observer) override;

  static uint64_t RoundedBytes(uint64_t bytes) {
    return (bytes + kMinAllocationSize - 1) & ~(kMinAllocationSize - 1);
  }
  static int BinFor(uint64_t size);

 private:
  static constexpr uint32_t kNone = 0xffffffffu;
  struct Chunk {
    uint64_t ptr = 0;
    uint64_t size = 0;
    uint64_t requested = 0;  // 0 when free
    uint32_t prev = kNone;   // address neighbours within the region
    uint32_t next = kNone;
    uint32_t left = kNone;  // treap links (free chunks only)
    uint32_t right = kNone;
    uint32_t priority = 0;
    int8_t bin = -1;  // -1: not in a bin
    bool in_use = false;
  };
  struct Region {
    uint64_t ptr = 0;
    uint64_t size = 0;
    uint32_t first = kNone;  // lowest chunk; survives every merge
  };

  absl::StatusOr<void*> DoAllocate(uint64_t bytes, uint64_t alignment) override;
  absl::Status DoDeallocate(void* ptr) override;

  absl::StatusOr<void*> AllocateLocked(uint64_t bytes, uint64_t alignment);
  // Best-fit free chunk of at least `size` bytes, or kNone.
  uint32_t FindChunkLocked(uint64_t size) const;
  void* CarveLocked(uint32_t c, uint64_t rounded, uint64_t alignment, uint64_t requested);
  absl::Status GrowLocked(uint64_t need);
  absl::Status AddRegionLocked(uint64_t size);
  uint64_t ReleaseEmptyRegionsLocked();
  absl::Status OomErrorLocked(uint64_t bytes, uint64_t rounded, absl::string_view why);
  AllocatorStats StatsLocked() const;
  uint64_t LargestFreeLocked() const;
  void Notify(AllocatorEventKind kind, uint64_t ptr, uint64_t bytes);

  uint32_t NewChunk();
  void DeleteChunk(uint32_t c);
  // Splits chunk c at `offset`: c keeps [0, offset), the returned new chunk the rest.
  uint32_t SplitChunk(uint32_t c, uint64_t offset);
  // Merges c's next neighbour into c.
  void MergeWithNext(uint32_t c);

  // Bins: treaps keyed by (size, ptr).
  void BinInsert(uint32_t c);
  void BinRemove(uint32_t c);
  bool Less(uint32_t a, uint32_t b) const {
    const Chunk& x = chunks_[a];
    const Chunk& y = chunks_[b];
    return x.size < y.size || (x.size == y.size && x.ptr < y.ptr);
  }
  void TreapSplit(uint32_t t, uint32_t key, uint32_t* l, uint32_t* r);
  uint32_t TreapMerge(uint32_t l, uint32_t r);

  const std::unique_ptr<SubAllocator> sub_allocator_;
  const BFCOptions options_;
  uint64_t limit_ = 0;
  absl::Status init_status_;

  mutable std::mutex mu_;
  std::vector<Chunk> chunks_;
  std::vector<uint32_t> free_records_;
  std::vector<Region> regions_;
  absl::flat_hash_map<uint64_t, uint32_t> live_;  // allocated ptr -> chunk
  uint32_t bin_root_[kNumBins];
  uint32_t bin_mask_ = 0;  // bit i: bin i non-empty
  uint32_t rng_ = 0x9e3779b9u;
  uint64_t next_region_bytes_ = 0;
  std::vector<AllocatorObserver*> observers_;

  AllocatorStats stats_;
};

}  // namespace vgpu

#endif  // VGPU_ALLOCATOR_BFC_ALLOCATOR_H_
