// The neutral device interfaces every backend implements (StreamExecutor's layering):
//   Platform  - one per backend ("host", "cuda"); owns one Executor per physical device.
//   Executor  - one physical device: raw memory, virtual memory, streams, events, BLAS, kernels.
//   Stream    - an in-order queue of device work (CUDA semantics: asynchronous, ordered).
//   Event     - a marker recorded on a stream; other streams and the host can wait on it.
// Device pointers are plain `void*` values. Errors are absl::Status; vendor error codes never
// leave a backend.
//
// Thread safety: Platform, Executor, Blas and Kernels are safe to call from any thread.
// A Stream and an Event may be used from several threads (calls are serialized internally),
// but the ORDER of work on a stream is the order of the enqueue calls, so code that needs a
// particular order must enqueue from one thread or synchronize itself.
#ifndef VGPU_RUNTIME_PLATFORM_H_
#define VGPU_RUNTIME_PLATFORM_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace vgpu {

class Executor;
class FaultInjector;     // runtime/fault_injector.h
class NcclCommunicator;  // runtime/nccl.h
class Platform;

struct PhysicalDeviceInfo {
  int ordinal = 0;
  std::string name;
  std::string uuid;
  std::string pci_bus_id;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int sm_count = 0;
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
  // Granularity of the virtual-memory calls; 0 when the device has none.
  uint64_t vmm_granularity = 0;
  // Executor::Allocate takes sizes rounded up to a multiple of this from the card (a page on
  // the host platform), so configuration checks count what the platform really takes.
  uint64_t allocation_granularity = 4096;
  // Memory the platform's own runtime needs outside any allocator (CUDA context, loaded
  // modules, library state): with no reserve set, the default "all free memory" limit leaves
  // this much free. 0 on the host platform.
  uint64_t default_reserve = 0;
  // SM partition rules (green contexts): the smallest partition and the multiple every
  // partition is rounded up to; 0 when the device cannot partition its SMs.
  int sm_partition_min = 0;
  int sm_partition_alignment = 0;
};

class Event {
 public:
  virtual ~Event() = default;
  // True when the work captured by the most recent Stream::RecordEvent has completed (also
  // true for an event never recorded, as in CUDA).
  virtual absl::StatusOr<bool> Query() = 0;
  // Blocks the calling thread until that work has completed.
  virtual absl::Status Synchronize() = 0;
};

struct StreamOptions {
  // Lower number = higher priority, as in CUDA. Clamped to Executor::StreamPriorityRange().
  int priority = 0;
  // Index into the SM partitions made by Executor::PartitionSms, or -1 for the whole device.
  int sm_partition = -1;
};

// Work submitted to a stream runs in submission order; pointers passed in (host ones too)
// must stay valid until the work has run (Synchronize, or an event). The first failure of
// asynchronous work is sticky: it is returned by later calls and by Synchronize.
class Stream {
 public:
  virtual ~Stream() = default;
  virtual Executor* executor() const = 0;
  virtual int priority() const = 0;
  virtual int sm_partition() const { return -1; }

  virtual absl::Status MemcpyH2D(void* dst_device, const void* src_host, uint64_t bytes) = 0;
  virtual absl::Status MemcpyD2H(void* dst_host, const void* src_device, uint64_t bytes) = 0;
  // Both device pointers of the same platform; `dst` may belong to another executor (a peer
  // copy) when CanAccessPeer allows it, or through the host otherwise.
  virtual absl::Status MemcpyD2D(void* dst_device, const void* src_device, uint64_t bytes) = 0;
  virtual absl::Status Memset8(void* dst_device, uint8_t value, uint64_t bytes) = 0;
  virtual absl::Status Memset32(void* dst_device, uint32_t value, uint64_t count) = 0;

  virtual absl::Status RecordEvent(Event* event) = 0;
  // Later work on this stream waits for the event's most recent record (as of this call).
  virtual absl::Status WaitEvent(Event* event) = 0;
  // Runs `fn` on a host thread after all earlier work; later work waits for it.
  virtual absl::Status LaunchHostFunc(std::function<void()> fn) = 0;
  virtual absl::Status Synchronize() = 0;
};

