#include "vgpu/strategies/collectives.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "vgpu/runtime/kernels.h"
#include "vgpu/runtime/status.h"

namespace vgpu {
namespace strategies {

absl::string_view AllReduceAlgorithmName(AllReduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllReduceAlgorithm::kAuto:
      return "auto";
    case AllReduceAlgorithm::kLocal:
      return "local";
    case AllReduceAlgorithm::kNccl:
      return "nccl";
    case AllReduceAlgorithm::kHierarchical:
      return "hierarchical";
    case AllReduceAlgorithm::kViaHost:
      return "via-host";
  }
  return "?";
}

absl::StatusOr<AllReduceAlgorithm> ParseAllReduceAlgorithm(absl::string_view text) {
  std::string t = absl::AsciiStrToLower(text);
  for (AllReduceAlgorithm a :
       {AllReduceAlgorithm::kAuto, AllReduceAlgorithm::kLocal, AllReduceAlgorithm::kNccl,
        AllReduceAlgorithm::kHierarchical, AllReduceAlgorithm::kViaHost}) {
    if (t == AllReduceAlgorithmName(a)) return a;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown all-reduce algorithm '", text,
                   "'; use auto, local, nccl, hierarchical or via-host"));
}

AllReduceAlgorithm ChooseAllReduceAlgorithm(absl::Span<const DeviceTopology> devices) {
  if (devices.empty()) return AllReduceAlgorithm::kViaHost;
  std::map<std::pair<std::string, int>, int> per_physical;
  for (const DeviceTopology& d : devices) {
    if (!d.is_gpu) return AllReduceAlgorithm::kViaHost;
    ++per_physical[{d.platform, d.physical}];
  }
  if (per_physical.size() == 1) return AllReduceAlgorithm::kLocal;
  const std::string& platform = per_physical.begin()->first.first;
  for (const auto& [key, n] : per_physical) {
    if (key.first != platform) return AllReduceAlgorithm::kViaHost;
  }
  // NCCL on cuda; on host, the host communicator with NCCL's contract (runtime/nccl.h).
  for (const DeviceTopology& d : devices) {
    if (!d.has_communicator) return AllReduceAlgorithm::kViaHost;
  }
  bool one_each = std::all_of(per_physical.begin(), per_physical.end(),
                              [](const auto& kv) { return kv.second == 1; });
  return one_each ? AllReduceAlgorithm::kNccl : AllReduceAlgorithm::kHierarchical;
}

AllReduceAlgorithm ChooseAllReduceAlgorithm(absl::Span<LogicalDevice* const> devices) {
  std::vector<DeviceTopology> topo;
  for (LogicalDevice* d : devices) {
    if (d == nullptr || !d->is_gpu() || d->executor() == nullptr) {
      return AllReduceAlgorithm::kViaHost;
    }
    const Platform* platform = d->executor()->platform();
    topo.push_back(
        {true, platform->name(), d->executor()->ordinal(), platform->HasCommunicator()});
  }
  return ChooseAllReduceAlgorithm(topo);
}

