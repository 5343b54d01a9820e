// TensorFlow's memory log (TF_CPP_VMODULE=log_memory=2): the `__LOG_MEMORY__` lines that
// tensorflow/core/framework/log_memory.cc writes, one protobuf message a line in its
// single-line text format, read as a vgpu trace. See ParseTfMemoryLog in trace_import.h.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "vgpu/allocator/trace.h"
#include "vgpu/allocator/trace_import.h"
#include "vgpu/runtime/status.h"
#include "vgpu/runtime/user_text.h"

namespace vgpu {
namespace {

constexpr absl::string_view kMarker = "__LOG_MEMORY__ ";
constexpr int kMaxDepth = 32;  // text-format messages nested deeper are refused
constexpr absl::string_view kProtobufDebugMarker = "goo.gle/debugonly";

// The fields of one record that the import uses, as written (a string keeps its quotes).
// `tensor { allocation_description { ... } }` of a tensor allocation is kept apart from the
// record's own fields of the same names.
struct Fields {
  std::optional<absl::string_view> allocation_id, allocator_name, num_bytes, deferred;
  bool has_description = false;
  std::optional<absl::string_view> desc_allocation_id, desc_allocator_name, desc_requested_bytes;
};

// Reads protobuf's single-line text format (ShortDebugString: `name: value` and
// `name { ... }`, also `name: { ... }`), keeping the fields above.
class TextProtoReader {
 public:
  // `column` is where `text` starts in its line (1-based), for messages.
  TextProtoReader(absl::string_view text, size_t column) : s_(text), column_(column) {}

  // The fields of a message from just after its '{' to its closing '}'. On error, a message
  // naming the column in the line.
  absl::Status ReadMessage(Fields& f) { return Message(f, 0); }

 private:
  absl::Status Err(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(what, " at column ", column_ + pos_));
  }
  void Space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\r')) ++pos_;
  }
  // A name or scalar: a run of anything but spaces, braces, colons and quotes.
  absl::string_view Word() {
    const size_t start = pos_;
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == ' ' || c == '\t' || c == '\r' || c == '{' || c == '}' || c == ':' || c == '"' ||
          c == '\'' || c == '<' || c == '>') {
        break;
      }
      ++pos_;
    }
    return s_.substr(start, pos_ - start);
  }
  // A quoted string with C escapes, quotes included; adjacent strings are one value.
  absl::StatusOr<absl::string_view> Quoted() {
    const size_t start = pos_;
    while (pos_ < s_.size() && (s_[pos_] == '"' || s_[pos_] == '\'')) {
      const char q = s_[pos_++];
      while (true) {
        if (pos_ >= s_.size()) return Err("unterminated string");
        if (s_[pos_] == '\\') {
          pos_ += 2;
          continue;
        }
        if (s_[pos_++] == q) break;
      }
      const size_t end = pos_;
      Space();
      if (pos_ >= s_.size() || (s_[pos_] != '"' && s_[pos_] != '\'')) {
        pos_ = end;
        break;
      }
    }
    return s_.substr(start, pos_ - start);
  }

  absl::Status Message(Fields& f, int depth) {
    if (depth >= kMaxDepth)
      return Err(absl::StrCat("messages nested more than ", kMaxDepth, " deep"));
    while (true) {
      Space();
      if (pos_ >= s_.size()) return Err("the record ends before its closing '}'");
      if (s_[pos_] == '}' || s_[pos_] == '>') {
        ++pos_;
        return absl::OkStatus();
      }
      // Protobuf 26 and later start debug strings with this marker (and vary the spaces after
      // it) to keep programs from parsing them; TensorFlow 2.21's log has it in every record.
      if (absl::StartsWith(s_.substr(pos_), kProtobufDebugMarker)) {
        pos_ += kProtobufDebugMarker.size();
        continue;
      }
      const absl::string_view name = Word();
      if (name.empty())
        return Err(absl::StrCat("expected a field name, got ", QuoteUserText(s_.substr(pos_, 1))));
      Space();
      bool colon = false;
      if (pos_ < s_.size() && s_[pos_] == ':') {
        ++pos_;
        colon = true;
        Space();
      }
      if (pos_ < s_.size() && (s_[pos_] == '{' || s_[pos_] == '<')) {
        ++pos_;
        // Only tensor.allocation_description's fields are kept from inside a message.
        const bool into_tensor = depth == 0 && name == "tensor";
        const bool into_desc = depth_path_ == 1 && depth == 1 && name == "allocation_description";
        if (into_tensor) depth_path_ = 1;
        if (into_desc) {
          depth_path_ = 2;
          f.has_description = true;
        }
        VGPU_RETURN_IF_ERROR(Message(f, depth + 1));
        if (into_desc) depth_path_ = 1;
        if (into_tensor) depth_path_ = 0;
        continue;
      }
      if (!colon) return Err(absl::StrCat("expected ':' or '{' after ", QuoteUserText(name)));
      if (pos_ >= s_.size()) return Err(absl::StrCat("no value for ", QuoteUserText(name)));
      absl::string_view value;
      if (s_[pos_] == '"' || s_[pos_] == '\'') {
        VGPU_ASSIGN_OR_RETURN(value, Quoted());
      } else {
        value = Word();
        if (value.empty()) return Err(absl::StrCat("no value for ", QuoteUserText(name)));
      }
      if (depth == 0) {
        if (name == "allocation_id") f.allocation_id = value;
        if (name == "allocator_name") f.allocator_name = value;
        if (name == "num_bytes") f.num_bytes = value;
        if (name == "deferred") f.deferred = value;
      } else if (depth == 2 && depth_path_ == 2) {
        if (name == "allocation_id") f.desc_allocation_id = value;
        if (name == "allocator_name") f.desc_allocator_name = value;
        if (name == "requested_bytes") f.desc_requested_bytes = value;
      }
    }
  }

  absl::string_view s_;
  size_t column_;
  size_t pos_ = 0;
  int depth_path_ = 0;  // 1 inside `tensor`, 2 inside its `allocation_description`
};

