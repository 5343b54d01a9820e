// vgpu-train's cluster set-up (vgpu_train.h).
#include <cstring>

#include "absl/strings/str_cat.h"
#include "vgpu/runtime/status.h"
#include "vgpu/tools/vgpu_train.h"

namespace vgpu {

using strategies::StrategyKind;

absl::StatusOr<TrainCluster> SetUpCluster(const TrainFlags& f, StrategyKind kind) {
  TrainCluster c;
  VGPU_ASSIGN_OR_RETURN(c.launch, mpi::DetectLaunch());
  if (!strategies::IsClusterStrategy(kind)) {
    if (c.launch.size > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "this is rank ", c.launch.rank, " of ", c.launch.size, " processes, but --strategy ",
          f.strategy,
          " runs in one process (every rank would train alone): use --strategy "
          "multi-worker-mirrored or parameter-server under mpirun, or run without it"));
    }
    if (f.ps_tasks > 0) {
      return absl::InvalidArgumentError("--ps-tasks is for --strategy parameter-server");
    }
    return c;
  }
  const std::optional<std::string> tf_config = vgpu::ClusterSpec::TfConfigFromEnvironment();
  int ps_tasks = f.ps_tasks;
  if (kind == StrategyKind::kParameterServer && ps_tasks == 0 && !tf_config) ps_tasks = 1;
  if (kind == StrategyKind::kMultiWorkerMirrored && ps_tasks > 0) {
    return absl::InvalidArgumentError(
        "--ps-tasks is for --strategy parameter-server; multi-worker-mirrored has no ps tasks");
  }
  if (kind == StrategyKind::kParameterServer && c.launch.size < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--strategy parameter-server needs at least 2 processes (a ps task and a worker); "
        "this is ",
        c.launch.size, ": run it under mpirun -np N (see docs/cluster.md)"));
  }
  VGPU_ASSIGN_OR_RETURN(ClusterSpec spec, ClusterSpec::Create(c.launch, tf_config, ps_tasks));
  c.spec = std::make_shared<const ClusterSpec>(std::move(spec));
  std::vector<int> workers = c.spec->RanksOf("chief");
  for (int r : c.spec->RanksOf("worker")) workers.push_back(r);
  const std::vector<int> ps = c.spec->RanksOf("ps");
  if (c.spec->NumTasks("evaluator") > 0) {
    return absl::InvalidArgumentError(
        "TF_CONFIG lists an evaluator task: vgpu-train has no evaluator role (the workers "
        "evaluate); remove it and start one process fewer");
  }
  if (kind == StrategyKind::kMultiWorkerMirrored && !ps.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--strategy multi-worker-mirrored has no ps tasks, but the cluster has ",
                     ps.size(), " (", c.spec->JobSummary(), "): use --strategy parameter-server"));
  }
  if (kind == StrategyKind::kParameterServer && (ps.empty() || workers.empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat("--strategy parameter-server needs ps tasks and workers; the cluster has ",
                     c.spec->JobSummary()));
  }
  if (c.launch.size > 1 || c.launch.under_launcher) {
    VGPU_ASSIGN_OR_RETURN(c.world, mpi::World::Get());
    VGPU_RETURN_IF_ERROR(c.world->SetDefaultTimeout(absl::Seconds(f.collective_timeout_s)));
  }
  if (kind == StrategyKind::kParameterServer) {
    c.ps.world = c.world;
    c.ps.worker_ranks = workers;
    c.ps.ps_ranks = ps;
    VGPU_ASSIGN_OR_RETURN(c.ps.sharding, strategies::ParseShardPolicy(f.ps_sharding));
    c.ps.async = f.ps_async;
    c.is_ps = c.spec->self().job == "ps";
  }
  return c;
}

absl::Status CheckRanksAgree(const TrainCluster& c,
                             const std::vector<std::pair<std::string, int64_t>>& values) {
  if (c.world == nullptr || c.world->size() < 2 || values.empty()) return absl::OkStatus();
  std::vector<int64_t> mine;
  for (const auto& [name, value] : values) mine.push_back(value);
  std::vector<int64_t> all(mine.size() * c.world->size());
  VGPU_RETURN_IF_ERROR(c.world->AllGather(mine.data(), mine.size() * sizeof(int64_t), all.data()));
  for (int r = 1; r < c.world->size(); ++r) {
    for (size_t i = 0; i < values.size(); ++i) {
      const int64_t theirs = all[r * values.size() + i];
      if (theirs != all[i]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the ranks of this job disagree on ", values[i].first, ": rank 0 has ", all[i],
            ", rank ", r, " has ", theirs,
            "; every rank must be given the same flags and data (one job, one model)"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckReplicasEqual(const TrainCluster& c, const std::vector<std::string>& checksums,
                                int64_t step) {
  for (size_t i = 1; i < checksums.size(); ++i) {
    if (checksums[i] != checksums[0]) {
      return absl::InternalError(absl::StrCat("step ", step, ": rank ", c.rank(), "'s replica ", i,
                                              " holds parameters ", checksums[i], ", replica 0 ",
                                              checksums[0], ": the replicas diverged"));
    }
  }
  if (c.world == nullptr || checksums.empty()) return absl::OkStatus();
  char mine[16];
  std::memcpy(mine, checksums[0].data(), 16);
  std::vector<char> all(16 * c.world->size());
  VGPU_RETURN_IF_ERROR(c.world->AllGather(mine, sizeof(mine), all.data()));
  for (int r = 1; r < c.world->size(); ++r) {
    if (std::memcmp(all.data(), all.data() + 16 * r, 16) != 0) {
      return absl::InternalError(absl::StrCat(
          "step ", step, ": rank ", r, " holds parameters ", std::string(all.data() + 16 * r, 16),
          ", rank 0 ", std::string(all.data(), 16), ": the processes diverged"));
    }
  }
  return absl::OkStatus();
}

}  // namespace vgpu
