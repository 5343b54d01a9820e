#include <map>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "vgpu/runtime/host/host_internal.h"
#include "vgpu/runtime/host/host_platform.h"
#include "vgpu/runtime/mutex.h"
#include "vgpu/runtime/status.h"

namespace vgpu::host {
namespace {

// ---------------------------------------------------------------------------------------------
// A simulated stream-ordered pool (the driver's cuMemPool): blocks are Executor::Allocate
// calls, so they count against the card's capacity. A freed block is cached for every stream
// when its stream reaches the free (a task queued there); before that, only an allocation on the
// same stream may take it, as the driver's pool does by default: work on that stream after the
// allocation runs after the free, so after every use of the old block. (Without it a loop that
// allocates and frees faster than its stream runs grew the pool to the whole card: eight
// threads of 64 MiB blocks ran out of a 8 GiB card under a 2 GiB limit.)
// State is shared with the queued tasks so that a pool destroyed before its frees land is safe.
class HostMemoryPool : public MemoryPool {
 public:
  HostMemoryPool(Executor* executor, const MemoryPoolOptions& options)
      : state_(std::make_shared<State>()) {
    state_->executor = executor;
    state_->release_threshold = options.release_threshold;
  }
  ~HostMemoryPool() override {
    vgpu::MutexLock l(&state_->mu);
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
      vgpu::MutexLock l(&state_->mu);
      // Cached blocks first, then this stream's frees that it has not reached yet.
      if (auto it = BestFit(state_->cached, size); it != state_->cached.end()) {
        void* p = it->second;
        state_->TakeLocked(p, it->first);
        state_->cached.erase(it);
        return p;
      }
      if (auto by = state_->pending_by_stream.find(stream); by != state_->pending_by_stream.end()) {
        if (auto it = BestFit(by->second, size); it != by->second.end()) {
          void* p = it->second;
          // Its landing then finds no entry and does nothing.
          state_->TakeLocked(p, state_->DropPendingLocked(state_->pending.find(p)));
          return p;
        }
      }
    }
    VGPU_ASSIGN_OR_RETURN(void* p, state_->executor->Allocate(size));
    vgpu::MutexLock l(&state_->mu);
    state_->reserved += size;
    state_->TakeLocked(p, size);
    return p;
  }

