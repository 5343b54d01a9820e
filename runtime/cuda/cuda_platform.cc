#include "vgpu/runtime/cuda/cuda_platform.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/cuda/cuda_executor.h"
#include "vgpu/runtime/cuda/cuda_fatbin.h"
#include "vgpu/runtime/cuda/dynamic_library.h"
#include "vgpu/runtime/kernels.h"
#include "vgpu/runtime/status.h"

namespace vgpu {
namespace cuda {
namespace {

CUdeviceptr Dptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }
void* Vptr(CUdeviceptr p) { return reinterpret_cast<void*>(p); }

std::string FormatUuid(const CUuuid& uuid) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  std::string hex;
  for (int i = 0; i < 16; ++i) absl::StrAppendFormat(&hex, "%02x", b[i]);
  return absl::StrCat("GPU-", hex.substr(0, 8), "-", hex.substr(8, 4), "-", hex.substr(12, 4), "-",
                      hex.substr(16, 4), "-", hex.substr(20, 12));
}

// The memory left free for the CUDA context, the kernels' module and the libraries' own state
// when the user sets no reserve: max(512 MiB, 5% of the card), as TensorFlow keeps about
// max(300 MiB, 5%); 512 MiB covers a CUDA 12 context with its module on Hopper. At most half
// of a (small) card, so that small simulated devices still get a logical device.
uint64_t DefaultReserve(uint64_t total) {
  return std::min(std::max<uint64_t>(uint64_t{512} << 20, total / 20), total / 2);
}

std::string VersionString(int v) { return absl::StrCat(v / 1000, ".", (v % 1000) / 10); }

thread_local bool t_in_host_callback = false;

void CUDA_CB RunHostFunction(void* data) {
  auto* fn = static_cast<std::function<void()>*>(data);
  // The flag covers the function's captures too: their destructors (an Event's, a Stream's)
  // must defer their driver calls.
  t_in_host_callback = true;
  (*fn)();
  delete fn;
  t_in_host_callback = false;
}

}  // namespace

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

// ---------------------------------------------------------------------------------------------
// Events

CudaEvent::CudaEvent(CudaExecutor* executor, CUevent primary_event) : executor_(executor) {
  events_[executor->context()] = primary_event;
  executor_->EventCreated(this);
}

CudaEvent::~CudaEvent() {
  std::map<CUcontext, CUevent> events;
  {
    std::lock_guard<std::mutex> l(mu_);
    events.swap(events_);
  }
  // Green-context events of contexts destroyed since were destroyed with them (executor).
  executor_->EventDestroyed(this, std::move(events));
}

std::vector<std::pair<CUcontext, CUevent>> CudaEvent::TakeEventsExcept(CUcontext keep) {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::pair<CUcontext, CUevent>> out;
  for (auto it = events_.begin(); it != events_.end();) {
    if (it->first == keep) {
      ++it;
      continue;
    }
    if (latest_ == it->second) latest_ = nullptr;  // its work ran before the context died
    out.push_back(*it);
    it = events_.erase(it);
  }
  return out;
}

absl::StatusOr<CUevent> CudaEvent::EventFor(CUcontext ctx) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = events_.find(ctx);
  if (it != events_.end()) return it->second;
  CUevent event = nullptr;
  VGPU_RETURN_IF_ERROR(
      ToStatus(executor_->driver().cuEventCreate(&event, CU_EVENT_DISABLE_TIMING),
               absl::StrCat(executor_->label(), ": cuEventCreate in an SM partition")));
  events_[ctx] = event;
  return event;
}

void CudaEvent::MarkRecorded(CUevent event) {
  std::lock_guard<std::mutex> l(mu_);
  latest_ = event;
}

CUevent CudaEvent::latest() {
  std::lock_guard<std::mutex> l(mu_);
  return latest_;
}

absl::StatusOr<bool> CudaEvent::Query() {
  CUevent event = latest();
  if (event == nullptr) return true;  // never recorded: complete, as in CUDA
  VGPU_CUDA_SCOPE(executor_->driver(), executor_->context());
  CUresult r = executor_->driver().cuEventQuery(event);
  if (r == CUDA_SUCCESS) return true;
  if (r == CUDA_ERROR_NOT_READY) return false;
  return ToStatus(r, absl::StrCat(executor_->label(), ": cuEventQuery"));
}

absl::Status CudaEvent::Synchronize() {
  CUevent event = latest();
  if (event == nullptr) return absl::OkStatus();
  VGPU_CUDA_SCOPE(executor_->driver(), executor_->context());
  return ToStatus(executor_->driver().cuEventSynchronize(event),
                  absl::StrCat(executor_->label(), ": cuEventSynchronize"));
}

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
  std::lock_guard<std::mutex> l(mu_);
  return error_;
}

absl::Status CudaStream::Fail(absl::Status status) {
  std::lock_guard<std::mutex> l(mu_);
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
  std::lock_guard<std::mutex> l(mu_);
  return error_;
}

