#include "vgpu/runtime/nccl.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "vgpu/runtime/host/host_collectives.h"

#if VGPU_HAVE_CUDA
#include "vgpu/runtime/cuda/cuda_nccl.h"
#endif

namespace vgpu {

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    absl::Span<Executor* const> executors) {
  if (executors.empty()) {
    return absl::InvalidArgumentError("NCCL communicator: no executors given");
  }
  for (size_t i = 0; i < executors.size(); ++i) {
    if (executors[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("NCCL communicator: executor ", i, " is null"));
    }
    if (executors[i]->platform() != executors[0]->platform()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "NCCL communicator: rank ", i, " is on platform ", executors[i]->platform()->name(),
          ", rank 0 on ", executors[0]->platform()->name()));
    }
    for (size_t j = 0; j < i; ++j) {
      if (executors[j]->ordinal() == executors[i]->ordinal()) {
        return absl::InvalidArgumentError(
            absl::StrCat("NCCL communicator: ", executors[i]->platform()->name(), " device ",
                         executors[i]->ordinal(), " is given twice (ranks ", j, " and ", i,
                         "); NCCL refuses two ranks on one GPU: reduce devices of one GPU locally "
                         "(Kernels::SumN) and use one rank per physical GPU"));
      }
    }
  }
  const std::string platform = executors[0]->platform()->name();
  // The host platform's simulated GPUs get the same contract from a host communicator.
  if (platform == "host") return host::CreateHostCommunicator(executors);
  if (platform != "cuda") {
    return absl::UnimplementedError(absl::StrCat(
        "NCCL needs the cuda platform; these executors are on the ", platform, " platform"));
  }
#if VGPU_HAVE_CUDA
  return cuda::CreateNcclCommunicator(executors);
#else
  return absl::UnimplementedError(
      "NCCL is unavailable: vgpu was built without CUDA support (VGPU_WITH_CUDA=OFF or no "
      "toolkit at build time)");
#endif
}

}  // namespace vgpu
