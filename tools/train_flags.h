// vgpu-train's command line, parsed with tools/flags.h's rules (in the vgpu_tools_flags
// library so the tests and the fuzzer call exactly what the tool does).
//
// Thread safety: ParseTrainFlags is reentrant.
#ifndef VGPU_TOOLS_TRAIN_FLAGS_H_
#define VGPU_TOOLS_TRAIN_FLAGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "vgpu/devices/config.h"

namespace vgpu {

// At most this many logical GPUs per physical device: a sane bound (and what keeps a huge
// --devices from building anything), whatever the card's memory.
inline constexpr int kMaxLogicalGpusPerPhysical = 64;
// Bound of --devices (a count, or the GPU ids and specs listed) before any device is looked at;
// MakeDevices then checks it against the physical devices there are.
inline constexpr int kMaxTrainDevices = 1024;
// The learning rate's range: beyond 10 no optimizer here trains; below 1e-9 it does nothing
// (and a float would round it to 0).
inline constexpr double kMinLearningRate = 1e-9;
inline constexpr double kMaxLearningRate = 10;

struct TrainFlags {
  bool help = false;
  std::string strategy = "single";
  std::string platform;      // --platform host|cuda|auto; empty: VGPU_PLATFORM, else auto
  std::string devices = "";  // as typed; count or comma-separated specs; default 1 (single) or 4
  int device_count = 0;      // --devices N (0 when specs were given or nothing)
  std::vector<std::string> device_specs;  // --devices SPEC,SPEC,...
  int gpus_needed = 0;                    // the highest GPU id in device_specs + 1 (0 if none)
  int epochs = 2;
  int batch = 256;
  float lr = 1e-3f;
  uint64_t seed = 1;
  std::string data;
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
  // Cluster strategies (docs/cluster.md).
  std::string communicator = "auto";
  int ps_tasks = 0;  // 0: TF_CONFIG's ps job, else 1
  std::string ps_sharding = "round-robin";
  bool ps_async = false;
  std::string ps_device = "cpu";  // where a ps task holds the variables: cpu (CPU:0) or gpu
  bool check_replicas = false;
  int collective_timeout_s = 30;
  // The runtime settings given by a flag (devices/settings.h: --logical-devices, ...), each
  // with source kFlag; completed from the environment (RuntimeConfig::FromEnvironmentAndFlags).
  RuntimeConfig settings;
};

// argv without the program name; `default_data` is --data's default. InvalidArgument naming
// the flag; the caller prints TrainUsage() after it.
absl::StatusOr<TrainFlags> ParseTrainFlags(const std::vector<std::string>& args,
                                           const std::string& default_data);
const char* TrainUsage();

// OutOfRange naming the run, the epoch and the steps (1-based, first..last of `steps`) when
// `loss_sum` (the loss summed over those steps) is not finite: the run diverged.
absl::Status CheckTrainingLoss(double loss_sum, const std::string& run, int epoch, int first,
                               int last, int steps, double lr);

}  // namespace vgpu

#endif  // VGPU_TOOLS_TRAIN_FLAGS_H_