absl::StatusOr<std::unique_ptr<AllReducer>> AllReducer::Create(std::vector<LogicalDevice*> devices,
                                                               AllReduceAlgorithm algorithm) {
  if (devices.empty()) return absl::InvalidArgumentError("AllReducer: no devices");
  std::set<LogicalDevice*> seen;
  for (LogicalDevice* d : devices) {
    if (d == nullptr || d->stream() == nullptr || d->executor() == nullptr) {
      return absl::InvalidArgumentError("AllReducer: a device without executor or stream");
    }
    if (!seen.insert(d).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("AllReducer: device ", d->name(), " listed twice"));
    }
  }
  const bool automatic = algorithm == AllReduceAlgorithm::kAuto;
  if (automatic) algorithm = ChooseAllReduceAlgorithm(devices);
  std::unique_ptr<AllReducer> r(new AllReducer());
  r->algorithm_ = algorithm;
  r->devices_ = devices;
  // Device indices grouped by physical device, in order of first appearance.
  std::vector<Executor*> group_exec;
  for (size_t i = 0; i < devices.size(); ++i) {
    Executor* e = devices[i]->executor();
    auto it = std::find(group_exec.begin(), group_exec.end(), e);
    if (it == group_exec.end()) {
      group_exec.push_back(e);
      r->groups_.push_back({static_cast<int>(i)});
    } else {
      r->groups_[it - group_exec.begin()].push_back(static_cast<int>(i));
    }
  }
  switch (algorithm) {
    case AllReduceAlgorithm::kLocal:
      if (r->groups_.size() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "AllReducer: the local all-reduce needs every device on one physical device; ",
            devices.front()->name(), " and ", devices[r->groups_[1][0]]->name(), " differ"));
      }
      break;
    case AllReduceAlgorithm::kNccl:
    case AllReduceAlgorithm::kHierarchical: {
      if (algorithm == AllReduceAlgorithm::kNccl && r->groups_.size() != devices.size()) {
        return absl::InvalidArgumentError(
            "AllReducer: NCCL needs one device per physical GPU (NCCL refuses two ranks on one "
            "GPU); use local or hierarchical");
      }
      absl::StatusOr<std::unique_ptr<NcclCommunicator>> nccl = NcclCommunicator::Create(group_exec);
      if (nccl.ok()) {
        r->nccl_ = *std::move(nccl);
      } else if (automatic && !absl::IsInvalidArgument(nccl.status())) {
        // Chosen by topology but NCCL is not there (no libnccl, a build without CUDA): the
        // always-correct row of the table, and the reason kept for the logs.
        r->algorithm_ = AllReduceAlgorithm::kViaHost;
        r->fallback_reason_ = std::string(nccl.status().message());
      } else {
        return nccl.status();
      }
      break;
    }
    case AllReduceAlgorithm::kViaHost:
    case AllReduceAlgorithm::kAuto:
      break;
  }
  for (LogicalDevice* d : devices) {
    VGPU_ASSIGN_OR_RETURN(auto ready, d->executor()->CreateEvent());
    VGPU_ASSIGN_OR_RETURN(auto copied, d->executor()->CreateEvent());
    r->ready_.push_back(std::move(ready));
    r->copied_.push_back(std::move(copied));
  }
  VGPU_ASSIGN_OR_RETURN(r->done_, devices[0]->executor()->CreateEvent());
  return r;
}

AllReducer::~AllReducer() {
  // Queued waits reference our events: let the streams drain first.
  for (LogicalDevice* d : devices_) (void)d->stream()->Synchronize();
}

absl::Status AllReducer::AllReduce(absl::Span<float* const> buffers, uint64_t count,
                                   AllReduceOp op) {
  if (buffers.size() != devices_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllReduce: ", buffers.size(), " buffers for ", devices_.size(), " devices"));
  }
  if (count == 0) return absl::OkStatus();
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("AllReduce: null buffer for ", devices_[i]->name()));
    }
  }
  const float scale = op == AllReduceOp::kMean ? 1.0f / static_cast<float>(devices_.size()) : 1.0f;
  switch (algorithm_) {
    case AllReduceAlgorithm::kLocal:
      return Local(buffers, count, scale);
    case AllReduceAlgorithm::kNccl: {
      std::vector<AllReduceBuffer> bufs;
      for (size_t i = 0; i < buffers.size(); ++i)
        bufs.push_back({devices_[i]->stream(), buffers[i]});
      return nccl_->AllReduce(bufs, count, op);
    }
    case AllReduceAlgorithm::kHierarchical:
      return Hierarchical(buffers, count, op);
    case AllReduceAlgorithm::kViaHost:
    case AllReduceAlgorithm::kAuto:
      return ViaHost(buffers, count, scale);
  }
  return absl::InternalError("AllReduce: bad algorithm");
}

