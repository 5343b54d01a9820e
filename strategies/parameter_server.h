// ParameterServerStrategy (TensorFlow's): the model's variables (Model::Variables) are sharded
// over the `ps` tasks of a cluster, round-robin as replica_device_setter(ps_tasks=N) places
// them or by size (greedy: each variable to the least-loaded server); the ps tasks hold them
// with their optimizer state (on CPU:0 unless given a GPU) and apply the updates; the workers
// compute. Each worker step: every replica of the worker computes the gradient of its share of
// the global batch (as mirrored.h splits it over every replica of every worker, scaled by
// 1/global rows), the worker sums its replicas (collectives/communicator.h), pushes each
// server its variables' gradients and pulls the updated values back.
//   synchronous (default): a server waits for every worker's push, sums them in worker order
//     and applies ONE update per step: the same numbers as mirrored training over all the
//     workers' replicas, and every worker holds the same parameters after every step.
//   asynchronous: a server applies each push as it arrives (that worker's gradient, rescaled to
//     a whole batch) and answers that worker at once; a push computed on parameters that others
//     have updated since is stale by that many updates (ParameterServerStats).
// Transport: MPI point to point (runtime/mpi/world.h) with its deadlines: a lost worker or
// server becomes an error naming the rank, never a hang.
//
// Thread safety: drive from one thread; ParameterServer::Serve runs on the server's main
// thread. Every worker calls Finish once after its last step (the servers' loop ends when
// every worker has).
#ifndef VGPU_STRATEGIES_PARAMETER_SERVER_H_
#define VGPU_STRATEGIES_PARAMETER_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "vgpu/runtime/mpi/world.h"
#include "vgpu/strategies/collectives/communicator.h"
#include "vgpu/strategies/stage_chain.h"
#include "vgpu/strategies/step_accounting.h"
#include "vgpu/strategies/strategy.h"

namespace vgpu {
namespace strategies {

enum class ShardPolicy { kRoundRobin, kBySize };
// "round-robin" | "by-size"; InvalidArgument naming the text otherwise.
absl::StatusOr<ShardPolicy> ParseShardPolicy(absl::string_view text);
absl::string_view ShardPolicyName(ShardPolicy policy);

// The server (0..ps_tasks-1) of each variable. Round-robin: variable i to server i % ps_tasks.
// By size: in order, each to the server holding the fewest floats so far (lowest index on a
// tie). InvalidArgument for ps_tasks < 1.
absl::StatusOr<std::vector<int>> ShardVariables(const std::vector<Model::Variable>& variables,
                                                int ps_tasks, ShardPolicy policy);

struct ParameterServerOptions {
  mpi::World* world = nullptr;    // required
  std::vector<int> worker_ranks;  // world ranks of the workers, chief (task 0) first
  std::vector<int> ps_ranks;      // world ranks of the ps tasks, in task order
  ShardPolicy sharding = ShardPolicy::kRoundRobin;
  bool async = false;
};

struct ParameterServerStats {
  int64_t updates = 0;        // optimizer steps applied (server) or answered pushes (worker)
  int64_t max_staleness = 0;  // asynchronous: the most updates a push was behind
  double mean_staleness = 0;  // asynchronous: the mean
};

// The worker side.
class ParameterServerStrategy : public Strategy {
 public:
  // `devices`: this worker's replicas. InvalidArgument for no workers or servers, a rank in
  // both lists or twice, this rank not a worker, or workers with different device counts
  // (checked with one collective over the world: every worker and server creates its side at
  // the same point).
  static absl::StatusOr<std::unique_ptr<ParameterServerStrategy>> Create(
      std::vector<LogicalDevice*> devices, const StrategyOptions& options,
      const ParameterServerOptions& ps);
  ~ParameterServerStrategy() override;

  StrategyKind kind() const override { return StrategyKind::kParameterServer; }
  std::vector<LogicalDevice*> devices() const override { return devices_; }
  absl::Status Step(const float* x, const int32_t* y, int rows) override;
  absl::StatusOr<StepTotals> Flush() override;
  absl::StatusOr<StepTotals> Evaluate(const float* x, const int32_t* y, int n) override;
  absl::StatusOr<std::vector<float>> Params() override;
  std::string PlacementReport() const override;

  // After the last step: tells every server, pulls the final values (the same on every worker
  // and server) into the replicas and returns them. Once.
  absl::StatusOr<std::vector<float>> Finish();
  const ParameterServerStats& stats() const { return stats_; }

 private:
  ParameterServerStrategy() = default;
  // Sends every server its variables' slice of `grads` (null: zeros) in a message of `kind`,
  // then takes each server's answer into params_ and its version into seen_version_.
  absl::Status PushAndPull(int64_t kind, const float* grads);
  std::vector<LogicalDevice*> devices_;
  StrategyOptions options_;
  ParameterServerOptions ps_;
  int worker_index_ = 0;
  std::vector<std::unique_ptr<StageChain>> replicas_;
  std::unique_ptr<collectives::Communicator> local_;
  std::vector<int> owner_;  // per variable
  std::vector<Model::Variable> variables_;
  std::vector<float> grads_, params_;
  std::vector<int64_t> seen_version_;  // per server
  StepAccounting accounting_;
  ParameterServerStats stats_;
  bool finished_ = false;
};

// The server side: one per ps task.
class ParameterServer {
 public:
  // `device`: where the variables and optimizer state live (CPU:0, or a GPU if the task has
  // one). Same validation as ParameterServerStrategy::Create, and this rank must be a server.
  static absl::StatusOr<std::unique_ptr<ParameterServer>> Create(LogicalDevice* device,
                                                                 const StrategyOptions& options,
                                                                 const ParameterServerOptions& ps);
  ~ParameterServer();

  // Serves pushes until every worker has called Finish; then takes part in the final
  // exchange, after which Params() is the whole final model.
  absl::Status Serve();
  const std::vector<float>& Params() const { return params_; }
  // Loss and accuracy of the final model on `n` examples, on this server's device.
  absl::StatusOr<StepTotals> Evaluate(const float* x, const int32_t* y, int n);
  const ParameterServerStats& stats() const { return stats_; }
  // The variables this server holds, one line each (for the placement report).
  std::string PlacementReport() const;

 private:
  ParameterServer() = default;
  absl::Status Apply(const std::vector<float>& summed, int64_t step);

  LogicalDevice* device_ = nullptr;
  StrategyOptions options_;
  ParameterServerOptions ps_;
  int server_index_ = 0;
  std::unique_ptr<StageChain> stage_;
  std::vector<Model::Variable> variables_;
  std::vector<int> owner_;
  std::vector<float> params_;  // the whole model; this server's variables are current
  ParameterServerStats stats_;
};

}  // namespace strategies
}  // namespace vgpu

#endif  // VGPU_STRATEGIES_PARAMETER_SERVER_H_
