// The cluster spec: which MPI rank is which task of which job of a TensorFlow-style cluster
// (jobs chief, worker, ps, evaluator), so that every process knows its own name
// (/job:worker/task:1) and the names of the others. Built from the launch (runtime/mpi/world.h's
// LaunchInfo) and either TensorFlow's TF_CONFIG JSON or a number of parameter-server tasks
// (vgpu's --ps-tasks form); given to Runtime::Create through RuntimeConfig::cluster, which then
// names this process's devices /job:<job>/replica:0/task:<index>/device:GPU:i and refuses to
// hand out another task's devices. Grammar, rank order and errors: docs/cluster.md.
//
// Thread safety: TaskId and ClusterSpec are immutable values once built; a ClusterSpec is safe
// to share between threads (Runtime keeps a shared_ptr<const ClusterSpec>). Create and Local are
// pure functions.
#ifndef VGPU_DEVICES_CLUSTER_H_
#define VGPU_DEVICES_CLUSTER_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "vgpu/runtime/mpi/world.h"

namespace vgpu {

// The jobs a cluster may have, in the order ranks are given to them.
inline constexpr absl::string_view kClusterJobs[] = {"chief", "worker", "ps", "evaluator"};
// The job and task of a plain (not clustered) run: /job:localhost/task:0.
inline constexpr absl::string_view kLocalJob = "localhost";
// The longest TF_CONFIG accepted (bytes).
inline constexpr size_t kMaxTfConfigBytes = size_t{1} << 20;

// One task of the cluster: /job:<job>/task:<index>.
struct TaskId {
  std::string job;
  int index = 0;

  // "/job:worker/task:1"
  std::string ToString() const;
  friend bool operator==(const TaskId& a, const TaskId& b) = default;
};

class ClusterSpec {
 public:
  // One task per MPI rank of `launch` (rank `launch.rank` of `launch.size` is this process).
  //
  // Without `tf_config`: ranks [0, size - ps_tasks) are /job:worker/task:0.., the last
  // `ps_tasks` ranks are /job:ps/task:0.. (rank 0 is worker 0, the chief role). A world of one
  // is /job:worker/task:0 (only Local() gives /job:localhost).
  //
  // With `tf_config` (TensorFlow's JSON, at most kMaxTfConfigBytes):
  //   {"cluster": {"chief": ["host:port"], "worker": [...], "ps": [...]},
  //    "task": {"type": "worker", "index": 1}}
  // ranks are given to the tasks in the order chief, worker, ps, evaluator, each job's tasks
  // in index order; the total must equal launch.size. "task", when present, must be the task
  // this rank gets (a per-process TF_CONFIG, as with mpirun's MPMD form, is checked). Jobs are
  // lists of non-empty address strings (the addresses are kept for Describe; vgpu's transport
  // is MPI); at most one chief and one evaluator; at least one chief or worker. Top-level keys
  // other than "cluster", "task", "environment" and "rpc_layer" are refused (a misspelt "task"
  // must not go unchecked). `ps_tasks` > 0 must agree with the TF_CONFIG's number of ps tasks.
  //
  // Every error is InvalidArgument naming what is wrong and the limit (bad launch, negative
  // ps_tasks, ps_tasks >= size, TF_CONFIG empty, too long, not JSON (with its byte offset),
  // not an object, a bad "cluster" or "task", totals that do not match mpirun -np).
  static absl::StatusOr<ClusterSpec> Create(const mpi::LaunchInfo& launch,
                                            const std::optional<std::string>& tf_config,
                                            int ps_tasks = 0);
  // One process: /job:localhost/task:0, rank 0 of 1 (what a plain run is).
  static ClusterSpec Local();
  // TF_CONFIG from the process environment, as the tools read it: unset or empty is none (a
  // launcher that exports an empty variable means "no cluster spec").
  static std::optional<std::string> TfConfigFromEnvironment();

  int size() const { return static_cast<int>(tasks_.size()); }
  int rank() const { return rank_; }
  const TaskId& self() const { return tasks_[rank_]; }
  // `rank` in [0, size()).
  const TaskId& task(int rank) const { return tasks_[rank]; }
  // The address TF_CONFIG gives rank `rank` ("" without TF_CONFIG).
  const std::string& address(int rank) const { return addresses_[rank]; }
  // The ranks of `job`'s tasks, in task-index order (empty for a job the cluster lacks).
  std::vector<int> RanksOf(absl::string_view job) const;
  int NumTasks(absl::string_view job) const;
  // The jobs present, in rank order ("chief", "worker", ...; "localhost" for Local()).
  std::vector<std::string> Jobs() const;
  // NotFound naming the task and listing the jobs that exist with their task counts.
  absl::StatusOr<int> RankOf(const TaskId& t) const;
  // "worker (2 tasks), ps (1 task)": the jobs and their sizes, for messages.
  std::string JobSummary() const;
  // Whether this is Local().
  bool is_local_only() const { return local_only_; }
  // One line per task, "rank 0: /job:worker/task:0 host:2222 (this process)", each ending in
  // '\n' (for vgpu-info).
  std::string Describe() const;

 private:
  ClusterSpec() = default;

  std::vector<TaskId> tasks_;           // by rank
  std::vector<std::string> addresses_;  // by rank
  int rank_ = 0;
  bool local_only_ = false;
};

}  // namespace vgpu

#endif  // VGPU_DEVICES_CLUSTER_H_
