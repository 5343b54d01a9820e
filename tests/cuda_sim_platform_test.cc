// The cuda platform's fixes of issue 13 (section 3), each on the strict CUDA simulator
// (tests/cudasim/, loaded through VGPU_CUDA_DRIVER_LIBRARY like the real libcuda): the
// caller's context survives, no driver call in a host callback, the driver version check,
// peer access enabled, green contexts (rounded validation, kernels and cuBLAS on their
// streams, events outliving them), VMM runs, and vgpu's own footprint on each logical
// device's budget. Runs on the simulator's "small" profile (2 devices of 1 GiB, 32 SMs) with
// the call log on, so that any CUDA_ERROR_NOT_PERMITTED the platform provokes is seen.
// Labels unit + cudasim.
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/kernels.h"
#include "vgpu/runtime/nccl.h"
#include "vgpu/runtime/platform.h"
#include "vgpu/runtime/status_matchers.h"

#if VGPU_HAVE_CUDA
#include "vgpu/allocator/factory.h"
#include "vgpu/allocator/vmm_allocator.h"
#include "vgpu/devices/config.h"
#include "vgpu/devices/runtime.h"
#include "vgpu/runtime/cuda/cuda_executor.h"
#include "vgpu/runtime/cuda/cuda_platform.h"
#endif

