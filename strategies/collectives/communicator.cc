#include "vgpu/strategies/collectives/communicator.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "vgpu/runtime/kernels.h"
#include "vgpu/runtime/nccl.h"
#include "vgpu/runtime/status.h"
#include "vgpu/strategies/collectives/internal.h"

namespace vgpu {
namespace collectives {
namespace internal {

namespace {

const char* OpName(Op op) {
  switch (op) {
    case Op::kAllReduce:
      return "AllReduce";
    case Op::kReduceScatter:
      return "ReduceScatter";
    case Op::kAllGather:
      return "AllGather";
    case Op::kBroadcast:
      return "Broadcast";
    case Op::kReduce:
      return "Reduce";
  }
  return "?";
}

}  // namespace

CommunicatorBase::CommunicatorBase(std::vector<LogicalDevice*> devices, mpi::World* world,
                                   int local_size_everywhere)
    : devices_(std::move(devices)), world_(world) {
  const int processes = world_ != nullptr ? world_->size() : 1;
  size_ = processes * local_size_everywhere;
  first_rank_ = world_ != nullptr ? world_->rank() * local_size_everywhere : 0;
}

absl::Status CommunicatorBase::Check(Op op, absl::Span<const RankBuffer> b, int root) const {
  const char* name = OpName(op);
  if (b.size() != devices_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        kind(), " ", name, ": ", b.size(), " buffers for ", devices_.size(), " local ranks"));
  }
  const bool rooted = op == Op::kBroadcast || op == Op::kReduce;
  if (rooted && (root < 0 || root >= size_)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kind(), " ", name, ": root ", root, " is not a rank of 0..", size_ - 1));
  }
  for (size_t i = 0; i < b.size(); ++i) {
    const int rank = first_rank_ + static_cast<int>(i);
    const bool needs_send = !(op == Op::kBroadcast && rank != root);
    const bool needs_recv = !(op == Op::kReduce && rank != root);
    if (b[i].stream == nullptr || (needs_send && b[i].send == nullptr) ||
        (needs_recv && b[i].recv == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat(kind(), " ", name, ": rank ", rank, " (",
                                                     devices_[i]->name(),
                                                     ") has a null stream or buffer"));
    }
  }
  return absl::OkStatus();
}

absl::Status CommunicatorBase::AllReduce(absl::Span<const RankBuffer> buffers, uint64_t count,
                                         ReduceOp op) {
  VGPU_RETURN_IF_ERROR(Check(Op::kAllReduce, buffers, 0));
  return count == 0 ? absl::OkStatus() : DoAllReduce(buffers, count, op);
}
absl::Status CommunicatorBase::ReduceScatter(absl::Span<const RankBuffer> buffers, uint64_t count,
                                             ReduceOp op) {
  VGPU_RETURN_IF_ERROR(Check(Op::kReduceScatter, buffers, 0));
  return count == 0 ? absl::OkStatus() : DoReduceScatter(buffers, count, op);
}
absl::Status CommunicatorBase::AllGather(absl::Span<const RankBuffer> buffers, uint64_t count) {
  VGPU_RETURN_IF_ERROR(Check(Op::kAllGather, buffers, 0));
  return count == 0 ? absl::OkStatus() : DoAllGather(buffers, count);
}
absl::Status CommunicatorBase::Broadcast(absl::Span<const RankBuffer> buffers, uint64_t count,
                                         int root) {
  VGPU_RETURN_IF_ERROR(Check(Op::kBroadcast, buffers, root));
  return count == 0 ? absl::OkStatus() : DoBroadcast(buffers, count, root);
}
absl::Status CommunicatorBase::Reduce(absl::Span<const RankBuffer> buffers, uint64_t count,
                                      ReduceOp op, int root) {
  VGPU_RETURN_IF_ERROR(Check(Op::kReduce, buffers, root));
  return count == 0 ? absl::OkStatus() : DoReduce(buffers, count, op, root);
}

