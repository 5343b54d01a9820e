// ScopedContext and the host-callback rule (runtime/cuda/cuda_executor.h).
#include <functional>

#include "absl/status/status.h"
#include "vgpu/runtime/cuda/cuda_executor.h"

namespace vgpu::cuda {
namespace {

thread_local bool t_in_host_callback = false;

}  // namespace

void CUDA_CB RunHostFunction(void* data) {
  auto* fn = static_cast<std::function<void()>*>(data);
  // The flag covers the function's captures too: their destructors (an Event's, a Stream's)
  // must defer their driver calls.
  t_in_host_callback = true;
  (*fn)();
  delete fn;
  t_in_host_callback = false;
}

bool InHostCallback() { return t_in_host_callback; }

ScopedContext::ScopedContext(const CudaDriver& driver, CUcontext ctx) : driver_(driver) {
  if (t_in_host_callback) {
    status_ = absl::FailedPreconditionError(
        "a CUDA call from a host function (Stream::LaunchHostFunc) is not permitted: cuda.h "
        "forbids CUDA calls in cuLaunchHostFunc callbacks; do the work on a host thread");
    return;
  }
  CUcontext current = nullptr;
  if (driver.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == ctx) return;
  status_ = ToStatus(driver.cuCtxPushCurrent(ctx), "cuCtxPushCurrent");
  pushed_ = status_.ok();
}

ScopedContext::~ScopedContext() {
  if (!pushed_) return;
  CUcontext popped = nullptr;
  driver_.cuCtxPopCurrent(&popped);
}

}  // namespace vgpu::cuda
