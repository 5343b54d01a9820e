// BFCAllocator: best-fit with coalescing over regions taken from a SubAllocator (TensorFlow's
// design, our own implementation). Requests are rounded to 256 bytes; free chunks live in 21
// size-class bins, each kept as intrusive treaps ordered by (size, address), so a request takes
// the smallest free chunk that fits, lowest address first (up to 16 KiB, where a tree holds one
// size, it is a list and equal chunks go last freed first). Chunks are split when the remainder
// is worth keeping and coalesced with free neighbours on free.
//
// Bookkeeping grows with the number of chunks, not with the pool: chunk records live in one
// pooled vector with intrusive neighbour and tree links, and live pointers are found through a
// hash map, so a 64 GiB pool costs the same to set up as a 2 MiB one. Nothing is heap-allocated
// per operation once the pools have grown to the working set.
//
// Policies: hard memory_limit; allow_growth (first region small, then doubling, backing off
// when the sub-allocator refuses, never past the limit; requests of 4 MiB and more get
// "segments", regions of their own cached whole, as PyTorch's caching allocator does) or one
// region of the whole limit up front; garbage collection of wholly free regions before an OOM
// is reported. Split policy:
// slivers (a remainder under a quarter of the request) are not split off, which is what
// keeps fragmentation low; optionally small requests come from the high end of a chunk, and
// optionally slivers are split off but parked (free, merged with neighbours on free, used
// only when nothing else fits).
//
// Thread safety: thread-safe; one lock (a SpinLock) per allocator, annotated for Clang's
// thread-safety analysis. Observers are called under it (through Allocator::Notify).
#ifndef VGPU_ALLOCATOR_BFC_ALLOCATOR_H_
#define VGPU_ALLOCATOR_BFC_ALLOCATOR_H_

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "vgpu/allocator/allocator.h"
#include "vgpu/allocator/bucket_bitmap.h"
#include "vgpu/allocator/factory.h"
#include "vgpu/allocator/locks.h"
#include "vgpu/allocator/sub_allocator.h"

