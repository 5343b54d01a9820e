#include "vgpu/allocator/vmm_allocator.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <iterator>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "vgpu/allocator/bfc_allocator.h"
#include "vgpu/allocator/sub_allocator.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/status.h"

namespace vgpu {
namespace {

uint64_t CeilDiv(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }
uint64_t AlignUp(uint64_t a, uint64_t b) { return CeilDiv(a, b) * b; }
// b a power of two: no division.
uint64_t AlignUpPow2(uint64_t a, uint64_t b) { return (a + b - 1) & ~(b - 1); }
std::string P(const void* p) { return absl::StrFormat("%p", p); }

// For an atomic that only writers holding one lock change (readers take no lock): a plain
// load and store, without the locked read-modify-write (~20 cycles on x86) it does not need.
uint64_t AddUnderLock(std::atomic<uint64_t>& a, uint64_t delta) {
  const uint64_t v = a.load(std::memory_order_relaxed) + delta;
  a.store(v, std::memory_order_relaxed);
  return v;
}

// "host-vmm:0": the device the granules come from, for names and dumps.
std::string VmmDeviceName(const Executor* executor) {
  const Platform* p = executor->platform();
  return absl::StrCat(p != nullptr ? p->name() : "device", "-vmm:", executor->ordinal());
}

}  // namespace

// Hands the slab BFC regions made of stitched granules from the pool.
class VmmAllocator::SlabSubAllocator final : public SubAllocator {
 public:
  explicit SlabSubAllocator(VmmAllocator* owner) : owner_(owner) {}
  std::string name() const override { return owner_->name() + "/granules"; }

  // Slabs are slab_bytes_ (a multiple of the granule). When the pool refuses one, BFC backs
  // off towards the request with smaller sizes: those are rounded up to whole granules, so
  // they fail the same way and BFC ends with the pool's own reason.
  absl::StatusOr<void*> Alloc(uint64_t bytes, uint64_t alignment) override {
    if (bytes == 0) return absl::InvalidArgumentError(absl::StrCat(name(), ": empty slab"));
    FutexMutexLock l(&owner_->mu_);
    const uint64_t count = owner_->GranulesFor(bytes);
    const uint64_t align = std::max(alignment, owner_->granularity_);
    // A slot of the slab arena when one is free (slots are granule-aligned), else a
    // reservation of its own.
    absl::StatusOr<std::unique_ptr<Range>> r = nullptr;
    if (align == owner_->granularity_) r = owner_->MapArenaSlabLocked(count);
    if (r.ok() && *r == nullptr) r = owner_->MapRangeLocked(count, align);
    if (!r.ok() && absl::IsResourceExhausted(r.status()) && !owner_->pending_.empty()) {
      // Deferred frees hold memory until their streams are done: wait for them now.
      VGPU_RETURN_IF_ERROR(owner_->ReapPendingLocked(/*wait=*/true));
      r = owner_->MapRangeLocked(count, align);
    }
    if (!r.ok()) {
      owner_->slab_refusal_ = std::string(r.status().message());  // for AllocateSmall's OOM
      return r.status();
    }
    owner_->slab_refusal_.clear();
    std::unique_ptr<Range> range = *std::move(r);
    void* p = range->ptr;
    owner_->slab_granules_ += range->granules.size();
    owner_->slab_ranges_.emplace(p, std::move(range));
    owner_->NotePeakWorkingLocked();
    return p;
  }

  absl::Status Free(void* ptr, uint64_t bytes) override {
    FutexMutexLock l(&owner_->mu_);
    auto it = owner_->slab_ranges_.find(ptr);
    if (it == owner_->slab_ranges_.end() ||
        it->second->granules.size() != owner_->GranulesFor(bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": ", P(ptr), " (", bytes, " bytes) is not a slab"));
    }
    std::unique_ptr<Range> range = std::move(it->second);
    owner_->slab_ranges_.erase(it);
    owner_->slab_granules_ -= range->granules.size();
    range->streams = owner_->used_slots_.load(std::memory_order_relaxed);
    VGPU_RETURN_IF_ERROR(owner_->UnmapRangeLocked(std::move(range)));
    if (owner_->options_.allow_growth) VGPU_RETURN_IF_ERROR(owner_->EpochGiveBackLocked());
    return absl::OkStatus();
  }

  // Edge views: the granules at `low` and `high` (in slabs) mapped back to back in a range of
  // their own. Map and unmap calls count as ours; the granules stay in their slabs.
  absl::StatusOr<void*> MapEdgeView(void* low, void* high) override {
    FutexMutexLock l(&owner_->mu_);
    const uint64_t g = owner_->granularity_;
    const uint32_t lo = owner_->SlabGranuleAtLocked(low), hi = owner_->SlabGranuleAtLocked(high);
    if (lo == kNoGranule || hi == kNoGranule) {
      return absl::InvalidArgumentError(absl::StrCat(name(), ": an edge view of ", P(low), " and ",
                                                     P(high), ", which are not slab granules"));
    }
    VGPU_ASSIGN_OR_RETURN(void* reserved, owner_->executor_->ReserveAddressRange(3 * g));
    void* va = reinterpret_cast<void*>(AlignUp(reinterpret_cast<uint64_t>(reserved), g));
    const PhysicalMemoryHandle handles[2] = {owner_->granules_[lo].handle,
                                             owner_->granules_[hi].handle};
    if (absl::Status s = owner_->executor_->MapAll(va, handles, 2); !s.ok()) {
      owner_->executor_->FreeAddressRange(reserved, 3 * g).IgnoreError();
      return s;
    }
    ++owner_->map_calls_;
    ++owner_->edge_views_made_;
    owner_->edge_views_.emplace(va, reserved);
    return va;
  }

  absl::Status UnmapEdgeView(void* view) override {
    FutexMutexLock l(&owner_->mu_);
    auto it = owner_->edge_views_.find(view);
    if (it == owner_->edge_views_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": ", P(view), " is not an edge view"));
    }
    void* reserved = it->second;
    owner_->edge_views_.erase(it);
    const uint64_t g = owner_->granularity_;
    absl::Status s = owner_->executor_->Unmap(view, 2 * g);
    ++owner_->unmap_calls_;
    s.Update(owner_->executor_->FreeAddressRange(reserved, 3 * g));
    return s;
  }

 private:
  VmmAllocator* owner_;
};

// Sends the slab BFC's block events on as ours while we have observers (BFCUsageMirror::forward;
// its usage reaches us through the mirror's counters, not through here). Called under the slab
// BFC's lock: atomics only.
class VmmAllocator::SlabObserver final : public AllocatorObserver {
 public:
  explicit SlabObserver(VmmAllocator* owner) : owner_(owner) {}
  void OnAllocatorEvent(const std::string&, const AllocatorEvent& e) override {
    // Slab map/unmap are reported by the granule pool, OOMs by AllocateSmall.
    if (e.kind != AllocatorEventKind::kAlloc && e.kind != AllocatorEventKind::kFree) return;
    owner_->NotifyEvent(e.kind, reinterpret_cast<const void*>(e.ptr), e.bytes);
  }

 private:
  VmmAllocator* owner_;
};

void VmmAllocator::NotifyObservers(AllocatorEventKind kind, const void* ptr, uint64_t bytes) const {
  // Cached granules can be restitched into one block (Stats' largest free block).
  Notify(options_.name,
         AllocatorEvent{kind, reinterpret_cast<uint64_t>(ptr), bytes,
                        large_in_use_.load() + small_in_use(), mapped_bytes_.load(),
                        std::max(slab_usage_.largest_free.load(std::memory_order_relaxed),
                                 cached_bytes_.load(std::memory_order_relaxed))});
}

absl::StatusOr<std::unique_ptr<VmmAllocator>> VmmAllocator::Create(Executor* executor,
                                                                   VmmOptions options) {
  if (executor == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(options.name, ": no executor to allocate from"));
  }
  VGPU_ASSIGN_OR_RETURN(uint64_t g, executor->VirtualMemoryGranularity());
  if (g == 0 || (g & (g - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.name, ": VMM granularity ", g, " is not a power of two"));
  }
  if (options.page_bytes != 0) {
    const uint64_t p = options.page_bytes;
    if (p < g || (p & (p - 1)) != 0 || p > (uint64_t{1} << 40)) {
      return absl::InvalidArgumentError(absl::StrCat(
          options.name, ": vmm page ", FormatBytes(p), " must be a power-of-two multiple of ",
          "the device's VMM granularity ", FormatBytes(g), ", at most 1 TiB"));
    }
    g = p;
  }
  if (options.memory_limit < g) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.name, ": memory limit ", FormatBytes(options.memory_limit),
        " is below one VMM granule (", FormatBytes(g), "); the vmm allocator needs at least one"));
  }
  std::unique_ptr<VmmAllocator> a(new VmmAllocator(executor, std::move(options), g));
  VGPU_RETURN_IF_ERROR(a->Init());
  return a;
}

VmmAllocator::VmmAllocator(Executor* executor, VmmOptions options, uint64_t granularity)
    : executor_(executor),
      options_(std::move(options)),
      granularity_(granularity),
      granule_shift_(std::countr_zero(granularity)) {}

absl::Status VmmAllocator::Init() {
  const uint64_t g = granularity_;
  limit_granules_ = options_.memory_limit / g;
  if (limit_granules_ > (uint64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": memory limit ",
                                                   FormatBytes(options_.memory_limit),
                                                   " is more than 2^31 granules"));
  }
  // Without growth the whole limit is the allocator's anyway, so a cached range costs no
  // memory, and on a card every eviction is an unmap and a later remap (docs/vmm.md): the
  // cache may hold the whole limit and gives way only under pressure.
  cache_limit_granules_ = !options_.enable_cache  ? 0
                          : options_.cache_bytes  ? options_.cache_bytes / g
                          : options_.allow_growth ? limit_granules_ / 4
                                                  : limit_granules_;
  keep_granules_ = options_.pool_keep_bytes ? options_.pool_keep_bytes / g
                                            : std::max<uint64_t>(1, limit_granules_ / 64);
  {
    FutexMutexLock l(&mu_);  // not shared yet; for the analysis
    epoch_len_ = BaseEpochLen();
    epoch_interval_ns_ = BaseEpochIntervalNs();
  }
  // Half a granule: larger requests are stitched whole granules, which cannot fragment.
  // random_mixed's min limit: 1.075x at G/2 and 1.07x at G with fixed one-granule slabs
  // (1.085x and 1.095x with doubling slabs); G/2 keeps 1-2 MiB blocks out of the slabs.
  // (docs/vmm.md)
  small_block_max_ = options_.small_block_max ? options_.small_block_max : g / 2;
  if (options_.inner_blocks) min_inner_gap_ = std::max<uint64_t>(small_block_max_ / 2, 256);
  {
    FutexMutexLock l(&mu_);  // not shared yet; for the analysis
    open_upper_.Init(g, &shared_);
    open_lower_.Init(g, &shared_);
    open_mid_.Init(g, &shared_);
    // The pool never holds more than the limit: no regrowth in the hot path. With growth the
    // granule records (16 + 32 bytes each) are reserved up front too, up to 1 TiB of 2 MiB
    // granules: a first fill otherwise copies them at every doubling.
    const uint64_t records = std::min<uint64_t>(limit_granules_, uint64_t{1} << 20);
    free_granules_.reserve(records);
    if (options_.allow_growth) {
      granules_.reserve(std::min<uint64_t>(records, uint64_t{1} << 19));
      shared_.resize(granules_.capacity());
    }
  }
  if (options_.slab_bytes != 0) {
    slab_bytes_ = AlignUp(options_.slab_bytes, g);
  } else {  // by the limit (VmmOptions::slab_bytes)
    const uint64_t cap = limit_granules_ * g / VmmOptions::kDefaultSlabLimitDivisor;
    slab_bytes_ = g;
    while (slab_bytes_ < VmmOptions::kMaxDefaultSlabGranules * g && 2 * slab_bytes_ <= cap)
      slab_bytes_ *= 2;
  }
  if (small_block_max_ > slab_bytes_) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), ": small_block_max ", FormatBytes(small_block_max_),
                     " exceeds the slab size ", FormatBytes(slab_bytes_)));
  }
  // The slab arena: room for the limit in slabs, plus one (virtual space only). Where the
  // device refuses so large a reservation, slabs reserve their own ranges, as without it.
  {
    const uint64_t slots = limit_granules_ * g / slab_bytes_ + 1;
    if (slots < kNoGranule && slots <= UINT64_MAX / slab_bytes_ - 1) {
      const uint64_t bytes = (slots + 1) * slab_bytes_;  // a slot's worth spare to align
      if (absl::StatusOr<void*> va = executor_->ReserveAddressRange(bytes); va.ok()) {
        slab_arena_reserved_ = *va;
        slab_arena_reserved_bytes_ = bytes;
        slab_arena_ = reinterpret_cast<char*>(AlignUp(reinterpret_cast<uint64_t>(*va), g));
        arena_slots_ = static_cast<uint32_t>(slots);
        slab_arena_bytes_ = slots * slab_bytes_;
      }
    }
  }
  BFCOptions bo;
  bo.name = absl::StrCat(name(), " slabs");
  bo.memory_limit = limit_granules_ * g;  // the granule pool enforces the real limit
  bo.allow_growth = true;
  // Every slab is slab_bytes_ (one to four granules by default, by the limit), not doubling:
  // measured on the shared traces, fixed one-granule slabs replay random_mixed in 1.075x peak live
  // against 1.085x for doubling slabs, at the same speed (docs/vmm.md).
  bo.initial_region_bytes = slab_bytes_;
  bo.max_region_bytes = slab_bytes_;
  bo.garbage_collection = true;
  bo.segment_bytes = 0;  // slabs hold many blocks each; large blocks never come here
  // Small random sizes (256 B - 1 MiB) fragment slabs less when slivers down to an eighth of
  // the request are split off: 1.075x peak live instead of 1.10x at 0.25 (docs/vmm.md).
  bo.min_split_fraction = options_.slab_min_split_fraction;
  // bo.reclaim_slivers stays off: slab_usage_.reclaim_slivers turns it on near the limit.
  // The slab BFC keeps our small-block counters itself, under its lock (no call per small
  // operation), and sends its events on only while we have observers.
  slab_observer_ = std::make_unique<SlabObserver>(this);
  slab_usage_.other_in_use = &large_in_use_;
  slab_usage_.forward = ObserversFlag();
  slab_usage_.events = slab_observer_.get();
  bo.usage_mirror = &slab_usage_;
  bo.stream_slot_owner = this;  // small blocks carry our slot numbers; our AllocateRaw waits
  if (options_.edge_views) bo.edge_view_page_bytes = g;  // slabs are whole granules, aligned
  VGPU_ASSIGN_OR_RETURN(slabs_, BFCAllocator::Create(std::make_unique<SlabSubAllocator>(this), bo));
  if (!options_.allow_growth) {
    FutexMutexLock l(&mu_);  // not shared yet; for the analysis
    // Everything up front, one physical allocation per granule: a driver maps an allocation
    // from its start only (Executor::Map), so granules that are mapped one by one, anywhere,
    // are allocated one by one.
    granules_.reserve(limit_granules_);
    free_granules_.reserve(limit_granules_);
    // Tail sharing's records too, here rather than at the first shared granule: filling them
    // (40 bytes a granule, 1.1 MiB at a 56 GiB limit) there took fresh pages in a block's
    // allocation.
    shared_.resize(granules_.capacity());
    while (free_granules_.size() < limit_granules_) {
      const uint64_t i = free_granules_.size();
      absl::StatusOr<size_t> made =
          CreateGranulesLocked(std::min<uint64_t>(limit_granules_ - i, 1024));
      if (!made.ok()) {
        GiveBackLocked(0).IgnoreError();  // what was made so far: all of it is free
        return absl::ResourceExhaustedError(absl::StrCat(
            name(), ": cannot take the whole limit of ", FormatBytes(limit_granules_ * g),
            " from the device up front (allow_growth is off): granule ", i, " of ", limit_granules_,
            ": ", made.status().message()));
      }
    }
    // Reversed so pops hand them out in creation order.
    std::reverse(free_granules_.begin(), free_granules_.end());
  }
  if (options_.allow_growth && options_.quiet_give_back_ms > 0) {
    quiet_thread_ = std::thread([this] { QuietLoop(); });
  }
  return absl::OkStatus();
}

