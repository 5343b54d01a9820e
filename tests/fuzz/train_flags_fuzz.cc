// Fuzzes vgpu-train's command line (ParseTrainFlags): never crashes; refusals are
// InvalidArgument, non-empty and bounded; what is accepted is in range (finite learning rate,
// a bounded device count).
#include <cmath>

#include "vgpu/tests/fuzz/flags_fuzz_util.h"
#include "vgpu/tools/train_flags.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<vgpu::TrainFlags> f =
      vgpu::ParseTrainFlags(vgpu_fuzz::SplitArgs(data, size), "/nonexistent");
  vgpu_fuzz::CheckError(f.status());
  if (f.ok() && !f->help) {
    if (!std::isfinite(f->lr) || !(f->lr > 0) || f->lr > vgpu::kMaxLearningRate) std::abort();
    if (f->device_count < 0 || f->device_count > vgpu::kMaxTrainDevices) std::abort();
    if (f->gpus_needed < 0 || f->gpus_needed > vgpu::kMaxTrainDevices) std::abort();
    if (f->device_specs.size() > static_cast<size_t>(vgpu::kMaxTrainDevices)) std::abort();
    if (f->epochs < 1 || f->batch < 1) std::abort();
  }
  return 0;
}
