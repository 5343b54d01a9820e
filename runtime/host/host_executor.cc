#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "vgpu/runtime/mutex.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/file_io.h"
#include "vgpu/runtime/host/host_event.h"
#include "vgpu/runtime/host/host_internal.h"
#include "vgpu/runtime/host/host_kernels.h"
#include "vgpu/runtime/host/host_platform.h"
#include "vgpu/runtime/status.h"

namespace vgpu::host {
namespace {

// ---------------------------------------------------------------------------------------------
class HostExecutor : public Executor {
 public:
  HostExecutor(Platform* platform, int ordinal, uint64_t capacity, HostFaultInjection* faults)
      : platform_(platform), ordinal_(ordinal), capacity_(capacity), faults_(faults) {}
  ~HostExecutor() override {
    for (auto& [p, bytes] : allocations_) munmap(p, bytes);
    if (memfd_ >= 0) close(memfd_);
  }

  Platform* platform() const override { return platform_; }
  int ordinal() const override { return ordinal_; }

  absl::StatusOr<PhysicalDeviceInfo> Describe() override {
    PhysicalDeviceInfo info;
    info.ordinal = ordinal_;
    info.name = "vgpu simulated GPU (host memory)";
    info.uuid =
        absl::StrCat("HOST-00000000-0000-0000-0000-", absl::Dec(ordinal_, absl::kZeroPad12));
    info.pci_bus_id = absl::StrCat("host:", ordinal_);
    info.sm_count = 0;
    info.total_bytes = capacity_;
    vgpu::MutexLock l(&mu_);
    info.free_bytes = capacity_ - std::min(capacity_, used_);
    info.vmm_granularity = kHostVmmGranularity;
    info.allocation_granularity = kPage;
    return info;
  }

  absl::StatusOr<void*> Allocate(uint64_t bytes) override {
    if (bytes == 0) return absl::InvalidArgumentError("Executor::Allocate: zero bytes");
    int64_t call = ++faults_->allocate_calls;
    if (faults_->fail_allocate_at.load() == call) {
      return absl::ResourceExhaustedError(
          absl::StrCat("host GPU ", ordinal_, ": injected failure of raw allocation #", call));
    }
    uint64_t rounded = 0;
    {
      vgpu::MutexLock l(&mu_);
      // Near 2^64 rounding would wrap to a tiny size: refuse as out of memory instead.
      if (!RoundUpChecked(bytes, kPage, &rounded)) return OutOfMemory(bytes);
      VGPU_RETURN_IF_ERROR(Reserve(rounded, bytes));
    }
    // mmap: pages are only committed when touched, and return to the OS on munmap.
    void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    vgpu::MutexLock l(&mu_);
    if (p == MAP_FAILED) {
      used_ -= rounded;
      return absl::ResourceExhaustedError(absl::StrCat("host GPU ", ordinal_, ": mmap of ",
                                                       FormatBytes(rounded),
                                                       " failed: ", std::strerror(errno)));
    }
    allocations_[p] = rounded;
    return p;
  }

  absl::Status Free(void* ptr) override {
    uint64_t bytes;
    {
      vgpu::MutexLock l(&mu_);
      auto it = allocations_.find(ptr);
      if (it == allocations_.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "host GPU ", ordinal_, ": Free of ", absl::Hex(reinterpret_cast<uintptr_t>(ptr)),
            ", which is not a live allocation of this device (double free or foreign pointer)"));
      }
      bytes = it->second;
      allocations_.erase(it);
      used_ -= bytes;
    }
    munmap(ptr, bytes);
    return absl::OkStatus();
  }