namespace vgpu {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;

#if VGPU_HAVE_CUDA

std::string SimLib(const char* name) { return std::string(VGPU_CUDASIM_LIB_DIR) + "/" + name; }

// The simulator's counters (vgpu_cudasim_counter), e.g. "map_calls".
uint64_t Counter(const char* name) {
  void* h = dlopen(SimLib("libcuda.so.1").c_str(), RTLD_NOW | RTLD_NOLOAD);
  EXPECT_NE(h, nullptr);
  if (h == nullptr) return 0;
  auto fn = reinterpret_cast<unsigned long long (*)(const char*)>(dlsym(h, "vgpu_cudasim_counter"));
  EXPECT_NE(fn, nullptr);
  uint64_t v = fn == nullptr ? 0 : fn(name);
  dlclose(h);
  return v;
}

class CudaSimPlatformTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    setenv("VGPU_CUDA_DRIVER_LIBRARY", SimLib("libcuda.so.1").c_str(), 1);
    setenv("VGPU_CUBLAS_LIBRARY", SimLib("libcublas.so.13").c_str(), 1);
    setenv("VGPU_NCCL_LIBRARY", SimLib("libnccl.so.2").c_str(), 1);
    setenv("VGPU_CUDASIM_PROFILE", "small", 1);
    log_path_ = new std::string(::testing::TempDir() + "cuda_sim_platform_test_calls." +
                                std::to_string(getpid()) + ".log");
    std::remove(log_path_->c_str());
    setenv("VGPU_CUDA_CALL_LOG", log_path_->c_str(), 1);
    platform_ = CreateCudaPlatform().release();
  }
  static void TearDownTestSuite() {
    delete platform_;
    platform_ = nullptr;
    std::remove(log_path_->c_str());
    delete log_path_;
    unsetenv("VGPU_CUDA_CALL_LOG");  // the death tests' children would write it again
  }
  void SetUp() override {
    ASSERT_EQ(platform_->DeviceCount(), 2) << platform_->Summary();
    exec0_ = static_cast<cuda::CudaExecutor*>(*platform_->GetExecutor(0));
    exec1_ = static_cast<cuda::CudaExecutor*>(*platform_->GetExecutor(1));
    log_start_ = LogText().size();
    ASSERT_GT(log_start_, 0u) << "no call log at " << *log_path_;
  }
  void TearDown() override {
    // No call of the platform may be refused for being made in a host callback.
    EXPECT_THAT(LogSinceStart(), Not(HasSubstr("NOT_PERMITTED")));
  }

  static std::string LogText() {
    std::ifstream in(*log_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  std::string LogSinceStart() const {
    std::string all = LogText();
    return all.size() > log_start_ ? all.substr(log_start_) : std::string();
  }
  const cuda::CudaDriver& driver() const { return exec0_->driver(); }
  CUcontext Current() const {
    CUcontext c = nullptr;
    EXPECT_EQ(driver().cuCtxGetCurrent(&c), CUDA_SUCCESS);
    return c;
  }

  static Platform* platform_;
  static std::string* log_path_;
  cuda::CudaExecutor* exec0_ = nullptr;
  cuda::CudaExecutor* exec1_ = nullptr;
  size_t log_start_ = 0;
};
Platform* CudaSimPlatformTest::platform_ = nullptr;
std::string* CudaSimPlatformTest::log_path_ = nullptr;

// Bug 2: the application's own current context (here device 1's primary context, made
// current by the application itself) is still current after vgpu worked on device 0:
// allocation, copies, kernels, cuBLAS, events, synchronization, teardown.
TEST_F(CudaSimPlatformTest, ApplicationContextStaysCurrent) {
  const cuda::CudaDriver& d = driver();
  CUcontext mine = nullptr;
  ASSERT_EQ(d.cuDevicePrimaryCtxRetain(&mine, exec1_->device()), CUDA_SUCCESS);
  ASSERT_EQ(d.cuCtxSetCurrent(mine), CUDA_SUCCESS);
  {
    auto stream = exec0_->CreateStream(StreamOptions{});
    ASSERT_THAT(stream, IsOk());
    EXPECT_EQ(Current(), mine);
    auto p = exec0_->Allocate(4096);
    ASSERT_THAT(p, IsOk());
    EXPECT_EQ(Current(), mine);
    std::vector<float> host(1024, 1.5f), back(1024, 0.0f);
    ASSERT_THAT((*stream)->MemcpyH2D(*p, host.data(), 4096), IsOk());
    EXPECT_EQ(Current(), mine);
    auto kernels = exec0_->GetKernels();
    ASSERT_THAT(kernels, IsOk());
    ASSERT_THAT((*kernels)->Fill(stream->get(), static_cast<float*>(*p), 1024, 2.0f), IsOk());
    EXPECT_EQ(Current(), mine);
    auto blas = exec0_->GetBlas();
    ASSERT_THAT(blas, IsOk());
    ASSERT_THAT((*blas)->Sscal(stream->get(), 1024, 3.0f, static_cast<float*>(*p)), IsOk());
    EXPECT_EQ(Current(), mine);
    auto event = exec0_->CreateEvent();
    ASSERT_THAT(event, IsOk());
    ASSERT_THAT((*stream)->RecordEvent(event->get()), IsOk());
    ASSERT_THAT((*event)->Synchronize(), IsOk());
    EXPECT_EQ(Current(), mine);
    ASSERT_THAT((*stream)->MemcpyD2H(back.data(), *p, 4096), IsOk());
    ASSERT_THAT((*stream)->Synchronize(), IsOk());
    EXPECT_EQ(Current(), mine);
    EXPECT_EQ(back[0], 6.0f);
    EXPECT_EQ(back[1023], 6.0f);
    event->reset();
    ASSERT_THAT(exec0_->Free(*p), IsOk());
    EXPECT_EQ(Current(), mine);
  }
  EXPECT_EQ(Current(), mine);  // the stream's destruction too
  EXPECT_EQ(d.cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(d.cuDevicePrimaryCtxRelease(exec1_->device()), CUDA_SUCCESS);
}

// Bug 3: a host function holding the last reference to an Event (Tensor::CopyFrom's
// pattern), a pinned buffer and a stream: their releases make no driver call on the
// callback thread (the simulator refuses those with NOT_PERMITTED, checked in TearDown) and
// happen at the next call on a host thread.
TEST_F(CudaSimPlatformTest, HostCallbackReleasesMakeNoDriverCall) {
  auto stream = exec0_->CreateStream(StreamOptions{});
  ASSERT_THAT(stream, IsOk());
  const std::string before = LogSinceStart();
  {
    auto event = exec0_->CreateEvent();
    ASSERT_THAT(event, IsOk());
    ASSERT_THAT((*stream)->RecordEvent(event->get()), IsOk());
    std::shared_ptr<Event> keep(std::move(*event));
    auto other = exec0_->CreateStream(StreamOptions{});
    ASSERT_THAT(other, IsOk());
    std::shared_ptr<Stream> doomed(std::move(*other));
    ASSERT_THAT(doomed->WaitEvent(keep.get()), IsOk());
    auto buffer = exec0_->Allocate(1 << 20);
    ASSERT_THAT(buffer, IsOk());
    cuda::CudaExecutor* e = exec0_;
    void* b = *buffer;
    ASSERT_THAT((*stream)->LaunchHostFunc([keep, doomed, e, b] {
      // Freed from the callback: deferred, not refused.
      EXPECT_THAT(e->Free(b), IsOk());
    }),
                IsOk());
  }  // the callback now holds the last references
  ASSERT_THAT((*stream)->Synchronize(), IsOk());
  EXPECT_THAT(LogSinceStart(), Not(HasSubstr("NOT_PERMITTED")));
  // The next host-thread call runs the deferred releases.
  auto probe = exec0_->Allocate(4096);
  ASSERT_THAT(probe, IsOk());
  ASSERT_THAT(exec0_->Free(*probe), IsOk());
  const std::string after = LogSinceStart().substr(before.size());
  EXPECT_THAT(after, HasSubstr("cuEventDestroy("));
  EXPECT_THAT(after, HasSubstr("cuStreamDestroy("));
  EXPECT_THAT(after, HasSubstr("cuMemFree("));
}

// Bug 5: peer access is enabled at start between the two simulated devices (which can), and
// a kernel on device 0 reads device 1's memory directly (the simulator faults without it).
TEST_F(CudaSimPlatformTest, PeerAccessIsEnabledAndUsable) {
  EXPECT_TRUE(exec0_->CanAccessPeer(*exec1_));
  EXPECT_TRUE(exec0_->PeerAccessEnabled(*exec1_));
  EXPECT_TRUE(exec1_->PeerAccessEnabled(*exec0_));
  EXPECT_GE(Counter("peer_enables"), 2u);
  auto s0 = exec0_->CreateStream(StreamOptions{});
  auto s1 = exec1_->CreateStream(StreamOptions{});
  ASSERT_THAT(s0, IsOk());
  ASSERT_THAT(s1, IsOk());
  auto remote = exec1_->Allocate(1024 * sizeof(float));
  auto local = exec0_->Allocate(1024 * sizeof(float));
  ASSERT_THAT(remote, IsOk());
  ASSERT_THAT(local, IsOk());
  std::vector<float> ones(1024, 1.0f), back(1024, 0.0f);
  ASSERT_THAT((*s1)->MemcpyH2D(*remote, ones.data(), ones.size() * 4), IsOk());
  ASSERT_THAT((*s1)->Synchronize(), IsOk());
  Kernels* k = *exec0_->GetKernels();
  const float* inputs[] = {static_cast<const float*>(*remote), static_cast<const float*>(*remote)};
  ASSERT_THAT(k->SumN(s0->get(), inputs, static_cast<float*>(*local), 1024, 1.0f), IsOk());
  ASSERT_THAT((*s0)->MemcpyD2H(back.data(), *local, back.size() * 4), IsOk());
  ASSERT_THAT((*s0)->Synchronize(), IsOk());
  EXPECT_EQ(back[0], 2.0f);
  EXPECT_EQ(back[1023], 2.0f);
  ASSERT_THAT(exec1_->Free(*remote), IsOk());
  ASSERT_THAT(exec0_->Free(*local), IsOk());
}

// Bug 6: kernels and cuBLAS on green-context streams run in the partition (the simulator
// records the SM count of the context a kernel ran in), and an event recorded on such a
// stream may outlive the partitions: re-partitioning and then destroying it makes no call
// on a destroyed context.
TEST_F(CudaSimPlatformTest, GreenContextStreamsRunKernelsAndBlas) {
  auto sms = exec0_->PartitionSms({8, 16});
  ASSERT_THAT(sms, IsOk());
  EXPECT_THAT(*sms, ::testing::ElementsAre(8, 16, 8));
  std::unique_ptr<Event> event;
  {
    StreamOptions so;
    so.sm_partition = 1;
    auto stream = exec0_->CreateStream(so);
    ASSERT_THAT(stream, IsOk());
    auto a = exec0_->Allocate(16 * sizeof(float));
    ASSERT_THAT(a, IsOk());
    float* x = static_cast<float*>(*a);
    Kernels* k = *exec0_->GetKernels();
    ASSERT_THAT(k->Fill(stream->get(), x, 16, 2.0f), IsOk());
    ASSERT_THAT((*stream)->Synchronize(), IsOk());
    EXPECT_EQ(Counter("last_kernel_sms"), 16u);
    Blas* blas = *exec0_->GetBlas();
    // x (4x4, all 2) = x * x: every entry 4 * 2 * 2 = 16.
    auto c = exec0_->Allocate(16 * sizeof(float));
    ASSERT_THAT(c, IsOk());
    ASSERT_THAT(blas->Sgemm(stream->get(), Transpose::kNo, Transpose::kNo, 4, 4, 4, 1.0f, x, 4, x,
                            4, 0.0f, static_cast<float*>(*c), 4),
                IsOk());
    std::vector<float> back(16, 0.0f);
    ASSERT_THAT((*stream)->MemcpyD2H(back.data(), *c, 64), IsOk());
    auto e = exec0_->CreateEvent();
    ASSERT_THAT(e, IsOk());
    event = *std::move(e);
    ASSERT_THAT((*stream)->RecordEvent(event.get()), IsOk());
    ASSERT_THAT((*stream)->Synchronize(), IsOk());
    EXPECT_EQ(back[0], 16.0f);
    EXPECT_EQ(back[15], 16.0f);
    ASSERT_THAT(exec0_->Free(*a), IsOk());
    ASSERT_THAT(exec0_->Free(*c), IsOk());
  }
  // The partition's stream is gone; re-partitioning destroys its green context.
  ASSERT_THAT(exec0_->PartitionSms({16}), IsOk());
  EXPECT_THAT(event->Synchronize(), IsOk());
  event.reset();
  const std::string log = LogSinceStart();
  EXPECT_THAT(log, Not(HasSubstr("CONTEXT_IS_DESTROYED")));
  EXPECT_THAT(log, Not(HasSubstr("INVALID_CONTEXT")));
}

// Bug 6: a partition that fits as written but not as the device rounds it (32 SMs, a
// minimum partition of 8 in multiples of 8: 9,9,9 -> 16+16+16) fails at validation, with
// the rounded numbers, before any green context is made.
TEST_F(CudaSimPlatformTest, SmPartitionsValidatedAsRounded) {
  auto info = platform_->Describe(0);
  ASSERT_THAT(info, IsOk());
  EXPECT_EQ(info->sm_partition_min, 8);
  EXPECT_EQ(info->sm_partition_alignment, 8);
  RuntimeConfig config;
  auto logical = ParseLogicalDevices("0:64MiB,64MiB,64MiB");
  ASSERT_THAT(logical, IsOk());
  config.logical_devices = *logical;
  config.sm_partitions = {{0, {9, 9, 9}}};
  config.visible_devices = std::vector<int>{0};
  const uint64_t greens = Counter("green_contexts_created");
  EXPECT_THAT(Runtime::Create(config, platform_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("16+16+16 = 48")));
  EXPECT_EQ(Counter("green_contexts_created"), greens);
}

// MapAll leaves nothing mapped when the driver refuses one of the allocations part way (here
// the second address is already mapped), and the range is usable again afterwards.
TEST_F(CudaSimPlatformTest, MapAllLeavesNothingMappedWhenOneMapFails) {
  auto g = exec0_->VirtualMemoryGranularity();
  ASSERT_THAT(g, IsOk());
  auto va = exec0_->ReserveAddressRange(2 * *g);
  ASSERT_THAT(va, IsOk());
  auto h0 = exec0_->CreatePhysicalMemory(*g), h1 = exec0_->CreatePhysicalMemory(*g),
       h2 = exec0_->CreatePhysicalMemory(*g);
  ASSERT_THAT(h0, IsOk());
  ASSERT_THAT(h1, IsOk());
  ASSERT_THAT(h2, IsOk());
  char* base = static_cast<char*>(*va);
  ASSERT_THAT(exec0_->Map(base + *g, *g, *h2, 0), IsOk());  // takes the second address
  const uint64_t maps = Counter("map_calls"), unmaps = Counter("unmap_calls");
  const PhysicalMemoryHandle both[] = {*h0, *h1};
  EXPECT_THAT(exec0_->MapAll(base, both, 2), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(Counter("map_calls") - maps, 1u);      // the first one mapped...
  EXPECT_EQ(Counter("unmap_calls") - unmaps, 1u);  // ...and was unmapped again
  ASSERT_THAT(exec0_->Unmap(base + *g, *g), IsOk());
  ASSERT_THAT(exec0_->MapAll(base, both, 2), IsOk());
  EXPECT_THAT(exec0_->Unmap(base, 2 * *g), IsOk());  // two whole mappings, one call
  for (const auto& h : {h0, h1, h2}) EXPECT_THAT(exec0_->ReleasePhysicalMemory(*h), IsOk());
  EXPECT_THAT(exec0_->FreeAddressRange(base, 2 * *g), IsOk());
}

// The vmm allocator maps a block of 32 granules with one cuMemMap per granule (each is a
// physical allocation of its own: a driver maps whole allocations only) and ONE
// cuMemSetAccess for the block (25-31 us a call on an H200, 85-107 us for 512 mappings at once).
TEST_F(CudaSimPlatformTest, VmmSetsAccessOnceForABlock) {
  DeviceAllocatorOptions o;
  o.kind = AllocatorKind::kVmm;
  o.device_name = "GPU:0 (physical GPU 0)";
  o.memory_limit = 128 << 20;
  auto alloc = CreateDeviceAllocator(exec0_, o);
  ASSERT_THAT(alloc, IsOk());
  const uint64_t maps = Counter("map_calls"), access = Counter("set_access_calls");
  auto p = (*alloc)->AllocateRaw(64 << 20);  // 32 granules
  ASSERT_THAT(p, IsOk());
  EXPECT_EQ(Counter("map_calls") - maps, 32u);
  EXPECT_EQ(Counter("set_access_calls") - access, 1u);
  ASSERT_THAT((*alloc)->Deallocate(*p), IsOk());
}

// Bug 8: vgpu's own device memory on a logical device is in its limit: the cuBLAS workspace
// comes from its allocator (cublasSetWorkspace after every cublasSetStream) and NCCL's
// buffers are kept out of its allocator's limit. So cuBLAS calls and an NCCL all-reduce take
// no device memory beyond what the runtime accounted when it was created.
TEST_F(CudaSimPlatformTest, RuntimeFootprintIsInTheLogicalDeviceBudget) {
  RuntimeConfig config;
  auto logical = ParseLogicalDevices("0:256MiB;1:256MiB");
  ASSERT_THAT(logical, IsOk());
  config.logical_devices = *logical;
  auto rt = Runtime::Create(config, platform_);
  ASSERT_THAT(rt, IsOk());
  ASSERT_EQ((*rt)->gpus().size(), 2u);
  for (LogicalDevice* d : (*rt)->gpus()) {
    const LogicalDeviceInfo& i = d->info();
    const uint64_t limit = uint64_t{256} << 20;
    EXPECT_EQ(i.memory_limit, limit);
    EXPECT_EQ(i.blas_workspace, (*d->executor()->GetBlas())->WorkspaceBytes());
    EXPECT_GT(i.blas_workspace, 0u);
    EXPECT_EQ(i.collective_reserve, d->executor()->CollectiveBufferBytes(2));
    EXPECT_GT(i.collective_reserve, 0u);
    const AllocatorStats st = d->allocator()->Stats();
    EXPECT_LE(st.bytes_limit + i.collective_reserve, limit);
    EXPECT_GE(st.bytes_in_use, i.blas_workspace);  // the workspace is the allocator's
  }
  const uint64_t used0 = Counter("device_used_bytes:0"), used1 = Counter("device_used_bytes:1");
  // cuBLAS on each device's own stream, then an all-reduce over both.
  std::vector<void*> owned;
  std::vector<AllReduceBuffer> buffers;
  std::vector<Executor*> executors;
  for (LogicalDevice* d : (*rt)->gpus()) {
    auto a = d->allocator()->AllocateRaw(16 * sizeof(float));
    auto c = d->allocator()->AllocateRaw(16 * sizeof(float));
    ASSERT_THAT(a, IsOk());
    ASSERT_THAT(c, IsOk());
    owned.push_back(*a);
    owned.push_back(*c);
    ASSERT_THAT(d->stream()->Memset32(*a, 0x3f800000u, 16), IsOk());  // 1.0f
    Blas* blas = *d->executor()->GetBlas();
    const float* x = static_cast<const float*>(*a);
    ASSERT_THAT(blas->Sgemm(d->stream(), Transpose::kNo, Transpose::kNo, 4, 4, 4, 1.0f, x, 4, x, 4,
                            0.0f, static_cast<float*>(*c), 4),
                IsOk());
    buffers.push_back({d->stream(), static_cast<float*>(*c)});
    executors.push_back(d->executor());
  }
  {
    auto comm = NcclCommunicator::Create(executors);
    ASSERT_THAT(comm, IsOk());
    ASSERT_THAT((*comm)->AllReduce(buffers, 16, AllReduceOp::kSum), IsOk());
    for (LogicalDevice* d : (*rt)->gpus()) ASSERT_THAT(d->stream()->Synchronize(), IsOk());
    std::vector<float> back(16, 0.0f);
    LogicalDevice* d0 = (*rt)->gpus()[0];
    ASSERT_THAT(d0->stream()->MemcpyD2H(back.data(), buffers[0].data, 64), IsOk());
    ASSERT_THAT(d0->stream()->Synchronize(), IsOk());
    EXPECT_EQ(back[0], 8.0f);  // 4 per rank, summed over 2
    // Nothing beyond the NCCL buffers each device's budget kept for them.
    EXPECT_LE(Counter("device_used_bytes:0") - used0, (*rt)->gpus()[0]->info().collective_reserve);
    EXPECT_LE(Counter("device_used_bytes:1") - used1, (*rt)->gpus()[1]->info().collective_reserve);
  }
  for (size_t i = 0; i < owned.size(); ++i) {
    ASSERT_THAT((*rt)->gpus()[i / 2]->allocator()->Deallocate(owned[i]), IsOk());
  }
}

// Bug 4: a driver older than the oldest whose entry points vgpu loads (12.0) leaves the
// platform with no devices and says why. In a fresh process: the simulator reads
// VGPU_CUDASIM_DRIVER_VERSION once.
TEST(CudaSimDriverVersionTest, OldDriverIsRefusedWithTheReason) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("VGPU_CUDA_DRIVER_LIBRARY", SimLib("libcuda.so.1").c_str(), 1);
        setenv("VGPU_CUDASIM_DRIVER_VERSION", "11080", 1);
        std::unique_ptr<Platform> p = CreateCudaPlatform();
        std::fprintf(stderr, "%s\n", p->Summary().c_str());
        std::fflush(stderr);
        _exit(p->DeviceCount() == 0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0),
      "driver .* is version 11.8 \\(11080\\); vgpu needs 12.0 \\(12000\\) or newer");
}

TEST(CudaSimDriverVersionTest, CurrentDriverIsAccepted) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("VGPU_CUDA_DRIVER_LIBRARY", SimLib("libcuda.so.1").c_str(), 1);
        setenv("VGPU_CUDASIM_DRIVER_VERSION", "12000", 1);
        std::unique_ptr<Platform> p = CreateCudaPlatform();
        std::fprintf(stderr, "%s\n", p->Summary().c_str());
        std::fflush(stderr);
        _exit(p->DeviceCount() > 0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "CUDA driver 12.0 \\(12000");
}

#else

TEST(CudaSimPlatformTest, NeedsTheCudaBackend) {
  GTEST_SKIP() << "built without the cuda backend (no CUDA headers)";
}

#endif  // VGPU_HAVE_CUDA

}  // namespace
}  // namespace vgpu