absl::StatusOr<StreamFence> StreamFence::Create(const std::vector<LogicalDevice*>& devices) {
  StreamFence f;
  for (LogicalDevice* d : devices) {
    VGPU_ASSIGN_OR_RETURN(auto e, d->executor()->CreateEvent());
    f.events_.push_back(std::move(e));
  }
  return f;
}

absl::Status StreamFence::Apply(absl::Span<const RankBuffer> buffers) {
  if (buffers.size() < 2) return absl::OkStatus();
  for (size_t i = 0; i < buffers.size(); ++i) {
    VGPU_RETURN_IF_ERROR(buffers[i].stream->RecordEvent(events_[i].get()));
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    for (size_t j = 0; j < buffers.size(); ++j) {
      if (j == i || buffers[j].stream == buffers[i].stream) continue;
      VGPU_RETURN_IF_ERROR(buffers[i].stream->WaitEvent(events_[j].get()));
    }
  }
  return absl::OkStatus();
}

absl::Status SumInto(LogicalDevice* device, Stream* stream, std::vector<const float*> inputs,
                     float* out, uint64_t count, float scale) {
  VGPU_ASSIGN_OR_RETURN(Kernels * kernels, device->executor()->GetKernels());
  const size_t kMax = Kernels::kMaxSumInputs;
  if (inputs.size() <= kMax) return kernels->SumN(stream, inputs, out, count, scale);
  VGPU_RETURN_IF_ERROR(
      kernels->SumN(stream, absl::MakeSpan(inputs.data(), kMax), out, count, 1.0f));
  for (size_t pos = kMax; pos < inputs.size();) {
    std::vector<const float*> next = {out};
    while (pos < inputs.size() && next.size() < kMax) next.push_back(inputs[pos++]);
    VGPU_RETURN_IF_ERROR(
        kernels->SumN(stream, next, out, count, pos == inputs.size() ? scale : 1.0f));
  }
  return absl::OkStatus();
}

absl::Status Download(absl::Span<const RankBuffer> buffers, bool from_send, uint64_t offset,
                      uint64_t count, std::vector<std::vector<float>>& host) {
  host.resize(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    host[i].resize(count);
    const float* src = (from_send ? buffers[i].send : buffers[i].recv) + offset;
    VGPU_RETURN_IF_ERROR(buffers[i].stream->MemcpyD2H(host[i].data(), src, count * sizeof(float)));
  }
  absl::Status status;
  for (const RankBuffer& b : buffers) status.Update(b.stream->Synchronize());
  return status;
}

absl::Status UploadAll(absl::Span<const RankBuffer> buffers, const float* host, uint64_t count) {
  absl::Status status;
  for (const RankBuffer& b : buffers) {
    if (b.recv != nullptr) status.Update(b.stream->MemcpyH2D(b.recv, host, count * sizeof(float)));
  }
  // `host` is reused by the caller: every upload must have read it.
  for (const RankBuffer& b : buffers) status.Update(b.stream->Synchronize());
  return status;
}

namespace {

// "local": every rank is a logical device of one physical card, whose memory they share:
// reductions are SumN passes over the other ranks' buffers, the rest device-to-device copies;
// streams are ordered with events (a fence before and after), the host never waits.
class LocalCommunicator : public CommunicatorBase {
 public:
  LocalCommunicator(std::vector<LogicalDevice*> devices, StreamFence fence)
      : CommunicatorBase(std::move(devices), nullptr, 0), fence_(std::move(fence)) {
    size_ = local_size();
  }
  ~LocalCommunicator() override {
    // Queued waits reference the fence's events.
    for (LogicalDevice* d : devices_) (void)d->stream()->Synchronize();
  }
  absl::string_view kind() const override { return "local"; }

