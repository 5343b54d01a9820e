#include "vgpu/runtime/host/host_platform.h"

#include <cblas.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/file_io.h"
#include "vgpu/runtime/host/host_collectives.h"
#include "vgpu/runtime/host/host_kernels.h"
#include "vgpu/runtime/numbers.h"
#include "vgpu/runtime/platform_registry.h"
#include "vgpu/runtime/status.h"
#include "vgpu/runtime/user_text.h"

namespace vgpu {
namespace {

// Host pages: what Allocate and the memory pool round to.
constexpr uint64_t kPage = 4096;

// `x` rounded up to a multiple of `m` in *out; false when that does not fit in 64 bits (near
// 2^64 plain rounding would wrap to a tiny size).
bool RoundUpChecked(uint64_t x, uint64_t m, uint64_t* out) {
  const uint64_t down = x / m * m;
  if (down == x) {
    *out = x;
    return true;
  }
  if (down > UINT64_MAX - m) return false;
  *out = down + m;
  return true;
}

// ---------------------------------------------------------------------------------------------
// Events: a generation counter. Record() bumps `recorded` now and marks `completed` when the
// stream reaches it; waiters capture the generation current at their call (CUDA semantics).
class HostEvent : public Event {
 public:
  uint64_t BeginRecord() {
    std::lock_guard<std::mutex> l(mu_);
    return ++recorded_;
  }
  void Complete(uint64_t gen) {
    // Notify under the lock: a waiter may destroy the event as soon as it sees completion.
    std::lock_guard<std::mutex> l(mu_);
    completed_ = std::max(completed_, gen);
    cv_.notify_all();
  }
  uint64_t recorded() {
    std::lock_guard<std::mutex> l(mu_);
    return recorded_;
  }
  void WaitFor(uint64_t gen) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return completed_ >= gen; });
  }
  absl::StatusOr<bool> Query() override {
    std::lock_guard<std::mutex> l(mu_);
    return completed_ >= recorded_;
  }
  absl::Status Synchronize() override {
    WaitFor(recorded());
    return absl::OkStatus();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t recorded_ = 0;
  uint64_t completed_ = 0;
};

class HostExecutor;

// ---------------------------------------------------------------------------------------------
// Streams: one worker thread runs the queued work in order. The first failing task makes the
// stream's error sticky; later tasks are skipped (as a CUDA context after a fault).
class HostStream : public Stream {
 public:
  HostStream(HostExecutor* executor, int priority, HostFaultInjection* faults)
      : executor_(executor), priority_(priority), faults_(faults), worker_([this] { Run(); }) {}
  ~HostStream() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  Executor* executor() const override;
  int priority() const override { return priority_; }

  absl::Status MemcpyH2D(void* dst, const void* src, uint64_t bytes) override {
    return Copy(dst, src, bytes);
  }
  absl::Status MemcpyD2H(void* dst, const void* src, uint64_t bytes) override {
    return Copy(dst, src, bytes);
  }
  absl::Status MemcpyD2D(void* dst, const void* src, uint64_t bytes) override {
    return Copy(dst, src, bytes);
  }
  absl::Status Memset8(void* dst, uint8_t value, uint64_t bytes) override {
    if (bytes == 0) return Error();
    if (dst == nullptr) return absl::InvalidArgumentError("Memset8: null destination");
    return Enqueue([=] {
      std::memset(dst, value, bytes);
      return absl::OkStatus();
    });
  }
  absl::Status Memset32(void* dst, uint32_t value, uint64_t count) override {
    if (count == 0) return Error();
    if (dst == nullptr) return absl::InvalidArgumentError("Memset32: null destination");
    return Enqueue([=] {
      std::fill_n(static_cast<uint32_t*>(dst), count, value);
      return absl::OkStatus();
    });
  }
  absl::Status RecordEvent(Event* event) override {
    auto* e = static_cast<HostEvent*>(event);
    uint64_t gen = e->BeginRecord();
    return EnqueueAlways([e, gen] { e->Complete(gen); });
  }
  absl::Status WaitEvent(Event* event) override {
    auto* e = static_cast<HostEvent*>(event);
    uint64_t gen = e->recorded();
    return Enqueue([e, gen] {
      e->WaitFor(gen);
      return absl::OkStatus();
    });
  }
  absl::Status LaunchHostFunc(std::function<void()> fn) override {
    return Enqueue([fn = std::move(fn)] {
      fn();
      return absl::OkStatus();
    });
  }
  absl::Status Synchronize() override {
    std::unique_lock<std::mutex> l(mu_);
    idle_cv_.wait(l, [&] { return queue_.empty() && !busy_; });
    return error_;
  }

