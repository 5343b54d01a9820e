// Trace parsing (with errors naming the line), recording from an allocator, and replay.
#include "vgpu/allocator/trace.h"

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/allocator/bfc_allocator.h"
#include "vgpu/allocator/sub_allocators.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;

std::unique_ptr<BFCAllocator> Fake(uint64_t limit) {
  return std::make_unique<BFCAllocator>(
      std::make_unique<FakeSubAllocator>(),
      BFCOptions{.name = "replay", .memory_limit = limit, .allow_growth = false});
}

TEST(TraceTest, ParsesEventsSlotsAndPeak) {
  auto t = ParseTrace("# demo\n# peak_live_bytes 300\na 7 100\na 9 200\nf 7\n\na 7 50\nf 9\nf 7\n");
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->name, "demo");
  EXPECT_EQ(t->header_peak_live_bytes, 300u);
  EXPECT_EQ(t->peak_live_bytes, 300u);
  EXPECT_EQ(t->allocations, 3u);
  EXPECT_EQ(t->max_live_blocks, 2u);
  ASSERT_EQ(t->events.size(), 6u);
  EXPECT_TRUE(t->events[0].alloc);
  EXPECT_EQ(t->events[1].bytes, 200u);
  EXPECT_FALSE(t->events[2].alloc);
  EXPECT_EQ(t->events[3].slot, t->events[0].slot);  // slot of block 7 reused
  EXPECT_EQ(t->unfreed_blocks, 0u);
}

TEST(TraceTest, ErrorsNameTheLine) {
  struct Case {
    const char* text;
    const char* message;
  } cases[] = {
      {"a 1 10\nx 1\n", "t.trace:2: unknown event \"x\""},
      {"a 1\n", "t.trace:1: expected \"a <id> <bytes> [<stream>]\""},
      {"a 1 10 5 6\n", "t.trace:1: expected \"a <id> <bytes> [<stream>]\""},
      {"a 1 10 s\n", "t.trace:1: bad stream \"s\" (an integer 0..1023)"},
      {"a 1 10 1024\n", "t.trace:1: bad stream \"1024\""},
      {"a 1 10\nf 1 0 0\n", "t.trace:2: expected \"f <id> [<stream>]\""},
      {"a one 10\n", "t.trace:1: bad block id \"one\""},
      {"a 1 -5\n", "t.trace:1: bad byte count \"-5\""},
      {"a 1 10\na 1 20\n",
       "t.trace:2: block 1 is allocated again while live (allocated on line 1)"},
      {"a 1 10\nf 2\n", "t.trace:2: free of block 2, which is not live"},
      {"a 1 10\nf 1\nf 1\n", "t.trace:3: free of block 1"},
      {"f\n", "t.trace:1: expected \"f <id> [<stream>]\""},
      {"# x\n# peak_live_bytes lots\n", "t.trace:2: bad peak_live_bytes"},
      {"# only comments\n", "t.trace: the trace has no events"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ParseTrace(c.text, "t.trace").status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message)))
        << c.text;
  }
  EXPECT_THAT(ReadTraceFile("/nonexistent/x.trace").status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/x.trace")));
}

TEST(TraceTest, ReplayCountsFailuresAndFreesLeftovers) {
  auto t = ParseTrace("a 1 1048576\na 2 1048576\na 3 1048576\nf 1\na 4 512\n");
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->unfreed_blocks, 3u);
  auto a = Fake(2 << 20);
  auto r = ReplayTrace(*t, *a, /*stop_at_failure=*/false);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->events, 5u);
  EXPECT_EQ(r->failures, 1u);
  EXPECT_EQ(r->first_failure, 2u);
  EXPECT_THAT(r->first_error, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(a->Stats().bytes_in_use, 0u);  // leftovers freed
  auto stop = ReplayTrace(*t, *a, /*stop_at_failure=*/true);
  ASSERT_THAT(stop, IsOk());
  EXPECT_EQ(stop->events, 3u);
  EXPECT_THAT(a->CheckInvariants(), IsOk());
}

