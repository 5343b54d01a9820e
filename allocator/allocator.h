// The allocator interface every device memory allocator implements (BFC, vmm, async,
// adaptors), RMM-style: the public non-virtual Allocate/Deallocate do the argument checks and
// hand the rest to private DoAllocate/DoDeallocate, so checks are written once. The work every
// allocator shares is written here once too: the observer list and event delivery
// (Add/RemoveObserver, Notify), the counters behind Stats (AllocatorCounters) and the
// out-of-memory message (OutOfMemoryError); an allocator writes its placement policy and calls
// these where its events happen, under its own lock (see docs/allocator.md).
// DeviceBuffer is the move-only RAII owner of one allocation.
//
// Stream order (as PyTorch's caching allocator, RMM's allocate(bytes, stream) and
// cudaMallocAsync): every allocation belongs to the stream it was allocated on (the
// allocator's default stream, the logical device's, unless one is given). Freeing is
// stream-ordered: the block may be handed out again at once to work on the SAME stream, and
// to another stream only once the freeing stream's earlier work is complete. The allocator
// does not wait on the host for that: the new owner's stream is made to wait for an event
// recorded on the old one (Stream::WaitEvent), only when a block really moves between
// streams. Work on other streams that uses a block is declared with RecordStream (PyTorch's
// record_stream), after which the block is reused only behind that stream's work too.
// The bookkeeping written once here: the stream slots (each stream an allocator has seen
// gets a bit, at most kMaxStreams), the per-slot events and the waits; an allocator keeps
// one 64-bit mask of slots per block and hands back, with each allocation, the slots whose
// work the new owner must wait for.
//
// Thread safety: every Allocator is safe to call from any number of threads at once. The
// observer list has its own leaf lock; AllocatorCounters is a plain struct guarded by the
// allocator that holds it.
// A DeviceBuffer is a plain owner: moving or destroying one object from two threads at once
// is a data race, like any value type.
#ifndef VGPU_ALLOCATOR_ALLOCATOR_H_
#define VGPU_ALLOCATOR_ALLOCATOR_H_

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "vgpu/allocator/locks.h"

namespace vgpu {

class Event;   // runtime/platform.h
class Stream;  // runtime/platform.h

inline constexpr uint64_t kDefaultAlignment = 256;

struct AllocatorStats {
  uint64_t num_allocs = 0;  // successful allocations
  uint64_t num_frees = 0;
  uint64_t bytes_in_use = 0;  // sum of (rounded) live allocations
  uint64_t peak_bytes_in_use = 0;
  uint64_t bytes_reserved = 0;  // taken from the sub-allocator / device
  uint64_t peak_bytes_reserved = 0;
  uint64_t bytes_limit = 0;  // hard limit (0 = none)
  uint64_t largest_alloc_size = 0;
  uint64_t largest_free_block = 0;  // in reserved memory
  double fragmentation = 0.0;       // 1 - largest_free_block / free bytes in the pool
  uint64_t num_ooms = 0;
  uint64_t regions_mapped = 0;    // regions (or granule mappings) taken from the device
  uint64_t regions_unmapped = 0;  // and given back
  // vmm: the granule its regions are counted in, and the executor Map / MapAll / Unmap calls
  // made (a block's granules are mapped in one call); bfc without growth: the page maps and
  // unmaps its gathered pages cost (BFCOptions::gather_pages); 0 for allocators without.
  uint64_t mapping_granularity = 0;
  uint64_t map_calls = 0;
  uint64_t unmap_calls = 0;
  // Stream order: allocations that took a block last used by other streams, and the
  // stream-to-stream event waits (or host waits, for a null stream) that cost.
  uint64_t cross_stream_reuses = 0;
  uint64_t stream_waits = 0;
  std::string ToString() const;  // one line, human-readable sizes
};

// The counters behind AllocatorStats, kept the same way by every allocator: a plain struct its
// allocator guards with its own lock (one copy of the bookkeeping, no atomics on the hot path).
// `charged` is what a block counts against the limit (its rounded or padded size).
struct AllocatorCounters {
  void OnAlloc(uint64_t requested, uint64_t charged) {
    ++stats.num_allocs;
    stats.bytes_in_use += charged;
    stats.peak_bytes_in_use = std::max(stats.peak_bytes_in_use, stats.bytes_in_use);
    stats.largest_alloc_size = std::max(stats.largest_alloc_size, requested);
  }
  void OnFree(uint64_t charged) {
    ++stats.num_frees;
    stats.bytes_in_use -= charged;
  }
  void OnOom() { ++stats.num_ooms; }
  // Memory taken from (or given back to) the device or sub-allocator, one region at a time.
  void OnMap(uint64_t bytes) {
    stats.bytes_reserved += bytes;
    stats.peak_bytes_reserved = std::max(stats.peak_bytes_reserved, stats.bytes_reserved);
    ++stats.regions_mapped;
  }
  void OnUnmap(uint64_t bytes) {
    stats.bytes_reserved -= bytes;
    ++stats.regions_unmapped;
  }
  // ResetPeakStats: the peaks start again from the current values.
  void ResetPeaks() {
    stats.peak_bytes_in_use = stats.bytes_in_use;
    stats.peak_bytes_reserved = stats.bytes_reserved;
  }
  // Live allocations by the counts (allocs - frees), for CheckInvariants.
  uint64_t live() const { return stats.num_allocs - stats.num_frees; }

