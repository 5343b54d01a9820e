#include "vgpu/allocator/allocator.h"

#include <bit>
#include <utility>

#include "absl/base/optimization.h"
#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/mutex.h"
#include "vgpu/runtime/platform.h"
#include "vgpu/runtime/status.h"

namespace vgpu {

std::string AllocatorStats::ToString() const {
  return absl::StrFormat(
      "in use %s (peak %s), reserved %s (peak %s), limit %s, allocs %d, frees %d, "
      "largest alloc %s, largest free block %s, fragmentation %.3f, OOMs %d, "
      "regions mapped %d unmapped %d",
      FormatBytes(bytes_in_use), FormatBytes(peak_bytes_in_use), FormatBytes(bytes_reserved),
      FormatBytes(peak_bytes_reserved), bytes_limit ? FormatBytes(bytes_limit) : "none", num_allocs,
      num_frees, FormatBytes(largest_alloc_size), FormatBytes(largest_free_block), fragmentation,
      num_ooms, regions_mapped, regions_unmapped);
}

namespace {

vgpu::Mutex sink_mu;
std::function<void(absl::string_view)>* error_sink ABSL_GUARDED_BY(sink_mu) = nullptr;

void ReportFreeFailure(const absl::Status& s) {
  if (!s.ok()) ReportAllocatorError(absl::StrCat("vgpu: DeviceBuffer free failed: ", s.ToString()));
}

}  // namespace

void SetAllocatorErrorSink(std::function<void(absl::string_view message)> sink) {
  auto* next = sink ? new std::function<void(absl::string_view)>(std::move(sink)) : nullptr;
  std::function<void(absl::string_view)>* old;
  {
    vgpu::MutexLock l(&sink_mu);
    old = std::exchange(error_sink, next);
  }
  delete old;
}

void ReportAllocatorError(absl::string_view message) {
  vgpu::MutexLock l(&sink_mu);
  if (error_sink != nullptr) (*error_sink)(message);
}

DeviceBuffer::~DeviceBuffer() { ReportFreeFailure(Reset()); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : allocator_(std::exchange(other.allocator_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      stream_(std::exchange(other.stream_, nullptr)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    ReportFreeFailure(Reset());
    allocator_ = std::exchange(other.allocator_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

absl::Status DeviceBuffer::RecordStream(Stream* stream) {
  if (data_ == nullptr) {
    return absl::FailedPreconditionError("RecordStream on an empty DeviceBuffer");
  }
  return allocator_->RecordStream(data_, stream);
}

absl::Status DeviceBuffer::Reset() {
  if (data_ == nullptr) return absl::OkStatus();
  void* p = std::exchange(data_, nullptr);
  size_ = 0;
  stream_ = nullptr;
  return std::exchange(allocator_, nullptr)->Deallocate(p);
}

void* DeviceBuffer::Release() {
  allocator_ = nullptr;
  size_ = 0;
  stream_ = nullptr;
  return std::exchange(data_, nullptr);
}

Allocator::Allocator() = default;

// Streams may still be waiting on the slots' events: let them pass before the events go.
Allocator::~Allocator() { DetachStreams(); }

void Allocator::DetachStreams() {
  if (slot_owner_ != this) return;  // the owner detaches the streams it shares
  for (StreamSlotState& slot : slots_) {
    StdMutexLock l(&slot.event_mu);
    Stream* s = slot.stream.exchange(nullptr, std::memory_order_acq_rel);
    if (s != nullptr) s->Synchronize().IgnoreError();
  }
}

absl::StatusOr<void*> Allocator::AllocateRaw(uint64_t bytes, uint64_t alignment) {
  return AllocateRaw(bytes, nullptr, alignment);
}

absl::StatusOr<void*> Allocator::AllocateRaw(uint64_t bytes, Stream* stream, uint64_t alignment) {
  if (ABSL_PREDICT_FALSE(alignment == 0 || (alignment & (alignment - 1)) != 0)) {
    return BadAlignmentError(bytes, alignment);
  }
  if (alignment < kDefaultAlignment) alignment = kDefaultAlignment;
  int slot = 0;  // the default stream's, without a StatusOr on the hot path
  if (stream != nullptr) {
    absl::StatusOr<int> slot_or = RegisteredSlot(stream);
    if (!slot_or.ok()) return slot_or.status();
    slot = *slot_or;
  }
  if (!allocated_.load(std::memory_order_relaxed)) {
    allocated_.store(true, std::memory_order_relaxed);
  }
  if (bytes == 0) return nullptr;
  uint64_t wait_for = 0;
  absl::StatusOr<void*> p = DoAllocate(AllocationRequest{bytes, alignment, slot}, &wait_for);
  if (ABSL_PREDICT_FALSE(p.ok() && (wait_for & ~SlotBit(slot)) != 0)) {
    return WaitForReuse(*p, slot, wait_for);
  }
  return p;
}

absl::Status Allocator::BadAlignmentError(uint64_t bytes, uint64_t alignment) const {
  return absl::InvalidArgumentError(absl::StrCat(
      name(), ": alignment ", alignment, " is not a power of two (request of ", bytes, " bytes)"));
}

absl::StatusOr<void*> Allocator::WaitForReuse(void* p, int slot, uint64_t wait_for) {
  cross_stream_reuses_.fetch_add(1, std::memory_order_relaxed);
  absl::Status s = WaitForSlots(slot, wait_for);
  if (s.ok()) return p;
  // The block cannot be made safe for this stream: give it back (its streams stay on it).
  absl::Status freed = DoDeallocate(p);
  if (!freed.ok()) ReportAllocatorError(absl::StrCat("vgpu: ", freed.ToString()));
  return absl::Status(s.code(), absl::StrCat(name(),
                                             ": ordering a block freed on another "
                                             "stream before its reuse: ",
                                             s.message()));
}

absl::StatusOr<DeviceBuffer> Allocator::Allocate(uint64_t bytes, uint64_t alignment) {
  return Allocate(bytes, nullptr, alignment);
}

absl::StatusOr<DeviceBuffer> Allocator::Allocate(uint64_t bytes, Stream* stream,
                                                 uint64_t alignment) {
  absl::StatusOr<void*> p = AllocateRaw(bytes, stream, alignment);
  if (!p.ok()) return p.status();
  if (*p == nullptr) return DeviceBuffer();
  return DeviceBuffer(this, *p, bytes, stream != nullptr ? stream : default_stream());
}

absl::Status Allocator::Deallocate(void* ptr) {
  if (ptr == nullptr) return absl::OkStatus();
  return DoDeallocate(ptr);
}

AllocatorStats Allocator::Stats() const {
  AllocatorStats s = DoStats();
  s.cross_stream_reuses += cross_stream_reuses_.load(std::memory_order_relaxed);
  s.stream_waits += stream_waits_.load(std::memory_order_relaxed);
  return s;
}

void Allocator::ResetPeakStats() { DoResetPeakStats(); }

absl::StatusOr<uint64_t> Allocator::ReleaseCachedMemory() {
  const uint64_t before = DoStats().bytes_reserved;
  VGPU_RETURN_IF_ERROR(DoReleaseCachedMemory());
  const uint64_t after = DoStats().bytes_reserved;
  return before > after ? before - after : 0;  // other threads may have grown it meanwhile
}

absl::Status Allocator::RecordStream(void* ptr, Stream* stream) {
  if (ptr == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": RecordStream of a null pointer"));
  }
  absl::StatusOr<int> slot = SlotFor(stream);
  if (!slot.ok()) return slot.status();
  return DoRecordStream(ptr, *slot);
}

absl::Status Allocator::SetDefaultStream(Stream* stream) {
  if (slot_owner_ != this) return slot_owner_->SetDefaultStream(stream);
  StdMutexLock l(&slots_mu_);
  if (allocated_.load(std::memory_order_relaxed)) {
    return absl::FailedPreconditionError(
        absl::StrCat(name(), ": the default stream is set before the first allocation"));
  }
  for (int i = 1; i < kMaxStreams; ++i) {
    if (stream != nullptr && slots_[i].stream.load(std::memory_order_relaxed) == stream) {
      return absl::FailedPreconditionError(
          absl::StrCat(name(), ": the stream is already in use with this allocator"));
    }
  }
  slots_[0].stream.store(stream, std::memory_order_release);
  return absl::OkStatus();
}

absl::StatusOr<int> Allocator::RegisteredSlot(Stream* stream) {
  if (slot_owner_ != this) return slot_owner_->RegisteredSlot(stream);
  // Lock-free lookup first: the hot path of a program that passes its streams.
  for (int i = 0; i < kMaxStreams; ++i) {
    if (slots_[i].stream.load(std::memory_order_acquire) == stream) return i;
  }
  StdMutexLock l(&slots_mu_);
  for (int i = 0; i < kMaxStreams; ++i) {
    if (slots_[i].stream.load(std::memory_order_relaxed) == stream) return i;
  }
  Stream* dflt = slots_[0].stream.load(std::memory_order_relaxed);
  if (dflt != nullptr && stream->executor() != dflt->executor()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), ": the stream belongs to another device than this allocator's"));
  }
  for (int i = 1; i < kMaxStreams; ++i) {  // slot 0 is the default stream's, even when null
    if (slots_[i].stream.load(std::memory_order_relaxed) == nullptr) {
      slots_[i].stream.store(stream, std::memory_order_release);
      return i;
    }
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      name(), ": more than ", kMaxStreams,
      " streams in use with this allocator; call ReleaseStream for streams you no longer use"));
}

