#include "vgpu/allocator/trace_import.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/file_io.h"
#include "vgpu/runtime/gzip.h"
#include "vgpu/runtime/numbers.h"
#include "vgpu/runtime/pickle_reader.h"
#include "vgpu/runtime/status.h"
#include "vgpu/runtime/user_text.h"
#include "vgpu/runtime/zip.h"

namespace vgpu {
namespace {

// Dense stream indices in the order the sources' stream handles first appear.
class StreamMap {
 public:
  absl::StatusOr<uint32_t> Index(uint64_t handle) {
    auto [it, inserted] = map_.try_emplace(handle, static_cast<uint32_t>(map_.size()));
    if (inserted && map_.size() > kMaxTraceStreams) {
      return absl::InvalidArgumentError(
          absl::StrCat("more than ", kMaxTraceStreams, " streams (stream ", handle, ")"));
    }
    return it->second;
  }
  size_t size() const { return map_.size(); }

 private:
  absl::flat_hash_map<uint64_t, uint32_t> map_;
};

// Hexadecimal with an optional 0x (fmt::ptr writes "0x7f..", RMM's printf format "%llx" writes
// "7f.."); at most 16 digits.
absl::StatusOr<uint64_t> ParseHex(absl::string_view text) {
  absl::string_view digits = text;
  if (!absl::ConsumePrefix(&digits, "0x")) absl::ConsumePrefix(&digits, "0X");
  if (digits.empty() || digits.size() > 16) {
    return absl::InvalidArgumentError("not a hexadecimal number");
  }
  uint64_t v = 0;
  for (char c : digits) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else {
      return absl::InvalidArgumentError("not a hexadecimal number");
    }
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

std::string Hex(uint64_t v) { return absl::StrCat("0x", absl::Hex(v)); }

absl::string_view BaseName(absl::string_view path) {
  if (size_t slash = path.rfind('/'); slash != absl::string_view::npos) {
    return path.substr(slash + 1);
  }
  return path;
}

}  // namespace

const char* TraceFormatName(TraceFormat format) {
  switch (format) {
    case TraceFormat::kVgpu:
      return "vgpu";
    case TraceFormat::kTorchSnapshot:
      return "pytorch-snapshot";
    case TraceFormat::kRmmLog:
      return "rmm-log";
    case TraceFormat::kTfMemoryLog:
      return "tensorflow-log";
    case TraceFormat::kTorchProfilerTrace:
      return "pytorch-profiler-trace";
  }
  return "vgpu";
}

TraceFormat DetectTraceFormat(absl::string_view data) {
  // A pickle: PROTO (protocols 2-5), or the MARK / empty dict, list or tuple that protocols 0
  // and 1 start a container with; no line of our format or RMM's starts with those.
  if (!data.empty() && (static_cast<uint8_t>(data[0]) == 0x80 || data[0] == '(' || data[0] == '}' ||
                        data[0] == ']' || data[0] == ')')) {
    return TraceFormat::kTorchSnapshot;
  }
  absl::ConsumePrefix(&data, "\xEF\xBB\xBF");
  data = absl::StripLeadingAsciiWhitespace(data);
  if (absl::StartsWith(data, "Thread,Time,Action")) return TraceFormat::kRmmLog;
  // JSON: a Chrome trace (no line of the other text formats starts with a bracket).
  if (absl::StartsWith(data, "{") || absl::StartsWith(data, "[")) {
    return TraceFormat::kTorchProfilerTrace;
  }
  // TensorFlow's records follow its startup lines, wherever logging put them.
  if (absl::StrContains(data, "__LOG_MEMORY__ MemoryLog")) return TraceFormat::kTfMemoryLog;
  return TraceFormat::kVgpu;
}

// ---- RMM's logging_resource_adaptor ------------------------------------------------------

absl::StatusOr<Trace> ParseRmmLog(absl::string_view text, absl::string_view source) {
  TraceBuilder b("line");
  b.trace().format = TraceFormatName(TraceFormat::kRmmLog);
  uint64_t line_no = 0;
  auto err = [&](auto&&... args) {
    return absl::InvalidArgumentError(absl::StrCat(source, ":", line_no, ": ", args...));
  };
  absl::ConsumePrefix(&text, "\xEF\xBB\xBF");
  int action_col = -1, pointer_col = -1, size_col = -1, stream_col = -1;
  size_t columns = 0;
  bool have_header = false;
  struct Live {
    uint64_t id;
    uint64_t bytes;
    uint64_t line;
  };
  absl::flat_hash_map<uint64_t, Live> live;  // pointer -> block
  uint64_t next_id = 0, failures = 0, null_blocks = 0;
  StreamMap streams;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);  // also a CR of a CRLF file
    if (line.empty()) continue;
    std::vector<absl::string_view> f = absl::StrSplit(line, ',');
    for (absl::string_view& x : f) x = absl::StripAsciiWhitespace(x);
    if (!have_header) {
      for (size_t i = 0; i < f.size(); ++i) {
        if (f[i] == "Action") action_col = static_cast<int>(i);
        if (f[i] == "Pointer") pointer_col = static_cast<int>(i);
        if (f[i] == "Size") size_col = static_cast<int>(i);
        if (f[i] == "Stream") stream_col = static_cast<int>(i);
      }
      if (action_col < 0 || pointer_col < 0 || size_col < 0) {
        return err("expected RMM's header \"", kRmmLogHeader, "\", got ", QuoteUserText(line));
      }
      columns = f.size();
      have_header = true;
      continue;
    }
    if (f.size() != columns) {
      return err("expected ", columns, " comma-separated fields as in the header, got ", f.size(),
                 " in ", QuoteUserText(line));
    }
    absl::string_view action = f[action_col];
    if (action == "allocate failure") {  // the original allocator refused it: nothing to replay
      ++failures;
      continue;
    }
    // A null pointer is "(nil)" (printf's %p, what RMM 26 writes) or 0x0 (fmt::ptr).
    absl::StatusOr<uint64_t> ptr =
        f[pointer_col] == "(nil)" ? absl::StatusOr<uint64_t>(0) : ParseHex(f[pointer_col]);
    if (!ptr.ok()) return err("bad pointer ", QuoteUserText(f[pointer_col]), " (hexadecimal)");
    absl::StatusOr<uint64_t> bytes = ParseUint64(f[size_col]);
    if (!bytes.ok()) return err("bad size ", QuoteUserText(f[size_col]), " (decimal bytes)");
    if (*ptr == 0) {
      // RMM answers a request of 0 bytes with no memory (PyTorch's empty tensors through
      // rmm_torch_allocator): nothing to replay. Any other request must have an address.
      if (*bytes != 0 && action == "allocate") {
        return err("allocate of ", *bytes, " bytes at the null pointer (only 0 bytes may be)");
      }
      if (action == "allocate" || action == "free") {
        ++null_blocks;
        continue;
      }
    }
    uint32_t stream = 0;
    if (stream_col >= 0) {
      absl::StatusOr<uint64_t> handle = ParseHex(f[stream_col]);
      if (!handle.ok()) return err("bad stream ", QuoteUserText(f[stream_col]), " (hexadecimal)");
      absl::StatusOr<uint32_t> index = streams.Index(*handle);
      if (!index.ok()) return err(index.status().message());
      stream = *index;
    }
    if (action == "allocate") {
      if (auto it = live.find(*ptr); it != live.end()) {
        return err("allocate of ", Hex(*ptr), ", which is live since line ", it->second.line);
      }
      const uint64_t id = next_id++;
      if (absl::Status s = b.Alloc(id, *bytes, stream, line_no); !s.ok()) return err(s.message());
      live.emplace(*ptr, Live{id, *bytes, line_no});
    } else if (action == "free") {
      auto it = live.find(*ptr);
      if (it == live.end()) {
        return err("free of ", Hex(*ptr), ", which is not live (no allocate of it before)");
      }
      if (it->second.bytes != *bytes) {
        return err("free of ", Hex(*ptr), " with size ", *bytes, ", but it was allocated with ",
                   it->second.bytes, " on line ", it->second.line);
      }
      if (absl::Status s = b.Free(it->second.id, stream); !s.ok()) return err(s.message());
      live.erase(it);
    } else {
      return err("unknown action ", QuoteUserText(action),
                 " (expected allocate, free or allocate failure)");
    }
  }
  if (!have_header) return absl::InvalidArgumentError(absl::StrCat(source, ": empty RMM log"));
  b.trace().import_note = absl::StrCat(
      "RMM log: ", streams.size(), " stream(s)",
      failures > 0 ? absl::StrCat(", ", failures, " failed allocations skipped") : "",
      null_blocks > 0
          ? absl::StrCat(", ", null_blocks, " allocate/free of 0 bytes at (nil) skipped")
          : "");
  return std::move(b).Finish(source);
}