absl::StatusOr<CUdeviceptr> CudaStream::DeviceErrorSlot() {
  std::lock_guard<std::mutex> l(mu_);
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
    std::lock_guard<std::mutex> l(mu_);
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

// ---------------------------------------------------------------------------------------------
// Executor

CudaExecutor::CudaExecutor(CudaPlatform* platform, const CudaDriver* driver, int ordinal,
                           CUdevice device)
    : platform_(platform), driver_(driver), ordinal_(ordinal), device_(device) {
  label_ = absl::StrCat("cuda GPU ", ordinal);
}

CudaExecutor::~CudaExecutor() {
  kernels_.reset();
  blas_.reset();
  if (context_ == nullptr) return;
  ScopedContext scope(*driver_, context_);
  if (scope.status().ok()) {
    {
      std::lock_guard<std::mutex> l(partition_mu_);
      DrainGraveyardLocked();
    }
    {
      std::lock_guard<std::mutex> l(module_mu_);
      for (auto& [key, fns] : modules_) {
        if (key.second < 0 && fns.module != nullptr) driver_->cuModuleUnload(fns.module);
      }
      modules_.clear();
    }
    {
      std::lock_guard<std::mutex> l(partition_mu_);
      DestroyPartitionsLocked();
    }
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [p, bytes] : allocations_) driver_->cuMemFree(p);
    for (void* p : host_allocations_) driver_->cuMemFreeHost(p);
  }
  driver_->cuDevicePrimaryCtxRelease(device_);
}

std::string CudaExecutor::Where(absl::string_view call) const {
  return absl::StrCat(label_, ": ", call);
}

absl::Status CudaExecutor::Init() {
  const CudaDriver& d = *driver_;
  char name[256] = {};
  VGPU_RETURN_IF_ERROR(
      ToStatus(d.cuDeviceGetName(name, sizeof(name) - 1, device_), Where("cuDeviceGetName")));
  label_ = absl::StrCat("cuda GPU ", ordinal_, " (", name, ")");
  VGPU_RETURN_IF_ERROR(
      ToStatus(d.cuDevicePrimaryCtxRetain(&context_, device_), Where("cuDevicePrimaryCtxRetain")));
  VGPU_CUDA_SCOPE(*driver_, context_);
  VGPU_RETURN_IF_ERROR(ToStatus(
      d.cuDeviceGetAttribute(&sm_count_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device_),
      Where("cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)")));
  VGPU_RETURN_IF_ERROR(ToStatus(
      d.cuDeviceGetAttribute(&cc_major_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_),
      Where("cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)")));
  VGPU_RETURN_IF_ERROR(
      ToStatus(d.cuCtxGetStreamPriorityRange(&least_priority_, &greatest_priority_),
               Where("cuCtxGetStreamPriorityRange")));
  int vmm = 0;
  if (d.cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                             device_) == CUDA_SUCCESS &&
      vmm != 0) {
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device_;
    size_t granularity = 0;
    if (d.cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) ==
            CUDA_SUCCESS &&
        granularity > 0) {
      vmm_supported_ = true;
      vmm_granularity_ = granularity;
    }
  }
  return absl::OkStatus();
}

Platform* CudaExecutor::platform() const { return platform_; }

absl::StatusOr<PhysicalDeviceInfo> CudaExecutor::Describe() {
  const CudaDriver& d = *driver_;
  VGPU_CUDA_SCOPE(*driver_, context_);
  PhysicalDeviceInfo info;
  info.ordinal = ordinal_;
  char name[256] = {};
  VGPU_RETURN_IF_ERROR(
      ToStatus(d.cuDeviceGetName(name, sizeof(name) - 1, device_), Where("cuDeviceGetName")));
  info.name = name;
  CUuuid uuid;
  VGPU_RETURN_IF_ERROR(ToStatus(d.cuDeviceGetUuid(&uuid, device_), Where("cuDeviceGetUuid")));
  info.uuid = FormatUuid(uuid);
  char bus[64] = {};
  VGPU_RETURN_IF_ERROR(
      ToStatus(d.cuDeviceGetPCIBusId(bus, sizeof(bus) - 1, device_), Where("cuDeviceGetPCIBusId")));
  info.pci_bus_id = bus;
  VGPU_RETURN_IF_ERROR(
      ToStatus(d.cuDeviceGetAttribute(&info.compute_capability_major,
                                      CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_),
               Where("cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)")));
  VGPU_RETURN_IF_ERROR(
      ToStatus(d.cuDeviceGetAttribute(&info.compute_capability_minor,
                                      CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device_),
               Where("cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)")));
  info.sm_count = sm_count_;
  size_t free_bytes = 0, total_bytes = 0;
  VGPU_RETURN_IF_ERROR(ToStatus(d.cuMemGetInfo(&free_bytes, &total_bytes), Where("cuMemGetInfo")));
  info.total_bytes = total_bytes;
  info.free_bytes = free_bytes;
  info.vmm_granularity = vmm_supported_ ? vmm_granularity_ : 0;
  info.default_reserve = DefaultReserve(total_bytes);
  if (d.HasGreenContexts()) {
    CUdevResource whole = {};
    if (d.cuDeviceGetDevResource(device_, &whole, CU_DEV_RESOURCE_TYPE_SM) == CUDA_SUCCESS) {
      info.sm_partition_min = std::max(1, static_cast<int>(whole.sm.minSmPartitionSize));
      info.sm_partition_alignment = std::max(1, static_cast<int>(whole.sm.smCoscheduledAlignment));
    }
  }
  return info;
}

