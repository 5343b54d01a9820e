// The cuda platform's own code over the CUDA simulator (tests/cudasim/: device memory apart
// from host memory, asynchronous streams with a race detector, kernels emulated on the host),
// so discovery, allocation bookkeeping, error mapping, peer copies, kernel parameter packing and
// the bad-label flag are tested on machines without a GPU (labels unit, cudasim).
#include <dlfcn.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/kernels.h"
#include "vgpu/runtime/nccl.h"
#include "vgpu/runtime/platform.h"
#include "vgpu/runtime/status_matchers.h"

#if VGPU_HAVE_CUDA
#include "vgpu/runtime/cuda/cuda_platform.h"
#endif

namespace vgpu {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;

#if VGPU_HAVE_CUDA

class CudaFakeDriverTest : public ::vgpu::testing::CudaVsHostTest {
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
    stream_ = *exec_->CreateStream(StreamOptions{});
    ASSERT_NO_FATAL_FAILURE(SetUpHost(64 << 20));
  }

  // {peer copies, kernel launches} from the simulator.
  static std::pair<int, int> Counters() {
    void* h = dlopen(VGPU_CUDASIM_LIBCUDA, RTLD_NOW | RTLD_NOLOAD);
    EXPECT_NE(h, nullptr);
    auto fn =
        reinterpret_cast<unsigned long long (*)(const char*)>(dlsym(h, "vgpu_cudasim_counter"));
    EXPECT_NE(fn, nullptr);
    std::pair<int, int> c{0, 0};
    if (fn != nullptr) c = {int(fn("peer_copies")), int(fn("launches"))};
    dlclose(h);
    return c;
  }

  static Platform* platform_;
};
Platform* CudaFakeDriverTest::platform_ = nullptr;

TEST_F(CudaFakeDriverTest, DiscoversDevices) {
  EXPECT_THAT(platform_->Summary(), StartsWith("CUDA driver 13.0 (13000, "));
  EXPECT_THAT(platform_->Summary(), HasSubstr("2 device(s)"));
  EXPECT_THAT(platform_->Summary(), HasSubstr("green contexts available"));
  auto info = platform_->Describe(1);
  ASSERT_THAT(info, IsOk());
  EXPECT_EQ(info->ordinal, 1);
  EXPECT_EQ(info->name, "NVIDIA cudasim small GPU");
  EXPECT_EQ(info->uuid, "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f");
  EXPECT_EQ(info->pci_bus_id, "0000:11:00.0");
  EXPECT_EQ(info->compute_capability_major, 9);
  EXPECT_EQ(info->sm_count, 32);
  EXPECT_EQ(info->total_bytes, uint64_t{256} << 20);
  EXPECT_EQ(info->vmm_granularity, uint64_t{2} << 20);
  EXPECT_THAT(platform_->GetExecutor(2),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("ordinals 0..1")));
}

TEST_F(CudaFakeDriverTest, AllocationsAreTrackedAndOomIsResourceExhausted) {
  auto before = exec_->Describe();
  auto p = exec_->Allocate(1 << 20);
  ASSERT_THAT(p, IsOk());
  EXPECT_EQ(exec_->Describe()->free_bytes, before->free_bytes - (1 << 20));
  // The other device's executor did not hand it out.
  EXPECT_THAT((*platform_->GetExecutor(1))->Free(*p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a live allocation")));
  EXPECT_THAT(exec_->Free(*p), IsOk());
  EXPECT_THAT(exec_->Free(*p), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("double")));
  EXPECT_THAT(exec_->Allocate(uint64_t{1} << 30),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("CUDA_ERROR_OUT_OF_MEMORY (2): out of memory")));
  EXPECT_THAT(exec_->Allocate(0), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("zero")));
  auto h = exec_->HostAllocate(100);
  ASSERT_THAT(h, IsOk());
  EXPECT_THAT(exec_->HostFree(*h), IsOk());
  EXPECT_THAT(exec_->HostFree(*h), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
}

TEST_F(CudaFakeDriverTest, AnOldDriverHasNoGreenContexts) {
  setenv("VGPU_CUDA_DRIVER_LIBRARY", VGPU_CUDASIM_LIBCUDA, 1);
  setenv("VGPU_CUDASIM_DRIVER_VERSION", "12030", 1);
  std::unique_ptr<Platform> old_driver = CreateCudaPlatform();
  unsetenv("VGPU_CUDASIM_DRIVER_VERSION");
  unsetenv("VGPU_CUDA_DRIVER_LIBRARY");
  ASSERT_EQ(old_driver->DeviceCount(), 2) << old_driver->Summary();
  EXPECT_THAT(old_driver->Summary(), HasSubstr("green contexts unavailable"));
  Executor* e = *old_driver->GetExecutor(0);
  EXPECT_THAT(e->PartitionSms({8}),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("driver 12.3")));
  EXPECT_THAT(e->CreateStream(StreamOptions{.priority = 0, .sm_partition = 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("partition 0")));
  EXPECT_THAT(e->VirtualMemoryGranularity(), IsOk());
}

