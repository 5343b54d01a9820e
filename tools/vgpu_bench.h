// Shared pieces of vgpu-bench: the parsed command line, the tuning knobs, the fake-address
// device replays run on, and MakeBenchAllocator, which hands all of them to the one allocator
// factory (allocator/factory.h; a new allocator kind needs no edit here).
//
// Thread safety: the functions here are reentrant; FakeAddressExecutor is safe from any thread
// (atomic counters).
#ifndef VGPU_TOOLS_VGPU_BENCH_H_
#define VGPU_TOOLS_VGPU_BENCH_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "vgpu/allocator/allocator.h"
#include "vgpu/allocator/factory.h"
#include "vgpu/allocator/trace.h"
#include "vgpu/runtime/platform.h"

namespace vgpu::bench {

// Allocator tuning knobs (docs/allocator.md, docs/vmm.md "Tuning knobs"): each is a VGPU_*
// variable and a vgpu-bench flag; unset = the allocator's default.
struct BenchTuning {
  std::optional<uint64_t> bfc_small_request_bytes;        // VGPU_BFC_SMALL_REQUEST_BYTES, 0..1 TiB
  std::optional<uint64_t> bfc_small_from_top_bytes;       // VGPU_BFC_SMALL_FROM_TOP_BYTES, 0..1 TiB
  std::optional<uint64_t> bfc_small_from_top_hole_bytes;  // VGPU_BFC_SMALL_FROM_TOP_HOLE_BYTES
  std::optional<uint64_t> bfc_min_split_bytes;            // VGPU_BFC_MIN_SPLIT_BYTES, 1 B..1 TiB
  std::optional<double> bfc_min_split_fraction;           // VGPU_BFC_MIN_SPLIT_FRACTION, [0, 1]
  std::optional<bool> bfc_park_slivers;                   // VGPU_BFC_PARK_SLIVERS, 0 or 1
  std::optional<bool> bfc_reclaim_slivers;                // VGPU_BFC_RECLAIM_SLIVERS, 0 or 1
  std::optional<bool> bfc_gather_pages;                   // VGPU_BFC_GATHER_PAGES, 0 or 1
  std::optional<uint64_t> bfc_segment_bytes;              // VGPU_BFC_SEGMENT_BYTES, 0 = off
  std::optional<uint64_t> bfc_segment_waste_divisor;      // VGPU_BFC_SEGMENT_WASTE_DIVISOR, 0..2^20
  // VGPU_BFC_SEGMENT_WASTE_DIVISOR_BEFORE_FREE, 0..2^20
  std::optional<uint64_t> bfc_segment_waste_divisor_before_free;
  std::optional<uint64_t> vmm_slab_bytes;             // VGPU_VMM_SLAB_BYTES, k x 2 MiB, <= 1 TiB
  std::optional<uint64_t> vmm_page_bytes;             // VGPU_VMM_PAGE_BYTES, 2^k x 2 MiB, <= 1 GiB
  std::optional<uint64_t> vmm_small_block_max;        // VGPU_VMM_SMALL_BLOCK_MAX, 1 B..slab
  std::optional<bool> vmm_reclaim_slivers;            // VGPU_VMM_RECLAIM_SLIVERS, 0 or 1
  std::optional<bool> vmm_mid_blocks;                 // VGPU_VMM_MID_BLOCKS, 0 or 1
  std::optional<bool> vmm_inner_blocks;               // VGPU_VMM_INNER_BLOCKS, 0 or 1
  std::optional<bool> vmm_edge_best_fit;              // VGPU_VMM_EDGE_BEST_FIT, 0 or 1
  std::optional<uint64_t> vmm_whole_granule_divisor;  // VGPU_VMM_WHOLE_GRANULE_DIVISOR, 0..2^20
  // Sets the knobs that are given on the allocator factory's options.
  void ApplyTo(DeviceAllocatorOptions& options) const;
};
struct BenchArgs {
  std::string command;     // replay | convert | plan | alloc | allreduce
  std::string trace_path;  // replay, convert (IN)
  std::string allocator = "bfc";
  // replay: --allocator or --allocators was given. A recorded workload (a PyTorch snapshot or
  // profiler trace, an RMM or TensorFlow log) replayed with neither compares bfc and vmm.
  bool allocator_given = false;
  bool allow_growth = false;
  std::optional<uint64_t> limit;
  // replay: --limit N% (of the trace's peak live bytes) instead of a size.
  std::optional<double> limit_percent;
  bool min_limit = false;
  bool min_limit_given = false;  // replay: --min-limit was given (on or off)
  bool baseline = true;          // replay: time malloc/free of the same sizes (in a child process)
  // replay: time the calibration trace on the best-fit reference allocator after each timed
  // run (tools/bench_reference.h): "calibration_ns_per_op", the machine's speed in the run.
  bool calibrate = false;
  std::string platform;  // "" = fake addresses (replay) / host (alloc)
  std::string memory_history_path;
  // replay: write the allocator's memory log at the first allocation that fails (one scan step
  // under the min limit with --min-limit, else at --limit) to this file (--failure-log).
  std::string failure_log_path;
  // replay: compare these allocators (--allocators bfc,vmm); empty = the one --allocator.
  std::vector<std::string> allocators;
  std::optional<int> device;  // --device: a PyTorch snapshot's device
  int device_value = 0;       // (the flag's storage)
  std::string output_path;    // convert (OUT)
  // plan
  std::vector<std::string> trace_paths;
  std::optional<uint64_t> card;
  double headroom_percent = 5;
  uint64_t reserve = 0;
  // Device memory the runtime takes inside each logical device's limit before the workload
  // (the BLAS library's workspace: cuBLAS's 32 MiB on compute capability 9.0 and later).
  uint64_t workspace = uint64_t{32} << 20;
  // "speed": the fastest policy that fits the card (bfc before vmm, growth off before on: on a
  // card vmm's map calls and bfc's segments cost driver calls, docs/gpu-results.md);
  // "memory": the smallest total.
  std::string prefer = "speed";
  std::vector<std::string> passthrough;  // other --flags (Google Benchmark's)
  // allreduce
  int devices = 4;
  uint64_t size = uint64_t{64} << 20;  // bytes per replica
  std::string algorithm = "auto";
  int iterations = 10;
  // Tuning-knob flags given (env var name -> value): they override the environment.
  std::vector<std::pair<std::string, std::string>> tuning;
  // The knobs in effect (environment, then flags), set by main from ReadBenchTuning.
  BenchTuning tuning_values;
  bool help = false;  // --help: print usage (on stdout) and exit 0
  std::string usage;  // the usage of the command (or of the tool when no command was parsed)
};

// Parses argv (without argv[0]) with tools/flags.h's rules; InvalidArgument naming the flag on
// bad input (the caller adds BenchUsage()). Never exits.
absl::StatusOr<BenchArgs> ParseBenchArgs(const std::vector<std::string>& argv);
// The whole tool's usage.
std::string BenchUsage();

// The granule of vgpu-bench's fake-address VMM (a slab is a whole number of them).
inline constexpr uint64_t kBenchVmmGranule = uint64_t{2} << 20;
// Reads and checks the knobs through `getenv` (std::getenv in the tool), then applies the knob
// flags in `args.tuning` over them (a flag overrides its variable); nothing is written back to
// the environment. InvalidArgument in the project's format, e.g.
// VGPU_BFC_MIN_SPLIT_BYTES="1MiBx": invalid byte size ...
absl::StatusOr<BenchTuning> ReadBenchTuning(const std::function<const char*(const char*)>& getenv,
                                            const BenchArgs& args = BenchArgs());

// A device that only hands out addresses and never has memory behind them: Allocate bumps
// 256-aligned addresses up from 1 TiB, and the VMM calls of `granularity` (0: none) keep lock-
// free counters only (no validation), so a 100 GiB trace replays on any machine and the replay
// measures the allocator, not this. `physical_capacity` (0 = unlimited) makes
// CreatePhysicalMemory fail with ResourceExhausted past that many bytes, like a full card.
// Streams order nothing (no work runs: copies and memsets are Unimplemented) and events are
// complete at once, enough to replay traces with several streams; BLAS and kernels are
// Unimplemented. The tests' checked fake
// (tests/fake_vmm_executor.h) builds on it.
class FakeAddressExecutor : public Executor {
 public:
  // Far from anything real, so a stray write faults.
  static constexpr uint64_t kDefaultVaBase = uint64_t{0x7e00} << 32;
  explicit FakeAddressExecutor(uint64_t granularity, uint64_t physical_capacity = 0,
                               uint64_t va_base = kDefaultVaBase);

