// Fuzzes TF_CONFIG (devices/cluster.h): ClusterSpec::Create with a few launch sizes and ranks,
// with and without --ps-tasks, never crashes; a refusal is InvalidArgument with a message; an
// accepted spec has one task per rank, this rank's task as self(), and RankOf and RanksOf agree
// with task().
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "vgpu/devices/cluster.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (int world : {1, 2, 3, 5}) {
    for (int rank : {0, world - 1}) {
      for (int ps_tasks : {0, 1}) {
        vgpu::mpi::LaunchInfo launch;
        launch.under_launcher = world > 1;
        launch.rank = rank;
        launch.size = world;
        absl::StatusOr<vgpu::ClusterSpec> c = vgpu::ClusterSpec::Create(launch, text, ps_tasks);
        if (!c.ok()) {
          if (c.status().code() != absl::StatusCode::kInvalidArgument ||
              c.status().message().empty()) {
            std::abort();
          }
          continue;
        }
        if (c->size() != world || c->rank() != rank || !(c->self() == c->task(rank))) std::abort();
        if (c->is_local_only()) std::abort();
        if (c->NumTasks("chief") + c->NumTasks("worker") == 0) std::abort();
        if (ps_tasks > 0 && c->NumTasks("ps") != ps_tasks) std::abort();
        for (int r = 0; r < c->size(); ++r) {
          absl::StatusOr<int> back = c->RankOf(c->task(r));
          if (!back.ok() || *back != r) std::abort();
          if (c->RanksOf(c->task(r).job)[c->task(r).index] != r) std::abort();
        }
        c->Describe();
      }
    }
  }
  return 0;
}
