// The cuda platform on machines WITHOUT a GPU (label unit): the no-driver paths, the error
// mapping, the embedded fatbin and the NCCL front. GPU behaviour is in
// cuda_platform_gpu_test.cc and the conformance suite.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/host/host_platform.h"
#include "vgpu/runtime/nccl.h"
#include "vgpu/runtime/platform.h"
#include "vgpu/runtime/status_matchers.h"

#if VGPU_HAVE_CUDA
#include "vgpu/runtime/cuda/cuda_driver.h"
#include "vgpu/runtime/cuda/cuda_fatbin.h"
#include "vgpu/runtime/cuda/cuda_platform.h"
#include "vgpu/runtime/cuda/dynamic_library.h"
#endif

namespace vgpu {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;

TEST(CudaPlatformTest, GetPlatformNeverFailsAndExplainsZeroDevices) {
  absl::StatusOr<Platform*> p = GetPlatform("cuda");
  ASSERT_THAT(p, IsOk());
  EXPECT_EQ((*p)->name(), "cuda");
  if ((*p)->DeviceCount() > 0) GTEST_SKIP() << "this machine has a GPU: " << (*p)->Summary();
  EXPECT_THAT((*p)->Summary(), StartsWith("0 CUDA devices: "));
  EXPECT_THAT((*p)->GetExecutor(0), StatusIs(absl::StatusCode::kNotFound, HasSubstr("cuda")));
  EXPECT_THAT((*p)->Describe(0), StatusIs(absl::StatusCode::kNotFound, HasSubstr("cuda")));
}

TEST(CudaPlatformTest, AutoFallsBackToHostWithoutDevices) {
  absl::StatusOr<Platform*> cuda = GetPlatform("cuda");
  ASSERT_THAT(cuda, IsOk());
  if ((*cuda)->DeviceCount() > 0) GTEST_SKIP() << "this machine has a GPU";
  if (std::getenv("VGPU_PLATFORM") != nullptr) GTEST_SKIP() << "VGPU_PLATFORM is set";
  absl::StatusOr<Platform*> p = DefaultPlatform();
  ASSERT_THAT(p, IsOk());
  EXPECT_EQ((*p)->name(), "host");
}

#if VGPU_HAVE_CUDA

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name); old != nullptr) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_.has_value()) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(CudaPlatformTest, MissingDriverLibraryGivesZeroDevicesNamingTheLibrary) {
  ScopedEnv env(cuda::kDriverLibraryEnv, "libvgpu-no-such-driver.so.1");
  std::unique_ptr<Platform> p = CreateCudaPlatform();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->name(), "cuda");
  EXPECT_EQ(p->DeviceCount(), 0);
  EXPECT_THAT(p->Summary(), StartsWith("0 CUDA devices: libvgpu-no-such-driver.so.1 not found"));
  EXPECT_THAT(p->GetExecutor(0),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("libvgpu-no-such-driver.so.1")));
  EXPECT_THAT(p->Describe(0), StatusIs(absl::StatusCode::kNotFound, HasSubstr("not found")));
  EXPECT_THAT(p->GetExecutor(-1), StatusIs(absl::StatusCode::kNotFound, HasSubstr("cuda")));
}

TEST(CudaPlatformTest, LibraryThatIsNotADriverGivesZeroDevices) {
  // A real shared library without the Driver API: loads, but has no cuGetProcAddress_v2.
  ScopedEnv env(cuda::kDriverLibraryEnv, "libz.so.1");
  std::unique_ptr<Platform> p = CreateCudaPlatform();
  EXPECT_EQ(p->DeviceCount(), 0);
  EXPECT_THAT(p->Summary(), HasSubstr("libz.so.1 has no cuGetProcAddress_v2"));
}

TEST(CudaPlatformTest, DynamicLibraryHelpers) {
  const char* defaults[] = {"liba.so.2", "liba.so"};
  {
    ScopedEnv env("VGPU_TEST_LIBRARY", "");  // empty: as if unset
    EXPECT_THAT(cuda::LibraryNames("VGPU_TEST_LIBRARY", defaults),
                ::testing::ElementsAre("liba.so.2", "liba.so"));
  }
  {
    ScopedEnv env("VGPU_TEST_LIBRARY", "/opt/liba.so");  // the user's choice, no fallback
    EXPECT_THAT(cuda::LibraryNames("VGPU_TEST_LIBRARY", defaults),
                ::testing::ElementsAre("/opt/liba.so"));
  }
  EXPECT_THAT(cuda::OpenLibrary("libvgpu-no-such-library.so"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("libvgpu-no-such-library.so")));
  absl::StatusOr<void*> z = cuda::OpenLibrary("libz.so.1");
  ASSERT_THAT(z, IsOk());
  const char* (*version)() = nullptr;
  ASSERT_TRUE(cuda::LoadSymbol(*z, "zlibVersion", version));
  EXPECT_STRNE(version(), "");
  cuda::SymbolLoader sym(*z);
  int (*a)() = nullptr;
  int (*b)() = nullptr;
  sym(a, "vgpuNoSuchSymbolA");
  sym(version, "zlibVersion");
  sym(b, "vgpuNoSuchSymbolB");
  EXPECT_EQ(a, nullptr);
  EXPECT_NE(version, nullptr);
  EXPECT_THAT(sym.missing(), ::testing::ElementsAre("vgpuNoSuchSymbolA", "vgpuNoSuchSymbolB"));
}