  Platform* platform() const override;  // "fake", with no devices of its own
  int ordinal() const override { return 0; }
  absl::StatusOr<PhysicalDeviceInfo> Describe() override;
  absl::StatusOr<void*> Allocate(uint64_t bytes) override;
  absl::Status Free(void* ptr) override;
  absl::StatusOr<void*> HostAllocate(uint64_t bytes) override;
  absl::Status HostFree(void* ptr) override;
  absl::StatusOr<uint64_t> VirtualMemoryGranularity() override;
  absl::StatusOr<void*> ReserveAddressRange(uint64_t bytes) override;
  absl::Status FreeAddressRange(void* va, uint64_t bytes) override;
  absl::StatusOr<PhysicalMemoryHandle> CreatePhysicalMemory(uint64_t bytes) override;
  absl::Status ReleasePhysicalMemory(PhysicalMemoryHandle handle) override;
  // One capacity update and one handle range for the whole batch.
  absl::StatusOr<size_t> CreatePhysicalMemories(uint64_t bytes, size_t n,
                                                PhysicalMemoryHandle* out) override;
  absl::Status ReleasePhysicalMemories(const PhysicalMemoryHandle* handles, size_t n,
                                       size_t* released) override;
  absl::Status Map(void* va, uint64_t bytes, PhysicalMemoryHandle handle, uint64_t offset) override;
  absl::Status MapAll(void* va, const PhysicalMemoryHandle* handles, size_t n) override;
  absl::Status Unmap(void* va, uint64_t bytes) override;
  std::pair<int, int> StreamPriorityRange() const override { return {0, 0}; }
  absl::StatusOr<std::vector<int>> PartitionSms(absl::Span<const int> sm_counts) override;
  absl::StatusOr<std::unique_ptr<Stream>> CreateStream(const StreamOptions& options) override;
  absl::StatusOr<std::unique_ptr<Event>> CreateEvent() override;
  bool CanAccessPeer(const Executor&) const override { return false; }
  absl::StatusOr<Blas*> GetBlas() override;
  absl::StatusOr<Kernels*> GetKernels() override;

