// Tests of the vmm allocator: exact granule accounting on the fake device
// (tests/fake_vmm_executor.h), real memory through stitched mappings on the host platform,
// randomized invariants, threads, errors.
#include "vgpu/allocator/vmm_allocator.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/allocator/factory.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/host/host_platform.h"
#include "vgpu/runtime/status_matchers.h"
#include "vgpu/tests/allocator_conformance.h"
#include "vgpu/tests/fake_vmm_executor.h"
#include "vgpu/tests/vmm_test_util.h"

namespace vgpu {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::vgpu::testing::CheckFakeVmm;
using ::vgpu::testing::CreateFakeVmmAllocator;
using ::vgpu::testing::FakeVmmExecutor;
using ::vgpu::testing::FreeStitchedBlock;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::IsOkAndHolds;
using ::vgpu::testing::MakeEdgeHoles;
using ::vgpu::testing::MakeVmmAllocator;
using ::vgpu::testing::PhysicalMap;
using ::vgpu::testing::StatusIs;
using ::vgpu::testing::StitchedBlock;
using ::vgpu::testing::StitchScatteredGranules;

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;
constexpr uint64_t kG = 2 * kMiB;  // granule
constexpr uint64_t CeilDivForTest(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

using Fake = ::vgpu::testing::FakeVmm;

// A second fake card whose virtual addresses do not overlap the default one's.
constexpr uint64_t kOtherVaBase = FakeVmmExecutor::kDefaultVaBase + (uint64_t{1} << 44);

Fake MakeFake(VmmOptions o, uint64_t capacity = 0,
              uint64_t va_base = FakeVmmExecutor::kDefaultVaBase) {
  absl::Status s;
  Fake f = ::vgpu::testing::MakeFakeVmm(kG, std::move(o), capacity, /*checked=*/true, va_base, &s);
  EXPECT_THAT(s, IsOk());
  return f;
}

VmmOptions Opts(uint64_t limit, bool growth, bool cache = true) {
  VmmOptions o;
  o.name = "GPU:0 (physical GPU 0)";
  o.memory_limit = limit;
  o.allow_growth = growth;
  o.enable_cache = cache;
  return o;
}

// The give-back epoch tests: growth, no cache, a one-granule reserve, and the epoch given.
VmmOptions EpochOpts(uint64_t epoch, uint64_t interval_ms) {
  VmmOptions o = Opts(64 * kG, true, /*cache=*/false);
  o.pool_keep_bytes = kG;
  o.give_back_epoch = epoch;
  o.give_back_interval_ms = interval_ms;
  return o;
}

// Allocates `bytes` and frees it at once.
void AllocFree(Fake& f, uint64_t bytes) {
  auto p = f.alloc->AllocateRaw(bytes);
  ASSERT_THAT(p.status(), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*p), IsOk());
}

std::pair<uint64_t, uint64_t> At(FakeVmmExecutor* b, void* p, uint64_t granule) {
  auto t = b->Translate(static_cast<char*>(p) + granule * kG);
  EXPECT_THAT(t.status(), IsOk());
  return t.ok() ? *t : std::pair<uint64_t, uint64_t>{0, 0};
}

// Executor::MapAll (the loop every platform without its own has): a refusal part way leaves
// nothing of the call mapped.
TEST(FakeVmmBackendTest, MapAllLeavesNothingMappedWhenOneMapFails) {
  FakeVmmExecutor b(kG, 4 * kG);
  auto va = b.ReserveAddressRange(2 * kG);
  ASSERT_THAT(va.status(), IsOk());
  auto h0 = b.CreatePhysicalMemory(kG), h1 = b.CreatePhysicalMemory(kG),
       h2 = b.CreatePhysicalMemory(kG);
  ASSERT_THAT(h2.status(), IsOk());
  char* base = static_cast<char*>(*va);
  ASSERT_THAT(b.Map(base + kG, kG, *h2, 0), IsOk());
  const PhysicalMemoryHandle both[] = {*h0, *h1};
  EXPECT_THAT(b.MapAll(base, both, 2), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(b.mapped_bytes(), kG);  // only h2's
  EXPECT_THAT(b.Translate(base).status(), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_THAT(b.Unmap(base + kG, kG), IsOk());
  ASSERT_THAT(b.MapAll(base, both, 2), IsOk());
  EXPECT_EQ(b.mapped_bytes(), 2 * kG);
  ASSERT_THAT(b.Unmap(base, 2 * kG), IsOk());
  for (const auto& h : {h0, h1, h2}) EXPECT_THAT(b.ReleasePhysicalMemory(*h), IsOk());
  EXPECT_THAT(b.FreeAddressRange(base, 2 * kG), IsOk());
}

// Executor::CreatePhysicalMemories / ReleasePhysicalMemories: a batch stops at the first
// refusal with what it made, separate handles each; checked (the base's loops over the
// single calls) and unchecked (the bench device's one-update fast path) alike.
TEST(FakeVmmBackendTest, BatchCreateStopsAtTheCapacityAndReleasesInOrder) {
  for (bool checked : {true, false}) {
    SCOPED_TRACE(checked ? "checked" : "unchecked");
    FakeVmmExecutor b(kG, 5 * kG, checked);
    PhysicalMemoryHandle h[8];
    EXPECT_THAT(b.CreatePhysicalMemories(kG, 0, h), IsOkAndHolds(0u));
    EXPECT_THAT(b.CreatePhysicalMemories(kG + 1, 2, h).status(),
                StatusIs(absl::StatusCode::kInvalidArgument));
    EXPECT_THAT(b.CreatePhysicalMemories(kG, 3, h), IsOkAndHolds(3u));
    EXPECT_THAT(b.CreatePhysicalMemories(kG, 4, h + 3), IsOkAndHolds(2u));  // room for two
    EXPECT_EQ(b.physical_bytes(), 5 * kG);
    EXPECT_THAT(b.CreatePhysicalMemories(kG, 1, h + 5).status(),
                StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("already created")));
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(h[i].bytes, kG);
      for (int j = 0; j < i; ++j) EXPECT_NE(h[i].value, h[j].value);
    }
    size_t released = 99;
    EXPECT_THAT(b.ReleasePhysicalMemories(h, 2, &released), IsOk());
    EXPECT_EQ(released, 2u);
    EXPECT_EQ(b.physical_bytes(), 3 * kG);
    if (checked) {
      // A handle the device does not know stops the batch: the ones before it went back.
      const PhysicalMemoryHandle bad[] = {h[2], h[0], h[3]};
      EXPECT_THAT(b.ReleasePhysicalMemories(bad, 3, &released),
                  StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown handle")));
      EXPECT_EQ(released, 1u);
      EXPECT_EQ(b.physical_bytes(), 2 * kG);
      EXPECT_THAT(b.ReleasePhysicalMemories(h + 3, 2, &released), IsOk());
    } else {
      EXPECT_THAT(b.ReleasePhysicalMemories(h + 2, 3, &released), IsOk());
      EXPECT_EQ(released, 3u);
    }
    EXPECT_EQ(b.physical_bytes(), 0u);
  }
}

TEST(FakeVmmBackendTest, ChecksLikeADriver) {
  FakeVmmExecutor b(kG, 4 * kG);
  EXPECT_THAT(b.ReserveAddressRange(kG + 1).status(), StatusIs(absl::StatusCode::kInvalidArgument));
  auto va = b.ReserveAddressRange(2 * kG);
  ASSERT_THAT(va.status(), IsOk());
  auto h = b.CreatePhysicalMemory(2 * kG);
  ASSERT_THAT(h.status(), IsOk());
  EXPECT_THAT(b.CreatePhysicalMemory(4 * kG).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));
  // Past the reservation, past the handle, double map.
  EXPECT_THAT(b.Map(*va, 3 * kG, *h, 0), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(b.Map(*va, kG, *h, 2 * kG), StatusIs(absl::StatusCode::kInvalidArgument));
  // A mapping covers its whole allocation (as cuMemMap on a real card).
  EXPECT_THAT(b.Map(*va, kG, *h, kG),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("whole allocation")));
  EXPECT_THAT(b.Map(*va, kG, *h, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("whole allocation")));
  ASSERT_THAT(b.Map(*va, 2 * kG, *h, 0), IsOk());
  EXPECT_THAT(b.Map(*va, 2 * kG, *h, 0), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(b.mapped_bytes(), 2 * kG);
  EXPECT_THAT(b.ReleasePhysicalMemory(*h), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(b.FreeAddressRange(*va, 2 * kG), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(b.Unmap(static_cast<char*>(*va) + kG, kG),
              StatusIs(absl::StatusCode::kInvalidArgument));  // part of a mapping
  EXPECT_THAT(b.Unmap(*va, kG), StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_THAT(b.Unmap(*va, 2 * kG), IsOk());
  EXPECT_THAT(b.FreeAddressRange(*va, 2 * kG), IsOk());
  EXPECT_THAT(b.ReleasePhysicalMemory(*h), IsOk());
  EXPECT_EQ(b.physical_bytes(), 0u);
  EXPECT_EQ(b.reserved_ranges(), 0u);
}

TEST(VmmAllocatorTest, RejectsBadOptions) {
  EXPECT_THAT(CreateFakeVmmAllocator(kG, Opts(kG - 1, true)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("granule")));
  EXPECT_THAT(CreateFakeVmmAllocator(3 * kMiB, Opts(64 * kMiB, true)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("power of two")));
}

TEST(VmmAllocatorTest, GrowthOffTakesTheLimitUpFront) {
  Fake f = MakeFake(Opts(10 * kG, false), /*capacity=*/16 * kG);
  EXPECT_EQ(f.backend->physical_bytes(), 10 * kG);
  auto c = f.alloc->Granules();
  EXPECT_EQ(c.created, 10u);
  EXPECT_EQ(c.free, 10u);
  EXPECT_EQ(c.mapped, 0u);
  EXPECT_EQ(f.alloc->Stats().bytes_reserved, 0u);  // reserved = mapped
  // A card without the memory refuses creation.
  FakeVmmExecutor backend(kG, 8 * kG);
  EXPECT_THAT(VmmAllocator::Create(&backend, Opts(10 * kG, false)).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("up front")));
}

TEST(VmmAllocatorTest, LargeBlocksRoundToGranulesAndCountMapped) {
  VmmOptions o = Opts(10 * kG, false, /*cache=*/false);
  o.share_tail_granules = false;  // whole granules (TailSharing* below for the default)
  Fake f = MakeFake(o);
  auto p = f.alloc->AllocateRaw(3 * kG + 1);
  ASSERT_THAT(p.status(), IsOk());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) % kG, 0u);
  auto c = f.alloc->Granules();
  EXPECT_EQ(c.mapped, 4u);
  EXPECT_EQ(c.in_blocks, 4u);
  EXPECT_EQ(c.free, 6u);
  AllocatorStats s = f.alloc->Stats();
  EXPECT_EQ(s.bytes_in_use, 4 * kG);
  EXPECT_EQ(s.bytes_reserved, 4 * kG);
  EXPECT_EQ(s.regions_mapped, 4u);
  EXPECT_EQ(f.backend->mapped_bytes(), 4 * kG);
  ASSERT_THAT(f.alloc->Deallocate(*p), IsOk());
  s = f.alloc->Stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.bytes_reserved, 0u);
  EXPECT_EQ(s.regions_unmapped, 4u);
  EXPECT_EQ(s.peak_bytes_in_use, 4 * kG);
  EXPECT_EQ(s.peak_bytes_reserved, 4 * kG);
  EXPECT_EQ(f.alloc->Granules().free, 10u);
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
}

// The heart of it: free granules scattered between live blocks still make one big block.
// Tail sharing (the default): 1.5 + 2.5 granules fit in 4 granules, not 2 + 3: the second
// block starts inside the first one's last granule, which both map; freeing either keeps
// the other intact, and the shared granule goes back to the pool once both are gone.
TEST(VmmAllocatorTest, TailSharingPacksBlocksIntoSharedGranules) {
  Fake f = MakeFake(Opts(10 * kG, false, /*cache=*/false));
  auto a = f.alloc->AllocateRaw(kG + kG / 2);
  auto b = f.alloc->AllocateRaw(2 * kG + kG / 2);
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*b) % kG, kG / 2);  // starts in a's tail granule
  auto c = f.alloc->Granules();
  EXPECT_EQ(c.mapped, 4u);
  EXPECT_EQ(c.shared, 1u);  // a's tail is b's head; b ends on a granule
  EXPECT_EQ(f.alloc->Stats().bytes_in_use, 4 * kG);
  ASSERT_THAT(CheckFakeVmm(f), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*a), IsOk());
  ASSERT_THAT(CheckFakeVmm(f), IsOk());
  EXPECT_EQ(f.alloc->Granules().mapped, 3u);  // a's whole granule went, the shared one stays
  // A block that ends inside the free lower part of b's head granule reuses it.
  auto d = f.alloc->AllocateRaw(kG + kG / 4);
  ASSERT_THAT(d.status(), IsOk());
  ASSERT_THAT(CheckFakeVmm(f), IsOk());
  EXPECT_EQ(f.alloc->Granules().mapped, 4u);  // one new granule, the tail in the shared one
  ASSERT_THAT(f.alloc->Deallocate(*b), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*d), IsOk());
  ASSERT_THAT(CheckFakeVmm(f), IsOk());
  EXPECT_EQ(f.alloc->Granules().mapped, 0u);
  EXPECT_EQ(f.alloc->Granules().shared, 0u);
  EXPECT_EQ(f.alloc->Stats().bytes_in_use, 0u);
}

// A range unmapped whole keeps its virtual reservation for the next new range that needs as
// much or up to twice as much (no reserve and free of address space per block: two driver
// calls on a card); Trim and the destructor free the spares. The fake device hands out a new
// address for every reservation, so the same address twice is the reuse. Each block below is
// allocated with nothing else live (no open part to take as a head): a block of n granules
// and a part needs n + 2 granules of space (a head's and a tail's room).
TEST(VmmAllocatorTest, UnmappedRangesKeepTheirAddressSpaceForTheNextBlock) {
  Fake f = MakeFake(Opts(32 * kG, false, /*cache=*/false));
  const uint64_t arena = f.backend->reserved_ranges();  // the slab arena's one reservation
  auto a = f.alloc->AllocateRaw(kG + kG / 2);           // 3 granules of space
  ASSERT_THAT(a.status(), IsOk());
  EXPECT_EQ(f.backend->reserved_ranges(), arena + 1);
  ASSERT_THAT(f.alloc->Deallocate(*a), IsOk());
  EXPECT_EQ(f.alloc->Granules().mapped, 0u);           // unmapped (no cache)...
  EXPECT_EQ(f.backend->reserved_ranges(), arena + 1);  // ...its address space kept
  ASSERT_THAT(CheckFakeVmm(f), IsOk());
  auto b = f.alloc->AllocateRaw(kG + kG / 4);  // 3
  ASSERT_THAT(b.status(), IsOk());
  EXPECT_EQ(*b, *a);
  EXPECT_EQ(f.backend->reserved_ranges(), arena + 1);
  ASSERT_THAT(f.alloc->Deallocate(*b), IsOk());
  auto c = f.alloc->AllocateRaw(5 * kG + kG / 2);  // 7: more than the spare, a new reservation
  ASSERT_THAT(c.status(), IsOk());
  EXPECT_NE(*c, *a);
  EXPECT_EQ(f.backend->reserved_ranges(), arena + 2);
  ASSERT_THAT(f.alloc->Deallocate(*c), IsOk());
  ASSERT_THAT(CheckFakeVmm(f), IsOk());
  auto d = f.alloc->AllocateRaw(2 * kG + kG / 2);  // 4: the 7-granule spare, the smallest enough
  ASSERT_THAT(d.status(), IsOk());
  EXPECT_EQ(*d, *c);
  ASSERT_THAT(f.alloc->Deallocate(*d), IsOk());
  auto x = f.alloc->AllocateRaw(kG + kG / 2);  // 3: the 3-granule spare
  ASSERT_THAT(x.status(), IsOk());
  EXPECT_EQ(*x, *a);
  // Its tail's free part heads the next block (2 granules of space): the 7-granule spare is
  // more than twice that, so a new reservation.
  auto y = f.alloc->AllocateRaw(kG + kG / 2);
  ASSERT_THAT(y.status(), IsOk());
  EXPECT_EQ(f.backend->reserved_ranges(), arena + 3);
  ASSERT_THAT(CheckFakeVmm(f), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*x), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*y), IsOk());
  EXPECT_EQ(f.backend->reserved_ranges(), arena + 3);
  ASSERT_THAT(f.alloc->Trim(), IsOk());
  EXPECT_EQ(f.backend->reserved_ranges(), arena);
  ASSERT_THAT(CheckFakeVmm(f), IsOk());
}

// Fails when two live blocks (or one with itself) share a physical byte (PhysicalMap).
void ExpectNoPhysicalOverlap(Fake& f, const std::vector<std::pair<void*, uint64_t>>& live) {
  PhysicalMap physical(f.backend.get());
  for (const auto& [p, bytes] : live) ASSERT_THAT(physical.Add(p, bytes), IsOk());
}

// Allocations and frees on a fake-device allocator, each followed by the fake device's checks
// and, after an allocation, ExpectNoPhysicalOverlap over the live blocks.
struct CheckedBlocks {
  Fake& f;
  std::vector<std::pair<void*, uint64_t>> live;

  void* Alloc(uint64_t bytes) {
    auto p = f.alloc->AllocateRaw(bytes);
    EXPECT_THAT(p.status(), IsOk());
    if (!p.ok()) return nullptr;
    live.emplace_back(*p, bytes);
    EXPECT_THAT(CheckFakeVmm(f), IsOk());
    ExpectNoPhysicalOverlap(f, live);
    return *p;
  }
  void Free(void* p) {
    ASSERT_THAT(f.alloc->Deallocate(p), IsOk());
    live.erase(std::find_if(live.begin(), live.end(), [&](auto& e) { return e.first == p; }));
    ASSERT_THAT(CheckFakeVmm(f), IsOk());
  }
};

// Frees a random live block (swapped with the last, then popped), keeping live_bytes.
void FreeRandomBlock(Fake& f, std::vector<std::pair<void*, uint64_t>>& live, std::mt19937_64& rng,
                     uint64_t* live_bytes) {
  const size_t k = rng() % live.size();
  ASSERT_THAT(f.alloc->Deallocate(live[k].first), IsOk());
  *live_bytes -= live[k].second;
  live[k] = live.back();
  live.pop_back();
}