 protected:
  absl::Status DoAllReduce(absl::Span<const RankBuffer> b, uint64_t count, ReduceOp op) override {
    if (b.size() == 1) {  // the sum (and mean) of one rank is its input
      if (b[0].recv == b[0].send) return absl::OkStatus();
      return b[0].stream->MemcpyD2D(b[0].recv, b[0].send, count * sizeof(float));
    }
    VGPU_RETURN_IF_ERROR(DoReduce(b, count, op, 0));
    return Copy(b, b[0].recv, count, 0, /*skip=*/0);
  }
  absl::Status DoReduceScatter(absl::Span<const RankBuffer> b, uint64_t count,
                               ReduceOp op) override {
    VGPU_RETURN_IF_ERROR(fence_.Apply(b));
    for (size_t k = 0; k < b.size(); ++k) {
      std::vector<const float*> in;
      for (const RankBuffer& r : b) in.push_back(r.send + k * count);
      VGPU_RETURN_IF_ERROR(SumInto(devices_[k], b[k].stream, in, b[k].recv, count, Scale(op)));
    }
    return fence_.Apply(b);
  }
  absl::Status DoAllGather(absl::Span<const RankBuffer> b, uint64_t count) override {
    VGPU_RETURN_IF_ERROR(fence_.Apply(b));
    for (size_t j = 0; j < b.size(); ++j) {
      for (size_t r = 0; r < b.size(); ++r) {
        float* dst = b[j].recv + r * count;
        if (dst == b[r].send) continue;
        VGPU_RETURN_IF_ERROR(b[j].stream->MemcpyD2D(dst, b[r].send, count * sizeof(float)));
      }
    }
    return fence_.Apply(b);
  }
  absl::Status DoBroadcast(absl::Span<const RankBuffer> b, uint64_t count, int root) override {
    VGPU_RETURN_IF_ERROR(fence_.Apply(b));
    return Copy(b, b[root].send, count, 0, -1);
  }
  absl::Status DoReduce(absl::Span<const RankBuffer> b, uint64_t count, ReduceOp op,
                        int root) override {
    VGPU_RETURN_IF_ERROR(fence_.Apply(b));
    std::vector<const float*> in;
    for (const RankBuffer& r : b) in.push_back(r.send);
    VGPU_RETURN_IF_ERROR(
        SumInto(devices_[root], b[root].stream, in, b[root].recv, count, Scale(op)));
    return fence_.Apply(b);
  }

 private:
  // Every rank but `skip` copies `src` into its recv, then the fence (the source must not be
  // overwritten before every copy has read it).
  absl::Status Copy(absl::Span<const RankBuffer> b, const float* src, uint64_t count,
                    uint64_t offset, int skip) {
    for (size_t i = 0; i < b.size(); ++i) {
      if (static_cast<int>(i) == skip || b[i].recv + offset == src) continue;
      VGPU_RETURN_IF_ERROR(b[i].stream->MemcpyD2D(b[i].recv + offset, src, count * sizeof(float)));
    }
    return fence_.Apply(b);
  }

  StreamFence fence_;
};

// "nccl" (one rank per physical GPU in this process) and "nccl-mpi" (one rank per process,
// nccl_mpi.cc). AllReduce is NCCL's (on host, the host platform's communicator with NCCL's
// contract); the other primitives, which the runtime's NcclCommunicator does not offer, go
// through the host (`staged`).
class NcclBackedCommunicator : public CommunicatorBase {
 public:
  NcclBackedCommunicator(std::vector<LogicalDevice*> devices, int local_size, mpi::World* world,
                         std::string kind, std::unique_ptr<NcclCommunicator> nccl,
                         std::unique_ptr<Communicator> staged)
      : CommunicatorBase(std::move(devices), world, local_size),
        kind_(std::move(kind)),
        nccl_(std::move(nccl)),
        staged_(std::move(staged)) {}
  ~NcclBackedCommunicator() override {
    for (LogicalDevice* d : devices_) (void)d->stream()->Synchronize();
  }
  absl::string_view kind() const override { return kind_; }

