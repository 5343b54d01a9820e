// The cuda platform's classes, shared by the files of runtime/cuda, one class per file:
// cuda_context.cc (ScopedContext), cuda_event.cc, cuda_stream.cc, cuda_executor.cc,
// cuda_memory_pool.cc, cuda_platform.cc, cuda_blas.cc, cuda_kernels.cc, cuda_nccl.cc. Internal:
// includes cuda.h; nothing outside runtime/cuda may include it.
//
// Every driver call runs inside a ScopedContext: the right context (the device's primary
// context, or a stream's green context) is pushed for the call and the caller's own current
// context is restored after it, so callers never manage CUDA contexts and an application's
// own CUDA code on the same thread is never disturbed. No driver call ever runs on a host
// callback thread (cuLaunchHostFunc): releases made there are deferred to the executor's
// graveyard and run by the next call on a host thread.
// Thread safety: as in runtime/platform.h; every class here is safe from any thread.
#ifndef VGPU_RUNTIME_CUDA_CUDA_EXECUTOR_H_
#define VGPU_RUNTIME_CUDA_CUDA_EXECUTOR_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>  // std::once_flag
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "vgpu/runtime/mutex.h"
#include "vgpu/runtime/cuda/cuda_driver.h"
#include "vgpu/runtime/platform.h"
#include "vgpu/runtime/status.h"

namespace vgpu::cuda {

class CudaExecutor;
class CudaPlatform;

inline CUdeviceptr Dptr(const void* p) { return reinterpret_cast<CUdeviceptr>(p); }
inline void* Vptr(CUdeviceptr p) { return reinterpret_cast<void*>(p); }

// True on a thread while it runs a function of Stream::LaunchHostFunc. cuda.h forbids CUDA
// calls there (cuLaunchHostFunc), so ScopedContext refuses them and releases are deferred.
bool InHostCallback();
// The cuLaunchHostFunc callback of CudaStream::LaunchHostFunc: runs and deletes the
// std::function<void()>* `data`, with InHostCallback() true meanwhile.
void CUDA_CB RunHostFunction(void* data);

// Makes `ctx` current for a scope and restores the caller's context when the scope ends:
// cuCtxPushCurrent only when the current context differs, cuCtxPopCurrent on exit. status()
// is FailedPrecondition in a host callback and the push's error otherwise.
class ScopedContext {
 public:
  ScopedContext(const CudaDriver& driver, CUcontext ctx);
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;
  const absl::Status& status() const { return status_; }

 private:
  const CudaDriver& driver_;
  bool pushed_ = false;
  absl::Status status_;
};

#define VGPU_CUDA_CONCAT_INNER_(a, b) a##b
#define VGPU_CUDA_CONCAT_(a, b) VGPU_CUDA_CONCAT_INNER_(a, b)
// Enters `ctx` for the rest of the enclosing block; returns its error from the function.
#define VGPU_CUDA_SCOPE(driver, ctx)                                                      \
  ::vgpu::cuda::ScopedContext VGPU_CUDA_CONCAT_(vgpu_cuda_scope_, __LINE__)(driver, ctx); \
  VGPU_RETURN_IF_ERROR(VGPU_CUDA_CONCAT_(vgpu_cuda_scope_, __LINE__).status())

// Kernels of runtime/cuda/kernels.cu, looked up by these names in each context's module.
enum class KernelId : int {
  kSumN,
  kSumNVec4,
  kFill,
  kBiasAdd,
  kBiasGrad,
  kRelu,
  kReluGrad,
  kSoftmaxXent,
  kSgdUpdate,
  kAdamUpdate,
  kCount
};
inline constexpr std::array<const char*, static_cast<int>(KernelId::kCount)> kKernelNames = {
    "vgpu_sum_n", "vgpu_sum_n_vec4", "vgpu_fill",         "vgpu_bias_add",   "vgpu_bias_grad",
    "vgpu_relu",  "vgpu_relu_grad",  "vgpu_softmax_xent", "vgpu_sgd_update", "vgpu_adam_update"};

struct KernelFunctions {
  CUmodule module = nullptr;
  std::array<CUfunction, static_cast<int>(KernelId::kCount)> functions{};
  CUfunction get(KernelId id) const { return functions[static_cast<int>(id)]; }
};

// An event per context: CUDA requires the event and the stream of cuEventRecord to share a
// context, and streams of SM partitions live in green contexts. The primary context's event is
// made up front; others on their first record. Query/Synchronize/Wait use the most recently
// recorded one, which is what CUDA semantics ask for.
class CudaEvent : public Event {
 public:
  CudaEvent(CudaExecutor* executor, CUevent primary_event);
  ~CudaEvent() override;
  absl::StatusOr<bool> Query() override;
  absl::Status Synchronize() override;
  CudaExecutor* executor() const { return executor_; }

