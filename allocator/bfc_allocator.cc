#include "vgpu/allocator/bfc_allocator.h"

#include <algorithm>
#include <bit>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/base/optimization.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "vgpu/allocator/sub_allocators.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/status.h"

namespace vgpu {
namespace {

std::string P(uint64_t p) { return absl::StrFormat("0x%x", p); }
uint64_t AlignUp(uint64_t a, uint64_t b) { return (a + b - 1) & ~(b - 1); }

}  // namespace

BFCAllocator::BFCAllocator(std::unique_ptr<SubAllocator> sub_allocator, BFCOptions options)
    : sub_allocator_(std::move(sub_allocator)), options_(std::move(options)) {
  ShareStreamSlotsOf(options_.stream_slot_owner);
  std::fill(std::begin(roots_), std::end(roots_), kNone);
  std::fill(std::begin(segment_heads_), std::end(segment_heads_), kNone);
  page_ = std::max<uint64_t>(RoundedBytes(options_.segment_granularity), kMinAllocationSize);
  limit_ = options_.memory_limit & ~(kMinAllocationSize - 1);
  counters_.stats.bytes_limit = limit_;
  reclaim_own_.store(options_.reclaim_slivers, std::memory_order_relaxed);
  if (!options_.reclaim_slivers && options_.usage_mirror != nullptr) {
    reclaim_flag_ = &options_.usage_mirror->reclaim_slivers;
  }
  edge_best_fit_own_.store(options_.edge_views_in_best_fit, std::memory_order_relaxed);
  if (!options_.edge_views_in_best_fit && options_.usage_mirror != nullptr) {
    edge_best_fit_flag_ = &options_.usage_mirror->edge_views_in_best_fit;
  }
  if (const uint64_t page = options_.edge_view_page_bytes;
      page >= kMinAllocationSize && std::has_single_bit(page) &&
      page / kMinAllocationSize < kEdgeIndexMaxBuckets) {
    edge_index_ = true;
    for (int side : {0, 1}) {
      edge_buckets_[side].Resize(page / kMinAllocationSize + 1);
      edge_heads_[side].assign(page / kMinAllocationSize + 1, kNone);
    }
  }
  next_region_bytes_ = std::max<uint64_t>(RoundedBytes(options_.initial_region_bytes), 256);
  chunks_.reserve(256);
  free_records_.reserve(64);
  if (sub_allocator_ == nullptr) {
    init_status_ = absl::InvalidArgumentError(absl::StrCat(name(), ": sub-allocator is null"));
    return;
  }
  if (limit_ == 0) {
    init_status_ = absl::InvalidArgumentError(
        absl::StrCat(name(), ": memory limit ", options_.memory_limit,
                     " bytes is below the minimum allocation of 256 bytes"));
    return;
  }
  if (!options_.allow_growth && options_.gather_pages) {
    gather_page_ = sub_allocator_->page_bytes();
    // Pages the size of the 256-byte chunk grain at least, and a power of two (AlignUp).
    if (gather_page_ < kMinAllocationSize || (gather_page_ & (gather_page_ - 1)) != 0) {
      gather_page_ = 0;
    }
  }
  if (!options_.allow_growth) {
    SpinLockGuard l(mu_);
    absl::Status s = AddRegionLocked(limit_).status();
    if (!s.ok()) {
      init_status_ = absl::ResourceExhaustedError(
          absl::StrCat(name(), ": cannot take the whole memory limit of ", FormatBytes(limit_),
                       " up front (allow_growth is off): ", s.message(),
                       ". Lower the limit, free device memory, or turn on allow_growth"));
    }
  }
}

BFCAllocator::~BFCAllocator() {
  // The regions go back below: the streams that used them must be done first (the base
  // destructor waits for them too, but only after this body).
  SynchronizeStreams().IgnoreError();
  SpinLockGuard l(mu_);
  if (live_count_ != 0) {
    ReportAllocatorError(absl::StrFormat("vgpu: %s destroyed with %zu live allocations (%s in use)",
                                         name(), live_count_,
                                         FormatBytes(counters_.stats.bytes_in_use)));
  }
  // Views are unmapped before the regions they map go (live ones too: reported above).
  for (const auto& [c, v] : views_) freed_views_.push_back({v.va, 0});
  FlushViewsLocked();
  // Gathered pages go back to their places before their region goes.
  for (const auto& [va, g] : gathered_) {
    absl::Status s = sub_allocator_->ReturnPages(reinterpret_cast<void*>(va),
                                                 reinterpret_cast<void*>(g.region), g.runs);
    if (!s.ok()) ReportAllocatorError(absl::StrCat("vgpu: ", name(), ": ", s.ToString()));
  }
  for (const Region& r : regions_) {
    if (gathered_.contains(r.ptr)) continue;
    absl::Status s = sub_allocator_->Free(reinterpret_cast<void*>(r.ptr), r.size);
    if (!s.ok()) ReportAllocatorError(absl::StrCat("vgpu: ", name(), ": ", s.ToString()));
  }
}

absl::StatusOr<std::unique_ptr<BFCAllocator>> BFCAllocator::Create(
    std::unique_ptr<SubAllocator> sub_allocator, BFCOptions options) {
  auto a = std::make_unique<BFCAllocator>(std::move(sub_allocator), std::move(options));
  if (!a->init_status().ok()) return a->init_status();
  return a;
}

// ---------------------------------------------------------------------------------------------
// Chunk records and bins.

uint32_t BFCAllocator::NewChunk() {
  uint32_t c;
  if (!free_records_.empty()) {
    c = free_records_.back();
    free_records_.pop_back();
    chunks_[c] = Chunk();
  } else {
    c = static_cast<uint32_t>(chunks_.size());
    chunks_.emplace_back();
  }
  rng_ ^= rng_ << 13;
  rng_ ^= rng_ >> 17;
  rng_ ^= rng_ << 5;
  chunks_[c].priority = rng_;
  return c;
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline void BFCAllocator::LinkLive(uint32_t c) {
  uint32_t& head = buckets_[BucketOf(chunks_[c].ptr)];
  chunks_[c].left = head;
  head = c;
}

void BFCAllocator::LiveInsert(uint32_t c) {
  if (2 * (live_count_ + 1) > buckets_.size())
    RehashLive(std::max<size_t>(64, 2 * buckets_.size()));
  LinkLive(c);
  ++live_count_;
}

uint32_t BFCAllocator::LiveFind(uint64_t ptr) const {
  if (buckets_.empty()) return kNone;
  uint32_t c = buckets_[BucketOf(ptr)];
  while (c != kNone && chunks_[c].ptr != ptr) c = chunks_[c].left;
  return c;
}

uint32_t BFCAllocator::LiveErase(uint64_t ptr) {
  if (buckets_.empty()) return kNone;
  uint32_t* link = &buckets_[BucketOf(ptr)];
  while (*link != kNone && chunks_[*link].ptr != ptr) link = &chunks_[*link].left;
  const uint32_t c = *link;
  if (c == kNone) return kNone;
  *link = chunks_[c].left;
  chunks_[c].left = kNone;
  --live_count_;
  return c;
}

void BFCAllocator::RehashLive(size_t buckets) {
  std::vector<uint32_t> old = std::move(buckets_);
  buckets_.assign(buckets, kNone);
  bucket_shift_ = 64 - std::countr_zero(buckets);
  for (uint32_t head : old) {
    for (uint32_t c = head; c != kNone;) {
      const uint32_t next = chunks_[c].left;
      LinkLive(c);
      c = next;
    }
  }
}

void BFCAllocator::DeleteChunk(uint32_t c) {
  chunks_[c].size = 0;
  chunks_[c].bin = -1;
  free_records_.push_back(c);
}

uint32_t BFCAllocator::SplitChunk(uint32_t c, uint64_t offset) {
  uint32_t n = NewChunk();  // may move chunks_: no references held across it
  Chunk& a = chunks_[c];
  Chunk& b = chunks_[n];
  b.ptr = a.ptr + offset;
  b.size = a.size - offset;
  b.streams = a.streams;
  a.size = offset;
  b.prev = c;
  b.next = a.next;
  if (a.next != kNone) chunks_[a.next].prev = n;
  a.next = n;
  return n;
}

void BFCAllocator::MergeWithNext(uint32_t c) {
  uint32_t n = chunks_[c].next;
  Chunk& a = chunks_[c];
  const Chunk& b = chunks_[n];
  a.size += b.size;
  a.streams |= b.streams;
  a.next = b.next;
  if (b.next != kNone) chunks_[b.next].prev = c;
  DeleteChunk(n);
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline void BFCAllocator::ReclaimSliverLocked(uint32_t c) {
  const uint32_t p = chunks_[c].prev;
  if (p == kNone) return;
  Chunk& pc = chunks_[p];
  // Lent parts keep their sizes; padding before an aligned block is free, never in use. (A
  // segment is alone in its region and a view in none: neither is ever a prev.)
  if (!pc.in_use || pc.lent) return;
  const uint64_t keep = RoundedBytes(std::max<uint64_t>(pc.requested, 1));
  if (pc.size <= keep) return;
  // The user's bytes end at keep: the rest was never handed out, so no stream used it.
  const uint64_t sliver = pc.size - keep;
  pc.size = keep;
  Chunk& cc = chunks_[c];
  cc.ptr -= sliver;
  cc.size += sliver;
  counters_.stats.bytes_in_use -= sliver;
}

// Inlined: it is the whole of the free path.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline uint32_t BFCAllocator::CoalesceAndBinLocked(uint32_t c) {
  const uint32_t next = chunks_[c].next, prev = chunks_[c].prev;
  if (next != kNone && !chunks_[next].in_use) {
    BinRemove(next);
    MergeWithNext(c);
  }
  if (prev != kNone && !chunks_[prev].in_use) {
    BinRemove(prev);
    MergeWithNext(prev);
    c = prev;
  }
  BinInsert(c);
  // A region left wholly free: the owner may take its memory back (BFCUsageMirror; without
  // one the free path pays a pointer test).
  if (options_.usage_mirror != nullptr && (chunks_[c].prev & chunks_[c].next) == kNone) {
    NoteEmptyRegionLocked(c);
  }
  return c;
}

void BFCAllocator::NoteEmptyRegionLocked(uint32_t c) {
  if (options_.usage_mirror == nullptr || chunks_[c].segment) return;
  std::atomic<uint64_t>& n = options_.usage_mirror->empty_regions_made;
  n.store(n.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

void BFCAllocator::TreapSplit(uint32_t t, uint32_t c, uint32_t* l, uint32_t* r) {
  // The nodes taken are hung under c's children links (owner c) and then under each other.
  uint32_t l_owner = c, r_owner = c;
  while (t != kNone) {
    if (KeyLess(t, c)) {
      *l = t;
      chunks_[t].parent = l_owner;
      l_owner = t;
      l = &chunks_[t].right;
      t = *l;
    } else {
      *r = t;
      chunks_[t].parent = r_owner;
      r_owner = t;
      r = &chunks_[t].left;
      t = *r;
    }
  }
  *l = *r = kNone;
}

uint32_t BFCAllocator::TreapMerge(uint32_t l, uint32_t r, uint32_t parent) {
  uint32_t root;
  uint32_t* link = &root;
  while (l != kNone && r != kNone) {
    if (chunks_[l].priority >= chunks_[r].priority) {
      *link = l;
      chunks_[l].parent = parent;
      parent = l;
      link = &chunks_[l].right;
      l = *link;
    } else {
      *link = r;
      chunks_[r].parent = parent;
      parent = r;
      link = &chunks_[r].left;
      r = *link;
    }
  }
  *link = l != kNone ? l : r;
  if (*link != kNone) chunks_[*link].parent = parent;
  return root;
}

void BFCAllocator::BinInsertInto(uint32_t c, int t) {
  if (ABSL_PREDICT_FALSE(edge_live_) && t < kNumTrees) EdgeIndexInsert(c);
  chunks_[c].bin = static_cast<int16_t>(t);
  MarkTree(t);
  if (t < kListTrees) {
    chunks_[c].parent = kNone;
    ListPush(&roots_[t], c);
    return;
  }
  // Down to the first node c outranks, then c takes its place with the subtree split under it.
  const uint32_t priority = chunks_[c].priority;
  uint32_t* link = &roots_[t];
  uint32_t parent = kNone;
  while (*link != kNone && chunks_[*link].priority > priority) {
    parent = *link;
    link = KeyLess(c, *link) ? &chunks_[*link].left : &chunks_[*link].right;
  }
  TreapSplit(*link, c, &chunks_[c].left, &chunks_[c].right);
  chunks_[c].parent = parent;
  *link = c;
}

void BFCAllocator::BuildEdgeIndexLocked() {
  edge_live_ = true;
  edge_idle_allocs_ = 0;
  for (const Region& r : regions_) {
    if (chunks_[r.first].segment) continue;
    for (uint32_t x = r.first; x != kNone; x = chunks_[x].next) {
      const Chunk& ch = chunks_[x];
      if (!ch.in_use && ch.bin >= 0 && ch.bin < kNumTrees) EdgeIndexInsert(x);
    }
  }
}

void BFCAllocator::DropEdgeIndexLocked() {
  edge_live_ = false;
  for (int side : {0, 1}) {
    for (int64_t b = edge_buckets_[side].AtLeast(0); b >= 0; b = edge_buckets_[side].AtLeast(b)) {
      while (edge_heads_[side][b] != kNone) EdgeIndexRemove(edge_heads_[side][b]);
    }
  }
}

void BFCAllocator::EdgeIndexInsert(uint32_t c) {
  const Chunk& ch = chunks_[c];
  const uint64_t page = options_.edge_view_page_bytes, mask = page - 1;
  if ((ch.ptr & mask) != 0 && ((ch.ptr + ch.size) & mask) != 0) return;
  if (c >= edge_links_.size()) edge_links_.resize(chunks_.size());
  const int32_t b = static_cast<int32_t>(std::min(ch.size, page) / kMinAllocationSize);
  for (int side : {0, 1}) {
    if (((side == 0 ? ch.ptr + ch.size : ch.ptr) & mask) != 0) continue;
    EdgeLinks& e = edge_links_[c];
    uint32_t& head = edge_heads_[side][b];
    chunks_[c].edges |= static_cast<uint8_t>(1 << side);
    e.bucket[side] = b;
    e.prev[side] = kNone;
    e.next[side] = head;
    if (head != kNone) edge_links_[head].prev[side] = c;
    head = c;
    edge_buckets_[side].Set(b);
  }
}

void BFCAllocator::EdgeIndexRemove(uint32_t c) {
  chunks_[c].edges = 0;
  EdgeLinks& e = edge_links_[c];
  for (int side : {0, 1}) {
    const int32_t b = e.bucket[side];
    if (b < 0) continue;
    if (e.prev[side] != kNone) {
      edge_links_[e.prev[side]].next[side] = e.next[side];
    } else {
      edge_heads_[side][b] = e.next[side];
      if (e.next[side] == kNone) edge_buckets_[side].Clear(b);
    }
    if (e.next[side] != kNone) edge_links_[e.next[side]].prev[side] = e.prev[side];
    e.next[side] = e.prev[side] = kNone;
    e.bucket[side] = -1;
  }
}

uint32_t BFCAllocator::EdgeChunkIn(int side, int64_t b, uint32_t other) const {
  uint32_t x = edge_heads_[side][b];
  if (x == other && x != kNone) x = edge_links_[x].next[side];
  return x;
}

bool BFCAllocator::FindEdgePairLocked(uint64_t rounded, uint64_t over_below, uint64_t limit,
                                      uint32_t* low, uint64_t* low_edge, uint32_t* high,
                                      uint64_t* high_edge) const {
  const int64_t r = static_cast<int64_t>(rounded / kMinAllocationSize);
  // Sums of the two edges' bytes: the pair must hold the block and leave less than over_below.
  uint64_t best = over_below > UINT64_MAX - rounded ? UINT64_MAX : rounded + over_below;
  const uint64_t found_none = best;
  auto consider = [&](int64_t lb, uint32_t lc, int64_t hb, uint32_t hc) {
    const uint64_t sum = static_cast<uint64_t>(lb + hb) * kMinAllocationSize;
    if (sum < best) {
      best = sum;
      *low = lc;
      *high = hc;
      *low_edge = static_cast<uint64_t>(lb) * kMinAllocationSize;
      *high_edge = static_cast<uint64_t>(hb) * kMinAllocationSize;
    }
  };
  // The smallest edge of at least bucket b on `side` that is not chunk `other`.
  // The lambdas run under the caller's mu_; the analysis does not follow lambdas.
  auto at_least = [&](int side, int64_t b, uint32_t other, uint32_t* x)
                      ABSL_NO_THREAD_SAFETY_ANALYSIS -> int64_t {
    const BucketBitmap& m = edge_buckets_[side];
    for (int64_t y = m.AtLeast(b); y >= 0; y = m.AtLeast(y + 1)) {
      if ((*x = EdgeChunkIn(side, y, other)) != kNone) return y;
    }
    return -1;
  };
  // The low part takes min(low edge, rounded - 256), the high part the rest (256 or more), so
  // a pair holds the block when the edges add up to it, or the low edge alone holds all but
  // 256 bytes of it. From `side`: its smallest edge of rounded - 256 or more with the other
  // side's smallest; then its edges below that, largest first, each with the smallest edge of
  // the other side that completes it (smaller edges need larger partners: none ends the walk).
  auto from = [&](int side, uint64_t tries) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const int other = 1 - side;
    auto take = [&](int64_t b, uint32_t x, int64_t ob, uint32_t y) {
      side == 0 ? consider(b, x, ob, y) : consider(ob, y, b, x);
    };
    uint32_t x, y;
    if (const int64_t b = at_least(side, r - 1, kNone, &x); b >= 0) {
      if (const int64_t ob = at_least(other, 1, x, &y); ob >= 0) take(b, x, ob, y);
    }
    const BucketBitmap& m = edge_buckets_[side];
    uint64_t tried = 0;
    for (int64_t b = m.AtMost(r - 2); b >= 1 && tried < tries && best > rounded;
         b = m.AtMost(b - 1), ++tried) {
      x = EdgeChunkIn(side, b, kNone);
      const int64_t ob = at_least(other, r - b, x, &y);
      if (ob < 0) break;
      take(b, x, ob, y);
    }
  };
  from(0, limit);
  // Where the walk over the low edges stopped early, the high edges' walk too.
  if (limit != UINT64_MAX) from(1, limit);
  return best != found_none;
}

void BFCAllocator::ListPush(uint32_t* head, uint32_t c) {
  Chunk& ch = chunks_[c];
  ch.left = kNone;
  ch.right = *head;
  if (ch.right != kNone) chunks_[ch.right].left = c;
  *head = c;
}

void BFCAllocator::ListUnlink(uint32_t* head, uint32_t c) {
  Chunk& ch = chunks_[c];
  if (ch.left != kNone) {
    chunks_[ch.left].right = ch.right;
  } else {
    *head = ch.right;
  }
  if (ch.right != kNone) chunks_[ch.right].left = ch.left;
  ch.left = ch.right = kNone;
}

void BFCAllocator::Park(uint32_t c) {
  chunks_[c].bin = kParked;
  ListPush(&parked_, c);
  ++parked_count_;
  parked_max_ = std::max(parked_max_, chunks_[c].size);
}

uint32_t BFCAllocator::FindParkedLocked(uint64_t size) {
  if (size > parked_max_) return kNone;  // no walk: nothing parked is that large
  uint32_t best = kNone;
  uint64_t largest = 0;
  for (uint32_t n = parked_; n != kNone; n = chunks_[n].right) {
    largest = std::max(largest, chunks_[n].size);
    if (chunks_[n].size >= size && (best == kNone || KeyLess(n, best))) best = n;
  }
  parked_max_ = largest;  // exact again (merges only lower it between walks)
  return best;
}

void BFCAllocator::PushSegment(uint32_t c, int k) {
  Chunk& ch = chunks_[c];
  ch.bin = kSegmentListed;
  ListPush(&segment_heads_[k], c);
  segment_mask_[k >> 6] |= uint64_t{1} << (k & 63);
}

int BFCAllocator::NextSegmentList(int k) const {
  for (int w = k >> 6; w < kSegmentMaskWords; ++w) {
    uint64_t m = segment_mask_[w];
    if (w == k >> 6) m &= ~uint64_t{0} << (k & 63);
    if (m != 0) return w * 64 + std::countr_zero(m);
  }
  return 0;
}

int BFCAllocator::LastSegmentList() const {
  for (int w = kSegmentMaskWords - 1; w >= 0; --w) {
    if (segment_mask_[w] != 0) return w * 64 + 63 - std::countl_zero(segment_mask_[w]);
  }
  return 0;
}

void BFCAllocator::BinRemove(uint32_t c) {
  // A tail call out of line for an indexed edge, so the common path saves no registers.
  if (ABSL_PREDICT_FALSE(chunks_[c].edges != 0)) return BinRemoveIndexed(c);
  BinRemoveFromBin(c);
}

void BFCAllocator::BinRemoveIndexed(uint32_t c) {
  EdgeIndexRemove(c);
  BinRemoveFromBin(c);
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline void BFCAllocator::BinRemoveFromBin(uint32_t c) {
  const int t = chunks_[c].bin;
  if (t == kSegmentListed) {
    Chunk& ch = chunks_[c];
    const int k = SegmentList(ch.size);
    ListUnlink(&segment_heads_[k], c);
    if (segment_heads_[k] == kNone) segment_mask_[k >> 6] &= ~(uint64_t{1} << (k & 63));
    ch.bin = -1;
    return;
  }
  if (t == kParked) {
    ListUnlink(&parked_, c);
    chunks_[c].bin = -1;
    --parked_count_;
    return;
  }
  if (t < kListTrees) {
    ListUnlink(&roots_[t], c);
    chunks_[c].bin = -1;
    if (roots_[t] == kNone) UnmarkTree(t);
    return;
  }
  // The parent link finds c's link without a walk from the root (whose records are cold when
  // a free coalesces with a neighbour).
  const uint32_t parent = chunks_[c].parent;
  uint32_t* link = parent == kNone             ? &roots_[t]
                   : chunks_[parent].left == c ? &chunks_[parent].left
                                               : &chunks_[parent].right;
  *link = TreapMerge(chunks_[c].left, chunks_[c].right, parent);
  chunks_[c].left = chunks_[c].right = chunks_[c].parent = kNone;
  chunks_[c].bin = -1;
  if (roots_[t] == kNone) UnmarkTree(t);
}

template <class Fn>
bool BFCAllocator::ForEachInTree(int t, Fn fn) const {
  size_t visited = 0;
  if (t < kListTrees) {
    for (uint32_t n = roots_[t]; n != kNone; n = chunks_[n].right) {
      if (n >= chunks_.size() || ++visited > chunks_.size()) return false;
      fn(n);
    }
    return true;
  }
  std::vector<uint32_t> stack;
  uint32_t n = roots_[t];
  while (n != kNone || !stack.empty()) {
    while (n != kNone) {
      if (n >= chunks_.size() || stack.size() > chunks_.size()) return false;
      stack.push_back(n);
      n = chunks_[n].left;
    }
    n = stack.back();
    stack.pop_back();
    if (++visited > chunks_.size()) return false;
    fn(n);
    n = chunks_[n].right;
  }
  return true;
}

uint32_t BFCAllocator::FindInTreesLocked(uint64_t size, int base) const {
  const int end = base + kNumTrees;
  const int t = base + TreeFor(size);
  int i = NextTree(t);
  if (i < 0 || i >= end) return kNone;
  if (i == t) {
    // The smallest (size, address) that fits in the request's own tree. A list holds one size:
    // its head fits unless the request is not a whole number of 256 bytes (callers round; this
    // keeps the fit exact anyway).
    uint32_t best = kNone;
    if (t < kListTrees) {
      if (chunks_[roots_[t]].size >= size) best = roots_[t];
    } else {
      for (uint32_t n = roots_[t]; n != kNone;) {
        if (chunks_[n].size >= size) {
          best = n;
          n = chunks_[n].left;
        } else {
          n = chunks_[n].right;
        }
      }
    }
    if (best != kNone) return best;
    if (t + 1 >= end || (i = NextTree(t + 1)) < 0 || i >= end) return kNone;
  }
  // Every chunk of a higher tree fits: the best is its first (a list's head).
  uint32_t n = roots_[i];
  if (i < kListTrees) return n;
  while (chunks_[n].left != kNone) n = chunks_[n].left;
  return n;
}

uint32_t BFCAllocator::FindSegmentLocked(uint64_t size, uint64_t max_size) const {
  uint32_t best = kNone;
  if (const uint64_t pages = size / page_ + (size % page_ != 0); pages <= kSegmentLists) {
    if (const int k = NextSegmentList(static_cast<int>(std::max<uint64_t>(pages, 1))); k != 0) {
      best = segment_heads_[k];
    }
  }
  if (const uint32_t t = FindInTreesLocked(size, kNumTrees);
      t != kNone && (best == kNone || chunks_[t].size < chunks_[best].size)) {
    best = t;
  }
  return best != kNone && chunks_[best].size <= max_size ? best : kNone;
}

uint32_t BFCAllocator::LargestSegmentLocked() const {
  uint32_t best = LastInTreesLocked(kNumTrees);
  if (const int k = LastSegmentList();
      k != 0 && (best == kNone || chunks_[segment_heads_[k]].size > chunks_[best].size)) {
    best = segment_heads_[k];
  }
  return best;
}

uint32_t BFCAllocator::LastInTreesLocked(int base) const {
  const int i = LastTreeBelow(base + kNumTrees);
  if (i < base) return kNone;
  if (i < kListTrees) return roots_[i];
  uint32_t n = roots_[i];
  while (chunks_[n].right != kNone) n = chunks_[n].right;
  return n;
}

uint64_t BFCAllocator::LargestFreeLocked() const {
  uint64_t largest = 0;
  for (uint32_t n : {LastInTreesLocked(0), LargestSegmentLocked()}) {
    if (n != kNone) largest = std::max(largest, chunks_[n].size);
  }
  return largest;
}

void BFCAllocator::SendEventLocked(AllocatorEventKind kind, uint64_t ptr, uint64_t bytes,
                                   bool forward) const {
  const AllocatorEvent e{kind,
                         ptr,
                         bytes,
                         counters_.stats.bytes_in_use,
                         counters_.stats.bytes_reserved,
                         LargestFreeLocked()};
  if (forward) {
    BFCUsageMirror& m = *options_.usage_mirror;
    m.largest_free.store(e.largest_free, std::memory_order_relaxed);
    if (m.events != nullptr) m.events->OnAllocatorEvent(options_.name, e);
  }
  Notify(options_.name, e);
}

// ---------------------------------------------------------------------------------------------
// Regions.

uint32_t BFCAllocator::InsertRegionLocked(uint64_t ptr, uint64_t size, bool segment) {
  const uint32_t c = NewChunk();
  chunks_[c].ptr = ptr;
  chunks_[c].size = size;
  chunks_[c].segment = segment;
  Region r{ptr, size, c};
  regions_.insert(std::upper_bound(regions_.begin(), regions_.end(), r,
                                   [](const Region& a, const Region& b) { return a.ptr < b.ptr; }),
                  r);
  return c;
}

absl::StatusOr<uint32_t> BFCAllocator::AddRegionLocked(uint64_t size, bool segment) {
  absl::StatusOr<void*> p = sub_allocator_->Alloc(size, kMinAllocationSize);
  if (!p.ok()) return p.status();
  const uint64_t ptr = reinterpret_cast<uint64_t>(*p);
  const uint32_t c = InsertRegionLocked(ptr, size, segment);
  if (!segment) {
    BinInsert(c);
    NoteEmptyRegionLocked(c);  // until the request that grew the pool carves it
  }
  counters_.OnMap(size);
  NotifyLocked(AllocatorEventKind::kMap, ptr, size);
  return c;
}

absl::Status BFCAllocator::GrowLocked(uint64_t need) {
  const uint64_t available = AvailableLocked();
  if (need > available) {
    return absl::ResourceExhaustedError(
        absl::StrCat("growing by ", FormatBytes(need), " would pass the limit"));
  }
  uint64_t step = next_region_bytes_;
  if (options_.max_region_bytes != 0) {
    step = std::min(step, std::max(RoundedBytes(options_.max_region_bytes), kMinAllocationSize));
  }
  uint64_t size = std::min(std::max(step, need), available);
  while (true) {
    absl::Status s = AddRegionLocked(size).status();
    if (s.ok()) break;
    if (!absl::IsResourceExhausted(s) || size == need) {
      return absl::Status(
          s.code(), absl::StrCat("the sub-allocator (", sub_allocator_->name(),
                                 ") refused a region of ", FormatBytes(size), ": ", s.message()));
    }
    size = std::max(need, RoundedBytes(size / 2));  // back off towards what is needed
  }
  // Doubling stops at the limit; the halving test keeps it from wrapping to 0 near 2^64.
  while (next_region_bytes_ <= size && next_region_bytes_ < limit_ &&
         next_region_bytes_ <= UINT64_MAX / 2) {
    next_region_bytes_ *= 2;
  }
  return absl::OkStatus();
}

void BFCAllocator::ReleaseRegionLocked(size_t i) {
  if (!freed_views_.empty()) FlushViewsLocked();  // a view may map the region's pages
  const Region r = regions_[i];
  ReleaseRegionMemoryLocked(r);
  regions_.erase(regions_.begin() + static_cast<ptrdiff_t>(i));
}

void BFCAllocator::SynchronizeOrReport(uint64_t slots) {
  if (slots == 0) return;
  absl::Status synced = SynchronizeSlots(slots);
  if (!synced.ok()) ReportAllocatorError(absl::StrCat("vgpu: ", name(), ": ", synced.ToString()));
}

void BFCAllocator::ReleaseRegionMemoryLocked(const Region& r) {
  const Chunk& c = chunks_[r.first];
  // Memory going back to the device must be out of every stream's use: the free chunk's mask
  // holds the streams of every block that was in it.
  SynchronizeOrReport(c.streams);
  if (c.bin != -1) BinRemove(r.first);
  DeleteChunk(r.first);
  absl::Status s = sub_allocator_->Free(reinterpret_cast<void*>(r.ptr), r.size);
  // A region the sub-allocator will not take back is dropped anyway: leaking it is safer than
  // handing out memory in an unknown state.
  if (!s.ok()) ReportAllocatorError(absl::StrCat("vgpu: ", name(), ": ", s.ToString()));
  counters_.OnUnmap(r.size);
  if (top_ptr_ >= r.ptr && top_ptr_ - r.ptr < r.size) {  // it was in this region
    top_ptr_ = 0;
    below_n_ = 0;
  }
  NotifyLocked(AllocatorEventKind::kUnmap, r.ptr, r.size);
}

uint64_t BFCAllocator::ReleaseEmptyRegionsLocked(uint64_t keep_bytes, uint64_t max_bytes) {
  // Gathered segments are not the device's regions: the cached ones go back to their places.
  if (!gathered_.empty()) ReturnCachedGatheredLocked();
  if (!freed_views_.empty()) FlushViewsLocked();  // a view may map the regions' pages
  uint64_t released = 0, kept = 0;
  size_t out = 0;  // regions_[0, out) are the ones kept so far
  for (size_t i = 0; i < regions_.size(); ++i) {
    if (released >= max_bytes) {  // the rest is kept: moved down over the released ones, unread
      if (out != i) std::copy(regions_.begin() + i, regions_.end(), regions_.begin() + out);
      out += regions_.size() - i;
      break;
    }
    const Region r = regions_[i];
    const Chunk& c = chunks_[r.first];
    // Kept: in use, or within keep_bytes.
    if (c.in_use || c.next != kNone || kept + r.size <= keep_bytes) {
      if (!c.in_use && c.next == kNone) kept += r.size;
      regions_[out++] = r;
      continue;
    }
    released += r.size;
    ReleaseRegionMemoryLocked(r);
  }
  regions_.resize(out);
  return released;
}

size_t BFCAllocator::RegionOf(uint64_t ptr) const {
  auto it = std::lower_bound(regions_.begin(), regions_.end(), ptr,
                             [](const Region& r, uint64_t p) { return r.ptr < p; });
  return static_cast<size_t>(it - regions_.begin());
}

bool BFCAllocator::ReleaseSegmentsLocked(uint64_t need) {
  auto release = [&](uint32_t c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ReleaseRegionLocked(RegionOf(chunks_[c].ptr));
  };
  if (need <= AvailableLocked()) return true;
  // The smallest cached segment that is enough alone.
  const uint32_t one = FindSegmentLocked(need - AvailableLocked(), UINT64_MAX);
  if (one != kNone) {
    release(one);
    return true;
  }
  for (uint32_t n; need > AvailableLocked() && (n = LargestSegmentLocked()) != kNone;) release(n);
  return need <= AvailableLocked();
}

bool BFCAllocator::HasFreeChunk(uint64_t bytes) const {
  SpinLockGuard l(mu_);
  return FindChunkLocked(bytes) != kNone;
}

absl::StatusOr<uint64_t> BFCAllocator::ReleaseEmptyRegions(uint64_t keep_bytes,
                                                           uint64_t max_bytes) {
  SpinLockGuard l(mu_);
  return ReleaseEmptyRegionsLocked(keep_bytes, max_bytes);
}

void BFCAllocator::DoResetPeakStats() {
  SpinLockGuard l(mu_);
  counters_.ResetPeaks();
}

absl::Status BFCAllocator::DoReleaseCachedMemory() {
  if (!options_.allow_growth) {
    // The one region stays; gathered pages go back to it.
    SpinLockGuard l(mu_);
    ReturnCachedGatheredLocked();
    return absl::OkStatus();
  }
  return ReleaseEmptyRegions().status();
}

uint32_t BFCAllocator::TopChunkLocked() {
  if (top_none_) return kNone;  // the last walk found none, and TopNote has seen none since
  if (top_ptr_ != 0 && top_ < chunks_.size() && chunks_[top_].ptr == top_ptr_) {
    if (TopValid(top_, top_ptr_)) return top_;
    // Taken or shrunk: the tops it replaced, newest first.
    for (; below_n_ > 0; --below_n_) {
      const auto [b, ptr] = below_[(below_n_ - 1) % kTopBelow];
      if (b < chunks_.size() && TopValid(b, ptr)) {
        top_ = b;
        top_ptr_ = ptr;
        --below_n_;
        return b;
      }
    }
    // Nothing above it qualifies (TopNote), so walk down from it, a bounded
    // number of chunks (past small blocks gathered below it); then the request takes its best
    // fit, and the walk goes on from where it stopped next time.
    int steps = 0;
    for (uint32_t x = chunks_[top_].prev; x != kNone; x = chunks_[x].prev) {
      if (TopValid(x, chunks_[x].ptr)) {
        top_ = x;
        top_ptr_ = chunks_[x].ptr;
        return x;
      }
      if (++steps == kTopWalk) {
        top_ = x;
        top_ptr_ = chunks_[x].ptr;
        return kNone;
      }
    }
  }
  // Unknown (or nothing below it in its region): the highest over every region.
  top_ = kNone;
  top_ptr_ = 0;
  for (const Region& r : regions_) {
    if (r.ptr + r.size <= top_ptr_ || chunks_[r.first].segment) continue;
    uint32_t x = r.first;
    while (chunks_[x].next != kNone) x = chunks_[x].next;
    for (; x != kNone && chunks_[x].ptr > top_ptr_; x = chunks_[x].prev) {
      if (TopValid(x, chunks_[x].ptr)) {
        top_ = x;
        top_ptr_ = chunks_[x].ptr;
        break;
      }
    }
  }
  top_none_ = top_ == kNone;
  return top_;
}

// ---------------------------------------------------------------------------------------------
// Allocate / free.

void* BFCAllocator::CarveLocked(uint32_t c, uint64_t rounded, const AllocationRequest& request,
                                uint64_t* wait_for, bool high_end) {
  const uint64_t alignment = request.alignment;
  BinRemove(c);
  if (alignment > kMinAllocationSize && AlignUp(chunks_[c].ptr, alignment) != chunks_[c].ptr) {
    uint32_t n = SplitChunk(c, AlignUp(chunks_[c].ptr, alignment) - chunks_[c].ptr);
    BinInsert(c);  // the padding stays free; its lower neighbour is in use (no free pairs)
    c = n;
  }
  const uint64_t remainder = chunks_[c].size - rounded;
  if (remainder < std::max<uint64_t>(options_.min_split_bytes, kMinAllocationSize)) {
    // Too small to keep track of: stays inside the allocated chunk.
  } else if (remainder < options_.min_split_fraction * rounded) {
    // A sliver: kept inside, or parked after the block (free, out of the trees).
    if (options_.park_slivers) Park(SplitChunk(c, rounded));
  } else {
    if ((high_end || rounded <= options_.small_request_bytes) && alignment <= kMinAllocationSize) {
      // Small: take the high end, leave the low part free where it was.
      uint32_t n = SplitChunk(c, remainder);
      BinInsert(c);
      c = n;
    } else {
      BinInsert(SplitChunk(c, rounded));
    }
  }
  return HandOutLocked(c, request, wait_for);
}

void* BFCAllocator::HandOutLocked(uint32_t c, const AllocationRequest& request,
                                  uint64_t* wait_for) {
  Chunk& ch = chunks_[c];
  ch.in_use = true;
  ch.requested = request.bytes;
  *wait_for = ch.streams;  // the streams that used it before (the base waits for others')
  ch.streams = SlotBit(request.slot);
  LiveInsert(c);
  counters_.OnAlloc(request.bytes, ch.size);
  NotifyLocked(AllocatorEventKind::kAlloc, ch.ptr, request.bytes);
  return reinterpret_cast<void*>(ch.ptr);
}

absl::StatusOr<void*> BFCAllocator::AllocateLocked(const AllocationRequest& request,
                                                   uint64_t* wait_for) {
  const uint64_t bytes = request.bytes, alignment = request.alignment;
  if (!init_status_.ok()) return init_status_;
  if (bytes > limit_) {
    // The message names the rounded request; near 2^64 rounding would wrap, so saturate.
    const uint64_t rounded =
        bytes > UINT64_MAX - (kMinAllocationSize - 1) ? UINT64_MAX : RoundedBytes(bytes);
    return OomErrorLocked(bytes, rounded, "the request is over the limit");
  }
  const uint64_t rounded = RoundedBytes(bytes);
  const uint64_t pad = alignment > kMinAllocationSize ? alignment - kMinAllocationSize : 0;
  if (pad > UINT64_MAX - rounded) {  // an absurd alignment: refuse before the sum wraps
    return OomErrorLocked(bytes, rounded, "the request and its alignment are over the limit");
  }
  const uint64_t need = rounded + pad;
  if (options_.allow_growth && options_.segment_bytes != 0 && rounded >= options_.segment_bytes &&
      pad == 0 && SegmentWasteOk(rounded)) {
    return AllocateSegmentLocked(request, rounded, wait_for);
  }
  uint32_t c = FindChunkLocked(need);
  if (rounded <= options_.small_from_top_bytes && pad == 0 &&
      (c == kNone || chunks_[c].size >= std::max(options_.small_from_top_bytes,
                                                 options_.small_from_top_hole_bytes))) {
    // No small hole fits: the pool's top chunk (see BFCOptions::small_from_top_bytes).
    if (const uint32_t top = TopChunkLocked(); top != kNone) {
      return CarveLocked(top, rounded, request, wait_for, /*high_end=*/true);
    }
  }
  if (c == kNone && parked_ != kNone) c = FindParkedLocked(need);  // before growing
  // Edge views in best fit: a free end and a free start that leave less beside the block than
  // the best hole does, or than a new region would (BFCOptions::edge_views_in_best_fit).
  if (ABSL_PREDICT_FALSE(edge_index_)) {
    if (edge_best_fit_flag_->load(std::memory_order_relaxed)) {
      if (!edge_live_) BuildEdgeIndexLocked();
      edge_idle_allocs_ = 0;
      if (pad == 0 && rounded >= kEdgeBestFitMinBytes &&
          (c == kNone || chunks_[c].size - rounded >= kEdgeBestFitSlack)) {
        absl::StatusOr<void*> p = AllocateEdgeViewLocked(
            request, rounded, wait_for, c == kNone ? UINT64_MAX : chunks_[c].size - rounded,
            kEdgeBestFitTries);
        if (p.ok()) return p;  // else (none leaves less, or no view could be mapped) as before
      }
    } else if (edge_live_ && ++edge_idle_allocs_ >= kEdgeIndexIdleAllocs) {
      DropEdgeIndexLocked();
    }
  }
  if (c != kNone) return CarveLocked(c, rounded, request, wait_for);

  std::string why = "no free chunk is large enough";
  if (gather_page_ != 0 && alignment <= gather_page_) {
    absl::StatusOr<void*> p = AllocateGatheredLocked(request, rounded, wait_for);
    if (p.ok()) return p;
    absl::StrAppend(&why, "; ", p.status().message());
  }
  if (options_.allow_growth) {
    if (!freed_views_.empty()) FlushViewsLocked();
    absl::Status s = GrowLocked(need);
    if (!s.ok() && options_.garbage_collection && ReleaseEmptyRegionsLocked() > 0) {
      s = GrowLocked(need);
    }
    if (s.ok()) {
      c = FindChunkLocked(need);
      if (c != kNone) return CarveLocked(c, rounded, request, wait_for);
    } else {
      why = std::string(s.message());
      if (options_.edge_view_page_bytes != 0 && pad == 0) {
        absl::StatusOr<void*> p = AllocateEdgeViewLocked(request, rounded, wait_for);
        if (p.ok()) return p;
        if (!absl::IsNotFound(p.status())) absl::StrAppend(&why, "; ", p.status().message());
      }
    }
  }
  return OomErrorLocked(bytes, rounded, why);
}

absl::StatusOr<void*> BFCAllocator::AllocateEdgeViewLocked(const AllocationRequest& request,
                                                           uint64_t rounded, uint64_t* wait_for,
                                                           uint64_t over_below, uint64_t tries) {
  const uint64_t page = options_.edge_view_page_bytes;
  // Two parts of at least kMinAllocationSize each, within a page each.
  if (rounded > 2 * page || rounded < 2 * kMinAllocationSize) {
    return absl::NotFoundError("not two parts' size");
  }
  struct Edge {
    uint64_t bytes;  // the part within the one page
    uint32_t chunk;
  };
  Edge low{}, high{};
  if (edge_live_) {
    if (!FindEdgePairLocked(rounded, over_below, tries, &low.chunk, &low.bytes, &high.chunk,
                            &high.bytes)) {
      return absl::NotFoundError(
          absl::StrCat("no free chunk's end and another's start add up to ", FormatBytes(rounded),
                       over_below == UINT64_MAX ? "" : " with less to spare than the best hole"));
    }
  } else {
    // The free chunks (in the shared regions' trees) that end on a page boundary (their last
    // page's part can begin a block) and those that start on one (their first page's part can
    // end it). A walk over every chunk: this runs only where a request would otherwise fail.
    std::vector<Edge> lows, highs;
    for (const Region& r : regions_) {
      if (chunks_[r.first].segment) continue;
      for (uint32_t x = r.first; x != kNone; x = chunks_[x].next) {
        const Chunk& ch = chunks_[x];
        if (ch.in_use || ch.bin < 0 || ch.bin >= kNumTrees) continue;  // parked slivers too
        if ((ch.ptr + ch.size) % page == 0) lows.push_back({std::min(ch.size, page), x});
        if (ch.ptr % page == 0) highs.push_back({std::min(ch.size, page), x});
      }
    }
    std::sort(highs.begin(), highs.end(),
              [](const Edge& a, const Edge& b) { return a.bytes < b.bytes; });
    // The pair that leaves the least free at the two edges: the low part is all of the first
    // chunk's edge (at most the request less 256 bytes), the high one the smallest that is
    // enough.
    uint64_t best = UINT64_MAX;
    for (const Edge& l : lows) {
      const uint64_t take = std::min(l.bytes, rounded - kMinAllocationSize);
      auto it = std::lower_bound(highs.begin(), highs.end(), rounded - take,
                                 [](const Edge& e, uint64_t v) { return e.bytes < v; });
      if (it != highs.end() && it->chunk == l.chunk) ++it;
      if (it == highs.end()) continue;
      if (l.bytes + it->bytes < best) {
        best = l.bytes + it->bytes;
        low = l;
        high = *it;
      }
    }
    if (best == UINT64_MAX || best - rounded >= over_below) {
      return absl::NotFoundError(
          absl::StrCat("no free chunk's end and another's start add up to ", FormatBytes(rounded)));
    }
  }
  const uint64_t low_bytes = std::min(low.bytes, rounded - kMinAllocationSize);
  const uint64_t high_bytes = rounded - low_bytes;
  const uint64_t low_end = chunks_[low.chunk].ptr + chunks_[low.chunk].size;
  VGPU_ASSIGN_OR_RETURN(
      void* va, sub_allocator_->MapEdgeView(reinterpret_cast<void*>(low_end - page),
                                            reinterpret_cast<void*>(chunks_[high.chunk].ptr)));
  // The parts: the low chunk's top low_bytes, the high chunk's first high_bytes; the rest of
  // each stays free where it is.
  uint32_t x = low.chunk;
  BinRemove(x);
  if (chunks_[x].size > low_bytes) {
    const uint32_t n = SplitChunk(x, chunks_[x].size - low_bytes);
    BinInsert(x);
    x = n;
  }
  uint32_t y = high.chunk;
  BinRemove(y);
  if (chunks_[y].size > high_bytes) BinInsert(SplitChunk(y, high_bytes));
  const uint64_t streams = chunks_[x].streams | chunks_[y].streams;
  for (uint32_t part : {x, y}) {
    chunks_[part].in_use = true;
    chunks_[part].lent = true;
  }
  const uint32_t c = NewChunk();
  Chunk& ch = chunks_[c];
  ch.ptr = reinterpret_cast<uint64_t>(va) + page - low_bytes;
  ch.size = rounded;
  ch.view = true;
  ch.streams = streams;  // the block waits for the parts' earlier streams (HandOutLocked)
  views_.emplace(c, EdgeView{reinterpret_cast<uint64_t>(va), x, y});
  ++views_made_;
  return HandOutLocked(c, request, wait_for);
}

void BFCAllocator::FreeViewLocked(uint32_t c) {
  auto it = views_.find(c);
  const uint64_t streams = chunks_[c].streams;
  for (uint32_t part : {it->second.low, it->second.high}) {
    Chunk& ch = chunks_[part];
    ch.in_use = false;
    ch.lent = false;
    ch.streams |= streams;  // reuse on another stream waits for the view's work
    CoalesceAndBinLocked(part);
  }
  freed_views_.push_back({it->second.va, streams});
  views_.erase(it);
  DeleteChunk(c);
}

void BFCAllocator::FlushViewsLocked() {
  for (const FreedView& v : freed_views_) {
    SynchronizeOrReport(v.streams);
    absl::Status s = sub_allocator_->UnmapEdgeView(reinterpret_cast<void*>(v.va));
    if (!s.ok()) ReportAllocatorError(absl::StrCat("vgpu: ", name(), ": ", s.ToString()));
  }
  freed_views_.clear();
}

absl::StatusOr<void*> BFCAllocator::AllocateGatheredLocked(const AllocationRequest& request,
                                                           uint64_t rounded, uint64_t* wait_for) {
  const uint64_t page = gather_page_;
  // A cached gathered segment that fits within an eighth (growth's segments' rule).
  const uint64_t slack = std::max(page, rounded / 8);
  uint32_t c = FindSegmentLocked(rounded, rounded + slack);  // rounded <= limit_: no wrap
  if (c != kNone) {
    BinRemove(c);
    return HandOutLocked(c, request, wait_for);
  }
  // The cached ones go back to their places first: a free chunk may fit then. (Gathering from
  // the free pages while keeping the cache costs 2-3x the page maps on random_mixed near its
  // minimum limit: the cache holds the wrong sizes; docs/allocator.md.)
  if (ReturnCachedGatheredLocked()) {
    c = FindChunkLocked(rounded);
    if (c != kNone) return CarveLocked(c, rounded, request, wait_for);
  }
  // The whole pages inside free chunks of the shared region (growth off: the one region that
  // is not a gathered segment), from the smallest chunks up: those are the holes no large
  // request fits, and the large free chunks stay whole for the requests that do.
  const Region* region = nullptr;
  for (const Region& r : regions_) {
    if (!chunks_[r.first].segment) region = &r;
  }
  if (region == nullptr) return absl::NotFoundError("no region to gather pages from");
  const uint64_t base = region->ptr;
  const uint64_t want = rounded > UINT64_MAX - (page - 1) ? rounded : AlignUp(rounded, page);
  struct Piece {
    uint32_t chunk;
    uint64_t lo, hi;  // whole pages, absolute addresses
  };
  std::vector<Piece> pieces;
  uint64_t free_pages = 0;
  for (uint32_t x = region->first; x != kNone; x = chunks_[x].next) {
    const Chunk& ch = chunks_[x];
    if (ch.in_use || ch.bin < 0) continue;  // in use, lent, or a parked sliver
    const uint64_t lo = base + AlignUp(ch.ptr - base, page);
    const uint64_t hi = base + (ch.ptr + ch.size - base) / page * page;
    if (hi <= lo) continue;
    pieces.push_back({x, lo, hi});
    free_pages += hi - lo;
  }
  if (free_pages < want) {
    return absl::NotFoundError(absl::StrCat("the free chunks hold ", FormatBytes(free_pages),
                                            " of whole ", FormatBytes(page), " pages to gather"));
  }
  std::stable_sort(pieces.begin(), pieces.end(),
                   [&](const Piece& a, const Piece& b) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                     return chunks_[a.chunk].size < chunks_[b.chunk].size;
                   });
  uint64_t taken = 0;
  size_t used = 0;
  while (taken < want) {
    Piece& p = pieces[used++];
    p.hi = std::min(p.hi, p.lo + (want - taken));
    taken += p.hi - p.lo;
  }
  pieces.resize(used);
  std::sort(pieces.begin(), pieces.end(),
            [](const Piece& a, const Piece& b) { return a.lo < b.lo; });
  Gathered g;
  g.region = base;
  uint64_t streams = 0;
  for (const Piece& p : pieces) {
    g.runs.push_back({p.lo - base, p.hi - p.lo});
    streams |= chunks_[p.chunk].streams;
  }
  // The pages leave their addresses: the streams that used them must be done with them.
  if (streams != 0) VGPU_RETURN_IF_ERROR(SynchronizeSlots(streams));
  VGPU_ASSIGN_OR_RETURN(void* va,
                        sub_allocator_->GatherPages(reinterpret_cast<void*>(base), g.runs));
  for (const Piece& p : pieces) {
    uint32_t x = p.chunk;
    BinRemove(x);
    if (p.lo > chunks_[x].ptr) {
      const uint32_t n = SplitChunk(x, p.lo - chunks_[x].ptr);
      BinInsert(x);  // the part below stays free
      x = n;
    }
    if (chunks_[x].ptr + chunks_[x].size > p.hi) BinInsert(SplitChunk(x, p.hi - chunks_[x].ptr));
    Chunk& ch = chunks_[x];
    ch.in_use = true;
    ch.lent = true;
    ch.streams = 0;
    g.lent.push_back(x);
  }
  const uint64_t ptr = reinterpret_cast<uint64_t>(va);
  c = InsertRegionLocked(ptr, want, /*segment=*/true);
  // On a card: a cuMemMap per page at the new range, a cuMemUnmap per page where they were.
  counters_.stats.map_calls += want / page;
  counters_.stats.unmap_calls += want / page;
  gathered_.emplace(ptr, std::move(g));
  ++gathers_;
  return HandOutLocked(c, request, wait_for);
}

bool BFCAllocator::ReturnCachedGatheredLocked() {
  std::vector<uint32_t> cached;
  for (const auto& [va, g] : gathered_) {
    const uint32_t c = regions_[RegionOf(va)].first;
    if (!chunks_[c].in_use) cached.push_back(c);
  }
  size_t before = gathered_.size();
  for (uint32_t c : cached) ReturnGatheredLocked(c);
  return gathered_.size() < before;
}

void BFCAllocator::ReturnGatheredLocked(uint32_t c) {
  const uint64_t va = chunks_[c].ptr;
  auto it = gathered_.find(va);
  SynchronizeOrReport(chunks_[c].streams);
  absl::Status s = sub_allocator_->ReturnPages(
      reinterpret_cast<void*>(va), reinterpret_cast<void*>(it->second.region), it->second.runs);
  if (!s.ok()) {
    // The pages stay where they are (the segment stays cached): nothing is lost.
    ReportAllocatorError(absl::StrCat("vgpu: ", name(), ": ", s.ToString()));
    return;
  }
  counters_.stats.map_calls += chunks_[c].size / gather_page_;  // mapped back page by page
  ++counters_.stats.unmap_calls;                                // the range at once
  BinRemove(c);
  DeleteChunk(c);
  regions_.erase(regions_.begin() + static_cast<ptrdiff_t>(RegionOf(va)));
  for (uint32_t x : it->second.lent) {
    Chunk& ch = chunks_[x];
    ch.in_use = false;
    ch.lent = false;
    CoalesceAndBinLocked(x);
  }
  gathered_.erase(it);
}

absl::StatusOr<void*> BFCAllocator::AllocateSegmentLocked(const AllocationRequest& request,
                                                          uint64_t rounded, uint64_t* wait_for) {
  const uint64_t slack = std::max(page_, rounded / 8);
  uint32_t c =
      FindSegmentLocked(rounded, rounded > UINT64_MAX - slack ? UINT64_MAX : rounded + slack);
  if (c != kNone) {
    BinRemove(c);
    return HandOutLocked(c, request, wait_for);
  }
  // A new segment, a whole number of pages; near the limit just what is asked.
  uint64_t size =
      rounded > UINT64_MAX - (page_ - 1) ? rounded : (rounded + page_ - 1) / page_ * page_;
  if (size > limit_) size = rounded;
  std::string why;
  bool fits = size <= AvailableLocked();
  if (!fits && options_.garbage_collection) {
    fits = ReleaseSegmentsLocked(size) ||
           (ReleaseEmptyRegionsLocked() > 0 && size <= AvailableLocked());
  }
  if (fits) {
    absl::StatusOr<uint32_t> added = AddRegionLocked(size, /*segment=*/true);
    // The device may refuse before the limit (other devices or processes on the card): what
    // the cache holds goes back, and the request tries once more.
    if (!added.ok() && absl::IsResourceExhausted(added.status()) && options_.garbage_collection &&
        ReleaseEmptyRegionsLocked() > 0) {
      added = AddRegionLocked(size, /*segment=*/true);
    }
    if (added.ok()) return HandOutLocked(*added, request, wait_for);
    why = absl::StrCat("the sub-allocator (", sub_allocator_->name(), ") refused a region of ",
                       FormatBytes(size), ": ", added.status().message());
  } else {
    why = absl::StrCat("a region of ", FormatBytes(size), " would pass the limit");
  }
  // Rather than fail: a cached segment too large to be a good fit, or a shared region's chunk.
  c = FindSegmentLocked(rounded, UINT64_MAX);
  if (c != kNone) {
    BinRemove(c);
    return HandOutLocked(c, request, wait_for);
  }
  c = FindChunkLocked(rounded);
  if (c != kNone) return CarveLocked(c, rounded, request, wait_for);
  return OomErrorLocked(request.bytes, rounded, why);
}

absl::StatusOr<void*> BFCAllocator::DoAllocate(const AllocationRequest& request,
                                               uint64_t* wait_for) {
  SpinLockGuard l(mu_);
  return AllocateLocked(request, wait_for);
}

absl::Status BFCAllocator::DoRecordStream(void* ptr, int slot) {
  SpinLockGuard l(mu_);
  const uint32_t c = LiveFind(reinterpret_cast<uint64_t>(ptr));
  if (c == kNone) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": RecordStream of ",
                                                   P(reinterpret_cast<uint64_t>(ptr)),
                                                   ", which is not a live allocation here"));
  }
  chunks_[c].streams |= SlotBit(slot);
  return absl::OkStatus();
}

