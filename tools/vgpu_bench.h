// Shared pieces of vgpu-bench: the parsed command line and the one place that builds an
// allocator of a given kind for a benchmark (extend MakeBenchAllocator for a new kind).
//
// Thread safety: the functions here are reentrant.
#ifndef VGPU_TOOLS_VGPU_BENCH_H_
#define VGPU_TOOLS_VGPU_BENCH_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "vgpu/allocator/allocator.h"
#include "vgpu/runtime/platform.h"

namespace vgpu::bench {

struct BenchArgs {
  std::string command;     // replay | alloc | allreduce
  std::string trace_path;  // replay
  std::string allocator = "bfc";
  bool allow_growth = false;
  std::optional<uint64_t> limit;
  bool min_limit = false;
  bool baseline = true;  // replay: time malloc/free of the same sizes (in a child process)
  std::string platform;  // "" = fake addresses (replay) / host (alloc)
  std::string memory_history_path;
  std::vector<std::string> passthrough;  // other --flags (Google Benchmark's)
  // allreduce
  int devices = 4;
  uint64_t size = uint64_t{64} << 20;  // bytes per replica
  std::string algorithm = "auto";
  int iterations = 10;
  // Tuning-knob flags given (env var name -> value): they override the environment.
  std::vector<std::pair<std::string, std::string>> tuning;
  bool help = false;  // --help: print usage (on stdout) and exit 0
  std::string usage;  // the usage of the command (or of the tool when no command was parsed)
};

// Parses argv (without argv[0]) with tools/flags.h's rules; InvalidArgument naming the flag on
// bad input (the caller adds BenchUsage()). Never exits.
absl::StatusOr<BenchArgs> ParseBenchArgs(const std::vector<std::string>& argv);
// The whole tool's usage.
std::string BenchUsage();

// Allocator tuning knobs (docs/allocator.md, docs/vmm.md "Tuning knobs"): each is a VGPU_*
// variable and a vgpu-bench flag; unset = the allocator's default.
struct BenchTuning {
  std::optional<uint64_t> bfc_small_request_bytes;  // VGPU_BFC_SMALL_REQUEST_BYTES, 0..1 TiB
  std::optional<uint64_t> bfc_min_split_bytes;      // VGPU_BFC_MIN_SPLIT_BYTES, 1 B..1 TiB
  std::optional<double> bfc_min_split_fraction;     // VGPU_BFC_MIN_SPLIT_FRACTION, [0, 1]
  std::optional<uint64_t> vmm_slab_bytes;           // VGPU_VMM_SLAB_BYTES, k x 2 MiB, <= 1 TiB
  std::optional<uint64_t> vmm_small_block_max;      // VGPU_VMM_SMALL_BLOCK_MAX, 1 B..slab
};
// The granule of vgpu-bench's fake-address VMM (a slab is a whole number of them).
inline constexpr uint64_t kBenchVmmGranule = uint64_t{2} << 20;
// Reads and checks the knobs through `getenv` (std::getenv in the tool). InvalidArgument in the
// project's format, e.g. VGPU_BFC_MIN_SPLIT_BYTES="1MiBx": invalid byte size ...
absl::StatusOr<BenchTuning> ReadBenchTuning(const std::function<const char*(const char*)>& getenv);

struct BenchAllocatorSpec {
  std::string kind = "bfc";  // bfc | vmm | async (async needs an executor)
  std::string name = "bench";
  uint64_t limit = 0;
  bool allow_growth = false;
  Executor* executor = nullptr;  // nullptr: fake addresses, no memory touched
};
// THE hook: the allocator a benchmark runs for `spec.kind`.
absl::StatusOr<std::unique_ptr<Allocator>> MakeBenchAllocator(const BenchAllocatorSpec& spec);

// The executor of device 0 of `platform` ("host" or "cuda"); a clear error when the platform
// has no device.
absl::StatusOr<Executor*> BenchExecutor(const std::string& platform);

int RunReplay(const BenchArgs& args);
int RunAlloc(const BenchArgs& args, int argc, char** argv);
int RunAllReduce(const BenchArgs& args);

}  // namespace vgpu::bench

#endif  // VGPU_TOOLS_VGPU_BENCH_H_