// Opaque handle to physical memory made by Executor::CreatePhysicalMemory.
struct PhysicalMemoryHandle {
  uint64_t value = 0;
  uint64_t bytes = 0;
};

// Executor::Map's rule for every platform: InvalidArgument unless the mapping covers the whole
// allocation (offset 0, bytes == handle.bytes).
absl::Status CheckMapsWholeAllocation(PhysicalMemoryHandle handle, uint64_t offset, uint64_t bytes);

enum class Transpose { kNo, kYes };

// Dense linear algebra on a stream. Column-major, like cuBLAS (row-major callers swap
// operands). All pointers are device memory of the stream's executor.
class Blas {
 public:
  virtual ~Blas() = default;
  // C = alpha * op(A) * op(B) + beta * C, with op(A) m x k, op(B) k x n, C m x n.
  virtual absl::Status Sgemm(Stream* stream, Transpose trans_a, Transpose trans_b, int m, int n,
                             int k, float alpha, const float* a, int lda, const float* b, int ldb,
                             float beta, float* c, int ldc) = 0;
  // y = alpha * x + y
  virtual absl::Status Saxpy(Stream* stream, int n, float alpha, const float* x, float* y) = 0;
  // x = alpha * x
  virtual absl::Status Sscal(Stream* stream, int n, float alpha, float* x) = 0;

  // The workspace the library needs per stream (cuBLAS: 32 MiB on cc >= 9.0, else 4 MiB; 0
  // where there is none). Without SetWorkspace the library takes it from the device itself,
  // outside every allocator.
  virtual uint64_t WorkspaceBytes() const { return 0; }
  // Work of this Blas on `stream` uses [workspace, workspace + bytes) of the stream's device
  // (memory the caller allocated, e.g. from a logical device's allocator, and keeps alive),
  // or the library's own again with nullptr. No-op where WorkspaceBytes() is 0.
  virtual absl::Status SetWorkspace(Stream* stream, void* workspace, uint64_t bytes) {
    return absl::OkStatus();
  }
};

class Kernels;  // runtime/kernels.h

struct MemoryPoolOptions {
  // Freed memory the pool keeps cached for reuse; above this it gives memory back to the
  // device at the next synchronization (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD). Default: keep all.
  uint64_t release_threshold = ~uint64_t{0};
};

struct MemoryPoolStats {
  uint64_t reserved_bytes = 0;  // taken from the device: live, cached and pending blocks
  uint64_t used_bytes = 0;      // in live allocations, as the pool rounds them
};

// A stream-ordered memory pool on one device (cuMemPoolCreate; RMM's cuda_async_memory_
// resource): an allocation is usable by work enqueued on its stream after the call (and by
// the host once that work has run); a free returns the memory to the pool when the work
// enqueued on its stream before the free has run. Freed memory stays cached for reuse.
// Thread safety: safe from any thread.
class MemoryPool {
 public:
  virtual ~MemoryPool() = default;
  virtual absl::StatusOr<void*> AllocateAsync(uint64_t bytes, Stream* stream) = 0;
  virtual absl::Status FreeAsync(void* ptr, Stream* stream) = 0;
  // Gives cached memory back to the device until at most `bytes_to_keep` stay reserved.
  // Memory of live allocations, and of frees whose stream has not reached them, stays.
  virtual absl::Status TrimTo(uint64_t bytes_to_keep) = 0;
  virtual absl::StatusOr<MemoryPoolStats> Stats() = 0;
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual Platform* platform() const = 0;
  virtual int ordinal() const = 0;
  // Fresh numbers (free memory changes).
  virtual absl::StatusOr<PhysicalDeviceInfo> Describe() = 0;