TEST(TraceTest, ReplayKeepsTheMemoryLogAtTheFirstFailure) {
  // Two 1 MiB blocks live in 2 MiB: the third fails, and the log shows the two in use.
  auto t = ParseTrace("a 1 1048576\na 2 1048576\na 3 1048576\nf 1\na 4 1048576\n");
  ASSERT_THAT(t, IsOk());
  auto a = Fake(2 << 20);
  auto r = ReplayTrace(*t, *a, /*stop_at_failure=*/false, {}, /*log_first_failure=*/true);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->failures, 1u);
  // Taken right after the failure (two blocks in use), not after block 4 or the cleanup.
  EXPECT_THAT(r->first_failure_log, AllOf(HasSubstr("BFC allocator replay"),
                                          HasSubstr("in use 2 MiB"), HasSubstr("OOMs 1")));
  EXPECT_THAT(r->first_failure_log, ::testing::Not(HasSubstr("OOMs 2")));
  // Not asked for, or nothing failed: no log.
  auto quiet = ReplayTrace(*t, *a, /*stop_at_failure=*/false);
  ASSERT_THAT(quiet, IsOk());
  EXPECT_EQ(quiet->failures, 1u);
  EXPECT_EQ(quiet->first_failure_log, "");
  auto roomy = Fake(8 << 20);
  auto fits = ReplayTrace(*t, *roomy, /*stop_at_failure=*/false, {}, /*log_first_failure=*/true);
  ASSERT_THAT(fits, IsOk());
  EXPECT_EQ(fits->failures, 0u);
  EXPECT_EQ(fits->first_failure_log, "");
}

TEST(TraceTest, RecorderWritesAReplayableTrace) {
  auto a = Fake(64 << 20);
  TraceRecorder rec("unit");
  a->AddObserver(&rec);
  void* x = *a->AllocateRaw(1000);
  void* y = *a->AllocateRaw(5000);
  ASSERT_THAT(a->Deallocate(x), IsOk());
  void* z = *a->AllocateRaw(300);
  ASSERT_THAT(a->Deallocate(y), IsOk());
  ASSERT_THAT(a->Deallocate(z), IsOk());
  a->RemoveObserver(&rec);
  EXPECT_EQ(rec.Text(),
            "# unit\n# peak_live_bytes 6000\na 0 1000\na 1 5000\nf 0\na 2 300\nf 1\nf 2\n");
  std::string path = ::testing::TempDir() + "/recorded.trace";
  ASSERT_THAT(rec.WriteFile(path), IsOk());
  auto t = ReadTraceFile(path);
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->name, "unit");
  EXPECT_EQ(t->peak_live_bytes, 6000u);
  auto r = ReplayTrace(*t, *a, true);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->failures, 0u);
}

// The traces shipped in tools/traces parse.
TEST(TraceTest, ShippedTracesParse) {
  const char* src = std::getenv("VGPU_TEST_SRCDIR");
  if (src == nullptr) GTEST_SKIP() << "VGPU_TEST_SRCDIR is not set";
  std::string path = std::string(src) + "/tools/traces/transformer_train.trace";
  auto t = ReadTraceFile(path);
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->peak_live_bytes, t->header_peak_live_bytes);
  EXPECT_EQ(t->unfreed_blocks, 0u);
}

