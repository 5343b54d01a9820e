#include "vgpu/runtime/cuda/cuda_executor.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/cuda/cuda_fatbin.h"
#include "vgpu/runtime/kernels.h"
#include "vgpu/runtime/status.h"

namespace vgpu::cuda {
namespace {

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

}  // namespace

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
      vgpu::MutexLock l(&partition_mu_);
      DrainGraveyardLocked();
    }
    {
      vgpu::MutexLock l(&module_mu_);
      for (auto& [key, fns] : modules_) {
        if (key.second < 0 && fns.module != nullptr) driver_->cuModuleUnload(fns.module);
      }
      modules_.clear();
    }
    {
      vgpu::MutexLock l(&partition_mu_);
      DestroyPartitionsLocked();
    }
    vgpu::MutexLock l(&mu_);
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
  vgpu::MutexLock l(&mu_);
  allocations_[p] = bytes;
  return Vptr(p);
}

absl::Status CudaExecutor::Free(void* ptr) {
  {
    vgpu::MutexLock l(&mu_);
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
  vgpu::MutexLock l(&mu_);
  host_allocations_.insert(p);
  return p;
}

absl::Status CudaExecutor::HostFree(void* ptr) {
  {
    vgpu::MutexLock l(&mu_);
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
  vgpu::MutexLock l(&mu_);
  reservations_[va] = bytes;
  return Vptr(va);
}

absl::Status CudaExecutor::FreeAddressRange(void* va, uint64_t bytes) {
  {
    vgpu::MutexLock l(&mu_);
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
  vgpu::MutexLock l(&mu_);
  physical_[handle] = bytes;
  return PhysicalMemoryHandle{static_cast<uint64_t>(handle), bytes};
}

absl::Status CudaExecutor::ReleasePhysicalMemory(PhysicalMemoryHandle handle) {
  {
    vgpu::MutexLock l(&mu_);
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
  if (absl::Status s = CheckMapsWholeAllocation(handle, offset, bytes); !s.ok()) {
    return absl::Status(s.code(), Where(s.message()));
  }
  return MapAll(va, &handle, 1);
}

absl::Status CudaExecutor::MapAll(void* va, const PhysicalMemoryHandle* handles, size_t n) {
  uint64_t total = 0;
  {
    vgpu::MutexLock l(&mu_);
    for (size_t i = 0; i < n; ++i) {
      auto it = physical_.find(handles[i].value);
      if (it == physical_.end() || it->second != handles[i].bytes) {
        return absl::InvalidArgumentError(Where("Map: unknown physical memory handle"));
      }
      total += handles[i].bytes;
    }
    if (n == 0 || !InReservationLocked(Dptr(va), total)) {
      return absl::InvalidArgumentError(Where("Map: range is not inside a reserved address range"));
    }
  }
  VGPU_CUDA_SCOPE(*driver_, context_);
  // One cuMemMap per allocation, then access for the whole range in one call: cuMemSetAccess
  // is the expensive part (25-31 us a call on an H200; 85-107 us for 512 mappings at once).
  CUdeviceptr at = Dptr(va);
  absl::Status s;
  size_t mapped = 0;
  for (; mapped < n && s.ok(); ++mapped) {
    s = ToStatus(driver_->cuMemMap(at, handles[mapped].bytes, 0, handles[mapped].value, 0),
                 Where(absl::StrCat("cuMemMap of ", FormatBytes(handles[mapped].bytes))));
    if (s.ok()) at += handles[mapped].bytes;
  }
  if (s.ok()) {
    CUmemAccessDesc access = {};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device_;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    s = ToStatus(driver_->cuMemSetAccess(Dptr(va), total, &access, 1), Where("cuMemSetAccess"));
  }
  if (!s.ok()) {  // leave nothing half-mapped, one whole mapping at a time
    CUdeviceptr p = Dptr(va);
    for (size_t i = 0; p < at; p += handles[i++].bytes) driver_->cuMemUnmap(p, handles[i].bytes);
  }
  return s;
}

absl::Status CudaExecutor::Unmap(void* va, uint64_t bytes) {
  VGPU_RETURN_IF_ERROR(CheckGranular("Unmap", bytes));
  {
    vgpu::MutexLock l(&mu_);
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
  vgpu::MutexLock l(&graveyard_mu_);
  graveyard_.push_back(std::move(release));
  ++graveyard_pending_;
}

void CudaExecutor::DrainGraveyard() {
  if (graveyard_pending_.load() == 0 || InHostCallback()) return;
  vgpu::MutexLock l(&partition_mu_);
  DrainGraveyardLocked();
}

void CudaExecutor::DrainGraveyardLocked() {
  std::vector<std::function<void()>> releases;
  std::vector<std::pair<CUcontext, CUevent>> events;
  {
    vgpu::MutexLock l(&graveyard_mu_);
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
  vgpu::MutexLock l(&graveyard_mu_);
  live_events_.insert(event);
}

void CudaExecutor::EventDestroyed(CudaEvent* event, std::map<CUcontext, CUevent> events) {
  if (InHostCallback()) {
    vgpu::MutexLock l(&graveyard_mu_);
    live_events_.erase(event);
    graveyard_events_.insert(graveyard_events_.end(), events.begin(), events.end());
    ++graveyard_pending_;
    return;
  }
  // Under partition_mu_, every context in `events` is alive: re-partitioning takes the
  // events of the green contexts it destroys from live events first.
  vgpu::MutexLock pl(&partition_mu_);
  {
    vgpu::MutexLock l(&graveyard_mu_);
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
      vgpu::MutexLock l(&graveyard_mu_);
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
    vgpu::MutexLock l(&module_mu_);
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
  vgpu::MutexLock l(&partition_mu_);
  DrainGraveyardLocked();  // streams destroyed in host callbacks are really gone now
  if (partition_streams_.load() > 0) {
    return absl::FailedPreconditionError(Where(
        absl::StrCat("PartitionSms: ", partition_streams_.load(),
                     " stream(s) of the current SM partitions are alive; destroy them first")));
  }
  DestroyPartitionsLocked();
  auto fail = [&](absl::Status s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(partition_mu_) {
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
  vgpu::MutexLock l(&partition_mu_);
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
  return CreateCudaMemoryPool(this, pool);
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
  vgpu::MutexLock l(&module_mu_);
  auto it = modules_.find(key);
  if (it == modules_.end()) {
    VGPU_ASSIGN_OR_RETURN(KernelFunctions fns, LoadModule(stream->context()));
    it = modules_.emplace(key, fns).first;
  }
  return &it->second;
}

absl::StatusOr<Kernels*> CudaExecutor::GetKernels() {
  vgpu::MutexLock l(&kernels_mu_);
  if (kernels_ == nullptr) {
    {
      // Load the primary context's module now so that a GPU the fatbin cannot run on fails
      // here, with the reason, rather than at the first launch.
      vgpu::MutexLock ml(&module_mu_);
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

}  // namespace vgpu::cuda