absl::StatusOr<void*> CudaExecutor::Allocate(uint64_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError(Where("Allocate: zero bytes"));
  DrainGraveyard();  // deferred frees first: their memory may be what this needs
  VGPU_CUDA_SCOPE(*driver_, context_);
  CUdeviceptr p = 0;
  CUresult r = driver_->cuMemAlloc(&p, bytes);
  if (r != CUDA_SUCCESS) {
    size_t free_bytes = 0, total_bytes = 0;
    driver_->cuMemGetInfo(&free_bytes, &total_bytes);
    return ToStatus(
        r, Where(absl::StrCat("cuMemAlloc of ", FormatBytes(bytes), " (", bytes, " bytes) with ",
                              FormatBytes(free_bytes), " of ", FormatBytes(total_bytes), " free")));
  }
  std::lock_guard<std::mutex> l(mu_);
  allocations_[p] = bytes;
  return Vptr(p);
}

absl::Status CudaExecutor::Free(void* ptr) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (allocations_.erase(Dptr(ptr)) == 0) {
      return absl::InvalidArgumentError(Where(absl::StrCat(
          "Free of ", absl::Hex(reinterpret_cast<uintptr_t>(ptr)),
          ", which is not a live allocation of this device (double free or foreign pointer)")));
    }
  }
  if (InHostCallback()) {
    // A buffer released by a host function's captures: freed by the next host-thread call.
    Release([this, ptr] {
      ScopedContext scope(*driver_, context_);
      if (scope.status().ok()) driver_->cuMemFree(Dptr(ptr));
    });
    return absl::OkStatus();
  }
  VGPU_CUDA_SCOPE(*driver_, context_);
  return ToStatus(driver_->cuMemFree(Dptr(ptr)), Where("cuMemFree"));
}

absl::StatusOr<void*> CudaExecutor::HostAllocate(uint64_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError(Where("HostAllocate: zero bytes"));
  VGPU_CUDA_SCOPE(*driver_, context_);
  void* p = nullptr;
  VGPU_RETURN_IF_ERROR(ToStatus(driver_->cuMemHostAlloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE),
                                Where(absl::StrCat("cuMemHostAlloc of ", FormatBytes(bytes)))));
  std::lock_guard<std::mutex> l(mu_);
  host_allocations_.insert(p);
  return p;
}

absl::Status CudaExecutor::HostFree(void* ptr) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (host_allocations_.erase(ptr) == 0) {
      return absl::InvalidArgumentError(
          Where("HostFree: pointer is not a live pinned host allocation of this device"));
    }
  }
  if (InHostCallback()) {
    Release([this, ptr] {
      ScopedContext scope(*driver_, context_);
      if (scope.status().ok()) driver_->cuMemFreeHost(ptr);
    });
    return absl::OkStatus();
  }
  VGPU_CUDA_SCOPE(*driver_, context_);
  return ToStatus(driver_->cuMemFreeHost(ptr), Where("cuMemFreeHost"));
}

// ---- virtual memory -------------------------------------------------------------------------

absl::StatusOr<uint64_t> CudaExecutor::VirtualMemoryGranularity() {
  if (!vmm_supported_) {
    return absl::UnimplementedError(Where("the device does not support virtual memory management"));
  }
  return vmm_granularity_;
}

absl::Status CudaExecutor::CheckGranular(absl::string_view what, uint64_t bytes) {
  VGPU_RETURN_IF_ERROR(VirtualMemoryGranularity().status());
  if (bytes == 0 || bytes % vmm_granularity_ != 0) {
    return absl::InvalidArgumentError(Where(
        absl::StrCat(what, ": ", bytes, " bytes is not a positive multiple of the granularity ",
                     FormatBytes(vmm_granularity_))));
  }
  return absl::OkStatus();
}

bool CudaExecutor::InReservationLocked(CUdeviceptr va, uint64_t bytes) const {
  auto it = reservations_.upper_bound(va);
  if (it == reservations_.begin()) return false;
  --it;
  return va >= it->first && va + bytes <= it->first + it->second;
}

absl::StatusOr<void*> CudaExecutor::ReserveAddressRange(uint64_t bytes) {
  VGPU_RETURN_IF_ERROR(CheckGranular("ReserveAddressRange", bytes));
  VGPU_CUDA_SCOPE(*driver_, context_);
  CUdeviceptr va = 0;
  VGPU_RETURN_IF_ERROR(
      ToStatus(driver_->cuMemAddressReserve(&va, bytes, vmm_granularity_, 0, 0),
               Where(absl::StrCat("cuMemAddressReserve of ", FormatBytes(bytes)))));
  std::lock_guard<std::mutex> l(mu_);
  reservations_[va] = bytes;
  return Vptr(va);
}

absl::Status CudaExecutor::FreeAddressRange(void* va, uint64_t bytes) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = reservations_.find(Dptr(va));
    if (it == reservations_.end() || it->second != bytes) {
      return absl::InvalidArgumentError(
          Where("FreeAddressRange: not a reserved range of that size"));
    }
    reservations_.erase(it);
  }
  VGPU_CUDA_SCOPE(*driver_, context_);
  return ToStatus(driver_->cuMemAddressFree(Dptr(va), bytes), Where("cuMemAddressFree"));
}