// Granule X with a gap between two live blocks: r's tail [0, 1M), a gap [1M, 1.5M), q's head
// [1.5M, 2M) (p, freed, had [0, 1.5M)). 256 KiB and up are large blocks.
struct GapBetweenTwoBlocks {
  explicit GapBetweenTwoBlocks(bool inner_blocks)
      : f(MakeFake([&] {
          VmmOptions o = Opts(16 * kG, false, /*cache=*/false);
          o.small_block_max = 64 * kKiB;
          o.inner_blocks = inner_blocks;
          return o;
        }())) {
    void* p = blocks.Alloc(kMiB + kMiB / 2);  // X [0, 1.5M)
    q = blocks.Alloc(kG + kMiB / 2);          // X's upper 0.5M as its head, a granule more
    blocks.Free(p);                           // X's [0, 1.5M) open to a tail
    r = blocks.Alloc(kG + kMiB);              // a granule and X's [0, 1M) as its tail
    EXPECT_EQ(f.alloc->Granules().mapped, 3u);
  }
  Fake f;
  CheckedBlocks blocks{f};
  void* q = nullptr;
  void* r = nullptr;
};

// A block below one granule that would take a fresh granule for its tail (no open part holds it
// as a head or a tail) takes the start of a gap between two live blocks instead (an inner
// block, mapped alone), so one granule holds three blocks. Every order of frees offers the
// right parts (a tail's start, a head's end, the gap again) and gives the granule back.
TEST(VmmAllocatorTest, InnerBlockTakesAGapBetweenTwoBlocks) {
  const int kOrders[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
  for (const auto& order : kOrders) {
    SCOPED_TRACE(absl::StrCat("frees in order ", order[0], order[1], order[2]));
    GapBetweenTwoBlocks x(/*inner_blocks=*/true);
    Fake& f = x.f;
    auto dump_has = [&](const std::string& s) {
      EXPECT_THAT(f.alloc->DumpMemoryLog(), HasSubstr(s));
    };
    dump_has("gaps beside live blocks 512 KiB (1 open to an inner block)");
    void* s = x.blocks.Alloc(256 * kKiB);  // inner: X [1M, 1.25M)
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(reinterpret_cast<uint64_t>(s) % kG, kMiB);
    EXPECT_EQ(f.alloc->Granules().mapped, 3u);
    EXPECT_EQ(f.alloc->Granules().inner_blocks, 1u);
    EXPECT_EQ(f.alloc->Granules().views, 5u);  // X three times, q's and r's granules
    dump_has(
        "shared granules: 1 (1 with an inner block); open upper parts 0 (0 B), open lower "
        "parts 0 (0 B), gaps beside live blocks 256 KiB (0 open to an inner block)");
    void* const blocks[3] = {x.r, s, x.q};  // X's lower, inner and upper blocks
    ASSERT_NO_FATAL_FAILURE(x.blocks.Free(blocks[order[0]]));
    switch (order[0]) {
      case 0:  // X's start is open to a tail, up to the inner block
        dump_has("open upper parts 0 (0 B), open lower parts 1 (1 MiB)");
        break;
      case 1:  // the gap is whole again, open to the next inner block
        dump_has("gaps beside live blocks 512 KiB (1 open to an inner block)");
        break;
      case 2:  // X's end is open to a head, from the inner block's end
        dump_has("open upper parts 1 (768 KiB), open lower parts 0 (0 B)");
        break;
    }
    ASSERT_NO_FATAL_FAILURE(x.blocks.Free(blocks[order[1]]));
    // X for the block left, and its own granule when that is r or q.
    EXPECT_EQ(f.alloc->Granules().mapped, order[2] == 1 ? 1u : 2u);
    ASSERT_NO_FATAL_FAILURE(x.blocks.Free(blocks[order[2]]));
    EXPECT_EQ(f.alloc->Granules().mapped, 0u);
    EXPECT_EQ(f.alloc->Granules().shared, 0u);
    EXPECT_EQ(f.alloc->Granules().inner_blocks, 0u);
    EXPECT_EQ(f.alloc->Granules().inner_blocks_made, 1u);
  }
}

// Off (VmmOptions::inner_blocks = false), the same block takes a fresh granule.
TEST(VmmAllocatorTest, InnerBlocksOff) {
  GapBetweenTwoBlocks x(/*inner_blocks=*/false);
  ASSERT_NE(x.blocks.Alloc(256 * kKiB), nullptr);
  EXPECT_EQ(x.f.alloc->Granules().mapped, 4u);
  EXPECT_EQ(x.f.alloc->Granules().inner_blocks_made, 0u);
  while (!x.blocks.live.empty()) {
    ASSERT_NO_FATAL_FAILURE(x.blocks.Free(x.blocks.live.back().first));
  }
  EXPECT_EQ(x.f.alloc->Granules().mapped, 0u);
}

// Random blocks of 64 KiB - 2 MiB, most of them laid out in shared granules, many inner, freed
// in random order: no two live blocks share a physical byte, the invariants hold, and the
// views the device holds are the ones counted.
TEST(VmmAllocatorTest, InnerBlocksUnderRandomChurn) {
  for (bool growth : {false, true}) {
    SCOPED_TRACE(growth ? "growth" : "no growth");
    VmmOptions o = Opts(256 * kG, growth, /*cache=*/true);
    o.small_block_max = 64 * kKiB;
    Fake f = MakeFake(o);
    std::mt19937_64 rng(11);
    std::vector<std::pair<void*, uint64_t>> live;
    uint64_t live_bytes = 0;
    for (int op = 0; op < 20000; ++op) {
      if (live.size() < 100 || (live.size() < 200 && rng() % 2 == 0)) {
        const uint64_t bytes = 64 * kKiB + rng() % (2 * kMiB - 64 * kKiB);
        auto p = f.alloc->AllocateRaw(bytes);
        ASSERT_THAT(p.status(), IsOk());
        live.emplace_back(*p, bytes);
        live_bytes += bytes;
      } else {
        ASSERT_NO_FATAL_FAILURE(FreeRandomBlock(f, live, rng, &live_bytes));
      }
      if (op % 500 == 0) {
        ASSERT_THAT(CheckFakeVmm(f), IsOk()) << "op " << op;
        ASSERT_NO_FATAL_FAILURE(ExpectNoPhysicalOverlap(f, live));
      }
    }
    EXPECT_GT(f.alloc->Granules().inner_blocks_made, 100u);
    for (const auto& [p, bytes] : live) ASSERT_THAT(f.alloc->Deallocate(p), IsOk());
    ASSERT_THAT(CheckFakeVmm(f), IsOk());
    EXPECT_EQ(f.alloc->Granules().inner_blocks, 0u);
    EXPECT_EQ(f.alloc->Granules().shared, 0u);
  }
}

// A block whose bytes past whole granules fit an open upper part with less to spare than any
// tail takes the end of that part (a short head), and one that fits an open lower part takes
// its start (no head), instead of a fresh granule.
TEST(VmmAllocatorTest, TailSharingPlacesShortHeadsAndTails) {
  Fake f = MakeFake(Opts(16 * kG, false, /*cache=*/false));
  CheckedBlocks blocks{f};
  auto alloc = [&](uint64_t bytes) { return blocks.Alloc(bytes); };
  auto free = [&](void* p) { blocks.Free(p); };
  auto offset = [](void* p) { return reinterpret_cast<uint64_t>(p) % kG; };
  void* a = alloc(kMiB);  // granule X: a [0, 1M), 1M open above
  EXPECT_EQ(f.alloc->Granules().mapped, 1u);
  void* b = alloc(kMiB + kMiB / 2);  // X's upper 1M as its head, a tail in fresh granule Y
  EXPECT_EQ(offset(b), kMiB);
  EXPECT_EQ(f.alloc->Granules().mapped, 2u);
  // 1.25M: Y's open upper part is 1.5M; the block takes its last 1.25M, no third granule.
  void* c = alloc(kMiB + kMiB / 4);
  EXPECT_EQ(offset(c), kMiB - kMiB / 4);
  EXPECT_EQ(f.alloc->Granules().mapped, 2u);
  free(b);  // X's upper part and Y's lower part [0, 0.75M) (up to c) are open again
  // 1.75M: X's upper 1M as the head, the tail exactly fills Y's open lower part.
  void* d = alloc(kMiB + 3 * kMiB / 4);
  EXPECT_EQ(offset(d), kMiB);
  EXPECT_EQ(f.alloc->Granules().mapped, 2u);
  for (void* p : {a, c, d}) free(p);
  EXPECT_EQ(f.alloc->Granules().mapped, 0u);
  EXPECT_EQ(f.alloc->Granules().shared, 0u);

  // A tail shorter than the open lower part it takes leaves a gap below the next block's head;
  // the gap joins the free upper part when that block is freed.
  void* e = alloc(kMiB + kMiB / 2);  // X: e [0, 1.5M), 0.5M open above
  void* g = alloc(kMiB + kMiB / 2);  // head X[1.5M, 2M), tail Y[0, 1M)
  free(e);                           // X's lower 1.5M is open
  void* h = alloc(kMiB + kMiB / 4);  // no head: X[0, 1.25M), the tail fits X's open lower part
  EXPECT_EQ(offset(h), 0u);
  EXPECT_EQ(f.alloc->Granules().mapped, 2u);
  free(g);  // X's free upper part is now [1.25M, 2M): 0.75M, gap included
  void* i = alloc(kG + 3 * kMiB / 4);  // head 0.75M + one whole granule
  EXPECT_EQ(offset(i), kMiB + kMiB / 4);
  EXPECT_EQ(f.alloc->Granules().mapped, 2u);
  for (void* p : {h, i}) free(p);
  EXPECT_EQ(f.alloc->Granules().mapped, 0u);
}

// Random sizes of one to two granules: each block's partial granules find room beside other
// blocks, so the peak mapped memory stays near the peak live bytes (1.33x before short heads
// and tails and gap merging, ~1.04x after; 1.10 is the bar here).
// Edge views: a small request that no slab hole fits, when no new slab can be mapped, takes
// the free end of one slab and the free start of another, their granules mapped back to back
// in a view of its own; the same request is refused without them. The parts go back when the
// block is freed, and the view is unmapped at the next request that would fail or on Trim().
TEST(VmmAllocatorTest, EdgeViewsJoinTheFreeEndsOfTwoSlabs) {
  for (bool views : {true, false}) {
    SCOPED_TRACE(views ? "edge views" : "no edge views");
    VmmOptions o = Opts(2 * kG, false, /*cache=*/false);
    o.edge_views = views;
    Fake f = MakeFake(o);
    std::vector<std::pair<void*, uint64_t>> live;
    auto alloc = [&](uint64_t bytes) -> char* {
      auto p = f.alloc->AllocateRaw(bytes);
      EXPECT_THAT(p.status(), IsOk()) << bytes;
      EXPECT_THAT(CheckFakeVmm(f), IsOk());
      if (!p.ok()) return nullptr;
      live.emplace_back(*p, bytes);
      return static_cast<char*>(*p);
    };
    auto free = [&](void* p) {
      EXPECT_THAT(f.alloc->Deallocate(p), IsOk());
      EXPECT_THAT(CheckFakeVmm(f), IsOk());
      live.erase(
          std::find_if(live.begin(), live.end(), [&](const auto& b) { return b.first == p; }));
    };
    // Slab A: 600, 800, 648 KiB; slab B: 648, 800, 600 KiB. Both are full: the limit is reached.
    // Then a3 (the end of A) and b1 (the start of B) are freed: 648 KiB free at each, and no
    // hole fits 1000 KiB (a small block: under half a granule).
    std::vector<char*> blocks;
    ASSERT_NO_FATAL_FAILURE(
        MakeEdgeHoles(f.alloc.get(), kG, &blocks, [&](int, void* q, uint64_t bytes) {
          EXPECT_THAT(CheckFakeVmm(f), IsOk());
          live.emplace_back(q, bytes);
        }));
    char* a3 = blocks[2];
    char* b1 = blocks[3];
    for (char* q : {a3, b1}) {
      live.erase(
          std::find_if(live.begin(), live.end(), [&](const auto& b) { return b.first == q; }));
    }
    EXPECT_EQ(f.alloc->Granules().slabs, 2u);
    EXPECT_THAT(CheckFakeVmm(f), IsOk());
    constexpr uint64_t kR = 1000 * kKiB;
    const auto before = f.alloc->Granules();
    auto p = f.alloc->AllocateRaw(kR);
    if (!views) {
      EXPECT_THAT(p.status(), StatusIs(absl::StatusCode::kResourceExhausted,
                                       HasSubstr("no slab has room for it")));
      EXPECT_THAT(CheckFakeVmm(f), IsOk());
      for (auto [q, bytes] : std::vector(live)) free(q);
      continue;
    }
    ASSERT_THAT(p.status(), IsOk());
    char* v = static_cast<char*>(*p);
    live.emplace_back(v, kR);
    ASSERT_THAT(CheckFakeVmm(f), IsOk());
    auto after = f.alloc->Granules();
    EXPECT_EQ(after.edge_views, 1u);
    EXPECT_EQ(after.map_calls, before.map_calls + 1);
    EXPECT_EQ(after.mapped, before.mapped);  // no granule more: the view maps two slab granules
    EXPECT_EQ(after.views, before.views + 2);
    // Its first 648 KiB are a3's bytes, the rest the start of b1's.
    const uint64_t vu = reinterpret_cast<uint64_t>(v);
    auto at = [&](uint64_t va) {
      auto t = f.backend->Translate(reinterpret_cast<void*>(va / kG * kG));
      EXPECT_THAT(t.status(), IsOk());
      return t.ok() ? std::make_pair(t->first, t->second + va % kG) : std::make_pair(0ul, 0ul);
    };
    EXPECT_EQ(at(vu), at(reinterpret_cast<uint64_t>(a3)));
    EXPECT_EQ(at(vu + 648 * kKiB), at(reinterpret_cast<uint64_t>(b1)));
    EXPECT_EQ(at(vu + kR - 256), at(reinterpret_cast<uint64_t>(b1) + 352 * kKiB - 256));
    ASSERT_NO_FATAL_FAILURE(ExpectNoPhysicalOverlap(f, live));
    EXPECT_EQ(f.alloc->Stats().bytes_in_use, 600 * kKiB + 2 * 800 * kKiB + 600 * kKiB + kR);
    EXPECT_THAT(f.alloc->DumpMemoryLog(), HasSubstr("Edge views"));
    // What is left of b1's start serves a block that fits it.
    EXPECT_EQ(alloc(200 * kKiB), b1 + 352 * kKiB);
    ASSERT_NO_FATAL_FAILURE(ExpectNoPhysicalOverlap(f, live));
    // Freed, its parts are free again where they are; the view stays mapped until Trim().
    free(v);
    EXPECT_EQ(f.alloc->Granules().edge_views, 1u);
    EXPECT_EQ(alloc(648 * kKiB), a3);
    const uint64_t unmaps = f.alloc->Granules().unmap_calls;
    ASSERT_THAT(f.alloc->Trim(), IsOk());
    EXPECT_EQ(f.alloc->Granules().edge_views, 0u);
    EXPECT_EQ(f.alloc->Granules().edge_views_made, 1u);
    EXPECT_EQ(f.alloc->Granules().unmap_calls, unmaps + 1);
    ASSERT_THAT(CheckFakeVmm(f), IsOk());
    for (auto [q, bytes] : std::vector(live)) free(q);
    EXPECT_EQ(f.alloc->Stats().bytes_in_use, 0u);
  }
}

// Random small blocks (256 B - 1 MiB, under live_cap bytes in all) for `ops` operations, the
// fake checked after each and physical overlap every 16; then everything freed and trimmed: no
// edge view left. Adds the allocations refused (ResourceExhausted only) to *ooms.
void RandomSmallBlocksAtTheLimit(Fake& f, uint64_t seed, int ops, uint64_t live_cap, int* ooms) {
  std::mt19937_64 rng(seed);
  std::vector<std::pair<void*, uint64_t>> live;
  uint64_t live_bytes = 0;
  for (int i = 0; i < ops; ++i) {
    if (live.empty() || (live_bytes < live_cap && rng() % 100 < 60)) {
      const uint64_t bytes = 256 + rng() % kMiB;
      auto p = f.alloc->AllocateRaw(bytes);
      if (p.ok()) {
        live.emplace_back(*p, bytes);
        live_bytes += bytes;
      } else {
        ASSERT_THAT(p.status(), StatusIs(absl::StatusCode::kResourceExhausted));
        ++*ooms;
      }
    } else {
      ASSERT_NO_FATAL_FAILURE(FreeRandomBlock(f, live, rng, &live_bytes));
    }
    ASSERT_THAT(CheckFakeVmm(f), IsOk()) << "op " << i;
    if (i % 16 == 0) ASSERT_NO_FATAL_FAILURE(ExpectNoPhysicalOverlap(f, live)) << "op " << i;
  }
  for (const auto& [p, bytes] : live) ASSERT_THAT(f.alloc->Deallocate(p), IsOk());
  EXPECT_EQ(f.alloc->Stats().bytes_in_use, 0u);
  ASSERT_THAT(f.alloc->Trim(), IsOk());
  EXPECT_EQ(f.alloc->Granules().edge_views, 0u);
  ASSERT_THAT(CheckFakeVmm(f), IsOk());
}

// Small random sizes at their limit: edge views are made and freed many times over, and no
// two blocks ever share a byte of a granule; every invariant holds at each step (the slab BFC's
// index of free edges included) and nothing is lost. The same run without views fails more
// requests than with views made only where a request would fail; the last run also lets views
// compete with holes (always near this limit).
TEST(VmmAllocatorTest, EdgeViewsUnderRandomSmallSizesAtTheLimit) {
  int ooms[4] = {0, 0, 0, 0};
  for (int run = 0; run < 4; ++run) {
    const bool views = run > 0, growth = run == 2, best_fit = run == 3;
    SCOPED_TRACE(absl::StrCat(views ? "edge views" : "no edge views", growth ? ", growth" : "",
                              best_fit ? ", in best fit" : ""));
    VmmOptions o = Opts(8 * kG, growth, /*cache=*/false);
    o.edge_views = views;
    o.slab_edge_views_in_best_fit = best_fit;
    Fake f = MakeFake(o);
    ASSERT_NO_FATAL_FAILURE(RandomSmallBlocksAtTheLimit(f, 5, 4000, 15 * kMiB, &ooms[run]));
    if (views) EXPECT_GT(f.alloc->Granules().edge_views_made, 10u);
  }
  EXPECT_GT(ooms[0], 0);        // the limit was reached
  EXPECT_LT(ooms[1], ooms[0]);  // the same run, growth off both
  EXPECT_GT(ooms[2], 0);
  EXPECT_GT(ooms[3], 0);
}

// The same at the limit over slabs of four granules: a view joins the last granule of one slab
// and the first of another.
TEST(VmmAllocatorTest, EdgeViewsOverFourGranuleSlabs) {
  for (bool growth : {false, true}) {
    SCOPED_TRACE(growth ? "growth" : "no growth");
    VmmOptions o = Opts(32 * kG, growth, /*cache=*/false);
    o.slab_bytes = 4 * kG;
    o.slab_edge_views_in_best_fit = true;
    Fake f = MakeFake(o);
    int ooms = 0;
    ASSERT_NO_FATAL_FAILURE(RandomSmallBlocksAtTheLimit(f, growth ? 3 : 4, 6000, 62 * kMiB, &ooms));
    EXPECT_GT(ooms, 0);
    EXPECT_GT(f.alloc->Granules().edge_views_made, 0u);
  }
}

TEST(VmmAllocatorTest, TailSharingPacksRandomSizesOfOneToTwoGranules) {
  Fake f = MakeFake(Opts(1024 * kG, false, /*cache=*/false));
  std::mt19937_64 rng(5);
  std::vector<std::pair<void*, uint64_t>> live;
  uint64_t live_bytes = 0, peak_live = 0, peak_mapped = 0;
  for (int op = 0; op < 20000; ++op) {
    const bool grow = live.size() < 150 || (live.size() < 300 && rng() % 2 == 0);
    if (grow) {
      const uint64_t bytes = kMiB + rng() % kMiB;
      auto p = f.alloc->AllocateRaw(bytes);
      ASSERT_THAT(p.status(), IsOk());
      live.emplace_back(*p, bytes);
      live_bytes += bytes;
      peak_live = std::max(peak_live, live_bytes);
      peak_mapped = std::max(peak_mapped, f.alloc->Granules().mapped * kG);
    } else {
      ASSERT_NO_FATAL_FAILURE(FreeRandomBlock(f, live, rng, &live_bytes));
    }
    if (op % 1000 == 0) {
      ASSERT_THAT(CheckFakeVmm(f), IsOk()) << "op " << op;
      ASSERT_NO_FATAL_FAILURE(ExpectNoPhysicalOverlap(f, live));
    }
  }
  EXPECT_LE(static_cast<double>(peak_mapped) / peak_live, 1.10);
  for (const auto& [p, bytes] : live) ASSERT_THAT(f.alloc->Deallocate(p), IsOk());
  ASSERT_THAT(CheckFakeVmm(f), IsOk());
  EXPECT_EQ(f.alloc->Granules().mapped, 0u);
}

// A hot size that is not whole granules: its tail granule, free of other users, stays mapped
// with the cached range and serves the next block's tail, so the loop maps nothing after the
// first block (as the cudasim GPU test HotSizeIsNotRemapped checks on the driver).
TEST(VmmAllocatorTest, TailSharingHotSizeIsNotRemapped) {
  Fake f = MakeFake(Opts(64 * kG, false));
  for (int step = 0; step < 20; ++step) {
    auto p = f.alloc->AllocateRaw(5 * kG - 1000);
    ASSERT_THAT(p.status(), IsOk());
    ASSERT_THAT(CheckFakeVmm(f), IsOk());
    ASSERT_THAT(f.alloc->Deallocate(*p), IsOk());
    ASSERT_THAT(CheckFakeVmm(f), IsOk());
  }
  EXPECT_EQ(f.alloc->Stats().regions_mapped, 5u);
  EXPECT_EQ(f.alloc->Granules().cached, 5u);  // 4 whole granules + the kept tail
}

TEST(VmmAllocatorTest, StitchesNonContiguousGranules) {
  Fake f = MakeFake(Opts(8 * kG, false, /*cache=*/false));
  std::vector<void*> one(8);
  for (auto& p : one) {
    auto r = f.alloc->AllocateRaw(kG);
    ASSERT_THAT(r.status(), IsOk());
    p = *r;
  }
  EXPECT_THAT(f.alloc->AllocateRaw(1).status(), StatusIs(absl::StatusCode::kResourceExhausted));
  // Free every other granule: physical granules 0, 2, 4, 6 are free, none adjacent.
  std::set<uint64_t> freed_offsets;
  for (int i = 0; i < 8; i += 2) {
    freed_offsets.insert(At(f.backend.get(), one[i], 0).second);
    ASSERT_THAT(f.alloc->Deallocate(one[i]), IsOk());
  }
  auto big = f.alloc->AllocateRaw(4 * kG);
  ASSERT_THAT(big.status(), IsOk());
  std::set<uint64_t> got;
  for (uint64_t g = 0; g < 4; ++g) got.insert(At(f.backend.get(), *big, g).second);
  EXPECT_EQ(got, freed_offsets);  // exactly the scattered granules, now one virtual range
  EXPECT_EQ(f.alloc->Granules().mapped, 8u);
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
  EXPECT_THAT(f.alloc->AllocateRaw(kG).status(), StatusIs(absl::StatusCode::kResourceExhausted));
  ASSERT_THAT(f.alloc->Deallocate(*big), IsOk());
  for (int i = 1; i < 8; i += 2) ASSERT_THAT(f.alloc->Deallocate(one[i]), IsOk());
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
}

TEST(VmmAllocatorTest, LimitCountsMappedGranulesNotVirtualSpace) {
  // Growth on, a card of 100 granules, a limit of 5: the limit binds, not the card.
  Fake f = MakeFake(Opts(5 * kG + kG / 2, true, /*cache=*/false), 100 * kG);
  auto a = f.alloc->AllocateRaw(3 * kG);
  ASSERT_THAT(a.status(), IsOk());
  auto b = f.alloc->AllocateRaw(2 * kG);
  ASSERT_THAT(b.status(), IsOk());
  auto c = f.alloc->AllocateRaw(1);
  ASSERT_THAT(c.status(), StatusIs(absl::StatusCode::kResourceExhausted));
  const std::string msg(c.status().message());
  EXPECT_THAT(msg, HasSubstr("GPU:0 (physical GPU 0)"));
  EXPECT_THAT(msg, HasSubstr("rounded to 256 B"));
  EXPECT_THAT(msg, HasSubstr("limit 10 MiB"));
  EXPECT_THAT(msg, HasSubstr("reserved (mapped) 10 MiB"));
  EXPECT_THAT(msg, HasSubstr("largest free block 0 B"));
  EXPECT_THAT(msg, HasSubstr("in use 10 MiB"));
  EXPECT_THAT(msg, HasSubstr("Hint"));
  EXPECT_EQ(f.alloc->Stats().num_ooms, 1u);
  EXPECT_EQ(f.alloc->Stats().bytes_limit, 5 * kG);
  // Sizes near 2^64 must not wrap around when rounded to granules.
  EXPECT_THAT(f.alloc->AllocateRaw(UINT64_MAX).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(f.alloc->AllocateRaw(UINT64_MAX - kG).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*a), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*b), IsOk());
}

