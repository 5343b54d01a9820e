#include "vgpu/tools/train_flags.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "vgpu/devices/device_name.h"
#include "vgpu/runtime/numbers.h"
#include "vgpu/runtime/status.h"
#include "vgpu/tools/flags.h"

namespace vgpu {
namespace {

constexpr char kUsage[] =
    "usage: vgpu-train [--strategy single|mirrored|model-parallel|central-storage|\n"
    "  multi-worker-mirrored|parameter-server]\n"
    "  [--platform host|cuda|auto] [--devices N|SPEC,SPEC...] [--epochs N] [--batch N] [--lr X] "
    "[--seed N]\n"
    "  [--optimizer adam|sgd] [--data DIR] [--placement round-robin|least-loaded|\n"
    "  memory-balanced|explicit] [--layers SPEC,SPEC,SPEC] [--allreduce auto|local|\n"
    "  nccl|hierarchical|via-host] [--train-limit N] [--blas-threads N] [--compare[=BOOL]]\n"
    "  [--quiet[=BOOL]] [--memory-history FILE] [--record-trace FILE]\n"
    "  [--communicator auto|mpi|hierarchical] [--ps-tasks N] [--ps-sharding round-robin|by-size]\n"
    "  [--ps-async[=BOOL]] [--ps-device cpu|gpu] [--check-replicas[=BOOL]]\n"
    "  [--collective-timeout SECONDS]\n"
    "  (cluster strategies run under mpirun -np N: see docs/cluster.md)\n"
    "  [--logical-devices SPEC] [--allow-growth[=BOOL]] ... (every runtime setting's flag,\n"
    "  see vgpu-info --help; each overrides its VGPU_* variable)\n"
    "  --devices N: 1..64 logical GPUs per physical device; --lr X: 1e-9..10\n"
    "  (vgpu-info timeline FILE --svg OUT.svg draws the memory history)\n"
    "Flags take --flag=VALUE or --flag VALUE; BOOL is true|false|1|0|yes|no|on|off.\n"
    "Exit status: 0 ok, 1 a failed run, 2 a bad command line or configuration.\n";

// --devices: a count, or device specs ("GPU:0,GPU:2", "/device:GPU:1"), checked here only for
// syntax and size; whether they exist is MakeDevices' business.
absl::Status ParseDevices(absl::string_view v, TrainFlags& f) {
  f.device_count = 0;  // the last --devices wins
  f.device_specs.clear();
  f.gpus_needed = 0;
  const bool numeric =
      !v.empty() && (absl::ascii_isdigit(v.front()) || v.front() == '-' || v.front() == '+');
  if (numeric) {
    absl::StatusOr<int64_t> n = ParseInt64InRange(v, 1, kMaxTrainDevices);
    if (!n.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "expected a count in [1, ", kMaxTrainDevices, "] (at most ", kMaxLogicalGpusPerPhysical,
          " per physical device) or device specs like GPU:0,GPU:1"));
    }
    f.device_count = static_cast<int>(*n);
    return absl::OkStatus();
  }
  std::vector<std::string> specs = absl::StrSplit(v, ',', absl::SkipEmpty());
  if (specs.empty()) return absl::InvalidArgumentError("expected a count or device specs");
  if (specs.size() > static_cast<size_t>(kMaxTrainDevices)) {
    return absl::InvalidArgumentError(
        absl::StrCat(specs.size(), " device specs: at most ", kMaxTrainDevices));
  }
  for (const std::string& s : specs) {
    absl::StatusOr<DeviceName> name = DeviceName::Parse(s);
    if (!name.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(flags::Quote(s), " is not a device spec (e.g. GPU:0)"));
    }
    if (name->id.has_value()) {
      if (*name->id < 0 || *name->id >= kMaxTrainDevices) {
        return absl::InvalidArgumentError(
            absl::StrCat(flags::Quote(s), ": device ids go up to ", kMaxTrainDevices - 1));
      }
      if (!name->type || absl::AsciiStrToUpper(*name->type) == "GPU") {
        f.gpus_needed = std::max(f.gpus_needed, *name->id + 1);
      }
    }
  }
  f.device_specs = std::move(specs);
  return absl::OkStatus();
}

}  // namespace

const char* TrainUsage() { return kUsage; }

