#include "vgpu/strategies/parameter_server.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "vgpu/runtime/status.h"
#include "vgpu/strategies/replica_eval.h"

namespace vgpu {
namespace strategies {
namespace {

// Point-to-point tags: a worker's push (gradients or "done") and a server's answer.
constexpr int kPushTag = 7101;
constexpr int kPullTag = 7102;
enum MessageKind : int64_t { kGradients = 1, kDone = 2, kParams = 3 };

// A message: two int64 (kind, version) then the floats of one server's variables.
struct Header {
  int64_t kind = 0;
  int64_t version = 0;
};

// The floats of `server`'s variables, in variable order.
uint64_t SliceSize(const std::vector<Model::Variable>& vars, const std::vector<int>& owner,
                   int server) {
  uint64_t n = 0;
  for (size_t i = 0; i < vars.size(); ++i) {
    if (owner[i] == server) n += vars[i].end - vars[i].begin;
  }
  return n;
}

// full -> message (after the header), or back.
void Pack(const std::vector<Model::Variable>& vars, const std::vector<int>& owner, int server,
          const float* full, Header h, std::vector<char>& msg) {
  msg.resize(sizeof(Header) + SliceSize(vars, owner, server) * sizeof(float));
  std::memcpy(msg.data(), &h, sizeof(h));
  char* out = msg.data() + sizeof(Header);
  for (size_t i = 0; i < vars.size(); ++i) {
    if (owner[i] != server) continue;
    const size_t bytes = (vars[i].end - vars[i].begin) * sizeof(float);
    if (full != nullptr)
      std::memcpy(out, full + vars[i].begin, bytes);
    else
      std::memset(out, 0, bytes);
    out += bytes;
  }
}
Header Unpack(const std::vector<Model::Variable>& vars, const std::vector<int>& owner, int server,
              const std::vector<char>& msg, float* full) {
  Header h;
  std::memcpy(&h, msg.data(), sizeof(h));
  const char* in = msg.data() + sizeof(Header);
  for (size_t i = 0; i < vars.size(); ++i) {
    if (owner[i] != server) continue;
    const size_t bytes = (vars[i].end - vars[i].begin) * sizeof(float);
    std::memcpy(full + vars[i].begin, in, bytes);
    in += bytes;
  }
  return h;
}

// The checks both sides share; returns this rank's index among the workers (role "worker") or
// the servers ("ps").
absl::StatusOr<int> CheckCluster(const ParameterServerOptions& ps, absl::string_view role) {
  if (ps.world == nullptr) {
    return absl::InvalidArgumentError("parameter server: no MPI world (ParameterServerOptions)");
  }
  if (ps.worker_ranks.empty() || ps.ps_ranks.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("parameter server: ", ps.worker_ranks.size(),
                                                   " worker(s) and ", ps.ps_ranks.size(),
                                                   " ps task(s); both must be at least 1"));
  }
  std::set<int> seen;
  for (const std::vector<int>* list : {&ps.worker_ranks, &ps.ps_ranks}) {
    for (int r : *list) {
      if (r < 0 || r >= ps.world->size() || !seen.insert(r).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter server: rank ", r, " is outside 0..", ps.world->size() - 1,
                         " or listed twice among the workers and ps tasks"));
      }
    }
  }
  if (static_cast<int>(seen.size()) != ps.world->size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter server: ", seen.size(), " workers and ps tasks for ",
                     ps.world->size(), " processes: every process must be one or the other"));
  }
  const std::vector<int>& mine = role == "ps" ? ps.ps_ranks : ps.worker_ranks;
  auto it = std::find(mine.begin(), mine.end(), ps.world->rank());
  if (it == mine.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter server: rank ", ps.world->rank(), " is not a ", role, " task"));
  }
  return static_cast<int>(it - mine.begin());
}