TEST(VmmAllocatorTest, CacheReusesAHotSizeWithoutRemapping) {
  VmmOptions o = Opts(16 * kG, false);
  o.cache_bytes = 8 * kG;
  Fake f = MakeFake(o);
  auto p = f.alloc->AllocateRaw(3 * kG);
  ASSERT_THAT(p.status(), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*p), IsOk());
  EXPECT_EQ(f.alloc->Granules().cached, 3u);
  EXPECT_EQ(f.alloc->Stats().bytes_reserved, 3 * kG);  // still mapped
  for (int step = 0; step < 10; ++step) {
    auto q = f.alloc->AllocateRaw(3 * kG - 100);
    ASSERT_THAT(q.status(), IsOk());
    EXPECT_EQ(*q, *p);
    ASSERT_THAT(f.alloc->Deallocate(*q), IsOk());
  }
  EXPECT_EQ(f.alloc->Granules().cache_hits, 10u);
  EXPECT_EQ(f.alloc->Stats().regions_mapped, 3u);  // mapped once
  EXPECT_EQ(f.alloc->Stats().regions_unmapped, 0u);
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
}

TEST(VmmAllocatorTest, CacheIsEvictedBeforeTheLimitIsHit) {
  VmmOptions o = Opts(8 * kG, false);
  o.cache_bytes = 8 * kG;
  Fake f = MakeFake(o);
  auto a = f.alloc->AllocateRaw(3 * kG);
  auto b = f.alloc->AllocateRaw(3 * kG);
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*a), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*b), IsOk());
  EXPECT_EQ(f.alloc->Granules().cached, 6u);
  // 7 granules: 2 unmapped + 5 from the cache: one cached range evicted whole, the other
  // gives up the 2 granules still needed and stays cached with 1.
  auto c = f.alloc->AllocateRaw(7 * kG);
  ASSERT_THAT(c.status(), IsOk());
  auto g = f.alloc->Granules();
  EXPECT_EQ(g.cached, 1u);
  EXPECT_EQ(g.cache_evictions, 2u);
  EXPECT_EQ(g.mapped, 8u);
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
  // Cache over its own cap evicts too.
  ASSERT_THAT(f.alloc->Deallocate(*c), IsOk());
  VmmOptions small = Opts(16 * kG, false);
  small.cache_bytes = 4 * kG;
  Fake h = MakeFake(small);
  auto x = h.alloc->AllocateRaw(3 * kG);
  auto y = h.alloc->AllocateRaw(2 * kG);
  ASSERT_THAT(h.alloc->Deallocate(*x), IsOk());
  ASSERT_THAT(h.alloc->Deallocate(*y), IsOk());
  EXPECT_LE(h.alloc->Granules().cached, 4u);
  EXPECT_THAT(CheckFakeVmm(h), IsOk());
}

// ReleaseCachedMemory (PyTorch's empty_cache) is Trim: with growth, an idle allocator's
// reserve and cache go back to the device too; live blocks keep their granules.
TEST(VmmAllocatorTest, ReleaseCachedMemoryGivesTheReserveBack) {
  VmmOptions o = Opts(64 * kG, true);
  o.pool_keep_bytes = 4 * kG;
  Fake f = MakeFake(o, 64 * kG);
  auto keep = f.alloc->AllocateRaw(2 * kG);
  auto big = f.alloc->AllocateRaw(6 * kG);
  ASSERT_THAT(keep.status(), IsOk());
  ASSERT_THAT(big.status(), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*big), IsOk());  // cached or pooled, still on the device
  EXPECT_EQ(f.backend->physical_bytes(), 8 * kG);
  const uint64_t reserved = f.alloc->Stats().bytes_reserved;
  absl::StatusOr<uint64_t> released = f.alloc->ReleaseCachedMemory();
  ASSERT_THAT(released, IsOk());
  EXPECT_EQ(*released, reserved - 2 * kG);
  EXPECT_EQ(f.alloc->Stats().bytes_reserved, 2 * kG);
  EXPECT_EQ(f.backend->physical_bytes(), 2 * kG);  // only the live block's granules
  ASSERT_THAT(CheckFakeVmm(f), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*keep), IsOk());  // idle: keeps its reserve of 4 granules
  EXPECT_GT(f.backend->physical_bytes(), 0u);
  EXPECT_THAT(f.alloc->ReleaseCachedMemory(), IsOkAndHolds(2 * kG));
  EXPECT_EQ(f.backend->physical_bytes(), 0u);
  ASSERT_THAT(CheckFakeVmm(f), IsOk());
}

TEST(VmmAllocatorTest, GrowthGivesGranulesBackToTheDevice) {
  VmmOptions o = Opts(64 * kG, true, /*cache=*/false);
  o.pool_keep_bytes = 2 * kG;
  o.give_back_epoch = 4;
  o.give_back_interval_ms = 0;  // epochs of frees alone
  Fake f = MakeFake(o, 64 * kG);
  EXPECT_EQ(f.backend->physical_bytes(), 0u);  // nothing up front
  auto keep = f.alloc->AllocateRaw(kG);
  auto big = f.alloc->AllocateRaw(10 * kG);
  ASSERT_THAT(keep.status(), IsOk());
  ASSERT_THAT(big.status(), IsOk());
  EXPECT_EQ(f.backend->physical_bytes(), 11 * kG);
  ASSERT_THAT(f.alloc->Deallocate(*big), IsOk());
  // Freed granules go to the pool at once, and stay there while they may be reused.
  EXPECT_EQ(f.alloc->Granules().free, 10u);
  EXPECT_EQ(f.backend->physical_bytes(), 11 * kG);
  // Two epochs of 4 frees that only ever need 3 granules: the 7 never touched, minus the
  // reserve of 2, go back to the device.
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (int i = 0; i < 4; ++i) {
      auto p = f.alloc->AllocateRaw(3 * kG);
      ASSERT_THAT(p.status(), IsOk());
      ASSERT_THAT(f.alloc->Deallocate(*p), IsOk());
      ASSERT_THAT(CheckFakeVmm(f), IsOk());
    }
  }
  // 3 in use each step + the reserve of 2, or fewer (each granule is a physical allocation of
  // its own and goes back on its own).
  EXPECT_LE(f.alloc->Granules().free, 5u);
  EXPECT_LE(f.backend->physical_bytes(), 6 * kG);
  EXPECT_LT(f.backend->physical_bytes(), 11 * kG);
  // Idle: everything goes back.
  ASSERT_THAT(f.alloc->Deallocate(*keep), IsOk());
  EXPECT_EQ(f.backend->physical_bytes(), 0u);
  EXPECT_EQ(f.alloc->Granules().created, 0u);
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
  // The slots are reused.
  auto again = f.alloc->AllocateRaw(5 * kG);
  ASSERT_THAT(again.status(), IsOk());
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*again), IsOk());
}

// A step longer than the give-back epoch: an 8-granule block lives through 12 frees of a
// 1-granule block, then is freed, so every epoch of 4 frees sees 7 granules idle and gives them
// back, and the next step creates them again. The epoch doubles until it spans a step, then
// the loop stops going to the device; nothing else changes.
TEST(VmmAllocatorTest, GiveBackEpochGrowsWhenGivenBackGranulesAreCreatedAgain) {
  Fake f = MakeFake(EpochOpts(4, 0), 64 * kG);
  auto anchor = f.alloc->AllocateRaw(kG);  // keeps the allocator from going idle
  ASSERT_THAT(anchor.status(), IsOk());
  auto step = [&] {
    AllocFree(f, 8 * kG);
    for (int i = 0; i < 12; ++i) AllocFree(f, kG);
    ASSERT_THAT(CheckFakeVmm(f), IsOk());
  };
  for (int i = 0; i < 3; ++i) step();
  const uint64_t early = f.alloc->Granules().granule_creates;
  EXPECT_GT(early, 9u + 7u);  // at least one step created its block's granules again
  for (int i = 0; i < 20; ++i) step();
  const VmmAllocator::GranuleCounts c1 = f.alloc->Granules();
  EXPECT_GT(c1.give_back_epoch, 4u);
  for (int i = 0; i < 20; ++i) step();
  const VmmAllocator::GranuleCounts c2 = f.alloc->Granules();
  EXPECT_EQ(c2.granule_creates, c1.granule_creates);  // steady: no more trips to the device
  EXPECT_LE(c2.give_back_epoch, 4u << 10);
  // Idle give-back is unchanged: everything but the reserve goes back at once.
  ASSERT_THAT(f.alloc->Deallocate(*anchor), IsOk());
  EXPECT_LE(f.backend->physical_bytes(), kG);
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
}

// With the default interval an epoch also lasts at least a second: a fast loop gives nothing
// back by epoch (its granules are made once), yet going idle still returns everything.
TEST(VmmAllocatorTest, GiveBackEpochLastsAtLeastItsInterval) {
  Fake f = MakeFake(EpochOpts(4, 60 * 60 * 1000), 64 * kG);  // an hour: never within the test
  auto anchor = f.alloc->AllocateRaw(kG);
  ASSERT_THAT(anchor.status(), IsOk());
  AllocFree(f, 10 * kG);
  for (int i = 0; i < 200; ++i) AllocFree(f, kG);
  EXPECT_EQ(f.backend->physical_bytes(), 11 * kG);  // an hour has not passed
  EXPECT_EQ(f.alloc->Granules().granule_creates, 11u);
  ASSERT_THAT(f.alloc->Deallocate(*anchor), IsOk());
  EXPECT_LE(f.backend->physical_bytes(), kG);
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
}

// Extreme epoch settings neither overflow nor stop give-back at idle: 0 frees means 1, and an
// epoch or interval near 2^64 is clamped (doubling saturates).
TEST(VmmAllocatorTest, ExtremeGiveBackEpochSettingsAreClamped) {
  for (uint64_t epoch : {uint64_t{0}, uint64_t{1}, ~uint64_t{0}}) {
    for (uint64_t interval : {uint64_t{0}, ~uint64_t{0}}) {
      Fake f = MakeFake(EpochOpts(epoch, interval), 64 * kG);
      auto anchor = f.alloc->AllocateRaw(kG);
      ASSERT_THAT(anchor.status(), IsOk());
      for (int step = 0; step < 30; ++step) AllocFree(f, (step % 5 + 2) * kG);
      const VmmAllocator::GranuleCounts c = f.alloc->Granules();
      EXPECT_GE(c.give_back_epoch, 1u) << epoch << " " << interval;
      EXPECT_LE(c.give_back_epoch, uint64_t{1} << 50) << epoch << " " << interval;
      EXPECT_THAT(CheckFakeVmm(f), IsOk());
      ASSERT_THAT(f.alloc->Deallocate(*anchor), IsOk());
      EXPECT_LE(f.backend->physical_bytes(), kG) << epoch << " " << interval;
    }
  }
}

