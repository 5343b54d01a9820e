// A tiny streaming JSON writer for the tools' machine-readable output (vgpu-info --json,
// vgpu-bench and vgpu-train result lines, memory-history export). Produces compact JSON;
// keys keep insertion order so outputs are stable.
//
//   JsonWriter w; w.BeginObject(); w.Key("devices"); w.Int(4); w.EndObject(); w.str();
//
// Thread safety: none; one writer per thread.
#ifndef VGPU_RUNTIME_JSON_H_
#define VGPU_RUNTIME_JSON_H_

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

namespace vgpu {

class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  JsonWriter& Key(absl::string_view key);
  JsonWriter& String(absl::string_view value);
  JsonWriter& Int(int64_t value);
  JsonWriter& Uint(uint64_t value);
  JsonWriter& Double(double value);  // non-finite values are written as null
  JsonWriter& Bool(bool value);
  JsonWriter& Null();
  // Key + value shorthands.
  JsonWriter& Field(absl::string_view key, absl::string_view value) { return Key(key).String(value); }
  JsonWriter& Field(absl::string_view key, const char* value) { return Key(key).String(value); }
  JsonWriter& Field(absl::string_view key, int64_t value) { return Key(key).Int(value); }
  JsonWriter& Field(absl::string_view key, int value) { return Key(key).Int(value); }
  JsonWriter& Field(absl::string_view key, uint64_t value) { return Key(key).Uint(value); }
  JsonWriter& Field(absl::string_view key, double value) { return Key(key).Double(value); }
  JsonWriter& Field(absl::string_view key, bool value) { return Key(key).Bool(value); }

  const std::string& str() const { return out_; }
  static std::string Escape(absl::string_view s);  // with the surrounding quotes

 private:
  void Separate();
  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

}  // namespace vgpu

#endif  // VGPU_RUNTIME_JSON_H_
