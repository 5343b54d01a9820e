// The CUDA Driver API as a table of function pointers, loaded at run time with dlopen +
// cuGetProcAddress so that no vgpu binary links libcuda (it starts on machines without a GPU).
// Each entry is fetched at the ABI version its cudaTypedefs.h PFN type names, so the table
// matches the headers we compiled against whatever newer driver is installed. Also the one
// place that turns CUresult, cublasStatus_t and ncclResult_t into absl::Status.
//
// Internal to runtime/cuda (it includes cuda.h). Thread safety: a loaded CudaDriver is
// immutable; the ToStatus functions are safe from any thread.
#ifndef VGPU_RUNTIME_CUDA_CUDA_DRIVER_H_
#define VGPU_RUNTIME_CUDA_CUDA_DRIVER_H_

#include <cublas_api.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <nccl.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vgpu::cuda {

// Environment variable naming the driver library (default "libcuda.so.1").
inline constexpr char kDriverLibraryEnv[] = "VGPU_CUDA_DRIVER_LIBRARY";
inline constexpr char kDefaultDriverLibrary[] = "libcuda.so.1";

// The oldest driver the platform runs on: cuGetProcAddress_v2 (how every entry point is
// loaded) is 12.0's, and every required entry point's ABI version below is older. Checked with
// cuDriverGetVersion in CudaPlatform::Init.
inline constexpr int kMinimumDriverVersion = 12000;

// X(name, version): every required entry point and the ABI version of its PFN type.
#define VGPU_CUDA_REQUIRED_FUNCTIONS(X) \
  X(cuInit, 2000)                       \
  X(cuDriverGetVersion, 2020)           \
  X(cuDeviceGetCount, 2000)             \
  X(cuDeviceGet, 2000)                  \
  X(cuDeviceGetName, 2000)              \
  X(cuDeviceGetUuid, 11040)             \
  X(cuDeviceGetPCIBusId, 4010)          \
  X(cuDeviceGetAttribute, 2000)         \
  X(cuDeviceTotalMem, 3020)             \
  X(cuDevicePrimaryCtxRetain, 7000)     \
  X(cuDevicePrimaryCtxRelease, 11000)   \
  X(cuCtxSetCurrent, 4000)              \
  X(cuCtxGetCurrent, 4000)              \
  X(cuCtxPushCurrent, 4000)             \
  X(cuCtxPopCurrent, 4000)              \
  X(cuCtxEnablePeerAccess, 4000)        \
  X(cuCtxDisablePeerAccess, 4000)       \
  X(cuCtxGetStreamPriorityRange, 5050)  \
  X(cuMemGetInfo, 3020)                 \
  X(cuMemAlloc, 3020)                   \
  X(cuMemFree, 3020)                    \
  X(cuMemHostAlloc, 2020)               \
  X(cuMemFreeHost, 2000)                \
  X(cuMemHostGetDevicePointer, 3020)    \
  X(cuPointerGetAttribute, 4000)        \
  X(cuStreamCreateWithPriority, 5050)   \
  X(cuStreamDestroy, 4000)              \
  X(cuStreamSynchronize, 2000)          \
  X(cuStreamQuery, 2000)                \
  X(cuStreamWaitEvent, 3020)            \
  X(cuLaunchHostFunc, 10000)            \
  X(cuEventCreate, 2000)                \
  X(cuEventDestroy, 4000)               \
  X(cuEventRecord, 2000)                \
  X(cuEventQuery, 2000)                 \
  X(cuEventSynchronize, 2000)           \
  X(cuMemcpyHtoDAsync, 3020)            \
  X(cuMemcpyDtoHAsync, 3020)            \
  X(cuMemcpyDtoDAsync, 3020)            \
  X(cuMemcpyPeerAsync, 4000)            \
  X(cuMemsetD8Async, 3020)              \
  X(cuMemsetD32Async, 3020)             \
  X(cuDeviceCanAccessPeer, 4000)        \
  X(cuModuleLoadData, 2000)             \
  X(cuModuleUnload, 2000)               \
  X(cuModuleGetFunction, 2000)          \
  X(cuLaunchKernel, 4000)               \
  X(cuGetErrorName, 6000)               \
  X(cuGetErrorString, 6000)             \
  X(cuMemAddressReserve, 10020)         \
  X(cuMemAddressFree, 10020)            \
  X(cuMemCreate, 10020)                 \
  X(cuMemRelease, 10020)                \
  X(cuMemMap, 10020)                    \
  X(cuMemUnmap, 10020)                  \
  X(cuMemSetAccess, 10020)              \
  X(cuMemGetAllocationGranularity, 10020)

