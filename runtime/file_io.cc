#include "vgpu/runtime/file_io.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "vgpu/runtime/bytes.h"

namespace vgpu {
namespace {

const char* TypeName(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

// "a trace file", "an IDX file".
std::string Article(absl::string_view what) {
  const bool vowel = !what.empty() && std::strchr("AEIOUaeiou", what[0]) != nullptr;
  return absl::StrCat(vowel ? "an " : "a ", what);
}

absl::Status TypeError(const std::string& path, mode_t mode, absl::string_view what) {
  if (S_ISDIR(mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is a directory, not ", Article(what)));
  }
  return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file (it is ",
                                                 TypeName(mode), "); ", Article(what),
                                                 " must be a regular file"));
}

absl::Status OpenError(const std::string& path, int err, absl::string_view what) {
  std::string prefix = absl::StrCat("cannot open ", what, " ", path, ": ");
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(absl::StrCat(prefix, "no such file"));
    case ENOTDIR:
      return absl::NotFoundError(absl::StrCat(prefix, "a part of the path is not a directory"));
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(absl::StrCat(prefix, "permission denied"));
    default:
      return absl::InvalidArgumentError(absl::StrCat(prefix, std::strerror(err)));
  }
}

absl::Status TooLarge(const std::string& path, uint64_t size, uint64_t max_bytes,
                      absl::string_view what, bool grew) {
  return absl::ResourceExhaustedError(
      absl::StrCat(what, " ", path, grew ? " grew past " : " is ", FormatBytes(size), " (", size,
                   " bytes)", grew ? " while being read" : "", ", above the cap of ",
                   FormatBytes(max_bytes), " for ", Article(what)));
}

}  // namespace

absl::StatusOr<InputFile> InputFile::Open(const std::string& path, uint64_t max_bytes,
                                          absl::string_view what) {
  // stat first: opening a device or a FIFO can have effects of its own, so only regular files
  // are opened at all. O_NONBLOCK still guards the race where the path changes in between.
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return OpenError(path, errno, what);
  if (!S_ISREG(st.st_mode)) return TypeError(path, st.st_mode, what);
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return OpenError(path, errno, what);
  InputFile f(fd, 0, max_bytes, path, std::string(what));
  if (::fstat(fd, &st) != 0) return OpenError(path, errno, what);
  if (!S_ISREG(st.st_mode)) return TypeError(path, st.st_mode, what);
  f.size_ = static_cast<uint64_t>(st.st_size);
  if (f.size_ > max_bytes) return TooLarge(path, f.size_, max_bytes, what, /*grew=*/false);
  return f;
}

absl::StatusOr<InputFile> InputFile::Stdin(uint64_t max_bytes, absl::string_view what) {
  // A pipe, a socket or a redirected file. A terminal would wait for typing, and a device such
  // as /dev/zero never ends: both are refused, as devices are by name.
  struct stat st;
  if (::fstat(STDIN_FILENO, &st) != 0) return OpenError("(standard input)", errno, what);
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", what, " from standard input (-): it is ",
                     ::isatty(STDIN_FILENO) == 1 ? "a terminal" : TypeName(st.st_mode),
                     "; pipe the ", what, " in or name the file"));
  }
  const int fd = ::fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return OpenError("(standard input)", errno, what);
  InputFile f(fd, 0, max_bytes, "(standard input)", std::string(what));
  if (S_ISREG(st.st_mode)) {  // redirected from a file: its size is known
    f.size_ = static_cast<uint64_t>(st.st_size);
    if (f.size_ > max_bytes) {
      return TooLarge("(standard input)", f.size_, max_bytes, what, /*grew=*/false);
    }
  }
  return f;
}

InputFile::InputFile(InputFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      size_(other.size_),
      max_bytes_(other.max_bytes_),
      path_(std::move(other.path_)),
      what_(std::move(other.what_)) {}

InputFile& InputFile::operator=(InputFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
    max_bytes_ = other.max_bytes_;
    path_ = std::move(other.path_);
    what_ = std::move(other.what_);
  }
  return *this;
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

int InputFile::Release() { return std::exchange(fd_, -1); }

absl::StatusOr<std::string> InputFile::ReadAll() {
  std::string out;
  out.reserve(size_);
  // Reads in chunks and stops one byte past the cap: the size at open time is only a hint.
  constexpr size_t kChunk = size_t{1} << 20;
  for (;;) {
    const uint64_t left = max_bytes_ - out.size();  // out.size() <= max_bytes_ here
    const size_t want = left >= kChunk ? kChunk : static_cast<size_t>(left) + 1;
    const size_t old = out.size();
    out.resize(old + want);
    ssize_t n = ::read(fd_, out.data() + old, want);
    if (n < 0) {
      out.resize(old);
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {  // a non-blocking pipe (stdin): wait
        struct pollfd p = {fd_, POLLIN, 0};
        ::poll(&p, 1, -1);
        continue;
      }
      return absl::DataLossError(
          absl::StrCat("cannot read ", what_, " ", path_, ": ", std::strerror(errno)));
    }
    out.resize(old + static_cast<size_t>(n));
    if (n == 0) break;
    if (out.size() > max_bytes_) {
      return TooLarge(path_, out.size(), max_bytes_, what_, /*grew=*/true);
    }
  }
  return out;
}

absl::StatusOr<std::string> ReadInputFile(const std::string& path, uint64_t max_bytes,
                                          absl::string_view what) {
  absl::StatusOr<InputFile> f =
      path == "-" ? InputFile::Stdin(max_bytes, what) : InputFile::Open(path, max_bytes, what);
  if (!f.ok()) return f.status();
  return f->ReadAll();
}

absl::Status WriteOutputFile(const std::string& path, absl::string_view contents,
                             absl::string_view what) {
  const bool to_stdout = path == "-";
  auto fail = [&](int err) {
    absl::StatusCode code = absl::StatusCode::kInternal;
    std::string why = std::strerror(err);
    switch (err) {
      case ENOENT:
      case ENOTDIR:
        code = absl::StatusCode::kNotFound;
        why = "its directory does not exist";
        break;
      case EACCES:
      case EPERM:
      case EROFS:
        code = absl::StatusCode::kPermissionDenied;
        break;
      case EISDIR:
        code = absl::StatusCode::kInvalidArgument;
        why = "it is a directory";
        break;
      case ENOSPC:
      case EDQUOT:
      case EFBIG:
        code = absl::StatusCode::kResourceExhausted;
        break;
    }
    return absl::Status(code, absl::StrCat("cannot write ", what, " ",
                                           to_stdout ? "to standard output" : path, ": ", why));
  };
  // 0, or the errno of the write that failed.
  auto write_all = [&](int fd) {
    size_t done = 0;
    while (done < contents.size()) {
      const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return n < 0 ? errno : EIO;
      done += static_cast<size_t>(n);
    }
    return 0;
  };
  if (to_stdout) {
    // After whatever stdio buffered for standard output, so the two come out in order.
    if (std::fflush(stdout) != 0) return fail(errno);
    if (const int err = write_all(STDOUT_FILENO); err != 0) return fail(err);
    return absl::OkStatus();
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fail(errno);
  if (const int err = write_all(fd); err != 0) {
    ::close(fd);
    return fail(err);
  }
  if (::close(fd) != 0 && errno != EINTR) return fail(errno);  // e.g. a full NFS disk
  return absl::OkStatus();
}

uint64_t PhysicalMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
}

}  // namespace vgpu