  // Queues `task`; returns the sticky error instead when the stream has failed.
  absl::Status Enqueue(std::function<absl::Status()> task) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!error_.ok()) return error_;
      queue_.push_back(std::move(task));
    }
    cv_.notify_one();
    return absl::OkStatus();
  }

 private:
  absl::Status Error() {
    std::lock_guard<std::mutex> l(mu_);
    return error_;
  }
  // Event completions run even on a failed stream so that waiters never hang.
  absl::Status EnqueueAlways(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> l(mu_);
      queue_.push_back([fn = std::move(fn)] {
        fn();
        return absl::OkStatus();
      });
      always_.insert(queue_.size() + consumed_);
    }
    cv_.notify_one();
    return absl::OkStatus();
  }

  absl::Status Copy(void* dst, const void* src, uint64_t bytes) {
    if (bytes == 0) return Error();
    if (dst == nullptr || src == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("memcpy of ", bytes, " bytes: null pointer"));
    }
    int64_t call = ++faults_->memcpy_calls;
    bool fail = faults_->fail_memcpy_at.load() == call;
    bool corrupt = faults_->corrupt_memcpy_at.load() == call;
    return Enqueue([=] {
      if (fail) {
        return absl::InternalError(
            absl::StrCat("host platform: injected failure of memcpy #", call));
      }
      std::memmove(dst, src, bytes);
      if (corrupt) static_cast<uint8_t*>(dst)[bytes / 2] ^= 0x5a;
      return absl::OkStatus();
    });
  }

  void Run() {
    std::unique_lock<std::mutex> l(mu_);
    while (true) {
      cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      std::function<absl::Status()> task = std::move(queue_.front());
      queue_.pop_front();
      uint64_t index = ++consumed_;
      bool always = always_.erase(index) > 0;
      bool skip = !error_.ok() && !always;
      busy_ = true;
      l.unlock();
      absl::Status s = skip ? absl::OkStatus() : task();
      l.lock();
      busy_ = false;
      if (!s.ok() && error_.ok()) error_ = s;
      if (queue_.empty()) idle_cv_.notify_all();
    }
  }

  HostExecutor* executor_;
  int priority_;
  HostFaultInjection* faults_;
  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::function<absl::Status()>> queue_;
  std::set<uint64_t> always_;  // 1-based positions of tasks that run even after an error
  uint64_t consumed_ = 0;
  bool busy_ = false;
  bool stop_ = false;
  absl::Status error_;
  std::thread worker_;  // last: starts after the members above exist
};

// ---------------------------------------------------------------------------------------------
HostStream* AsHost(Stream* s) { return static_cast<HostStream*>(s); }

class HostBlas : public Blas {
 public:
  absl::Status Sgemm(Stream* stream, Transpose ta, Transpose tb, int m, int n, int k, float alpha,
                     const float* a, int lda, const float* b, int ldb, float beta, float* c,
                     int ldc) override {
    if (m < 0 || n < 0 || k < 0) {
      return absl::InvalidArgumentError(absl::StrCat("Sgemm: negative size m=", m, " n=", n, " k=", k));
    }
    return AsHost(stream)->Enqueue([=] {
      cblas_sgemm(CblasColMajor, ta == Transpose::kYes ? CblasTrans : CblasNoTrans,
                  tb == Transpose::kYes ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb,
                  beta, c, ldc);
      return absl::OkStatus();
    });
  }
  absl::Status Saxpy(Stream* stream, int n, float alpha, const float* x, float* y) override {
    return AsHost(stream)->Enqueue([=] {
      cblas_saxpy(n, alpha, x, 1, y, 1);
      return absl::OkStatus();
    });
  }
  absl::Status Sscal(Stream* stream, int n, float alpha, float* x) override {
    return AsHost(stream)->Enqueue([=] {
      cblas_sscal(n, alpha, x, 1);
      return absl::OkStatus();
    });
  }
};