  absl::Status FreeAsync(void* ptr, Stream* stream) override {
    VGPU_RETURN_IF_ERROR(CheckStream(stream, "FreeAsync"));
    uint64_t size = 0, gen = 0;
    {
      vgpu::MutexLock l(&state_->mu);
      auto it = state_->live.find(ptr);
      if (it == state_->live.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "host memory pool: FreeAsync of ", absl::Hex(reinterpret_cast<uintptr_t>(ptr)),
            ", which is not a live allocation of this pool (double free or foreign pointer)"));
      }
      size = it->second;
      state_->used -= size;
      state_->live.erase(it);
      gen = ++state_->next_gen;
      const auto at = state_->pending_by_stream[stream].emplace(size, ptr);
      state_->pending[ptr] = State::Pending{stream, gen, at};
    }
    std::shared_ptr<State> state = state_;
    absl::Status queued = EnqueueHostTask(stream, [state, ptr, gen] {
      state->Land(ptr, gen);
      return absl::OkStatus();
    });
    if (!queued.ok()) {
      // A failed stream runs no more work: once drained, nothing can touch the block.
      stream->Synchronize().IgnoreError();
      state->Land(ptr, gen);
    }
    return absl::OkStatus();
  }

  absl::Status TrimTo(uint64_t bytes_to_keep) override {
    vgpu::MutexLock l(&state_->mu);
    state_->ReleaseCachedLocked(bytes_to_keep);
    return absl::OkStatus();
  }

  absl::StatusOr<MemoryPoolStats> Stats() override {
    vgpu::MutexLock l(&state_->mu);
    return MemoryPoolStats{state_->reserved, state_->used};
  }

 private:
  struct State {
    vgpu::Mutex mu;
    Executor* executor = nullptr;  // set before the pool is shared
    uint64_t release_threshold = 0;
    bool destroyed ABSL_GUARDED_BY(mu) = false;
    uint64_t reserved ABSL_GUARDED_BY(mu) = 0;                      // live + cached + pending frees
    uint64_t used ABSL_GUARDED_BY(mu) = 0;                          // live
    std::multimap<uint64_t, void*> cached ABSL_GUARDED_BY(mu);      // size -> block
    absl::flat_hash_map<void*, uint64_t> live ABSL_GUARDED_BY(mu);  // block -> size
    // Frees their streams have not reached: by block, and by stream and size (what the same
    // stream may take). `gen` tells a landing task its own free from a later one of the same
    // block (taken again on the stream and freed again before the first landing ran).
    struct Pending {
      Stream* stream = nullptr;
      uint64_t gen = 0;
      std::multimap<uint64_t, void*>::iterator at;  // its entry in pending_by_stream[stream]
    };
    absl::flat_hash_map<void*, Pending> pending ABSL_GUARDED_BY(mu);
    absl::flat_hash_map<Stream*, std::multimap<uint64_t, void*>> pending_by_stream
        ABSL_GUARDED_BY(mu);
    uint64_t next_gen ABSL_GUARDED_BY(mu) = 0;

    // Block p of `size` bytes is handed out.
    void TakeLocked(void* p, uint64_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      live[p] = size;
      used += size;
    }
    // Takes an unreached free out of both indexes; returns the block's size.
    uint64_t DropPendingLocked(absl::flat_hash_map<void*, Pending>::iterator it)
        ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      const Pending pf = it->second;
      pending.erase(it);
      const uint64_t size = pf.at->first;
      auto by = pending_by_stream.find(pf.stream);
      by->second.erase(pf.at);
      if (by->second.empty()) pending_by_stream.erase(by);
      return size;
    }
    // Free `gen` of block p reached its place in the stream: unless its stream took the block
    // back meanwhile, cache it for every stream (or free it when the pool is gone), then
    // honour the release threshold.
    void Land(void* p, uint64_t gen) ABSL_LOCKS_EXCLUDED(mu) {
      vgpu::MutexLock l(&mu);
      auto it = pending.find(p);
      if (it == pending.end() || it->second.gen != gen) return;  // taken again on its stream
      const uint64_t size = DropPendingLocked(it);
      if (destroyed) {
        executor->Free(p).IgnoreError();
        return;
      }
      cached.emplace(size, p);
      if (reserved > release_threshold) ReleaseCachedLocked(release_threshold);
    }
    void ReleaseCachedLocked(uint64_t keep) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      while (reserved > keep && !cached.empty()) {
        auto largest = std::prev(cached.end());
        executor->Free(largest->second).IgnoreError();
        reserved -= largest->first;
        cached.erase(largest);
      }
    }
  };
  // Best fit, but never a block over twice the size: a small request must not pin a large
  // block that a large one will want. blocks.end() when none fits.
  static std::multimap<uint64_t, void*>::iterator BestFit(std::multimap<uint64_t, void*>& blocks,
                                                          uint64_t size) {
    auto it = blocks.lower_bound(size);
    return it != blocks.end() && it->first / 2 <= size ? it : blocks.end();
  }
  absl::Status CheckStream(Stream* stream, absl::string_view what) const {
    if (stream == nullptr || stream->executor() != state_->executor) {
      return absl::InvalidArgumentError(absl::StrCat(
          "host memory pool: ", what, ": the stream does not belong to this pool's device"));
    }
    return absl::OkStatus();
  }

  std::shared_ptr<State> state_;
};

}  // namespace

std::unique_ptr<MemoryPool> CreateHostMemoryPool(Executor* executor,
                                                 const MemoryPoolOptions& options) {
  return std::make_unique<HostMemoryPool>(executor, options);
}

}  // namespace vgpu::host
