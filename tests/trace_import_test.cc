// Importing users' allocator logs (allocator/trace_import.h): PyTorch snapshots and RMM logs
// generated from vgpu traces by scripts/make-import-samples (tests/data/) replay with the same
// peak live bytes, events and streams as their source; reused addresses are new blocks; bad
// input is InvalidArgument naming the line, the entry or the byte offset.
#include "vgpu/allocator/trace_import.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/allocator/trace.h"
#include "vgpu/runtime/pickle_reader.h"
#include "vgpu/runtime/status_matchers.h"
#include "vgpu/tests/gzip_testutil.h"
#include "vgpu/tests/zip_testutil.h"

namespace vgpu {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::vgpu::testing::Gzip;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::StatusIs;
using ::vgpu::testing::TorchSave;
using ::vgpu::testing::Zip;

std::string Src(const std::string& rel) {
  const char* src = std::getenv("VGPU_TEST_SRCDIR");
  return std::string(src == nullptr ? "." : src) + "/" + rel;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The same workload: sizes, order, streams (ids may differ).
void ExpectSameWorkload(const Trace& got, const Trace& want) {
  EXPECT_EQ(got.peak_live_bytes, want.peak_live_bytes);
  EXPECT_EQ(got.allocations, want.allocations);
  EXPECT_EQ(got.num_streams, want.num_streams);
  ASSERT_EQ(got.events.size(), want.events.size());
  for (size_t i = 0; i < got.events.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(got.events[i].alloc, want.events[i].alloc);
    EXPECT_EQ(got.events[i].bytes, want.events[i].bytes);
    EXPECT_EQ(got.events[i].stream, want.events[i].stream);
  }
}

class TraceImportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::getenv("VGPU_TEST_SRCDIR") == nullptr) GTEST_SKIP() << "VGPU_TEST_SRCDIR is not set";
  }
};

TEST_F(TraceImportTest, DetectsFormatByContent) {
  EXPECT_EQ(DetectTraceFormat(std::string("\x80\x04N.", 4)), TraceFormat::kTorchSnapshot);
  EXPECT_EQ(DetectTraceFormat("(dp0\n."), TraceFormat::kTorchSnapshot);  // protocol 0
  EXPECT_EQ(DetectTraceFormat("}q\x00."), TraceFormat::kTorchSnapshot);  // protocol 1
  EXPECT_EQ(DetectTraceFormat("Thread,Time,Action,Pointer,Size,Stream\n"), TraceFormat::kRmmLog);
  EXPECT_EQ(DetectTraceFormat("\xEF\xBB\xBFThread,Time,Action,Pointer,Size,Stream\r\n"),
            TraceFormat::kRmmLog);
  EXPECT_EQ(DetectTraceFormat("# x\na 1 2\n"), TraceFormat::kVgpu);
  EXPECT_EQ(
      DetectTraceFormat("I1130 start\nI1130 x] __LOG_MEMORY__ MemoryLogStep { step_id: 1 }\n"),
      TraceFormat::kTfMemoryLog);
  // The extension does not matter: a snapshot named .trace is still a snapshot.
  auto t = ParseAnyTrace(Slurp(Src("tests/data/mlp_mirrored.snapshot.pickle")), "x.trace");
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->format, "pytorch-snapshot");
}

TEST_F(TraceImportTest, TorchSnapshotReplaysLikeItsSource) {
  auto source = ReadTraceFile(Src("tools/traces/mlp_mirrored.trace"));
  ASSERT_THAT(source, IsOk());
  for (const char* file :
       {"tests/data/mlp_mirrored.snapshot.pickle", "tests/data/mlp_mirrored.p2.snapshot.pickle",
        "tests/data/mlp_mirrored.p1.snapshot.pickle",
        "tests/data/mlp_mirrored.p0.snapshot.pickle"}) {
    SCOPED_TRACE(file);
    auto t = ReadAnyTraceFile(Src(file));
    ASSERT_THAT(t, IsOk());
    EXPECT_EQ(t->format, "pytorch-snapshot");
    EXPECT_THAT(t->name, HasSubstr("snapshot")) << "named after the file";
    ExpectSameWorkload(*t, *source);
    // The model allocator of make-import-samples reserved whole 512-byte-rounded blocks, each
    // reused only by its own size: a little above peak live.
    EXPECT_EQ(t->original_peak_reserved_bytes, 6188032u);
    EXPECT_GE(t->original_peak_reserved_bytes, t->peak_live_bytes);
    EXPECT_THAT(t->import_note, HasSubstr("device 0 of 1 (the most events), 1 stream(s)"));
  }
}

TEST_F(TraceImportTest, TorchSnapshotTwoStreamsOnTheBusierDevice) {
  auto source = ReadTraceFile(Src("tests/data/mlp_two_streams.trace"));
  ASSERT_THAT(source, IsOk());
  EXPECT_EQ(source->num_streams, 2u);
  auto t = ReadAnyTraceFile(Src("tests/data/mlp_two_streams.snapshot.pickle"));
  ASSERT_THAT(t, IsOk());
  ExpectSameWorkload(*t, *source);
  EXPECT_THAT(t->import_note, HasSubstr("device 1 of 2 (the most events), 2 stream(s)"));
  EXPECT_THAT(t->import_note, HasSubstr("28 free_requested skipped"));
  // --device 0: the other device's one allocation.
  auto d0 = ReadAnyTraceFile(Src("tests/data/mlp_two_streams.snapshot.pickle"), {.device = 0});
  ASSERT_THAT(d0, IsOk());
  EXPECT_EQ(d0->events.size(), 1u);
  EXPECT_EQ(d0->peak_live_bytes, 4096u);
  EXPECT_THAT(d0->import_note, HasSubstr("device 0 of 2 (--device)"));
  EXPECT_THAT(
      ReadAnyTraceFile(Src("tests/data/mlp_two_streams.snapshot.pickle"), {.device = 5}).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("device_traces: has devices 0..1; there is no device 5")));
}

