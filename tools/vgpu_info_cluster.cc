// vgpu-info under mpirun: one report for the whole cluster, gathered by rank 0 (vgpu_info.h).
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "vgpu/runtime/json.h"
#include "vgpu/runtime/status.h"
#include "vgpu/tools/vgpu_info.h"

namespace vgpu_info {
namespace {

constexpr int kReportTag = 7201;

// Rank 0 gets every rank's report (a size, then the bytes); the others send theirs.
absl::StatusOr<std::vector<std::string>> Gather(vgpu::mpi::World& world, const std::string& mine) {
  std::vector<std::string> all;
  if (world.rank() != 0) {
    const uint64_t size = mine.size();
    VGPU_RETURN_IF_ERROR(world.Send(&size, sizeof(size), 0, kReportTag));
    VGPU_RETURN_IF_ERROR(world.Send(mine.data(), mine.size(), 0, kReportTag));
    return all;
  }
  all.push_back(mine);
  for (int r = 1; r < world.size(); ++r) {
    uint64_t size = 0;
    VGPU_RETURN_IF_ERROR(world.Recv(&size, sizeof(size), r, kReportTag).status());
    if (size > (uint64_t{1} << 30)) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", r, " announced a report of ", size, " bytes"));
    }
    std::string text(size, '\0');
    VGPU_RETURN_IF_ERROR(world.Recv(text.data(), size, r, kReportTag).status());
    all.push_back(std::move(text));
  }
  return all;
}

}  // namespace

absl::StatusOr<InfoCluster> SetUpInfoCluster() {
  InfoCluster c;
  VGPU_ASSIGN_OR_RETURN(vgpu::mpi::LaunchInfo launch, vgpu::mpi::DetectLaunch());
  if (launch.size <= 1) return c;
  const std::optional<std::string> tf_config = vgpu::ClusterSpec::TfConfigFromEnvironment();
  VGPU_ASSIGN_OR_RETURN(vgpu::ClusterSpec spec, vgpu::ClusterSpec::Create(launch, tf_config));
  c.spec = std::make_shared<const vgpu::ClusterSpec>(std::move(spec));
  VGPU_ASSIGN_OR_RETURN(c.world, vgpu::mpi::World::Get());
  return c;
}

int PrintReport(const std::string& report, bool json, const InfoCluster& cluster) {
  if (cluster.world == nullptr || cluster.spec == nullptr) {
    std::printf("%s%s", report.c_str(), json ? "\n" : "");
    return 0;
  }
  absl::StatusOr<std::vector<std::string>> all = Gather(*cluster.world, report);
  if (!all.ok()) {
    std::fprintf(stderr, "vgpu-info: rank %d: %s\n", cluster.world->rank(),
                 std::string(all.status().message()).c_str());
    return 1;
  }
  if (cluster.world->rank() != 0) return 0;
  const vgpu::ClusterSpec& spec = *cluster.spec;
  if (json) {
    vgpu::JsonWriter w;
    w.BeginObject().Field("processes", spec.size()).Key("tasks").BeginArray();
    for (int r = 0; r < spec.size(); ++r) {
      w.BeginObject()
          .Field("rank", r)
          .Field("job", spec.task(r).job)
          .Field("task", spec.task(r).index)
          .Field("address", spec.address(r))
          .EndObject();
    }
    w.EndArray().EndObject();
    // Each rank's report is a JSON object already.
    std::string out = absl::StrCat("{\"cluster\":", w.str(), ",\"ranks\":[");
    for (size_t r = 0; r < all->size(); ++r) absl::StrAppend(&out, r ? "," : "", (*all)[r]);
    std::printf("%s]}\n", out.c_str());
    return 0;
  }
  std::printf("Cluster: %d processes, %s\n%s", spec.size(), spec.JobSummary().c_str(),
              spec.Describe().c_str());
  for (size_t r = 0; r < all->size(); ++r) {
    std::printf("\n== rank %zu: %s ==\n%s", r, spec.task(static_cast<int>(r)).ToString().c_str(),
                (*all)[r].c_str());
  }
  return 0;
}

}  // namespace vgpu_info
