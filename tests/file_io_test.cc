// runtime/file_io.h: only regular files under their cap are read; everything else fails
// promptly with a message naming the file (issue 12: /dev/zero read forever, a FIFO blocked).
#include "vgpu/runtime/file_io.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/status_matchers.h"
#include "vgpu/tests/scoped_temp_dir.h"

namespace vgpu {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::ScopedTempDir;
using ::vgpu::testing::StatusIs;

void Write(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

TEST(FileIoTest, ReadsRegularAndEmptyFiles) {
  const ScopedTempDir tmp("vgpu_file_io_test");
  const std::string& dir = tmp.path();
  Write(dir + "/a", "a 1 8\nf 1\n");
  absl::StatusOr<std::string> a = ReadInputFile(dir + "/a", 1024, "trace file");
  ASSERT_THAT(a.status(), IsOk());
  EXPECT_EQ(*a, "a 1 8\nf 1\n");
  Write(dir + "/empty", "");
  absl::StatusOr<std::string> e = ReadInputFile(dir + "/empty", 1024, "trace file");
  ASSERT_THAT(e.status(), IsOk());
  EXPECT_EQ(*e, "");
  // Exactly at the cap is fine; one byte over is not.
  Write(dir + "/ten", "0123456789");
  EXPECT_THAT(ReadInputFile(dir + "/ten", 10, "trace file").status(), IsOk());
  EXPECT_THAT(ReadInputFile(dir + "/ten", 9, "trace file").status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr(dir + "/ten"), HasSubstr("10 bytes"),
                             HasSubstr("above the cap of 9 B"))));
  // A huge cap does not wrap around.
  EXPECT_THAT(ReadInputFile(dir + "/ten", UINT64_MAX, "trace file").status(), IsOk());
}

TEST(FileIoTest, MissingAndUnreadable) {
  const ScopedTempDir tmp("vgpu_file_io_test");
  const std::string& dir = tmp.path();
  EXPECT_THAT(ReadInputFile(dir + "/missing", 1024, "trace file").status(),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("cannot open trace file " + dir + "/missing: no such file")));
  // Through a regular file used as a directory (works as root too).
  Write(dir + "/file", "x");
  EXPECT_THAT(ReadInputFile(dir + "/file/child", 1024, "trace file").status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(dir + "/file/child")));
  Write(dir + "/secret", "x");
  ASSERT_EQ(::chmod((dir + "/secret").c_str(), 0), 0);
  absl::Status s = ReadInputFile(dir + "/secret", 1024, "trace file").status();
  if (::geteuid() == 0) {
    // Root reads mode-0 files; the permission case is then checked only where it can fail.
    EXPECT_THAT(s, IsOk());
  } else {
    EXPECT_THAT(
        s, StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("cannot open trace file " + dir +
                                                                   "/secret: permission "
                                                                   "denied")));
  }
}

TEST(FileIoTest, DirectoryIsNotATraceFile) {
  const ScopedTempDir tmp("vgpu_file_io_test");
  const std::string& dir = tmp.path();
  EXPECT_THAT(ReadInputFile(dir, 1024, "trace file").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(dir + " is a directory, not a trace file")));
}

TEST(FileIoTest, DevZeroIsRefusedNotReadForever) {
  EXPECT_THAT(ReadInputFile("/dev/zero", uint64_t{1} << 40, "memory history").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("/dev/zero is not a regular file"),
                             HasSubstr("a character device"))));
}

TEST(FileIoTest, FifoWithoutWriterReturnsPromptly) {
  const ScopedTempDir tmp("vgpu_file_io_test");
  const std::string& dir = tmp.path();
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THAT(ReadInputFile(fifo, 1024, "trace file").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(fifo + " is not a regular file"), HasSubstr("FIFO"))));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(FileIoTest, SocketIsRefused) {
  const ScopedTempDir tmp("vgpu_file_io_test");
  const std::string& dir = tmp.path();
  const std::string path = dir + "/sock";
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof(addr.sun_path));
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_THAT(ReadInputFile(path, 1024, "trace file").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a socket")));
  ::close(fd);
}

