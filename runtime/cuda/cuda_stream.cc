#include <cstring>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "vgpu/runtime/cuda/cuda_executor.h"
#include "vgpu/runtime/status.h"

namespace vgpu::cuda {
// ---------------------------------------------------------------------------------------------
// Streams

CudaStream::CudaStream(CudaExecutor* executor, CUstream stream, CUcontext context, int priority,
                       int sm_partition, uint64_t generation)
    : executor_(executor),
      stream_(stream),
      context_(context),
      priority_(priority),
      sm_partition_(sm_partition),
      generation_(generation) {}

CudaStream::~CudaStream() {
  CudaExecutor* executor = executor_;
  executor->Release([executor, stream = stream_, context = context_, slot = error_slot_host_,
                     partition = sm_partition_] {
    const CudaDriver& d = executor->driver();
    {
      // Host functions queued on the stream point at this object: let them run first.
      ScopedContext scope(d, context);
      if (scope.status().ok()) {
        d.cuStreamSynchronize(stream);
        d.cuStreamDestroy(stream);
      }
    }
    if (slot != nullptr) {
      ScopedContext scope(d, executor->context());
      if (scope.status().ok()) d.cuMemFreeHost(slot);
    }
    executor->StreamDestroyed(partition);
  });
}

Executor* CudaStream::executor() const { return executor_; }

absl::Status CudaStream::Begin() {
  executor_->DrainGraveyard();
  vgpu::MutexLock l(&mu_);
  return error_;
}

absl::Status CudaStream::Fail(absl::Status status) {
  vgpu::MutexLock l(&mu_);
  if (error_.ok()) error_ = status;
  return status;
}

absl::Status CudaStream::Check(CUresult result, absl::string_view what) {
  if (result == CUDA_SUCCESS) return absl::OkStatus();
  return ToStatus(result, absl::StrCat(executor_->label(), ": ", what));
}

absl::Status CudaStream::MemcpyH2D(void* dst, const void* src, uint64_t bytes) {
  VGPU_CUDA_SCOPE(executor_->driver(), context_);
  VGPU_RETURN_IF_ERROR(Begin());
  if (bytes == 0) return absl::OkStatus();
  if (dst == nullptr || src == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("MemcpyH2D of ", bytes, " bytes: null pointer"));
  }
  return Check(executor_->driver().cuMemcpyHtoDAsync(Dptr(dst), src, bytes, stream_),
               absl::StrCat("cuMemcpyHtoDAsync of ", bytes, " bytes"));
}

absl::Status CudaStream::MemcpyD2H(void* dst, const void* src, uint64_t bytes) {
  VGPU_CUDA_SCOPE(executor_->driver(), context_);
  VGPU_RETURN_IF_ERROR(Begin());
  if (bytes == 0) return absl::OkStatus();
  if (dst == nullptr || src == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("MemcpyD2H of ", bytes, " bytes: null pointer"));
  }
  return Check(executor_->driver().cuMemcpyDtoHAsync(dst, Dptr(src), bytes, stream_),
               absl::StrCat("cuMemcpyDtoHAsync of ", bytes, " bytes"));
}

absl::Status CudaStream::MemcpyD2D(void* dst, const void* src, uint64_t bytes) {
  VGPU_CUDA_SCOPE(executor_->driver(), context_);
  VGPU_RETURN_IF_ERROR(Begin());
  if (bytes == 0) return absl::OkStatus();
  if (dst == nullptr || src == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("MemcpyD2D of ", bytes, " bytes: null pointer"));
  }
  const CudaDriver& d = executor_->driver();
  // Which devices own the two pointers (VMM ranges included); unknown means "this device".
  auto device_of = [&](const void* p) {
    int ordinal = -1;
    if (d.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, Dptr(p)) !=
        CUDA_SUCCESS) {
      return static_cast<int>(executor_->device());
    }
    return ordinal;
  };
  const int here = static_cast<int>(executor_->device());
  const int dst_dev = device_of(dst), src_dev = device_of(src);
  if (dst_dev == here && src_dev == here) {
    return Check(d.cuMemcpyDtoDAsync(Dptr(dst), Dptr(src), bytes, stream_),
                 absl::StrCat("cuMemcpyDtoDAsync of ", bytes, " bytes"));
  }
  CudaExecutor* dst_exec = executor_->cuda_platform()->ExecutorForDevice(dst_dev);
  CudaExecutor* src_exec = executor_->cuda_platform()->ExecutorForDevice(src_dev);
  if (dst_exec == nullptr || src_exec == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("MemcpyD2D: pointers on CUDA devices ", src_dev,
                                                   " -> ", dst_dev,
                                                   " that this platform does not manage"));
  }
  return Check(d.cuMemcpyPeerAsync(Dptr(dst), dst_exec->context(), Dptr(src), src_exec->context(),
                                   bytes, stream_),
               absl::StrCat("cuMemcpyPeerAsync of ", bytes, " bytes from device ", src_dev,
                            " to device ", dst_dev));
}

absl::Status CudaStream::Memset8(void* dst, uint8_t value, uint64_t bytes) {
  VGPU_CUDA_SCOPE(executor_->driver(), context_);
  VGPU_RETURN_IF_ERROR(Begin());
  if (bytes == 0) return absl::OkStatus();
  if (dst == nullptr) return absl::InvalidArgumentError("Memset8: null destination");
  return Check(executor_->driver().cuMemsetD8Async(Dptr(dst), value, bytes, stream_),
               absl::StrCat("cuMemsetD8Async of ", bytes, " bytes"));
}

