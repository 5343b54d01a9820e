// The bad-input catalogue's cluster cases (docs/bad-input.md, "Cluster"): the launcher's
// environment, TF_CONFIG, --ps-tasks, the collective deadline, remote device names, the
// collectives layer and the parameter server's set-up. Each is checked for its code and
// message, and the page must list it.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bad_input_catalogue.h"
#include "vgpu/devices/cluster.h"
#include "vgpu/devices/runtime.h"
#include "vgpu/runtime/host/host_platform.h"
#include "vgpu/runtime/mpi/world.h"
#include "vgpu/strategies/collectives/communicator.h"
#include "vgpu/strategies/nn.h"
#include "vgpu/strategies/parameter_server.h"
#include "vgpu/tests/testing_runtime.h"

namespace vgpu::testing {
namespace {

using Env = std::map<std::string, std::string>;

std::function<std::optional<std::string>(absl::string_view)> Lookup(Env env) {
  return [env](absl::string_view name) -> std::optional<std::string> {
    auto it = env.find(std::string(name));
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

mpi::LaunchInfo Launch(int rank, int size) {
  mpi::LaunchInfo l;
  l.under_launcher = true;
  l.rank = rank;
  l.size = size;
  l.local_size = size;
  l.local_rank = rank;
  return l;
}

absl::Status Spec(int rank, int size, std::optional<std::string> tf_config, int ps = 0) {
  return ClusterSpec::Create(Launch(rank, size), tf_config, ps).status();
}

// Two logical GPUs on one simulated card, named as task 0 of a 2-worker cluster.
struct ClusterRuntime {
  std::unique_ptr<HostPlatform> platform;
  std::unique_ptr<Runtime> runtime;
};
ClusterRuntime MakeClusterRuntime() {
  ClusterRuntime c;
  HostPlatformOptions o;
  o.device_bytes = {uint64_t{1} << 30};
  c.platform = *HostPlatform::Create(o);
  RuntimeConfig config;
  PhysicalDeviceConfig p;
  p.ordinal = 0;
  p.logical_devices = {LogicalDeviceConfig::Bytes(64 << 20), LogicalDeviceConfig::Bytes(64 << 20)};
  config.logical_devices = {p};
  config.cluster = std::make_shared<const ClusterSpec>(*ClusterSpec::Create(Launch(0, 2), {}));
  c.runtime = *Runtime::Create(config, c.platform.get());
  return c;
}

std::vector<CatalogueCase> ClusterCases() {
  std::vector<CatalogueCase> c;
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  c.push_back({"M01", "launcher: rank not below the size", "OMPI_COMM_WORLD_RANK=2, _SIZE=2",
               kInvalid, "OMPI_COMM_WORLD_RANK", [] {
                 return mpi::DetectLaunch(
                            Lookup({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}}))
                     .status();
               }});
  c.push_back({"M02", "launcher: malformed rank", "OMPI_COMM_WORLD_RANK=0x1", kInvalid,
               "OMPI_COMM_WORLD_RANK", [] {
                 return mpi::DetectLaunch(Lookup({{"OMPI_COMM_WORLD_RANK", "0x1"},
                                                  {"OMPI_COMM_WORLD_SIZE", "2"}}))
                     .status();
               }});
  c.push_back(
      {"M03", "collective deadline: not a number", "VGPU_MPI_TIMEOUT_S=soon", kInvalid,
       "VGPU_MPI_TIMEOUT_S", [] {
         return mpi::TimeoutFromEnvironment(Lookup({{"VGPU_MPI_TIMEOUT_S", "soon"}})).status();
       }});
  c.push_back({"M04", "TF_CONFIG: not JSON", "TF_CONFIG='{\"cluster\":'", kInvalid,
               "TF_CONFIG: invalid JSON at byte 11", [] { return Spec(0, 2, "{\"cluster\":"); }});
  c.push_back({"M05", "TF_CONFIG: unknown job", "{\"cluster\":{\"master\":[\"a:1\"]}}", kInvalid,
               "unknown job \"master\"",
               [] { return Spec(0, 1, R"({"cluster":{"master":["a:1"]}})"); }});
  c.push_back({"M06", "TF_CONFIG: tasks != mpirun -np", "2 workers under mpirun -np 3", kInvalid,
               "mpirun -np must match the number of tasks",
               [] { return Spec(0, 3, R"({"cluster":{"worker":["a:1","b:1"]}})"); }});
  c.push_back({"M07", "TF_CONFIG: task index out of range",
               "\"task\":{\"type\":\"worker\",\"index\":5}", kInvalid, "out of range", [] {
                 return Spec(0, 2,
                             R"({"cluster":{"worker":["a:1","b:1"]},)"
                             R"("task":{"type":"worker","index":5}})");
               }});
  c.push_back({"M08", "--ps-tasks: no worker left", "--ps-tasks 2 under mpirun -np 2", kInvalid,
               "leaves no worker", [] { return Spec(0, 2, std::nullopt, 2); }});
  c.push_back({"M09", "a remote task's device handed out as local",
               "Find(\"/job:worker/task:1/device:GPU:0\") on task 0",
               absl::StatusCode::kFailedPrecondition,
               "is a device of remote task /job:worker/task:1", [] {
                 ClusterRuntime r = MakeClusterRuntime();
                 return r.runtime->Find("/job:worker/task:1/device:GPU:0").status();
               }});
  c.push_back({"M10", "a task the cluster does not have",
               "Find(\"/job:worker/task:7/device:GPU:0\")", absl::StatusCode::kNotFound,
               "names no task of this cluster", [] {
                 ClusterRuntime r = MakeClusterRuntime();
                 return r.runtime->Find("/job:worker/task:7/device:GPU:0").status();
               }});
  c.push_back({"M11", "communicator: unknown kind", "CommunicatorOptions{kind = \"ring\"}",
               kInvalid, "unknown communicator kind 'ring'", [] {
                 ClusterRuntime r = MakeClusterRuntime();
                 collectives::CommunicatorOptions o;
                 o.kind = "ring";
                 return collectives::CreateCommunicator(r.runtime->gpus(), o).status();
               }});
  c.push_back({"M12", "communicator across processes without a world", "kind \"mpi\", world null",
               absl::StatusCode::kFailedPrecondition, "needs an MPI world", [] {
                 ClusterRuntime r = MakeClusterRuntime();
                 collectives::CommunicatorOptions o;
                 o.kind = "mpi";
                 return collectives::CreateCommunicator(r.runtime->gpus(), o).status();
               }});
  c.push_back({"M13", "communicator: buffers for the wrong number of ranks",
               "AllReduce with 1 buffer on 2 ranks", kInvalid, "1 buffers for 2 local ranks", [] {
                 ClusterRuntime r = MakeClusterRuntime();
                 auto comm = collectives::CreateCommunicator(r.runtime->gpus());
                 if (!comm.ok()) return comm.status();
                 LogicalDevice* d = r.runtime->gpus()[0];
                 auto buf = d->allocator()->Allocate(64);
                 if (!buf.ok()) return buf.status();
                 float* p = static_cast<float*>(buf->data());
                 std::vector<collectives::RankBuffer> one = {{d->stream(), p, p}};
                 return (*comm)->AllReduce(one, 4, collectives::ReduceOp::kSum);
               }});
  c.push_back({"M14", "parameter server without ps tasks", "ShardVariables(..., 0 ps tasks)",
               kInvalid, "0 ps tasks; at least 1", [] {
                 return strategies::ShardVariables(strategies::MakeMlp()->Variables(), 0,
                                                   strategies::ShardPolicy::kRoundRobin)
                     .status();
               }});
  c.push_back({"M15", "variable sharding: unknown policy", "--ps-sharding random", kInvalid,
               "unknown variable sharding 'random'",
               [] { return strategies::ParseShardPolicy("random").status(); }});
  return c;
}

TEST(BadInput, ClusterCases) { RunCatalogue(ClusterCases()); }
TEST(BadInput, DocumentListsClusterCases) { CheckDocumented(ClusterCases()); }
TEST(BadInput, DISABLED_PrintCluster) { PrintCatalogue(ClusterCases()); }

}  // namespace
}  // namespace vgpu::testing