void VmmAllocator::QuietLoop() {
  // Looks every period: an operation count unchanged since the last look means no operation
  // for at least a period, so what is left goes back (once per quiet spell). A look is two
  // relaxed loads; the hot paths only store their counts. Once given back, it sleeps until an
  // operation wakes it (WakeQuietThread) or a second passes, so a quiet allocator costs no
  // wake-ups every period.
  const auto period =
      std::chrono::milliseconds(std::min<uint64_t>(options_.quiet_give_back_ms, uint64_t{1} << 32));
  // From no operation (the count when the allocator was made), not from this thread's first
  // read: the thread may start after the first quiet spell has begun.
  uint64_t seen = 0;
  bool given = true;  // nothing to give back before the first operation
  std::unique_lock<std::mutex> l(quiet_mu_);
  while (true) {
    // Parked: an operation clears quiet_parked_. One that came before the flag was seen is
    // caught by the count read after setting it; one that races with both (relaxed on the hot
    // paths, no fence there) waits out the second.
    quiet_parked_.store(given, std::memory_order_seq_cst);
    if (given && OpsSoFar() == seen) {
      quiet_cv_.wait_for(l, std::chrono::seconds(1), [this] {
        return quiet_stop_ || !quiet_parked_.load(std::memory_order_relaxed);
      });
      quiet_parked_.store(false, std::memory_order_relaxed);
    } else if (!given) {
      quiet_cv_.wait_for(l, period, [this] { return quiet_stop_; });
    }
    if (quiet_stop_) return;
    const uint64_t now = OpsSoFar();
    if (now != seen) {
      seen = now;
      given = false;
      continue;
    }
    if (given) continue;
    l.unlock();
    given = QuietGiveBack(now).ok();  // a failure (the device's) is tried again next time
    l.lock();
  }
}

void VmmAllocator::WakeQuietThread() {
  {
    std::lock_guard<std::mutex> l(quiet_mu_);
    quiet_parked_.store(false, std::memory_order_relaxed);
  }
  quiet_cv_.notify_one();
}

absl::Status VmmAllocator::QuietGiveBack(uint64_t ops) {
  // What GiveBackIfIdle gives back, with blocks live: empty slabs but one (the slab BFC's lock
  // before ours), the cache beyond the reserve, every free granule. An operation since `ops`
  // ends the quiet: nothing more goes (the next quiet spell will).
  const uint64_t slab_granules = slab_bytes_ / granularity_;
  const uint64_t keep_slab = slab_granules <= keep_granules_ ? slab_bytes_ : 0;
  if (slabs_ != nullptr && OpsSoFar() == ops) {
    VGPU_RETURN_IF_ERROR(slabs_->ReleaseEmptyRegions(keep_slab).status());
  }
  FutexMutexLock l(&mu_);
  if (OpsSoFar() != ops) return absl::OkStatus();
  const uint64_t created = created_granules_;
  // Deferred frees whose streams are done; the others stay until their memory is needed. The
  // reserve counts the empty slab that may have been kept (live slabs are not part of it).
  const uint64_t cache_keep = keep_granules_ > slab_granules ? keep_granules_ - slab_granules : 0;
  const absl::Status s =
      GiveBackBeyondReserveLocked(cache_keep, /*spare=*/nullptr, /*wait_for_streams=*/false);
  if (created_granules_ < created) {
    ++quiet_give_backs_;
    quiet_granules_ += created - created_granules_;
  }
  return s;
}

VmmAllocator::~VmmAllocator() {
  if (quiet_thread_.joinable()) {
    {
      std::lock_guard<std::mutex> l(quiet_mu_);
      quiet_stop_ = true;
    }
    quiet_cv_.notify_all();
    quiet_thread_.join();
  }
  // The slab BFC frees its regions through SlabSubAllocator, which takes mu_.
  slabs_.reset();
  FutexMutexLock l(&mu_);
  ReapPendingLocked(/*wait=*/true).IgnoreError();
  blocks_.Drain([&](std::unique_ptr<Range> range) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    UnmapRangeLocked(std::move(range)).IgnoreError();  // under mu_, held above
  });
  for (auto& [p, range] : slab_ranges_) UnmapRangeLocked(std::move(range)).IgnoreError();
  slab_ranges_.clear();
  cache_.Drain([&](std::unique_ptr<Range> range) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    UnmapRangeLocked(std::move(range)).IgnoreError();  // under mu_, held above
  });
  GiveBackLocked(0).IgnoreError();
  FreeSpareReservationsLocked();
  if (slab_arena_reserved_ != nullptr) {
    executor_->FreeAddressRange(slab_arena_reserved_, slab_arena_reserved_bytes_).IgnoreError();
  }
}

inline bool VmmAllocator::FitsSlab(uint64_t bytes, uint64_t alignment) const {
  return AlignUp(bytes, kDefaultAlignment) + alignment - kDefaultAlignment <= slab_bytes_;
}

absl::StatusOr<void*> VmmAllocator::DoAllocate(const AllocationRequest& request,
                                               uint64_t* wait_for) {
  const uint64_t bytes = request.bytes, alignment = request.alignment;
  if (request.slot != 0) used_slots_.fetch_or(SlotBit(request.slot), std::memory_order_relaxed);
  // The quiet give-back's thread sleeps once it gave back: this operation wakes it.
  if (ABSL_PREDICT_FALSE(quiet_parked_.load(std::memory_order_relaxed))) WakeQuietThread();
  if (slabs_ != nullptr && bytes < small_block_max_ && FitsSlab(bytes, alignment)) {
    // Near the limit (less than a third of it left) a mid-size block tries the open parts of
    // shared granules first (out of line: the small path pays one relaxed load).
    if (ABSL_PREDICT_FALSE(mid_in_open_parts_.load(std::memory_order_relaxed)) &&
        bytes >= small_block_max_ / 2 && alignment <= kDefaultAlignment &&
        options_.mid_blocks_near_limit) {
      return AllocateMid(request, wait_for);
    }
    return AllocateSmall(request, wait_for);
  }
  return AllocateLarge(bytes, alignment, request.slot, wait_for);
}

absl::StatusOr<void*> VmmAllocator::AllocateMid(const AllocationRequest& request,
                                                uint64_t* wait_for) {
  // An open part of a shared granule that holds the block with less than half its size to
  // spare, or a head and a tail that do, in place of the slab hole it would take (random_mid,
  // random_16m: docs/vmm.md, "Mid-size blocks in open parts near the limit"). Open parts are
  // memory already mapped that only a block of a fitting size can use; a slab hole serves any
  // small block. Anything else: the slabs.
  // Mid-size blocks are below half a granule: with default alignment they are never whole
  // granules, so tail sharing lays them out.
  if (options_.share_tail_granules) {
    mu_.Lock();
    // With no open parts it finds a fresh tail and returns NotFound after a few empty lookups.
    absl::StatusOr<std::unique_ptr<Range>> r =
        MapSharedRangeLocked(AlignUp(request.bytes, kDefaultAlignment), /*fewest_granules=*/false,
                             /*max_gap=*/std::max<uint64_t>(request.bytes / 2, 1));
    if (r.ok()) return FinishLargeLocked(*std::move(r), request.bytes, request.slot, wait_for);
    mu_.Unlock();
    if (!absl::IsNotFound(r.status()) && !absl::IsResourceExhausted(r.status())) {
      return r.status();
    }
  }
  return AllocateSmall(request, wait_for);
}

absl::StatusOr<void*> VmmAllocator::AllocateSmall(const AllocationRequest& request,
                                                  uint64_t* wait_for) {
  // Our slot numbers (the slab BFC shares our stream slots); AllocateRaw waits for *wait_for.
  absl::StatusOr<void*> p = slabs_->AllocateForOwner(request, wait_for);
  if (p.ok() || !absl::IsResourceExhausted(p.status())) return p;
  const uint64_t bytes = request.bytes;
  const uint64_t rounded = AlignUp(bytes, kDefaultAlignment);
  mu_.Lock();
  if (options_.share_tail_granules && request.alignment <= kDefaultAlignment &&
      GranuleOffset(rounded) != 0) {
    // No slab has room and none can be added: an open part of a shared granule that holds the
    // block, whatever it leaves beside it, rather than an OOM (laid out as a large block).
    absl::StatusOr<std::unique_ptr<Range>> r =
        MapSharedRangeLocked(rounded, /*fewest_granules=*/true);
    if (r.ok()) return FinishLargeLocked(*std::move(r), bytes, request.slot, wait_for);
  }
  ++num_ooms_;
  NotifyEvent(AllocatorEventKind::kOom, nullptr, bytes);
  // The slab BFC's own message would repeat the numbers (and suggest vmm); say why no slab
  // could be added instead: the pool's refusal, or every granule of the limit is a slab.
  const std::string why = absl::StrCat(
      "no slab has room for it and no new slab could be mapped (",
      slab_refusal_.empty() ? "every granule of the limit is in a slab" : slab_refusal_, ")");
  slab_refusal_.clear();
  mu_.Unlock();
  return OomError(bytes, rounded, why);
}