  AllocatorStats stats;
};

// One allocator event, for memory history and trace recording (allocator/memory_history.h,
// allocator/trace.h). `bytes` is the request (alloc, oom) or the block/region size.
enum class AllocatorEventKind { kAlloc, kFree, kMap, kUnmap, kOom };
struct AllocatorEvent {
  AllocatorEventKind kind = AllocatorEventKind::kAlloc;
  uint64_t ptr = 0;
  uint64_t bytes = 0;
  uint64_t bytes_in_use = 0;    // after the event
  uint64_t bytes_reserved = 0;  // after the event
  // Largest free block after the event (bfc, vmm; 0 where unknown): external fragmentation is
  // 1 - largest_free / (reserved - in use).
  uint64_t largest_free = 0;
};
// Receives events from an allocator, called with the allocator's lock held: implementations
// must be quick and must not call back into the allocator.
class AllocatorObserver {
 public:
  virtual ~AllocatorObserver() = default;
  virtual void OnAllocatorEvent(const std::string& allocator_name, const AllocatorEvent& e) = 0;
};

// What an out-of-memory error reports, beyond the allocator's name and the request. Every
// allocator's message has one shape: "<name>: out of memory allocating <size> (<n> bytes,
// rounded to <rounded>): <why>. <usage>. Hint: <hint>"; `usage` is its own numbers (limit,
// in use, reserved, ...).
struct OutOfMemoryReport {
  uint64_t bytes = 0;
  std::string rounded;  // as the allocator counts it ("2097152", "8 MiB")
  absl::string_view why;
  std::string usage;
  absl::string_view hint;
};

// Errors with no caller to return them to (a DeviceBuffer's free failing in its destructor, an
// allocator destroyed with live allocations, a region the device will not take back) go to the
// process-wide sink set here; with none set (the default) they are dropped: library code never
// writes to stderr. An application that wants them sets a sink (vgpu-bench: stderr). The sink
// may be called from any thread, possibly under an allocator's lock: it must be quick and must
// not call into an allocator. nullptr removes it.
void SetAllocatorErrorSink(std::function<void(absl::string_view message)> sink);
// Hands `message` ("vgpu: ..." without a newline) to the sink, if any.
void ReportAllocatorError(absl::string_view message);

class Allocator;

// Owns one allocation; frees it on destruction. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Allocator* allocator, void* data, uint64_t size, Stream* stream = nullptr)
      : allocator_(allocator), data_(data), size_(size), stream_(stream) {}
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  uint64_t size() const { return size_; }  // bytes requested
  Allocator* allocator() const { return allocator_; }
  // The stream the buffer was allocated on (nullptr: the allocator's default stream, which
  // may itself be null: host-synchronous use). Freeing is ordered on it.
  Stream* stream() const { return stream_; }
  // Declares that work on `stream` uses this buffer (Allocator::RecordStream).
  absl::Status RecordStream(Stream* stream);
  bool empty() const { return data_ == nullptr; }
  explicit operator bool() const { return data_ != nullptr; }

