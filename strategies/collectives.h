// Cross-device all-reduce over float buffers of logical devices, with the algorithm chosen by
// topology (the all-reduce table in docs/strategies.md) and overridable:
//   kLocal        all replicas on one physical device: one SumN pass over the N buffers (all
//                 logical devices of a physical device share its memory), then broadcast by
//                 device-to-device copies; streams ordered with events, nothing blocks the host.
//   kNccl         one replica per physical GPU: NCCL (runtime/nccl.h).
//   kHierarchical several GPUs with several replicas each: local reduce per GPU, NCCL between
//                 the GPUs, local broadcast.
//   kViaHost      anything else (CPU:0, mixed platforms, no NCCL): copy to host, sum in float64,
//                 copy back. Always correct; synchronous.
// On the host platform NCCL is the host communicator (runtime/host/host_collectives.h), so every
// row of the table runs, and is tested, without a GPU.
//
// Thread safety: an AllReducer may be used from one thread at a time (its events and staging
// are reused); different AllReducers are independent.
#ifndef VGPU_STRATEGIES_COLLECTIVES_H_
#define VGPU_STRATEGIES_COLLECTIVES_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "vgpu/devices/logical_device.h"
#include "vgpu/runtime/nccl.h"

namespace vgpu {
namespace strategies {

enum class AllReduceAlgorithm { kAuto, kLocal, kNccl, kHierarchical, kViaHost };

absl::string_view AllReduceAlgorithmName(AllReduceAlgorithm algorithm);
// "auto" | "local" | "nccl" | "hierarchical" | "via-host"; InvalidArgument otherwise.
absl::StatusOr<AllReduceAlgorithm> ParseAllReduceAlgorithm(absl::string_view text);

// The table (docs/strategies.md): local when every device is a GPU of the same physical device; NCCL with
// one GPU per physical device and hierarchical with several physical devices holding several
// each (cuda and host); via-host otherwise (CPU devices, mixed platforms).
AllReduceAlgorithm ChooseAllReduceAlgorithm(absl::Span<LogicalDevice* const> devices);

// What the choice looks at, per device (so the table is testable without a GPU).
struct DeviceTopology {
  bool is_gpu = true;
  std::string platform;  // "cuda", "host"
  int physical = 0;      // physical ordinal
  // Platform::HasCommunicator: NCCL on cuda, the host communicator on host.
  bool has_communicator = true;
};
AllReduceAlgorithm ChooseAllReduceAlgorithm(absl::Span<const DeviceTopology> devices);

class AllReducer {
 public:
  // `algorithm` kAuto picks by ChooseAllReduceAlgorithm, and falls back to kViaHost when the
  // chosen NCCL cannot be created (no libnccl, a build without CUDA; fallback_reason() says
  // why). Errors: InvalidArgument for no devices, a device twice, kLocal over several physical
  // devices or kNccl with two devices of one physical device; an explicit kNccl /
  // kHierarchical returns NcclCommunicator::Create's error.
  static absl::StatusOr<std::unique_ptr<AllReducer>> Create(
      std::vector<LogicalDevice*> devices,
      AllReduceAlgorithm algorithm = AllReduceAlgorithm::kAuto);
  ~AllReducer();

  AllReduceAlgorithm algorithm() const { return algorithm_; }
  const std::vector<LogicalDevice*>& devices() const { return devices_; }
  // Why kAuto's choice was replaced by kViaHost; empty when it was not.
  const std::string& fallback_reason() const { return fallback_reason_; }

  // buffers[i] (device memory of devices()[i], `count` floats) is reduced in place: after the
  // call, work enqueued later on every device's stream sees sum (or mean) of all the inputs.
  // The reduction runs after the work already enqueued on each stream.
  absl::Status AllReduce(absl::Span<float* const> buffers, uint64_t count, AllReduceOp op);

 private:
  AllReducer() = default;
  absl::Status Local(absl::Span<float* const> buffers, uint64_t count, float scale);
  absl::Status ViaHost(absl::Span<float* const> buffers, uint64_t count, float scale);
  absl::Status Hierarchical(absl::Span<float* const> buffers, uint64_t count, AllReduceOp op);

  AllReduceAlgorithm algorithm_ = AllReduceAlgorithm::kViaHost;
  std::vector<LogicalDevice*> devices_;
  std::vector<std::unique_ptr<Event>> ready_;   // per device: inputs written
  std::vector<std::unique_ptr<Event>> copied_;  // per device: broadcast copy done
  std::unique_ptr<Event> done_;                 // the root's reduction done
  std::vector<std::vector<int>> groups_;        // hierarchical: device indices per physical GPU
  std::unique_ptr<NcclCommunicator> nccl_;
  std::string fallback_reason_;
  std::vector<float> staging_;
  std::vector<double> acc_;
};

}  // namespace strategies
}  // namespace vgpu

#endif  // VGPU_STRATEGIES_COLLECTIVES_H_