// A history whose start was lost (the ring buffer of max_entries): blocks freed in it without
// an alloc, and blocks live in "segments" without one, are allocated first.
TEST_F(TraceImportTest, TorchSnapshotBlocksLiveAtTheStart) {
  auto source = ReadTraceFile(Src("tests/data/mlp_truncated.trace"));
  ASSERT_THAT(source, IsOk());
  auto t = ReadAnyTraceFile(Src("tests/data/mlp_truncated.snapshot.pickle"));
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->peak_live_bytes, source->peak_live_bytes);
  EXPECT_EQ(t->allocations, source->allocations);
  EXPECT_EQ(t->events.size(), source->events.size());
  EXPECT_EQ(t->unfreed_blocks, 2u);
  EXPECT_THAT(t->import_note, HasSubstr("3 block(s) live at the start"));
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(t->events[i].alloc) << i;
}

// A history too long for the machine is refused saying how to record a shorter one.
TEST_F(TraceImportTest, TorchSnapshotTooLongSaysHowToRecordLess) {
  const std::string snap = Slurp(Src("tests/data/torch/two_streams.pickle"));
  ASSERT_THAT(ParseTorchSnapshot(snap, "snap.pickle"), IsOk());
  EXPECT_THAT(ParseTorchSnapshot(snap, "snap.pickle", {.max_snapshot_values = 100}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("snap.pickle: pickle at offset "),
                             HasSubstr("more than 100 values (the most one snapshot may hold here"),
                             HasSubstr("_record_memory_history(max_entries=N)"))));
}

TEST_F(TraceImportTest, TorchSnapshotReusedAddressIsANewBlock) {
  auto t = ReadAnyTraceFile(Src("tests/data/snapshots/reuse.pickle"));
  ASSERT_THAT(t, IsOk());
  // alloc 16 (100 B), free 16, alloc 16 (50 B, another stream), alloc 999, free 16.
  ASSERT_EQ(t->events.size(), 5u);
  EXPECT_EQ(t->allocations, 3u);
  EXPECT_NE(t->events[0].id, t->events[2].id);
  EXPECT_EQ(t->events[2].bytes, 50u);
  EXPECT_EQ(t->events[2].stream, 1u);  // stream 7 is the second stream seen
  EXPECT_EQ(t->events[4].id, t->events[2].id);
  EXPECT_EQ(t->num_streams, 2u);
  EXPECT_EQ(t->peak_live_bytes, 100u);
  EXPECT_EQ(t->unfreed_blocks, 1u);
  // The shipped sample reuses addresses too.
  auto doc = ParsePickle(Slurp(Src("tests/data/mlp_two_streams.snapshot.pickle")));
  ASSERT_THAT(doc, IsOk());
  absl::flat_hash_set<int64_t> seen;
  int reused = 0;
  for (const PickleValue* e : (*doc)->root().Get("device_traces")->items[1]->items) {
    if (e->Get("action")->s == "alloc" && !seen.insert(e->Get("addr")->i).second) ++reused;
  }
  EXPECT_GT(reused, 0);
}

// A history without free_completed (only the user's frees recorded): free_requested is the free.
// With free_completed present, free_requested is skipped (TorchSnapshotTwoStreams...).
TEST_F(TraceImportTest, TorchSnapshotWithoutFreeCompletedTakesFreeRequested) {
  auto t = ReadAnyTraceFile(Src("tests/data/snapshots/requested_only.pickle"));
  ASSERT_THAT(t, IsOk());
  // alloc 16 (100 B), alloc 32 (60 B), free 16, alloc 16 (40 B), free 32, free 16.
  ASSERT_EQ(t->events.size(), 6u);
  EXPECT_EQ(t->allocations, 3u);
  EXPECT_EQ(t->peak_live_bytes, 160u);
  EXPECT_EQ(t->unfreed_blocks, 0u);
  EXPECT_THAT(t->import_note,
              HasSubstr("free_requested taken as the free (the history has no free_completed)"));
}

// Entries without memory are skipped and counted: a user's labels (PyTorch 2.15 writes annotate,
// with keys such as user_metadata on every entry; PyTorch 2.4 user_defined), oom (device_free in
// place of addr) and snapshot.
TEST_F(TraceImportTest, TorchSnapshotSkipsAnnotations) {
  auto t = ReadAnyTraceFile(Src("tests/data/snapshots/annotated.pickle"));
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->events.size(), 2u);
  EXPECT_EQ(t->peak_live_bytes, 100u);
  EXPECT_THAT(t->import_note, HasSubstr("4 snapshot/oom/annotation entries skipped"));
}

// A log a project wrote itself and what it must import as: the counts, the peak live bytes
// (PyTorch's or RMM's own figure), the original reserved peak (0: the format has none).
struct RealLog {
  const char* file;
  uint64_t events, allocations, unfreed, streams, peak, reserved;
  const char* note;
};

