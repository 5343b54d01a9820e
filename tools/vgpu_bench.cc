// vgpu-bench: allocator benchmarks.
//   vgpu-bench replay TRACE [--allocator bfc|vmm|async] [--allow-growth[=BOOL]] [--limit SIZE]
//                           [--min-limit[=BOOL]] [--platform host|cuda] [--memory-history FILE]
//                           [--no-baseline[=BOOL]] [tuning knobs]
//   vgpu-bench alloc [--allocator bfc|vmm|async] [--platform host|cuda] [--benchmark_* flags]
//   vgpu-bench allreduce [--devices N] [--size SIZE] [--algorithm A] [--iterations K]
//   vgpu-bench [COMMAND] --help
// Exit status 2 for a bad command line or tuning knob, before anything runs.
// Each ends with one JSON line. The command line is parsed by ParseBenchArgs (bench_flags.cc,
// tools/flags.h rules); the allocator of a kind is built by MakeBenchAllocator; the tuning knobs
// (VGPU_BFC_*, VGPU_VMM_* or their flags) are read by ReadBenchTuning.
#include "vgpu/tools/vgpu_bench.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "vgpu/allocator/async_allocator.h"
#include "vgpu/allocator/bfc_allocator.h"
#include "vgpu/allocator/sub_allocators.h"
#include "vgpu/allocator/vmm_allocator.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/status.h"
#include "vgpu/tools/flags.h"

namespace vgpu::bench {

absl::StatusOr<std::unique_ptr<Allocator>> MakeBenchAllocator(const BenchAllocatorSpec& spec) {
  if (spec.kind == "bfc") {
    BFCOptions o;
    o.name = spec.name;
    o.memory_limit = spec.limit;
    o.allow_growth = spec.allow_growth;
    // Tuning knobs (docs/allocator.md): checked by main before anything runs.
    VGPU_ASSIGN_OR_RETURN(BenchTuning t, ReadBenchTuning(std::getenv));
    if (t.bfc_small_request_bytes) o.small_request_bytes = *t.bfc_small_request_bytes;
    if (t.bfc_min_split_bytes) o.min_split_bytes = *t.bfc_min_split_bytes;
    if (t.bfc_min_split_fraction) o.min_split_fraction = *t.bfc_min_split_fraction;
    std::unique_ptr<SubAllocator> sub;
    if (spec.executor != nullptr) {
      sub = std::make_unique<DeviceSubAllocator>(spec.executor);
    } else {
      sub = std::make_unique<FakeSubAllocator>();
    }
    VGPU_ASSIGN_OR_RETURN(std::unique_ptr<BFCAllocator> a,
                          BFCAllocator::Create(std::move(sub), std::move(o)));
    return std::unique_ptr<Allocator>(std::move(a));
  }
  if (spec.kind == "vmm") {
    if (spec.executor != nullptr) {
      DeviceAllocatorOptions o;
      o.kind = AllocatorKind::kVmm;
      o.device_name = spec.name;
      o.memory_limit = spec.limit;
      o.allow_growth = spec.allow_growth;
      return CreateVmmAllocator(spec.executor, o);
    }
    VmmOptions o;
    o.name = spec.name;
    o.memory_limit = spec.limit;
    o.allow_growth = spec.allow_growth;
    // Tuning knobs (docs/vmm.md): checked by main before anything runs.
    VGPU_ASSIGN_OR_RETURN(BenchTuning t, ReadBenchTuning(std::getenv));
    if (t.vmm_small_block_max) o.small_block_max = *t.vmm_small_block_max;
    if (t.vmm_slab_bytes) o.slab_bytes = *t.vmm_slab_bytes;
    return CreateFakeVmmAllocator(kBenchVmmGranule, std::move(o));
  }
  if (spec.kind == "async") {
    if (spec.executor == nullptr) {
      return absl::InvalidArgumentError(
          "--allocator async needs --platform host|cuda: it runs on the driver's pool, which "
          "has no fake-address mode");
    }
    DeviceAllocatorOptions o;
    o.kind = AllocatorKind::kAsync;
    o.device_name = spec.name;
    o.memory_limit = spec.limit;
    return CreateAsyncAllocator(spec.executor, o);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown allocator kind \"", spec.kind, "\""));
}

absl::StatusOr<Executor*> BenchExecutor(const std::string& platform) {
  VGPU_ASSIGN_OR_RETURN(Platform * p, GetPlatform(platform));
  if (p->DeviceCount() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("platform ", platform, " has no device: ", p->Summary()));
  }
  return p->GetExecutor(0);
}

}  // namespace vgpu::bench

int main(int argc, char** argv) {
  vgpu::flags::ExitFailsOnStdoutError("vgpu-bench");
  namespace flags = vgpu::flags;
  absl::StatusOr<vgpu::bench::BenchArgs> a = vgpu::bench::ParseBenchArgs(flags::Args(argc, argv));
  if (!a.ok()) {
    std::fprintf(stderr, "vgpu-bench: %s\n%s", std::string(a.status().message()).c_str(),
                 vgpu::bench::BenchUsage().c_str());
    return flags::kExitUsage;
  }
  if (a->help) {
    std::printf("%s", a->usage.c_str());
    return 0;
  }
  // Knob flags override their variables; then every knob is checked before anything runs.
  for (const auto& [env, value] : a->tuning) setenv(env.c_str(), value.c_str(), 1);
  if (absl::StatusOr<vgpu::bench::BenchTuning> t = vgpu::bench::ReadBenchTuning(std::getenv);
      !t.ok()) {
    std::fprintf(stderr, "vgpu-bench: %s\n", std::string(t.status().message()).c_str());
    return flags::kExitUsage;
  }
  if (a->command == "replay") return vgpu::bench::RunReplay(*a);
  if (a->command == "allreduce") return vgpu::bench::RunAllReduce(*a);
  return vgpu::bench::RunAlloc(*a, argc, argv);
}
