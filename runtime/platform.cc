#include "vgpu/runtime/platform.h"

#include "absl/strings/str_cat.h"
#include "vgpu/runtime/fault_injector.h"
#include "vgpu/runtime/nccl.h"

namespace vgpu {

absl::StatusOr<std::unique_ptr<MemoryPool>> Executor::CreateMemoryPool(
    const MemoryPoolOptions& /*options*/) {
  return absl::UnimplementedError(absl::StrCat("platform ", platform()->name(), " device ",
                                               ordinal(), " has no stream-ordered memory pools"));
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> Platform::CreateCommunicator(
    absl::Span<Executor* const> /*executors*/) {
  return absl::UnimplementedError(absl::StrCat(
      "NCCL needs the cuda platform; these executors are on the ", name(), " platform"));
}

absl::StatusOr<std::vector<uint8_t>> Platform::NcclUniqueId() {
  return absl::UnimplementedError(absl::StrCat(
      "NCCL across processes needs the cuda platform; this is the ", name(), " platform"));
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> Platform::CreateRankCommunicator(
    Executor* /*executor*/, int /*rank*/, int /*nranks*/, absl::Span<const uint8_t> /*id*/) {
  return absl::UnimplementedError(
      absl::StrCat("NCCL across processes needs the cuda platform; the ", name(),
                   " platform's communicator cannot span processes"));
}

absl::StatusOr<FaultInjector*> Platform::GetFaultInjector() {
  return absl::UnimplementedError(absl::StrCat("platform ", name(), " has no fault injection"));
}

}  // namespace vgpu
