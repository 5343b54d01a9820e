// The training-strategy interface vgpu-train drives: one optimizer step over a global batch,
// loss/accuracy bookkeeping without a per-step synchronisation, evaluation, and the model's
// parameters. Strategies see the model only through model.h. Implementations: MirroredStrategy
// (also "single" with one device, and "multi-worker-mirrored" across processes),
// ModelParallelStrategy, CentralStorageStrategy, ParameterServerStrategy (across processes).
//
// Thread safety: a Strategy is driven from one thread; it runs work on its devices' streams.
#ifndef VGPU_STRATEGIES_STRATEGY_H_
#define VGPU_STRATEGIES_STRATEGY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "vgpu/devices/logical_device.h"
#include "vgpu/strategies/model.h"

namespace vgpu {
namespace strategies {

// The strategies vgpu-train offers; "single" is MirroredStrategy on one device.
enum class StrategyKind {
  kSingle,
  kMirrored,
  kModelParallel,
  kCentralStorage,
  kMultiWorkerMirrored,  // several processes (multi_worker_mirrored.h)
  kParameterServer,      // several processes (parameter_server.h)
};
// "single", "mirrored", "model-parallel", "central-storage", "multi-worker-mirrored",
// "parameter-server".
absl::string_view StrategyKindName(StrategyKind kind);
// The inverse of StrategyKindName (case-insensitive); InvalidArgument naming the text and the
// choices otherwise.
absl::StatusOr<StrategyKind> ParseStrategyKind(absl::string_view text);
// Every kind, in the order above (for usage text and tests).
const std::vector<StrategyKind>& AllStrategyKinds();
// Whether `kind` is a cluster strategy (one process of several, launched by mpirun).
bool IsClusterStrategy(StrategyKind kind);

struct StrategyOptions {
  std::shared_ptr<const Model> model;  // required (e.g. MakeMlp() of nn.h)
  OptimizerOptions optimizer;
  int global_batch = 256;  // largest batch Step() accepts
  uint64_t seed = 0;
  int eval_batch = 1000;  // rows per evaluation pass (capped by the device buffers)
  int max_slots = 512;    // steps between automatic loss read-backs
};

struct StepTotals {
  double loss_sum = 0.0;  // summed per-example loss
  int64_t correct = 0;
  int64_t examples = 0;
  double mean_loss() const { return examples ? loss_sum / examples : 0.0; }
  double accuracy() const { return examples ? static_cast<double>(correct) / examples : 0.0; }
};

// A 64-bit FNV-1a hash of the parameters' bytes as 16 hex digits: equal parameters, equal
// checksum, so runs, replicas and ranks can be compared (vgpu-train's "params_checksum").
std::string ParamsChecksum(absl::Span<const float> params);

// InvalidArgument naming `strategy` when options.model is missing or invalid.
absl::Status CheckModel(const StrategyOptions& options, absl::string_view strategy);

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual StrategyKind kind() const = 0;
  std::string name() const { return std::string(StrategyKindName(kind())); }
  virtual std::vector<LogicalDevice*> devices() const = 0;
  // Enqueues one step on `rows` examples (x: rows x inputs row-major, y: labels). The host
  // memory must stay valid until Flush() returns.
  virtual absl::Status Step(const float* x, const int32_t* y, int rows) = 0;
  // Waits for every queued step; returns the totals since the previous Flush.
  virtual absl::StatusOr<StepTotals> Flush() = 0;
  // Loss and accuracy on `n` examples (forward only).
  virtual absl::StatusOr<StepTotals> Evaluate(const float* x, const int32_t* y, int n) = 0;
  // The model's flat parameters (see model.h for the layout) from the first replica.
  virtual absl::StatusOr<std::vector<float>> Params() = 0;
  // Human-readable placement: one line per stage or replica.
  virtual std::string PlacementReport() const = 0;
};

}  // namespace strategies
}  // namespace vgpu

#endif  // VGPU_STRATEGIES_STRATEGY_H_
