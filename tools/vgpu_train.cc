// vgpu-train: the seed MLP (784-256-256-10) on Fashion-MNIST (or any MNIST-style IDX folder)
// with a chosen strategy over logical devices. One line per epoch (time, samples/s, loss, test
// accuracy), a progress bar only on a terminal, and as the LAST line one JSON object:
//   {"strategy","devices","epochs","batch","test_accuracy","samples_per_s","peak_bytes",...}
// `--compare` first trains `--strategy single` on GPU:0 for the same epochs and adds
// "single_samples_per_s" and "speedup_vs_single" (same run, same machine).
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "allocator/memory_history.h"
#include "allocator/trace.h"
#include "devices/config.h"
#include "devices/runtime.h"
#include "runtime/bytes.h"
#include "runtime/host/host_kernels.h"
#include "runtime/json.h"
#include "runtime/platform.h"
#include "runtime/status.h"
#include "strategies/central_storage.h"
#include "strategies/device_set.h"
#include "strategies/idx.h"
#include "strategies/mirrored.h"
#include "strategies/model_parallel.h"

namespace vgpu {
namespace {

using strategies::Dataset;
using strategies::StepTotals;
using strategies::Strategy;

struct Flags {
  std::string strategy = "single";
  std::string devices = "";  // count or comma-separated specs; default 1 (single) or 4
  int epochs = 2;
  int batch = 256;
  float lr = 1e-3f;
  uint64_t seed = 1;
  std::string data = std::string(strategies::kFashionMnistDir);
  std::string optimizer = "adam";
  std::string placement = "round-robin";
  std::string layers;  // explicit placement: specs per layer, comma-separated
  std::string allreduce = "auto";
  int train_limit = 0;   // use only the first N training examples (0 = all)
  int blas_threads = 0;  // 0 = automatic
  bool compare = false;
  bool quiet = false;
  std::string memory_history;  // write the devices' allocator history (JSON) here
  std::string record_trace;    // write each chosen GPU's allocations as a replayable trace
};

void Usage() {
  std::fprintf(stderr,
               "usage: vgpu-train [--strategy single|mirrored|model-parallel|central-storage]\n"
               "  [--devices N|SPEC,SPEC...] [--epochs N] [--batch N] [--lr X] [--seed N]\n"
               "  [--optimizer adam|sgd] [--data DIR] [--placement round-robin|least-loaded|\n"
               "  memory-balanced|explicit] [--layers SPEC,SPEC,SPEC] [--allreduce auto|local|\n"
               "  nccl|hierarchical|via-host] [--train-limit N] [--blas-threads N] [--compare]\n"
               "  [--quiet] [--memory-history FILE] [--record-trace FILE]\n"
               "  (vgpu-info timeline FILE --svg OUT.svg draws the memory history)\n");
}

absl::StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string value;
    auto eq = a.find('=');
    bool has_inline = a.rfind("--", 0) == 0 && eq != std::string::npos;
    if (has_inline) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
    }
    auto next = [&]() -> absl::StatusOr<std::string> {
      if (has_inline) return value;
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(a, " needs a value"));
      return std::string(argv[++i]);
    };
    auto int_flag = [&](int& out) -> absl::Status {
      VGPU_ASSIGN_OR_RETURN(std::string v, next());
      if (!absl::SimpleAtoi(v, &out) || out < 0) {
        return absl::InvalidArgumentError(absl::StrCat(a, ": '", v, "' is not a count"));
      }
      return absl::OkStatus();
    };
    if (a == "--help" || a == "-h") {
      Usage();
      std::exit(0);
    } else if (a == "--strategy") {
      VGPU_ASSIGN_OR_RETURN(f.strategy, next());
    } else if (a == "--devices") {
      VGPU_ASSIGN_OR_RETURN(f.devices, next());
    } else if (a == "--epochs") {
      VGPU_RETURN_IF_ERROR(int_flag(f.epochs));
      if (f.epochs == 0) return absl::InvalidArgumentError("--epochs must be >= 1");
    } else if (a == "--batch") {
      VGPU_RETURN_IF_ERROR(int_flag(f.batch));
      if (f.batch == 0) return absl::InvalidArgumentError("--batch must be >= 1");
    } else if (a == "--lr") {
      VGPU_ASSIGN_OR_RETURN(std::string v, next());
      if (!absl::SimpleAtof(v, &f.lr) || !(f.lr > 0)) {
        return absl::InvalidArgumentError(absl::StrCat("--lr: '", v, "' is not a positive number"));
      }
    } else if (a == "--seed") {
      VGPU_ASSIGN_OR_RETURN(std::string v, next());
      if (!absl::SimpleAtoi(v, &f.seed)) {
        return absl::InvalidArgumentError(absl::StrCat("--seed: '", v, "' is not a number"));
      }
    } else if (a == "--data") {
      VGPU_ASSIGN_OR_RETURN(f.data, next());
    } else if (a == "--optimizer") {
      VGPU_ASSIGN_OR_RETURN(f.optimizer, next());
    } else if (a == "--placement") {
      VGPU_ASSIGN_OR_RETURN(f.placement, next());
    } else if (a == "--layers") {
      VGPU_ASSIGN_OR_RETURN(f.layers, next());
      f.placement = "explicit";
    } else if (a == "--allreduce") {
      VGPU_ASSIGN_OR_RETURN(f.allreduce, next());
    } else if (a == "--train-limit") {
      VGPU_RETURN_IF_ERROR(int_flag(f.train_limit));
    } else if (a == "--blas-threads") {
      VGPU_RETURN_IF_ERROR(int_flag(f.blas_threads));
    } else if (a == "--compare") {
      f.compare = true;
    } else if (a == "--quiet") {
      f.quiet = true;
    } else if (a == "--record-trace") {
      VGPU_ASSIGN_OR_RETURN(f.record_trace, next());
      if (f.record_trace.empty()) {
        return absl::InvalidArgumentError("--record-trace needs a file name");
      }
    } else if (a == "--memory-history") {
      VGPU_ASSIGN_OR_RETURN(f.memory_history, next());
      if (f.memory_history.empty()) {
        return absl::InvalidArgumentError("--memory-history needs a file name");
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '", argv[i], "' (see --help)"));
    }
  }
  if (f.strategy != "single" && f.strategy != "mirrored" && f.strategy != "model-parallel" &&
      f.strategy != "central-storage") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--strategy '", f.strategy, "': use single, mirrored, model-parallel or central-storage"));
  }
  return f;
}