// ---- PyTorch memory snapshots ------------------------------------------------------------

namespace {

using Kind = PickleValue::Kind;

// Reads typed fields of the snapshot's dicts; errors name the path ("device_traces[0][3]").
class SnapshotReader {
 public:
  explicit SnapshotReader(absl::string_view source) : source_(source) {}

  absl::Status Err(absl::string_view path, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": ", path, ": ", what));
  }
  absl::StatusOr<const PickleValue*> Field(const PickleValue& d, absl::string_view path,
                                           absl::string_view key, Kind kind,
                                           bool required = true) const {
    const PickleValue* v = d.Get(key);
    if (v == nullptr) {
      if (!required) return nullptr;
      return Err(path, absl::StrCat("no \"", key, "\""));
    }
    const bool ok = kind == Kind::kList ? v->is_list() : v->kind == kind;
    if (!ok) {
      return Err(
          absl::StrCat(path, "[\"", key, "\"]"),
          absl::StrCat("is a ", PickleKindName(v->kind), ", expected a ", PickleKindName(kind)));
    }
    return v;
  }
  // A non-negative int field; `fallback` when absent and not required.
  absl::StatusOr<uint64_t> Uint(const PickleValue& d, absl::string_view path, absl::string_view key,
                                std::optional<uint64_t> fallback = std::nullopt) const {
    VGPU_ASSIGN_OR_RETURN(const PickleValue* v,
                          Field(d, path, key, Kind::kInt, !fallback.has_value()));
    if (v == nullptr) return *fallback;
    if (v->i < 0) {
      return Err(absl::StrCat(path, "[\"", key, "\"]"), absl::StrCat("is negative (", v->i, ")"));
    }
    return static_cast<uint64_t>(v->i);
  }

 private:
  absl::string_view source_;
};