void ExpectRealLogImports(const RealLog& c, const std::string& path, const std::string& format) {
  SCOPED_TRACE(c.file);
  auto t = ReadAnyTraceFile(Src(path));
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->format, format);
  EXPECT_EQ(t->events.size(), c.events);
  EXPECT_EQ(t->allocations, c.allocations);
  EXPECT_EQ(t->unfreed_blocks, c.unfreed);
  EXPECT_EQ(t->num_streams, c.streams);
  EXPECT_EQ(t->peak_live_bytes, c.peak);
  EXPECT_EQ(t->original_peak_reserved_bytes, c.reserved);
  EXPECT_THAT(t->import_note, HasSubstr(c.note));
  // Every free names a block allocated before it and not yet freed.
  absl::flat_hash_set<uint64_t> live;
  for (const TraceEvent& e : t->events) {
    if (e.alloc) {
      EXPECT_TRUE(live.insert(e.id).second) << e.id;
    } else {
      EXPECT_EQ(live.erase(e.id), 1u) << e.id;
    }
  }
  EXPECT_EQ(live.size(), c.unfreed);
}

// Snapshots PyTorch 2.11 itself wrote (tests/data/torch/README.md): the peak live bytes are
// exactly what PyTorch counted (memory_stats()["requested_bytes.all.peak"]: its trace entries
// carry requested sizes) and the reserved peak what it reserved ("reserved_bytes.all.peak"),
// whether the history kept Python frames, used expandable segments (segment_map/unmap), two
// streams with record_stream, or wrapped (max_entries) and lost its start.
TEST_F(TraceImportTest, TorchSnapshotsWrittenByPyTorch) {
  const RealLog cases[] = {
      {"train_frames", 3173, 1588, 3, 1, 341932712, 415236096, "1585 free_requested skipped"},
      {"expandable", 3173, 1588, 3, 1, 341932712, 392167424, "1585 free_requested skipped"},
      {"two_streams", 560, 280, 0, 2, 33816604, 58720256, "2 stream(s)"},
      {"ring", 2115, 1059, 3, 1, 341932712, 415236096, "223 block(s) live at the start"},
  };
  for (const RealLog& c : cases) {
    ExpectRealLogImports(c, std::string("tests/data/torch/") + c.file + ".pickle",
                         "pytorch-snapshot");
  }
}

// Files PyTorch itself wrote (tests/data/torch/README.md): torch.save of a real snapshot reads
// as the snapshot; the legacy torch.save format is refused with a remedy; a CPU profiler trace
// adds up to what PyTorch's own events do.
TEST_F(TraceImportTest, TorchFilesWrittenByPyTorch) {
  auto pickle = ReadAnyTraceFile(Src("tests/data/torch/two_streams.pickle"));
  ASSERT_THAT(pickle, IsOk());
  auto saved = ReadAnyTraceFile(Src("tests/data/torch/two_streams.pt"));
  ASSERT_THAT(saved, IsOk());
  ExpectSameWorkload(*saved, *pickle);
  EXPECT_EQ(saved->name, "two_streams");
  EXPECT_EQ(saved->original_peak_reserved_bytes, pickle->original_peak_reserved_bytes);
  EXPECT_THAT(saved->import_note, HasSubstr("zip: \"two_streams/data.pkl\" (torch.save)"));
  EXPECT_THAT(ReadAnyTraceFile(Src("tests/data/torch/two_streams_legacy.pt")).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("two_streams_legacy.pt: a torch.save file in the legacy format")));
  auto prof = ReadAnyTraceFile(Src("tests/data/torch/cpu_train.pt.trace.json.gz"));
  ASSERT_THAT(prof, IsOk());
  EXPECT_EQ(prof->format, "pytorch-profiler-trace");
  EXPECT_EQ(prof->name, "cpu_train");
  EXPECT_EQ(prof->allocations, 225u);
  EXPECT_EQ(prof->events.size(), 436u);
  EXPECT_EQ(prof->peak_live_bytes, 2787480u);
  EXPECT_THAT(prof->import_note, HasSubstr("PyTorch profiler trace: cpu, 225 allocations"));
}

TEST_F(TraceImportTest, TorchSnapshotBadInput) {
  struct Case {
    const char* file;
    const char* message;
  };
  const Case cases[] = {
      {"truncated.pickle", "truncated.pickle: pickle at offset"},
      {"wrong_type.pickle",
       "wrong_type.pickle: device_traces[0][0][\"addr\"]: is a str, expected a int"},
      {"unknown_action.pickle", "device_traces[0][1]: unknown action \"realloc\""},
      {"negative_size.pickle", "device_traces[0][0][\"size\"]: is negative (-4)"},
      {"alloc_twice.pickle", "device_traces[0][1]: alloc at 0x10, which is live"},
      {"free_twice.pickle", "device_traces[0][2]: free of 0x10, which is not live (freed twice)"},
      {"no_device_traces.pickle", "snapshot: no \"device_traces\": record the history first"},
      {"list_root.pickle", "snapshot: is a list, expected the dict _dump_snapshot writes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    EXPECT_THAT(ReadAnyTraceFile(Src(std::string("tests/data/snapshots/") + c.file)).status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message)));
  }
}

// Users compress their logs: each format, gzip-compressed, imports as the same workload (told
// apart by content, the .gz name only trimmed from the trace's name), and says so.
TEST_F(TraceImportTest, GzipCompressedLogsImportLikeTheirSource) {
  struct Case {
    const char* file;
    const char* format;
    const char* source;  // the vgpu trace the sample was made from
  };
  const Case cases[] = {
      {"tests/data/mlp_two_streams.snapshot.pickle", "pytorch-snapshot",
       "tests/data/mlp_two_streams.trace"},
      {"tests/data/mlp_two_streams.rmm.csv", "rmm-log", "tests/data/mlp_two_streams.trace"},
      {"tests/data/mlp_two_streams.trace", "vgpu", "tests/data/mlp_two_streams.trace"},
  };
  const std::string dir = ::testing::TempDir();
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    auto source = ReadTraceFile(Src(c.source));
    ASSERT_THAT(source, IsOk());
    const std::string plain = Slurp(Src(c.file));
    const std::string gz = Gzip(plain);
    ASSERT_LT(gz.size(), plain.size());
    auto t = ParseAnyTrace(gz, "log.gz");
    ASSERT_THAT(t, IsOk());
    EXPECT_EQ(t->format, c.format);
    ExpectSameWorkload(*t, *source);
    EXPECT_THAT(t->import_note,
                HasSubstr(absl::StrCat("gzip: ", gz.size(), " bytes inflated to ", plain.size())));
    // From a file: named, unless it names itself, after the file without .gz and the
    // format's extension.
    const std::string path = dir + "/gz_import_sample.trace.gz";
    {
      std::ofstream out(path, std::ios::binary);
      out << gz;
    }
    auto f = ReadAnyTraceFile(path);
    ASSERT_THAT(f, IsOk());
    // (vgpu's own format names itself in its first comment line.)
    EXPECT_EQ(f->name, f->format == "vgpu" ? source->name : "gz_import_sample");
    ExpectSameWorkload(*f, *source);
  }
}

