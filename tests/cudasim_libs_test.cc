// The CUDA simulator's cuBLAS and NCCL (tests/cudasim/cublas.cc, nccl.cc), driven directly
// through dlopen as the platform would: GEMM against cblas, the workspace charged in
// cuMemGetInfo, handle and context rules, NCCL collectives on the two devices of the `small`
// profile, "Duplicate GPU detected", group semantics, a missing wait upstream caught, and both
// libraries refusing calls from host callbacks.
#include <cblas.h>
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#if VGPU_HAVE_CUDA
#include <cublas_api.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <nccl.h>
#endif

namespace {

#if VGPU_HAVE_CUDA

using ::testing::HasSubstr;

// Settings read once by the simulator: the small profile, and NCCL barriers that give up in
// seconds (a test that leaves a rank behind then fails instead of hanging).
[[maybe_unused]] const bool kEnv = [] {
  setenv("VGPU_CUDASIM_PROFILE", "small", 1);
  setenv("VGPU_CUDASIM_NCCL_TIMEOUT_S", "5", 1);
  return true;
}();

void* Open(const char* name) {
  const std::string path = std::string(VGPU_CUDASIM_LIBDIR) + "/" + name;
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) ADD_FAILURE() << dlerror();
  return h;
}

template <typename Fn>
Fn Sym(void* lib, const char* name) {
  auto fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (fn == nullptr) ADD_FAILURE() << "missing " << name;
  return fn;
}

// The driver entry points the tests use, through cuGetProcAddress_v2 as the platform does.
struct Driver {
  PFN_cuInit_v2000 Init;
  PFN_cuDevicePrimaryCtxRetain_v7000 PrimaryCtxRetain;
  PFN_cuDevicePrimaryCtxRelease_v11000 PrimaryCtxRelease;
  PFN_cuDeviceGetPCIBusId_v4010 DeviceGetPCIBusId;
  PFN_cuCtxSetCurrent_v4000 CtxSetCurrent;
  PFN_cuMemGetInfo_v3020 MemGetInfo;
  PFN_cuMemAlloc_v3020 MemAlloc;
  PFN_cuMemFree_v3020 MemFree;
  PFN_cuMemHostAlloc_v2020 MemHostAlloc;
  PFN_cuStreamCreate_v2000 StreamCreate;
  PFN_cuStreamDestroy_v4000 StreamDestroy;
  PFN_cuStreamSynchronize_v2000 StreamSynchronize;
  PFN_cuLaunchHostFunc_v10000 LaunchHostFunc;
  PFN_cuEventCreate_v2000 EventCreate;
  PFN_cuEventRecord_v2000 EventRecord;
  PFN_cuEventDestroy_v4000 EventDestroy;
  PFN_cuStreamWaitEvent_v3020 StreamWaitEvent;
  PFN_cuMemcpyHtoDAsync_v3020 MemcpyHtoDAsync;
  PFN_cuMemcpyDtoHAsync_v3020 MemcpyDtoHAsync;
  unsigned long long (*Counter)(const char*);  // NOLINT(runtime/int)
};

struct Cublas {
  decltype(&cublasCreate_v2) Create;
  decltype(&cublasDestroy_v2) Destroy;
  decltype(&cublasSetStream_v2) SetStream;
  decltype(&cublasGetStream_v2) GetStream;
  decltype(&cublasSetWorkspace_v2) SetWorkspace;
  decltype(&cublasSgemm_v2) Sgemm;
  decltype(&cublasSaxpy_v2) Saxpy;
  decltype(&cublasSscal_v2) Sscal;
  decltype(&cublasGetVersion_v2) GetVersion;
  decltype(&cublasGetProperty) GetProperty;
};

struct Nccl {
  decltype(&ncclGetVersion) GetVersion;
  decltype(&ncclGetUniqueId) GetUniqueId;
  decltype(&ncclCommInitRank) CommInitRank;
  decltype(&ncclCommInitAll) CommInitAll;
  decltype(&ncclCommDestroy) CommDestroy;
  decltype(&ncclCommCount) CommCount;
  decltype(&ncclCommCuDevice) CommCuDevice;
  decltype(&ncclCommUserRank) CommUserRank;
  decltype(&ncclGetLastError) GetLastError;
  decltype(&ncclGroupStart) GroupStart;
  decltype(&ncclGroupEnd) GroupEnd;
  decltype(&ncclAllReduce) AllReduce;
  decltype(&ncclReduceScatter) ReduceScatter;
  decltype(&ncclAllGather) AllGather;
  decltype(&ncclBroadcast) Broadcast;
  decltype(&ncclReduce) Reduce;
};