TEST(CudaPlatformTest, DefaultDriverOnThisMachine) {
  std::unique_ptr<Platform> p = CreateCudaPlatform();
  if (p->DeviceCount() > 0) GTEST_SKIP() << "this machine has a GPU: " << p->Summary();
  EXPECT_THAT(p->Summary(), StartsWith("0 CUDA devices: "));
  EXPECT_THAT(p->GetExecutor(0), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
}

TEST(CudaPlatformTest, CuResultMapsToCanonicalCodesWithTheName) {
  using absl::StatusCode;
  EXPECT_THAT(cuda::ToStatus(CUDA_SUCCESS, "x"), IsOk());
  EXPECT_THAT(cuda::ToStatus(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc of 1 GiB"),
              StatusIs(StatusCode::kResourceExhausted,
                       HasSubstr("cuMemAlloc of 1 GiB: CUDA_ERROR_OUT_OF_MEMORY (2)")));
  EXPECT_THAT(cuda::ToStatus(CUDA_ERROR_INVALID_VALUE, "cuMemMap"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("CUDA_ERROR_INVALID_VALUE")));
  EXPECT_THAT(cuda::ToStatus(CUDA_ERROR_INVALID_HANDLE, "h"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("CUDA_ERROR_INVALID_HANDLE")));
  EXPECT_THAT(cuda::ToStatus(CUDA_ERROR_NO_DEVICE, "cuInit"),
              StatusIs(StatusCode::kNotFound, HasSubstr("CUDA_ERROR_NO_DEVICE (100)")));
  EXPECT_THAT(cuda::ToStatus(CUDA_ERROR_NOT_INITIALIZED, "c"),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("CUDA_ERROR_NOT_INITIALIZED")));
  EXPECT_THAT(cuda::ToStatus(CUDA_ERROR_NOT_SUPPORTED, "c"),
              StatusIs(StatusCode::kUnimplemented, HasSubstr("CUDA_ERROR_NOT_SUPPORTED")));
  EXPECT_THAT(cuda::ToStatus(CUDA_ERROR_NOT_READY, "c"),
              StatusIs(StatusCode::kUnavailable, HasSubstr("CUDA_ERROR_NOT_READY")));
  EXPECT_THAT(cuda::ToStatus(CUDA_ERROR_ILLEGAL_ADDRESS, "c"),
              StatusIs(StatusCode::kInternal, HasSubstr("CUDA_ERROR_ILLEGAL_ADDRESS")));
  EXPECT_THAT(cuda::ToStatus(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "c"),
              StatusIs(StatusCode::kResourceExhausted, HasSubstr("LAUNCH_OUT_OF_RESOURCES")));
  EXPECT_THAT(cuda::ToStatus(static_cast<CUresult>(998), "c"),
              StatusIs(StatusCode::kInternal, HasSubstr("CUresult 998")));
}

TEST(CudaPlatformTest, CublasAndNcclCodesMapToCanonicalCodes) {
  using absl::StatusCode;
  EXPECT_THAT(cuda::ToStatus(CUBLAS_STATUS_SUCCESS, "x"), IsOk());
  EXPECT_THAT(cuda::ToStatus(CUBLAS_STATUS_ALLOC_FAILED, "cublasCreate"),
              StatusIs(StatusCode::kResourceExhausted,
                       HasSubstr("cublasCreate: CUBLAS_STATUS_ALLOC_FAILED (3)")));
  EXPECT_THAT(cuda::ToStatus(CUBLAS_STATUS_INVALID_VALUE, "sgemm"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("CUBLAS_STATUS_INVALID_VALUE")));
  EXPECT_THAT(cuda::ToStatus(CUBLAS_STATUS_EXECUTION_FAILED, "sgemm"),
              StatusIs(StatusCode::kInternal, HasSubstr("CUBLAS_STATUS_EXECUTION_FAILED")));
  EXPECT_THAT(cuda::ToStatus(ncclSuccess, "x"), IsOk());
  EXPECT_THAT(cuda::ToStatus(ncclInvalidArgument, "ncclAllReduce"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("ncclInvalidArgument (4)")));
  EXPECT_THAT(cuda::ToStatus(ncclInvalidUsage, "init"),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("ncclInvalidUsage")));
  EXPECT_THAT(cuda::ToStatus(ncclUnhandledCudaError, "init"),
              StatusIs(StatusCode::kInternal, HasSubstr("ncclUnhandledCudaError")));
}

