// The CUDA simulator's cuBLAS (libvgpu_cudasim_cublas.so, standing in for libcublas.so):
// the entry points the cuda platform uses, with cuBLAS 13's rules, computed with OpenBLAS on
// the simulated stream's thread. Tests-only (tests/cudasim.cmake builds it).
//
// What it enforces, and the sizes it charges (see docs/cuda.md):
// - A handle belongs to the device whose context is current at cublasCreate_v2 (none:
//   CUBLAS_STATUS_NOT_INITIALIZED) and takes kHandleBytes (4 MiB) of that device's memory,
//   as the real handle's internal buffers do.
// - A compute call with no context current, with another device's context current, or on a
//   stream of another device fails with CUBLAS_STATUS_EXECUTION_FAILED (on a real GPU the
//   kernel launch fails); a destroyed or unknown handle gives CUBLAS_STATUS_NOT_INITIALIZED.
// - The first compute call on a stream with no user workspace takes the default workspace
//   (32 MiB on cc >= 9.0, 4 MiB before, as cuBLAS 12/13) from device memory, once per
//   (handle, stream), until cublasDestroy. cublasSetWorkspace_v2 with a device buffer
//   (256-byte aligned, device memory throughout: one allocation or back-to-back mappings)
//   avoids it; cublasSetStream_v2 resets the handle to the default workspace, as cuBLAS
//   documents, so the platform must set its workspace again after every cublasSetStream. A
//   GEMM writes the user workspace (the race detector sees two streams sharing one).
// - Alpha and beta are host pointers (CUBLAS_POINTER_MODE_HOST), read at call time.
// - Every entry point returns CUBLAS_STATUS_NOT_SUPPORTED when called from a cuLaunchHostFunc
//   callback: the real library would make CUDA calls there, which cuda.h forbids, and the
//   closest cuBLAS code to CUDA_ERROR_NOT_PERMITTED is "not supported".
// - One handle used from two threads at once (cuBLAS handles are not thread-safe) fails the
//   second call with CUBLAS_STATUS_INTERNAL_ERROR and says so on stderr.
//
// Thread safety: every entry point may be called from any thread; handles are tracked under
// one registry mutex.
#include <cblas.h>
#include <cublas_api.h>
#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "vgpu/tests/cudasim/cudasim.h"

namespace vgpu::cudasim {
namespace {

constexpr uint64_t kHandleBytes = uint64_t{4} << 20;
constexpr uint64_t kDefaultWorkspaceHopper = uint64_t{32} << 20;
constexpr uint64_t kDefaultWorkspaceOlder = uint64_t{4} << 20;
constexpr uint64_t kWorkspaceAlignment = 256;

struct Handle {
  int device = 0;
  std::atomic<bool> busy{false};
  // Guarded by `busy` (one thread at a time, checked).
  CUstream stream = nullptr;
  CUdeviceptr workspace = 0;  // a user workspace, 0 for the default one
  uint64_t workspace_bytes = 0;
  std::set<CUstream> default_workspace_streams;  // streams whose default workspace is charged
  uint64_t charged = kHandleBytes;
};

struct Registry {
  std::mutex mu;
  std::set<Handle*> live;
};

Registry& Handles() {
  static Registry* r = new Registry();
  return *r;
}

uint64_t DefaultWorkspaceBytes(int device) {
  using GetAttribute = CUresult (*)(int*, CUdevice_attribute, CUdevice);
  static GetAttribute get = DriverFunction<GetAttribute>("cuDeviceGetAttribute", 2000);
  int major = 0;
  if (get == nullptr ||
      get(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device) != CUDA_SUCCESS) {
    return kDefaultWorkspaceHopper;
  }
  return major >= 9 ? kDefaultWorkspaceHopper : kDefaultWorkspaceOlder;
}

// True when [ptr, ptr + bytes) is device memory throughout: one allocation, or mappings back
// to back in a reserved range (cuMemMap pages; PyTorch's expandable segments hand cuBLAS such
// workspaces, and the library takes them).
bool IsDeviceRange(CUdeviceptr ptr, uint64_t bytes) {
  using GetPointerAttribute = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);
  static GetPointerAttribute get =
      DriverFunction<GetPointerAttribute>("cuPointerGetAttribute", 4000);
  if (get == nullptr || bytes > UINT64_MAX - ptr) return false;
  for (CUdeviceptr at = ptr; at < ptr + bytes;) {
    unsigned int type = 0;
    if (get(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, at) != CUDA_SUCCESS ||
        type != CU_MEMORYTYPE_DEVICE) {
      return false;
    }
    CUdeviceptr start = 0;
    size_t size = 0;
    if (get(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, at) != CUDA_SUCCESS ||
        get(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, at) != CUDA_SUCCESS || size == 0 ||
        at < start || at - start >= size) {
      return false;
    }
    at = start + size;
  }
  return true;
}

// Holds a live handle for the duration of one entry point.
class Use {
 public:
  explicit Use(cublasHandle_t handle) {
    auto* h = reinterpret_cast<Handle*>(handle);
    std::lock_guard<std::mutex> l(Handles().mu);
    if (h == nullptr || Handles().live.count(h) == 0) {
      status_ = CUBLAS_STATUS_NOT_INITIALIZED;
      return;
    }
    if (h->busy.exchange(true, std::memory_order_acquire)) {
      std::fprintf(stderr,
                   "cudasim cuBLAS: handle %p used from two threads at once (cuBLAS handles "
                   "are not thread-safe)\n",
                   static_cast<void*>(h));
      Trace("cublas: handle used from two threads at once");
      status_ = CUBLAS_STATUS_INTERNAL_ERROR;
      return;
    }
    handle_ = h;
  }
  ~Use() {
    if (handle_ != nullptr) handle_->busy.store(false, std::memory_order_release);
  }
  Use(const Use&) = delete;
  Use& operator=(const Use&) = delete;