namespace {

// out = scale * sum(inputs) over any number of inputs, kMaxSumInputs at a time (the first
// pass reads up to 16 buffers; later passes fold the partial sum back in).
absl::Status SumAll(Kernels* kernels, Stream* stream, std::vector<const float*> inputs, float* out,
                    uint64_t count, float scale) {
  const size_t kMax = Kernels::kMaxSumInputs;
  if (inputs.size() <= kMax) return kernels->SumN(stream, inputs, out, count, scale);
  size_t pos = kMax;
  VGPU_RETURN_IF_ERROR(
      kernels->SumN(stream, absl::MakeSpan(inputs.data(), kMax), out, count, 1.0f));
  while (pos < inputs.size()) {
    std::vector<const float*> next = {out};
    while (pos < inputs.size() && next.size() < kMax) next.push_back(inputs[pos++]);
    bool last = pos == inputs.size();
    VGPU_RETURN_IF_ERROR(kernels->SumN(stream, next, out, count, last ? scale : 1.0f));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AllReducer::Local(absl::Span<float* const> buffers, uint64_t count, float scale) {
  Stream* root = devices_[0]->stream();
  VGPU_ASSIGN_OR_RETURN(Kernels * kernels, devices_[0]->executor()->GetKernels());
  // The root waits until every replica's input is written.
  for (size_t i = 1; i < devices_.size(); ++i) {
    Stream* s = devices_[i]->stream();
    if (s == root) continue;
    VGPU_RETURN_IF_ERROR(s->RecordEvent(ready_[i].get()));
    VGPU_RETURN_IF_ERROR(root->WaitEvent(ready_[i].get()));
  }
  std::vector<const float*> inputs(buffers.begin(), buffers.end());
  VGPU_RETURN_IF_ERROR(SumAll(kernels, root, std::move(inputs), buffers[0], count, scale));
  if (devices_.size() == 1) return absl::OkStatus();
  VGPU_RETURN_IF_ERROR(root->RecordEvent(done_.get()));
  for (size_t i = 1; i < devices_.size(); ++i) {
    Stream* s = devices_[i]->stream();
    VGPU_RETURN_IF_ERROR(s->WaitEvent(done_.get()));
    VGPU_RETURN_IF_ERROR(s->MemcpyD2D(buffers[i], buffers[0], count * sizeof(float)));
    if (s == root) continue;
    // The root must not overwrite its buffer before every copy has read it.
    VGPU_RETURN_IF_ERROR(s->RecordEvent(copied_[i].get()));
    VGPU_RETURN_IF_ERROR(root->WaitEvent(copied_[i].get()));
  }
  return absl::OkStatus();
}

absl::Status AllReducer::ViaHost(absl::Span<float* const> buffers, uint64_t count, float scale) {
  staging_.resize(count);
  acc_.assign(count, 0.0);
  for (size_t i = 0; i < devices_.size(); ++i) {
    Stream* s = devices_[i]->stream();
    VGPU_RETURN_IF_ERROR(s->MemcpyD2H(staging_.data(), buffers[i], count * sizeof(float)));
    VGPU_RETURN_IF_ERROR(s->Synchronize());
    for (uint64_t k = 0; k < count; ++k) acc_[k] += staging_[k];
  }
  for (uint64_t k = 0; k < count; ++k) staging_[k] = static_cast<float>(acc_[k] * scale);
  for (size_t i = 0; i < devices_.size(); ++i) {
    VGPU_RETURN_IF_ERROR(
        devices_[i]->stream()->MemcpyH2D(buffers[i], staging_.data(), count * sizeof(float)));
  }
  // staging_ must stay untouched until every upload has run.
  for (LogicalDevice* d : devices_) VGPU_RETURN_IF_ERROR(d->stream()->Synchronize());
  return absl::OkStatus();
}

absl::Status AllReducer::Hierarchical(absl::Span<float* const> buffers, uint64_t count,
                                      AllReduceOp op) {
  // 1. Local reduce into each group's first buffer; 2. NCCL across the group roots;
  // 3. local broadcast. The mean is applied in step 1 so NCCL only sums.
  const float scale = op == AllReduceOp::kMean ? 1.0f / static_cast<float>(devices_.size()) : 1.0f;
  std::vector<AllReduceBuffer> roots;
  for (const std::vector<int>& g : groups_) {
    LogicalDevice* root_dev = devices_[g[0]];
    Stream* root = root_dev->stream();
    VGPU_ASSIGN_OR_RETURN(Kernels * kernels, root_dev->executor()->GetKernels());
    std::vector<const float*> inputs;
    for (int i : g) {
      inputs.push_back(buffers[i]);
      Stream* s = devices_[i]->stream();
      if (s == root) continue;
      VGPU_RETURN_IF_ERROR(s->RecordEvent(ready_[i].get()));
      VGPU_RETURN_IF_ERROR(root->WaitEvent(ready_[i].get()));
    }
    VGPU_RETURN_IF_ERROR(SumAll(kernels, root, inputs, buffers[g[0]], count, scale));
    roots.push_back({root, buffers[g[0]]});
  }
  VGPU_RETURN_IF_ERROR(nccl_->AllReduce(roots, count, AllReduceOp::kSum));
  for (const std::vector<int>& g : groups_) {
    Stream* root = devices_[g[0]]->stream();
    VGPU_RETURN_IF_ERROR(root->RecordEvent(ready_[g[0]].get()));
    for (size_t j = 1; j < g.size(); ++j) {
      Stream* s = devices_[g[j]]->stream();
      VGPU_RETURN_IF_ERROR(s->WaitEvent(ready_[g[0]].get()));
      VGPU_RETURN_IF_ERROR(s->MemcpyD2D(buffers[g[j]], buffers[g[0]], count * sizeof(float)));
      VGPU_RETURN_IF_ERROR(s->RecordEvent(copied_[g[j]].get()));
      VGPU_RETURN_IF_ERROR(root->WaitEvent(copied_[g[j]].get()));
    }
  }
  return absl::OkStatus();
}

}  // namespace strategies
}  // namespace vgpu