// ---------------------------------------------------------------------------------------------
// A simulated stream-ordered pool (the driver's cuMemPool): blocks are Executor::Allocate
// calls, so they count against the card's capacity. A freed block is cached for reuse only when
// its stream reaches the free (a task queued there), as the driver does across streams; the
// driver may reuse sooner on the same stream, which this conservative version never needs.
// State is shared with the queued tasks so that a pool destroyed before its frees land is safe.
class HostMemoryPool : public MemoryPool {
 public:
  HostMemoryPool(Executor* executor, const MemoryPoolOptions& options)
      : state_(std::make_shared<State>()) {
    state_->executor = executor;
    state_->release_threshold = options.release_threshold;
  }
  ~HostMemoryPool() override {
    std::lock_guard<std::mutex> l(state_->mu);
    state_->destroyed = true;
    // Live blocks go too (the allocator frees everything first); pending frees free theirs
    // when they land.
    for (auto& [size, p] : state_->cached) state_->executor->Free(p).IgnoreError();
    for (auto& [p, size] : state_->live) state_->executor->Free(p).IgnoreError();
    state_->cached.clear();
    state_->live.clear();
  }

  absl::StatusOr<void*> AllocateAsync(uint64_t bytes, Stream* stream) override {
    if (bytes == 0) return absl::InvalidArgumentError("host memory pool: AllocateAsync of 0 bytes");
    VGPU_RETURN_IF_ERROR(CheckStream(stream, "AllocateAsync"));
    uint64_t size = 0;
    if (!RoundUpChecked(bytes, kPage, &size)) {
      return absl::ResourceExhaustedError(
          absl::StrCat("host memory pool: out of memory allocating ", bytes, " bytes"));
    }
    {
      std::lock_guard<std::mutex> l(state_->mu);
      // Best fit, but never a block over twice the size: a small request must not pin a
      // large cached block that a large one will want.
      auto it = state_->cached.lower_bound(size);
      if (it != state_->cached.end() && it->first / 2 <= size) {
        void* p = it->second;
        state_->live[p] = it->first;
        state_->used += it->first;
        state_->cached.erase(it);
        return p;
      }
    }
    VGPU_ASSIGN_OR_RETURN(void* p, state_->executor->Allocate(size));
    std::lock_guard<std::mutex> l(state_->mu);
    state_->reserved += size;
    state_->used += size;
    state_->live[p] = size;
    return p;
  }