absl::Status CudaStream::Memset32(void* dst, uint32_t value, uint64_t count) {
  VGPU_CUDA_SCOPE(executor_->driver(), context_);
  VGPU_RETURN_IF_ERROR(Begin());
  if (count == 0) return absl::OkStatus();
  if (dst == nullptr) return absl::InvalidArgumentError("Memset32: null destination");
  if (reinterpret_cast<uintptr_t>(dst) % 4 != 0) {
    return absl::InvalidArgumentError("Memset32: destination is not 4-byte aligned");
  }
  return Check(executor_->driver().cuMemsetD32Async(Dptr(dst), value, count, stream_),
               absl::StrCat("cuMemsetD32Async of ", count, " words"));
}

absl::Status CudaStream::RecordEvent(Event* event) {
  auto* e = dynamic_cast<CudaEvent*>(event);
  if (e == nullptr) return absl::InvalidArgumentError("RecordEvent: not a cuda event");
  if (e->executor() != executor_) {
    return absl::InvalidArgumentError(absl::StrCat("RecordEvent: the event belongs to ",
                                                   e->executor()->label(), ", the stream to ",
                                                   executor_->label()));
  }
  // Recording is allowed on a failed stream, so that waiters never hang.
  VGPU_CUDA_SCOPE(executor_->driver(), context_);
  VGPU_ASSIGN_OR_RETURN(CUevent handle, e->EventFor(context_));
  VGPU_RETURN_IF_ERROR(Check(executor_->driver().cuEventRecord(handle, stream_), "cuEventRecord"));
  e->MarkRecorded(handle);
  return absl::OkStatus();
}

absl::Status CudaStream::WaitEvent(Event* event) {
  auto* e = dynamic_cast<CudaEvent*>(event);
  if (e == nullptr) return absl::InvalidArgumentError("WaitEvent: not a cuda event");
  VGPU_CUDA_SCOPE(executor_->driver(), context_);
  VGPU_RETURN_IF_ERROR(Begin());
  CUevent handle = e->latest();
  if (handle == nullptr) return absl::OkStatus();  // never recorded: nothing to wait for
  // cuStreamWaitEvent accepts events of other contexts and devices.
  return Check(executor_->driver().cuStreamWaitEvent(stream_, handle, 0), "cuStreamWaitEvent");
}

absl::Status CudaStream::LaunchHostFunc(std::function<void()> fn) {
  VGPU_CUDA_SCOPE(executor_->driver(), context_);
  VGPU_RETURN_IF_ERROR(Begin());
  auto* heap = new std::function<void()>(std::move(fn));
  CUresult r = executor_->driver().cuLaunchHostFunc(stream_, &RunHostFunction, heap);
  if (r != CUDA_SUCCESS) delete heap;  // never queued
  return Check(r, "cuLaunchHostFunc");
}

absl::Status CudaStream::Synchronize() {
  VGPU_CUDA_SCOPE(executor_->driver(), context_);
  executor_->DrainGraveyard();
  CUresult r = executor_->driver().cuStreamSynchronize(stream_);
  if (r != CUDA_SUCCESS) Fail(Check(r, "cuStreamSynchronize")).IgnoreError();
  vgpu::MutexLock l(&mu_);
  return error_;
}

absl::StatusOr<CUdeviceptr> CudaStream::DeviceErrorSlot() {
  vgpu::MutexLock l(&mu_);
  if (error_slot_host_ != nullptr) return error_slot_device_;
  const CudaDriver& d = executor_->driver();
  VGPU_CUDA_SCOPE(d, executor_->context());
  void* p = nullptr;
  VGPU_RETURN_IF_ERROR(ToStatus(
      d.cuMemHostAlloc(&p, 2 * sizeof(int), CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP),
      absl::StrCat(executor_->label(), ": cuMemHostAlloc of the kernel error slot")));
  std::memset(p, 0, sizeof(uint64_t));
  CUdeviceptr dp = 0;
  absl::Status s = ToStatus(d.cuMemHostGetDevicePointer(&dp, p, 0),
                            absl::StrCat(executor_->label(), ": cuMemHostGetDevicePointer"));
  if (!s.ok()) {
    d.cuMemFreeHost(p);
    return s;
  }
  error_slot_host_ = static_cast<uint64_t*>(p);
  error_slot_device_ = dp;
  return dp;
}

absl::Status CudaStream::CheckDeviceErrorSlot(
    std::function<absl::Status(int row, int value)> make_error) {
  uint64_t* slot;
  {
    vgpu::MutexLock l(&mu_);
    slot = error_slot_host_;
  }
  if (slot == nullptr) return absl::FailedPreconditionError("no kernel error slot");
  // Runs after the kernel: the slot is read and cleared before later work on the stream.
  return LaunchHostFunc([this, slot, make_error = std::move(make_error)] {
    volatile uint64_t* s = slot;
    const uint64_t v = *s;
    if (v != 0) {
      *s = 0;
      Fail(make_error(static_cast<int>(v >> 32) - 1, static_cast<int32_t>(v & 0xffffffffu)))
          .IgnoreError();
    }
  });
}

CudaStream* AsCudaStream(Stream* stream) { return dynamic_cast<CudaStream*>(stream); }

}  // namespace vgpu::cuda
