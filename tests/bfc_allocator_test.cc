// Exact placement tests of BFCAllocator on FakeSubAllocator (addresses, splits, merges, growth
// steps, limit, GC), failure injection, error cases, a randomized test that checks every
// invariant after every operation, and threads.
#include "vgpu/allocator/bfc_allocator.h"

#include <algorithm>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/allocator/sub_allocators.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::IsOkAndHolds;
using ::vgpu::testing::StatusIs;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;
constexpr uint64_t kBase = uint64_t{1} << 40;  // FakeSubAllocator's first address

struct Fixture {
  FakeSubAllocator* fake = nullptr;
  std::unique_ptr<BFCAllocator> bfc;
};

Fixture Make(uint64_t limit, bool growth, FakeSubAllocatorOptions fo = {},
             uint64_t initial = 2 * kMiB, uint64_t small_request_bytes = 0,
             bool park_slivers = false, uint64_t segment_bytes = 0,
             uint64_t small_from_top_bytes = 0, bool reclaim_slivers = false) {
  auto fake = std::make_unique<FakeSubAllocator>(fo);
  Fixture f;
  f.fake = fake.get();
  BFCOptions o;
  o.name = "GPU:0 (physical GPU 0)";
  o.memory_limit = limit;
  o.allow_growth = growth;
  o.initial_region_bytes = initial;
  o.small_request_bytes = small_request_bytes;
  o.park_slivers = park_slivers;
  // 0: TensorFlow's growth, step by step (the exact tests); segments are tested on their own.
  o.segment_bytes = segment_bytes;
  o.small_from_top_bytes = small_from_top_bytes;
  o.reclaim_slivers = reclaim_slivers;
  f.bfc = std::make_unique<BFCAllocator>(std::move(fake), o);
  return f;
}

uint64_t U(void* p) { return reinterpret_cast<uint64_t>(p); }

void* Alloc(BFCAllocator& a, uint64_t bytes, uint64_t alignment = 256) {
  absl::StatusOr<void*> p = a.AllocateRaw(bytes, alignment);
  EXPECT_THAT(p, IsOk());
  EXPECT_THAT(a.CheckInvariants(), IsOk());
  return p.ok() ? *p : nullptr;
}

void Free(BFCAllocator& a, void* p) {
  EXPECT_THAT(a.Deallocate(p), IsOk());
  EXPECT_THAT(a.CheckInvariants(), IsOk());
}

TEST(BFCAllocatorTest, BinsBySizeClass) {
  EXPECT_EQ(BFCAllocator::BinFor(256), 0);
  EXPECT_EQ(BFCAllocator::BinFor(511), 0);
  EXPECT_EQ(BFCAllocator::BinFor(512), 1);
  EXPECT_EQ(BFCAllocator::BinFor(1 * kMiB), 12);
  EXPECT_EQ(BFCAllocator::BinFor(uint64_t{256} << 20), 20);
  EXPECT_EQ(BFCAllocator::BinFor(uint64_t{1} << 40), 20);
  EXPECT_EQ(BFCAllocator::RoundedBytes(1), 256u);
  EXPECT_EQ(BFCAllocator::RoundedBytes(257), 512u);
}

// Free chunks live in kSubBins trees per bin; the best fit takes the first chunk of the next
// non-empty tree, so tree indices must never decrease with size and must refine the bins.
TEST(BFCAllocatorTest, TreesRefineTheBinsInSizeOrder) {
  int last = 0;
  for (uint64_t size = 256; size <= (uint64_t{1} << 42);
       size += std::max<uint64_t>(256, size / 97)) {
    const uint64_t rounded = BFCAllocator::RoundedBytes(size);
    const int t = BFCAllocator::TreeFor(rounded);
    ASSERT_GE(t, last) << rounded;
    ASSERT_LT(t, BFCAllocator::kNumTrees) << rounded;
    ASSERT_EQ(t / BFCAllocator::kSubBins, BFCAllocator::BinFor(rounded)) << rounded;
    last = t;
  }
  // Within a bin, sizes a sub-bin apart are in different trees (the trees stay small).
  const uint64_t octave = uint64_t{1} << 20;
  EXPECT_EQ(BFCAllocator::TreeFor(octave) + 1,
            BFCAllocator::TreeFor(octave + octave / BFCAllocator::kSubBins));
  EXPECT_EQ(BFCAllocator::TreeFor(2 * octave - 256), BFCAllocator::TreeFor(2 * octave) - 1);
  EXPECT_EQ(BFCAllocator::TreeFor(uint64_t{1} << 40), BFCAllocator::kNumTrees - 1);
}

TEST(BFCAllocatorTest, GrowthOffTakesTheWholeLimitUpFront) {
  Fixture f = Make(64 * kMiB, /*growth=*/false);
  ASSERT_THAT(f.bfc->init_status(), IsOk());
  EXPECT_EQ(f.fake->alloc_calls(), 1);
  EXPECT_EQ(f.fake->bytes_outstanding(), 64 * kMiB);
  AllocatorStats s = f.bfc->Stats();
  EXPECT_EQ(s.bytes_reserved, 64 * kMiB);
  EXPECT_EQ(s.largest_free_block, 64 * kMiB);
  EXPECT_EQ(s.regions_mapped, 1u);
}

TEST(BFCAllocatorTest, GrowthOffFailsWhenTheLimitIsNotThere) {
  FakeSubAllocatorOptions fo;
  fo.capacity = 32 * kMiB;
  auto r = BFCAllocator::Create(
      std::make_unique<FakeSubAllocator>(fo),
      BFCOptions{.name = "GPU:3", .memory_limit = 64 * kMiB, .allow_growth = false});
  EXPECT_THAT(r.status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("GPU:3"), HasSubstr("64 MiB"), HasSubstr("allow_growth"))));
}

TEST(BFCAllocatorTest, LargeRequestsFromTheLowEndSmallFromTheHighEnd) {
  Fixture f = Make(16 * kMiB, false, {}, 2 * kMiB, /*small_request_bytes=*/1 * kMiB);
  void* a = Alloc(*f.bfc, 2 * kMiB);  // large: low end
  EXPECT_EQ(U(a), kBase);
  void* b = Alloc(*f.bfc, 3 * kMiB - 100);  // rounded to 3 MiB - 0, placed right after
  EXPECT_EQ(U(b), kBase + 2 * kMiB);
  EXPECT_THAT(f.bfc->AllocatedSize(b), IsOkAndHolds(3 * kMiB));
  void* s = Alloc(*f.bfc, 1);  // small: the top 256 bytes of the free chunk
  EXPECT_EQ(U(s), kBase + 16 * kMiB - 256);
  void* t = Alloc(*f.bfc, 300);
  EXPECT_EQ(U(t), kBase + 16 * kMiB - 256 - 512);
  AllocatorStats st = f.bfc->Stats();
  EXPECT_EQ(st.bytes_in_use, 5 * kMiB + 768);
  EXPECT_EQ(st.num_allocs, 4u);
  EXPECT_EQ(st.largest_free_block, 11 * kMiB - 768);
  Free(*f.bfc, a);
  Free(*f.bfc, b);  // merges with a
  EXPECT_EQ(f.bfc->Stats().largest_free_block, 16 * kMiB - 768);
  Free(*f.bfc, t);
  Free(*f.bfc, s);  // everything merges back into one chunk
  st = f.bfc->Stats();
  EXPECT_EQ(st.largest_free_block, 16 * kMiB);
  EXPECT_EQ(st.bytes_in_use, 0u);
  EXPECT_EQ(st.fragmentation, 0.0);
}

