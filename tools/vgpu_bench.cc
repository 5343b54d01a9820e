// vgpu-bench: allocator benchmarks.
//   vgpu-bench replay TRACE [--allocator bfc|vmm|async] [--allow-growth] [--limit SIZE]
//                           [--min-limit] [--platform host|cuda] [--memory-history FILE]
//                           [--no-baseline]
//   vgpu-bench alloc [--allocator bfc|vmm|async] [--platform host|cuda] [--benchmark_* flags]
// Each ends with one JSON line. Argument parsing lives here only; the allocator of a kind is
// built by MakeBenchAllocator.
#include "tools/vgpu_bench.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "allocator/async_allocator.h"
#include "allocator/bfc_allocator.h"
#include "allocator/sub_allocators.h"
#include "allocator/vmm_allocator.h"
#include "runtime/bytes.h"
#include "runtime/status.h"

namespace vgpu::bench {
namespace {

constexpr char kUsage[] =
    "usage: vgpu-bench replay TRACE [--allocator bfc|vmm|async] [--allow-growth] [--limit SIZE]\n"
    "                         [--min-limit] [--platform host|cuda] [--memory-history FILE]\n"
    "                         [--no-baseline]\n"
    "       vgpu-bench alloc [--allocator bfc|vmm|async] [--platform host|cuda] "
    "[--benchmark_* flags]\n"
    "       vgpu-bench allreduce [--devices N] [--size SIZE] [--algorithm auto|local|via-host|"
    "nccl|hierarchical]\n"
    "                            [--iterations K] [--platform host|cuda]\n";

}  // namespace

absl::StatusOr<BenchArgs> ParseBenchArgs(const std::vector<std::string>& argv) {
  BenchArgs a;
  auto bad = [](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(parts..., "\n", kUsage));
  };
  if (argv.empty()) return bad("missing command");
  a.command = argv[0];
  if (a.command != "replay" && a.command != "alloc" && a.command != "allreduce") {
    return bad("unknown command \"", a.command, "\"");
  }
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    // --flag VALUE and --flag=VALUE both work.
    std::string flag = arg, value;
    bool has_value = false;
    if (size_t eq = arg.find('='); absl::StartsWith(arg, "--") && eq != std::string::npos) {
      flag = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    auto take = [&]() -> absl::StatusOr<std::string> {
      if (has_value) return value;
      if (i + 1 >= argv.size()) return bad(flag, " needs a value");
      return argv[++i];
    };
    if (flag == "--allocator") {
      VGPU_ASSIGN_OR_RETURN(a.allocator, take());
      if (a.allocator != "bfc" && a.allocator != "vmm" && a.allocator != "async") {
        return bad("--allocator must be bfc, vmm or async, not \"", a.allocator, "\"");
      }
    } else if (flag == "--allow-growth") {
      a.allow_growth = true;
    } else if (flag == "--limit") {
      VGPU_ASSIGN_OR_RETURN(std::string v, take());
      absl::StatusOr<uint64_t> b = ParseBytes(v);
      if (!b.ok()) return bad("--limit: ", b.status().message());
      if (*b == 0) return bad("--limit must be > 0");
      a.limit = *b;
    } else if (flag == "--min-limit") {
      a.min_limit = true;
    } else if (flag == "--no-baseline") {
      a.baseline = false;
    } else if (flag == "--platform") {
      VGPU_ASSIGN_OR_RETURN(a.platform, take());
      if (a.platform != "host" && a.platform != "cuda") {
        return bad("--platform must be host or cuda, not \"", a.platform, "\"");
      }
    } else if (flag == "--devices" && a.command == "allreduce") {
      VGPU_ASSIGN_OR_RETURN(std::string v, take());
      if (!absl::SimpleAtoi(v, &a.devices) || a.devices < 1 || a.devices > 16) {
        return bad("--devices must be 1..16, not \"", v, "\"");
      }
    } else if (flag == "--size" && a.command == "allreduce") {
      VGPU_ASSIGN_OR_RETURN(std::string v, take());
      absl::StatusOr<uint64_t> b = ParseBytes(v);
      if (!b.ok()) return bad("--size: ", b.status().message());
      if (*b < 4) return bad("--size must be at least one float");
      a.size = *b;
    } else if (flag == "--algorithm" && a.command == "allreduce") {
      VGPU_ASSIGN_OR_RETURN(a.algorithm, take());
    } else if (flag == "--iterations" && a.command == "allreduce") {
      VGPU_ASSIGN_OR_RETURN(std::string v, take());
      if (!absl::SimpleAtoi(v, &a.iterations) || a.iterations < 1) {
        return bad("--iterations must be a positive number, not \"", v, "\"");
      }
    } else if (flag == "--memory-history") {
      VGPU_ASSIGN_OR_RETURN(a.memory_history_path, take());
    } else if (absl::StartsWith(arg, "--benchmark_") && a.command == "alloc") {
      a.passthrough.push_back(arg);
    } else if (!absl::StartsWith(arg, "-") && a.command == "replay" && a.trace_path.empty()) {
      a.trace_path = arg;
    } else {
      return bad("unexpected argument \"", arg, "\"");
    }
  }
  if (a.command == "replay" && a.trace_path.empty()) return bad("replay needs a TRACE file");
  if (a.command == "replay" && a.allocator == "async" && a.platform.empty()) {
    return bad(
        "--allocator async needs --platform host|cuda: it replays on the driver's pool, "
        "which has no fake-address mode");
  }
  return a;
}

absl::StatusOr<std::unique_ptr<Allocator>> MakeBenchAllocator(const BenchAllocatorSpec& spec) {
  if (spec.kind == "bfc") {
    BFCOptions o;
    o.name = spec.name;
    o.memory_limit = spec.limit;
    o.allow_growth = spec.allow_growth;
    // Policy knobs for experiments (docs/allocator.md lists the sweep made with them).
    if (const char* e = std::getenv("VGPU_BFC_SMALL_REQUEST_BYTES"))
      o.small_request_bytes = std::stoull(e);
    if (const char* e = std::getenv("VGPU_BFC_MIN_SPLIT_BYTES")) o.min_split_bytes = std::stoull(e);
    if (const char* e = std::getenv("VGPU_BFC_MIN_SPLIT_FRACTION"))
      o.min_split_fraction = std::stod(e);
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
    // Policy knobs for experiments (docs/vmm.md lists the measurements made with them).
    if (const char* e = std::getenv("VGPU_VMM_SMALL_BLOCK_MAX")) o.small_block_max = std::stoull(e);
    if (const char* e = std::getenv("VGPU_VMM_SLAB_BYTES")) o.slab_bytes = std::stoull(e);
    return CreateFakeVmmAllocator(uint64_t{2} << 20, std::move(o));
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
  std::vector<std::string> args(argv + 1, argv + argc);
  absl::StatusOr<vgpu::bench::BenchArgs> a = vgpu::bench::ParseBenchArgs(args);
  if (!a.ok()) {
    std::fprintf(stderr, "vgpu-bench: %s", std::string(a.status().message()).c_str());
    return 2;
  }
  if (a->command == "replay") return vgpu::bench::RunReplay(*a);
  if (a->command == "allreduce") return vgpu::bench::RunAllReduce(*a);
  return vgpu::bench::RunAlloc(*a, argc, argv);
}
