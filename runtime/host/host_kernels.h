// Host-platform implementations of runtime/kernels.h: loops the compiler vectorises, run on
// the stream's worker thread via Stream::LaunchHostFunc-style enqueueing.
//
// Thread safety: stateless; safe from any thread.
#ifndef VGPU_RUNTIME_HOST_HOST_KERNELS_H_
#define VGPU_RUNTIME_HOST_HOST_KERNELS_H_

#include <memory>

#include "vgpu/runtime/kernels.h"

namespace vgpu {

// The stream passed to every method must be a host-platform stream.
std::unique_ptr<Kernels> CreateHostKernels();

// Threads OpenBLAS uses for each host-platform Blas call (process-wide). Callers that run
// several streams' gemms at once lower it so the streams do not oversubscribe the cores.
void SetHostBlasThreads(int threads);
int HostBlasThreads();

}  // namespace vgpu

#endif  // VGPU_RUNTIME_HOST_HOST_KERNELS_H_