  // Raw device memory (cuMemAlloc on cuda; accounted host memory on host). Allocation past
  // the device's free memory is ResourceExhausted; freeing a pointer this executor did not
  // hand out is InvalidArgument.
  virtual absl::StatusOr<void*> Allocate(uint64_t bytes) = 0;
  virtual absl::Status Free(void* ptr) = 0;
  // Page-locked host memory for fast copies (plain host memory on the host platform).
  virtual absl::StatusOr<void*> HostAllocate(uint64_t bytes) = 0;
  virtual absl::Status HostFree(void* ptr) = 0;

  // Virtual memory management (cuMemAddressReserve / cuMemCreate / cuMemMap / cuMemUnmap).
  // Sizes and offsets are multiples of VirtualMemoryGranularity(). Unimplemented where the
  // device has no VMM support.
  virtual absl::StatusOr<uint64_t> VirtualMemoryGranularity() = 0;
  virtual absl::StatusOr<void*> ReserveAddressRange(uint64_t bytes) = 0;
  virtual absl::Status FreeAddressRange(void* va, uint64_t bytes) = 0;
  virtual absl::StatusOr<PhysicalMemoryHandle> CreatePhysicalMemory(uint64_t bytes) = 0;
  virtual absl::Status ReleasePhysicalMemory(PhysicalMemoryHandle handle) = 0;
  // Up to `n` separate allocations of `bytes` each into out[0..n) (one handle each, so each
  // can later be mapped alone). Stops at the first refusal: returns how many were made, at
  // least one, or that refusal when none was (0 when n is 0). The default calls
  // CreatePhysicalMemory n times (what cuda does: the driver has no batch call); a device that
  // can account for a batch at once overrides it.
  virtual absl::StatusOr<size_t> CreatePhysicalMemories(uint64_t bytes, size_t n,
                                                        PhysicalMemoryHandle* out);
  // Releases handles[0..n) in order; stops at the first error, which it returns, with
  // *released set to how many went back before it.
  virtual absl::Status ReleasePhysicalMemories(const PhysicalMemoryHandle* handles, size_t n,
                                               size_t* released);
  // Maps [va, va+bytes) onto the handle's whole memory, readable and writable from this
  // device. The mapping covers the whole allocation (CheckMapsWholeAllocation): cuMemMap's
  // offset "currently must be zero", and an H200 (driver 580) answers CUDA_ERROR_NOT_SUPPORTED
  // to a part of an allocation too. Memory that is mapped piece by piece is created piece by
  // piece.
  virtual absl::Status Map(void* va, uint64_t bytes, PhysicalMemoryHandle handle,
                           uint64_t offset) = 0;
  // Maps `n` whole allocations back to back from `va`; on failure nothing stays mapped. The
  // cuda platform sets access once for the whole range (on an H200: 25-31 us per
  // cuMemSetAccess call, 85-107 us when one call covers 512 mappings of 2 MiB).
  virtual absl::Status MapAll(void* va, const PhysicalMemoryHandle* handles, size_t n);
  virtual absl::Status Unmap(void* va, uint64_t bytes) = 0;
  // Whether the calls above work on this device (the vmm allocator needs them).
  virtual bool HasVirtualMemory() { return VirtualMemoryGranularity().ok(); }

  // Streams, SM partitions, events.
  // {least, greatest} priority; greatest <= least numerically (CUDA: {0, -5}).
  virtual std::pair<int, int> StreamPriorityRange() const = 0;
  // Splits the SMs into partitions of (at least) the given counts, plus the leftover as the
  // last partition; returns the actual SM count of each. cuda only (green contexts).
  virtual absl::StatusOr<std::vector<int>> PartitionSms(absl::Span<const int> sm_counts) = 0;
  virtual absl::StatusOr<std::unique_ptr<Stream>> CreateStream(const StreamOptions& options) = 0;
  virtual absl::StatusOr<std::unique_ptr<Event>> CreateEvent() = 0;
  // Whether the hardware lets this device address `other`'s memory directly (capable).
  virtual bool CanAccessPeer(const Executor& other) const = 0;
  // Whether that access is also enabled now (cuda: cuCtxEnablePeerAccess, done by the platform
  // for every capable pair at start). Platforms with nothing to enable: CanAccessPeer.
  virtual bool PeerAccessEnabled(const Executor& other) const { return CanAccessPeer(other); }

