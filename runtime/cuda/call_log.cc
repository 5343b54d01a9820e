#include "vgpu/runtime/cuda/call_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace vgpu::cuda::call_log {
namespace {

struct Log {
  int fd = -1;          // -1 when off
  absl::Status status;  // why a log that was asked for is off
};

// The log, opened once and never closed: wrapped functions may run on library threads until
// the process exits.
const Log& GetLog() {
  static const Log log = [] {
    Log l;
    const char* path = std::getenv(kCallLogEnv);
    if (path == nullptr || *path == '\0') return l;
    l.fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (l.fd < 0) {
      l.status = absl::FailedPreconditionError(absl::StrCat(
          kCallLogEnv, "=", path, " cannot be opened (", std::strerror(errno), "); no call log"));
    }
    return l;
  }();
  return log;
}

int LogFd() { return GetLog().fd; }

}  // namespace

bool Enabled() { return LogFd() >= 0; }

bool TimesEnabled() {
  static const bool on = [] {
    const char* v = std::getenv(kCallLogTimesEnv);
    return v != nullptr && std::string_view(v) == "1";
  }();
  return on;
}

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

absl::Status OpenStatus() { return GetLog().status; }

void WriteLine(absl::string_view line) {
  const int fd = LogFd();
  if (fd < 0) return;
  std::string buffer = absl::StrCat(line, "\n");
  // One write per line keeps lines whole under O_APPEND; a short write (disk full) is retried
  // for the rest, which may then interleave, but never loses the line's end.
  const char* p = buffer.data();
  size_t left = buffer.size();
  while (left > 0) {
    ssize_t n = write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

int ThreadNumber() {
  static std::atomic<int> next{1};
  thread_local const int number = next.fetch_add(1, std::memory_order_relaxed);
  return number;
}

std::string FormatPointer(const void* p) {
  if (p == nullptr) return "NULL";
  return absl::StrCat("0x", absl::Hex(reinterpret_cast<uintptr_t>(p)));
}

std::string FormatQuoted(const char* s) {
  if (s == nullptr) return "NULL";
  std::string out = "\"";
  // Bounded: a log line is for reading, and a name longer than this is itself suspect.
  constexpr size_t kMaxChars = 200;
  size_t i = 0;
  for (; s[i] != '\0' && i < kMaxChars; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s[i] != '\0') out += "...";
  out += '"';
  return out;
}

}  // namespace vgpu::cuda::call_log