TEST_F(TraceImportTest, GzipBadInput) {
  const std::string trace = "a 1 100\nf 1\n";
  const std::string gz = Gzip(trace);
  EXPECT_THAT(ParseAnyTrace(gz.substr(0, gz.size() - 3), "x.trace.gz").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("x.trace.gz: the gzip stream ends early")));
  EXPECT_THAT(ParseAnyTrace(Gzip(gz), "x.trace.gz.gz").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("x.trace.gz.gz: compressed twice (gzip inside gzip)")));
  // The inflated text is checked like any trace, errors naming the input.
  EXPECT_THAT(ParseAnyTrace(Gzip("a 1 100\nf 2\n"), "x.trace.gz").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("x.trace.gz:2: free of block 2, which is not live")));
}

// torch.save(torch.cuda.memory._snapshot(), f) writes a zip archive around the pickle: PyTorch's
// own snapshots, saved so (plain and gzipped), import as the pickle itself does.
TEST_F(TraceImportTest, TorchSaveArchiveImportsLikeItsPickle) {
  const std::string dir = ::testing::TempDir();
  for (const char* file :
       {"tests/data/torch/two_streams.pickle", "tests/data/torch/train_frames.pickle",
        "tests/data/mlp_two_streams.snapshot.pickle"}) {
    SCOPED_TRACE(file);
    const std::string pickle = Slurp(Src(file));
    auto want = ParseAnyTrace(pickle, "snap.pickle");
    ASSERT_THAT(want, IsOk());
    const std::string pt = TorchSave(pickle, "snap");
    auto t = ParseAnyTrace(pt, "snap.pt");
    ASSERT_THAT(t, IsOk());
    EXPECT_EQ(t->format, "pytorch-snapshot");
    ExpectSameWorkload(*t, *want);
    EXPECT_EQ(t->original_peak_reserved_bytes, want->original_peak_reserved_bytes);
    EXPECT_THAT(t->import_note,
                AllOf(HasSubstr(want->import_note),
                      HasSubstr(absl::StrCat("zip: \"snap/data.pkl\" (torch.save), ", pickle.size(),
                                             " bytes stored"))));
    auto gz = ParseAnyTrace(Gzip(pt), "snap.pt.gz");
    ASSERT_THAT(gz, IsOk());
    ExpectSameWorkload(*gz, *want);
    EXPECT_THAT(gz->import_note, AllOf(HasSubstr("(torch.save)"), HasSubstr("; gzip: ")));
    // From a file: named after it without .pt.
    const std::string path = dir + "/torch_save_sample.pt";
    {
      std::ofstream out(path, std::ios::binary);
      out << pt;
    }
    auto f = ReadAnyTraceFile(path);
    ASSERT_THAT(f, IsOk());
    EXPECT_EQ(f->name, "torch_save_sample");
    ExpectSameWorkload(*f, *want);
  }
}

// A log zipped to be sent (deflated, beside a folder entry) imports as the log itself.
TEST_F(TraceImportTest, ZippedLogImportsLikeItsSource) {
  auto source = ReadTraceFile(Src("tests/data/mlp_two_streams.trace"));
  ASSERT_THAT(source, IsOk());
  for (const char* file :
       {"tests/data/mlp_two_streams.rmm.csv", "tests/data/mlp_two_streams.snapshot.pickle",
        "tests/data/mlp_two_streams.trace"}) {
    SCOPED_TRACE(file);
    const std::string plain = Slurp(Src(file));
    const std::string zip = Zip({{"logs/", "", false}, {"logs/run1.log", plain, true}});
    auto t = ParseAnyTrace(zip, "logs.zip");
    ASSERT_THAT(t, IsOk());
    ExpectSameWorkload(*t, *source);
    EXPECT_THAT(t->import_note, HasSubstr(absl::StrCat("zip: \"logs/run1.log\", ", plain.size(),
                                                       " bytes deflated to ")));
  }
}

// Logs compressed with another tool than gzip are named, not read as garbled text.
TEST_F(TraceImportTest, OtherCompressorsAreNamed) {
  const struct {
    std::string magic;
    const char* tool;
  } cases[] = {{std::string("\x28\xb5\x2f\xfd\x04\x58", 6), "zstd"},
               {std::string("\xfd\x37\x7a\x58\x5a\x00\x00", 7), "xz"},
               {"BZh91AY&SY", "bzip2"},
               {std::string("\x04\x22\x4d\x18\x64\x40", 6), "lz4"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.tool);
    EXPECT_THAT(ParseAnyTrace(c.magic, "snap.pickle.x").status(),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("snap.pickle.x: compressed with ", c.tool,
                                                ", which is not read: decompress it first (",
                                                c.tool, " -d)"))));
    // Inside a zip too.
    EXPECT_THAT(ParseAnyTrace(Zip({{"log", c.magic}}), "l.zip").status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("compressed with")));
  }
  // A vgpu trace that starts like one of them is still a trace: "BZh" needs a level digit.
  EXPECT_THAT(ParseAnyTrace("BZh is not a trace line\n", "t").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("t:1: unknown event")));
}