// Issue 12: byte counts whose running total reaches 2^63 or wraps 2^64 are refused at read
// time with the line, so no later sum (peak, replay limits) overflows.
TEST(TraceTest, LiveTotalNeverOverflows) {
  EXPECT_THAT(ParseTrace("a 1 9223372036854775808\n", "t.trace").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("t.trace:1: allocating 9223372036854775808 bytes"),
                             HasSubstr("passes the 64 PiB a trace may hold live"))));
  EXPECT_THAT(ParseTrace("a 1 72057594037927936\na 2 18446744073709551615\n", "t.trace").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("t.trace:2: allocating")));
  EXPECT_THAT(ParseTrace("a 1 -5\n", "t.trace").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad byte count \"-5\"")));
  auto at_cap = ParseTrace("a 1 72057594037927936\nf 1\na 2 72057594037927936\n");
  ASSERT_THAT(at_cap, IsOk());
  EXPECT_EQ(at_cap->peak_live_bytes, kMaxTraceLiveBytes);
}

// A UTF-8 byte order mark and CRLF line ends are not part of the events.
TEST(TraceTest, BomAndCrlf) {
  auto t = ParseTrace("\xEF\xBB\xBF# bom\r\na 1 8\r\nf 1\r\n");
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->name, "bom");
  EXPECT_EQ(t->events.size(), 2u);
}

// A directory or device as a trace says so (it said "the trace has no events" or read forever).
TEST(TraceTest, OnlyRegularFilesAreTraces) {
  const std::string dir = ::testing::TempDir();
  EXPECT_THAT(ReadTraceFile(dir).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is a directory, not a "
                                                                     "trace file")));
  EXPECT_THAT(ReadTraceFile("/dev/zero").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("/dev/zero is not a regular file (it is a character device)")));
  EXPECT_LE(MaxTraceFileBytes(), uint64_t{1} << 30);
  EXPECT_GT(MaxTraceFileBytes(), uint64_t{1} << 20);
}

// The optional stream column: old traces read as stream 0; FormatTrace writes the column only
// when there are several streams, and reads back the same events.
TEST(TraceTest, StreamColumn) {
  auto one = ParseTrace("a 1 10\nf 1\n");
  ASSERT_THAT(one, IsOk());
  EXPECT_EQ(one->num_streams, 1u);
  EXPECT_EQ(one->events[0].stream, 0u);
  EXPECT_EQ(FormatTrace(*one), "# trace\n# peak_live_bytes 10\na 1 10\nf 1\n");
  auto two = ParseTrace("# s\na 1 10 3\na 2 20\nf 1 0\nf 2 3\n");
  ASSERT_THAT(two, IsOk());
  EXPECT_EQ(two->num_streams, 4u);
  EXPECT_EQ(two->events[0].stream, 3u);
  EXPECT_EQ(two->events[1].stream, 0u);
  EXPECT_EQ(two->events[3].stream, 3u);
  const std::string text = FormatTrace(*two);
  EXPECT_EQ(text, "# s\n# peak_live_bytes 30\na 1 10 3\na 2 20 0\nf 1 0\nf 2 3\n");
  auto back = ParseTrace(text);
  ASSERT_THAT(back, IsOk());
  ASSERT_EQ(back->events.size(), two->events.size());
  for (size_t i = 0; i < back->events.size(); ++i) {
    EXPECT_EQ(back->events[i].stream, two->events[i].stream);
    EXPECT_EQ(back->events[i].bytes, two->events[i].bytes);
  }
}

// ReplayTrace takes one Stream per trace stream (checked; the allocator API takes none yet).
TEST(TraceTest, ReplayChecksTheStreamsGiven) {
  auto t = ParseTrace("a 1 10 1\nf 1 1\n");
  ASSERT_THAT(t, IsOk());
  auto a = Fake(1 << 20);
  EXPECT_THAT(ReplayTrace(*t, *a, false), IsOk());
  Stream* one[1] = {nullptr};
  EXPECT_THAT(
      ReplayTrace(*t, *a, false, one).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("uses 2 streams but 1 were given")));
  Stream* two[2] = {nullptr, nullptr};
  auto r = ReplayTrace(*t, *a, false, two);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->events, 2u);
  EXPECT_EQ(r->failures, 0u);
}

}  // namespace
}  // namespace vgpu