namespace vgpu {

// The device allocators' small-pool threshold without growth (BFCOptions::small_from_top_bytes).
inline constexpr uint64_t kBfcDefaultSmallFromTopBytes = uint64_t{64} << 10;
// ... and the hole a small request gives up for the top (BFCOptions::small_from_top_hole_bytes).
inline constexpr uint64_t kBfcDefaultSmallFromTopHoleBytes = uint64_t{1} << 20;

// What a BFC that serves another allocator (the vmm allocator's slabs) keeps current for it:
// relaxed atomics written under the BFC's lock on every event, so the owner reads its small
// blocks' usage without that lock and without a call per operation.
struct BFCUsageMirror {
  // Raises `a` to at least `v` (relaxed).
  static void RaiseTo(std::atomic<uint64_t>& a, uint64_t v) {
    uint64_t cur = a.load(std::memory_order_relaxed);
    while (cur < v && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
    }
  }
  std::atomic<uint64_t> in_use{0};  // the BFC's bytes in use (whole chunks)
  // Allocations and frees so far (written under the BFC's lock: a load and a store, no
  // read-modify-write), so the owner sees activity without its lock (VmmOptions::
  // quiet_give_back_ms). Regions mapped and unmapped are not counted: the owner's own
  // give-back unmaps them.
  std::atomic<uint64_t> ops{0};
  std::atomic<uint64_t> largest_alloc{0};  // the largest request so far
  // At each allocation peak_in_use is raised to in_use + *other_in_use (the owner's bytes in
  // use elsewhere; the owner raises it on its own path too).
  const std::atomic<uint64_t>* other_in_use = nullptr;
  std::atomic<uint64_t> peak_in_use{0};
  // While *forward is true (the owner has observers), every event also goes to `events`, and
  // largest_free holds the BFC's largest free block after it (a tree walk, so only then).
  const std::atomic<bool>* forward = nullptr;
  AllocatorObserver* events = nullptr;
  std::atomic<uint64_t> largest_free{0};
  // Set by the owner while its memory is tight: frees reclaim slivers as with
  // BFCOptions::reclaim_slivers (the vmm allocator near its limit).
  std::atomic<bool> reclaim_slivers{false};
  // Set by the owner while its memory is tight: edge views compete with holes in best fit
  // (BFCOptions::edge_views_in_best_fit; the vmm allocator near its limit).
  std::atomic<bool> edge_views_in_best_fit{false};
  // Shared regions left wholly free so far (a free that coalesced a whole region, or a region
  // added), written under the BFC's lock: while it has not moved since the owner last found no
  // empty region, the owner need not take the BFC's lock to look (the vmm allocator's large
  // blocks with growth ask whether an empty slab can give its granules first).
  std::atomic<uint64_t> empty_regions_made{0};
};

struct BFCOptions {
  std::string name;                         // device name for messages
  uint64_t memory_limit = 0;                // hard limit, > 0
  bool allow_growth = true;                 // false: one region of the whole limit up front
  uint64_t initial_region_bytes = 2 << 20;  // first region when growing, then doubling
  // Growth: regions double up to this size (0 = no cap); a larger request still gets a
  // region of its own size. initial_region_bytes == max_region_bytes gives fixed-size regions.
  uint64_t max_region_bytes = 0;
  bool garbage_collection = true;  // free empty regions before reporting OOM
  // Requests of at most this many bytes are "small" and carved from the high end of a free
  // chunk (large ones from the low end). 0 (the default): everything from the low end, which
  // replays our traces best (see docs/allocator.md).
  uint64_t small_request_bytes = 0;
  // A small pool at the top: a request of at most small_from_top_bytes (alignment <= 256) that
  // no free chunk smaller than that fits takes the highest-addressed free chunk of at least
  // that size, from its high end. Small blocks then gather at the top of the pool instead of
  // pinning holes between large blocks (PyTorch keeps small blocks in a pool of their own).
  // 0 here = off: best fit for every size. The device allocator factory
  // (CreateDeviceAllocator) sets kBfcDefaultSmallFromTopBytes when growth is off (one region)
  // and leaves it off with growth, where regions are separate ranges and it does worse
  // (docs/allocator.md, "Small blocks at the top").
  uint64_t small_from_top_bytes = 0;
  // Such a request goes to the top only when its best fit would be a hole of at least this
  // many bytes (and at least small_from_top_bytes): it keeps small blocks out of large holes
  // and lets them fill medium ones. The factory's default without growth is
  // kBfcDefaultSmallFromTopHoleBytes (docs/allocator.md, "Small blocks at the top").
  uint64_t small_from_top_hole_bytes = 0;
  // Split rule: a remainder smaller than min_split_bytes, or than min_split_fraction x the
  // request, stays inside the allocated chunk instead of becoming a sliver of free memory that
  // fragments the pool. TensorFlow's rule is a fraction of 1 (and 128 MiB); 0.25 replays
  // random_mixed in 1.25x peak live instead of 1.38x.
  uint64_t min_split_bytes = 256;
  double min_split_fraction = 0.25;
  // Sliver parking (off by default): a remainder of at least min_split_bytes but under
  // min_split_fraction x the request is split off and parked instead of kept inside: free,
  // merged with a neighbour as soon as either is freed, but handed out only when no free chunk
  // in the trees fits. With a fraction of 0.5 it replays the random_large family in 1.23x peak
  // live instead of 1.26x, but random operations cost ~10 % more time and transformer_train
  // needs 1.025x instead of 1.015x (docs/allocator.md, 2026-11-25), so it is opt-in.
  bool park_slivers = false;
  // Sliver reclaiming: when a block is freed, the live block just before it gives up the
  // sliver the split rule kept inside it (its chunk beyond the rounded request) to the new
  // hole, as a parked sliver would merge, with no chunk record per sliver and nothing at
  // allocation time. The vmm allocator's slabs turn it on near the limit
  // (BFCUsageMirror::reclaim_slivers; docs/vmm.md, "Slivers reclaimed near the limit").
  bool reclaim_slivers = false;
  // Segments (growth on only): a request of at least segment_bytes gets a region of its own,
  // its size rounded up to segment_granularity (a card's page), never split. A freed segment
  // stays cached whole and serves a later request it fits within an eighth (at least one
  // granularity); when a new region would pass the limit, cached segments go back to the
  // sub-allocator first (PyTorch's caching allocator, large blocks unsplit). Large blocks then
  // never strand free memory between live ones: random_mixed replays with growth in 1.10x peak
  // live instead of 1.25x; 4 MiB, not 1, because whole pages waste more on blocks of a few MiB
  // (docs/allocator.md). 0 = off: every request from the shared regions, which double as they
  // grow (TensorFlow's growth). Growth off always has one region.
  uint64_t segment_bytes = 4 << 20;
  uint64_t segment_granularity = 2 << 20;
  // ... unless, until the first block is freed, rounding it up to whole pages would waste more
  // than 1/segment_waste_divisor_before_free of it (0 = no such rule): such a request comes
  // from the shared regions, where the rest of its last page serves others. With nothing freed
  // nothing can be reused, so whole pages buy nothing, and what is allocated first tends to
  // live longest (a model's weights): weights of 4.5-12.5 MiB alone in 6-14 MiB put KV inference
  // 0.005-0.055 above TensorFlow's rule (small models, d 1600 and 2560), at or below it with 32
  // (docs/allocator.md, "Segments for what is allocated before the first free").
  uint64_t segment_waste_divisor_before_free = 32;
  // ... and at any time, more than 1/segment_waste_divisor (0, the default: no such rule). 4
  // helps small models' KV caches as much but put four of PyTorch's and RMM's recorded workloads
  // (tests/data) above TensorFlow's rule, and the random families 0.01-0.09 higher.
  uint64_t segment_waste_divisor = 0;
  // Page gathering (growth off; needs a sub-allocator whose regions are made of pages it can
  // move, SubAllocator::page_bytes() > 0, else it stays off). A request no free chunk fits,
  // while the free chunks hold enough whole pages, gets those pages mapped back to back into a
  // range of its own (a "gathered segment"): the memory stranded between live blocks serves it
  // instead of an OOM. The pages stay lent (their place in the region is a chunk marked lent)
  // while the segment is in use or cached; cached gathered segments serve later requests as
  // growth's segments do and go back to their places before a request would otherwise fail,
  // on ReleaseCachedMemory and at destruction. Nothing changes until a request would fail, so
  // no trace needs more memory than without it (random_mixed: 1.24x -> 1.075x peak live;
  // docs/allocator.md, "Gathered pages"). The device allocator factory turns it on without
  // growth where the device has VMM calls.
  bool gather_pages = false;
  // Edge views (growth on; needs a sub-allocator with MapEdgeView, whose regions are made of
  // pages of this many bytes, page-aligned; 0 = off). A request of at most two pages that no
  // free chunk fits and no new region can serve, where one free chunk ends on a page boundary
  // and another starts on one, gets the first chunk's end and the second's start: their two
  // pages mapped back to back into a range of their own (a view), where the block is
  // contiguous. Nothing moves (the pages stay mapped where they are; the two parts are lent
  // to the view while it lives), so the free memory at the edges of separately mapped regions
  // (the vmm allocator's slabs) serves a request no hole fits. The view is unmapped after its
  // block's streams are done (at the next request that would fail, on release, at
  // destruction). docs/vmm.md, "Edge views".
  uint64_t edge_view_page_bytes = 0;
  // Edge views in best fit (with edge views on): a request of kEdgeBestFitMinBytes or more whose
  // best free chunk would leave kEdgeBestFitSlack or more beside it, or that no free chunk fits
  // (before a new region is mapped), takes a free end and a free start instead when the two
  // leave fewer bytes: the pair is one more candidate of best fit. Free chunks with an edge on a
  // page boundary are indexed by the bytes of that edge, so the pair costs a few bit scans, and
  // a map call when taken. Off here (views only where a request would fail); the usage mirror's
  // flag turns it on while the owner's memory is tight (the vmm allocator near its limit:
  // small random sizes fit in ~0.6 % less memory; docs/vmm.md, "Edge views in best fit").
  bool edge_views_in_best_fit = false;
  // Counters this allocator keeps current for the allocator it serves (the vmm allocator's
  // slabs), written under its lock (BFCUsageMirror); must outlive the allocator.
  BFCUsageMirror* usage_mirror = nullptr;
  // An allocator this one serves blocks for (the vmm allocator's slabs): the stream slots are
  // its (Allocator::ShareStreamSlotsOf), and it allocates with AllocateForOwner and records
  // streams with RecordStreamForOwner, its own AllocateRaw having made the checks and making
  // the stream waits. Must outlive this allocator.
  Allocator* stream_slot_owner = nullptr;
};

class BFCAllocator final : public Allocator {
 public:
  static constexpr uint64_t kMinAllocationSize = 256;
  static constexpr int kNumBins = 21;
  // Each bin is kept as 32 trees by the next five bits of the size (TLSF-style), so the trees
  // stay small and shallow (a lookup is a bitmap scan and a few compares); the order across
  // them is still (size, address), so the fit stays exact. 4 trees a bin cost 25 % more time
  // on random sizes, 64 gain nothing (docs/allocator.md).
  static constexpr int kSubBinBits = 5;
  static constexpr int kSubBins = 1 << kSubBinBits;
  static constexpr int kNumTrees = kNumBins * kSubBins;
  // Trees of bins 0-5 (256 B - 16 KiB) hold one size each, so they are lists (left / right
  // links, head in roots_), last freed first: O(1), and the record reused is a warm one, where a
  // treap of equal sizes walks cold records to the lowest address. random_small replays 10 %
  // faster; min limits move either way within the usual noise (docs/allocator.md).
  static constexpr int kListTrees = 6 * kSubBins;

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
  std::string DumpMemoryLog() const override;
  absl::Status CheckInvariants() const override;

