#include "vgpu/devices/cluster.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "vgpu/runtime/json_reader.h"
#include "vgpu/runtime/status.h"
#include "vgpu/runtime/user_text.h"

namespace vgpu {
namespace {

constexpr absl::string_view kTopLevelKeys[] = {"cluster", "task", "environment", "rpc_layer"};
constexpr absl::string_view kTaskKeys[] = {"type", "index"};

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("TF_CONFIG: ", what));
}

std::string JobList() {
  std::vector<std::string> jobs;
  for (absl::string_view j : kClusterJobs) jobs.push_back(absl::StrCat("\"", j, "\""));
  return absl::StrJoin(jobs, ", ");
}

std::string Tasks(size_t n) { return absl::StrCat(n, n == 1 ? " task" : " tasks"); }

// Where the ranks go: the jobs in kClusterJobs order, each with its addresses in index order.
struct Layout {
  std::vector<std::pair<std::string, std::vector<std::string>>> jobs;
  size_t total() const {
    size_t n = 0;
    for (const auto& [job, addresses] : jobs) n += addresses.size();
    return n;
  }
  size_t NumTasks(absl::string_view job) const {
    for (const auto& [j, addresses] : jobs) {
      if (j == job) return addresses.size();
    }
    return 0;
  }
  std::string Summary() const {
    std::vector<std::string> parts;
    for (const auto& [job, addresses] : jobs) {
      parts.push_back(absl::StrCat(job, " ", addresses.size()));
    }
    return absl::StrJoin(parts, ", ");
  }
};

// The "cluster" object: known jobs, each a non-empty list of non-empty strings.
absl::StatusOr<Layout> ReadCluster(const JsonValue& cluster) {
  if (!cluster.is_object()) {
    return Bad(
        absl::StrCat("\"cluster\" must be an object mapping job names to lists of "
                     "\"host:port\" addresses, not ",
                     cluster.type_name(), " (at byte ", cluster.offset(), ")"));
  }
  std::map<std::string, std::vector<std::string>> by_job;
  for (size_t i = 0; i < cluster.size(); ++i) {
    const std::string& job = cluster.keys()[i];
    const JsonValue& tasks = cluster.elements()[i];
    if (std::find(std::begin(kClusterJobs), std::end(kClusterJobs), job) ==
        std::end(kClusterJobs)) {
      return Bad(absl::StrCat("unknown job ", QuoteUserText(job), " in \"cluster\"; the jobs are ",
                              JobList()));
    }
    // Duplicate keys never get here: the JSON reader refuses them.
    if (!tasks.is_array()) {
      return Bad(absl::StrCat(
          "job \"", job, "\" must be a list of \"host:port\" addresses, not ", tasks.type_name(),
          " (at byte ", tasks.offset(),
          "; the sparse {index: address} form is not supported: every task is an MPI rank)"));
    }
    if (tasks.size() == 0) {
      return Bad(absl::StrCat("job \"", job, "\" has no tasks (at byte ", tasks.offset(),
                              "); list its addresses or leave the job out"));
    }
    std::vector<std::string> addresses;
    for (size_t t = 0; t < tasks.size(); ++t) {
      const JsonValue& a = tasks.elements()[t];
      if (!a.is_string() || a.string_value().empty()) {
        return Bad(absl::StrCat(
            "task ", t, " of job \"", job, "\" must be a non-empty \"host:port\" string, not ",
            a.is_string() ? std::string("an empty string") : std::string(a.type_name()),
            " (at byte ", a.offset(), ")"));
      }
      addresses.push_back(a.string_value());
    }
    if ((job == "chief" || job == "evaluator") && addresses.size() > 1) {
      return Bad(absl::StrCat("job \"", job, "\" has ", addresses.size(),
                              " tasks; a cluster has at most one ", job));
    }
    by_job[job] = std::move(addresses);
  }
  Layout layout;
  for (absl::string_view job : kClusterJobs) {
    auto it = by_job.find(std::string(job));
    if (it != by_job.end()) layout.jobs.emplace_back(it->first, std::move(it->second));
  }
  if (layout.NumTasks("chief") == 0 && layout.NumTasks("worker") == 0) {
    return Bad(absl::StrCat("\"cluster\" has no \"chief\" and no \"worker\" job",
                            layout.jobs.empty() ? "" : absl::StrCat(" (", layout.Summary(), ")"),
                            ": nobody to train; give at least one worker"));
  }
  return layout;
}

