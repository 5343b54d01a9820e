#include "vgpu/runtime/cuda/cuda_driver.h"

#include <atomic>

#include "absl/strings/str_cat.h"
#include "vgpu/runtime/cuda/call_log.h"
#include "vgpu/runtime/cuda/dynamic_library.h"

namespace vgpu::cuda {
namespace {

// cuGetErrorName/String of the first driver loaded; ToStatus uses them when set.
std::atomic<PFN_cuGetErrorName_v6000> g_error_name{nullptr};
std::atomic<PFN_cuGetErrorString_v6000> g_error_string{nullptr};

// Built-in names of the codes we map or are likely to see, used when no driver is loaded.
const char* BuiltinName(CUresult r) {
  switch (r) {
#define VGPU_CASE(x) \
  case x:            \
    return #x;
    VGPU_CASE(CUDA_SUCCESS)
    VGPU_CASE(CUDA_ERROR_INVALID_VALUE)
    VGPU_CASE(CUDA_ERROR_OUT_OF_MEMORY)
    VGPU_CASE(CUDA_ERROR_NOT_INITIALIZED)
    VGPU_CASE(CUDA_ERROR_DEINITIALIZED)
    VGPU_CASE(CUDA_ERROR_STUB_LIBRARY)
    VGPU_CASE(CUDA_ERROR_DEVICE_UNAVAILABLE)
    VGPU_CASE(CUDA_ERROR_NO_DEVICE)
    VGPU_CASE(CUDA_ERROR_INVALID_DEVICE)
    VGPU_CASE(CUDA_ERROR_DEVICE_NOT_LICENSED)
    VGPU_CASE(CUDA_ERROR_INVALID_IMAGE)
    VGPU_CASE(CUDA_ERROR_INVALID_CONTEXT)
    VGPU_CASE(CUDA_ERROR_NO_BINARY_FOR_GPU)
    VGPU_CASE(CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
    VGPU_CASE(CUDA_ERROR_INVALID_PTX)
    VGPU_CASE(CUDA_ERROR_INVALID_SOURCE)
    VGPU_CASE(CUDA_ERROR_FILE_NOT_FOUND)
    VGPU_CASE(CUDA_ERROR_INVALID_HANDLE)
    VGPU_CASE(CUDA_ERROR_NOT_FOUND)
    VGPU_CASE(CUDA_ERROR_NOT_READY)
    VGPU_CASE(CUDA_ERROR_ILLEGAL_ADDRESS)
    VGPU_CASE(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
    VGPU_CASE(CUDA_ERROR_LAUNCH_TIMEOUT)
    VGPU_CASE(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
    VGPU_CASE(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED)
    VGPU_CASE(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED)
    VGPU_CASE(CUDA_ERROR_CONTEXT_IS_DESTROYED)
    VGPU_CASE(CUDA_ERROR_ASSERT)
    VGPU_CASE(CUDA_ERROR_ILLEGAL_INSTRUCTION)
    VGPU_CASE(CUDA_ERROR_MISALIGNED_ADDRESS)
    VGPU_CASE(CUDA_ERROR_LAUNCH_FAILED)
    VGPU_CASE(CUDA_ERROR_NOT_PERMITTED)
    VGPU_CASE(CUDA_ERROR_NOT_SUPPORTED)
    VGPU_CASE(CUDA_ERROR_SYSTEM_NOT_READY)
    VGPU_CASE(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH)
    VGPU_CASE(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE)
    VGPU_CASE(CUDA_ERROR_INVALID_RESOURCE_TYPE)
    VGPU_CASE(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION)
    VGPU_CASE(CUDA_ERROR_UNKNOWN)
#undef VGPU_CASE
    default:
      return nullptr;
  }
}

absl::StatusCode CodeFor(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS:
      return absl::StatusCode::kOk;
    case CUDA_ERROR_OUT_OF_MEMORY:
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
      return absl::StatusCode::kResourceExhausted;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_INVALID_DEVICE:
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_INVALID_SOURCE:
    case CUDA_ERROR_INVALID_RESOURCE_TYPE:
    case CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION:
      return absl::StatusCode::kInvalidArgument;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_NOT_FOUND:
    case CUDA_ERROR_FILE_NOT_FOUND:
      return absl::StatusCode::kNotFound;
    case CUDA_ERROR_NOT_READY:
    case CUDA_ERROR_DEVICE_UNAVAILABLE:
    case CUDA_ERROR_SYSTEM_NOT_READY:
      return absl::StatusCode::kUnavailable;
    case CUDA_ERROR_NOT_SUPPORTED:
    case CUDA_ERROR_PEER_ACCESS_UNSUPPORTED:
      return absl::StatusCode::kUnimplemented;
    case CUDA_ERROR_NOT_PERMITTED:
    case CUDA_ERROR_DEVICE_NOT_LICENSED:
      return absl::StatusCode::kPermissionDenied;
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_INVALID_CONTEXT:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED:
    case CUDA_ERROR_PEER_ACCESS_NOT_ENABLED:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
      return absl::StatusCode::kFailedPrecondition;
    case CUDA_ERROR_LAUNCH_TIMEOUT:
      return absl::StatusCode::kDeadlineExceeded;
    default:
      // Faults (illegal address, launch failure, assert, ...) and anything unknown.
      return absl::StatusCode::kInternal;
  }
}

const char* CublasName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
    default:
      return nullptr;
  }
}

const char* NcclName(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
    default:
      return nullptr;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaDriver>> LoadCudaDriver(const std::string& library) {
  absl::StatusOr<void*> handle = OpenLibrary(library);
  if (!handle.ok()) {
    const bool missing = absl::IsNotFound(handle.status());
    return absl::Status(
        handle.status().code(),
        absl::StrCat(library, missing ? " not found: " : " exists but cannot be loaded: ",
                     handle.status().message()));
  }
  PFN_cuGetProcAddress_v12000 get_proc = nullptr;
  if (!LoadSymbol(*handle, "cuGetProcAddress_v2", get_proc)) {
    return absl::FailedPreconditionError(absl::StrCat(
        library, " has no cuGetProcAddress_v2 (not a CUDA driver, or one older than 12.0)"));
  }
  auto driver = std::make_unique<CudaDriver>();
  driver->library = library;
  CUdriverProcAddressQueryResult found;
#define VGPU_CUDA_LOAD(name, version)                                                         \
  {                                                                                           \
    void* fn = nullptr;                                                                       \
    CUresult r = get_proc(#name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &found);          \
    if (r != CUDA_SUCCESS || fn == nullptr || found != CU_GET_PROC_ADDRESS_SUCCESS) {         \
      return absl::FailedPreconditionError(absl::StrCat(library, " lacks ", #name, " (ABI ",  \
                                                        version,                              \
                                                        "): driver too old or not a CUDA "    \
                                                        "driver (cuGetProcAddress returned ", \
                                                        static_cast<int>(r), ")"));           \
    }                                                                                         \
    driver->name = reinterpret_cast<PFN_##name##_v##version>(fn);                             \
  }
  VGPU_CUDA_REQUIRED_FUNCTIONS(VGPU_CUDA_LOAD)
#undef VGPU_CUDA_LOAD
#define VGPU_CUDA_LOAD_OPTIONAL(name, version)                                                \
  {                                                                                           \
    void* fn = nullptr;                                                                       \
    if (get_proc(#name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &found) == CUDA_SUCCESS && \
        found == CU_GET_PROC_ADDRESS_SUCCESS) {                                               \
      driver->name = reinterpret_cast<PFN_##name##_v##version>(fn);                           \
    }                                                                                         \
  }
  VGPU_CUDA_OPTIONAL_FUNCTIONS(VGPU_CUDA_LOAD_OPTIONAL)
#undef VGPU_CUDA_LOAD_OPTIONAL
  PFN_cuGetErrorName_v6000 expected = nullptr;
  g_error_name.compare_exchange_strong(expected, driver->cuGetErrorName);
  PFN_cuGetErrorString_v6000 expected_string = nullptr;
  g_error_string.compare_exchange_strong(expected_string, driver->cuGetErrorString);
  // VGPU_CUDA_CALL_LOG: every entry point is wrapped so that each call is logged. The error
  // texts above stay unwrapped: ToStatus' own lookups are not the platform's CUDA calls, and
  // the log's result names use them.
  if (call_log::Enabled()) {
    const call_log::ResultNamer<CUresult> namer{
        [](CUresult r) { return absl::StrCat(CuResultName(r), " (", static_cast<int>(r), ")"); },
        [](CUresult r) { return r == CUDA_SUCCESS; }};
#define VGPU_CUDA_WRAP(name, version)                               \
  {                                                                 \
    struct Tag;                                                     \
    driver->name = call_log::Wrap<Tag>(#name, driver->name, namer); \
  }
    VGPU_CUDA_REQUIRED_FUNCTIONS(VGPU_CUDA_WRAP)
    VGPU_CUDA_OPTIONAL_FUNCTIONS(VGPU_CUDA_WRAP)
#undef VGPU_CUDA_WRAP
  }
  return driver;
}

std::string VersionString(int v) { return absl::StrCat(v / 1000, ".", (v % 1000) / 10); }

std::string CuResultName(CUresult result) {
  if (PFN_cuGetErrorName_v6000 fn = g_error_name.load(); fn != nullptr) {
    const char* name = nullptr;
    if (fn(result, &name) == CUDA_SUCCESS && name != nullptr) return name;
  }
  if (const char* name = BuiltinName(result); name != nullptr) return name;
  return absl::StrCat("CUresult ", static_cast<int>(result));
}

std::string CublasStatusName(cublasStatus_t status) {
  const char* name = CublasName(status);
  return absl::StrCat(name != nullptr ? name : "cublasStatus_t", " (", static_cast<int>(status),
                      ")");
}

std::string NcclResultName(ncclResult_t result) {
  const char* name = NcclName(result);
  return absl::StrCat(name != nullptr ? name : "ncclResult_t", " (", static_cast<int>(result), ")");
}

absl::Status ToStatus(CUresult result, absl::string_view context) {
  if (result == CUDA_SUCCESS) return absl::OkStatus();
  std::string message =
      absl::StrCat(context, ": ", CuResultName(result), " (", static_cast<int>(result), ")");
  if (PFN_cuGetErrorString_v6000 fn = g_error_string.load(); fn != nullptr) {
    const char* text = nullptr;
    if (fn(result, &text) == CUDA_SUCCESS && text != nullptr) absl::StrAppend(&message, ": ", text);
  }
  return absl::Status(CodeFor(result), message);
}

absl::Status ToStatus(cublasStatus_t status, absl::string_view context) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  absl::StatusCode code;
  switch (status) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      code = absl::StatusCode::kResourceExhausted;
      break;
    case CUBLAS_STATUS_INVALID_VALUE:
      code = absl::StatusCode::kInvalidArgument;
      break;
    case CUBLAS_STATUS_NOT_INITIALIZED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
      code = absl::StatusCode::kFailedPrecondition;
      break;
    case CUBLAS_STATUS_NOT_SUPPORTED:
      code = absl::StatusCode::kUnimplemented;
      break;
    case CUBLAS_STATUS_LICENSE_ERROR:
      code = absl::StatusCode::kPermissionDenied;
      break;
    default:
      code = absl::StatusCode::kInternal;
  }
  const char* name = CublasName(status);
  return absl::Status(
      code, absl::StrCat(context, ": ",
                         name != nullptr ? std::string(name) : absl::StrCat("cublasStatus_t"), " (",
                         static_cast<int>(status), ")"));
}

absl::Status ToStatus(ncclResult_t result, absl::string_view context) {
  if (result == ncclSuccess) return absl::OkStatus();
  absl::StatusCode code;
  switch (result) {
    case ncclInvalidArgument:
      code = absl::StatusCode::kInvalidArgument;
      break;
    case ncclInvalidUsage:
      code = absl::StatusCode::kFailedPrecondition;
      break;
    case ncclRemoteError:
    case ncclInProgress:
      code = absl::StatusCode::kUnavailable;
      break;
    default:  // unhandled CUDA error, system error, internal error
      code = absl::StatusCode::kInternal;
  }
  const char* name = NcclName(result);
  return absl::Status(
      code, absl::StrCat(context, ": ",
                         name != nullptr ? std::string(name) : absl::StrCat("ncclResult_t"), " (",
                         static_cast<int>(result), ")"));
}

}  // namespace vgpu::cuda
