#include "vgpu/strategies/model_parallel.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "vgpu/runtime/bytes.h"
#include "vgpu/runtime/numbers.h"
#include "vgpu/runtime/status.h"

namespace vgpu {
namespace strategies {

absl::string_view PlacementPolicyName(PlacementPolicy policy) {
  switch (policy) {
    case PlacementPolicy::kExplicit:
      return "explicit";
    case PlacementPolicy::kRoundRobin:
      return "round-robin";
    case PlacementPolicy::kLeastLoaded:
      return "least-loaded";
    case PlacementPolicy::kMemoryBalanced:
      return "memory-balanced";
  }
  return "?";
}

absl::StatusOr<PlacementPolicy> ParsePlacementPolicy(absl::string_view text) {
  std::string t = absl::AsciiStrToLower(text);
  for (PlacementPolicy p : {PlacementPolicy::kExplicit, PlacementPolicy::kRoundRobin,
                            PlacementPolicy::kLeastLoaded, PlacementPolicy::kMemoryBalanced}) {
    if (t == PlacementPolicyName(p)) return p;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown placement policy '", text,
                   "'; use explicit, round-robin, least-loaded or memory-balanced"));
}

namespace {

// "GPU:3" from any accepted spelling; empty when it is not one. `task_prefix` is the prefix of
// the device's own full name ("/job:localhost/replica:0/task:0", or a cluster task's
// "/job:worker/replica:0/task:1"): a spec naming another task is not one.
std::string ShortName(absl::string_view spec, absl::string_view task_prefix) {
  std::string s = absl::AsciiStrToLower(spec);
  absl::string_view v = s;
  absl::ConsumePrefix(&v, absl::AsciiStrToLower(task_prefix));
  absl::ConsumePrefix(&v, "/device:");
  absl::ConsumePrefix(&v, "/");
  std::string type;
  if (absl::ConsumePrefix(&v, "gpu:")) {
    type = "GPU";
  } else if (absl::ConsumePrefix(&v, "cpu:")) {
    type = "CPU";
  } else {
    return "";
  }
  absl::StatusOr<int64_t> id = ParseInt64InRange(v, 0, std::numeric_limits<int>::max());
  if (!id.ok()) return "";
  return absl::StrCat(type, ":", *id);
}

std::string ShortName(const LogicalDevice& d) {
  return absl::StrCat(d.is_gpu() ? "GPU:" : "CPU:", d.id());
}

uint64_t FreeBytes(const LogicalDevice& d) {
  if (d.memory_limit() == 0) return UINT64_MAX;
  uint64_t used = d.allocator() ? d.allocator()->Stats().bytes_in_use : 0;
  return used >= d.memory_limit() ? 0 : d.memory_limit() - used;
}

}  // namespace

bool DeviceMatchesSpec(const LogicalDevice& device, absl::string_view spec) {
  if (spec == device.name()) return true;
  // The device's own task prefix: its name up to "/device:".
  const absl::string_view name = device.name();
  const size_t device_part = name.rfind("/device:");
  std::string s =
      ShortName(spec, device_part == absl::string_view::npos ? absl::string_view()
                                                             : name.substr(0, device_part));
  return !s.empty() && s == ShortName(device);
}

absl::StatusOr<std::vector<LayerPlacement>> PlaceLayers(
    const Model& model, const std::vector<LogicalDevice*>& devices, const PlacementOptions& options,
    int max_rows, const OptimizerOptions& optimizer, int max_slots) {
  VGPU_RETURN_IF_ERROR(model.Validate());
  if (devices.empty()) return absl::InvalidArgumentError("PlaceLayers: no devices");
  const int layers = model.num_layers();
  std::vector<LayerPlacement> out(layers);
  for (int l = 0; l < layers; ++l) {
    out[l].layer = l;
    out[l].param_bytes = model.LayerParams(l) * 4;
    out[l].total_bytes = model.StageBytes(l, l + 1, max_rows, optimizer, max_slots);
  }
  switch (options.policy) {
    case PlacementPolicy::kExplicit: {
      if (static_cast<int>(options.explicit_specs.size()) != layers) {
        return absl::InvalidArgumentError(
            absl::StrCat("explicit placement: ", options.explicit_specs.size(),
                         " device specs for a model of ", layers, " layers"));
      }
      for (int l = 0; l < layers; ++l) {
        const std::string& s = options.explicit_specs[l];
        auto it = std::find_if(devices.begin(), devices.end(),
                               [&](LogicalDevice* d) { return DeviceMatchesSpec(*d, s); });
        if (it == devices.end()) {
          std::string names;
          for (LogicalDevice* d : devices) absl::StrAppend(&names, " ", ShortName(*d));
          return absl::NotFoundError(absl::StrCat("explicit placement: layer ", l, " asks for '", s,
                                                  "', which matches none of:", names));
        }
        out[l].device = *it;
      }
      break;
    }
    case PlacementPolicy::kRoundRobin:
      for (int l = 0; l < layers; ++l) out[l].device = devices[l % devices.size()];
      break;
    case PlacementPolicy::kLeastLoaded: {
      std::vector<uint64_t> load(devices.size(), 0);
      for (int l = 0; l < layers; ++l) {
        size_t best = std::min_element(load.begin(), load.end()) - load.begin();
        out[l].device = devices[best];
        load[best] += out[l].param_bytes;
      }
      break;
    }
    case PlacementPolicy::kMemoryBalanced: {
      size_t d = 0;
      std::vector<uint64_t> free(devices.size());
      for (size_t i = 0; i < devices.size(); ++i) free[i] = FreeBytes(*devices[i]);
      for (int l = 0; l < layers; ++l) {
        while (d < devices.size() && free[d] < out[l].total_bytes) ++d;
        if (d == devices.size()) {
          LogicalDevice* last = devices.back();
          // What is left on each device once the earlier layers are placed.
          std::string left;
          for (size_t i = 0; i < devices.size(); ++i) {
            absl::StrAppend(&left, i ? ", " : "", ShortName(*devices[i]), " ",
                            FormatBytes(free[i]));
          }
          return absl::ResourceExhaustedError(absl::StrFormat(
              "memory-balanced placement: layer %d (%s) needs %s (params, grads, optimizer "
              "state, activations for %d rows) but no device has it; last tried %s with %s "
              "free of %s (free: %s); give the devices more memory, a smaller batch, or more "
              "devices",
              l, model.LayerShape(l), FormatBytes(out[l].total_bytes), max_rows, last->name(),
              FormatBytes(free.back()), FormatBytes(last->memory_limit()), left));
        }
        out[l].device = devices[d];
        free[d] -= out[l].total_bytes;
      }
      break;
    }
  }
  return out;
}

std::string FormatPlacementReport(const Model& model,
                                  const std::vector<LayerPlacement>& placement) {
  std::string out;
  for (const LayerPlacement& p : placement) {
    absl::StrAppendFormat(&out, "  layer %d (%s) -> %s  params %s  with grads/state/acts %s\n",
                          p.layer, model.LayerShape(p.layer), p.device->name(),
                          FormatBytes(p.param_bytes), FormatBytes(p.total_bytes));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<ModelParallelStrategy>> ModelParallelStrategy::Create(
    std::vector<LogicalDevice*> devices, const StrategyOptions& options,
    const PlacementOptions& placement) {
  if (options.global_batch <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ModelParallelStrategy: global batch ", options.global_batch));
  }
  VGPU_RETURN_IF_ERROR(CheckModel(options, "ModelParallelStrategy"));
  const Model& model = *options.model;
  std::unique_ptr<ModelParallelStrategy> m(new ModelParallelStrategy());
  m->options_ = options;
  const int max_rows = options.global_batch;
  VGPU_ASSIGN_OR_RETURN(m->placement_, PlaceLayers(model, devices, placement, max_rows,
                                                   options.optimizer, options.max_slots));
  std::vector<std::unique_ptr<ModelStage>> stages;
  const int layers = model.num_layers();
  for (int first = 0; first < layers;) {
    int last = first + 1;
    while (last < layers && m->placement_[last].device == m->placement_[first].device) ++last;
    VGPU_ASSIGN_OR_RETURN(auto stage,
                          model.CreateStage(m->placement_[first].device, first, last, max_rows,
                                            options.optimizer, options.max_slots));
    stages.push_back(std::move(stage));
    first = last;
  }
  VGPU_ASSIGN_OR_RETURN(m->chain_, StageChain::Create(std::move(stages)));
  VGPU_RETURN_IF_ERROR(m->chain_->LoadParams(model.InitialParams(options.seed)));
  return m;
}

std::vector<LogicalDevice*> ModelParallelStrategy::devices() const {
  std::vector<LogicalDevice*> out;
  for (const auto& s : chain_->stages()) {
    if (std::find(out.begin(), out.end(), s->device()) == out.end()) out.push_back(s->device());
  }
  return out;
}

absl::Status ModelParallelStrategy::Step(const float* x, const int32_t* y, int rows) {
  if (rows <= 0 || rows > options_.global_batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ModelParallelStrategy::Step: ", rows, " rows; the batch is 1..", options_.global_batch));
  }
  if (accounting_.slot() == options_.max_slots) VGPU_RETURN_IF_ERROR(Flush().status());
  VGPU_RETURN_IF_ERROR(chain_->Upload(x, y, rows));
  VGPU_RETURN_IF_ERROR(chain_->Forward(rows));
  VGPU_RETURN_IF_ERROR(
      chain_->back()->Loss(rows, 1.0f / static_cast<float>(rows), accounting_.slot()));
  VGPU_RETURN_IF_ERROR(chain_->Backward(rows));
  VGPU_RETURN_IF_ERROR(chain_->Update(++step_));
  accounting_.StepQueued(rows);
  return absl::OkStatus();
}

absl::StatusOr<StepTotals> ModelParallelStrategy::Flush() {
  VGPU_RETURN_IF_ERROR(accounting_.ReadSlotsAndDrain(*chain_));
  return accounting_.TakeTotals();
}

absl::StatusOr<StepTotals> ModelParallelStrategy::Evaluate(const float* x, const int32_t* y,
                                                           int n) {
  VGPU_RETURN_IF_ERROR(Flush().status());
  StepTotals t;
  const int chunk = options_.global_batch;
  int used = 0;
  for (int start = 0; start < n; start += chunk) {
    const int rows = std::min(chunk, n - start);
    if (used == options_.max_slots) {
      VGPU_RETURN_IF_ERROR(chain_->back()->AccumulateSlots(used, t.loss_sum, t.correct));
      used = 0;
    }
    VGPU_RETURN_IF_ERROR(chain_->Upload(
        x + static_cast<int64_t>(start) * options_.model->input_width(), y + start, rows));
    VGPU_RETURN_IF_ERROR(chain_->Forward(rows));
    VGPU_RETURN_IF_ERROR(chain_->back()->Loss(rows, 0.0f, used++));
  }
  VGPU_RETURN_IF_ERROR(chain_->back()->AccumulateSlots(used, t.loss_sum, t.correct));
  t.examples = n;
  return t;
}

absl::StatusOr<std::vector<float>> ModelParallelStrategy::Params() {
  std::vector<float> p;
  VGPU_RETURN_IF_ERROR(chain_->ReadParams(p));
  return p;
}

std::string ModelParallelStrategy::PlacementReport() const {
  return absl::StrCat("model-parallel: ", num_stages(), " stage(s) over ", devices().size(),
                      " device(s)\n", FormatPlacementReport(*options_.model, placement_));
}

}  // namespace strategies
}  // namespace vgpu
