#include "vgpu/runtime/cuda/cuda_nccl.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "vgpu/runtime/mutex.h"
#include "vgpu/runtime/cuda/call_log.h"
#include "vgpu/runtime/cuda/cuda_executor.h"
#include "vgpu/runtime/cuda/dynamic_library.h"
#include "vgpu/runtime/status.h"

namespace vgpu::cuda {
namespace {

// The oldest NCCL whose API we use: ncclAvg (2.10) and ncclGetLastError (2.13), as
// NCCL_VERSION encodes it.
constexpr int kMinNcclVersion = 21300;

struct NcclApi {
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommInitAll) comm_init_all = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclGetErrorString) get_error_string = nullptr;
  decltype(&ncclGetLastError) get_last_error = nullptr;  // optional: null when absent
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclReduceScatter) reduce_scatter = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
  std::string library;
  int version = 0;
};

// "2.28.9" from an NCCL_VERSION_CODE (X*10000+Y*100+Z since 2.9, X*1000+Y*100+Z before).
std::string NcclVersionText(int code) {
  if (code >= 10000) return absl::StrCat(code / 10000, ".", code / 100 % 100, ".", code % 100);
  return absl::StrCat(code / 1000, ".", code / 100 % 10, ".", code % 100);
}

// Loaded once per process on first use; the library stays loaded.
absl::StatusOr<const NcclApi*> LoadNccl() {
  static absl::StatusOr<const NcclApi*>* api = [] {
    std::string name = LibraryNames(kNcclLibraryEnv, {"libnccl.so.2"}).front();
    auto fail = [&](absl::string_view why) {
      return new absl::StatusOr<const NcclApi*>(absl::FailedPreconditionError(
          absl::StrCat("NCCL could not be loaded (set ", kNcclLibraryEnv, "): ", why)));
    };
    absl::StatusOr<void*> h = OpenLibrary(name);
    if (!h.ok()) return fail(h.status().message());
    auto* a = new NcclApi();
    a->library = name;
    SymbolLoader sym(*h);
    sym(a->get_version, "ncclGetVersion");
    sym(a->get_unique_id, "ncclGetUniqueId");
    sym(a->comm_init_rank, "ncclCommInitRank");
    sym(a->comm_init_all, "ncclCommInitAll");
    sym(a->comm_destroy, "ncclCommDestroy");
    sym(a->get_error_string, "ncclGetErrorString");
    sym(a->all_reduce, "ncclAllReduce");
    sym(a->reduce_scatter, "ncclReduceScatter");
    sym(a->all_gather, "ncclAllGather");
    sym(a->broadcast, "ncclBroadcast");
    sym(a->group_start, "ncclGroupStart");
    sym(a->group_end, "ncclGroupEnd");
    if (!sym.missing().empty()) {
      delete a;
      return fail(absl::StrCat(name, " lacks ", absl::StrJoin(sym.missing(), " ")));
    }
    LoadSymbol(*h, "ncclGetLastError", a->get_last_error);
    // VGPU_CUDA_CALL_LOG: log every call the platform makes through this table.
    const call_log::ResultNamer<ncclResult_t> namer{
        &NcclResultName, [](ncclResult_t r) { return r == ncclSuccess; }};
#define VGPU_NCCL_WRAP(field, symbol)                        \
  {                                                          \
    struct Tag;                                              \
    a->field = call_log::Wrap<Tag>(symbol, a->field, namer); \
  }
    VGPU_NCCL_WRAP(get_version, "ncclGetVersion")
    VGPU_NCCL_WRAP(get_unique_id, "ncclGetUniqueId")
    VGPU_NCCL_WRAP(comm_init_rank, "ncclCommInitRank")
    VGPU_NCCL_WRAP(comm_init_all, "ncclCommInitAll")
    VGPU_NCCL_WRAP(comm_destroy, "ncclCommDestroy")
    VGPU_NCCL_WRAP(all_reduce, "ncclAllReduce")
    VGPU_NCCL_WRAP(reduce_scatter, "ncclReduceScatter")
    VGPU_NCCL_WRAP(all_gather, "ncclAllGather")
    VGPU_NCCL_WRAP(broadcast, "ncclBroadcast")
    VGPU_NCCL_WRAP(group_start, "ncclGroupStart")
    VGPU_NCCL_WRAP(group_end, "ncclGroupEnd")
#undef VGPU_NCCL_WRAP
    {
      // These return strings, not ncclResult_t: no namer.
      struct ErrorStringTag;
      a->get_error_string =
          call_log::Wrap<ErrorStringTag>("ncclGetErrorString", a->get_error_string);
      struct LastErrorTag;
      a->get_last_error = call_log::Wrap<LastErrorTag>("ncclGetLastError", a->get_last_error);
    }
    ncclResult_t r = a->get_version(&a->version);
    if (r != ncclSuccess) {
      delete a;
      return fail(absl::StrCat(name, ": ncclGetVersion returned ", NcclResultName(r)));
    }
    if (a->version < kMinNcclVersion) {
      std::string found = NcclVersionText(a->version);
      delete a;
      return fail(absl::StrCat("NCCL ", found, " found at ", name,
                               "; vgpu needs >= ", NcclVersionText(kMinNcclVersion)));
    }
    return new absl::StatusOr<const NcclApi*>(a);
  }();
  return *api;
}