// Every rank of the job (workers and servers) says how many replicas it brings (servers 0): the
// split of the global batch assumes every worker brings the same number. A collective: both
// Create functions call it, in the same order on every rank.
absl::Status AgreeOnReplicas(const ParameterServerOptions& ps, int mine) {
  std::vector<int> all(ps.world->size());
  VGPU_RETURN_IF_ERROR(ps.world->AllGather(&mine, sizeof(int), all.data()));
  const int first = all[ps.worker_ranks[0]];
  for (int r : ps.worker_ranks) {
    if (all[r] != first) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parameter server: every worker must bring the same number of devices; worker rank ",
          ps.worker_ranks[0], " has ", first, ", worker rank ", r, " has ", all[r]));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ShardPolicy> ParseShardPolicy(absl::string_view text) {
  const std::string t = absl::AsciiStrToLower(text);
  if (t == "round-robin") return ShardPolicy::kRoundRobin;
  if (t == "by-size") return ShardPolicy::kBySize;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown variable sharding '", text, "'; use round-robin or by-size"));
}

absl::string_view ShardPolicyName(ShardPolicy policy) {
  return policy == ShardPolicy::kBySize ? "by-size" : "round-robin";
}

absl::StatusOr<std::vector<int>> ShardVariables(const std::vector<Model::Variable>& variables,
                                                int ps_tasks, ShardPolicy policy) {
  if (ps_tasks < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ShardVariables: ", ps_tasks, " ps tasks; at least 1"));
  }
  std::vector<int> owner(variables.size());
  std::vector<uint64_t> load(ps_tasks, 0);
  for (size_t i = 0; i < variables.size(); ++i) {
    if (policy == ShardPolicy::kRoundRobin) {
      owner[i] = static_cast<int>(i % ps_tasks);
    } else {
      owner[i] = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    }
    load[owner[i]] += variables[i].end - variables[i].begin;
  }
  return owner;
}

// ---------------------------------------------------------------------------------------------
// Worker.

absl::StatusOr<std::unique_ptr<ParameterServerStrategy>> ParameterServerStrategy::Create(
    std::vector<LogicalDevice*> devices, const StrategyOptions& options,
    const ParameterServerOptions& ps) {
  if (devices.empty()) return absl::InvalidArgumentError("ParameterServerStrategy: no devices");
  if (options.global_batch <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ParameterServerStrategy: global batch ", options.global_batch));
  }
  VGPU_RETURN_IF_ERROR(CheckModel(options, "ParameterServerStrategy"));
  VGPU_ASSIGN_OR_RETURN(int index, CheckCluster(ps, "worker"));
  VGPU_RETURN_IF_ERROR(AgreeOnReplicas(ps, static_cast<int>(devices.size())));
  std::unique_ptr<ParameterServerStrategy> s(new ParameterServerStrategy());
  s->devices_ = devices;
  s->options_ = options;
  s->ps_ = ps;
  s->worker_index_ = index;
  s->variables_ = options.model->Variables();
  VGPU_ASSIGN_OR_RETURN(s->owner_, ShardVariables(s->variables_, ps.ps_ranks.size(), ps.sharding));
  s->params_ = options.model->InitialParams(options.seed);
  s->grads_.assign(s->params_.size(), 0.0f);
  s->seen_version_.assign(ps.ps_ranks.size(), 0);
  VGPU_ASSIGN_OR_RETURN(
      s->replicas_,
      CreateDataParallelReplicas(
          devices, options,
          static_cast<int>(devices.size()) * static_cast<int>(ps.worker_ranks.size()), s->params_));
  VGPU_ASSIGN_OR_RETURN(s->local_, collectives::CreateCommunicator(devices));
  return s;
}

ParameterServerStrategy::~ParameterServerStrategy() {
  for (auto& r : replicas_) (void)r->Synchronize();
}

