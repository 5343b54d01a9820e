// The `vmm` allocator: physical memory is a pool of granules (the device's VMM granularity,
// 2 MiB on current GPUs) and every block of a granule or more is a fresh virtual range mapped
// onto ANY free granules, contiguous or not ("stitching", as GMLake does). Free memory can
// therefore never be stranded between live blocks: a large request fits whenever enough
// granules are free, wherever they are. Blocks smaller than `small_block_max` come from a
// BFCAllocator whose regions ("slabs") are fixed-size stitched ranges of `slab_bytes` (one
// granule by default). The memory limit counts mapped granules (physical memory), not virtual
// space.
//
// A large block that is not a whole number of granules shares its last granule with the next
// large block's start (tail sharing: the same physical granule mapped in both ranges), so it
// costs its bytes rounded to 256, not to a granule (VmmOptions::share_tail_granules).
//
// Freed large blocks keep their mapping in a small cache so a hot size does not remap every
// step; cached ranges are evicted (unmapped, granules back to the pool) before anything
// would hit the limit. Empty slabs stay mapped until a large block needs their granules (or
// the slab BFC cannot grow), Trim(), or (with growth) the allocator goes idle.
// Unmapped granules go back to the pool at once. With allow_growth they also go back to the
// device: those unused through a whole give-back epoch (beyond a small reserve), and, as soon
// as nothing is allocated (the last free of either kind), everything (empty slabs, the
// mapping cache, every granule) except a reserve of `pool_keep_bytes` kept mapped, the block
// freed last first, so an alloc/free loop of one buffer does not go to the device every
// iteration; with quiet_give_back_ms, also once no block has been allocated or freed for that
// long, live blocks or not. Without growth the whole limit stays held from the device.
//
// Stream order: a free never waits on the host. One that would unmap memory (a tail-shared
// block's views, a range the cache will not take) while the block's streams may still use it
// records an event on each of them and parks the block, mapped, until the events complete
// (retired by later large-path operations; waited for only when its memory is needed, at idle
// give-back, Trim() and destruction). Granules() counts them. The slab BFC shares this
// allocator's stream slots (BFCOptions::stream_slot_owner): small blocks carry our slot numbers
// and our AllocateRaw makes their cross-stream waits.
//
// Thread safety: thread-safe (see allocator.h). One mutex guards the granule pool and large
// blocks; the slab BFC has its own, and is always locked before ours, never after. Small
// allocations and frees take only the slab BFC's lock, except when they need a new slab or
// (growth) the free leaves the allocator idle. The quiet give-back's thread (growth with
// quiet_give_back_ms only) takes the locks in the same order; the destructor stops it first.
#ifndef VGPU_ALLOCATOR_VMM_ALLOCATOR_H_
#define VGPU_ALLOCATOR_VMM_ALLOCATOR_H_

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "vgpu/allocator/allocator.h"
#include "vgpu/allocator/bfc_allocator.h"
#include "vgpu/allocator/bucket_bitmap.h"
#include "vgpu/allocator/factory.h"
#include "vgpu/allocator/locks.h"
#include "vgpu/allocator/ptr_map.h"
#include "vgpu/runtime/platform.h"

