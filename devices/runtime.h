// The logical-device registry: Runtime::Create discovers the platform's physical devices,
// validates a RuntimeConfig, and builds the logical GPUs (each with its own hard memory
// limit, allocator and stream) plus CPU:0. Find and Place resolve TensorFlow-style device
// names to devices; Place implements soft placement and placement logging.
// A process-wide default runtime is created lazily from the environment (DefaultRuntime).
//
// Thread safety: Create, Find, FindAll, Place, devices() and the accessors are safe from any
// thread at once; the devices live as long as the Runtime. DefaultRuntime and
// SetDefaultRuntimeConfig are safe from any thread.
#ifndef VGPU_DEVICES_RUNTIME_H_
#define VGPU_DEVICES_RUNTIME_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "vgpu/devices/cluster.h"
#include "vgpu/devices/config.h"
#include "vgpu/devices/device_name.h"
#include "vgpu/devices/logical_device.h"
#include "vgpu/runtime/mutex.h"
#include "vgpu/runtime/platform.h"

namespace vgpu {

struct PlaceOptions {
  // What is being placed, for the log line ("<what> -> <device> (...)"); "op" when empty.
  std::string what;
  // Override the runtime's configuration for this call.
  std::optional<bool> soft_placement;
  std::optional<bool> log_placement;
};

// Where each per-device setting of a logical device came from (for vgpu-info).
struct DeviceSettingSources {
  ConfigSource memory_limit = ConfigSource::kDefault;
  ConfigSource priority = ConfigSource::kDefault;
  ConfigSource allocator = ConfigSource::kDefault;
  ConfigSource allow_growth = ConfigSource::kDefault;
  ConfigSource sm_partition = ConfigSource::kDefault;
};

class Runtime {
 public:
  // `platform` nullptr: DefaultPlatform(). Validation errors are those of
  // ResolveLogicalDevices (config.h) plus: InvalidArgument for a priority outside the
  // device's stream priority range, Unimplemented for SM partitions on a platform without
  // them; allocator and stream failures are passed on naming the logical device. Nothing
  // stays allocated on failure.
  static absl::StatusOr<std::unique_ptr<Runtime>> Create(const RuntimeConfig& config,
                                                         Platform* platform = nullptr);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  Platform* platform() const { return platform_; }
  const RuntimeConfig& config() const { return config_; }
  // GPUs in id order, then CPU:0.
  const std::vector<LogicalDevice*>& devices() const { return all_; }
  const std::vector<LogicalDevice*>& gpus() const { return gpus_; }
  LogicalDevice* cpu() const { return cpu_; }

  // The cluster this process is a task of (config().cluster; nullptr for a plain local run).
  const ClusterSpec* cluster() const { return config_.cluster.get(); }
  // The prefix of this process's device names: "/job:localhost/replica:0/task:0" for a local
  // run, "/job:<job>/replica:0/task:<index>" with a cluster.
  std::string task_prefix() const;

  // The first device (GPUs in id order, then CPU:0) that `spec` (any form of device_name.h)
  // specifies. InvalidArgument for a bad name; NotFound naming the spec and listing the
  // devices that exist.
  // With a cluster (config().cluster), a spec whose job and task select only other tasks of
  // the cluster ("/job:worker/task:1/device:GPU:0" on worker 0) is FailedPrecondition naming
  // the remote task and its rank (remote devices are reached through collectives, never handed
  // out as local); one that selects no task of the cluster ("/job:evaluator/...", or
  // "/job:localhost/..." in a cluster) is NotFound listing the cluster's tasks. A spec without
  // job and task matches this process's devices, as in a local run.
  absl::StatusOr<LogicalDevice*> Find(absl::string_view spec) const;
  // Every device that `spec` specifies (possibly none); InvalidArgument for a bad name; with a
  // cluster, FailedPrecondition and NotFound as Find for remote and unknown tasks.
  absl::StatusOr<std::vector<LogicalDevice*>> FindAll(absl::string_view spec) const;
  // Find with soft placement: when nothing matches and soft placement is on, falls back to
  // the first device of the requested type (any id), then to CPU:0, and says so in the log.
  // Soft placement never falls back from another task's device (or an unknown task) to a
  // local one: those errors are returned as Find's.
  // With placement logging on, writes one line per decision to the log sink:
  //   <what> -> /job:localhost/replica:0/task:0/device:GPU:1 (requested GPU:7, soft)
  absl::StatusOr<LogicalDevice*> Place(absl::string_view spec,
                                       const PlaceOptions& options = {}) const;
  // Which settings of `config()` decided `device`'s limit, priority, allocator, growth and
  // SM partition, and where each came from.
  DeviceSettingSources SourcesOf(const LogicalDevice& device) const;
  // Where placement log lines go (default: stderr). Safe to call concurrently with Place.
  void SetPlacementLogSink(std::function<void(absl::string_view line)> sink)
      ABSL_LOCKS_EXCLUDED(log_mu_);

 private:
  Runtime() = default;
  // Runtime::Create's steps 5-7 (runtime.cc).
  absl::Status AddGpu(const ResolvedLogicalDevice& r, Executor* executor, int ranks, int position,
                      const std::vector<int>* sms);
  absl::Status AddCpu(Executor* host_executor);
  absl::Status IndexNames();
  // This process's name for its device `type`:`id` (local or of its cluster task).
  DeviceName NameOf(absl::string_view type, int id) const;
  // With a cluster: OK when `s`'s job and task select this process (or are unset),
  // FailedPrecondition for only remote tasks, NotFound for no task; `context` starts the
  // message. Without one: OK.
  absl::Status CheckTask(const DeviceName& s, absl::string_view spec,
                         absl::string_view context) const;
  std::string DeviceList() const;
  void Log(absl::string_view line) const ABSL_LOCKS_EXCLUDED(log_mu_);

  Platform* platform_ = nullptr;
  RuntimeConfig config_;
  std::vector<std::unique_ptr<LogicalDevice>> owned_;
  std::vector<LogicalDevice*> all_;
  std::vector<LogicalDevice*> gpus_;
  LogicalDevice* cpu_ = nullptr;
  std::vector<DeviceName> parsed_names_;  // parallel to all_
  mutable vgpu::Mutex log_mu_;
  std::function<void(absl::string_view)> log_sink_ ABSL_GUARDED_BY(log_mu_);
};

// The process-wide runtime: created on first call from the config given to
// SetDefaultRuntimeConfig, or else RuntimeConfig::FromEnvironment(), on DefaultPlatform().
// A failed creation is returned and retried on the next call. Never destroyed.
absl::StatusOr<Runtime*> DefaultRuntime();
// Sets the default runtime's configuration; FailedPrecondition once the default runtime
// exists (as TensorFlow's "cannot be modified after being initialized").
absl::Status SetDefaultRuntimeConfig(const RuntimeConfig& config);

}  // namespace vgpu

#endif  // VGPU_DEVICES_RUNTIME_H_