TEST(CudaPlatformTest, EmbeddedFatbinIsAFatbin) {
  absl::Span<const uint8_t> image = cuda::KernelsFatbin();
  ASSERT_GT(image.size(), 16u);
  uint32_t magic = 0;
  std::memcpy(&magic, image.data(), sizeof(magic));
  EXPECT_EQ(magic, cuda::kFatbinMagic);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(image.data()) % 8, 0u);
  // Every kernel the launcher looks up is in the image (names are stored in the ELF/PTX).
  std::string bytes(image.begin(), image.end());
  for (const char* name : {"vgpu_sum_n", "vgpu_sum_n_vec4", "vgpu_fill", "vgpu_bias_add",
                           "vgpu_bias_grad", "vgpu_relu", "vgpu_relu_grad", "vgpu_softmax_xent",
                           "vgpu_sgd_update", "vgpu_adam_update"}) {
    EXPECT_NE(bytes.find(name), std::string::npos) << name;
  }
}

#else  // !VGPU_HAVE_CUDA

TEST(CudaPlatformTest, BuildWithoutCudaSaysSo) {
  absl::StatusOr<Platform*> p = GetPlatform("cuda");
  ASSERT_THAT(p, IsOk());
  EXPECT_EQ((*p)->DeviceCount(), 0);
  EXPECT_THAT((*p)->Summary(), HasSubstr("without CUDA"));
}

#endif  // VGPU_HAVE_CUDA

// ---- NCCL front -----------------------------------------------------------------------------

class NcclFrontTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HostPlatformOptions options;
    options.device_bytes = {64 << 20, 64 << 20};
    auto p = HostPlatform::Create(options);
    ASSERT_THAT(p, IsOk());
    host_ = *std::move(p);
  }
  Executor* Host(int i) { return *host_->GetExecutor(i); }
  std::unique_ptr<HostPlatform> host_;
};

// The host platform gets the host communicator (NCCL's contract; the algorithms are tested in
// collective_test.cc): here, the front's own checks of streams and buffers.
TEST_F(NcclFrontTest, HostPlatformGetsTheHostCommunicator) {
  std::vector<Executor*> executors = {Host(0), Host(1)};
  auto comm = NcclCommunicator::Create(executors);
  ASSERT_THAT(comm, IsOk());
  EXPECT_EQ((*comm)->size(), 2);
  auto s0 = Host(0)->CreateStream({});
  auto s1 = Host(1)->CreateStream({});
  ASSERT_THAT(s0, IsOk());
  ASSERT_THAT(s1, IsOk());
  auto m0 = Host(0)->Allocate(64);
  auto m1 = Host(1)->Allocate(64);
  ASSERT_THAT(m0, IsOk());
  ASSERT_THAT(m1, IsOk());
  float* a = static_cast<float*>(*m0);
  float* b = static_cast<float*>(*m1);
  for (int i = 0; i < 16; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = 100.0f;
  }
  std::vector<AllReduceBuffer> bufs = {{s0->get(), a}, {s1->get(), b}};
  ASSERT_THAT((*comm)->AllReduce(bufs, 16, AllReduceOp::kSum), IsOk());
  ASSERT_THAT((*s0)->Synchronize(), IsOk());
  ASSERT_THAT((*s1)->Synchronize(), IsOk());
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(a[i], 100.0f + i);
    EXPECT_EQ(b[i], 100.0f + i);
  }
  // Rank 1's buffer on rank 0's stream, a missing buffer, a wrong number of buffers.
  std::vector<AllReduceBuffer> swapped = {{s0->get(), a}, {s0->get(), b}};
  EXPECT_THAT((*comm)->AllReduce(swapped, 16, AllReduceOp::kSum),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("stream of rank 1 does not belong to host device 1")));
  std::vector<AllReduceBuffer> null_buffer = {{s0->get(), a}, {s1->get(), nullptr}};
  EXPECT_THAT((*comm)->AllReduce(null_buffer, 16, AllReduceOp::kSum),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("null buffer for rank 1")));
  EXPECT_THAT((*comm)->AllReduce(absl::MakeSpan(bufs).subspan(0, 1), 16, AllReduceOp::kSum),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1 buffers for 2 ranks")));
  ASSERT_THAT(Host(0)->Free(a), IsOk());
  ASSERT_THAT(Host(1)->Free(b), IsOk());
}

TEST_F(NcclFrontTest, DuplicatedDeviceIsInvalidArgumentNamingIt) {
  std::vector<Executor*> executors = {Host(0), Host(1), Host(1)};
  EXPECT_THAT(NcclCommunicator::Create(executors),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("host device 1 is given twice (ranks 1 and 2)")));
}

TEST_F(NcclFrontTest, EmptyOrNullIsInvalidArgument) {
  EXPECT_THAT(NcclCommunicator::Create({}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no executors")));
  std::vector<Executor*> executors = {Host(0), nullptr};
  EXPECT_THAT(NcclCommunicator::Create(executors),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("executor 1 is null")));
}

}  // namespace
}  // namespace vgpu