// The devices come from the device registry (devices/runtime.h) configured by the VGPU_*
// environment. Without a logical-device configuration, N logical devices of 1 GiB are carved
// from physical device 0 (N = the --devices count, or the highest GPU id listed + 1).
struct Devices {
  std::unique_ptr<Runtime> runtime;
  std::vector<LogicalDevice*> chosen;
  LogicalDevice* cpu() const { return runtime->cpu(); }
};

absl::StatusOr<Devices> MakeDevices(const Flags& f) {
  VGPU_ASSIGN_OR_RETURN(Platform * platform, DefaultPlatform());
  if (platform->DeviceCount() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("platform ", platform->name(), " has no devices: ", platform->Summary()));
  }
  std::vector<std::string> specs;
  int count = f.strategy == "single" ? 1 : 4;
  if (!f.devices.empty()) {
    if (!absl::SimpleAtoi(f.devices, &count)) {
      specs = absl::StrSplit(f.devices, ',', absl::SkipEmpty());
      count = 0;
    } else if (count < 1) {
      return absl::InvalidArgumentError("--devices must be >= 1");
    }
  }
  int gpus = count;
  for (const std::string& s : specs) {
    auto pos = s.rfind(':');
    int id;
    if (pos != std::string::npos && absl::SimpleAtoi(s.substr(pos + 1), &id)) {
      gpus = std::max(gpus, id + 1);
    }
  }
  VGPU_ASSIGN_OR_RETURN(RuntimeConfig config, RuntimeConfig::FromEnvironment());
  if (config.logical_devices.empty() && !config.memory_fraction.has_value()) {
    PhysicalDeviceConfig carve;
    carve.ordinal = 0;
    carve.logical_devices.assign(std::max(gpus, 1), LogicalDeviceConfig::Bytes(uint64_t{1} << 30));
    config.logical_devices = {carve};
    if (!config.visible_devices.has_value()) config.visible_devices = std::vector<int>{0};
    config.sources[std::string(kSettingLogicalDevices)] = ConfigSource::kApi;
  }
  Devices d;
  VGPU_ASSIGN_OR_RETURN(d.runtime, Runtime::Create(config, platform));
  if (specs.empty()) {
    if (count > static_cast<int>(d.runtime->gpus().size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("--devices ", count, ": the configuration has ", d.runtime->gpus().size(),
                       " logical GPUs (VGPU_LOGICAL_DEVICES)"));
    }
    d.chosen.assign(d.runtime->gpus().begin(), d.runtime->gpus().begin() + count);
  } else {
    for (const std::string& s : specs) {
      VGPU_ASSIGN_OR_RETURN(LogicalDevice * dev, d.runtime->Find(s));
      d.chosen.push_back(dev);
    }
  }
  return d;
}

