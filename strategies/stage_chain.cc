#include "vgpu/strategies/stage_chain.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "vgpu/runtime/status.h"
#include "vgpu/strategies/tensor.h"

namespace vgpu {
namespace strategies {

absl::StatusOr<std::unique_ptr<StageChain>> StageChain::Create(
    std::vector<std::unique_ptr<ModelStage>> stages) {
  if (stages.empty()) return absl::InvalidArgumentError("StageChain: no stages");
  for (size_t i = 0; i < stages.size(); ++i) {
    if (stages[i]->first() != (i == 0 ? 0 : stages[i - 1]->last())) {
      return absl::InvalidArgumentError("StageChain: stages are not consecutive layers");
    }
  }
  if (!stages.back()->is_final()) {
    return absl::InvalidArgumentError(
        "StageChain: the last stage must hold the model's last layer");
  }
  auto chain = std::make_unique<StageChain>();
  for (size_t i = 0; i + 1 < stages.size(); ++i) {
    VGPU_ASSIGN_OR_RETURN(auto f, stages[i]->device()->executor()->CreateEvent());
    VGPU_ASSIGN_OR_RETURN(auto b, stages[i + 1]->device()->executor()->CreateEvent());
    VGPU_ASSIGN_OR_RETURN(auto c, stages[i + 1]->device()->executor()->CreateEvent());
    chain->fwd_events_.push_back(std::move(f));
    chain->consumed_events_.push_back(std::move(c));
    chain->bwd_events_.push_back(std::move(b));
  }
  chain->stages_ = std::move(stages);
  return chain;
}

StageChain::~StageChain() { (void)Synchronize(); }

absl::Status StageChain::Upload(const float* x, const int32_t* y, int rows) {
  if (rows <= 0 || rows > front()->max_rows() || rows > back()->max_rows()) {
    return absl::InvalidArgumentError(
        absl::StrCat("StageChain::Upload: ", rows, " rows; at most ", front()->max_rows()));
  }
  VGPU_RETURN_IF_ERROR(
      front()->stream()->MemcpyH2D(front()->input(), x, uint64_t{4} * rows * front()->in_width()));
  return back()->stream()->MemcpyH2D(back()->labels(), y, uint64_t{4} * rows);
}

absl::Status StageChain::Forward(int rows) {
  for (size_t i = 0; i < stages_.size(); ++i) {
    VGPU_RETURN_IF_ERROR(stages_[i]->Forward(rows));
    if (i + 1 < stages_.size()) {
      ModelStage* a = stages_[i].get();
      ModelStage* b = stages_[i + 1].get();
      VGPU_RETURN_IF_ERROR(CopyAcrossStreams(a->stream(), b->stream(), fwd_events_[i].get(),
                                             b->input(), a->output(),
                                             uint64_t{4} * rows * a->out_width()));
      if (a->stream() != b->stream()) {
        VGPU_RETURN_IF_ERROR(b->stream()->RecordEvent(consumed_events_[i].get()));
        VGPU_RETURN_IF_ERROR(a->stream()->WaitEvent(consumed_events_[i].get()));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status StageChain::Backward(int rows) {
  for (size_t i = stages_.size(); i-- > 0;) {
    VGPU_RETURN_IF_ERROR(stages_[i]->Backward(rows));
    if (i > 0) {
      ModelStage* a = stages_[i].get();
      ModelStage* b = stages_[i - 1].get();
      VGPU_RETURN_IF_ERROR(CopyAcrossStreams(a->stream(), b->stream(), bwd_events_[i - 1].get(),
                                             b->output_grad(), a->input_grad(),
                                             uint64_t{4} * rows * a->in_width()));
    }
  }
  return absl::OkStatus();
}

absl::Status StageChain::Update(int64_t step) {
  for (auto& s : stages_) VGPU_RETURN_IF_ERROR(s->Update(step));
  return absl::OkStatus();
}

absl::Status StageChain::LoadParams(absl::Span<const float> all_params) {
  for (auto& s : stages_) VGPU_RETURN_IF_ERROR(s->LoadParams(all_params));
  return absl::OkStatus();
}

absl::Status StageChain::ReadParams(std::vector<float>& all_params) const {
  for (auto& s : stages_) VGPU_RETURN_IF_ERROR(s->ReadParams(all_params));
  return absl::OkStatus();
}

absl::Status StageChain::Synchronize() const {
  absl::Status status;
  for (auto& s : stages_) status.Update(s->stream()->Synchronize());
  return status;
}

absl::StatusOr<std::unique_ptr<StageChain>> CreateReplica(const Model& model, LogicalDevice* device,
                                                          int max_rows, const OptimizerOptions& opt,
                                                          int max_slots) {
  std::vector<std::unique_ptr<ModelStage>> stages;
  VGPU_ASSIGN_OR_RETURN(auto stage,
                        model.CreateStage(device, 0, model.num_layers(), max_rows, opt, max_slots));
  stages.push_back(std::move(stage));
  return StageChain::Create(std::move(stages));
}

}  // namespace strategies
}  // namespace vgpu
