// BFCAllocator's page gathering without growth (BFCOptions::gather_pages) over
// PagedDeviceSubAllocator: exact placement on the tests' checked fake VMM device (which pages
// move where, what stays mapped, nothing lost), the same request refused without it, a clear OOM
// when the free pages are not enough, the cache of gathered segments, real memory on the host
// platform (the pages really move: data written through the gathered range is found back in
// place), a randomized run with every invariant checked, and PagedDeviceSubAllocator's own errors.
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/allocator/bfc_allocator.h"
#include "vgpu/allocator/factory.h"
#include "vgpu/allocator/sub_allocators.h"
#include "vgpu/runtime/platform.h"
#include "vgpu/runtime/status_matchers.h"
#include "vgpu/tests/fake_vmm_executor.h"

namespace vgpu {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::vgpu::testing::FakeVmmExecutor;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;

constexpr uint64_t kP = 4096;  // the fake device's page

uint64_t U(const void* p) { return reinterpret_cast<uint64_t>(p); }

std::unique_ptr<BFCAllocator> Make(Executor* executor, uint64_t limit, bool gather = true) {
  absl::StatusOr<std::unique_ptr<BFCAllocator>> a =
      ::vgpu::testing::CreatePagedBfc(executor, limit, gather);
  EXPECT_THAT(a.status(), IsOk());
  return a.ok() ? *std::move(a) : nullptr;
}

void* Alloc(BFCAllocator& a, uint64_t bytes) {
  absl::StatusOr<void*> p = a.AllocateRaw(bytes, 256);
  EXPECT_THAT(p, IsOk()) << bytes;
  EXPECT_THAT(a.CheckInvariants(), IsOk());
  return p.ok() ? *p : nullptr;
}

void Free(BFCAllocator& a, void* p) {
  EXPECT_THAT(a.Deallocate(p), IsOk());
  EXPECT_THAT(a.CheckInvariants(), IsOk());
}

// Four blocks of two pages fill the limit; freeing the 1st and 3rd leaves two holes of two pages,
// which no 3-page request fits.
struct Holes {
  void* a;
  void* b;
  void* c;
  void* d;
};
Holes MakeHoles(BFCAllocator& bfc) {
  Holes h{Alloc(bfc, 2 * kP), Alloc(bfc, 2 * kP), Alloc(bfc, 2 * kP), Alloc(bfc, 2 * kP)};
  Free(bfc, h.a);
  Free(bfc, h.c);
  return h;
}

TEST(BfcGatherTest, FreePagesBetweenLiveBlocksServeARequestNoHoleFits) {
  FakeVmmExecutor exec(kP);
  std::unique_ptr<BFCAllocator> bfc = Make(&exec, 8 * kP);
  ASSERT_NE(bfc, nullptr);
  Holes h = MakeHoles(*bfc);
  const uint64_t base = U(h.a);
  ASSERT_EQ(U(h.c), base + 4 * kP);
  absl::StatusOr<std::pair<uint64_t, uint64_t>> first_page = exec.Translate(h.a);
  ASSERT_THAT(first_page.status(), IsOk());

  void* g = Alloc(*bfc, 3 * kP);
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(U(g) < base || U(g) >= base + 8 * kP) << "a range of its own";
  // Three pages moved: the first hole's two, then the low page of the second.
  absl::StatusOr<std::pair<uint64_t, uint64_t>> moved = exec.Translate(g);
  ASSERT_THAT(moved.status(), IsOk());
  EXPECT_EQ(*moved, *first_page) << "the hole's first page is now the block's";
  EXPECT_THAT(exec.Translate(h.a).status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(exec.Translate(reinterpret_cast<void*>(base + 4 * kP)).status(),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(exec.Translate(reinterpret_cast<void*>(base + 5 * kP)).status(), IsOk());
  EXPECT_EQ(exec.mapped_bytes(), 8 * kP) << "pages moved, none added";
  EXPECT_EQ(exec.physical_bytes(), 8 * kP);
  AllocatorStats s = bfc->Stats();
  EXPECT_EQ(s.bytes_reserved, 8 * kP);
  EXPECT_EQ(s.bytes_in_use, 7 * kP);

  // The one page left is still a hole of its own.
  void* one = Alloc(*bfc, kP);
  EXPECT_EQ(U(one), base + 5 * kP);
  Free(*bfc, one);

  // Freed, the gathered segment is cached and serves a request of its size again.
  Free(*bfc, g);
  EXPECT_EQ(bfc->Stats().bytes_in_use, 4 * kP);
  void* again = Alloc(*bfc, 3 * kP);
  EXPECT_EQ(again, g);
  Free(*bfc, again);

  // ReleaseCachedMemory puts the pages back where they were; the holes are whole again.
  ASSERT_THAT(bfc->ReleaseCachedMemory().status(), IsOk());
  ASSERT_THAT(bfc->CheckInvariants(), IsOk());
  absl::StatusOr<std::pair<uint64_t, uint64_t>> back = exec.Translate(h.a);
  ASSERT_THAT(back.status(), IsOk());
  EXPECT_EQ(*back, *first_page);
  EXPECT_EQ(exec.reserved_ranges(), 1u);
  // Both holes are two whole pages again (which comes first is the bins' order).
  const uint64_t x = U(Alloc(*bfc, 2 * kP)), y = U(Alloc(*bfc, 2 * kP));
  EXPECT_EQ(std::min(x, y), base);
  EXPECT_EQ(std::max(x, y), base + 4 * kP);

  bfc.reset();
  EXPECT_EQ(exec.mapped_bytes(), 0u);
  EXPECT_EQ(exec.physical_bytes(), 0u);
  EXPECT_EQ(exec.reserved_ranges(), 0u);
}

TEST(BfcGatherTest, WithoutGatheringTheSameRequestIsAnOom) {
  FakeVmmExecutor exec(kP);
  std::unique_ptr<BFCAllocator> bfc = Make(&exec, 8 * kP, /*gather=*/false);
  ASSERT_NE(bfc, nullptr);
  MakeHoles(*bfc);
  EXPECT_THAT(bfc->AllocateRaw(3 * kP, 256).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("fragmented")));
  EXPECT_THAT(bfc->CheckInvariants(), IsOk());
}

TEST(BfcGatherTest, CachedGatheredSegmentsGoBackBeforeARequestFails) {
  FakeVmmExecutor exec(kP);
  std::unique_ptr<BFCAllocator> bfc = Make(&exec, 8 * kP);
  ASSERT_NE(bfc, nullptr);
  Holes h = MakeHoles(*bfc);
  Free(*bfc, Alloc(*bfc, 3 * kP));  // gathered, then cached
  Free(*bfc, h.b);
  Free(*bfc, h.d);
  // The whole limit: only when the cached segment's pages are back in place.
  void* all = Alloc(*bfc, 8 * kP);
  EXPECT_EQ(all, h.a);
  EXPECT_EQ(exec.mapped_bytes(), 8 * kP);
  EXPECT_EQ(exec.reserved_ranges(), 1u);
}

TEST(BfcGatherTest, TooFewWholeFreePagesIsAClearOomAndChangesNothing) {
  FakeVmmExecutor exec(kP);
  std::unique_ptr<BFCAllocator> bfc = Make(&exec, 8 * kP);
  ASSERT_NE(bfc, nullptr);
  std::vector<void*> half;
  for (int i = 0; i < 16; ++i) half.push_back(Alloc(*bfc, kP / 2));
  for (int i = 0; i < 16; i += 2) Free(*bfc, half[i]);
  // Half the pool is free, but in half pages: nothing whole to gather.
  absl::Status oom = bfc->AllocateRaw(kP, 256).status();
  EXPECT_THAT(oom, StatusIs(absl::StatusCode::kResourceExhausted,
                            AllOf(HasSubstr("whole"), HasSubstr("pages to gather"))));
  EXPECT_THAT(bfc->CheckInvariants(), IsOk());
  EXPECT_EQ(exec.mapped_bytes(), 8 * kP);
  for (int i = 1; i < 16; i += 2) Free(*bfc, half[i]);
  EXPECT_EQ(U(Alloc(*bfc, 8 * kP)), U(half[0]));
}

TEST(BfcGatherTest, PagesReallyMoveOnTheHostPlatform) {
  absl::StatusOr<Platform*> platform = GetPlatform("host");
  ASSERT_THAT(platform.status(), IsOk());
  absl::StatusOr<Executor*> exec = (*platform)->GetExecutor(0);
  ASSERT_THAT(exec.status(), IsOk());
  absl::StatusOr<uint64_t> g = (*exec)->VirtualMemoryGranularity();
  ASSERT_THAT(g.status(), IsOk());
  const uint64_t page = *g;
  std::unique_ptr<BFCAllocator> bfc = Make(*exec, 8 * page);
  ASSERT_NE(bfc, nullptr);
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) {
    blocks.push_back(Alloc(*bfc, 2 * page));
    std::memset(blocks.back(), 0x10 + i, 2 * page);
  }
  Free(*bfc, blocks[0]);
  Free(*bfc, blocks[2]);
  auto* gathered = static_cast<unsigned char*>(Alloc(*bfc, 3 * page));
  ASSERT_NE(gathered, nullptr);
  std::memset(gathered, 0xAB, 3 * page);  // every page is writable memory
  // The live blocks are untouched.
  for (int i : {1, 3}) {
    const auto* p = static_cast<const unsigned char*>(blocks[i]);
    EXPECT_EQ(p[0], 0x10 + i);
    EXPECT_EQ(p[2 * page - 1], 0x10 + i);
  }
  Free(*bfc, gathered);
  ASSERT_THAT(bfc->ReleaseCachedMemory().status(), IsOk());
  // Back in place: the first hole's pages hold what was written through the gathered range.
  auto* again = static_cast<unsigned char*>(Alloc(*bfc, 2 * page));
  ASSERT_EQ(again, blocks[0]);
  EXPECT_EQ(again[0], 0xAB);
  EXPECT_EQ(again[2 * page - 1], 0xAB);
  Free(*bfc, again);
  Free(*bfc, blocks[1]);
  Free(*bfc, blocks[3]);
}

TEST(BfcGatherTest, RandomOperationsKeepEveryInvariantAndNoBlocksOverlap) {
  FakeVmmExecutor exec(kP);
  std::unique_ptr<BFCAllocator> bfc = Make(&exec, 64 * kP);
  ASSERT_NE(bfc, nullptr);
  std::mt19937_64 rng(7);
  std::map<uint64_t, uint64_t> live;  // ptr -> bytes
  int gathered_ok = 0;
  for (int step = 0; step < 4000; ++step) {
    if (!live.empty() && (rng() % 100 < 45 || live.size() > 40)) {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      ASSERT_THAT(bfc->Deallocate(reinterpret_cast<void*>(it->first)), IsOk());
      live.erase(it);
    } else {
      const uint64_t bytes = 256 + rng() % (8 * kP);
      absl::StatusOr<void*> p = bfc->AllocateRaw(bytes, 256);
      if (p.ok()) {
        const uint64_t at = U(*p);
        auto next = live.lower_bound(at);
        if (next != live.end()) ASSERT_LE(at + bytes, next->first) << "overlaps the next block";
        if (next != live.begin()) {
          auto prev = std::prev(next);
          ASSERT_LE(prev->first + prev->second, at) << "overlaps the previous block";
        }
        live[at] = bytes;
        if (at >= FakeVmmExecutor::kDefaultVaBase + 64 * kP) ++gathered_ok;
      } else {
        ASSERT_THAT(p.status(), StatusIs(absl::StatusCode::kResourceExhausted));
      }
    }
    ASSERT_THAT(bfc->CheckInvariants(), IsOk()) << "step " << step;
    ASSERT_EQ(exec.mapped_bytes(), 64 * kP) << "step " << step;
  }
  EXPECT_GT(gathered_ok, 0) << "the run never gathered: it tests nothing here";
  for (const auto& [p, bytes] : live) {
    ASSERT_THAT(bfc->Deallocate(reinterpret_cast<void*>(p)), IsOk());
  }
  ASSERT_THAT(bfc->CheckInvariants(), IsOk());
  bfc.reset();
  EXPECT_EQ(exec.physical_bytes(), 0u);
  EXPECT_EQ(exec.reserved_ranges(), 0u);
}

TEST(PagedDeviceSubAllocatorTest, RegionsAreWholePagesAndBadCallsAreRefused) {
  FakeVmmExecutor exec(kP);
  absl::StatusOr<std::unique_ptr<PagedDeviceSubAllocator>> sub =
      PagedDeviceSubAllocator::Create(&exec);
  ASSERT_THAT(sub.status(), IsOk());
  EXPECT_EQ((*sub)->page_bytes(), kP);
  absl::StatusOr<void*> r = (*sub)->Alloc(3 * kP + 1, 256);
  ASSERT_THAT(r.status(), IsOk());
  EXPECT_EQ(exec.physical_bytes(), 4 * kP) << "rounded up to whole pages";
  EXPECT_THAT((*sub)->GatherPages(*r, {{kP / 2, kP}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not whole pages")));
  EXPECT_THAT((*sub)->GatherPages(*r, {{3 * kP, 2 * kP}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  int x = 0;
  EXPECT_THAT((*sub)->GatherPages(&x, {{0, kP}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a region")));
  absl::StatusOr<void*> range = (*sub)->GatherPages(*r, {{0, kP}, {2 * kP, kP}});
  ASSERT_THAT(range.status(), IsOk());
  EXPECT_EQ(exec.mapped_bytes(), 4 * kP);
  EXPECT_THAT((*sub)->ReturnPages(*range, *r, {{0, kP}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cover")));
  EXPECT_THAT((*sub)->ReturnPages(*range, *r, {{0, kP}, {2 * kP, kP}}), IsOk());
  EXPECT_THAT((*sub)->Free(&x, kP), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT((*sub)->Free(*r, 3 * kP + 1), IsOk());
  EXPECT_EQ(exec.physical_bytes(), 0u);
  EXPECT_EQ(exec.reserved_ranges(), 0u);
}

TEST(PagedDeviceSubAllocatorTest, NeedsADeviceWithVirtualMemoryCalls) {
  bench::FakeAddressExecutor no_vmm(/*granularity=*/0);
  EXPECT_THAT(PagedDeviceSubAllocator::Create(&no_vmm).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("virtual memory")));
}

TEST(PagedDeviceSubAllocatorTest, AFullDeviceRefusesTheRegionAndKeepsNothing) {
  FakeVmmExecutor exec(kP, /*physical_capacity=*/4 * kP);
  absl::StatusOr<std::unique_ptr<PagedDeviceSubAllocator>> sub =
      PagedDeviceSubAllocator::Create(&exec);
  ASSERT_THAT(sub.status(), IsOk());
  EXPECT_THAT((*sub)->Alloc(6 * kP, 256).status(), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(exec.physical_bytes(), 0u);
  EXPECT_EQ(exec.reserved_ranges(), 0u);
}

// The factory's choice: pages without growth where the device has VMM calls (the host platform
// does), one region otherwise; VGPU's knob turns it off.
TEST(BfcGatherTest, FactoryTakesPagesWithoutGrowthOnADeviceWithVmm) {
  FakeVmmExecutor exec(kP);
  DeviceAllocatorOptions o;
  o.kind = AllocatorKind::kBfc;
  o.device_name = "GPU:0";
  o.memory_limit = 8 * kP;
  absl::StatusOr<std::unique_ptr<Allocator>> a = CreateDeviceAllocator(&exec, o);
  ASSERT_THAT(a.status(), IsOk());
  auto* bfc = dynamic_cast<BFCAllocator*>(a->get());
  ASSERT_NE(bfc, nullptr);
  EXPECT_TRUE(bfc->options().gather_pages);
  EXPECT_EQ(bfc->sub_allocator()->page_bytes(), kP);
  a->reset();
  o.bfc_gather_pages = false;
  a = CreateDeviceAllocator(&exec, o);
  ASSERT_THAT(a.status(), IsOk());
  bfc = dynamic_cast<BFCAllocator*>(a->get());
  ASSERT_NE(bfc, nullptr);
  EXPECT_FALSE(bfc->options().gather_pages);
  EXPECT_EQ(bfc->sub_allocator()->page_bytes(), 0u);
  a->reset();
  o.bfc_gather_pages.reset();
  o.allow_growth = true;
  a = CreateDeviceAllocator(&exec, o);
  ASSERT_THAT(a.status(), IsOk());
  bfc = dynamic_cast<BFCAllocator*>(a->get());
  ASSERT_NE(bfc, nullptr);
  EXPECT_FALSE(bfc->options().gather_pages) << "growth has segments of its own";
}

}  // namespace
}  // namespace vgpu