// small_from_top_bytes: a small request that no small hole fits comes from the high end of
// the highest large free chunk, so small blocks gather at the top; small holes are reused
// first (best fit); large requests are best fit from the low end as ever.
TEST(BFCAllocatorTest, SmallRequestsGatherAtTheTop) {
  Fixture f = Make(16 * kMiB, false, {}, 2 * kMiB, 0, false, 0, /*small_from_top_bytes=*/kMiB);
  void* a = Alloc(*f.bfc, 2 * kMiB);
  EXPECT_EQ(U(a), kBase);
  void* s = Alloc(*f.bfc, 1024);
  EXPECT_EQ(U(s), kBase + 16 * kMiB - 1024);
  void* b = Alloc(*f.bfc, 2 * kMiB);
  EXPECT_EQ(U(b), kBase + 2 * kMiB);
  void* t = Alloc(*f.bfc, 2048);
  EXPECT_EQ(U(t), kBase + 16 * kMiB - 3072);
  void* u = Alloc(*f.bfc, kMiB);  // a small request as large as the threshold: still the top
  EXPECT_EQ(U(u), kBase + 15 * kMiB - 3072);
  Free(*f.bfc, s);               // a 1 KiB hole at the very top
  void* v = Alloc(*f.bfc, 512);  // fits the hole: best fit among small holes, not the top
  EXPECT_EQ(U(v), kBase + 16 * kMiB - 1024);
  void* w = Alloc(*f.bfc, 4096);  // fits no small hole: the top chunk's high end
  EXPECT_EQ(U(w), kBase + 15 * kMiB - 3072 - 4096);
  // A hole of at least the threshold above the top chunk becomes the top while it lasts.
  Free(*f.bfc, u);
  void* x = Alloc(*f.bfc, 8192);
  EXPECT_EQ(U(x), kBase + 16 * kMiB - 3072 - 8192);
  // Large requests take the top chunk whole; then a small one falls back to best fit.
  void* big = Alloc(*f.bfc, 16 * kMiB - 4 * kMiB - 3072 - 4096 - 8192 - kMiB + 8192);
  EXPECT_EQ(U(big), kBase + 4 * kMiB);
  void* y = Alloc(*f.bfc, 4096);  // no large chunk is left: best fit, from the low end
  EXPECT_EQ(U(y), kBase + 15 * kMiB - 3072);
  for (void* p : {a, b, t, v, w, x, big, y}) Free(*f.bfc, p);
  AllocatorStats st = f.bfc->Stats();
  EXPECT_EQ(st.bytes_in_use, 0u);
  EXPECT_EQ(st.largest_free_block, 16 * kMiB);
}

TEST(BFCAllocatorTest, BestFitPrefersTheSmallestHoleThenTheLowestAddress) {
  Fixture f = Make(32 * kMiB, false);
  std::vector<void*> p;
  for (uint64_t mib : {3, 1, 2, 1, 2, 1, 5}) p.push_back(Alloc(*f.bfc, mib * kMiB + kMiB / 2));
  // Holes: 3.5 MiB at 0, 2.5 MiB at 5 MiB, 2.5 MiB at 9 MiB.
  Free(*f.bfc, p[0]);
  Free(*f.bfc, p[2]);
  Free(*f.bfc, p[4]);
  void* q = Alloc(*f.bfc, 2 * kMiB + kMiB / 2);
  EXPECT_EQ(U(q), U(p[2]));  // the smaller hole, though a larger one is lower
  void* r = Alloc(*f.bfc, 2 * kMiB + kMiB / 2);
  EXPECT_EQ(U(r), U(p[4]));
  void* s = Alloc(*f.bfc, 2 * kMiB);  // only the 3.5 MiB hole is left: low end of it
  EXPECT_EQ(U(s), U(p[0]));
  for (void* x : {p[1], p[3], p[5], p[6], q, r, s}) Free(*f.bfc, x);
  EXPECT_EQ(f.bfc->Stats().largest_free_block, 32 * kMiB);
}

// Up to 16 KiB each tree holds one size and is a list: equal holes are reused last freed first
// (its record is warm), and the best fit across sizes is unchanged. Above, equal holes go
// lowest address first.
TEST(BFCAllocatorTest, SmallHolesOfOneSizeAreReusedLastFreedFirst) {
  for (uint64_t bytes : {256 * uint64_t{1}, 1 * kKiB, 16 * kKiB - 256, 16 * kKiB}) {
    const bool listed = bytes < 16 * kKiB;
    EXPECT_EQ(BFCAllocator::TreeFor(bytes) < BFCAllocator::kListTrees, listed) << bytes;
    Fixture f = Make(32 * kMiB, false);
    std::vector<void*> p;
    for (int i = 0; i < 6; ++i) p.push_back(Alloc(*f.bfc, bytes));  // holes between live ones
    Free(*f.bfc, p[0]);
    Free(*f.bfc, p[2]);
    Free(*f.bfc, p[4]);
    void* q = Alloc(*f.bfc, bytes);
    EXPECT_EQ(U(q), U(listed ? p[4] : p[0])) << bytes;
    void* r = Alloc(*f.bfc, bytes);
    EXPECT_EQ(U(r), U(p[2])) << bytes;
    // Best fit first: the hole of this size left, not the larger free rest of the region.
    void* s = Alloc(*f.bfc, bytes);
    EXPECT_EQ(U(s), U(listed ? p[0] : p[4])) << bytes;
    for (void* x : {p[1], p[3], p[5], q, r, s}) Free(*f.bfc, x);
    EXPECT_EQ(f.bfc->Stats().largest_free_block, 32 * kMiB);
  }
}

TEST(BFCAllocatorTest, RemaindersUnderAQuarterOfTheRequestAreNotSplitOff) {
  Fixture f = Make(16 * kMiB, false);
  void* a = Alloc(*f.bfc, 4 * kMiB);
  void* b = Alloc(*f.bfc, 4 * kMiB);
  void* c = Alloc(*f.bfc, 8 * kMiB);
  Free(*f.bfc, a);
  void* d = Alloc(*f.bfc, 3 * kMiB + 512 * kKiB);  // 512 KiB left < 1/4 of the request: kept
  EXPECT_EQ(U(d), kBase);
  EXPECT_THAT(f.bfc->AllocatedSize(d), IsOkAndHolds(4 * kMiB));
  Free(*f.bfc, b);
  void* e = Alloc(*f.bfc, 3 * kMiB);  // 1 MiB left = 1/3 of the request: split
  EXPECT_EQ(U(e), kBase + 4 * kMiB);
  EXPECT_THAT(f.bfc->AllocatedSize(e), IsOkAndHolds(3 * kMiB));
  EXPECT_EQ(f.bfc->Stats().largest_free_block, 1 * kMiB);
  for (void* p : {c, d, e}) Free(*f.bfc, p);
}

// 4 + 4 + 8 MiB in a 16 MiB pool, the first 4 MiB freed and 3.5 MiB taken from it: 512 KiB is
// left, under a quarter of the request (the split rule's sliver). Returns that block.
void* LeaveASliver(BFCAllocator& a, void** y, void** z) {
  void* x = Alloc(a, 4 * kMiB);
  *y = Alloc(a, 4 * kMiB);
  *z = Alloc(a, 8 * kMiB);
  Free(a, x);
  void* d = Alloc(a, 3 * kMiB + 512 * kKiB);
  EXPECT_EQ(U(d), kBase);
  return d;
}

