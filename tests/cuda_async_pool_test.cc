// The cuda platform's stream-ordered memory pools and the async allocator over them, on the
// CUDA simulator (tests/cudasim/), so the cuMemPool* calls, their error mapping and the
// allocator's trim-and-retry run on machines without a GPU (labels unit, cudasim).
#include <dlfcn.h>

#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "vgpu/allocator/async_allocator.h"
#include "vgpu/allocator/factory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/platform.h"
#include "vgpu/runtime/status_matchers.h"

#if VGPU_HAVE_CUDA
#include "vgpu/runtime/cuda/cuda_platform.h"
#endif

namespace vgpu {
namespace {

using ::testing::HasSubstr;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;

#if VGPU_HAVE_CUDA

constexpr uint64_t kMiB = uint64_t{1} << 20;

class CudaAsyncPoolTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    setenv("VGPU_CUDA_DRIVER_LIBRARY", VGPU_CUDASIM_LIBCUDA, 1);
    setenv("VGPU_CUDASIM_DEVICES", "2", 1);
    setenv("VGPU_CUDASIM_BYTES", "268435456", 1);  // 256 MiB
    platform_ = CreateCudaPlatform().release();
    unsetenv("VGPU_CUDA_DRIVER_LIBRARY");
  }
  static void TearDownTestSuite() {
    delete platform_;
    platform_ = nullptr;
  }
  void SetUp() override {
    ASSERT_EQ(platform_->DeviceCount(), 2) << platform_->Summary();
    exec_ = *platform_->GetExecutor(0);
    auto s = exec_->CreateStream(StreamOptions{});
    ASSERT_THAT(s, IsOk());
    stream_ = *std::move(s);
  }
  uint64_t FreeBytes() { return exec_->Describe()->free_bytes; }
  // {pools alive, bytes they reserve} from the simulator.
  static std::pair<int, uint64_t> PoolCounters() {
    void* h = dlopen(VGPU_CUDASIM_LIBCUDA, RTLD_NOW | RTLD_NOLOAD);
    EXPECT_NE(h, nullptr);
    auto fn =
        reinterpret_cast<unsigned long long (*)(const char*)>(dlsym(h, "vgpu_cudasim_counter"));
    EXPECT_NE(fn, nullptr);
    std::pair<int, uint64_t> c{0, 0};
    if (fn != nullptr) c = {int(fn("pools_alive")), fn("pool_reserved_bytes")};
    dlclose(h);
    return c;
  }
  std::unique_ptr<Allocator> MakeAsync(uint64_t limit) {
    DeviceAllocatorOptions o;
    o.kind = AllocatorKind::kAsync;
    o.device_name = "/job:localhost/replica:0/task:0/device:GPU:0 (physical GPU 0)";
    o.memory_limit = limit;
    o.stream = stream_.get();
    auto a = CreateDeviceAllocator(exec_, o);
    EXPECT_THAT(a, IsOk());
    return a.ok() ? *std::move(a) : nullptr;
  }

  static Platform* platform_;
  Executor* exec_ = nullptr;
  std::unique_ptr<Stream> stream_;
};
Platform* CudaAsyncPoolTest::platform_ = nullptr;

