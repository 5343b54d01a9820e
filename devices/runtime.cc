#include "vgpu/devices/runtime.h"

#include <cstdio>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "vgpu/allocator/factory.h"
#include "vgpu/allocator/vmm_allocator.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/status.h"
#include "vgpu/runtime/user_text.h"

namespace vgpu {
namespace {

absl::Status Annotate(const absl::Status& s, absl::string_view context) {
  return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
}

}  // namespace

// ---- Runtime::Create, step by step ---------------------------------------------------------
// 1. describe the physical devices; 2. validate the configuration against them
// (ResolveLogicalDevices); 3. open the executors in use and check the priorities; 4. partition
// the SMs; 5. build each logical GPU; 6. build CPU:0; 7. index the device names for Find.
// Steps 1-4 allocate nothing.
namespace {

// Step 1.
absl::StatusOr<std::vector<PhysicalDeviceInfo>> DescribeAll(Platform* platform) {
  std::vector<PhysicalDeviceInfo> physical;
  for (int i = 0; i < platform->DeviceCount(); ++i) {
    absl::StatusOr<PhysicalDeviceInfo> info = platform->Describe(i);
    if (!info.ok()) return Annotate(info.status(), absl::StrCat("physical device ", i));
    physical.push_back(*std::move(info));
  }
  return physical;
}

// Step 3: the executor of every physical device in use, by ordinal; each logical device's
// priority must be in its device's stream priority range.
absl::StatusOr<std::map<int, Executor*>> OpenExecutors(
    Platform* platform, const std::vector<ResolvedLogicalDevice>& resolved) {
  std::map<int, Executor*> executors;
  for (const ResolvedLogicalDevice& r : resolved) {
    if (executors.count(r.physical_ordinal) == 0) {
      absl::StatusOr<Executor*> e = platform->GetExecutor(r.physical_ordinal);
      if (!e.ok()) {
        return Annotate(e.status(), absl::StrCat("physical device ", r.physical_ordinal));
      }
      executors[r.physical_ordinal] = *e;
    }
    auto [least, greatest] = executors[r.physical_ordinal]->StreamPriorityRange();
    if (r.priority > least || r.priority < greatest) {
      return absl::InvalidArgumentError(absl::StrCat(
          "logical GPU:", r.gpu_id, " on physical device ", r.physical_ordinal, ": priority ",
          r.priority, " is outside the device's stream priority range [", greatest, ", ", least,
          "] (lower = higher priority); fix the @PRIORITY in VGPU_LOGICAL_DEVICES"));
    }
  }
  return executors;
}

// Step 4: the SMs each partitioned physical device gives its logical devices, in order.
absl::StatusOr<std::map<int, std::vector<int>>> PartitionSms(
    Platform* platform, const RuntimeConfig& config, const std::map<int, Executor*>& executors) {
  std::map<int, std::vector<int>> actual_sms;
  for (const SmPartitionConfig& p : config.sm_partitions) {
    absl::StatusOr<std::vector<int>> sms = executors.at(p.ordinal)->PartitionSms(p.sm_counts);
    if (!sms.ok()) {
      if (sms.status().code() == absl::StatusCode::kUnimplemented) {
        return absl::UnimplementedError(
            absl::StrCat("SM partitions (VGPU_SM_PARTITION) are not available on physical device ",
                         p.ordinal, " of platform ", platform->name(), ": ", sms.status().message(),
                         "; unset VGPU_SM_PARTITION"));
      }
      return Annotate(sms.status(),
                      absl::StrCat("physical device ", p.ordinal, ": partitioning SMs"));
    }
    actual_sms[p.ordinal] = *std::move(sms);
  }
  return actual_sms;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Runtime>> Runtime::Create(const RuntimeConfig& config,
                                                         Platform* platform) {
  if (platform == nullptr) {
    VGPU_ASSIGN_OR_RETURN(platform, DefaultPlatform());
  }
  VGPU_ASSIGN_OR_RETURN(std::vector<PhysicalDeviceInfo> physical, DescribeAll(platform));
  std::vector<ResolvedLogicalDevice> resolved;
  if (!config.cpu_only) {
    VGPU_ASSIGN_OR_RETURN(resolved, ResolveLogicalDevices(config, physical));
  }
  VGPU_ASSIGN_OR_RETURN(auto executors, OpenExecutors(platform, resolved));
  VGPU_ASSIGN_OR_RETURN(auto actual_sms, PartitionSms(platform, config, executors));

  std::unique_ptr<Runtime> rt(new Runtime());
  rt->platform_ = platform;
  rt->config_ = config;
  std::map<int, int> position;  // physical ordinal -> next list position
  // A collective over the physical devices in use (NCCL) takes buffers on each of them that no
  // allocator sees: every logical device keeps room for them in its own limit.
  const int ranks = static_cast<int>(executors.size());
  for (const ResolvedLogicalDevice& r : resolved) {
    auto sms = actual_sms.find(r.physical_ordinal);
    VGPU_RETURN_IF_ERROR(rt->AddGpu(r, executors[r.physical_ordinal], ranks,
                                    position[r.physical_ordinal]++,
                                    sms == actual_sms.end() ? nullptr : &sms->second));
  }
  // CPU:0 uses the first visible physical device for pinned memory and copies.
  Executor* cpu_executor =
      resolved.empty() ? nullptr : executors[resolved.front().physical_ordinal];
  if (config.cpu_only && !physical.empty()) {
    const int ordinal = config.visible_devices && !config.visible_devices->empty()
                            ? config.visible_devices->front()
                            : 0;
    absl::StatusOr<Executor*> e = platform->GetExecutor(ordinal);
    if (!e.ok()) return Annotate(e.status(), absl::StrCat("physical device ", ordinal, " (CPU:0)"));
    cpu_executor = *e;
  }
  VGPU_RETURN_IF_ERROR(rt->AddCpu(cpu_executor));
  VGPU_RETURN_IF_ERROR(rt->IndexNames());
  return rt;
}

// Step 5: logical GPU `r`, the `position`-th of its physical device, with `sms` the SMs of
// that device's partitions (nullptr: not partitioned).
absl::Status Runtime::AddGpu(const ResolvedLogicalDevice& r, Executor* executor, int ranks,
                             int position, const std::vector<int>* sms) {
  LogicalDeviceInfo info;
  info.type = DeviceType::kGpu;
  info.id = r.gpu_id;
  info.name = NameOf("GPU", r.gpu_id).ToString();
  info.physical_ordinal = r.physical_ordinal;
  info.memory_limit = r.memory_limit;
  info.priority = r.priority;
  info.allow_growth = config_.allow_growth;
  info.allocator_kind = std::string(AllocatorKindName(config_.allocator));
  info.collective_reserve = executor->CollectiveBufferBytes(ranks);
  const std::string label = absl::StrCat(info.name, " (physical GPU ", r.physical_ordinal, ")");
  Blas* blas = nullptr;
  uint64_t workspace = 0;
  if (absl::StatusOr<Blas*> b = executor->GetBlas(); b.ok() && (*b)->WorkspaceBytes() > 0) {
    blas = *b;
    workspace = blas->WorkspaceBytes();
  }  // no BLAS library: nothing of it to charge
  if (r.memory_limit <= info.collective_reserve + workspace) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, ": its limit ", FormatBytes(r.memory_limit),
        " leaves nothing after vgpu's own device memory on it (",
        FormatBytes(info.collective_reserve), " of NCCL buffers for ", ranks,
        " devices + a BLAS workspace of ", FormatBytes(workspace), "); give it more memory"));
  }
  StreamOptions so;
  so.priority = r.priority;
  if (sms != nullptr) {
    so.sm_partition = position;
    info.sm_count = position < static_cast<int>(sms->size()) ? (*sms)[position] : 0;
  }
  absl::StatusOr<std::unique_ptr<Stream>> stream = executor->CreateStream(so);
  if (!stream.ok()) return Annotate(stream.status(), absl::StrCat(label, ": creating its stream"));
  DeviceAllocatorOptions ao;
  ao.kind = config_.allocator;
  ao.device_name = label;
  ao.memory_limit = r.memory_limit - info.collective_reserve;
  ao.allow_growth = config_.allow_growth;
  // vmm with growth: memory goes back once the device's allocator is quiet, not only when
  // nothing is allocated (a model's weights stay live between steps or requests).
  ao.vmm_quiet_give_back_ms = VmmOptions::kRuntimeQuietGiveBackMs;
  ao.stream = stream->get();  // async: frees in order with the device's work
  absl::StatusOr<std::unique_ptr<Allocator>> allocator = CreateDeviceAllocator(executor, ao);
  if (!allocator.ok()) {
    return Annotate(allocator.status(), absl::StrCat(label, ": creating its allocator"));
  }
  owned_.push_back(std::make_unique<LogicalDevice>(std::move(info), executor, *std::move(stream),
                                                   *std::move(allocator)));
  gpus_.push_back(owned_.back().get());
  if (blas != nullptr) {
    absl::Status s = owned_.back()->SetUpBlasWorkspace(blas, workspace);
    if (!s.ok()) return Annotate(s, absl::StrCat(label, ": its BLAS workspace"));
  }
  return absl::OkStatus();
}

