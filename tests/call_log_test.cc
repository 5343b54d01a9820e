// The call log (runtime/cuda/call_log.h, VGPU_CUDA_CALL_LOG): how arguments and results are
// written, one whole line per call from any thread, and that the cuda platform's loaders log
// every Driver API, cuBLAS and NCCL call they make (driver: the fake libcuda; cuBLAS and NCCL:
// the CUDA simulator's libraries, when built). The log is switched on for this whole binary
// before main, as the variable is read once per process.
#include "vgpu/runtime/cuda/call_log.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/status_matchers.h"

#if VGPU_HAVE_CUDA
#include "vgpu/runtime/cuda/cuda_driver.h"
#include "vgpu/runtime/cuda/cuda_platform.h"
#include "vgpu/runtime/nccl.h"
#include "vgpu/runtime/platform.h"
#endif

namespace vgpu::cuda::call_log {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ContainsRegex;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::MatchesRegex;
using ::testing::SizeIs;
using ::vgpu::testing::IsOk;

// The log file, set before anything reads the variable.
const std::string& LogPath() {
  static const std::string* path = [] {
    auto* p = new std::string((std::filesystem::temp_directory_path() /
                               ("vgpu_call_log_test_" + std::to_string(getpid()) + ".log"))
                                  .string());
    std::filesystem::remove(*p);
    setenv(kCallLogEnv, p->c_str(), 1);
    return p;
  }();
  return *path;
}
[[maybe_unused]] const bool kLogSet = !LogPath().empty();

// Removes the log when the binary is done.
class RemoveLog : public ::testing::Environment {
 public:
  void TearDown() override { std::filesystem::remove(LogPath()); }
};
[[maybe_unused]] ::testing::Environment* const kRemoveLog =
    ::testing::AddGlobalTestEnvironment(new RemoveLog);

std::vector<std::string> LogLines() {
  std::ifstream in(LogPath());
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Lines logged since `before` lines were there.
std::vector<std::string> LinesSince(size_t before) {
  std::vector<std::string> all = LogLines();
  if (before > all.size()) return {};
  return std::vector<std::string>(all.begin() + before, all.end());
}

enum class Color { kRed = 3 };

TEST(CallLogFormatTest, Scalars) {
  EXPECT_EQ(FormatArg(42, false), "42");
  EXPECT_EQ(FormatArg(-7, false), "-7");
  EXPECT_EQ(FormatArg(size_t{1048576}, false), "1048576");
  // CUdeviceptr is unsigned long long: hex, like an address.
  EXPECT_EQ(FormatArg(0x7f0000200000ull, false), "0x7f0000200000");
  EXPECT_EQ(FormatArg(Color::kRed, false), "3");
  EXPECT_EQ(FormatArg(true, false), "true");
  EXPECT_EQ(FormatArg(1.5f, false), "1.5");
}

TEST(CallLogFormatTest, Pointers) {
  int x = 5;
  EXPECT_EQ(FormatArg(static_cast<void*>(nullptr), false), "NULL");
  const std::string p = FormatArg(&x, false);
  EXPECT_THAT(p, MatchesRegex("0x[0-9a-f]+"));
  // An output parameter is read only after a successful call.
  EXPECT_EQ(FormatArg(&x, true), p + "->5");
  int* out_ptr = &x;
  EXPECT_THAT(FormatArg(&out_ptr, true), MatchesRegex("0x[0-9a-f]+->0x[0-9a-f]+"));
  // Never read through: const (inputs), float (may be a device array), char (a buffer).
  const int c = 1;
  EXPECT_EQ(FormatArg(&c, true).find("->"), std::string::npos);
  float f = 1;
  EXPECT_EQ(FormatArg(&f, true).find("->"), std::string::npos);
  char name[8] = "gpu";
  EXPECT_EQ(FormatArg(static_cast<char*>(name), true).find("->"), std::string::npos);
  int* null_out = nullptr;
  EXPECT_EQ(FormatArg(null_out, true), "NULL");
}

TEST(CallLogFormatTest, Strings) {
  EXPECT_EQ(FormatArg(static_cast<const char*>("vgpu_fill_f32"), false), "\"vgpu_fill_f32\"");
  EXPECT_EQ(FormatArg(static_cast<const char*>(nullptr), false), "NULL");
  EXPECT_EQ(FormatQuoted("a\"b\\c\n"), "\"a\\\"b\\\\c\\x0a\"");
  const std::string long_name(500, 'x');
  const std::string quoted = FormatQuoted(long_name.c_str());
  EXPECT_THAT(quoted, HasSubstr("...\""));
  EXPECT_LT(quoted.size(), 210u);
}

TEST(CallLogFormatTest, Struct) {
  struct Id {
    char bytes[128];
  } id{};
  EXPECT_EQ(FormatArg(id, false), "{128 bytes}");
}

TEST(CallLogFormatTest, CallLine) {
  int out = 9;
  const std::string line = FormatCall("cuFoo", "OK (0)", true, 3, &out);
  EXPECT_THAT(line, MatchesRegex("cuFoo\\(3, 0x[0-9a-f]+->9\\) = OK \\(0\\) \\[thread [0-9]+\\]"));
  EXPECT_THAT(FormatCall("ncclGroupStart", "ncclSuccess (0)", true),
              MatchesRegex("ncclGroupStart\\(\\) = ncclSuccess \\(0\\) \\[thread [0-9]+\\]"));
}

TEST(CallLogFormatTest, ThreadNumbersAreSmallAndDistinct) {
  const int mine = ThreadNumber();
  EXPECT_EQ(ThreadNumber(), mine);
  int other = 0;
  std::thread([&] { other = ThreadNumber(); }).join();
  EXPECT_GT(mine, 0);
  EXPECT_GT(other, 0);
  EXPECT_NE(mine, other);
}

// Stand-ins for vendor entry points.
enum TestResult { kTestOk = 0, kTestBad = 7 };
TestResult Divide(int a, int b, int* quotient) {
  if (b == 0) return kTestBad;
  *quotient = a / b;
  return kTestOk;
}
template <int N>
int Identity(int x) {
  return x + N;
}
const char* Describe(int code) { return code == 0 ? "fine" : "broken"; }

const ResultNamer<TestResult> kTestNamer{
    [](TestResult r) {
      return std::string(r == kTestOk ? "kTestOk" : "kTestBad") + " (" +
             std::to_string(static_cast<int>(r)) + ")";
    },
    [](TestResult r) { return r == kTestOk; }};

TEST(CallLogTest, WrappedFunctionLogsOneLinePerCall) {
  ASSERT_TRUE(Enabled()) << "the log should be on in this binary";
  struct DivideTag;
  auto divide = Wrap<DivideTag>("Divide", &Divide, kTestNamer);
  ASSERT_NE(divide, &Divide);
  const size_t before = LogLines().size();
  int q = 0;
  EXPECT_EQ(divide(7, 2, &q), kTestOk);
  EXPECT_EQ(q, 3);
  EXPECT_EQ(divide(7, 0, &q), kTestBad);
  const std::vector<std::string> lines = LinesSince(before);
  ASSERT_THAT(lines, SizeIs(2));
  EXPECT_THAT(lines[0], MatchesRegex("Divide\\(7, 2, 0x[0-9a-f]+->3\\) = kTestOk \\(0\\) "
                                     "\\[thread [0-9]+\\]"));
  // A failed call's output parameter is not read.
  EXPECT_THAT(lines[1], MatchesRegex("Divide\\(7, 0, 0x[0-9a-f]+\\) = kTestBad \\(7\\) "
                                     "\\[thread [0-9]+\\]"));
}

TEST(CallLogTest, StringResultsAreQuoted) {
  struct DescribeTag;
  auto describe = Wrap<DescribeTag>("Describe", &Describe);
  const size_t before = LogLines().size();
  EXPECT_STREQ(describe(1), "broken");
  EXPECT_THAT(LinesSince(before),
              ElementsAre(MatchesRegex("Describe\\(1\\) = \"broken\" \\[thread [0-9]+\\]")));
}

TEST(CallLogTest, SameFunctionTwiceSharesOneWrapper) {
  struct IdentityTag;
  auto a = Wrap<IdentityTag>("Identity", &Identity<0>);
  auto b = Wrap<IdentityTag>("Identity", &Identity<0>);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a(4), 4);
}

TEST(CallLogTest, DistinctLibrariesGetDistinctWrappersUntilSlotsRunOut) {
  // Eight implementations of one entry point (eight libraries) are each logged and each
  // call reaches its own implementation; a ninth is handed out unwrapped.
  struct SlotTag;
  std::vector<int (*)(int)> fns = {&Identity<1>, &Identity<2>, &Identity<3>,
                                   &Identity<4>, &Identity<5>, &Identity<6>,
                                   &Identity<7>, &Identity<8>, &Identity<9>};
  ASSERT_EQ(fns.size(), static_cast<size_t>(kSlotsPerEntryPoint) + 1);
  std::vector<int (*)(int)> wrapped;
  for (auto* fn : fns) wrapped.push_back(Wrap<SlotTag>("Slot", fn));
  for (int i = 0; i < kSlotsPerEntryPoint; ++i) {
    EXPECT_NE(wrapped[i], fns[i]) << i;
    EXPECT_EQ(wrapped[i](100), 100 + i + 1) << i;
  }
  EXPECT_EQ(wrapped.back(), fns.back());
}

TEST(CallLogTest, LinesFromManyThreadsStayWhole) {
  struct ThreadsTag;
  auto divide = Wrap<ThreadsTag>("ThreadedDivide", &Divide, kTestNamer);
  const size_t before = LogLines().size();
  constexpr int kThreads = 8, kCalls = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      int q = 0;
      for (int i = 0; i < kCalls; ++i) divide(1000 + t, 1, &q);
    });
  }
  for (std::thread& t : threads) t.join();
  const std::vector<std::string> lines = LinesSince(before);
  ASSERT_THAT(lines, SizeIs(kThreads * kCalls));
  for (const std::string& line : lines) {
    ASSERT_THAT(line, MatchesRegex("ThreadedDivide\\(10[0-9][0-9], 1, 0x[0-9a-f]+->10[0-9][0-9]\\)"
                                   " = kTestOk \\(0\\) \\[thread [0-9]+\\]"));
  }
}