absl::Status Allocator::ReleaseStream(Stream* stream) {
  if (stream == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": ReleaseStream of a null stream"));
  }
  if (slot_owner_ != this) return slot_owner_->ReleaseStream(stream);
  int slot = -1;
  {
    StdMutexLock l(&slots_mu_);
    for (int i = 1; i < kMaxStreams; ++i) {
      if (slots_[i].stream.load(std::memory_order_relaxed) == stream) slot = i;
    }
  }
  if (slot < 0) {
    return absl::NotFoundError(
        absl::StrCat(name(), ": ReleaseStream of a stream never used with this allocator"));
  }
  // Its work done, the blocks still marked with its slot are safe for anyone; a later stream
  // that takes the slot only adds waits that are not needed.
  absl::Status s = stream->Synchronize();
  StdMutexLock l(&slots_mu_);
  {
    // The slot's event stays: other streams may still have waits on it queued (it serves the
    // slot's next stream, on the same device).
    StdMutexLock e(&slots_[slot].event_mu);
    slots_[slot].stream.store(nullptr, std::memory_order_release);
  }
  OnReleaseStream(stream);
  return s;
}

absl::Status Allocator::SynchronizeSlotsSlow(uint64_t mask) {
  absl::Status first;
  for (; mask != 0; mask &= mask - 1) {
    const int i = std::countr_zero(mask);
    // A slot without a stream (host-synchronous, or released: its work was waited for) has
    // nothing pending; a stream that takes the slot later never used this memory.
    if (SlotStream(i) == nullptr) continue;
    StdMutexLock l(&Slot(i).event_mu);
    if (Stream* s = SlotStream(i)) first.Update(s->Synchronize());
  }
  return first;
}

