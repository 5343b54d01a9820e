#include "vgpu/allocator/async_allocator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "vgpu/allocator/factory.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/status.h"

namespace vgpu {
namespace {

constexpr uint64_t kRounding = kDefaultAlignment;

uint64_t RoundUp(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

absl::Status Annotate(const absl::Status& s, absl::string_view context) {
  return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
}

std::string P(const void* p) {
  return absl::StrCat("0x", absl::Hex(reinterpret_cast<uintptr_t>(p)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<AsyncAllocator>> AsyncAllocator::Create(Executor* executor,
                                                                       Stream* stream,
                                                                       AsyncOptions options) {
  if (executor == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(options.name, ": no executor to allocate from"));
  }
  if (options.memory_limit == 0) {
    return absl::InvalidArgumentError(absl::StrCat(options.name, ": memory limit must be > 0"));
  }
  if (stream != nullptr && stream->executor() != executor) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.name, ": the stream belongs to another device"));
  }
  std::unique_ptr<Stream> owned;
  if (stream == nullptr) {
    absl::StatusOr<std::unique_ptr<Stream>> s = executor->CreateStream(StreamOptions{});
    if (!s.ok()) return Annotate(s.status(), absl::StrCat(options.name, ": creating its stream"));
    owned = *std::move(s);
    stream = owned.get();
  }
  MemoryPoolOptions pool_options;
  pool_options.release_threshold =
      options.release_threshold != 0 ? options.release_threshold : options.memory_limit;
  absl::StatusOr<std::unique_ptr<MemoryPool>> pool = executor->CreateMemoryPool(pool_options);
  if (!pool.ok()) {
    return Annotate(pool.status(),
                    absl::StrCat(options.name, ": VGPU_ALLOCATOR=async needs a memory pool"));
  }
  std::unique_ptr<AsyncAllocator> a(
      new AsyncAllocator(std::move(options), std::move(owned), stream, *std::move(pool)));
  // nullptr means the allocator's stream (the logical device's, or its own).
  VGPU_RETURN_IF_ERROR(a->SetDefaultStream(stream));
  return a;
}

AsyncAllocator::AsyncAllocator(AsyncOptions options, std::unique_ptr<Stream> owned_stream,
                               Stream* stream, std::unique_ptr<MemoryPool> pool)
    : options_(std::move(options)),
      owned_stream_(std::move(owned_stream)),
      stream_(stream),
      pool_(std::move(pool)) {
  FutexMutexLock l(&mu_);  // no other thread yet: for the analysis
  counters_.stats.bytes_limit = options_.memory_limit;
}

AsyncAllocator::~AsyncAllocator() {
  {
    FutexMutexLock l(&mu_);
    for (auto& [ptr, block] : live_) {
      pool_->FreeAsync(block.base, StreamOf(block.slot)).IgnoreError();
    }
    live_.clear();
  }
  // The pool's frees are tasks on the streams: let them land before the pool goes.
  stream_->Synchronize().IgnoreError();
  DetachStreams();  // before the stream it may own goes
  pool_.reset();
  owned_stream_.reset();
}

absl::StatusOr<void*> AsyncAllocator::DoAllocate(const AllocationRequest& request,
                                                 uint64_t* /*wait_for*/) {
  // The pool orders reuse itself: a block freed on one stream goes to another only behind it.
  const uint64_t bytes = request.bytes, alignment = request.alignment;
  Stream* const stream = StreamOf(request.slot);
  FutexMutexLock l(&mu_);
  const uint64_t limit = options_.memory_limit;
  if (bytes > limit) {
    return OomErrorLocked(bytes, RoundUp(limit, kRounding), "over the limit",
                          "raise the device's memory limit");
  }
  const uint64_t rounded = RoundUp(bytes, kRounding);
  // The pool aligns to 256 bytes; larger alignments are carved from a padded block.
  const uint64_t need = rounded + (alignment > kRounding ? alignment - kRounding : 0);
  const AllocatorStats& stats = counters_.stats;
  if (stats.bytes_in_use + pending_ + need > limit) {
    return OomErrorLocked(bytes, rounded,
                          absl::StrCat("it would pass the limit (", FormatBytes(need),
                                       " more with ", FormatBytes(stats.bytes_in_use), " in use)"),
                          "raise the device's memory limit or free buffers sooner");
  }
  absl::StatusOr<void*> base = pool_->AllocateAsync(need, stream);
  if (!base.ok() && absl::IsResourceExhausted(base.status())) {
    // The card is full, not our limit: memory this pool caches (or frees the stream has not
    // reached yet) may be what is missing. Wait for the stream without the lock (its work may
    // need it), give the cache back and try once more; `pending_` holds our place.
    pending_ += need;
    mu_.Unlock();
    stream->Synchronize().IgnoreError();
    if (stream != stream_) stream_->Synchronize().IgnoreError();
    absl::Status trimmed = pool_->TrimTo(0);
    mu_.Lock();
    pending_ -= need;
    RefreshReservedLocked();
    base = trimmed.ok() ? pool_->AllocateAsync(need, stream) : absl::StatusOr<void*>(trimmed);
  }
  if (!base.ok()) {
    if (!absl::IsResourceExhausted(base.status())) {
      return Annotate(base.status(), absl::StrCat(name(), ": allocating ", bytes, " bytes"));
    }
    return OomErrorLocked(
        bytes, rounded,
        absl::StrCat("the device is out of memory even after trimming the pool (",
                     base.status().message(), ")"),
        "other logical devices or processes hold the card's memory: lower their limits or "
        "raise VGPU_RESERVED_MEMORY, or use VGPU_ALLOCATOR=bfc, which takes its limit up front");
  }
  const uintptr_t b = reinterpret_cast<uintptr_t>(*base);
  void* ptr = reinterpret_cast<void*>(RoundUp(b, alignment));
  live_[ptr] = Block{*base, need, bytes, request.slot, SlotBit(request.slot)};
  counters_.OnAlloc(bytes, need);
  RefreshReservedLocked();
  NotifyLocked(AllocatorEventKind::kAlloc, ptr, bytes);
  return ptr;
}

absl::Status AsyncAllocator::DoDeallocate(void* ptr) {
  FutexMutexLock l(&mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        name(), ": ", P(ptr), " was not allocated by this allocator, or was already freed"));
  }
  // Recorded streams' work comes first: the free's stream waits for it (events, no host
  // wait), then the pool orders the reuse behind the free. Nothing changes unless the pool
  // took the free.
  if ((it->second.streams & ~SlotBit(it->second.slot)) != 0) {
    VGPU_RETURN_IF_ERROR(WaitForSlots(it->second.slot, it->second.streams));
  }
  VGPU_RETURN_IF_ERROR(pool_->FreeAsync(it->second.base, StreamOf(it->second.slot)));
  const Block block = it->second;
  live_.erase(it);
  counters_.OnFree(block.size);
  NotifyLocked(AllocatorEventKind::kFree, ptr, block.requested);
  return absl::OkStatus();
}