TEST_F(CudaFakeDriverTest, StreamsEventsCopiesAndPeerCopies) {
  EXPECT_EQ(exec_->StreamPriorityRange(), std::make_pair(0, -5));
  auto hi = exec_->CreateStream(StreamOptions{.priority = -100});
  ASSERT_THAT(hi, IsOk());
  EXPECT_EQ((*hi)->priority(), -5);
  auto event = exec_->CreateEvent();
  ASSERT_THAT(event, IsOk());
  EXPECT_THAT((*event)->Query(), IsOk());
  ASSERT_THAT(stream_->RecordEvent(event->get()), IsOk());
  ASSERT_THAT((*hi)->WaitEvent(event->get()), IsOk());
  EXPECT_THAT((*event)->Synchronize(), IsOk());
  Executor* other = *platform_->GetExecutor(1);
  auto other_event = other->CreateEvent();
  EXPECT_THAT(stream_->RecordEvent(other_event->get()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("belongs to")));

  std::vector<uint32_t> src(257);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint32_t(i * 3);
  uint32_t* a = Upload(exec_, stream_.get(), src);
  auto other_stream = *other->CreateStream(StreamOptions{});
  uint32_t* b = Upload(other, other_stream.get(), std::vector<uint32_t>(257, 0));
  uint32_t* c = Upload(exec_, stream_.get(), std::vector<uint32_t>(257, 0));
  int peer_before = Counters().first;
  ASSERT_THAT(stream_->MemcpyD2D(b, a, 257 * 4), IsOk());  // device 0 -> device 1: peer
  EXPECT_EQ(Counters().first, peer_before + 1);
  // other_stream reads b next: the copy on stream_ must be complete (else a race).
  ASSERT_THAT(stream_->Synchronize(), IsOk());
  ASSERT_THAT(stream_->MemcpyD2D(c, a, 257 * 4), IsOk());  // same device: not peer
  EXPECT_EQ(Counters().first, peer_before + 1);
  EXPECT_EQ(Download(other_stream.get(), b, 257), src);
  EXPECT_EQ(Download(stream_.get(), c, 257), src);
  ASSERT_THAT(stream_->Memset32(c, 7, 3), IsOk());
  ASSERT_THAT(stream_->Memset8(reinterpret_cast<uint8_t*>(c) + 12, 1, 4), IsOk());
  auto got = Download(stream_.get(), c, 5);
  EXPECT_EQ(got, (std::vector<uint32_t>{7, 7, 7, 0x01010101u, 12}));
  int ran = 0;
  ASSERT_THAT(stream_->LaunchHostFunc([&] { ran = 42; }), IsOk());
  ASSERT_THAT(stream_->Synchronize(), IsOk());
  EXPECT_EQ(ran, 42);
  EXPECT_TRUE(exec_->CanAccessPeer(*other));
  EXPECT_TRUE(exec_->CanAccessPeer(*exec_));
  EXPECT_FALSE(exec_->CanAccessPeer(*host_exec_));
}

TEST_F(CudaFakeDriverTest, KernelsPackParametersLikeTheKernelsDeclareThem) {
  int launches_before = Counters().second;
  for (int offset : {0, 1}) {  // aligned: the float4 kernel; offset 1: the scalar one
    std::vector<std::vector<float>> bufs = {Random(1001, 1), Random(1001, 2), Random(1001, 3),
                                            std::vector<float>(1001)};
    CompareWithHost(bufs, 3, [&](Kernels* k, Stream* s, std::vector<float*>& b) {
      std::vector<const float*> in = {b[0] + offset, b[1] + offset, b[2] + offset};
      return k->SumN(s, in, b[3] + offset, 1000, 0.25f);
    });
  }
  const uint64_t n = 4099;
  CompareWithHost({std::vector<float>(n)}, 0,
                  [&](Kernels* k, Stream* s, auto& b) { return k->Fill(s, b[0], n, 2.5f); });
  CompareWithHost({Random(n, 4), std::vector<float>(n)}, 1,
                  [&](Kernels* k, Stream* s, auto& b) { return k->Relu(s, n, b[0], b[1]); });
  CompareWithHost(
      {Random(n, 5), Random(n, 6), std::vector<float>(n)}, 2,
      [&](Kernels* k, Stream* s, auto& b) { return k->ReluGrad(s, n, b[0], b[1], b[2]); });
  CompareWithHost({Random(n, 7), Random(n, 8)}, 1, [&](Kernels* k, Stream* s, auto& b) {
    return k->SgdUpdate(s, n, 0.05f, b[0], b[1]);
  });
  for (int out : {1, 2, 3}) {
    CompareWithHost({Random(n, 9), Random(n, 10), Random(n, 11, 0, 1), Random(n, 12)}, out,
                    [&](Kernels* k, Stream* s, auto& b) {
                      return k->AdamUpdate(s, n, 1e-2f, 0.9f, 0.999f, 1e-8f, 5, b[0], b[1], b[2],
                                           b[3]);
                    });
  }
  CompareWithHost({Random(70, 13), Random(33 * 70, 14)}, 1, [&](Kernels* k, Stream* s, auto& b) {
    return k->BiasAdd(s, 33, 70, b[0], b[1]);
  });
  CompareWithHost(
      {Random(33 * 70, 15), std::vector<float>(70, 5)}, 1,
      [&](Kernels* k, Stream* s, auto& b) { return k->BiasGrad(s, 33, 70, b[0], b[1]); });
  EXPECT_GT(Counters().second, launches_before);
  EXPECT_THAT((*exec_->GetKernels())->SumN(stream_.get(), {}, nullptr, 1, 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("0 inputs")));
  EXPECT_THAT((*exec_->GetKernels())->Fill(host_stream_.get(), nullptr, 1, 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("does not belong")));
}