TEST_F(TraceImportTest, ZipBadInput) {
  const std::string trace = "a 1 100\nf 1\n";
  EXPECT_THAT(
      ParseAnyTrace(Zip({{"a.trace", trace}, {"b.csv", trace}, {"c/", ""}}), "two.zip").status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("two.zip: a zip archive of 2 files without a torch.save data.pkl "
                         "(\"a.trace\", \"b.csv\"): which log to read is not clear")));
  EXPECT_THAT(ParseAnyTrace(Zip({{"x/data.pkl", trace}, {"y/data.pkl", trace}}), "p.zip").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("p.zip: a zip archive of 2 torch.save objects")));
  EXPECT_THAT(ParseAnyTrace(Zip({}), "e.zip").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("e.zip: an empty zip archive (no file in it to read)")));
  EXPECT_THAT(ParseAnyTrace(Zip({{"inner.zip", Zip({{"a.trace", trace}})}}), "z.zip").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("z.zip: zipped twice (member \"inner.zip\" is a zip archive)")));
  EXPECT_THAT(ParseAnyTrace(Gzip(Zip({{"a.gz", Gzip(trace)}})), "w.zip.gz").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("w.zip.gz: gzip inside two other wrappers")));
  // A gzipped log in a zip is one wrapper in another: read.
  EXPECT_THAT(ParseAnyTrace(Zip({{"a.trace.gz", Gzip(trace)}}), "g.zip"), IsOk());
  // The member is checked like any trace, errors naming the input.
  EXPECT_THAT(ParseAnyTrace(Zip({{"a.trace", "a 1 100\nf 2\n"}}), "bad.zip").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("bad.zip:2: free of block 2, which is not live")));
  // torch.save(..., _use_new_zipfile_serialization=False): its magic number's pickle first.
  EXPECT_THAT(ParseAnyTrace(std::string("\x80\x02\x8a\x0al\xfc\x9c"
                                        "F\xf9 j\xa8P\x19.\x80\x02M\xe9\x03.",
                                        21),
                            "old.pt")
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("old.pt: a torch.save file in the legacy format")));
  std::string broken = TorchSave(Slurp(Src("tests/data/mlp_two_streams.snapshot.pickle")));
  broken.resize(broken.size() - 30);
  EXPECT_THAT(ParseAnyTrace(broken, "cut.pt").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cut.pt: zip archive: no end of central directory record")));
}

// TensorFlow's memory log (scripts/make-import-samples writes it as log_memory.cc does, among
// other log lines): GPU 0's records replay as the trace it was made from, GPU 1's (--device 1)
// as its even blocks; CPU records, tensor outputs, deferred raw frees and frees of tensors
// whose allocation is not logged take no part.
TEST_F(TraceImportTest, TfMemoryLogReplaysLikeItsSource) {
  auto source = ReadTraceFile(Src("tools/traces/mlp_mirrored.trace"));
  ASSERT_THAT(source, IsOk());
  const std::string log = Slurp(Src("tests/data/mlp_mirrored.tf.log"));
  auto t = ParseAnyTrace(log, "tf.log");
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->format, "tensorflow-log");
  ExpectSameWorkload(*t, *source);
  EXPECT_THAT(t->import_note,
              AllOf(HasSubstr("TensorFlow memory log: allocator GPU_0_bfc (the most records) of "
                              "cpu, GPU_0_bfc, GPU_1_bfc"),
                    HasSubstr("frees of tensors whose allocation is not logged skipped"),
                    HasSubstr("deferred raw frees taken at completion")));
  ImportOptions gpu1;
  gpu1.device = 1;
  auto even = ReadTraceFile(Src("tests/data/mlp_mirrored_even.trace"));
  ASSERT_THAT(even, IsOk());
  auto t1 = ParseAnyTrace(log, "tf.log", gpu1);
  ASSERT_THAT(t1, IsOk());
  ExpectSameWorkload(*t1, *even);
  EXPECT_THAT(t1->import_note, HasSubstr("allocator GPU_1_bfc (--device)"));
  ImportOptions gpu2;
  gpu2.device = 2;
  EXPECT_THAT(ParseAnyTrace(log, "tf.log", gpu2).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tf.log: no allocator of GPU 2 (GPU_2_...) in the log; its "
                                 "allocators: cpu, GPU_0_bfc, GPU_1_bfc")));
  // Compressed, it is the same log.
  auto gz = ParseAnyTrace(Gzip(log), "tf.log.gz");
  ASSERT_THAT(gz, IsOk());
  ExpectSameWorkload(*gz, *source);
}

// A log TensorFlow 2.21 wrote itself (tests/data/tf/README.md; its records carry protobuf's
// "goo.gle/debugonly" marker): what its records add up to, computed apart by the script.
TEST_F(TraceImportTest, TfMemoryLogWrittenByTensorFlow) {
  auto t = ReadAnyTraceFile(Src("tests/data/tf/cpu_train.tf.log.gz"));
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->format, "tensorflow-log");
  EXPECT_EQ(t->name, "cpu_train");
  EXPECT_EQ(t->allocations, 2465u);
  EXPECT_EQ(t->events.size(), 2u * 2465u);  // every allocation freed
  EXPECT_EQ(t->peak_live_bytes, 3223312u);
  EXPECT_THAT(t->import_note,
              AllOf(HasSubstr("TensorFlow memory log: allocator mklcpu, 2465 allocations"),
                    HasSubstr("77 frees of tensors whose allocation is not logged skipped")));
}