enum class Action { kAlloc, kFree, kFreeRequested, kSegmentGrow, kSegmentShrink, kOther };

absl::StatusOr<Action> ParseAction(absl::string_view a) {
  if (a == "alloc") return Action::kAlloc;
  // free_completed: the block is back in the allocator's pool and may be reused (after the
  // events of the streams it was used on, record_stream); "free" is older PyTorch's name.
  if (a == "free_completed" || a == "free") return Action::kFree;
  if (a == "free_requested") return Action::kFreeRequested;
  if (a == "segment_alloc" || a == "segment_map") return Action::kSegmentGrow;
  if (a == "segment_free" || a == "segment_unmap") return Action::kSegmentShrink;
  // A user's label on the history, no memory: user_defined (the name PyTorch 2.4's snapshots
  // give TraceEntry::USER_DEFINED) or annotate (later versions).
  if (a == "snapshot" || a == "oom" || a == "annotate" || a == "user_defined") {
    return Action::kOther;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown action ", QuoteUserText(a),
      " (expected alloc, free_requested, free_completed, segment_alloc, "
      "segment_free, segment_map, segment_unmap, snapshot, oom, annotate or user_defined)"));
}

struct Entry {
  Action action;
  uint64_t addr = 0;
  uint64_t size = 0;
  int64_t stream = 0;
  size_t index = 0;
};

}  // namespace