namespace vgpu {

struct VmmOptions {
  std::string name = "vmm";   // device name for messages, e.g. "/device:GPU:0 (physical GPU 0)"
  uint64_t memory_limit = 0;  // bytes of mapped granules; must be >= one granule
  // The allocator's granule: its unit of physical allocation, mapping and unmapping. 0 = the
  // device's VMM granularity (2 MiB on current GPUs); else a power-of-two multiple of it.
  // On a card every driver call costs per granule (docs/vmm.md: 14 us to unmap a 2 MiB
  // mapping, 38 us for 1 GiB), so larger pages trade a partial page per block (shared with
  // the next block by tail sharing) and coarser slabs for fewer calls, as PyTorch's 20 MiB
  // segments do.
  uint64_t page_bytes = 0;
  // false: every granule of the limit is created from the device up front (creation fails
  // with ResourceExhausted when it is not there); true: created on demand and given back.
  bool allow_growth = true;
  // Requests below this go to the slab BFC; 0 = half a granule.
  uint64_t small_block_max = 0;
  // Size of every slab the BFC takes from the granule pool (rounded up to a multiple of the
  // granule). Fixed, not doubling: measured better on the shared traces. 0 = by the limit:
  // the largest power-of-two number of granules, up to kMaxDefaultSlabGranules, that is at
  // most limit / kDefaultSlabLimitDivisor (one 2 MiB granule below 8 GiB, two from 8 GiB,
  // four from 16 GiB). A block size that does not divide a slab leaves a tail in each one
  // (320 KiB KV blocks: 6 % of a 2 MiB slab, 2 % of 8 MiB), while the slabs left partly used
  // strand memory in proportion to their size over the limit (docs/vmm.md, "Slabs that follow
  // the limit").
  uint64_t slab_bytes = 0;
  static constexpr uint64_t kDefaultSlabLimitDivisor = 2048;
  static constexpr uint64_t kMaxDefaultSlabGranules = 4;
  // The slab BFC's split rule (BFCOptions::min_split_fraction): small random sizes fragment
  // less at 0.125 than at BFC's default 0.25 (docs/vmm.md).
  double slab_min_split_fraction = 0.125;
  // While less than an eighth of the limit is room, a freed small block takes the sliver of
  // the live block before it (the remainder the slab BFC's split rule kept inside that block;
  // BFCOptions::reclaim_slivers): small random sizes fit in ~1 % less memory. Off farther from
  // the limit, where it would only cost time (docs/vmm.md, "Slivers reclaimed near the limit").
  bool slab_reclaim_slivers = true;
  // While less than a third of the limit is room, a block of half small_block_max or more
  // (below it) first tries the open parts of shared granules: a part that holds it, or a head
  // and a tail, with less than half its size to spare and no fresh granule; else the slabs as
  // always. Blocks of a granule or a few then fit in ~0.6 % less memory (0.2-0.3 % of it from
  // a third and a half rather than an eighth and an eighth); farther from the limit it is off
  // (each try costs a lookup and a map call; docs/vmm.md, "Mid-size blocks in open parts near
  // the limit").
  bool mid_blocks_near_limit = true;
  // Mapped-but-free large ranges kept for reuse; 0 = limit / 4 with growth, the whole limit
  // without (taken up front anyway). Evicted on pressure.
  uint64_t cache_bytes = 0;
  bool enable_cache = true;
  // With allow_growth the cache also stays within the room below (1 + 1/divisor) x the most
  // granules ever in live blocks (at least pool_keep_bytes), and a new block takes granules
  // from a cache over that room (the reserve not counted) before new ones are created, so peak
  // mapped memory stays near peak live: 64 measured 1.005-1.09x on the traces at 2x their peak
  // (docs/vmm.md). 0: only cache_bytes.
  uint64_t cache_peak_headroom_divisor = 64;
  // Tail sharing: a large block whose size is not a whole number of granules ends in a granule
  // it shares with the next block's start (the same physical granule mapped in both ranges,
  // the second block starting at the first one's end inside it), so a block wastes no partial
  // granule. Such blocks are unmapped when freed, not cached. false: every large block is whole
  // granules (docs/vmm.md measures both).
  bool share_tail_granules = true;
  // Inner blocks (with share_tail_granules): a block below one granule that would take a fresh
  // granule for its tail takes the start of a gap between two live blocks in a shared granule
  // instead (a tail and a head shorter than the parts they took), mapped alone; so a granule
  // holds up to three blocks, one in its middle, and gaps no head or tail could use serve
  // blocks (docs/vmm.md "Inner blocks").
  bool inner_blocks = true;
  // Far from the limit (an eighth of it or more left to map), a block whose rounding up to
  // whole granules wastes at most 1/divisor of its size takes whole granules instead of a
  // shared tail: no head and tail views to map and unmap (two map calls on a card), cached and
  // reused by granule count. Near the limit every such block shares. 32 measured 2-8 % faster
  // replays and 2-35 % fewer map calls on the random and KV families, reserved +1 % with growth,
  // min limits within 0.005 (docs/vmm.md "Whole granules far from the limit"). 0: always share.
  uint64_t whole_granule_waste_divisor = 32;
  // Edge views: a small request that no slab has room for, when no new slab can be mapped,
  // is served from the free end of one slab granule and the free start of another, the two
  // granules mapped back to back into a view of their own (BFCOptions::edge_view_page_bytes;
  // the granules stay mapped in their slabs too). Nothing changes until a request would fail;
  // small random sizes then fit in less memory (docs/vmm.md, "Edge views").
  bool edge_views = true;
  // While less than an eighth of the limit is room, edge views also compete with holes: a
  // small request of 64 KiB or more whose best slab hole would leave 64 KiB or more beside it,
  // or that no hole fits, takes a free slab end and a free slab start that leave less
  // (BFCOptions::edge_views_in_best_fit). Small random sizes fit in ~0.6 % less memory; far
  // from the limit it is off (a map call per view; docs/vmm.md, "Edge views in best fit").
  bool slab_edge_views_in_best_fit = true;
  // With allow_growth, granules that stayed free in the pool through a whole epoch (at least
  // `give_back_epoch` frees, of large blocks and of slabs, and `give_back_interval_ms`) go back
  // to the device, except
  // `pool_keep_bytes` of them (0 = limit / 64, at least one granule). When nothing is
  // allocated, everything goes back (cache, empty slabs, all granules) except
  // `pool_keep_bytes` kept mapped: the cached range of the large block freed last, or one empty
  // slab after a small one, then other cached ranges (largest evicted first). Trim() returns
  // that reserve too.
  uint64_t pool_keep_bytes = 0;
  uint64_t give_back_epoch = 256;
  // The epoch's least duration (0: frees alone): a loop whose step is shorter does not give
  // back and create the same granules every step. Both double (up to 1024x and 64x) whenever
  // granules an epoch gave back are created again, so a longer step stops doing it too.
  uint64_t give_back_interval_ms = 1000;
  // With allow_growth, a quiet allocator gives back too: when no block has been allocated or
  // freed for this many milliseconds (a thread of the allocator looks every as many, so it
  // happens between one and two times this after the last operation), what an idle allocator
  // gives back goes back although blocks are live: the mapping cache beyond the reserve of
  // pool_keep_bytes, empty slabs but one and every free granule. A server that keeps its
  // weights and goes quiet returns its activations' memory. 0 = off (the default here; the
  // runtime's logical devices use kRuntimeQuietGiveBackMs). docs/vmm.md, "Quiet give-back".
  uint64_t quiet_give_back_ms = 0;
  static constexpr uint64_t kRuntimeQuietGiveBackMs = 3;
};

class VmmAllocator final : public Allocator {
 public:
  // Over `executor`'s VMM calls (its virtual-memory capability; the executor must outlive the
  // allocator): Unimplemented/FailedPrecondition when it has none, InvalidArgument when its
  // granularity is not a power of two or the limit is below one granule.
  static absl::StatusOr<std::unique_ptr<VmmAllocator>> Create(Executor* executor,
                                                              VmmOptions options);
  ~VmmAllocator() override;

  std::string name() const override { return options_.name; }
  std::string DumpMemoryLog() const override;
  absl::Status CheckInvariants() const override;
  // Events (AddObserver): alloc/free/oom of every block (small ones too) and map/unmap of
  // granules.