absl::Status AsyncAllocator::DoRecordStream(void* ptr, int slot) {
  FutexMutexLock l(&mu_);
  auto it = live_.find(ptr);
  if (it == live_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": RecordStream of ", P(ptr),
                                                   ", which is not a live allocation here"));
  }
  it->second.streams |= SlotBit(slot);
  return absl::OkStatus();
}

absl::Status AsyncAllocator::Trim() {
  VGPU_RETURN_IF_ERROR(stream_->Synchronize());
  VGPU_RETURN_IF_ERROR(SynchronizeStreams());
  VGPU_RETURN_IF_ERROR(pool_->TrimTo(0));
  FutexMutexLock l(&mu_);
  RefreshReservedLocked();
  return absl::OkStatus();
}

absl::Status AsyncAllocator::OomErrorLocked(uint64_t bytes, uint64_t rounded, absl::string_view why,
                                            absl::string_view hint) {
  counters_.OnOom();
  NotifyLocked(AllocatorEventKind::kOom, nullptr, bytes);
  RefreshReservedLocked();
  return OutOfMemoryError(
      {bytes, absl::StrCat(rounded), why,
       absl::StrFormat("limit %s, in use %s, reserved %s (the driver's pool, VGPU_ALLOCATOR=async)",
                       FormatBytes(options_.memory_limit),
                       FormatBytes(counters_.stats.bytes_in_use),
                       FormatBytes(counters_.stats.bytes_reserved)),
       hint});
}

