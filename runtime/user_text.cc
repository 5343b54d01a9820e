#include "runtime/user_text.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace vgpu {

std::string QuoteUserText(absl::string_view text, size_t max_chars) {
  std::string out = "\"";
  const size_t shown = std::min(text.size(), max_chars);
  for (size_t i = 0; i < shown; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c >= 0x7f) {
          absl::StrAppendFormat(&out, "\\x%02x", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
  if (shown < text.size()) absl::StrAppend(&out, "... (", text.size(), " bytes)");
  return out;
}

absl::string_view StripUserValue(absl::string_view text) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  if (absl::ConsumePrefix(&t, "\xEF\xBB\xBF")) t = absl::StripAsciiWhitespace(t);
  return t;
}

}  // namespace vgpu
