// For the flag-parsing fuzzers: the input split into argv words (on NUL or newline), and the
// checks every parse result must pass (an error says something, and not too much).
#ifndef VGPU_TESTS_FUZZ_FLAGS_FUZZ_UTIL_H_
#define VGPU_TESTS_FUZZ_FLAGS_FUZZ_UTIL_H_

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace vgpu_fuzz {

inline std::vector<std::string> SplitArgs(const uint8_t* data, size_t size) {
  std::vector<std::string> out(1);
  for (size_t i = 0; i < size; ++i) {
    const char c = static_cast<char>(data[i]);
    if (c == '\0' || c == '\n') {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

// Every refusal names something and stays short, whatever the input's size.
inline void CheckError(const absl::Status& s) {
  if (s.ok()) return;
  if (s.message().empty() || s.message().size() > 2000) std::abort();
  if (s.code() != absl::StatusCode::kInvalidArgument) std::abort();
}

}  // namespace vgpu_fuzz

#endif  // VGPU_TESTS_FUZZ_FLAGS_FUZZ_UTIL_H_