  cublasStatus_t status() const { return status_; }
  Handle* operator->() const { return handle_; }
  Handle* get() const { return handle_; }

 private:
  Handle* handle_ = nullptr;
  cublasStatus_t status_ = CUBLAS_STATUS_SUCCESS;
};

cublasStatus_t FromCuda(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS:
      return CUBLAS_STATUS_SUCCESS;
    case CUDA_ERROR_NOT_PERMITTED:
      return CUBLAS_STATUS_NOT_SUPPORTED;
    case CUDA_ERROR_OUT_OF_MEMORY:
      return CUBLAS_STATUS_ALLOC_FAILED;
    default:
      return CUBLAS_STATUS_EXECUTION_FAILED;
  }
}

// Bytes spanned by `count` elements `inc` apart (any sign), as BLAS addresses them.
uint64_t VectorBytes(int count, int inc) {
  if (count <= 0) return 0;
  const uint64_t step = static_cast<uint64_t>(inc < 0 ? -static_cast<int64_t>(inc) : inc);
  return (1 + static_cast<uint64_t>(count - 1) * step) * sizeof(float);
}

// Bytes of a column-major rows x cols matrix with leading dimension ld.
uint64_t MatrixBytes(int rows, int cols, int ld) {
  if (rows <= 0 || cols <= 0) return 0;
  return (static_cast<uint64_t>(ld) * static_cast<uint64_t>(cols - 1) +
          static_cast<uint64_t>(rows)) *
         sizeof(float);
}

// The checks every compute call makes before it enqueues, and the default workspace: the
// current context and the stream must be the handle's device's.
cublasStatus_t PrepareLaunch(Handle* h, const char* what) {
  int current = -1;
  if (CurrentDevice(&current) != CUDA_SUCCESS) {
    Trace(std::string("cublas: ") + what + " with no current context");
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  if (current != h->device) {
    Trace(std::string("cublas: ") + what + " on a handle of device " + std::to_string(h->device) +
          " while device " + std::to_string(current) + "'s context is current");
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  int stream_device = -1;
  if (StreamDevice(h->stream, &stream_device) != CUDA_SUCCESS || stream_device != h->device) {
    Trace(std::string("cublas: ") + what + " on a stream that is not device " +
          std::to_string(h->device) + "'s");
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  if (h->workspace == 0 && h->default_workspace_streams.count(h->stream) == 0) {
    const uint64_t bytes = DefaultWorkspaceBytes(h->device);
    if (ChargeDeviceMemory(h->device, bytes, "cuBLAS default workspace") != CUDA_SUCCESS) {
      return CUBLAS_STATUS_ALLOC_FAILED;
    }
    h->default_workspace_streams.insert(h->stream);
    h->charged += bytes;
  }
  return CUBLAS_STATUS_SUCCESS;
}

float* HostFloats(const WorkContext& ctx, const void* device_ptr) {
  return static_cast<float*>(ctx.host(reinterpret_cast<CUdeviceptr>(device_ptr)));
}

CBLAS_TRANSPOSE Blas(cublasOperation_t op) { return op == CUBLAS_OP_N ? CblasNoTrans : CblasTrans; }

}  // namespace
}  // namespace vgpu::cudasim

using namespace vgpu::cudasim;  // NOLINT(build/namespaces): C entry points below

extern "C" {

VGPU_CUDASIM_EXPORT cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (InHostCallback()) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  int device = -1;
  if (CurrentDevice(&device) != CUDA_SUCCESS) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (ChargeDeviceMemory(device, kHandleBytes, "cuBLAS handle") != CUDA_SUCCESS) {
    return CUBLAS_STATUS_ALLOC_FAILED;
  }
  auto* h = new Handle();
  h->device = device;
  {
    std::lock_guard<std::mutex> l(Handles().mu);
    Handles().live.insert(h);
  }
  *handle = reinterpret_cast<cublasHandle_t>(h);
  return CUBLAS_STATUS_SUCCESS;
}

VGPU_CUDASIM_EXPORT cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (InHostCallback()) return CUBLAS_STATUS_NOT_SUPPORTED;
  auto* h = reinterpret_cast<Handle*>(handle);
  {
    std::lock_guard<std::mutex> l(Handles().mu);
    if (h == nullptr || Handles().live.count(h) == 0) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (h->busy.load(std::memory_order_acquire)) {
      std::fprintf(stderr, "cudasim cuBLAS: handle %p destroyed while another thread uses it\n",
                   static_cast<void*>(h));
      return CUBLAS_STATUS_INTERNAL_ERROR;
    }
    Handles().live.erase(h);
  }
  // Work already enqueued holds copies of what it needs, never the handle.
  ReleaseDeviceMemory(h->device, h->charged);
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}

