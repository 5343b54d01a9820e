#include "vgpu/runtime/json_reader.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "vgpu/runtime/numbers.h"
#include "vgpu/runtime/status.h"
#include "vgpu/runtime/user_text.h"

namespace vgpu {

bool JsonHex4(absl::string_view s, size_t pos, uint32_t* out) {
  if (pos > s.size() || s.size() - pos < 4) return false;
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    const char c = s[pos + i];
    v <<= 4;
    if (c >= '0' && c <= '9') {
      v |= c - '0';
    } else if (c >= 'a' && c <= 'f') {
      v |= c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      v |= c - 'A' + 10;
    } else {
      return false;
    }
  }
  *out = v;
  return true;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

absl::string_view JsonValue::TypeName(Type type) {
  switch (type) {
    case Type::kNull:
      return "null";
    case Type::kBool:
      return "a boolean";
    case Type::kNumber:
      return "a number";
    case Type::kString:
      return "a string";
    case Type::kArray:
      return "an array";
    case Type::kObject:
      return "an object";
  }
  return "?";
}

std::optional<int64_t> JsonValue::int_value() const {
  if (type_ != Type::kNumber) return std::nullopt;
  if (text_.find_first_of(".eE") != std::string::npos) return std::nullopt;
  absl::StatusOr<int64_t> v = ParseInt64(text_);
  if (!v.ok()) return std::nullopt;
  return *v;
}

const JsonValue* JsonValue::Find(absl::string_view key) const {
  if (type_ != Type::kObject) return nullptr;
  for (size_t i = 0; i < keys_.size(); ++i) {
    if (keys_[i] == key) return &elements_[i];
  }
  return nullptr;
}

// Recursive descent; the recursion is at most options.max_depth deep.
class JsonParser {
 public:
  JsonParser(absl::string_view text, const JsonReadOptions& options)
      : s_(text), options_(options) {}