enum class Kind : uint8_t { kAlloc, kFree };

struct Record {
  Kind kind;
  uint32_t allocator;  // index into the allocator names
  uint64_t id;         // the allocator's allocation id
  uint64_t bytes;      // kAlloc
  uint64_t line;
};

}  // namespace

absl::StatusOr<Trace> ParseTfMemoryLog(absl::string_view text, absl::string_view source,
                                       const ImportOptions& options) {
  std::vector<Record> records;
  std::vector<std::string> names;  // allocator names, first seen first
  absl::flat_hash_map<std::string, uint32_t> name_index;
  std::vector<uint64_t> events;       // per allocator
  uint64_t line_no = 1, scanned = 0;  // line of text[scanned]
  uint64_t steps = 0, deferred = 0, unknown = 0, no_id = 0, no_buffer = 0;
  std::vector<std::string> unknown_types;

  size_t at = 0, line_start = 0;
  while ((at = text.find(kMarker, at)) != absl::string_view::npos) {
    for (; scanned < at; ++scanned) {
      if (text[scanned] == '\n') {
        ++line_no;
        line_start = scanned + 1;
      }
    }
    const size_t eol = text.find('\n', at);
    const absl::string_view line = text.substr(
        at + kMarker.size(),
        eol == absl::string_view::npos ? absl::string_view::npos : eol - at - kMarker.size());
    const size_t column = at - line_start + 1;  // of the marker, in its line
    at = eol == absl::string_view::npos ? text.size() : eol;
    auto err = [&](auto&&... args) {
      return absl::InvalidArgumentError(absl::StrCat(source, ":", line_no, ": ", args...));
    };
    const size_t brace = line.find('{');
    if (brace == absl::string_view::npos) {
      return err("__LOG_MEMORY__ record without a '{': ", QuoteUserText(line));
    }
    const absl::string_view type = absl::StripAsciiWhitespace(line.substr(0, brace));
    Fields f;
    TextProtoReader reader(line.substr(brace + 1), column + kMarker.size() + brace + 1);
    if (absl::Status s = reader.ReadMessage(f); !s.ok()) {
      return err(QuoteUserText(type), ": ", s.message());
    }
    // Numbers and names of the fields a record kind needs; absent ones are errors.
    auto number = [&](std::optional<absl::string_view> v,
                      absl::string_view field) -> absl::StatusOr<int64_t> {
      int64_t n = 0;
      if (!v.has_value()) return err(type, ": no ", field);
      if (!absl::SimpleAtoi(*v, &n)) return err(type, ": bad ", field, " ", QuoteUserText(*v));
      if (n < 0) return err(type, ": ", field, " is negative (", n, ")");
      return n;
    };
    auto allocator = [&](std::optional<absl::string_view> v) -> absl::StatusOr<uint32_t> {
      if (!v.has_value()) return err(type, ": no allocator_name");
      std::string name;
      absl::string_view quoted = *v;
      if (quoted.size() < 2 || (quoted.front() != '"' && quoted.front() != '\'') ||
          !absl::CUnescape(quoted.substr(1, quoted.size() - 2), &name)) {
        return err(type, ": bad allocator_name ", QuoteUserText(quoted));
      }
      auto [it, inserted] = name_index.try_emplace(name, static_cast<uint32_t>(names.size()));
      if (inserted) {
        names.push_back(name);
        events.push_back(0);
      }
      return it->second;
    };
    auto add = [&](Kind kind, uint32_t a, int64_t id, uint64_t bytes) {
      if (id <= 0) {  // an allocator that does not track allocations: frees cannot be matched
        ++no_id;
        return;
      }
      records.push_back(Record{kind, a, static_cast<uint64_t>(id), bytes, line_no});
      ++events[a];
    };
    if (type == "MemoryLogTensorAllocation") {
      if (!f.has_description) {  // a tensor without a buffer (no elements)
        ++no_buffer;
        continue;
      }
      VGPU_ASSIGN_OR_RETURN(
          const int64_t bytes,
          number(f.desc_requested_bytes, "tensor.allocation_description.requested_bytes"));
      VGPU_ASSIGN_OR_RETURN(const uint32_t a, allocator(f.desc_allocator_name));
      // No id: an allocator that does not track allocations (add() counts it).
      int64_t id = 0;
      if (f.desc_allocation_id.has_value()) {
        VGPU_ASSIGN_OR_RETURN(
            id, number(f.desc_allocation_id, "tensor.allocation_description.allocation_id"));
      }
      add(Kind::kAlloc, a, id, static_cast<uint64_t>(bytes));
    } else if (type == "MemoryLogRawAllocation") {
      VGPU_ASSIGN_OR_RETURN(const int64_t bytes, number(f.num_bytes, "num_bytes"));
      VGPU_ASSIGN_OR_RETURN(const int64_t id, number(f.allocation_id, "allocation_id"));
      VGPU_ASSIGN_OR_RETURN(const uint32_t a, allocator(f.allocator_name));
      add(Kind::kAlloc, a, id, static_cast<uint64_t>(bytes));
    } else if (type == "MemoryLogTensorDeallocation" || type == "MemoryLogRawDeallocation") {
      // A raw free is logged twice on a GPU: "deferred: true" when the kernel lets go of it,
      // then "deferred: false" once its stream is done with it and it goes back to the
      // allocator: that one is the free (like PyTorch's free_completed).
      if (f.deferred.has_value() && *f.deferred != "false" && *f.deferred != "0") {
        if (*f.deferred != "true" && *f.deferred != "1") {
          return err(type, ": bad deferred ", QuoteUserText(*f.deferred), " (true or false)");
        }
        ++deferred;
        continue;
      }
      VGPU_ASSIGN_OR_RETURN(const int64_t id, number(f.allocation_id, "allocation_id"));
      VGPU_ASSIGN_OR_RETURN(const uint32_t a, allocator(f.allocator_name));
      add(Kind::kFree, a, id, 0);
    } else if (type == "MemoryLogStep") {
      ++steps;
    } else if (type == "MemoryLogTensorOutput") {
      continue;  // an existing tensor set as an op's output: no memory of its own
    } else {
      if (++unknown <= 3) unknown_types.push_back(QuoteUserText(type));
    }
  }
  if (names.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source,
                     ": no __LOG_MEMORY__ allocation or free records (TensorFlow writes them with "
                     "TF_CPP_VMODULE=log_memory=2 and TF_CPP_MIN_LOG_LEVEL=0)"));
  }

  // Which allocator: GPU_<n>_... for --device n; else the GPU allocator with the most records,
  // or any allocator when there is no GPU one.
  uint32_t chosen = 0;
  bool found = false;
  if (options.device) {
    const std::string prefix = absl::StrCat("GPU_", *options.device, "_");
    for (uint32_t a = 0; a < names.size(); ++a) {
      if (absl::StartsWith(names[a], prefix) && (!found || events[a] > events[chosen])) {
        chosen = a;
        found = true;
      }
    }
    if (!found) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": no allocator of GPU ", *options.device, " (", prefix,
                       "...) in the log; its allocators: ", absl::StrJoin(names, ", ")));
    }
  } else {
    for (bool gpu_only : {true, false}) {
      for (uint32_t a = 0; a < names.size(); ++a) {
        if (gpu_only && !absl::StartsWith(names[a], "GPU_")) continue;
        if (!found || events[a] > events[chosen]) {
          chosen = a;
          found = true;
        }
      }
      if (found) break;
    }
  }

  TraceBuilder b("line");
  b.trace().format = TraceFormatName(TraceFormat::kTfMemoryLog);
  struct Live {
    uint64_t block;
    uint64_t line;
  };
  absl::flat_hash_map<uint64_t, Live> live;  // allocation id -> block
  uint64_t next_block = 0, unmatched = 0;    // next_block: the allocations so far
  for (const Record& r : records) {
    if (r.allocator != chosen) continue;
    auto err = [&](auto&&... args) {
      return absl::InvalidArgumentError(absl::StrCat(source, ":", r.line, ": ", args...));
    };
    if (r.kind == Kind::kAlloc) {
      if (auto it = live.find(r.id); it != live.end()) {
        return err("allocation id ", r.id, " of ", names[chosen],
                   " allocated again while live (since line ", it->second.line, ")");
      }
      const uint64_t block = next_block++;
      if (absl::Status s = b.Alloc(block, r.bytes, 0, r.line); !s.ok()) return err(s.message());
      live.emplace(r.id, Live{block, r.line});
    } else {
      auto it = live.find(r.id);
      if (it == live.end()) {
        // Tensors made outside an op's allocate calls (copies, constants) log their free only.
        ++unmatched;
        continue;
      }
      if (absl::Status s = b.Free(it->second.block, 0); !s.ok()) return err(s.message());
      live.erase(it);
    }
  }
  if (next_block == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": allocator ", names[chosen], " has no numbered allocations in the log",
        no_id > 0
            ? absl::StrCat(" (", no_id,
                           " records without an allocation_id: an allocator that does not "
                           "number its allocations, such as TF_GPU_ALLOCATOR="
                           "cuda_malloc_async; record with TensorFlow's default BFC allocator)")
            : std::string()));
  }
  std::vector<std::string> notes;
  notes.push_back(
      absl::StrCat("TensorFlow memory log: allocator ", names[chosen],
                   options.device     ? " (--device)"
                   : names.size() > 1 ? " (the most records)"
                                      : "",
                   names.size() > 1 ? absl::StrCat(" of ", absl::StrJoin(names, ", ")) : "", ", ",
                   next_block, " allocations"));
  if (unmatched > 0) {
    notes.push_back(
        absl::StrCat(unmatched, " frees of tensors whose allocation is not logged skipped"));
  }
  if (deferred > 0) {
    notes.push_back(absl::StrCat(deferred, " deferred raw frees taken at completion"));
  }
  if (no_id > 0) notes.push_back(absl::StrCat(no_id, " records without an allocation id skipped"));
  if (no_buffer > 0) notes.push_back(absl::StrCat(no_buffer, " tensors without a buffer skipped"));
  if (unknown > 0) {
    notes.push_back(absl::StrCat(unknown, " records of unknown kinds skipped (",
                                 absl::StrJoin(unknown_types, ", "), unknown > 3 ? ", ..." : "",
                                 ")"));
  }
  if (steps > 0) notes.push_back(absl::StrCat(steps, " steps"));
  b.trace().import_note = absl::StrJoin(notes, ", ");
  return std::move(b).Finish(source);
}

}  // namespace vgpu