  absl::Status FreeAsync(void* ptr, Stream* stream) override {
    VGPU_RETURN_IF_ERROR(CheckStream(stream, "FreeAsync"));
    uint64_t size = 0;
    {
      std::lock_guard<std::mutex> l(state_->mu);
      auto it = state_->live.find(ptr);
      if (it == state_->live.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "host memory pool: FreeAsync of ", absl::Hex(reinterpret_cast<uintptr_t>(ptr)),
            ", which is not a live allocation of this pool (double free or foreign pointer)"));
      }
      size = it->second;
      state_->used -= size;
      state_->live.erase(it);
    }
    std::shared_ptr<State> state = state_;
    absl::Status queued = EnqueueHostTask(stream, [state, ptr, size] {
      state->Land(ptr, size);
      return absl::OkStatus();
    });
    if (!queued.ok()) {
      // A failed stream runs no more work: once drained, nothing can touch the block.
      stream->Synchronize().IgnoreError();
      state->Land(ptr, size);
    }
    return absl::OkStatus();
  }

  absl::Status TrimTo(uint64_t bytes_to_keep) override {
    std::lock_guard<std::mutex> l(state_->mu);
    state_->ReleaseCachedLocked(bytes_to_keep);
    return absl::OkStatus();
  }

  absl::StatusOr<MemoryPoolStats> Stats() override {
    std::lock_guard<std::mutex> l(state_->mu);
    return MemoryPoolStats{state_->reserved, state_->used};
  }

 private:
  struct State {
    std::mutex mu;
    Executor* executor = nullptr;
    uint64_t release_threshold = 0;
    bool destroyed = false;
    uint64_t reserved = 0;  // live + cached + pending frees
    uint64_t used = 0;      // live
    std::multimap<uint64_t, void*> cached;          // size -> block
    absl::flat_hash_map<void*, uint64_t> live;      // block -> size

    // A free reached its place in the stream: cache the block (or free it when the pool is
    // gone), then honour the release threshold.
    void Land(void* p, uint64_t size) {
      std::lock_guard<std::mutex> l(mu);
      if (destroyed) {
        executor->Free(p).IgnoreError();
        return;
      }
      cached.emplace(size, p);
      if (reserved > release_threshold) ReleaseCachedLocked(release_threshold);
    }
    void ReleaseCachedLocked(uint64_t keep) {
      while (reserved > keep && !cached.empty()) {
        auto largest = std::prev(cached.end());
        executor->Free(largest->second).IgnoreError();
        reserved -= largest->first;
        cached.erase(largest);
      }
    }
  };
  absl::Status CheckStream(Stream* stream, absl::string_view what) const {
    if (stream == nullptr || stream->executor() != state_->executor) {
      return absl::InvalidArgumentError(absl::StrCat(
          "host memory pool: ", what, ": the stream does not belong to this pool's device"));
    }
    return absl::OkStatus();
  }

  std::shared_ptr<State> state_;
};

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
    info.uuid = absl::StrCat("HOST-00000000-0000-0000-0000-", absl::Dec(ordinal_, absl::kZeroPad12));
    info.pci_bus_id = absl::StrCat("host:", ordinal_);
    info.sm_count = 0;
    info.total_bytes = capacity_;
    std::lock_guard<std::mutex> l(mu_);
    info.free_bytes = capacity_ - std::min(capacity_, used_);
    info.vmm_granularity = kHostVmmGranularity;
    info.allocation_granularity = kPage;
    return info;
  }

  absl::StatusOr<void*> Allocate(uint64_t bytes) override {
    if (bytes == 0) return absl::InvalidArgumentError("Executor::Allocate: zero bytes");
    int64_t call = ++faults_->allocate_calls;
    if (faults_->fail_allocate_at.load() == call) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "host GPU ", ordinal_, ": injected failure of raw allocation #", call));
    }
    uint64_t rounded = 0;
    {
      std::lock_guard<std::mutex> l(mu_);
      // Near 2^64 rounding would wrap to a tiny size: refuse as out of memory instead.
      if (!RoundUpChecked(bytes, kPage, &rounded)) return OutOfMemory(bytes);
      VGPU_RETURN_IF_ERROR(Reserve(rounded, bytes));
    }
    // mmap: pages are only committed when touched, and return to the OS on munmap.
    void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    std::lock_guard<std::mutex> l(mu_);
    if (p == MAP_FAILED) {
      used_ -= rounded;
      return absl::ResourceExhaustedError(absl::StrCat("host GPU ", ordinal_, ": mmap of ",
                                                       FormatBytes(rounded), " failed: ",
                                                       std::strerror(errno)));
    }
    allocations_[p] = rounded;
    return p;
  }

  absl::Status Free(void* ptr) override {
    uint64_t bytes;
    {
      std::lock_guard<std::mutex> l(mu_);
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
    std::lock_guard<std::mutex> l(mu_);
    host_allocations_.insert(p);
    return p;
  }
  absl::Status HostFree(void* ptr) override {
    {
      std::lock_guard<std::mutex> l(mu_);
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
    std::lock_guard<std::mutex> l(mu_);
    reservations_[p] = bytes;
    return p;
  }
  absl::Status FreeAddressRange(void* va, uint64_t bytes) override {
    {
      std::lock_guard<std::mutex> l(mu_);
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
      return absl::ResourceExhaustedError(absl::StrCat(
          "host GPU ", ordinal_, ": injected failure of physical allocation #", call));
    }
    std::lock_guard<std::mutex> l(mu_);
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
    std::lock_guard<std::mutex> l(mu_);
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

  absl::Status Map(void* va, uint64_t bytes, PhysicalMemoryHandle handle, uint64_t offset) override {
    VGPU_RETURN_IF_ERROR(CheckGranular("Map", bytes));
    std::lock_guard<std::mutex> l(mu_);
    auto it = physical_.find(handle.value);
    if (it == physical_.end() || offset > it->second || bytes > it->second - offset) {
      return absl::InvalidArgumentError("Map: unknown handle or range past its end");
    }
    if (!InReservation(va, bytes)) {
      return absl::InvalidArgumentError("Map: range is not inside a reserved address range");
    }
    void* p = mmap(va, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, memfd_,
                   static_cast<off_t>(handle.value + offset));
    if (p == MAP_FAILED) return absl::InternalError(absl::StrCat("Map: mmap failed: ", std::strerror(errno)));
    return absl::OkStatus();
  }
  absl::Status Unmap(void* va, uint64_t bytes) override {
    VGPU_RETURN_IF_ERROR(CheckGranular("Unmap", bytes));
    std::lock_guard<std::mutex> l(mu_);
    if (!InReservation(va, bytes)) {
      return absl::InvalidArgumentError("Unmap: range is not inside a reserved address range");
    }
    void* p = mmap(va, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    if (p == MAP_FAILED) return absl::InternalError(absl::StrCat("Unmap: mmap failed: ", std::strerror(errno)));
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
      return absl::InternalError(absl::StrCat("host GPU ", ordinal_, ": injected failure of stream #", call));
    }
    if (options.sm_partition >= 0) {
      return absl::InvalidArgumentError("host platform has no SM partitions");
    }
    int p = std::clamp(options.priority, -5, 0);
    return std::unique_ptr<Stream>(std::make_unique<HostStream>(this, p, faults_));
  }
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override {
    return std::unique_ptr<Event>(std::make_unique<HostEvent>());
  }
  bool CanAccessPeer(const Executor& other) const override {
    return other.platform() == platform_;
  }
  absl::StatusOr<Blas*> GetBlas() override { return &blas_; }
  absl::StatusOr<Kernels*> GetKernels() override { return kernels_.get(); }
  absl::StatusOr<std::unique_ptr<MemoryPool>> CreateMemoryPool(
      const MemoryPoolOptions& options) override {
    return std::unique_ptr<MemoryPool>(std::make_unique<HostMemoryPool>(this, options));
  }

 private:
  static uint64_t RoundUp(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }
  absl::Status OutOfMemory(uint64_t requested) const {
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
                                                     "granularity ", FormatBytes(kHostVmmGranularity)));
    }
    return absl::OkStatus();
  }
  // Requires mu_.
  absl::Status Reserve(uint64_t rounded, uint64_t requested) {
    if (!faults_->ignore_capacity.load() && (rounded > capacity_ || used_ > capacity_ - rounded)) {
      return OutOfMemory(requested);
    }
    if (used_ > UINT64_MAX - rounded) return OutOfMemory(requested);
    used_ += rounded;
    return absl::OkStatus();
  }
  absl::Status EnsureMemfd() {
    if (memfd_ >= 0) return absl::OkStatus();
    memfd_ = memfd_create(absl::StrCat("vgpu-host-", ordinal_).c_str(), MFD_CLOEXEC);
    if (memfd_ < 0) return absl::InternalError(absl::StrCat("memfd_create failed: ", std::strerror(errno)));
    uint64_t space = RoundUp(capacity_, kHostVmmGranularity) * 4;
    if (ftruncate(memfd_, static_cast<off_t>(space)) != 0) {
      return absl::InternalError(absl::StrCat("ftruncate failed: ", std::strerror(errno)));
    }
    free_offsets_[0] = space;
    return absl::OkStatus();
  }
  bool InReservation(void* va, uint64_t bytes) const {
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
  HostBlas blas_;
  std::unique_ptr<Kernels> kernels_ = CreateHostKernels();

  mutable std::mutex mu_;
  uint64_t used_ = 0;
  absl::flat_hash_map<void*, uint64_t> allocations_;
  absl::flat_hash_set<void*> host_allocations_;
  std::map<void*, uint64_t> reservations_;
  int memfd_ = -1;
  std::map<uint64_t, uint64_t> free_offsets_;  // offset -> size
  std::map<uint64_t, uint64_t> physical_;      // offset -> size
};