 protected:
  absl::Status DoAllReduce(absl::Span<const RankBuffer> b, uint64_t count, ReduceOp op) override {
    std::vector<AllReduceBuffer> bufs;
    for (const RankBuffer& r : b) {
      if (r.recv != r.send) {
        VGPU_RETURN_IF_ERROR(r.stream->MemcpyD2D(r.recv, r.send, count * sizeof(float)));
      }
      bufs.push_back({r.stream, r.recv});
    }
    return nccl_->AllReduce(bufs, count,
                            op == ReduceOp::kMean ? AllReduceOp::kMean : AllReduceOp::kSum);
  }
  absl::Status DoReduceScatter(absl::Span<const RankBuffer> b, uint64_t count,
                               ReduceOp op) override {
    return staged_->ReduceScatter(b, count, op);
  }
  absl::Status DoAllGather(absl::Span<const RankBuffer> b, uint64_t count) override {
    return staged_->AllGather(b, count);
  }
  absl::Status DoBroadcast(absl::Span<const RankBuffer> b, uint64_t count, int root) override {
    return staged_->Broadcast(b, count, root);
  }
  absl::Status DoReduce(absl::Span<const RankBuffer> b, uint64_t count, ReduceOp op,
                        int root) override {
    return staged_->Reduce(b, count, op, root);
  }

 private:
  std::string kind_;
  std::unique_ptr<NcclCommunicator> nccl_;
  std::unique_ptr<Communicator> staged_;
};

}  // namespace

std::unique_ptr<Communicator> MakeNcclBacked(std::vector<LogicalDevice*> devices, mpi::World* world,
                                             std::string kind,
                                             std::unique_ptr<NcclCommunicator> nccl,
                                             std::unique_ptr<Communicator> staged) {
  const int local = static_cast<int>(devices.size());
  return std::make_unique<NcclBackedCommunicator>(std::move(devices), local, world, std::move(kind),
                                                  std::move(nccl), std::move(staged));
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateLocal(std::vector<LogicalDevice*> devices) {
  for (LogicalDevice* d : devices) {
    if (!d->is_gpu() || d->executor() != devices[0]->executor()) {
      return absl::InvalidArgumentError(
          absl::StrCat("communicator \"local\" needs every device on one physical GPU; ", d->name(),
                       " is not on the card of ", devices[0]->name()));
    }
  }
  VGPU_ASSIGN_OR_RETURN(StreamFence fence, StreamFence::Create(devices));
  return std::unique_ptr<Communicator>(new LocalCommunicator(std::move(devices), std::move(fence)));
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateNccl(std::vector<LogicalDevice*> devices) {
  std::vector<Executor*> executors;
  for (LogicalDevice* d : devices) {
    if (!d->is_gpu()) {
      return absl::InvalidArgumentError(
          absl::StrCat("communicator \"nccl\" needs GPUs; ", d->name(), " is not one"));
    }
    executors.push_back(d->executor());
  }
  VGPU_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> nccl,
                        NcclCommunicator::Create(executors));
  VGPU_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> staged,
                        CreateStaged(devices, nullptr, "via-host", nullptr));
  return MakeNcclBacked(std::move(devices), nullptr, "nccl", std::move(nccl), std::move(staged));
}

}  // namespace internal