  // Evicts the mapping cache, frees empty slabs and (with growth) gives every free granule
  // back to the device. Live blocks are untouched.
  absl::Status Trim() ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t granularity() const { return granularity_; }
  // The size of every slab (VmmOptions::slab_bytes, or the default the limit gave).
  uint64_t slab_bytes() const { return slab_bytes_; }
  Executor* executor() const { return executor_; }
  // Granule counts, for tests and tools.
  struct GranuleCounts {
    uint64_t created = 0;  // physical granules held from the device
    uint64_t mapped = 0;   // mapped anywhere (live large blocks, cache, slabs)
    uint64_t in_blocks = 0;
    uint64_t cached = 0;
    uint64_t in_slabs = 0;
    uint64_t slabs = 0;  // slab ranges (each slab_bytes, one granule by default)
    uint64_t free = 0;   // created, not mapped
    uint64_t limit = 0;
    uint64_t cache_hits = 0;
    uint64_t cache_evictions = 0;
    // Executor MapAll / Unmap calls: one per block or cached range (a MapAll is one cuMemMap
    // per granule + one cuMemSetAccess on cuda; an Unmap one cuMemUnmap).
    uint64_t map_calls = 0;
    uint64_t unmap_calls = 0;
    // Freed blocks whose unmap waits for their streams' events (deferred frees), and their
    // granules (in `mapped`, in no block or cache); deferred_frees counts every such free.
    uint64_t pending = 0;
    uint64_t pending_frees = 0;
    uint64_t deferred_frees = 0;
    uint64_t shared = 0;  // granules split between blocks (tail sharing), in `mapped`
    // Inner blocks (VmmOptions::inner_blocks) live now, and placed so far.
    uint64_t inner_blocks = 0;
    uint64_t inner_blocks_made = 0;
    // Granules created from the device so far (each a CreatePhysicalMemory, later released),
    // and the give-back epoch now, in frees and milliseconds (growth only; VmmOptions'
    // give_back_epoch and give_back_interval_ms, doubled on churn).
    uint64_t granule_creates = 0;
    uint64_t give_back_epoch = 0;
    uint64_t give_back_interval_ms = 0;
    // Give-backs of a quiet allocator (VmmOptions::quiet_give_back_ms) that returned memory,
    // and the granules they returned to the device.
    uint64_t quiet_give_backs = 0;
    uint64_t quiet_granules = 0;
    // Granule mappings in virtual space: mapped + a shared granule's views beyond one (one
    // per block on it) + two per edge view.
    uint64_t views = 0;
    // Edge views (VmmOptions::edge_views) mapped now (live blocks, or freed and not yet
    // unmapped), and made so far.
    uint64_t edge_views = 0;
    uint64_t edge_views_made = 0;
  };
  GranuleCounts Granules() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Granule {
    PhysicalMemoryHandle handle;  // the granule's own physical allocation, mapped from 0
  };
  // A virtual range mapped onto granules: a live large block, a cached one, or a slab.
  struct Range {
    void* reserved = nullptr;  // what ReserveAddressRange returned
    uint64_t reserved_bytes = 0;
    void* ptr = nullptr;  // first mapped byte (aligned inside the reservation)
    std::vector<uint32_t> granules;
    uint64_t requested = 0;
    // Stream slots (allocator.h) whose work may use it: the owner's and recorded ones.
    uint64_t streams = 0;
    // Tail sharing (VmmOptions::share_tail_granules): a granule mapped just before `ptr` whose
    // upper part begins the block (`head`, the block starts `head_bytes` before ptr), and one
    // mapped just after the granules whose lower part ends it (`tail`); both are shared_
    // granules, outside `granules`. user_ptr is what the caller got.
    uint32_t head = kNoGranule;
    uint32_t tail = kNoGranule;
    uint64_t head_bytes = 0;
    // An inner block: `head` is the granule whose middle it is (mapped alone just before ptr,
    // the block starting head_bytes before ptr), not its upper part.
    bool inner = false;
    uint64_t footprint = 0;  // bytes counted in use
    void* user_ptr = nullptr;
    // A cached range whose block's tail granule had no other user keeps it mapped just after
    // `granules` (its own mapping), so the next block of the same size needs no map call;
    // counted in cached_granules_.
    uint32_t kept_tail = kNoGranule;
    // A slab mapped in a slot of the slab arena: `reserved` is the slot, which belongs to the
    // arena's one reservation and is never freed on its own.
    uint32_t arena_slot = kNoGranule;
    // While cached: the links of its bucket's list (RangeCache).
    Range* cache_prev = nullptr;
    Range* cache_next = nullptr;
  };
  static constexpr uint32_t kNoGranule = 0xffffffffu;
  // The mapping cache's ranges by granule count: a list per count (newest first) and a
  // BucketBitmap of the non-empty counts, so the same size, the next larger or smaller one and
  // the largest are found in a few word scans, and putting or taking a range allocates nothing
  // (a std::map of vectors rebalanced and shifted on most operations: 12 % of the large path).
  // Owns its ranges. Not thread-safe (under mu_).
  class RangeCache {
   public:
    RangeCache() = default;
    RangeCache(const RangeCache&) = delete;
    RangeCache& operator=(const RangeCache&) = delete;
    ~RangeCache() {
      Drain([](std::unique_ptr<Range>) {});
    }

    // Into the bucket of its granule count (> 0), first.
    void Put(std::unique_ptr<Range> range);
    // Takes `range` (in bucket `count`) out.
    std::unique_ptr<Range> Take(Range* range, uint64_t count);
    // The newest range of `count` granules, or null; Range::cache_next walks the rest.
    Range* First(uint64_t count) const { return count < heads_.size() ? heads_[count] : nullptr; }
    // Non-empty counts: the smallest >= / the largest < `count`, the largest; 0 when none.
    uint64_t AtLeast(uint64_t count) const { return Found(nonempty_.AtLeast(Index(count))); }
    uint64_t Below(uint64_t count) const { return Found(nonempty_.Prev(Index(count))); }
    uint64_t Largest() const { return Below(heads_.size()); }
    bool empty() const { return ranges_ == 0; }
    size_t ranges() const { return ranges_; }
    // fn(count, const Range&) for every range, by count, newest first within one.
    template <class Fn>
    void ForEach(Fn fn) const {
      for (int64_t b = nonempty_.Next(0); b > 0; b = nonempty_.Next(b)) {
        for (const Range* r = heads_[b]; r != nullptr; r = r->cache_next) fn(uint64_t(b), *r);
      }
    }
    // Takes every range out, calling fn(std::unique_ptr<Range>) for each.
    template <class Fn>
    void Drain(Fn fn) {
      while (uint64_t n = Largest()) fn(Take(heads_[n], n));
    }

   private:
    static int64_t Index(uint64_t count) {
      return static_cast<int64_t>(std::min<uint64_t>(count, uint64_t{1} << 62));
    }
    static uint64_t Found(int64_t b) { return b > 0 ? static_cast<uint64_t>(b) : 0; }
    std::vector<Range*> heads_;  // by granule count; grows to the largest count put
    BucketBitmap nonempty_;
    size_t ranges_ = 0;
  };
  // A granule shared by the tail of one block (lower part, [0, lower_end)) and the head of
  // another (upper part, [split, granule)); either part may be free. Open parts are offered to
  // new blocks: a free lower part is [0, split), a free upper part [lower_end, granule) (split
  // == lower_end then), so the gap a smaller tail or head leaves between the two blocks comes
  // back as soon as the block beside it is freed.
  struct SharedGranule {
    uint64_t split = 0;
    bool shared = false;  // this granule is a shared one (the fields below mean something)
    bool lower_live = false;
    bool upper_live = false;
    // While one part is free and offered (OpenParts): its bytes and the bucket's list links.
    uint64_t open_bytes = 0;
    uint32_t next = kNoGranule;
    uint32_t prev = kNoGranule;
    uint64_t lower_end = 0;  // end of the lower block while it is live (<= split)
    // An inner block (VmmOptions::inner_blocks) at [mid_start, mid_end), between the lower
    // block's end and `split`. While the upper part is free, split is the end of the highest
    // live block below it (mid_end, else lower_end); a free lower part is [0, mid_start) while
    // an inner block lives, else [0, split).
    bool mid_live = false;
    uint64_t mid_start = 0;
    uint64_t mid_end = 0;
  };
  // Open parts by their free bytes (multiples of 256 below one granule): intrusive lists of
  // shared granules in buckets by bytes, with a BucketBitmap of the non-empty buckets, so
  // finding the largest part <= x or the smallest >= x costs a few word scans and nothing is
  // allocated. A granule is in at most one of the two sets.
  class OpenParts {
   public:
    void Init(uint64_t granularity, std::vector<SharedGranule>* granules);
    void Insert(uint64_t bytes, uint32_t granule);
    void Erase(uint32_t granule);
    // The part with the most bytes <= x / the fewest >= x (and < below); false when there is
    // none. With one size per bucket (2 MiB granules and smaller) the answer is a bucket's
    // head, found by a bit scan: inline, as up to five run per large allocation.
    ABSL_ATTRIBUTE_ALWAYS_INLINE bool FindAtMost(uint64_t x, uint64_t* bytes,
                                                 uint32_t* granule) const {
      if (size_ == 0) return false;
      if (!exact_) return FindAtMostInBuckets(x, bytes, granule);
      const int64_t b =
          nonempty_.AtMost(static_cast<int64_t>(std::min<uint64_t>(x >> kExactShift, last_)));
      if (b < 0) return false;
      *granule = heads_[b];
      *bytes = static_cast<uint64_t>(b) << kExactShift;
      return true;
    }
    ABSL_ATTRIBUTE_ALWAYS_INLINE bool FindAtLeast(uint64_t x, uint64_t* bytes, uint32_t* granule,
                                                  uint64_t below = UINT64_MAX) const {
      if (size_ == 0) return false;
      if (!exact_) return FindAtLeastInBuckets(x, bytes, granule) && *bytes < below;
      const uint64_t first = (x + (uint64_t{1} << kExactShift) - 1) >> kExactShift;
      if (first > last_) return false;
      const int64_t b = nonempty_.AtLeast(static_cast<int64_t>(first));
      if (b < 0 || (static_cast<uint64_t>(b) << kExactShift) >= below) return false;
      *granule = heads_[b];
      *bytes = static_cast<uint64_t>(b) << kExactShift;
      return true;
    }
    size_t size() const { return size_; }

