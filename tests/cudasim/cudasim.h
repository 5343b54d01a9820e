// The CUDA simulator's internal interface: what libvgpu_cudasim_cuda.so (the Driver API
// stand-in for libcuda.so.1) exports to its two siblings, libvgpu_cudasim_cublas.so and
// libvgpu_cudasim_nccl.so, so that cuBLAS calls and NCCL collectives run as stream work on
// the simulated streams, check their memory like kernels do and take device memory like the
// real libraries. Tests-only (tests/cudasim.cmake builds it; nothing installs it); see
// docs/cuda.md for what the simulator checks and what it cannot.
//
// Thread safety: every function here is safe from any thread. Functions marked "host only"
// return CUDA_ERROR_NOT_PERMITTED when called from a cuLaunchHostFunc callback, as cuda.h
// requires of every CUDA call there.
#ifndef VGPU_TESTS_CUDASIM_CUDASIM_H_
#define VGPU_TESTS_CUDASIM_CUDASIM_H_

#include <cuda.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#define VGPU_CUDASIM_EXPORT __attribute__((visibility("default")))

namespace vgpu::cudasim {

// A range of device (or mapped pinned host) memory that a piece of stream work reads or
// writes; the simulator checks it is allocated and accessible from the stream's device
// (else a sticky CUDA_ERROR_ILLEGAL_ADDRESS) and feeds it to the race detector.
struct Access {
  CUdeviceptr ptr = 0;
  uint64_t bytes = 0;
  bool write = false;
  // Copies may touch any device's memory (UVA); kernels and library work need the range on
  // the stream's device or a peer with access enabled (cuCtxEnablePeerAccess).
  bool any_device = false;
};

// What the work sees when it runs on the stream's thread.
struct WorkContext {
  int device = 0;    // CUDA ordinal of the stream's context
  int sm_count = 0;  // SMs of the stream's context (green contexts have fewer)
  // Host address backing a device range checked by the Access list (never null there).
  std::function<void*(CUdeviceptr)> host;
};

// Work returns CUDA_SUCCESS or the error that becomes the context's sticky error.
using Work = std::function<CUresult(const WorkContext&)>;

// Host only. Enqueues `work` on `stream` (a created stream, a green-context stream, 0 or
// CU_STREAM_LEGACY, or CU_STREAM_PER_THREAD of the current context) after checking the
// handle, the current context and the sticky error. `accesses` are checked when the work
// runs, in stream order. `what` names it in the simulator's messages and race reports.
VGPU_CUDASIM_EXPORT CUresult Enqueue(CUstream stream, std::vector<Access> accesses, Work work,
                                     const char* what);

// Host only. The CUDA ordinal of the current context (CUDA_ERROR_INVALID_CONTEXT without one)
// and of a stream's context.
VGPU_CUDASIM_EXPORT CUresult CurrentDevice(int* device);
VGPU_CUDASIM_EXPORT CUresult StreamDevice(CUstream stream, int* device);

// Device memory a library takes for itself (cuBLAS workspaces, NCCL buffers): counted in
// cuMemGetInfo like any allocation; CUDA_ERROR_OUT_OF_MEMORY when the device has not enough.
VGPU_CUDASIM_EXPORT CUresult ChargeDeviceMemory(int device, uint64_t bytes, const char* what);
VGPU_CUDASIM_EXPORT void ReleaseDeviceMemory(int device, uint64_t bytes);

// True on a stream thread while it runs a host function (cuLaunchHostFunc).
VGPU_CUDASIM_EXPORT bool InHostCallback();

// The device profile in use (VGPU_CUDASIM_PROFILE).
struct ProfileInfo {
  std::string name;
  int devices = 0;
  int sm_count = 0;
  uint64_t bytes_per_device = 0;
};
VGPU_CUDASIM_EXPORT ProfileInfo Profile();

// A Driver API entry point fetched through cuGetProcAddress_v2, as cuBLAS and NCCL fetch theirs
// (nullptr when the simulated driver does not offer it, e.g. an "old driver").
template <typename Fn>
Fn DriverFunction(const char* name, int version) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult found;
  if (cuGetProcAddress_v2(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &found) !=
          CUDA_SUCCESS ||
      found != CU_GET_PROC_ADDRESS_SUCCESS) {
    return nullptr;
  }
  return reinterpret_cast<Fn>(fn);
}

// A line in the simulator's own trace (VGPU_CUDASIM_TRACE=FILE), for debugging.
VGPU_CUDASIM_EXPORT void Trace(const std::string& line);

}  // namespace vgpu::cudasim

#endif  // VGPU_TESTS_CUDASIM_CUDASIM_H_