TEST_F(CudaAsyncPoolTest, PoolAllocatesCachesReusesAndTrims) {
  const uint64_t free_before = FreeBytes();
  auto pool = exec_->CreateMemoryPool(MemoryPoolOptions{});
  ASSERT_THAT(pool, IsOk());
  EXPECT_EQ(PoolCounters().first, 1);
  MemoryPool& p = **pool;
  auto a = p.AllocateAsync(kMiB, stream_.get());
  ASSERT_THAT(a, IsOk());
  EXPECT_EQ(FreeBytes(), free_before - kMiB);
  std::vector<uint32_t> in(256, 7), out(256, 0);
  ASSERT_THAT(stream_->MemcpyH2D(*a, in.data(), 1024), IsOk());
  ASSERT_THAT(stream_->MemcpyD2H(out.data(), *a, 1024), IsOk());
  ASSERT_THAT(stream_->Synchronize(), IsOk());
  EXPECT_EQ(out, in);
  EXPECT_EQ(p.Stats()->reserved_bytes, kMiB);
  EXPECT_EQ(p.Stats()->used_bytes, kMiB);

  ASSERT_THAT(p.FreeAsync(*a, stream_.get()), IsOk());
  EXPECT_EQ(p.Stats()->used_bytes, 0u);
  EXPECT_EQ(p.Stats()->reserved_bytes, kMiB);  // cached, still the device's
  EXPECT_EQ(FreeBytes(), free_before - kMiB);
  auto b = p.AllocateAsync(kMiB - 1000, stream_.get());
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(*b, *a);  // reused from the cache

  // Bad frees change nothing.
  int local = 0;
  EXPECT_THAT(p.FreeAsync(&local, stream_.get()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a live allocation")));
  auto other_stream = (*platform_->GetExecutor(1))->CreateStream(StreamOptions{});
  ASSERT_THAT(other_stream, IsOk());
  EXPECT_THAT(p.FreeAsync(*b, other_stream->get()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("does not belong")));
  EXPECT_THAT(p.AllocateAsync(kMiB, nullptr), StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_THAT(p.FreeAsync(*b, stream_.get()), IsOk());
  EXPECT_THAT(p.FreeAsync(*b, stream_.get()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("double free")));

  // A trim releases only blocks whose stream-ordered free has run.
  ASSERT_THAT(stream_->Synchronize(), IsOk());
  ASSERT_THAT(p.TrimTo(0), IsOk());
  EXPECT_EQ(p.Stats()->reserved_bytes, 0u);
  EXPECT_EQ(FreeBytes(), free_before);
  EXPECT_THAT(
      p.AllocateAsync(uint64_t{1} << 30, stream_.get()),
      StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("CUDA_ERROR_OUT_OF_MEMORY")));
  pool->reset();
  EXPECT_EQ(PoolCounters().first, 0);
}

TEST_F(CudaAsyncPoolTest, AllocatorEnforcesItsLimitOverThePool) {
  auto a = MakeAsync(64 * kMiB);
  ASSERT_NE(a, nullptr);
  std::vector<void*> ptrs;
  for (int i = 0; i < 64; ++i) {
    auto p = a->AllocateRaw(kMiB);
    ASSERT_THAT(p, IsOk()) << i;
    ptrs.push_back(*p);
  }
  EXPECT_THAT(a->AllocateRaw(1),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("device:GPU:0 (physical GPU 0): out of memory allocating 1 B "
                                 "(1 bytes, rounded to 256): it would pass the limit")));
  EXPECT_EQ(a->Stats().bytes_in_use, 64 * kMiB);
  EXPECT_EQ(a->Stats().bytes_reserved, 64 * kMiB);
  for (void* p : ptrs) ASSERT_THAT(a->Deallocate(p), IsOk());
  EXPECT_THAT(a->Deallocate(ptrs[0]), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(a->Stats().bytes_in_use, 0u);
  EXPECT_THAT(a->CheckInvariants(), IsOk());
  a.reset();
  EXPECT_EQ(PoolCounters(), std::make_pair(0, uint64_t{0}));
}

TEST_F(CudaAsyncPoolTest, DeviceOomTrimsThePoolAndRetriesOnce) {
  const uint64_t free_before = FreeBytes();
  auto a = MakeAsync(200 * kMiB);
  ASSERT_NE(a, nullptr);
  std::vector<void*> ptrs;
  for (int i = 0; i < 4; ++i) ptrs.push_back(*a->AllocateRaw(40 * kMiB));
  for (void* p : ptrs) ASSERT_THAT(a->Deallocate(p), IsOk());
  EXPECT_EQ(a->Stats().bytes_reserved, 160 * kMiB);  // cached in the pool
  // Someone else takes most of the rest of the card.
  auto raw = exec_->Allocate(free_before - 180 * kMiB);
  ASSERT_THAT(raw, IsOk());
  // 100 MiB fits no cached block and not the card: trimmed, then it fits.
  auto big = a->AllocateRaw(100 * kMiB);
  ASSERT_THAT(big, IsOk());
  AllocatorStats s = a->Stats();
  EXPECT_EQ(s.bytes_reserved, 100 * kMiB);
  EXPECT_GE(s.regions_unmapped, 1u);
  EXPECT_EQ(s.num_ooms, 0u);
  // Now the card itself is short: a clean OOM naming the driver's error, within our limit.
  EXPECT_THAT(a->AllocateRaw(90 * kMiB),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       ::testing::AllOf(HasSubstr("out of memory even after trimming the pool"),
                                        HasSubstr("CUDA_ERROR_OUT_OF_MEMORY"),
                                        HasSubstr("limit 200 MiB, in use 100 MiB"),
                                        HasSubstr("Hint: other logical devices"))));
  EXPECT_EQ(a->Stats().num_ooms, 1u);
  ASSERT_THAT(a->Deallocate(*big), IsOk());
  ASSERT_THAT(exec_->Free(*raw), IsOk());
}

TEST_F(CudaAsyncPoolTest, DriverWithoutPoolsIsUnimplemented) {
  setenv("VGPU_CUDA_DRIVER_LIBRARY", VGPU_CUDASIM_LIBCUDA, 1);
  setenv("VGPU_CUDASIM_NO_POOLS", "1", 1);
  std::unique_ptr<Platform> old_driver = CreateCudaPlatform();
  unsetenv("VGPU_CUDASIM_NO_POOLS");
  unsetenv("VGPU_CUDA_DRIVER_LIBRARY");
  ASSERT_EQ(old_driver->DeviceCount(), 2) << old_driver->Summary();
  Executor* e = *old_driver->GetExecutor(0);
  EXPECT_THAT(e->CreateMemoryPool(MemoryPoolOptions{}),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("cuMemPoolCreate")));
  DeviceAllocatorOptions o;
  o.kind = AllocatorKind::kAsync;
  o.device_name = "GPU:0";
  o.memory_limit = 64 * kMiB;
  EXPECT_THAT(
      CreateDeviceAllocator(e, o),
      StatusIs(absl::StatusCode::kUnimplemented,
               ::testing::AllOf(HasSubstr("GPU:0: VGPU_ALLOCATOR=async needs a memory pool"),
                                HasSubstr("use VGPU_ALLOCATOR=bfc"))));
}

#else

TEST(CudaAsyncPoolTest, NeedsTheCudaBackend) { GTEST_SKIP() << "built without CUDA"; }

#endif  // VGPU_HAVE_CUDA

}  // namespace
}  // namespace vgpu
