// The async allocator on a real device's stream-ordered pool (label gpu; every test skips when
// GetPlatform("cuda") has no device or its driver has no memory pools): blocks hold data in
// stream order, our limit holds over the driver's pool, freed memory is reused from the cache,
// and trimming gives it back to the card.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/allocator/async_allocator.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/platform.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu {
namespace {

using ::testing::HasSubstr;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;

class AsyncGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    executor_ = ::vgpu::testing::FirstCudaExecutor(&why);
    if (executor_ == nullptr) GTEST_SKIP() << why;
    auto pool = executor_->CreateMemoryPool(MemoryPoolOptions{});
    if (!pool.ok()) GTEST_SKIP() << pool.status();
    auto s = executor_->CreateStream(StreamOptions{});
    ASSERT_THAT(s, IsOk());
    stream_ = *std::move(s);
    AsyncOptions o;
    o.name = "/job:localhost/replica:0/task:0/device:GPU:0 (physical GPU 0)";
    o.memory_limit = 256 * kMiB;
    auto a = AsyncAllocator::Create(executor_, stream_.get(), o);
    ASSERT_THAT(a, IsOk());
    allocator_ = *std::move(a);
  }
  void TearDown() override {
    allocator_.reset();
    stream_.reset();
  }
  Executor* executor_ = nullptr;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<AsyncAllocator> allocator_;
};

TEST_F(AsyncGpuTest, BlocksHoldDataInStreamOrder) {
  const uint64_t words = 4 * kMiB / 4;
  std::vector<uint32_t> host(words), back(words, 0);
  for (uint64_t i = 0; i < words; ++i) host[i] = static_cast<uint32_t>(i * 2654435761u);
  auto a = allocator_->AllocateRaw(4 * kMiB);
  auto b = allocator_->AllocateRaw(4 * kMiB, 1 << 20);
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*b) % (1 << 20), 0u);
  ASSERT_THAT(stream_->MemcpyH2D(*a, host.data(), 4 * kMiB), IsOk());
  ASSERT_THAT(stream_->MemcpyD2D(*b, *a, 4 * kMiB), IsOk());
  ASSERT_THAT(allocator_->Deallocate(*a), IsOk());  // after the copy, in stream order
  auto c = allocator_->AllocateRaw(4 * kMiB);       // may reuse a's memory, in order
  ASSERT_THAT(c, IsOk());
  ASSERT_THAT(stream_->Memset32(*c, 0, words), IsOk());
  ASSERT_THAT(stream_->MemcpyD2H(back.data(), *b, 4 * kMiB), IsOk());
  ASSERT_THAT(stream_->Synchronize(), IsOk());
  EXPECT_EQ(back, host);
  ASSERT_THAT(allocator_->Deallocate(*b), IsOk());
  ASSERT_THAT(allocator_->Deallocate(*c), IsOk());
  EXPECT_THAT(allocator_->CheckInvariants(), IsOk());
}

TEST_F(AsyncGpuTest, LimitHoldsCacheIsReusedAndTrimGivesBack) {
  std::vector<void*> blocks;
  while (true) {
    auto p = allocator_->AllocateRaw(16 * kMiB);
    if (!p.ok()) {
      EXPECT_THAT(p.status(), StatusIs(absl::StatusCode::kResourceExhausted,
                                       HasSubstr("it would pass the limit")));
      break;
    }
    blocks.push_back(*p);
  }
  EXPECT_EQ(blocks.size(), 16u);
  AllocatorStats s = allocator_->Stats();
  EXPECT_EQ(s.bytes_in_use, 256 * kMiB);
  EXPECT_GE(s.bytes_reserved, 256 * kMiB);
  for (void* p : blocks) ASSERT_THAT(allocator_->Deallocate(p), IsOk());
  ASSERT_THAT(stream_->Synchronize(), IsOk());
  const uint64_t free_cached = executor_->Describe()->free_bytes;
  auto again = allocator_->AllocateRaw(16 * kMiB);  // from the cache: the card gives nothing
  ASSERT_THAT(again, IsOk());
  EXPECT_GE(executor_->Describe()->free_bytes + 2 * kMiB, free_cached);
  ASSERT_THAT(allocator_->Deallocate(*again), IsOk());
  ASSERT_THAT(allocator_->Trim(), IsOk());
  EXPECT_LT(allocator_->Stats().bytes_reserved, 256 * kMiB);
  EXPECT_GT(executor_->Describe()->free_bytes, free_cached);
}

}  // namespace
}  // namespace vgpu
