#include "vgpu/strategies/mirrored.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/kernels.h"
#include "vgpu/runtime/status.h"
#include "vgpu/strategies/replica_eval.h"

namespace vgpu {
namespace strategies {

int MirroredStrategy::RowsForReplica(int rows, int replicas, int i) {
  return strategies::RowsForReplica(rows, replicas, i);
}

int MirroredStrategy::RowsBeforeReplica(int rows, int replicas, int i) {
  return strategies::RowsBeforeReplica(rows, replicas, i);
}

absl::StatusOr<std::unique_ptr<MirroredStrategy>> MirroredStrategy::CreateMultiWorker(
    std::vector<LogicalDevice*> devices, const StrategyOptions& options, mpi::World* world,
    const std::string& communicator_kind) {
  VGPU_ASSIGN_OR_RETURN(std::unique_ptr<MirroredStrategy> m, CreateReplicas(devices, options));
  collectives::CommunicatorOptions co;
  co.kind = communicator_kind;
  co.world = world;
  VGPU_ASSIGN_OR_RETURN(m->comm_, collectives::CreateCommunicator(devices, co));
  m->first_replica_ = m->comm_->first_rank();
  m->total_replicas_ = m->comm_->size();
  return m;
}

absl::StatusOr<std::unique_ptr<MirroredStrategy>> MirroredStrategy::CreateReplicas(
    std::vector<LogicalDevice*> devices, const StrategyOptions& options) {
  if (devices.empty()) return absl::InvalidArgumentError("MirroredStrategy: no devices");
  if (options.global_batch <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("MirroredStrategy: global batch ", options.global_batch));
  }
  VGPU_RETURN_IF_ERROR(CheckModel(options, "MirroredStrategy"));
  std::unique_ptr<MirroredStrategy> m(new MirroredStrategy());
  m->total_replicas_ = static_cast<int>(devices.size());
  m->devices_ = devices;
  m->options_ = options;
  VGPU_ASSIGN_OR_RETURN(
      m->replicas_, CreateDataParallelReplicas(devices, options, static_cast<int>(devices.size()),
                                               options.model->InitialParams(options.seed)));
  for (const auto& chain : m->replicas_) m->grad_buffers_.push_back(chain->front()->grads());
  return m;
}

absl::StatusOr<std::unique_ptr<MirroredStrategy>> MirroredStrategy::Create(
    std::vector<LogicalDevice*> devices, const StrategyOptions& options,
    AllReduceAlgorithm algorithm) {
  VGPU_ASSIGN_OR_RETURN(std::unique_ptr<MirroredStrategy> m, CreateReplicas(devices, options));
  const int n = static_cast<int>(devices.size());
  VGPU_ASSIGN_OR_RETURN(m->reducer_, AllReducer::Create(devices, algorithm));
  m->sharded_ = n > 1 && m->reducer_->algorithm() == AllReduceAlgorithm::kLocal;
  if (m->sharded_) {
    const uint64_t count = m->replicas_[0]->front()->param_count();
    for (int i = 0; i <= n; ++i) {
      // Boundaries on 64-byte multiples so each shard's loops start aligned.
      uint64_t b = count * i / n / 16 * 16;
      m->shard_begin_.push_back(i == n ? count : b);
    }
    for (LogicalDevice* d : devices) {
      VGPU_ASSIGN_OR_RETURN(auto ready, d->executor()->CreateEvent());
      VGPU_ASSIGN_OR_RETURN(auto updated, d->executor()->CreateEvent());
      m->grads_ready_.push_back(std::move(ready));
      m->shard_updated_.push_back(std::move(updated));
    }
  }
  return m;
}

MirroredStrategy::~MirroredStrategy() {
  for (auto& r : replicas_) (void)r->Synchronize();
}

absl::Status MirroredStrategy::Step(const float* x, const int32_t* y, int rows) {
  if (rows <= 0 || rows > options_.global_batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MirroredStrategy::Step: ", rows, " rows; the global batch is 1..", options_.global_batch));
  }
  if (accounting_.slot() == options_.max_slots) VGPU_RETURN_IF_ERROR(Flush().status());
  const int n = num_replicas();
  VGPU_ASSIGN_OR_RETURN(const int local_rows,
                        ReplicaGradients(replicas_, options_.model->input_width(), x, y, rows,
                                         total_replicas_, first_replica_, accounting_.slot()));
  ++step_;
  if (comm_ != nullptr) {
    // Every replica of every process gets the same summed gradient, so the same update.
    std::vector<collectives::RankBuffer> bufs;
    for (int i = 0; i < n; ++i) {
      bufs.push_back({replicas_[i]->front()->stream(), grad_buffers_[i], grad_buffers_[i]});
    }
    VGPU_RETURN_IF_ERROR(
        comm_->AllReduce(bufs, replicas_[0]->front()->param_count(), collectives::ReduceOp::kSum));
    for (auto& rep : replicas_) VGPU_RETURN_IF_ERROR(rep->Update(step_));
  } else if (sharded_) {
    VGPU_RETURN_IF_ERROR(ShardedUpdate());
  } else {
    if (n > 1) {
      VGPU_RETURN_IF_ERROR(reducer_->AllReduce(grad_buffers_, replicas_[0]->front()->param_count(),
                                               AllReduceOp::kSum));
    }
    for (auto& rep : replicas_) VGPU_RETURN_IF_ERROR(rep->Update(step_));
  }
  accounting_.StepQueued(local_rows);
  return absl::OkStatus();
}

absl::Status MirroredStrategy::ShardedUpdate() {
  const int n = num_replicas();
  VGPU_ASSIGN_OR_RETURN(Kernels * kernels, devices_[0]->executor()->GetKernels());
  for (int i = 0; i < n; ++i) {
    VGPU_RETURN_IF_ERROR(replicas_[i]->front()->stream()->RecordEvent(grads_ready_[i].get()));
  }
  // Reduce-scatter fused with the update: replica k owns shard k.
  std::vector<const float*> inputs(n);
  for (int k = 0; k < n; ++k) {
    ModelStage* owner = replicas_[k]->front();
    Stream* s = owner->stream();
    for (int i = 0; i < n; ++i) {
      if (i != k) VGPU_RETURN_IF_ERROR(s->WaitEvent(grads_ready_[i].get()));
    }
    const uint64_t b = shard_begin_[k], e = shard_begin_[k + 1];
    if (e > b) {
      for (int i = 0; i < n; ++i) inputs[i] = grad_buffers_[i] + b;
      if (n <= Kernels::kMaxSumInputs) {
        VGPU_RETURN_IF_ERROR(kernels->SumN(s, inputs, grad_buffers_[k] + b, e - b, 1.0f));
      } else {
        // More replicas than one SumN takes: fold in groups.
        VGPU_RETURN_IF_ERROR(kernels->SumN(s, absl::MakeSpan(inputs.data(), Kernels::kMaxSumInputs),
                                           grad_buffers_[k] + b, e - b, 1.0f));
        for (size_t pos = Kernels::kMaxSumInputs; pos < inputs.size();) {
          std::vector<const float*> part = {grad_buffers_[k] + b};
          while (pos < inputs.size() && part.size() < Kernels::kMaxSumInputs) {
            part.push_back(inputs[pos++]);
          }
          VGPU_RETURN_IF_ERROR(kernels->SumN(s, part, grad_buffers_[k] + b, e - b, 1.0f));
        }
      }
      VGPU_RETURN_IF_ERROR(owner->UpdateRange(step_, grad_buffers_[k], b, e));
    }
    VGPU_RETURN_IF_ERROR(s->RecordEvent(shard_updated_[k].get()));
  }
  // All-gather of the updated parameters.
  for (int j = 0; j < n; ++j) {
    ModelStage* dst = replicas_[j]->front();
    Stream* s = dst->stream();
    for (int k = 0; k < n; ++k) {
      const uint64_t b = shard_begin_[k], e = shard_begin_[k + 1];
      if (k == j || e == b) continue;
      VGPU_RETURN_IF_ERROR(s->WaitEvent(shard_updated_[k].get()));
      VGPU_RETURN_IF_ERROR(s->MemcpyD2D(dst->params() + b, replicas_[k]->front()->params() + b,
                                        (e - b) * sizeof(float)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<StepTotals> MirroredStrategy::Flush() {
  // Also when no step is pending: a failed step's sticky error surfaces here.
  return FlushReplicas(replicas_, accounting_);
}

absl::StatusOr<StepTotals> MirroredStrategy::Evaluate(const float* x, const int32_t* y, int n) {
  VGPU_RETURN_IF_ERROR(Flush().status());
  return EvaluateRoundRobin(replicas_, options_.model->input_width(), options_.max_slots, x, y, n);
}

absl::StatusOr<std::vector<float>> MirroredStrategy::Params() { return ReplicaParams(0); }

absl::StatusOr<std::vector<float>> MirroredStrategy::ReplicaParams(int i) {
  if (i < 0 || i >= num_replicas()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ReplicaParams: replica ", i, " of ", num_replicas()));
  }
  std::vector<float> p;
  VGPU_RETURN_IF_ERROR(replicas_[i]->ReadParams(p));
  return p;
}

std::string MirroredStrategy::PlacementReport() const {
  if (comm_ != nullptr) {
    std::string out = absl::StrCat(
        name(), ": replicas ", first_replica_, "..", first_replica_ + num_replicas() - 1, " of ",
        total_replicas_, ", gradients summed by the \"", comm_->kind(), "\" communicator",
        comm_->fallback_reason().empty() ? "" : absl::StrCat(" (", comm_->fallback_reason(), ")"),
        "\n");
    for (int i = 0; i < num_replicas(); ++i) {
      absl::StrAppend(&out, "  replica ", first_replica_ + i, " -> ", devices_[i]->name(), " (",
                      RowsForReplica(options_.global_batch, total_replicas_, first_replica_ + i),
                      " of each global batch of ", options_.global_batch, ")\n");
    }
    return out;
  }
  std::string out = absl::StrCat(name(), ": ", num_replicas(), " replica(s), all-reduce ",
                                 AllReduceAlgorithmName(reducer_->algorithm()),
                                 sharded_ ? " (fused with the update: reduce-scatter, update "
                                            "shard, all-gather parameters)"
                                          : "",
                                 "\n");
  for (int i = 0; i < num_replicas(); ++i) {
    absl::StrAppend(&out, "  replica ", i, " -> ", devices_[i]->name(), " (",
                    RowsForReplica(options_.global_batch, num_replicas(), i),
                    " of each global batch of ", options_.global_batch, ")\n");
  }
  return out;
}

}  // namespace strategies
}  // namespace vgpu
