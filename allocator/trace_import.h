// Users' allocator logs as vgpu traces (allocator/trace.h), so `vgpu-bench replay`, `convert`
// and `plan` take what users actually ran:
//   - a PyTorch memory snapshot: the pickle `torch.cuda.memory._dump_snapshot()` writes after
//     `torch.cuda.memory._record_memory_history()` (read with runtime/pickle_reader.h);
//   - an RMM `logging_resource_adaptor` CSV log (header "Thread,Time,Action,Pointer,Size,Stream");
//   - TensorFlow's memory log (its `__LOG_MEMORY__` lines, TF_CPP_VMODULE=log_memory=2);
//   - a PyTorch profiler trace (the Chrome trace JSON of profile(profile_memory=True));
//   - vgpu's own text format.
// The format is told apart by content, never by the file name: a pickle starts with the PROTO
// byte 0x80, an RMM log with its header line, a profiler trace is JSON, a TensorFlow log has
// __LOG_MEMORY__ records,
// anything else is read as vgpu's format. Any of
// them may be gzip-compressed (runtime/gzip.h: the bytes 1f 8b first), as logs usually are, or
// in a zip archive (runtime/zip.h: "PK" first): the file `torch.save(snapshot, f)` writes (its
// "<name>/data.pkl" member is read), or a zip of one log.
//
// Addresses become block ids (an address freed and allocated again is a new block); streams
// become dense indices in the order they first appear. docs/allocator.md ("Importing
// workloads") says which PyTorch action is taken as the allocation and which as the free.
// Errors are InvalidArgument naming the line (RMM), the entry (snapshot: "device_traces[0][17]")
// or the byte offset (a broken pickle).
//
// Thread safety: every function here is reentrant.
#ifndef VGPU_ALLOCATOR_TRACE_IMPORT_H_
#define VGPU_ALLOCATOR_TRACE_IMPORT_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "vgpu/allocator/trace.h"

namespace vgpu {

enum class TraceFormat { kVgpu, kTorchSnapshot, kRmmLog, kTfMemoryLog, kTorchProfilerTrace };
// "vgpu", "pytorch-snapshot", "rmm-log", "tensorflow-log", "pytorch-profiler-trace"
// (Trace::format).
const char* TraceFormatName(TraceFormat format);
// By content: a pickle (0x80 first, or protocol 0/1: "(", "}", "]" or ")" first) ->
// kTorchSnapshot; a first line (after a UTF-8 BOM) starting with "Thread,Time,Action" ->
// kRmmLog; JSON ('{' or '[' first) -> kTorchProfilerTrace; a "__LOG_MEMORY__ MemoryLog" record
// anywhere -> kTfMemoryLog; otherwise kVgpu.
TraceFormat DetectTraceFormat(absl::string_view data);

struct ImportOptions {
  // PyTorch snapshots hold one trace per device: this one, or (unset) the device with the most
  // allocations and frees (the note says which).
  std::optional<int> device;
  // The most pickle values a snapshot may hold (0: as many as fit in a quarter of this
  // machine's memory, 2^16 to 2^25); past it the import is refused, saying how to record less.
  uint64_t max_snapshot_values = 0;
};

// The header line RMM's logging_resource_adaptor writes.
inline constexpr char kRmmLogHeader[] = "Thread,Time,Action,Pointer,Size,Stream";

absl::StatusOr<Trace> ParseRmmLog(absl::string_view text, absl::string_view source = "log");
// TensorFlow's memory log: what TensorFlow writes to stderr with TF_CPP_VMODULE=log_memory=2
// (and TF_CPP_MIN_LOG_LEVEL=0): "__LOG_MEMORY__ MemoryLog... { ... }" lines, each a protobuf
// message of tensorflow/core/framework/log_memory.proto in its single-line text format, among
// any other log lines. Allocations are MemoryLogTensorAllocation (its
// tensor.allocation_description's requested_bytes) and MemoryLogRawAllocation (num_bytes);
// frees are MemoryLogTensorDeallocation and MemoryLogRawDeallocation with deferred false (a
// GPU's raw frees are logged deferred first, then when their stream is done), matched by the
// allocator's allocation_id. One allocator is read: options.device n picks "GPU_<n>_...",
// else the GPU allocator with the most records. Frees of tensors whose allocation the log does
// not show (made outside an op's allocate calls) are skipped and counted in the note.
absl::StatusOr<Trace> ParseTfMemoryLog(absl::string_view text, absl::string_view source = "log",
                                       const ImportOptions& options = {});
// A PyTorch profiler trace: the Chrome trace JSON that torch.profiler.profile(profile_memory=
// True) exports (prof.export_chrome_trace("trace.json"), or tensorboard_trace_handler's
// *.pt.trace.json), {"traceEvents": [...]} or the array alone. Its "[memory]" instant events
// (args "Device Type", "Device Id", "Addr", "Bytes", "Total Reserved") are the allocations
// (Bytes > 0) and frees (Bytes < 0) of PyTorch's allocators, in time order ("ts"; the threads
// write theirs apart). One device is read: cuda:n for options.device n, else the CUDA device
// with the most events. Frees of blocks allocated before profiling started are skipped and
// counted; the largest "Total Reserved" is the original allocator's reserved peak. The
// document is walked without being built (hundreds of megabytes cost little memory beyond the
// memory events); each memory event is parsed strictly (runtime/json_reader.h).
absl::StatusOr<Trace> ParseTorchProfilerTrace(absl::string_view text,
                                              absl::string_view source = "trace.json",
                                              const ImportOptions& options = {});
absl::StatusOr<Trace> ParseTorchSnapshot(absl::string_view data,
                                         absl::string_view source = "snapshot",
                                         const ImportOptions& options = {});
// Detects the format and parses; `source` names the input in errors. Gzip-compressed data is
// inflated first and a zip archive's member read (torch.save's data.pkl, else its only file),
// at most MaxTraceFileBytes of either (ResourceExhausted past that); the trace's import_note
// says so. One wrapper may hold another once (a gzipped torch.save file), no deeper.
absl::StatusOr<Trace> ParseAnyTrace(absl::string_view data, absl::string_view source,
                                    const ImportOptions& options = {});
// ReadTraceFile's checks and size cap (MaxTraceFileBytes), then ParseAnyTrace; the trace is
// named after the file when the source names none. The path "-" is standard input (named
// "stdin"; runtime/file_io.h).
absl::StatusOr<Trace> ReadAnyTraceFile(const std::string& path, const ImportOptions& options = {});

}  // namespace vgpu

#endif  // VGPU_ALLOCATOR_TRACE_IMPORT_H_