  // Device memory a collective library (NCCL) takes for itself per rank when this device
  // joins a communicator of `ranks` devices, outside every allocator: the runtime keeps it
  // free in the logical device's budget. 0 where collectives take no device memory.
  virtual uint64_t CollectiveBufferBytes(int ranks) const { return 0; }

  virtual absl::StatusOr<Blas*> GetBlas() = 0;
  virtual absl::StatusOr<Kernels*> GetKernels() = 0;

  // A new stream-ordered pool of this device's memory (see MemoryPool). Unimplemented where
  // the platform or driver has none.
  virtual absl::StatusOr<std::unique_ptr<MemoryPool>> CreateMemoryPool(
      const MemoryPoolOptions& options);
};

class Platform {
 public:
  virtual ~Platform() = default;
  virtual std::string name() const = 0;  // "host" or "cuda"
  virtual int DeviceCount() const = 0;
  // One line: driver/runtime versions on cuda, the simulation settings on host, and when
  // DeviceCount() is 0, why (e.g. "libcuda.so.1 not found").
  virtual std::string Summary() const = 0;
  virtual absl::StatusOr<PhysicalDeviceInfo> Describe(int ordinal) = 0;
  virtual absl::StatusOr<Executor*> GetExecutor(int ordinal) = 0;

  // Capabilities, asked of the platform as Blas and Kernels are of an executor; each is
  // Unimplemented (or a no-op) where the platform has none.

  // Whether CreateCommunicator can make collectives here at all (the all-reduce choice asks;
  // creating one may still fail at run time, e.g. when libnccl cannot be loaded).
  virtual bool HasCommunicator() const { return false; }
  // A communicator with one rank per executor; NcclCommunicator::Create checks the executors
  // (distinct devices of this platform) and then calls this.
  virtual absl::StatusOr<std::unique_ptr<NcclCommunicator>> CreateCommunicator(
      absl::Span<Executor* const> executors);
  // NCCL across processes, one rank per process (NcclCommunicator::UniqueId and CreateRank in
  // runtime/nccl.h): whether the platform has it, a fresh unique id (rank 0 makes it, the
  // caller sends it to every rank, e.g. by MPI), and this process's rank of the communicator
  // that id names on `executor`'s device. Unimplemented by default: the host platform's
  // communicator cannot span processes.
  virtual bool HasRankCommunicator() const { return false; }
  virtual absl::StatusOr<std::vector<uint8_t>> NcclUniqueId();
  virtual absl::StatusOr<std::unique_ptr<NcclCommunicator>> CreateRankCommunicator(
      Executor* executor, int rank, int nranks, absl::Span<const uint8_t> id);
  // Threads the platform's host-side BLAS uses per call (process-wide). Callers that run
  // several streams' gemms at once lower it so the streams do not oversubscribe the cores.
  // No-op where BLAS runs on the device.
  virtual void SetBlasThreads(int threads) {}
  // Fault injection for reliability tests (runtime/fault_injector.h).
  virtual absl::StatusOr<FaultInjector*> GetFaultInjector();
};

// Process-wide platforms from the registry (runtime/platform_registry.h), created on first
// use from the environment and never destroyed. "host": configured from VGPU_HOST_DEVICES and
// VGPU_HOST_FAULTS; "cuda": the Driver API (0 devices with a reason when there is no driver or
// GPU). A bad setting is InvalidArgument, as is an unknown name.
absl::StatusOr<Platform*> GetPlatform(absl::string_view name);
// VGPU_PLATFORM=auto|<a registered name> (default auto).
absl::StatusOr<Platform*> DefaultPlatform();
// The "auto" rule alone, whatever VGPU_PLATFORM says: the highest-priority registered platform
// that has a device (cuda when it has one, else host).
absl::StatusOr<Platform*> AutoPlatform();

}  // namespace vgpu

#endif  // VGPU_RUNTIME_PLATFORM_H_