absl::StatusOr<void*> VmmAllocator::AllocateLarge(uint64_t bytes, uint64_t alignment, int slot,
                                                  uint64_t* wait_for) {
  const uint64_t count = GranulesFor(bytes);
  // Tail sharing for sizes that are not whole granules (and default alignment).
  const uint64_t rounded = AlignUp(bytes, kDefaultAlignment);
  const uint64_t part = GranuleOffset(rounded);
  const uint64_t divisor = options_.whole_granule_waste_divisor;
  const bool can_share =
      options_.share_tail_granules && alignment <= kDefaultAlignment && part != 0;
  // Far from the limit, whole granules when they waste little (VmmOptions::
  // whole_granule_waste_divisor); tail sharing is still tried before an OOM, below.
  const bool share = can_share && (divisor == 0 || (granularity_ - part) * divisor > rounded ||
                                   near_limit_.load(std::memory_order_relaxed));
  auto map = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {  // under mu_, taken below
    return share ? MapSharedRangeLocked(rounded) : MapRangeLocked(count, alignment);
  };
  // Locked by hand: the retry below drops the lock in the middle.
  mu_.Lock();
  // Growth: a block that may need new granules, below the limit, while the slabs hold a slab's
  // worth of free bytes or more: empty slabs (a free chunk of a whole slab) give theirs first, so
  // large blocks do not grow the memory held while slabs sit empty (random_mid at 2x its peak
  // live: 1.11-1.12x reserved -> 1.08-1.09x; docs/vmm.md). At the limit the retry below does it.
  // The slab BFC's lock comes before ours.
  // Asked only when a slab may have emptied since the last look found none left (the slab BFC
  // counts the slabs its frees leave wholly free): the look takes both locks, and random sizes
  // with growth came here on about half their large blocks, finding an empty slab on 3 % of
  // them (random_mid: 1.9 % of the replay's instructions saved).
  if (options_.allow_growth && free_granules_.size() <= count &&
      mapped_granules_ + count <= limit_granules_ &&
      slab_granules_ * granularity_ >= small_in_use() + slab_bytes_ &&
      slab_usage_.empty_regions_made.load(std::memory_order_relaxed) != empty_slabs_seen_) {
    const uint64_t made = slab_usage_.empty_regions_made.load(std::memory_order_relaxed);
    // Only as many as the block may need (its granules and a tail, less the pool's): slabs
    // given back beyond that are mapped again by the next small blocks.
    const uint64_t want =
        (count + 1 - std::min<uint64_t>(count + 1, free_granules_.size())) * granularity_;
    mu_.Unlock();
    bool none_left = true;  // no empty slab, or all of them given back
    if (slabs_->HasFreeChunk(slab_bytes_)) {
      absl::StatusOr<uint64_t> released = slabs_->ReleaseEmptyRegions(0, want);
      none_left = released.ok() && *released < want;
    }
    mu_.Lock();
    if (none_left) empty_slabs_seen_ = made;
  }
  if (!pending_.empty()) {
    if (absl::Status s = ReapPendingLocked(/*wait=*/false); !s.ok()) {
      mu_.Unlock();
      return s;
    }
  }
  std::unique_ptr<Range> range;
  // A block this stream freed that still waits for this stream's work fits as it is.
  if (!pending_.empty() && alignment <= kDefaultAlignment) {
    range = TakePendingLocked(share ? rounded : count * granularity_, slot);
    if (range != nullptr) ++cache_hits_;
  }
  if (range == nullptr && !share) range = TakeCachedLocked(count, alignment);
  if (range != nullptr && !DropKeptTailLocked(range.get()).ok()) {
    UnmapRangeLocked(std::move(range)).IgnoreError();  // and map afresh below
  }
  if (range == nullptr) {
    absl::StatusOr<std::unique_ptr<Range>> r = map();
    if (!r.ok() && absl::IsResourceExhausted(r.status()) && !pending_.empty()) {
      // Deferred frees hold memory until their streams are done: wait for them now.
      if (absl::Status s = ReapPendingLocked(/*wait=*/true); !s.ok()) {
        mu_.Unlock();
        return s;
      }
      r = map();
    }
    if (!r.ok() && absl::IsResourceExhausted(r.status()) && slabs_ != nullptr) {
      // Empty slabs hold granules too: let the slab BFC give them back, then retry. Its lock
      // comes before ours, so ours is dropped meanwhile.
      mu_.Unlock();
      slabs_->ReleaseEmptyRegions().IgnoreError();
      mu_.Lock();
      r = map();
    }
    if (!r.ok() && absl::IsResourceExhausted(r.status()) && can_share) {
      // A block that took whole granules by the rule above may fit with tail sharing (an open
      // part as its head). The layouts that save a gap may take a granule more than the largest
      // head does: before failing, the block is laid out that way (what the OOM message's
      // "largest block the limit still allows" counts on).
      if (!share) r = MapSharedRangeLocked(rounded);
      if (!r.ok() && absl::IsResourceExhausted(r.status())) {
        r = MapSharedRangeLocked(rounded, /*fewest_granules=*/true);
      }
    }
    if (!r.ok() && absl::IsResourceExhausted(r.status()) && slabs_ != nullptr &&
        FitsSlab(bytes, alignment)) {
      // A block no larger than a slab fits a slab's free chunk, or a free end and a free start
      // of two (an edge view), as small blocks do: the slabs' free space is mapped memory that
      // serves it rather than an OOM. The slab BFC's lock comes before ours.
      mu_.Unlock();
      absl::StatusOr<void*> p = slabs_->AllocateForOwner(
          AllocationRequest{.bytes = bytes, .alignment = alignment, .slot = slot}, wait_for);
      if (p.ok() || !absl::IsResourceExhausted(p.status())) return p;
      mu_.Lock();
    }
    if (!r.ok()) {
      if (!absl::IsResourceExhausted(r.status())) {
        mu_.Unlock();
        return r.status();
      }
      ++num_ooms_;
      NotifyEvent(AllocatorEventKind::kOom, nullptr, bytes);
      mu_.Unlock();  // OomError reads the slab BFC's stats, whose lock comes before ours
      // What the block would have cost: whole granules, or with tail sharing its 256-byte units.
      const uint64_t need = can_share                           ? rounded
                            : count > UINT64_MAX / granularity_ ? UINT64_MAX
                                                                : count * granularity_;
      return OomError(bytes, need, r.status().message());
    }
    range = *std::move(r);
  }
  return FinishLargeLocked(std::move(range), bytes, slot, wait_for);
}

// Inline in both callers: a call here cost the large path ~2 %.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline absl::StatusOr<void*> VmmAllocator::FinishLargeLocked(
    std::unique_ptr<Range>&& range, uint64_t bytes, int slot, uint64_t* wait_for) {
  // A cached range (taken above, or as a shared-layout block's whole granules) brings the
  // streams that used it. Granules from the pool and open parts of shared granules are out of
  // every stream's use: the unmaps that freed them waited.
  *wait_for = range->streams;
  range->requested = bytes;
  range->streams = SlotBit(slot);
  if (range->head == kNoGranule && range->tail == kNoGranule) {
    range->user_ptr = range->ptr;
    range->footprint = range->granules.size() * granularity_;
  } else {
    AddUnderLock(shared_blocks_, 1);
  }
  void* p = range->user_ptr;
  const uint64_t footprint = range->footprint;
  block_granules_ += range->granules.size();
  NotePeakWorkingLocked();
  blocks_.Insert(p, std::move(range));
  const uint64_t large = AddUnderLock(large_in_use_, footprint);
  AddUnderLock(large_ops_, 1);
  ++num_allocs_;
  BFCUsageMirror::RaiseTo(slab_usage_.largest_alloc, bytes);
  NotePeak(large + small_in_use());
  NotifyEvent(AllocatorEventKind::kAlloc, p, bytes);
  mu_.Unlock();
  return p;
}

std::unique_ptr<VmmAllocator::Range> VmmAllocator::TakeCachedLocked(uint64_t count,
                                                                    uint64_t alignment,
                                                                    bool head_room,
                                                                    bool tail_room) {
  if (cached_granules_ == 0) return nullptr;
  auto take = [&](uint64_t n, bool need_room)
      // Runs under the caller's mu_; the analysis does not follow lambdas.
      ABSL_NO_THREAD_SAFETY_ANALYSIS -> std::unique_ptr<Range> {
    for (Range* r = cache_.First(n); r != nullptr; r = r->cache_next) {
      if ((reinterpret_cast<uintptr_t>(r->ptr) & (alignment - 1)) != 0) continue;  // a power of 2
      if ((need_room || tail_room) && CapacityOf(*r) < count + (tail_room ? 1 : 0)) continue;
      if (head_room && static_cast<char*>(r->ptr) - static_cast<char*>(r->reserved) <
                           static_cast<ptrdiff_t>(granularity_)) {
        continue;
      }
      return CacheTakeLocked(r, n);
    }
    return nullptr;
  };
  // A cached range resized to `count` granules: its kept tail dropped, then its own tail unmapped
  // (larger) or the missing granules mapped at its end (smaller). When that fails its granules
  // go back to the pool and the caller maps afresh.
  auto reshape = [&](std::unique_ptr<Range> r)
                     ABSL_NO_THREAD_SAFETY_ANALYSIS -> std::unique_ptr<Range> {  // under mu_
    absl::Status s = DropKeptTailLocked(r.get());
    if (s.ok()) {
      s = r->granules.size() >= count ? ShrinkRangeLocked(r.get(), count)
                                      : GrowRangeLocked(r.get(), count);
    }
    if (s.ok()) {
      ++cache_hits_;
      return r;
    }
    UnmapRangeLocked(std::move(r)).IgnoreError();
    return nullptr;
  };
  // One search serves every step below: takes that fail change nothing, and a successful one
  // returns.
  const uint64_t lb = cache_.AtLeast(count);  // 0: none
  const bool same = lb == count;
  // 1. The same size: no mapping call at all.
  if (same) {
    if (auto r = take(lb, false)) {
      ++cache_hits_;
      return r;
    }
  }
  // 2. A larger one (less than twice): unmap its tail, cheaper than mapping afresh.
  if (const uint64_t n = same ? cache_.AtLeast(count + 1) : lb; n != 0 && n < 2 * count) {
    if (auto r = take(n, false)) return reshape(std::move(r));
  }
  // 3. A smaller one (more than half) with virtual room: map the missing granules at its end.
  if (const uint64_t n = cache_.Below(count); n != 0 && 2 * n > count) {
    if (auto r = take(n, true)) return reshape(std::move(r));
  }
  // 4. Growth near the peak: the cache would have to give way to this block anyway (it is over
  // its cap once the block is counted), so reshape a cached range of any size (the smallest
  // larger one, shrunk; else the largest, grown) rather than unmapping one and mapping the
  // block from the pool: fewer map calls.
  if (options_.allow_growth && !cache_.empty() && cached_granules_ > CacheCapLocked(count)) {
    if (lb != 0) {
      if (auto r = take(lb, false)) return reshape(std::move(r));
    } else if (auto r = take(cache_.Largest(), true)) {
      return reshape(std::move(r));
    }
  }
  return nullptr;
}

absl::Status VmmAllocator::FreeLarge(void* ptr, bool* found) {
  FutexMutexLock l(&mu_);
  std::unique_ptr<Range> range = blocks_.Take(ptr);
  *found = range != nullptr;
  if (!*found) return absl::OkStatus();
  const uint64_t count = range->granules.size();
  block_granules_ -= count;
  AddUnderLock(large_in_use_, 0 - range->footprint);
  AddUnderLock(large_ops_, 1);
  ++num_frees_;
  NotifyEvent(AllocatorEventKind::kFree, ptr, range->footprint);
  const bool shared = range->head != kNoGranule || range->tail != kNoGranule;
  if (shared) AddUnderLock(shared_blocks_, 0 - uint64_t{1});
  // Earlier deferred frees whose streams have finished since.
  if (!pending_.empty()) VGPU_RETURN_IF_ERROR(ReapPendingLocked(/*wait=*/false));
  void* const range_ptr = range->ptr;
  bool cached = false;
  // A free that unmaps (shared views; a range over the cache's cap) while the block's streams
  // may still use it is deferred behind events instead of waiting for them here.
  const bool unmaps = shared || count == 0 || count > CacheCapLocked(0, count);
  if (!unmaps || !DeferFreeLocked(&range)) {
    VGPU_RETURN_IF_ERROR(RetireLocked(std::move(range), &cached));
  }
  if (!options_.allow_growth) return absl::OkStatus();
  VGPU_RETURN_IF_ERROR(EpochGiveBackLocked());
  if (!IdleLocked()) return absl::OkStatus();
  l.Release();
  return GiveBackIfIdle(cached ? range_ptr : nullptr, cached ? count : 0);
}

// Inline in FreeLarge (and the deferred frees' reaping): a call per free cost ~1 %.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline absl::Status VmmAllocator::RetireLocked(
    std::unique_ptr<Range> range, bool* cached) {
  if (range->head != kNoGranule || range->tail != kNoGranule) {
    // Its head and tail go back to their neighbours or the pool; its own granules, still
    // mapped, are cached like any range (with room around them for a head and a tail).
    VGPU_RETURN_IF_ERROR(UnmapSharedViewsLocked(range.get()));
  }
  const uint64_t count = range->granules.size();
  const uint64_t kept = range->kept_tail != kNoGranule ? 1 : 0;
  // The cap once this range has left the working set (its granules are still mapped).
  const uint64_t cap = CacheCapLocked(0, count + kept);
  *cached = count > 0 && count <= cap;
  if (!*cached) return UnmapRangeLocked(std::move(range));
  cached_granules_ += count + kept;
  MirrorMappedLocked();
  CachePutLocked(std::move(range));
  while (cached_granules_ > cap) VGPU_RETURN_IF_ERROR(EvictOneLocked());
  return absl::OkStatus();
}

bool VmmAllocator::DeferFreeSlowLocked(std::unique_ptr<Range>* range) {
  PendingFree pf;
  auto give_up = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {  // under mu_
    for (std::unique_ptr<Event>& e : pf.events) event_pool_.push_back(std::move(e));
    return false;
  };
  for (uint64_t m = (*range)->streams; m != 0; m &= m - 1) {
    const int slot = std::countr_zero(m);
    if (SlotStream(slot) == nullptr) continue;  // host-synchronous or released: nothing pending
    std::unique_ptr<Event> e;
    if (!event_pool_.empty()) {
      e = std::move(event_pool_.back());
      event_pool_.pop_back();
    } else if (absl::StatusOr<std::unique_ptr<Event>> made = executor_->CreateEvent(); made.ok()) {
      e = *std::move(made);
    } else {
      return give_up();  // the caller waits on the host instead
    }
    absl::StatusOr<bool> recorded = RecordSlotEvent(slot, e.get());
    if (recorded.ok() && *recorded) {
      pf.events.push_back(std::move(e));
      pf.slots |= SlotBit(slot);
      continue;
    }
    event_pool_.push_back(std::move(e));
    if (!recorded.ok()) return give_up();
    // Released meanwhile: ReleaseStream waited for its work.
  }
  if (pf.events.empty()) return false;
  (*range)->streams = 0;  // once the events complete, no stream uses it
  pending_granules_ += (*range)->granules.size();
  pf.range = std::move(*range);
  pending_.push_back(std::move(pf));
  ++deferred_frees_;
  return true;
}

std::unique_ptr<VmmAllocator::Range> VmmAllocator::TakePendingLocked(uint64_t footprint, int slot) {
  // Newest first (the likeliest to match a loop), a few entries at most.
  int looked = 0;
  for (auto it = pending_.end(); it != pending_.begin() && looked < 8; ++looked) {
    --it;
    if (it->slots == SlotBit(slot) && it->range->footprint == footprint) return UnparkLocked(it);
  }
  return nullptr;
}

std::unique_ptr<VmmAllocator::Range> VmmAllocator::UnparkLocked(
    std::deque<PendingFree>::iterator it) {
  for (std::unique_ptr<Event>& e : it->events) event_pool_.push_back(std::move(e));
  std::unique_ptr<Range> range = std::move(it->range);
  pending_.erase(it);
  pending_granules_ -= range->granules.size();
  return range;
}

absl::Status VmmAllocator::ReapPendingLocked(bool wait) {
  absl::Status first;
  while (!pending_.empty()) {
    PendingFree& pf = pending_.front();
    for (const std::unique_ptr<Event>& e : pf.events) {
      if (wait) {
        // A failed stream's work is over too (its error is sticky): retire the block anyway.
        first.Update(e->Synchronize());
        continue;
      }
      absl::StatusOr<bool> done = e->Query();
      if (!done.ok()) return done.status();
      if (!*done) return absl::OkStatus();  // oldest first: the rest waits for it
    }
    bool cached = false;
    first.Update(RetireLocked(UnparkLocked(pending_.begin()), &cached));
  }
  return first;
}

