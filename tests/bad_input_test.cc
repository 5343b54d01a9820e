// The bad-input catalogue (issue 7): every kind of bad input the runtime meets, with the exact
// error each gets. Each case here is one row of docs/bad-input.md; the test checks both the
// behaviour and that the document lists the case with its code and message, so the two
// cannot drift. Print the rows with the real messages:
//   build/tests/bad_input_test --gtest_also_run_disabled_tests --gtest_filter=BadInput.DISABLED_Print
// Allocator cases also check the allocator is unchanged afterwards (stats and invariants).
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "bad_input_catalogue.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/allocator/bfc_allocator.h"
#include "vgpu/allocator/factory.h"
#include "vgpu/allocator/sub_allocators.h"
#include "vgpu/allocator/trace.h"
#include "vgpu/allocator/trace_import.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/gzip.h"
#include "vgpu/runtime/host/host_platform.h"
#include "vgpu/runtime/kernels.h"
#include "vgpu/runtime/status_matchers.h"
#include "vgpu/tests/gzip_testutil.h"
#include "vgpu/tests/zip_testutil.h"

namespace vgpu::testing {
namespace {

using ::testing::HasSubstr;
using ::vgpu::testing::TorchSave;
using ::vgpu::testing::Zip;
using Code = absl::StatusCode;

// Shared objects for the cases: one 256 MiB simulated GPU and two allocators on it.
struct World {
  std::unique_ptr<HostPlatform> platform;
  Executor* exec = nullptr;
  std::unique_ptr<Allocator> bfc, other;
  std::unique_ptr<Stream> stream;
  World() {
    platform = std::move(*HostPlatform::Create(HostPlatformOptions{{256 * kMiB}}));
    exec = *platform->GetExecutor(0);
    DeviceAllocatorOptions o;
    o.device_name = "/job:localhost/replica:0/task:0/device:GPU:0 (physical GPU 0)";
    o.memory_limit = 64 * kMiB;
    o.allow_growth = true;
    bfc = std::move(*CreateDeviceAllocator(exec, o));
    o.device_name = "/job:localhost/replica:0/task:0/device:GPU:1 (physical GPU 0)";
    o.memory_limit = 16 * kMiB;
    other = std::move(*CreateDeviceAllocator(exec, o));
    stream = std::move(*exec->CreateStream(StreamOptions{}));
  }
};

World& W() {
  static World* w = new World();
  return *w;
}

// Runs `body` on the shared BFC allocator and fails the case (Internal) if the allocator's live
// state changed or its invariants broke — a rejected call must change nothing. (Reserved
// memory may shrink: an OOM first gives wholly free regions back.)
absl::Status Unchanged(const std::function<absl::Status(Allocator&)>& body) {
  Allocator& a = *W().bfc;
  AllocatorStats before = a.Stats();
  absl::Status s = body(a);
  AllocatorStats after = a.Stats();
  if (before.bytes_in_use != after.bytes_in_use || before.num_allocs != after.num_allocs ||
      before.num_frees != after.num_frees || after.bytes_reserved > before.bytes_reserved) {
    return absl::InternalError(absl::StrCat("allocator changed: ", before.ToString(), " -> ",
                                            after.ToString()));
  }
  absl::Status inv = a.CheckInvariants();
  if (!inv.ok()) return inv;
  return s;
}

std::vector<CatalogueCase> RuntimeCases() {
  std::vector<CatalogueCase> c;
  auto bytes = [](std::string text) {
    return [text] { return ParseBytes(text).status(); };
  };
  c.push_back({"S01", "size: empty", "`ParseBytes(\"\")`", Code::kInvalidArgument, "empty", bytes("")});
  c.push_back({"S02", "size: negative", "`ParseBytes(\"-1GiB\")`", Code::kInvalidArgument, "negative", bytes("-1GiB")});
  c.push_back({"S03", "size: unknown unit", "`ParseBytes(\"12XB\")`", Code::kInvalidArgument, "unknown unit \"XB\"", bytes("12XB")});
  c.push_back({"S04", "size: trailing junk", "`ParseBytes(\"1GiBx\")`", Code::kInvalidArgument, "unknown unit \"GiBx\"", bytes("1GiBx")});
  c.push_back({"S05", "size: overflow", "`ParseBytes(\"18446744073709551616\")`", Code::kInvalidArgument, "too large", bytes("18446744073709551616")});
  c.push_back({"S06", "size: fraction of a byte", "`ParseBytes(\"1.5\")`", Code::kInvalidArgument, "fraction of a byte", bytes("1.5")});
  c.push_back({"S07", "size: percentage without a total", "`ParseBytes(\"40%\")`", Code::kInvalidArgument, "needs a known total", bytes("40%")});
  c.push_back({"S08", "size: percentage above 100", "`ParseBytes(\"150%\", total)`", Code::kInvalidArgument, "above 100%",
               [] { return ParseBytes("150%", kGiB).status(); }});
  auto hosts = [](std::string text) {
    return [text] { return ParseHostDevices(text).status(); };
  };
  c.push_back({"H01", "VGPU_HOST_DEVICES: bad size", "`2x16GiB,foo`", Code::kInvalidArgument, "bad part \"foo\"", hosts("2x16GiB,foo")});
  c.push_back({"H02", "VGPU_HOST_DEVICES: zero count", "`0x1GiB`", Code::kInvalidArgument, "count before 'x' must be 1..64", hosts("0x1GiB")});
  c.push_back({"H03", "VGPU_HOST_DEVICES: device too small", "`1MiB`", Code::kInvalidArgument, "at least 2 MiB", hosts("1MiB")});
  c.push_back({"H04", "VGPU_HOST_DEVICES: empty entry", "`1GiB,,1GiB`", Code::kInvalidArgument, "empty entry", hosts("1GiB,,1GiB")});
  c.push_back({"P01", "unknown platform", "`GetPlatform(\"tpu\")`", Code::kInvalidArgument, "unknown platform \"tpu\"",
               [] { return GetPlatform("tpu").status(); }});
  c.push_back({"P02", "physical device out of range", "`GetExecutor(5)` on a 1-device platform", Code::kNotFound, "has no device 5",
               [] { return W().platform->GetExecutor(5).status(); }});
  c.push_back({"P03", "raw allocation over the card", "`Executor::Allocate(1 TiB)` on 256 MiB", Code::kResourceExhausted, "out of memory allocating 1 TiB",
               [] { return W().exec->Allocate(kGiB * 1024).status(); }});
  c.push_back({"P04", "raw free of a foreign pointer", "`Executor::Free(&local)`", Code::kInvalidArgument, "not a live allocation of this device",
               [] { int local; return W().exec->Free(&local); }});
  c.push_back({"P05", "raw double free", "`Executor::Free(p)` twice", Code::kInvalidArgument, "double free or foreign pointer",
               [] {
                 void* p = *W().exec->Allocate(4096);
                 (void)W().exec->Free(p);
                 return W().exec->Free(p);
               }});
  c.push_back({"P06", "physical memory not a multiple of the granularity", "`CreatePhysicalMemory(1 MiB)`", Code::kInvalidArgument, "granularity",
               [] { return W().exec->CreatePhysicalMemory(kMiB).status(); }});
  c.push_back({"P07", "SM partitions on the host platform", "`PartitionSms({8,8})`", Code::kUnimplemented, "need the cuda platform",
               [] { std::vector<int> v = {8, 8}; return W().exec->PartitionSms(v).status(); }});
  c.push_back({"P08", "memcpy with a null pointer", "`MemcpyH2D(nullptr, src, 16)`", Code::kInvalidArgument, "null pointer",
               [] { char b[16]; return W().stream->MemcpyH2D(nullptr, b, 16); }});
  c.push_back({"A01", "alignment not a power of two", "`Allocate(1024, 3000)`", Code::kInvalidArgument, "is not a power of two",
               [] { return Unchanged([](Allocator& a) { return a.Allocate(1024, 3000).status(); }); }});
  c.push_back({"A02", "double free", "`Deallocate(p)` twice", Code::kInvalidArgument, "was already freed",
               [] {
                 void* p = *W().bfc->AllocateRaw(1000);
                 (void)W().bfc->Deallocate(p);
                 return Unchanged([p](Allocator& a) { return a.Deallocate(p); });
               }});
  c.push_back({"A03", "free of a foreign pointer", "`Deallocate(&local)`", Code::kInvalidArgument, "was not allocated by this allocator",
               [] { int local; return Unchanged([&](Allocator& a) { return a.Deallocate(&local); }); }});
  c.push_back({"A04", "free of another device's pointer", "GPU:1's pointer freed on GPU:0", Code::kInvalidArgument, "was not allocated by this allocator",
               [] {
                 void* p = *W().other->AllocateRaw(4096);
                 absl::Status s = Unchanged([p](Allocator& a) { return a.Deallocate(p); });
                 (void)W().other->Deallocate(p);
                 return s;
               }});
  c.push_back({"A05", "request above the device's limit", "`Allocate(100 MiB)` with a 64 MiB limit", Code::kResourceExhausted, "limit 64 MiB",
               [] { return Unchanged([](Allocator& a) { return a.Allocate(100 * kMiB).status(); }); }});
  c.push_back({"A06", "huge request", "`Allocate(2^63)`", Code::kResourceExhausted, "out of memory allocating",
               [] { return Unchanged([](Allocator& a) { return a.Allocate(uint64_t{1} << 63).status(); }); }});
  c.push_back({"A07", "zero-byte request (not an error)", "`Allocate(0)` gives an empty buffer", Code::kOk, "",
               [] { return Unchanged([](Allocator& a) {
                   auto b = a.Allocate(0);
                   if (b.ok() && !b->empty()) return absl::InternalError("not empty");
                   return b.status(); }); }});
  c.push_back({"A08", "OOM when the device is full", "3 x 30 MiB with a 64 MiB limit", Code::kResourceExhausted, "largest free block",
               [] {
                 auto x = W().bfc->Allocate(30 * kMiB);
                 auto y = W().bfc->Allocate(30 * kMiB);
                 return Unchanged([](Allocator& a) { return a.Allocate(30 * kMiB).status(); });
               }});
  c.push_back({"A09", "limit above the free memory, growth off", "64 MiB limit with 32 MiB free", Code::kResourceExhausted, "out of memory",
               [] {
                 uint64_t free_bytes = W().exec->Describe()->free_bytes;
                 void* hog = *W().exec->Allocate(free_bytes - 32 * kMiB);
                 DeviceAllocatorOptions o;
                 o.device_name = "GPU:9";
                 o.memory_limit = 64 * kMiB;
                 o.allow_growth = false;
                 absl::Status s = CreateDeviceAllocator(W().exec, o).status();
                 (void)W().exec->Free(hog);
                 return s;
               }});
  c.push_back({"A10", "zero memory limit", "`DeviceAllocatorOptions{memory_limit=0}`", Code::kInvalidArgument, "memory limit must be > 0",
               [] {
                 DeviceAllocatorOptions o;
                 o.device_name = "GPU:9";
                 return CreateDeviceAllocator(W().exec, o).status();
               }});
  c.push_back({"A11", "unknown allocator kind", "`VGPU_ALLOCATOR=tlsf`", Code::kInvalidArgument, "unknown allocator \"tlsf\"",
               [] { return ParseAllocatorKind("tlsf").status(); }});
  c.push_back({"A12", "RecordStream of a pointer that is not live", "`RecordStream(&local, stream)`", Code::kInvalidArgument, "which is not a live allocation here",
               [] { int local; return Unchanged([&](Allocator& a) { return a.RecordStream(&local, W().stream.get()); }); }});
  c.push_back({"A13", "allocation on another device's stream", "GPU:9 (card 0) allocating on a stream of card 1", Code::kInvalidArgument, "the stream belongs to another device",
               [] {
                 auto cards = HostPlatform::Create(HostPlatformOptions{{256 * kMiB, 256 * kMiB}});
                 Executor* e0 = *(*cards)->GetExecutor(0);
                 auto own = e0->CreateStream(StreamOptions{});
                 auto foreign = (*(*cards)->GetExecutor(1))->CreateStream(StreamOptions{});
                 DeviceAllocatorOptions o;
                 o.device_name = "GPU:9";
                 o.memory_limit = 16 * kMiB;
                 o.allow_growth = true;
                 o.stream = own->get();
                 auto a = CreateDeviceAllocator(e0, o);
                 return (*a)->Allocate(4096, foreign->get()).status();
               }});
  c.push_back({"A14", "more streams than an allocator tracks", "a 65th stream (the default and 63 others in use)", Code::kResourceExhausted, "call ReleaseStream",
               [] {
                 std::vector<std::unique_ptr<Stream>> streams;
                 for (int i = 0; i < Allocator::kMaxStreams; ++i) streams.push_back(*W().exec->CreateStream(StreamOptions{}));
                 DeviceAllocatorOptions o;
                 o.device_name = "GPU:9";
                 o.memory_limit = 16 * kMiB;
                 o.allow_growth = true;
                 o.stream = streams[0].get();
                 auto a = CreateDeviceAllocator(W().exec, o);
                 absl::Status s;
                 for (int i = 1; i < Allocator::kMaxStreams && s.ok(); ++i) s = (*a)->Allocate(4096, streams[i].get()).status();
                 if (!s.ok()) return s;
                 auto extra = W().exec->CreateStream(StreamOptions{});
                 return (*a)->Allocate(4096, extra->get()).status();
               }});
  c.push_back({"K01", "too many inputs to SumN", "17 inputs", Code::kInvalidArgument, "17 inputs",
               [] {
                 std::vector<const float*> in(17, nullptr);
                 return (*W().exec->GetKernels())->SumN(W().stream.get(), in, nullptr, 1, 1.0f);
               }});
  c.push_back({"K02", "label outside the classes", "label 12 of 10 classes in SoftmaxCrossEntropy", Code::kInvalidArgument, "outside [0, 10)",
               [] {
                 auto st = W().exec->CreateStream(StreamOptions{});
                 float logits[10] = {}, loss;
                 int32_t label = 12, correct;
                 (void)(*W().exec->GetKernels())->SoftmaxCrossEntropy(st->get(), 1, 10, logits, &label, 1.0f, nullptr, &loss, &correct);
                 return (*st)->Synchronize();
               }});
  c.push_back({"K03", "negative gemm size", "`Sgemm(m=-1)`", Code::kInvalidArgument, "negative size",
               [] { return (*W().exec->GetBlas())->Sgemm(W().stream.get(), Transpose::kNo, Transpose::kNo, -1, 1, 1, 1, nullptr, 1, nullptr, 1, 0, nullptr, 1); }});
  c.push_back({"T01", "trace: free of a block that is not live", "`a 1 100` / `f 2`", Code::kInvalidArgument, "trace:2: free of block 2, which is not live",
               [] { return ParseTrace("a 1 100\nf 2\n").status(); }});
  c.push_back({"T02", "trace: unknown event", "`x 1`", Code::kInvalidArgument, "unknown event \"x\"",
               [] { return ParseTrace("x 1\n").status(); }});
  c.push_back({"T03", "trace: block allocated twice", "`a 1 8` twice", Code::kInvalidArgument, "allocated again while live",
               [] { return ParseTrace("a 1 8\na 1 8\n").status(); }});
  c.push_back({"T04", "trace: missing file", "`ReadTraceFile(\"/nonexistent\")`", Code::kNotFound, "cannot open trace file",
               [] { return ReadTraceFile("/nonexistent.trace").status(); }});
  c.push_back({"T05", "trace: bad stream column", "`a 1 8 x`", Code::kInvalidArgument, "trace:1: bad stream \"x\" (an integer 0..1023)",
               [] { return ParseTrace("a 1 8 x\n").status(); }});
  c.push_back({"T06", "PyTorch snapshot: truncated pickle", "`\\x80\\x02N` (no STOP)", Code::kInvalidArgument, "snap.pickle: pickle at offset 3: input ends before STOP (truncated pickle)",
               [] { return ParseAnyTrace(std::string("\x80\x02N", 3), "snap.pickle").status(); }});
  c.push_back({"T07", "PyTorch snapshot: code in the pickle", "`pickle.dumps` of an object (GLOBAL)", Code::kInvalidArgument, "snap.pickle: pickle at offset 2: opcode 0x63 'c' (GLOBAL) is not supported",
               [] { return ParseAnyTrace(std::string("\x80\x02" "cos\nsystem\n."), "snap.pickle").status(); }});
  c.push_back({"T08", "PyTorch snapshot: no history", "`pickle.dumps({})`", Code::kInvalidArgument, "snap.pickle: snapshot: no \"device_traces\"",
               [] { return ParseAnyTrace(std::string("\x80\x04}."), "snap.pickle").status(); }});
  c.push_back({"T09", "PyTorch snapshot: unknown action", "`{\"action\": \"realloc\"}` in device_traces[0]", Code::kInvalidArgument, "snap.pickle: device_traces[0][0]: unknown action \"realloc\"",
               [] {
                 const char kSnap[] =
                     "\x80\x04\x95\x43\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x8c\x0d\x64\x65\x76\x69\x63\x65\x5f\x74"
                     "\x72\x61\x63\x65\x73\x94\x5d\x94\x5d\x94\x7d\x94\x28\x8c\x06\x61\x63\x74\x69\x6f\x6e\x94"
                     "\x8c\x07\x72\x65\x61\x6c\x6c\x6f\x63\x94\x8c\x04\x61\x64\x64\x72\x94\x4b\x10\x8c\x04\x73"
                     "\x69\x7a\x65\x94\x4b\x08\x75\x61\x61\x73\x2e";
                 return ParseAnyTrace(std::string(kSnap, sizeof(kSnap) - 1), "snap.pickle").status();
               }});
  c.push_back({"T10", "RMM log: free of an unknown pointer", "`free,0x20,16,0x0` with no allocate of 0x20", Code::kInvalidArgument, "rmm.csv:2: free of 0x20, which is not live (no allocate of it before)",
               [] { return ParseAnyTrace("Thread,Time,Action,Pointer,Size,Stream\n1,12:00:00.000001,free,0x20,16,0x0\n", "rmm.csv").status(); }});
  c.push_back({"T11", "RMM log: bad number", "`allocate,0x10,lots,0x0`", Code::kInvalidArgument, "rmm.csv:2: bad size \"lots\" (decimal bytes)",
               [] { return ParseAnyTrace("Thread,Time,Action,Pointer,Size,Stream\n1,12:00:00.000001,allocate,0x10,lots,0x0\n", "rmm.csv").status(); }});
  c.push_back({"T12", "RMM log: unknown action", "`reallocate,0x10,16,0x0`", Code::kInvalidArgument, "rmm.csv:2: unknown action \"reallocate\" (expected allocate, free or allocate failure)",
               [] { return ParseAnyTrace("Thread,Time,Action,Pointer,Size,Stream\n1,12:00:00.000001,reallocate,0x10,16,0x0\n", "rmm.csv").status(); }});
  c.push_back({"T13", "RMM log: bytes at the null pointer", "`allocate,(nil),16,0`", Code::kInvalidArgument, "rmm.csv:2: allocate of 16 bytes at the null pointer (only 0 bytes may be)",
               [] { return ParseAnyTrace("Thread,Time,Action,Pointer,Size,Stream\n1,12:00:00.000001,allocate,(nil),16,0\n", "rmm.csv").status(); }});
  c.push_back(
      {"T14", "gzip: truncated", "the first 20 bytes of `x.trace.gz`", Code::kInvalidArgument,
       "x.trace.gz: the gzip stream ends early (truncated after 20 bytes",
       [] { return ParseAnyTrace(Gzip("a 1 100\nf 1\n").substr(0, 20), "x.trace.gz").status(); }});
  c.push_back(
      {"T15", "gzip: inflates past the cap", "8 MiB of zeros in 8 KiB, a 1 MiB cap",
       Code::kResourceExhausted,
       "bomb.gz: inflates to more than 1 MiB (1048576 bytes), the most this input may hold",
       [] { return Gunzip(Gzip(std::string(8 << 20, '\0')), 1 << 20, "bomb.gz").status(); }});
  c.push_back({"T16", "gzip: compressed twice", "`gzip -c x.trace.gz > x.gz`",
               Code::kInvalidArgument,
               "x.gz: compressed twice (gzip inside gzip); gunzip it once first",
               [] { return ParseAnyTrace(Gzip(Gzip("a 1 8\nf 1\n")), "x.gz").status(); }});
  c.push_back({"T17", "zip: truncated", "the first 60 bytes of `snap.pt` (torch.save)",
               Code::kInvalidArgument,
               "snap.pt: zip archive: no end of central directory record (truncated, or not a zip "
               "archive)",
               [] {
                 return ParseAnyTrace(TorchSave(std::string("\x80\x02}.", 4)).substr(0, 60),
                                      "snap.pt")
                     .status();
               }});
  c.push_back({"T18", "zip: several logs", "`zip logs.zip a.trace b.csv`", Code::kInvalidArgument,
               "logs.zip: a zip archive of 2 files without a torch.save data.pkl (\"a.trace\", "
               "\"b.csv\"): which log to read is not clear; unzip it and give the one log",
               [] {
                 return ParseAnyTrace(Zip({{"a.trace", "a 1 8\nf 1\n"}, {"b.csv", "x"}}),
                                      "logs.zip")
                     .status();
               }});
  c.push_back({"T19", "zip: corrupt member", "a byte of the stored `a.trace` changed",
               Code::kInvalidArgument, "c.zip: zip member \"a.trace\": CRC-32 ", [] {
                 std::string z = Zip({{"a.trace", "a 1 8\nf 1\n"}});
                 z[30 + 7] = 'b';
                 return ParseAnyTrace(z, "c.zip").status();
               }});
  c.push_back(
      {"T20", "zip: compression not read", "`zip -Z bzip2` (method 12)", Code::kInvalidArgument,
       "b.zip: zip member \"a.trace\" is compressed with method 12 (bzip2); only stored (0) "
       "and deflated (8) members are read: re-zip it with the default",
       [] {
         std::string z = Zip({{"a.trace", "a 1 8\nf 1\n"}});
         z[8] = z[z.find(std::string("PK\x01\x02", 4)) + 10] = 12;
         return ParseAnyTrace(z, "b.zip").status();
       }});
  c.push_back({"T21", "TensorFlow log: malformed record",
               "`__LOG_MEMORY__ MemoryLogRawAllocation { num_bytes 8 }`", Code::kInvalidArgument,
               "tf.log:1: \"MemoryLogRawAllocation\": expected ':' or '{' after \"num_bytes\" at "
               "column 51",
               [] {
                 return ParseAnyTrace("__LOG_MEMORY__ MemoryLogRawAllocation { num_bytes 8 }\n",
                                      "tf.log")
                     .status();
               }});
  c.push_back({"T22", "TensorFlow log: allocation id reused while live",
               "two `MemoryLogRawAllocation` of `allocation_id: 1`, no free between",
               Code::kInvalidArgument,
               "tf.log:2: allocation id 1 of GPU_0_bfc allocated again while live (since line 1)",
               [] {
                 const std::string a =
                     "__LOG_MEMORY__ MemoryLogRawAllocation { num_bytes: 8 allocation_id: 1 "
                     "allocator_name: \"GPU_0_bfc\" }\n";
                 return ParseAnyTrace(a + a, "tf.log").status();
               }});
  c.push_back(
      {"T23", "PyTorch profiler trace: no memory events",
       "`export_chrome_trace` of a profile without `profile_memory=True`", Code::kInvalidArgument,
       "trace.json: no [memory] events: profile with "
       "torch.profiler.profile(profile_memory=True)",
       [] {
         return ParseAnyTrace(R"({"traceEvents": [{"name": "aten::mm", "ph": "X"}]})", "trace.json")
             .status();
       }});
  c.push_back(
      {"T24", "PyTorch profiler trace: truncated",
       "`{\"traceEvents\": [{\"name\": \"[memory]` (the file cut short)", Code::kInvalidArgument,
       "trace.json: invalid JSON at byte 26: unterminated string", [] {
         return ParseAnyTrace(R"({"traceEvents": [{"name": "[memory])", "trace.json").status();
       }});
  c.push_back({"T25", "log compressed with another tool", "`zstd snap.pickle` (magic 28 b5 2f fd)",
               Code::kInvalidArgument,
               "snap.pickle.zst: compressed with zstd, which is not read: decompress it first "
               "(zstd -d), or compress with gzip, which is read as it is",
               [] {
                 return ParseAnyTrace(std::string("\x28\xb5\x2f\xfd\x04\x58", 6), "snap.pickle.zst")
                     .status();
               }});
  return c;
}

TEST(BadInput, RuntimeAllocatorAndTraceCases) { RunCatalogue(RuntimeCases()); }
TEST(BadInput, DocumentListsRuntimeCases) { CheckDocumented(RuntimeCases()); }
TEST(BadInput, DISABLED_Print) { PrintCatalogue(RuntimeCases()); }

}  // namespace
}  // namespace vgpu::testing