absl::StatusOr<PhysicalMemoryHandle> CudaExecutor::CreatePhysicalMemory(uint64_t bytes) {
  VGPU_RETURN_IF_ERROR(CheckGranular("CreatePhysicalMemory", bytes));
  VGPU_CUDA_SCOPE(*driver_, context_);
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device_;
  CUmemGenericAllocationHandle handle = 0;
  VGPU_RETURN_IF_ERROR(ToStatus(driver_->cuMemCreate(&handle, bytes, &prop, 0),
                                Where(absl::StrCat("cuMemCreate of ", FormatBytes(bytes)))));
  std::lock_guard<std::mutex> l(mu_);
  physical_[handle] = bytes;
  return PhysicalMemoryHandle{static_cast<uint64_t>(handle), bytes};
}

absl::Status CudaExecutor::ReleasePhysicalMemory(PhysicalMemoryHandle handle) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = physical_.find(handle.value);
    if (it == physical_.end() || it->second != handle.bytes) {
      return absl::InvalidArgumentError(Where("ReleasePhysicalMemory: unknown handle"));
    }
    physical_.erase(it);
  }
  VGPU_CUDA_SCOPE(*driver_, context_);
  // The driver keeps the memory until its last mapping is unmapped.
  return ToStatus(driver_->cuMemRelease(handle.value), Where("cuMemRelease"));
}

absl::Status CudaExecutor::Map(void* va, uint64_t bytes, PhysicalMemoryHandle handle,
                               uint64_t offset) {
  VGPU_RETURN_IF_ERROR(CheckGranular("Map", bytes));
  if (offset % vmm_granularity_ != 0) {
    return absl::InvalidArgumentError(
        Where(absl::StrCat("Map: offset ", offset, " is not a multiple of the granularity")));
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = physical_.find(handle.value);
    if (it == physical_.end() || offset + bytes > it->second) {
      return absl::InvalidArgumentError(Where("Map: unknown handle or range past its end"));
    }
    if (!InReservationLocked(Dptr(va), bytes)) {
      return absl::InvalidArgumentError(Where("Map: range is not inside a reserved address range"));
    }
  }
  VGPU_CUDA_SCOPE(*driver_, context_);
  VGPU_RETURN_IF_ERROR(ToStatus(driver_->cuMemMap(Dptr(va), bytes, offset, handle.value, 0),
                                Where(absl::StrCat("cuMemMap of ", FormatBytes(bytes)))));
  CUmemAccessDesc access = {};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device_;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  absl::Status s =
      ToStatus(driver_->cuMemSetAccess(Dptr(va), bytes, &access, 1), Where("cuMemSetAccess"));
  if (!s.ok()) driver_->cuMemUnmap(Dptr(va), bytes);  // leave nothing half-mapped
  return s;
}

absl::Status CudaExecutor::Unmap(void* va, uint64_t bytes) {
  VGPU_RETURN_IF_ERROR(CheckGranular("Unmap", bytes));
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!InReservationLocked(Dptr(va), bytes)) {
      return absl::InvalidArgumentError(
          Where("Unmap: range is not inside a reserved address range"));
    }
  }
  VGPU_CUDA_SCOPE(*driver_, context_);
  return ToStatus(driver_->cuMemUnmap(Dptr(va), bytes), Where("cuMemUnmap"));
}

// ---- SM partitions --------------------------------------------------------------------------

void CudaExecutor::Release(std::function<void()> release) {
  if (!InHostCallback()) {
    release();
    return;
  }
  std::lock_guard<std::mutex> l(graveyard_mu_);
  graveyard_.push_back(std::move(release));
  ++graveyard_pending_;
}

void CudaExecutor::DrainGraveyard() {
  if (graveyard_pending_.load() == 0 || InHostCallback()) return;
  std::lock_guard<std::mutex> l(partition_mu_);
  DrainGraveyardLocked();
}

void CudaExecutor::DrainGraveyardLocked() {
  std::vector<std::function<void()>> releases;
  std::vector<std::pair<CUcontext, CUevent>> events;
  {
    std::lock_guard<std::mutex> l(graveyard_mu_);
    releases.swap(graveyard_);
    events.swap(graveyard_events_);
    graveyard_pending_ = 0;
  }
  for (auto& release : releases) release();
  for (auto& [ctx, event] : events) {
    ScopedContext scope(*driver_, ctx);
    if (scope.status().ok()) driver_->cuEventDestroy(event);
  }
}

void CudaExecutor::EventCreated(CudaEvent* event) {
  std::lock_guard<std::mutex> l(graveyard_mu_);
  live_events_.insert(event);
}

void CudaExecutor::EventDestroyed(CudaEvent* event, std::map<CUcontext, CUevent> events) {
  if (InHostCallback()) {
    std::lock_guard<std::mutex> l(graveyard_mu_);
    live_events_.erase(event);
    graveyard_events_.insert(graveyard_events_.end(), events.begin(), events.end());
    ++graveyard_pending_;
    return;
  }
  // Under partition_mu_, every context in `events` is alive: re-partitioning takes the
  // events of the green contexts it destroys from live events first.
  std::lock_guard<std::mutex> pl(partition_mu_);
  {
    std::lock_guard<std::mutex> l(graveyard_mu_);
    live_events_.erase(event);
  }
  for (auto& [ctx, e] : events) {
    ScopedContext scope(*driver_, ctx);
    if (scope.status().ok()) driver_->cuEventDestroy(e);
  }
}