Driver* D() {
  static Driver* d = [] {
    auto* d = new Driver();
    void* lib = Open("libcuda.so.1");
    auto get_proc = Sym<PFN_cuGetProcAddress_v12000>(lib, "cuGetProcAddress_v2");
    auto get = [&](auto& fn, const char* name, int version) {
      void* p = nullptr;
      CUdriverProcAddressQueryResult found;
      EXPECT_EQ(get_proc(name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &found), CUDA_SUCCESS)
          << name;
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    };
    get(d->Init, "cuInit", 2000);
    get(d->PrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 7000);
    get(d->PrimaryCtxRelease, "cuDevicePrimaryCtxRelease", 11000);
    get(d->DeviceGetPCIBusId, "cuDeviceGetPCIBusId", 4010);
    get(d->CtxSetCurrent, "cuCtxSetCurrent", 4000);
    get(d->MemGetInfo, "cuMemGetInfo", 3020);
    get(d->MemAlloc, "cuMemAlloc", 3020);
    get(d->MemFree, "cuMemFree", 3020);
    get(d->MemHostAlloc, "cuMemHostAlloc", 2020);
    get(d->StreamCreate, "cuStreamCreate", 2000);
    get(d->StreamDestroy, "cuStreamDestroy", 4000);
    get(d->StreamSynchronize, "cuStreamSynchronize", 2000);
    get(d->LaunchHostFunc, "cuLaunchHostFunc", 10000);
    get(d->EventCreate, "cuEventCreate", 2000);
    get(d->EventRecord, "cuEventRecord", 2000);
    get(d->EventDestroy, "cuEventDestroy", 4000);
    get(d->StreamWaitEvent, "cuStreamWaitEvent", 3020);
    get(d->MemcpyHtoDAsync, "cuMemcpyHtoDAsync", 3020);
    get(d->MemcpyDtoHAsync, "cuMemcpyDtoHAsync", 3020);
    d->Counter = Sym<unsigned long long (*)(const char*)>(lib, "vgpu_cudasim_counter");
    EXPECT_EQ(d->Init(0), CUDA_SUCCESS);
    return d;
  }();
  return d;
}

Cublas* B() {
  static Cublas* b = [] {
    auto* b = new Cublas();
    void* lib = Open("libcublas.so.13");
    b->Create = Sym<decltype(b->Create)>(lib, "cublasCreate_v2");
    b->Destroy = Sym<decltype(b->Destroy)>(lib, "cublasDestroy_v2");
    b->SetStream = Sym<decltype(b->SetStream)>(lib, "cublasSetStream_v2");
    b->GetStream = Sym<decltype(b->GetStream)>(lib, "cublasGetStream_v2");
    b->SetWorkspace = Sym<decltype(b->SetWorkspace)>(lib, "cublasSetWorkspace_v2");
    b->Sgemm = Sym<decltype(b->Sgemm)>(lib, "cublasSgemm_v2");
    b->Saxpy = Sym<decltype(b->Saxpy)>(lib, "cublasSaxpy_v2");
    b->Sscal = Sym<decltype(b->Sscal)>(lib, "cublasSscal_v2");
    b->GetVersion = Sym<decltype(b->GetVersion)>(lib, "cublasGetVersion_v2");
    b->GetProperty = Sym<decltype(b->GetProperty)>(lib, "cublasGetProperty");
    return b;
  }();
  return b;
}

