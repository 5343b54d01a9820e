// The host platform's classes, one per file, reached by each other through these factories:
// host_stream.cc (HostStream), host_blas.cc (HostBlas), host_memory_pool.cc (HostMemoryPool),
// host_executor.cc (HostExecutor), host_event.h (HostEvent); host_platform.cc holds the
// platform. Internal: nothing outside runtime/host includes it.
//
// Thread safety: as in runtime/platform.h; every class here is safe from any thread.
#ifndef VGPU_RUNTIME_HOST_HOST_INTERNAL_H_
#define VGPU_RUNTIME_HOST_HOST_INTERNAL_H_

#include <cstdint>
#include <memory>

#include "vgpu/runtime/host/host_faults.h"
#include "vgpu/runtime/platform.h"

namespace vgpu::host {

// Host pages: what Allocate and the memory pool round to.
inline constexpr uint64_t kPage = 4096;

// `x` rounded up to a multiple of `m` in *out; false when that does not fit in 64 bits (near
// 2^64 plain rounding would wrap to a tiny size).
inline bool RoundUpChecked(uint64_t x, uint64_t m, uint64_t* out) {
  const uint64_t down = x / m * m;
  if (down == x) {
    *out = x;
    return true;
  }
  if (down > UINT64_MAX - m) return false;
  *out = down + m;
  return true;
}

// A stream of `executor` whose worker thread runs its work in order.
std::unique_ptr<Stream> CreateHostStream(Executor* executor, int priority,
                                         HostFaultInjection* faults);
std::unique_ptr<Blas> CreateHostBlas();
std::unique_ptr<MemoryPool> CreateHostMemoryPool(Executor* executor,
                                                 const MemoryPoolOptions& options);
// A simulated GPU of `capacity` bytes.
std::unique_ptr<Executor> CreateHostExecutor(Platform* platform, int ordinal, uint64_t capacity,
                                             HostFaultInjection* faults);

}  // namespace vgpu::host

#endif  // VGPU_RUNTIME_HOST_HOST_INTERNAL_H_