namespace {

bool OnePhysicalGpu(const std::vector<LogicalDevice*>& devices) {
  for (LogicalDevice* d : devices) {
    if (!d->is_gpu() || d->executor() != devices[0]->executor()) return false;
  }
  return true;
}

bool OneGpuPerPhysical(const std::vector<LogicalDevice*>& devices) {
  std::set<Executor*> seen;
  for (LogicalDevice* d : devices) {
    if (!d->is_gpu() || !seen.insert(d->executor()).second) return false;
    if (d->executor()->platform() != devices[0]->executor()->platform()) return false;
  }
  return devices[0]->executor()->platform()->HasCommunicator();
}

// The communicator of this process's devices alone, by the topology table.
absl::StatusOr<std::unique_ptr<Communicator>> CreateProcessLocal(
    std::vector<LogicalDevice*> devices) {
  if (OnePhysicalGpu(devices)) return internal::CreateLocal(std::move(devices));
  if (OneGpuPerPhysical(devices)) {
    absl::StatusOr<std::unique_ptr<Communicator>> nccl = internal::CreateNccl(devices);
    if (nccl.ok()) return nccl;
    // NCCL chosen by topology but not loadable: the always-correct row.
  }
  return internal::CreateStaged(std::move(devices), nullptr, "via-host", nullptr);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(
    std::vector<LogicalDevice*> devices, const CommunicatorOptions& options) {
  if (devices.empty()) return absl::InvalidArgumentError("CreateCommunicator: no devices");
  std::set<LogicalDevice*> seen;
  for (LogicalDevice* d : devices) {
    if (d == nullptr || d->executor() == nullptr || d->stream() == nullptr) {
      return absl::InvalidArgumentError("CreateCommunicator: a device without executor or stream");
    }
    if (!seen.insert(d).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("CreateCommunicator: device ", d->name(), " listed twice"));
    }
  }
  const std::string kind = absl::AsciiStrToLower(options.kind);
  mpi::World* world = options.world;
  const bool across = world != nullptr && world->size() > 1;
  if (kind == "local" || kind == "nccl" || kind == "via-host") {
    if (across) {
      return absl::InvalidArgumentError(
          absl::StrCat("communicator \"", kind, "\" works inside one process; this job has ",
                       world->size(), " processes: use \"mpi\", \"hierarchical\" or \"auto\""));
    }
    if (kind == "local") return internal::CreateLocal(std::move(devices));
    if (kind == "nccl") return internal::CreateNccl(std::move(devices));
    return internal::CreateStaged(std::move(devices), nullptr, "via-host", nullptr);
  }
  if (kind == "mpi" || kind == "hierarchical" || kind == "auto" || kind == "nccl-mpi") {
    if (!across) {
      if (kind == "auto") return CreateProcessLocal(std::move(devices));
      if (world == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat(
            "communicator \"", kind, "\" needs an MPI world (CommunicatorOptions::world)"));
      }
    }
    // Every process must bring the same number of ranks (global rank = process * local + i);
    // with it, whether its one device could join NCCL across processes ("auto" tries
    // "nccl-mpi" only when every process could).
    const int local = static_cast<int>(devices.size());
    const Executor* e = devices[0]->executor();
    const int mine[2] = {local, devices[0]->is_gpu() && e->platform()->HasRankCommunicator()};
    std::vector<int> all(2 * world->size());
    VGPU_RETURN_IF_ERROR(world->AllGather(mine, sizeof(mine), all.data()));
    bool every_nccl = true;
    for (int r = 0; r < world->size(); ++r) {
      if (all[2 * r] != local) {
        return absl::InvalidArgumentError(absl::StrCat(
            "CreateCommunicator: every process must bring the same number of devices; rank ",
            world->rank(), " has ", local, ", rank ", r, " has ", all[2 * r]));
      }
      every_nccl = every_nccl && all[2 * r + 1] != 0;
    }
    if ((kind == "mpi" || kind == "nccl-mpi") && local != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("communicator \"", kind, "\" takes one device per process; this one has ",
                       local, ": use \"hierarchical\""));
    }
    if (kind == "nccl-mpi") return internal::CreateNcclMpi(std::move(devices), world);
    if (local == 1 && kind != "hierarchical") {
      std::string reason;
      if (kind == "auto" && across && every_nccl) {
        absl::StatusOr<std::unique_ptr<Communicator>> nccl =
            internal::CreateNcclMpi(devices, world);
        if (nccl.ok()) return nccl;
        // Every rank got the same error: every rank falls back alike.
        reason = std::string(nccl.status().message());
      }
      VGPU_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> staged,
                            internal::CreateStaged(std::move(devices), world, "mpi", nullptr));
      static_cast<internal::CommunicatorBase*>(staged.get())->set_fallback_reason(reason);
      return staged;
    }
    VGPU_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> inner, CreateProcessLocal(devices));
    return internal::CreateStaged(std::move(devices), world, "hierarchical", std::move(inner));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown communicator kind '", options.kind,
                   "'; use auto, local, nccl, via-host, mpi, hierarchical or nccl-mpi"));
}

}  // namespace collectives
}  // namespace vgpu