// Step 6: CPU:0, on `host_executor` (nullptr when there is no GPU) for pinned memory.
absl::Status Runtime::AddCpu(Executor* host_executor) {
  LogicalDeviceInfo cpu;
  cpu.type = DeviceType::kCpu;
  cpu.id = 0;
  cpu.name = NameOf("CPU", 0).ToString();
  cpu.allocator_kind = "host";
  cpu.allow_growth = true;
  std::unique_ptr<Stream> cpu_stream;
  if (host_executor != nullptr) {
    VGPU_ASSIGN_OR_RETURN(cpu_stream, host_executor->CreateStream(StreamOptions{}));
  }
  absl::StatusOr<std::unique_ptr<Allocator>> cpu_allocator =
      CreateHostMemoryAllocator(host_executor, cpu.name, 0);
  if (!cpu_allocator.ok()) return Annotate(cpu_allocator.status(), cpu.name);
  owned_.push_back(std::make_unique<LogicalDevice>(
      std::move(cpu), host_executor, std::move(cpu_stream), *std::move(cpu_allocator)));
  cpu_ = owned_.back().get();
  return absl::OkStatus();
}

// Step 7: all_ (GPUs in id order, then CPU:0) and their parsed names, for Find and Place.
absl::Status Runtime::IndexNames() {
  all_ = gpus_;
  all_.push_back(cpu_);
  for (LogicalDevice* d : all_) {
    VGPU_ASSIGN_OR_RETURN(DeviceName n, DeviceName::Parse(d->name()));
    parsed_names_.push_back(std::move(n));
  }
  return absl::OkStatus();
}