Executor* HostStream::executor() const { return executor_; }

}  // namespace

absl::Status EnqueueHostTask(Stream* stream, std::function<absl::Status()> task) {
  auto* host = dynamic_cast<HostStream*>(stream);
  if (host == nullptr) {
    return absl::InvalidArgumentError("host kernels need a host-platform stream");
  }
  return host->Enqueue(std::move(task));
}

absl::Status CheckHostDeviceSizes(absl::Span<const uint64_t> device_bytes) {
  if (device_bytes.empty()) return absl::InvalidArgumentError("host platform: no devices");
  if (device_bytes.size() > kHostMaxDevices) {
    return absl::InvalidArgumentError(absl::StrCat("host platform: ", device_bytes.size(),
                                                   " devices; at most ", kHostMaxDevices));
  }
  uint64_t total = 0;
  for (size_t i = 0; i < device_bytes.size(); ++i) {
    const uint64_t b = device_bytes[i];
    if (b < kHostVmmGranularity) {
      return absl::InvalidArgumentError(
          absl::StrCat("host device ", i, ": ", FormatBytes(b), "; a device needs at least 2 MiB"));
    }
    if (b > kHostMaxDeviceBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "host device ", i, ": ", FormatBytes(b), " (", b, " bytes) is larger than ",
          FormatBytes(kHostMaxDeviceBytes),
          ", the most a simulated card may have: its memory and the vmm allocator's address "
          "ranges must fit in the process's address space (128 TiB on x86-64)"));
    }
    total += b;  // no overflow: at most 64 devices of at most 64 TiB
    if (total > kHostMaxTotalBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "host devices 0..", i, " add up to ", FormatBytes(total), ", more than the ",
          FormatBytes(kHostMaxTotalBytes),
          " all simulated cards may have together (they share the process's address space)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint64_t>> ParseHostDevices(absl::string_view spec) {
  auto bad = [&](absl::string_view part, absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("VGPU_HOST_DEVICES=", QuoteUserText(spec), ": bad part ", QuoteUserText(part),
                     ": ", why, " (expected e.g. \"2x16GiB\" or \"16GiB,8GiB\")"));
  };
  std::vector<uint64_t> out;
  absl::string_view text = StripUserValue(spec);
  if (text.empty()) return bad(spec, "empty");
  uint64_t total = 0;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) return bad(part, "empty entry");
    uint64_t count = 1;
    absl::string_view size = part;
    size_t x = part.find_first_of("xX");
    if (x != absl::string_view::npos) {
      absl::string_view n = absl::StripAsciiWhitespace(part.substr(0, x));
      absl::StatusOr<uint64_t> c = ParseUint64(n);
      if (n.empty() || !absl::ascii_isdigit(static_cast<unsigned char>(n[0])) || !c.ok() ||
          *c == 0 || *c > kHostMaxDevices) {
        return bad(part, absl::StrCat("count before 'x' must be 1..", kHostMaxDevices));
      }
      count = *c;
      size = part.substr(x + 1);
    }
    absl::StatusOr<uint64_t> bytes = ParseBytes(size);
    if (!bytes.ok()) return bad(part, bytes.status().message());
    if (*bytes < kHostVmmGranularity) return bad(part, "a device needs at least 2 MiB");
    if (*bytes > kHostMaxDeviceBytes) {
      return bad(
          part, absl::StrCat("a simulated card may have at most ", FormatBytes(kHostMaxDeviceBytes),
                             " (it and the vmm allocator's address ranges must fit in the "
                             "process's address space, 128 TiB on x86-64)"));
    }
    if (out.size() + count > kHostMaxDevices) {
      return bad(part, absl::StrCat("more than ", kHostMaxDevices, " devices"));
    }
    for (uint64_t i = 0; i < count; ++i) out.push_back(*bytes);
    total += count * *bytes;  // no overflow: at most 64 x 64 TiB
    if (total > kHostMaxTotalBytes) {
      return bad(part, absl::StrCat("the cards add up to ", FormatBytes(total), ", more than the ",
                                    FormatBytes(kHostMaxTotalBytes),
                                    " all simulated cards may have together"));
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<HostPlatform>> HostPlatform::Create(const HostPlatformOptions& options) {
  VGPU_RETURN_IF_ERROR(CheckHostDeviceSizes(options.device_bytes));
  std::unique_ptr<HostPlatform> p(new HostPlatform());
  for (size_t i = 0; i < options.device_bytes.size(); ++i) {
    p->executors_.push_back(
        std::make_unique<HostExecutor>(p.get(), static_cast<int>(i), options.device_bytes[i], &p->faults_));
  }
  return p;
}

HostPlatform::~HostPlatform() = default;

int HostPlatform::DeviceCount() const { return static_cast<int>(executors_.size()); }

std::string HostPlatform::Summary() const {
  std::vector<std::string> sizes;
  for (const auto& e : executors_) sizes.push_back(FormatBytes(static_cast<HostExecutor*>(e.get())->Describe()->total_bytes));
  return absl::StrCat("host platform: ", executors_.size(), " simulated GPU(s) [",
                      absl::StrJoin(sizes, ", "), "] in host memory, VMM granularity ",
                      FormatBytes(kHostVmmGranularity));
}

absl::StatusOr<PhysicalDeviceInfo> HostPlatform::Describe(int ordinal) {
  VGPU_ASSIGN_OR_RETURN(Executor * e, GetExecutor(ordinal));
  return e->Describe();
}

absl::StatusOr<Executor*> HostPlatform::GetExecutor(int ordinal) {
  if (ordinal < 0 || ordinal >= DeviceCount()) {
    return absl::NotFoundError(absl::StrCat("host platform has no device ", ordinal, " (it has ",
                                            DeviceCount(), ", ordinals 0..", DeviceCount() - 1, ")"));
  }
  return executors_[ordinal].get();
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> HostPlatform::CreateCommunicator(
    absl::Span<Executor* const> executors) {
  return host::CreateHostCommunicator(executors);
}

void HostPlatform::SetBlasThreads(int threads) { SetHostBlasThreads(threads); }

absl::StatusOr<std::unique_ptr<HostPlatform>> CreateHostPlatform(
    const SettingLookup& settings) {
  HostPlatformOptions options;
  if (std::optional<std::string> devices = settings("VGPU_HOST_DEVICES"); devices.has_value()) {
    VGPU_ASSIGN_OR_RETURN(options.device_bytes, ParseHostDevices(*devices));
  }
  VGPU_ASSIGN_OR_RETURN(std::unique_ptr<HostPlatform> platform, HostPlatform::Create(options));
  if (std::optional<std::string> faults = settings(kHostFaultsEnv); faults.has_value()) {
    VGPU_ASSIGN_OR_RETURN(FaultInjector * injector, platform->GetFaultInjector());
    VGPU_RETURN_IF_ERROR(ApplyFaultSpec(*injector, kHostFaultsEnv, *faults));
  }
  return platform;
}

}  // namespace vgpu

VGPU_REGISTER_PLATFORM(host, 0, [](const vgpu::SettingLookup& settings) {
  return absl::StatusOr<std::unique_ptr<vgpu::Platform>>(vgpu::CreateHostPlatform(settings));
})