  // The event to record on a stream of `ctx` (made current by the caller); becomes the
  // latest recorded one once the record is enqueued (MarkRecorded).
  absl::StatusOr<CUevent> EventFor(CUcontext ctx) ABSL_LOCKS_EXCLUDED(mu_);
  void MarkRecorded(CUevent event) ABSL_LOCKS_EXCLUDED(mu_);
  // The latest recorded event, or nullptr when never recorded.
  CUevent latest() ABSL_LOCKS_EXCLUDED(mu_);
  // Hands over the events of contexts other than `keep` (green contexts about to be
  // destroyed by re-partitioning), forgetting them.
  std::vector<std::pair<CUcontext, CUevent>> TakeEventsExcept(CUcontext keep)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  CudaExecutor* executor_;
  vgpu::Mutex mu_;
  std::map<CUcontext, CUevent> events_ ABSL_GUARDED_BY(mu_);
  CUevent latest_ ABSL_GUARDED_BY(mu_) = nullptr;
};

class CudaStream : public Stream {
 public:
  // `context` is the primary context or the green context of `sm_partition`; `generation`
  // is the executor's partition generation the stream was made in.
  CudaStream(CudaExecutor* executor, CUstream stream, CUcontext context, int priority,
             int sm_partition, uint64_t generation);
  ~CudaStream() override;

  Executor* executor() const override;
  int priority() const override { return priority_; }
  int sm_partition() const override { return sm_partition_; }

  absl::Status MemcpyH2D(void* dst_device, const void* src_host, uint64_t bytes) override;
  absl::Status MemcpyD2H(void* dst_host, const void* src_device, uint64_t bytes) override;
  absl::Status MemcpyD2D(void* dst_device, const void* src_device, uint64_t bytes) override;
  absl::Status Memset8(void* dst_device, uint8_t value, uint64_t bytes) override;
  absl::Status Memset32(void* dst_device, uint32_t value, uint64_t count) override;
  absl::Status RecordEvent(Event* event) override;
  absl::Status WaitEvent(Event* event) override;
  absl::Status LaunchHostFunc(std::function<void()> fn) override;
  absl::Status Synchronize() override;

  CudaExecutor* cuda_executor() const { return executor_; }
  CUstream handle() const { return stream_; }
  CUcontext context() const { return context_; }
  uint64_t generation() const { return generation_; }

  // The sticky error (OK when usable); also runs the executor's deferred releases. Every
  // enqueue starts with it, inside a ScopedContext of context().
  absl::Status Begin() ABSL_LOCKS_EXCLUDED(mu_);
  // Records `status` as the stream's sticky error (the first one wins) and returns it.
  absl::Status Fail(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  // A result of an enqueue call: errors are returned, not sticky (nothing was queued).
  absl::Status Check(CUresult result, absl::string_view what);

  // Device-side error reporting for kernels: a mapped pinned uint64 the kernel stores
  // ((row + 1) << 32 | uint32 value) into, and a host function enqueued after the kernel that
  // turns a non-zero slot into the stream's sticky error built by `make_error(row, value)`.
  absl::StatusOr<CUdeviceptr> DeviceErrorSlot() ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status CheckDeviceErrorSlot(std::function<absl::Status(int row, int value)> make_error)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  CudaExecutor* executor_;
  CUstream stream_;
  CUcontext context_;
  int priority_;
  int sm_partition_;
  uint64_t generation_;

  vgpu::Mutex mu_;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  uint64_t* error_slot_host_ ABSL_GUARDED_BY(mu_) = nullptr;  // cuMemHostAlloc(DEVICEMAP)
  CUdeviceptr error_slot_device_ ABSL_GUARDED_BY(mu_) = 0;
};

// nullptr when `stream` is not a cuda stream.
CudaStream* AsCudaStream(Stream* stream);

class CudaExecutor : public Executor {
 public:
  // Retains the primary context of `device`; see Init.
  CudaExecutor(CudaPlatform* platform, const CudaDriver* driver, int ordinal, CUdevice device);
  ~CudaExecutor() override;
  absl::Status Init();

  Platform* platform() const override;
  int ordinal() const override { return ordinal_; }
  absl::StatusOr<PhysicalDeviceInfo> Describe() override;

  absl::StatusOr<void*> Allocate(uint64_t bytes) override;
  absl::Status Free(void* ptr) override;
  absl::StatusOr<void*> HostAllocate(uint64_t bytes) override;
  absl::Status HostFree(void* ptr) override;