  absl::StatusOr<void*> HostAllocate(uint64_t bytes) override {
    if (bytes == 0) return absl::InvalidArgumentError("HostAllocate: zero bytes");
    uint64_t rounded = 0;
    // Pinned host memory is real RAM: a request past the machine's memory is refused here
    // rather than handed to malloc (which may abort under sanitizers, or overcommit).
    // An unknown size (0) caps nothing, as before.
    static const uint64_t kHostRam = PhysicalMemoryBytes();
    if (!RoundUpChecked(bytes, kPage, &rounded) || (kHostRam != 0 && rounded > kHostRam)) {
      return absl::ResourceExhaustedError(absl::StrCat("HostAllocate of ", bytes,
                                                       " bytes: more than the machine's ",
                                                       FormatBytes(kHostRam), " of memory"));
    }
    void* p = std::aligned_alloc(4096, rounded);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("HostAllocate of ", bytes, " bytes failed"));
    }
    vgpu::MutexLock l(&mu_);
    host_allocations_.insert(p);
    return p;
  }
  absl::Status HostFree(void* ptr) override {
    {
      vgpu::MutexLock l(&mu_);
      if (host_allocations_.erase(ptr) == 0) {
        return absl::InvalidArgumentError("HostFree: pointer is not a live host allocation");
      }
    }
    std::free(ptr);
    return absl::OkStatus();
  }

  // Virtual memory: address ranges are PROT_NONE reservations; physical memory is a range of
  // one sparse memfd per device; Map is mmap(MAP_FIXED|MAP_SHARED) of that range, so one
  // physical granule can really appear at any virtual address (stitching works for real).
  absl::StatusOr<uint64_t> VirtualMemoryGranularity() override { return kHostVmmGranularity; }

  // Reservations start on a granule boundary whatever address the kernel picks (a driver
  // guarantees this, and the vmm allocator maps whole granules from the start): reserve one
  // granule more than asked, then trim the unaligned head and the spare tail.
  absl::StatusOr<void*> ReserveAddressRange(uint64_t bytes) override {
    VGPU_RETURN_IF_ERROR(CheckGranular("ReserveAddressRange", bytes));
    const uint64_t g = kHostVmmGranularity;
    auto failed = [&](int err) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "ReserveAddressRange of ", FormatBytes(bytes), " failed: ", std::strerror(err)));
    };
    if (bytes > UINT64_MAX - g) return failed(ENOMEM);
    const uint64_t padded = bytes + g;
    void* raw = KernelReserve(padded);
    if (raw == MAP_FAILED) return failed(errno);
    const uintptr_t base = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t aligned = (base + g - 1) / g * g;
    if (aligned > base) munmap(raw, aligned - base);
    if (base + padded > aligned + bytes) {
      munmap(reinterpret_cast<void*>(aligned + bytes), base + padded - (aligned + bytes));
    }
    void* p = reinterpret_cast<void*>(aligned);
    vgpu::MutexLock l(&mu_);
    reservations_[p] = bytes;
    return p;
  }
  absl::Status FreeAddressRange(void* va, uint64_t bytes) override {
    {
      vgpu::MutexLock l(&mu_);
      auto it = reservations_.find(va);
      if (it == reservations_.end() || it->second != bytes) {
        return absl::InvalidArgumentError("FreeAddressRange: not a reserved range of that size");
      }
      reservations_.erase(it);
    }
    munmap(va, bytes);
    return absl::OkStatus();
  }

  absl::StatusOr<PhysicalMemoryHandle> CreatePhysicalMemory(uint64_t bytes) override {
    VGPU_RETURN_IF_ERROR(CheckGranular("CreatePhysicalMemory", bytes));
    int64_t call = ++faults_->allocate_calls;
    if (faults_->fail_allocate_at.load() == call) {
      return absl::ResourceExhaustedError(
          absl::StrCat("host GPU ", ordinal_, ": injected failure of physical allocation #", call));
    }
    vgpu::MutexLock l(&mu_);
    VGPU_RETURN_IF_ERROR(EnsureMemfd());
    VGPU_RETURN_IF_ERROR(Reserve(bytes, bytes));
    // First fit in the memfd's offset space (sized 4x capacity, so it never runs out first).
    for (auto it = free_offsets_.begin(); it != free_offsets_.end(); ++it) {
      if (it->second >= bytes) {
        uint64_t offset = it->first, size = it->second;
        free_offsets_.erase(it);
        if (size > bytes) free_offsets_[offset + bytes] = size - bytes;
        physical_[offset] = bytes;
        return PhysicalMemoryHandle{offset, bytes};
      }
    }
    used_ -= bytes;
    return absl::ResourceExhaustedError("CreatePhysicalMemory: offset space exhausted");
  }

  absl::Status ReleasePhysicalMemory(PhysicalMemoryHandle handle) override {
    vgpu::MutexLock l(&mu_);
    auto it = physical_.find(handle.value);
    if (it == physical_.end() || it->second != handle.bytes) {
      return absl::InvalidArgumentError("ReleasePhysicalMemory: unknown handle");
    }
    physical_.erase(it);
    used_ -= handle.bytes;
    // Give the pages back to the OS; mappings that still exist keep reading zeros, as freed
    // physical memory must not be used anyway.
    fallocate(memfd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, handle.value, handle.bytes);
    uint64_t offset = handle.value, size = handle.bytes;
    auto next = free_offsets_.lower_bound(offset);
    if (next != free_offsets_.end() && offset + size == next->first) {
      size += next->second;
      next = free_offsets_.erase(next);
    }
    if (next != free_offsets_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        prev->second += size;
        return absl::OkStatus();
      }
    }
    free_offsets_[offset] = size;
    return absl::OkStatus();
  }

  absl::Status Map(void* va, uint64_t bytes, PhysicalMemoryHandle handle,
                   uint64_t offset) override {
    VGPU_RETURN_IF_ERROR(CheckGranular("Map", bytes));
    VGPU_RETURN_IF_ERROR(CheckMapsWholeAllocation(handle, offset, bytes));
    vgpu::MutexLock l(&mu_);
    auto it = physical_.find(handle.value);
    if (it == physical_.end() || offset > it->second || bytes > it->second - offset) {
      return absl::InvalidArgumentError("Map: unknown handle or range past its end");
    }
    if (!InReservation(va, bytes)) {
      return absl::InvalidArgumentError("Map: range is not inside a reserved address range");
    }
    void* p = mmap(va, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, memfd_,
                   static_cast<off_t>(handle.value + offset));
    if (p == MAP_FAILED)
      return absl::InternalError(absl::StrCat("Map: mmap failed: ", std::strerror(errno)));
    return absl::OkStatus();
  }
  absl::Status Unmap(void* va, uint64_t bytes) override {
    VGPU_RETURN_IF_ERROR(CheckGranular("Unmap", bytes));
    vgpu::MutexLock l(&mu_);
    if (!InReservation(va, bytes)) {
      return absl::InvalidArgumentError("Unmap: range is not inside a reserved address range");
    }
    void* p =
        mmap(va, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    if (p == MAP_FAILED)
      return absl::InternalError(absl::StrCat("Unmap: mmap failed: ", std::strerror(errno)));
    return absl::OkStatus();
  }

  std::pair<int, int> StreamPriorityRange() const override { return {0, -5}; }
  absl::StatusOr<std::vector<int>> PartitionSms(absl::Span<const int>) override {
    return absl::UnimplementedError(
        "SM partitions need the cuda platform (green contexts); the host platform has no SMs");
  }
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream(const StreamOptions& options) override {
    int64_t call = ++faults_->stream_calls;
    if (faults_->fail_stream_at.load() == call) {
      return absl::InternalError(
          absl::StrCat("host GPU ", ordinal_, ": injected failure of stream #", call));
    }
    if (options.sm_partition >= 0) {
      return absl::InvalidArgumentError("host platform has no SM partitions");
    }
    int p = std::clamp(options.priority, -5, 0);
    return CreateHostStream(this, p, faults_);
  }
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override {
    return std::unique_ptr<Event>(std::make_unique<HostEvent>());
  }
  bool CanAccessPeer(const Executor& other) const override { return other.platform() == platform_; }
  absl::StatusOr<Blas*> GetBlas() override { return blas_.get(); }
  absl::StatusOr<Kernels*> GetKernels() override { return kernels_.get(); }
  absl::StatusOr<std::unique_ptr<MemoryPool>> CreateMemoryPool(
      const MemoryPoolOptions& options) override {
    return CreateHostMemoryPool(this, options);
  }

 private:
  static uint64_t RoundUp(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }
  absl::Status OutOfMemory(uint64_t requested) const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "host GPU ", ordinal_, ": out of memory allocating ", FormatBytes(requested), " (",
        requested, " bytes): ", FormatBytes(used_), " of ", FormatBytes(capacity_), " in use"));
  }
  // A PROT_NONE range from the kernel. With faults_->misalign_reservations_by set, the
  // address is deliberately that far past a granule boundary, as a kernel that does not align
  // large mappings would return (tests of the alignment above).
  void* KernelReserve(uint64_t bytes) {
    constexpr int kFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    const uint64_t g = kHostVmmGranularity;
    const uint64_t off = faults_->misalign_reservations_by.load() % g / kPage * kPage;
    if (off == 0) return mmap(nullptr, bytes, PROT_NONE, kFlags, -1, 0);
    if (bytes > UINT64_MAX - 2 * g) {
      errno = ENOMEM;
      return MAP_FAILED;
    }
    void* raw = mmap(nullptr, bytes + 2 * g, PROT_NONE, kFlags, -1, 0);
    if (raw == MAP_FAILED) return raw;
    const uintptr_t base = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t p = (base + g - 1) / g * g + off;
    if (p > base) munmap(raw, p - base);
    munmap(reinterpret_cast<void*>(p + bytes), base + bytes + 2 * g - (p + bytes));
    return reinterpret_cast<void*>(p);
  }

  absl::Status CheckGranular(const char* what, uint64_t bytes) const {
    if (bytes == 0 || bytes % kHostVmmGranularity != 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", bytes,
                                                     " bytes is not a positive multiple of the "
                                                     "granularity ",
                                                     FormatBytes(kHostVmmGranularity)));
    }
    return absl::OkStatus();
  }
  absl::Status Reserve(uint64_t rounded, uint64_t requested) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!faults_->ignore_capacity.load() && (rounded > capacity_ || used_ > capacity_ - rounded)) {
      return OutOfMemory(requested);
    }
    if (used_ > UINT64_MAX - rounded) return OutOfMemory(requested);
    used_ += rounded;
    return absl::OkStatus();
  }
  absl::Status EnsureMemfd() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (memfd_ >= 0) return absl::OkStatus();
    memfd_ = memfd_create(absl::StrCat("vgpu-host-", ordinal_).c_str(), MFD_CLOEXEC);
    if (memfd_ < 0)
      return absl::InternalError(absl::StrCat("memfd_create failed: ", std::strerror(errno)));
    uint64_t space = RoundUp(capacity_, kHostVmmGranularity) * 4;
    if (ftruncate(memfd_, static_cast<off_t>(space)) != 0) {
      return absl::InternalError(absl::StrCat("ftruncate failed: ", std::strerror(errno)));
    }
    free_offsets_[0] = space;
    return absl::OkStatus();
  }
  bool InReservation(void* va, uint64_t bytes) const ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    auto it = reservations_.upper_bound(va);
    if (it == reservations_.begin()) return false;
    --it;
    auto base = reinterpret_cast<uintptr_t>(it->first), p = reinterpret_cast<uintptr_t>(va);
    return p >= base && p - base <= it->second && bytes <= it->second - (p - base);
  }

  Platform* platform_;
  int ordinal_;
  uint64_t capacity_;
  HostFaultInjection* faults_;
  std::unique_ptr<Blas> blas_ = CreateHostBlas();
  std::unique_ptr<Kernels> kernels_ = CreateHostKernels();

  mutable vgpu::Mutex mu_;
  uint64_t used_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<void*, uint64_t> allocations_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<void*> host_allocations_ ABSL_GUARDED_BY(mu_);
  std::map<void*, uint64_t> reservations_ ABSL_GUARDED_BY(mu_);
  int memfd_ ABSL_GUARDED_BY(mu_) = -1;
  std::map<uint64_t, uint64_t> free_offsets_ ABSL_GUARDED_BY(mu_);  // offset -> size
  std::map<uint64_t, uint64_t> physical_ ABSL_GUARDED_BY(mu_);      // offset -> size
};

}  // namespace

std::unique_ptr<Executor> CreateHostExecutor(Platform* platform, int ordinal, uint64_t capacity,
                                             HostFaultInjection* faults) {
  return std::make_unique<HostExecutor>(platform, ordinal, capacity, faults);
}

}  // namespace vgpu::host