  // Frees now and reports the allocator's answer; the buffer is empty afterwards.
  absl::Status Reset();
  // Gives up ownership without freeing; the caller must Deallocate the pointer.
  void* Release();

 private:
  Allocator* allocator_ = nullptr;
  void* data_ = nullptr;
  uint64_t size_ = 0;
  Stream* stream_ = nullptr;
};

class Allocator {
 public:
  Allocator();
  virtual ~Allocator();

  // A buffer of at least `bytes`, aligned to `alignment` (a power of two; at least 256).
  // bytes == 0 gives an empty buffer (no memory), as in RMM and TensorFlow.
  // Errors: InvalidArgument for a bad alignment; ResourceExhausted (naming the device, the
  // request, the limit and the usage) when the memory is not there.
  // On the default stream (SetDefaultStream).
  absl::StatusOr<DeviceBuffer> Allocate(uint64_t bytes, uint64_t alignment = kDefaultAlignment);
  // The same without the RAII owner.
  absl::StatusOr<void*> AllocateRaw(uint64_t bytes, uint64_t alignment = kDefaultAlignment);
  // Stream-ordered (see the top of this file): the block is safe to use on `stream` from the
  // moment this returns, in that stream's order; nullptr means the default stream. Errors as
  // above, plus InvalidArgument for a stream of another device and ResourceExhausted when
  // more than kMaxStreams streams are in use with this allocator (ReleaseStream frees one).
  absl::StatusOr<DeviceBuffer> Allocate(uint64_t bytes, Stream* stream,
                                        uint64_t alignment = kDefaultAlignment);
  absl::StatusOr<void*> AllocateRaw(uint64_t bytes, Stream* stream,
                                    uint64_t alignment = kDefaultAlignment);
  // Frees a pointer from AllocateRaw (or a released buffer), ordered on the stream it was
  // allocated on (and behind the streams recorded for it): the host need not wait for that
  // work first. nullptr is a no-op. A pointer this allocator does not own, or one already
  // freed, is InvalidArgument and changes nothing.
  absl::Status Deallocate(void* ptr);
  // Declares that work enqueued on `stream` uses the live block `ptr` (allocated on another
  // stream): when it is freed, the block is reused only behind that work too, as PyTorch's
  // Tensor.record_stream. A no-op for the block's own stream; InvalidArgument for a pointer
  // that is not live here or a stream of another device.
  absl::Status RecordStream(void* ptr, Stream* stream);
  // The stream that nullptr stands for: the logical device's (set by the factory from
  // DeviceAllocatorOptions::stream). nullptr (the default) means host-synchronous use: the
  // caller has finished its work with a block before freeing it. Call before the first
  // allocation; FailedPrecondition afterwards.
  absl::Status SetDefaultStream(Stream* stream);
  Stream* default_stream() const { return SlotStream(0); }
  // Forgets `stream` before it is destroyed: waits (on the host) for its work, so blocks it
  // used are safe for everyone, and frees its slot. NotFound for a stream never used here.
  // Every stream used with an allocator must be released, or outlive it: the allocator's
  // destructor waits for the streams it still knows (their work may wait on its events).
  absl::Status ReleaseStream(Stream* stream);
  static constexpr int kMaxStreams = 64;
  // Testing only: hand blocks across streams without waiting (what the stream-order tests
  // prove breaks their workloads). Set before use.
  void SetSkipStreamWaitsForTesting(bool skip) { skip_stream_waits_ = skip; }