  absl::StatusOr<uint64_t> VirtualMemoryGranularity() override;
  absl::StatusOr<void*> ReserveAddressRange(uint64_t bytes) override;
  absl::Status FreeAddressRange(void* va, uint64_t bytes) override;
  absl::StatusOr<PhysicalMemoryHandle> CreatePhysicalMemory(uint64_t bytes) override;
  absl::Status ReleasePhysicalMemory(PhysicalMemoryHandle handle) override;
  absl::Status Map(void* va, uint64_t bytes, PhysicalMemoryHandle handle, uint64_t offset) override;
  absl::Status MapAll(void* va, const PhysicalMemoryHandle* handles, size_t n) override;
  absl::Status Unmap(void* va, uint64_t bytes) override;

  std::pair<int, int> StreamPriorityRange() const override {
    return {least_priority_, greatest_priority_};
  }
  absl::StatusOr<std::vector<int>> PartitionSms(absl::Span<const int> sm_counts) override;
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream(const StreamOptions& options) override;
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override;
  bool CanAccessPeer(const Executor& other) const override;

  absl::StatusOr<Blas*> GetBlas() override;
  absl::StatusOr<Kernels*> GetKernels() override ABSL_LOCKS_EXCLUDED(kernels_mu_, module_mu_);
  // cuMemPoolCreate on this device (see cuda_memory_pool.cc).
  absl::StatusOr<std::unique_ptr<MemoryPool>> CreateMemoryPool(
      const MemoryPoolOptions& options) override;

  // Whether Init enabled peer access from this device to `other` (cuCtxEnablePeerAccess);
  // CanAccessPeer says whether the hardware could. Same device: true.
  bool PeerAccessEnabled(const Executor& other) const override;
  // NCCL 2.28's defaults: 8 MiB of rank state, then a send and a receive buffer of
  // NCCL_BUFFSIZE (4 MiB) per channel (at least 2) for each peer. More channels (NVLink
  // systems) take more: an estimate from below.
  uint64_t CollectiveBufferBytes(int ranks) const override;
  int compute_capability_major() const { return cc_major_; }
  // Called by CudaPlatform::Init once every executor exists.
  void SetPeerAccessEnabled(int cuda_device) { peers_enabled_.insert(cuda_device); }

  const CudaDriver& driver() const { return *driver_; }
  CUdevice device() const { return device_; }
  CUcontext context() const { return context_; }
  CudaPlatform* cuda_platform() const { return platform_; }

  // Runs `release` (which makes its own ScopedContext) now, or, in a host callback where no
  // CUDA call is allowed, at the next DrainGraveyard on a host thread.
  void Release(std::function<void()> release) ABSL_LOCKS_EXCLUDED(graveyard_mu_);
  // Runs the deferred releases; a no-op in a host callback or when there are none.
  void DrainGraveyard() ABSL_LOCKS_EXCLUDED(partition_mu_, graveyard_mu_);
  // Live events register so that re-partitioning destroys their green-context events while
  // those contexts exist; EventDestroyed destroys (or defers) the events of one CudaEvent.
  void EventCreated(CudaEvent* event) ABSL_LOCKS_EXCLUDED(graveyard_mu_);
  void EventDestroyed(CudaEvent* event, std::map<CUcontext, CUevent> events)
      ABSL_LOCKS_EXCLUDED(partition_mu_, graveyard_mu_);
  int sm_count() const { return sm_count_; }
  // "cuda GPU 0 (NVIDIA H100 80GB HBM3)", for messages.
  const std::string& label() const { return label_; }

  // The kernels module loaded in the stream's context (loaded on first use per context).
  absl::StatusOr<const KernelFunctions*> KernelFunctionsFor(CudaStream* stream)
      ABSL_LOCKS_EXCLUDED(module_mu_);
  // Streams of SM partitions alive; PartitionSms refuses to re-partition while any are.
  void StreamDestroyed(int sm_partition);

 private:
  struct Partition {
    CUgreenCtx green = nullptr;
    CUcontext context = nullptr;
    int sm_count = 0;
  };
  void DestroyPartitionsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(partition_mu_)
      ABSL_LOCKS_EXCLUDED(graveyard_mu_, module_mu_);
  void DrainGraveyardLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(partition_mu_)
      ABSL_LOCKS_EXCLUDED(graveyard_mu_);
  absl::Status CheckGranular(absl::string_view what, uint64_t bytes);
  bool InReservationLocked(CUdeviceptr va, uint64_t bytes) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  std::string Where(absl::string_view call) const;
  absl::StatusOr<KernelFunctions> LoadModule(CUcontext ctx);

  CudaPlatform* platform_;
  const CudaDriver* driver_;
  int ordinal_;
  CUdevice device_;
  CUcontext context_ = nullptr;
  std::string label_;
  int sm_count_ = 0;
  int cc_major_ = 0;
  int least_priority_ = 0;
  int greatest_priority_ = 0;
  bool vmm_supported_ = false;
  uint64_t vmm_granularity_ = 0;

