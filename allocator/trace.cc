#include "vgpu/allocator/trace.h"

#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <utility>
#include <vector>

#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/file_io.h"
#include "vgpu/runtime/numbers.h"
#include "vgpu/runtime/status.h"
#include "vgpu/runtime/user_text.h"

namespace vgpu {

int64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

namespace {

absl::Status CheckTraceStream(uint32_t stream) {
  if (stream >= kMaxTraceStreams) {
    return absl::InvalidArgumentError(absl::StrCat("stream ", stream, " is above the ",
                                                   kMaxTraceStreams - 1, " a trace may use"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status TraceBuilder::Alloc(uint64_t id, uint64_t bytes, uint32_t stream, uint64_t at) {
  VGPU_RETURN_IF_ERROR(CheckTraceStream(stream));
  // Checked before adding, so the running total never wraps and replay's limit arithmetic (up
  // to 11x the peak) stays far from 2^64.
  if (bytes > kMaxTraceLiveBytes - live_bytes_) {
    return absl::InvalidArgumentError(
        absl::StrCat("allocating ", bytes, " bytes with ", live_bytes_, " bytes live passes the ",
                     FormatBytes(kMaxTraceLiveBytes), " a trace may hold live"));
  }
  if (auto it = live_.find(id); it != live_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("block ", id,
                                                   " is allocated again while live (allocated on ",
                                                   unit_, " ", it->second.at, ")"));
  }
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    if (t_.max_live_blocks >= std::numeric_limits<uint32_t>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("more than ", std::numeric_limits<uint32_t>::max(), " blocks live at once"));
    }
    slot = static_cast<uint32_t>(t_.max_live_blocks++);
  }
  live_.emplace(id, Live{slot, at, bytes});
  live_bytes_ += bytes;
  t_.peak_live_bytes = std::max(t_.peak_live_bytes, live_bytes_);
  ++t_.allocations;
  t_.num_streams = std::max(t_.num_streams, stream + 1);
  t_.events.push_back(
      TraceEvent{.alloc = true, .id = id, .bytes = bytes, .stream = stream, .slot = slot});
  return absl::OkStatus();
}

absl::Status TraceBuilder::Free(uint64_t id, uint32_t stream) {
  VGPU_RETURN_IF_ERROR(CheckTraceStream(stream));
  auto it = live_.find(id);
  if (it == live_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("free of block ", id, ", which is not live"));
  }
  const uint32_t slot = it->second.slot;
  live_bytes_ -= it->second.bytes;
  free_slots_.push_back(slot);
  live_.erase(it);
  t_.num_streams = std::max(t_.num_streams, stream + 1);
  t_.events.push_back(
      TraceEvent{.alloc = false, .id = id, .bytes = 0, .stream = stream, .slot = slot});
  return absl::OkStatus();
}

absl::StatusOr<Trace> TraceBuilder::Finish(absl::string_view source) && {
  if (t_.events.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": the trace has no events"));
  }
  t_.unfreed_blocks = live_.size();
  return std::move(t_);
}

absl::StatusOr<Trace> ParseTrace(absl::string_view text, absl::string_view source) {
  TraceBuilder b("line");
  Trace& t = b.trace();
  uint64_t line_no = 0;
  auto err = [&](auto&&... args) {
    return absl::InvalidArgumentError(absl::StrCat(source, ":", line_no, ": ", args...));
  };
  // Decimal digits only (no sign, hex or spaces); the message quotes a bounded part of the text.
  auto Number = [&](absl::string_view text, absl::string_view what) -> absl::StatusOr<uint64_t> {
    absl::StatusOr<uint64_t> v = ParseUint64(text);
    if (!v.ok()) return err("bad ", what, " ", QuoteUserText(text));
    return *v;
  };
  auto StreamIndex = [&](absl::string_view text) -> absl::StatusOr<uint32_t> {
    absl::StatusOr<uint64_t> v = ParseUint64(text);
    if (!v.ok() || *v >= kMaxTraceStreams) {
      return err("bad stream ", QuoteUserText(text), " (an integer 0..", kMaxTraceStreams - 1, ")");
    }
    return static_cast<uint32_t>(*v);
  };
  auto At = [&](absl::Status s) { return s.ok() ? s : err(s.message()); };
  // A UTF-8 byte order mark (some editors write one) is not part of the first line.
  absl::ConsumePrefix(&text, "\xEF\xBB\xBF");
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    if (line[0] == '#') {
      absl::string_view c = absl::StripAsciiWhitespace(line.substr(1));
      if (absl::ConsumePrefix(&c, "peak_live_bytes")) {
        absl::StatusOr<uint64_t> peak = ParseUint64(c);
        if (!peak.ok()) return err("bad peak_live_bytes header ", QuoteUserText(line));
        t.header_peak_live_bytes = *peak;
      } else if (t.name.empty() && t.events.empty()) {
        t.name = std::string(c);
      }
      continue;
    }
    std::vector<absl::string_view> f =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (f[0] == "a") {
      if (f.size() != 3 && f.size() != 4) {
        return err("expected \"a <id> <bytes> [<stream>]\", got ", QuoteUserText(line));
      }
      VGPU_ASSIGN_OR_RETURN(uint64_t id, Number(f[1], "block id"));
      VGPU_ASSIGN_OR_RETURN(uint64_t bytes, Number(f[2], "byte count"));
      uint32_t stream = 0;
      if (f.size() == 4) {
        VGPU_ASSIGN_OR_RETURN(stream, StreamIndex(f[3]));
      }
      VGPU_RETURN_IF_ERROR(At(b.Alloc(id, bytes, stream, line_no)));
    } else if (f[0] == "f") {
      if (f.size() != 2 && f.size() != 3) {
        return err("expected \"f <id> [<stream>]\", got ", QuoteUserText(line));
      }
      VGPU_ASSIGN_OR_RETURN(uint64_t id, Number(f[1], "block id"));
      uint32_t stream = 0;
      if (f.size() == 3) {
        VGPU_ASSIGN_OR_RETURN(stream, StreamIndex(f[2]));
      }
      VGPU_RETURN_IF_ERROR(At(b.Free(id, stream)));
    } else {
      return err("unknown event ", QuoteUserText(f[0]),
                 " (expected \"a <id> <bytes> [<stream>]\" or \"f <id> [<stream>]\")");
    }
  }
  return std::move(b).Finish(source);
}