Runtime::~Runtime() {
  // Drain each device's stream before its allocator frees memory the work may still use.
  for (auto& d : owned_) {
    if (d->stream() != nullptr) d->stream()->Synchronize().IgnoreError();
  }
}

DeviceSettingSources Runtime::SourcesOf(const LogicalDevice& device) const {
  DeviceSettingSources s;
  s.allocator = config_.SourceOf(kSettingAllocator);
  s.allow_growth = config_.SourceOf(kSettingAllowGrowth);
  if (!device.is_gpu()) return s;
  const int ordinal = device.info().physical_ordinal;
  const PhysicalDeviceConfig* listed = nullptr;
  for (const PhysicalDeviceConfig& p : config_.logical_devices) {
    if (p.ordinal == ordinal) listed = &p;
  }
  if (listed != nullptr) {
    s.memory_limit = config_.SourceOf(kSettingLogicalDevices);
    // The device's place among its card's logical devices (ids follow the listed order): a
    // priority counts as set only where the user wrote one.
    size_t index = 0;
    for (const LogicalDevice* g : gpus_) {
      if (g == &device) break;
      if (g->info().physical_ordinal == ordinal) ++index;
    }
    if (index < listed->logical_devices.size() && listed->logical_devices[index].priority_given) {
      s.priority = config_.SourceOf(kSettingLogicalDevices);
    }
  } else if (config_.memory_fraction) {
    s.memory_limit = config_.SourceOf(kSettingMemoryFraction);
  } else if (config_.reserved_memory != 0) {
    // Free memory less the reserve: the reserve decided it.
    s.memory_limit = config_.SourceOf(kSettingReservedMemory);
  }
  for (const SmPartitionConfig& p : config_.sm_partitions) {
    if (p.ordinal == ordinal) s.sm_partition = config_.SourceOf(kSettingSmPartition);
  }
  return s;
}

