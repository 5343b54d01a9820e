#include "vgpu/strategies/device_set.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/status.h"

namespace vgpu {
namespace strategies {
namespace {

uint64_t RoundUp(uint64_t x, uint64_t m) { return (x + m - 1) / m * m; }

std::string GpuName(int id) {
  return absl::StrCat("/job:localhost/replica:0/task:0/device:GPU:", id);
}

}  // namespace

LimitedExecutorAllocator::LimitedExecutorAllocator(Executor* executor, std::string device_name,
                                                   uint64_t limit, bool host_memory)
    : executor_(executor),
      device_name_(std::move(device_name)),
      limit_(limit),
      host_memory_(host_memory) {
  stats_.bytes_limit = limit;
}

LimitedExecutorAllocator::~LimitedExecutorAllocator() {
  absl::MutexLock l(&mu_);
  for (auto& [ptr, block] : blocks_) {
    (void)(host_memory_ ? executor_->HostFree(block.raw) : executor_->Free(block.raw));
  }
}

AllocatorStats LimitedExecutorAllocator::Stats() const {
  absl::MutexLock l(&mu_);
  return stats_;
}

absl::StatusOr<void*> LimitedExecutorAllocator::DoAllocate(uint64_t bytes, uint64_t alignment) {
  const uint64_t rounded = RoundUp(bytes, kDefaultAlignment);
  absl::MutexLock l(&mu_);
  if (limit_ != 0 && stats_.bytes_in_use + rounded > limit_) {
    ++stats_.num_ooms;
    return absl::ResourceExhaustedError(
        absl::StrCat(device_name_, ": out of memory allocating ", FormatBytes(rounded), " (limit ",
                     FormatBytes(limit_), ", in use ", FormatBytes(stats_.bytes_in_use), ")"));
  }
  // Executor memory is page-aligned; over-allocate only for larger alignments.
  const uint64_t extra = alignment > 4096 ? alignment : 0;
  absl::StatusOr<void*> raw = host_memory_ ? executor_->HostAllocate(rounded + extra)
                                           : executor_->Allocate(rounded + extra);
  if (!raw.ok()) {
    ++stats_.num_ooms;
    return absl::Status(raw.status().code(),
                        absl::StrCat(device_name_, ": ", raw.status().message()));
  }
  uintptr_t p = reinterpret_cast<uintptr_t>(*raw);
  p = (p + alignment - 1) / alignment * alignment;
  void* ptr = reinterpret_cast<void*>(p);
  blocks_[ptr] = Block{*raw, rounded};
  ++stats_.num_allocs;
  ++stats_.regions_mapped;
  stats_.bytes_in_use += rounded;
  stats_.bytes_reserved += rounded;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  stats_.peak_bytes_reserved = std::max(stats_.peak_bytes_reserved, stats_.bytes_reserved);
  stats_.largest_alloc_size = std::max(stats_.largest_alloc_size, rounded);
  return ptr;
}

absl::Status LimitedExecutorAllocator::DoDeallocate(void* ptr) {
  Block block;
  {
    absl::MutexLock l(&mu_);
    auto it = blocks_.find(ptr);
    if (it == blocks_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(device_name_, ": Deallocate of a pointer it does not own"));
    }
    block = it->second;
    blocks_.erase(it);
    ++stats_.num_frees;
    ++stats_.regions_unmapped;
    stats_.bytes_in_use -= block.bytes;
    stats_.bytes_reserved -= block.bytes;
  }
  return host_memory_ ? executor_->HostFree(block.raw) : executor_->Free(block.raw);
}

namespace {

absl::Status AddCpu(Platform* platform, int ordinal, DeviceSet& set) {
  VGPU_ASSIGN_OR_RETURN(Executor * executor, platform->GetExecutor(ordinal));
  VGPU_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream, executor->CreateStream(StreamOptions{}));
  LogicalDeviceInfo info;
  info.type = DeviceType::kCpu;
  info.id = 0;
  info.name = "/job:localhost/replica:0/task:0/device:CPU:0";
  info.allocator_kind = "host";
  auto allocator = std::make_unique<LimitedExecutorAllocator>(executor, info.name, 0, true);
  set.owned.push_back(std::make_unique<LogicalDevice>(std::move(info), executor, std::move(stream),
                                                      std::move(allocator)));
  set.cpu = set.owned.back().get();
  return absl::OkStatus();
}

absl::Status AddGpu(Executor* executor, int id, uint64_t bytes, DeviceSet& set) {
  VGPU_ASSIGN_OR_RETURN(std::unique_ptr<Stream> stream, executor->CreateStream(StreamOptions{}));
  LogicalDeviceInfo info;
  info.type = DeviceType::kGpu;
  info.id = id;
  info.name = GpuName(id);
  info.physical_ordinal = executor->ordinal();
  info.memory_limit = bytes;
  info.allocator_kind = "simple";
  auto allocator = std::make_unique<LimitedExecutorAllocator>(
      executor, absl::StrCat(info.name, " (physical GPU ", executor->ordinal(), ")"), bytes);
  set.owned.push_back(std::make_unique<LogicalDevice>(std::move(info), executor, std::move(stream),
                                                      std::move(allocator)));
  set.gpus.push_back(set.owned.back().get());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DeviceSet> CreateDeviceSet(Platform* platform, int ordinal,
                                          const std::vector<uint64_t>& sizes, bool with_cpu) {
  VGPU_ASSIGN_OR_RETURN(Executor * executor, platform->GetExecutor(ordinal));
  VGPU_ASSIGN_OR_RETURN(PhysicalDeviceInfo phys, executor->Describe());
  uint64_t total = 0;
  for (uint64_t s : sizes) {
    if (s == 0) return absl::InvalidArgumentError("CreateDeviceSet: a logical device of 0 bytes");
    total += s;
  }
  if (total > phys.total_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CreateDeviceSet: ", sizes.size(), " logical devices of ", FormatBytes(total),
        " in all do not fit physical device ", ordinal, " (", FormatBytes(phys.total_bytes), ")"));
  }
  DeviceSet set;
  for (size_t i = 0; i < sizes.size(); ++i) {
    VGPU_RETURN_IF_ERROR(AddGpu(executor, static_cast<int>(i), sizes[i], set));
  }
  if (with_cpu) VGPU_RETURN_IF_ERROR(AddCpu(platform, ordinal, set));
  return set;
}

absl::StatusOr<DeviceSet> CreateDeviceSetAcrossPhysical(Platform* platform,
                                                        const std::vector<int>& ordinals,
                                                        uint64_t bytes_each, bool with_cpu) {
  DeviceSet set;
  for (size_t i = 0; i < ordinals.size(); ++i) {
    VGPU_ASSIGN_OR_RETURN(Executor * executor, platform->GetExecutor(ordinals[i]));
    VGPU_RETURN_IF_ERROR(AddGpu(executor, static_cast<int>(i), bytes_each, set));
  }
  if (with_cpu && !ordinals.empty()) VGPU_RETURN_IF_ERROR(AddCpu(platform, ordinals[0], set));
  return set;
}

}  // namespace strategies
}  // namespace vgpu
