#include "vgpu/runtime/nccl.h"

#include "absl/strings/str_cat.h"

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
  // Each platform makes its own (NCCL on cuda; the host communicator on host).
  return executors[0]->platform()->CreateCommunicator(executors);
}

absl::StatusOr<std::vector<uint8_t>> NcclCommunicator::UniqueId(Platform* platform) {
  if (platform == nullptr) return absl::InvalidArgumentError("NCCL unique id: no platform given");
  return platform->NcclUniqueId();
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::CreateRank(
    Executor* executor, int rank, int nranks, absl::Span<const uint8_t> id) {
  if (executor == nullptr) {
    return absl::InvalidArgumentError("NCCL rank communicator: the executor is null");
  }
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL rank communicator: rank ", rank, " is not a rank of 0..", nranks - 1));
  }
  if (id.empty()) return absl::InvalidArgumentError("NCCL rank communicator: empty unique id");
  return executor->platform()->CreateRankCommunicator(executor, rank, nranks, id);
}

}  // namespace vgpu