void AsyncAllocator::RefreshReservedLocked() const {
  absl::StatusOr<MemoryPoolStats> s = pool_->Stats();
  if (!s.ok()) return;  // keep the last known value
  const uint64_t before = counters_.stats.bytes_reserved, now = s->reserved_bytes;
  if (now > before) {
    counters_.OnMap(now - before);
    NotifyLocked(AllocatorEventKind::kMap, nullptr, now - before);
  } else if (now < before) {
    counters_.OnUnmap(before - now);
    NotifyLocked(AllocatorEventKind::kUnmap, nullptr, before - now);
  }
}

void AsyncAllocator::NotifyLocked(AllocatorEventKind kind, const void* ptr, uint64_t bytes) const {
  Notify(options_.name,
         AllocatorEvent{kind, reinterpret_cast<uint64_t>(ptr), bytes, counters_.stats.bytes_in_use,
                        counters_.stats.bytes_reserved});
}

AllocatorStats AsyncAllocator::StatsLocked() const {
  RefreshReservedLocked();
  // The pool's free lists are the driver's: no largest free block or fragmentation to report.
  return counters_.stats;
}

void AsyncAllocator::DoResetPeakStats() {
  FutexMutexLock l(&mu_);
  RefreshReservedLocked();
  counters_.ResetPeaks();
}

absl::Status AsyncAllocator::DoReleaseCachedMemory() { return Trim(); }

AllocatorStats AsyncAllocator::DoStats() const {
  FutexMutexLock l(&mu_);
  return StatsLocked();
}

std::string AsyncAllocator::DumpMemoryLog() const {
  FutexMutexLock l(&mu_);
  AllocatorStats s = StatsLocked();
  std::string out =
      absl::StrCat(name(), " (async: the driver's stream-ordered pool)\n  ", s.ToString(), "\n");
  absl::StatusOr<MemoryPoolStats> pool = pool_->Stats();
  if (pool.ok()) {
    absl::StrAppend(&out, "  pool: reserved ", FormatBytes(pool->reserved_bytes), ", used ",
                    FormatBytes(pool->used_bytes), "\n");
  }
  std::vector<std::pair<void*, Block>> blocks(live_.begin(), live_.end());
  std::sort(blocks.begin(), blocks.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  absl::StrAppend(&out, "  live blocks: ", blocks.size(), "\n");
  constexpr size_t kMaxLines = 64;
  for (size_t i = 0; i < blocks.size() && i < kMaxLines; ++i) {
    absl::StrAppend(&out, "    ", P(blocks[i].first), " ", FormatBytes(blocks[i].second.size),
                    " (requested ", blocks[i].second.requested, ")\n");
  }
  if (blocks.size() > kMaxLines) {
    absl::StrAppend(&out, "    ... ", blocks.size() - kMaxLines, " more\n");
  }
  return out;
}

absl::Status AsyncAllocator::CheckInvariants() const {
  FutexMutexLock l(&mu_);
  const AllocatorStats& stats = counters_.stats;
  uint64_t sum = 0;
  for (const auto& [ptr, block] : live_) {
    const auto p = reinterpret_cast<uintptr_t>(ptr), b = reinterpret_cast<uintptr_t>(block.base);
    if (p < b || p + RoundUp(block.requested, kRounding) > b + block.size) {
      return absl::InternalError(
          absl::StrCat(name(), ": block ", P(ptr), " lies outside its pool allocation"));
    }
    sum += block.size;
  }
  if (sum != stats.bytes_in_use) {
    return absl::InternalError(absl::StrCat(name(), ": live blocks hold ", sum,
                                            " bytes but bytes_in_use is ", stats.bytes_in_use));
  }
  if (stats.bytes_in_use > options_.memory_limit) {
    return absl::InternalError(absl::StrCat(name(), ": ", stats.bytes_in_use,
                                            " bytes in use pass the limit of ",
                                            options_.memory_limit));
  }
  if (live_.size() != counters_.live()) {
    return absl::InternalError(absl::StrCat(name(), ": ", live_.size(), " live blocks but ",
                                            stats.num_allocs, " allocations and ", stats.num_frees,
                                            " frees"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Allocator>> CreateAsyncAllocator(
    Executor* executor, const DeviceAllocatorOptions& options) {
  AsyncOptions o;
  o.name = options.device_name;
  o.memory_limit = options.memory_limit;
  VGPU_ASSIGN_OR_RETURN(std::unique_ptr<AsyncAllocator> a,
                        AsyncAllocator::Create(executor, options.stream, std::move(o)));
  return std::unique_ptr<Allocator>(std::move(a));
}

}  // namespace vgpu