absl::Status ParameterServerStrategy::Step(const float* x, const int32_t* y, int rows) {
  if (finished_) return absl::FailedPreconditionError("ParameterServerStrategy: Step after Finish");
  if (rows <= 0 || rows > options_.global_batch) {
    return absl::InvalidArgumentError(absl::StrCat("ParameterServerStrategy::Step: ", rows,
                                                   " rows; the global batch is 1..",
                                                   options_.global_batch));
  }
  if (accounting_.slot() == options_.max_slots) VGPU_RETURN_IF_ERROR(Flush().status());
  const int n = static_cast<int>(replicas_.size());
  VGPU_ASSIGN_OR_RETURN(const int local_rows,
                        ReplicaGradients(replicas_, options_.model->input_width(), x, y, rows,
                                         n * static_cast<int>(ps_.worker_ranks.size()),
                                         worker_index_ * n, accounting_.slot()));
  std::vector<collectives::RankBuffer> bufs;
  for (int i = 0; i < n; ++i) {
    ModelStage* stage = replicas_[i]->front();
    bufs.push_back({stage->stream(), stage->grads(), i == 0 ? stage->grads() : nullptr});
  }
  accounting_.StepQueued(local_rows);
  // This worker's gradient (its replicas summed), to the host.
  const uint64_t count = params_.size();
  VGPU_RETURN_IF_ERROR(local_->Reduce(bufs, count, collectives::ReduceOp::kSum, 0));
  Stream* s0 = bufs[0].stream;
  VGPU_RETURN_IF_ERROR(s0->MemcpyD2H(grads_.data(), bufs[0].recv, count * sizeof(float)));
  VGPU_RETURN_IF_ERROR(s0->Synchronize());
  VGPU_RETURN_IF_ERROR(PushAndPull(kGradients, grads_.data()));
  ++stats_.updates;
  for (auto& rep : replicas_) VGPU_RETURN_IF_ERROR(rep->LoadParams(params_));
  return absl::OkStatus();
}

absl::Status ParameterServerStrategy::PushAndPull(int64_t kind, const float* grads) {
  std::vector<char> msg;
  for (size_t p = 0; p < ps_.ps_ranks.size(); ++p) {
    Pack(variables_, owner_, static_cast<int>(p), grads, {kind, seen_version_[p]}, msg);
    VGPU_RETURN_IF_ERROR(ps_.world->Send(msg.data(), msg.size(), ps_.ps_ranks[p], kPushTag));
  }
  for (size_t p = 0; p < ps_.ps_ranks.size(); ++p) {
    msg.resize(sizeof(Header) + SliceSize(variables_, owner_, static_cast<int>(p)) * sizeof(float));
    VGPU_RETURN_IF_ERROR(
        ps_.world->Recv(msg.data(), msg.size(), ps_.ps_ranks[p], kPullTag).status());
    seen_version_[p] = Unpack(variables_, owner_, static_cast<int>(p), msg, params_.data()).version;
  }
  return absl::OkStatus();
}

absl::StatusOr<StepTotals> ParameterServerStrategy::Flush() {
  return FlushReplicas(replicas_, accounting_);
}

absl::StatusOr<StepTotals> ParameterServerStrategy::Evaluate(const float* x, const int32_t* y,
                                                             int n) {
  VGPU_RETURN_IF_ERROR(Flush().status());
  return EvaluateRoundRobin(replicas_, options_.model->input_width(), options_.max_slots, x, y, n);
}

absl::StatusOr<std::vector<float>> ParameterServerStrategy::Params() {
  std::vector<float> p;
  VGPU_RETURN_IF_ERROR(replicas_[0]->ReadParams(p));
  return p;
}

absl::StatusOr<std::vector<float>> ParameterServerStrategy::Finish() {
  if (finished_) return absl::FailedPreconditionError("ParameterServerStrategy: Finish twice");
  finished_ = true;
  VGPU_RETURN_IF_ERROR(Flush().status());
  VGPU_RETURN_IF_ERROR(PushAndPull(kDone, nullptr));
  // The servers get the whole model too (from the chief): every rank ends with the same bytes.
  VGPU_RETURN_IF_ERROR(
      ps_.world->Broadcast(params_.data(), params_.size() * sizeof(float), ps_.worker_ranks[0]));
  for (auto& rep : replicas_) VGPU_RETURN_IF_ERROR(rep->LoadParams(params_));
  for (auto& rep : replicas_) VGPU_RETURN_IF_ERROR(rep->Synchronize());
  return params_;
}