void CudaExecutor::DestroyPartitionsLocked() {
  DrainGraveyardLocked();
  {
    // Events recorded in the green contexts go first, while their contexts exist.
    std::vector<std::pair<CUcontext, CUevent>> doomed;
    {
      std::lock_guard<std::mutex> l(graveyard_mu_);
      for (CudaEvent* e : live_events_) {
        for (auto& entry : e->TakeEventsExcept(context_)) doomed.push_back(entry);
      }
    }
    for (auto& [ctx, e] : doomed) {
      ScopedContext scope(*driver_, ctx);
      if (scope.status().ok()) driver_->cuEventDestroy(e);
    }
  }
  {
    std::lock_guard<std::mutex> l(module_mu_);
    // Modules of green contexts die with their context.
    for (auto it = modules_.begin(); it != modules_.end();) {
      it = it->first.second >= 0 ? modules_.erase(it) : std::next(it);
    }
  }
  for (Partition& p : partitions_) driver_->cuGreenCtxDestroy(p.green);
  for (CUgreenCtx g : split_helpers_) driver_->cuGreenCtxDestroy(g);
  partitions_.clear();
  split_helpers_.clear();
  ++generation_;
}

void CudaExecutor::StreamDestroyed(int sm_partition) {
  if (sm_partition >= 0) --partition_streams_;
}

absl::StatusOr<std::vector<int>> CudaExecutor::PartitionSms(absl::Span<const int> sm_counts) {
  const CudaDriver& d = *driver_;
  if (!d.HasGreenContexts()) {
    return absl::UnimplementedError(Where(absl::StrCat(
        "SM partitions need green contexts (cuGreenCtxCreate, cuGreenCtxStreamCreate), which "
        "driver ",
        VersionString(d.driver_version), " does not have; a 12.5+ driver does")));
  }
  if (sm_counts.empty()) {
    return absl::InvalidArgumentError(Where("PartitionSms: no SM counts given"));
  }
  VGPU_CUDA_SCOPE(*driver_, context_);
  CUdevResource whole = {};
  VGPU_RETURN_IF_ERROR(ToStatus(d.cuDeviceGetDevResource(device_, &whole, CU_DEV_RESOURCE_TYPE_SM),
                                Where("cuDeviceGetDevResource(SM)")));
  const int total = static_cast<int>(whole.sm.smCount);
  const int min_size = std::max(1, static_cast<int>(whole.sm.minSmPartitionSize));
  const int align = std::max(1, static_cast<int>(whole.sm.smCoscheduledAlignment));
  std::vector<int> rounded;
  int sum = 0;
  for (int c : sm_counts) {
    if (c <= 0) {
      return absl::InvalidArgumentError(Where(absl::StrCat(
          "PartitionSms: SM counts must be positive, got [", absl::StrJoin(sm_counts, ","), "]")));
    }
    int r = std::max(min_size, (c + align - 1) / align * align);
    rounded.push_back(r);
    sum += r;
  }
  if (sum > total) {
    return absl::ResourceExhaustedError(Where(absl::StrCat(
        "PartitionSms: [", absl::StrJoin(sm_counts, ","), "] SMs, rounded to the minimum ",
        min_size, " and alignment ", align, " as [", absl::StrJoin(rounded, ","), "] = ", sum,
        " SMs, but the device has ", total)));
  }
  std::lock_guard<std::mutex> l(partition_mu_);
  DrainGraveyardLocked();  // streams destroyed in host callbacks are really gone now
  if (partition_streams_.load() > 0) {
    return absl::FailedPreconditionError(Where(
        absl::StrCat("PartitionSms: ", partition_streams_.load(),
                     " stream(s) of the current SM partitions are alive; destroy them first")));
  }
  DestroyPartitionsLocked();
  auto fail = [&](absl::Status s) {
    DestroyPartitionsLocked();
    return s;
  };
  auto make_green = [&](CUdevResource* res, Partition* out) -> absl::Status {
    CUdevResourceDesc desc = nullptr;
    VGPU_RETURN_IF_ERROR(
        ToStatus(d.cuDevResourceGenerateDesc(&desc, res, 1), Where("cuDevResourceGenerateDesc")));
    VGPU_RETURN_IF_ERROR(
        ToStatus(d.cuGreenCtxCreate(&out->green, desc, device_, CU_GREEN_CTX_DEFAULT_STREAM),
                 Where("cuGreenCtxCreate")));
    out->sm_count = static_cast<int>(res->sm.smCount);
    absl::Status s =
        ToStatus(d.cuCtxFromGreenCtx(&out->context, out->green), Where("cuCtxFromGreenCtx"));
    if (!s.ok()) {
      d.cuGreenCtxDestroy(out->green);
      out->green = nullptr;
    }
    return s;
  };
  // Split one partition off at a time. A split's remainder cannot be split again directly, so
  // it becomes a green context whose resource is split next (that context is kept as the
  // leftover partition at the end, or as a helper before).
  CUdevResource current = whole;
  for (size_t i = 0; i < rounded.size(); ++i) {
    CUdevResource group = {}, rest = {};
    unsigned int groups = 1;
    absl::Status s =
        ToStatus(d.cuDevSmResourceSplitByCount(&group, &groups, &current, &rest, 0,
                                               static_cast<unsigned>(rounded[i])),
                 Where(absl::StrCat("cuDevSmResourceSplitByCount(", rounded[i], " SMs)")));
    if (!s.ok()) return fail(s);
    if (groups != 1) {
      return fail(absl::ResourceExhaustedError(
          Where(absl::StrCat("PartitionSms: could not split ", rounded[i],
                             " SMs off the remaining ", current.sm.smCount))));
    }
    Partition p;
    if (absl::Status g = make_green(&group, &p); !g.ok()) return fail(g);
    partitions_.push_back(p);
    if (rest.sm.smCount == 0) break;
    Partition leftover;
    if (absl::Status g = make_green(&rest, &leftover); !g.ok()) return fail(g);
    if (i + 1 == rounded.size()) {
      partitions_.push_back(leftover);
    } else {
      split_helpers_.push_back(leftover.green);
      if (absl::Status g = ToStatus(
              d.cuGreenCtxGetDevResource(leftover.green, &current, CU_DEV_RESOURCE_TYPE_SM),
              Where("cuGreenCtxGetDevResource"));
          !g.ok()) {
        return fail(g);
      }
    }
  }
  if (partitions_.size() < rounded.size()) {
    return fail(absl::ResourceExhaustedError(
        Where(absl::StrCat("PartitionSms: the device ran out of SMs after ", partitions_.size(),
                           " of ", rounded.size(), " partitions"))));
  }
  std::vector<int> actual;
  for (const Partition& p : partitions_) actual.push_back(p.sm_count);
  return actual;
}