  // Lock order: kernels_mu_, partition_mu_ before module_mu_ and graveyard_mu_; graveyard_mu_
  // before a CudaEvent's own mutex. mu_ is a leaf.
  vgpu::Mutex mu_;
  absl::flat_hash_map<CUdeviceptr, uint64_t> allocations_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<void*> host_allocations_ ABSL_GUARDED_BY(mu_);
  std::map<CUdeviceptr, uint64_t> reservations_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<CUmemGenericAllocationHandle, uint64_t> physical_ ABSL_GUARDED_BY(mu_);

  // SM partitions (green contexts) and the kernel modules of every context.
  vgpu::Mutex partition_mu_;
  std::vector<Partition> partitions_ ABSL_GUARDED_BY(partition_mu_);
  // Green contexts made only to split the remainder.
  std::vector<CUgreenCtx> split_helpers_ ABSL_GUARDED_BY(partition_mu_);
  uint64_t generation_ ABSL_GUARDED_BY(partition_mu_) = 0;
  std::atomic<int> partition_streams_{0};
  vgpu::Mutex module_mu_ ABSL_ACQUIRED_AFTER(partition_mu_, kernels_mu_);
  // (generation, partition)
  std::map<std::pair<uint64_t, int>, KernelFunctions> modules_ ABSL_GUARDED_BY(module_mu_);

  absl::flat_hash_set<int> peers_enabled_;  // CUDA ordinals; written only by Init

  // Deferred releases (see Release) and the live events; guarded by graveyard_mu_, drained
  // under partition_mu_ so that no green context dies under a deferred release.
  vgpu::Mutex graveyard_mu_ ABSL_ACQUIRED_AFTER(partition_mu_);
  std::vector<std::function<void()>> graveyard_ ABSL_GUARDED_BY(graveyard_mu_);
  std::vector<std::pair<CUcontext, CUevent>> graveyard_events_ ABSL_GUARDED_BY(graveyard_mu_);
  std::atomic<int> graveyard_pending_{0};
  absl::flat_hash_set<CudaEvent*> live_events_ ABSL_GUARDED_BY(graveyard_mu_);

  std::once_flag blas_once_;
  absl::Status blas_status_;
  std::unique_ptr<Blas> blas_;
  vgpu::Mutex kernels_mu_;
  std::unique_ptr<Kernels> kernels_ ABSL_GUARDED_BY(kernels_mu_);
};

class CudaPlatform : public Platform {
 public:
  CudaPlatform();
  ~CudaPlatform() override;
  // Loads the driver and discovers devices; failures leave 0 devices and a reason.
  void Init();

  std::string name() const override { return "cuda"; }
  int DeviceCount() const override { return static_cast<int>(executors_.size()); }
  std::string Summary() const override;
  absl::StatusOr<PhysicalDeviceInfo> Describe(int ordinal) override;
  absl::StatusOr<Executor*> GetExecutor(int ordinal) override;
  // NCCL (runtime/cuda/cuda_nccl.h), loaded when the first communicator is made.
  bool HasCommunicator() const override { return true; }
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> CreateCommunicator(
      absl::Span<Executor* const> executors) override;
  bool HasRankCommunicator() const override { return true; }
  absl::StatusOr<std::vector<uint8_t>> NcclUniqueId() override;
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> CreateRankCommunicator(
      Executor* executor, int rank, int nranks, absl::Span<const uint8_t> id) override;

  // The executor of a CUDA device ordinal (as cuPointerGetAttribute reports), or nullptr.
  CudaExecutor* ExecutorForDevice(int cuda_ordinal) const;

 private:
  // cuCtxEnablePeerAccess between every pair of distinct devices that can (Init).
  void EnablePeerAccess();

  std::unique_ptr<CudaDriver> driver_;
  std::string reason_;                    // why there are 0 devices
  std::vector<std::string> peer_errors_;  // capable pairs whose enabling failed
  std::vector<std::unique_ptr<CudaExecutor>> executors_;
};

// In cuda_blas.cc / cuda_kernels.cc / cuda_memory_pool.cc.
absl::StatusOr<std::unique_ptr<Blas>> CreateCudaBlas(CudaExecutor* executor);
// Takes ownership of `pool` (made by CudaExecutor::CreateMemoryPool).
std::unique_ptr<MemoryPool> CreateCudaMemoryPool(CudaExecutor* executor, CUmemoryPool pool);
std::unique_ptr<Kernels> CreateCudaKernels(CudaExecutor* executor);

}  // namespace vgpu::cuda

#endif  // VGPU_RUNTIME_CUDA_CUDA_EXECUTOR_H_