absl::Status CheckTrainingLoss(double loss_sum, const std::string& run, int epoch, int first,
                               int last, int steps, double lr) {
  if (std::isfinite(loss_sum)) return absl::OkStatus();
  return absl::OutOfRangeError(absl::StrFormat(
      "%s: epoch %d, steps %d-%d of %d: the training loss is not finite (%g): the run "
      "diverged; lower --lr (now %g)",
      run, epoch, first, last, steps, loss_sum, lr));
}

absl::StatusOr<TrainFlags> ParseTrainFlags(const std::vector<std::string>& args,
                                           const std::string& default_data) {
  TrainFlags f;
  f.data = default_data;
  double lr = f.lr;
  TrainFlags* fp = &f;
  flags::FlagSet fs("vgpu-train", kUsage);
  fs.Enum("--strategy", &f.strategy,
          {"single", "mirrored", "model-parallel", "central-storage", "multi-worker-mirrored",
           "parameter-server"},
          "how the model is spread over the devices")
      .Enum("--platform", &f.platform, {"host", "cuda", "auto"},
            "the platform (default VGPU_PLATFORM, else auto: cuda when it has a device)")
      .String("--devices", &f.devices, "N|SPEC,...", "logical GPUs: a count or specs",
              [fp](absl::string_view v) { return ParseDevices(v, *fp); })
      .Int("--epochs", &f.epochs, 1, 1000, "passes over the training set")
      .Int("--batch", &f.batch, 1, 65536, "global batch size")
      .Decimal("--lr", &lr, kMinLearningRate, kMaxLearningRate, "learning rate")
      .Uint("--seed", &f.seed, "random seed")
      .Path("--data", &f.data, "an MNIST-style IDX folder")
      .Enum("--optimizer", &f.optimizer, {"adam", "sgd"}, "the optimizer")
      .Enum("--placement", &f.placement,
            {"round-robin", "least-loaded", "memory-balanced", "explicit"},
            "model-parallel placement policy")
      .String("--layers", &f.layers, "SPEC,SPEC,SPEC", "explicit placement, one spec per layer")
      .Enum("--allreduce", &f.allreduce, {"auto", "local", "nccl", "hierarchical", "via-host"},
            "mirrored all-reduce algorithm")
      .Int("--train-limit", &f.train_limit, 0, 1 << 30, "use the first N examples (0 = all)")
      .Int("--blas-threads", &f.blas_threads, 0, 1024, "BLAS threads (0 = automatic)")
      .Bool("--compare", &f.compare, "first train single on GPU:0 for the speed-up")
      .Bool("--quiet", &f.quiet, "only the JSON line")
      .OutputPath("--memory-history", &f.memory_history, "write the allocators' memory history",
                  "vgpu-train's report")
      .OutputPath("--record-trace", &f.record_trace, "write each GPU's allocations as a trace",
                  "vgpu-train's report")
      .Enum("--communicator", &f.communicator, {"auto", "mpi", "hierarchical"},
            "multi-worker-mirrored: how gradients cross processes")
      .Int("--ps-tasks", &f.ps_tasks, 0, kMaxTrainDevices,
           "parameter-server: the last N ranks are ps tasks (default 1; TF_CONFIG may say)")
      .Enum("--ps-sharding", &f.ps_sharding, {"round-robin", "by-size"},
            "parameter-server: how variables are spread over the ps tasks")
      .Bool("--ps-async", &f.ps_async, "parameter-server: apply each push as it arrives")
      .Enum("--ps-device", &f.ps_device, {"cpu", "gpu"},
            "parameter-server: a ps task holds the variables on CPU:0 or on a logical GPU")
      .Bool("--check-replicas", &f.check_replicas,
            "after every step, check every replica of every rank holds the same parameters")
      .Int("--collective-timeout", &f.collective_timeout_s, 1, 86400,
           "seconds a cluster collective waits for a rank before the job is ended")
      .RuntimeSettings(&f.settings);
  VGPU_ASSIGN_OR_RETURN(flags::ParseResult r, fs.Parse(args));
  if (r.help) {
    f.help = true;
    return f;
  }
  f.lr = static_cast<float>(lr);
  if (r.seen.count("--layers")) f.placement = "explicit";
  return f;
}

}  // namespace vgpu