// park_slivers: the remainder a request leaves under the split fraction is split off but kept
// out of the trees: it is not handed out while another chunk fits, it merges with the block
// next to it when that is freed, and it is the last resort before OOM.
TEST(BFCAllocatorTest, ParkedSliversMergeAndServeOnlyAsALastResort) {
  auto fake = std::make_unique<FakeSubAllocator>();
  BFCOptions o{.name = "GPU:0", .memory_limit = 16 * kMiB, .allow_growth = false};
  o.park_slivers = true;
  BFCAllocator a(std::move(fake), o);
  void *y, *z;
  // The sliver is parked (the block itself is exactly the request).
  void* d = LeaveASliver(a, &y, &z);
  EXPECT_THAT(a.AllocatedSize(d), IsOkAndHolds(3 * kMiB + 512 * kKiB));
  EXPECT_EQ(a.Stats().bytes_in_use, 16 * kMiB - 512 * kKiB);
  // Freeing the neighbour after it merges the sliver into a 4.5 MiB chunk.
  Free(a, y);
  void* e = Alloc(a, 4 * kMiB + 512 * kKiB);
  EXPECT_EQ(U(e), kBase + 3 * kMiB + 512 * kKiB);
  // Nothing else is free but a parked sliver can serve a small request as the last resort.
  Free(a, d);
  void* f1 = Alloc(a, 3 * kMiB);    // leaves a 512 KiB sliver, parked
  void* f2 = Alloc(a, 256 * kKiB);  // no tree fits: taken from the parked sliver
  EXPECT_EQ(U(f2), kBase + 3 * kMiB);
  for (void* p : {e, f1, f2, z}) Free(a, p);
  EXPECT_EQ(a.Stats().bytes_in_use, 0u);
  EXPECT_EQ(a.Stats().largest_free_block, 16 * kMiB);
}

// reclaim_slivers: the remainder kept inside a block (under the split fraction) goes to the
// hole after it when the block there is freed, so that hole can hold more; without it the same
// request fails.
TEST(BFCAllocatorTest, ReclaimedSliversJoinTheNextHole) {
  for (bool reclaim : {true, false}) {
    SCOPED_TRACE(reclaim ? "reclaim" : "kept inside");
    BFCOptions o{.name = "GPU:0", .memory_limit = 16 * kMiB, .allow_growth = false};
    o.reclaim_slivers = reclaim;
    BFCAllocator a(std::make_unique<FakeSubAllocator>(), o);
    void *y, *z;
    void* d = LeaveASliver(a, &y, &z);  // the sliver kept inside d
    EXPECT_THAT(a.AllocatedSize(d), IsOkAndHolds(4 * kMiB));
    EXPECT_EQ(a.Stats().bytes_in_use, 16 * kMiB);
    Free(a, y);
    absl::StatusOr<void*> e = a.AllocateRaw(4 * kMiB + 512 * kKiB);
    EXPECT_THAT(a.CheckInvariants(), IsOk());
    if (reclaim) {
      // d gave its sliver to y's hole: 4.5 MiB from d's rounded end.
      EXPECT_THAT(a.AllocatedSize(d), IsOkAndHolds(3 * kMiB + 512 * kKiB));
      ASSERT_THAT(e, IsOk());
      EXPECT_EQ(U(*e), kBase + 3 * kMiB + 512 * kKiB);
      EXPECT_EQ(a.Stats().bytes_in_use, 16 * kMiB);
      Free(a, *e);
    } else {
      EXPECT_THAT(e.status(), StatusIs(absl::StatusCode::kResourceExhausted));
      EXPECT_THAT(a.AllocatedSize(d), IsOkAndHolds(4 * kMiB));
      EXPECT_EQ(a.Stats().largest_free_block, 4 * kMiB);
    }
    // A block allocated with alignment padding before it, and one of exactly its rounded size,
    // have nothing to give.
    void* f1 = Alloc(a, 1000, 64 * kKiB);
    Free(a, f1);
    for (void* p : {d, z}) Free(a, p);
    EXPECT_EQ(a.Stats().bytes_in_use, 0u);
    EXPECT_EQ(a.Stats().largest_free_block, 16 * kMiB);
  }
}

TEST(BFCAllocatorTest, TinyRemaindersAreNotSplitOff) {
  auto fake = std::make_unique<FakeSubAllocator>();
  BFCOptions o{.name = "GPU:0", .memory_limit = 4 * kMiB, .allow_growth = false};
  o.min_split_bytes = 4 * kKiB;
  o.min_split_fraction = 0;
  BFCAllocator a(std::move(fake), o);
  void* p = Alloc(a, 4 * kMiB - 1024);  // 1 KiB left: kept inside the chunk
  EXPECT_THAT(a.AllocatedSize(p), IsOkAndHolds(4 * kMiB));
  EXPECT_EQ(a.Stats().largest_free_block, 0u);
  Free(a, p);
}

TEST(BFCAllocatorTest, LargeAlignmentIsHonoured) {
  Fixture f = Make(16 * kMiB, false);
  void* a = Alloc(*f.bfc, 2 * kMiB + 256);
  void* b = Alloc(*f.bfc, 1 * kMiB + 512, 1 * kMiB);
  EXPECT_EQ(U(b) % kMiB, 0u);
  EXPECT_EQ(U(b), kBase + 3 * kMiB);  // padding [2 MiB + 256, 3 MiB) stays free
  void* c = Alloc(*f.bfc, 1000, 64 * kKiB);
  EXPECT_EQ(U(c) % (64 * kKiB), 0u);
  AllocatorStats s = f.bfc->Stats();
  EXPECT_EQ(s.bytes_in_use, 2 * kMiB + 256 + kMiB + 512 + 1024);
  Free(*f.bfc, a);
  Free(*f.bfc, b);
  Free(*f.bfc, c);
  EXPECT_EQ(f.bfc->Stats().largest_free_block, 16 * kMiB);
}

TEST(BFCAllocatorTest, GrowthStartsSmallAndDoubles) {
  Fixture f = Make(64 * kMiB, true);
  EXPECT_EQ(f.fake->alloc_calls(), 0);
  void* a = Alloc(*f.bfc, kMiB + kMiB / 2);
  EXPECT_EQ(f.bfc->Stats().bytes_reserved, 2 * kMiB);
  EXPECT_EQ(U(a), kBase);
  void* b = Alloc(*f.bfc, kMiB + kMiB / 2);  // does not fit the first region: 4 MiB more
  EXPECT_EQ(f.bfc->Stats().bytes_reserved, 6 * kMiB);
  EXPECT_EQ(U(b), kBase + 2 * kMiB);
  void* c = Alloc(*f.bfc, 20 * kMiB);  // bigger than the next step (8 MiB): exactly 20 MiB
  EXPECT_EQ(f.bfc->Stats().bytes_reserved, 26 * kMiB);
  void* d = Alloc(*f.bfc, 3 * kMiB);  // the next step, 32 MiB (38 MiB are left)
  AllocatorStats s = f.bfc->Stats();
  EXPECT_EQ(s.bytes_reserved, 58 * kMiB);
  EXPECT_EQ(s.regions_mapped, 4u);
  EXPECT_EQ(s.peak_bytes_reserved, 58 * kMiB);
  for (void* p : {a, b, c, d}) Free(*f.bfc, p);
  EXPECT_EQ(f.bfc->Stats().bytes_reserved, 58 * kMiB);  // regions are kept (a cache)
}