std::string FormatTrace(const Trace& trace) {
  std::string out = absl::StrCat("# ", trace.name.empty() ? "trace" : trace.name,
                                 "\n# peak_live_bytes ", trace.peak_live_bytes, "\n");
  const bool streams = trace.num_streams > 1;
  for (const TraceEvent& e : trace.events) {
    if (e.alloc) {
      absl::StrAppend(&out, "a ", e.id, " ", e.bytes);
    } else {
      absl::StrAppend(&out, "f ", e.id);
    }
    if (streams) absl::StrAppend(&out, " ", e.stream);
    out += '\n';
  }
  return out;
}

uint64_t MaxTraceFileBytes() {
  // Parsing holds ~24 bytes per event of ~6+ bytes of text, plus the live-block map: an
  // eighth of the machine's memory keeps a maximal trace well inside it.
  constexpr uint64_t kCap = uint64_t{1} << 30;
  const uint64_t phys = PhysicalMemoryBytes();
  return phys == 0 ? kCap : std::min(kCap, phys / 8);
}

absl::StatusOr<Trace> ReadTraceFile(const std::string& path) {
  VGPU_ASSIGN_OR_RETURN(std::string text, ReadInputFile(path, MaxTraceFileBytes(), "trace file"));
  absl::string_view base = path;
  if (size_t slash = base.rfind('/'); slash != absl::string_view::npos) {
    base = base.substr(slash + 1);
  }
  VGPU_ASSIGN_OR_RETURN(Trace t, ParseTrace(text, base));
  if (t.name.empty()) t.name = std::string(absl::StripSuffix(base, ".trace"));
  return t;
}

void TraceRecorder::OnAllocatorEvent(const std::string& allocator_name, const AllocatorEvent& e) {
  if (e.kind != AllocatorEventKind::kAlloc && e.kind != AllocatorEventKind::kFree) return;
  StdMutexLock l(&mu_);
  auto key = std::make_pair(allocator_name, e.ptr);
  if (e.kind == AllocatorEventKind::kAlloc) {
    uint64_t id = next_id_++;
    live_[key] = {id, e.bytes};
    live_bytes_ += e.bytes;
    peak_live_ = std::max(peak_live_, live_bytes_);
    absl::StrAppend(&body_, "a ", id, " ", e.bytes, "\n");
    ++events_;
  } else {
    auto it = live_.find(key);
    if (it == live_.end()) return;  // allocated before recording started
    live_bytes_ -= it->second.second;
    absl::StrAppend(&body_, "f ", it->second.first, "\n");
    ++events_;
    live_.erase(it);
  }
}

uint64_t TraceRecorder::events() const {
  StdMutexLock l(&mu_);
  return events_;
}

uint64_t TraceRecorder::peak_live_bytes() const {
  StdMutexLock l(&mu_);
  return peak_live_;
}

std::string TraceRecorder::Text() const {
  StdMutexLock l(&mu_);
  return absl::StrCat("# ", name_, "\n# peak_live_bytes ", peak_live_, "\n", body_);
}

absl::Status TraceRecorder::WriteFile(const std::string& path) const {
  return WriteOutputFile(path, Text(), "trace file");
}

