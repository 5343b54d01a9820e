// vgpu-bench: allocator benchmarks.
//   vgpu-bench replay TRACE [--allocator bfc|vmm|async] [--allow-growth[=BOOL]] [--limit SIZE|N%]
//                           [--min-limit[=BOOL]] [--platform host|cuda] [--memory-history FILE]
//                           [--no-baseline[=BOOL]] [tuning knobs]
//   vgpu-bench convert IN OUT [--device N]
//   vgpu-bench plan --card SIZE [--headroom PERCENT] [--reserve SIZE] TRACE...
//   vgpu-bench alloc [--allocator bfc|vmm|async] [--platform host|cuda] [--benchmark_* flags]
//   vgpu-bench allreduce [--devices N] [--size SIZE] [--algorithm A] [--iterations K]
//   vgpu-bench [COMMAND] --help
// Exit status 2 for a bad command line or tuning knob, before anything runs; plan exits 3 when
// the traces do not fit on the card together.
// Each ends with one JSON line. The command line is parsed by ParseBenchArgs (bench_flags.cc,
// tools/flags.h rules); the tuning knobs (VGPU_BFC_*, VGPU_VMM_* or their flags) are read by
// ReadBenchTuning; MakeBenchAllocator hands both to the one allocator factory.
#include "vgpu/tools/vgpu_bench.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "vgpu/allocator/factory.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/status.h"
#include "vgpu/tools/flags.h"

namespace vgpu::bench {

absl::StatusOr<BenchAllocator> MakeBenchAllocator(const BenchAllocatorSpec& spec) {
  VGPU_ASSIGN_OR_RETURN(AllocatorKind kind, ParseAllocatorKind(spec.kind));
  BenchAllocator out;
  Executor* executor = spec.executor;
  if (executor == nullptr) {
    if (kind == AllocatorKind::kAsync) {
      return absl::InvalidArgumentError(
          "--allocator async needs --platform host|cuda: it runs on the driver's pool, which "
          "has no fake-address mode");
    }
    out.fake_device = std::make_unique<FakeAddressExecutor>(kBenchVmmGranule);
    executor = out.fake_device.get();
  }
  DeviceAllocatorOptions o;
  o.kind = kind;
  o.device_name = spec.name;
  o.memory_limit = spec.limit;
  o.allow_growth = spec.allow_growth;
  spec.tuning.ApplyTo(o);
  if (spec.executor != nullptr) {
    // The vmm knobs are sized for the fake device's 2 MiB granule; a real device's vmm
    // allocator runs as the runtime builds it.
    o.vmm_slab_bytes.reset();
    o.vmm_small_block_max.reset();
  }
  VGPU_ASSIGN_OR_RETURN(out.allocator, CreateDeviceAllocator(executor, o));
  return out;
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
  vgpu::flags::ReportLibraryErrorsToStderr();
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
  // Knob flags override their variables; every knob is checked before anything runs.
  absl::StatusOr<vgpu::bench::BenchTuning> t = vgpu::bench::ReadBenchTuning(std::getenv, *a);
  if (!t.ok()) {
    std::fprintf(stderr, "vgpu-bench: %s\n", std::string(t.status().message()).c_str());
    return flags::kExitUsage;
  }
  a->tuning_values = *t;
  if (a->command == "replay") return vgpu::bench::RunReplay(*a);
  if (a->command == "convert") return vgpu::bench::RunConvert(*a);
  if (a->command == "plan") return vgpu::bench::RunPlan(*a);
  if (a->command == "allreduce") return vgpu::bench::RunAllReduce(*a);
  return vgpu::bench::RunAlloc(*a, argc, argv);
}