#if VGPU_HAVE_CUDA && defined(VGPU_CUDASIM_LIBDIR)

TEST(CallLogDriverTest, EveryDriverCallIsLoggedWithArgumentsAndResult) {
  absl::StatusOr<std::unique_ptr<CudaDriver>> driver =
      LoadCudaDriver(std::string(VGPU_CUDASIM_LIBDIR) + "/libcuda.so.1");
  ASSERT_THAT(driver.status(), IsOk());
  const CudaDriver& d = **driver;
  const size_t before = LogLines().size();
  ASSERT_EQ(d.cuInit(0), CUDA_SUCCESS);
  int count = 0;
  ASSERT_EQ(d.cuDeviceGetCount(&count), CUDA_SUCCESS);
  CUcontext ctx = nullptr;
  ASSERT_EQ(d.cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.cuCtxSetCurrent(ctx), CUDA_SUCCESS);
  CUdeviceptr ptr = 0;
  ASSERT_EQ(d.cuMemAlloc(&ptr, 1 << 20), CUDA_SUCCESS);
  ASSERT_EQ(d.cuMemFree(ptr), CUDA_SUCCESS);
  EXPECT_NE(d.cuDeviceGet(nullptr, 99), CUDA_SUCCESS);  // a failing call is logged too
  ASSERT_EQ(d.cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  const std::vector<std::string> lines = LinesSince(before);
  ASSERT_THAT(lines, SizeIs(8)) << ::testing::PrintToString(lines);
  EXPECT_THAT(lines[0], MatchesRegex("cuInit\\(0\\) = CUDA_SUCCESS \\(0\\) \\[thread [0-9]+\\]"));
  EXPECT_THAT(lines[1], MatchesRegex("cuDeviceGetCount\\(0x[0-9a-f]+->" + std::to_string(count) +
                                     "\\) = CUDA_SUCCESS \\(0\\) \\[thread [0-9]+\\]"));
  EXPECT_THAT(lines[2], MatchesRegex("cuDevicePrimaryCtxRetain\\(0x[0-9a-f]+->0x[0-9a-f]+, 0\\)"
                                     " = CUDA_SUCCESS \\(0\\) .*"));
  char hex[32];
  std::snprintf(hex, sizeof(hex), "0x%llx", static_cast<unsigned long long>(ptr));
  EXPECT_THAT(lines[4], MatchesRegex("cuMemAlloc\\(0x[0-9a-f]+->" + std::string(hex) +
                                     ", 1048576\\) = CUDA_SUCCESS \\(0\\) .*"));
  EXPECT_THAT(lines[5], MatchesRegex("cuMemFree\\(" + std::string(hex) + "\\) = CUDA_SUCCESS .*"));
  EXPECT_THAT(lines[6], MatchesRegex("cuDeviceGet\\(NULL, 99\\) = CUDA_ERROR_[A-Z_]+ \\([0-9]+\\)"
                                     " .*"));
}

#ifdef VGPU_CUDASIM_LIBDIR
// The platform's cuBLAS and NCCL loaders log their calls too: the cuda platform on the
// simulator, one GEMM and one all-reduce over both devices of the small profile.
TEST(CallLogPlatformTest, CublasAndNcclCallsAreLogged) {
  const std::string dir = VGPU_CUDASIM_LIBDIR;
  setenv("VGPU_CUDASIM_PROFILE", "small", 1);
  setenv("VGPU_CUDA_DRIVER_LIBRARY", (dir + "/libcuda.so.1").c_str(), 1);
  setenv("VGPU_CUBLAS_LIBRARY", (dir + "/libcublas.so.13").c_str(), 1);
  setenv("VGPU_NCCL_LIBRARY", (dir + "/libnccl.so.2").c_str(), 1);
  std::unique_ptr<Platform> platform = CreateCudaPlatform();
  ASSERT_EQ(platform->DeviceCount(), 2) << platform->Summary();
  const size_t before = LogLines().size();
  Executor* e[2] = {*platform->GetExecutor(0), *platform->GetExecutor(1)};
  std::unique_ptr<Stream> s[2];
  float* buf[2];
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::unique_ptr<Stream>> stream = e[i]->CreateStream(StreamOptions{});
    ASSERT_THAT(stream.status(), IsOk());
    s[i] = *std::move(stream);
    absl::StatusOr<void*> p = e[i]->Allocate(64 * sizeof(float));
    ASSERT_THAT(p.status(), IsOk());
    buf[i] = static_cast<float*>(*p);
    ASSERT_THAT(s[i]->Memset32(buf[i], 0x3f800000, 64), IsOk());  // 1.0f
  }
  absl::StatusOr<Blas*> blas = e[0]->GetBlas();
  ASSERT_THAT(blas.status(), IsOk());
  ASSERT_THAT((*blas)->Sgemm(s[0].get(), Transpose::kNo, Transpose::kNo, 4, 4, 4, 1.0f, buf[0], 4,
                             buf[0] + 16, 4, 0.0f, buf[0] + 32, 4),
              IsOk());
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm = NcclCommunicator::Create({e[0], e[1]});
  ASSERT_THAT(comm.status(), IsOk());
  std::vector<AllReduceBuffer> buffers = {{s[0].get(), buf[0]}, {s[1].get(), buf[1]}};
  ASSERT_THAT((*comm)->AllReduce(buffers, 16, AllReduceOp::kSum), IsOk());
  for (int i = 0; i < 2; ++i) ASSERT_THAT(s[i]->Synchronize(), IsOk());
  const std::vector<std::string> lines = LinesSince(before);
  auto has = [&](const std::string& regex) {
    return std::count_if(lines.begin(), lines.end(), [&](const std::string& l) {
             return ::testing::Value(l, ContainsRegex(regex));
           }) > 0;
  };
  EXPECT_TRUE(
      has("^cublasCreate_v2\\(0x[0-9a-f]+->0x[0-9a-f]+\\) = CUBLAS_STATUS_SUCCESS \\(0\\)"));
  EXPECT_TRUE(
      has("^cublasSgemm_v2\\(0x[0-9a-f]+, 0, 0, 4, 4, 4, 0x[0-9a-f]+, 0x[0-9a-f]+, 4, "
          "0x[0-9a-f]+, 4, 0x[0-9a-f]+, 0x[0-9a-f]+, 4\\) = CUBLAS_STATUS_SUCCESS"));
  EXPECT_TRUE(has("^ncclCommInitAll\\(0x[0-9a-f]+->0x[0-9a-f]+, 2, 0x[0-9a-f]+\\) = ncclSuccess"));
  EXPECT_TRUE(has("^ncclGroupStart\\(\\) = ncclSuccess \\(0\\)"));
  EXPECT_TRUE(
      has("^ncclAllReduce\\(0x[0-9a-f]+, 0x[0-9a-f]+, 16, 7, [0-9], 0x[0-9a-f]+, "
          "0x[0-9a-f]+\\) = ncclSuccess"));
  EXPECT_TRUE(has("^cuMemsetD32Async\\("));
  for (const std::string& line : lines) {
    EXPECT_THAT(line, ContainsRegex("\\) = .* \\[thread [0-9]+\\]$")) << line;
  }
  for (int i = 0; i < 2; ++i) EXPECT_THAT(e[i]->Free(buf[i]), IsOk());
}
#endif  // VGPU_CUDASIM_LIBDIR

#endif  // VGPU_HAVE_CUDA

}  // namespace
}  // namespace vgpu::cuda::call_log