  // Gives every wholly free region back to the sub-allocator, except the first ones (by
  // address) whose sizes add up to at most `keep_bytes`; returns the bytes released. (The vmm
  // allocator calls this to return slab granules to its pool.)
  // With `max_bytes`, stops once that much is released.
  absl::StatusOr<uint64_t> ReleaseEmptyRegions(uint64_t keep_bytes = 0,
                                               uint64_t max_bytes = UINT64_MAX);
  // Whether the shared regions hold a free chunk of at least `bytes` (a bitmap scan; the vmm
  // allocator asks whether a slab is empty before it walks the slabs).
  bool HasFreeChunk(uint64_t bytes) const ABSL_LOCKS_EXCLUDED(mu_);
  // Deallocate(ptr) when ptr is a live allocation of this allocator; otherwise *live = false
  // and nothing happens (no error is built: the vmm allocator asks this of pointers that may
  // be its own large blocks).
  absl::Status DeallocateIfLive(void* ptr, bool* live);
  // For BFCOptions::stream_slot_owner, whose AllocateRaw checked the request (a power-of-two
  // alignment of at least 256, bytes > 0) and waits for *wait_for's slots once this returns:
  // the placement alone, with the owner's slot numbers. Without the second pass through
  // AllocateRaw a small block of the vmm allocator costs what a bfc one does.
  absl::StatusOr<void*> AllocateForOwner(const AllocationRequest& request, uint64_t* wait_for) {
    return DoAllocate(request, wait_for);
  }
  // RecordStream with the owner's slot number; InvalidArgument when `ptr` is not live here.
  absl::Status RecordStreamForOwner(void* ptr, int slot) { return DoRecordStream(ptr, slot); }
  // Rounded size of a live allocation (the chunk it occupies); NotFound for other pointers.
  absl::StatusOr<uint64_t> AllocatedSize(const void* ptr) const;

