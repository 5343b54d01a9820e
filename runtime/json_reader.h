// A small strict JSON reader (RFC 8259) for the JSON users hand vgpu (TF_CONFIG): objects,
// arrays, strings with every escape (\uXXXX and surrogate pairs, decoded to UTF-8), numbers,
// true, false and null, into a JsonValue tree that keeps each value's byte offset for messages.
//
// Strict and safe on hostile input: the text must be exactly one value with optional JSON
// whitespace around it, valid UTF-8 (no byte-order mark); a number must be a finite double
// (runtime/numbers.h's ParseDecimal: no overflow, no subnormals); duplicate object keys are an
// error; the size, the nesting depth and the number of values are bounded (JsonReadOptions),
// so recursion is bounded by the depth limit. Every error is InvalidArgument naming the byte
// offset, what was expected and what was found (quoted with QuoteUserText).
//
// Thread safety: ParseJson is a pure function, safe from any thread; a JsonValue is a plain
// value (const access from many threads is safe).
#ifndef VGPU_RUNTIME_JSON_READER_H_
#define VGPU_RUNTIME_JSON_READER_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vgpu {

struct JsonReadOptions {
  size_t max_bytes = size_t{1} << 20;   // longer text is refused before it is read
  int max_depth = 64;                   // arrays and objects nested deeper are refused
  size_t max_values = size_t{1} << 18;  // values in the whole document (bounds memory)
};

class JsonValue {
 public:
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  // "null", "a boolean", "a number", "a string", "an array", "an object" (for messages).
  static absl::string_view TypeName(Type type);

  JsonValue() = default;

  Type type() const { return type_; }
  absl::string_view type_name() const { return TypeName(type_); }
  bool is_null() const { return type_ == Type::kNull; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_number() const { return type_ == Type::kNumber; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_array() const { return type_ == Type::kArray; }
  bool is_object() const { return type_ == Type::kObject; }
  // Where the value starts in the parsed text (0-based byte offset).
  size_t offset() const { return offset_; }

  // The value of each type; the wrong type reads as false / 0 / empty.
  bool bool_value() const { return bool_; }
  double number_value() const { return number_; }
  // A number exactly as written ("1e3", "-0.50"); a string's decoded UTF-8 contents.
  const std::string& text() const { return text_; }
  const std::string& string_value() const { return text_; }
  // A number written as a whole number without fraction or exponent that fits an int64
  // ("12", "-3"); nullopt otherwise ("1.0", "1e2", too large, not a number).
  std::optional<int64_t> int_value() const;

  // An array's elements, an object's member values (in document order).
  const std::vector<JsonValue>& elements() const { return elements_; }
  // An object's keys, parallel to elements().
  const std::vector<std::string>& keys() const { return keys_; }
  size_t size() const { return elements_.size(); }
  // The member `key` of an object; nullptr when absent or not an object.
  const JsonValue* Find(absl::string_view key) const;

 private:
  friend class JsonParser;

  Type type_ = Type::kNull;
  bool bool_ = false;
  double number_ = 0;
  size_t offset_ = 0;
  std::string text_;
  std::vector<std::string> keys_;
  std::vector<JsonValue> elements_;
};

// Parses `text` as one JSON value. InvalidArgument, e.g.
//   invalid JSON at byte 12: expected ',' or '}' after an object member, found "]"
//   invalid JSON at byte 30: duplicate object key "worker" (first at byte 12)
//   invalid JSON: 2000000 bytes, over the limit of 1048576 bytes
absl::StatusOr<JsonValue> ParseJson(absl::string_view text, const JsonReadOptions& options = {});

// Pieces of JSON string syntax, shared with the tools' own readers (tools/history_reader.cc).
// Four hex digits at s[pos, pos + 4) into *out (a \u escape's); false when there are fewer or
// one is not a hex digit.
bool JsonHex4(absl::string_view s, size_t pos, uint32_t* out);
// Appends code point `cp` (at most 0x10FFFF) as UTF-8; a surrogate comes out as its three-byte
// form (JSON pairs them first; a pickle's str may hold a lone one).
void AppendUtf8(uint32_t cp, std::string* out);

}  // namespace vgpu

#endif  // VGPU_RUNTIME_JSON_READER_H_