   private:
    bool FindAtMostInBuckets(uint64_t x, uint64_t* bytes, uint32_t* granule) const;
    bool FindAtLeastInBuckets(uint64_t x, uint64_t* bytes, uint32_t* granule) const;
    size_t BucketOf(uint64_t bytes) const {
      return static_cast<size_t>(std::min<uint64_t>(last_, bytes >> shift_));
    }
    std::vector<SharedGranule>* g_ = nullptr;
    // Parts are multiples of 256 bytes: with 256-byte buckets each bucket holds one size.
    static constexpr int kExactShift = 8;
    int shift_ = kExactShift;
    bool exact_ = true;  // one size per bucket (shift_ == kExactShift)
    uint64_t last_ = 0;  // the last bucket, heads_.size() - 1 (kept: read on every lookup)
    std::vector<uint32_t> heads_;
    BucketBitmap nonempty_;
    size_t size_ = 0;
  };
  // Live large blocks by the pointer handed out: a PtrMap (allocator/ptr_map.h) from the
  // 256-byte-aligned pointer to a slot of owned ranges, cheaper per operation than a general
  // hash map of owning pointers. Not thread-safe (under mu_).
  class BlockTable {
   public:
    void Insert(void* p, std::unique_ptr<Range> range) {
      uint32_t slot;
      if (!free_.empty()) {
        slot = free_.back();
        free_.pop_back();
        ranges_[slot] = std::move(range);
      } else {
        slot = static_cast<uint32_t>(ranges_.size());
        ranges_.push_back(std::move(range));
      }
      index_.Insert(reinterpret_cast<uint64_t>(p), slot);
    }
    // The block at p, taken out of the table; null when there is none.
    std::unique_ptr<Range> Take(void* p) {
      const uint32_t slot = index_.Erase(reinterpret_cast<uint64_t>(p));
      if (slot == PtrMap::kNotFound) return nullptr;
      free_.push_back(slot);
      return std::move(ranges_[slot]);
    }
    Range* Find(void* p) const {
      const uint32_t slot = index_.Find(reinterpret_cast<uint64_t>(p));
      return slot == PtrMap::kNotFound ? nullptr : ranges_[slot].get();
    }
    bool empty() const { return index_.empty(); }
    size_t size() const { return index_.size(); }
    // fn(pointer, Range&) for every block (unspecified order).
    template <class Fn>
    void ForEach(Fn fn) const {
      index_.ForEach(
          [&](uint64_t p, uint32_t slot) { fn(reinterpret_cast<void*>(p), *ranges_[slot]); });
    }
    // Takes every block out, calling fn(std::unique_ptr<Range>) for each.
    template <class Fn>
    void Drain(Fn fn) {
      for (std::unique_ptr<Range>& r : ranges_) {
        if (r != nullptr) fn(std::move(r));
      }
      ranges_.clear();
      free_.clear();
      index_ = PtrMap();
    }

   private:
    PtrMap index_;
    std::vector<std::unique_ptr<Range>> ranges_;  // null in free slots
    std::vector<uint32_t> free_;
  };
  class SlabSubAllocator;
  class SlabObserver;
  void NotePeak(uint64_t bytes) { BFCUsageMirror::RaiseTo(slab_usage_.peak_in_use, bytes); }
  uint64_t small_in_use() const { return slab_usage_.in_use.load(std::memory_order_relaxed); }
  // An event (allocator.h) with the in-use and mapped bytes after it; under mu_ or the slab
  // BFC's lock (atomics only).
  void NotifyEvent(AllocatorEventKind kind, const void* ptr, uint64_t bytes) const {
    if (HasObservers()) NotifyObservers(kind, ptr, bytes);
  }
  void NotifyObservers(AllocatorEventKind kind, const void* ptr, uint64_t bytes) const;
  absl::Status NotLiveError(const void* ptr) const;

  VmmAllocator(Executor* executor, VmmOptions options, uint64_t granularity);
  absl::Status Init();

  absl::StatusOr<void*> DoAllocate(const AllocationRequest& request, uint64_t* wait_for) override;
  absl::Status DoDeallocate(void* ptr) override;
  AllocatorStats DoStats() const override;
  void DoResetPeakStats() override;
  absl::Status DoReleaseCachedMemory() override;
  absl::Status DoRecordStream(void* ptr, int slot) override;

