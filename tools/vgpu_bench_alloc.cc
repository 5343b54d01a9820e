// vgpu-bench alloc: Google Benchmark of alloc/free pairs (256 B, 1 MiB, 64 MiB and mixed
// sizes; 1 and 8 threads) on our allocator against the raw device allocation calls
// (Executor::Allocate/Free, i.e. cuMemAlloc/cuMemFree on cuda) as the baseline.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/json.h"
#include "vgpu/tools/vgpu_bench.h"

namespace vgpu::bench {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

Executor* g_executor = nullptr;
Allocator* g_allocator = nullptr;
std::vector<uint64_t>* g_mixed = nullptr;  // log-uniform 256 B .. 4 MiB

void Fail(benchmark::State& state, const absl::Status& s) {
  state.SkipWithError(std::string(s.message()).c_str());
}

void BM_Ours(benchmark::State& state, uint64_t bytes) {
  size_t i = static_cast<size_t>(state.thread_index()) * 7919;
  for (auto _ : state) {
    uint64_t n = bytes != 0 ? bytes : (*g_mixed)[i++ % g_mixed->size()];
    absl::StatusOr<void*> p = g_allocator->AllocateRaw(n);
    if (!p.ok()) {
      Fail(state, p.status());
      break;
    }
    benchmark::DoNotOptimize(*p);
    absl::Status s = g_allocator->Deallocate(*p);
    if (!s.ok()) {
      Fail(state, s);
      break;
    }
  }
}

void BM_Raw(benchmark::State& state, uint64_t bytes) {
  size_t i = static_cast<size_t>(state.thread_index()) * 7919;
  for (auto _ : state) {
    uint64_t n = bytes != 0 ? bytes : (*g_mixed)[i++ % g_mixed->size()];
    absl::StatusOr<void*> p = g_executor->Allocate(n);
    if (!p.ok()) {
      Fail(state, p.status());
      break;
    }
    benchmark::DoNotOptimize(*p);
    absl::Status s = g_executor->Free(*p);
    if (!s.ok()) {
      Fail(state, s);
      break;
    }
  }
}

// Forwards to the console and keeps every run for the JSON line.
class CollectingReporter : public benchmark::ConsoleReporter {
 public:
  explicit CollectingReporter(OutputOptions options) : ConsoleReporter(options) {}
  struct Row {
    std::string name;
    int threads;
    double ns;
    bool error;
  };
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      rows.push_back({r.benchmark_name(), static_cast<int>(r.threads), r.GetAdjustedRealTime(),
                      r.error_occurred});
    }
    ConsoleReporter::ReportRuns(runs);
  }
  std::vector<Row> rows;
};

}  // namespace

int RunAlloc(const BenchArgs& args, int argc, char** argv) {
  std::string platform = args.platform.empty() ? "host" : args.platform;
  absl::StatusOr<Executor*> e = BenchExecutor(platform);
  if (!e.ok()) {
    std::fprintf(stderr, "vgpu-bench alloc: --platform %s: %s\n", platform.c_str(),
                 e.status().ToString().c_str());
    return 1;
  }
  g_executor = *e;
  BenchAllocatorSpec spec;
  spec.kind = args.allocator;
  spec.name = "bench/alloc";
  spec.limit = args.limit ? *args.limit : 2048 * kMiB;
  spec.allow_growth = true;
  spec.executor = g_executor;
  spec.tuning = args.tuning_values;
  absl::StatusOr<BenchAllocator> a = MakeBenchAllocator(spec);
  if (!a.ok()) {
    std::fprintf(stderr, "vgpu-bench alloc: %s\n", a.status().ToString().c_str());
    return 1;
  }
  g_allocator = a->allocator.get();
  std::vector<uint64_t> mixed(4096);
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> u(std::log(256.0), std::log(4.0 * kMiB));
  for (uint64_t& n : mixed) n = static_cast<uint64_t>(std::exp(u(rng)));
  g_mixed = &mixed;

  struct Size {
    const char* name;
    uint64_t bytes;
  };
  for (Size s :
       {Size{"256B", 256}, Size{"1MiB", kMiB}, Size{"64MiB", 64 * kMiB}, Size{"mixed", 0}}) {
    for (int threads : {1, 8}) {
      benchmark::RegisterBenchmark(absl::StrCat(args.allocator, "/", s.name).c_str(), BM_Ours,
                                   s.bytes)
          ->Threads(threads)
          ->UseRealTime();
      benchmark::RegisterBenchmark(absl::StrCat("raw/", s.name).c_str(), BM_Raw, s.bytes)
          ->Threads(threads)
          ->UseRealTime();
    }
  }
  // Google Benchmark sees only its own flags.
  std::vector<std::string> keep = args.passthrough;
  std::vector<char*> bargv = {argv[0]};
  for (std::string& f : keep) bargv.push_back(f.data());
  int bargc = static_cast<int>(bargv.size());
  benchmark::Initialize(&bargc, bargv.data());
  CollectingReporter reporter(isatty(fileno(stdout)) ? benchmark::ConsoleReporter::OO_Defaults
                                                     : benchmark::ConsoleReporter::OO_Tabular);
  // No colour codes when the output is not a terminal: the last line must be plain JSON.
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();

  JsonWriter w;
  w.BeginObject();
  w.Field("benchmark", "alloc");
  w.Field("platform", platform);
  w.Field("allocator", args.allocator);
  w.Key("results").BeginArray();
  double ours_1mib = 0, raw_1mib = 0;
  for (const auto& r : reporter.rows) {
    w.BeginObject();
    w.Field("name", r.name);
    w.Field("threads", r.threads);
    w.Field("ns_per_pair", r.ns);
    w.Field("error", r.error);
    w.EndObject();
    if (r.threads == 1 && r.name.find("/1MiB") != std::string::npos) {
      (r.name.rfind("raw/", 0) == 0 ? raw_1mib : ours_1mib) = r.ns;
    }
  }
  w.EndArray();
  w.Key("speedup_1MiB");
  if (ours_1mib > 0 && raw_1mib > 0)
    w.Double(raw_1mib / ours_1mib);
  else
    w.Null();
  w.EndObject();
  g_allocator = nullptr;
  a->allocator.reset();
  std::printf("%s\n", w.str().c_str());
  return 0;
}

}  // namespace vgpu::bench