VGPU_CUDASIM_EXPORT cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (InHostCallback()) return CUBLAS_STATUS_NOT_SUPPORTED;
  Use h(handle);
  if (h.status() != CUBLAS_STATUS_SUCCESS) return h.status();
  h->stream = reinterpret_cast<CUstream>(stream);
  // cuBLAS: "unconditionally resets the cuBLAS library workspace back to the default
  // workspace pool".
  h->workspace = 0;
  h->workspace_bytes = 0;
  return CUBLAS_STATUS_SUCCESS;
}

VGPU_CUDASIM_EXPORT cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  if (InHostCallback()) return CUBLAS_STATUS_NOT_SUPPORTED;
  Use h(handle);
  if (h.status() != CUBLAS_STATUS_SUCCESS) return h.status();
  if (stream == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *stream = reinterpret_cast<cudaStream_t>(h->stream);
  return CUBLAS_STATUS_SUCCESS;
}

VGPU_CUDASIM_EXPORT cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace,
                                                         size_t bytes) {
  if (InHostCallback()) return CUBLAS_STATUS_NOT_SUPPORTED;
  Use h(handle);
  if (h.status() != CUBLAS_STATUS_SUCCESS) return h.status();
  const auto ptr = reinterpret_cast<CUdeviceptr>(workspace);
  if (ptr == 0 || bytes == 0) {
    // No user workspace: back to the default one.
    if (ptr != 0 || bytes != 0) return CUBLAS_STATUS_INVALID_VALUE;
    h->workspace = 0;
    h->workspace_bytes = 0;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (ptr % kWorkspaceAlignment != 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (!IsDeviceRange(ptr, bytes)) {
    Trace("cublas: cublasSetWorkspace_v2 with a buffer that is not device memory throughout");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  h->workspace = ptr;
  h->workspace_bytes = bytes;
  return CUBLAS_STATUS_SUCCESS;
}

// cuBLAS ignores the handle here; so does the simulator.
VGPU_CUDASIM_EXPORT cublasStatus_t cublasGetVersion_v2(cublasHandle_t, int* version) {
  if (InHostCallback()) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (version == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *version = CUBLAS_VERSION;
  return CUBLAS_STATUS_SUCCESS;
}

VGPU_CUDASIM_EXPORT cublasStatus_t cublasGetProperty(libraryPropertyType type, int* value) {
  if (InHostCallback()) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (value == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (type) {
    case MAJOR_VERSION:
      *value = CUBLAS_VER_MAJOR;
      return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION:
      *value = CUBLAS_VER_MINOR;
      return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL:
      *value = CUBLAS_VER_PATCH;
      return CUBLAS_STATUS_SUCCESS;
    default:
      return CUBLAS_STATUS_INVALID_VALUE;
  }
}

VGPU_CUDASIM_EXPORT cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                                                  cublasOperation_t transb, int m, int n, int k,
                                                  const float* alpha, const float* A, int lda,
                                                  const float* B, int ldb, const float* beta,
                                                  float* C, int ldc) {
  if (InHostCallback()) return CUBLAS_STATUS_NOT_SUPPORTED;
  Use h(handle);
  if (h.status() != CUBLAS_STATUS_SUCCESS) return h.status();
  auto valid_op = [](cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T; };
  const int a_rows = transa == CUBLAS_OP_N ? m : k;
  const int b_rows = transb == CUBLAS_OP_N ? k : n;
  if (!valid_op(transa) || !valid_op(transb) || m < 0 || n < 0 || k < 0 ||
      lda < std::max(1, a_rows) || ldb < std::max(1, b_rows) || ldc < std::max(1, m) ||
      alpha == nullptr || beta == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;  // cuBLAS returns at once
  if (cublasStatus_t s = PrepareLaunch(h.get(), "cublasSgemm_v2"); s != CUBLAS_STATUS_SUCCESS) {
    return s;
  }
  const float a = *alpha, b = *beta;  // pointer mode host: read now
  std::vector<Access> accesses;
  if (k > 0) {
    accesses.push_back({reinterpret_cast<CUdeviceptr>(A),
                        MatrixBytes(a_rows, transa == CUBLAS_OP_N ? k : m, lda), false});
    accesses.push_back({reinterpret_cast<CUdeviceptr>(B),
                        MatrixBytes(b_rows, transb == CUBLAS_OP_N ? n : k, ldb), false});
  }
  accesses.push_back({reinterpret_cast<CUdeviceptr>(C), MatrixBytes(m, n, ldc), true});
  if (h->workspace != 0) accesses.push_back({h->workspace, h->workspace_bytes, true});
  Work work = [=](const WorkContext& ctx) {
    float* c = HostFloats(ctx, C);
    if (k == 0) {
      // C = beta * C (BLAS with k == 0 never reads A or B).
      for (int j = 0; j < n; ++j) {
        for (int i = 0; i < m; ++i) {
          float& x = c[static_cast<size_t>(j) * ldc + i];
          x = b == 0.0f ? 0.0f : b * x;
        }
      }
      return CUDA_SUCCESS;
    }
    cblas_sgemm(CblasColMajor, Blas(transa), Blas(transb), m, n, k, a, HostFloats(ctx, A), lda,
                HostFloats(ctx, B), ldb, b, c, ldc);
    return CUDA_SUCCESS;
  };
  return FromCuda(Enqueue(h->stream, std::move(accesses), std::move(work), "cublasSgemm_v2"));
}

VGPU_CUDASIM_EXPORT cublasStatus_t cublasSaxpy_v2(cublasHandle_t handle, int n, const float* alpha,
                                                  const float* x, int incx, float* y, int incy) {
  if (InHostCallback()) return CUBLAS_STATUS_NOT_SUPPORTED;
  Use h(handle);
  if (h.status() != CUBLAS_STATUS_SUCCESS) return h.status();
  if (alpha == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (n <= 0) return CUBLAS_STATUS_SUCCESS;
  if (cublasStatus_t s = PrepareLaunch(h.get(), "cublasSaxpy_v2"); s != CUBLAS_STATUS_SUCCESS) {
    return s;
  }
  const float a = *alpha;
  std::vector<Access> accesses = {{reinterpret_cast<CUdeviceptr>(x), VectorBytes(n, incx), false},
                                  {reinterpret_cast<CUdeviceptr>(y), VectorBytes(n, incy), true}};
  Work work = [=](const WorkContext& ctx) {
    cblas_saxpy(n, a, HostFloats(ctx, x), incx, HostFloats(ctx, y), incy);
    return CUDA_SUCCESS;
  };
  return FromCuda(Enqueue(h->stream, std::move(accesses), std::move(work), "cublasSaxpy_v2"));
}

VGPU_CUDASIM_EXPORT cublasStatus_t cublasSscal_v2(cublasHandle_t handle, int n, const float* alpha,
                                                  float* x, int incx) {
  if (InHostCallback()) return CUBLAS_STATUS_NOT_SUPPORTED;
  Use h(handle);
  if (h.status() != CUBLAS_STATUS_SUCCESS) return h.status();
  if (alpha == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (n <= 0 || incx <= 0) return CUBLAS_STATUS_SUCCESS;  // BLAS: nothing to do
  if (cublasStatus_t s = PrepareLaunch(h.get(), "cublasSscal_v2"); s != CUBLAS_STATUS_SUCCESS) {
    return s;
  }
  const float a = *alpha;
  std::vector<Access> accesses = {{reinterpret_cast<CUdeviceptr>(x), VectorBytes(n, incx), true}};
  Work work = [=](const WorkContext& ctx) {
    cblas_sscal(n, a, HostFloats(ctx, x), incx);
    return CUDA_SUCCESS;
  };
  return FromCuda(Enqueue(h->stream, std::move(accesses), std::move(work), "cublasSscal_v2"));
}

}  // extern "C"
