// vgpu-train: the seed MLP (784-256-256-10) on Fashion-MNIST (or any MNIST-style IDX folder)
// with a chosen strategy over logical devices. One line per epoch (time, samples/s, loss, test
// accuracy), a progress bar only on a terminal, and as the LAST line one JSON object:
//   {"strategy","devices","epochs","batch","test_accuracy","samples_per_s","peak_bytes",...}
// `--compare` first trains `--strategy single` on GPU:0 for the same epochs and adds
// "single_samples_per_s" and "speedup_vs_single" (same run, same machine).
#include "vgpu/tools/vgpu_train.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "vgpu/allocator/memory_history.h"
#include "vgpu/allocator/trace.h"
#include "vgpu/devices/config.h"
#include "vgpu/devices/runtime.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/json.h"
#include "vgpu/runtime/platform.h"
#include "vgpu/runtime/status.h"
#include "vgpu/strategies/central_storage.h"
#include "vgpu/strategies/idx.h"
#include "vgpu/strategies/mirrored.h"
#include "vgpu/strategies/model_parallel.h"
#include "vgpu/strategies/multi_worker_mirrored.h"
#include "vgpu/strategies/nn.h"
#include "vgpu/strategies/parameter_server.h"
#include "vgpu/tools/flags.h"
#include "vgpu/tools/train_flags.h"