Nccl* N() {
  static Nccl* n = [] {
    auto* n = new Nccl();
    void* lib = Open("libnccl.so.2");
#define VGPU_NCCL_SYM(field, name) n->field = Sym<decltype(n->field)>(lib, name)
    VGPU_NCCL_SYM(GetVersion, "ncclGetVersion");
    VGPU_NCCL_SYM(GetUniqueId, "ncclGetUniqueId");
    VGPU_NCCL_SYM(CommInitRank, "ncclCommInitRank");
    VGPU_NCCL_SYM(CommInitAll, "ncclCommInitAll");
    VGPU_NCCL_SYM(CommDestroy, "ncclCommDestroy");
    VGPU_NCCL_SYM(CommCount, "ncclCommCount");
    VGPU_NCCL_SYM(CommCuDevice, "ncclCommCuDevice");
    VGPU_NCCL_SYM(CommUserRank, "ncclCommUserRank");
    VGPU_NCCL_SYM(GetLastError, "ncclGetLastError");
    VGPU_NCCL_SYM(GroupStart, "ncclGroupStart");
    VGPU_NCCL_SYM(GroupEnd, "ncclGroupEnd");
    VGPU_NCCL_SYM(AllReduce, "ncclAllReduce");
    VGPU_NCCL_SYM(ReduceScatter, "ncclReduceScatter");
    VGPU_NCCL_SYM(AllGather, "ncclAllGather");
    VGPU_NCCL_SYM(Broadcast, "ncclBroadcast");
    VGPU_NCCL_SYM(Reduce, "ncclReduce");
#undef VGPU_NCCL_SYM
    return n;
  }();
  return n;
}

// Each test gets fresh primary contexts on both devices (released in TearDown, so a sticky
// error from one test never reaches the next) and one stream on each.
class CudasimLibsTest : public ::testing::Test {
 protected:
  static constexpr int kDevices = 2;

