// Fuzzes the strict JSON reader (runtime/json_reader.h): never crashes, recurses at most the
// depth limit, and every refusal is InvalidArgument naming a byte offset inside the text; an
// accepted document keeps its invariants (offsets inside the text, object keys unique and
// parallel to their values, numbers finite, whole numbers agree with their double).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>

#include "absl/strings/match.h"
#include "vgpu/runtime/json_reader.h"

namespace {

// `depth`: the arrays and objects around `v`, `v` included.
void Check(const vgpu::JsonValue& v, size_t text_size, int depth) {
  if (v.offset() >= text_size || depth > 64) std::abort();
  switch (v.type()) {
    case vgpu::JsonValue::Type::kNumber:
      if (!std::isfinite(v.number_value()) || v.text().empty()) std::abort();
      if (auto i = v.int_value(); i && static_cast<double>(*i) != v.number_value()) std::abort();
      break;
    case vgpu::JsonValue::Type::kObject: {
      if (v.keys().size() != v.elements().size()) std::abort();
      std::set<std::string> unique(v.keys().begin(), v.keys().end());
      if (unique.size() != v.keys().size()) std::abort();
      for (const std::string& k : v.keys()) {
        if (v.Find(k) == nullptr) std::abort();
      }
      [[fallthrough]];
    }
    case vgpu::JsonValue::Type::kArray:
      for (const vgpu::JsonValue& e : v.elements()) {
        Check(e, text_size, depth + (e.is_array() || e.is_object() ? 1 : 0));
      }
      break;
    default:
      if (!v.elements().empty() || !v.keys().empty()) std::abort();
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<vgpu::JsonValue> v = vgpu::ParseJson(text);
  if (!v.ok()) {
    if (v.status().code() != absl::StatusCode::kInvalidArgument ||
        !absl::StrContains(v.status().message(), "invalid JSON")) {
      std::abort();  // errors must say what and where
    }
    return 0;
  }
  Check(*v, size, v->is_array() || v->is_object() ? 1 : 0);
  // A shallower limit refuses or accepts, never crashes.
  vgpu::JsonReadOptions shallow;
  shallow.max_depth = 2;
  shallow.max_values = 8;
  vgpu::ParseJson(text, shallow).status().IgnoreError();
  return 0;
}