TEST(VmmAllocatorTest, GrowthStopsWhenTheCardIsFull) {
  Fake f = MakeFake(Opts(64 * kG, true, /*cache=*/false), /*capacity=*/4 * kG);
  auto a = f.alloc->AllocateRaw(3 * kG);
  ASSERT_THAT(a.status(), IsOk());
  auto b = f.alloc->AllocateRaw(2 * kG);
  EXPECT_THAT(b.status(), StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("device")));
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
  EXPECT_THAT(f.alloc->AllocateRaw(kG).status(), IsOk());
}

// Growth: the cache gives way near the peak of the working set, every mapped granule that is
// not cached (blocks' own granules, the granules tail sharing splits between blocks, slabs),
// so mapped memory stays within the largest working set so far plus the reserve. Counting
// only blocks' own granules let a phase of tail-shared blocks and small blocks grow beside a
// full cache: 1.23x peak live on a PyTorch snapshot.
TEST(VmmAllocatorTest, GrowthCacheGivesWayToSharedGranulesAndSlabs) {
  VmmOptions o = Opts(64 * kG, true);
  o.pool_keep_bytes = kG;
  o.give_back_epoch = 1;  // whatever leaves the cache goes back to the device
  o.give_back_interval_ms = 0;
  Fake f = MakeFake(o, 64 * kG);
  uint64_t peak_working = 0, peak_shared = 0, peak_slabs = 0;
  auto note = [&] {
    const auto g = f.alloc->Granules();
    peak_working = std::max(peak_working, g.mapped - g.cached);
    peak_shared = std::max(peak_shared, g.shared);
    peak_slabs = std::max(peak_slabs, g.slabs);
  };
  auto alloc = [&](std::vector<void*>& into, uint64_t bytes) {
    auto p = f.alloc->AllocateRaw(bytes);
    ASSERT_THAT(p.status(), IsOk());
    into.push_back(*p);
    note();
  };
  std::vector<void*> keep;  // live throughout, so the allocator never goes idle
  ASSERT_NO_FATAL_FAILURE(alloc(keep, kG));
  for (int step = 0; step < 4; ++step) {
    // Phase A: whole-granule blocks, freed into the cache.
    std::vector<void*> a;
    for (int i = 0; i < 12; ++i) ASSERT_NO_FATAL_FAILURE(alloc(a, 2 * kG));
    for (void* p : a) ASSERT_THAT(f.alloc->Deallocate(p), IsOk());
    note();
    // Phase B: as many bytes in blocks whose tails share granules, and small blocks (slabs).
    std::vector<void*> b;
    for (int i = 0; i < 16; ++i) {
      ASSERT_NO_FATAL_FAILURE(alloc(b, kG + kG / 2 + 4096 * static_cast<uint64_t>(i)));
      ASSERT_NO_FATAL_FAILURE(alloc(b, 200 * kKiB));
    }
    for (void* p : b) ASSERT_THAT(f.alloc->Deallocate(p), IsOk());
    note();
    EXPECT_THAT(CheckFakeVmm(f), IsOk());
  }
  EXPECT_GE(peak_shared, 8u);
  EXPECT_GE(peak_slabs, 2u);
  // The working set's peak, 1/64 of it (rounded down) and the one-granule reserve.
  EXPECT_LE(f.alloc->Stats().peak_bytes_reserved, (peak_working + peak_working / 64 + 1) * kG);
  for (void* p : keep) ASSERT_THAT(f.alloc->Deallocate(p), IsOk());
}

// With growth, a block that needs more granules than the pool holds takes a cached range's
// granules before any are created, even while the cache is within the reserve
// (pool_keep_bytes): the reserve is what an idle allocator keeps, not room on top of a peak.
TEST(VmmAllocatorTest, GrowthTakesCachedGranulesBeforeCreatingNewOnes) {
  VmmOptions o = Opts(64 * kG, true);
  o.pool_keep_bytes = 8 * kG;  // would hold the cached range below
  Fake f = MakeFake(o, 64 * kG);
  auto keep = f.alloc->AllocateRaw(kG);  // live throughout: the allocator never goes idle
  ASSERT_THAT(keep.status(), IsOk());
  ASSERT_NO_FATAL_FAILURE(AllocFree(f, 4 * kG));
  EXPECT_EQ(f.alloc->Granules().cached, 4u);
  EXPECT_EQ(f.alloc->Granules().created, 5u);
  // 16 granules: no cached range can be reshaped to it (more than twice the cached one).
  auto big = f.alloc->AllocateRaw(16 * kG);
  ASSERT_THAT(big.status(), IsOk());
  const auto g = f.alloc->Granules();
  EXPECT_EQ(g.cached, 0u);
  EXPECT_EQ(g.cache_evictions, 1u);
  EXPECT_EQ(g.created, 17u);  // 12 new: the 4 cached ones were taken first
  EXPECT_EQ(f.alloc->Stats().peak_bytes_reserved, 17 * kG);  // not 1 + 4 + 16
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*big), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*keep), IsOk());
}

TEST(VmmAllocatorTest, TrimEvictsCacheAndGivesBack) {
  Fake f = MakeFake(Opts(32 * kG, true), 64 * kG);
  auto a = f.alloc->AllocateRaw(2 * kG);
  auto b = f.alloc->AllocateRaw(2 * kG);
  ASSERT_THAT(f.alloc->Deallocate(*a), IsOk());
  EXPECT_EQ(f.alloc->Granules().cached, 2u);
  ASSERT_THAT(f.alloc->Trim(), IsOk());
  auto c = f.alloc->Granules();
  EXPECT_EQ(c.cached, 0u);
  EXPECT_EQ(c.free, 0u);
  EXPECT_EQ(f.backend->physical_bytes(), 2 * kG);
  ASSERT_THAT(f.alloc->Deallocate(*b), IsOk());
}

// Growth on: once nothing is allocated, everything goes back to the card (empty slabs, the
// mapping cache, free granules) except the reserve of pool_keep_bytes (here the default,
// limit / 64 = one granule), whichever kind of block was freed last. Trim() returns the
// reserve too.
TEST(VmmAllocatorTest, IdleGivesEverythingBackWhicheverBlockIsFreedLast) {
  for (bool small_last : {true, false}) {
    SCOPED_TRACE(small_last ? "small block freed last" : "large block freed last");
    VmmOptions o = Opts(64 * kG, true);
    o.cache_bytes = 8 * kG;
    Fake f = MakeFake(o, 64 * kG);
    std::vector<void*> small, large;
    // 2.7 MiB of small blocks: two slabs.
    for (uint64_t bytes :
         {4 * kKiB, 100 * kKiB, 300 * kKiB, 900 * kKiB, 512 * kKiB + 1, 900 * kKiB}) {
      auto p = f.alloc->AllocateRaw(bytes);
      ASSERT_THAT(p.status(), IsOk());
      small.push_back(*p);
    }
    for (uint64_t bytes : {3 * kG, 2 * kG - 1, kG}) {
      auto p = f.alloc->AllocateRaw(bytes);
      ASSERT_THAT(p.status(), IsOk());
      large.push_back(*p);
    }
    auto g = f.alloc->Granules();
    EXPECT_EQ(g.slabs, 2u);
    EXPECT_EQ(g.in_blocks, 6u);
    // Not idle yet: the freed large blocks stay cached, the slabs stay mapped.
    auto& first = small_last ? large : small;
    auto& last = small_last ? small : large;
    for (void* p : first) ASSERT_THAT(f.alloc->Deallocate(p), IsOk());
    for (size_t i = 0; i + 1 < last.size(); ++i) ASSERT_THAT(f.alloc->Deallocate(last[i]), IsOk());
    g = f.alloc->Granules();
    if (small_last) EXPECT_EQ(g.cached, 6u);
    if (!small_last) EXPECT_EQ(g.slabs, 2u);
    EXPECT_THAT(CheckFakeVmm(f), IsOk());
    // The last block: idle. Only the reserve stays, the last block's own memory: one empty
    // slab, or its cached granule (the block of kG).
    ASSERT_THAT(f.alloc->Deallocate(last.back()), IsOk());
    g = f.alloc->Granules();
    EXPECT_EQ(g.mapped, 1u);
    EXPECT_EQ(g.in_slabs, small_last ? 1u : 0u);
    EXPECT_EQ(g.slabs, small_last ? 1u : 0u);
    EXPECT_EQ(g.cached, small_last ? 0u : 1u);
    EXPECT_EQ(g.in_blocks, 0u);
    EXPECT_EQ(g.free, 0u);
    EXPECT_EQ(g.created, 1u);
    EXPECT_EQ(f.backend->physical_bytes(), kG);
    EXPECT_EQ(f.backend->mapped_bytes(), kG);
    AllocatorStats s = f.alloc->Stats();
    EXPECT_EQ(s.bytes_in_use, 0u);
    EXPECT_EQ(s.bytes_reserved, kG);
    EXPECT_EQ(s.num_allocs, 9u);
    EXPECT_EQ(s.num_frees, 9u);
    EXPECT_EQ(s.largest_free_block, kG);
    EXPECT_EQ(s.fragmentation, 0.0);
    EXPECT_EQ(s.regions_mapped, s.regions_unmapped + 1);
    EXPECT_THAT(CheckFakeVmm(f), IsOk());
    // Trim gives back the reserve: nothing is held.
    ASSERT_THAT(f.alloc->Trim(), IsOk());
    g = f.alloc->Granules();
    EXPECT_EQ(g.mapped, 0u);
    EXPECT_EQ(g.slabs, 0u);
    EXPECT_EQ(g.created, 0u);
    EXPECT_EQ(f.backend->physical_bytes(), 0u);
    EXPECT_EQ(f.backend->mapped_bytes(), 0u);
    EXPECT_EQ(f.backend->reserved_ranges(), 1u);  // the slab arena: virtual space only
    s = f.alloc->Stats();
    EXPECT_EQ(s.bytes_reserved, 0u);
    EXPECT_EQ(s.largest_free_block, 0u);
    EXPECT_EQ(s.regions_mapped, s.regions_unmapped);
    EXPECT_THAT(CheckFakeVmm(f), IsOk());
    // And it starts again from nothing.
    auto a = f.alloc->AllocateRaw(1000);
    auto b = f.alloc->AllocateRaw(2 * kG);
    ASSERT_THAT(a.status(), IsOk());
    ASSERT_THAT(b.status(), IsOk());
    EXPECT_EQ(f.alloc->Granules().created, 3u);
    EXPECT_THAT(CheckFakeVmm(f), IsOk());
    ASSERT_THAT(f.alloc->Deallocate(*b), IsOk());
    ASSERT_THAT(f.alloc->Deallocate(*a), IsOk());
    EXPECT_EQ(f.backend->physical_bytes(), kG);
    EXPECT_THAT(CheckFakeVmm(f), IsOk());
  }
}

// The reserve is what keeps an alloc/free loop of one buffer from creating, mapping,
// unmapping and releasing device memory every iteration; blocks larger than the reserve pay
// that each time.
TEST(VmmAllocatorTest, IdleReserveServesAnAllocFreeLoop) {
  VmmOptions o = Opts(64 * kG, true);
  o.pool_keep_bytes = 4 * kG;
  Fake f = MakeFake(o, 64 * kG);
  for (uint64_t bytes : {uint64_t{4096}, kG, 3 * kG, 6 * kG}) {
    SCOPED_TRACE(bytes);
    const uint64_t mapped_before = f.alloc->Stats().regions_mapped;
    for (int i = 0; i < 20; ++i) {
      auto p = f.alloc->AllocateRaw(bytes);
      ASSERT_THAT(p.status(), IsOk());
      ASSERT_THAT(f.alloc->Deallocate(*p), IsOk());
      ASSERT_LE(f.alloc->Granules().created, 4u);  // idle: at most the reserve is held
    }
    const uint64_t maps = f.alloc->Stats().regions_mapped - mapped_before;
    if (bytes <= 3 * kG) {
      EXPECT_LE(maps, CeilDivForTest(bytes, kG)) << "mapped once, then reused";
    } else {
      EXPECT_EQ(maps, 20 * CeilDivForTest(bytes, kG)) << "over the reserve: mapped every time";
    }
  }
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
}

// Growth off: the whole limit stays held from the card; an idle allocator keeps its slabs and
// cache mapped until a large block needs them or Trim().
TEST(VmmAllocatorTest, IdleWithoutGrowthKeepsTheLimit) {
  VmmOptions o = Opts(16 * kG, false);
  o.cache_bytes = 8 * kG;
  Fake f = MakeFake(o, 16 * kG);
  auto a = f.alloc->AllocateRaw(3 * kG);
  auto b = f.alloc->AllocateRaw(4096);
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*a), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*b), IsOk());
  auto g = f.alloc->Granules();
  EXPECT_EQ(g.created, 16u);
  EXPECT_EQ(g.cached, 3u);
  EXPECT_EQ(g.in_slabs, 1u);
  EXPECT_EQ(f.backend->physical_bytes(), 16 * kG);
  ASSERT_THAT(f.alloc->Trim(), IsOk());
  g = f.alloc->Granules();
  EXPECT_EQ(g.mapped, 0u);
  EXPECT_EQ(g.free, 16u);
  EXPECT_EQ(f.backend->physical_bytes(), 16 * kG);
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
}

// The OOM names the device, the request and its rounded size, the limit, in use, reserved,
// the largest free block and fragmentation exactly as Stats() reports them, and a hint.
TEST(VmmAllocatorTest, OomMessageMatchesStats) {
  VmmOptions o = Opts(8 * kG, false);
  o.cache_bytes = 2 * kG;
  Fake f = MakeFake(o);
  // Slab space: one slab with 100 KiB live and a free tail; a cached granule; 5 in a block.
  auto small = f.alloc->AllocateRaw(100 * kKiB);
  auto cached = f.alloc->AllocateRaw(kG);
  auto big = f.alloc->AllocateRaw(5 * kG);
  ASSERT_THAT(small.status(), IsOk());
  ASSERT_THAT(cached.status(), IsOk());
  ASSERT_THAT(big.status(), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*cached), IsOk());
  AllocatorStats s = f.alloc->Stats();
  EXPECT_EQ(s.largest_free_block, kG);  // the slab's free tail and the cached granule
  EXPECT_EQ(s.bytes_reserved, 7 * kG);
  EXPECT_EQ(s.bytes_in_use, 5 * kG + 100 * kKiB);
  const double frag = 1.0 - static_cast<double>(kG) / (2 * kG - 100 * kKiB);
  EXPECT_NEAR(s.fragmentation, frag, 1e-9);
  // 2 granules can be had (1 unmapped + 1 cached; the slab is busy): 4 do not fit.
  auto p = f.alloc->AllocateRaw(3 * kG + 1);
  ASSERT_THAT(p.status(), StatusIs(absl::StatusCode::kResourceExhausted));
  const std::string msg(p.status().message());
  // The failed attempt evicted the cache to make room: the message reports what is left.
  AllocatorStats after = f.alloc->Stats();
  EXPECT_EQ(after.num_ooms, 1u);
  EXPECT_THAT(msg, AllOf(HasSubstr("GPU:0 (physical GPU 0)"), HasSubstr("(6291457 bytes"),
                         // Tail sharing: the block would cost its 256-byte units.
                         HasSubstr("rounded to " + FormatBytes(3 * kG + 256) + ")"),
                         HasSubstr("limit 16 MiB (8 granules"),
                         HasSubstr("in use " + FormatBytes(5 * kG + 100 * kKiB)),
                         HasSubstr("reserved (mapped) " + FormatBytes(after.bytes_reserved)),
                         HasSubstr("largest free block " + FormatBytes(after.largest_free_block)),
                         HasSubstr(absl::StrFormat("fragmentation %.3f", after.fragmentation)),
                         HasSubstr("largest block the limit still allows"), HasSubstr("Hint")))
      << msg;
  // A small request that finds no slab space reports the same way.
  std::vector<void*> fill;
  while (true) {
    auto q = f.alloc->AllocateRaw(512 * kKiB - 256);
    if (!q.ok()) {
      const std::string m(q.status().message());
      AllocatorStats now = f.alloc->Stats();
      EXPECT_THAT(m, AllOf(HasSubstr("no slab has room"),
                           HasSubstr("the limit allows 0 more mapped granules"),
                           HasSubstr("(524032 bytes, rounded to 511.75 KiB)"),
                           Not(HasSubstr("VGPU_ALLOCATOR=vmm")),
                           HasSubstr("largest free block " + FormatBytes(now.largest_free_block)),
                           HasSubstr(absl::StrFormat("fragmentation %.3f", now.fragmentation))))
          << m;
      break;
    }
    fill.push_back(*q);
    ASSERT_LT(fill.size(), 100u);
  }
  for (void* q : fill) ASSERT_THAT(f.alloc->Deallocate(q), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*big), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*small), IsOk());
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
}

// With tail sharing the OOM message reports what the block would cost (its 256-byte units, not
// whole granules) and counts open parts of shared granules in the largest block still possible.
TEST(VmmAllocatorTest, OomMessageCountsSharedGranules) {
  Fake f = MakeFake(Opts(8 * kG, false, /*cache=*/false));
  auto a = f.alloc->AllocateRaw(3 * kG + kG / 4);  // 3 granules + a shared one, 3/4 of it open
  auto b = f.alloc->AllocateRaw(4 * kG);           // whole granules: the limit is full
  ASSERT_THAT(a.status(), IsOk());
  ASSERT_THAT(b.status(), IsOk());
  ASSERT_EQ(f.alloc->Granules().mapped, 8u);
  // 3/4 of a granule fits in the open part as it is.
  auto fits = f.alloc->AllocateRaw(kG / 2 + kG / 4);
  ASSERT_THAT(fits.status(), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*fits), IsOk());
  // 1.25 granules: the open 3/4 as its head, but its tail needs a granule there is no room for.
  auto p = f.alloc->AllocateRaw(kG + kG / 4);
  ASSERT_THAT(p.status(), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(p.status().message(),
              AllOf(HasSubstr("(2621440 bytes, rounded to 2.5 MiB)"),
                    HasSubstr("largest block the limit still allows 1.5 MiB (0 B for "
                              "whole-granule sizes)")))
      << p.status().message();
  ASSERT_THAT(f.alloc->Deallocate(*a), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*b), IsOk());
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
}