namespace vgpu {
namespace {

using strategies::Dataset;
using strategies::StepTotals;
using strategies::Strategy;
using strategies::StrategyKind;

using Flags = TrainFlags;

// The devices come from the device registry (devices/runtime.h) configured by the VGPU_*
// environment. Without a logical-device configuration, N logical devices of 1 GiB are carved
// from physical device 0 (N = the --devices count, or the highest GPU id listed + 1).
struct Devices {
  std::unique_ptr<Runtime> runtime;
  std::vector<LogicalDevice*> chosen;
  LogicalDevice* cpu() const { return runtime->cpu(); }
};

// Which setting decided the logical GPUs there are, for the messages that count them.
// (An empty VGPU_VISIBLE_DEVICES is refused before this is asked.)
std::string GpuCountSource(const RuntimeConfig& c) {
  if (!c.logical_devices.empty() && c.SourceOf(kSettingLogicalDevices) != ConfigSource::kApi) {
    return "set by VGPU_LOGICAL_DEVICES";
  }
  if (c.memory_fraction.has_value()) {
    return "VGPU_MEMORY_FRACTION makes one logical GPU per visible physical device";
  }
  return "one per visible physical device";
}

absl::StatusOr<Devices> MakeDevices(const Flags& f, StrategyKind kind,
                                    const TrainCluster& cluster) {
  // --platform wins over VGPU_PLATFORM; "auto" is VGPU_PLATFORM=auto's rule.
  Platform* platform = nullptr;
  if (f.platform.empty()) {
    VGPU_ASSIGN_OR_RETURN(platform, DefaultPlatform());
  } else if (f.platform == "auto") {
    VGPU_ASSIGN_OR_RETURN(platform, AutoPlatform());
  } else {
    VGPU_ASSIGN_OR_RETURN(platform, GetPlatform(f.platform));
  }
  if (platform->DeviceCount() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("platform ", platform->name(), " has no devices: ", platform->Summary()));
  }
  const std::vector<std::string>& specs = f.device_specs;
  int count = f.device_count;
  if (count == 0 && specs.empty()) count = kind == StrategyKind::kSingle ? 1 : 4;
  if (cluster.is_ps) count = 1;  // --ps-device gpu: one logical GPU holds the variables
  const int gpus = std::max(count, f.gpus_needed);  // logical GPUs the flags need
  // What asked for them, for the messages.
  const std::string asked =
      f.devices.empty()
          ? absl::StrCat("--strategy ", f.strategy, " (default --devices ", count, ")")
          : absl::StrCat("--devices ", flags::Bounded(f.devices));
  VGPU_ASSIGN_OR_RETURN(RuntimeConfig config, RuntimeConfig::FromEnvironmentAndFlags(f.settings));
  config.cluster = cluster.spec;  // names the devices /job:<job>/replica:0/task:<index>/...
  if (cluster.is_ps && f.ps_device == "cpu") {
    // A ps task holds variables on CPU:0 and owns no GPU (unless --ps-device gpu).
    config.cpu_only = true;
    if (!config.visible_devices.has_value()) {
      config.visible_devices =
          std::vector<int>{cluster.launch.local_rank % platform->DeviceCount()};
    }
    Devices d;
    VGPU_ASSIGN_OR_RETURN(d.runtime, Runtime::Create(config, platform));
    return d;
  }
  if (config.visible_devices.has_value() && config.visible_devices->empty()) {
    return absl::InvalidArgumentError(
        "VGPU_VISIBLE_DEVICES is empty: no physical GPU is visible to train on (unset it, or "
        "list ordinals such as 0)");
  }
  if (config.logical_devices.empty() && !config.memory_fraction.has_value()) {
    // Carve 1 GiB logical GPUs from the first visible physical device, after checking that it
    // holds them: nothing is built for a count that cannot exist.
    constexpr uint64_t kCarve = uint64_t{1} << 30;
    // Under mpirun each process of a node takes its own card (OMPI_COMM_WORLD_LOCAL_RANK),
    // sharing them round-robin when there are fewer cards than processes.
    const int ordinal = config.visible_devices
                            ? config.visible_devices->front()
                            : cluster.launch.local_rank % platform->DeviceCount();
    VGPU_ASSIGN_OR_RETURN(PhysicalDeviceInfo info, platform->Describe(ordinal));
    const uint64_t fit = info.total_bytes / kCarve;
    const int most = static_cast<int>(std::min<uint64_t>(fit, kMaxLogicalGpusPerPhysical));
    if (gpus > most) {
      return absl::InvalidArgumentError(absl::StrCat(
          asked, " needs ", gpus, " logical GPUs; physical GPU ", ordinal, " (",
          FormatBytes(info.total_bytes), ") holds at most ", most,
          " of 1 GiB (vgpu-train carves 1 GiB each, at most ", kMaxLogicalGpusPerPhysical,
          " per physical device; set VGPU_LOGICAL_DEVICES for other sizes)"));
    }
    PhysicalDeviceConfig carve;
    carve.ordinal = ordinal;
    carve.logical_devices.assign(std::max(gpus, 1), LogicalDeviceConfig::Bytes(kCarve));
    config.logical_devices = {carve};
    if (!config.visible_devices.has_value()) config.visible_devices = std::vector<int>{ordinal};
    config.sources[std::string(kSettingLogicalDevices)] = ConfigSource::kApi;
  }
  Devices d;
  VGPU_ASSIGN_OR_RETURN(d.runtime, Runtime::Create(config, platform));
  const int have = static_cast<int>(d.runtime->gpus().size());
  if (gpus > have) {
    return absl::InvalidArgumentError(absl::StrCat(asked, " needs ", gpus,
                                                   " logical GPUs; the configuration has ", have,
                                                   " (", GpuCountSource(config), ")"));
  }
  if (specs.empty()) {
    d.chosen.assign(d.runtime->gpus().begin(), d.runtime->gpus().begin() + count);
  } else {
    for (const std::string& s : specs) {
      VGPU_ASSIGN_OR_RETURN(LogicalDevice * dev, d.runtime->Find(s));
      d.chosen.push_back(dev);
    }
  }
  return d;
}

absl::StatusOr<std::unique_ptr<Strategy>> MakeStrategy(const Flags& f, StrategyKind which,
                                                       Devices& d, const TrainCluster& cluster,
                                                       const strategies::StrategyOptions& o) {
  switch (which) {
    case StrategyKind::kMultiWorkerMirrored:
      return strategies::CreateMultiWorkerMirrored(d.chosen, o, cluster.world, f.communicator);
    case StrategyKind::kParameterServer:
      return strategies::ParameterServerStrategy::Create(d.chosen, o, cluster.ps);
    case StrategyKind::kSingle:
      return strategies::MirroredStrategy::Create({d.chosen.front()}, o);
    case StrategyKind::kMirrored: {
      VGPU_ASSIGN_OR_RETURN(auto algo, strategies::ParseAllReduceAlgorithm(f.allreduce));
      return strategies::MirroredStrategy::Create(d.chosen, o, algo);
    }
    case StrategyKind::kModelParallel: {
      strategies::PlacementOptions p;
      VGPU_ASSIGN_OR_RETURN(p.policy, strategies::ParsePlacementPolicy(f.placement));
      if (p.policy == strategies::PlacementPolicy::kExplicit) {
        p.explicit_specs = absl::StrSplit(f.layers, ',', absl::SkipEmpty());
      }
      return strategies::ModelParallelStrategy::Create(d.chosen, o, p);
    }
    case StrategyKind::kCentralStorage:
      return strategies::CentralStorageStrategy::Create(d.cpu(), d.chosen, o);
  }
  return absl::InternalError("unknown strategy kind");
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
  double samples_per_s = 0;  // examples of the global batches per second (the whole job's)
  double test_accuracy = 0;
  double train_loss = 0;
  uint64_t peak_bytes = 0;
  int num_devices = 0;
  std::string params_checksum;  // of the final parameters (strategy.h ParamsChecksum)
  strategies::ParameterServerStats ps_stats;
  std::string communicator;           // multi-worker-mirrored
  std::string communicator_fallback;  // why "auto" did not build the table's choice
};

// A ps task's whole run: serve the workers, then evaluate the final model it holds.
absl::StatusOr<RunResult> Serve(const Flags& f, Devices& d, const TrainCluster& cluster,
                                const strategies::MnistLike& data,
                                const strategies::StrategyOptions& o) {
  LogicalDevice* device = f.ps_device == "gpu" ? d.chosen.front() : d.cpu();
  VGPU_ASSIGN_OR_RETURN(auto server, strategies::ParameterServer::Create(device, o, cluster.ps));
  if (!f.quiet) {
    std::printf("%s", server->PlacementReport().c_str());
    std::fflush(stdout);
  }
  VGPU_RETURN_IF_ERROR(server->Serve());
  VGPU_ASSIGN_OR_RETURN(StepTotals test,
                        server->Evaluate(data.test.x.data(), data.test.y.data(), data.test.rows));
  RunResult result;
  result.test_accuracy = test.accuracy();
  result.params_checksum = strategies::ParamsChecksum(server->Params());
  result.ps_stats = server->stats();
  if (!f.quiet) {
    std::printf("ps task %d: %lld updates, test acc %.4f\n", cluster.spec->self().index,
                static_cast<long long>(result.ps_stats.updates), test.accuracy());
  }
  return result;
}

absl::StatusOr<RunResult> Train(const Flags& f, StrategyKind which, Devices& d,
                                const TrainCluster& cluster, const strategies::MnistLike& data,
                                int blas_threads) {
  strategies::StrategyOptions o;
  o.model = strategies::MakeMlp({data.train.features, 256, 256, 10});
  VGPU_ASSIGN_OR_RETURN(o.optimizer.kind, strategies::ParseOptimizer(f.optimizer));
  o.optimizer.lr = f.lr;
  o.global_batch = f.batch;
  o.seed = f.seed;
  d.runtime->platform()->SetBlasThreads(blas_threads);
  if (cluster.is_ps) return Serve(f, d, cluster, data, o);
  RunPeak peak(d.runtime->devices());
  VGPU_ASSIGN_OR_RETURN(std::unique_ptr<Strategy> s, MakeStrategy(f, which, d, cluster, o));
  auto* mirrored = dynamic_cast<strategies::MirroredStrategy*>(s.get());
  auto* ps_worker = dynamic_cast<strategies::ParameterServerStrategy*>(s.get());
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
  int64_t stepped = 0;  // examples of the global batches stepped
  int64_t steps_done = 0;
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
      stepped += n;
      ++steps_done;
      if (f.check_replicas && mirrored != nullptr) {
        std::vector<std::string> sums;
        for (int i = 0; i < mirrored->num_replicas(); ++i) {
          VGPU_ASSIGN_OR_RETURN(std::vector<float> p, mirrored->ReplicaParams(i));
          sums.push_back(strategies::ParamsChecksum(p));
        }
        VGPU_RETURN_IF_ERROR(CheckReplicasEqual(cluster, sums, steps_done));
      }
      if ((step + 1) % kFlushEvery == 0 || step + 1 == steps) {
        VGPU_ASSIGN_OR_RETURN(StepTotals t, s->Flush());
        // A diverged run stops here, naming where: its accuracy would mean nothing.
        VGPU_RETURN_IF_ERROR(CheckTrainingLoss(t.loss_sum, std::string(StrategyKindName(which)),
                                               epoch, (step / kFlushEvery) * kFlushEvery + 1,
                                               step + 1, steps, f.lr));
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
    VGPU_ASSIGN_OR_RETURN(StepTotals test,
                          s->Evaluate(data.test.x.data(), data.test.y.data(), data.test.rows));
    result.test_accuracy = test.accuracy();
    result.train_loss = epoch_totals.mean_loss();
    if (!f.quiet) {
      std::printf(
          "epoch %d/%d  %s  %.2fs (cpu %.2fs)  %.0f samples/s  loss %.4f  train acc %.4f  "
          "test acc %.4f\n",
          epoch, f.epochs, std::string(StrategyKindName(which)).c_str(), secs, cpu_secs,
          static_cast<double>(rows) / secs, epoch_totals.mean_loss(), epoch_totals.accuracy(),
          test.accuracy());
      std::fflush(stdout);
    }
  }
  if (ps_worker != nullptr) {
    // The final values from the servers (in asynchronous mode they moved after our last pull).
    VGPU_RETURN_IF_ERROR(ps_worker->Finish().status());
    VGPU_ASSIGN_OR_RETURN(StepTotals test,
                          s->Evaluate(data.test.x.data(), data.test.y.data(), data.test.rows));
    result.test_accuracy = test.accuracy();
    result.ps_stats = ps_worker->stats();
  }
  if (mirrored != nullptr && mirrored->communicator() != nullptr) {
    result.communicator = std::string(mirrored->communicator()->kind());
    result.communicator_fallback = mirrored->communicator()->fallback_reason();
  }
  VGPU_ASSIGN_OR_RETURN(std::vector<float> params, s->Params());
  result.params_checksum = strategies::ParamsChecksum(params);
  result.samples_per_s = train_seconds > 0 ? stepped / train_seconds : 0;
  result.peak_bytes = peak.Total(s->devices());
  // The GPUs the strategy was given (--devices), whatever it placed on them: model-parallel may
  // leave one without a stage, central storage adds CPU:0 for the variables.
  result.num_devices = which == StrategyKind::kSingle ? 1 : static_cast<int>(d.chosen.size());
  return result;
}

int AutoBlasThreads(StrategyKind strategy, int devices, int processes_on_node = 1) {
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Streams that run gemms at the same time share the cores: mirrored and central storage run
  // one per replica; single and model-parallel one at a time (stages follow each other). Like
  // PyTorch's default, a lone stream gets every core. Measured on the 2-core machine, quiet:
  // single 73k samples/s with 1 thread, 113k with 2; mirrored x4 101k with 1 thread per
  // replica, 30k with 2 (8 spinning OpenBLAS threads on 2 cores).
  int streams = (strategy == StrategyKind::kMirrored || strategy == StrategyKind::kCentralStorage ||
                 strategies::IsClusterStrategy(strategy))
                    ? devices
                    : 1;
  // The processes of a job on this node share its cores too (mpirun -np 2 on 2 cores: 1 each).
  return std::max(1, cores / std::max(1, streams * std::max(1, processes_on_node)));
}

// FILE for one device; FILE with ".gpu<ID>" before its extension for several.
std::string TracePath(const std::string& base, const LogicalDevice& dev, size_t devices) {
  std::string path = base;
  if (devices > 1) {
    const size_t slash = path.rfind('/');
    const size_t dot = path.rfind('.');
    const bool has_ext = dot != std::string::npos && (slash == std::string::npos || dot > slash);
    path.insert(has_ext ? dot : path.size(), absl::StrCat(".gpu", dev.id()));
  }
  return path;
}

// An output the run will write must be writable BEFORE the run, not found out after it: opens
// (creating it if needed, without truncating) and closes it; a file it created is removed.
absl::Status CheckWritable(absl::string_view flag, const std::string& path) {
  const bool existed = access(path.c_str(), F_OK) == 0;
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", flags::Quote(path), ": cannot write: ", std::strerror(errno)));
  }
  close(fd);
  if (!existed) unlink(path.c_str());
  return absl::OkStatus();
}