  virtual std::string name() const = 0;
  // The allocator's numbers (DoStats) with the stream-order counters this base keeps.
  AllocatorStats Stats() const;
  // Peaks start again from now (TensorFlow's tf.config.experimental.reset_memory_stats,
  // PyTorch's torch.cuda.reset_peak_memory_stats): peak_bytes_in_use and peak_bytes_reserved
  // become the current in-use and reserved bytes. Counts (allocations, frees, OOMs, map
  // calls, stream waits) keep counting.
  void ResetPeakStats();
  // Gives cached memory that holds no live block back (PyTorch's torch.cuda.empty_cache):
  // bfc with growth returns its wholly free regions to the device (growth off took its limit
  // up front and keeps it, as TensorFlow's BFC does, but puts gathered pages back in place);
  // vmm unmaps its mapping cache and empty slabs and, with growth, returns every free granule
  // to the device (without growth the granules stay created for later blocks); async trims its
  // pool. Live blocks are untouched; memory goes back only after the streams that used it are
  // done. Returns how far Stats().bytes_reserved fell.
  absl::StatusOr<uint64_t> ReleaseCachedMemory();
  // Bins, chunks and an occupancy map; for OOM reports and debugging.
  virtual std::string DumpMemoryLog() const { return name() + ": no memory log\n"; }
  // Walks all bookkeeping; Internal error describing the first inconsistency.
  virtual absl::Status CheckInvariants() const { return absl::OkStatus(); }
  // Also send this allocator's events (alloc/free/map/unmap/oom) to `observer`, which must
  // outlive the allocator or be removed first (nullptr is ignored). Allocators that report no
  // events never call it.
  void AddObserver(AllocatorObserver* observer) ABSL_LOCKS_EXCLUDED(observers_mu_);
  void RemoveObserver(AllocatorObserver* observer) ABSL_LOCKS_EXCLUDED(observers_mu_);

 protected:
  // Sends one event to the observers, under the caller's lock so events keep its order. With
  // none attached this is one relaxed load.
  void Notify(const std::string& allocator_name, const AllocatorEvent& e) const
      ABSL_LOCKS_EXCLUDED(observers_mu_) {
    if (has_observers_.load(std::memory_order_relaxed)) NotifySlow(allocator_name, e);
  }
  // Whether Notify would call anyone (to skip work that only observers need).
  bool HasObservers() const { return has_observers_.load(std::memory_order_relaxed); }
  // The flag HasObservers reads, for an allocator whose own events another one sends on
  // (BFCUsageMirror::forward).
  const std::atomic<bool>* ObserversFlag() const { return &has_observers_; }
  // ResourceExhausted with the message shape above.
  absl::Status OutOfMemoryError(const OutOfMemoryReport& report) const;

  // The stream of slot `slot` (0: the default stream); nullptr for a host-synchronous or
  // released slot.
  Stream* SlotStream(int slot) const { return Slot(slot).stream.load(std::memory_order_acquire); }
  // For an allocator that serves another allocator's blocks (vmm's slab BFC): from now on the
  // stream slots are `owner`'s, so requests and block masks carry the owner's slot numbers,
  // waits and syncs go to the owner's streams and events, and the owner registers, releases
  // and detaches streams. Call before the first allocation; `owner` must outlive this one.
  void ShareStreamSlotsOf(Allocator* owner) { slot_owner_ = owner != nullptr ? owner : this; }
  static uint64_t SlotBit(int slot) { return uint64_t{1} << slot; }
  // Makes slot `slot`'s stream wait (an event, no host wait) for the work enqueued so far on
  // each other slot in `mask`; a null stream waits on the host. Counted in `stats`.
  absl::Status WaitForSlots(int slot, uint64_t mask);
  // Waits on the host for the work of every stream this allocator has seen (destructors,
  // trims); the first error, after trying all.
  absl::Status SynchronizeStreams() { return SynchronizeSlots(~uint64_t{0}); }
  // The same for the slots in `mask`: before memory goes back to the device (an unmap), which
  // no stream may still be using. Inline when no slot of `mask` has a stream (host-synchronous
  // use, as in vgpu-bench's replays): nothing to wait for, no lock taken.
  absl::Status SynchronizeSlots(uint64_t mask) {
    return SlotsHaveStreams(mask) ? SynchronizeSlotsSlow(mask) : absl::OkStatus();
  }
  // Whether any slot of `mask` has a stream (one whose work may still use memory).
  bool SlotsHaveStreams(uint64_t mask) const {
    for (; mask != 0; mask &= mask - 1) {
      if (SlotStream(std::countr_zero(mask)) != nullptr) return true;
    }
    return false;
  }
  // Records `event` on slot `slot`'s stream, under the slot's lock so ReleaseStream cannot drop
  // the stream meanwhile: true when recorded, false when the slot has no stream (host-synchronous
  // or released: no work of it can be pending). For deferring an unmap until the streams that
  // used the memory are done with it, without waiting on the host.
  absl::StatusOr<bool> RecordSlotEvent(int slot, Event* event);
  // Waits for every stream this allocator has seen and forgets them all (the base destructor
  // does this; an allocator that owns a stream calls it before destroying the stream).
  void DetachStreams();

