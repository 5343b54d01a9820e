// "nccl-mpi": one rank per process across processes, on NCCL's ncclCommInitRank bootstrapped
// over MPI (rank 0's unique id reaches every rank by mpi::World::Broadcast). The communicator
// is MakeNcclBacked's (communicator.cc): AllReduce is NCCL's, stream-ordered and asynchronous;
// the other primitives, which the runtime's NcclCommunicator does not offer, go through the
// staged "mpi" path. Creation is collective:
// every rank learns whether every rank succeeded and returns the same error when one did not.
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "vgpu/runtime/nccl.h"
#include "vgpu/runtime/status.h"
#include "vgpu/strategies/collectives/internal.h"

namespace vgpu {
namespace collectives {
namespace internal {
namespace {

// Every rank's `status` of `step`: OK when every rank succeeded, else on every rank the first
// failing rank's code and message, prefixed with its rank (so no rank is left waiting and
// all report the same).
absl::Status Agree(mpi::World* world, const absl::Status& status, absl::string_view step) {
  constexpr size_t kBytes = 1024;
  std::vector<char> mine(kBytes, 0);
  const int32_t code = static_cast<int32_t>(status.code());
  std::memcpy(mine.data(), &code, sizeof(code));
  const absl::string_view text = status.message().substr(0, kBytes - sizeof(code) - 1);
  std::memcpy(mine.data() + sizeof(code), text.data(), text.size());
  std::vector<char> all(kBytes * world->size());
  VGPU_RETURN_IF_ERROR(world->AllGather(mine.data(), kBytes, all.data()));
  for (int r = 0; r < world->size(); ++r) {
    const char* p = all.data() + static_cast<size_t>(r) * kBytes;
    int32_t c = 0;
    std::memcpy(&c, p, sizeof(c));
    if (c == 0) continue;
    return absl::Status(static_cast<absl::StatusCode>(c),
                        absl::StrCat("communicator \"nccl-mpi\": ", step, " failed on rank ", r,
                                     " of ", world->size(), ": ", p + sizeof(c)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclMpi(std::vector<LogicalDevice*> devices,
                                                            mpi::World* world) {
  LogicalDevice* d = devices[0];
  Platform* platform = d->executor()->platform();
  absl::Status ready;
  if (devices.size() != 1) {
    ready = absl::InvalidArgumentError(
        absl::StrCat("it takes one device per process; this one has ", devices.size()));
  } else if (!d->is_gpu()) {
    ready =
        absl::FailedPreconditionError(absl::StrCat("it needs a GPU; ", d->name(), " is not one"));
  } else if (!platform->HasRankCommunicator()) {
    ready = absl::FailedPreconditionError(
        absl::StrCat("the ", platform->name(),
                     " platform has no NCCL across processes (its communicator "
                     "cannot span processes): use \"mpi\""));
  }
  // Rank 0's unique id, with its length first, for the broadcast.
  constexpr size_t kIdBytes = 512;
  std::vector<uint8_t> id(sizeof(uint64_t) + kIdBytes, 0);
  if (ready.ok() && world->rank() == 0) {
    absl::StatusOr<std::vector<uint8_t>> made = NcclCommunicator::UniqueId(platform);
    if (!made.ok()) {
      ready = made.status();
    } else if (made->size() > kIdBytes) {
      ready = absl::InternalError(absl::StrCat("the NCCL unique id has ", made->size(),
                                               " bytes; at most ", kIdBytes, " are sent"));
    } else {
      const uint64_t n = made->size();
      std::memcpy(id.data(), &n, sizeof(n));
      std::memcpy(id.data() + sizeof(n), made->data(), n);
    }
  }
  VGPU_RETURN_IF_ERROR(Agree(world, ready, "preparing (ncclGetUniqueId on rank 0)"));
  VGPU_RETURN_IF_ERROR(world->Broadcast(id.data(), id.size(), 0));
  uint64_t n = 0;
  std::memcpy(&n, id.data(), sizeof(n));
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> nccl = NcclCommunicator::CreateRank(
      d->executor(), world->rank(), world->size(), absl::MakeConstSpan(id.data() + sizeof(n), n));
  // A rank that failed (e.g. NCCL's "Duplicate GPU detected") fails every rank.
  VGPU_RETURN_IF_ERROR(Agree(world, nccl.status(), "ncclCommInitRank"));
  VGPU_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> staged,
                        CreateStaged(devices, world, "mpi", nullptr));
  return MakeNcclBacked(std::move(devices), world, "nccl-mpi", *std::move(nccl), std::move(staged));
}

}  // namespace internal
}  // namespace collectives
}  // namespace vgpu