// ---- streams, events, peers -----------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Stream>> CudaExecutor::CreateStream(const StreamOptions& options) {
  const CudaDriver& d = *driver_;
  DrainGraveyard();
  // Lower number = higher priority; greatest_priority_ <= least_priority_.
  const int priority = std::clamp(options.priority, greatest_priority_, least_priority_);
  CUstream stream = nullptr;
  if (options.sm_partition < 0) {
    VGPU_CUDA_SCOPE(*driver_, context_);
    VGPU_RETURN_IF_ERROR(
        ToStatus(d.cuStreamCreateWithPriority(&stream, CU_STREAM_NON_BLOCKING, priority),
                 Where("cuStreamCreateWithPriority")));
    return std::unique_ptr<Stream>(
        std::make_unique<CudaStream>(this, stream, context_, priority, -1, 0));
  }
  std::lock_guard<std::mutex> l(partition_mu_);
  if (options.sm_partition >= static_cast<int>(partitions_.size())) {
    return absl::InvalidArgumentError(
        Where(absl::StrCat("CreateStream: SM partition ", options.sm_partition, " does not exist (",
                           partitions_.size(), " partition(s); call PartitionSms first)")));
  }
  const Partition& p = partitions_[options.sm_partition];
  VGPU_CUDA_SCOPE(d, p.context);
  VGPU_RETURN_IF_ERROR(
      ToStatus(d.cuGreenCtxStreamCreate(&stream, p.green, CU_STREAM_NON_BLOCKING, priority),
               Where("cuGreenCtxStreamCreate")));
  ++partition_streams_;
  return std::unique_ptr<Stream>(std::make_unique<CudaStream>(this, stream, p.context, priority,
                                                              options.sm_partition, generation_));
}

absl::StatusOr<std::unique_ptr<Event>> CudaExecutor::CreateEvent() {
  DrainGraveyard();
  VGPU_CUDA_SCOPE(*driver_, context_);
  CUevent event = nullptr;
  VGPU_RETURN_IF_ERROR(
      ToStatus(driver_->cuEventCreate(&event, CU_EVENT_DISABLE_TIMING), Where("cuEventCreate")));
  return std::unique_ptr<Event>(std::make_unique<CudaEvent>(this, event));
}

bool CudaExecutor::PeerAccessEnabled(const Executor& other) const {
  auto* peer = dynamic_cast<const CudaExecutor*>(&other);
  if (peer == nullptr || peer->platform_ != platform_) return false;
  if (peer->device_ == device_) return true;
  return peers_enabled_.contains(static_cast<int>(peer->device_));
}

uint64_t CudaExecutor::CollectiveBufferBytes(int ranks) const {
  if (ranks < 2) return 0;
  constexpr uint64_t kRankState = uint64_t{8} << 20, kBuffSize = uint64_t{4} << 20;
  constexpr uint64_t kChannels = 2;
  return kRankState + kBuffSize * 2 * kChannels * static_cast<uint64_t>(ranks - 1);
}

bool CudaExecutor::CanAccessPeer(const Executor& other) const {
  auto* peer = dynamic_cast<const CudaExecutor*>(&other);
  if (peer == nullptr || peer->platform_ != platform_) return false;
  if (peer->device_ == device_) return true;
  int can = 0;
  return driver_->cuDeviceCanAccessPeer(&can, device_, peer->device_) == CUDA_SUCCESS && can != 0;
}

