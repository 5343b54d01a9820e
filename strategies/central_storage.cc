#include "vgpu/strategies/central_storage.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "vgpu/runtime/kernels.h"
#include "vgpu/runtime/status.h"
#include "vgpu/strategies/mirrored.h"
#include "vgpu/strategies/replica_eval.h"

namespace vgpu {
namespace strategies {

absl::StatusOr<std::unique_ptr<CentralStorageStrategy>> CentralStorageStrategy::Create(
    LogicalDevice* cpu, std::vector<LogicalDevice*> gpus, const StrategyOptions& options) {
  if (cpu == nullptr || cpu->stream() == nullptr || cpu->executor() == nullptr) {
    return absl::InvalidArgumentError(
        "CentralStorageStrategy: needs CPU:0 with a stream (a platform with a device)");
  }
  if (gpus.empty()) return absl::InvalidArgumentError("CentralStorageStrategy: no GPUs");
  if (static_cast<int>(gpus.size()) > Kernels::kMaxSumInputs) {
    return absl::InvalidArgumentError(absl::StrCat("CentralStorageStrategy: ", gpus.size(),
                                                   " GPUs; at most ", Kernels::kMaxSumInputs));
  }
  if (options.global_batch <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CentralStorageStrategy: global batch ", options.global_batch));
  }
  VGPU_RETURN_IF_ERROR(CheckModel(options, "CentralStorageStrategy"));
  std::unique_ptr<CentralStorageStrategy> c(new CentralStorageStrategy());
  c->cpu_ = cpu;
  c->gpus_ = gpus;
  c->options_ = options;
  const int n = static_cast<int>(gpus.size());
  VGPU_ASSIGN_OR_RETURN(c->central_, options.model->CreateStage(cpu, 0, options.model->num_layers(),
                                                                1, options.optimizer, 1));
  VGPU_RETURN_IF_ERROR(c->central_->LoadParams(options.model->InitialParams(options.seed)));
  const int64_t count = static_cast<int64_t>(c->central_->param_count());
  // Replicas keep no optimizer state: SGD-kind stages allocate none.
  OptimizerOptions replica_opt = options.optimizer;
  replica_opt.kind = OptimizerKind::kSgd;
  const int per_replica = MirroredStrategy::RowsForReplica(options.global_batch, n, 0);
  const int max_rows = std::max(per_replica, std::min(options.eval_batch, options.global_batch));
  for (LogicalDevice* g : gpus) {
    VGPU_ASSIGN_OR_RETURN(Tensor t, Tensor::Create(cpu, {count}));
    c->staging_.push_back(std::move(t));
    VGPU_ASSIGN_OR_RETURN(
        auto chain, CreateReplica(*options.model, g, max_rows, replica_opt, options.max_slots));
    c->replicas_.push_back(std::move(chain));
    VGPU_ASSIGN_OR_RETURN(auto ev, g->executor()->CreateEvent());
    c->sent_.push_back(std::move(ev));
  }
  VGPU_ASSIGN_OR_RETURN(c->updated_, cpu->executor()->CreateEvent());
  VGPU_RETURN_IF_ERROR(cpu->stream()->RecordEvent(c->updated_.get()));
  return c;
}

CentralStorageStrategy::~CentralStorageStrategy() {
  for (auto& r : replicas_) (void)r->Synchronize();
  if (cpu_ != nullptr) (void)cpu_->stream()->Synchronize();
}

std::vector<LogicalDevice*> CentralStorageStrategy::devices() const {
  std::vector<LogicalDevice*> out = gpus_;
  out.push_back(cpu_);
  return out;
}

absl::Status CentralStorageStrategy::FetchParams(int i) {
  ModelStage* s = replicas_[i]->front();
  VGPU_RETURN_IF_ERROR(s->stream()->WaitEvent(updated_.get()));
  return s->stream()->MemcpyD2D(s->params(), central_->params(), s->param_count() * 4);
}

absl::Status CentralStorageStrategy::Step(const float* x, const int32_t* y, int rows) {
  if (rows <= 0 || rows > options_.global_batch) {
    return absl::InvalidArgumentError(absl::StrCat("CentralStorageStrategy::Step: ", rows,
                                                   " rows; the global batch is 1..",
                                                   options_.global_batch));
  }
  if (accounting_.slot() == options_.max_slots) VGPU_RETURN_IF_ERROR(Flush().status());
  const int n = static_cast<int>(replicas_.size());
  const int in = options_.model->input_width();
  const uint64_t count = central_->param_count();
  Stream* cpu = cpu_->stream();
  int offset = 0;
  std::vector<const float*> inputs;
  for (int i = 0; i < n; ++i) {
    const int r = MirroredStrategy::RowsForReplica(rows, n, i);
    StageChain& rep = *replicas_[i];
    Stream* s = rep.front()->stream();
    if (r > 0) {
      VGPU_RETURN_IF_ERROR(FetchParams(i));
      VGPU_RETURN_IF_ERROR(rep.Upload(x + static_cast<int64_t>(offset) * in, y + offset, r));
      VGPU_RETURN_IF_ERROR(rep.Forward(r));
      VGPU_RETURN_IF_ERROR(
          rep.back()->Loss(r, 1.0f / static_cast<float>(rows), accounting_.slot()));
      VGPU_RETURN_IF_ERROR(rep.Backward(r));
      offset += r;
    } else {
      VGPU_RETURN_IF_ERROR(rep.back()->ZeroGradsAndSlot(accounting_.slot()));
    }
    // The previous update read this staging buffer: FetchParams waited for it; an idle replica
    // must wait too.
    if (r == 0) VGPU_RETURN_IF_ERROR(s->WaitEvent(updated_.get()));
    VGPU_RETURN_IF_ERROR(s->MemcpyD2D(staging_[i].data(), rep.front()->grads(), count * 4));
    VGPU_RETURN_IF_ERROR(s->RecordEvent(sent_[i].get()));
    VGPU_RETURN_IF_ERROR(cpu->WaitEvent(sent_[i].get()));
    inputs.push_back(staging_[i].data());
  }
  VGPU_ASSIGN_OR_RETURN(Kernels * kernels, cpu_->executor()->GetKernels());
  VGPU_RETURN_IF_ERROR(kernels->SumN(cpu, inputs, central_->grads(), count, 1.0f));
  VGPU_RETURN_IF_ERROR(central_->Update(++step_));
  VGPU_RETURN_IF_ERROR(cpu->RecordEvent(updated_.get()));
  accounting_.StepQueued(rows);
  return absl::OkStatus();
}

absl::StatusOr<StepTotals> CentralStorageStrategy::Flush() {
  // Every stream is drained even after an error; the first error is returned.
  absl::Status status;
  for (auto& rep : replicas_) status.Update(accounting_.ReadSlotsAndDrain(*rep));
  status.Update(cpu_->stream()->Synchronize());
  VGPU_RETURN_IF_ERROR(status);
  return accounting_.TakeTotals();
}

absl::StatusOr<StepTotals> CentralStorageStrategy::Evaluate(const float* x, const int32_t* y,
                                                            int n) {
  VGPU_RETURN_IF_ERROR(Flush().status());
  for (int i = 0; i < static_cast<int>(replicas_.size()); ++i) {
    VGPU_RETURN_IF_ERROR(FetchParams(i));  // replicas compute with the central variables
  }
  return EvaluateRoundRobin(replicas_, options_.model->input_width(), options_.max_slots, x, y, n);
}

absl::StatusOr<std::vector<float>> CentralStorageStrategy::Params() {
  std::vector<float> p;
  VGPU_RETURN_IF_ERROR(central_->ReadParams(p));
  return p;
}

std::string CentralStorageStrategy::PlacementReport() const {
  std::string out = absl::StrCat("central-storage: variables and optimizer state on ", cpu_->name(),
                                 "; compute on ", gpus_.size(), " replica(s)\n");
  for (size_t i = 0; i < gpus_.size(); ++i) {
    absl::StrAppend(&out, "  replica ", i, " -> ", gpus_[i]->name(), "\n");
  }
  return out;
}

}  // namespace strategies
}  // namespace vgpu
