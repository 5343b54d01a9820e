// Shared pieces of vgpu-bench: the parsed command line and the one place that builds an
// allocator of a given kind for a benchmark (extend MakeBenchAllocator for a new kind).
//
// Thread safety: the functions here are reentrant.
#ifndef VGPU_TOOLS_VGPU_BENCH_H_
#define VGPU_TOOLS_VGPU_BENCH_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "allocator/allocator.h"
#include "runtime/platform.h"

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
};

// Parses argv (without argv[0]); InvalidArgument with a usage hint on bad input.
absl::StatusOr<BenchArgs> ParseBenchArgs(const std::vector<std::string>& argv);

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