absl::StatusOr<Trace> ParseTorchSnapshot(absl::string_view data, absl::string_view source,
                                         const ImportOptions& options) {
  // The values of a large snapshot take ~170 bytes each in memory (the value, its share of
  // its container's vector, a string's heap copy; measured on a 172 MB snapshot, docs/
  // allocator.md): at most a quarter of the machine's memory (the file itself, read first, is
  // held to an eighth: MaxTraceFileBytes), and 2^25 values.
  constexpr uint64_t kBytesPerValue = 176;
  PickleLimits limits;
  if (options.max_snapshot_values > 0) {
    limits.max_values = options.max_snapshot_values;
  } else if (const uint64_t phys = PhysicalMemoryBytes(); phys > 0) {
    limits.max_values = std::max<uint64_t>(
        1 << 16, std::min<uint64_t>(limits.max_values, phys / 4 / kBytesPerValue));
  }
  // The one refusal a genuine snapshot meets: a history too long for this machine.
  limits.values_note =
      " (the most one snapshot may hold here, a quarter of this machine's memory: record fewer "
      "entries, _record_memory_history(max_entries=N) keeps the last N, or import it on a "
      "machine with more memory)";
  // torch.save's format before PyTorch 1.6 (still written with _use_new_zipfile_serialization=
  // False): a run of pickles, the first of them this magic number (a LONG1 of 10 bytes).
  if (absl::StartsWith(data, absl::string_view(
                                 "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19", 14))) {
    return absl::InvalidArgumentError(absl::StrCat(
        source,
        ": a torch.save file in the legacy format (_use_new_zipfile_serialization=False), "
        "which is not read: save the snapshot with torch.save's default (a zip archive), "
        "pickle.dump or torch.cuda.memory._dump_snapshot()"));
  }
  VGPU_ASSIGN_OR_RETURN(std::unique_ptr<PickleDocument> doc, ParsePickle(data, source, limits));
  SnapshotReader r(source);
  const PickleValue& root = doc->root();
  if (!root.is_dict()) {
    return r.Err("snapshot", absl::StrCat("is a ", PickleKindName(root.kind),
                                          ", expected the dict _dump_snapshot writes"));
  }
  VGPU_ASSIGN_OR_RETURN(const PickleValue* traces,
                        r.Field(root, "snapshot", "device_traces", Kind::kList, false));
  if (traces == nullptr) {
    return r.Err("snapshot",
                 "no \"device_traces\": record the history first "
                 "(torch.cuda.memory._record_memory_history(), then _dump_snapshot())");
  }
  VGPU_ASSIGN_OR_RETURN(const PickleValue* segments,
                        r.Field(root, "snapshot", "segments", Kind::kList, false));

  // Every device's entries are checked; the chosen one's are kept.
  std::vector<std::vector<Entry>> devices(traces->items.size());
  std::vector<uint64_t> counts(traces->items.size(), 0);
  for (size_t d = 0; d < traces->items.size(); ++d) {
    const PickleValue& list = *traces->items[d];
    const std::string dpath = absl::StrCat("device_traces[", d, "]");
    if (!list.is_list()) {
      return r.Err(dpath, absl::StrCat("is a ", PickleKindName(list.kind), ", expected a list"));
    }
    for (size_t k = 0; k < list.items.size(); ++k) {
      const PickleValue& e = *list.items[k];
      const std::string path = absl::StrCat(dpath, "[", k, "]");
      if (!e.is_dict()) {
        return r.Err(path, absl::StrCat("is a ", PickleKindName(e.kind), ", expected a dict"));
      }
      VGPU_ASSIGN_OR_RETURN(const PickleValue* a, r.Field(e, path, "action", Kind::kString));
      absl::StatusOr<Action> action = ParseAction(a->s);
      if (!action.ok()) return r.Err(path, action.status().message());
      Entry entry{.action = *action, .index = k};
      if (*action != Action::kOther) {
        VGPU_ASSIGN_OR_RETURN(entry.addr, r.Uint(e, path, "addr"));
        VGPU_ASSIGN_OR_RETURN(entry.size, r.Uint(e, path, "size"));
        VGPU_ASSIGN_OR_RETURN(const PickleValue* s,
                              r.Field(e, path, "stream", Kind::kInt, /*required=*/false));
        entry.stream = s == nullptr ? 0 : s->i;
      }
      if (*action == Action::kAlloc || *action == Action::kFree) ++counts[d];
      devices[d].push_back(entry);
    }
  }
  size_t device = 0;
  if (options.device) {
    if (*options.device < 0 || static_cast<size_t>(*options.device) >= devices.size()) {
      return r.Err("device_traces", absl::StrCat("has devices 0..", devices.size() - 1,
                                                 "; there is no device ", *options.device));
    }
    device = static_cast<size_t>(*options.device);
  } else {
    for (size_t d = 1; d < devices.size(); ++d) {
      if (counts[d] > counts[device]) device = d;
    }
  }
  if (devices.empty() || counts[device] == 0) {
    return r.Err(absl::StrCat("device_traces[", device, "]"),
                 "has no alloc or free_completed entries: nothing to replay (was "
                 "_record_memory_history() on while the workload ran?)");
  }
  std::vector<Entry>& entries = devices[device];
  // A history with free_requested but no free_completed at all (a recorder that logs only the
  // user's frees) would leave every block live to the end: its free_requested are the frees.
  bool requested_as_free = false;
  {
    bool any_free = false, any_requested = false;
    for (const Entry& e : entries) {
      any_free = any_free || e.action == Action::kFree;
      any_requested = any_requested || e.action == Action::kFreeRequested;
    }
    if (!any_free && any_requested) {
      requested_as_free = true;
      for (Entry& e : entries) {
        if (e.action == Action::kFreeRequested) e.action = Action::kFree;
      }
    }
  }

  // The chosen device's segments: their total (reserved at the end) and their live blocks.
  struct Block {
    uint64_t addr, size;
    int64_t stream;
  };
  std::vector<Block> live_at_end;
  uint64_t final_reserved = 0;
  // The list (even empty) says what the device held at the end.
  const bool have_segments = segments != nullptr;
  if (segments != nullptr) {
    for (size_t s = 0; s < segments->items.size(); ++s) {
      const PickleValue& seg = *segments->items[s];
      const std::string path = absl::StrCat("segments[", s, "]");
      if (!seg.is_dict()) {
        return r.Err(path, absl::StrCat("is a ", PickleKindName(seg.kind), ", expected a dict"));
      }
      VGPU_ASSIGN_OR_RETURN(uint64_t dev, r.Uint(seg, path, "device", 0));
      if (dev != device) continue;
      VGPU_ASSIGN_OR_RETURN(uint64_t total, r.Uint(seg, path, "total_size"));
      VGPU_ASSIGN_OR_RETURN(uint64_t address, r.Uint(seg, path, "address"));
      if (total > kMaxTraceLiveBytes || final_reserved > kMaxTraceLiveBytes) {
        return r.Err(path, "segment sizes above 64 PiB");
      }
      final_reserved += total;
      VGPU_ASSIGN_OR_RETURN(const PickleValue* st,
                            r.Field(seg, path, "stream", Kind::kInt, /*required=*/false));
      VGPU_ASSIGN_OR_RETURN(const PickleValue* blocks,
                            r.Field(seg, path, "blocks", Kind::kList, /*required=*/false));
      if (blocks == nullptr) continue;
      uint64_t next = address;  // older snapshots give no block addresses: they are contiguous
      for (size_t k = 0; k < blocks->items.size(); ++k) {
        const PickleValue& blk = *blocks->items[k];
        const std::string bpath = absl::StrCat(path, "[\"blocks\"][", k, "]");
        if (!blk.is_dict()) {
          return r.Err(bpath, absl::StrCat("is a ", PickleKindName(blk.kind), ", expected a dict"));
        }
        VGPU_ASSIGN_OR_RETURN(uint64_t size, r.Uint(blk, bpath, "size"));
        VGPU_ASSIGN_OR_RETURN(uint64_t requested, r.Uint(blk, bpath, "requested_size", size));
        VGPU_ASSIGN_OR_RETURN(uint64_t addr, r.Uint(blk, bpath, "address", next));
        VGPU_ASSIGN_OR_RETURN(const PickleValue* state,
                              r.Field(blk, bpath, "state", Kind::kString));
        next = addr + size;
        // Allocated (or freed by the user but still in use by a stream): live at the end.
        if (state->s == "active_allocated" || state->s == "active_pending_free") {
          live_at_end.push_back({addr, requested, st == nullptr ? 0 : st->i});
        }
      }
    }
  }

  // Blocks live when the history starts: freed in it without an alloc before (the ring buffer
  // of _record_memory_history(max_entries=...) lost their alloc), or live at the end without
  // an alloc in it. They are allocated first, in that order.
  std::vector<Block> initial;
  uint64_t skipped_requested = 0, skipped_other = 0;
  int64_t reserved_delta = 0, max_delta = 0;
  {
    absl::flat_hash_set<uint64_t> live, seen;
    for (const Entry& e : entries) {
      switch (e.action) {
        case Action::kAlloc:
          live.insert(e.addr);
          seen.insert(e.addr);
          break;
        case Action::kFree:
          if (live.erase(e.addr)) break;
          if (!seen.insert(e.addr).second) {
            return r.Err(
                absl::StrCat("device_traces[", device, "][", e.index, "]"),
                absl::StrCat("free of ", Hex(e.addr), ", which is not live (freed twice)"));
          }
          initial.push_back({e.addr, e.size, e.stream});
          break;
        case Action::kFreeRequested:
          ++skipped_requested;
          break;
        case Action::kSegmentGrow:
        case Action::kSegmentShrink: {
          // Each step is at most 2^56 and the running total stays within 2^62: no overflow.
          constexpr int64_t kMaxDelta = int64_t{1} << 62;
          if (e.size > kMaxTraceLiveBytes) {
            return r.Err(absl::StrCat("device_traces[", device, "][", e.index, "]"),
                         absl::StrCat("segment of ", e.size, " bytes is above the ",
                                      FormatBytes(kMaxTraceLiveBytes), " a trace may hold"));
          }
          const int64_t step = static_cast<int64_t>(e.size);
          reserved_delta += e.action == Action::kSegmentGrow ? step : -step;
          if (reserved_delta > kMaxDelta || reserved_delta < -kMaxDelta) {
            return r.Err(absl::StrCat("device_traces[", device, "][", e.index, "]"),
                         "segment sizes add up past 4 EiB");
          }
          max_delta = std::max(max_delta, reserved_delta);
          break;
        }
        case Action::kOther:
          ++skipped_other;
          break;
      }
    }
    for (const Block& blk : live_at_end) {
      if (!live.contains(blk.addr)) initial.push_back(blk);
    }
  }

  TraceBuilder b("entry");
  Trace& t = b.trace();
  t.format = TraceFormatName(TraceFormat::kTorchSnapshot);
  StreamMap streams;
  uint64_t next_id = 0;
  absl::flat_hash_map<uint64_t, uint64_t> live;  // address -> block id
  const std::string dpath = absl::StrCat("device_traces[", device, "]");
  for (const Block& blk : initial) {
    VGPU_ASSIGN_OR_RETURN(uint32_t stream, streams.Index(static_cast<uint64_t>(blk.stream)));
    const uint64_t id = next_id++;
    if (absl::Status s = b.Alloc(id, blk.size, stream, 0); !s.ok()) {
      return r.Err(absl::StrCat("block at ", Hex(blk.addr), " live at the start"), s.message());
    }
    // A block freed in the history is matched by address; one live to the end needs no entry.
    live.emplace(blk.addr, id);
  }
  for (const Entry& e : entries) {
    if (e.action != Action::kAlloc && e.action != Action::kFree) continue;
    const std::string path = absl::StrCat(dpath, "[", e.index, "]");
    absl::StatusOr<uint32_t> stream = streams.Index(static_cast<uint64_t>(e.stream));
    if (!stream.ok()) return r.Err(path, stream.status().message());
    if (e.action == Action::kAlloc) {
      if (live.contains(e.addr)) {
        return r.Err(path, absl::StrCat("alloc at ", Hex(e.addr), ", which is live"));
      }
      const uint64_t id = next_id++;
      if (absl::Status s = b.Alloc(id, e.size, *stream, e.index); !s.ok()) {
        return r.Err(path, s.message());
      }
      live.emplace(e.addr, id);
    } else {
      auto it = live.find(e.addr);
      if (it == live.end()) {  // cannot happen: the first pass made it an initial block
        return r.Err(path, absl::StrCat("free of ", Hex(e.addr), ", which is not live"));
      }
      if (absl::Status s = b.Free(it->second, *stream); !s.ok()) return r.Err(path, s.message());
      live.erase(it);
    }
  }
  // The original allocator's reserved memory over the history: the segments at the end, less
  // the net growth in the history, is what it held at the start.
  if (have_segments) {
    const int64_t start =
        std::max<int64_t>(0, static_cast<int64_t>(final_reserved) - reserved_delta);
    t.original_peak_reserved_bytes = static_cast<uint64_t>(start + max_delta);
  }
  std::vector<std::string> notes;
  notes.push_back(absl::StrCat("PyTorch snapshot: device ", device, " of ", devices.size(),
                               options.device ? " (--device)" : " (the most events)", ", ",
                               streams.size(), " stream(s)"));
  if (!initial.empty()) {
    notes.push_back(absl::StrCat(initial.size(), " block(s) live at the start"));
  }
  notes.push_back(requested_as_free ? std::string("free_requested taken as the free (the history "
                                                  "has no free_completed)")
                                    : absl::StrCat("free_completed taken as the free (",
                                                   skipped_requested, " free_requested skipped)"));
  if (skipped_other > 0)
    notes.push_back(absl::StrCat(skipped_other, " snapshot/oom/annotation entries skipped"));
  t.import_note = absl::StrJoin(notes, ", ");
  return std::move(b).Finish(source);
}

