#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "vgpu/runtime/mutex.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/cuda/cuda_executor.h"
#include "vgpu/runtime/status.h"

namespace vgpu::cuda {
namespace {

// cuMemPoolCreate'd pool of one device. Live pointers are tracked so that a foreign pointer is
// InvalidArgument instead of a cuMemFreeAsync of someone else's memory.
class CudaMemoryPool : public MemoryPool {
 public:
  CudaMemoryPool(CudaExecutor* executor, CUmemoryPool pool) : executor_(executor), pool_(pool) {}
  ~CudaMemoryPool() override {
    // Outstanding allocations keep the memory until they are freed (CUDA's rule), so
    // destroying with live blocks leaks them rather than pulling memory from under work.
    executor_->Release([executor = executor_, pool = pool_] {
      ScopedContext scope(executor->driver(), executor->context());
      if (scope.status().ok()) executor->driver().cuMemPoolDestroy(pool);
    });
  }

  absl::StatusOr<void*> AllocateAsync(uint64_t bytes, Stream* stream) override
      ABSL_LOCKS_EXCLUDED(mu_) {
    if (bytes == 0) return absl::InvalidArgumentError(Where("AllocateAsync: zero bytes"));
    VGPU_ASSIGN_OR_RETURN(CudaStream * cs, Check(stream, "AllocateAsync"));
    VGPU_CUDA_SCOPE(executor_->driver(), cs->context());
    CUdeviceptr p = 0;
    VGPU_RETURN_IF_ERROR(
        ToStatus(executor_->driver().cuMemAllocFromPoolAsync(&p, bytes, pool_, cs->handle()),
                 Where(absl::StrCat("cuMemAllocFromPoolAsync of ", FormatBytes(bytes), " (", bytes,
                                    " bytes)"))));
    vgpu::MutexLock l(&mu_);
    live_.insert(p);
    return Vptr(p);
  }

  absl::Status FreeAsync(void* ptr, Stream* stream) override ABSL_LOCKS_EXCLUDED(mu_) {
    VGPU_ASSIGN_OR_RETURN(CudaStream * cs, Check(stream, "FreeAsync"));
    {
      vgpu::MutexLock l(&mu_);
      if (live_.erase(Dptr(ptr)) == 0) {
        return absl::InvalidArgumentError(Where(absl::StrCat(
            "FreeAsync of ", absl::Hex(reinterpret_cast<uintptr_t>(ptr)),
            ", which is not a live allocation of this pool (double free or foreign pointer)")));
      }
    }
    // Not Begin(): a stream with a sticky error must still give the memory back.
    VGPU_CUDA_SCOPE(executor_->driver(), cs->context());
    return ToStatus(executor_->driver().cuMemFreeAsync(Dptr(ptr), cs->handle()),
                    Where("cuMemFreeAsync"));
  }

  absl::Status TrimTo(uint64_t bytes_to_keep) override {
    VGPU_CUDA_SCOPE(executor_->driver(), executor_->context());
    return ToStatus(executor_->driver().cuMemPoolTrimTo(pool_, bytes_to_keep),
                    Where("cuMemPoolTrimTo"));
  }

  absl::StatusOr<MemoryPoolStats> Stats() override {
    VGPU_CUDA_SCOPE(executor_->driver(), executor_->context());
    cuuint64_t reserved = 0, used = 0;
    const CudaDriver& d = executor_->driver();
    VGPU_RETURN_IF_ERROR(
        ToStatus(d.cuMemPoolGetAttribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved),
                 Where("cuMemPoolGetAttribute(RESERVED_MEM_CURRENT)")));
    VGPU_RETURN_IF_ERROR(
        ToStatus(d.cuMemPoolGetAttribute(pool_, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used),
                 Where("cuMemPoolGetAttribute(USED_MEM_CURRENT)")));
    return MemoryPoolStats{reserved, used};
  }

 private:
  std::string Where(absl::string_view what) const {
    return absl::StrCat(executor_->label(), ": memory pool: ", what);
  }
  absl::StatusOr<CudaStream*> Check(Stream* stream, absl::string_view what) const {
    CudaStream* cs = stream == nullptr ? nullptr : AsCudaStream(stream);
    if (cs == nullptr || cs->cuda_executor() != executor_) {
      return absl::InvalidArgumentError(
          Where(absl::StrCat(what, ": the stream does not belong to this device")));
    }
    return cs;
  }

  CudaExecutor* const executor_;
  const CUmemoryPool pool_;
  vgpu::Mutex mu_;
  absl::flat_hash_set<CUdeviceptr> live_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<MemoryPool> CreateCudaMemoryPool(CudaExecutor* executor, CUmemoryPool pool) {
  return std::make_unique<CudaMemoryPool>(executor, pool);
}

}  // namespace vgpu::cuda