std::string Runtime::DeviceList() const {
  // Bounded: a message lists a few devices, never thousands.
  constexpr size_t kShown = 8;
  std::vector<std::string> names;
  for (size_t i = 0; i < all_.size() && i < kShown; ++i) names.push_back(all_[i]->name());
  std::string out = absl::StrJoin(names, ", ");
  if (all_.size() > kShown) absl::StrAppend(&out, ", ... (", all_.size() - kShown, " more)");
  return out;
}

DeviceName Runtime::NameOf(absl::string_view type, int id) const {
  if (config_.cluster == nullptr) return DeviceName::Local(type, id);
  const TaskId& self = config_.cluster->self();
  return DeviceName::ForTask(self.job, self.index, type, id);
}

std::string Runtime::task_prefix() const {
  DeviceName n = NameOf("CPU", 0);
  n.type.reset();
  n.id.reset();
  return n.ToString();
}

absl::Status Runtime::CheckTask(const DeviceName& s, absl::string_view spec,
                                absl::string_view context) const {
  const ClusterSpec* cluster = config_.cluster.get();
  if (cluster == nullptr || (!s.job && !s.task)) return absl::OkStatus();
  // The cluster's tasks that the spec's job and task select.
  int remote = -1;
  for (int r = 0; r < cluster->size(); ++r) {
    const TaskId& t = cluster->task(r);
    if ((s.job && *s.job != t.job) || (s.task && *s.task != t.index)) continue;
    if (r == cluster->rank()) return absl::OkStatus();
    if (remote < 0) remote = r;
  }
  const std::string self = cluster->self().ToString();
  if (remote >= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(context, QuoteUserText(spec), " is a device of remote task ",
                     cluster->task(remote).ToString(), " (rank ", remote, "); this process is ",
                     self, " (rank ", cluster->rank(),
                     "): remote devices are reached through collectives, not handed out as local"));
  }
  // Bounded: a message lists a few tasks, never thousands.
  constexpr int kShown = 8;
  std::vector<std::string> tasks;
  for (int r = 0; r < cluster->size() && r < kShown; ++r) {
    tasks.push_back(
        absl::StrCat(cluster->task(r).ToString(), r == cluster->rank() ? " (this process)" : ""));
  }
  std::string list = absl::StrJoin(tasks, ", ");
  if (cluster->size() > kShown) {
    absl::StrAppend(&list, ", ... (", cluster->size() - kShown, " more)");
  }
  std::string hint;
  if (s.job == kLocalJob && !cluster->is_local_only()) {
    constexpr absl::string_view kLocalNames =
        "; /job:localhost names the devices of a plain local run, this process's are ";
    hint = absl::StrCat(kLocalNames, task_prefix(), "/device:...");
  }
  return absl::NotFoundError(absl::StrCat(
      context, QuoteUserText(spec), " names no task of this cluster; its tasks: ", list, hint));
}

absl::StatusOr<std::vector<LogicalDevice*>> Runtime::FindAll(absl::string_view spec) const {
  VGPU_ASSIGN_OR_RETURN(DeviceName s, DeviceName::Parse(spec));
  VGPU_RETURN_IF_ERROR(CheckTask(s, spec, ""));
  std::vector<LogicalDevice*> out;
  for (size_t i = 0; i < all_.size(); ++i) {
    if (IsSpecification(s, parsed_names_[i])) out.push_back(all_[i]);
  }
  return out;
}

absl::StatusOr<LogicalDevice*> Runtime::Find(absl::string_view spec) const {
  VGPU_ASSIGN_OR_RETURN(std::vector<LogicalDevice*> found, FindAll(spec));
  if (found.empty()) {
    return absl::NotFoundError(
        absl::StrCat("no device matches ", QuoteUserText(spec), "; devices: ", DeviceList()));
  }
  return found.front();
}