  // Small blocks come from the slab BFC, which shares our stream slots: its blocks carry our
  // slot numbers and AllocateRaw waits for *wait_for as for a large block.
  absl::StatusOr<void*> AllocateSmall(const AllocationRequest& request, uint64_t* wait_for)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A mid-size block near the limit (VmmOptions::mid_blocks_near_limit): open parts of shared
  // granules that hold it closely, else AllocateSmall.
  ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<void*> AllocateMid(const AllocationRequest& request,
                                                            uint64_t* wait_for)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<void*> AllocateLarge(uint64_t bytes, uint64_t alignment, int slot,
                                      uint64_t* wait_for) ABSL_LOCKS_EXCLUDED(mu_);
  // AllocateLarge's end: registers the block, releases mu_ and returns the block.
  absl::StatusOr<void*> FinishLargeLocked(std::unique_ptr<Range>&& range, uint64_t bytes, int slot,
                                          uint64_t* wait_for) ABSL_UNLOCK_FUNCTION(mu_);
  // A block of `bytes` (a multiple of 256, not of the granule) laid out with tail sharing:
  // an open upper part as its head, whole granules, and a tail granule (an open lower part or a
  // fresh granule whose rest is offered). ResourceExhausted like MapRangeLocked.
  // fewest_granules: the first layout only (the largest head, hence the fewest granules from
  // the pool), none of the gap-saving ones that may take one more: AllocateLarge's last try
  // before an OOM.
  // max_gap: NotFound, with nothing changed, when the layout would need a fresh granule or
  // leave max_gap or more of gap (mid-size blocks).
  absl::StatusOr<std::unique_ptr<Range>> MapSharedRangeLocked(uint64_t bytes,
                                                              bool fewest_granules = false,
                                                              uint64_t max_gap = UINT64_MAX)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unmaps a shared-layout block's head and tail granules and updates them; its own granules
  // stay mapped (the caller caches or unmaps the rest).
  absl::Status UnmapSharedViewsLocked(Range* range) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Deferred frees (stream order without host waits): freeing a block whose memory would be
  // unmapped (its shared head and tail views, or a range the cache will not take) while a
  // stream that used it may still be running records an event on each such stream and parks
  // the block here, mapped, instead of waiting on the host. Reaping retires the blocks whose
  // events have completed (oldest first; `wait`: waits for all of them, when their memory is
  // needed: an allocation that would fail, idle give-back, Trim, the destructor).
  struct PendingFree {
    std::unique_ptr<Range> range;
    std::vector<std::unique_ptr<Event>> events;
    uint64_t slots = 0;  // the stream slots the events were recorded on
  };
  // A parked block of exactly `footprint` bytes whose only stream is `slot`'s, taken back for
  // a new block on that stream (its work is ordered after the old one's, as a cached block's
  // is), so a same-stream loop reuses its memory instead of mapping more; null when none.
  std::unique_ptr<Range> TakePendingLocked(uint64_t footprint, int slot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Parks `*range` when a stream of its may still use it (true; *range is taken); false when no
  // stream has work that could (or an event could not be made: the caller retires it now,
  // waiting on the host as before).
  // The host-synchronous test (no stream: nothing pending) is inline, like the early-outs below.
  bool DeferFreeLocked(std::unique_ptr<Range>* range) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return SlotsHaveStreams((*range)->streams) && DeferFreeSlowLocked(range);
  }
  bool DeferFreeSlowLocked(std::unique_ptr<Range>* range) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes a parked block out (its events back to the pool), for reuse or retirement.
  std::unique_ptr<Range> UnparkLocked(std::deque<PendingFree>::iterator it)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ReapPendingLocked(bool wait) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What freeing a block does to its range once no stream uses it: its shared views unmapped
  // (parts offered to neighbours), then its own granules cached (true in *cached) or unmapped.
  absl::Status RetireLocked(std::unique_ptr<Range> range, bool* cached)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unmaps a range's kept tail granule (if any) into the pool. The test for none is inline
  // (like the early-outs below: a call that does nothing cost the large path ~1 %).
  absl::Status DropKeptTailLocked(Range* range) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return range->kept_tail == kNoGranule ? absl::OkStatus() : DropKeptTailSlowLocked(range);
  }
  absl::Status DropKeptTailSlowLocked(Range* range) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A shared granule with no block left on it goes back to the pool.
  void ReleaseSharedLocked(uint32_t granule) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Where a shared granule's free part is offered, and with how many bytes: kOfferUpper while
  // its upper part is free and a block lives below it, kOfferLower while its upper part lives
  // and its lower part is free, kOfferMid while both live with a gap of min_inner_gap_ or more
  // between them and no inner block (the gap, for one), else kOfferNone.
  enum Offer { kOfferNone, kOfferUpper, kOfferLower, kOfferMid };
  // Where the highest live block below the upper part ends: the inner block's end, else the
  // lower block's (0 when neither lives). While the upper part is free, split is this.
  static uint64_t LowTop(const SharedGranule& sg) {
    return sg.mid_live ? sg.mid_end : sg.lower_live ? sg.lower_end : 0;
  }
  Offer OfferOf(const SharedGranule& sg) const {
    if (!sg.upper_live) return sg.lower_live || sg.mid_live ? kOfferUpper : kOfferNone;
    if (!sg.lower_live) return kOfferLower;
    return !sg.mid_live && sg.split - sg.lower_end >= min_inner_gap_ ? kOfferMid : kOfferNone;
  }
  uint64_t OfferBytes(const SharedGranule& sg, Offer o) const {
    switch (o) {
      case kOfferUpper:
        return granularity_ - sg.split;
      case kOfferLower:
        return sg.mid_live ? sg.mid_start : sg.split;
      case kOfferMid:
        return sg.split - sg.lower_end;
      default:
        return 0;
    }
  }
  OpenParts* OpenPartsOf(Offer o) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return o == kOfferUpper   ? &open_upper_
           : o == kOfferLower ? &open_lower_
           : o == kOfferMid   ? &open_mid_
                              : nullptr;
  }
  // Takes granule i out of the set that offers it (before its state changes) / puts it in the
  // one its state calls for (after).
  void UnofferLocked(uint32_t i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (OpenParts* parts = OpenPartsOf(OfferOf(shared_[i]))) parts->Erase(i);
  }
  void OfferLocked(uint32_t i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const Offer o = OfferOf(shared_[i]);
    if (o != kOfferNone) OpenPartsOf(o)->Insert(OfferBytes(shared_[i], o), i);
  }
  // An inner block left granule i (its view is unmapped): the granule is offered again, or
  // goes back to the pool when no block is left on it (`va`: the view, for observers).
  void LeaveInnerLocked(uint32_t i, const void* va) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees the large block at ptr; false in *found when there is none.
  absl::Status FreeLarge(void* ptr, bool* found) ABSL_LOCKS_EXCLUDED(mu_);
  // Maps `count` granules at a fresh range aligned to `alignment`; evicts the cache when the
  // limit needs it. ResourceExhausted when even that is not enough.
  absl::StatusOr<std::unique_ptr<Range>> MapRangeLocked(uint64_t count, uint64_t alignment)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status UnmapRangeLocked(std::unique_ptr<Range> range) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A slab of `count` granules in a free slot of the slab arena; nullptr (not an error) when
  // there is no arena, no free slot, or `count` granules do not fit a slot.
  absl::StatusOr<std::unique_ptr<Range>> MapArenaSlabLocked(uint64_t count)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `p` lies in the slab arena, so can only be a small block. No lock: the arena is
  // fixed at Init.
  bool InSlabArena(const void* p) const {
    return reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(slab_arena_) <
           slab_arena_bytes_;
  }
  // Maps free granules at the end of `range` up to `count` (within its reservation), or
  // unmaps its tail down to `count`, one granule per call.
  absl::Status GrowRangeLocked(Range* range, uint64_t count) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The handles of the pool's top `n` granules, in the order they come off the pool.
  void PoolTopHandlesLocked(uint64_t n, PhysicalMemoryHandle* out) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the pool's top `n` granules, already mapped at the range's end, into the range.
  void AdoptPoolGranulesLocked(Range* range, uint64_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ShrinkRangeLocked(Range* range, uint64_t count) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return range->granules.size() <= count ? absl::OkStatus() : ShrinkRangeSlowLocked(range, count);
  }
  absl::Status ShrinkRangeSlowLocked(Range* range, uint64_t count)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t CapacityOf(const Range& range) const;  // granules the reservation can hold
  // A fresh Range (from range_pool_ when it has one) / an unmapped one back to the pool.
  std::unique_ptr<Range> NewRangeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecycleRangeLocked(std::unique_ptr<Range> range) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Resets every field of an unmapped range but the given reservation, keeping its granule
  // vector's capacity (both pools of unmapped ranges).
  static void ClearRange(Range* range, void* reserved, uint64_t reserved_bytes);
  // A Range with `granules` granules of virtual space or more (a spare reservation when one
  // fits, else a new one) and `ptr` one granule into it, granule-aligned: room for a head view
  // before ptr and granules - 2 granules and a tail after it.
  absl::StatusOr<std::unique_ptr<Range>> ReservedRangeLocked(uint64_t granules)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An unmapped range's reservation kept for the next range (spare_va_), else freed.
  absl::Status ReleaseReservationLocked(std::unique_ptr<Range> range)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreeSpareReservationsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts a freed range in the cache (the caller counts its granules) / takes `range` (of
  // `count` granules) out, uncounting them.
  void CachePutLocked(std::unique_ptr<Range> range) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::unique_ptr<Range> CacheTakeLocked(Range* range, uint64_t count)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A cached range resized to `count` granules (exact, shrunk or grown), or null.
  // head_room / tail_room: only a range with an unmapped granule of virtual space before it /
  // after its `count` granules (for a shared head or tail).
  std::unique_ptr<Range> TakeCachedLocked(uint64_t count, uint64_t alignment,
                                          bool head_room = false, bool tail_room = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Granules the limit still allows to be mapped for a new block: those below it plus the
  // cached ones (evicted first).
  uint64_t RoomGranulesLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return limit_granules_ - std::min(limit_granules_, mapped_granules_) + cached_granules_;
  }
  // Whether a block fits one slab even after the slab BFC's alignment padding (small blocks, and
  // a large block's last try before an OOM).
  bool FitsSlab(uint64_t bytes, uint64_t alignment) const;
  // Less than an eighth of the limit is room. MapSharedRangeLocked then searches harder for a
  // head and tail that leave no gap.
  bool NearLimitLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return RoomGranulesLocked() * 8 < limit_granules_;
  }
  // Less than a third of the limit is room: mid-size blocks try open parts first
  // (VmmOptions::mid_blocks_near_limit). Never at 2x peak live (the timed replays).
  bool MidBlocksInOpenPartsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return RoomGranulesLocked() * 3 < limit_granules_;
  }
  // MapSharedRangeLocked's search near the limit tries at most this many open lower part sizes.
  static constexpr uint64_t kPairLowerSizes = 64;
  // Makes `count` granules free (unmapped) in the pool, creating them (growth) or evicting
  // the cache as needed, within the limit.
  absl::Status EnsureFreeGranulesLocked(uint64_t count) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // Enough in the pool, within the limit: nothing to evict or create.
    if (free_granules_.size() >= count && mapped_granules_ + count <= limit_granules_) {
      return absl::OkStatus();
    }
    return EnsureFreeGranulesSlowLocked(count);
  }
  absl::Status EnsureFreeGranulesSlowLocked(uint64_t count) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Up to n new granules into the pool in one executor call (each its own allocation); how
  // many, or the device's refusal when none.
  absl::StatusOr<size_t> CreateGranulesLocked(size_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records n new one-granule physical allocations (in slots give-back emptied, else new ones)
  // and puts them in the pool.
  void AddGranulesLocked(const PhysicalMemoryHandle* handles, size_t n)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unmaps the largest cached range; the one at `spare` only when nothing else is cached.
  absl::Status EvictOneLocked(const void* spare = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees at least `need` granules from the cache, shrinking the largest range rather than
  // unmapping it when it is larger than that.
  absl::Status EvictGranulesLocked(uint64_t need) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status GiveBackLocked(uint64_t keep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The mapping cache's cap in granules: cache_limit_granules_, and with allow_growth (and a
  // divisor) at most the room left below (1 + 1/divisor) x the peak working set once
  // `incoming` more granules are in use and `leaving` mapped ones are not (at least
  // keep_granules_ unless `floor` is false).
  uint64_t CacheCapLocked(uint64_t incoming = 0, uint64_t leaving = 0, bool floor = true) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a free of a large block or a slab with allow_growth: granules free through a whole
  // epoch go back to the device (beyond keep_granules_).
  // Counting the free is inline (every large free with growth runs it); the epoch's end is not.
  absl::Status EpochGiveBackLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (++epoch_frees_ < epoch_len_) return absl::OkStatus();
    return EpochEndLocked();
  }
  absl::Status EpochEndLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Nothing allocated (no large block, no small one).
  bool IdleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // With allow_growth, after the last live block is freed (either path): empty slabs, the
  // mapping cache and every free granule go back to the device, except a reserve of
  // keep_granules_ kept mapped (the block freed last first: `last_range`, its cached range of
  // `last_granules`, or null after a small free). Takes the slab BFC's lock, then ours: call
  // it with neither held. Does nothing if a block was allocated meanwhile.
  absl::Status GiveBackIfIdle(const void* last_range, uint64_t last_granules)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Their common part, once the empty slabs went: deferred frees retired (waiting for their
  // streams, or only those done), cached ranges evicted down to cache_keep granules (largest
  // first, `spare` last), every free granule back to the device, the give-back epoch restarted.
  absl::Status GiveBackBeyondReserveLocked(uint64_t cache_keep, const void* spare,
                                           bool wait_for_streams)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ResourceExhausted with Stats()'s numbers; call without mu_ (reads the slab BFC first).
  absl::Status OomError(uint64_t bytes, uint64_t rounded, absl::string_view why) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Stats() from the slab BFC's stats (taken before mu_) and ours.
  AllocatorStats CombinedStatsLocked(const AllocatorStats& slab) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Executor* const executor_;
  const VmmOptions options_;
  const uint64_t granularity_;
  // The granule is a power of two (Create checks it): whole granules and offsets into one are
  // a shift and a mask, not a 64-bit division (the large path did four to eight per block).
  const int granule_shift_;
  uint64_t GranulesIn(uint64_t bytes) const { return bytes >> granule_shift_; }
  uint64_t GranuleOffset(uint64_t bytes) const { return bytes & (granularity_ - 1); }
  uint64_t GranulesFor(uint64_t bytes) const {
    return GranulesIn(bytes) + (GranuleOffset(bytes) != 0 ? 1 : 0);
  }
  uint64_t limit_granules_ = 0;
  uint64_t cache_limit_granules_ = 0;
  uint64_t keep_granules_ = 0;
  uint64_t small_block_max_ = 0;
  // The least gap offered to inner blocks: none when they are off; else half small_block_max_,
  // the least block that takes the large path (a mid-size one near the limit) save the slabs'
  // last try before an OOM. Smaller gaps would cost every layout that leaves one an index
  // update for nothing.
  uint64_t min_inner_gap_ = UINT64_MAX;
  uint64_t slab_bytes_ = 0;
  // The slab arena: one virtual reservation, made at Init and fixed after, in which slabs are
  // mapped slot by slot (slab_bytes_ each), so a free can tell a small block from a large one
  // by its address, without a lookup that misses (docs/vmm.md). Slabs that find no slot get a
  // reservation of their own as before.
  void* slab_arena_reserved_ = nullptr;
  uint64_t slab_arena_reserved_bytes_ = 0;
  char* slab_arena_ = nullptr;
  uint64_t slab_arena_bytes_ = 0;  // 0: no arena
  uint32_t arena_slots_ = 0;
  std::unique_ptr<SlabObserver> slab_observer_;
  BFCUsageMirror slab_usage_;            // kept by slabs_ (declared first: outlives it)
  std::unique_ptr<BFCAllocator> slabs_;  // small blocks, over SlabSubAllocator

  mutable FutexMutex mu_;
  // growth off: the one allocation of the whole limit
  // index -> granule; holes have handle.bytes == 0
  std::vector<Granule> granules_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> free_slots_ ABSL_GUARDED_BY(mu_);  // holes in granules_ (given back)
  // Scratch for one executor call over many granules (MapAll, a batch create or release),
  // kept for its capacity; filled and used within one function.
  std::vector<PhysicalMemoryHandle> handles_ ABSL_GUARDED_BY(mu_);
  // handles_ as scratch for at least n entries: it only grows, so a call does not
  // value-initialise entries that an earlier, larger call already made.
  void HandlesFor(size_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (handles_.size() < n) handles_.resize(std::max(n, 2 * handles_.size()));
  }
  std::vector<uint32_t> free_granules_ ABSL_GUARDED_BY(mu_);  // created and unmapped (LIFO)
  uint64_t mapped_granules_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t created_granules_ ABSL_GUARDED_BY(mu_) = 0;
  // fewest free granules during this give-back epoch
  uint64_t free_low_water_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t epoch_frees_ ABSL_GUARDED_BY(mu_) = 0;
  // The adaptive epoch (EpochGiveBackLocked): its frees and duration, when it began, granules
  // given back by epochs and not created again since, and granules created in this epoch.
  uint64_t epoch_len_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t epoch_interval_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t epoch_start_ns_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t epoch_returned_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t epoch_created_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t granule_creates_ ABSL_GUARDED_BY(mu_) = 0;  // every granule created
  // The epoch as configured (clamped so that doubling cannot overflow): where it starts and
  // what its doublings are bounded by (1024x frees, 64x duration).
  uint64_t BaseEpochLen() const {
    return std::clamp<uint64_t>(options_.give_back_epoch, 1, uint64_t{1} << 40);
  }
  uint64_t BaseEpochIntervalNs() const {
    return std::min<uint64_t>(options_.give_back_interval_ms, uint64_t{1} << 32) * 1000000;
  }
  // live large blocks by ptr
  BlockTable blocks_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<void*, std::unique_ptr<Range>> slab_ranges_ ABSL_GUARDED_BY(mu_);
  RangeCache cache_ ABSL_GUARDED_BY(mu_);  // mapped, free large ranges
  // Range objects of unmapped ranges, kept with their vectors' capacity for the next range.
  std::vector<std::unique_ptr<Range>> range_pool_ ABSL_GUARDED_BY(mu_);
  // Unmapped ranges that keep their virtual reservation, by the granules it spans (bucket b:
  // b granules; larger ones are freed), for the next range that needs as much or up to twice
  // as much: a new block then reserves and frees no address space (two driver calls on a card;
  // about what the bookkeeping costs on the fake device). At most kMaxSpareReservations in all;
  // freed by Trim() and the destructor. spare_va_mask_ bit b: spare_va_[b] is not empty.
  static constexpr size_t kSpareVaBuckets = 64;
  static constexpr size_t kMaxSpareReservations = 256;
  static_assert(kSpareVaBuckets <= 64, "spare_va_mask_ has a bit per bucket");
  std::vector<std::unique_ptr<Range>> spare_va_[kSpareVaBuckets] ABSL_GUARDED_BY(mu_);
  uint64_t spare_va_mask_ ABSL_GUARDED_BY(mu_) = 0;
  size_t spare_va_count_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t cached_granules_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<PendingFree> pending_ ABSL_GUARDED_BY(mu_);                 // oldest first
  std::vector<std::unique_ptr<Event>> event_pool_ ABSL_GUARDED_BY(mu_);  // for PendingFree
  uint64_t pending_granules_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t deferred_frees_ ABSL_GUARDED_BY(mu_) = 0;
  // why the pool last refused the slab BFC a slab ("" = it did not)
  std::string slab_refusal_ ABSL_GUARDED_BY(mu_);
  // slab_usage_.empty_regions_made when AllocateLarge last found no empty slab left to give
  // back (UINT64_MAX: never looked).
  uint64_t empty_slabs_seen_ ABSL_GUARDED_BY(mu_) = UINT64_MAX;
  // Edge views (VmmOptions::edge_views), by their first byte: the reservation (three granules,
  // the view aligned in it). Made and unmapped by the slab BFC through SlabSubAllocator.
  absl::flat_hash_map<void*, void*> edge_views_ ABSL_GUARDED_BY(mu_);
  uint64_t edge_views_made_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t inner_blocks_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t inner_blocks_made_ ABSL_GUARDED_BY(mu_) = 0;
  // The granule mapped at `addr` (granule-aligned) in a slab, or kNoGranule.
  uint32_t SlabGranuleAtLocked(const void* addr) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t block_granules_ ABSL_GUARDED_BY(mu_) = 0;
  // The working set: mapped granules not in the cache (blocks, shared granules, slabs, deferred
  // frees), and its highest so far (growth's cache cap, CacheCapLocked).
  uint64_t WorkingGranulesLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return mapped_granules_ - cached_granules_;
  }
  void NotePeakWorkingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (WorkingGranulesLocked() <= peak_working_granules_) return;
    peak_working_granules_ = WorkingGranulesLocked();
    // CacheCapLocked's bound, kept here: it is read on every large operation, a peak is rare,
    // and the division is the cost of a cache lookup.
    cache_cap_target_ = options_.cache_peak_headroom_divisor == 0
                            ? 0
                            : peak_working_granules_ +
                                  peak_working_granules_ / options_.cache_peak_headroom_divisor;
  }
  uint64_t peak_working_granules_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t cache_cap_target_ ABSL_GUARDED_BY(mu_) = 0;  // peak x (1 + 1/divisor)
  // Tail sharing: shared granules (mapped, counted once in mapped_granules_), the open parts
  // by their free bytes, and their views beyond one each.
  std::vector<SharedGranule> shared_ ABSL_GUARDED_BY(mu_);  // by granule slot
  uint64_t shared_count_ ABSL_GUARDED_BY(mu_) = 0;
  OpenParts open_upper_ ABSL_GUARDED_BY(mu_);  // upper part free, a block below: block heads
  OpenParts open_lower_ ABSL_GUARDED_BY(mu_);  // upper part live, lower free: block tails
  // Lower and upper parts live, a gap between them and no inner block: inner blocks.
  OpenParts open_mid_ ABSL_GUARDED_BY(mu_);
  // Views of shared granules beyond one each: a granule with n live blocks on it is mapped n
  // times (n <= 3).
  uint64_t double_mapped_ ABSL_GUARDED_BY(mu_) = 0;
  // Live blocks with a head or tail. Written under mu_ only (AddUnderLock), read without it.
  std::atomic<uint64_t> shared_blocks_{0};
  uint64_t slab_granules_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<uint32_t> free_arena_slots_ ABSL_GUARDED_BY(mu_);  // returned slots, LIFO
  uint32_t arena_slots_used_ ABSL_GUARDED_BY(mu_) = 0;           // slots ever handed out
  // Stats of the large path (the slab BFC keeps its own). Not AllocatorCounters: in-use bytes
  // span both paths and the small one never takes mu_, so they are the atomics below.
  uint64_t num_allocs_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t num_frees_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t num_ooms_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t peak_mapped_ ABSL_GUARDED_BY(mu_) = 0;
  // Atomics: the small path never takes mu_. The slab BFC keeps slab_usage_ (small bytes in
  // use, the largest request, the combined peak, its largest free block) under its own lock.
  std::atomic<uint64_t> large_in_use_{0};  // written under mu_ only (AddUnderLock)
  // Large allocations and frees so far, written under mu_ only (AddUnderLock): with the slab
  // BFC's slab_usage_.ops, what the quiet give-back thread watches.
  std::atomic<uint64_t> large_ops_{0};
  // The quiet give-back (VmmOptions::quiet_give_back_ms): its thread, which sleeps on quiet_cv_
  // between looks and stops when quiet_stop_ is set (the destructor, first).
  uint64_t OpsSoFar() const {
    return large_ops_.load(std::memory_order_relaxed) +
           slab_usage_.ops.load(std::memory_order_relaxed);
  }
  void QuietLoop();
  void WakeQuietThread();  // out of line: the hot paths only load quiet_parked_
  // The thread sleeps without a period (it gave back and nothing happened since).
  std::atomic<bool> quiet_parked_{false};
  // Gives back what GiveBackIfIdle would, live blocks or not, unless an operation came after
  // `ops` (OpsSoFar when the quiet was seen).
  absl::Status QuietGiveBack(uint64_t ops) ABSL_LOCKS_EXCLUDED(mu_);
  std::mutex quiet_mu_;
  std::condition_variable quiet_cv_;
  bool quiet_stop_ = false;  // guarded by quiet_mu_
  std::thread quiet_thread_;
  uint64_t quiet_give_backs_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t quiet_granules_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> mapped_bytes_{0};  // mirror of mapped_granules_ for observers
  std::atomic<uint64_t> cached_bytes_{0};  // mirror of cached_granules_ for observers
  // Both mirrors, after mapped_granules_ or cached_granules_ changed, and whether the slab BFC
  // reclaims slivers (VmmOptions::slab_reclaim_slivers: near the limit; stored on a change).
  void MirrorMappedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    mapped_bytes_.store(mapped_granules_ * granularity_, std::memory_order_relaxed);
    cached_bytes_.store(cached_granules_ * granularity_, std::memory_order_relaxed);
    if (const bool mid = MidBlocksInOpenPartsLocked();
        mid != mid_in_open_parts_.load(std::memory_order_relaxed)) {
      mid_in_open_parts_.store(mid, std::memory_order_relaxed);
    }
    if (const bool near = NearLimitLocked(); near != near_limit_.load(std::memory_order_relaxed)) {
      near_limit_.store(near, std::memory_order_relaxed);
      slab_usage_.reclaim_slivers.store(options_.slab_reclaim_slivers && near,
                                        std::memory_order_relaxed);
      slab_usage_.edge_views_in_best_fit.store(
          options_.edge_views && options_.slab_edge_views_in_best_fit && near,
          std::memory_order_relaxed);
    }
  }
  // NearLimitLocked() as of the last change to the mirrors, for the paths without mu_.
  std::atomic<bool> near_limit_{false};
  // MidBlocksInOpenPartsLocked() likewise.
  std::atomic<bool> mid_in_open_parts_{false};
  uint64_t regions_mapped_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t regions_unmapped_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t map_calls_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t unmap_calls_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t cache_hits_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t cache_evictions_ ABSL_GUARDED_BY(mu_) = 0;
  // Stream order: every slot seen. An empty slab goes back to the pool with its chunks'
  // streams unknown, so its unmap waits for all of these.
  std::atomic<uint64_t> used_slots_{1};
};

// The factory's creator (allocator/factory.h): the vmm allocator of one logical device over
// `executor`'s VMM calls, with options' growth and vmm_* knobs (options.kind ignored).
absl::StatusOr<std::unique_ptr<Allocator>> CreateVmmAllocator(
    Executor* executor, const DeviceAllocatorOptions& options);

}  // namespace vgpu

#endif  // VGPU_ALLOCATOR_VMM_ALLOCATOR_H_
