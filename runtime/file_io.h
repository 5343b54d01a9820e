// One way to read a file a user names (a trace, a memory history, an IDX data set), and one
// to write one (WriteOutputFile, below). Reading: only
// regular files are read, never a directory, FIFO, socket or device (so /dev/zero is not read
// forever and a FIFO without a writer never blocks), except standard input when the user names
// it ("-"), and never more than a cap the caller
// picks for that kind of file, checked before reading and again while reading (files grow).
// Errors name the file: NotFound (missing), PermissionDenied (unreadable), InvalidArgument
// (not a regular file), ResourceExhausted (over the cap).
//
// Thread safety: free functions without shared state; InputFile is a move-only owner of one
// descriptor, used from one thread at a time.
#ifndef VGPU_RUNTIME_FILE_IO_H_
#define VGPU_RUNTIME_FILE_IO_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vgpu {

// An open regular file, checked against a size cap. `what` names the kind of file in errors
// ("trace file", "memory history").
class InputFile {
 public:
  static absl::StatusOr<InputFile> Open(const std::string& path, uint64_t max_bytes,
                                        absl::string_view what);
  // Standard input (a pipe or a redirected file: `... | vgpu-bench replay -`), read to its end
  // within the same cap; a terminal or a device (/dev/zero, /dev/null) is refused
  // (InvalidArgument) rather than waited on or read forever. Its own descriptor (a dup):
  // closing it leaves stdin open.
  static absl::StatusOr<InputFile> Stdin(uint64_t max_bytes, absl::string_view what);
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&& other) noexcept;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }  // at open time
  // Gives up ownership of the descriptor (e.g. to gzdopen, which closes it).
  int Release();
  // Reads the whole file; ResourceExhausted if it grew past the cap since it was opened.
  absl::StatusOr<std::string> ReadAll();

 private:
  InputFile(int fd, uint64_t size, uint64_t max_bytes, std::string path, std::string what)
      : fd_(fd),
        size_(size),
        max_bytes_(max_bytes),
        path_(std::move(path)),
        what_(std::move(what)) {}
  int fd_ = -1;
  uint64_t size_ = 0;
  uint64_t max_bytes_ = 0;
  std::string path_;
  std::string what_;
};

// InputFile::Open + ReadAll; the path "-" is standard input (InputFile::Stdin).
absl::StatusOr<std::string> ReadInputFile(const std::string& path, uint64_t max_bytes,
                                          absl::string_view what);

// Writes `contents` to `path` (created 0644 or truncated): a file the user names for output (a
// converted trace, a memory history, an SVG). The path "-" is standard output (after anything
// stdio buffered for it). Errors name the file and the reason: NotFound
// (its directory is missing), PermissionDenied, InvalidArgument (a directory),
// ResourceExhausted (the disk is full), Internal otherwise.
absl::Status WriteOutputFile(const std::string& path, absl::string_view contents,
                             absl::string_view what);

// Physical memory of this machine in bytes (sysconf); 0 when unknown. Caps on what an input
// may make us allocate follow it.
uint64_t PhysicalMemoryBytes();

}  // namespace vgpu

#endif  // VGPU_RUNTIME_FILE_IO_H_