std::string ParameterServerStrategy::PlacementReport() const {
  const int n = static_cast<int>(replicas_.size());
  const int total = n * static_cast<int>(ps_.worker_ranks.size());
  std::string out = absl::StrCat("parameter-server: worker ", worker_index_, " of ",
                                 ps_.worker_ranks.size(), ", ", ps_.ps_ranks.size(),
                                 " ps task(s), variables ", ShardPolicyName(ps_.sharding), ", ",
                                 ps_.async ? "asynchronous" : "synchronous", "\n");
  for (int i = 0; i < n; ++i) {
    absl::StrAppend(&out, "  replica ", worker_index_ * n + i, " -> ", devices_[i]->name(), " (",
                    RowsForReplica(options_.global_batch, total, worker_index_ * n + i),
                    " of each global batch of ", options_.global_batch, ")\n");
  }
  for (size_t v = 0; v < variables_.size(); ++v) {
    absl::StrAppend(&out, "  ", variables_[v].name, " (", variables_[v].end - variables_[v].begin,
                    " floats) -> /job:ps/task:", owner_[v], "\n");
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Server.

absl::StatusOr<std::unique_ptr<ParameterServer>> ParameterServer::Create(
    LogicalDevice* device, const StrategyOptions& options, const ParameterServerOptions& ps) {
  if (device == nullptr || device->stream() == nullptr) {
    return absl::InvalidArgumentError("ParameterServer: no device");
  }
  VGPU_RETURN_IF_ERROR(CheckModel(options, "ParameterServer"));
  VGPU_ASSIGN_OR_RETURN(int index, CheckCluster(ps, "ps"));
  VGPU_RETURN_IF_ERROR(AgreeOnReplicas(ps, 0));
  std::unique_ptr<ParameterServer> s(new ParameterServer());
  s->device_ = device;
  s->options_ = options;
  s->ps_ = ps;
  s->server_index_ = index;
  s->variables_ = options.model->Variables();
  VGPU_ASSIGN_OR_RETURN(s->owner_, ShardVariables(s->variables_, ps.ps_ranks.size(), ps.sharding));
  s->params_ = options.model->InitialParams(options.seed);
  const int rows = std::max(1, std::min(options.eval_batch, options.global_batch));
  VGPU_ASSIGN_OR_RETURN(
      s->stage_, CreateReplica(*options.model, device, rows, options.optimizer, options.max_slots));
  VGPU_RETURN_IF_ERROR(s->stage_->LoadParams(s->params_));
  return s;
}

ParameterServer::~ParameterServer() {
  if (stage_) (void)stage_->Synchronize();
}

absl::Status ParameterServer::Apply(const std::vector<float>& summed, int64_t step) {
  ModelStage* st = stage_->front();
  Stream* s = st->stream();
  for (size_t v = 0; v < variables_.size(); ++v) {
    if (owner_[v] != server_index_) continue;
    const Model::Variable& var = variables_[v];
    const uint64_t bytes = (var.end - var.begin) * sizeof(float);
    VGPU_RETURN_IF_ERROR(s->MemcpyH2D(st->grads() + var.begin, summed.data() + var.begin, bytes));
    VGPU_RETURN_IF_ERROR(st->UpdateRange(step, st->grads(), var.begin, var.end));
    VGPU_RETURN_IF_ERROR(s->MemcpyD2H(params_.data() + var.begin, st->params() + var.begin, bytes));
  }
  ++stats_.updates;
  return s->Synchronize();  // `summed` is the caller's and params_ is read next
}

absl::Status ParameterServer::Serve() {
  const int workers = static_cast<int>(ps_.worker_ranks.size());
  const uint64_t slice = SliceSize(variables_, owner_, server_index_);
  const size_t bytes = sizeof(Header) + slice * sizeof(float);
  std::vector<char> msg(bytes);
  std::vector<float> one(params_.size(), 0.0f), summed(params_.size(), 0.0f);
  std::vector<double> acc(params_.size(), 0.0);
  int64_t version = 0;
  int64_t staleness_sum = 0;
  auto answer = [&](int rank, int64_t kind) -> absl::Status {
    Pack(variables_, owner_, server_index_, params_.data(), {kind, version}, msg);
    return ps_.world->Send(msg.data(), msg.size(), rank, kPullTag);
  };
  if (!ps_.async) {
    // One update per step: every worker's push, summed in worker order.
    for (;;) {
      int done = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int w = 0; w < workers; ++w) {
        VGPU_RETURN_IF_ERROR(
            ps_.world->Recv(msg.data(), bytes, ps_.worker_ranks[w], kPushTag).status());
        const Header h = Unpack(variables_, owner_, server_index_, msg, one.data());
        if (h.kind == kDone) {
          ++done;
          continue;
        }
        for (size_t v = 0; v < variables_.size(); ++v) {
          if (owner_[v] != server_index_) continue;
          for (uint64_t k = variables_[v].begin; k < variables_[v].end; ++k) acc[k] += one[k];
        }
      }
      if (done == workers) break;
      if (done > 0) {
        return absl::FailedPreconditionError(
            absl::StrCat("parameter server ", server_index_, ": ", done, " of ", workers,
                         " workers finished while the others pushed step ", version + 1,
                         ": synchronous training needs the same number of steps on every worker"));
      }
      for (size_t k = 0; k < acc.size(); ++k) summed[k] = static_cast<float>(acc[k]);
      VGPU_RETURN_IF_ERROR(Apply(summed, ++version));
      for (int w = 0; w < workers; ++w) VGPU_RETURN_IF_ERROR(answer(ps_.worker_ranks[w], kParams));
    }
  } else {
    // Each push applied as it comes, that worker's share rescaled to a whole batch.
    int done = 0;
    while (done < workers) {
      VGPU_ASSIGN_OR_RETURN(int from,
                            ps_.world->Recv(msg.data(), bytes, mpi::World::kAnySource, kPushTag));
      const Header h = Unpack(variables_, owner_, server_index_, msg, summed.data());
      if (h.kind == kDone) {
        ++done;
        continue;
      }
      const int64_t stale = std::max<int64_t>(0, version - h.version);
      stats_.max_staleness = std::max(stats_.max_staleness, stale);
      staleness_sum += stale;
      for (size_t v = 0; v < variables_.size(); ++v) {
        if (owner_[v] != server_index_) continue;
        for (uint64_t k = variables_[v].begin; k < variables_[v].end; ++k) summed[k] *= workers;
      }
      VGPU_RETURN_IF_ERROR(Apply(summed, ++version));
      VGPU_RETURN_IF_ERROR(answer(from, kParams));
    }
    stats_.mean_staleness =
        stats_.updates > 0 ? static_cast<double>(staleness_sum) / stats_.updates : 0.0;
  }
  // The final values to every worker, then the whole model from the chief.
  for (int w = 0; w < workers; ++w) VGPU_RETURN_IF_ERROR(answer(ps_.worker_ranks[w], kParams));
  VGPU_RETURN_IF_ERROR(
      ps_.world->Broadcast(params_.data(), params_.size() * sizeof(float), ps_.worker_ranks[0]));
  VGPU_RETURN_IF_ERROR(stage_->LoadParams(params_));
  return stage_->Synchronize();
}

absl::StatusOr<StepTotals> ParameterServer::Evaluate(const float* x, const int32_t* y, int n) {
  std::vector<std::unique_ptr<StageChain>> one;
  one.push_back(std::move(stage_));
  absl::StatusOr<StepTotals> t =
      EvaluateRoundRobin(one, options_.model->input_width(), options_.max_slots, x, y, n);
  stage_ = std::move(one.front());
  return t;
}

std::string ParameterServer::PlacementReport() const {
  std::string out =
      absl::StrCat("parameter-server: ps task ", server_index_, " of ", ps_.ps_ranks.size(), " on ",
                   device_->name(), ", ", ps_.async ? "asynchronous" : "synchronous", ", serving ",
                   ps_.worker_ranks.size(), " worker(s)\n");
  for (size_t v = 0; v < variables_.size(); ++v) {
    if (owner_[v] != server_index_) continue;
    absl::StrAppend(&out, "  ", variables_[v].name, " (", variables_[v].end - variables_[v].begin,
                    " floats)\n");
  }
  return out;
}

}  // namespace strategies
}  // namespace vgpu