  // What an allocation asks of DoAllocate, and what it answers besides the pointer.
  struct AllocationRequest {
    uint64_t bytes = 0;
    uint64_t alignment = kDefaultAlignment;
    int slot = 0;  // the stream slot of the new owner
  };

 private:
  void NotifySlow(const std::string& allocator_name, const AllocatorEvent& e) const
      ABSL_LOCKS_EXCLUDED(observers_mu_);
  absl::Status SynchronizeSlotsSlow(uint64_t mask);
  // The slot of `stream` (nullptr: 0), registering it on first use. Inline for the default
  // stream, the hot path.
  absl::StatusOr<int> SlotFor(Stream* stream) {
    return stream == nullptr ? absl::StatusOr<int>(0) : RegisteredSlot(stream);
  }
  absl::StatusOr<int> RegisteredSlot(Stream* stream);
  // AllocateRaw's rare paths, out of line so its hot path keeps a small frame (the messages'
  // string building made it save six registers and 360 bytes of stack on every call).
  absl::Status BadAlignmentError(uint64_t bytes, uint64_t alignment) const;
  absl::StatusOr<void*> WaitForReuse(void* p, int slot, uint64_t wait_for);

  // Placement. `*wait_for` (0 on entry): the slots whose work on the block must be complete
  // before the new owner's stream uses it (the base waits after DoAllocate returns, without
  // the allocator's lock). An allocator whose backend orders frees itself leaves it 0.
  virtual absl::StatusOr<void*> DoAllocate(const AllocationRequest& request,
                                           uint64_t* wait_for) = 0;
  virtual absl::Status DoDeallocate(void* ptr) = 0;
  // Adds slot `slot` to the live block's streams; InvalidArgument when `ptr` is not live.
  virtual absl::Status DoRecordStream(void* ptr, int slot) = 0;
  // Called by ReleaseStream after the stream's work is done (an allocator built over
  // another allocator forwards it).
  virtual void OnReleaseStream(Stream* stream) {}
  // Everything in AllocatorStats but the stream-order counters, which Stats() adds (an
  // allocator over another one reports that one's in them).
  virtual AllocatorStats DoStats() const = 0;
  // ResetPeakStats' and ReleaseCachedMemory's work (an allocator over another one forwards).
  virtual void DoResetPeakStats() = 0;
  virtual absl::Status DoReleaseCachedMemory() = 0;
  // Counted by WaitForSlots and AllocateRaw; Stats() adds them.
  std::atomic<uint64_t> cross_stream_reuses_{0};
  std::atomic<uint64_t> stream_waits_{0};

 private:
  struct StreamSlotState {
    std::atomic<Stream*> stream{nullptr};
    std::unique_ptr<Event> event;  // recorded on `stream` for waiters; made on first need
    StdMutex event_mu;
  };
  // Slot `i` of the table in use: ours, or the owner's (ShareStreamSlotsOf).
  StreamSlotState& Slot(int i) const { return slot_owner_->slots_[i]; }
  StreamSlotState slots_[kMaxStreams];
  Allocator* slot_owner_ = this;        // whose slots_ this allocator uses (ShareStreamSlotsOf)
  StdMutex slots_mu_;                   // registration and release; lookups read the atomics
  std::atomic<bool> allocated_{false};  // SetDefaultStream is refused after this
  bool skip_stream_waits_ = false;

  // A leaf lock: taken under the allocator's own lock, never the other way round.
  mutable StdMutex observers_mu_;
  std::vector<AllocatorObserver*> observers_ ABSL_GUARDED_BY(observers_mu_);
  std::atomic<bool> has_observers_{false};
};

}  // namespace vgpu

#endif  // VGPU_ALLOCATOR_ALLOCATOR_H_