absl::Status VmmAllocator::DoDeallocate(void* ptr) {
  if (ABSL_PREDICT_FALSE(quiet_parked_.load(std::memory_order_relaxed))) WakeQuietThread();
  // A pointer in the slab arena is a small block. Outside it, large blocks start on a granule,
  // except those whose head is a shared granule: for those our blocks are asked first, then
  // the slab BFC (slabs that found no arena slot). Each lookup that misses costs a lock and a
  // cold probe, so the address decides the order.
  const bool in_arena = InSlabArena(ptr);
  const bool aligned = GranuleOffset(reinterpret_cast<uintptr_t>(ptr)) == 0;
  bool large_asked = false;
  if (!in_arena && (aligned || shared_blocks_.load(std::memory_order_relaxed) > 0)) {
    bool found = false;
    absl::Status s = FreeLarge(ptr, &found);
    if (found) return s;
    large_asked = true;
  }
  bool live = false;
  absl::Status s = slabs_->DeallocateIfLive(ptr, &live);
  if (!live) {
    if (!in_arena && !large_asked) {
      bool found = false;
      absl::Status f = FreeLarge(ptr, &found);
      if (found) return f;
    }
    return NotLiveError(ptr);
  }
  // The last small block gone with no large one live: idle, whichever path freed last. Two
  // relaxed loads on the hot path; GiveBackIfIdle re-checks under the locks.
  if (s.ok() && options_.allow_growth && small_in_use() == 0 &&
      large_in_use_.load(std::memory_order_relaxed) == 0) {
    return GiveBackIfIdle(nullptr, 0);
  }
  return s;
}

// Out of line: the message's string building would give every free a large frame.
absl::Status VmmAllocator::NotLiveError(const void* ptr) const {
  return absl::InvalidArgumentError(absl::StrCat(
      name(), ": Deallocate(", P(ptr),
      ") is not a live allocation of this allocator (double free or foreign pointer)"));
}

bool VmmAllocator::IdleLocked() const { return blocks_.empty() && small_in_use() == 0; }

absl::Status VmmAllocator::GiveBackIfIdle(const void* last_range, uint64_t last_granules) {
  // An idle allocator keeps a reserve of keep_granules_ mapped for the next step, the memory
  // of the block freed last first (its cached range, or one empty slab), then other cached
  // ranges. Without it an alloc/free loop of one buffer would create, map, unmap and release
  // device memory every iteration.
  const uint64_t slab_granules = slab_bytes_ / granularity_;
  const uint64_t keep_slab = last_granules + slab_granules <= keep_granules_ ? slab_bytes_ : 0;
  // Empty slabs first: the slab BFC's lock comes before ours (its regions come back through
  // SlabSubAllocator::Free, which takes ours). Only wholly free slabs go, so a block another
  // thread allocated meanwhile is safe.
  if (slabs_ != nullptr) VGPU_RETURN_IF_ERROR(slabs_->ReleaseEmptyRegions(keep_slab).status());
  FutexMutexLock l(&mu_);
  if (!IdleLocked()) return absl::OkStatus();  // busy again: the epoch rule applies
  // Memory goes back to the device now: deferred frees wait for their streams.
  const uint64_t cache_keep = keep_granules_ > slab_granules_ ? keep_granules_ - slab_granules_ : 0;
  return GiveBackBeyondReserveLocked(cache_keep, last_range, /*wait_for_streams=*/true);
}

absl::Status VmmAllocator::GiveBackBeyondReserveLocked(uint64_t cache_keep, const void* spare,
                                                       bool wait_for_streams) {
  VGPU_RETURN_IF_ERROR(ReapPendingLocked(wait_for_streams));
  while (cached_granules_ > cache_keep) VGPU_RETURN_IF_ERROR(EvictOneLocked(spare));
  VGPU_RETURN_IF_ERROR(GiveBackLocked(0));
  epoch_frees_ = 0;
  epoch_start_ns_ = 0;
  free_low_water_ = 0;
  return absl::OkStatus();
}

uint64_t VmmAllocator::CacheCapLocked(uint64_t incoming, uint64_t leaving, bool floor) const {
  if (!options_.allow_growth || options_.cache_peak_headroom_divisor == 0) {
    return cache_limit_granules_;
  }
  // Growth on: the cache plus the working set (every mapped granule not cached: blocks, the
  // granules they share, slabs, deferred frees) stay within 1 + 1/divisor of the largest working
  // set so far, so the cache is large between peaks and gives way near one. (Counting only
  // blocks' own granules let shared tails and slabs grow past the cap: 1.23x peak live on a
  // PyTorch snapshot.)
  const uint64_t target = cache_cap_target_;
  const uint64_t working = WorkingGranulesLocked() + incoming - leaving;
  const uint64_t room = target > working ? target - working : 0;
  return std::min(cache_limit_granules_, floor ? std::max(keep_granules_, room) : room);
}