  absl::StatusOr<JsonValue> Run() {
    if (s_.size() > options_.max_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "invalid JSON: ", s_.size(), " bytes, over the limit of ", options_.max_bytes, " bytes"));
    }
    if (s_.size() >= 3 && s_.substr(0, 3) == "\xEF\xBB\xBF") {
      return Fail(0,
                  "a byte-order mark (U+FEFF) is not allowed; save the text as UTF-8 "
                  "without one");
    }
    JsonValue root;
    SkipSpace();
    VGPU_RETURN_IF_ERROR(ParseValue(&root, 0));
    SkipSpace();
    if (pos_ != s_.size()) return Expected(pos_, "the end of the text after the value");
    return root;
  }

 private:
  static bool IsDigit(char c) { return c >= '0' && c <= '9'; }

  std::string Where(size_t at) const {
    size_t line = 1 + std::count(s_.begin(), s_.begin() + at, '\n');
    size_t line_start = s_.rfind('\n', at == 0 ? 0 : at - 1);
    size_t column = (line_start == absl::string_view::npos || at == 0) ? at + 1 : at - line_start;
    return absl::StrCat("at byte ", at, " (line ", line, ", column ", column, ")");
  }

  absl::Status Fail(size_t at, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("invalid JSON ", Where(at), ": ", what));
  }

  absl::Status Expected(size_t at, absl::string_view expected) const {
    const std::string found =
        at >= s_.size() ? std::string("the end of the text") : QuoteUserText(s_.substr(at, 1));
    return Fail(at, absl::StrCat("expected ", expected, ", found ", found));
  }

  void SkipSpace() {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return;
      ++pos_;
    }
  }

  bool Peek(char c) const { return pos_ < s_.size() && s_[pos_] == c; }

  absl::Status ParseValue(JsonValue* out, int depth) {
    if (++values_ > options_.max_values) {
      return Fail(pos_, absl::StrCat("more than ", options_.max_values, " values"));
    }
    out->offset_ = pos_;
    if (pos_ >= s_.size()) return Expected(pos_, "a value");
    switch (s_[pos_]) {
      case '{':
      case '[':
        if (depth + 1 > options_.max_depth) {
          return Fail(pos_, absl::StrCat("arrays and objects nested deeper than ",
                                         options_.max_depth, " levels"));
        }
        return s_[pos_] == '{' ? ParseObject(out, depth + 1) : ParseArray(out, depth + 1);
      case '"':
        out->type_ = JsonValue::Type::kString;
        return ParseString(&out->text_);
      case 't':
        out->type_ = JsonValue::Type::kBool;
        out->bool_ = true;
        return ParseLiteral("true");
      case 'f':
        out->type_ = JsonValue::Type::kBool;
        return ParseLiteral("false");
      case 'n':
        return ParseLiteral("null");
      default:
        if (s_[pos_] == '-' || IsDigit(s_[pos_])) return ParseNumber(out);
        return Expected(pos_, "a value (an object, array, string, number, true, false or null)");
    }
  }

  absl::Status ParseLiteral(absl::string_view word) {
    if (s_.substr(pos_, word.size()) != word) {
      return Expected(pos_, absl::StrCat("a value (", word, "?)"));
    }
    pos_ += word.size();
    return absl::OkStatus();
  }

  absl::Status ParseObject(JsonValue* out, int depth) {
    out->type_ = JsonValue::Type::kObject;
    ++pos_;  // '{'
    SkipSpace();
    if (Peek('}')) {
      ++pos_;
      return absl::OkStatus();
    }
    absl::flat_hash_map<std::string, size_t> seen;  // key -> its offset
    while (true) {
      SkipSpace();
      if (!Peek('"')) {
        return Expected(pos_, out->keys_.empty() ? "a string key or '}'" : "a string key");
      }
      const size_t key_at = pos_;
      std::string key;
      VGPU_RETURN_IF_ERROR(ParseString(&key));
      auto [it, inserted] = seen.emplace(key, key_at);
      if (!inserted) {
        return Fail(key_at, absl::StrCat("duplicate object key ", QuoteUserText(key),
                                         " (first at byte ", it->second, ")"));
      }
      SkipSpace();
      if (!Peek(':')) return Expected(pos_, "':' after an object key");
      ++pos_;
      SkipSpace();
      JsonValue value;
      VGPU_RETURN_IF_ERROR(ParseValue(&value, depth));
      out->keys_.push_back(std::move(key));
      out->elements_.push_back(std::move(value));
      SkipSpace();
      if (Peek(',')) {
        ++pos_;
        continue;
      }
      if (Peek('}')) {
        ++pos_;
        return absl::OkStatus();
      }
      return Expected(pos_, "',' or '}' after an object member");
    }
  }

  absl::Status ParseArray(JsonValue* out, int depth) {
    out->type_ = JsonValue::Type::kArray;
    ++pos_;  // '['
    SkipSpace();
    if (Peek(']')) {
      ++pos_;
      return absl::OkStatus();
    }
    while (true) {
      SkipSpace();
      JsonValue value;
      VGPU_RETURN_IF_ERROR(ParseValue(&value, depth));
      out->elements_.push_back(std::move(value));
      SkipSpace();
      if (Peek(',')) {
        ++pos_;
        continue;
      }
      if (Peek(']')) {
        ++pos_;
        return absl::OkStatus();
      }
      return Expected(pos_, "',' or ']' after an array element");
    }
  }

  absl::Status ParseNumber(JsonValue* out) {
    const size_t start = pos_;
    if (Peek('-')) ++pos_;
    if (pos_ >= s_.size() || !IsDigit(s_[pos_])) return Expected(pos_, "a digit");
    if (s_[pos_] == '0') {
      ++pos_;
      if (pos_ < s_.size() && IsDigit(s_[pos_])) {
        return Fail(start, "a number must not have a leading zero (write 7, not 07)");
      }
    } else {
      while (pos_ < s_.size() && IsDigit(s_[pos_])) ++pos_;
    }
    if (Peek('.')) {
      ++pos_;
      if (pos_ >= s_.size() || !IsDigit(s_[pos_])) return Expected(pos_, "a digit after '.'");
      while (pos_ < s_.size() && IsDigit(s_[pos_])) ++pos_;
    }
    if (Peek('e') || Peek('E')) {
      ++pos_;
      if (Peek('+') || Peek('-')) ++pos_;
      if (pos_ >= s_.size() || !IsDigit(s_[pos_])) {
        return Expected(pos_, "a digit in the exponent");
      }
      while (pos_ < s_.size() && IsDigit(s_[pos_])) ++pos_;
    }
    const absl::string_view text = s_.substr(start, pos_ - start);
    absl::StatusOr<double> v = ParseDecimal(text);
    if (!v.ok()) {
      return Fail(start, absl::StrCat("number ", QuoteUserText(text),
                                      " is out of range (numbers must be finite doubles, not "
                                      "subnormal)"));
    }
    out->type_ = JsonValue::Type::kNumber;
    out->number_ = *v;
    out->text_ = std::string(text);
    return absl::OkStatus();
  }

  bool Hex4(uint32_t* out) {
    if (!JsonHex4(s_, pos_, out)) return false;
    pos_ += 4;
    return true;
  }

  // The length of the valid UTF-8 sequence (2 to 4 bytes) at pos_, 0 when invalid (overlong
  // forms, surrogates and code points over U+10FFFF included).
  size_t Utf8Length() const {
    const auto b = [&](size_t i) -> unsigned {
      return pos_ + i < s_.size() ? static_cast<unsigned char>(s_[pos_ + i]) : 0u;
    };
    const auto cont = [&](size_t i) { return (b(i) & 0xC0) == 0x80; };
    const unsigned c = b(0);
    if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
      const unsigned lo = c == 0xE0 ? 0xA0 : 0x80;
      const unsigned hi = c == 0xED ? 0x9F : 0xBF;
      return b(1) >= lo && b(1) <= hi && cont(2) ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
      const unsigned lo = c == 0xF0 ? 0x90 : 0x80;
      const unsigned hi = c == 0xF4 ? 0x8F : 0xBF;
      return b(1) >= lo && b(1) <= hi && cont(2) && cont(3) ? 4 : 0;
    }
    return 0;
  }

  absl::Status ParseString(std::string* out) {
    ++pos_;  // '"'
    while (true) {
      if (pos_ >= s_.size()) return Expected(pos_, "'\"' to end the string");
      const unsigned char c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return absl::OkStatus();
      }
      if (c < 0x20) {
        return Fail(pos_, absl::StrCat("control character ", QuoteUserText(s_.substr(pos_, 1)),
                                       " in a string (write it as an escape, e.g. \\n)"));
      }
      if (c >= 0x80) {
        const size_t n = Utf8Length();
        if (n == 0) return Fail(pos_, "invalid UTF-8 in a string");
        out->append(s_.data() + pos_, n);
        pos_ += n;
        continue;
      }
      if (c != '\\') {
        out->push_back(static_cast<char>(c));
        ++pos_;
        continue;
      }
      const size_t escape_at = pos_;
      ++pos_;
      if (pos_ >= s_.size()) return Expected(pos_, "an escape after '\\'");
      const char e = s_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out->push_back(e);
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          uint32_t cp = 0;
          if (!Hex4(&cp)) return Expected(pos_, "four hex digits after \\u");
          if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return Fail(escape_at, absl::StrCat("a low surrogate \\u", s_.substr(escape_at + 2, 4),
                                                " without a high surrogate (\\uD800-\\uDBFF) "
                                                "before it"));
          }
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t low = 0;
            const size_t low_at = pos_;
            if (s_.substr(pos_, 2) != "\\u") {
              return Fail(escape_at,
                          absl::StrCat("a high surrogate \\u", s_.substr(escape_at + 2, 4),
                                       " must be followed by a low surrogate \\uDC00-\\uDFFF"));
            }
            pos_ += 2;
            if (!Hex4(&low)) return Expected(pos_, "four hex digits after \\u");
            if (low < 0xDC00 || low > 0xDFFF) {
              return Fail(low_at, absl::StrCat("expected a low surrogate \\uDC00-\\uDFFF after "
                                               "the high surrogate \\u",
                                               s_.substr(escape_at + 2, 4), ", found \\u",
                                               s_.substr(low_at + 2, 4)));
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          AppendUtf8(cp, out);
          break;
        }
        default:
          return Fail(escape_at,
                      absl::StrCat("unknown escape ", QuoteUserText(s_.substr(escape_at, 2)),
                                   " (JSON has \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)"));
      }
    }
  }

  absl::string_view s_;
  const JsonReadOptions& options_;
  size_t pos_ = 0;
  size_t values_ = 0;
};

absl::StatusOr<JsonValue> ParseJson(absl::string_view text, const JsonReadOptions& options) {
  return JsonParser(text, options).Run();
}

}  // namespace vgpu