  uint64_t granularity() const { return granularity_; }
  uint64_t physical_bytes() const { return physical_bytes_.load(); }  // created, not released
  uint64_t mapped_bytes() const { return mapped_bytes_.load(); }      // currently mapped
  uint64_t reserved_ranges() const { return ranges_.load(); }

 protected:
  // InvalidArgument unless `bytes` is a positive multiple of the granularity. Inline for the
  // usual power-of-two granule: it runs once per granule mapped, and the fake device's cost is
  // the harness's, not the allocator's.
  absl::Status CheckGranular(const char* what, uint64_t bytes) const {
    const uint64_t g = granularity();
    if (bytes != 0 && (g & (g - 1)) == 0 && (bytes & (g - 1)) == 0) return absl::OkStatus();
    return CheckGranularSlow(what, bytes);
  }
  absl::Status CheckGranularSlow(const char* what, uint64_t bytes) const;
  absl::Status RefuseCreate(uint64_t bytes, uint64_t created) const;
  uint64_t physical_capacity() const { return physical_capacity_; }
  uint64_t NextRange(uint64_t bytes);  // a fresh fake range's address
  uint64_t NextHandle() { return next_handle_++; }

  // Counters of both modes (the checked fake keeps them under its lock).
  std::atomic<uint64_t> physical_bytes_{0};
  std::atomic<uint64_t> mapped_bytes_{0};
  std::atomic<uint64_t> ranges_{0};