TEST(VmmAllocatorTest, LargeAlignmentIsHonoured) {
  Fake f = MakeFake(Opts(32 * kG, false));
  auto p = f.alloc->AllocateRaw(kG, 16 * kMiB);
  ASSERT_THAT(p.status(), IsOk());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) % (16 * kMiB), 0u);
  EXPECT_EQ(f.alloc->Granules().mapped, 1u);
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*p), IsOk());
  // A small request with a granule alignment takes the large path (it would not fit a slab
  // after padding).
  auto q = f.alloc->AllocateRaw(kMiB - 4096, 2 * kG);
  ASSERT_THAT(q.status(), IsOk());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*q) % (2 * kG), 0u);
  ASSERT_THAT(f.alloc->Deallocate(*q), IsOk());
  auto r = f.alloc->AllocateRaw(1000, kG);
  ASSERT_THAT(r.status(), IsOk());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*r) % kG, 0u);
  ASSERT_THAT(f.alloc->Deallocate(*r), IsOk());
  EXPECT_THAT(f.alloc->AllocateRaw(kG, 3).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(VmmAllocatorTest, DoubleFreeAndForeignPointersChangeNothing) {
  Fake f = MakeFake(Opts(16 * kG, false));
  auto p = f.alloc->AllocateRaw(3 * kG);
  auto q = f.alloc->AllocateRaw(kG);
  auto small = f.alloc->AllocateRaw(4096);  // the slab BFC's live map is not empty
  ASSERT_THAT(p.status(), IsOk());
  ASSERT_THAT(q.status(), IsOk());
  ASSERT_THAT(small.status(), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*p), IsOk());
  AllocatorStats before = f.alloc->Stats();
  auto granules = f.alloc->Granules();
  EXPECT_THAT(f.alloc->Deallocate(*p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("double free")));
  int local = 0;
  EXPECT_THAT(f.alloc->Deallocate(&local), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(f.alloc->Deallocate(static_cast<char*>(*q) + 256),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Another allocator on another fake card (a different base address): its blocks are not
  // ours even though they are live, granule-aligned and of sizes we hand out.
  Fake other = MakeFake(Opts(16 * kG, false), /*capacity=*/0, kOtherVaBase);
  auto r = other.alloc->AllocateRaw(kG);
  auto r_small = other.alloc->AllocateRaw(4096);
  ASSERT_THAT(r.status(), IsOk());
  ASSERT_THAT(r_small.status(), IsOk());
  ASSERT_NE(*r, *p);
  ASSERT_NE(*r, *q);
  EXPECT_THAT(f.alloc->Deallocate(*r), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(f.alloc->Deallocate(*r_small), StatusIs(absl::StatusCode::kInvalidArgument));
  // MAP_FAILED: not granule-aligned, so it goes to the slab BFC's live map.
  EXPECT_THAT(f.alloc->Deallocate(reinterpret_cast<void*>(~uintptr_t{0})),
              StatusIs(absl::StatusCode::kInvalidArgument));
  AllocatorStats after = f.alloc->Stats();
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.num_frees, before.num_frees);
  EXPECT_EQ(f.alloc->Granules().mapped, granules.mapped);
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
  EXPECT_THAT(f.alloc->Deallocate(*q), IsOk());
  EXPECT_THAT(f.alloc->Deallocate(*small), IsOk());
  EXPECT_THAT(other.alloc->Deallocate(*r), IsOk());
  EXPECT_THAT(other.alloc->Deallocate(*r_small), IsOk());
  EXPECT_THAT(CheckFakeVmm(other), IsOk());
}

// Random sizes at a limit they often hit, growth off and on, with the device's granule and with
// 8 MiB pages (open parts then share 1 KiB buckets: the inexact lookups): the fake device checks
// every mapping after each operation.
TEST(VmmAllocatorTest, RandomizedKeepsInvariants) {
  // Mostly large blocks (one-granule slabs; 8 MiB pages), and mostly small ones in slabs of
  // four granules with some of one to three granules.
  struct Config {
    uint64_t page, slab;
    bool small;
  };
  for (const Config& c : {Config{0, 0, false}, Config{4 * kG, 0, false}, Config{0, 4 * kG, true}})
    for (bool growth : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "page " << c.page << ", slab " << c.slab << ", growth " << growth);
      VmmOptions o = Opts(64 * kG, growth);
      o.page_bytes = c.page;
      o.slab_bytes = c.slab;
      o.cache_bytes = 8 * kG;
      o.pool_keep_bytes = 2 * kG;
      Fake f = MakeFake(o, 64 * kG);
      std::mt19937_64 rng(c.small ? (growth ? 5 : 9) : (growth ? 7 : 11));
      std::vector<void*> live;
      int ooms = 0;
      for (int i = 0; i < (c.small ? 4000 : 3000); ++i) {
        if (live.empty() || rng() % 100 < 55) {
          const uint64_t bytes = c.small ? 1 + rng() % (rng() % 8 == 0 ? 3 * kG : kMiB)
                                         : 1 + rng() % (rng() % 4 == 0 ? 12 * kG : 2 * kG);
          auto p = f.alloc->AllocateRaw(bytes);
          if (p.ok()) {
            live.push_back(*p);
          } else {
            ASSERT_THAT(p.status(), StatusIs(absl::StatusCode::kResourceExhausted));
            ++ooms;
          }
        } else {
          size_t k = rng() % live.size();
          ASSERT_THAT(f.alloc->Deallocate(live[k]), IsOk());
          live[k] = live.back();
          live.pop_back();
        }
        ASSERT_THAT(CheckFakeVmm(f), IsOk()) << "op " << i;
      }
      EXPECT_GT(ooms, 0);  // the limit was exercised
      for (void* p : live) ASSERT_THAT(f.alloc->Deallocate(p), IsOk());
      EXPECT_EQ(f.alloc->Stats().bytes_in_use, 0u);
      ASSERT_THAT(f.alloc->Trim(), IsOk());
      EXPECT_EQ(f.alloc->Granules().in_slabs, 0u);  // empty slabs went back to the pool
      ASSERT_THAT(CheckFakeVmm(f), IsOk());
    }
}

TEST(VmmAllocatorTest, ConcurrentThreads) {
  VmmOptions o = Opts(256 * kG, true);
  o.cache_bytes = 16 * kG;
  Fake f = MakeFake(o, 256 * kG);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      std::vector<void*> live;
      for (int i = 0; i < 2000; ++i) {
        if (live.size() < 16 && rng() % 2) {
          // Half small (slab BFC, no allocator lock), half large (granule pool).
          auto p = f.alloc->AllocateRaw(1 + rng() % (rng() % 2 ? kMiB : 5 * kG));
          if (p.ok()) live.push_back(*p);
        } else if (!live.empty()) {
          EXPECT_THAT(f.alloc->Deallocate(live.back()), IsOk());
          live.pop_back();
        }
      }
      for (void* p : live) EXPECT_THAT(f.alloc->Deallocate(p), IsOk());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(f.alloc->Stats().bytes_in_use, 0u);
  EXPECT_EQ(f.alloc->Stats().num_allocs, f.alloc->Stats().num_frees);
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
}

// Growth on, threads that each hold at most one block: the allocator goes idle again and
// again while other threads allocate, so the idle give-back races with both paths.
TEST(VmmAllocatorTest, IdleGiveBackRacesWithAllocations) {
  VmmOptions o = Opts(64 * kG, true);
  o.cache_bytes = 8 * kG;
  Fake f = MakeFake(o, 64 * kG);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      for (int i = 0; i < 1500; ++i) {
        const uint64_t bytes = rng() % 2 ? 1 + rng() % (kMiB - 1) : kMiB + rng() % (3 * kG);
        auto p = f.alloc->AllocateRaw(bytes);
        ASSERT_THAT(p.status(), IsOk());
        ASSERT_THAT(f.alloc->Deallocate(*p), IsOk());
      }
    });
  }
  for (auto& t : threads) t.join();
  AllocatorStats s = f.alloc->Stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.num_allocs, 6000u);
  EXPECT_EQ(s.num_frees, 6000u);
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
  // The last free found it idle (no thread was left to allocate): only the reserve is held
  // (limit / 64 = one granule), mapped.
  auto g = f.alloc->Granules();
  EXPECT_LE(g.created, 1u);
  EXPECT_EQ(g.free, 0u);
  EXPECT_EQ(f.backend->physical_bytes(), g.created * kG);
}

// Waits (up to 20 s) until the quiet give-back has run `n` times; false if it never did.
bool WaitForQuietGiveBacks(const VmmAllocator& a, uint64_t n) {
  for (int i = 0; i < 20000; ++i) {
    if (a.Granules().quiet_give_backs >= n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// A server keeps its weights and goes quiet: with quiet_give_back_ms the activations' memory
// (cache, free granules, empty slabs) goes back to the device although blocks are live,
// beyond the reserve. The live blocks keep their memory.
TEST(VmmAllocatorTest, QuietAllocatorGivesBackWithBlocksLive) {
  VmmOptions o = Opts(64 * kG, true);
  o.cache_bytes = 16 * kG;
  o.pool_keep_bytes = kG;
  o.quiet_give_back_ms = 2;
  Fake f = MakeFake(o, 64 * kG);
  auto weights = f.alloc->AllocateRaw(3 * kG);
  auto bias = f.alloc->AllocateRaw(4 * kKiB);
  ASSERT_THAT(weights.status(), IsOk());
  ASSERT_THAT(bias.status(), IsOk());
  std::vector<void*> acts;
  for (uint64_t bytes : {4 * kG, 2 * kG, kG}) {
    auto p = f.alloc->AllocateRaw(bytes);
    ASSERT_THAT(p.status(), IsOk());
    acts.push_back(*p);
  }
  for (int i = 0; i < 60; ++i) {  // 4.7 MiB of small activations: two more slabs
    auto p = f.alloc->AllocateRaw(80 * kKiB);
    ASSERT_THAT(p.status(), IsOk());
    acts.push_back(*p);
  }
  EXPECT_EQ(f.alloc->Granules().slabs, 3u);
  for (void* p : acts) ASSERT_THAT(f.alloc->Deallocate(p), IsOk());
  ASSERT_TRUE(WaitForQuietGiveBacks(*f.alloc, 1)) << f.alloc->DumpMemoryLog();
  // The weights' 3 granules, the slab with the bias, and the one-granule reserve: an empty
  // slab (the cache goes whole).
  auto g = f.alloc->Granules();
  EXPECT_LE(g.slabs, 2u);
  EXPECT_EQ(g.in_blocks, 3u);
  EXPECT_EQ(g.free, 0u);
  EXPECT_LE(g.cached, 1u);
  EXPECT_LE(g.created, 3u + g.in_slabs + 1u);
  EXPECT_GE(g.quiet_granules, 7u - 1u) << "the cached 7 granules, the reserve aside";
  EXPECT_EQ(f.backend->physical_bytes(), g.created * kG);
  AllocatorStats s = f.alloc->Stats();
  EXPECT_EQ(s.bytes_in_use, 3 * kG + 4 * kKiB);
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
  // The next step's activations, then quiet again: the thread, asleep since it gave back, is
  // woken by the step and gives back again.
  auto act = f.alloc->AllocateRaw(5 * kG);
  ASSERT_THAT(act.status(), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*act), IsOk());
  ASSERT_TRUE(WaitForQuietGiveBacks(*f.alloc, 2)) << f.alloc->DumpMemoryLog();
  EXPECT_LE(f.alloc->Granules().cached, 1u);
  // The weights are still theirs: the last frees leave it idle, down to the reserve.
  ASSERT_THAT(f.alloc->Deallocate(*bias), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*weights), IsOk());
  g = f.alloc->Granules();
  EXPECT_LE(g.created, 1u);
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
}

// Off (0, VmmOptions' default) a quiet allocator keeps its cache until it is idle, Trim() or
// its memory is needed.
TEST(VmmAllocatorTest, QuietGiveBackIsOffByDefault) {
  VmmOptions o = Opts(64 * kG, true);
  o.cache_bytes = 16 * kG;
  ASSERT_EQ(o.quiet_give_back_ms, 0u);
  Fake f = MakeFake(o, 64 * kG);
  auto weights = f.alloc->AllocateRaw(3 * kG);
  auto act = f.alloc->AllocateRaw(4 * kG);
  ASSERT_THAT(weights.status(), IsOk());
  ASSERT_THAT(act.status(), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*act), IsOk());
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  auto g = f.alloc->Granules();
  EXPECT_EQ(g.cached, 4u);
  EXPECT_EQ(g.quiet_give_backs, 0u);
  ASSERT_THAT(f.alloc->Deallocate(*weights), IsOk());
}

// The quiet give-back's thread against threads that allocate and free, pausing now and then
// so that it runs among them (TSan build): every count stays consistent with the device.
TEST(VmmAllocatorTest, QuietGiveBackRacesWithAllocations) {
  VmmOptions o = Opts(64 * kG, true);
  o.cache_bytes = 8 * kG;
  o.quiet_give_back_ms = 1;
  Fake f = MakeFake(o, 64 * kG);
  auto weights = f.alloc->AllocateRaw(5 * kG + 3 * kKiB);
  ASSERT_THAT(weights.status(), IsOk());
  const uint64_t weights_in_use = f.alloc->Stats().bytes_in_use;
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(300 + t);
      std::vector<void*> live;
      for (int i = 0; i < 900; ++i) {
        if (i % 150 == 149) std::this_thread::sleep_for(std::chrono::milliseconds(3));
        const uint64_t bytes = rng() % 2 ? 1 + rng() % (kMiB - 1) : kMiB + rng() % (3 * kG);
        auto p = f.alloc->AllocateRaw(bytes);
        ASSERT_THAT(p.status(), IsOk());
        live.push_back(*p);
        if (live.size() > 4 || rng() % 2) {
          const size_t k = rng() % live.size();
          ASSERT_THAT(f.alloc->Deallocate(live[k]), IsOk());
          live.erase(live.begin() + k);
        }
      }
      for (void* p : live) ASSERT_THAT(f.alloc->Deallocate(p), IsOk());
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(WaitForQuietGiveBacks(*f.alloc, 1));
  AllocatorStats s = f.alloc->Stats();
  EXPECT_EQ(s.bytes_in_use, weights_in_use);
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*weights), IsOk());
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
}

TEST(VmmAllocatorTest, SmallBlocksShareGranuleSlabs) {
  VmmOptions o = Opts(8 * kG, false);
  o.share_tail_granules = false;  // the large block below counts whole granules
  Fake f = MakeFake(o);
  std::vector<void*> small;
  for (int i = 0; i < 100; ++i) {
    auto p = f.alloc->AllocateRaw(1000);
    ASSERT_THAT(p.status(), IsOk());
    small.push_back(*p);
  }
  auto c = f.alloc->Granules();
  EXPECT_EQ(c.in_slabs, 1u);  // 100 x 1 KiB in one granule
  EXPECT_EQ(c.mapped, 1u);
  AllocatorStats s = f.alloc->Stats();
  EXPECT_EQ(s.bytes_in_use, 100u * 1024);
  EXPECT_EQ(s.peak_bytes_in_use, 100u * 1024);
  EXPECT_EQ(s.num_allocs, 100u);
  EXPECT_EQ(s.bytes_reserved, kG);
  // Half a granule and up is a large block of whole granules.
  auto big = f.alloc->AllocateRaw(kMiB);
  ASSERT_THAT(big.status(), IsOk());
  EXPECT_EQ(f.alloc->Granules().in_blocks, 1u);
  EXPECT_EQ(f.alloc->Stats().peak_bytes_in_use, 100u * 1024 + kG);
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
  for (void* p : small) ASSERT_THAT(f.alloc->Deallocate(p), IsOk());
  EXPECT_THAT(f.alloc->Deallocate(small[0]),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("double free")));
  ASSERT_THAT(f.alloc->Deallocate(*big), IsOk());
  s = f.alloc->Stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.num_frees, 101u);
  ASSERT_THAT(f.alloc->Trim(), IsOk());
  EXPECT_EQ(f.alloc->Granules().mapped, 0u);  // the empty slab went back to the pool
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
}

TEST(VmmAllocatorTest, DefaultSlabsFollowTheLimit) {
  constexpr uint64_t kGiB = 1024 * kMiB;
  struct Case {
    uint64_t limit, page, slab_option, want;
  };
  for (const Case& c :
       {Case{4 * kGiB, 0, 0, kG}, Case{8 * kGiB - kG, 0, 0, kG}, Case{8 * kGiB, 0, 0, 2 * kG},
        Case{16 * kGiB, 0, 0, 4 * kG}, Case{uint64_t{1} << 40, 0, 0, 4 * kG},
        Case{64 * kGiB, 0, kG, kG}, Case{64 * kGiB, 0, 3 * kMiB, 2 * kG},
        Case{64 * kGiB, 4 * kG, 0, 16 * kG}, Case{4 * kMiB, 0, 0, kG}}) {
    SCOPED_TRACE(::testing::Message()
                 << "limit " << c.limit << ", page " << c.page << ", slab_bytes " << c.slab_option);
    VmmOptions o = Opts(c.limit, /*growth=*/true);  // nothing created up front
    o.page_bytes = c.page;
    o.slab_bytes = c.slab_option;
    Fake f = MakeFake(o);
    ASSERT_NE(f.alloc, nullptr);
    EXPECT_EQ(f.alloc->slab_bytes(), c.want);
  }
}

TEST(VmmAllocatorTest, FourGranuleSlabsPackBlocksThatDoNotDivideAGranule) {
  // 320 KiB KV blocks: six to a 2 MiB slab (128 KiB left in each), twenty-five to an 8 MiB
  // one (192 KiB left), so 1000 of them take 160 granules instead of 167.
  for (bool growth : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "growth " << growth);
    VmmOptions o = Opts(16 * 1024 * kMiB, growth);
    Fake f = MakeFake(o);
    ASSERT_EQ(f.alloc->slab_bytes(), 4 * kG);
    std::vector<void*> blocks;
    for (int i = 0; i < 1000; ++i) {
      auto p = f.alloc->AllocateRaw(320 * kKiB);
      ASSERT_THAT(p.status(), IsOk());
      blocks.push_back(*p);
    }
    EXPECT_EQ(f.alloc->Granules().in_slabs, 160u);
    EXPECT_EQ(f.alloc->Stats().bytes_in_use, 1000 * 320 * kKiB);
    // Every block lies inside one slab of four granules, none across two.
    for (void* p : blocks) {
      const uint64_t a = reinterpret_cast<uint64_t>(p);
      EXPECT_EQ(a / (4 * kG), (a + 320 * kKiB - 1) / (4 * kG)) << p;
    }
    ASSERT_THAT(CheckFakeVmm(f), IsOk());
    for (void* p : blocks) ASSERT_THAT(f.alloc->Deallocate(p), IsOk());
    ASSERT_THAT(f.alloc->Trim(), IsOk());
    EXPECT_EQ(f.alloc->Granules().in_slabs, 0u);  // empty slabs went back to the pool
    EXPECT_EQ(f.alloc->Stats().bytes_in_use, 0u);
    ASSERT_THAT(CheckFakeVmm(f), IsOk());
  }
}