absl::StatusOr<std::unique_ptr<Strategy>> MakeStrategy(const Flags& f, const std::string& which,
                                                       Devices& d,
                                                       const strategies::StrategyOptions& o) {
  if (which == "single") {
    return strategies::MirroredStrategy::Create({d.chosen.front()}, o);
  }
  if (which == "mirrored") {
    VGPU_ASSIGN_OR_RETURN(auto algo, strategies::ParseAllReduceAlgorithm(f.allreduce));
    return strategies::MirroredStrategy::Create(d.chosen, o, algo);
  }
  if (which == "model-parallel") {
    strategies::PlacementOptions p;
    VGPU_ASSIGN_OR_RETURN(p.policy, strategies::ParsePlacementPolicy(f.placement));
    if (p.policy == strategies::PlacementPolicy::kExplicit) {
      p.explicit_specs = absl::StrSplit(f.layers, ',', absl::SkipEmpty());
    }
    return strategies::ModelParallelStrategy::Create(d.chosen, o, p);
  }
  return strategies::CentralStorageStrategy::Create(d.cpu(), d.chosen, o);
}

// CPU seconds of the whole process (all threads): shows the work per sample even when other
// processes share the cores.
double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void Progress(int done, int total, double loss) {
  const int width = 30;
  int filled = total ? done * width / total : width;
  std::fprintf(stderr, "\r  [%s%s] %d/%d loss %.4f", std::string(filled, '#').c_str(),
               std::string(width - filled, '.').c_str(), done, total, loss);
  std::fflush(stderr);
}

// Peak bytes in use of one run, per allocator, from the allocators' events (bytes_in_use after
// each): the lifetime peak in Stats() would also count an earlier run of the same process
// (--compare trains single first on the same devices).
class RunPeak : public AllocatorObserver {
 public:
  explicit RunPeak(std::vector<LogicalDevice*> devices) : devices_(std::move(devices)) {
    for (LogicalDevice* d : devices_) {
      {
        absl::MutexLock l(&mu_);
        peak_[d->allocator()->name()] = d->allocator()->Stats().bytes_in_use;
      }
      d->allocator()->AddObserver(this);
    }
  }
  ~RunPeak() override {
    for (LogicalDevice* d : devices_) d->allocator()->RemoveObserver(this);
  }
  void OnAllocatorEvent(const std::string& allocator_name, const AllocatorEvent& e) override {
    absl::MutexLock l(&mu_);
    uint64_t& p = peak_[allocator_name];
    p = std::max(p, e.bytes_in_use);
  }
  // Summed over `used`; an allocator that reports no events falls back to its lifetime peak.
  uint64_t Total(const std::vector<LogicalDevice*>& used) {
    absl::MutexLock l(&mu_);
    uint64_t sum = 0;
    for (LogicalDevice* d : used) {
      auto it = peak_.find(d->allocator()->name());
      sum += it != peak_.end() && it->second > 0 ? it->second
                                                 : d->allocator()->Stats().peak_bytes_in_use;
    }
    return sum;
  }

 private:
  std::vector<LogicalDevice*> devices_;
  absl::Mutex mu_;
  std::map<std::string, uint64_t> peak_ ABSL_GUARDED_BY(mu_);
};

struct RunResult {
  double samples_per_s = 0;
  double test_accuracy = 0;
  double train_loss = 0;
  uint64_t peak_bytes = 0;
  int num_devices = 0;
};