 private:
  const uint64_t granularity_;
  const uint64_t physical_capacity_;
  std::atomic<uint64_t> next_va_;
  std::atomic<uint64_t> next_handle_{1};
  std::atomic<uint64_t> next_raw_{uint64_t{1} << 40};
};

struct BenchAllocatorSpec {
  std::string kind = "bfc";  // bfc | vmm | async (async needs an executor)
  std::string name = "bench";
  uint64_t limit = 0;
  bool allow_growth = false;
  Executor* executor = nullptr;  // nullptr: fake addresses, no memory touched
  BenchTuning tuning;            // checked by main before anything runs
};
// An allocator and the fake-address device it runs on when the spec names no executor (the
// allocator is destroyed first).
struct BenchAllocator {
  std::unique_ptr<FakeAddressExecutor> fake_device;
  std::unique_ptr<Allocator> allocator;
};
// The allocator a benchmark runs for `spec.kind`, built by the one allocator factory
// (allocator/factory.h) from the spec's options and knobs.
absl::StatusOr<BenchAllocator> MakeBenchAllocator(const BenchAllocatorSpec& spec);

// The executor of device 0 of `platform` ("host" or "cuda"); a clear error when the platform
// has no device.
absl::StatusOr<Executor*> BenchExecutor(const std::string& platform);

// The smallest limit `spec`'s allocator can be built with: 256 bytes for bfc and async; for
// vmm one of its pages (--vmm-page-bytes, else the device's VMM granularity: 2 MiB on the
// fake-address device), since it maps whole pages. A workload smaller than that still needs it.
absl::StatusOr<uint64_t> AllocatorFloorBytes(const BenchAllocatorSpec& spec);

// The limit scan of `replay --min-limit` (and `plan`): limits (1 + k/200) x peak live for
// k = 0, 1, ... up to 11x, each raised to AllocatorFloorBytes and replayed once on a fresh
// allocator; the min limit is the first of 20 consecutive limits that fit (fitting is not
// monotone in the limit, so no bisection). A workload below the floor needs the floor: its
// ratio is then floor / peak live, off the grid.
struct MinLimitScan {
  std::optional<uint64_t> min_limit_bytes;  // unset: never 20 fits in a row up to 11x
  std::optional<double> min_limit_ratio;    // min_limit_bytes / peak live (on the scan's grid)
  std::optional<double> first_fit_ratio;    // the first limit that fit at all
  // The scan's step just under min_limit_bytes, where the trace did not fit; unset when the
  // min limit is the scan's first step (the peak live bytes, or the allocator's floor).
  std::optional<uint64_t> below_min_limit_bytes;
};
absl::StatusOr<MinLimitScan> ScanMinLimit(const Trace& trace, const BenchAllocatorSpec& spec);
// Replays `trace` once at `limit` on a fresh allocator of `spec`: whether every allocation
// succeeded (one step of the scan).
absl::StatusOr<bool> ReplayFits(const Trace& trace, BenchAllocatorSpec spec, uint64_t limit);
// Reads a trace in any format (allocator/trace_import.h) for a vgpu-bench command, printing
// what the importer chose to stderr; the error is printed as "vgpu-bench COMMAND: ...".
std::optional<Trace> ReadBenchTrace(const std::string& command, const std::string& path,
                                    std::optional<int> device);

int RunReplay(const BenchArgs& args);
int RunConvert(const BenchArgs& args);
int RunPlan(const BenchArgs& args);
int RunAlloc(const BenchArgs& args, int argc, char** argv);
int RunAllReduce(const BenchArgs& args);

}  // namespace vgpu::bench

#endif  // VGPU_TOOLS_VGPU_BENCH_H_