// max_region_bytes caps the doubling (fixed-size regions when it equals the first region);
// a larger request still gets a region of its own size. ReleaseEmptyRegions can keep some.
TEST(BFCAllocatorTest, MaxRegionBytesGivesFixedRegions) {
  auto fake = std::make_unique<FakeSubAllocator>();
  FakeSubAllocator* sub = fake.get();
  BFCOptions o{.name = "GPU:0", .memory_limit = 64 * kMiB, .allow_growth = true};
  o.segment_bytes = 0;
  o.initial_region_bytes = 2 * kMiB;
  o.max_region_bytes = 2 * kMiB;
  BFCAllocator a(std::move(fake), o);
  std::vector<void*> ps;
  for (int i = 0; i < 6; ++i) ps.push_back(Alloc(a, kMiB + 512 * kKiB));
  EXPECT_EQ(a.Stats().regions_mapped, 6u);  // 2, 2, 2, ... not 2, 4, 8
  EXPECT_EQ(a.Stats().bytes_reserved, 12 * kMiB);
  void* big = Alloc(a, 5 * kMiB);
  EXPECT_EQ(a.Stats().bytes_reserved, 17 * kMiB);
  for (void* p : ps) Free(a, p);
  Free(a, big);
  EXPECT_THAT(a.ReleaseEmptyRegions(/*keep_bytes=*/4 * kMiB), IsOkAndHolds(13 * kMiB));
  EXPECT_EQ(a.Stats().bytes_reserved, 4 * kMiB);
  EXPECT_EQ(sub->regions_outstanding(), 2u);
  EXPECT_THAT(a.CheckInvariants(), IsOk());
  EXPECT_THAT(a.ReleaseEmptyRegions(), IsOkAndHolds(4 * kMiB));
  EXPECT_EQ(sub->regions_outstanding(), 0u);
}

TEST(BFCAllocatorTest, GrowthNeverPassesTheLimit) {
  Fixture f = Make(5 * kMiB, true);
  void* a = Alloc(*f.bfc, 2 * kMiB);
  void* b = Alloc(*f.bfc, 2 * kMiB);  // next step 4 MiB clipped to 3 MiB
  EXPECT_EQ(f.bfc->Stats().bytes_reserved, 5 * kMiB);
  auto c = f.bfc->AllocateRaw(2 * kMiB);
  EXPECT_THAT(c.status(), StatusIs(absl::StatusCode::kResourceExhausted,
                                   AllOf(HasSubstr("GPU:0 (physical GPU 0)"), HasSubstr("2 MiB"),
                                         HasSubstr("rounded to 2097152"), HasSubstr("limit 5 MiB"),
                                         HasSubstr("in use 4 MiB"), HasSubstr("reserved 5 MiB"),
                                         HasSubstr("largest free block 1 MiB"),
                                         HasSubstr("fragmentation"), HasSubstr("Hint"))));
  EXPECT_EQ(f.bfc->Stats().num_ooms, 1u);
  EXPECT_THAT(f.bfc->CheckInvariants(), IsOk());
  Free(*f.bfc, a);
  Free(*f.bfc, b);
}

TEST(BFCAllocatorTest, GarbageCollectsEmptyRegionsBeforeOom) {
  Fixture f = Make(8 * kMiB, true);
  void* a = Alloc(*f.bfc, kMiB + kMiB / 2);  // region 2 MiB
  void* b = Alloc(*f.bfc, 3 * kMiB);         // region 4 MiB
  Free(*f.bfc, a);
  Free(*f.bfc, b);
  void* c = Alloc(*f.bfc, 7 * kMiB);  // only 2 MiB left to grow: both regions are released
  AllocatorStats s = f.bfc->Stats();
  EXPECT_EQ(s.regions_unmapped, 2u);
  EXPECT_EQ(s.bytes_reserved, 8 * kMiB);
  EXPECT_EQ(f.fake->regions_outstanding(), 1u);
  EXPECT_EQ(f.fake->bytes_outstanding(), 8 * kMiB);
  Free(*f.bfc, c);
}

// ReleaseCachedMemory (PyTorch's empty_cache): with growth, wholly free regions go back to the
// sub-allocator and regions holding a live block stay; without growth the one region (the
// whole limit, taken up front) stays.
TEST(BFCAllocatorTest, ReleaseCachedMemoryReturnsWhollyFreeRegions) {
  Fixture f = Make(64 * kMiB, true);
  void* a = Alloc(*f.bfc, kMiB + kMiB / 2);  // region 2 MiB
  void* b = Alloc(*f.bfc, 3 * kMiB);         // region 4 MiB
  void* c = Alloc(*f.bfc, 7 * kMiB);         // region 8 MiB
  Free(*f.bfc, a);
  Free(*f.bfc, c);
  EXPECT_EQ(f.fake->regions_outstanding(), 3u);
  EXPECT_THAT(f.bfc->ReleaseCachedMemory(), IsOkAndHolds(10 * kMiB));
  EXPECT_EQ(f.fake->regions_outstanding(), 1u);
  EXPECT_EQ(f.fake->bytes_outstanding(), 4 * kMiB);
  EXPECT_EQ(f.bfc->Stats().bytes_reserved, 4 * kMiB);
  EXPECT_THAT(f.bfc->CheckInvariants(), IsOk());
  Free(*f.bfc, b);
  EXPECT_THAT(f.bfc->ReleaseCachedMemory(), IsOkAndHolds(4 * kMiB));
  EXPECT_EQ(f.fake->bytes_outstanding(), 0u);
  Free(*f.bfc, Alloc(*f.bfc, 5 * kMiB));  // grows again

  Fixture off = Make(16 * kMiB, false);
  Free(*off.bfc, Alloc(*off.bfc, 3 * kMiB));
  EXPECT_THAT(off.bfc->ReleaseCachedMemory(), IsOkAndHolds(0u));
  EXPECT_EQ(off.fake->bytes_outstanding(), 16 * kMiB);
}

// The usage mirror counts regions left wholly free (a region added, a free that empties one),
// so an owner can tell without the BFC's lock that none appeared since it last looked.
TEST(BFCAllocatorTest, UsageMirrorCountsRegionsLeftWhollyFree) {
  BFCUsageMirror mirror;
  auto fake = std::make_unique<FakeSubAllocator>();
  BFCOptions o{.name = "slabs", .memory_limit = 64 * kMiB, .allow_growth = true};
  o.segment_bytes = 0;
  o.initial_region_bytes = o.max_region_bytes = 2 * kMiB;  // fixed regions, as vmm's slabs
  o.usage_mirror = &mirror;
  BFCAllocator a(std::move(fake), o);
  auto made = [&] { return mirror.empty_regions_made.load(); };
  void* x = Alloc(a, kMiB);  // region 1, added empty then carved
  EXPECT_EQ(made(), 1u);
  void* y = Alloc(a, kMiB);  // fits region 1
  void* z = Alloc(a, kMiB);  // region 2
  EXPECT_EQ(made(), 2u);
  Free(a, x);  // region 1 still holds y
  EXPECT_EQ(made(), 2u);
  Free(a, y);  // region 1 wholly free
  EXPECT_EQ(made(), 3u);
  void* w = Alloc(a, 512 * kKiB);  // best fit: beside z in region 2
  EXPECT_EQ(made(), 3u);
  Free(a, w);
  EXPECT_EQ(made(), 3u);
  Free(a, z);  // region 2 wholly free
  EXPECT_EQ(made(), 4u);
  EXPECT_THAT(a.ReleaseEmptyRegions(), IsOkAndHolds(4 * kMiB));
  EXPECT_EQ(made(), 4u);
  EXPECT_THAT(a.CheckInvariants(), IsOk());
}