// "-" is standard input, read to its end within the cap: a pipe (written while it is read),
// and a redirected file.
TEST(FileIoTest, StandardInputIsReadWhenNamed) {
  // The test's own stdin is put back at the end (closed, if it was).
  const int saved = ::dup(STDIN_FILENO);
  auto restore = [saved] {
    if (saved >= 0) {
      ::dup2(saved, STDIN_FILENO);
    } else {
      ::close(STDIN_FILENO);
    }
  };
  // The writer's write after the reader stopped at the cap fails with EPIPE, not a signal.
  struct sigaction ignore = {}, old_pipe = {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGPIPE, &ignore, &old_pipe), 0);
  auto read_piped = [&](const std::string& data, uint64_t cap) {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    if (fds[0] != STDIN_FILENO) {  // (it is when the test runs with stdin closed)
      EXPECT_EQ(::dup2(fds[0], STDIN_FILENO), STDIN_FILENO);
      ::close(fds[0]);
    }
    std::thread writer([&, w = fds[1]] {  // more than a pipe holds: written as it is read
      size_t done = 0;
      while (done < data.size()) {
        const ssize_t n = ::write(w, data.data() + done, data.size() - done);
        if (n <= 0) break;
        done += static_cast<size_t>(n);
      }
      ::close(w);
    });
    absl::StatusOr<std::string> got = ReadInputFile("-", cap, "trace file");
    ::close(STDIN_FILENO);  // the writer sees EPIPE if the read stopped early
    writer.join();
    restore();
    return got;
  };
  std::string big;
  for (int i = 0; i < 40000; ++i)
    big += "a " + std::to_string(i) + " 8\nf " + std::to_string(i) + "\n";
  ASSERT_GT(big.size(), 256u << 10);
  absl::StatusOr<std::string> got = read_piped(big, 16 << 20);
  ASSERT_THAT(got, IsOk());
  EXPECT_TRUE(*got == big);
  EXPECT_THAT(read_piped(big, 1000).status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("trace file (standard input) grew past"),
                             HasSubstr("above the cap of 1000 B"))));
  // Redirected from a file (`< x.trace`): its size is checked before reading.
  const ScopedTempDir tmp("vgpu_file_io_stdin");
  Write(tmp.path() + "/x", "a 1 8\nf 1\n");
  const int f = ::open((tmp.path() + "/x").c_str(), O_RDONLY);
  ASSERT_GE(f, 0);
  if (f != STDIN_FILENO) {
    ASSERT_EQ(::dup2(f, STDIN_FILENO), STDIN_FILENO);
    ::close(f);
  }
  EXPECT_THAT(ReadInputFile("-", 1024, "trace file"), IsOk());
  ASSERT_EQ(::lseek(STDIN_FILENO, 0, SEEK_SET), 0);
  EXPECT_THAT(ReadInputFile("-", 5, "trace file").status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("trace file (standard input) is 10 B")));
  restore();
  if (saved >= 0) ::close(saved);
  ::sigaction(SIGPIPE, &old_pipe, nullptr);
}

TEST(FileIoTest, OpenReportsSizeAndReleases) {
  const ScopedTempDir tmp("vgpu_file_io_test");
  const std::string& dir = tmp.path();
  Write(dir + "/f", "hello");
  absl::StatusOr<InputFile> f = InputFile::Open(dir + "/f", 100, "data file");
  ASSERT_THAT(f.status(), IsOk());
  EXPECT_EQ(f->size(), 5u);
  int fd = f->Release();
  EXPECT_GE(fd, 0);
  EXPECT_EQ(f->fd(), -1);
  ::close(fd);
}

TEST(FileIoTest, WritesOutputFilesAndNamesWhyNot) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/file_io_test_out.txt";
  ASSERT_THAT(WriteOutputFile(path, "first, longer\n", "trace file"), IsOk());
  ASSERT_THAT(WriteOutputFile(path, "second\n", "trace file"), IsOk());  // truncated
  absl::StatusOr<std::string> back = ReadInputFile(path, 1 << 20, "trace file");
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(*back, "second\n");
  ASSERT_THAT(WriteOutputFile(path, "", "trace file"), IsOk());
  EXPECT_EQ(*ReadInputFile(path, 1 << 20, "trace file"), "");
  std::remove(path.c_str());
  EXPECT_THAT(WriteOutputFile(dir + "/no_such_dir/x.trace", "x", "trace file"),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("cannot write trace file " + dir +
                                 "/no_such_dir/x.trace: its directory does not exist")));
  EXPECT_THAT(WriteOutputFile(dir, "x", "SVG file"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("it is a directory")));
  if (::geteuid() != 0) {  // root writes anywhere
    EXPECT_THAT(WriteOutputFile("/proc/version", "x", "memory history"),
                StatusIs(absl::StatusCode::kPermissionDenied,
                         HasSubstr("cannot write memory history /proc/version")));
  }
}

// "-" is standard output (vgpu-info timeline --svg -), after what stdio buffered for it; a
// failed write says "to standard output" (here a full disk: /dev/full).
TEST(FileIoTest, DashWritesStandardOutput) {
  ::testing::internal::CaptureStdout();
  std::printf("before ");
  absl::Status written = WriteOutputFile("-", "<svg/>\n", "SVG file");
  const std::string out = ::testing::internal::GetCapturedStdout();
  ASSERT_THAT(written, IsOk());
  EXPECT_EQ(out, "before <svg/>\n");
  EXPECT_NE(::access("-", F_OK), 0) << "a file named - was created";
  const int full = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
  if (full < 0) GTEST_SKIP() << "no /dev/full";
  std::fflush(stdout);
  const int saved = ::dup(STDOUT_FILENO);
  ASSERT_GE(saved, 0);
  ASSERT_EQ(::dup2(full, STDOUT_FILENO), STDOUT_FILENO);
  absl::Status s = WriteOutputFile("-", "x", "SVG file");
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
  ::close(full);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kResourceExhausted,
                          HasSubstr("cannot write SVG file to standard output")));
}

TEST(FileIoTest, PhysicalMemoryIsKnown) { EXPECT_GT(PhysicalMemoryBytes(), uint64_t{1} << 20); }

}  // namespace
}  // namespace vgpu
