// Text a user typed (VGPU_* variables, configuration values), made safe for error messages and
// cleaned of what editors and shells add around it. Every configuration error quotes the
// user's value through QuoteUserText, so a hostile value (a megabyte, control characters,
// invalid UTF-8) never makes a message longer than a line or two, nor breaks a terminal.
//
// Thread safety: pure functions; safe from any thread.
#ifndef VGPU_RUNTIME_USER_TEXT_H_
#define VGPU_RUNTIME_USER_TEXT_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace vgpu {

// The longest part of a user's value quoted in a message.
inline constexpr size_t kMaxQuotedChars = 80;

// `text` in double quotes: bytes outside printable ASCII (control characters, a CR from a CRLF
// file, a UTF-8 BOM, a NUL) and '"' / '\' are escaped C-style ("\r", "\x00"); past
// `max_chars` input bytes the rest is cut and the quote ends in "..." plus the full length, e.g.
// "aaaa..." (1048576 bytes).
std::string QuoteUserText(absl::string_view text, size_t max_chars = kMaxQuotedChars);

// The escaping QuoteUserText does, without the quotes: at most `max_chars` input bytes, then
// "..." when cut; '"' and '\' are escaped only with `escape_quotes` (for text that already
// quotes a user's value, e.g. another error's message).
std::string EscapeUserText(absl::string_view text, size_t max_chars, bool escape_quotes);

// `text` without surrounding ASCII whitespace (spaces, tabs, CR, LF) and without a leading
// UTF-8 byte-order mark (a value pasted from a file saved by a Windows editor).
absl::string_view StripUserValue(absl::string_view text);

}  // namespace vgpu

#endif  // VGPU_RUNTIME_USER_TEXT_H_