TEST(BFCAllocatorTest, NoGarbageCollectionWhenDisabled) {
  auto fake = std::make_unique<FakeSubAllocator>();
  BFCOptions o{.name = "GPU:0", .memory_limit = 8 * kMiB, .allow_growth = true};
  o.segment_bytes = 0;
  o.garbage_collection = false;
  BFCAllocator a(std::move(fake), o);
  Free(a, Alloc(a, 3 * kMiB));  // region of 3 MiB
  EXPECT_THAT(a.AllocateRaw(6 * kMiB).status(), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(a.ReleaseEmptyRegions(), IsOkAndHolds(3 * kMiB));
  Free(a, Alloc(a, 6 * kMiB));
}

// Segments (the default with growth; here from 1 MiB, the default is 4 MiB): a request of
// 1 MiB or more gets a region of its own, rounded up to 2 MiB and never split; freed, it is
// cached whole for a request it fits within an eighth (at least 2 MiB). Smaller requests never
// touch a cached segment. Here whatever the rounding wastes (the defaults' limits on that have a
// test of their own, SegmentsAreForRequestsWholePagesFit).
Fixture MakeWithSegments(uint64_t limit, bool gc = true) {
  auto fake = std::make_unique<FakeSubAllocator>();
  Fixture f;
  f.fake = fake.get();
  BFCOptions o{.name = "GPU:0", .memory_limit = limit, .allow_growth = true};
  o.garbage_collection = gc;
  o.segment_bytes = 1 * kMiB;
  o.segment_waste_divisor = 0;
  o.segment_waste_divisor_before_free = 0;
  EXPECT_EQ(o.segment_granularity, 2 * kMiB);  // the default these tests are written for
  f.bfc = std::make_unique<BFCAllocator>(std::move(fake), o);
  return f;
}

TEST(BFCAllocatorTest, SegmentsGiveLargeRequestsRegionsOfTheirOwn) {
  Fixture f = MakeWithSegments(64 * kMiB);
  void* a = Alloc(*f.bfc, 3 * kMiB);  // a segment of 4 MiB
  EXPECT_EQ(U(a), kBase);
  EXPECT_EQ(f.bfc->Stats().bytes_reserved, 4 * kMiB);
  EXPECT_THAT(f.bfc->AllocatedSize(a), IsOkAndHolds(4 * kMiB));  // never split
  void* small = Alloc(*f.bfc, 100 * kKiB);  // a shared region (2 MiB), not a's remainder
  EXPECT_EQ(U(small), kBase + 4 * kMiB);
  EXPECT_EQ(f.bfc->Stats().bytes_reserved, 6 * kMiB);
  Free(*f.bfc, a);  // cached whole
  EXPECT_EQ(f.bfc->Stats().bytes_reserved, 6 * kMiB);
  EXPECT_EQ(f.bfc->Stats().largest_free_block, 4 * kMiB);
  // Small requests fill the shared regions (growing them) and never carve the cached segment.
  std::vector<void*> smalls;
  for (int i = 0; i < 8; ++i) smalls.push_back(Alloc(*f.bfc, 768 * kKiB));
  for (void* p : smalls) EXPECT_FALSE(U(p) >= kBase && U(p) < kBase + 4 * kMiB) << U(p);
  const int64_t calls = f.fake->alloc_calls();
  void* b = Alloc(*f.bfc, 3 * kMiB + 512 * kKiB);  // the cached segment fits: no new region
  EXPECT_EQ(U(b), kBase);
  EXPECT_EQ(f.fake->alloc_calls(), calls);
  // 1.5 MiB would waste 2.5 MiB of a 4 MiB segment (over the 2 MiB slack): a new one.
  Free(*f.bfc, b);
  void* c = Alloc(*f.bfc, kMiB + kMiB / 2);
  EXPECT_NE(U(c), kBase);
  EXPECT_THAT(f.bfc->AllocatedSize(c), IsOkAndHolds(2 * kMiB));
  EXPECT_EQ(f.fake->alloc_calls(), calls + 1);
  Free(*f.bfc, c);
  void* d = Alloc(*f.bfc, 3 * kMiB);  // the 4 MiB segment again, with the 2 MiB one cached
  const std::string log = f.bfc->DumpMemoryLog();
  EXPECT_THAT(log, HasSubstr("Segments (regions of one block each): 1 in use (4 MiB), 1 cached "
                             "(2 MiB)"));
  EXPECT_THAT(log, ::testing::Not(HasSubstr("at 0x10000000000, 4 MiB")));  // not listed
  Free(*f.bfc, d);
  for (void* p : smalls) Free(*f.bfc, p);
  Free(*f.bfc, small);
  EXPECT_EQ(f.bfc->Stats().bytes_in_use, 0u);
  const uint64_t reserved = f.bfc->Stats().bytes_reserved;
  EXPECT_THAT(f.bfc->ReleaseCachedMemory(), IsOkAndHolds(reserved));  // segments go back too
  EXPECT_EQ(f.fake->regions_outstanding(), 0u);
}

// Until the first free, a request whose rounding up to whole pages would waste more than a 32nd
// of it is carved from the shared regions instead of a segment
// (BFCOptions::segment_waste_divisor_before_free): 5 MiB, 32 MiB + 1 B and 44.5 MiB (1.5 MiB of
// a 46 MiB segment, 3.4 %), not 60.5 MiB (2.5 %) or 8 MiB (none). After a free, only with
// segment_waste_divisor set (0 by default: any waste): at 4, 4.5 MiB (6 MiB) and 6.2 MiB
// (8 MiB) are carved, 5 and 6.5 MiB waste less and get segments.
TEST(BFCAllocatorTest, SegmentsAreForRequestsWholePagesFit) {
  struct Case {
    uint64_t bytes;
    uint64_t divisor;
    bool after_free;  // a block was freed before the request
    uint64_t held;    // AllocatedSize: a segment's whole pages, or the request itself
  };
  const Case kCases[] = {{4608 * kKiB, 4, true, 4608 * kKiB},
                         {5 * kMiB, 4, true, 6 * kMiB},
                         {6348 * kKiB, 4, true, 6348 * kKiB},
                         {6656 * kKiB, 4, true, 8 * kMiB},
                         {4608 * kKiB, 0, true, 6 * kMiB},
                         {4608 * kKiB, 8, true, 4608 * kKiB},
                         {32 * kMiB + 1, 4, true, 34 * kMiB},
                         {5 * kMiB, 0, false, 5 * kMiB},
                         {32 * kMiB + 1, 0, false, BFCAllocator::RoundedBytes(32 * kMiB + 1)},
                         {44 * kMiB + kMiB / 2, 0, false, 44 * kMiB + kMiB / 2},
                         {60 * kMiB + kMiB / 2, 0, false, 62 * kMiB},
                         {8 * kMiB, 0, false, 8 * kMiB}};
  for (const Case& c : kCases) {
    SCOPED_TRACE(absl::StrCat(c.bytes, " bytes, divisor ", c.divisor,
                              c.after_free ? ", after a free" : ", nothing freed yet"));
    BFCOptions o{.name = "GPU:0", .memory_limit = 256 * kMiB, .allow_growth = true};
    EXPECT_EQ(o.segment_bytes, 4 * kMiB);
    EXPECT_EQ(o.segment_waste_divisor, 0u);  // the defaults
    EXPECT_EQ(o.segment_waste_divisor_before_free, 32u);
    o.segment_waste_divisor = c.divisor;
    BFCAllocator a(std::make_unique<FakeSubAllocator>(), o);
    if (c.after_free) Free(a, Alloc(a, 256));
    void* p = Alloc(a, c.bytes);
    EXPECT_THAT(a.AllocatedSize(p), IsOkAndHolds(c.held));
    // 8 MiB is a segment (whole pages, nothing wasted) though it has the request's size.
    const bool segment = c.held != BFCAllocator::RoundedBytes(c.bytes) || c.bytes == 8 * kMiB;
    EXPECT_EQ(a.DumpMemoryLog().find("Segments (regions of one block each): 1 in use") !=
                  std::string::npos,
              segment);
    // A shared region's rest serves the next request (after a free, the first region's hole is
    // its best fit instead); a segment's is never carved (the dump above).
    void* q = Alloc(a, 256 * kKiB);
    if (!c.after_free && !segment) EXPECT_EQ(U(q), U(p) + BFCAllocator::RoundedBytes(c.bytes));
    Free(a, q);
    Free(a, p);
    EXPECT_THAT(a.CheckInvariants(), IsOk());
  }
}

TEST(BFCAllocatorTest, CachedSegmentsGoBackBeforeTheLimit) {
  Fixture f = MakeWithSegments(16 * kMiB);
  std::vector<void*> cached;
  for (uint64_t mib : {8, 2, 4}) cached.push_back(Alloc(*f.bfc, mib * kMiB));
  for (void* p : cached) Free(*f.bfc, p);
  EXPECT_EQ(f.bfc->Stats().bytes_reserved, 14 * kMiB);
  // 5 MiB: no cached segment fits it within the slack (8 MiB wastes 3), and a new 6 MiB one
  // lacks 4 MiB under the limit: the cached 4 MiB segment is the smallest that is enough alone
  // (not the 8 MiB one, the largest).
  void* c = Alloc(*f.bfc, 5 * kMiB);
  AllocatorStats s = f.bfc->Stats();
  EXPECT_EQ(s.regions_unmapped, 1u);
  EXPECT_EQ(s.bytes_reserved, 16 * kMiB);
  EXPECT_EQ(f.fake->regions_outstanding(), 3u);  // 8, 2 and the new 6
  void* d8 = Alloc(*f.bfc, 8 * kMiB);
  EXPECT_EQ(U(d8), U(cached[0]));  // the 8 MiB one was still cached
  Free(*f.bfc, d8);
  Free(*f.bfc, c);

  // No single cached segment is enough: the largest go first until the request fits.
  Fixture g = MakeWithSegments(12 * kMiB);
  std::vector<void*> ps;
  for (uint64_t mib : {2, 2, 4, 2}) ps.push_back(Alloc(*g.bfc, mib * kMiB));
  for (void* p : ps) Free(*g.bfc, p);  // 10 MiB cached, 2 MiB left: 9 MiB lacks 7
  void* d = Alloc(*g.bfc, 9 * kMiB);   // a 10 MiB segment: gives back 4, 2 and 2 MiB
  EXPECT_EQ(g.bfc->Stats().regions_unmapped, 3u);
  EXPECT_EQ(g.bfc->Stats().bytes_reserved, 12 * kMiB);
  EXPECT_EQ(g.fake->regions_outstanding(), 2u);
  Free(*g.bfc, d);
}

// At the limit, a cached segment too large to be a good fit (or a shared region's free chunk)
// serves the request rather than an OOM; with garbage collection off nothing is given back.
TEST(BFCAllocatorTest, SegmentsFallBackRatherThanFail) {
  Fixture f = MakeWithSegments(10 * kMiB, /*gc=*/false);
  void* big = Alloc(*f.bfc, 8 * kMiB);
  Free(*f.bfc, big);
  void* a = Alloc(*f.bfc, 3 * kMiB);  // a 4 MiB segment would pass the limit
  EXPECT_EQ(U(a), U(big));
  EXPECT_EQ(f.bfc->Stats().regions_unmapped, 0u);
  auto b = f.bfc->AllocateRaw(3 * kMiB);  // 2 MiB left, nothing cached: OOM, state intact
  EXPECT_THAT(b.status(), StatusIs(absl::StatusCode::kResourceExhausted,
                                   AllOf(HasSubstr("GPU:0"), HasSubstr("would pass the limit"))));
  EXPECT_THAT(f.bfc->CheckInvariants(), IsOk());
  Free(*f.bfc, a);

  // A shared region's free chunk, as the last resort.
  Fixture g = MakeWithSegments(6 * kMiB);
  void* s = Alloc(*g.bfc, 512 * kKiB);  // shared region of 2 MiB
  void* t = Alloc(*g.bfc, 4 * kMiB);    // the rest of the limit
  void* u = Alloc(*g.bfc, kMiB);        // no room for a 2 MiB segment: the shared region's rest
  EXPECT_EQ(U(u), U(s) + 512 * kKiB);
  for (void* p : {s, t, u}) Free(*g.bfc, p);
}

// Odd segment options (every request a segment, pages of 0 B, 1000 B (not a multiple of 256),
// 3 MiB or larger than the limit)
// are served and keep every invariant; a page beyond the limit gives exact-size segments.
TEST(BFCAllocatorTest, SegmentOptionsAtTheirExtremesKeepInvariants) {
  for (uint64_t segment_bytes : {uint64_t{1}, 256 * kKiB, uint64_t{1} << 40}) {
    for (uint64_t page : {uint64_t{0}, uint64_t{1000}, 3 * kMiB, uint64_t{1} << 40, ~uint64_t{0}}) {
      auto fake = std::make_unique<FakeSubAllocator>();
      BFCOptions o{.name = "GPU:0", .memory_limit = 32 * kMiB, .allow_growth = true};
      o.segment_bytes = segment_bytes;
      o.segment_granularity = page;
      BFCAllocator a(std::move(fake), o);
      std::mt19937_64 rng(segment_bytes ^ page);
      std::vector<void*> live;
      for (int op = 0; op < 400; ++op) {
        if (live.empty() || rng() % 100 < 55) {
          absl::StatusOr<void*> p = a.AllocateRaw(uint64_t{256} << (rng() % 14));
          if (p.ok()) {
            live.push_back(*p);
          } else {
            ASSERT_THAT(p.status(), StatusIs(absl::StatusCode::kResourceExhausted));
          }
        } else {
          const size_t i = rng() % live.size();
          ASSERT_THAT(a.Deallocate(live[i]), IsOk());
          live[i] = live.back();
          live.pop_back();
        }
        ASSERT_THAT(a.CheckInvariants(), IsOk()) << segment_bytes << " " << page << " op " << op;
      }
      for (void* p : live) ASSERT_THAT(a.Deallocate(p), IsOk());
      EXPECT_THAT(a.ReleaseCachedMemory(), IsOk());
      EXPECT_EQ(a.Stats().bytes_reserved, 0u);
    }
  }
  // Pages larger than the limit: a segment is the request's own size.
  BFCOptions o{.name = "GPU:0", .memory_limit = 32 * kMiB, .allow_growth = true};
  o.segment_bytes = kMiB;
  o.segment_granularity = uint64_t{1} << 40;
  BFCAllocator a(std::make_unique<FakeSubAllocator>(), o);
  void* p = Alloc(a, 3 * kMiB + 1000);
  EXPECT_THAT(a.AllocatedSize(p), IsOkAndHolds(BFCAllocator::RoundedBytes(3 * kMiB + 1000)));
  Free(a, p);
}

// The device refusing a new segment before the limit (the card is shared) gives the cache back
// and tries again.
TEST(BFCAllocatorTest, SegmentsGiveTheCacheBackWhenTheDeviceRefuses) {
  FakeSubAllocatorOptions fo;
  fo.capacity = 12 * kMiB;
  auto fake = std::make_unique<FakeSubAllocator>(fo);
  FakeSubAllocator* sub = fake.get();
  BFCOptions o{.name = "GPU:0", .memory_limit = 64 * kMiB, .allow_growth = true};
  o.segment_bytes = kMiB;
  BFCAllocator a(std::move(fake), o);
  Free(a, Alloc(a, 8 * kMiB));  // cached: 8 of the device's 12 MiB
  // 5 MiB: the cached segment would waste 3 MiB (over the slack), a new one of 6 MiB is refused
  // (4 MiB left on the device), the cache goes back, the retry is served.
  void* p = Alloc(a, 5 * kMiB);
  EXPECT_EQ(a.Stats().regions_unmapped, 1u);
  EXPECT_EQ(sub->bytes_outstanding(), 6 * kMiB);
  Free(a, p);

  o.garbage_collection = false;  // ... unless told to keep it
  auto fake2 = std::make_unique<FakeSubAllocator>(fo);
  BFCAllocator b(std::move(fake2), o);
  Free(b, Alloc(b, 8 * kMiB));
  EXPECT_THAT(b.AllocateRaw(10 * kMiB).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("refused a region")));
  EXPECT_THAT(b.CheckInvariants(), IsOk());
}

