#include "vgpu/allocator/trace.h"

#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/file_io.h"
#include "vgpu/runtime/numbers.h"
#include "vgpu/runtime/status.h"
#include "vgpu/runtime/user_text.h"

namespace vgpu {
namespace {

// CPU time of the calling thread: what the replayed operations cost, without the time the
// thread spent waiting for a core on a loaded machine.
int64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

absl::StatusOr<Trace> ParseTrace(absl::string_view text, absl::string_view source) {
  Trace t;
  struct Live {
    uint32_t slot;
    uint64_t line;
    uint64_t bytes;
  };
  absl::flat_hash_map<uint64_t, Live> live;
  std::vector<uint32_t> free_slots;
  uint64_t live_bytes = 0;
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
    TraceEvent e;
    if (f[0] == "a") {
      if (f.size() != 3) return err("expected \"a <id> <bytes>\", got ", QuoteUserText(line));
      VGPU_ASSIGN_OR_RETURN(e.id, Number(f[1], "block id"));
      VGPU_ASSIGN_OR_RETURN(e.bytes, Number(f[2], "byte count"));
      // Checked before adding, so the running total never wraps and replay's limit
      // arithmetic (up to 11x the peak) stays far from 2^64.
      if (e.bytes > kMaxTraceLiveBytes - live_bytes) {
        return err("allocating ", e.bytes, " bytes with ", live_bytes, " bytes live passes the ",
                   FormatBytes(kMaxTraceLiveBytes), " a trace may hold live");
      }
      uint32_t slot;
      if (!free_slots.empty()) {
        slot = free_slots.back();
        free_slots.pop_back();
      } else {
        if (t.max_live_blocks >= std::numeric_limits<uint32_t>::max()) {
          return err("more than ", std::numeric_limits<uint32_t>::max(), " blocks live at once");
        }
        slot = static_cast<uint32_t>(t.max_live_blocks++);
      }
      auto [it, inserted] = live.try_emplace(e.id, Live{slot, line_no, e.bytes});
      if (!inserted) {
        return err("block ", e.id, " is allocated again while live (allocated on line ",
                   it->second.line, ")");
      }
      e.slot = slot;
      live_bytes += e.bytes;
      t.peak_live_bytes = std::max(t.peak_live_bytes, live_bytes);
      ++t.allocations;
    } else if (f[0] == "f") {
      e.alloc = false;
      if (f.size() != 2) return err("expected \"f <id>\", got ", QuoteUserText(line));
      VGPU_ASSIGN_OR_RETURN(e.id, Number(f[1], "block id"));
      auto it = live.find(e.id);
      if (it == live.end()) return err("free of block ", e.id, ", which is not live");
      e.slot = it->second.slot;
      live_bytes -= it->second.bytes;
      free_slots.push_back(it->second.slot);
      live.erase(it);
    } else {
      return err("unknown event ", QuoteUserText(f[0]),
                 " (expected \"a <id> <bytes>\" or \"f <id>\")");
    }
    t.events.push_back(e);
  }
  if (t.events.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": the trace has no events"));
  }
  t.unfreed_blocks = live.size();
  return t;
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
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  std::string text = Text();
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write trace file ", path));
  return absl::OkStatus();
}

absl::StatusOr<ReplayResult> ReplayTrace(const Trace& trace, Allocator& allocator,
                                         bool stop_at_failure) {
  ReplayResult r;
  std::vector<void*> slots(trace.max_live_blocks, nullptr);
  absl::Status free_error;
  const int64_t start = ThreadCpuNs();
  for (const TraceEvent& e : trace.events) {
    ++r.events;
    if (e.alloc) {
      absl::StatusOr<void*> p = allocator.AllocateRaw(e.bytes);
      if (p.ok()) {
        slots[e.slot] = *p;
        continue;
      }
      slots[e.slot] = nullptr;
      if (r.failures++ == 0) {
        r.first_failure = r.events - 1;
        r.first_error = p.status();
      }
      if (stop_at_failure) break;
    } else {
      absl::Status s = allocator.Deallocate(slots[e.slot]);
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