// Exit status for an error before training: 2 when the command line or the configuration is
// at fault, 1 otherwise (a device or platform failure).
int SetupExit(const absl::Status& s) {
  return s.code() == absl::StatusCode::kInvalidArgument || s.code() == absl::StatusCode::kNotFound
             ? flags::kExitUsage
             : 1;
}

int Main(int argc, char** argv) {
  absl::StatusOr<Flags> flags =
      ParseTrainFlags(flags::Args(argc, argv), std::string(strategies::kFashionMnistDir));
  if (!flags.ok()) {
    std::fprintf(stderr, "vgpu-train: %s\n%s", std::string(flags.status().message()).c_str(),
                 TrainUsage());
    return flags::kExitUsage;
  }
  if (flags->help) {
    std::printf("%s", TrainUsage());
    return 0;
  }
  const Flags& f = *flags;
  absl::StatusOr<StrategyKind> kind = strategies::ParseStrategyKind(f.strategy);
  if (!kind.ok()) {  // the flag parser checked the name already
    std::fprintf(stderr, "vgpu-train: %s\n", std::string(kind.status().message()).c_str());
    return flags::kExitUsage;
  }
  // Who this process is in the job, before anything is built (a bad cluster is refused first).
  absl::StatusOr<TrainCluster> cluster = SetUpCluster(f, *kind);
  if (!cluster.ok()) {
    std::fprintf(stderr, "vgpu-train: %s\n", std::string(cluster.status().message()).c_str());
    return SetupExit(cluster.status());
  }
  // From here on an error on one rank ends every rank of the job (MPI_Abort, with this rank's
  // message), so that no other rank waits for it.
  auto fail = [&](const std::string& message, int code) {
    if (cluster->world != nullptr && cluster->world->size() > 1) {
      cluster->world->Abort(message, code);
    }
    std::fprintf(stderr, "vgpu-train: %s\n", message.c_str());
    return code;
  };
  if (cluster->spec != nullptr && !f.quiet) {
    std::printf("cluster: rank %d of %d, %s, pid %d\n", cluster->rank(), cluster->processes(),
                cluster->spec->self().ToString().c_str(), static_cast<int>(getpid()));
    std::fflush(stdout);
  }
  // The devices first: a count that cannot exist is refused before the data is read.
  absl::StatusOr<Devices> devices = MakeDevices(f, *kind, *cluster);
  if (!devices.ok()) {
    return fail(std::string(devices.status().message()), SetupExit(devices.status()));
  }
  {
    absl::Status w = absl::OkStatus();
    if (!f.record_trace.empty()) {
      for (size_t i = 0; i < devices->chosen.size() && w.ok(); ++i) {
        w = CheckWritable("--record-trace",
                          TracePath(f.record_trace, *devices->chosen[i], devices->chosen.size()));
      }
    }
    if (w.ok() && !f.memory_history.empty()) {
      w = CheckWritable("--memory-history", f.memory_history);
    }
    if (!w.ok()) {
      std::fprintf(stderr, "vgpu-train: %s\n", std::string(w.message()).c_str());
      return flags::kExitUsage;
    }
  }
  absl::StatusOr<strategies::MnistLike> data = strategies::LoadMnistLike(f.data);
  if (!data.ok()) return fail(data.status().ToString(), 1);
  {
    // One job: the flags that shape the steps, and the data, are the same on every rank.
    int32_t lr_bits;
    std::memcpy(&lr_bits, &f.lr, sizeof(lr_bits));
    absl::Status agree =
        CheckRanksAgree(*cluster, {{"--batch", f.batch},
                                   {"--epochs", f.epochs},
                                   {"--seed", static_cast<int64_t>(f.seed)},
                                   {"--lr", lr_bits},
                                   {"--optimizer", f.optimizer == "sgd" ? 1 : 0},
                                   {"--train-limit", f.train_limit},
                                   {"--ps-async", f.ps_async ? 1 : 0},
                                   {"--ps-sharding", f.ps_sharding == "by-size" ? 1 : 0},
                                   {"the training examples (--data)", data->train.rows},
                                   {"the features per example (--data)", data->train.features},
                                   {"the test examples (--data)", data->test.rows}});
    if (!agree.ok()) return fail(std::string(agree.message()), flags::kExitUsage);
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
  if (f.compare && *kind != StrategyKind::kSingle) {
    absl::StatusOr<RunResult> r =
        Train(f, StrategyKind::kSingle, *devices, TrainCluster(), *data,
              f.blas_threads ? f.blas_threads : AutoBlasThreads(StrategyKind::kSingle, 1));
    if (!r.ok()) {
      std::fprintf(stderr, "vgpu-train: single: %s\n", r.status().ToString().c_str());
      return 1;
    }
    single = *r;
  }
  const int n = static_cast<int>(devices->chosen.size());
  absl::StatusOr<RunResult> r = Train(
      f, *kind, *devices, *cluster, *data,
      f.blas_threads ? f.blas_threads : AutoBlasThreads(*kind, n, cluster->launch.local_size));
  if (!r.ok()) return fail(r.status().ToString(), 1);
  for (size_t i = 0; i < recorders.size(); ++i) {
    LogicalDevice* dev = devices->chosen[i];
    DetachTraceRecorder(*dev->allocator(), recorders[i].get());
    const std::string path = TracePath(f.record_trace, *dev, recorders.size());
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
      .Field("optimizer", f.optimizer)
      .Field("platform", devices->runtime->platform()->name())
      .Field("processes", cluster->processes())
      .Field("rank", cluster->rank())
      .Field("job", cluster->job())
      .Field("params_checksum", r->params_checksum);
  if (!r->communicator.empty()) j.Field("communicator", r->communicator);
  if (!r->communicator_fallback.empty()) {
    j.Field("communicator_fallback", r->communicator_fallback);
  }
  if (*kind == StrategyKind::kParameterServer) {
    j.Field("ps_tasks", static_cast<int>(cluster->ps.ps_ranks.size()))
        .Field("ps_mode", f.ps_async ? "async" : "sync")
        .Field("ps_sharding", f.ps_sharding)
        .Field("ps_device", f.ps_device)
        .Field("ps_updates", r->ps_stats.updates)
        .Field("max_staleness", r->ps_stats.max_staleness)
        .Field("mean_staleness", r->ps_stats.mean_staleness);
  }
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

int main(int argc, char** argv) {
  vgpu::flags::ExitFailsOnStdoutError("vgpu-train");
  vgpu::flags::ReportLibraryErrorsToStderr();
  return vgpu::Main(argc, argv);
}