  // Saturating: sizes near 2^64 round down to the largest multiple instead of wrapping to 0.
  static uint64_t RoundedBytes(uint64_t bytes) {
    return bytes > UINT64_MAX - (kMinAllocationSize - 1)
               ? UINT64_MAX & ~(kMinAllocationSize - 1)
               : (bytes + kMinAllocationSize - 1) & ~(kMinAllocationSize - 1);
  }
  static int BinFor(uint64_t size) {
    uint64_t units = size >> 8;
    if (units == 0) return 0;
    return std::min(kNumBins - 1, 63 - std::countl_zero(units));
  }
  // The tree of a free chunk: non-decreasing in size, bin = tree / kSubBins.
  static int TreeFor(uint64_t size) {
    uint64_t units = size >> 8;
    if (units == 0) return 0;
    int lead = 63 - std::countl_zero(units);
    int sub = lead >= kSubBinBits
                  ? static_cast<int>((units >> (lead - kSubBinBits)) & (kSubBins - 1))
                  : static_cast<int>((units << (kSubBinBits - lead)) & (kSubBins - 1));
    return std::min(kNumTrees - 1, lead * kSubBins + sub);
  }

 private:
  static constexpr uint32_t kNone = 0xffffffffu;
  struct alignas(64) Chunk {  // one cache line: a record never straddles two
    uint64_t ptr = 0;
    uint64_t size = 0;
    uint64_t requested = 0;  // 0 when free
    // Stream slots (allocator.h) whose work may still use the chunk: the owner's and the
    // recorded ones while in use; after a free those, and every merged neighbour's.
    uint64_t streams = 0;
    uint32_t prev = kNone;  // address neighbours within the region
    uint32_t next = kNone;
    uint32_t left = kNone;  // treap children (free chunks); live: the next in its hash chain
    uint32_t right = kNone;
    uint32_t parent = kNone;  // treap parent; kNone for a root
    uint32_t priority = 0;    // treap heap key, drawn when the record is (re)used
    int16_t bin = -1;         // tree index; -1: not in a tree
    bool in_use = false;
    bool segment = false;  // a whole region of its own (BFCOptions::segment_bytes), never split
    bool lent = false;     // pages lent to a gathered segment (in_use, not live; gather_pages)
                           // or a part lent to an edge view
    bool view = false;     // an edge view's block: in no region (BFCOptions::edge_view_page_bytes)
    uint8_t edges = 0;     // bit s: in the edge index's side s (edge_links_); in the padding
  };
  struct Region {
    uint64_t ptr = 0;
    uint64_t size = 0;
    uint32_t first = kNone;  // lowest chunk; survives every merge
  };

  absl::StatusOr<void*> DoAllocate(const AllocationRequest& request, uint64_t* wait_for) override;
  absl::Status DoDeallocate(void* ptr) override;
  AllocatorStats DoStats() const override ABSL_LOCKS_EXCLUDED(mu_);
  void DoResetPeakStats() override ABSL_LOCKS_EXCLUDED(mu_);
  // Growth on: ReleaseEmptyRegions(); growth off keeps its one region (the whole limit).
  absl::Status DoReleaseCachedMemory() override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status DoRecordStream(void* ptr, int slot) override;