TEST(VmmAllocatorTest, EmptySlabsAreReclaimedForLargeBlocks) {
  Fake f = MakeFake(Opts(4 * kG, false, /*cache=*/false));
  // 32 blocks of 256 KiB: four one-granule slabs fill the limit (slabs do not double).
  std::vector<void*> small;
  for (int i = 0; i < 32; ++i) {
    auto p = f.alloc->AllocateRaw(256 * kKiB);
    ASSERT_THAT(p.status(), IsOk()) << i;
    small.push_back(*p);
    EXPECT_EQ(f.alloc->Granules().slabs, static_cast<uint64_t>(i / 8 + 1)) << i;
  }
  EXPECT_EQ(f.alloc->Granules().in_slabs, 4u);
  EXPECT_EQ(f.alloc->Granules().slabs, 4u);
  auto more = f.alloc->AllocateRaw(256 * kKiB);
  EXPECT_THAT(
      more.status(),
      StatusIs(absl::StatusCode::kResourceExhausted,
               AllOf(HasSubstr("GPU:0 (physical GPU 0)"), HasSubstr("no slab has room"),
                     HasSubstr("every granule of the limit is in a slab"),
                     Not(HasSubstr("not a multiple")), Not(HasSubstr("VGPU_ALLOCATOR=vmm")))));
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
  for (void* p : small) ASSERT_THAT(f.alloc->Deallocate(p), IsOk());
  // The slabs are empty but mapped; a large block needs their granules.
  EXPECT_EQ(f.alloc->Granules().in_slabs, 4u);
  auto big = f.alloc->AllocateRaw(4 * kG);
  ASSERT_THAT(big.status(), IsOk());
  EXPECT_EQ(f.alloc->Granules().in_slabs, 0u);
  EXPECT_EQ(f.alloc->Granules().in_blocks, 4u);
  EXPECT_THAT(f.alloc->AllocateRaw(1).status(), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*big), IsOk());
  auto again = f.alloc->AllocateRaw(1);
  ASSERT_THAT(again.status(), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*again), IsOk());
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
}

// With growth, below the limit: a large block that needs new granules while slabs sit empty
// takes theirs instead of growing the memory held from the device; one live small block keeps
// the allocator from going idle (which would give everything back anyway).
TEST(VmmAllocatorTest, GrowthLargeBlocksTakeEmptySlabsBeforeNewGranules) {
  VmmOptions o = Opts(64 * kG, true, /*cache=*/false);
  o.pool_keep_bytes = kG;
  Fake f = MakeFake(o);
  std::vector<void*> small;
  for (int i = 0; i < 32; ++i) {  // four full one-granule slabs
    auto p = f.alloc->AllocateRaw(256 * kKiB);
    ASSERT_THAT(p.status(), IsOk()) << i;
    small.push_back(*p);
  }
  auto keep = f.alloc->AllocateRaw(256 * kKiB);  // a fifth slab, kept busy
  ASSERT_THAT(keep.status(), IsOk());
  for (void* p : small) ASSERT_THAT(f.alloc->Deallocate(p), IsOk());
  auto c = f.alloc->Granules();
  ASSERT_EQ(c.slabs, 5u);  // four of them empty
  const uint64_t created = c.created;
  auto big = f.alloc->AllocateRaw(3 * kG);
  ASSERT_THAT(big.status(), IsOk());
  c = f.alloc->Granules();
  EXPECT_EQ(c.created, created);  // the empty slabs' granules, no new ones
  EXPECT_EQ(c.slabs, 1u);
  EXPECT_EQ(c.in_blocks, 3u);
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
  // Large blocks look for empty slabs only after a slab emptied since the last look found none
  // (BFCUsageMirror::empty_regions_made): a slab filled and emptied again is such a one, and
  // the next block that needs a granule takes it.
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    std::vector<void*> more;
    for (int i = 0; i < 15; ++i) {  // the kept slab's seven holes, then a new slab
      auto p = f.alloc->AllocateRaw(256 * kKiB);
      ASSERT_THAT(p.status(), IsOk()) << i;
      more.push_back(*p);
    }
    ASSERT_EQ(f.alloc->Granules().slabs, 2u);
    for (void* p : more) ASSERT_THAT(f.alloc->Deallocate(p), IsOk());
    c = f.alloc->Granules();
    const uint64_t before = c.created;
    auto one = f.alloc->AllocateRaw(kG);
    ASSERT_THAT(one.status(), IsOk());
    c = f.alloc->Granules();
    EXPECT_EQ(c.slabs, 1u);
    EXPECT_EQ(c.created, before);  // the emptied slab's granule, no new one
    ASSERT_THAT(f.alloc->Deallocate(*one), IsOk());
    EXPECT_THAT(CheckFakeVmm(f), IsOk());
  }
  ASSERT_THAT(f.alloc->Deallocate(*big), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*keep), IsOk());
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
}

class Recorder : public AllocatorObserver {
 public:
  void OnAllocatorEvent(const std::string& name, const AllocatorEvent& e) override {
    names.insert(name);
    events.push_back(e);
  }
  int Count(AllocatorEventKind k) const {
    int n = 0;
    for (const auto& e : events) n += e.kind == k;
    return n;
  }
  std::set<std::string> names;
  std::vector<AllocatorEvent> events;
};

TEST(VmmAllocatorTest, ObserversSeeEveryBlockAndMapping) {
  Fake f = MakeFake(Opts(4 * kG, false, /*cache=*/false));
  Recorder r;
  f.alloc->AddObserver(&r);
  auto small = f.alloc->AllocateRaw(4096);
  auto big = f.alloc->AllocateRaw(2 * kG);
  ASSERT_THAT(small.status(), IsOk());
  ASSERT_THAT(big.status(), IsOk());
  EXPECT_THAT(f.alloc->AllocateRaw(2 * kG).status(),
              StatusIs(absl::StatusCode::kResourceExhausted));
  ASSERT_THAT(f.alloc->Deallocate(*big), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*small), IsOk());
  f.alloc->RemoveObserver(&r);
  auto after = f.alloc->AllocateRaw(4096);
  ASSERT_THAT(after.status(), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*after), IsOk());
  EXPECT_EQ(r.names, std::set<std::string>{"GPU:0 (physical GPU 0)"});
  EXPECT_EQ(r.Count(AllocatorEventKind::kAlloc), 2);
  EXPECT_EQ(r.Count(AllocatorEventKind::kFree), 2);
  EXPECT_EQ(r.Count(AllocatorEventKind::kOom), 1);
  EXPECT_EQ(r.Count(AllocatorEventKind::kMap), 2);    // the slab, the block
  EXPECT_EQ(r.Count(AllocatorEventKind::kUnmap), 1);  // the block (no cache)
  // After the big block's alloc event: slab + block mapped, 4 KiB + 2 granules in use.
  const AllocatorEvent& e = r.events[3];
  ASSERT_EQ(e.kind, AllocatorEventKind::kAlloc);
  EXPECT_EQ(e.bytes, 2 * kG);
  EXPECT_EQ(e.bytes_in_use, 4096 + 2 * kG);
  EXPECT_EQ(e.bytes_reserved, 3 * kG);
  // The small block's event (after its slab's map) comes from the slab BFC, sent on while
  // there are observers, with the slab's largest free chunk: the rest of its granule.
  const AllocatorEvent& s = r.events[1];
  ASSERT_EQ(s.kind, AllocatorEventKind::kAlloc);
  EXPECT_EQ(s.bytes, 4096u);
  EXPECT_EQ(s.bytes_in_use, 4096u);
  EXPECT_EQ(s.largest_free, kG - 4096);
}

// The small path's counters are kept by the slab BFC, the large path's by the granule pool:
// in use, the peak over both and the largest request stay exact across them.
TEST(VmmAllocatorTest, StatsSpanBothPaths) {
  Fake f = MakeFake(Opts(8 * kG, false, /*cache=*/false));
  auto big = f.alloc->AllocateRaw(2 * kG);
  ASSERT_THAT(big.status(), IsOk());
  auto small = f.alloc->AllocateRaw(3000);  // 3072 in use (whole 256-byte units)
  ASSERT_THAT(small.status(), IsOk());
  AllocatorStats s = f.alloc->Stats();
  EXPECT_EQ(s.bytes_in_use, 2 * kG + 3072);
  EXPECT_EQ(s.peak_bytes_in_use, 2 * kG + 3072);
  EXPECT_EQ(s.largest_alloc_size, 2 * kG);
  ASSERT_THAT(f.alloc->Deallocate(*big), IsOk());
  auto small2 = f.alloc->AllocateRaw(kMiB - 256);  // the largest small request
  ASSERT_THAT(small2.status(), IsOk());
  s = f.alloc->Stats();
  EXPECT_EQ(s.bytes_in_use, 3072 + kMiB - 256);
  EXPECT_EQ(s.peak_bytes_in_use, 2 * kG + 3072);  // the peak was with the big block
  EXPECT_EQ(s.largest_alloc_size, 2 * kG);
  ASSERT_THAT(f.alloc->Deallocate(*small), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*small2), IsOk());
  EXPECT_EQ(f.alloc->Stats().bytes_in_use, 0u);
  EXPECT_THAT(f.alloc->CheckInvariants(), IsOk());
}

TEST(VmmAllocatorTest, DumpShowsOccupancy) {
  Fake f = MakeFake(Opts(8 * kG, false));
  auto p = f.alloc->AllocateRaw(2 * kG);
  ASSERT_THAT(p.status(), IsOk());
  std::string dump = f.alloc->DumpMemoryLog();
  EXPECT_THAT(dump, HasSubstr("GPU:0 (physical GPU 0)"));
  EXPECT_THAT(dump, HasSubstr("granule 2 MiB, slab 2 MiB)"));
  EXPECT_THAT(dump, HasSubstr("|BB......|"));
  EXPECT_THAT(dump, HasSubstr("live large blocks: 1"));
  ASSERT_THAT(f.alloc->Deallocate(*p), IsOk());
  // A 100 GiB pool still dumps in a few KiB.
  Fake big = MakeFake(Opts(uint64_t{100} << 30, false));
  auto q = big.alloc->AllocateRaw(uint64_t{50} << 30);
  ASSERT_THAT(q.status(), IsOk());
  std::string big_dump = big.alloc->DumpMemoryLog();
  EXPECT_LT(big_dump.size(), 16000u);
  EXPECT_THAT(big_dump, HasSubstr("13 granule(s) per character"));
  EXPECT_THAT(big_dump, HasSubstr("granule 2 MiB, slab 8 MiB)"));  // slabs follow the limit
  ASSERT_THAT(big.alloc->Deallocate(*q), IsOk());
}

// Near the limit a block whose first layout leaves a gap pairs an open upper part with an open
// lower part instead: here 1.5 MiB + 1.5 MiB for a 3 MiB block, no gap, where the largest head
// (1.75 MiB) would leave 256 KiB between its tail and the block above it. Far from the limit
// the first layout stands (no search).
TEST(VmmAllocatorTest, TailSharingPairsHeadAndTailNearTheLimit) {
  for (bool near : {true, false}) {
    SCOPED_TRACE(near ? "near the limit" : "far from it");
    // 17 granules: once the parts are made 15 are mapped (2 left, less than an eighth); 64 far.
    Fake f = MakeFake(Opts((near ? 17 : 64) * kG, false, /*cache=*/false));
    CheckedBlocks blocks{f};
    auto alloc = [&](uint64_t bytes) { return blocks.Alloc(bytes); };
    auto free = [&](void* p) { blocks.Free(p); };
    ASSERT_NE(alloc(9 * kG), nullptr);  // whole granules, shared with nothing
    // Two chains of blocks that share granules: q1 | q2 and r1 | r2 | r3.
    void* q1 = alloc(kG + 256 * kKiB);   // tail granule Q: 256 KiB, 1.75 MiB open above
    void* q2 = alloc(1792 * kKiB + kG);  // Q's upper 1.75 MiB + one granule
    void* r1 = alloc(kG + 512 * kKiB);   // tail granule R: 512 KiB, 1.5 MiB open above
    void* r2 = alloc(1536 * kKiB + kG + 1536 * kKiB);  // R's upper + a granule + S's lower 1.5M
    void* r3 = alloc(512 * kKiB + kG);                 // S's upper 512 KiB + one granule
    ASSERT_TRUE(q1 && q2 && r1 && r2 && r3);
    EXPECT_EQ(f.alloc->Granules().mapped, 17u);
    ASSERT_NO_FATAL_FAILURE(free(q2));  // open: Q's upper 1.75 MiB
    ASSERT_NO_FATAL_FAILURE(free(r2));  // open: R's upper 1.5 MiB, S's lower 1.5 MiB
    EXPECT_EQ(f.alloc->Granules().mapped, 15u);
    EXPECT_THAT(f.alloc->DumpMemoryLog(),
                HasSubstr("shared granules: 3 (0 with an inner block); open upper parts 2 (3.25 "
                          "MiB), open lower parts 1 (1.5 MiB), gaps beside live blocks 0 B"));
    void* x = alloc(3 * kMiB);
    ASSERT_NE(x, nullptr);
    EXPECT_EQ(f.alloc->Granules().mapped, 15u);  // both ways: parts only, no granule
    EXPECT_THAT(f.alloc->DumpMemoryLog(),
                HasSubstr(near ? "open upper parts 1 (1.75 MiB), open lower parts 0 (0 B), gaps "
                                 "beside live blocks 0 B"
                               : "open upper parts 1 (1.5 MiB), open lower parts 0 (0 B), gaps "
                                 "beside live blocks 256 KiB"));
    // x begins 1.5 MiB into R's granule (near) or 256 KiB into Q's (far).
    EXPECT_EQ(reinterpret_cast<uint64_t>(x) % kG, near ? 512 * kKiB : 256 * kKiB);
    while (!blocks.live.empty()) ASSERT_NO_FATAL_FAILURE(free(blocks.live.back().first));
    EXPECT_THAT(f.alloc->CheckInvariants(), IsOk());
  }
}

// The near-the-limit policies' cases: a limit of 8 granules that the test fills, one of 64 that
// it does not, and 8 with the policy off.
struct NearLimitCase {
  const char* name;
  uint64_t limit;
  bool on;
};
constexpr NearLimitCase kNearLimitCases[] = {{"near the limit", 8 * kG, true},
                                             {"far from it", 64 * kG, true},
                                             {"near, option off", 8 * kG, false}};

// Near the limit the slab BFC's slivers (remainders its split rule keeps inside small blocks) go
// to the hole after them when that block is freed: a request then fits there. Far from the limit
// (and with the option off) the sliver stays inside: the request takes a new slab, or fails.
TEST(VmmAllocatorTest, SlabSliversAreReclaimedNearTheLimit) {
  for (const NearLimitCase& c : kNearLimitCases) {
    SCOPED_TRACE(c.name);
    VmmOptions o = Opts(c.limit, false, /*cache=*/false);
    o.slab_reclaim_slivers = c.on;
    Fake f = MakeFake(o);
    CheckedBlocks blocks{f};
    ASSERT_NE(blocks.Alloc(7 * kG), nullptr);  // whole granules: 7 of the limit
    // One slab, full: 960 + 960 + 128 KiB.
    void* p1 = blocks.Alloc(960 * kKiB);
    void* p2 = blocks.Alloc(960 * kKiB);
    void* p3 = blocks.Alloc(128 * kKiB);
    ASSERT_TRUE(p1 && p2 && p3);
    ASSERT_EQ(f.alloc->Granules().in_slabs, 1u);
    ASSERT_EQ(f.alloc->Granules().mapped, 8u);
    ASSERT_NO_FATAL_FAILURE(blocks.Free(p1));
    void* q = blocks.Alloc(900 * kKiB);  // 60 KiB left < 900/8: kept inside q
    ASSERT_EQ(q, p1);
    ASSERT_NO_FATAL_FAILURE(blocks.Free(p2));
    // 1000 KiB: 1020 KiB free after q's 900 when the sliver was reclaimed, else 960.
    absl::StatusOr<void*> r = f.alloc->AllocateRaw(1000 * kKiB);
    EXPECT_THAT(CheckFakeVmm(f), IsOk());
    if (c.limit == 8 * kG && c.on) {
      ASSERT_THAT(r, IsOk());
      EXPECT_EQ(*r, static_cast<char*>(q) + 900 * kKiB);
      EXPECT_EQ(f.alloc->Granules().in_slabs, 1u);
    } else if (c.on) {
      ASSERT_THAT(r, IsOk());  // a second slab
      EXPECT_EQ(f.alloc->Granules().in_slabs, 2u);
    } else {
      EXPECT_THAT(r.status(), StatusIs(absl::StatusCode::kResourceExhausted));
    }
    if (r.ok()) blocks.live.emplace_back(*r, 1000 * kKiB);
    ExpectNoPhysicalOverlap(f, blocks.live);
    while (!blocks.live.empty()) ASSERT_NO_FATAL_FAILURE(blocks.Free(blocks.live.back().first));
    EXPECT_EQ(f.alloc->Stats().bytes_in_use, 0u);
    EXPECT_THAT(f.alloc->CheckInvariants(), IsOk());
  }
}