TEST(BFCAllocatorTest, SegmentsNeedGrowth) {
  auto fake = std::make_unique<FakeSubAllocator>();
  FakeSubAllocator* sub = fake.get();
  BFCAllocator a(std::move(fake),
                 BFCOptions{.name = "GPU:0", .memory_limit = 16 * kMiB, .allow_growth = false});
  void* p = Alloc(a, 3 * kMiB);
  void* q = Alloc(a, 3 * kMiB);
  EXPECT_EQ(U(q), U(p) + 3 * kMiB);  // carved from the one region of the whole limit
  EXPECT_EQ(sub->alloc_calls(), 1);
  Free(a, p);
  Free(a, q);
}

TEST(BFCAllocatorTest, BacksOffWhenTheSubAllocatorRefuses) {
  FakeSubAllocatorOptions fo;
  fo.capacity = 7 * kMiB;
  Fixture f = Make(64 * kMiB, true, fo, 4 * kMiB);
  void* a = Alloc(*f.bfc, 3 * kMiB);  // region 4 MiB
  void* b = Alloc(*f.bfc, 2 * kMiB);  // 8 MiB refused, 4 MiB refused, 2 MiB granted
  AllocatorStats s = f.bfc->Stats();
  EXPECT_EQ(s.bytes_reserved, 6 * kMiB);
  EXPECT_EQ(f.fake->alloc_calls(), 4);
  auto c = f.bfc->AllocateRaw(2 * kMiB);
  EXPECT_THAT(c.status(), StatusIs(absl::StatusCode::kResourceExhausted,
                                   AllOf(HasSubstr("refused"), HasSubstr("fake"))));
  EXPECT_THAT(f.bfc->CheckInvariants(), IsOk());
  Free(*f.bfc, a);
  Free(*f.bfc, b);
}