// Optional, null when the driver lacks them: green contexts (drivers >= 12.4/12.5) and
// stream-ordered memory pools (the `async` allocator; drivers >= 11.2).
#define VGPU_CUDA_OPTIONAL_FUNCTIONS(X) \
  X(cuDeviceGetDevResource, 12040)      \
  X(cuDevSmResourceSplitByCount, 12040) \
  X(cuDevResourceGenerateDesc, 12040)   \
  X(cuGreenCtxCreate, 12040)            \
  X(cuGreenCtxDestroy, 12040)           \
  X(cuCtxFromGreenCtx, 12040)           \
  X(cuGreenCtxGetDevResource, 12040)    \
  X(cuGreenCtxStreamCreate, 12050)      \
  X(cuMemPoolCreate, 11020)             \
  X(cuMemPoolDestroy, 11020)            \
  X(cuMemAllocFromPoolAsync, 11020)     \
  X(cuMemFreeAsync, 11020)              \
  X(cuMemPoolTrimTo, 11020)             \
  X(cuMemPoolSetAttribute, 11020)       \
  X(cuMemPoolGetAttribute, 11020)

struct CudaDriver {
#define VGPU_CUDA_DECLARE(name, version) PFN_##name##_v##version name = nullptr;
  VGPU_CUDA_REQUIRED_FUNCTIONS(VGPU_CUDA_DECLARE)
  VGPU_CUDA_OPTIONAL_FUNCTIONS(VGPU_CUDA_DECLARE)
#undef VGPU_CUDA_DECLARE

  std::string library;     // the name passed to dlopen
  int driver_version = 0;  // cuDriverGetVersion, e.g. 12040

  bool HasGreenContexts() const {
    return cuDeviceGetDevResource != nullptr && cuDevSmResourceSplitByCount != nullptr &&
           cuDevResourceGenerateDesc != nullptr && cuGreenCtxCreate != nullptr &&
           cuGreenCtxDestroy != nullptr && cuCtxFromGreenCtx != nullptr &&
           cuGreenCtxGetDevResource != nullptr && cuGreenCtxStreamCreate != nullptr;
  }
  bool HasMemoryPools() const {
    return cuMemPoolCreate != nullptr && cuMemPoolDestroy != nullptr &&
           cuMemAllocFromPoolAsync != nullptr && cuMemFreeAsync != nullptr &&
           cuMemPoolTrimTo != nullptr && cuMemPoolSetAttribute != nullptr &&
           cuMemPoolGetAttribute != nullptr;
  }
};

// dlopen(library) and resolve every entry point (the library stays loaded for the life of the
// process). Errors name the library and what was missing; nothing here calls cuInit.
absl::StatusOr<std::unique_ptr<CudaDriver>> LoadCudaDriver(const std::string& library);

// "CUDA_ERROR_OUT_OF_MEMORY" etc.: from the loaded driver when there is one, else a built-in
// table (so errors read the same without a driver); "CUresult <n>" for unknown codes.
std::string CuResultName(CUresult result);
// A driver version as cuDriverGetVersion gives it (12040), as people write it ("12.4").
std::string VersionString(int version);

// "CUBLAS_STATUS_NOT_SUPPORTED (15)", "ncclInvalidUsage (5)": a result as the call log and
// the error messages write it (also for codes this build does not know).
std::string CublasStatusName(cublasStatus_t status);
std::string NcclResultName(ncclResult_t result);

// The one mapping from vendor codes to absl codes. The message is
// "<context>: <NAME> (<code>): <description>". ToStatus(CUDA_SUCCESS) is OK.
absl::Status ToStatus(CUresult result, absl::string_view context);
absl::Status ToStatus(cublasStatus_t status, absl::string_view context);
absl::Status ToStatus(ncclResult_t result, absl::string_view context);

}  // namespace vgpu::cuda

#endif  // VGPU_RUNTIME_CUDA_CUDA_DRIVER_H_