// ToStatus for NCCL calls, with ncclGetLastError's text when it has one: NCCL puts the
// reason for ncclInvalidUsage and friends there (e.g. "Duplicate GPU detected : rank 1 and
// rank 0 both on CUDA device 0"), not in the result code.
absl::Status NcclStatus(const NcclApi* api, ncclResult_t result, absl::string_view context) {
  absl::Status status = ToStatus(result, context);
  if (status.ok() || api->get_last_error == nullptr) return status;
  const char* text = api->get_last_error(nullptr);
  if (text == nullptr || *text == '\0') return status;
  return absl::Status(status.code(), absl::StrCat(status.message(), ": ", text));
}

class CudaNcclCommunicator : public NcclCommunicator {
 public:
  // `nranks`: the communicator's ranks (comms.size() for ncclCommInitAll; more when these
  // are this process's ranks of a communicator across processes).
  CudaNcclCommunicator(const NcclApi* api, std::vector<CudaExecutor*> executors,
                       std::vector<ncclComm_t> comms, int nranks)
      : api_(api), executors_(std::move(executors)), comms_(std::move(comms)), nranks_(nranks) {}
  ~CudaNcclCommunicator() override {
    for (ncclComm_t c : comms_) api_->comm_destroy(c);
  }

  int size() const override { return nranks_; }

  absl::Status AllReduce(absl::Span<const AllReduceBuffer> buffers, uint64_t count,
                         AllReduceOp op) override ABSL_LOCKS_EXCLUDED(mu_) {
    if (buffers.size() != comms_.size()) {
      return absl::InvalidArgumentError(absl::StrCat("NCCL AllReduce: ", buffers.size(),
                                                     " buffers for ", comms_.size(), " ranks"));
    }
    std::vector<CudaStream*> streams;
    for (size_t i = 0; i < buffers.size(); ++i) {
      CudaStream* s = AsCudaStream(buffers[i].stream);
      if (s == nullptr || s->cuda_executor() != executors_[i]) {
        return absl::InvalidArgumentError(absl::StrCat("NCCL AllReduce: the stream of rank ", i,
                                                       " does not belong to ",
                                                       executors_[i]->label()));
      }
      if (buffers[i].data == nullptr && count > 0) {
        return absl::InvalidArgumentError(absl::StrCat("NCCL AllReduce: null buffer for rank ", i));
      }
      VGPU_RETURN_IF_ERROR(s->Begin());
      streams.push_back(s);
    }
    if (count == 0) return absl::OkStatus();
    vgpu::MutexLock l(&mu_);
    return EnqueueGroupLocked(buffers, streams, count, op);
  }

 private:
  // One ncclGroupStart/End group at a time: groups of two threads on the same communicators
  // must not interleave.
  absl::Status EnqueueGroupLocked(absl::Span<const AllReduceBuffer> buffers,
                                  const std::vector<CudaStream*>& streams, uint64_t count,
                                  AllReduceOp op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    VGPU_RETURN_IF_ERROR(ToStatus(api_->group_start(), "ncclGroupStart"));
    absl::Status status;
    for (size_t i = 0; i < buffers.size() && status.ok(); ++i) {
      status = ToStatus(api_->all_reduce(buffers[i].data, buffers[i].data, count, ncclFloat32,
                                         op == AllReduceOp::kMean ? ncclAvg : ncclSum, comms_[i],
                                         streams[i]->handle()),
                        absl::StrCat("ncclAllReduce of ", count, " floats on rank ", i));
    }
    // Always close the group, even after a failed enqueue.
    absl::Status end = ToStatus(api_->group_end(), "ncclGroupEnd");
    return status.ok() ? end : status;
  }