// ---- Any of them -------------------------------------------------------------------------

namespace {

// The member of a zip archive that holds the log: torch.save's "<name>/data.pkl" (its object's
// pickle; the other members are its version and byte order), else the archive's only file.
struct LogMemberChoice {
  const ZipMember* member;
  bool torch_save;  // chosen as torch.save's data.pkl
};
absl::StatusOr<LogMemberChoice> LogMember(const std::vector<ZipMember>& members,
                                          absl::string_view source) {
  std::vector<const ZipMember*> files, pickles;
  for (const ZipMember& m : members) {
    if (m.is_directory()) continue;
    files.push_back(&m);
    const absl::string_view name = m.name;
    const size_t slash = name.rfind('/');
    const absl::string_view base = slash == absl::string_view::npos ? name : name.substr(slash + 1);
    if (base == "data.pkl" && (slash == absl::string_view::npos || name.find('/') == slash)) {
      pickles.push_back(&m);
    }
  }
  auto names = [](const std::vector<const ZipMember*>& list) {
    std::vector<std::string> out;
    for (size_t i = 0; i < list.size() && i < 8; ++i) {
      out.push_back(absl::StrCat("\"", absl::CHexEscape(list[i]->name), "\""));
    }
    if (list.size() > 8) out.push_back(absl::StrCat("and ", list.size() - 8, " more"));
    return absl::StrJoin(out, ", ");
  };
  if (pickles.size() == 1) return LogMemberChoice{pickles[0], true};
  if (pickles.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": a zip archive of ", pickles.size(),
                                                   " torch.save objects (", names(pickles),
                                                   "); save one snapshot a file"));
  }
  if (files.size() == 1) return LogMemberChoice{files[0], false};
  if (files.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": an empty zip archive (no file in it to read)"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      source, ": a zip archive of ", files.size(), " files without a torch.save data.pkl (",
      names(files), "): which log to read is not clear; unzip it and give the one log"));
}