// ---- stream-ordered memory pools -------------------------------------------------------------

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

  absl::StatusOr<void*> AllocateAsync(uint64_t bytes, Stream* stream) override {
    if (bytes == 0) return absl::InvalidArgumentError(Where("AllocateAsync: zero bytes"));
    VGPU_ASSIGN_OR_RETURN(CudaStream * cs, Check(stream, "AllocateAsync"));
    VGPU_CUDA_SCOPE(executor_->driver(), cs->context());
    CUdeviceptr p = 0;
    VGPU_RETURN_IF_ERROR(
        ToStatus(executor_->driver().cuMemAllocFromPoolAsync(&p, bytes, pool_, cs->handle()),
                 Where(absl::StrCat("cuMemAllocFromPoolAsync of ", FormatBytes(bytes), " (", bytes,
                                    " bytes)"))));
    std::lock_guard<std::mutex> l(mu_);
    live_.insert(p);
    return Vptr(p);
  }

  absl::Status FreeAsync(void* ptr, Stream* stream) override {
    VGPU_ASSIGN_OR_RETURN(CudaStream * cs, Check(stream, "FreeAsync"));
    {
      std::lock_guard<std::mutex> l(mu_);
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
  std::mutex mu_;
  absl::flat_hash_set<CUdeviceptr> live_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MemoryPool>> CudaExecutor::CreateMemoryPool(
    const MemoryPoolOptions& options) {
  const CudaDriver& d = *driver_;
  if (!d.HasMemoryPools()) {
    return absl::UnimplementedError(Where(absl::StrCat(
        "stream-ordered memory pools need cuMemPoolCreate and cuMemAllocFromPoolAsync, which "
        "driver ",
        VersionString(d.driver_version), " (", d.library, ") lacks; use VGPU_ALLOCATOR=bfc")));
  }
  VGPU_CUDA_SCOPE(*driver_, context_);
  int supported = 0;
  if (d.cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, device_) !=
          CUDA_SUCCESS ||
      supported == 0) {
    return absl::UnimplementedError(
        Where("the device does not support stream-ordered memory pools; use VGPU_ALLOCATOR=bfc"));
  }
  CUmemPoolProps props = {};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = device_;
  CUmemoryPool pool = nullptr;
  VGPU_RETURN_IF_ERROR(ToStatus(d.cuMemPoolCreate(&pool, &props), Where("cuMemPoolCreate")));
  cuuint64_t threshold = options.release_threshold;
  absl::Status s =
      ToStatus(d.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold),
               Where("cuMemPoolSetAttribute(RELEASE_THRESHOLD)"));
  if (!s.ok()) {
    d.cuMemPoolDestroy(pool);
    return s;
  }
  return std::unique_ptr<MemoryPool>(std::make_unique<CudaMemoryPool>(this, pool));
}

// ---- BLAS and kernels -----------------------------------------------------------------------

absl::StatusOr<Blas*> CudaExecutor::GetBlas() {
  std::call_once(blas_once_, [this] {
    absl::StatusOr<std::unique_ptr<Blas>> blas = CreateCudaBlas(this);
    if (blas.ok()) {
      blas_ = *std::move(blas);
    } else {
      blas_status_ = blas.status();
    }
  });
  if (!blas_status_.ok()) return blas_status_;
  return blas_.get();
}

absl::StatusOr<KernelFunctions> CudaExecutor::LoadModule(CUcontext ctx) {
  VGPU_CUDA_SCOPE(*driver_, ctx);
  KernelFunctions fns;
  absl::Span<const uint8_t> image = KernelsFatbin();
  VGPU_RETURN_IF_ERROR(ToStatus(driver_->cuModuleLoadData(&fns.module, image.data()),
                                Where(absl::StrCat("cuModuleLoadData of the kernels' fatbin (",
                                                   image.size(), " bytes, sm_90 + compute_80)"))));
  for (int i = 0; i < static_cast<int>(KernelId::kCount); ++i) {
    absl::Status s =
        ToStatus(driver_->cuModuleGetFunction(&fns.functions[i], fns.module, kKernelNames[i]),
                 Where(absl::StrCat("cuModuleGetFunction(", kKernelNames[i], ")")));
    if (!s.ok()) {
      driver_->cuModuleUnload(fns.module);
      return s;
    }
  }
  return fns;
}

absl::StatusOr<const KernelFunctions*> CudaExecutor::KernelFunctionsFor(CudaStream* stream) {
  const auto key =
      std::make_pair(stream->sm_partition() < 0 ? 0 : stream->generation(), stream->sm_partition());
  std::lock_guard<std::mutex> l(module_mu_);
  auto it = modules_.find(key);
  if (it == modules_.end()) {
    VGPU_ASSIGN_OR_RETURN(KernelFunctions fns, LoadModule(stream->context()));
    it = modules_.emplace(key, fns).first;
  }
  return &it->second;
}

absl::StatusOr<Kernels*> CudaExecutor::GetKernels() {
  std::lock_guard<std::mutex> l(kernels_mu_);
  if (kernels_ == nullptr) {
    {
      // Load the primary context's module now so that a GPU the fatbin cannot run on fails
      // here, with the reason, rather than at the first launch.
      std::lock_guard<std::mutex> ml(module_mu_);
      const auto key = std::make_pair(uint64_t{0}, -1);
      if (modules_.find(key) == modules_.end()) {
        VGPU_ASSIGN_OR_RETURN(KernelFunctions fns, LoadModule(context_));
        modules_.emplace(key, fns);
      }
    }
    kernels_ = CreateCudaKernels(this);
  }
  return kernels_.get();
}