absl::Status VmmAllocator::EnsureFreeGranulesSlowLocked(uint64_t count) {
  // Growth: a cache over its headroom gives its granules to this request before new ones are
  // made. The cap's floor (the reserve, keep_granules_) is not counted here: it is what an idle
  // allocator keeps, and holding it cached while new granules are created put the reserve on
  // top of every peak (limit/64: 1.1-1.8 % of peak live at 2x; docs/vmm.md, "The cache gives
  // way to new granules").
  while (options_.allow_growth && free_granules_.size() < count && cached_granules_ > 0 &&
         cached_granules_ > CacheCapLocked(count, 0, /*floor=*/false)) {
    VGPU_RETURN_IF_ERROR(EvictOneLocked());
  }
  if (mapped_granules_ + count > limit_granules_ && cached_granules_ > 0) {
    VGPU_RETURN_IF_ERROR(EvictGranulesLocked(mapped_granules_ + count - limit_granules_));
  }
  if (mapped_granules_ + count > limit_granules_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the limit allows ", limit_granules_ - mapped_granules_, " more mapped granules"));
  }
  while (free_granules_.size() < count) {
    if (!options_.allow_growth) {
      return absl::InternalError(absl::StrCat(name(), ": pool has ", free_granules_.size(),
                                              " free granules below the limit; expected ",
                                              limit_granules_ - mapped_granules_));
    }
    // One physical allocation per granule: a driver maps an allocation from its start only
    // (Executor::Map), and a granule may later be mapped alone, anywhere.
    absl::StatusOr<size_t> made = CreateGranulesLocked(count - free_granules_.size());
    if (!made.ok()) {
      if (cached_granules_ > 0) {
        VGPU_RETURN_IF_ERROR(EvictOneLocked());
        continue;
      }
      return absl::ResourceExhaustedError(
          absl::StrCat("the device refused a new granule: ", made.status().message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<size_t> VmmAllocator::CreateGranulesLocked(size_t n) {
  HandlesFor(n);
  VGPU_ASSIGN_OR_RETURN(size_t made,
                        executor_->CreatePhysicalMemories(granularity_, n, handles_.data()));
  AddGranulesLocked(handles_.data(), made);
  return made;
}

void VmmAllocator::AddGranulesLocked(const PhysicalMemoryHandle* handles, size_t n) {
  // A batch at a time: with growth a block's granules are created in the operation that needs
  // them, so this loop is on the allocation path (one pass, no call per granule).
  size_t pool = free_granules_.size();
  free_granules_.resize(pool + n);
  uint32_t* to = free_granules_.data() + pool;
  size_t i = 0;
  for (; i < n && !free_slots_.empty(); ++i) {  // slots that give-back emptied first
    const uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    granules_[slot].handle = handles[i];
    to[i] = slot;
  }
  if (i < n) {
    const size_t first = granules_.size();
    granules_.resize(first + (n - i));
    Granule* g = granules_.data() + first;
    for (size_t k = 0; i < n; ++i, ++k) {
      g[k].handle = handles[i];
      to[i] = static_cast<uint32_t>(first + k);
    }
  }
  created_granules_ += n;
  epoch_created_ += n;
  granule_creates_ += n;
}

void VmmAllocator::OpenParts::Init(uint64_t granularity, std::vector<SharedGranule>* granules) {
  g_ = granules;
  // At most 8192 buckets: one per 256 bytes for a 2 MiB granule.
  shift_ = kExactShift;
  while ((granularity >> shift_) > 8192) ++shift_;
  // Parts are multiples of 256 bytes below one granule: with 256-byte buckets each bucket
  // holds one size.
  exact_ = shift_ == kExactShift && granularity % (uint64_t{1} << kExactShift) == 0;
  const size_t n = std::max<size_t>(1, granularity >> shift_);
  last_ = n - 1;
  heads_.assign(n, kNoGranule);
  nonempty_ = BucketBitmap();
  nonempty_.Resize(n);
}

void VmmAllocator::OpenParts::Insert(uint64_t bytes, uint32_t granule) {
  const size_t b = BucketOf(bytes);
  SharedGranule& sg = (*g_)[granule];
  sg.open_bytes = bytes;
  sg.prev = kNoGranule;
  sg.next = heads_[b];
  if (heads_[b] != kNoGranule) (*g_)[heads_[b]].prev = granule;
  heads_[b] = granule;
  nonempty_.Set(b);
  ++size_;
}

void VmmAllocator::OpenParts::Erase(uint32_t granule) {
  SharedGranule& sg = (*g_)[granule];
  const size_t b = BucketOf(sg.open_bytes);
  if (sg.prev != kNoGranule) {
    (*g_)[sg.prev].next = sg.next;
  } else {
    heads_[b] = sg.next;
  }
  if (sg.next != kNoGranule) (*g_)[sg.next].prev = sg.prev;
  sg.next = sg.prev = kNoGranule;
  --size_;
  if (heads_[b] == kNoGranule) nonempty_.Clear(b);
}

bool VmmAllocator::OpenParts::FindAtMostInBuckets(uint64_t x, uint64_t* bytes,
                                                  uint32_t* granule) const {
  for (int64_t b = nonempty_.AtMost(static_cast<int64_t>(BucketOf(x))); b >= 0;
       b = nonempty_.Prev(b)) {
    bool found = false;
    for (uint32_t i = heads_[b]; i != kNoGranule; i = (*g_)[i].next) {
      const uint64_t n = (*g_)[i].open_bytes;
      if (n <= x && (!found || n > *bytes)) {
        *bytes = n;
        *granule = i;
        found = true;
      }
    }
    if (found) return true;
  }
  return false;
}

bool VmmAllocator::OpenParts::FindAtLeastInBuckets(uint64_t x, uint64_t* bytes,
                                                   uint32_t* granule) const {
  if ((x >> shift_) >= heads_.size()) return false;
  for (int64_t b = nonempty_.AtLeast(static_cast<int64_t>(x >> shift_)); b >= 0;
       b = nonempty_.Next(b)) {
    bool found = false;
    for (uint32_t i = heads_[b]; i != kNoGranule; i = (*g_)[i].next) {
      const uint64_t n = (*g_)[i].open_bytes;
      if (n >= x && (!found || n < *bytes)) {
        *bytes = n;
        *granule = i;
        found = true;
      }
    }
    if (found) return true;
  }
  return false;
}

absl::StatusOr<std::unique_ptr<VmmAllocator::Range>> VmmAllocator::MapSharedRangeLocked(
    uint64_t bytes, bool fewest_granules, uint64_t max_gap) {
  const uint64_t g = granularity_;
  // Head: the largest open upper part that the block covers whole.
  uint64_t h = 0;
  uint32_t head_granule = kNoGranule;
  if (!open_upper_.FindAtMost(bytes, &h, &head_granule)) h = 0;
  uint64_t t = GranuleOffset(bytes - h);
  // Tail: the smallest open lower part that holds it, else a fresh granule.
  uint64_t tail_free = 0;
  uint32_t tail_granule = kNoGranule;
  bool fresh_tail = t > 0 && !open_lower_.FindAtLeast(t, &tail_free, &tail_granule);
  // That leaves a gap (the tail's part beyond the tail) or costs a fresh granule. Two other
  // layouts may leave less: the block's last bytes past whole granules (r) at the end of the
  // smallest open upper part that holds them (a head shorter than the part), or at the start of
  // the smallest open lower part that holds them (no head). The least gap wins, a fresh granule
  // counting as a quarter granule of gap: without the other two, blocks of one to a few
  // granules left a third of a granule of gap each (random sizes of 1-2 MiB needed 1.33x their
  // peak; docs/vmm.md).
  uint64_t gap = t == 0 ? 0 : fresh_tail ? g / 4 : tail_free - t;
  if (gap > 0 && !fewest_granules) {
    const uint64_t r = GranuleOffset(bytes);
    uint64_t part = 0;
    uint32_t granule = kNoGranule;
    if (open_upper_.FindAtLeast(r, &part, &granule, r + gap)) {
      gap = part - r;
      h = r;
      head_granule = granule;
      t = 0;
      fresh_tail = false;
    }
    if (gap > 0 && open_lower_.FindAtLeast(r, &part, &granule, r + gap)) {
      h = 0;
      t = r;
      tail_free = part;
      tail_granule = granule;
      fresh_tail = false;
    }
  }
  // Inner block: a block below one granule that would take a fresh granule for its tail takes
  // the start of the smallest gap between two live blocks that holds it instead (a granule
  // holds at most one inner block), mapped alone: a gap is memory no head or tail can use until
  // a block beside it is freed. Not the start of an open upper part larger than the block, the
  // rest left open for a head: PyTorch's and RMM's recorded workloads needed 0.005-0.01x more of
  // their peak (their sizes recur, and heads that covered those parts whole no longer fit);
  // not in place of the layouts above that leave a gap: random sizes needed 0.02-0.04x more
  // (docs/vmm.md, "Inner blocks").
  bool inner = false;
  if (fresh_tail && bytes < g && options_.inner_blocks) {
    uint64_t part = 0;
    uint32_t granule = kNoGranule;
    if (open_mid_.FindAtLeast(bytes, &part, &granule)) {
      inner = true;
      // The view is the whole granule; h says where the block starts in it.
      h = g - shared_[granule].lower_end;
      head_granule = granule;
      t = 0;
      fresh_tail = false;
      gap = 0;
    }
  }
  // The last try before an OOM: a head shorter than the block's last bytes past whole granules
  // (r) leaves a fresh tail granule to find, where r at the end of any open upper part that
  // holds it, whatever the gap, needs one granule fewer. That happens to blocks under a granule
  // whose open parts are all larger than they are (no head above). Above, the gap bound keeps
  // a part from going to waste while granules are there; here there are none (KV caches of
  // 1-2 MiB failed beside open parts of 1.8 MiB).
  if (fewest_granules && fresh_tail && h < GranuleOffset(bytes)) {
    const uint64_t r = GranuleOffset(bytes);
    uint64_t part = 0;
    uint32_t granule = kNoGranule;
    if (open_upper_.FindAtLeast(r, &part, &granule)) {
      h = r;
      head_granule = granule;
      t = 0;
      fresh_tail = false;
      gap = part - r;
    }
  }
  // Near the limit (less than an eighth of it left to map, counting the cache), a gap still
  // left is worth a search: each open lower part against the open upper part that leaves the
  // least gap with it (a head of h takes the tail (bytes - h) mod g). Two lookups per lower
  // part size, at most kPairLowerSizes of them; never at 2x peak live, so the timed replays
  // pay nothing (docs/vmm.md, "Paired heads and tails near the limit").
  if (gap > 0 && !fresh_tail && !fewest_granules && open_lower_.size() > 0 &&
      open_upper_.size() > 0 && NearLimitLocked()) {
    const uint64_t r = GranuleOffset(bytes);
    auto take = [&](uint64_t head, uint32_t head_at, uint64_t tail, uint64_t lower,
                    uint32_t lower_at) {
      gap = lower - tail;
      h = head;
      head_granule = head_at;
      t = tail;
      tail_free = lower;
      tail_granule = lower_at;
      fresh_tail = false;
    };
    uint64_t l = 0;
    uint32_t lower_at = kNoGranule;
    for (uint64_t x = 256, n = 0;
         gap > 0 && n < kPairLowerSizes && x < g && open_lower_.FindAtLeast(x, &l, &lower_at);
         x = l + 256, ++n) {
      uint64_t part = 0;
      uint32_t at = kNoGranule;
      // A head shorter than r: the tail is r - head, at most l.
      if (r > 256 && open_upper_.FindAtLeast(l < r ? r - l : 256, &part, &at, r) &&
          l - (r - part) < gap) {
        take(part, at, r - part, l, lower_at);
      }
      // A head longer than r (the block gives up one whole granule for it): the tail is
      // r + g - head, at most l.
      if (bytes >= g && open_upper_.FindAtLeast(std::max(r + 256, r + g - l), &part, &at, g) &&
          l - (r + g - part) < gap) {
        take(part, at, r + g - part, l, lower_at);
      }
    }
  }
  if (max_gap != UINT64_MAX && (fresh_tail || gap >= max_gap)) {
    return absl::NotFoundError("no open part holds the block closely");
  }
  const uint64_t k = inner ? 0 : GranulesIn(bytes - h);
  // The whole granules: a cached range of k with room for the head and tail, or fresh ones.
  std::unique_ptr<Range> range = k > 0 ? TakeCachedLocked(k, g, h > 0, t > 0) : nullptr;
  const bool from_cache = range != nullptr;
  if (from_cache) ++cache_hits_;
  // A kept tail granule (the same size freed before) is this block's fresh tail, mapped.
  const bool kept_tail = from_cache && range->kept_tail != kNoGranule && fresh_tail;
  if (from_cache && !kept_tail && range->kept_tail != kNoGranule) {
    absl::Status dropped = DropKeptTailLocked(range.get());
    if (!dropped.ok()) {
      UnmapRangeLocked(std::move(range)).IgnoreError();
      return dropped;
    }
  }
  absl::Status ensured =
      EnsureFreeGranulesLocked((from_cache ? 0 : k) + (fresh_tail && !kept_tail ? 1 : 0));
  if (!ensured.ok()) {
    if (from_cache) UnmapRangeLocked(std::move(range)).IgnoreError();
    return ensured;
  }
  char* base;
  if (from_cache) {
    base = static_cast<char*>(range->ptr) - (h > 0 ? g : 0);
  } else {
    // Room for a head before and a tail after, so the range can be cached and reused by
    // another shared-layout block.
    VGPU_ASSIGN_OR_RETURN(range, ReservedRangeLocked(k + 2));
    base = static_cast<char*>(range->ptr) - (h > 0 ? g : 0);
  }
  auto give_up = [&](absl::Status s) ABSL_NO_THREAD_SAFETY_ANALYSIS {  // under mu_
    UnmapRangeLocked(std::move(range)).IgnoreError();
    return s;
  };
  char* tail_va = static_cast<char*>(range->ptr) + k * g;
  if (!from_cache) {
    // Head view, the k granules and the tail are contiguous: one MapAll (one cuMemSetAccess
    // on a card, the costly call) for all of them. The pool's top k are the body and the one
    // below them a fresh tail.
    size_t n = 0;
    HandlesFor(k + 2);
    if (h > 0) handles_[n++] = granules_[head_granule].handle;
    const uint64_t from_pool = k + (fresh_tail ? 1 : 0);
    PoolTopHandlesLocked(from_pool, &handles_[n]);
    n += from_pool;
    if (t > 0 && !fresh_tail) handles_[n++] = granules_[tail_granule].handle;
    absl::Status s = executor_->MapAll(base, handles_.data(), n);
    if (!s.ok()) return give_up(s);
    ++map_calls_;
    AdoptPoolGranulesLocked(range.get(), k);
  } else {
    if (h > 0) {
      absl::Status s = executor_->Map(base, g, granules_[head_granule].handle, 0);
      if (!s.ok()) return give_up(s);
      ++map_calls_;
    }
    if (t > 0 && !kept_tail) {
      const uint32_t slot = fresh_tail ? free_granules_.back() : tail_granule;
      absl::Status s = executor_->Map(tail_va, g, granules_[slot].handle, 0);
      if (!s.ok()) {
        if (h > 0) executor_->Unmap(base, g).IgnoreError();
        return give_up(s);
      }
      ++map_calls_;
    }
  }
  // Everything is mapped: take the head and tail.
  if (inner) {
    SharedGranule& sg = shared_[head_granule];
    UnofferLocked(head_granule);
    sg.mid_live = true;
    sg.mid_start = g - h;
    sg.mid_end = sg.mid_start + bytes;
    if (!sg.upper_live) sg.split = LowTop(sg);
    OfferLocked(head_granule);
    ++double_mapped_;
    range->head = head_granule;
    range->head_bytes = h;
    range->inner = true;
    ++inner_blocks_;
    ++inner_blocks_made_;
  } else if (h > 0) {
    range->head = head_granule;
    range->head_bytes = h;
    SharedGranule& sg = shared_[range->head];
    open_upper_.Erase(head_granule);
    sg.split = g - h;  // all of the open part, or its end
    sg.upper_live = true;
    ++double_mapped_;
    // A gap left below the head, or the free start below an inner block whose lower block is
    // gone, is offered (OfferOf's cases, tested here first: the call costs the common layouts
    // 0.5-1 % of their instructions).
    if (!sg.lower_live || (!sg.mid_live && sg.split - sg.lower_end >= min_inner_gap_)) {
      OfferLocked(head_granule);
    }
  }
  if (kept_tail) {
    const uint32_t slot = range->kept_tail;
    range->kept_tail = kNoGranule;
    if (shared_.size() <= slot) shared_.resize(granules_.capacity());  // once per growth
    shared_[slot] = SharedGranule{t, true, true, false, 0, kNoGranule, kNoGranule, t};
    ++shared_count_;
    open_upper_.Insert(g - t, slot);
    range->tail = slot;
  } else if (fresh_tail) {
    const uint32_t slot = free_granules_.back();
    free_granules_.pop_back();
    const uint64_t split = t;  // a multiple of 256: the next block's head starts there
    if (shared_.size() <= slot) shared_.resize(granules_.capacity());  // once per growth
    shared_[slot] = SharedGranule{split, true, true, false, 0, kNoGranule, kNoGranule, split};
    ++shared_count_;
    open_upper_.Insert(g - split, slot);
    range->tail = slot;
    ++mapped_granules_;
    ++regions_mapped_;
    free_low_water_ = std::min<uint64_t>(free_low_water_, free_granules_.size());
    peak_mapped_ = std::max(peak_mapped_, mapped_granules_);
    MirrorMappedLocked();
    NotifyEvent(AllocatorEventKind::kMap, tail_va, g);
  } else if (t > 0) {
    range->tail = tail_granule;
    SharedGranule& sg = shared_[tail_granule];
    open_lower_.Erase(tail_granule);
    sg.lower_live = true;
    sg.lower_end = t;
    ++double_mapped_;
    if (!sg.mid_live && sg.split - t >= min_inner_gap_) {
      OfferLocked(tail_granule);  // the gap up to the head
    }
  }
  range->user_ptr = static_cast<char*>(range->ptr) - h;
  range->footprint = bytes;
  return range;
}

void VmmAllocator::ReleaseSharedLocked(uint32_t granule) {
  SharedGranule& sg = shared_[granule];
  // Wherever it is still offered: its free upper part, or its free lower part.
  if (OpenParts* parts = OpenPartsOf(OfferOf(sg))) parts->Erase(granule);
  sg = SharedGranule{};
  --shared_count_;
  free_granules_.push_back(granule);
  --mapped_granules_;
  ++regions_unmapped_;
  MirrorMappedLocked();
}

// Inline in RetireLocked, its one caller.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline absl::Status VmmAllocator::UnmapSharedViewsLocked(
    Range* range) {
  // The views are unmapped and the parts offered to other blocks: the block's streams must be
  // done with it first (so a shared-layout block's free waits for its streams on the host;
  // share_tail_granules = false keeps frees fully asynchronous).
  if (range->streams != 0) {
    VGPU_RETURN_IF_ERROR(SynchronizeSlots(range->streams));
    range->streams = 0;
  }
  const uint64_t g = granularity_;
  char* ptr = static_cast<char*>(range->ptr);
  absl::Status status;
  if (range->head != kNoGranule) {
    status.Update(executor_->Unmap(ptr - g, g));
    ++unmap_calls_;
    SharedGranule& sg = shared_[range->head];
    if (range->inner) {
      LeaveInnerLocked(range->head, ptr - g);
    } else if (sg.lower_live || sg.mid_live) {
      // Offered as a gap, or as a free start while only an inner block was below.
      UnofferLocked(range->head);
      sg.upper_live = false;
      --double_mapped_;
      // The gap a shorter tail or head left joins the free part.
      sg.split = LowTop(sg);
      open_upper_.Insert(g - sg.split, range->head);  // its free end, now a head's
    } else {
      ReleaseSharedLocked(range->head);  // its free lower part was offered
      NotifyEvent(AllocatorEventKind::kUnmap, ptr - g, g);
    }
  }
  if (range->tail != kNoGranule) {
    SharedGranule& sg = shared_[range->tail];
    if (sg.upper_live || sg.mid_live) {
      status.Update(executor_->Unmap(ptr + range->granules.size() * g, g));
      ++unmap_calls_;
      if (sg.upper_live) UnofferLocked(range->tail);  // a gap up to the head
      sg.lower_live = false;
      sg.lower_end = 0;
      --double_mapped_;
      // An inner block alone keeps the granule offered as it was (its free end).
      if (sg.upper_live) open_lower_.Insert(OfferBytes(sg, kOfferLower), range->tail);
    } else {
      // Nobody else uses it: the range keeps it mapped (a hot size then maps nothing).
      open_upper_.Erase(range->tail);
      sg = SharedGranule{};
      --shared_count_;
      range->kept_tail = range->tail;
    }
  }
  range->head = range->tail = kNoGranule;
  range->head_bytes = 0;
  range->inner = false;
  range->user_ptr = range->ptr;
  return status;
}

void VmmAllocator::LeaveInnerLocked(uint32_t i, const void* va) {
  --inner_blocks_;
  SharedGranule& sg = shared_[i];
  if (!sg.lower_live && !sg.upper_live) {
    ReleaseSharedLocked(i);  // offered as its free end
    NotifyEvent(AllocatorEventKind::kUnmap, va, granularity_);
    return;
  }
  UnofferLocked(i);
  sg.mid_live = false;
  sg.mid_start = sg.mid_end = 0;
  --double_mapped_;
  // With the upper part free, the free part runs from the lower block's end again; with both
  // live, the inner block's place joins the gap between them, offered to the next one.
  if (!sg.upper_live) sg.split = LowTop(sg);
  OfferLocked(i);
}

absl::StatusOr<std::unique_ptr<VmmAllocator::Range>> VmmAllocator::MapRangeLocked(
    uint64_t count, uint64_t alignment) {
  VGPU_RETURN_IF_ERROR(EnsureFreeGranulesLocked(count));
  const uint64_t g = granularity_;
  std::unique_ptr<Range> range;
  if (alignment <= g) {
    // Virtual space is cheap: reserve room to grow to the next power of two, so a cached range
    // can later serve a somewhat larger request by mapping a few more granules at its end.
    // (Plus a granule before and after: room for a shared head and tail when the range is
    // cached and reused by a block with tail sharing.)
    VGPU_ASSIGN_OR_RETURN(range, ReservedRangeLocked(std::bit_ceil(count) + 2));
  } else {
    range = NewRangeLocked();
    range->reserved_bytes = count * g + alignment;
    absl::StatusOr<void*> va = executor_->ReserveAddressRange(range->reserved_bytes);
    if (!va.ok()) {
      RecycleRangeLocked(std::move(range));
      return va.status();
    }
    range->reserved = *va;
    range->ptr = reinterpret_cast<void*>(AlignUpPow2(reinterpret_cast<uint64_t>(*va), alignment));
  }
  range->granules.reserve(count);
  absl::Status s = GrowRangeLocked(range.get(), count);
  if (!s.ok()) {
    ReleaseReservationLocked(std::move(range)).IgnoreError();  // nothing was mapped
    return s;
  }
  return range;
}

absl::StatusOr<std::unique_ptr<VmmAllocator::Range>> VmmAllocator::MapArenaSlabLocked(
    uint64_t count) {
  if (slab_arena_bytes_ == 0 || count * granularity_ > slab_bytes_) return nullptr;
  const bool reuse = !free_arena_slots_.empty();
  if (!reuse && arena_slots_used_ == arena_slots_) return nullptr;
  const uint32_t slot = reuse ? free_arena_slots_.back() : arena_slots_used_;
  std::unique_ptr<Range> range = NewRangeLocked();
  range->ptr = slab_arena_ + uint64_t{slot} * slab_bytes_;
  range->reserved = range->ptr;  // the slot is its reservation (not freed on its own)
  range->reserved_bytes = slab_bytes_;
  range->arena_slot = slot;
  if (absl::Status s = GrowRangeLocked(range.get(), count); !s.ok()) {
    RecycleRangeLocked(std::move(range));
    return s;
  }
  if (reuse) {
    free_arena_slots_.pop_back();
  } else {
    ++arena_slots_used_;
  }
  return range;
}

uint32_t VmmAllocator::SlabGranuleAtLocked(const void* addr) const {
  const uint64_t a = reinterpret_cast<uint64_t>(addr);
  auto granule_in = [&](const Range& r) -> uint32_t {
    const uint64_t base = reinterpret_cast<uint64_t>(r.ptr);
    if (a < base || GranuleOffset(a) != 0 || GranulesIn(a - base) >= r.granules.size()) {
      return kNoGranule;
    }
    return r.granules[GranulesIn(a - base)];
  };
  if (InSlabArena(addr)) {
    const uint64_t slot = (a - reinterpret_cast<uint64_t>(slab_arena_)) / slab_bytes_;
    auto it = slab_ranges_.find(slab_arena_ + slot * slab_bytes_);
    return it == slab_ranges_.end() ? kNoGranule : granule_in(*it->second);
  }
  for (const auto& [p, r] : slab_ranges_) {  // slabs outside the arena: rare
    if (const uint32_t i = granule_in(*r); i != kNoGranule) return i;
  }
  return kNoGranule;
}

uint64_t VmmAllocator::CapacityOf(const Range& range) const {
  uint64_t off = reinterpret_cast<uint64_t>(range.ptr) - reinterpret_cast<uint64_t>(range.reserved);
  return GranulesIn(range.reserved_bytes - off);
}

absl::Status VmmAllocator::GrowRangeLocked(Range* range, uint64_t count) {
  const uint64_t g = granularity_;
  const uint64_t old = range->granules.size();
  if (count <= old) return absl::OkStatus();
  VGPU_RETURN_IF_ERROR(EnsureFreeGranulesLocked(count - old));
  range->granules.reserve(count);
  char* base = static_cast<char*>(range->ptr);
  // Every granule is a physical allocation of its own (a driver maps whole allocations only,
  // Executor::Map), so each is a mapping of its own; MapAll maps them in one executor call
  // (on cuda one cuMemMap each and one cuMemSetAccess for the range, the costly part).
  const uint64_t n = count - old;
  HandlesFor(n);
  PoolTopHandlesLocked(n, handles_.data());
  VGPU_RETURN_IF_ERROR(executor_->MapAll(base + old * g, handles_.data(), n));
  ++map_calls_;
  AdoptPoolGranulesLocked(range, n);
  return absl::OkStatus();
}

void VmmAllocator::PoolTopHandlesLocked(uint64_t n, PhysicalMemoryHandle* out) const {
  const size_t top = free_granules_.size();
  for (uint64_t i = 0; i < n; ++i) out[i] = granules_[free_granules_[top - 1 - i]].handle;
}

void VmmAllocator::AdoptPoolGranulesLocked(Range* range, uint64_t n) {
  const uint64_t g = granularity_;
  char* at = static_cast<char*>(range->ptr) + range->granules.size() * g;
  // The pool's top n, last first (the order PoolTopHandlesLocked gave the mapping): one resize
  // and a reversed copy (per-element push_back/pop_back cost twice as much on wide blocks).
  const size_t own = range->granules.size(), top = free_granules_.size();
  range->granules.resize(own + n);
  std::reverse_copy(free_granules_.data() + (top - n), free_granules_.data() + top,
                    range->granules.data() + own);
  free_granules_.resize(top - n);
  mapped_granules_ += n;
  regions_mapped_ += n;
  free_low_water_ = std::min<uint64_t>(free_low_water_, free_granules_.size());
  peak_mapped_ = std::max(peak_mapped_, mapped_granules_);
  MirrorMappedLocked();
  NotifyEvent(AllocatorEventKind::kMap, at, n * g);
}

absl::Status VmmAllocator::ShrinkRangeSlowLocked(Range* range, uint64_t count) {
  const uint64_t g = granularity_;
  char* base = static_cast<char*>(range->ptr);
  const uint64_t old = range->granules.size();  // > count (ShrinkRangeLocked)
  // Unmapped memory must be out of every stream's use (on a GPU an access would fault): wait
  // for the streams that used the range. Granules in the pool are therefore always safe.
  if (range->streams != 0) VGPU_RETURN_IF_ERROR(SynchronizeSlots(range->streams));
  // Every granule is a whole mapping (GrowRangeLocked), so the tail goes in one call.
  VGPU_RETURN_IF_ERROR(executor_->Unmap(base + count * g, (old - count) * g));
  ++unmap_calls_;
  // From the end, so the pool (LIFO) hands them out again in their old order.
  const auto own_end = range->granules.end();
  free_granules_.insert(free_granules_.end(), std::make_reverse_iterator(own_end),
                        std::make_reverse_iterator(own_end - static_cast<ptrdiff_t>(old - count)));
  range->granules.resize(count);
  mapped_granules_ -= old - count;
  regions_unmapped_ += old - count;
  MirrorMappedLocked();
  NotifyEvent(AllocatorEventKind::kUnmap, base + count * g, (old - count) * g);
  return absl::OkStatus();
}

absl::Status VmmAllocator::DoRecordStream(void* ptr, int slot) {
  {
    // Large blocks by the pointer handed out (with tail sharing it need not be on a granule).
    FutexMutexLock l(&mu_);
    if (Range* b = blocks_.Find(ptr); b != nullptr) {
      b->streams |= SlotBit(slot);
      return absl::OkStatus();
    }
  }
  if (slot != 0) used_slots_.fetch_or(SlotBit(slot), std::memory_order_relaxed);
  absl::Status s =
      slabs_ != nullptr ? slabs_->RecordStreamForOwner(ptr, slot) : absl::InvalidArgumentError("");
  if (absl::IsInvalidArgument(s)) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": RecordStream of ", P(ptr),
                                                   ", which is not a live allocation here"));
  }
  return s;
}

absl::Status VmmAllocator::DropKeptTailSlowLocked(Range* range) {
  // Out of every stream's use before the unmap (ShrinkRangeLocked says why).
  if (range->streams != 0) VGPU_RETURN_IF_ERROR(SynchronizeSlots(range->streams));
  const uint64_t g = granularity_;
  char* va = static_cast<char*>(range->ptr) + range->granules.size() * g;
  const uint32_t slot = range->kept_tail;
  range->kept_tail = kNoGranule;
  absl::Status s = executor_->Unmap(va, g);
  ++unmap_calls_;
  free_granules_.push_back(slot);
  --mapped_granules_;
  ++regions_unmapped_;
  MirrorMappedLocked();
  NotifyEvent(AllocatorEventKind::kUnmap, va, g);
  return s;
}

absl::Status VmmAllocator::UnmapRangeLocked(std::unique_ptr<Range> range) {
  VGPU_RETURN_IF_ERROR(DropKeptTailLocked(range.get()));
  VGPU_RETURN_IF_ERROR(ShrinkRangeLocked(range.get(), 0));
  if (range->arena_slot != kNoGranule) {  // the arena keeps its virtual space
    free_arena_slots_.push_back(range->arena_slot);
    RecycleRangeLocked(std::move(range));
    return absl::OkStatus();
  }
  return ReleaseReservationLocked(std::move(range));
}

// Inline in its callers, as ReleaseReservationLocked in UnmapRangeLocked: each is one of a
// new block's few steps (a call cost the large path ~0.5 %).
ABSL_ATTRIBUTE_ALWAYS_INLINE inline absl::StatusOr<std::unique_ptr<VmmAllocator::Range>>
VmmAllocator::ReservedRangeLocked(uint64_t granules) {
  const uint64_t g = granularity_;
  if (granules < kSpareVaBuckets) {
    // The smallest spare reservation that is enough, if it is at most twice as large: a
    // range's room to grow decides which cached sizes it serves, so not much more.
    if (const uint64_t fits = spare_va_mask_ >> granules; fits != 0) {
      const uint64_t b = granules + static_cast<uint64_t>(std::countr_zero(fits));
      if (b <= 2 * granules) {
        std::vector<std::unique_ptr<Range>>& spares = spare_va_[b];
        std::unique_ptr<Range> range = std::move(spares.back());
        spares.pop_back();
        if (spares.empty()) spare_va_mask_ &= ~(uint64_t{1} << b);
        --spare_va_count_;
        range->ptr = reinterpret_cast<void*>(
            AlignUpPow2(reinterpret_cast<uint64_t>(range->reserved), g) + g);
        return range;
      }
    }
  }
  std::unique_ptr<Range> range = NewRangeLocked();
  range->reserved_bytes = granules * g;
  absl::StatusOr<void*> va = executor_->ReserveAddressRange(range->reserved_bytes);
  if (va.ok() && GranuleOffset(reinterpret_cast<uint64_t>(*va)) != 0) {
    // Drivers return granule-aligned ranges, but nothing here may rely on it: rounding the
    // base up would leave one granule less than reserved for. Ask again with a granule spare.
    executor_->FreeAddressRange(*va, range->reserved_bytes).IgnoreError();
    range->reserved_bytes += g;
    va = executor_->ReserveAddressRange(range->reserved_bytes);
  }
  if (!va.ok()) {
    RecycleRangeLocked(std::move(range));
    return va.status();
  }
  range->reserved = *va;
  range->ptr = reinterpret_cast<void*>(AlignUpPow2(reinterpret_cast<uint64_t>(*va), g) + g);
  return range;
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline absl::Status VmmAllocator::ReleaseReservationLocked(
    std::unique_ptr<Range> range) {
  // The granules it spans from its first granule boundary (one fewer than its bytes say when
  // the driver gave an unaligned base), so a reuse finds what ReservedRangeLocked promises.
  uint64_t span = GranulesIn(range->reserved_bytes);
  if (GranuleOffset(reinterpret_cast<uint64_t>(range->reserved)) != 0 && span > 0) --span;
  if (span >= 2 && span < kSpareVaBuckets && spare_va_count_ < kMaxSpareReservations &&
      range->granules.empty() && range->kept_tail == kNoGranule && range->head == kNoGranule &&
      range->tail == kNoGranule && range->arena_slot == kNoGranule) {
    ClearRange(range.get(), range->reserved, range->reserved_bytes);
    spare_va_[span].push_back(std::move(range));
    spare_va_mask_ |= uint64_t{1} << span;
    ++spare_va_count_;
    return absl::OkStatus();
  }
  absl::Status s = executor_->FreeAddressRange(range->reserved, range->reserved_bytes);
  RecycleRangeLocked(std::move(range));
  return s;
}

void VmmAllocator::FreeSpareReservationsLocked() {
  for (std::vector<std::unique_ptr<Range>>& spares : spare_va_) {
    for (std::unique_ptr<Range>& range : spares) {
      executor_->FreeAddressRange(range->reserved, range->reserved_bytes).IgnoreError();
      RecycleRangeLocked(std::move(range));
    }
    spares.clear();
  }
  spare_va_mask_ = 0;
  spare_va_count_ = 0;
}

std::unique_ptr<VmmAllocator::Range> VmmAllocator::NewRangeLocked() {
  if (range_pool_.empty()) return std::make_unique<Range>();
  std::unique_ptr<Range> r = std::move(range_pool_.back());
  range_pool_.pop_back();
  return r;
}

void VmmAllocator::RecycleRangeLocked(std::unique_ptr<Range> range) {
  if (range_pool_.size() >= 256) return;  // enough for any burst; the rest is freed
  ClearRange(range.get(), nullptr, 0);
  range_pool_.push_back(std::move(range));
}

void VmmAllocator::ClearRange(Range* range, void* reserved, uint64_t reserved_bytes) {
  std::vector<uint32_t> granules = std::move(range->granules);
  granules.clear();
  *range = Range{};
  range->granules = std::move(granules);
  range->reserved = reserved;
  range->reserved_bytes = reserved_bytes;
}

void VmmAllocator::RangeCache::Put(std::unique_ptr<Range> range) {
  const uint64_t count = range->granules.size();
  if (count >= heads_.size()) {
    // Grows to the largest count seen (at most the limit's granules), doubling.
    heads_.resize(std::max<size_t>(count + 1, 2 * heads_.size()), nullptr);
    nonempty_.Resize(heads_.size());
  }
  Range* r = range.release();
  r->cache_prev = nullptr;
  r->cache_next = heads_[count];
  if (r->cache_next != nullptr) r->cache_next->cache_prev = r;
  heads_[count] = r;
  nonempty_.Set(count);
  ++ranges_;
}

std::unique_ptr<VmmAllocator::Range> VmmAllocator::RangeCache::Take(Range* range, uint64_t count) {
  if (range->cache_prev != nullptr) {
    range->cache_prev->cache_next = range->cache_next;
  } else {
    heads_[count] = range->cache_next;
    if (range->cache_next == nullptr) nonempty_.Clear(count);
  }
  if (range->cache_next != nullptr) range->cache_next->cache_prev = range->cache_prev;
  range->cache_prev = range->cache_next = nullptr;
  --ranges_;
  return std::unique_ptr<Range>(range);
}

void VmmAllocator::CachePutLocked(std::unique_ptr<Range> range) { cache_.Put(std::move(range)); }

std::unique_ptr<VmmAllocator::Range> VmmAllocator::CacheTakeLocked(Range* range, uint64_t count) {
  std::unique_ptr<Range> r = cache_.Take(range, count);
  cached_granules_ -= count + (r->kept_tail != kNoGranule ? 1 : 0);
  MirrorMappedLocked();
  return r;
}

absl::Status VmmAllocator::EvictGranulesLocked(uint64_t need) {
  // From the largest cached range, as EvictOneLocked, but a range larger than what is needed
  // gives up only its tail and stays cached, smaller: on a card an unmap costs per mapping,
  // and the rest serves its size again after mapping the few granules it lacks
  // (TakeCachedLocked grows a range of more than half the size).
  while (need > 0 && cached_granules_ > 0) {
    const uint64_t own = cache_.Largest();
    Range* const largest = cache_.First(own);
    if (own <= need || largest->kept_tail != kNoGranule) {
      const uint64_t freed = own + (largest->kept_tail != kNoGranule ? 1 : 0);
      VGPU_RETURN_IF_ERROR(EvictOneLocked());
      need = freed >= need ? 0 : need - freed;
      continue;
    }
    std::unique_ptr<Range> range = CacheTakeLocked(largest, own);
    if (absl::Status s = ShrinkRangeLocked(range.get(), own - need); !s.ok()) {
      UnmapRangeLocked(std::move(range)).IgnoreError();
      return s;
    }
    ++cache_evictions_;
    cached_granules_ += own - need;
    MirrorMappedLocked();
    CachePutLocked(std::move(range));
    need = 0;
  }
  return absl::OkStatus();
}

absl::Status VmmAllocator::EvictOneLocked(const void* spare) {
  // The largest cached range first: one unmap frees the most granules. `spare` goes last.
  for (uint64_t n = cache_.Largest(); n != 0; n = cache_.Below(n)) {
    for (Range* r = cache_.First(n); r != nullptr; r = r->cache_next) {
      if (spare != nullptr && r->ptr == spare &&
          cached_granules_ > n + (r->kept_tail != kNoGranule ? 1 : 0)) {
        continue;  // something else can go first
      }
      std::unique_ptr<Range> range = CacheTakeLocked(r, n);
      ++cache_evictions_;
      return UnmapRangeLocked(std::move(range));
    }
  }
  return absl::InternalError(absl::StrCat(name(), ": nothing to evict from the mapping cache"));
}

namespace {
int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

absl::Status VmmAllocator::EpochEndLocked() {
  // Time is read once per epoch of frees, not per free.
  const int64_t now = epoch_interval_ns_ != 0 ? SteadyNowNs() : 0;
  if (epoch_interval_ns_ != 0) {
    if (epoch_start_ns_ == 0) epoch_start_ns_ = now;
    if (static_cast<uint64_t>(now - epoch_start_ns_) < epoch_interval_ns_) {
      epoch_frees_ = 0;  // look again after as many frees; the low water keeps falling
      return absl::OkStatus();
    }
  }
  // Granules that were free through the whole epoch were not needed: give them back, keeping
  // a small reserve. Waiting an epoch avoids returning and recreating granules every step;
  // when that happens anyway (granules given back were created again: the workload's step is
  // longer than the epoch), the epoch doubles. On a card each such granule costs a cuMemCreate
  // and a cuMemRelease (~18 us together, docs/gpu-results.md).
  epoch_frees_ = 0;
  epoch_start_ns_ = now;
  const uint64_t recreated = std::min(epoch_created_, epoch_returned_);
  epoch_returned_ -= recreated;
  epoch_created_ = 0;
  if (recreated > 0) {
    epoch_len_ = std::min(epoch_len_ * 2, BaseEpochLen() << 10);
    epoch_interval_ns_ = std::min(epoch_interval_ns_ * 2, BaseEpochIntervalNs() << 6);
  }
  if (free_low_water_ > keep_granules_) {
    const uint64_t before = created_granules_;
    VGPU_RETURN_IF_ERROR(
        GiveBackLocked(free_granules_.size() - (free_low_water_ - keep_granules_)));
    epoch_returned_ += before - created_granules_;
  }
  free_low_water_ = free_granules_.size();
  return absl::OkStatus();
}

absl::Status VmmAllocator::GiveBackLocked(uint64_t keep) {
  // Every pooled granule is free and its own physical allocation (EnsureFreeGranulesLocked):
  // the ones the pool would hand out next go back first, until at most `keep` are left.
  if (free_granules_.size() <= keep) return absl::OkStatus();
  const size_t n = free_granules_.size() - keep;
  HandlesFor(n);
  PoolTopHandlesLocked(n, handles_.data());
  size_t released = 0;
  absl::Status s = executor_->ReleasePhysicalMemories(handles_.data(), n, &released);
  // Only what went back leaves the pool: the top `released`, in the order handed out (one
  // pass and one resize; a pop and push per granule cost more on a large give-back).
  const size_t top = free_granules_.size();
  const uint32_t* gone = free_granules_.data() + (top - released);
  for (size_t i = 0; i < released; ++i) granules_[gone[i]] = Granule{};
  free_slots_.insert(free_slots_.end(), std::make_reverse_iterator(gone + released),
                     std::make_reverse_iterator(gone));
  free_granules_.resize(top - released);
  created_granules_ -= released;
  free_low_water_ = std::min<uint64_t>(free_low_water_, free_granules_.size());
  return s;
}

absl::Status VmmAllocator::Trim() {
  if (slabs_ != nullptr) slabs_->ReleaseEmptyRegions().IgnoreError();
  FutexMutexLock l(&mu_);
  VGPU_RETURN_IF_ERROR(ReapPendingLocked(/*wait=*/true));
  while (cached_granules_ > 0) VGPU_RETURN_IF_ERROR(EvictOneLocked());
  if (options_.allow_growth) VGPU_RETURN_IF_ERROR(GiveBackLocked(0));
  FreeSpareReservationsLocked();  // virtual space only, but Trim leaves nothing behind
  return absl::OkStatus();
}

absl::Status VmmAllocator::OomError(uint64_t bytes, uint64_t rounded, absl::string_view why) const {
  // The same numbers as Stats(): the slab BFC's first (its lock comes before ours).
  AllocatorStats slab;
  if (slabs_ != nullptr) slab = slabs_->Stats();
  FutexMutexLock l(&mu_);
  const AllocatorStats s = CombinedStatsLocked(slab);
  const uint64_t g = granularity_;
  // Granules below the limit plus cached ones can all be stitched into one new block; with
  // tail sharing a block also takes the largest open upper part as its head and an open lower
  // part as its tail (sizes that are not whole granules).
  const uint64_t stitchable = RoomGranulesLocked() * g;
  uint64_t head = 0, tail = 0;
  uint32_t unused;
  if (!open_upper_.FindAtMost(UINT64_MAX, &head, &unused)) head = 0;
  if (!open_lower_.FindAtMost(UINT64_MAX, &tail, &unused)) tail = 0;
  std::string largest = FormatBytes(stitchable);
  if (options_.share_tail_granules && head + tail > 0) {
    largest = absl::StrCat(FormatBytes(stitchable + head + tail), " (", largest,
                           " for whole-granule sizes)");
  }
  return OutOfMemoryError(
      {bytes, FormatBytes(rounded), why,
       absl::StrFormat("limit %s (%d granules of %s), in use %s, reserved (mapped) %s, largest "
                       "free block %s, fragmentation %.3f; cached %s, in slabs %s, largest block "
                       "the limit still allows %s",
                       FormatBytes(s.bytes_limit), limit_granules_, FormatBytes(g),
                       FormatBytes(s.bytes_in_use), FormatBytes(s.bytes_reserved),
                       FormatBytes(s.largest_free_block), s.fragmentation,
                       FormatBytes(cached_granules_ * g), FormatBytes(slab_granules_ * g), largest),
       "raise the logical device's memory limit or free buffers earlier; the vmm allocator "
       "stitches any free granules, so large blocks never fail from fragmentation."});
}

void VmmAllocator::DoResetPeakStats() {
  FutexMutexLock l(&mu_);
  peak_mapped_ = mapped_granules_;
  slab_usage_.peak_in_use.store(large_in_use_.load() + small_in_use(), std::memory_order_relaxed);
  // The small path raises the peak without mu_: one that raced the store above is seen now.
  NotePeak(large_in_use_.load() + small_in_use());
}

absl::Status VmmAllocator::DoReleaseCachedMemory() { return Trim(); }

AllocatorStats VmmAllocator::CombinedStatsLocked(const AllocatorStats& slab) const {
  AllocatorStats s;
  const uint64_t g = granularity_;
  s.num_allocs = num_allocs_ + slab.num_allocs;
  s.num_frees = num_frees_ + slab.num_frees;
  s.bytes_in_use = large_in_use_.load() + small_in_use();
  s.peak_bytes_in_use = slab_usage_.peak_in_use.load();
  s.bytes_reserved = mapped_granules_ * g;
  s.peak_bytes_reserved = peak_mapped_ * g;
  s.bytes_limit = limit_granules_ * g;
  s.largest_alloc_size = slab_usage_.largest_alloc.load();
  s.num_ooms = num_ooms_;
  s.regions_mapped = regions_mapped_;
  s.regions_unmapped = regions_unmapped_;
  s.mapping_granularity = g;
  s.map_calls = map_calls_;
  s.unmap_calls = unmap_calls_;
  // Free memory in the pool (mapped, not in use) is cached granules and free slab space.
  // Cached granules can be restitched into one block, so together they are one free block.
  s.largest_free_block = std::max(cached_granules_ * g, slab.largest_free_block);
  const uint64_t free = s.bytes_reserved > s.bytes_in_use ? s.bytes_reserved - s.bytes_in_use : 0;
  s.fragmentation =
      free == 0 ? 0.0 : 1.0 - static_cast<double>(s.largest_free_block) / static_cast<double>(free);
  if (s.fragmentation < 0) s.fragmentation = 0;
  return s;
}

AllocatorStats VmmAllocator::DoStats() const {
  AllocatorStats slab;
  if (slabs_ != nullptr) slab = slabs_->Stats();
  FutexMutexLock l(&mu_);
  AllocatorStats s = CombinedStatsLocked(slab);
  // The small path's stream order is the slab BFC's; the base adds the large path's.
  s.cross_stream_reuses = slab.cross_stream_reuses;
  s.stream_waits = slab.stream_waits;
  return s;
}

VmmAllocator::GranuleCounts VmmAllocator::Granules() const {
  FutexMutexLock l(&mu_);
  GranuleCounts c;
  c.created = created_granules_;
  c.granule_creates = granule_creates_;
  if (options_.allow_growth) {
    c.give_back_epoch = epoch_len_;
    c.give_back_interval_ms = epoch_interval_ns_ / 1000000;
    c.quiet_give_backs = quiet_give_backs_;
    c.quiet_granules = quiet_granules_;
  }
  c.mapped = mapped_granules_;
  c.in_blocks = block_granules_;
  c.cached = cached_granules_;
  c.in_slabs = slab_granules_;
  c.slabs = slab_ranges_.size();
  c.free = free_granules_.size();
  c.limit = limit_granules_;
  c.cache_hits = cache_hits_;
  c.cache_evictions = cache_evictions_;
  c.map_calls = map_calls_;
  c.unmap_calls = unmap_calls_;
  c.pending = pending_granules_;
  c.pending_frees = pending_.size();
  c.deferred_frees = deferred_frees_;
  c.shared = shared_count_;
  c.edge_views = edge_views_.size();
  c.edge_views_made = edge_views_made_;
  c.inner_blocks = inner_blocks_;
  c.inner_blocks_made = inner_blocks_made_;
  c.views = mapped_granules_ + double_mapped_ + 2 * edge_views_.size();
  return c;
}

std::string VmmAllocator::DumpMemoryLog() const {
  std::string out;
  {
    AllocatorStats slab;
    if (slabs_ != nullptr) slab = slabs_->Stats();
    FutexMutexLock l(&mu_);
    const uint64_t g = granularity_;
    absl::StrAppend(&out, name(), " (vmm over ", VmmDeviceName(executor_), ", granule ",
                    FormatBytes(g), ", slab ", FormatBytes(slab_bytes_), ")\n  ",
                    CombinedStatsLocked(slab).ToString(), "\n");
    absl::StrAppendFormat(&out,
                          "  granules: limit %d, created %d, mapped %d (blocks %d, cache %d, "
                          "slabs %d, deferred frees %d in %d), free in pool %d; cache hits %d, "
                          "evictions %d; spare address ranges %d\n",
                          limit_granules_, created_granules_, mapped_granules_, block_granules_,
                          cached_granules_, slab_granules_, pending_granules_, pending_.size(),
                          free_granules_.size(), cache_hits_, cache_evictions_, spare_va_count_);
    // Occupancy map by physical granule: B live block, C cached, S slab, . free, space =
    // given back to the device.
    std::string map(granules_.size(), ' ');
    for (uint32_t i : free_granules_) map[i] = '.';
    blocks_.ForEach([&](void*, const Range& r) {
      for (uint32_t i : r.granules) map[i] = 'B';
    });
    for (const PendingFree& pf : pending_)  // still in use by their streams
      for (uint32_t i : pf.range->granules) map[i] = 'B';
    for (size_t i = 0; i < shared_.size(); ++i)
      if (shared_[i].shared) map[i] = 'B';
    for (const auto& [p, r] : slab_ranges_)
      for (uint32_t i : r->granules) map[i] = 'S';
    cache_.ForEach([&](uint64_t, const Range& r) {
      for (uint32_t i : r.granules) map[i] = 'C';
      if (r.kept_tail != kNoGranule) map[r.kept_tail] = 'C';
    });
    // At most 4096 characters: on big pools one character stands for several granules and
    // shows the busiest state among them (B > S > C > . > given back).
    const size_t per = std::max<size_t>(1, (map.size() + 4095) / 4096);
    if (per > 1) {
      auto rank = [](char c) { return std::string_view(" .CSB").find(c); };
      std::string packed;
      for (size_t i = 0; i < map.size(); i += per) {
        char best = ' ';
        for (size_t j = i; j < std::min(map.size(), i + per); ++j) {
          if (rank(map[j]) > rank(best)) best = map[j];
        }
        packed.push_back(best);
      }
      map = std::move(packed);
    }
    absl::StrAppend(&out, "  occupancy (B block, C cached, S slab, . free), ", per,
                    " granule(s) per character:\n");
    for (size_t i = 0; i < map.size(); i += 64) {
      absl::StrAppendFormat(&out, "    %6d |%s|\n", i * per, map.substr(i, 64));
    }
    std::vector<std::pair<void*, const Range*>> sorted;
    blocks_.ForEach([&](void* p, const Range& r) { sorted.emplace_back(p, &r); });
    std::sort(sorted.begin(), sorted.end());
    absl::StrAppend(&out, "  live large blocks: ", sorted.size(), "\n");
    for (size_t i = 0; i < sorted.size() && i < 64; ++i) {
      const Range& r = *sorted[i].second;
      absl::StrAppendFormat(&out, "    %p %s (asked %s) granules", r.ptr,
                            FormatBytes(r.granules.size() * g), FormatBytes(r.requested));
      for (size_t j = 0; j < r.granules.size() && j < 16; ++j) {
        absl::StrAppend(&out, " ", r.granules[j]);
      }
      if (r.granules.size() > 16) absl::StrAppend(&out, " ...");
      absl::StrAppend(&out, "\n");
    }
    if (sorted.size() > 64) absl::StrAppend(&out, "    ... ", sorted.size() - 64, " more\n");
    absl::StrAppend(&out, "  cache:");
    uint64_t bucket = 0, in_bucket = 0;
    auto flush = [&] {
      if (in_bucket > 0) absl::StrAppend(&out, " ", in_bucket, "x", bucket, "g");
    };
    cache_.ForEach([&](uint64_t n, const Range&) {
      if (n != bucket) {
        flush();
        bucket = n;
        in_bucket = 0;
      }
      ++in_bucket;
    });
    flush();
    absl::StrAppend(&out, "\n");
    // Tail sharing's free parts: what only a matching head or tail can use.
    uint64_t shared = 0, upper = 0, upper_bytes = 0, lower = 0, lower_bytes = 0, gaps = 0;
    uint64_t inner = 0, mids = 0;
    for (const SharedGranule& sg : shared_) {
      if (!sg.shared) continue;
      ++shared;
      inner += sg.mid_live;
      const Offer offer = OfferOf(sg);
      const uint64_t offered = offer == kOfferNone ? 0 : OfferBytes(sg, offer);
      if (offer == kOfferUpper) {
        ++upper;
        upper_bytes += offered;
      } else if (offer == kOfferLower) {
        ++lower;
        lower_bytes += offered;
      } else if (offer == kOfferMid) {
        ++mids;
      }
      // What neither a live block nor an open part holds: gaps beside live blocks (one
      // offered to an inner block among them).
      const uint64_t used = (sg.lower_live ? sg.lower_end : 0) +
                            (sg.mid_live ? sg.mid_end - sg.mid_start : 0) +
                            (sg.upper_live ? g - sg.split : 0);
      gaps += g - used - (offer == kOfferMid ? 0 : offered);
    }
    absl::StrAppend(&out, "  shared granules: ", shared, " (", inner,
                    " with an inner block); open upper parts ", upper, " (",
                    FormatBytes(upper_bytes), "), open lower parts ", lower, " (",
                    FormatBytes(lower_bytes), "), gaps beside live blocks ", FormatBytes(gaps),
                    " (", mids, " open to an inner block)\n");
  }
  if (slabs_ != nullptr) absl::StrAppend(&out, slabs_->DumpMemoryLog());
  return out;
}

absl::Status VmmAllocator::CheckInvariants() const {
  AllocatorStats slab;
  if (slabs_ != nullptr) {
    VGPU_RETURN_IF_ERROR(slabs_->CheckInvariants());
    slab = slabs_->Stats();
  }
  FutexMutexLock l(&mu_);
  auto fail = [&](auto... parts) {
    return absl::InternalError(absl::StrCat(name(), ": invariant broken: ", parts...));
  };
  std::vector<uint8_t> seen(granules_.size(), 0);
  uint64_t n_blocks = 0, n_cache = 0, n_slabs = 0, large = 0;
  std::vector<uint8_t> slot_free(arena_slots_used_, 0);
  for (uint32_t i : free_arena_slots_) {
    if (i >= arena_slots_used_ || slot_free[i]++) {
      return fail("slab arena slot ", i, " is free twice or was never used");
    }
  }
  // Runs under mu_ (held above); the analysis does not follow lambdas.
  auto visit = [&](const Range& r, uint64_t* total) ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::Status {
    if (r.granules.empty() && r.head == kNoGranule && r.tail == kNoGranule) {
      return fail("empty range at ", P(r.ptr));
    }
    uint64_t off = reinterpret_cast<uint64_t>(r.ptr) - reinterpret_cast<uint64_t>(r.reserved);
    if (off + r.granules.size() * granularity_ > r.reserved_bytes) {
      return fail("range at ", P(r.ptr), " overruns its reservation");
    }
    if (r.arena_slot != kNoGranule &&
        (r.arena_slot >= arena_slots_used_ ||
         r.ptr != slab_arena_ + uint64_t{r.arena_slot} * slab_bytes_ || slot_free[r.arena_slot])) {
      return fail("slab at ", P(r.ptr), " is not in its arena slot ", r.arena_slot);
    }
    for (uint32_t i : r.granules) {
      if (i >= granules_.size() || granules_[i].handle.bytes == 0) {
        return fail("range at ", P(r.ptr), " holds granule ", i, " which does not exist");
      }
      if (seen[i]++) return fail("granule ", i, " is used twice (second at ", P(r.ptr), ")");
    }
    *total += r.granules.size();
    if (r.kept_tail != kNoGranule) {
      const uint32_t i = r.kept_tail;
      if (i >= granules_.size() || granules_[i].handle.bytes == 0) {
        return fail("range at ", P(r.ptr), " keeps tail granule ", i, " which does not exist");
      }
      if (seen[i]++) return fail("kept tail granule ", i, " is used twice");
      ++*total;
    }
    return absl::OkStatus();
  };
  absl::flat_hash_map<uint32_t, int> lower_refs, upper_refs, mid_refs;
  auto count_refs = [&](const Range& r) {
    if (r.head != kNoGranule) ++(r.inner ? mid_refs : upper_refs)[r.head];
    if (r.tail != kNoGranule) ++lower_refs[r.tail];
  };
  absl::Status blocks_ok;
  blocks_.ForEach([&](void* p, const Range& r) {
    if (!blocks_ok.ok()) return;
    if (p != r.user_ptr) {
      blocks_ok = fail("block key ", P(p), " != ptr ", P(r.user_ptr));
      return;
    }
    blocks_ok = visit(r, &n_blocks);
    large += r.footprint;
    count_refs(r);
  });
  VGPU_RETURN_IF_ERROR(blocks_ok);
  uint64_t n_pending = 0;
  for (const PendingFree& pf : pending_) {
    if (pf.range == nullptr || pf.events.empty()) return fail("a deferred free without events");
    if (pf.range->streams != 0) return fail("deferred free at ", P(pf.range->ptr), " has streams");
    VGPU_RETURN_IF_ERROR(visit(*pf.range, &n_pending));
    count_refs(*pf.range);
  }
  if (n_pending != pending_granules_) {
    return fail("deferred frees hold ", n_pending, " granules, counted ", pending_granules_);
  }
  uint64_t extra_views = 0, open_upper = 0, open_lower = 0, open_mid = 0, n_shared = 0, inner = 0;
  for (uint32_t i = 0; i < shared_.size(); ++i) {
    const SharedGranule& sg = shared_[i];
    if (!sg.shared) continue;
    ++n_shared;
    if (i >= granules_.size() || granules_[i].handle.bytes == 0) {
      return fail("shared granule ", i, " does not exist");
    }
    if (seen[i]++) return fail("shared granule ", i, " is also elsewhere");
    if (lower_refs[i] != (sg.lower_live ? 1 : 0) || upper_refs[i] != (sg.upper_live ? 1 : 0) ||
        mid_refs[i] != (sg.mid_live ? 1 : 0)) {
      return fail("shared granule ", i, " is used by ", lower_refs[i], "/", mid_refs[i], "/",
                  upper_refs[i], " blocks (lower/inner/upper), marked ", sg.lower_live, "/",
                  sg.mid_live, "/", sg.upper_live);
    }
    const int live = sg.lower_live + sg.mid_live + sg.upper_live;
    if (live == 0) return fail("shared granule ", i, " is unused");
    // Below the upper part, in order: the lower block, the inner block; with the upper part
    // free, split is where the highest of them ends.
    if ((sg.lower_live ? sg.lower_end == 0 || sg.lower_end > sg.split : sg.lower_end != 0) ||
        (sg.mid_live ? sg.mid_start < sg.lower_end || sg.mid_start >= sg.mid_end ||
                           sg.mid_end > sg.split || sg.mid_start % 256 != 0 || sg.mid_end % 256 != 0
                     : sg.mid_start != 0 || sg.mid_end != 0) ||
        (!sg.upper_live && sg.split != LowTop(sg)) || sg.split >= granularity_) {
      return fail("shared granule ", i, " has its lower block end at ", sg.lower_end,
                  ", its inner block at [", sg.mid_start, ", ", sg.mid_end,
                  ") and its upper part from ", sg.split);
    }
    // An open part is offered under the bytes of its free part: whole 256-byte units, so a
    // bucket of OpenParts holds one size.
    const Offer offer = OfferOf(sg);
    if (const uint64_t open = OfferBytes(sg, offer);
        offer != kOfferNone && (sg.open_bytes != open || open % 256 != 0 || open == 0)) {
      return fail("shared granule ", i, " is offered with ", sg.open_bytes,
                  " bytes, its free part has ", open);
    }
    extra_views += live - 1;  // a view per block on it, one counted in mapped_granules_
    inner += sg.mid_live;
    open_upper += offer == kOfferUpper;
    open_lower += offer == kOfferLower;
    open_mid += offer == kOfferMid;
  }
  if (inner != inner_blocks_) {
    return fail("inner blocks: ", inner, " in shared granules, counted ", inner_blocks_);
  }
  if (n_shared != shared_count_ ||
      lower_refs.size() + upper_refs.size() + mid_refs.size() > 3 * n_shared ||
      extra_views != double_mapped_ || open_upper != open_upper_.size() ||
      open_lower != open_lower_.size() || open_mid != open_mid_.size()) {
    return fail("shared granules: ", extra_views, " extra views (counted ", double_mapped_,
                "), open ", open_upper, "/", open_lower, "/", open_mid, " but offered ",
                open_upper_.size(), "/", open_lower_.size(), "/", open_mid_.size(),
                " (upper/lower/gaps)");
  }
  for (const auto& [p, r] : slab_ranges_) VGPU_RETURN_IF_ERROR(visit(*r, &n_slabs));
  absl::Status cached = absl::OkStatus();
  size_t cache_ranges = 0;
  cache_.ForEach([&](uint64_t n, const Range& r) {
    ++cache_ranges;
    if (!cached.ok()) return;
    if (r.granules.size() != n) {
      cached = fail("cache bucket ", n, " holds a range of ", r.granules.size());
    } else {
      cached = visit(r, &n_cache);
    }
  });
  VGPU_RETURN_IF_ERROR(cached);
  if (cache_ranges != cache_.ranges()) {
    return fail("mapping cache: ", cache_ranges, " ranges in its lists, ", cache_.ranges(),
                " counted");
  }
  for (uint32_t i : free_granules_) {
    if (i >= granules_.size() || granules_[i].handle.bytes == 0) {
      return fail("free list holds granule ", i, " which does not exist");
    }
    if (seen[i]++) return fail("free granule ", i, " is also in use");
  }
  for (uint32_t i : free_slots_) {
    if (i >= granules_.size() || granules_[i].handle.bytes != 0) {
      return fail("free slot ", i, " is not a hole");
    }
  }
  if (n_blocks != block_granules_ || n_cache != cached_granules_ || n_slabs != slab_granules_) {
    return fail("granule counters blocks/cache/slabs ", block_granules_, "/", cached_granules_, "/",
                slab_granules_, " but ranges hold ", n_blocks, "/", n_cache, "/", n_slabs);
  }
  if (mapped_granules_ != n_blocks + n_cache + n_slabs + shared_count_ + n_pending) {
    return fail("mapped ", mapped_granules_, " != blocks+cache+slabs+shared+deferred ",
                n_blocks + n_cache + n_slabs + shared_count_ + n_pending);
  }
  if (mapped_granules_ > limit_granules_) {
    return fail("mapped ", mapped_granules_, " granules over the limit of ", limit_granules_);
  }
  if (created_granules_ != mapped_granules_ + free_granules_.size()) {
    return fail("created ", created_granules_, " != mapped ", mapped_granules_, " + free ",
                free_granules_.size());
  }
  if (granules_.size() != created_granules_ + free_slots_.size() && options_.allow_growth) {
    return fail("granule table of ", granules_.size(), " != created + holes");
  }
  if (large != large_in_use_.load()) {
    return fail("large in use ", large_in_use_.load(), " but blocks hold ", large);
  }
  if (slab.bytes_in_use != small_in_use()) {
    return fail("small in use ", small_in_use(), " but the slab BFC has ", slab.bytes_in_use);
  }
  if (slab.bytes_reserved > n_slabs * granularity_) {
    return fail("slab BFC holds ", slab.bytes_reserved, " bytes, slabs map ",
                n_slabs * granularity_);
  }
  // (The growth cap, CacheCapLocked, shrinks as blocks are allocated: a soft target, enforced
  // when blocks are freed or need granules.)
  if (cached_granules_ > cache_limit_granules_) {
    return fail("cache holds ", cached_granules_, " granules over its limit ",
                cache_limit_granules_);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Allocator>> CreateVmmAllocator(
    Executor* executor, const DeviceAllocatorOptions& options) {
  if (executor == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.device_name, ": no executor to allocate from"));
  }
  VmmOptions vo;
  vo.name = options.device_name.empty() ? VmmDeviceName(executor) : options.device_name;
  vo.memory_limit = options.memory_limit;
  vo.allow_growth = options.allow_growth;
  if (options.vmm_slab_bytes) vo.slab_bytes = *options.vmm_slab_bytes;
  if (options.vmm_page_bytes) vo.page_bytes = *options.vmm_page_bytes;
  if (options.vmm_small_block_max) vo.small_block_max = *options.vmm_small_block_max;
  if (options.vmm_reclaim_slivers) vo.slab_reclaim_slivers = *options.vmm_reclaim_slivers;
  if (options.vmm_mid_blocks) vo.mid_blocks_near_limit = *options.vmm_mid_blocks;
  if (options.vmm_inner_blocks) vo.inner_blocks = *options.vmm_inner_blocks;
  if (options.vmm_edge_best_fit) vo.slab_edge_views_in_best_fit = *options.vmm_edge_best_fit;
  if (options.vmm_whole_granule_divisor) {
    vo.whole_granule_waste_divisor = *options.vmm_whole_granule_divisor;
  }
  if (options.vmm_quiet_give_back_ms) vo.quiet_give_back_ms = *options.vmm_quiet_give_back_ms;
  VGPU_ASSIGN_OR_RETURN(std::unique_ptr<VmmAllocator> a,
                        VmmAllocator::Create(executor, std::move(vo)));
  return std::unique_ptr<Allocator>(std::move(a));
}

}  // namespace vgpu