  absl::StatusOr<void*> AllocateLocked(const AllocationRequest& request, uint64_t* wait_for)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // gather_pages: a request no free chunk fits: a cached gathered segment, else (the cached
  // ones returned first) the free chunks' whole pages gathered into a new one. NotFound when
  // the free pages are not enough (the caller reports the OOM), other errors from the device.
  absl::StatusOr<void*> AllocateGatheredLocked(const AllocationRequest& request, uint64_t rounded,
                                               uint64_t* wait_for)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives the pages of free gathered segment c back to their places (the lent chunks become
  // free and merge); when the device refuses, reports it and leaves the segment cached.
  void ReturnGatheredLocked(uint32_t c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Returns every cached (free) gathered segment; false when none went back.
  bool ReturnCachedGatheredLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  struct Gathered {
    uint64_t region = 0;         // the shared region the pages come from
    std::vector<uint32_t> lent;  // its chunks marked lent, in address order
    std::vector<PageRun> runs;   // the same, as offsets into the region
  };
  // Best-fit free chunk of the shared regions of at least `size` bytes, or kNone.
  uint32_t FindChunkLocked(uint64_t size) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return FindInTreesLocked(size, 0);
  }
  // The same over trees [base, base + kNumTrees): 0, the shared regions; kNumTrees, segments.
  uint32_t FindInTreesLocked(uint64_t size, int base) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The largest free chunk of trees [base, base + kNumTrees), or kNone.
  uint32_t LastInTreesLocked(int base) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Allocates `rounded` bytes from free chunk c (in a tree); from its high end when
  // `high_end` or the request is small (small_request_bytes).
  void* CarveLocked(uint32_t c, uint64_t rounded, const AllocationRequest& request,
                    uint64_t* wait_for, bool high_end = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks free chunk c (out of every tree) allocated to `request`.
  void* HandOutLocked(uint32_t c, const AllocationRequest& request, uint64_t* wait_for)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether whole pages waste at most 1/segment_waste_divisor of a `rounded`-byte request and,
  // before the first free, 1/segment_waste_divisor_before_free.
  bool SegmentWasteOk(uint64_t rounded) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const uint64_t waste = (page_ - rounded % page_) % page_;
    const uint64_t d = options_.segment_waste_divisor;
    const uint64_t first = options_.segment_waste_divisor_before_free;
    if (first != 0 && counters_.stats.num_frees == 0 && waste > rounded / first) return false;
    return d == 0 || waste <= rounded / d;
  }
  // A request of at least segment_bytes with growth on: a cached segment, or a new one.
  absl::StatusOr<void*> AllocateSegmentLocked(const AllocationRequest& request, uint64_t rounded,
                                              uint64_t* wait_for)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The best-fit cached segment of at least `size` bytes and at most `max_size`, or kNone.
  uint32_t FindSegmentLocked(uint64_t size, uint64_t max_size) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The largest cached segment, or kNone.
  uint32_t LargestSegmentLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives cached segments back until `need` more bytes fit under the limit (PyTorch's order:
  // the smallest one that is enough alone, else the largest first); false if they do not.
  bool ReleaseSegmentsLocked(uint64_t need) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives region i (wholly free; its one chunk may be in a tree) back to the sub-allocator and
  // drops it from regions_.
  void ReleaseRegionLocked(size_t i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // All of that but dropping it from regions_ (ReleaseEmptyRegionsLocked compacts regions_ once
  // for many: erasing each would move the rest every time, quadratic in the regions).
  void ReleaseRegionMemoryLocked(const Region& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits for the work of stream slots `slots` (memory leaving its address or going back);
  // a failure is reported, not returned: the caller goes on as it must.
  void SynchronizeOrReport(uint64_t slots);
  // The index in regions_ of the region starting at ptr.
  size_t RegionOf(uint64_t ptr) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What the limit still allows to be reserved.
  uint64_t AvailableLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return limit_ - counters_.stats.bytes_reserved;
  }
  absl::Status GrowLocked(uint64_t need) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A new region from the sub-allocator; returns its one free chunk, in a tree unless it is a
  // segment (which the caller hands out).
  absl::StatusOr<uint32_t> AddRegionLocked(uint64_t size, bool segment = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A region record at [ptr, ptr + size) with its one chunk (not in a tree), kept in address
  // order: the device's regions and gathered segments alike.
  uint32_t InsertRegionLocked(uint64_t ptr, uint64_t size, bool segment)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t ReleaseEmptyRegionsLocked(uint64_t keep_bytes = 0, uint64_t max_bytes = UINT64_MAX)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status OomErrorLocked(uint64_t bytes, uint64_t rounded, absl::string_view why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  AllocatorStats StatsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t LargestFreeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An event (allocator.h) with the counts after it: the usage mirror, then the observers.
  void NotifyLocked(AllocatorEventKind kind, uint64_t ptr, uint64_t bytes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    bool forward = false;
    if (BFCUsageMirror* const m = options_.usage_mirror; m != nullptr) {
      const uint64_t in_use = counters_.stats.bytes_in_use;
      m->in_use.store(in_use, std::memory_order_relaxed);
      if (kind == AllocatorEventKind::kAlloc || kind == AllocatorEventKind::kFree) {
        m->ops.store(m->ops.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      }
      if (kind == AllocatorEventKind::kAlloc) {
        BFCUsageMirror::RaiseTo(m->largest_alloc, bytes);
        BFCUsageMirror::RaiseTo(
            m->peak_in_use,
            in_use + (m->other_in_use != nullptr ? m->other_in_use->load(std::memory_order_relaxed)
                                                 : 0));
      }
      forward = m->forward != nullptr && m->forward->load(std::memory_order_relaxed);
    }
    if (forward || HasObservers()) SendEventLocked(kind, ptr, bytes, forward);
  }
  // NotifyLocked's rare part, out of line: the event with the largest free block (one tree
  // walk), to the mirror's `events` when `forward`, and to the observer list.
  void SendEventLocked(AllocatorEventKind kind, uint64_t ptr, uint64_t bytes, bool forward) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Status NotLiveError(const void* ptr) const;
  uint32_t NewChunk() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DeleteChunk(uint32_t c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Splits chunk c at `offset`: c keeps [0, offset), the returned new chunk the rest.
  uint32_t SplitChunk(uint32_t c, uint64_t offset) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Merges c's next neighbour into c.
  void MergeWithNext(uint32_t c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Chunk c has just become free (not in a tree): merges it with its free neighbours (the
  // merged chunk keeps the lowest record) and puts the result in its tree; returns it.
  uint32_t CoalesceAndBinLocked(uint32_t c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Shared region c's one chunk is free: counted in the usage mirror (empty_regions_made).
  ABSL_ATTRIBUTE_NOINLINE void NoteEmptyRegionLocked(uint32_t c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // BFCOptions::reclaim_slivers: free chunk c takes the sliver of the live block before it.
  void ReclaimSliverLocked(uint32_t c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The option's flag, or the usage mirror's (set by the owner) when there is one.
  std::atomic<bool> reclaim_own_{false};
  const std::atomic<bool>* reclaim_flag_ = &reclaim_own_;

  // Trees: one intrusive treap per size class, ordered by (size, address). The nodes are the
  // chunk records themselves, so inserting or removing a free chunk allocates nothing, and the
  // tiny trees a size class holds (about one chunk each on our traces) cost a few compares.
  bool KeyLess(uint32_t a, uint32_t b) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const Chunk& x = chunks_[a];
    const Chunk& y = chunks_[b];
    return x.size < y.size || (x.size == y.size && x.ptr < y.ptr);
  }
  void BinInsert(uint32_t c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (chunks_[c].segment) {
      if (const int k = SegmentList(chunks_[c].size); k != 0) return PushSegment(c, k);
    } else if (options_.small_from_top_bytes != 0 &&
               chunks_[c].size >= options_.small_from_top_bytes) {
      TopNote(c);
    }
    BinInsertInto(c, TreeOf(chunks_[c]));
  }
  // BFCOptions::small_from_top_bytes: the highest free shared-region chunk of at least that
  // size is remembered (top_, at top_ptr_). A chunk going into a tree becomes it when it lies
  // above it or contains it (a merge); when top_ is taken, TopChunkLocked finds the next one by
  // walking down from the end of the regions (past the small blocks gathered there).
  void TopNote(uint32_t c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const Chunk& ch = chunks_[c];
    top_none_ = false;
    if (top_ptr_ != 0 && ch.ptr > top_ptr_) {
      // A new top above the old one (a hole merged among the small blocks): the old one is
      // kept to fall back to once this one is used up.
      below_[below_n_++ % kTopBelow] = {top_, top_ptr_};
    }
    if (top_ptr_ == 0 || ch.ptr >= top_ptr_ || (top_ptr_ > ch.ptr && top_ptr_ - ch.ptr < ch.size)) {
      top_ = c;
      top_ptr_ = ch.ptr;
    }
  }
  bool TopValid(uint32_t c, uint64_t ptr) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const Chunk& ch = chunks_[c];
    return !ch.in_use && !ch.segment && ch.bin >= 0 && ch.ptr == ptr &&
           ch.size >= options_.small_from_top_bytes;
  }
  uint32_t TopChunkLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static constexpr int kTopWalk = 32;
  static constexpr uint32_t kTopBelow = 8;
  std::pair<uint32_t, uint64_t> below_[kTopBelow] ABSL_GUARDED_BY(mu_);
  uint32_t below_n_ ABSL_GUARDED_BY(mu_) = 0;  // entries pushed (the last kTopBelow are kept)
  uint32_t top_ ABSL_GUARDED_BY(mu_) = kNone;
  uint64_t top_ptr_ ABSL_GUARDED_BY(mu_) = 0;  // 0: unknown, TopChunkLocked walks
  // No chunk qualifies (a walk over every region found none; TopNote clears it): without it,
  // every small request in a pool with no large free chunk would walk every region again.
  bool top_none_ ABSL_GUARDED_BY(mu_) = false;
  void BinInsertInto(uint32_t c, int t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The doubly linked lists through left / right (parked slivers, one-size trees, cached
  // segments): c goes in front of *head; c comes out of the list at *head.
  void ListPush(uint32_t* head, uint32_t c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ListUnlink(uint32_t* head, uint32_t c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes a free chunk out of its tree, or off the parked list.
  void BinRemove(uint32_t c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ABSL_ATTRIBUTE_NOINLINE void BinRemoveIndexed(uint32_t c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void BinRemoveFromBin(uint32_t c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Splits treap t into keys below chunk c's (into *l) and above (into *r).
  void TreapSplit(uint32_t t, uint32_t c, uint32_t* l, uint32_t* r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Joins two treaps whose keys are all ordered l < r; the root is hung under `parent`.
  uint32_t TreapMerge(uint32_t l, uint32_t r, uint32_t parent) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Calls fn(chunk) for each chunk of tree t in (size, address) order; false if it is broken
  // (a cycle or more nodes than records).
  template <class Fn>
  bool ForEachInTree(int t, Fn fn) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::unique_ptr<SubAllocator> sub_allocator_;
  const BFCOptions options_;
  uint64_t limit_ = 0;
  absl::Status init_status_;

  mutable SpinLock mu_;
  std::vector<Chunk> chunks_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> free_records_ ABSL_GUARDED_BY(mu_);
  std::vector<Region> regions_ ABSL_GUARDED_BY(mu_);
  // The live chunks by address: a chained hash table whose chains run through the records
  // themselves (a live chunk's `left`, a treap link only free chunks use). A lookup reads a
  // 4-byte bucket and then the record the caller needs anyway; a table of (address, record)
  // pairs is four times the size and missed the cache on most frees (docs/allocator.md).
  std::vector<uint32_t> buckets_ ABSL_GUARDED_BY(mu_);
  int bucket_shift_ ABSL_GUARDED_BY(mu_) = 64;
  size_t live_count_ ABSL_GUARDED_BY(mu_) = 0;
  size_t BucketOf(uint64_t ptr) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // Fibonacci hashing of the address above its always-zero low bits.
    return static_cast<size_t>(((ptr >> 8) * 0x9e3779b97f4a7c15ull) >> bucket_shift_);
  }
  // Live chunk c joins the table (at most half as many live chunks as buckets: it doubles).
  void LiveInsert(uint32_t c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The live chunk at ptr (any value: foreign pointers included), or kNone.
  uint32_t LiveFind(uint64_t ptr) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the live chunk at ptr out of the table; kNone (nothing changed) when there is none.
  uint32_t LiveErase(uint64_t ptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RehashLive(size_t buckets) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts live chunk c at the head of its bucket's chain (no count, no growth).
  void LinkLive(uint32_t c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Trees [0, kNumTrees) hold the shared regions' free chunks; the next kNumTrees, by the same
  // size classes, the cached segments (above every shared tree, so the shared searches stop
  // at kNumTrees).
  static int TreeOf(const Chunk& c) { return (c.segment ? kNumTrees : 0) + TreeFor(c.size); }
  uint32_t roots_[2 * kNumTrees] ABSL_GUARDED_BY(mu_);

  // Cached segments of k pages (k = 1..kSegmentLists, the page segment_granularity) are on
  // list k, last freed first (bin == kSegmentListed; left / right links): a best fit is a
  // bitmap scan and the list's head, whose record is warm, where a tree of equal sizes is a walk
  // through cold records. Other sizes (larger, or not whole pages) are in trees kNumTrees+.
  static constexpr int kSegmentLists = 256;
  static constexpr int16_t kSegmentListed = -3;
  static constexpr int kSegmentMaskWords = (kSegmentLists + 1 + 63) / 64;
  uint64_t page_ = 0;  // BFCOptions::segment_granularity, at least kMinAllocationSize
  int SegmentList(uint64_t size) const {
    return size % page_ == 0 && size / page_ <= kSegmentLists ? static_cast<int>(size / page_) : 0;
  }
  uint32_t segment_heads_[kSegmentLists + 1] ABSL_GUARDED_BY(mu_);
  uint64_t segment_mask_[kSegmentMaskWords] ABSL_GUARDED_BY(mu_) = {};
  void PushSegment(uint32_t c, int k) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The first non-empty list >= k, or 0; the last non-empty list, or 0.
  int NextSegmentList(int k) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int LastSegmentList() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint32_t rng_ ABSL_GUARDED_BY(mu_) =
      0x9e3779b9u;  // xorshift32 state for treap priorities (deterministic)
  // Two-level bitmap (TLSF's): bit t of tree_mask_ says tree t is non-empty, bit w of
  // word_mask_ that word w of tree_mask_ is.
  static constexpr int kMaskWords = (2 * kNumTrees + 63) / 64;
  static_assert(kMaskWords <= 64);
  uint64_t tree_mask_[kMaskWords] ABSL_GUARDED_BY(mu_) = {};
  uint64_t word_mask_ ABSL_GUARDED_BY(mu_) = 0;
  void MarkTree(int t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    tree_mask_[t >> 6] |= uint64_t{1} << (t & 63);
    word_mask_ |= uint64_t{1} << (t >> 6);
  }
  void UnmarkTree(int t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    tree_mask_[t >> 6] &= ~(uint64_t{1} << (t & 63));
    if (tree_mask_[t >> 6] == 0) word_mask_ &= ~(uint64_t{1} << (t >> 6));
  }
  bool TreeMarked(int t) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return (tree_mask_[t >> 6] >> (t & 63)) & 1;
  }
  // The first non-empty tree >= t, or -1.
  int NextTree(int t) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int w = t >> 6;
    const uint64_t m = tree_mask_[w] & (~uint64_t{0} << (t & 63));
    if (m != 0) return w * 64 + std::countr_zero(m);
    if (w + 1 >= kMaskWords) return -1;
    const uint64_t words = word_mask_ & (~uint64_t{0} << (w + 1));
    if (words == 0) return -1;
    const int v = std::countr_zero(words);
    return v * 64 + std::countr_zero(tree_mask_[v]);
  }
  // The last non-empty tree below `end`, or -1 (for statistics: a walk down the words).
  int LastTreeBelow(int end) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (int w = (end - 1) >> 6; w >= 0; --w) {
      uint64_t m = tree_mask_[w];
      if (w == (end - 1) >> 6 && ((end & 63) != 0)) m &= (uint64_t{1} << (end & 63)) - 1;
      if (m != 0) return w * 64 + 63 - std::countl_zero(m);
    }
    return -1;
  }
  uint64_t next_region_bytes_ ABSL_GUARDED_BY(mu_) = 0;

  // Parked slivers (BFCOptions::park_slivers): free chunks outside the trees (bin == kParked)
  // on a doubly linked list through their left / right links.
  static constexpr int16_t kParked = -2;
  uint32_t parked_ ABSL_GUARDED_BY(mu_) = kNone;
  uint64_t parked_count_ ABSL_GUARDED_BY(mu_) = 0;
  // At least the largest parked sliver (exact after each walk): a request above it skips the
  // walk, which every request that grows the pool would otherwise pay.
  uint64_t parked_max_ ABSL_GUARDED_BY(mu_) = 0;
  void Park(uint32_t c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The best-fit parked sliver of at least `size` bytes, or kNone (a walk of the list, taken
  // only when the trees have nothing that fits and parked_max_ allows it).
  uint32_t FindParkedLocked(uint64_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // gather_pages: the sub-allocator's page (0 = off) and the gathered segments by address.
  uint64_t gather_page_ = 0;
  // Edge views (BFCOptions::edge_view_page_bytes): a request no free chunk fits and no new
  // region serves, served from a free chunk's end and another's start (see there); NotFound
  // when no two such parts are enough, other errors from the sub-allocator.
  // `over_below`: the pair must leave fewer bytes beside the block than this (the best hole's
  // remainder, for edge views in best fit). `tries`: the edge sizes tried on each side
  // (FindEdgePairLocked's limit; edge views in best fit try kEdgeBestFitTries, where a request
  // would fail every size). Only with the index kept; without it the walk tries every pair.
  absl::StatusOr<void*> AllocateEdgeViewLocked(const AllocationRequest& request, uint64_t rounded,
                                               uint64_t* wait_for, uint64_t over_below = UINT64_MAX,
                                               uint64_t tries = UINT64_MAX)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The free of view block c: its parts go back (free, with its streams) and its mapping
  // waits in freed_views_ for FlushViewsLocked.
  void FreeViewLocked(uint32_t c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Unmaps the freed views once their streams are done (a host wait: called where memory is
  // short or going back, before any region that a view maps can be released).
  void FlushViewsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  struct EdgeView {
    uint64_t va = 0;  // the two pages' mapping, as MapEdgeView returned it
    uint32_t low = kNone,
             high = kNone;  // the lent parts: the first chunk's end, the second's start
  };
  absl::flat_hash_map<uint32_t, EdgeView> views_ ABSL_GUARDED_BY(mu_);  // by the view's chunk
  struct FreedView {
    uint64_t va = 0;
    uint64_t streams = 0;  // the slots whose work may still read it
  };
  std::vector<FreedView> freed_views_ ABSL_GUARDED_BY(mu_);
  uint64_t views_made_ ABSL_GUARDED_BY(mu_) = 0;  // edge views made so far (DumpMemoryLog)

  // The free chunks of shared regions (trees 0 .. kNumTrees-1) whose end (side 0: the first
  // part of a view) or start (side 1: the second part) is on an edge-view page boundary, by
  // that edge's bytes within its page (min(size, page)) in 256-byte buckets: intrusive lists
  // (links beside the chunk records, touched only for such chunks) under a bitmap each. Kept by
  // BinInsertInto / BinRemove, so a view's best parts are bit scans, not a walk over every
  // chunk. Possible (edge_index_) when edge views are on and a page is at most
  // kEdgeIndexMaxBuckets buckets; kept (edge_live_) only while edge views are in best fit: built
  // by a walk when that starts, dropped after kEdgeIndexIdleAllocs allocations without it, so
  // an allocator far from its limit pays a flag test per bin change and nothing more.
  static constexpr uint64_t kEdgeIndexMaxBuckets = uint64_t{1} << 16;
  static constexpr uint64_t kEdgeBestFitMinBytes = 64 << 10;
  static constexpr uint64_t kEdgeBestFitSlack = 64 << 10;
  static constexpr uint64_t kEdgeBestFitTries = 8;  // edge sizes tried on each side
  struct EdgeLinks {
    uint32_t next[2] = {kNone, kNone};
    uint32_t prev[2] = {kNone, kNone};
    int32_t bucket[2] = {-1, -1};  // -1: not in that side's index
  };
  static constexpr uint32_t kEdgeIndexIdleAllocs = 4096;
  bool edge_index_ = false;
  bool edge_live_ ABSL_GUARDED_BY(mu_) = false;
  uint32_t edge_idle_allocs_ ABSL_GUARDED_BY(mu_) = 0;
  void BuildEdgeIndexLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DropEdgeIndexLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<EdgeLinks> edge_links_ ABSL_GUARDED_BY(mu_);  // by chunk record
  std::vector<uint32_t> edge_heads_[2] ABSL_GUARDED_BY(mu_);
  BucketBitmap edge_buckets_[2] ABSL_GUARDED_BY(mu_);
  std::atomic<bool> edge_best_fit_own_{false};
  const std::atomic<bool>* edge_best_fit_flag_ = &edge_best_fit_own_;
  // Out of line: most bin changes touch no page boundary (and plain BFC has no index).
  ABSL_ATTRIBUTE_NOINLINE void EdgeIndexInsert(uint32_t c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ABSL_ATTRIBUTE_NOINLINE void EdgeIndexRemove(uint32_t c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The first chunk of bucket b on `side` that is not `other`, or kNone.
  uint32_t EdgeChunkIn(int side, int64_t b, uint32_t other) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The pair (the end of *low, the start of *high, in bytes of their edges) that holds
  // `rounded` with the least bytes over it, if less than `over_below`; false if none. `limit`
  // caps the low edges and high edges tried from the largest down (each with its best
  // partner); UINT64_MAX tries every bucket.
  bool FindEdgePairLocked(uint64_t rounded, uint64_t over_below, uint64_t limit, uint32_t* low,
                          uint64_t* low_edge, uint32_t* high, uint64_t* high_edge) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::flat_hash_map<uint64_t, Gathered> gathered_ ABSL_GUARDED_BY(mu_);
  uint64_t gathers_ ABSL_GUARDED_BY(mu_) = 0;  // gathered segments made (DumpMemoryLog)

  AllocatorCounters counters_ ABSL_GUARDED_BY(mu_);
};

// The factory's creators (allocator/factory.h): a logical device's BFC over Executor::Allocate,
// with options' growth, GC and bfc_* knobs; and CPU:0's (kHostMemory), over pinned host memory
// through `executor` (plain host memory when null), growth on, limit 0 = unlimited.
absl::StatusOr<std::unique_ptr<Allocator>> CreateBfcAllocator(
    Executor* executor, const DeviceAllocatorOptions& options);
absl::StatusOr<std::unique_ptr<Allocator>> CreateHostBfcAllocator(
    Executor* executor, const DeviceAllocatorOptions& options);

}  // namespace vgpu

#endif  // VGPU_ALLOCATOR_BFC_ALLOCATOR_H_