TEST_F(TraceImportTest, TfMemoryLogBadInput) {
  const std::string pre = "I1130 12:00:01.000001 42 log_memory.cc:39] __LOG_MEMORY__ ";
  auto alloc = [&](int id, const std::string& bytes) {
    return pre + "MemoryLogRawAllocation { step_id: 1 operation: \"op\" num_bytes: " + bytes +
           " ptr: 1 allocation_id: " + std::to_string(id) + " allocator_name: \"GPU_0_bfc\" }\n";
  };
  struct Case {
    std::string log;
    const char* message;
  };
  const Case cases[] = {
      {"start\n" + alloc(1, "-8"), "log:2: MemoryLogRawAllocation: num_bytes is negative (-8)"},
      {alloc(1, "lots"), "log:1: MemoryLogRawAllocation: bad num_bytes \"lots\""},
      {alloc(1, "8") + alloc(1, "8"),
       "log:2: allocation id 1 of GPU_0_bfc allocated again while live (since line 1)"},
      {pre + "MemoryLogRawAllocation { num_bytes: 8 allocation_id: 1 }\n",
       "log:1: MemoryLogRawAllocation: no allocator_name"},
      {pre + "MemoryLogRawAllocation { num_bytes: 8 allocator_name: \"GPU_0_bfc }\n",
       "log:1: \"MemoryLogRawAllocation\": unterminated string at column"},
      {pre + "MemoryLogRawAllocation { num_bytes 8 }\n",
       "log:1: \"MemoryLogRawAllocation\": expected ':' or '{' after \"num_bytes\""},
      {pre + "MemoryLogRawAllocation { num_bytes: 8\n", "the record ends before its closing '}'"},
      {pre + "MemoryLogRawAllocation\n", "log:1: __LOG_MEMORY__ record without a '{'"},
      {pre + "MemoryLogTensorAllocation { tensor { allocation_description { allocator_name: "
             "\"GPU_0_bfc\" allocation_id: 3 } } }\n",
       "log:1: MemoryLogTensorAllocation: no tensor.allocation_description.requested_bytes"},
      {alloc(1, "8") + pre +
           "MemoryLogRawDeallocation { allocation_id: 1 allocator_name: \"GPU_0_bfc\" deferred: "
           "maybe }\n",
       "log:2: MemoryLogRawDeallocation: bad deferred \"maybe\" (true or false)"},
      {[&] {
         std::string deep = pre + "MemoryLogStep {";
         for (int i = 0; i < 40; ++i) deep += " a {";
         return deep + "\n";
       }(),
       "messages nested more than 32 deep"},
      {pre + "MemoryLogRawAllocation { num_bytes: 8 ptr: 1 allocation_id: 0 allocator_name: "
             "\"GPU_0_bfc\" }\n",
       "log: allocator GPU_0_bfc has no numbered allocations in the log (1 records without an "
       "allocation_id: an allocator that does not number its allocations, such as "
       "TF_GPU_ALLOCATOR=cuda_malloc_async"},
      {pre + "MemoryLogStep { step_id: 1 }\n",
       "log: no __LOG_MEMORY__ allocation or free records (TensorFlow writes them with "
       "TF_CPP_VMODULE=log_memory=2"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.log);
    EXPECT_THAT(ParseTfMemoryLog(c.log, "log").status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message)));
  }
  // Kinds this reader does not know (a later TensorFlow's) are skipped and counted; frees of
  // allocations the log does not show are skipped; text-format variants (`name: {`, angle
  // brackets, single quotes, escapes) read.
  auto t = ParseTfMemoryLog(
      alloc(7, "100") + pre + "MemoryLogSomethingNew { x: 1 }\n" + pre +
          "MemoryLogTensorAllocation { tensor: < allocation_description: { requested_bytes: 50 "
          "allocator_name: 'GPU_0\\137bfc' allocation_id: 8 } > }\n" +
          pre +
          "MemoryLogTensorDeallocation { allocation_id: 99 allocator_name: \"GPU_0_bfc\" }\n" +
          pre + "MemoryLogTensorDeallocation { allocation_id: 8 allocator_name: \"GPU_0_bfc\" }\n",
      "log");
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->allocations, 2u);
  EXPECT_EQ(t->peak_live_bytes, 150u);
  EXPECT_THAT(t->import_note,
              AllOf(HasSubstr("1 records of unknown kinds skipped (\"MemoryLogSomethingNew\")"),
                    HasSubstr("1 frees of tensors whose allocation is not logged skipped")));
}