TEST_F(CudaFakeDriverTest, SoftmaxCrossEntropyAndBadLabelsFailTheStream) {
  const int rows = 20, cols = 7;
  std::vector<float> logits = Random(rows * cols, 16, -3, 3);
  std::vector<int32_t> labels(rows);
  for (int r = 0; r < rows; ++r) labels[r] = r % cols;
  auto run = [&](Executor* e, Stream* s, const std::vector<int32_t>& l, float* loss_out,
                 int* correct_out) {
    float* z = Upload(e, s, logits);
    int32_t* dl = Upload(e, s, l);
    float* d = Upload(e, s, std::vector<float>(logits.size(), 9));
    float* loss = Upload(e, s, std::vector<float>{99});
    int32_t* correct = Upload(e, s, std::vector<int32_t>{99});
    absl::Status st =
        (*e->GetKernels())->SoftmaxCrossEntropy(s, rows, cols, z, dl, 0.5f, d, loss, correct);
    EXPECT_THAT(st, IsOk());
    absl::Status sync = s->Synchronize();
    if (sync.ok()) {
      *loss_out = Download(s, loss, 1)[0];
      *correct_out = Download(s, correct, 1)[0];
    }
    return sync;
  };
  float cuda_loss = 0, host_loss = 0;
  int cuda_correct = 0, host_correct = 0;
  ASSERT_THAT(run(exec_, stream_.get(), labels, &cuda_loss, &cuda_correct), IsOk());
  ASSERT_THAT(run(host_exec_, host_stream_.get(), labels, &host_loss, &host_correct), IsOk());
  EXPECT_NEAR(cuda_loss, host_loss, 1e-4f * host_loss);
  EXPECT_EQ(cuda_correct, host_correct);

  labels[11] = -3;
  EXPECT_THAT(run(exec_, stream_.get(), labels, &cuda_loss, &cuda_correct),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("label -3 of row 11 is outside [0, 7)")));
  // Sticky: later work on the stream returns the error.
  EXPECT_THAT(stream_->Memset8(owned_.back().second, 0, 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("row 11")));
  // A fresh stream works (and its slot starts clear).
  stream_ = *exec_->CreateStream(StreamOptions{});
  labels[11] = 1;
  EXPECT_THAT(run(exec_, stream_.get(), labels, &cuda_loss, &cuda_correct), IsOk());
}

TEST_F(CudaFakeDriverTest, BlasAndNcclReportMissingLibraries) {
  // Both load once per process: point them at missing files before first use.
  setenv("VGPU_CUBLAS_LIBRARY", "libvgpu-no-such-cublas.so", 1);
  setenv("VGPU_NCCL_LIBRARY", "libvgpu-no-such-nccl.so", 1);
  EXPECT_THAT(exec_->GetBlas(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                         HasSubstr("libvgpu-no-such-cublas.so")));
  std::vector<Executor*> both = {exec_, *platform_->GetExecutor(1)};
  EXPECT_THAT(NcclCommunicator::Create(both), StatusIs(absl::StatusCode::kFailedPrecondition,
                                                       HasSubstr("libvgpu-no-such-nccl.so")));
  std::vector<Executor*> twice = {exec_, exec_};
  EXPECT_THAT(NcclCommunicator::Create(twice),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cuda device 0 is given twice (ranks 0 and 1)")));
  unsetenv("VGPU_CUBLAS_LIBRARY");
  unsetenv("VGPU_NCCL_LIBRARY");
}

#else

TEST(CudaFakeDriverTest, NeedsTheCudaBackend) { GTEST_SKIP() << "built without CUDA"; }

#endif  // VGPU_HAVE_CUDA

}  // namespace
}  // namespace vgpu
