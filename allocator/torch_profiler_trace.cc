// PyTorch profiler traces: the Chrome trace JSON that torch.profiler.profile(profile_memory=
// True) exports (prof.export_chrome_trace(), tensorboard_trace_handler's *.pt.trace.json), whose
// "[memory]" instant events are every allocation and free of PyTorch's allocators. See
// ParseTorchProfilerTrace in trace_import.h.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "vgpu/allocator/trace.h"
#include "vgpu/allocator/trace_import.h"
#include "vgpu/runtime/json_reader.h"
#include "vgpu/runtime/status.h"
#include "vgpu/runtime/user_text.h"

namespace vgpu {
namespace {

constexpr size_t kMaxDepth = 256;  // brackets open at once in the document
constexpr size_t kMaxMemoryEventBytes = 64 * 1024;

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Walks a JSON document without building it: the extent of each value, strings and brackets
// matched, so a trace of hundreds of megabytes costs no memory beyond the events it keeps (each
// event is then parsed strictly with ParseJson). Errors name the byte offset.
class JsonScanner {
 public:
  JsonScanner(absl::string_view s, absl::string_view source) : s_(s), source_(source) {}

  absl::Status Err(size_t at, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": invalid JSON at byte ", at, ": ", what));
  }
  // The character at `pos` quoted, or "the end" past it.
  std::string Found(size_t pos) const {
    return pos < s_.size() ? QuoteUserText(s_.substr(pos, 1)) : "the end";
  }
  size_t SkipSpace(size_t pos) const {
    while (pos < s_.size() && IsSpace(s_[pos])) ++pos;
    return pos;
  }
  // The end of the value that starts at `pos` (after whitespace).
  absl::StatusOr<size_t> SkipValue(size_t pos) const {
    std::vector<char> open;
    do {
      pos = SkipSpace(pos);
      if (pos >= s_.size()) return Err(pos, "the document ends inside a value");
      const char c = s_[pos];
      if (c == '"') {
        const size_t start = pos++;
        while (pos < s_.size() && s_[pos] != '"') pos += s_[pos] == '\\' ? 2 : 1;
        if (pos >= s_.size()) return Err(start, "unterminated string");
        ++pos;
      } else if (c == '{' || c == '[') {
        if (open.size() >= kMaxDepth)
          return Err(pos, absl::StrCat("nested more than ", kMaxDepth, " deep"));
        open.push_back(c == '{' ? '}' : ']');
        ++pos;
      } else if (c == '}' || c == ']') {
        if (open.empty() || open.back() != c) {
          return Err(pos, absl::StrCat("unexpected ", Found(pos)));
        }
        open.pop_back();
        ++pos;
      } else if ((c == ',' || c == ':') && !open.empty()) {
        ++pos;
      } else {
        const size_t start = pos;
        while (pos < s_.size() && !IsSpace(s_[pos]) && s_[pos] != ',' && s_[pos] != ':' &&
               s_[pos] != ']' && s_[pos] != '}' && s_[pos] != '[' && s_[pos] != '{' &&
               s_[pos] != '"') {
          ++pos;
        }
        if (pos == start) {
          return Err(pos, absl::StrCat("unexpected ", Found(pos)));
        }
      }
    } while (!open.empty());
    return pos;
  }

 private:
  absl::string_view s_;
  absl::string_view source_;
};

struct MemoryEvent {
  double ts;
  int64_t device_type;
  int64_t device_id;
  uint64_t addr;
  int64_t bytes;  // negative: a free
  std::optional<int64_t> reserved;
  size_t offset;  // in the document, for messages
};

std::string DeviceName(int64_t type, int64_t id) {
  const std::string kind = type == 0   ? "cpu"
                           : type == 1 ? "cuda"
                                       : absl::StrCat("device type ", type);
  return id < 0 ? kind : absl::StrCat(kind, ":", id);
}

}  // namespace

