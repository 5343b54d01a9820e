#include "vgpu/allocator/memory_history.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "vgpu/runtime/file_io.h"
#include "vgpu/runtime/gzip.h"
#include "vgpu/runtime/json.h"
#include "vgpu/runtime/status.h"

namespace vgpu {

absl::string_view AllocatorEventKindName(AllocatorEventKind kind) {
  switch (kind) {
    case AllocatorEventKind::kAlloc:
      return "alloc";
    case AllocatorEventKind::kFree:
      return "free";
    case AllocatorEventKind::kMap:
      return "map";
    case AllocatorEventKind::kUnmap:
      return "unmap";
    case AllocatorEventKind::kOom:
      return "oom";
  }
  return "unknown";
}

MemoryHistory::MemoryHistory(size_t capacity)
    : capacity_(std::max<size_t>(capacity, 1)), start_(std::chrono::steady_clock::now()) {
  ring_.reserve(std::min<size_t>(capacity_, 4096));
}

void MemoryHistory::OnAllocatorEvent(const std::string& allocator_name, const AllocatorEvent& e) {
  int64_t t = std::chrono::duration_cast<std::chrono::nanoseconds>(
                  std::chrono::steady_clock::now() - start_)
                  .count();
  StdMutexLock l(&mu_);
  uint32_t index;
  auto it = std::find(names_.begin(), names_.end(), allocator_name);
  if (it == names_.end()) {
    index = static_cast<uint32_t>(names_.size());
    names_.push_back(allocator_name);
  } else {
    index = static_cast<uint32_t>(it - names_.begin());
  }
  Entry entry{t, index, e};
  ++recorded_;
  if (ring_.size() < capacity_) {
    ring_.push_back(entry);
  } else {
    ring_[next_] = entry;
    next_ = (next_ + 1) % capacity_;
  }
}

std::vector<MemoryHistory::Entry> MemoryHistory::Events() const {
  StdMutexLock l(&mu_);
  std::vector<Entry> out;
  out.reserve(ring_.size());
  for (size_t i = 0; i < ring_.size(); ++i) out.push_back(ring_[(next_ + i) % ring_.size()]);
  return out;
}

std::vector<std::string> MemoryHistory::allocator_names() const {
  StdMutexLock l(&mu_);
  return names_;
}

uint64_t MemoryHistory::recorded() const {
  StdMutexLock l(&mu_);
  return recorded_;
}

uint64_t MemoryHistory::dropped() const {
  StdMutexLock l(&mu_);
  return recorded_ - ring_.size();
}

void MemoryHistory::Clear() {
  StdMutexLock l(&mu_);
  ring_.clear();
  next_ = 0;
  recorded_ = 0;
}

void MemoryHistory::SetLimit(const std::string& allocator_name, uint64_t bytes) {
  StdMutexLock l(&mu_);
  for (auto& [name, b] : limits_) {
    if (name == allocator_name) {
      b = bytes;
      return;
    }
  }
  limits_.emplace_back(allocator_name, bytes);
}

std::string MemoryHistory::ToJson() const {
  std::vector<Entry> events = Events();
  std::vector<std::string> names = allocator_names();
  JsonWriter w;
  w.BeginObject();
  w.Field("capacity", static_cast<uint64_t>(capacity_));
  w.Field("recorded", recorded());
  w.Field("dropped", dropped());
  w.Key("limits").BeginObject();
  {
    StdMutexLock l(&mu_);
    for (const auto& [name, bytes] : limits_) w.Field(name, bytes);
  }
  w.EndObject();
  w.Key("allocators").BeginArray();
  for (const std::string& n : names) w.String(n);
  w.EndArray();
  w.Key("events").BeginArray();
  for (const Entry& e : events) {
    w.BeginObject();
    w.Field("t_ns", e.t_ns);
    w.Field("allocator", static_cast<uint64_t>(e.allocator));
    w.Field("kind", AllocatorEventKindName(e.event.kind));
    w.Field("ptr", absl::StrFormat("0x%x", e.event.ptr));
    w.Field("bytes", e.event.bytes);
    w.Field("in_use", e.event.bytes_in_use);
    w.Field("reserved", e.event.bytes_reserved);
    w.Field("largest_free", e.event.largest_free);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return w.str();
}

absl::Status MemoryHistory::WriteJson(const std::string& path) const {
  VGPU_ASSIGN_OR_RETURN(const std::string text, GzipIfNamed(path, ToJson() + "\n"));
  return WriteOutputFile(path, text, "memory history");
}

}  // namespace vgpu