// The "task" object: {"type": <a job of the cluster>, "index": <0..K-1>}.
absl::StatusOr<TaskId> ReadTask(const JsonValue& task, const Layout& layout) {
  if (!task.is_object()) {
    return Bad(
        absl::StrCat("\"task\" must be an object {\"type\": \"worker\", \"index\": 0}, "
                     "not ",
                     task.type_name(), " (at byte ", task.offset(), ")"));
  }
  for (const std::string& key : task.keys()) {
    if (std::find(std::begin(kTaskKeys), std::end(kTaskKeys), key) == std::end(kTaskKeys)) {
      return Bad(absl::StrCat("unknown key ", QuoteUserText(key),
                              " in \"task\"; its keys are \"type\" and \"index\""));
    }
  }
  const JsonValue* type = task.Find("type");
  if (type == nullptr) return Bad("\"task\" has no \"type\" (the job of this process)");
  if (!type->is_string()) {
    return Bad(absl::StrCat("\"task\"'s \"type\" must be a string naming a job, not ",
                            type->type_name(), " (at byte ", type->offset(), ")"));
  }
  const std::string& job = type->string_value();
  const size_t tasks = layout.NumTasks(job);
  if (tasks == 0) {
    std::vector<std::string> present;
    for (const auto& [j, addresses] : layout.jobs) present.push_back(absl::StrCat("\"", j, "\""));
    return Bad(absl::StrCat("\"task\"'s type ", QuoteUserText(job),
                            " is not a job of \"cluster\"; its jobs are ",
                            absl::StrJoin(present, ", ")));
  }
  const JsonValue* index = task.Find("index");
  if (index == nullptr) return Bad("\"task\" has no \"index\" (this process's task number)");
  if (!index->is_number() || !index->int_value()) {
    return Bad(absl::StrCat(
        "\"task\"'s \"index\" must be a whole number, not ",
        index->is_number() ? QuoteUserText(index->text()) : std::string(index->type_name()),
        " (at byte ", index->offset(), ")"));
  }
  const int64_t i = *index->int_value();
  if (i < 0) {
    return Bad(absl::StrCat("\"task\"'s \"index\" ", i, " is negative; job \"", job, "\" has ",
                            Tasks(tasks), " (0..", tasks - 1, ")"));
  }
  if (i >= static_cast<int64_t>(tasks)) {
    return Bad(absl::StrCat("\"task\"'s \"index\" ", i, " is out of range: job \"", job, "\" has ",
                            Tasks(tasks), " (0..", tasks - 1, ")"));
  }
  return TaskId{job, static_cast<int>(i)};
}

absl::Status CheckLaunch(const mpi::LaunchInfo& launch) {
  if (launch.size < 1 || launch.rank < 0 || launch.rank >= launch.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster spec: rank ", launch.rank, " of ", launch.size,
                     " processes is not a valid launch (need size >= 1 and 0 <= rank < size)"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string TaskId::ToString() const { return absl::StrCat("/job:", job, "/task:", index); }

absl::StatusOr<ClusterSpec> ClusterSpec::Create(const mpi::LaunchInfo& launch,
                                                const std::optional<std::string>& tf_config,
                                                int ps_tasks) {
  VGPU_RETURN_IF_ERROR(CheckLaunch(launch));
  if (ps_tasks < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ps-tasks=", ps_tasks, " is negative; give 0 (no parameter servers) up to ",
        launch.size - 1, " (one less than the ", launch.size, " processes of mpirun -np)"));
  }
  ClusterSpec spec;
  spec.rank_ = launch.rank;
  if (!tf_config.has_value()) {
    if (ps_tasks > launch.size - 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--ps-tasks=", ps_tasks, " leaves no worker: the run has ", launch.size,
                       launch.size == 1 ? " process" : " processes", " (mpirun -np) and at most ",
                       launch.size - 1, " of them can be parameter servers"));
    }
    const int workers = launch.size - ps_tasks;
    for (int r = 0; r < launch.size; ++r) {
      spec.tasks_.push_back(r < workers ? TaskId{"worker", r} : TaskId{"ps", r - workers});
      spec.addresses_.emplace_back();
    }
    return spec;
  }

  const std::string& text = *tf_config;
  if (text.size() > kMaxTfConfigBytes) {
    return Bad(absl::StrCat("TF_CONFIG is ", text.size(), " bytes, over the limit of ",
                            kMaxTfConfigBytes, " bytes (1 MiB)"));
  }
  if (StripUserValue(text).empty()) {
    return Bad(
        "empty; unset TF_CONFIG (then ranks are workers, and --ps-tasks the last ones "
        "parameter servers) or give the cluster as JSON, e.g. "
        "{\"cluster\": {\"worker\": [\"host0:2222\", \"host1:2222\"]}}");
  }
  JsonReadOptions options;
  options.max_bytes = kMaxTfConfigBytes;
  absl::StatusOr<JsonValue> root = ParseJson(text, options);
  if (!root.ok()) return Bad(root.status().message());
  if (!root->is_object()) {
    return Bad(absl::StrCat("must be a JSON object {\"cluster\": {...}, \"task\": {...}}, not ",
                            root->type_name()));
  }
  for (const std::string& key : root->keys()) {
    if (std::find(std::begin(kTopLevelKeys), std::end(kTopLevelKeys), key) ==
        std::end(kTopLevelKeys)) {
      return Bad(absl::StrCat("unknown key ", QuoteUserText(key),
                              "; TF_CONFIG's keys are \"cluster\", \"task\", \"environment\" and "
                              "\"rpc_layer\""));
    }
  }
  const JsonValue* cluster = root->Find("cluster");
  if (cluster == nullptr) {
    return Bad(
        "no \"cluster\"; give the jobs, e.g. {\"cluster\": {\"worker\": "
        "[\"host0:2222\", \"host1:2222\"]}, \"task\": {\"type\": \"worker\", \"index\": "
        "0}}");
  }
  VGPU_ASSIGN_OR_RETURN(Layout layout, ReadCluster(*cluster));
  const size_t total = layout.total();
  if (total != static_cast<size_t>(launch.size)) {
    return Bad(absl::StrCat("the cluster has ", Tasks(total), " (", layout.Summary(),
                            ") but this run has ", launch.size,
                            launch.size == 1 ? " process" : " processes",
                            " (the MPI world size): mpirun -np must match the number of tasks, "
                            "one process per task"));
  }
  const size_t ps = layout.NumTasks("ps");
  if (ps_tasks > 0 && static_cast<size_t>(ps_tasks) != ps) {
    return Bad(absl::StrCat("--ps-tasks=", ps_tasks, " disagrees with the cluster, which has ",
                            Tasks(ps), " in job \"ps\"; give the parameter servers once"));
  }
  for (const auto& [job, addresses] : layout.jobs) {
    for (size_t i = 0; i < addresses.size(); ++i) {
      spec.tasks_.push_back(TaskId{job, static_cast<int>(i)});
      spec.addresses_.push_back(addresses[i]);
    }
  }
  if (const JsonValue* task = root->Find("task"); task != nullptr) {
    VGPU_ASSIGN_OR_RETURN(TaskId given, ReadTask(*task, layout));
    if (given != spec.self()) {
      return Bad(absl::StrCat("\"task\" is ", given.ToString(), " but this process, rank ",
                              launch.rank, " of ", launch.size, ", is ", spec.self().ToString(),
                              " (ranks go to chief, worker, ps, evaluator in that order, each "
                              "job's tasks in index order); give each process the task of its "
                              "rank, or leave \"task\" out"));
    }
  }
  return spec;
}