namespace {

// A free on another stream than the block's allocation is a use on that stream, declared as
// such (RecordStream) before the stream-ordered free.
inline absl::Status ReplayFree(Allocator& allocator, void* ptr, Stream* alloc_stream,
                               Stream* free_stream) {
  if (ptr != nullptr && free_stream != alloc_stream) {
    absl::Status s = allocator.RecordStream(ptr, free_stream);
    if (!s.ok()) return s;
  }
  return allocator.Deallocate(ptr);
}

// (index of its last event, stream) for every stream of `trace`, by index: a stream is used by
// the events on it and by the frees of blocks allocated on it.
std::vector<std::pair<uint64_t, uint32_t>> LastUses(const Trace& trace) {
  constexpr uint64_t kUnused = UINT64_MAX;
  std::vector<uint64_t> last(trace.num_streams, kUnused);
  std::vector<uint32_t> block_stream(trace.max_live_blocks, 0);
  for (uint64_t i = 0; i < trace.events.size(); ++i) {
    const TraceEvent& e = trace.events[i];
    if (e.alloc) {
      block_stream[e.slot] = e.stream;
    } else {
      last[block_stream[e.slot]] = i;
    }
    last[e.stream] = i;
  }
  std::vector<std::pair<uint64_t, uint32_t>> out;
  for (uint32_t s = 0; s < trace.num_streams; ++s) {
    if (last[s] != kUnused) out.emplace_back(last[s], s);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

absl::StatusOr<ReplayResult> ReplayTrace(const Trace& trace, Allocator& allocator,
                                         bool stop_at_failure, absl::Span<Stream* const> streams,
                                         bool log_first_failure) {
  if (!streams.empty() && streams.size() < trace.num_streams) {
    return absl::InvalidArgumentError(absl::StrCat("trace ", trace.name, " uses ",
                                                   trace.num_streams, " streams but ",
                                                   streams.size(), " were given to replay it on"));
  }
  auto stream_of = [&](const TraceEvent& e) -> Stream* {
    return streams.empty() ? nullptr : streams[e.stream];
  };
  ReplayResult r;
  std::vector<void*> slots(trace.max_live_blocks, nullptr);
  // Each live block's allocation stream, when there are several.
  std::vector<Stream*> slot_streams(streams.empty() ? 0 : trace.max_live_blocks, nullptr);
  absl::Status free_error;
  // An allocator tracks at most Allocator::kMaxStreams streams at once; a program may use more
  // over its run (streams made as it goes). With that many, each stream is released from the
  // allocator after its last event (its allocations, frees, and frees of its blocks), as a
  // program releases a stream before destroying it; fewer never pay for the check's bookkeeping.
  const std::vector<std::pair<uint64_t, uint32_t>> releases =
      streams.size() >= Allocator::kMaxStreams ? LastUses(trace)
                                               : std::vector<std::pair<uint64_t, uint32_t>>{};
  size_t next_release = 0;
  uint64_t release_after = releases.empty() ? UINT64_MAX : releases[0].first;
  int64_t start = ThreadCpuNs();
  for (const TraceEvent& e : trace.events) {
    if (ABSL_PREDICT_FALSE(r.events > release_after)) {
      for (; next_release < releases.size() && releases[next_release].first < r.events;
           ++next_release) {
        Stream* const s = streams[releases[next_release].second];
        if (s == nullptr) continue;
        absl::Status released = allocator.ReleaseStream(s);
        // NotFound: the stream never got a block (its allocations failed).
        if (!released.ok() && !absl::IsNotFound(released)) free_error = released;
      }
      release_after = next_release < releases.size() ? releases[next_release].first : UINT64_MAX;
      if (!free_error.ok()) break;
    }
    ++r.events;
    if (e.alloc) {
      absl::StatusOr<void*> p = allocator.AllocateRaw(e.bytes, stream_of(e));
      if (p.ok()) {
        slots[e.slot] = *p;
        if (!slot_streams.empty()) slot_streams[e.slot] = stream_of(e);
        continue;
      }
      slots[e.slot] = nullptr;
      if (r.failures++ == 0) {
        r.first_failure = r.events - 1;
        r.first_error = p.status();
        if (log_first_failure) {
          const int64_t paused = ThreadCpuNs();
          r.first_failure_log = allocator.DumpMemoryLog();
          start += ThreadCpuNs() - paused;  // the log is not the replay's time
        }
      }
      if (stop_at_failure) break;
    } else {
      Stream* const from = slot_streams.empty() ? nullptr : slot_streams[e.slot];
      absl::Status s = ReplayFree(allocator, slots[e.slot], from, stream_of(e));
      slots[e.slot] = nullptr;
      if (!s.ok()) {
        free_error = s;
        break;
      }
    }
  }
  r.elapsed_ns = ThreadCpuNs() - start;
  for (void* p : slots) {
    absl::Status s = allocator.Deallocate(p);
    if (!s.ok() && free_error.ok()) free_error = s;
  }
  if (!free_error.ok()) return free_error;
  return r;
}

int64_t ReplayTraceWithMalloc(const Trace& trace) {
  std::vector<void*> slots(trace.max_live_blocks, nullptr);
  const int64_t start = ThreadCpuNs();
  for (const TraceEvent& e : trace.events) {
    if (e.alloc) {
      slots[e.slot] = std::malloc(e.bytes);
    } else {
      std::free(slots[e.slot]);
      slots[e.slot] = nullptr;
    }
  }
  int64_t ns = ThreadCpuNs() - start;
  for (void* p : slots) std::free(p);
  return ns;
}

}  // namespace vgpu