TEST(BFCAllocatorTest, AlwaysFailingSubAllocatorWithACallLimit) {
  FakeSubAllocatorOptions fo;
  fo.fail_after_calls = 2;
  Fixture f = Make(64 * kMiB, true, fo);
  void* a = Alloc(*f.bfc, 2 * kMiB);
  void* b = Alloc(*f.bfc, 2 * kMiB);
  AllocatorStats before = f.bfc->Stats();
  for (int i = 0; i < 3; ++i) {
    EXPECT_THAT(f.bfc->AllocateRaw(4 * kMiB).status(),
                StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("injected failure")));
    EXPECT_THAT(f.bfc->CheckInvariants(), IsOk());
  }
  AllocatorStats after = f.bfc->Stats();
  EXPECT_EQ(after.bytes_reserved, before.bytes_reserved);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.num_ooms, 3u);
  void* c = Alloc(*f.bfc, 1 * kMiB);  // still fits in the second region
  for (void* p : {a, b, c}) Free(*f.bfc, p);
}

TEST(BFCAllocatorTest, BadPointersAreInvalidArgumentAndChangeNothing) {
  Fixture f = Make(8 * kMiB, false);
  FakeSubAllocatorOptions elsewhere;
  elsewhere.base_address = uint64_t{1} << 41;
  Fixture g = Make(8 * kMiB, false, elsewhere);
  void* a = Alloc(*f.bfc, 1000);
  void* other = Alloc(*g.bfc, 1000);
  AllocatorStats before = f.bfc->Stats();
  EXPECT_THAT(f.bfc->Deallocate(static_cast<char*>(a) + 256),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not allocated")));
  int local = 0;
  EXPECT_THAT(f.bfc->Deallocate(&local), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(f.bfc->Deallocate(other), StatusIs(absl::StatusCode::kInvalidArgument));
  // MAP_FAILED, (void*)-1: the live map's empty-slot marker must not match it.
  void* map_failed = reinterpret_cast<void*>(~uintptr_t{0});
  EXPECT_THAT(f.bfc->Deallocate(map_failed), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(f.bfc->AllocatedSize(map_failed).status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(f.bfc->AllocatedSize(other).status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(f.bfc->AllocatedSize(a), IsOkAndHolds(1024u));
  AllocatorStats mid = f.bfc->Stats();
  EXPECT_EQ(mid.num_frees, before.num_frees);
  EXPECT_EQ(mid.bytes_in_use, before.bytes_in_use);
  EXPECT_THAT(f.bfc->CheckInvariants(), IsOk());
  Free(*f.bfc, a);
  EXPECT_THAT(f.bfc->Deallocate(a),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("already freed")));
  AllocatorStats after = f.bfc->Stats();
  EXPECT_EQ(after.num_frees, before.num_frees + 1);
  EXPECT_EQ(after.bytes_in_use, 0u);
  EXPECT_THAT(f.bfc->CheckInvariants(), IsOk());
  Free(*g.bfc, other);
}

// The live table (chains through the chunk records) across its doublings: every live block is
// found, freed ones and pointers inside blocks are not, and a free before any allocation (no
// buckets yet) is a clean InvalidArgument.
TEST(BFCAllocatorTest, LiveTableFindsEveryBlockAcrossDoublings) {
  Fixture f = Make(8 * kMiB, false);
  EXPECT_THAT(f.bfc->Deallocate(reinterpret_cast<void*>(kBase)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not allocated")));
  constexpr int kBlocks = 5000;  // the table doubles from 64 buckets to 16384
  std::vector<void*> blocks;
  for (int i = 0; i < kBlocks; ++i) {
    absl::StatusOr<void*> p = f.bfc->AllocateRaw(512);
    ASSERT_THAT(p, IsOk());
    blocks.push_back(*p);
  }
  ASSERT_THAT(f.bfc->CheckInvariants(), IsOk());
  for (void* p : blocks) {
    ASSERT_THAT(f.bfc->AllocatedSize(p), IsOkAndHolds(512u));
    // The second 256 bytes of a block are inside it: not a block of their own.
    ASSERT_THAT(f.bfc->AllocatedSize(static_cast<char*>(p) + 256).status(),
                StatusIs(absl::StatusCode::kNotFound));
  }
  for (int i = 0; i < kBlocks; i += 2) ASSERT_THAT(f.bfc->Deallocate(blocks[i]), IsOk());
  ASSERT_THAT(f.bfc->CheckInvariants(), IsOk());
  for (int i = 0; i < kBlocks; ++i) {
    if (i % 2 == 0) {
      ASSERT_THAT(f.bfc->Deallocate(blocks[i]),
                  StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("already freed")));
    } else {
      ASSERT_THAT(f.bfc->AllocatedSize(blocks[i]), IsOkAndHolds(512u));
    }
  }
  EXPECT_EQ(f.bfc->Stats().num_allocs - f.bfc->Stats().num_frees, uint64_t{kBlocks / 2});
  for (int i = 1; i < kBlocks; i += 2) ASSERT_THAT(f.bfc->Deallocate(blocks[i]), IsOk());
  EXPECT_EQ(f.bfc->Stats().bytes_in_use, 0u);
  EXPECT_THAT(f.bfc->CheckInvariants(), IsOk());
}

TEST(BFCAllocatorTest, HugeRequestsAreOomNotOverflow) {
  Fixture f = Make(8 * kMiB, true);
  EXPECT_THAT(
      f.bfc->AllocateRaw(~uint64_t{0}).status(),
      StatusIs(absl::StatusCode::kResourceExhausted,
               AllOf(HasSubstr("over the limit"), HasSubstr("rounded to 18446744073709551615"))));
  EXPECT_THAT(f.bfc->AllocateRaw(8 * kMiB + 1).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));
  Free(*f.bfc, Alloc(*f.bfc, 8 * kMiB));
}

// A request over the limit names its own rounded size (not the limit), and the hint does not
// blame fragmentation: nothing is in use.
TEST(BFCAllocatorTest, OverTheLimitOomNamesTheRoundedRequest) {
  for (bool growth : {false, true}) {
    Fixture f = Make(8 * kMiB, growth);
    AllocatorStats before = f.bfc->Stats();
    auto p = f.bfc->AllocateRaw(9 * kMiB + 1);
    ASSERT_THAT(p.status(), StatusIs(absl::StatusCode::kResourceExhausted));
    const std::string msg(p.status().message());
    EXPECT_THAT(msg, AllOf(HasSubstr("GPU:0 (physical GPU 0)"), HasSubstr("(9437185 bytes"),
                           HasSubstr("rounded to 9437440)"), HasSubstr("over the limit"),
                           HasSubstr("limit 8 MiB"), HasSubstr("in use 0 B"),
                           HasSubstr("largest free block"), HasSubstr("fragmentation"),
                           HasSubstr("Hint: raise the device's memory limit")))
        << msg;
    EXPECT_THAT(msg, ::testing::Not(HasSubstr("rounded to 8388608"))) << msg;
    EXPECT_THAT(msg, ::testing::Not(HasSubstr("fragmented"))) << msg;
    EXPECT_EQ(f.bfc->Stats().num_ooms, before.num_ooms + 1);
    EXPECT_EQ(f.bfc->Stats().bytes_reserved, before.bytes_reserved);
    EXPECT_THAT(f.bfc->CheckInvariants(), IsOk());
  }
}

TEST(BFCAllocatorTest, DumpMemoryLogShowsBinsChunksAndOccupancy) {
  Fixture f = Make(8 * kMiB, false);
  void* a = Alloc(*f.bfc, 4 * kMiB);
  std::string log = f.bfc->DumpMemoryLog();
  EXPECT_THAT(log, AllOf(HasSubstr("GPU:0 (physical GPU 0)"), HasSubstr("bin 14"),
                         HasSubstr("in use (requested 4194304)"), HasSubstr("free"),
                         HasSubstr("occupancy [################################......")));
  Free(*f.bfc, a);
}

TEST(BFCAllocatorTest, ObserversSeeEveryEvent) {
  struct Recorder : AllocatorObserver {
    std::vector<AllocatorEvent> events;
    void OnAllocatorEvent(const std::string&, const AllocatorEvent& e) override {
      events.push_back(e);
    }
  } rec;
  Fixture f = Make(4 * kMiB, true);
  f.bfc->AddObserver(&rec);
  void* a = Alloc(*f.bfc, 1000);
  EXPECT_FALSE(f.bfc->AllocateRaw(8 * kMiB).ok());
  Free(*f.bfc, a);
  ASSERT_THAT(f.bfc->ReleaseEmptyRegions(), IsOkAndHolds(2 * kMiB));
  f.bfc->RemoveObserver(&rec);
  ASSERT_EQ(rec.events.size(), 5u);
  EXPECT_EQ(rec.events[0].kind, AllocatorEventKind::kMap);
  EXPECT_EQ(rec.events[1].kind, AllocatorEventKind::kAlloc);
  EXPECT_EQ(rec.events[1].bytes, 1000u);
  EXPECT_EQ(rec.events[1].bytes_in_use, 1024u);
  EXPECT_EQ(rec.events[2].kind, AllocatorEventKind::kOom);
  EXPECT_EQ(rec.events[3].kind, AllocatorEventKind::kFree);
  EXPECT_EQ(rec.events[3].ptr, U(a));
  EXPECT_EQ(rec.events[4].kind, AllocatorEventKind::kUnmap);
  EXPECT_EQ(rec.events[4].bytes_reserved, 0u);
}

// Random sizes (256 B .. 4 MiB, some aligned), random frees, every invariant after every op;
// growth off and on, with sliver parking, and with segments from 512 KiB (modes 4, 5).
TEST(BFCAllocatorTest, RandomizedInvariantsAfterEveryOperation) {
  for (int mode = 0; mode < 11; ++mode) {
    // 0-3: growth, parking; 4-5: segments (and parking); 6-8: small blocks from the top
    // (growth off, on, on with segments); 9-10: sliver reclaiming (growth off, on).
    const bool reclaim = mode >= 9, park = !reclaim && (mode & 2);
    const bool growth = reclaim ? mode == 10 : (mode & 1) || (mode >= 4 && mode != 6);
    const uint64_t segments = mode == 4 || mode == 5 || mode == 8 ? 512 * kKiB : 0;
    const uint64_t top = mode >= 6 && mode <= 8 ? 64 * kKiB << (mode - 6) : 0;
    Fixture f = Make(48 * kMiB, growth, {}, 1 * kMiB, 0, park, segments, top, reclaim);
    std::mt19937_64 rng(growth ? 7 + mode : 11 + mode);
    std::vector<std::pair<void*, uint64_t>> live;
    uint64_t requested = 0;
    int ooms = 0;
    for (int op = 0; op < 3000; ++op) {
      bool alloc = live.empty() || rng() % 100 < 55;
      if (alloc) {
        uint64_t bytes = uint64_t{256} << (rng() % 15);
        bytes += rng() % bytes;
        uint64_t alignment = rng() % 8 == 0 ? uint64_t{512} << (rng() % 8) : 256;
        absl::StatusOr<void*> p = f.bfc->AllocateRaw(bytes, alignment);
        if (p.ok()) {
          ASSERT_EQ(U(*p) % alignment, 0u);
          live.emplace_back(*p, bytes);
          requested += bytes;
        } else {
          ASSERT_THAT(p.status(), StatusIs(absl::StatusCode::kResourceExhausted));
          ++ooms;
        }
      } else {
        size_t i = rng() % live.size();
        ASSERT_THAT(f.bfc->Deallocate(live[i].first), IsOk());
        requested -= live[i].second;
        live[i] = live.back();
        live.pop_back();
      }
      ASSERT_THAT(f.bfc->CheckInvariants(), IsOk()) << "after op " << op;
      AllocatorStats s = f.bfc->Stats();
      ASSERT_GE(s.bytes_in_use, requested);
      ASSERT_LE(s.bytes_reserved, 48 * kMiB);
    }
    EXPECT_GT(ooms, 0);  // the test does reach the limit
    if (segments != 0) EXPECT_GT(f.bfc->Stats().regions_unmapped, 0u);  // cached ones went back
    for (auto& [p, n] : live) ASSERT_THAT(f.bfc->Deallocate(p), IsOk());
    EXPECT_THAT(f.bfc->CheckInvariants(), IsOk());
    EXPECT_EQ(f.bfc->Stats().bytes_in_use, 0u);
  }
}

TEST(BFCAllocatorTest, ManyThreads) {
  Fixture f = Make(256 * kMiB, true, {}, 1 * kMiB);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<void*> mine;
      for (int i = 0; i < 2000; ++i) {
        if (mine.size() < 16 && rng() % 2 == 0) {
          auto p = f.bfc->AllocateRaw(256 + rng() % (512 * kKiB));
          if (p.ok()) mine.push_back(*p);
        } else if (!mine.empty()) {
          EXPECT_THAT(f.bfc->Deallocate(mine.back()), IsOk());
          mine.pop_back();
        }
        if (i % 500 == 0) (void)f.bfc->Stats();
      }
      for (void* p : mine) EXPECT_THAT(f.bfc->Deallocate(p), IsOk());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_THAT(f.bfc->CheckInvariants(), IsOk());
  AllocatorStats s = f.bfc->Stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.num_allocs, s.num_frees);
}

}  // namespace
}  // namespace vgpu