absl::StatusOr<bool> Allocator::RecordSlotEvent(int slot, Event* event) {
  StdMutexLock l(&Slot(slot).event_mu);
  Stream* s = SlotStream(slot);
  if (s == nullptr) return false;
  VGPU_RETURN_IF_ERROR(s->RecordEvent(event));
  return true;
}

absl::Status Allocator::WaitForSlots(int slot, uint64_t mask) {
  if (skip_stream_waits_) return absl::OkStatus();
  Stream* waiter = SlotStream(slot);
  mask &= ~SlotBit(slot);
  while (mask != 0) {
    const int other = std::countr_zero(mask);
    mask &= mask - 1;
    StreamSlotState& o = Slot(other);
    // The event lock also keeps ReleaseStream from dropping the slot's stream meanwhile.
    StdMutexLock l(&o.event_mu);
    Stream* s = o.stream.load(std::memory_order_acquire);
    // A host-synchronous (null) or released slot has no work pending on the block.
    if (s == nullptr) continue;
    if (o.event == nullptr) {
      absl::StatusOr<std::unique_ptr<Event>> e = s->executor()->CreateEvent();
      if (!e.ok()) return e.status();
      o.event = *std::move(e);
    }
    absl::Status st = s->RecordEvent(o.event.get());
    if (st.ok()) st = waiter != nullptr ? waiter->WaitEvent(o.event.get()) : o.event->Synchronize();
    if (!st.ok()) return st;
    stream_waits_.fetch_add(1, std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

void Allocator::AddObserver(AllocatorObserver* observer) {
  if (observer == nullptr) return;
  StdMutexLock l(&observers_mu_);
  observers_.push_back(observer);
  has_observers_.store(true, std::memory_order_relaxed);
}

void Allocator::RemoveObserver(AllocatorObserver* observer) {
  StdMutexLock l(&observers_mu_);
  observers_.erase(std::remove(observers_.begin(), observers_.end(), observer), observers_.end());
  has_observers_.store(!observers_.empty(), std::memory_order_relaxed);
}

void Allocator::NotifySlow(const std::string& allocator_name, const AllocatorEvent& e) const {
  StdMutexLock l(&observers_mu_);
  for (AllocatorObserver* o : observers_) o->OnAllocatorEvent(allocator_name, e);
}

absl::Status Allocator::OutOfMemoryError(const OutOfMemoryReport& r) const {
  return absl::ResourceExhaustedError(
      absl::StrFormat("%s: out of memory allocating %s (%d bytes, rounded to %s): %s. %s. Hint: %s",
                      name(), FormatBytes(r.bytes), r.bytes, r.rounded, r.why, r.usage, r.hint));
}

}  // namespace vgpu