absl::Status BFCAllocator::DoDeallocate(void* ptr) {
  bool live = false;
  absl::Status s = DeallocateIfLive(ptr, &live);
  if (ABSL_PREDICT_FALSE(!live)) return NotLiveError(ptr);
  return s;
}

// Out of line: the message's string building would give every free a large frame.
absl::Status BFCAllocator::NotLiveError(const void* ptr) const {
  return absl::InvalidArgumentError(
      absl::StrCat(name(), ": ", P(reinterpret_cast<uint64_t>(ptr)),
                   " was not allocated by this allocator, or was already freed"));
}

absl::Status BFCAllocator::DeallocateIfLive(void* ptr, bool* live) {
  SpinLockGuard l(mu_);
  const uint32_t c = LiveErase(reinterpret_cast<uint64_t>(ptr));
  *live = c != kNone;
  if (!*live) return absl::OkStatus();
  Chunk& ch = chunks_[c];
  uint64_t requested = ch.requested;
  ch.in_use = false;
  ch.requested = 0;
  counters_.OnFree(ch.size);
  if (ABSL_PREDICT_FALSE(ch.view)) {
    FreeViewLocked(c);
  } else {
    if (reclaim_flag_->load(std::memory_order_relaxed)) ReclaimSliverLocked(c);
    CoalesceAndBinLocked(c);
  }
  NotifyLocked(AllocatorEventKind::kFree, reinterpret_cast<uint64_t>(ptr), requested);
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> BFCAllocator::AllocatedSize(const void* ptr) const {
  SpinLockGuard l(mu_);
  const uint32_t c = LiveFind(reinterpret_cast<uint64_t>(ptr));
  if (c == kNone) {
    return absl::NotFoundError(absl::StrCat(name(), ": ", P(reinterpret_cast<uint64_t>(ptr)),
                                            " is not a live allocation"));
  }
  return chunks_[c].size;
}

absl::Status BFCAllocator::OomErrorLocked(uint64_t bytes, uint64_t rounded, absl::string_view why) {
  counters_.OnOom();
  NotifyLocked(AllocatorEventKind::kOom, 0, bytes);
  AllocatorStats s = StatsLocked();
  uint64_t free_in_pool = s.bytes_reserved - s.bytes_in_use;
  std::string hint;
  if (free_in_pool + (limit_ - s.bytes_reserved) >= rounded) {
    hint = absl::StrCat("enough memory is free in total (", FormatBytes(free_in_pool),
                        " in the pool), but it is fragmented; try VGPU_ALLOCATOR=vmm, which "
                        "cannot strand free memory between live blocks, or raise the limit");
  } else {
    hint = "raise the device's memory limit, free buffers sooner";
    if (!options_.allow_growth)
      absl::StrAppend(&hint, ", ");
    else
      absl::StrAppend(&hint, " ");
    absl::StrAppend(&hint, "or try VGPU_ALLOCATOR=vmm");
  }
  return OutOfMemoryError(
      {bytes, absl::StrCat(rounded), why,
       absl::StrFormat(
           "limit %s, in use %s, reserved %s, largest free block %s, fragmentation %.3f",
           FormatBytes(limit_), FormatBytes(s.bytes_in_use), FormatBytes(s.bytes_reserved),
           FormatBytes(s.largest_free_block), s.fragmentation),
       hint});
}

// ---------------------------------------------------------------------------------------------
// Stats, observers, diagnostics.

AllocatorStats BFCAllocator::StatsLocked() const {
  AllocatorStats s = counters_.stats;
  s.largest_free_block = LargestFreeLocked();
  uint64_t free_in_pool = s.bytes_reserved - s.bytes_in_use;
  s.fragmentation =
      free_in_pool == 0 ? 0.0 : 1.0 - static_cast<double>(s.largest_free_block) / free_in_pool;
  return s;
}

AllocatorStats BFCAllocator::DoStats() const {
  SpinLockGuard l(mu_);
  return StatsLocked();
}

std::string BFCAllocator::DumpMemoryLog() const {
  SpinLockGuard l(mu_);
  std::string out = absl::StrCat(
      "BFC allocator ", name(), " (sub-allocator ", sub_allocator_->name(), ", growth ",
      options_.allow_growth ? "on" : "off", ")\n  ", StatsLocked().ToString(), "\n");
  absl::StrAppend(&out, "Bins (free chunks):\n");
  for (int b = 0; b < kNumBins; ++b) {
    uint64_t count = 0, total = 0, largest = 0;
    for (int t = b * kSubBins; t < (b + 1) * kSubBins; ++t) {
      // Called under mu_ (held above); the analysis does not follow lambdas.
      ForEachInTree(t, [&](uint32_t c) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        ++count;
        total += chunks_[c].size;
        largest = std::max(largest, chunks_[c].size);
      });
    }
    if (count == 0) continue;
    absl::StrAppend(
        &out, "  bin ", b, " [", FormatBytes(uint64_t{256} << b),
        b == kNumBins - 1 ? ", inf)"
                          : absl::StrCat(", ", FormatBytes(uint64_t{256} << (b + 1)), ")"),
        ": ", count, " chunks, ", FormatBytes(total), ", largest ", FormatBytes(largest), "\n");
  }
  // Segments (one block each, possibly hundreds) are summed up, not listed.
  uint64_t segments[2] = {0, 0}, segment_bytes[2] = {0, 0};  // [0] cached, [1] in use
  for (const Region& r : regions_) {
    const Chunk& ch = chunks_[r.first];
    if (!ch.segment) continue;
    ++segments[ch.in_use];
    segment_bytes[ch.in_use] += r.size;
  }
  if (segments[0] + segments[1] > 0) {
    absl::StrAppend(&out, "Segments (regions of one block each): ", segments[1], " in use (",
                    FormatBytes(segment_bytes[1]), "), ", segments[0], " cached (",
                    FormatBytes(segment_bytes[0]), ")\n");
  }
  if (gather_page_ != 0) {
    uint64_t lent = 0;
    for (const auto& [va, g] : gathered_) {
      for (const PageRun& run : g.runs) lent += run.bytes;
    }
    absl::StrAppend(&out, "Gathered pages (", FormatBytes(gather_page_), "): ", gathers_,
                    " gathers so far; ", gathered_.size(), " gathered segments hold ",
                    FormatBytes(lent), " lent from the region\n");
  }
  if (options_.edge_view_page_bytes != 0 && views_made_ > 0) {
    absl::StrAppend(&out, "Edge views (", FormatBytes(options_.edge_view_page_bytes),
                    " pages): ", views_made_, " made so far; ", views_.size(), " live, ",
                    freed_views_.size(), " freed and still mapped\n");
  }
  constexpr int kCells = 64;
  constexpr int kMaxChunksListed = 64;
  for (size_t i = 0; i < regions_.size(); ++i) {
    const Region& r = regions_[i];
    if (chunks_[r.first].segment) continue;
    absl::StrAppend(&out, "Region ", i, " at ", P(r.ptr), ", ", FormatBytes(r.size), ":\n");
    std::vector<uint64_t> used(kCells, 0);
    const double cell = static_cast<double>(r.size) / kCells;
    int listed = 0, chunks = 0;
    for (uint32_t c = r.first; c != kNone; c = chunks_[c].next) {
      const Chunk& ch = chunks_[c];
      ++chunks;
      if (listed < kMaxChunksListed) {
        ++listed;
        absl::StrAppend(&out, "  ", P(ch.ptr), " ", FormatBytes(ch.size),
                        ch.lent     ? std::string(" lent to a gathered segment or a view")
                        : ch.in_use ? absl::StrCat(" in use (requested ", ch.requested, ")")
                                    : std::string(" free"),
                        "\n");
      }
      if (!ch.in_use) continue;
      uint64_t lo = ch.ptr - r.ptr, hi = lo + ch.size;
      for (int k = static_cast<int>(lo / cell); k < kCells && k * cell < hi; ++k) {
        double a = std::max<double>(lo, k * cell), b = std::min<double>(hi, (k + 1) * cell);
        if (b > a) used[k] += static_cast<uint64_t>(b - a);
      }
    }
    if (chunks > listed) absl::StrAppend(&out, "  ... ", chunks - listed, " more chunks\n");
    std::string map;
    for (int k = 0; k < kCells; ++k) {
      double f = used[k] / cell;
      map += f >= 0.999 ? '#' : f <= 0.001 ? '.' : '+';
    }
    absl::StrAppend(&out, "  occupancy [", map, "]  (# used, + partly, . free)\n");
  }
  return out;
}

