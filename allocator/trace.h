// Allocation traces in the text format of tools/traces/README.md, so users can record their own
// workload and replay it in `vgpu-bench replay`:
//   # comment                (the second line is "# peak_live_bytes N" when known)
//   a <id> <bytes> [<stream>]  allocate <bytes> on <stream> (default 0), call the block <id>
//   f <id> [<stream>]          free the block <id> (on <stream>, default 0)
// ParseTrace checks the whole file (unknown or duplicate ids, bad numbers) with errors that
// name the line; TraceBuilder applies the same checks to events from other sources (the
// importers of allocator/trace_import.h); FormatTrace writes the format back; TraceRecorder
// writes one from an allocator's events; ReplayTrace runs one against an allocator.
//
// Thread safety: ParseTrace, FormatTrace and ReplayTrace are reentrant; a TraceBuilder is used
// from one thread; TraceRecorder is thread-safe (it may observe several allocators used from
// several threads).
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
#include "absl/types/span.h"
#include "vgpu/allocator/allocator.h"
#include "vgpu/allocator/locks.h"

namespace vgpu {

class Stream;  // runtime/platform.h

struct TraceEvent {
  bool alloc = true;
  uint64_t id = 0;
  uint64_t bytes = 0;  // allocations only
  // The stream the event ran on: a dense index, 0..Trace::num_streams-1 (0 when the source
  // names none).
  uint32_t stream = 0;
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
  uint32_t num_streams = 1;     // 1 + the largest stream index of any event
  std::vector<TraceEvent> events;
  // Where the trace came from: "vgpu" (this format), "pytorch-snapshot" or "rmm-log"
  // (allocator/trace_import.h).
  std::string format = "vgpu";
  // The most memory the original allocator held (reserved) while it ran, when the source
  // says it (a PyTorch snapshot's segments); 0 when unknown.
  uint64_t original_peak_reserved_bytes = 0;
  // What an importer chose or skipped (which device, which actions), for the tools to print
  // on stderr; empty for this format.
  std::string import_note;
};

// The most bytes a trace may have live at once (64 PiB, far above any device): byte counts
// and the running live total are checked against it, so no sum over a trace overflows.
inline constexpr uint64_t kMaxTraceLiveBytes = uint64_t{1} << 56;
// Streams a trace may use (indices 0..1023): replay keeps one Stream* per stream.
inline constexpr uint32_t kMaxTraceStreams = 1024;

// Builds a Trace event by event with ParseTrace's checks (a block id is live at most once, a
// free names a live block, the live total stays under kMaxTraceLiveBytes, the stream index is
// below kMaxTraceStreams), computing the slots, peak and counters. Errors are InvalidArgument
// with the bare reason ("free of block 7, which is not live"); the caller says where. `at`
// (a line or entry number) is remembered per block for "allocated on <unit> <at>".
class TraceBuilder {
 public:
  explicit TraceBuilder(std::string unit = "line") : unit_(std::move(unit)) {}
  absl::Status Alloc(uint64_t id, uint64_t bytes, uint32_t stream, uint64_t at);
  absl::Status Free(uint64_t id, uint32_t stream);
  bool IsLive(uint64_t id) const { return live_.contains(id); }
  uint64_t live_bytes() const { return live_bytes_; }
  Trace& trace() { return t_; }  // for the header fields (name, format, ...)
  // The trace; InvalidArgument "<source>: the trace has no events" when it has none.
  absl::StatusOr<Trace> Finish(absl::string_view source) &&;

 private:
  struct Live {
    uint32_t slot;
    uint64_t at;
    uint64_t bytes;
  };
  std::string unit_;
  Trace t_;
  absl::flat_hash_map<uint64_t, Live> live_;
  std::vector<uint32_t> free_slots_;
  uint64_t live_bytes_ = 0;
};

// The trace in this format: "# <name>", "# peak_live_bytes N", then one line per event, with
// the stream column on every line when the trace has more than one stream. ParseTrace of the
// text gives back the same events.
std::string FormatTrace(const Trace& trace);

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
  // The allocator's memory log (Allocator::DumpMemoryLog) right after the first failed
  // allocation, when ReplayTrace was asked for it (log_first_failure); else empty.
  std::string first_failure_log;
};

// Replays `trace` on `allocator`. stop_at_failure: stop at the first failed allocation (a
// limit scan only needs to know whether it fits); otherwise failed blocks are skipped. Every
// block still live at the end is freed (not timed). A failing free is an error.
// `streams`: empty, or one Stream per trace stream (index = TraceEvent::stream; at least
// trace.num_streams of them, InvalidArgument otherwise). Each allocation is made on its
// event's stream (Allocator::AllocateRaw(bytes, stream)); a free on another stream than the
// block's allocation is declared with RecordStream first. Empty: every event on the
// allocator's default stream. With kMaxStreams or more streams, each is released from the
// allocator (Allocator::ReleaseStream) after its last event, so a trace may use more streams
// over its length than an allocator tracks at once.
// log_first_failure: keep the allocator's memory log at the first failure (where every block
// and free part lies when the workload did not fit), in first_failure_log; not timed.
absl::StatusOr<ReplayResult> ReplayTrace(const Trace& trace, Allocator& allocator,
                                         bool stop_at_failure,
                                         absl::Span<Stream* const> streams = {},
                                         bool log_first_failure = false);
// The baseline: malloc/free of the same sizes, in the same order; CPU nanoseconds of the loop.
int64_t ReplayTraceWithMalloc(const Trace& trace);
// The clock of both replays: CPU time of the calling thread, in nanoseconds (what the replayed
// operations cost, without the time the thread waited for a core on a loaded machine). Other
// timed replays (the benchmark's calibration) use it so their figures compare.
int64_t ThreadCpuNs();

}  // namespace vgpu

#endif  // VGPU_ALLOCATOR_TRACE_H_