// A PyTorch profiler trace (scripts/make-import-samples writes it as kineto does: operator and
// kernel events around "[memory]" events, two threads' events written apart, CPU allocations,
// a free of a block allocated before profiling) replays as the trace it was made from.
TEST_F(TraceImportTest, TorchProfilerTraceReplaysLikeItsSource) {
  auto source = ReadTraceFile(Src("tests/data/mlp_two_steps.trace"));
  ASSERT_THAT(source, IsOk());
  auto t = ReadAnyTraceFile(Src("tests/data/mlp_two_steps.pt.trace.json"));
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->format, "pytorch-profiler-trace");
  EXPECT_EQ(t->name, "mlp_two_steps");
  ExpectSameWorkload(*t, *source);
  EXPECT_EQ(t->original_peak_reserved_bytes, 29360128u);  // the largest "Total Reserved"
  EXPECT_THAT(t->import_note,
              AllOf(HasSubstr("PyTorch profiler trace: cuda:0 (the most [memory] events) of cpu, "
                              "cuda:0, 28 allocations"),
                    HasSubstr("1 frees of blocks allocated before profiling skipped")));
  ImportOptions cuda1;
  cuda1.device = 1;
  EXPECT_THAT(ReadAnyTraceFile(Src("tests/data/mlp_two_steps.pt.trace.json"), cuda1).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("no [memory] events of cuda:1; the trace has cpu, cuda:0")));
  // The events array alone is a Chrome trace too.
  const std::string mem = R"({"name": "[memory]", "ph": "i", "ts": %d, "args": {"Device Type": 1,
      "Device Id": 0, "Addr": 4096, "Bytes": %d, "Total Reserved": 2097152}})";
  auto ev = [&](int ts, int bytes) {
    return absl::StrReplaceAll(mem, {{"%d, \"args", absl::StrCat(ts, ", \"args")},
                                     {"\"Bytes\": %d", absl::StrCat("\"Bytes\": ", bytes)}});
  };
  // An operator whose arguments quote "[memory]" (nested deeper than a memory event, or over
  // 64 KiB) is not a memory event.
  const std::string op_deep =
      R"({"name": "aten::copy_", "args": {"Input Dims": [[[[[[[[[[1]]]]]]]]]], "note": "[memory]"}})";
  const std::string op_big = R"({"name": "aten::cat", "args": {"s": ")" + std::string(70000, 'x') +
                             R"(", "n": "[memory]"}})";
  auto bare = ParseAnyTrace(
      "[" + ev(2, -512) + ", " + op_deep + ", " + op_big + ", " + ev(1, 512) + "]", "a.json");
  ASSERT_THAT(bare, IsOk());
  EXPECT_EQ(bare->allocations, 1u);
  EXPECT_EQ(bare->events.size(), 2u);  // in time order: the allocation, then its free
  EXPECT_EQ(bare->original_peak_reserved_bytes, 2097152u);
  EXPECT_THAT(bare->import_note, HasSubstr("1 events over 64 KiB mentioning [memory] skipped"));
}

TEST_F(TraceImportTest, TorchProfilerTraceBadInput) {
  auto mem = [](int ts, int64_t addr, int64_t bytes) {
    return absl::StrCat(R"({"name": "[memory]", "ph": "i", "ts": )", ts,
                        R"(, "args": {"Device Type": 1, "Device Id": 0, "Addr": )", addr,
                        R"(, "Bytes": )", bytes, "}}");
  };
  struct Case {
    std::string json;
    const char* message;
  };
  const Case cases[] = {
      {R"({"traceEvents": [{"name": "x})", "p.json: invalid JSON at byte 26: unterminated string"},
      {R"({"traceEvents": {}})",
       "p.json: invalid JSON at byte 16: \"traceEvents\" is not an array"},
      {R"({"schemaVersion": 1})", "p.json: no \"traceEvents\": not a Chrome trace"},
      {R"({"traceEvents": []} x)", "p.json: invalid JSON at byte 20: data after the document"},
      {R"({"traceEvents": [1, 2]])",
       "p.json: invalid JSON at byte 22: expected ',' or '}' after a member, found \"]\""},
      {R"([1 2])",
       "p.json: invalid JSON at byte 3: expected ',' or ']' after an event, found \"2\""},
      {R"({"traceEvents": [{"name": "aten::add"}]})",
       "p.json: no [memory] events: profile with torch.profiler.profile(profile_memory=True)"},
      {"[" + mem(1, 4096, 512) + "," + mem(2, 4096, 512) + "]",
       "p.json: the event at byte 114: allocation at 4096, which is live (allocated by the event "
       "at "
       "byte 1)"},
      {"[" + mem(1, 4096, 512) + "," + mem(2, 4096, -1024) + "]",
       "the event at byte 114: free of 1024 bytes at 4096, allocated with 512 bytes by the event "
       "at byte 1"},
      {R"([{"name": "[memory]", "ts": 1, "args": {"Device Type": 1, "Device Id": 0, "Bytes": 8}}])",
       "p.json: the event at byte 1: no \"args\": {\"Addr\"}"},
      {R"([{"name": "[memory]", "ts": 1, "args": {"Device Type": 1, "Device Id": 0, "Addr": 1.5, "Bytes": 8}}])",
       "p.json: the event at byte 1: \"Addr\" is a number, expected an integer"},
      {R"([{"name": "[memory]", "ts": 1, "ts": 2}])",
       "p.json: the event at byte 1: invalid JSON at byte 30 (line 1, column 31): duplicate object "
       "key \"ts\" (first at byte 21) (bytes counted from the event's start)"},
      {"[" + std::string(300, '[') + std::string(300, ']') + "]", "nested more than 256 deep"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.json);
    EXPECT_THAT(ParseAnyTrace(c.json, "p.json").status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message)));
  }
}

