#include "vgpu/runtime/user_text.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace vgpu {

std::string EscapeUserText(absl::string_view text, size_t max_chars, bool escape_quotes) {
  std::string out;
  const bool cut = text.size() > max_chars;
  if (cut) text = text.substr(0, max_chars);
  for (unsigned char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (escape_quotes && (c == '\\' || c == '"')) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  if (cut) out += "...";
  return out;
}

std::string QuoteUserText(absl::string_view text, size_t max_chars) {
  const bool cut = text.size() > max_chars;
  std::string out = absl::StrCat(
      "\"", EscapeUserText(text.substr(0, std::min(text.size(), max_chars)), max_chars, true),
      "\"");
  if (cut) absl::StrAppend(&out, "... (", text.size(), " bytes)");
  return out;
}

absl::string_view StripUserValue(absl::string_view text) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  if (absl::ConsumePrefix(&t, "\xEF\xBB\xBF")) t = absl::StripAsciiWhitespace(t);
  return t;
}

}  // namespace vgpu