absl::Status BFCAllocator::CheckInvariants() const {
  SpinLockGuard l(mu_);
  auto fail = [&](auto&&... args) {
    return absl::InternalError(absl::StrCat(name(), ": invariant broken: ", args...));
  };
  uint64_t reserved = 0, in_use = 0, free_chunks = 0, used_chunks = 0, records = 0, parked = 0,
           listed_segments = 0, lent_chunks = 0;
  uint64_t lent_listed = 0;
  // The live table first (the checks below look chunks up in it): its chains end, and hold
  // live chunks in their own buckets, live_count_ of them.
  size_t chained = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (uint32_t c = buckets_[b]; c != kNone; c = chunks_[c].left) {
      if (c >= chunks_.size() || ++chained > chunks_.size()) {
        return fail("a chain of the live table is broken");
      }
      const Chunk& ch = chunks_[c];
      if (!ch.in_use || ch.lent || BucketOf(ch.ptr) != b) {
        return fail("chunk ", P(ch.ptr), " is in the live table but not live or misplaced");
      }
    }
  }
  if (chained != live_count_) {
    return fail(chained, " chunks in the live table but ", live_count_, " counted");
  }
  for (const auto& [va, g] : gathered_) {
    lent_listed += g.lent.size();
    uint64_t pages = 0;
    for (size_t k = 0; k < g.lent.size(); ++k) {
      const Chunk& ch = chunks_[g.lent[k]];
      if (!ch.lent || ch.ptr != g.region + g.runs[k].offset || ch.size != g.runs[k].bytes) {
        return fail("gathered segment ", P(va), " lists a chunk that is not its lent pages");
      }
      pages += ch.size;
    }
    const size_t i = RegionOf(va);
    if (i >= regions_.size() || regions_[i].ptr != va || regions_[i].size != pages) {
      return fail("gathered segment ", P(va), " is not a region of its pages' size");
    }
  }
  for (const auto& [c, v] : views_) {
    const Chunk& ch = chunks_[c];
    if (!ch.view || !ch.in_use || ch.bin != -1 || LiveFind(ch.ptr) != c || ch.prev != kNone ||
        ch.next != kNone) {
      return fail("edge view ", P(ch.ptr), " is not a live chunk outside the regions");
    }
    const Chunk& lo = chunks_[v.low];
    const Chunk& hi = chunks_[v.high];
    const uint64_t page = options_.edge_view_page_bytes;
    if (!lo.lent || !hi.lent || (lo.ptr + lo.size) % page != 0 || hi.ptr % page != 0 ||
        lo.size + hi.size != ch.size || ch.ptr != v.va + page - lo.size) {
      return fail("edge view ", P(ch.ptr), " does not match its lent parts");
    }
    ++used_chunks;
    ++records;
    in_use += ch.size;
    lent_listed += 2;
  }
  for (size_t i = 0; i < regions_.size(); ++i) {
    const Region& r = regions_[i];
    if (i > 0 && regions_[i - 1].ptr + regions_[i - 1].size > r.ptr) {
      return fail("regions ", i - 1, " and ", i, " overlap");
    }
    const bool gathered = gathered_.contains(r.ptr);
    if (!gathered) reserved += r.size;  // a gathered segment's pages are its region's
    uint64_t expect = r.ptr;
    uint32_t prev = kNone;
    for (uint32_t c = r.first; c != kNone; c = chunks_[c].next) {
      const Chunk& ch = chunks_[c];
      ++records;
      if (ch.ptr != expect) return fail("chunk ", P(ch.ptr), " should start at ", P(expect));
      if (ch.size == 0 || ch.size % kMinAllocationSize != 0) {
        return fail("chunk ", P(ch.ptr), " has size ", ch.size);
      }
      if (ch.prev != prev) return fail("chunk ", P(ch.ptr), " has a wrong prev link");
      if (ch.segment && (c != r.first || ch.next != kNone)) {
        return fail("segment ", P(ch.ptr), " is not a whole region");
      }
      if (ch.lent) {
        ++lent_chunks;
        if (!ch.in_use || ch.bin != -1 || LiveFind(ch.ptr) == c) {
          return fail("lent chunk ", P(ch.ptr), " is free, in a bin or live");
        }
      } else if (ch.in_use) {
        ++used_chunks;
        in_use += ch.size;
        if (ch.bin != -1) return fail("chunk ", P(ch.ptr), " is in use and in bin ", ch.bin);
        if (LiveFind(ch.ptr) != c) {
          return fail("chunk ", P(ch.ptr), " is in use but not in the live map");
        }
      } else if (ch.bin == kParked) {
        ++parked;
        if (prev != kNone && !chunks_[prev].in_use) {
          return fail("free chunks ", P(chunks_[prev].ptr), " and ", P(ch.ptr), " are adjacent");
        }
      } else {
        ++free_chunks;
        if (ch.segment && SegmentList(ch.size) != 0) {
          ++listed_segments;
          if (ch.bin != kSegmentListed) return fail("cached segment ", P(ch.ptr), " not listed");
        } else if (ch.bin != TreeOf(ch)) {
          return fail("free chunk ", P(ch.ptr), " in tree ", ch.bin);
        }
        if (prev != kNone && !chunks_[prev].in_use) {
          return fail("free chunks ", P(chunks_[prev].ptr), " and ", P(ch.ptr), " are adjacent");
        }
      }
      expect += ch.size;
      prev = c;
    }
    if (expect != r.ptr + r.size) return fail("region ", i, " chunks do not cover it");
  }
  uint64_t binned = 0;
  uint64_t on_lists = 0;
  for (int k = 0; k <= kSegmentLists; ++k) {
    const bool marked = (segment_mask_[k >> 6] >> (k & 63)) & 1;
    if (marked != (segment_heads_[k] != kNone) || (k == 0 && marked)) {
      return fail("segment list mask for list ", k);
    }
    for (uint32_t n = segment_heads_[k], last = kNone; n != kNone; last = n, n = chunks_[n].right) {
      if (n >= chunks_.size() || ++on_lists > chunks_.size()) {
        return fail("segment list ", k, " has a cycle or a bad record");
      }
      const Chunk& ch = chunks_[n];
      if (ch.in_use || !ch.segment || ch.bin != kSegmentListed || ch.left != last ||
          SegmentList(ch.size) != k) {
        return fail("segment list ", k, " holds ", P(ch.ptr), ", which does not belong there");
      }
    }
  }
  if (on_lists != listed_segments) {
    return fail(listed_segments, " listed segments in regions but ", on_lists, " on the lists");
  }
  for (int b = 0; b < 2 * kNumTrees; ++b) {
    if (TreeMarked(b) != (roots_[b] != kNone)) return fail("tree mask for tree ", b);
    std::string broken;
    uint32_t last = kNone;
    // Called under mu_ (held above); the analysis does not follow lambdas.
    bool whole = ForEachInTree(b, [&](uint32_t c) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      const Chunk& ch = chunks_[c];
      if (!broken.empty()) return;
      if (ch.in_use || ch.bin != b) {
        broken = absl::StrCat("holds chunk ", P(ch.ptr), " of ", ch.size,
                              " bytes that is not a free chunk of this tree");
      } else if (b < kListTrees) {
        // A list: one size, linked both ways from its head.
        if (ch.left != last || ch.parent != kNone ||
            (last != kNone && chunks_[last].size != ch.size)) {
          broken = absl::StrCat("is a broken list at ", P(ch.ptr));
        }
      } else if (last != kNone && !KeyLess(last, c)) {
        broken = absl::StrCat("is out of (size, address) order at ", P(ch.ptr));
      } else if ((ch.left != kNone && chunks_[ch.left].priority > ch.priority) ||
                 (ch.right != kNone && chunks_[ch.right].priority > ch.priority)) {
        broken = absl::StrCat("breaks the heap order below ", P(ch.ptr));
      } else if ((ch.parent == kNone) != (roots_[b] == c) ||
                 (ch.left != kNone && chunks_[ch.left].parent != c) ||
                 (ch.right != kNone && chunks_[ch.right].parent != c)) {
        broken = absl::StrCat("has a wrong parent link at ", P(ch.ptr));
      }
      last = c;
      ++binned;
    });
    if (!whole) return fail("tree ", b, " has a cycle or a bad record");
    if (!broken.empty()) return fail("tree ", b, " ", broken);
  }
  if (edge_index_) {
    // While the index is kept, every free chunk of the shared regions' trees with an edge on a
    // page boundary is listed under that edge's bytes, and nothing else is; else none is.
    const uint64_t page = options_.edge_view_page_bytes;
    uint64_t expected = 0, indexed = 0;
    for (uint32_t c = 0; c < chunks_.size(); ++c) {
      const Chunk& ch = chunks_[c];
      const bool binned_here = ch.size != 0 && !ch.in_use && ch.bin >= 0 && ch.bin < kNumTrees;
      for (int side : {0, 1}) {
        const bool edge =
            edge_live_ && binned_here && ((side == 0 ? ch.ptr + ch.size : ch.ptr) % page) == 0;
        const int32_t want =
            edge ? static_cast<int32_t>(std::min(ch.size, page) / kMinAllocationSize) : -1;
        const int32_t got = c < edge_links_.size() ? edge_links_[c].bucket[side] : -1;
        if (want != got || ((ch.edges >> side) & 1) != (got >= 0 ? 1 : 0)) {
          return fail("chunk ", P(ch.ptr), " is under edge bucket ", got, " on side ", side,
                      " where it belongs under ", want);
        }
        expected += edge ? 1 : 0;
      }
    }
    for (int side : {0, 1}) {
      for (size_t b = 0; b < edge_heads_[side].size(); ++b) {
        if (edge_buckets_[side].Test(b) != (edge_heads_[side][b] != kNone)) {
          return fail("edge bucket mask for bucket ", b, " on side ", side);
        }
        for (uint32_t n = edge_heads_[side][b], last = kNone; n != kNone;
             last = n, n = edge_links_[n].next[side]) {
          if (n >= edge_links_.size() || ++indexed > 2 * chunks_.size()) {
            return fail("edge bucket ", b, " on side ", side, " has a cycle or a bad record");
          }
          if (edge_links_[n].prev[side] != last ||
              edge_links_[n].bucket[side] != static_cast<int32_t>(b)) {
            return fail("edge bucket ", b, " on side ", side, " is a broken list at ",
                        P(chunks_[n].ptr));
          }
        }
      }
    }
    if (indexed != expected) {
      return fail(expected, " free chunk edges on page boundaries but ", indexed, " indexed");
    }
  }
  uint64_t listed = 0;
  for (uint32_t n = parked_, last = kNone; n != kNone; last = n, n = chunks_[n].right) {
    if (n >= chunks_.size() || ++listed > chunks_.size()) {
      return fail("the parked list has a cycle or a bad record");
    }
    const Chunk& ch = chunks_[n];
    if (ch.in_use || ch.bin != kParked || ch.left != last) {
      return fail("the parked list holds ", P(ch.ptr), ", which is not a linked parked chunk");
    }
  }
  if (listed != parked || listed != parked_count_) {
    return fail(parked, " parked chunks in regions but ", listed, " on the list (count ",
                parked_count_, ")");
  }
  if (binned + on_lists != free_chunks) {
    return fail(binned, " chunks in bins but ", free_chunks, " free chunks in regions");
  }
  if (lent_chunks != lent_listed) {
    return fail(lent_chunks, " lent chunks in regions but ", lent_listed, " listed");
  }
  if (live_count_ != used_chunks) {
    return fail(live_count_, " live pointers but ", used_chunks, " chunks in use");
  }
  if (records + free_records_.size() != chunks_.size()) {
    return fail(records, " chunk records in regions + ", free_records_.size(),
                " spare != ", chunks_.size());
  }
  const AllocatorStats& stats = counters_.stats;
  if (in_use != stats.bytes_in_use) {
    return fail("bytes in use ", stats.bytes_in_use, " != sum of chunks ", in_use);
  }
  if (reserved != stats.bytes_reserved) {
    return fail("bytes reserved ", stats.bytes_reserved, " != sum of regions ", reserved);
  }
  if (reserved > limit_) return fail("reserved ", reserved, " is over the limit ", limit_);
  if (counters_.live() != live_count_) {
    return fail("allocs - frees != live pointers");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Allocator>> CreateBfcAllocator(
    Executor* executor, const DeviceAllocatorOptions& options) {
  BFCOptions o;
  o.name = options.device_name;
  o.memory_limit = options.memory_limit;
  o.allow_growth = options.allow_growth;
  o.garbage_collection = options.garbage_collection;
  if (options.bfc_small_request_bytes) o.small_request_bytes = *options.bfc_small_request_bytes;
  if (options.bfc_min_split_bytes) o.min_split_bytes = *options.bfc_min_split_bytes;
  if (options.bfc_min_split_fraction) o.min_split_fraction = *options.bfc_min_split_fraction;
  if (options.bfc_park_slivers) o.park_slivers = *options.bfc_park_slivers;
  if (options.bfc_reclaim_slivers) o.reclaim_slivers = *options.bfc_reclaim_slivers;
  if (options.bfc_segment_bytes) o.segment_bytes = *options.bfc_segment_bytes;
  if (options.bfc_segment_waste_divisor) {
    o.segment_waste_divisor = *options.bfc_segment_waste_divisor;
  }
  if (options.bfc_segment_waste_divisor_before_free) {
    o.segment_waste_divisor_before_free = *options.bfc_segment_waste_divisor_before_free;
  }
  // Without growth the pool is one range, and small requests that no small hole fits go to its
  // top instead of pinning the holes large blocks leave (64 KiB: PyTorch's two-stream snapshot
  // 1.425x -> 1.025x its peak, below TensorFlow's rule everywhere we measured; docs/allocator.md,
  // "Small blocks at the top"). With growth the regions are separate ranges and it does worse.
  o.small_from_top_bytes = options.bfc_small_from_top_bytes.value_or(
      options.allow_growth ? 0 : kBfcDefaultSmallFromTopBytes);
  o.small_from_top_hole_bytes = options.bfc_small_from_top_hole_bytes.value_or(
      options.allow_growth ? 0 : kBfcDefaultSmallFromTopHoleBytes);
  // Without growth the limit is taken as pages where the device has VMM calls, so free pages
  // between live blocks can be gathered for a request no hole fits (BFCOptions::gather_pages;
  // docs/allocator.md, "Gathered pages"); elsewhere one Executor::Allocate of the whole limit.
  std::unique_ptr<SubAllocator> sub;
  if (!options.allow_growth && options.bfc_gather_pages.value_or(true)) {
    if (absl::StatusOr<std::unique_ptr<PagedDeviceSubAllocator>> paged =
            PagedDeviceSubAllocator::Create(executor);
        paged.ok()) {
      sub = *std::move(paged);
      o.gather_pages = true;
    }
  }
  if (sub == nullptr) sub = std::make_unique<DeviceSubAllocator>(executor);
  VGPU_ASSIGN_OR_RETURN(std::unique_ptr<BFCAllocator> a,
                        BFCAllocator::Create(std::move(sub), std::move(o)));
  return std::unique_ptr<Allocator>(std::move(a));
}

absl::StatusOr<std::unique_ptr<Allocator>> CreateHostBfcAllocator(
    Executor* executor, const DeviceAllocatorOptions& options) {
  BFCOptions o;
  o.name = options.device_name;
  // "Unlimited": the largest 256-byte multiple, so growth is bounded only by the system.
  o.memory_limit = options.memory_limit != 0 ? options.memory_limit : ~uint64_t{0} >> 1;
  o.allow_growth = true;
  // Without a limit cached segments would only go back when the system refuses memory:
  // CPU:0 keeps TensorFlow's doubling regions, which large blocks split and share.
  o.segment_bytes = 0;
  std::unique_ptr<SubAllocator> sub;
  if (executor != nullptr) {
    sub = std::make_unique<PinnedHostSubAllocator>(executor);
  } else {
    sub = std::make_unique<HostMemorySubAllocator>();
  }
  VGPU_ASSIGN_OR_RETURN(std::unique_ptr<BFCAllocator> a,
                        BFCAllocator::Create(std::move(sub), std::move(o)));
  return std::unique_ptr<Allocator>(std::move(a));
}

}  // namespace vgpu