// Near the limit (less than an eighth of it left) a small request whose best slab hole would
// leave 64 KiB or more beside it takes a free slab end and a free slab start that leave less,
// joined by an edge view. Far from the limit, and with the option off, the hole.
TEST(VmmAllocatorTest, EdgeViewsCompeteWithHolesNearTheLimit) {
  for (const NearLimitCase& c : kNearLimitCases) {
    SCOPED_TRACE(c.name);
    VmmOptions o = Opts(c.limit, false, /*cache=*/false);
    o.slab_edge_views_in_best_fit = c.on;
    Fake f = MakeFake(o);
    CheckedBlocks blocks{f};
    ASSERT_NE(blocks.Alloc(5 * kG), nullptr);  // whole granules: 5 of the limit
    // Slab A: 774, 774, 500 KiB; slab B: 500, 774, 774; slab C: 300, 520, 520, 708.
    std::vector<char*> p;
    for (uint64_t kib : {774, 774, 500, 500, 774, 774, 300, 520, 520, 708}) {
      p.push_back(static_cast<char*>(blocks.Alloc(kib * kKiB)));
      ASSERT_NE(p.back(), nullptr);
    }
    ASSERT_EQ(f.alloc->Granules().in_slabs, 3u);
    ASSERT_EQ(reinterpret_cast<uint64_t>(p[3]) % kG, 0u);  // B's first block starts its granule
    ASSERT_EQ(reinterpret_cast<uint64_t>(p[2] + 500 * kKiB) % kG, 0u);  // A's last ends its own
    // 500 KiB free at A's end and at B's start; a 1040 KiB hole in C.
    for (int i : {2, 3, 7, 8}) ASSERT_NO_FATAL_FAILURE(blocks.Free(p[i]));
    const uint64_t views = f.alloc->Granules().edge_views_made;
    // 960 KiB: the hole would leave 80 KiB, the two edges 40 KiB.
    char* q = static_cast<char*>(blocks.Alloc(960 * kKiB));
    ASSERT_NE(q, nullptr);
    if (c.limit == 8 * kG && c.on) {
      EXPECT_EQ(f.alloc->Granules().edge_views_made, views + 1);
      EXPECT_NE(q, p[7]);
      // Its first 500 KiB are A's end, the rest B's start (through the fake device's mapping).
      auto at = [&](const char* v) {
        const uint64_t va = reinterpret_cast<uint64_t>(v);
        auto t = f.backend->Translate(reinterpret_cast<void*>(va / kG * kG));
        EXPECT_THAT(t.status(), IsOk());
        return t.ok() ? std::make_pair(t->first, t->second + va % kG) : std::make_pair(0ul, 0ul);
      };
      EXPECT_EQ(at(q), at(p[2]));
      EXPECT_EQ(at(q + 500 * kKiB), at(p[3]));
      EXPECT_EQ(at(q + 960 * kKiB - 256), at(p[3] + 460 * kKiB - 256));
      // The hole is still there for a block that fits it.
      EXPECT_EQ(blocks.Alloc(1000 * kKiB), p[7]);
    } else {
      EXPECT_EQ(q, p[7]);
      EXPECT_EQ(f.alloc->Granules().edge_views_made, views);
    }
    while (!blocks.live.empty()) ASSERT_NO_FATAL_FAILURE(blocks.Free(blocks.live.back().first));
    EXPECT_EQ(f.alloc->Stats().bytes_in_use, 0u);
    EXPECT_THAT(f.alloc->CheckInvariants(), IsOk());
  }
}

// The slab BFC's index of free slab edges is built when the allocator comes near its limit,
// kept through every bin change, dropped after a few thousand allocations far from it and built
// again: random small blocks through near, far and near again, with every invariant (the index
// matching a walk over the chunks) checked as they go and edge views made in both near phases.
TEST(VmmAllocatorTest, EdgeIndexFollowsTheLimit) {
  Fake f = MakeFake(Opts(16 * kG, false, /*cache=*/false));
  std::mt19937_64 rng(11);
  std::vector<std::pair<void*, uint64_t>> live;
  uint64_t live_bytes = 0;
  for (int phase = 0; phase < 3; ++phase) {
    const bool near = phase != 1;
    SCOPED_TRACE(near ? "near the limit" : "far from it");
    // Near: a large block holds 13 of the 16 granules, so the small blocks run at the limit.
    void* big = nullptr;
    if (near) {
      auto b = f.alloc->AllocateRaw(13 * kG);
      ASSERT_THAT(b.status(), IsOk());
      big = *b;
    }
    const uint64_t views = f.alloc->Granules().edge_views_made;
    for (int i = 0; i < (near ? 6000 : 12000); ++i) {  // far: more allocations than the drop needs
      if (live.empty() || (live_bytes < (near ? 5 : 8) * kMiB && rng() % 100 < 60)) {
        const uint64_t bytes = 64 * kKiB + rng() % (960 * kKiB);
        auto p = f.alloc->AllocateRaw(bytes);
        if (p.ok()) {
          live.emplace_back(*p, bytes);
          live_bytes += bytes;
        } else {
          ASSERT_THAT(p.status(), StatusIs(absl::StatusCode::kResourceExhausted));
          ASSERT_TRUE(near) << "op " << i;
        }
      } else {
        ASSERT_NO_FATAL_FAILURE(FreeRandomBlock(f, live, rng, &live_bytes));
      }
      if (i % 8 == 0) ASSERT_THAT(CheckFakeVmm(f), IsOk()) << "op " << i;
    }
    if (near) EXPECT_GT(f.alloc->Granules().edge_views_made, views);
    ASSERT_NO_FATAL_FAILURE(ExpectNoPhysicalOverlap(f, live));
    if (big != nullptr) ASSERT_THAT(f.alloc->Deallocate(big), IsOk());
    // The next phase starts from empty slabs, given back.
    while (!live.empty()) ASSERT_NO_FATAL_FAILURE(FreeRandomBlock(f, live, rng, &live_bytes));
    ASSERT_THAT(f.alloc->Trim(), IsOk());
    ASSERT_THAT(CheckFakeVmm(f), IsOk());
  }
  EXPECT_EQ(f.alloc->Stats().bytes_in_use, 0u);
}

// Near the limit (less than a third of it left to map) a mid-size block (half the small-block
// size and up) goes to an open part of a shared granule that holds it with less than half its
// size to spare, in place of a slab; farther from the limit, or with more to spare, it takes a
// slab. With the option off it takes a slab while one can be added; at the limit (no granule
// left for a slab) the open part all the same, as the last try before an OOM.
TEST(VmmAllocatorTest, MidSizeBlocksTakeOpenPartsNearTheLimit) {
  enum class Where { kOpenPart, kSlab };
  struct Case {
    const char* name;
    uint64_t limit;
    bool on;
    uint64_t bytes;
    Where where;
  };
  // 8 granules are mapped below: the room is limit - 8.
  const Case kCases[] = {
      {"at the limit", 8 * kG, true, 800 * kKiB, Where::kOpenPart},
      {"a third of the limit left (3 of 11)", 11 * kG, true, 800 * kKiB, Where::kOpenPart},
      {"a third or more left (5 of 13)", 13 * kG, true, 800 * kKiB, Where::kSlab},
      {"far from it", 64 * kG, true, 800 * kKiB, Where::kSlab},
      {"less than half to spare (248 of 600 KiB)", 11 * kG, true, 600 * kKiB, Where::kOpenPart},
      {"half or more to spare (328 of 520 KiB)", 11 * kG, true, 520 * kKiB, Where::kSlab},
      // Off: the slabs while one can be added; at the limit the open part all the same (the
      // last try before an OOM), not a failure.
      {"a third of the limit left, option off", 11 * kG, false, 800 * kKiB, Where::kSlab},
      {"at the limit, option off", 8 * kG, false, 800 * kKiB, Where::kOpenPart},
  };
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    VmmOptions o = Opts(c.limit, false, /*cache=*/false);
    o.mid_blocks_near_limit = c.on;
    Fake f = MakeFake(o);
    CheckedBlocks blocks{f};
    // A granule and a 1200 KiB tail: the tail granule's upper 848 KiB is open.
    ASSERT_NE(blocks.Alloc(kG + 1200 * kKiB), nullptr);
    ASSERT_NE(blocks.Alloc(6 * kG), nullptr);  // whole granules: 8 of the limit mapped
    ASSERT_EQ(f.alloc->Granules().mapped, 8u);
    absl::StatusOr<void*> m = f.alloc->AllocateRaw(c.bytes);
    EXPECT_THAT(CheckFakeVmm(f), IsOk());
    switch (c.where) {
      case Where::kOpenPart:
        ASSERT_THAT(m, IsOk());
        // At the end of the shared granule, none of it in a slab, nothing more mapped.
        EXPECT_EQ(reinterpret_cast<uint64_t>(*m) % kG, kG - c.bytes);
        EXPECT_EQ(f.alloc->Granules().in_slabs, 0u);
        EXPECT_EQ(f.alloc->Granules().mapped, 8u);
        break;
      case Where::kSlab:
        ASSERT_THAT(m, IsOk());
        EXPECT_EQ(f.alloc->Granules().in_slabs, 1u);
        EXPECT_EQ(f.alloc->Granules().mapped, 9u);
        break;
    }
    if (m.ok()) blocks.live.emplace_back(*m, c.bytes);
    ExpectNoPhysicalOverlap(f, blocks.live);
    EXPECT_THAT(f.alloc->CheckInvariants(), IsOk());
    // Freed in any order, everything goes back.
    while (!blocks.live.empty()) ASSERT_NO_FATAL_FAILURE(blocks.Free(blocks.live.front().first));
    EXPECT_EQ(f.alloc->Stats().bytes_in_use, 0u);
    EXPECT_THAT(f.alloc->CheckInvariants(), IsOk());
  }
}

// Far from the limit a block whose whole granules waste at most 1/32 of it takes them (no shared
// tail: nothing to map or unmap around it); one that would waste more shares its tail as
// before; near the limit (an eighth of it or less left) and with the divisor 0 every block
// shares. Either way the memory is the caller's, the block's bytes map to no other block's.
TEST(VmmAllocatorTest, WholeGranulesFarFromTheLimit) {
  struct Case {
    const char* name;
    uint64_t limit;
    uint64_t filler;  // whole granules mapped first
    uint64_t divisor;
    bool whole;  // the 8 granules + 1984 KiB block takes 9 whole granules
  };
  const Case cases[] = {{"far from the limit", 64 * kG, 0, 32, true},
                        {"far, divisor 0 (always share)", 64 * kG, 0, 0, false},
                        {"near the limit", 128 * kG, 113 * kG, 32, false}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    VmmOptions o = Opts(c.limit, false, /*cache=*/false);
    o.whole_granule_waste_divisor = c.divisor;
    Fake f = MakeFake(o);
    CheckedBlocks blocks{f};
    if (c.filler > 0) ASSERT_NE(blocks.Alloc(c.filler), nullptr);
    const VmmAllocator::GranuleCounts before = f.alloc->Granules();
    // Rounding up wastes 64 KiB: under 1/32 of its 17.9 MiB.
    ASSERT_NE(blocks.Alloc(8 * kG + 1984 * kKiB), nullptr);
    const VmmAllocator::GranuleCounts g = f.alloc->Granules();
    EXPECT_EQ(g.shared - before.shared, c.whole ? 0u : 1u);
    EXPECT_EQ(g.in_blocks - before.in_blocks, c.whole ? 9u : 8u);
    // Wasting 848 KiB of 3.2 MiB (over 1/32): its tail is shared wherever it is.
    ASSERT_NE(blocks.Alloc(kG + 1200 * kKiB), nullptr);
    EXPECT_EQ(f.alloc->Granules().shared - g.shared, 1u);
    // The next block's head takes the 848 KiB open above that tail.
    ASSERT_NE(blocks.Alloc(848 * kKiB + kG), nullptr);
    EXPECT_EQ(f.alloc->Granules().shared - g.shared, 1u);
    EXPECT_THAT(f.alloc->CheckInvariants(), IsOk());
    while (!blocks.live.empty()) ASSERT_NO_FATAL_FAILURE(blocks.Free(blocks.live.front().first));
    EXPECT_EQ(f.alloc->Stats().bytes_in_use, 0u);
    EXPECT_THAT(f.alloc->CheckInvariants(), IsOk());
  }
}

// A block that whole granules waste little on but that fits the limit only with tail sharing
// (an open part as its head) shares rather than failing: 6 granules + 1984 KiB with 6 granules
// left takes the 1984 KiB open above a tail as its head.
TEST(VmmAllocatorTest, WholeGranulesGiveWayToTailSharingAtTheLimit) {
  Fake f = MakeFake(Opts(8 * kG, false, /*cache=*/false));
  CheckedBlocks blocks{f};
  ASSERT_NE(blocks.Alloc(kG + 64 * kKiB), nullptr);  // tail granule T: 1984 KiB open above
  ASSERT_EQ(f.alloc->Granules().mapped, 2u);
  void* b = blocks.Alloc(6 * kG + 1984 * kKiB);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(reinterpret_cast<uint64_t>(b) % kG, 64 * kKiB);  // begins in T's upper part
  EXPECT_EQ(f.alloc->Granules().mapped, 8u);
  EXPECT_EQ(f.alloc->Granules().shared, 1u);
  EXPECT_THAT(f.alloc->CheckInvariants(), IsOk());
  while (!blocks.live.empty()) ASSERT_NO_FATAL_FAILURE(blocks.Free(blocks.live.back().first));
  EXPECT_EQ(f.alloc->Stats().bytes_in_use, 0u);
  EXPECT_THAT(f.alloc->CheckInvariants(), IsOk());
}

// At the limit, a layout that saves a gap may need a granule more than the first one (the largest
// head): before failing, the block is laid out the first way. Here a 3 MiB block fits in a
// 1.75 MiB head and a 1.25 MiB tail with no granule left, where the gap-free layout (a 1 MiB
// head, then a whole granule) needs one.
TEST(VmmAllocatorTest, TailSharingFallsBackToTheFewestGranulesAtTheLimit) {
  Fake f = MakeFake(Opts(8 * kG, false, /*cache=*/false));
  CheckedBlocks blocks{f};
  void* q1 = blocks.Alloc(kG + 256 * kKiB);          // tail granule Q: 1.75 MiB open above
  void* q2 = blocks.Alloc(1792 * kKiB + kG);         // Q's upper part + one granule
  void* r1 = blocks.Alloc(kG + kMiB);                // tail granule R: 1 MiB open above
  void* r2 = blocks.Alloc(kMiB + kG + 1536 * kKiB);  // R's upper + a granule + S's lower
  void* r3 = blocks.Alloc(512 * kKiB + kG);          // S's upper 512 KiB + one granule
  ASSERT_TRUE(q1 && q2 && r1 && r2 && r3);
  EXPECT_EQ(f.alloc->Granules().mapped, 8u);
  ASSERT_NO_FATAL_FAILURE(blocks.Free(q2));  // open: Q's upper 1.75 MiB
  ASSERT_NO_FATAL_FAILURE(blocks.Free(r2));  // open: R's upper 1 MiB, S's lower 1.5 MiB
  ASSERT_NE(blocks.Alloc(2 * kG), nullptr);  // whole granules: the limit is reached
  EXPECT_EQ(f.alloc->Granules().mapped, 8u);
  void* x = blocks.Alloc(3 * kMiB);
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(reinterpret_cast<uint64_t>(x) % kG, 256 * kKiB);  // Q's upper part is its head
  EXPECT_THAT(f.alloc->DumpMemoryLog(),
              HasSubstr("open upper parts 1 (1 MiB), open lower parts 0 (0 B), gaps beside "
                        "live blocks 256 KiB"));
  EXPECT_EQ(f.alloc->Stats().num_ooms, 0u);
  while (!blocks.live.empty()) ASSERT_NO_FATAL_FAILURE(blocks.Free(blocks.live.back().first));
  EXPECT_THAT(f.alloc->CheckInvariants(), IsOk());
}

// At the limit, before an OOM, a block takes whatever mapped memory holds it: a large block the
// end of an open upper part however much it leaves beside it, or a slab's hole when it is no
// larger than a slab; a small block that no slab has room for, an open part. Each case fails
// with ResourceExhausted without that last try (no granule is left for a fresh tail or slab).
TEST(VmmAllocatorTest, AtTheLimitAnyMappedSpaceThatHoldsTheBlockServesIt) {
  enum class Where { kOpenUpper, kSlab };
  struct Case {
    const char* name;
    uint64_t first;  // a shared tail (kG + 256 KiB: 1.75 MiB open above it) or a small block
    uint64_t whole;  // whole granules that reach the limit of 4
    uint64_t bytes;
    Where where;
  };
  const Case kCases[] = {
      // Neither a head (the part is larger than the block) nor a gap under a quarter granule.
      {"large block, 512 KiB beside it in an open part", kG + 256 * kKiB, 2 * kG, 1280 * kKiB,
       Where::kOpenUpper},
      {"large block in a slab's hole", 100 * kKiB, 3 * kG, 1280 * kKiB, Where::kSlab},
      {"small block, no slab, an open part", kG + 256 * kKiB, 2 * kG, 100 * kKiB,
       Where::kOpenUpper},
  };
  // A lambda, so that a failed ASSERT ends one case, not the rest.
  auto run = [](const Case& c) {
    Fake f = MakeFake(Opts(4 * kG, false, /*cache=*/false));
    CheckedBlocks blocks{f};
    ASSERT_NE(blocks.Alloc(c.first), nullptr);
    ASSERT_NE(blocks.Alloc(c.whole), nullptr);
    ASSERT_EQ(f.alloc->Granules().mapped, 4u);
    void* x = blocks.Alloc(c.bytes);
    ASSERT_NE(x, nullptr);
    const VmmAllocator::GranuleCounts g = f.alloc->Granules();
    EXPECT_EQ(g.mapped, 4u);
    if (c.where == Where::kOpenUpper) {
      // Ends where the shared granule ends: its last bytes are the open part's last bytes.
      EXPECT_EQ((reinterpret_cast<uint64_t>(x) + c.bytes) % kG, 0u);
      EXPECT_EQ(g.in_slabs, 0u);
    } else {
      EXPECT_EQ(g.in_slabs, 1u);
      EXPECT_EQ(f.alloc->Stats().bytes_in_use, c.first + c.whole + c.bytes);
    }
    EXPECT_EQ(f.alloc->Stats().num_ooms, 0u);
    EXPECT_THAT(f.alloc->CheckInvariants(), IsOk());
    // Nothing else fits now: a clear OOM, and every block still frees.
    EXPECT_THAT(f.alloc->AllocateRaw(kG).status(), StatusIs(absl::StatusCode::kResourceExhausted));
    while (!blocks.live.empty()) ASSERT_NO_FATAL_FAILURE(blocks.Free(blocks.live.back().first));
    EXPECT_EQ(f.alloc->Stats().bytes_in_use, 0u);
    EXPECT_THAT(f.alloc->CheckInvariants(), IsOk());
  };
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    run(c);
  }
}

