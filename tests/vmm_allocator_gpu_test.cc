// The vmm allocator on real device memory (label gpu; every test skips when
// GetPlatform("cuda") has no device): stitched blocks hold data, granules go back to the card,
// the mapping cache reuses ranges, and an edge view holds data.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/allocator/vmm_allocator.h"
#include "vgpu/runtime/platform.h"
#include "vgpu/runtime/status_matchers.h"
#include "vgpu/tests/vmm_test_util.h"

namespace vgpu {
namespace {

using ::vgpu::testing::FreeStitchedBlock;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::MakeVmmAllocator;
using ::vgpu::testing::StatusIs;
using ::vgpu::testing::StitchedBlock;
using ::vgpu::testing::StitchScatteredGranules;

class VmmGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    executor_ = ::vgpu::testing::FirstCudaExecutor(&why);
    if (executor_ == nullptr) GTEST_SKIP() << why;
    auto g = executor_->VirtualMemoryGranularity();
    if (!g.ok()) GTEST_SKIP() << g.status();
    granule_ = *g;
  }
  std::unique_ptr<Allocator> Make(uint64_t limit, bool growth) {
    return MakeVmmAllocator(executor_, limit, growth);
  }
  Executor* executor_ = nullptr;
  uint64_t granule_ = 0;
};

TEST_F(VmmGpuTest, StitchedBlockHoldsData) {
  for (bool growth : {false, true}) {
    std::unique_ptr<Allocator> a = Make(16 * granule_, growth);
    ASSERT_NE(a, nullptr);
    auto* vmm = static_cast<VmmAllocator*>(a.get());
    StitchedBlock stitched;
    ASSERT_NO_FATAL_FAILURE(StitchScatteredGranules(vmm, granule_, &stitched));
    auto stream = executor_->CreateStream({});
    ASSERT_THAT(stream.status(), IsOk());
    const uint64_t words = 8 * granule_ / 4;
    std::vector<uint32_t> host(words), back(words, 0);
    for (uint64_t i = 0; i < words; ++i) host[i] = static_cast<uint32_t>(i * 2654435761u);
    ASSERT_THAT((*stream)->MemcpyH2D(stitched.big, host.data(), 8 * granule_), IsOk());
    ASSERT_THAT((*stream)->Memset32(stitched.blocks[0], 0xdeadbeef, granule_ / 4), IsOk());
    ASSERT_THAT((*stream)->MemcpyD2H(back.data(), stitched.big, 8 * granule_), IsOk());
    ASSERT_THAT((*stream)->Synchronize(), IsOk());
    EXPECT_EQ(host, back);
    ASSERT_NO_FATAL_FAILURE(FreeStitchedBlock(vmm, stitched));
  }
}

TEST_F(VmmGpuTest, GrowthGivesMemoryBackToTheCard) {
  std::unique_ptr<Allocator> a = Make(256 * granule_, true);
  ASSERT_NE(a, nullptr);
  auto before = executor_->Describe();
  ASSERT_THAT(before.status(), IsOk());
  auto p = a->AllocateRaw(128 * granule_);
  ASSERT_THAT(p.status(), IsOk());
  auto during = executor_->Describe();
  ASSERT_THAT(during.status(), IsOk());
  EXPECT_LE(during->free_bytes + 100 * granule_, before->free_bytes);
  ASSERT_THAT(a->Deallocate(*p), IsOk());
  ASSERT_THAT(static_cast<VmmAllocator*>(a.get())->Trim(), IsOk());
  auto after = executor_->Describe();
  ASSERT_THAT(after.status(), IsOk());
  EXPECT_GE(after->free_bytes + 16 * granule_, before->free_bytes);
  EXPECT_EQ(a->Stats().bytes_reserved, 0u);
}

TEST_F(VmmGpuTest, HotSizeIsNotRemapped) {
  std::unique_ptr<Allocator> a = Make(64 * granule_, false);
  ASSERT_NE(a, nullptr);
  for (int step = 0; step < 20; ++step) {
    auto p = a->AllocateRaw(5 * granule_ - 1000);
    ASSERT_THAT(p.status(), IsOk());
    ASSERT_THAT(a->Deallocate(*p), IsOk());
  }
  EXPECT_EQ(a->Stats().regions_mapped, 5u);
}

// An edge view on the card: two slabs full at the limit, the end of one and the start of the
// other freed; a block larger than either hole is mapped across them, and what is copied into it
// is read back at the slabs' own addresses (the same physical bytes, mapped twice).
TEST_F(VmmGpuTest, EdgeViewHoldsData) {
  std::unique_ptr<Allocator> a = Make(2 * granule_, /*growth=*/false);
  ASSERT_NE(a, nullptr);
  auto part = [&](uint64_t kib) { return ::vgpu::testing::EdgeHolePart(granule_, kib); };
  std::vector<char*> blocks;
  ASSERT_NO_FATAL_FAILURE(::vgpu::testing::MakeEdgeHoles(a.get(), granule_, &blocks));
  char* a3 = blocks[2];
  char* b1 = blocks[3];
  const uint64_t bytes = part(1000);
  auto v = a->AllocateRaw(bytes);
  ASSERT_THAT(v.status(), IsOk());
  EXPECT_EQ(static_cast<VmmAllocator*>(a.get())->Granules().edge_views, 1u);
  auto stream = executor_->CreateStream({});
  ASSERT_THAT(stream.status(), IsOk());
  std::vector<uint32_t> host(bytes / 4), low(part(648) / 4, 0), high(part(352) / 4, 0);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint32_t>(i * 2654435761u);
  ASSERT_THAT((*stream)->MemcpyH2D(*v, host.data(), bytes), IsOk());
  ASSERT_THAT((*stream)->MemcpyD2H(low.data(), a3, part(648)), IsOk());
  ASSERT_THAT((*stream)->MemcpyD2H(high.data(), b1, part(352)), IsOk());
  ASSERT_THAT((*stream)->Synchronize(), IsOk());
  EXPECT_TRUE(std::equal(low.begin(), low.end(), host.begin()));
  EXPECT_TRUE(std::equal(high.begin(), high.end(), host.begin() + low.size()));
  ASSERT_THAT(a->Deallocate(*v), IsOk());
  for (int i : {0, 1, 4, 5}) ASSERT_THAT(a->Deallocate(blocks[i]), IsOk());
  ASSERT_THAT(static_cast<VmmAllocator*>(a.get())->Trim(), IsOk());
  EXPECT_EQ(static_cast<VmmAllocator*>(a.get())->Granules().edge_views, 0u);
  EXPECT_THAT(a->CheckInvariants(), IsOk());
}

}  // namespace
}  // namespace vgpu