absl::StatusOr<LogicalDevice*> Runtime::Place(absl::string_view spec,
                                              const PlaceOptions& options) const {
  const bool soft = options.soft_placement.value_or(config_.soft_placement);
  const bool log = options.log_placement.value_or(config_.log_placement);
  const std::string what = options.what.empty() ? "op" : options.what;
  VGPU_ASSIGN_OR_RETURN(DeviceName s, DeviceName::Parse(spec));
  // Another task's device (or an unknown task) is an error even with soft placement: falling
  // back to a local device would silently run the op in the wrong process.
  VGPU_RETURN_IF_ERROR(CheckTask(s, spec, absl::StrCat("cannot place ", what, " on ")));
  VGPU_ASSIGN_OR_RETURN(std::vector<LogicalDevice*> found, FindAll(spec));
  LogicalDevice* chosen = nullptr;
  std::string note;
  if (!found.empty()) {
    chosen = found.front();
  } else if (!soft) {
    return absl::NotFoundError(absl::StrCat("cannot place ", what, " on ", QuoteUserText(spec),
                                            ": no such device; devices: ", DeviceList(),
                                            " (soft placement, VGPU_SOFT_PLACEMENT=true, would "
                                            "fall back to another device)"));
  } else {
    // Soft: the requested type with any id (job/replica/task ignored), then CPU:0.
    DeviceName same_type;
    same_type.type = s.type;
    if (s.type) {
      for (size_t i = 0; i < all_.size() && chosen == nullptr; ++i) {
        if (IsSpecification(same_type, parsed_names_[i])) chosen = all_[i];
      }
    }
    if (chosen != nullptr) {
      note = ", soft";
    } else {
      chosen = cpu_;
      note = absl::StrCat(", soft: no ", s.type ? *s.type : std::string("matching"),
                          " device, fell back to CPU");
    }
  }
  if (log) Log(absl::StrCat(what, " -> ", chosen->name(), " (requested ", spec, note, ")"));
  return chosen;
}

void Runtime::SetPlacementLogSink(std::function<void(absl::string_view)> sink) {
  vgpu::MutexLock lock(&log_mu_);
  log_sink_ = std::move(sink);
}

void Runtime::Log(absl::string_view line) const {
  vgpu::MutexLock lock(&log_mu_);
  if (log_sink_) {
    log_sink_(line);
  } else {
    std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
  }
}

namespace {

struct DefaultState {
  vgpu::Mutex mu;
  std::optional<RuntimeConfig> config ABSL_GUARDED_BY(mu);  // from SetDefaultRuntimeConfig
  Runtime* runtime ABSL_GUARDED_BY(mu) = nullptr;           // leaked on purpose: lives until exit
};

DefaultState& Default() {
  static DefaultState* state = new DefaultState();
  return *state;
}

}  // namespace

absl::StatusOr<Runtime*> DefaultRuntime() {
  DefaultState& d = Default();
  vgpu::MutexLock lock(&d.mu);
  if (d.runtime != nullptr) return d.runtime;
  RuntimeConfig config;
  if (d.config) {
    config = *d.config;
  } else {
    VGPU_ASSIGN_OR_RETURN(config, RuntimeConfig::FromEnvironment());
  }
  VGPU_ASSIGN_OR_RETURN(std::unique_ptr<Runtime> rt, Runtime::Create(config));
  d.runtime = rt.release();
  return d.runtime;
}

absl::Status SetDefaultRuntimeConfig(const RuntimeConfig& config) {
  DefaultState& d = Default();
  vgpu::MutexLock lock(&d.mu);
  if (d.runtime != nullptr) {
    return absl::FailedPreconditionError(
        "the default runtime's configuration cannot be modified after it has been "
        "initialized; call SetDefaultRuntimeConfig before the first DefaultRuntime() (or "
        "create your own with Runtime::Create)");
  }
  d.config = config;
  return absl::OkStatus();
}

}  // namespace vgpu