// The compressor whose magic bytes start `data` among those logs are also kept with (zstd, xz,
// bzip2, lz4), or nullptr.
const char* OtherCompressor(absl::string_view data) {
  if (absl::StartsWith(data, absl::string_view("\x28\xb5\x2f\xfd", 4))) return "zstd";
  if (absl::StartsWith(data, absl::string_view("\xfd\x37\x7a\x58\x5a\x00", 6))) return "xz";
  if (data.size() >= 4 && absl::StartsWith(data, "BZh") && data[3] >= '1' && data[3] <= '9') {
    return "bzip2";
  }
  if (absl::StartsWith(data, absl::string_view("\x04\x22\x4d\x18", 4))) return "lz4";
  return nullptr;
}

void AppendNote(Trace& t, absl::string_view note) {
  t.import_note =
      t.import_note.empty() ? std::string(note) : absl::StrCat(t.import_note, "; ", note);
}

// `containers`: how many gzip or zip wrappers `data` was found in. A log is compressed once; a
// torch.save file or a zipped log may be gzipped too, but nothing deeper is unwrapped.
absl::StatusOr<Trace> ParseUnwrapped(absl::string_view data, absl::string_view source,
                                     const ImportOptions& options, int containers) {
  const bool gzip = IsGzip(data), zip = IsZip(data);
  if ((gzip || zip) && containers >= 2) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", gzip ? "gzip" : "zip",
                                                   " inside two other wrappers; unwrap it first"));
  }
  if (gzip) {
    // A compressed log (snapshot.pickle.gz, rmm_log.csv.gz, x.trace.gz): inflated within the
    // cap of an uncompressed trace file, then told apart like any other.
    VGPU_ASSIGN_OR_RETURN(const std::string inflated, Gunzip(data, MaxTraceFileBytes(), source));
    if (IsGzip(inflated)) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": compressed twice (gzip inside gzip); gunzip it once first"));
    }
    VGPU_ASSIGN_OR_RETURN(Trace t, ParseUnwrapped(inflated, source, options, containers + 1));
    AppendNote(t, absl::StrCat("gzip: ", data.size(), " bytes inflated to ", inflated.size()));
    return t;
  }
  if (zip) {
    // torch.save(snapshot, f) writes a zip archive around the pickle; users zip logs to send.
    VGPU_ASSIGN_OR_RETURN(const std::vector<ZipMember> members, ListZip(data, source));
    VGPU_ASSIGN_OR_RETURN(const LogMemberChoice choice, LogMember(members, source));
    const ZipMember* m = choice.member;
    VGPU_ASSIGN_OR_RETURN(const std::string contents,
                          ReadZipMember(data, *m, MaxTraceFileBytes(), source));
    if (IsZip(contents)) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": zipped twice (member \"",
                                                     absl::CHexEscape(m->name),
                                                     "\" is a zip archive); unzip it once first"));
    }
    VGPU_ASSIGN_OR_RETURN(Trace t, ParseUnwrapped(contents, source, options, containers + 1));
    AppendNote(t, absl::StrCat("zip: \"", absl::CHexEscape(m->name), "\"",
                               choice.torch_save ? " (torch.save)" : "", ", ", m->bytes, " bytes ",
                               m->method == 0 ? "stored"
                                              : absl::StrCat("deflated to ", m->compressed_bytes)));
    return t;
  }
  // Other compressors' files would read as garbled text: name the one to undo.
  if (const char* tool = OtherCompressor(data)) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": compressed with ", tool, ", which is not read: decompress it first (", tool,
        " -d), or compress with gzip, which is read as it is"));
  }
  switch (DetectTraceFormat(data)) {
    case TraceFormat::kTorchSnapshot:
      return ParseTorchSnapshot(data, source, options);
    case TraceFormat::kRmmLog:
      return ParseRmmLog(data, source);
    case TraceFormat::kTfMemoryLog:
      return ParseTfMemoryLog(data, source, options);
    case TraceFormat::kTorchProfilerTrace:
      return ParseTorchProfilerTrace(data, source, options);
    case TraceFormat::kVgpu:
      break;
  }
  return ParseTrace(data, source);
}

}  // namespace

absl::StatusOr<Trace> ParseAnyTrace(absl::string_view data, absl::string_view source,
                                    const ImportOptions& options) {
  return ParseUnwrapped(data, source, options, 0);
}

absl::StatusOr<Trace> ReadAnyTraceFile(const std::string& path, const ImportOptions& options) {
  VGPU_ASSIGN_OR_RETURN(std::string data, ReadInputFile(path, MaxTraceFileBytes(), "trace file"));
  absl::string_view base = path == "-" ? absl::string_view("stdin") : BaseName(path);
  VGPU_ASSIGN_OR_RETURN(Trace t, ParseAnyTrace(data, base, options));
  if (t.name.empty()) {
    absl::string_view stem = base;
    absl::ConsumeSuffix(&stem, ".gz");
    for (absl::string_view ext : {".pt.trace.json", ".tf.log", ".trace", ".pickle", ".pkl", ".csv",
                                  ".json", ".pt", ".pth", ".zip", ".log", ".txt"}) {
      if (absl::ConsumeSuffix(&stem, ext)) break;
    }
    t.name = std::string(stem);
  }
  return t;
}

}  // namespace vgpu