  void SetUp() override {
    for (int d = 0; d < kDevices; ++d) {
      ASSERT_EQ(D()->PrimaryCtxRetain(&ctx_[d], d), CUDA_SUCCESS);
      Use(d);
      ASSERT_EQ(D()->StreamCreate(&stream_[d], CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    }
    Use(0);
  }
  void TearDown() override {
    for (int d = 0; d < kDevices; ++d) {
      Use(d);
      D()->StreamSynchronize(stream_[d]);
      for (CUdeviceptr p : allocations_[d]) D()->MemFree(p);
      D()->StreamDestroy(stream_[d]);
    }
    D()->CtxSetCurrent(nullptr);
    for (int d = 0; d < kDevices; ++d) D()->PrimaryCtxRelease(d);
  }

  void Use(int d) { ASSERT_EQ(D()->CtxSetCurrent(ctx_[d]), CUDA_SUCCESS); }

  // Device memory on device d holding `values` (d's context stays current).
  float* Upload(int d, const std::vector<float>& values) {
    Use(d);
    CUdeviceptr p = 0;
    EXPECT_EQ(D()->MemAlloc(&p, values.size() * sizeof(float)), CUDA_SUCCESS);
    allocations_[d].push_back(p);
    EXPECT_EQ(D()->MemcpyHtoDAsync(p, values.data(), values.size() * sizeof(float), stream_[d]),
              CUDA_SUCCESS);
    return reinterpret_cast<float*>(p);
  }
  float* AllocFloats(int d, size_t n) { return Upload(d, std::vector<float>(n, 0.0f)); }

  std::vector<float> Download(int d, const float* p, size_t n) {
    Use(d);
    std::vector<float> out(n);
    EXPECT_EQ(D()->MemcpyDtoHAsync(out.data(), reinterpret_cast<CUdeviceptr>(p), n * sizeof(float),
                                   stream_[d]),
              CUDA_SUCCESS);
    EXPECT_EQ(D()->StreamSynchronize(stream_[d]), CUDA_SUCCESS);
    return out;
  }

  uint64_t FreeBytes(int d) {
    Use(d);
    size_t free = 0, total = 0;
    EXPECT_EQ(D()->MemGetInfo(&free, &total), CUDA_SUCCESS);
    return free;
  }

  // Both devices' communicators in one clique, from ncclCommInitAll.
  void InitAll(ncclComm_t comms[2]) {
    int devs[2] = {0, 1};
    ASSERT_EQ(N()->CommInitAll(comms, 2, devs), ncclSuccess) << N()->GetLastError(nullptr);
  }

  CUcontext ctx_[kDevices] = {};
  CUstream stream_[kDevices] = {};
  std::vector<CUdeviceptr> allocations_[kDevices];
};

std::vector<float> Iota(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

// ---- cuBLAS ---------------------------------------------------------------------------------

TEST_F(CudasimLibsTest, SgemmMatchesCblasForEveryTranspose) {
  cublasHandle_t h = nullptr;
  ASSERT_EQ(B()->Create(&h), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(B()->SetStream(h, stream_[0]), CUBLAS_STATUS_SUCCESS);
  const int m = 5, n = 4, k = 3, ld = 7;  // leading dimensions larger than the matrices
  const std::vector<float> a = Iota(ld * 7, 0.5f), b = Iota(ld * 7, -3.0f), c = Iota(ld * 4, 1);
  for (cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T}) {
    for (cublasOperation_t tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      float* da = Upload(0, a);
      float* db = Upload(0, b);
      float* dc = Upload(0, c);
      const float alpha = 1.5f, beta = -0.5f;
      ASSERT_EQ(B()->Sgemm(h, ta, tb, m, n, k, &alpha, da, ld, db, ld, &beta, dc, ld),
                CUBLAS_STATUS_SUCCESS);
      std::vector<float> want = c;
      cblas_sgemm(CblasColMajor, ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
                  tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, m, n, k, alpha, a.data(), ld,
                  b.data(), ld, beta, want.data(), ld);
      EXPECT_EQ(Download(0, dc, c.size()), want) << "transa=" << ta << " transb=" << tb;
    }
  }
  float* x = Upload(0, {1, 2, 3});
  float* y = Upload(0, {10, 20, 30});
  const float two = 2, half = 0.5f;
  ASSERT_EQ(B()->Saxpy(h, 3, &two, x, 1, y, 1), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(B()->Sscal(h, 3, &half, y, 1), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(Download(0, y, 3), (std::vector<float>{6, 12, 18}));
  EXPECT_EQ(B()->Destroy(h), CUBLAS_STATUS_SUCCESS);
}

TEST_F(CudasimLibsTest, HandleAndWorkspacesAreChargedToDeviceMemory) {
  float* a = Upload(0, Iota(16, 1));
  float* workspace = AllocFloats(0, 1 << 18);  // 1 MiB
  CUstream other = nullptr;
  ASSERT_EQ(D()->StreamCreate(&other, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(D()->StreamSynchronize(stream_[0]), CUDA_SUCCESS);
  const uint64_t start = FreeBytes(0);
  constexpr uint64_t kHandle = uint64_t{4} << 20;
  constexpr uint64_t kWorkspace = uint64_t{32} << 20;  // cc 9.0 (the small profile)
  cublasHandle_t h = nullptr;
  ASSERT_EQ(B()->Create(&h), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(start - FreeBytes(0), kHandle) << "handle";
  const float one = 1, zero = 0;
  auto gemm = [&] {
    return B()->Sgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a, 4, a, 4, &zero, a, 4);
  };
  ASSERT_EQ(B()->SetStream(h, stream_[0]), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(gemm(), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(start - FreeBytes(0), kHandle + kWorkspace) << "default workspace";
  ASSERT_EQ(gemm(), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(start - FreeBytes(0), kHandle + kWorkspace) << "charged twice on one stream";
  ASSERT_EQ(D()->StreamSynchronize(stream_[0]), CUDA_SUCCESS);
  // A user workspace on another stream: nothing more taken.
  ASSERT_EQ(B()->SetStream(h, other), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(B()->SetWorkspace(h, workspace, 1 << 20), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(gemm(), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(start - FreeBytes(0), kHandle + kWorkspace) << "a user workspace takes nothing";
  ASSERT_EQ(D()->StreamSynchronize(other), CUDA_SUCCESS);
  // cublasSetStream resets to the default workspace: the next call on `other` charges it.
  ASSERT_EQ(B()->SetStream(h, other), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(gemm(), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(start - FreeBytes(0), kHandle + 2 * kWorkspace);
  ASSERT_EQ(D()->StreamSynchronize(other), CUDA_SUCCESS);
  ASSERT_EQ(B()->Destroy(h), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(FreeBytes(0), start) << "cublasDestroy gives everything back";
  D()->StreamDestroy(other);
}

TEST_F(CudasimLibsTest, HandleRules) {
  cublasHandle_t h = nullptr;
  D()->CtxSetCurrent(nullptr);
  EXPECT_EQ(B()->Create(&h), CUBLAS_STATUS_NOT_INITIALIZED) << "no current context";
  EXPECT_EQ(B()->Create(nullptr), CUBLAS_STATUS_INVALID_VALUE);
  Use(0);
  ASSERT_EQ(B()->Create(&h), CUBLAS_STATUS_SUCCESS);
  float* a = Upload(0, Iota(16, 1));
  const float one = 1, zero = 0;
  // Another device's context current, or another device's stream: the launch fails.
  Use(1);
  EXPECT_EQ(B()->Sgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a, 4, a, 4, &zero, a, 4),
            CUBLAS_STATUS_EXECUTION_FAILED);
  Use(0);
  ASSERT_EQ(B()->SetStream(h, stream_[1]), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(B()->Sgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a, 4, a, 4, &zero, a, 4),
            CUBLAS_STATUS_EXECUTION_FAILED);
  ASSERT_EQ(B()->SetStream(h, stream_[0]), CUBLAS_STATUS_SUCCESS);
  CUstream got = nullptr;
  ASSERT_EQ(B()->GetStream(h, &got), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(got, stream_[0]);
  // Bad arguments.
  EXPECT_EQ(B()->Sgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a, 3, a, 4, &zero, a, 4),
            CUBLAS_STATUS_INVALID_VALUE)
      << "lda < m";
  EXPECT_EQ(B()->Sgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 4, 4, &one, a, 4, a, 4, &zero, a, 4),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(B()->SetWorkspace(h, reinterpret_cast<char*>(a) + 4, 64), CUBLAS_STATUS_INVALID_VALUE)
      << "misaligned";
  std::vector<float> host(64);
  EXPECT_EQ(B()->SetWorkspace(h, host.data(), 256), CUBLAS_STATUS_INVALID_VALUE) << "host memory";
  EXPECT_EQ(B()->SetWorkspace(h, a, 1 << 20), CUBLAS_STATUS_INVALID_VALUE) << "past the buffer";
  int version = 0;
  ASSERT_EQ(B()->GetVersion(h, &version), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(version, CUBLAS_VERSION);
  ASSERT_EQ(B()->Destroy(h), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(B()->Destroy(h), CUBLAS_STATUS_NOT_INITIALIZED) << "destroyed twice";
  EXPECT_EQ(B()->SetStream(h, stream_[0]), CUBLAS_STATUS_NOT_INITIALIZED) << "destroyed handle";
}

// Calls both libraries from a host callback; each must refuse.
struct CallbackResults {
  cublasHandle_t handle = nullptr;
  ncclComm_t comm = nullptr;
  float* data = nullptr;
  cublasStatus_t create = CUBLAS_STATUS_SUCCESS;
  cublasStatus_t sscal = CUBLAS_STATUS_SUCCESS;
  ncclResult_t all_reduce = ncclSuccess;
  ncclResult_t group_start = ncclSuccess;
};

TEST_F(CudasimLibsTest, CallsFromHostCallbacksAreRefused) {
  CallbackResults r;
  ASSERT_EQ(B()->Create(&r.handle), CUBLAS_STATUS_SUCCESS);
  ncclComm_t comms[2];
  InitAll(comms);
  r.comm = comms[0];
  r.data = Upload(0, {1, 2});
  ASSERT_EQ(D()->LaunchHostFunc(
                stream_[0],
                [](void* p) {
                  auto* r = static_cast<CallbackResults*>(p);
                  cublasHandle_t h = nullptr;
                  r->create = B()->Create(&h);
                  const float two = 2;
                  r->sscal = B()->Sscal(r->handle, 2, &two, r->data, 1);
                  r->all_reduce =
                      N()->AllReduce(r->data, r->data, 2, ncclFloat32, ncclSum, r->comm, nullptr);
                  r->group_start = N()->GroupStart();
                },
                &r),
            CUDA_SUCCESS);
  ASSERT_EQ(D()->StreamSynchronize(stream_[0]), CUDA_SUCCESS);
  EXPECT_EQ(r.create, CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(r.sscal, CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(r.all_reduce, ncclInvalidUsage);
  EXPECT_EQ(r.group_start, ncclInvalidUsage);
  EXPECT_EQ(Download(0, r.data, 2), (std::vector<float>{1, 2})) << "nothing ran";
  EXPECT_EQ(B()->Destroy(r.handle), CUBLAS_STATUS_SUCCESS);
  for (ncclComm_t c : comms) EXPECT_EQ(N()->CommDestroy(c), ncclSuccess);
}

// ---- NCCL -----------------------------------------------------------------------------------

TEST_F(CudasimLibsTest, NcclVersionAndCommunicatorQueries) {
  int version = 0;
  ASSERT_EQ(N()->GetVersion(&version), ncclSuccess);
  EXPECT_EQ(version, 22809);
  const uint64_t free0 = FreeBytes(0);
  ncclComm_t comms[2];
  InitAll(comms);
  // 8 MiB + 4 MiB x 2 x 2 channels x 1 peer.
  EXPECT_EQ(free0 - FreeBytes(0), uint64_t{24} << 20);
  for (int r = 0; r < 2; ++r) {
    int count = 0, device = -1, rank = -1;
    ASSERT_EQ(N()->CommCount(comms[r], &count), ncclSuccess);
    ASSERT_EQ(N()->CommCuDevice(comms[r], &device), ncclSuccess);
    ASSERT_EQ(N()->CommUserRank(comms[r], &rank), ncclSuccess);
    EXPECT_EQ(count, 2);
    EXPECT_EQ(device, r);
    EXPECT_EQ(rank, r);
  }
  for (ncclComm_t c : comms) EXPECT_EQ(N()->CommDestroy(c), ncclSuccess);
  EXPECT_EQ(FreeBytes(0), free0);
  EXPECT_EQ(N()->CommDestroy(comms[0]), ncclInvalidArgument) << "destroyed twice";
}

TEST_F(CudasimLibsTest, CollectivesAreCorrectOnTwoDevices) {
  ncclComm_t comms[2];
  InitAll(comms);
  const size_t n = 6;
  float* send[2] = {Upload(0, Iota(2 * n, 1)), Upload(1, Iota(2 * n, 100))};
  float* recv[2] = {AllocFloats(0, 2 * n), AllocFloats(1, 2 * n)};
  auto group = [&](auto call) {
    ASSERT_EQ(N()->GroupStart(), ncclSuccess);
    for (int r = 0; r < 2; ++r) ASSERT_EQ(call(r), ncclSuccess) << N()->GetLastError(nullptr);
    ASSERT_EQ(N()->GroupEnd(), ncclSuccess) << N()->GetLastError(nullptr);
  };
  const std::vector<float> s0 = Iota(2 * n, 1), s1 = Iota(2 * n, 100);
  // AllReduce sum, avg, max over the first n elements.
  for (ncclRedOp_t op : {ncclSum, ncclAvg, ncclMax, ncclMin, ncclProd}) {
    group([&](int r) {
      return N()->AllReduce(send[r], recv[r], n, ncclFloat32, op, comms[r], stream_[r]);
    });
    std::vector<float> want(n);
    for (size_t i = 0; i < n; ++i) {
      const float a = s0[i], b = s1[i];
      want[i] = op == ncclSum   ? a + b
                : op == ncclAvg ? (a + b) / 2
                : op == ncclMax ? std::max(a, b)
                : op == ncclMin ? std::min(a, b)
                                : a * b;
    }
    for (int r = 0; r < 2; ++r) EXPECT_EQ(Download(r, recv[r], n), want) << "op " << op;
  }
  // ReduceScatter: rank r gets the sum of everyone's block r.
  group([&](int r) {
    return N()->ReduceScatter(send[r], recv[r], n, ncclFloat32, ncclSum, comms[r], stream_[r]);
  });
  for (int r = 0; r < 2; ++r) {
    std::vector<float> want(n);
    for (size_t i = 0; i < n; ++i) want[i] = s0[r * n + i] + s1[r * n + i];
    EXPECT_EQ(Download(r, recv[r], n), want) << "ReduceScatter rank " << r;
  }
  // AllGather: everyone gets [rank 0's n, rank 1's n].
  group([&](int r) {
    return N()->AllGather(send[r], recv[r], n, ncclFloat32, comms[r], stream_[r]);
  });
  std::vector<float> gathered(s0.begin(), s0.begin() + n);
  gathered.insert(gathered.end(), s1.begin(), s1.begin() + n);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(Download(r, recv[r], 2 * n), gathered);
  // Broadcast from rank 1.
  group([&](int r) {
    return N()->Broadcast(send[r], recv[r], n, ncclFloat32, 1, comms[r], stream_[r]);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(Download(r, recv[r], n), std::vector<float>(s1.begin(), s1.begin() + n));
  }
  // In-place AllReduce.
  group([&](int r) {
    return N()->AllReduce(send[r], send[r], 2 * n, ncclFloat32, ncclSum, comms[r], stream_[r]);
  });
  std::vector<float> sum(2 * n);
  for (size_t i = 0; i < 2 * n; ++i) sum[i] = s0[i] + s1[i];
  for (int r = 0; r < 2; ++r) EXPECT_EQ(Download(r, send[r], 2 * n), sum);
  for (ncclComm_t c : comms) EXPECT_EQ(N()->CommDestroy(c), ncclSuccess);
}

TEST_F(CudasimLibsTest, InitRankRendezvousFromTwoThreads) {
  ncclUniqueId id;
  ASSERT_EQ(N()->GetUniqueId(&id), ncclSuccess);
  ncclComm_t comms[2] = {};
  ncclResult_t results[2] = {ncclInternalError, ncclInternalError};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      D()->CtxSetCurrent(ctx_[r]);
      results[r] = N()->CommInitRank(&comms[r], 2, id, r);
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(results[0], ncclSuccess);
  EXPECT_EQ(results[1], ncclSuccess);
  for (ncclComm_t c : comms) EXPECT_EQ(N()->CommDestroy(c), ncclSuccess);
}

TEST_F(CudasimLibsTest, TwoRanksOnOneDeviceIsDuplicateGpu) {
  ncclUniqueId id;
  ASSERT_EQ(N()->GetUniqueId(&id), ncclSuccess);
  ncclComm_t comms[2] = {};
  Use(0);  // both ranks on device 0, from one thread inside a group
  ASSERT_EQ(N()->GroupStart(), ncclSuccess);
  EXPECT_EQ(N()->CommInitRank(&comms[0], 2, id, 0), ncclSuccess);
  EXPECT_EQ(N()->CommInitRank(&comms[1], 2, id, 1), ncclSuccess);
  EXPECT_EQ(N()->GroupEnd(), ncclInvalidUsage);
  char bus[32] = {};
  ASSERT_EQ(D()->DeviceGetPCIBusId(bus, sizeof(bus), 0), CUDA_SUCCESS);
  std::string hex;
  for (char c : std::string(bus)) {
    if (c != ':' && c != '.') hex += c;
  }
  char want[128];
  std::snprintf(want, sizeof(want),
                "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device %llx",
                std::strtoull(hex.c_str(), nullptr, 16));
  EXPECT_STREQ(N()->GetLastError(nullptr), want);
  for (ncclComm_t c : comms) EXPECT_EQ(N()->CommDestroy(c), ncclSuccess);
  // ncclCommInitAll with a device twice: ncclInvalidUsage, as NCCL (which says nothing).
  int devs[2] = {1, 1};
  ncclComm_t all[2] = {};
  EXPECT_EQ(N()->CommInitAll(all, 2, devs), ncclInvalidUsage);
}

TEST_F(CudasimLibsTest, UngroupedCollectiveForTwoRanksFromOneThreadIsRefused) {
  ncclComm_t comms[2];
  InitAll(comms);
  float* buf[2] = {Upload(0, {1, 2}), Upload(1, {3, 4})};
  ASSERT_EQ(N()->AllReduce(buf[0], buf[0], 2, ncclFloat32, ncclSum, comms[0], stream_[0]),
            ncclSuccess);
  EXPECT_EQ(N()->AllReduce(buf[1], buf[1], 2, ncclFloat32, ncclSum, comms[1], stream_[1]),
            ncclInvalidUsage);
  EXPECT_THAT(N()->GetLastError(nullptr), HasSubstr("ncclGroupStart/ncclGroupEnd"));
  EXPECT_EQ(D()->StreamSynchronize(stream_[0]), CUDA_SUCCESS) << "rank 0 must not hang";
  // The clique is still usable afterwards, in a group.
  ASSERT_EQ(N()->GroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(N()->AllReduce(buf[r], buf[r], 2, ncclFloat32, ncclSum, comms[r], stream_[r]),
              ncclSuccess);
  }
  ASSERT_EQ(N()->GroupEnd(), ncclSuccess) << N()->GetLastError(nullptr);
  EXPECT_EQ(Download(1, buf[1], 2), (std::vector<float>{4, 6}));
  for (ncclComm_t c : comms) EXPECT_EQ(N()->CommDestroy(c), ncclSuccess);
}

TEST_F(CudasimLibsTest, BadCollectiveArgumentsAreInvalidArgument) {
  ncclComm_t comms[2];
  InitAll(comms);
  float* buf = Upload(0, {1});
  EXPECT_EQ(
      N()->AllReduce(buf, buf, 1, static_cast<ncclDataType_t>(99), ncclSum, comms[0], stream_[0]),
      ncclInvalidArgument);
  EXPECT_EQ(N()->AllReduce(nullptr, buf, 1, ncclFloat32, ncclSum, comms[0], stream_[0]),
            ncclInvalidArgument);
  EXPECT_EQ(N()->Broadcast(buf, buf, 1, ncclFloat32, 5, comms[0], stream_[0]), ncclInvalidArgument);
  EXPECT_EQ(N()->AllReduce(buf, buf, 1, ncclFloat32, ncclSum, comms[0], stream_[1]),
            ncclUnhandledCudaError)
      << "a stream of the other device";
  EXPECT_EQ(N()->GroupEnd(), ncclInvalidUsage) << "not in a group";
  for (ncclComm_t c : comms) EXPECT_EQ(N()->CommDestroy(c), ncclSuccess);
}

// Rank 1's input is written on another stream with no wait before the all-reduce: the
// simulator must see it (a race report, or a wrong sum), never a silently right answer. With
// the wait, the sum is right and no race is reported.
TEST_F(CudasimLibsTest, MissingWaitUpstreamIsCaught) {
  ncclComm_t comms[2];
  InitAll(comms);
  for (bool wait : {true, false}) {
    float* buf[2] = {Upload(0, {1, 1}), AllocFloats(1, 2)};
    ASSERT_EQ(D()->StreamSynchronize(stream_[0]), CUDA_SUCCESS);
    ASSERT_EQ(D()->StreamSynchronize(stream_[1]), CUDA_SUCCESS);
    Use(1);
    CUstream producer = nullptr;
    ASSERT_EQ(D()->StreamCreate(&producer, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    const std::vector<float> ten = {10, 10};
    ASSERT_EQ(D()->MemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(buf[1]), ten.data(),
                                   2 * sizeof(float), producer),
              CUDA_SUCCESS);
    if (wait) {
      CUevent e = nullptr;
      ASSERT_EQ(D()->EventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
      ASSERT_EQ(D()->EventRecord(e, producer), CUDA_SUCCESS);
      ASSERT_EQ(D()->StreamWaitEvent(stream_[1], e, 0), CUDA_SUCCESS);
      D()->EventDestroy(e);
    }
    const uint64_t races = D()->Counter("races");
    ASSERT_EQ(N()->GroupStart(), ncclSuccess);
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(N()->AllReduce(buf[r], buf[r], 2, ncclFloat32, ncclSum, comms[r], stream_[r]),
                ncclSuccess);
    }
    const ncclResult_t ended = N()->GroupEnd();
    // Without the wait the race may already be reported (a sticky context error) while
    // GroupEnd still enqueues the last rank's work: a busy machine runs the streams first.
    if (wait) {
      ASSERT_EQ(ended, ncclSuccess);
    } else {
      ASSERT_TRUE(ended == ncclSuccess || ended == ncclUnhandledCudaError) << ended;
    }
    Use(1);
    const CUresult sync1 = D()->StreamSynchronize(stream_[1]);
    Use(0);
    const CUresult sync0 = D()->StreamSynchronize(stream_[0]);
    Use(1);
    D()->StreamSynchronize(producer);
    D()->StreamDestroy(producer);
    if (wait) {
      ASSERT_EQ(sync0, CUDA_SUCCESS);
      ASSERT_EQ(sync1, CUDA_SUCCESS);
      EXPECT_EQ(D()->Counter("races"), races);
      EXPECT_EQ(Download(0, buf[0], 2), (std::vector<float>{11, 11}));
    } else {
      std::vector<float> got(2, 0.0f);
      if (sync0 == CUDA_SUCCESS) got = Download(0, buf[0], 2);
      const bool caught = D()->Counter("races") > races || got != std::vector<float>{11, 11};
      EXPECT_TRUE(caught) << "the missing wait went unnoticed";
    }
  }
  for (ncclComm_t c : comms) N()->CommDestroy(c);
}

#else  // VGPU_HAVE_CUDA

TEST(CudasimLibsTest, NeedsTheCudaBackend) { GTEST_SKIP() << "built without the cuda backend"; }

#endif  // VGPU_HAVE_CUDA

}  // namespace