absl::StatusOr<Trace> ParseTorchProfilerTrace(absl::string_view text, absl::string_view source,
                                              const ImportOptions& options) {
  JsonScanner scan(text, source);
  // The events: a document {"traceEvents": [...], ...} or the array alone (both are Chrome's
  // trace format).
  size_t pos = scan.SkipSpace(0);
  std::optional<size_t> events_at;
  if (pos < text.size() && text[pos] == '[') {
    events_at = pos;
  } else if (pos < text.size() && text[pos] == '{') {
    ++pos;
    while (true) {
      pos = scan.SkipSpace(pos);
      if (pos < text.size() && text[pos] == '}') break;
      if (pos >= text.size() || text[pos] != '"') {
        return scan.Err(pos, absl::StrCat("expected a member name, found ", scan.Found(pos)));
      }
      VGPU_ASSIGN_OR_RETURN(const size_t key_end, scan.SkipValue(pos));
      const absl::string_view key = text.substr(pos + 1, key_end - pos - 2);
      pos = scan.SkipSpace(key_end);
      if (pos >= text.size() || text[pos] != ':') {
        return scan.Err(pos, absl::StrCat("expected ':', found ", scan.Found(pos)));
      }
      const size_t value = scan.SkipSpace(pos + 1);
      VGPU_ASSIGN_OR_RETURN(pos, scan.SkipValue(value));
      if (key == "traceEvents") {
        if (text[value] != '[') return scan.Err(value, "\"traceEvents\" is not an array");
        events_at = value;
      }
      pos = scan.SkipSpace(pos);
      if (pos < text.size() && text[pos] == ',') {
        ++pos;
        continue;
      }
      if (pos >= text.size() || text[pos] != '}') {
        return scan.Err(
            pos, absl::StrCat("expected ',' or '}' after a member, found ", scan.Found(pos)));
      }
    }
    if (scan.SkipSpace(pos + 1) != text.size()) {
      return scan.Err(scan.SkipSpace(pos + 1), "data after the document");
    }
  } else {
    return scan.Err(pos,
                    absl::StrCat("expected a Chrome trace ('{' or '['), found ", scan.Found(pos)));
  }
  if (!events_at) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": no \"traceEvents\": not a Chrome trace"));
  }

  std::vector<MemoryEvent> events;
  uint64_t other_memory_events = 0, large_skipped = 0;
  pos = *events_at + 1;
  while (true) {
    pos = scan.SkipSpace(pos);
    if (pos < text.size() && text[pos] == ']') break;
    const size_t start = pos;
    VGPU_ASSIGN_OR_RETURN(pos, scan.SkipValue(pos));
    const absl::string_view element = text.substr(start, pos - start);
    pos = scan.SkipSpace(pos);
    if (pos < text.size() && text[pos] == ',') {
      ++pos;
    } else if (pos >= text.size() || text[pos] != ']') {
      return scan.Err(pos,
                      absl::StrCat("expected ',' or ']' after an event, found ", scan.Found(pos)));
    }
    // Most events are operators and kernels: only those naming "[memory]" are parsed. A memory
    // event is a few hundred bytes; a larger event that mentions it is an operator or kernel
    // quoting the name in its arguments, left unparsed so it costs no memory.
    if (element.find("\"[memory]\"") == absl::string_view::npos) continue;
    if (element.size() > kMaxMemoryEventBytes) {
      ++large_skipped;
      continue;
    }
    auto err = [&](auto&&... args) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": the event at byte ", start, ": ", args...));
    };
    JsonReadOptions limits;
    limits.max_bytes = element.size();
    limits.max_depth = 64;
    limits.max_values = kMaxMemoryEventBytes;  // at least a byte each: never the limit
    absl::StatusOr<JsonValue> ev = ParseJson(element, limits);
    if (!ev.ok()) return err(ev.status().message(), " (bytes counted from the event's start)");
    const JsonValue* name = ev->Find("name");
    if (name == nullptr || !name->is_string() || name->string_value() != "[memory]") {
      continue;  // "[memory]" inside another event's text
    }
    const JsonValue* args = ev->Find("args");
    if (args == nullptr || !args->is_object()) return err("a [memory] event without \"args\"");
    auto integer = [&](absl::string_view key,
                       bool required) -> absl::StatusOr<std::optional<int64_t>> {
      const JsonValue* v = args->Find(key);
      if (v == nullptr) {
        if (!required) return std::optional<int64_t>();
        return err("no \"args\": {\"", key, "\"}");
      }
      if (!v->int_value()) return err("\"", key, "\" is ", v->type_name(), ", expected an integer");
      return v->int_value();
    };
    MemoryEvent m;
    m.offset = start;
    const JsonValue* ts = ev->Find("ts");
    if (ts == nullptr || !ts->is_number()) return err("no \"ts\" number");
    m.ts = ts->number_value();
    VGPU_ASSIGN_OR_RETURN(std::optional<int64_t> type, integer("Device Type", true));
    VGPU_ASSIGN_OR_RETURN(std::optional<int64_t> id, integer("Device Id", true));
    VGPU_ASSIGN_OR_RETURN(std::optional<int64_t> addr, integer("Addr", true));
    VGPU_ASSIGN_OR_RETURN(std::optional<int64_t> bytes, integer("Bytes", true));
    VGPU_ASSIGN_OR_RETURN(m.reserved, integer("Total Reserved", false));
    m.device_type = *type;
    m.device_id = *id;
    m.bytes = *bytes;
    if (*addr == 0 || m.bytes == 0) {  // an empty tensor: no memory
      ++other_memory_events;
      continue;
    }
    m.addr = static_cast<uint64_t>(*addr);
    events.push_back(m);
  }
  if (events.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": no [memory] events: profile with torch.profiler.profile(profile_memory=True)"));
  }

  // Which device: --device n picks cuda:n; else the CUDA device with the most events, or any
  // device when no CUDA one has events.
  absl::flat_hash_map<std::pair<int64_t, int64_t>, uint64_t> counts;
  for (const MemoryEvent& m : events) ++counts[{m.device_type, m.device_id}];
  std::vector<std::pair<int64_t, int64_t>> devices;
  for (const auto& [d, n] : counts) devices.push_back(d);
  std::sort(devices.begin(), devices.end());
  std::vector<std::string> names;
  for (const auto& d : devices) names.push_back(DeviceName(d.first, d.second));
  std::optional<std::pair<int64_t, int64_t>> chosen;
  if (options.device) {
    if (!counts.contains({1, *options.device})) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": no [memory] events of cuda:", *options.device, "; the trace has ",
                       absl::StrJoin(names, ", ")));
    }
    chosen = std::make_pair(int64_t{1}, static_cast<int64_t>(*options.device));
  } else {
    for (bool cuda_only : {true, false}) {
      for (const auto& d : devices) {
        if (cuda_only && d.first != 1) continue;
        if (!chosen || counts[d] > counts[*chosen]) chosen = d;
      }
      if (chosen) break;
    }
  }
  std::erase_if(events, [&](const MemoryEvent& m) {
    return m.device_type != chosen->first || m.device_id != chosen->second;
  });
  // Threads (the autograd engine's among them) write their events apart: in time order, the
  // file's order among equal times.
  std::stable_sort(events.begin(), events.end(),
                   [](const MemoryEvent& a, const MemoryEvent& b) { return a.ts < b.ts; });

  TraceBuilder b("byte");
  b.trace().format = TraceFormatName(TraceFormat::kTorchProfilerTrace);
  struct Live {
    uint64_t block;
    uint64_t bytes;
    size_t offset;
  };
  absl::flat_hash_map<uint64_t, Live> live;  // address -> block
  uint64_t next_block = 0, unmatched = 0, reserved = 0;
  for (const MemoryEvent& m : events) {
    auto err = [&](auto&&... args) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": the event at byte ", m.offset, ": ", args...));
    };
    if (m.reserved && *m.reserved > 0) {
      reserved = std::max(reserved, static_cast<uint64_t>(*m.reserved));
    }
    if (m.bytes > 0) {
      if (auto it = live.find(m.addr); it != live.end()) {
        return err("allocation at ", m.addr, ", which is live (allocated by the event at byte ",
                   it->second.offset, ")");
      }
      const uint64_t block = next_block++;
      if (absl::Status s = b.Alloc(block, static_cast<uint64_t>(m.bytes), 0, m.offset); !s.ok()) {
        return err(s.message());
      }
      live.emplace(m.addr, Live{block, static_cast<uint64_t>(m.bytes), m.offset});
    } else {
      auto it = live.find(m.addr);
      if (it == live.end()) {  // allocated before the profiler started
        ++unmatched;
        continue;
      }
      const uint64_t freed = m.bytes == INT64_MIN ? 0 : static_cast<uint64_t>(-m.bytes);
      if (freed != it->second.bytes) {
        return err("free of ", freed, " bytes at ", m.addr, ", allocated with ", it->second.bytes,
                   " bytes by the event at byte ", it->second.offset);
      }
      if (absl::Status s = b.Free(it->second.block, 0); !s.ok()) return err(s.message());
      live.erase(it);
    }
  }
  b.trace().original_peak_reserved_bytes = reserved;
  std::vector<std::string> notes;
  notes.push_back(
      absl::StrCat("PyTorch profiler trace: ", DeviceName(chosen->first, chosen->second),
                   options.device       ? " (--device)"
                   : devices.size() > 1 ? " (the most [memory] events)"
                                        : "",
                   devices.size() > 1 ? absl::StrCat(" of ", absl::StrJoin(names, ", ")) : "", ", ",
                   next_block, " allocations"));
  if (unmatched > 0) {
    notes.push_back(absl::StrCat(unmatched, " frees of blocks allocated before profiling skipped"));
  }
  if (large_skipped > 0) {
    notes.push_back(absl::StrCat(large_skipped, " events over 64 KiB mentioning [memory] skipped"));
  }
  if (other_memory_events > 0) {
    notes.push_back(absl::StrCat(other_memory_events, " events of 0 bytes skipped"));
  }
  b.trace().import_note = absl::StrJoin(notes, ", ");
  return std::move(b).Finish(source);
}

}  // namespace vgpu