absl::StatusOr<RunResult> Train(const Flags& f, const std::string& which, Devices& d,
                                const strategies::MnistLike& data, int blas_threads) {
  strategies::StrategyOptions o;
  o.spec.sizes = {data.train.features, 256, 256, 10};
  VGPU_ASSIGN_OR_RETURN(o.optimizer.kind, strategies::ParseOptimizer(f.optimizer));
  o.optimizer.lr = f.lr;
  o.global_batch = f.batch;
  o.seed = f.seed;
  SetHostBlasThreads(blas_threads);
  RunPeak peak(d.runtime->devices());
  VGPU_ASSIGN_OR_RETURN(std::unique_ptr<Strategy> s, MakeStrategy(f, which, d, o));
  if (!f.quiet) {
    std::printf("%s", s->PlacementReport().c_str());
    std::printf("  blas threads %d, batch %d, %s lr %g\n", blas_threads, f.batch,
                f.optimizer.c_str(), f.lr);
  }
  const Dataset& train = data.train;
  const int rows = f.train_limit > 0 ? std::min(f.train_limit, train.rows) : train.rows;
  const int feat = train.features;
  const bool tty = isatty(STDERR_FILENO) && !f.quiet;
  std::vector<float> x(static_cast<size_t>(rows) * feat);
  std::vector<int32_t> y(rows);
  std::vector<int> order(rows);
  std::mt19937_64 rng(f.seed);
  double train_seconds = 0;
  int64_t trained = 0;
  RunResult result;
  const int steps = (rows + f.batch - 1) / f.batch;  // the last, partial batch is kept
  const int kFlushEvery = 64;  // bounds the queued work and feeds the progress bar
  for (int epoch = 1; epoch <= f.epochs; ++epoch) {
    auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = ProcessCpuSeconds();
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    StepTotals epoch_totals;
    for (int step = 0; step < steps; ++step) {
      const int start = step * f.batch;
      const int n = std::min(f.batch, rows - start);
      // Gather the shuffled batch just before its step: the previous steps are still running
      // on the device streams, so this input pipeline overlaps with the compute.
      for (int i = start; i < start + n; ++i) {
        std::copy_n(train.x.data() + static_cast<size_t>(order[i]) * feat, feat,
                    x.data() + static_cast<size_t>(i) * feat);
        y[i] = train.y[order[i]];
      }
      VGPU_RETURN_IF_ERROR(
          s->Step(x.data() + static_cast<size_t>(start) * feat, y.data() + start, n));
      if ((step + 1) % kFlushEvery == 0 || step + 1 == steps) {
        VGPU_ASSIGN_OR_RETURN(StepTotals t, s->Flush());
        epoch_totals.loss_sum += t.loss_sum;
        epoch_totals.correct += t.correct;
        epoch_totals.examples += t.examples;
        if (tty) Progress(step + 1, steps, epoch_totals.mean_loss());
      }
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu_secs = ProcessCpuSeconds() - cpu0;
    if (tty) std::fprintf(stderr, "\r%*s\r", 70, "");
    train_seconds += secs;
    trained += epoch_totals.examples;
    VGPU_ASSIGN_OR_RETURN(StepTotals test,
                          s->Evaluate(data.test.x.data(), data.test.y.data(), data.test.rows));
    result.test_accuracy = test.accuracy();
    result.train_loss = epoch_totals.mean_loss();
    if (!f.quiet) {
      std::printf(
          "epoch %d/%d  %s  %.2fs (cpu %.2fs)  %.0f samples/s  loss %.4f  train acc %.4f  "
          "test acc %.4f\n",
          epoch, f.epochs, which.c_str(), secs, cpu_secs, epoch_totals.examples / secs,
          epoch_totals.mean_loss(), epoch_totals.accuracy(), test.accuracy());
      std::fflush(stdout);
    }
  }
  result.samples_per_s = train_seconds > 0 ? trained / train_seconds : 0;
  result.peak_bytes = peak.Total(s->devices());
  // The GPUs the strategy was given (--devices), whatever it placed on them: model-parallel may
  // leave one without a stage, central storage adds CPU:0 for the variables.
  result.num_devices = which == "single" ? 1 : static_cast<int>(d.chosen.size());
  return result;
}

int AutoBlasThreads(const std::string& strategy, int devices) {
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Streams that run gemms at the same time share the cores: mirrored and central storage run
  // one per replica; single and model-parallel one at a time (stages follow each other). Like
  // PyTorch's default, a lone stream gets every core. Measured on the 2-core machine, quiet:
  // single 73k samples/s with 1 thread, 113k with 2; mirrored x4 101k with 1 thread per
  // replica, 30k with 2 (8 spinning OpenBLAS threads on 2 cores).
  int streams = (strategy == "mirrored" || strategy == "central-storage") ? devices : 1;
  return std::max(1, cores / std::max(1, streams));
}

int Main(int argc, char** argv) {
  absl::StatusOr<Flags> flags = ParseFlags(argc, argv);
  if (!flags.ok()) {
    std::fprintf(stderr, "vgpu-train: %s\n", flags.status().message().data());
    Usage();
    return 2;
  }
  const Flags& f = *flags;
  absl::StatusOr<strategies::MnistLike> data = strategies::LoadMnistLike(f.data);
  if (!data.ok()) {
    std::fprintf(stderr, "vgpu-train: %s\n", data.status().ToString().c_str());
    return 1;
  }
  absl::StatusOr<Devices> devices = MakeDevices(f);
  if (!devices.ok()) {
    std::fprintf(stderr, "vgpu-train: %s\n", devices.status().ToString().c_str());
    return 1;
  }
  // Every logical device's allocator (GPUs and CPU:0) reports to one history.
  MemoryHistory history(1 << 20);
  if (!f.memory_history.empty()) {
    for (LogicalDevice* dev : devices->runtime->devices()) {
      AttachMemoryHistory(*dev->allocator(), &history);
      if (dev->memory_limit() > 0) history.SetLimit(dev->allocator()->name(), dev->memory_limit());
    }
  }
  // One recorder per chosen GPU, so each device's workload replays on its own allocator.
  std::vector<std::unique_ptr<TraceRecorder>> recorders;
  if (!f.record_trace.empty()) {
    for (LogicalDevice* dev : devices->chosen) {
      recorders.push_back(std::make_unique<TraceRecorder>(
          absl::StrCat("vgpu-train ", f.strategy, " on ", dev->name())));
      AttachTraceRecorder(*dev->allocator(), recorders.back().get());
    }
  }
  std::optional<RunResult> single;
  if (f.compare && f.strategy != "single") {
    absl::StatusOr<RunResult> r =
        Train(f, "single", *devices, *data,
              f.blas_threads ? f.blas_threads : AutoBlasThreads("single", 1));
    if (!r.ok()) {
      std::fprintf(stderr, "vgpu-train: single: %s\n", r.status().ToString().c_str());
      return 1;
    }
    single = *r;
  }
  const int n = static_cast<int>(devices->chosen.size());
  absl::StatusOr<RunResult> r =
      Train(f, f.strategy, *devices, *data,
            f.blas_threads ? f.blas_threads : AutoBlasThreads(f.strategy, n));
  if (!r.ok()) {
    std::fprintf(stderr, "vgpu-train: %s\n", r.status().ToString().c_str());
    return 1;
  }
  for (size_t i = 0; i < recorders.size(); ++i) {
    LogicalDevice* dev = devices->chosen[i];
    DetachTraceRecorder(*dev->allocator(), recorders[i].get());
    // FILE for one device; FILE with ".gpu<ID>" before its extension for several.
    std::string path = f.record_trace;
    if (recorders.size() > 1) {
      const size_t slash = path.rfind('/');
      const size_t dot = path.rfind('.');
      const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash);
      path.insert(has_ext ? dot : path.size(), absl::StrCat(".gpu", dev->id()));
    }
    absl::Status w = recorders[i]->WriteFile(path);
    if (!w.ok()) {
      std::fprintf(stderr, "vgpu-train: %s\n", w.ToString().c_str());
      return 1;
    }
    if (!f.quiet) {
      std::printf("trace of %s: %s (%llu events; vgpu-bench replay %s)\n", dev->name().c_str(),
                  path.c_str(), static_cast<unsigned long long>(recorders[i]->events()),
                  path.c_str());
    }
  }
  if (!f.memory_history.empty()) {
    for (LogicalDevice* dev : devices->runtime->devices()) {
      DetachMemoryHistory(*dev->allocator(), &history);
    }
    absl::Status w = history.WriteJson(f.memory_history);
    if (!w.ok()) {
      std::fprintf(stderr, "vgpu-train: %s\n", w.ToString().c_str());
      return 1;
    }
  }
  JsonWriter j;
  j.BeginObject()
      .Field("strategy", f.strategy)
      .Field("devices", r->num_devices)
      .Field("epochs", f.epochs)
      .Field("batch", f.batch)
      .Field("test_accuracy", r->test_accuracy)
      .Field("samples_per_s", r->samples_per_s)
      .Field("peak_bytes", r->peak_bytes)
      .Field("train_loss", r->train_loss)
      .Field("optimizer", f.optimizer);
  if (single) {
    j.Field("single_samples_per_s", single->samples_per_s)
        .Field("speedup_vs_single",
               single->samples_per_s > 0 ? r->samples_per_s / single->samples_per_s : 0.0);
  }
  j.EndObject();
  std::printf("%s\n", j.str().c_str());
  return 0;
}

}  // namespace
}  // namespace vgpu

int main(int argc, char** argv) { return vgpu::Main(argc, argv); }
