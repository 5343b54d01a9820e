// Users' allocator logs as vgpu traces (allocator/trace.h), so `vgpu-bench replay`, `convert`
// and `plan` take what users actually ran:
//   - a PyTorch memory snapshot: the pickle `torch.cuda.memory._dump_snapshot()` writes after
//     `torch.cuda.memory._record_memory_history()` (read with runtime/pickle_reader.h);
//   - an RMM `logging_resource_adaptor` CSV log (header "Thread,Time,Action,Pointer,Size,Stream");
//   - vgpu's own text format.
// The format is told apart by content, never by the file name: a pickle starts with the PROTO
// byte 0x80, an RMM log with its header line, anything else is read as vgpu's format. Any of
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

enum class TraceFormat { kVgpu, kTorchSnapshot, kRmmLog };
// "vgpu", "pytorch-snapshot", "rmm-log" (Trace::format).
const char* TraceFormatName(TraceFormat format);
// By content: a pickle (0x80 first, or protocol 0/1: "(", "}", "]" or ")" first) ->
// kTorchSnapshot; a first line (after a UTF-8 BOM) starting with "Thread,Time,Action" ->
// kRmmLog; otherwise kVgpu.
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
