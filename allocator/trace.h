// Allocation traces in the text format of tools/traces/README.md, so users can record their own
// workload and replay it in `vgpu-bench replay`:
//   # comment                (the second line is "# peak_live_bytes N" when known)
//   a <id> <bytes>           allocate <bytes>, call the block <id>
//   f <id>                   free the block <id>
// ParseTrace checks the whole file (unknown or duplicate ids, bad numbers) with errors that
// name the line; TraceRecorder writes one from an allocator's events; ReplayTrace runs one
// against an allocator.
//
// Thread safety: ParseTrace and ReplayTrace are reentrant; TraceRecorder is thread-safe (it
// may observe several allocators used from several threads).
#ifndef VGPU_ALLOCATOR_TRACE_H_
#define VGPU_ALLOCATOR_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "vgpu/allocator/allocator.h"
#include "vgpu/allocator/locks.h"

namespace vgpu {

struct TraceEvent {
  bool alloc = true;
  uint64_t id = 0;
  uint64_t bytes = 0;  // allocations only
  // Dense index of the block among those live at once (reused after frees), so replay keeps
  // its pointers in a plain array.
  uint32_t slot = 0;
};

struct Trace {
  std::string name;                     // the first comment line, or the file name
  uint64_t header_peak_live_bytes = 0;  // from "# peak_live_bytes N"; 0 when absent
  uint64_t peak_live_bytes = 0;         // computed: max of the sum of live requested bytes
  uint64_t max_live_blocks = 0;         // slots needed
  uint64_t allocations = 0;
  uint64_t unfreed_blocks = 0;  // live at the end (replay frees them)
  std::vector<TraceEvent> events;
};

// The most bytes a trace may have live at once (64 PiB, far above any device): byte counts
// and the running live total are checked against it, so no sum over a trace overflows.
inline constexpr uint64_t kMaxTraceLiveBytes = uint64_t{1} << 56;

// `source` names the input in errors ("transformer_train.trace:12: ...").
absl::StatusOr<Trace> ParseTrace(absl::string_view text, absl::string_view source = "trace");
// The largest trace file ReadTraceFile reads: 1 GiB, or an eighth of physical memory when that
// is less (parsing holds several times the text).
uint64_t MaxTraceFileBytes();
// Reads a trace through runtime/file_io.h: a missing file is NotFound, a directory, FIFO or
// device is InvalidArgument, a file over MaxTraceFileBytes() is ResourceExhausted.
absl::StatusOr<Trace> ReadTraceFile(const std::string& path);

// Records the successful allocations (requested bytes) and frees of the allocators it observes
// as a trace; ids are assigned in allocation order. Attach it with AttachTraceRecorder below
// (or Allocator::AddObserver). Frees of blocks allocated before recording started, failed
// allocations (OOMs), maps and unmaps are not part of the format and are skipped; blocks
// still live when the trace is written stay unfreed in it (replay frees them, untimed).
// Several allocators may feed one recorder: their blocks interleave into one workload (keyed
// by allocator name and pointer, so give them distinct names); use one recorder per device to
// replay each separately.
class TraceRecorder final : public AllocatorObserver {
 public:
  explicit TraceRecorder(std::string name = "recorded") : name_(std::move(name)) {}
  void OnAllocatorEvent(const std::string& allocator_name, const AllocatorEvent& e) override;
  std::string Text() const;  // the trace so far, with its peak_live_bytes header
  // Writes Text() to `path` (replace it); `vgpu-bench replay PATH` reads it back.
  absl::Status WriteFile(const std::string& path) const;
  uint64_t events() const;           // "a" and "f" lines so far
  uint64_t peak_live_bytes() const;  // max of the sum of live requested bytes

 private:
  mutable StdMutex mu_;
  std::string name_;
  std::string body_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t events_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t live_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t peak_live_ ABSL_GUARDED_BY(mu_) = 0;
  // (allocator name, ptr) -> (id, bytes): two allocators may hand out the same address.
  absl::flat_hash_map<std::pair<std::string, uint64_t>, std::pair<uint64_t, uint64_t>> live_
      ABSL_GUARDED_BY(mu_);
};

// Sends `allocator`'s allocations and frees to `recorder` (which must outlive it, or be
// detached first), as AttachMemoryHistory does for a MemoryHistory:
//   TraceRecorder rec("my_workload");
//   AttachTraceRecorder(*allocator, &rec);
//   ... run the workload ...
//   DetachTraceRecorder(*allocator, &rec);
//   VGPU_RETURN_IF_ERROR(rec.WriteFile("my_workload.trace"));  // vgpu-bench replay reads it
// Every allocator kind here (bfc, vmm, async) reports its events; an allocator that reports
// none records nothing.
inline void AttachTraceRecorder(Allocator& allocator, TraceRecorder* recorder) {
  allocator.AddObserver(recorder);
}
inline void DetachTraceRecorder(Allocator& allocator, TraceRecorder* recorder) {
  allocator.RemoveObserver(recorder);
}

struct ReplayResult {
  uint64_t events = 0;         // events replayed (up to and including the first failure)
  uint64_t failures = 0;       // allocations that failed
  uint64_t first_failure = 0;  // index of the first failed event
  absl::Status first_error;
  int64_t elapsed_ns = 0;  // CPU time of the calling thread in the event loop only
};

// Replays `trace` on `allocator`. stop_at_failure: stop at the first failed allocation (a
// limit scan only needs to know whether it fits); otherwise failed blocks are skipped. Every
// block still live at the end is freed (not timed). A failing free is an error.
absl::StatusOr<ReplayResult> ReplayTrace(const Trace& trace, Allocator& allocator,
                                         bool stop_at_failure);
// The baseline: malloc/free of the same sizes, in the same order; CPU nanoseconds of the loop.
int64_t ReplayTraceWithMalloc(const Trace& trace);

}  // namespace vgpu

#endif  // VGPU_ALLOCATOR_TRACE_H_