  const NcclApi* api_;
  std::vector<CudaExecutor*> executors_;
  std::vector<ncclComm_t> comms_;
  int nranks_;
  vgpu::Mutex mu_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCommunicator>> CreateNcclCommunicator(
    absl::Span<Executor* const> executors) {
  std::vector<CudaExecutor*> cuda_executors;
  std::vector<int> devices;
  for (Executor* e : executors) {
    auto* c = dynamic_cast<CudaExecutor*>(e);
    if (c == nullptr) return absl::InvalidArgumentError("NCCL: not a cuda executor");
    cuda_executors.push_back(c);
    devices.push_back(static_cast<int>(c->device()));
  }
  VGPU_ASSIGN_OR_RETURN(const NcclApi* api, LoadNccl());
  std::vector<ncclComm_t> comms(executors.size(), nullptr);
  VGPU_RETURN_IF_ERROR(NcclStatus(
      api, api->comm_init_all(comms.data(), static_cast<int>(comms.size()), devices.data()),
      absl::StrCat("ncclCommInitAll over CUDA device(s) ", absl::StrJoin(devices, ","), " (",
                   api->library, ", NCCL ", NcclVersionText(api->version), ")")));
  return std::unique_ptr<NcclCommunicator>(std::make_unique<CudaNcclCommunicator>(
      api, std::move(cuda_executors), std::move(comms), static_cast<int>(executors.size())));
}

absl::StatusOr<std::vector<uint8_t>> NcclUniqueId() {
  VGPU_ASSIGN_OR_RETURN(const NcclApi* api, LoadNccl());
  ncclUniqueId id;
  VGPU_RETURN_IF_ERROR(NcclStatus(api, api->get_unique_id(&id), "ncclGetUniqueId"));
  const auto* bytes = reinterpret_cast<const uint8_t*>(id.internal);
  return std::vector<uint8_t>(bytes, bytes + sizeof(id.internal));
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> CreateNcclRankCommunicator(
    Executor* executor, int rank, int nranks, absl::Span<const uint8_t> id) {
  auto* c = dynamic_cast<CudaExecutor*>(executor);
  if (c == nullptr) return absl::InvalidArgumentError("NCCL: not a cuda executor");
  ncclUniqueId nccl_id;
  if (id.size() != sizeof(nccl_id.internal)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NCCL unique id of ", id.size(), " bytes; NCCL's has ", sizeof(nccl_id.internal)));
  }
  std::memcpy(nccl_id.internal, id.data(), id.size());
  VGPU_ASSIGN_OR_RETURN(const NcclApi* api, LoadNccl());
  const std::string what =
      absl::StrCat("ncclCommInitRank of rank ", rank, " of ", nranks, " on CUDA device ",
                   static_cast<int>(c->device()), " (", api->library, ", NCCL ",
                   NcclVersionText(api->version), ")");
  ncclComm_t comm = nullptr;
  absl::Status status;
  {
    // NCCL takes the rank's device from the current context.
    VGPU_CUDA_SCOPE(c->driver(), c->context());
    status = NcclStatus(api, api->comm_init_rank(&comm, nranks, nccl_id, rank), what);
  }
  if (!status.ok()) {
    if (comm != nullptr) api->comm_destroy(comm);
    if (absl::StrContains(status.message(), "Duplicate GPU detected")) {
      return absl::FailedPreconditionError(
          absl::StrCat(status.message(),
                       "; NCCL refuses two ranks on one GPU: give each "
                       "process its own card, or use communicator \"mpi\""));
    }
    return status;
  }
  return std::unique_ptr<NcclCommunicator>(std::make_unique<CudaNcclCommunicator>(
      api, std::vector<CudaExecutor*>{c}, std::vector<ncclComm_t>{comm}, nranks));
}

}  // namespace vgpu::cuda
