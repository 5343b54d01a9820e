// The communicators that go through host memory: "via-host" (one process), "mpi" (one rank per
// process, across processes) and "hierarchical" (several ranks per process: the process's own
// communicator reduces inside it, MPI across processes, then back to every local rank).
// Every process ends with the same bytes: local sums are in rank order in float64, and
// mpi::World's AllReduce sums in rank order on rank 0 and sends the result to everyone.
#include <utility>

#include "absl/strings/str_cat.h"
#include "vgpu/runtime/status.h"
#include "vgpu/strategies/collectives/internal.h"

namespace vgpu {
namespace collectives {
namespace internal {
namespace {

class StagedCommunicator : public CommunicatorBase {
 public:
  StagedCommunicator(std::vector<LogicalDevice*> devices, mpi::World* world, std::string kind,
                     std::unique_ptr<Communicator> inner)
      : CommunicatorBase(devices, world, static_cast<int>(devices.size())),
        kind_(std::move(kind)),
        inner_(std::move(inner)) {}
  absl::string_view kind() const override { return kind_; }

 protected:
  absl::Status DoAllReduce(absl::Span<const RankBuffer> b, uint64_t count, ReduceOp op) override {
    VGPU_RETURN_IF_ERROR(ReduceToHost(b, count, /*on_devices=*/inner_ != nullptr));
    Finish(op);
    return UploadAll(b, sum_.data(), count);
  }
  absl::Status DoReduceScatter(absl::Span<const RankBuffer> b, uint64_t count,
                               ReduceOp op) override {
    VGPU_RETURN_IF_ERROR(ReduceToHost(b, count * size_, false));
    Finish(op);
    absl::Status status;
    for (size_t i = 0; i < b.size(); ++i) {
      status.Update(b[i].stream->MemcpyH2D(b[i].recv, sum_.data() + (first_rank_ + i) * count,
                                           count * sizeof(float)));
    }
    for (const RankBuffer& r : b) status.Update(r.stream->Synchronize());
    return status;
  }
  absl::Status DoAllGather(absl::Span<const RankBuffer> b, uint64_t count) override {
    VGPU_RETURN_IF_ERROR(Download(b, /*from_send=*/true, 0, count, staging_));
    std::vector<float> mine(b.size() * count);
    for (size_t i = 0; i < b.size(); ++i) {
      std::copy(staging_[i].begin(), staging_[i].end(), mine.begin() + i * count);
    }
    std::vector<float> all(static_cast<size_t>(size_) * count);
    if (Across()) {
      VGPU_RETURN_IF_ERROR(world_->AllGather(mine.data(), mine.size() * sizeof(float), all.data()));
    } else {
      all = std::move(mine);
    }
    return UploadAll(b, all.data(), all.size());
  }
  absl::Status DoBroadcast(absl::Span<const RankBuffer> b, uint64_t count, int root) override {
    sum_.assign(count, 0.0f);
    const int local = LocalIndex(root);
    if (local >= 0) {
      VGPU_RETURN_IF_ERROR(
          b[local].stream->MemcpyD2H(sum_.data(), b[local].send, count * sizeof(float)));
      VGPU_RETURN_IF_ERROR(b[local].stream->Synchronize());
    }
    if (Across()) {
      VGPU_RETURN_IF_ERROR(
          world_->Broadcast(sum_.data(), count * sizeof(float), root / local_size()));
    }
    return UploadAll(b, sum_.data(), count);
  }
  absl::Status DoReduce(absl::Span<const RankBuffer> b, uint64_t count, ReduceOp op,
                        int root) override {
    VGPU_RETURN_IF_ERROR(ReduceToHost(b, count, false));
    Finish(op);
    const int local = LocalIndex(root);
    if (local < 0) return absl::OkStatus();
    return UploadAll(b.subspan(local, 1), sum_.data(), count);
  }

 private:
  bool Across() const { return world_ != nullptr && world_->size() > 1; }

  // sum_ = the sum over every rank of the job of the `count` floats of send. `on_devices`: the
  // inner communicator reduces inside the process first (AllReduce only: it needs every
  // local recv to hold `count` floats).
  absl::Status ReduceToHost(absl::Span<const RankBuffer> b, uint64_t count, bool on_devices) {
    sum_.assign(count, 0.0f);
    if (on_devices) {
      // Inside the process on the devices, into local rank 0's recv (which then holds the
      // process's sum: the caller overwrites every recv afterwards).
      std::vector<RankBuffer> in(b.begin(), b.end());
      VGPU_RETURN_IF_ERROR(inner_->Reduce(in, count, ReduceOp::kSum, 0));
      VGPU_RETURN_IF_ERROR(b[0].stream->MemcpyD2H(sum_.data(), b[0].recv, count * sizeof(float)));
      VGPU_RETURN_IF_ERROR(b[0].stream->Synchronize());
    } else {
      VGPU_RETURN_IF_ERROR(Download(b, /*from_send=*/true, 0, count, staging_));
      acc_.assign(count, 0.0);
      for (const std::vector<float>& h : staging_) {
        for (uint64_t k = 0; k < count; ++k) acc_[k] += h[k];
      }
      for (uint64_t k = 0; k < count; ++k) sum_[k] = static_cast<float>(acc_[k]);
    }
    if (Across()) {
      VGPU_RETURN_IF_ERROR(world_->AllReduce(sum_.data(), count, mpi::ReduceOp::kSum));
    }
    return absl::OkStatus();
  }
  void Finish(ReduceOp op) {
    if (op != ReduceOp::kMean) return;
    const float scale = Scale(op);
    for (float& v : sum_) v *= scale;
  }

  std::string kind_;
  std::unique_ptr<Communicator> inner_;
  std::vector<std::vector<float>> staging_;
  std::vector<double> acc_;
  std::vector<float> sum_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> CreateStaged(std::vector<LogicalDevice*> devices,
                                                           mpi::World* world, std::string kind,
                                                           std::unique_ptr<Communicator> inner) {
  return std::unique_ptr<Communicator>(
      new StagedCommunicator(std::move(devices), world, std::move(kind), std::move(inner)));
}

}  // namespace internal
}  // namespace collectives
}  // namespace vgpu