// ---------------------------------------------------------------------------------------------
// Platform

CudaPlatform::CudaPlatform() = default;
CudaPlatform::~CudaPlatform() = default;

void CudaPlatform::Init() {
  std::string library = LibraryNames(kDriverLibraryEnv, {kDefaultDriverLibrary}).front();
  absl::StatusOr<std::unique_ptr<CudaDriver>> driver = LoadCudaDriver(library);
  if (!driver.ok()) {
    reason_ = std::string(driver.status().message());
    return;
  }
  driver_ = *std::move(driver);
  const CudaDriver& d = *driver_;
  if (absl::Status s = ToStatus(d.cuDriverGetVersion(&driver_->driver_version),
                                absl::StrCat("cuDriverGetVersion (", library, ")"));
      !s.ok()) {
    reason_ = std::string(s.message());
    return;
  }
  if (driver_->driver_version < kMinimumDriverVersion) {
    reason_ = absl::StrCat("the CUDA driver ", library, " is version ",
                           VersionString(driver_->driver_version), " (", driver_->driver_version,
                           "); vgpu needs ", VersionString(kMinimumDriverVersion), " (",
                           kMinimumDriverVersion,
                           ") or newer (cuGetProcAddress_v2 and the entry points it loads); "
                           "update the NVIDIA driver");
    return;
  }
  if (absl::Status s = ToStatus(d.cuInit(0), absl::StrCat("cuInit (", library, ")")); !s.ok()) {
    reason_ = std::string(s.message());
    return;
  }
  int count = 0;
  if (absl::Status s = ToStatus(d.cuDeviceGetCount(&count), "cuDeviceGetCount"); !s.ok()) {
    reason_ = std::string(s.message());
    return;
  }
  if (count == 0) {
    reason_ =
        absl::StrCat("the CUDA driver ", VersionString(d.driver_version), " found no devices");
    return;
  }
  for (int i = 0; i < count; ++i) {
    CUdevice device = 0;
    absl::Status s = ToStatus(d.cuDeviceGet(&device, i), absl::StrCat("cuDeviceGet(", i, ")"));
    auto executor = std::make_unique<CudaExecutor>(this, driver_.get(), i, device);
    if (s.ok()) s = executor->Init();
    if (!s.ok()) {
      // All or nothing: ordinals must mean the same as CUDA's.
      executors_.clear();
      reason_ = absl::StrCat("device ", i, " failed to initialise: ", s.message());
      return;
    }
    executors_.push_back(std::move(executor));
  }
  EnablePeerAccess();
}

void CudaPlatform::EnablePeerAccess() {
  const CudaDriver& d = *driver_;
  for (auto& from : executors_) {
    for (auto& to : executors_) {
      if (from->device() == to->device() || !from->CanAccessPeer(*to)) continue;
      // Enabled from `from`'s context onto `to`'s; already enabled (by the application on the
      // same primary context) counts as enabled.
      ScopedContext scope(d, from->context());
      if (!scope.status().ok()) continue;
      CUresult r = d.cuCtxEnablePeerAccess(to->context(), 0);
      if (r == CUDA_SUCCESS || r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) {
        from->SetPeerAccessEnabled(static_cast<int>(to->device()));
      } else {
        peer_errors_.push_back(
            absl::StrCat(from->ordinal(), "->", to->ordinal(), ": ", CuResultName(r)));
      }
    }
  }
}

std::string CudaPlatform::Summary() const {
  if (executors_.empty()) return absl::StrCat("0 CUDA devices: ", reason_);
  return absl::StrCat("CUDA driver ", VersionString(driver_->driver_version), " (",
                      driver_->driver_version, ", ", driver_->library, "), ", executors_.size(),
                      " device(s), kernels fatbin sm_90 + compute_80 PTX, green contexts ",
                      driver_->HasGreenContexts() ? "available" : "unavailable",
                      peer_errors_.empty() ? std::string()
                                           : absl::StrCat(", peer access not enabled for ",
                                                          absl::StrJoin(peer_errors_, ", ")));
}

absl::StatusOr<PhysicalDeviceInfo> CudaPlatform::Describe(int ordinal) {
  VGPU_ASSIGN_OR_RETURN(Executor * e, GetExecutor(ordinal));
  return e->Describe();
}

absl::StatusOr<Executor*> CudaPlatform::GetExecutor(int ordinal) {
  if (ordinal < 0 || ordinal >= DeviceCount()) {
    if (executors_.empty()) {
      return absl::NotFoundError(absl::StrCat("cuda device ", ordinal, ": ", Summary()));
    }
    return absl::NotFoundError(absl::StrCat("cuda platform has no device ", ordinal, " (it has ",
                                            DeviceCount(), ", ordinals 0..", DeviceCount() - 1,
                                            ")"));
  }
  return executors_[ordinal].get();
}

CudaExecutor* CudaPlatform::ExecutorForDevice(int cuda_ordinal) const {
  for (const auto& e : executors_) {
    if (static_cast<int>(e->device()) == cuda_ordinal) return e.get();
  }
  return nullptr;
}

}  // namespace cuda

std::unique_ptr<Platform> CreateCudaPlatform() {
  auto platform = std::make_unique<cuda::CudaPlatform>();
  platform->Init();
  return platform;
}

}  // namespace vgpu