std::optional<std::string> ClusterSpec::TfConfigFromEnvironment() {
  const char* v = std::getenv("TF_CONFIG");
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

ClusterSpec ClusterSpec::Local() {
  ClusterSpec spec;
  spec.tasks_.push_back(TaskId{std::string(kLocalJob), 0});
  spec.addresses_.emplace_back();
  spec.local_only_ = true;
  return spec;
}

std::vector<int> ClusterSpec::RanksOf(absl::string_view job) const {
  std::vector<std::pair<int, int>> by_index;  // (index, rank)
  for (int r = 0; r < size(); ++r) {
    if (tasks_[r].job == job) by_index.emplace_back(tasks_[r].index, r);
  }
  std::sort(by_index.begin(), by_index.end());
  std::vector<int> ranks;
  for (const auto& [index, rank] : by_index) ranks.push_back(rank);
  return ranks;
}

int ClusterSpec::NumTasks(absl::string_view job) const {
  return static_cast<int>(
      std::count_if(tasks_.begin(), tasks_.end(), [&](const TaskId& t) { return t.job == job; }));
}

std::vector<std::string> ClusterSpec::Jobs() const {
  std::vector<std::string> jobs;
  for (const TaskId& t : tasks_) {
    if (std::find(jobs.begin(), jobs.end(), t.job) == jobs.end()) jobs.push_back(t.job);
  }
  return jobs;
}

std::string ClusterSpec::JobSummary() const {
  std::vector<std::string> parts;
  for (const std::string& job : Jobs()) {
    parts.push_back(absl::StrCat(job, " (", Tasks(NumTasks(job)), ")"));
  }
  return absl::StrJoin(parts, ", ");
}

absl::StatusOr<int> ClusterSpec::RankOf(const TaskId& t) const {
  for (int r = 0; r < size(); ++r) {
    if (tasks_[r] == t) return r;
  }
  return absl::NotFoundError(
      absl::StrCat("no task ", TaskId{EscapeUserText(t.job, 40, true), t.index}.ToString(),
                   " in this cluster; its jobs are ", JobSummary()));
}

std::string ClusterSpec::Describe() const {
  std::string out;
  for (int r = 0; r < size(); ++r) {
    absl::StrAppend(&out, "rank ", r, ": ", tasks_[r].ToString());
    if (!addresses_[r].empty())
      absl::StrAppend(&out, " ", EscapeUserText(addresses_[r], 80, false));
    if (r == rank_) absl::StrAppend(&out, " (this process)");
    out.push_back('\n');
  }
  return out;
}

}  // namespace vgpu