TEST(VmmAllocatorTest, DumpShowsTailSharingParts) {
  Fake f = MakeFake(Opts(8 * kG, false));
  // A granule and a half: its last half granule shares a granule whose upper half is open.
  auto p = f.alloc->AllocateRaw(kG + kG / 2);
  ASSERT_THAT(p.status(), IsOk());
  EXPECT_THAT(f.alloc->DumpMemoryLog(),
              HasSubstr("shared granules: 1 (0 with an inner block); open upper parts 1 (1 MiB), "
                        "open lower parts 0 (0 B), gaps beside live blocks 0 B"));
  ASSERT_THAT(f.alloc->Deallocate(*p), IsOk());
  EXPECT_THAT(f.alloc->CheckInvariants(), IsOk());
}

// ---- real memory: the host platform maps memfd pages, so stitching is real ----

class VmmHostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto p = HostPlatform::Create(HostPlatformOptions{{256 * kMiB}});
    ASSERT_THAT(p.status(), IsOk());
    platform_ = *std::move(p);
    auto e = platform_->GetExecutor(0);
    ASSERT_THAT(e.status(), IsOk());
    executor_ = *e;
  }
  std::unique_ptr<Allocator> Make(uint64_t limit, bool growth) {
    return MakeVmmAllocator(executor_, limit, growth);
  }
  std::unique_ptr<HostPlatform> platform_;
  Executor* executor_ = nullptr;
};

TEST_F(VmmHostTest, WriteThroughAStitchedBlockAndReadBack) {
  for (bool growth : {false, true}) {
    std::unique_ptr<Allocator> a = Make(16 * kG, growth);
    ASSERT_NE(a, nullptr);
    auto* vmm = static_cast<VmmAllocator*>(a.get());
    // Each one-granule block holds its own pattern.
    StitchedBlock stitched;
    ASSERT_NO_FATAL_FAILURE(StitchScatteredGranules(
        vmm, kG, &stitched, [](int i, void* block) { std::memset(block, i, kG); }));
    auto* b = static_cast<uint8_t*>(stitched.big);
    for (uint64_t i = 0; i < 8 * kG; i += 4096) b[i] = static_cast<uint8_t>(i / 4096 * 7);
    b[8 * kG - 1] = 0xAB;
    for (uint64_t i = 0; i < 8 * kG; i += 4096) {
      ASSERT_EQ(b[i], static_cast<uint8_t>(i / 4096 * 7)) << i;
    }
    EXPECT_EQ(b[8 * kG - 1], 0xAB);
    // The live even blocks kept their data.
    for (int i = 0; i < 16; i += 2) {
      auto* block = static_cast<uint8_t*>(stitched.blocks[i]);
      ASSERT_EQ(block[0], i);
      ASSERT_EQ(block[kG - 1], i);
    }
    // And a device copy through the stream sees the same bytes.
    auto stream = executor_->CreateStream({});
    ASSERT_THAT(stream.status(), IsOk());
    std::vector<uint8_t> host(8 * kG);
    ASSERT_THAT((*stream)->MemcpyD2H(host.data(), b, host.size()), IsOk());
    ASSERT_THAT((*stream)->Synchronize(), IsOk());
    EXPECT_EQ(host[4096], 7);
    EXPECT_EQ(host.back(), 0xAB);
    ASSERT_NO_FATAL_FAILURE(FreeStitchedBlock(vmm, stitched));
  }
}

// An edge view on real memory: bytes written through the view land at the end of one slab and
// the start of another, where the slabs' own addresses read them, and the live neighbours keep
// their data.
TEST_F(VmmHostTest, WriteThroughAnEdgeView) {
  std::unique_ptr<Allocator> a = Make(2 * kG, /*growth=*/false);
  ASSERT_NE(a, nullptr);
  std::vector<char*> blocks;
  ASSERT_NO_FATAL_FAILURE(MakeEdgeHoles(
      a.get(), kG, &blocks, [](int i, void* p, uint64_t bytes) { std::memset(p, i + 1, bytes); }));
  auto* a3 = reinterpret_cast<uint8_t*>(blocks[2]);
  auto* b1 = reinterpret_cast<uint8_t*>(blocks[3]);
  auto p = a->AllocateRaw(1000 * kKiB);
  ASSERT_THAT(p.status(), IsOk());
  auto* v = static_cast<uint8_t*>(*p);
  for (uint64_t i = 0; i < 1000 * kKiB; i += 4096) v[i] = static_cast<uint8_t>(i / 4096 + 1);
  v[1000 * kKiB - 1] = 0xCD;
  EXPECT_EQ(a3[0], 1);
  EXPECT_EQ(a3[4096], 2);
  EXPECT_EQ(b1[0], static_cast<uint8_t>(648 / 4 + 1));
  EXPECT_EQ(b1[352 * kKiB - 1], 0xCD);
  EXPECT_EQ(blocks[1][800 * kKiB - 1], 2);  // the neighbours are untouched
  EXPECT_EQ(blocks[4][0], 5);
  ASSERT_THAT(a->Deallocate(v), IsOk());
  for (int i : {0, 1, 4, 5}) ASSERT_THAT(a->Deallocate(blocks[i]), IsOk());
  ASSERT_THAT(a->CheckInvariants(), IsOk());
}

TEST_F(VmmHostTest, DataSurvivesManyCycles) {
  std::unique_ptr<Allocator> a = Make(24 * kG, true);
  ASSERT_NE(a, nullptr);
  std::mt19937_64 rng(3);
  struct Live {
    uint64_t* p;
    uint64_t words;
    uint64_t seed;
  };
  std::vector<Live> live;
  for (int i = 0; i < 200; ++i) {
    if (live.size() < 6 && (live.empty() || rng() % 2)) {
      uint64_t bytes = 8 * (1 + rng() % (3 * kG / 8));
      auto p = a->AllocateRaw(bytes);
      if (!p.ok()) continue;
      Live l{static_cast<uint64_t*>(*p), bytes / 8, rng()};
      for (uint64_t w = 0; w < l.words; w += 509) l.p[w] = l.seed ^ w;
      l.p[l.words - 1] = ~l.seed;
      live.push_back(l);
    } else {
      size_t k = rng() % live.size();
      const Live& l = live[k];
      for (uint64_t w = 0; w < l.words; w += 509) ASSERT_EQ(l.p[w], l.seed ^ w);
      ASSERT_EQ(l.p[l.words - 1], ~l.seed);
      ASSERT_THAT(a->Deallocate(l.p), IsOk());
      live[k] = live.back();
      live.pop_back();
    }
    ASSERT_THAT(a->CheckInvariants(), IsOk());
  }
  for (const Live& l : live) ASSERT_THAT(a->Deallocate(l.p), IsOk());
}

TEST_F(VmmHostTest, GrowthOffFailsCleanlyWhenTheDeviceIsTooSmall) {
  DeviceAllocatorOptions o;
  o.device_name = "GPU:0";
  o.memory_limit = 512 * kMiB;  // the device has 256 MiB
  o.allow_growth = false;
  EXPECT_THAT(CreateVmmAllocator(executor_, o).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("GPU:0")));
}

// ---- the shared allocator conformance suite ----

std::unique_ptr<Allocator> FakeVmm(uint64_t limit, bool growth,
                                   uint64_t va_base = FakeVmmExecutor::kDefaultVaBase,
                                   uint64_t slab_bytes = 0) {
  VmmOptions o = Opts(limit, growth);
  o.slab_bytes = slab_bytes;
  Fake f = MakeFake(o, /*capacity=*/0, va_base);
  // The suite takes a plain allocator: its device stays alive to the end of the program.
  static auto* devices = new std::vector<std::unique_ptr<FakeVmmExecutor>>();
  devices->push_back(std::move(f.backend));
  return std::move(f.alloc);
}

Executor* ConformanceExecutor() {
  static HostPlatform* platform = [] {
    auto p = HostPlatform::Create(HostPlatformOptions{{1024 * kMiB}});
    return p.ok() ? p->release() : nullptr;
  }();
  if (platform == nullptr) return nullptr;
  auto e = platform->GetExecutor(0);
  return e.ok() ? *e : nullptr;
}

std::unique_ptr<Allocator> HostVmm(uint64_t limit, bool growth) {
  return MakeVmmAllocator(ConformanceExecutor(), limit, growth);
}

// CheckFakeVmm for the suite's plain allocators: the fake device is the allocator's executor.
absl::Status CheckFakeVmmAllocator(const Allocator& a) {
  const auto* vmm = dynamic_cast<const VmmAllocator*>(&a);
  const auto* device = vmm != nullptr ? dynamic_cast<FakeVmmExecutor*>(vmm->executor()) : nullptr;
  if (device == nullptr) return absl::InternalError(a.name() + ": not a vmm allocator on a fake");
  return CheckFakeVmm(*vmm, *device);
}

struct VmmFakeGrowthOff {
  static constexpr bool kRealMemory = false;
  static std::unique_ptr<Allocator> Make(uint64_t limit) { return FakeVmm(limit, false); }
  static std::unique_ptr<Allocator> MakeOther(uint64_t limit) {
    return FakeVmm(limit, false, kOtherVaBase);
  }
  static absl::Status Check(const Allocator& a) { return CheckFakeVmmAllocator(a); }
};
struct VmmFakeGrowthOn {
  static constexpr bool kRealMemory = false;
  static std::unique_ptr<Allocator> Make(uint64_t limit) { return FakeVmm(limit, true); }
  static std::unique_ptr<Allocator> MakeOther(uint64_t limit) {
    return FakeVmm(limit, true, kOtherVaBase);
  }
  static absl::Status Check(const Allocator& a) { return CheckFakeVmmAllocator(a); }
};
// Slabs of four granules (the default from a 16 GiB limit), at the suite's small limits.
struct VmmFakeFourGranuleSlabs {
  static constexpr bool kRealMemory = false;
  static std::unique_ptr<Allocator> Make(uint64_t limit) {
    return FakeVmm(limit, true, FakeVmmExecutor::kDefaultVaBase, 4 * kG);
  }
  static std::unique_ptr<Allocator> MakeOther(uint64_t limit) {
    return FakeVmm(limit, true, kOtherVaBase, 4 * kG);
  }
  static absl::Status Check(const Allocator& a) { return CheckFakeVmmAllocator(a); }
};
struct VmmHostGrowthOff {
  static constexpr bool kRealMemory = true;
  static std::unique_ptr<Allocator> Make(uint64_t limit) { return HostVmm(limit, false); }
};
struct VmmHostGrowthOn {
  static constexpr bool kRealMemory = true;
  static std::unique_ptr<Allocator> Make(uint64_t limit) { return HostVmm(limit, true); }
};
using VmmTypes = ::testing::Types<VmmFakeGrowthOff, VmmFakeGrowthOn, VmmFakeFourGranuleSlabs,
                                  VmmHostGrowthOff, VmmHostGrowthOn>;

}  // namespace

namespace testing {
INSTANTIATE_TYPED_TEST_SUITE_P(Vmm, AllocatorConformance, ::vgpu::VmmTypes);
}  // namespace testing

}  // namespace vgpu

// A driver maps a physical allocation from its start only (cuMemMap's offset must be 0; a real
// card answers CUDA_ERROR_NOT_SUPPORTED otherwise), so every granule is its own allocation and
// its own mapping, and unmaps are whole mappings. The fake backend checks both.
namespace vgpu {
namespace {

TEST(VmmAllocatorRunsTest, EachGranuleIsItsOwnAllocationMappedFromItsStart) {
  Fake f = MakeFake(Opts(64 * kG, /*growth=*/false, /*cache=*/false));
  auto p = f.alloc->AllocateRaw(32 * kG);
  ASSERT_THAT(p.status(), IsOk());
  auto c = f.alloc->Granules();
  EXPECT_EQ(c.mapped, 32u);
  EXPECT_EQ(c.map_calls, 1u);  // one MapAll: 32 mappings, access set once
  EXPECT_EQ(f.backend->mapped_bytes(), 32 * kG);
  std::set<uint64_t> handles;
  for (uint64_t i = 0; i < 32; ++i) {
    auto at = At(f.backend.get(), *p, i);
    EXPECT_EQ(at.second, 0u) << "granule " << i << " mapped at an offset into its allocation";
    handles.insert(at.first);
  }
  EXPECT_EQ(handles.size(), 32u);
  ASSERT_THAT(f.alloc->Deallocate(*p), IsOk());
  c = f.alloc->Granules();
  EXPECT_EQ(c.unmap_calls, 1u);  // one Unmap over 32 whole mappings
  EXPECT_EQ(f.backend->mapped_bytes(), 0u);
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
}

TEST(VmmAllocatorRunsTest, CachedRangesShrinkAndGrowByWholeMappings) {
  Fake f = MakeFake(Opts(64 * kG, /*growth=*/false, /*cache=*/true));
  std::vector<void*> live;
  for (uint64_t n : {8, 3, 5, 12, 7}) {
    auto p = f.alloc->AllocateRaw(n * kG);
    ASSERT_THAT(p.status(), IsOk());
    live.push_back(*p);
  }
  for (size_t i = 0; i < live.size(); i += 2) ASSERT_THAT(f.alloc->Deallocate(live[i]), IsOk());
  for (uint64_t n : {6, 9, 2, 13}) {
    auto p = f.alloc->AllocateRaw(n * kG);
    ASSERT_THAT(p.status(), IsOk());
    live.push_back(*p);
    EXPECT_THAT(CheckFakeVmm(f), IsOk());
  }
  auto c = f.alloc->Granules();
  EXPECT_EQ(f.backend->mapped_bytes(), c.mapped * kG);
  for (size_t i = 1; i < live.size(); i += (i < 5 ? 2 : 1)) {  // the live ones
    for (uint64_t k = 0; k < 2; ++k) EXPECT_EQ(At(f.backend.get(), live[i], k).second, 0u);
  }
  ASSERT_THAT(f.alloc->Trim(), IsOk());
  for (size_t i = 1; i < live.size(); i += (i < 5 ? 2 : 1)) {
    ASSERT_THAT(f.alloc->Deallocate(live[i]), IsOk());
  }
  ASSERT_THAT(f.alloc->Trim(), IsOk());
  EXPECT_EQ(f.backend->mapped_bytes(), 0u);
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
}

}  // namespace
}  // namespace vgpu

// VmmOptions::page_bytes: the allocator's granule is a power-of-two multiple of the device's,
// and each page is one physical allocation and one mapping (fewer driver calls on a card).
namespace vgpu {
namespace {

TEST(VmmAllocatorPageTest, PagesAreWholeAllocationsOfSeveralDeviceGranules) {
  VmmOptions o = Opts(64 * kG, /*growth=*/true);
  o.page_bytes = 4 * kG;
  Fake f = MakeFake(o);
  ASSERT_EQ(f.alloc->granularity(), 4 * kG);
  auto p = f.alloc->AllocateRaw(8 * kG);  // two pages
  ASSERT_THAT(p.status(), IsOk());
  EXPECT_EQ(f.backend->mapped_bytes(), 8 * kG);
  auto first = At(f.backend.get(), *p, 0), second = At(f.backend.get(), *p, 4);
  EXPECT_EQ(first.second, 0u);
  EXPECT_EQ(second.second, 0u);
  EXPECT_NE(first.first, second.first);
  EXPECT_EQ(At(f.backend.get(), *p, 3), std::make_pair(first.first, 3 * kG));  // same page
  auto small = f.alloc->AllocateRaw(1000);  // from a slab of one page
  ASSERT_THAT(small.status(), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*small), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*p), IsOk());
  ASSERT_THAT(f.alloc->Trim(), IsOk());
  EXPECT_EQ(f.backend->mapped_bytes(), 0u);
  EXPECT_EQ(f.backend->physical_bytes(), 0u);
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
}

TEST(VmmAllocatorPageTest, BadPagesAreInvalidArgument) {
  FakeVmmExecutor backend(kG, 64 * kG);
  for (uint64_t page : {kG / 2, 3 * kG, (uint64_t{1} << 41)}) {
    VmmOptions o = Opts(64 * kG, true);
    o.page_bytes = page;
    EXPECT_THAT(VmmAllocator::Create(&backend, o).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("power-of-two multiple")))
        << page;
  }
}

}  // namespace
}  // namespace vgpu

// Under the limit's pressure the largest cached range gives up only the granules needed and
// stays cached (on a card an unmap costs per mapping; the rest serves its size again).
namespace vgpu {
namespace {

TEST(VmmAllocatorEvictionTest, PressureShrinksTheLargestCachedRangeInsteadOfUnmappingIt) {
  Fake f = MakeFake(Opts(32 * kG, /*growth=*/false, /*cache=*/true));
  auto big = f.alloc->AllocateRaw(24 * kG);
  ASSERT_THAT(big.status(), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*big), IsOk());  // cached, 24 granules
  auto c = f.alloc->Granules();
  ASSERT_EQ(c.cached, 24u);
  // 12 granules: 8 from the pool, 4 from the cached range, which keeps 20.
  auto p = f.alloc->AllocateRaw(12 * kG);
  ASSERT_THAT(p.status(), IsOk());
  c = f.alloc->Granules();
  EXPECT_EQ(c.cached, 20u);
  EXPECT_EQ(c.in_blocks, 12u);
  EXPECT_EQ(c.mapped, 32u);
  EXPECT_EQ(c.cache_evictions, 1u);
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
  ASSERT_THAT(f.alloc->Deallocate(*p), IsOk());
  // The shrunk range serves its old size again by mapping only what it lacks (4 granules).
  const uint64_t maps = f.alloc->Granules().map_calls;
  auto again = f.alloc->AllocateRaw(24 * kG);
  ASSERT_THAT(again.status(), IsOk());
  EXPECT_EQ(f.alloc->Granules().map_calls, maps + 1);
  ASSERT_THAT(f.alloc->Deallocate(*again), IsOk());
  EXPECT_THAT(CheckFakeVmm(f), IsOk());
}

}  // namespace
}  // namespace vgpu