// The importers are reentrant (trace_import.h): every format, wrapped and not, read from four
// threads at once gives each thread the same trace (run under TSan in CI).
TEST_F(TraceImportTest, ImportsFromManyThreadsAtOnce) {
  const std::vector<std::string> files = {"tests/data/mlp_two_streams.snapshot.pickle",
                                          "tests/data/mlp_two_streams.rmm.csv",
                                          "tests/data/mlp_mirrored.tf.log",
                                          "tests/data/mlp_two_steps.pt.trace.json",
                                          "tests/data/torch/two_streams.pt",
                                          "tests/data/tf/cpu_train.tf.log.gz"};
  std::vector<std::string> data;
  std::vector<Trace> want;
  for (const std::string& f : files) {
    data.push_back(Slurp(Src(f)));
    auto t = ParseAnyTrace(data.back(), f);
    ASSERT_THAT(t, IsOk()) << f;
    want.push_back(*std::move(t));
  }
  std::vector<std::thread> threads;
  std::vector<int> same(4, 0);
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (size_t i = 0; i < files.size(); ++i) {
        const size_t f = (i + k) % files.size();
        auto t = ParseAnyTrace(data[f], files[f]);
        if (t.ok() && t->events.size() == want[f].events.size() &&
            t->peak_live_bytes == want[f].peak_live_bytes &&
            t->import_note == want[f].import_note) {
          ++same[k];
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(same[k], static_cast<int>(files.size())) << k;
}

TEST_F(TraceImportTest, RmmLogReplaysLikeItsSource) {
  auto source = ReadTraceFile(Src("tests/data/mlp_two_streams.trace"));
  ASSERT_THAT(source, IsOk());
  const std::string csv = Slurp(Src("tests/data/mlp_two_streams.rmm.csv"));
  auto t = ParseAnyTrace(csv, "mlp.csv");
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->format, "rmm-log");
  ExpectSameWorkload(*t, *source);
  EXPECT_EQ(t->original_peak_reserved_bytes, 0u);  // RMM logs do not say
  // The log reuses pointers: a pointer allocated twice is two blocks.
  absl::flat_hash_set<std::string> seen;
  int reused = 0;
  for (absl::string_view line : absl::StrSplit(csv, '\n')) {
    std::vector<absl::string_view> f = absl::StrSplit(line, ',');
    if (f.size() == 6 && f[2] == "allocate" && !seen.insert(std::string(f[3])).second) ++reused;
  }
  EXPECT_GT(reused, 0);
}

TEST_F(TraceImportTest, RmmLogFormats) {
  // RMM's printf format (no 0x), a failed allocation skipped, CRLF line ends.
  auto t = ParseRmmLog(
      "Thread,Time,Action,Pointer,Size,Stream\r\n"
      "1,01:02:03.000004,allocate,7f0000000000,256,0\r\n"
      "1,01:02:03.000005,allocate failure,0,1099511627776,0\r\n"
      "1,01:02:03.000006,allocate,7f0000000100,512,5f00\r\n"
      "1,01:02:03.000007,free,7f0000000000,256,0\r\n"
      "1,01:02:03.000008,allocate,7f0000000000,128,5f00\r\n",
      "x.csv");
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->events.size(), 4u);
  EXPECT_EQ(t->num_streams, 2u);
  EXPECT_EQ(t->peak_live_bytes, 768u);
  EXPECT_EQ(t->unfreed_blocks, 2u);
  EXPECT_THAT(t->import_note, HasSubstr("1 failed allocations skipped"));
}

// Logs RMM 26.10 wrote itself (tests/data/rmm/README.md): the peak live bytes are what the log
// adds up to, streams are told apart, "allocate failure" rows and PyTorch's empty tensors
// (allocate of 0 bytes at "(nil)", never freed) are skipped.
TEST_F(TraceImportTest, RmmLogsWrittenByRmm) {
  const RealLog cases[] = {
      {"streams.dev0.csv", 3304, 1652, 0, 3, 977719759, 0, "1 failed allocations skipped"},
      {"torch.dev0.csv", 3173, 1588, 3, 1, 332204712, 0,
       "4 allocate/free of 0 bytes at (nil) skipped"},
  };
  for (const RealLog& c : cases) {
    ExpectRealLogImports(c, std::string("tests/data/rmm/") + c.file, "rmm-log");
  }
}

TEST_F(TraceImportTest, RmmLogBadInput) {
  const std::string h = "Thread,Time,Action,Pointer,Size,Stream\n";
  struct Case {
    std::string text;
    std::string message;
  };
  const Case cases[] = {
      {h + "1,t,allocate,0x10,lots,0x0\n", "x.csv:2: bad size \"lots\" (decimal bytes)"},
      {h + "1,t,allocate,0xZZ,16,0x0\n", "x.csv:2: bad pointer \"0xZZ\" (hexadecimal)"},
      {h + "1,t,allocate,0x10,16,s1\n", "x.csv:2: bad stream \"s1\""},
      {h + "1,t,reallocate,0x10,16,0x0\n", "x.csv:2: unknown action \"reallocate\""},
      {h + "1,t,allocate,0x10,16,0x0\n1,t,free,0x20,16,0x0\n",
       "x.csv:3: free of 0x20, which is not live (no allocate of it before)"},
      {h + "1,t,allocate,0x10,16,0x0\n1,t,allocate,0x10,16,0x0\n",
       "x.csv:3: allocate of 0x10, which is live since line 2"},
      {h + "1,t,allocate,0x10,16,0x0\n1,t,free,0x10,32,0x0\n",
       "x.csv:3: free of 0x10 with size 32, but it was allocated with 16 on line 2"},
      {h + "1,t,allocate,(nil),16,0\n",
       "x.csv:2: allocate of 16 bytes at the null pointer (only 0 bytes may be)"},
      {h + "1,t,allocate,0x0,1,0\n", "x.csv:2: allocate of 1 bytes at the null pointer"},
      {h + "1,t,allocate,(nil)x,0,0\n", "x.csv:2: bad pointer \"(nil)x\" (hexadecimal)"},
      {h + "1,t,allocate,0x10\n", "x.csv:2: expected 6 comma-separated fields"},
      {"Thread,Time,Action,Size\n", "x.csv:1: expected RMM's header"},
      {h, "x.csv: the trace has no events"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    EXPECT_THAT(ParseRmmLog(c.text, "x.csv").status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message)));
  }
}

}  // namespace
}  // namespace vgpu
