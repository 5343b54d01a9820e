// The CUDA simulator's NCCL (libvgpu_cudasim_nccl.so, standing in for libnccl.so.2), with
// NCCL 2.28's semantics for one process: communicators over the simulated devices, group
// calls, and collectives that run as stream work. Tests-only (tests/cudasim.cmake builds it).
//
// What it does, and what it enforces (see docs/cuda.md):
// - ncclCommInitRank blocks until all nranks ranks of its unique id have arrived (from other
//   threads, or from one thread inside ncclGroupStart/End, where the wait happens at the
//   outermost ncclGroupEnd), as NCCL's bootstrap does. The rank's device is the one whose
//   context is current (device 0 when none is, as cudaGetDevice would say). Two ranks on one
//   device fail every rank with ncclInvalidUsage, and ncclGetLastError says
//   "Duplicate GPU detected : rank X and rank Y both on CUDA device Z" (Z: PCI bus id as
//   NCCL prints it), as 2.28 does. ncclCommInitAll is ncclGetUniqueId plus grouped
//   ncclCommInitRank, as in NCCL; a repeated device in its devlist is ncclInvalidUsage with
//   no message, as in NCCL.
// - Each rank takes kRankBaseBytes + kBuffSize x 2 (send, recv) x kChannels x peers of its
//   device's memory at init (NCCL_BUFFSIZE 4 MiB, 2 channels, 8 MiB of fixed state: with 2
//   ranks, 24 MiB a rank), released by ncclCommDestroy/Abort.
// - Collectives are checked at the call (ncclInvalidArgument for bad arguments, as NCCL's
//   argcheck; ncclUnhandledCudaError for a stream of another device) and enqueued on the
//   rank's stream (cudasim::Enqueue, in the stream's context, as NCCL switches devices
//   itself) with their memory ranges. The reduction happens when every rank's operation
//   has reached the head of its stream: the rank's stream threads meet at a barrier, so each
//   rank contributes what its stream had produced by then (a missing wait upstream gives a
//   wrong result or a race report). Ranks must issue collectives in the same order with the
//   same arguments; a mismatch is ncclInvalidUsage (on NCCL: a hang or garbage).
// - A blocking collective outside a group, issued from one thread for a second rank of the
//   same collective, deadlocks on a real NCCL; here it is ncclInvalidUsage, and the ranks
//   already enqueued skip the operation.
// - A barrier or an init rendezvous still incomplete after VGPU_CUDASIM_NCCL_TIMEOUT_S
//   (default 60) seconds is reported on stderr and fails (CUDA_ERROR_LAUNCH_TIMEOUT on the
//   stream; ncclSystemError for init) instead of hanging CI.
// - Every entry point called from a cuLaunchHostFunc callback returns ncclInvalidUsage.
// - Types: int8, uint8, int32, uint32, int64, uint64, float32, float64 (half and bfloat16
//   are ncclInvalidArgument here: vgpu does not use them).
//
// Thread safety: every entry point may be called from any thread; state is under one mutex.
#include <cuda.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "vgpu/tests/cudasim/cudasim.h"

namespace vgpu::cudasim {
namespace {

constexpr uint64_t kBuffSize = uint64_t{4} << 20;  // NCCL_BUFFSIZE default
constexpr uint64_t kChannels = 2;
constexpr uint64_t kRankBaseBytes = uint64_t{8} << 20;
constexpr char kIdMagic[] = "vgpu-cudasim-nccl";

enum class Kind { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce };

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kAllReduce:
      return "ncclAllReduce";
    case Kind::kReduceScatter:
      return "ncclReduceScatter";
    case Kind::kAllGather:
      return "ncclAllGather";
    case Kind::kBroadcast:
      return "ncclBroadcast";
    case Kind::kReduce:
      return "ncclReduce";
  }
  return "?";
}

size_t TypeSize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;  // not simulated
  }
}

struct Clique;

struct Comm {
  Clique* clique = nullptr;
  int rank = 0;
  int nranks = 0;
  int device = 0;
  bool destroyed = false;
  bool init_done = false;
  ncclResult_t init_result = ncclSuccess;
  uint64_t charged = 0;
  uint64_t next_seq = 0;  // collectives enqueued so far
};

// One collective across the ranks of a clique: the k-th collective of every rank.
struct Instance {
  Clique* clique = nullptr;
  uint64_t seq = 0;
  Kind kind;
  size_t count = 0;
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  int root = 0;
  int nranks = 0;
  std::vector<bool> enqueued;                // by rank, on the host
  std::vector<std::thread::id> enqueued_by;  // by rank, for the ungrouped-deadlock check
  std::vector<bool> ungrouped;               // by rank
  // What each rank's stream held when it reached the collective (its send buffer), and
  // whether it got there yet.
  std::vector<std::vector<uint8_t>> inputs;
  std::vector<bool> arrived_by;
  int arrived = 0;
  int left = 0;  // ranks whose output step has not yet run
  bool aborted = false;
  bool timed_out = false;
};

struct Clique {
  uint64_t key = 0;
  int nranks = 0;
  std::vector<Comm*> ranks;  // by rank, null until it arrives
  int arrived = 0;
  bool complete = false;  // every rank arrived and init was decided
  std::map<uint64_t, std::shared_ptr<Instance>> instances;  // by seq, until all returned
};

struct State {
  std::mutex mu;
  std::condition_variable cv;
  std::set<Comm*> comms;  // every comm ever made (destroyed ones stay, flagged)
  std::map<uint64_t, Clique*> cliques;
  uint64_t next_id = 1;
  std::string last_error;
};

State& S() {
  static State* s = new State();
  return *s;
}

std::chrono::seconds Timeout() {
  static const int seconds = [] {
    const char* e = std::getenv("VGPU_CUDASIM_NCCL_TIMEOUT_S");
    int v = e != nullptr ? std::atoi(e) : 0;
    return v > 0 ? v : 60;
  }();
  return std::chrono::seconds(seconds);
}

// NCCL's WARN: the text becomes ncclGetLastError's. Caller holds S().mu.
void Warn(const std::string& text) {
  S().last_error = text;
  Trace("nccl: " + text);
}

struct GroupState {
  int depth = 0;
  ncclResult_t error = ncclSuccess;
  std::vector<Comm*> inits;  // comms whose init waits at the outermost ncclGroupEnd
  struct Op {
    Comm* comm;
    Kind kind;
    const void* send;
    void* recv;
    size_t count;
    ncclDataType_t type;
    ncclRedOp_t op;
    int root;
    CUstream stream;
  };
  std::vector<Op> ops;
};

thread_local GroupState g_group;

// The device's PCI bus id as NCCL's busIdToInt64 reads "0000:01:00.0": its hex digits.
std::string BusIdText(int device) {
  using GetBusId = CUresult (*)(char*, int, CUdevice);
  static GetBusId get = DriverFunction<GetBusId>("cuDeviceGetPCIBusId", 4010);
  char text[64] = {};
  if (get == nullptr || get(text, sizeof(text), device) != CUDA_SUCCESS) {
    return std::to_string(device);
  }
  std::string hex;
  for (const char* p = text; *p != '\0'; ++p) {
    if (*p == '.' || *p == ':') continue;
    if (!std::isxdigit(static_cast<unsigned char>(*p))) break;
    hex += *p;
  }
  char out[32];
  std::snprintf(out, sizeof(out), "%llx", std::strtoull(hex.c_str(), nullptr, 16));
  return out;
}

bool IsLive(Comm* c) { return c != nullptr && S().comms.count(c) != 0 && !c->destroyed; }

// NCCL's CommCheck + ncclCommEnsureReady. Caller holds S().mu.
ncclResult_t CheckComm(Comm* c, const char* what) {
  if (c == nullptr) {
    Warn(std::string(what) + " : comm argument is NULL");
    return ncclInvalidArgument;
  }
  if (!IsLive(c)) {
    Warn(std::string(what) + " : comm has already been destroyed");
    return ncclInvalidArgument;
  }
  if (!c->init_done || c->init_result != ncclSuccess) {
    Warn("Attempt to use communicator before the previous operation returned ncclSuccess");
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

// Decides a complete clique's init: the duplicate-GPU check, then each rank's buffers.
// Caller holds S().mu.
void FinishInit(Clique* q) {
  ncclResult_t result = ncclSuccess;
  for (int r = q->nranks - 1; r >= 0 && result == ncclSuccess; --r) {
    for (int i = 0; i < q->nranks; ++i) {
      if (i != r && q->ranks[i]->device == q->ranks[r]->device) {
        Warn("Duplicate GPU detected : rank " + std::to_string(r) + " and rank " +
             std::to_string(i) + " both on CUDA device " + BusIdText(q->ranks[r]->device));
        result = ncclInvalidUsage;
        break;
      }
    }
  }
  const uint64_t bytes = kRankBaseBytes + kBuffSize * 2 * kChannels * (q->nranks - 1);
  for (int r = 0; r < q->nranks && result == ncclSuccess; ++r) {
    Comm* c = q->ranks[r];
    if (ChargeDeviceMemory(c->device, bytes, "NCCL buffers") != CUDA_SUCCESS) {
      Warn("Cuda failure 2 'out of memory' (NCCL buffers of rank " + std::to_string(r) +
           " on device " + std::to_string(c->device) + ")");
      result = ncclUnhandledCudaError;
      for (int j = 0; j < r; ++j) {
        ReleaseDeviceMemory(q->ranks[j]->device, q->ranks[j]->charged);
        q->ranks[j]->charged = 0;
      }
      break;
    }
    c->charged = bytes;
  }
  for (Comm* c : q->ranks) {
    c->init_done = true;
    c->init_result = result;
  }
  q->complete = true;
  S().cv.notify_all();
}

// Waits (with S().mu held through `lock`) until `c`'s clique is complete.
ncclResult_t WaitInit(std::unique_lock<std::mutex>& lock, Comm* c) {
  if (!S().cv.wait_for(lock, Timeout(), [c] { return c->init_done; })) {
    Warn("ncclCommInitRank: rank " + std::to_string(c->rank) + " of " + std::to_string(c->nranks) +
         " timed out waiting for the other ranks (" + std::to_string(c->clique->arrived) +
         " arrived)");
    std::fprintf(stderr, "cudasim NCCL: %s\n", S().last_error.c_str());
    return ncclSystemError;
  }
  return c->init_result;
}

// Registers rank `rank` of unique id `key` on `device`; *out gets the comm at once.
ncclResult_t JoinClique(ncclComm_t* out, int nranks, uint64_t key, int rank, int device,
                        Comm** joined) {
  State& s = S();
  auto it = s.cliques.find(key);
  Clique* q;
  if (it == s.cliques.end()) {
    q = new Clique();
    q->key = key;
    q->nranks = nranks;
    q->ranks.assign(nranks, nullptr);
    s.cliques[key] = q;
  } else {
    q = it->second;
  }
  if (q->nranks != nranks) {
    Warn("ncclCommInitRank: rank " + std::to_string(rank) +
         " says nranks=" + std::to_string(nranks) + " but the unique id's communicator has " +
         std::to_string(q->nranks));
    return ncclInvalidArgument;
  }
  if (q->complete || q->ranks[rank] != nullptr) {
    Warn("ncclCommInitRank: rank " + std::to_string(rank) + " joined the same unique id twice");
    return ncclInvalidUsage;
  }
  auto* c = new Comm();
  c->clique = q;
  c->rank = rank;
  c->nranks = nranks;
  c->device = device;
  s.comms.insert(c);
  q->ranks[rank] = c;
  ++q->arrived;
  *out = reinterpret_cast<ncclComm_t>(c);
  *joined = c;
  if (q->arrived == q->nranks) FinishInit(q);
  return ncclSuccess;
}

uint64_t KeyOf(const ncclUniqueId& id, bool* ok) {
  *ok = std::memcmp(id.internal, kIdMagic, sizeof(kIdMagic)) == 0;
  uint64_t key = 0;
  std::memcpy(&key, id.internal + sizeof(kIdMagic), sizeof(key));
  return key;
}

// Gives up a collective that can never complete: ranks waiting at its barrier skip it, and
// every rank's next collective is the one after it, so the clique stays in step. Caller
// holds S().mu.
void AbortInstance(const std::shared_ptr<Instance>& inst) {
  inst->aborted = true;
  Clique* q = inst->clique;
  auto it = q->instances.find(inst->seq);
  if (it != q->instances.end() && it->second == inst) q->instances.erase(it);
  for (Comm* c : q->ranks) c->next_seq = std::max(c->next_seq, inst->seq + 1);
  S().cv.notify_all();
}

// Releases what a comm holds and wakes any barrier it would never reach. Caller holds mu.
void DestroyLocked(Comm* c) {
  c->destroyed = true;
  if (c->charged != 0) ReleaseDeviceMemory(c->device, c->charged);
  c->charged = 0;
  std::vector<std::shared_ptr<Instance>> pending;
  for (auto& [seq, inst] : c->clique->instances) pending.push_back(inst);
  for (const auto& inst : pending) {
    Trace("nccl: collective aborted: a rank's communicator was destroyed");
    AbortInstance(inst);
  }
}

template <typename T>
T Combine(T a, T b, ncclRedOp_t op) {
  switch (op) {
    case ncclProd:
      return a * b;
    case ncclMax:
      return std::max(a, b);
    case ncclMin:
      return std::min(a, b);
    default:  // sum, and avg before its division
      return a + b;
  }
}

// out[i] = reduce over ranks of in[r][offset + i], i < count.
template <typename T>
void ReduceTyped(const std::vector<const uint8_t*>& in, size_t offset, size_t count, ncclRedOp_t op,
                 T* out) {
  const int n = static_cast<int>(in.size());
  for (size_t i = 0; i < count; ++i) {
    T acc = reinterpret_cast<const T*>(in[0])[offset + i];
    for (int r = 1; r < n; ++r)
      acc = Combine(acc, reinterpret_cast<const T*>(in[r])[offset + i], op);
    if (op == ncclAvg) acc = static_cast<T>(acc / static_cast<T>(n));
    out[i] = acc;
  }
}

void Reduce(ncclDataType_t type, const std::vector<const uint8_t*>& in, size_t offset, size_t count,
            ncclRedOp_t op, void* out) {
  switch (type) {
    case ncclInt8:
      return ReduceTyped(in, offset, count, op, static_cast<int8_t*>(out));
    case ncclUint8:
      return ReduceTyped(in, offset, count, op, static_cast<uint8_t*>(out));
    case ncclInt32:
      return ReduceTyped(in, offset, count, op, static_cast<int32_t*>(out));
    case ncclUint32:
      return ReduceTyped(in, offset, count, op, static_cast<uint32_t*>(out));
    case ncclInt64:
      return ReduceTyped(in, offset, count, op, static_cast<int64_t*>(out));
    case ncclUint64:
      return ReduceTyped(in, offset, count, op, static_cast<uint64_t*>(out));
    case ncclFloat32:
      return ReduceTyped(in, offset, count, op, static_cast<float*>(out));
    case ncclFloat64:
      return ReduceTyped(in, offset, count, op, static_cast<double*>(out));
    default:
      return;
  }
}

// Writes rank `rank`'s output from every rank's input (all have arrived).
void ComputeFor(const Instance& in, int rank, uint8_t* out) {
  const size_t bytes = in.count * TypeSize(in.type);
  std::vector<const uint8_t*> inputs;
  for (const std::vector<uint8_t>& v : in.inputs) inputs.push_back(v.data());
  switch (in.kind) {
    case Kind::kAllReduce:
      Reduce(in.type, inputs, 0, in.count, in.op, out);
      break;
    case Kind::kReduce:
      if (rank == in.root) Reduce(in.type, inputs, 0, in.count, in.op, out);
      break;
    case Kind::kReduceScatter:
      Reduce(in.type, inputs, rank * in.count, in.count, in.op, out);
      break;
    case Kind::kAllGather:
      for (int r = 0; r < in.nranks; ++r) std::memcpy(out + r * bytes, inputs[r], bytes);
      break;
    case Kind::kBroadcast:
      std::memcpy(out, inputs[in.root], bytes);
      break;
  }
}

// Byte sizes of a rank's send and recv buffers, and whether each is touched.
void BufferBytes(Kind kind, size_t count, size_t es, int nranks, int rank, int root, uint64_t* send,
                 uint64_t* recv) {
  const uint64_t one = count * es;
  switch (kind) {
    case Kind::kAllReduce:
      *send = one;
      *recv = one;
      return;
    case Kind::kReduceScatter:
      *send = one * nranks;
      *recv = one;
      return;
    case Kind::kAllGather:
      *send = one;
      *recv = one * nranks;
      return;
    case Kind::kBroadcast:
      *send = rank == root ? one : 0;
      *recv = one;
      return;
    case Kind::kReduce:
      *send = one;
      *recv = rank == root ? one : 0;
      return;
  }
}

// A rank's part of a collective is three steps on its stream, so that no work body blocks
// (the driver runs work bodies one at a time): (1) work that takes the rank's input as its
// stream has it now; (2) a host function, which may block, waiting until every rank took its
// input; (3) work that writes the rank's output from all the inputs. Inputs are copies, so
// in-place collectives read them intact.
Work ArriveWork(std::shared_ptr<Instance> inst, int rank, const void* send, uint64_t send_bytes) {
  return [inst, rank, send, send_bytes](const WorkContext& ctx) -> CUresult {
    std::vector<uint8_t> input;
    if (send_bytes != 0) {
      const auto* p = static_cast<const uint8_t*>(ctx.host(reinterpret_cast<CUdeviceptr>(send)));
      input.assign(p, p + send_bytes);
    }
    std::lock_guard<std::mutex> l(S().mu);
    inst->inputs[rank] = std::move(input);
    inst->arrived_by[rank] = true;
    ++inst->arrived;
    S().cv.notify_all();
    return CUDA_SUCCESS;
  };
}

struct BarrierArgs {
  std::shared_ptr<Instance> inst;
  int rank;
};

void CUDA_CB Barrier(void* data) {
  std::unique_ptr<BarrierArgs> args(static_cast<BarrierArgs*>(data));
  Instance* inst = args->inst.get();
  std::unique_lock<std::mutex> lock(S().mu);
  if (S().cv.wait_for(lock, Timeout(),
                      [&] { return inst->arrived == inst->nranks || inst->aborted; })) {
    return;
  }
  std::string missing;
  for (int i = 0; i < inst->nranks; ++i) {
    if (!inst->arrived_by[i]) missing += " " + std::to_string(i);
  }
  std::fprintf(stderr,
               "cudasim NCCL: %s rank %d waited %llds for ranks%s to reach the collective on "
               "their streams (a hang on a real GPU)\n",
               KindName(inst->kind), args->rank, static_cast<long long>(Timeout().count()),
               missing.c_str());
  inst->timed_out = true;
  AbortInstance(args->inst);
}

Work OutputWork(std::shared_ptr<Instance> inst, int rank, void* recv, uint64_t recv_bytes) {
  return [inst, rank, recv, recv_bytes](const WorkContext& ctx) -> CUresult {
    uint8_t* out = recv_bytes != 0
                       ? static_cast<uint8_t*>(ctx.host(reinterpret_cast<CUdeviceptr>(recv)))
                       : nullptr;
    std::lock_guard<std::mutex> l(S().mu);
    CUresult result = CUDA_SUCCESS;
    if (inst->aborted) {
      Trace(std::string("nccl: ") + KindName(inst->kind) + " rank " + std::to_string(rank) +
            " skipped (collective aborted)");
      if (inst->timed_out) result = CUDA_ERROR_LAUNCH_TIMEOUT;
    } else if (out != nullptr) {
      ComputeFor(*inst, rank, out);
    }
    if (--inst->left == 0) {
      auto it = inst->clique->instances.find(inst->seq);
      if (it != inst->clique->instances.end() && it->second == inst) {
        inst->clique->instances.erase(it);
      }
    }
    return result;
  };
}

// Enqueues with the stream's context current, as NCCL switches to the comm's device itself.
template <typename F>
CUresult InStreamContext(CUstream stream, int device, F enqueue) {
  using GetCtx = CUresult (*)(CUstream, CUcontext*);
  using Push = CUresult (*)(CUcontext);
  using Pop = CUresult (*)(CUcontext*);
  using Retain = CUresult (*)(CUcontext*, CUdevice);
  using Release = CUresult (*)(CUdevice);
  static GetCtx get_ctx = DriverFunction<GetCtx>("cuStreamGetCtx", 9020);
  static Push push = DriverFunction<Push>("cuCtxPushCurrent", 4000);
  static Pop pop = DriverFunction<Pop>("cuCtxPopCurrent", 4000);
  static Retain retain = DriverFunction<Retain>("cuDevicePrimaryCtxRetain", 7000);
  static Release release = DriverFunction<Release>("cuDevicePrimaryCtxRelease", 11000);
  int current = -1;
  if (CurrentDevice(&current) == CUDA_SUCCESS && current == device) return enqueue();
  if (push == nullptr || pop == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  CUcontext ctx = nullptr;
  bool retained = false;
  const bool special =
      stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD;
  if (special || get_ctx == nullptr || get_ctx(stream, &ctx) != CUDA_SUCCESS || ctx == nullptr) {
    if (retain == nullptr || retain(&ctx, device) != CUDA_SUCCESS)
      return CUDA_ERROR_INVALID_CONTEXT;
    retained = true;
  }
  CUresult r = push(ctx);
  if (r == CUDA_SUCCESS) {
    r = enqueue();
    CUcontext popped = nullptr;
    pop(&popped);
  }
  if (retained && release != nullptr) release(device);
  return r;
}

// Argument checks at the call, as NCCL's ArgsCheck. Caller holds S().mu.
ncclResult_t CheckArgs(Comm* c, Kind kind, const void* send, void* recv, size_t count,
                       ncclDataType_t type, ncclRedOp_t op, int root) {
  const char* what = KindName(kind);
  if (ncclResult_t r = CheckComm(c, what); r != ncclSuccess) return r;
  if (type < 0 || type >= ncclNumTypes) {
    Warn(std::string(what) + " : invalid type " + std::to_string(type));
    return ncclInvalidArgument;
  }
  if (TypeSize(type) == 0) {
    Warn(std::string(what) + " : type " + std::to_string(type) + " is not simulated");
    return ncclInvalidArgument;
  }
  const bool reduces =
      kind == Kind::kAllReduce || kind == Kind::kReduceScatter || kind == Kind::kReduce;
  if (reduces && (op < 0 || op >= ncclNumOps)) {
    Warn(std::string(what) + " : invalid reduction operation " + std::to_string(op));
    return ncclInvalidArgument;
  }
  if ((kind == Kind::kBroadcast || kind == Kind::kReduce) && (root < 0 || root >= c->nranks)) {
    Warn(std::string(what) + " : invalid root " + std::to_string(root) +
         " (root should be in "
         "the 0.." +
         std::to_string(c->nranks) + " range)");
    return ncclInvalidArgument;
  }
  if (count > 0) {
    uint64_t sb = 0, rb = 0;
    BufferBytes(kind, count, TypeSize(type), c->nranks, c->rank, root, &sb, &rb);
    if (sb != 0 && send == nullptr) {
      Warn(std::string(what) + " : sendbuff argument is NULL");
      return ncclInvalidArgument;
    }
    if (rb != 0 && recv == nullptr) {
      Warn(std::string(what) + " : recvbuff argument is NULL");
      return ncclInvalidArgument;
    }
  }
  return ncclSuccess;
}

// Enqueues one rank's part of its comm's next collective.
ncclResult_t EnqueueOp(const GroupState::Op& o, bool grouped) {
  const char* what = KindName(o.kind);
  int stream_device = -1;
  if (StreamDevice(o.stream, &stream_device) != CUDA_SUCCESS && o.stream != nullptr) {
    std::lock_guard<std::mutex> l(S().mu);
    Warn(std::string(what) + ": Cuda failure 400 'invalid resource handle' (stream)");
    return ncclUnhandledCudaError;
  }
  std::shared_ptr<Instance> inst;
  uint64_t send_bytes = 0, recv_bytes = 0;
  {
    std::lock_guard<std::mutex> l(S().mu);
    Comm* c = o.comm;
    if (ncclResult_t r = CheckComm(c, what); r != ncclSuccess) return r;
    if (o.stream != nullptr && stream_device != c->device) {
      Warn(std::string(what) + ": rank " + std::to_string(c->rank) + " is on device " +
           std::to_string(c->device) + " but its stream is device " +
           std::to_string(stream_device) + "'s: Cuda failure 400 'invalid resource handle'");
      return ncclUnhandledCudaError;
    }
    Clique* q = c->clique;
    const uint64_t seq = c->next_seq;
    auto it = q->instances.find(seq);
    if (it == q->instances.end()) {
      inst = std::make_shared<Instance>();
      inst->clique = q;
      inst->seq = seq;
      inst->kind = o.kind;
      inst->count = o.count;
      inst->type = o.type;
      inst->op = o.op;
      inst->root = o.root;
      inst->nranks = c->nranks;
      inst->enqueued.assign(c->nranks, false);
      inst->enqueued_by.assign(c->nranks, std::thread::id());
      inst->ungrouped.assign(c->nranks, false);
      inst->inputs.assign(c->nranks, {});
      inst->arrived_by.assign(c->nranks, false);
      inst->left = c->nranks;
      q->instances[seq] = inst;
    } else {
      inst = it->second;
      const bool reduces = o.kind != Kind::kAllGather && o.kind != Kind::kBroadcast;
      if (inst->kind != o.kind || inst->count != o.count || inst->type != o.type ||
          (reduces && inst->op != o.op) || inst->root != o.root) {
        Warn(std::string(what) + ": rank " + std::to_string(c->rank) + "'s collective #" +
             std::to_string(seq) + " does not match the other ranks' " + KindName(inst->kind) +
             " (count " + std::to_string(inst->count) + ", type " + std::to_string(inst->type) +
             ", op " + std::to_string(inst->op) + ", root " + std::to_string(inst->root) +
             "): every rank must issue the same collectives in the same order");
        return ncclInvalidUsage;
      }
      if (!grouped) {
        for (int r = 0; r < c->nranks; ++r) {
          if (inst->enqueued[r] && inst->ungrouped[r] &&
              inst->enqueued_by[r] == std::this_thread::get_id()) {
            Warn(std::string(what) + ": rank " + std::to_string(c->rank) + " of collective #" +
                 std::to_string(seq) +
                 " issued outside a group from the thread that already "
                 "issued rank " +
                 std::to_string(r) +
                 "'s: NCCL deadlocks here; issue the "
                 "ranks of one thread inside ncclGroupStart/ncclGroupEnd");
            AbortInstance(inst);
            return ncclInvalidUsage;
          }
        }
      }
    }
    BufferBytes(o.kind, o.count, TypeSize(o.type), c->nranks, c->rank, o.root, &send_bytes,
                &recv_bytes);
    inst->enqueued[c->rank] = true;
    inst->enqueued_by[c->rank] = std::this_thread::get_id();
    inst->ungrouped[c->rank] = !grouped;
    ++c->next_seq;
  }
  using LaunchHostFunc = CUresult (*)(CUstream, CUhostFn, void*);
  static LaunchHostFunc launch_host_func =
      DriverFunction<LaunchHostFunc>("cuLaunchHostFunc", 10000);
  const int rank = o.comm->rank;
  CUresult r = InStreamContext(o.stream, o.comm->device, [&]() -> CUresult {
    std::vector<Access> in;
    if (send_bytes != 0) in.push_back({reinterpret_cast<CUdeviceptr>(o.send), send_bytes, false});
    CUresult e = Enqueue(o.stream, std::move(in), ArriveWork(inst, rank, o.send, send_bytes), what);
    if (e != CUDA_SUCCESS) return e;
    if (launch_host_func == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
    auto* args = new BarrierArgs{inst, rank};
    e = launch_host_func(o.stream, &Barrier, args);
    if (e != CUDA_SUCCESS) {
      delete args;
      return e;
    }
    std::vector<Access> out;
    if (recv_bytes != 0) out.push_back({reinterpret_cast<CUdeviceptr>(o.recv), recv_bytes, true});
    return Enqueue(o.stream, std::move(out), OutputWork(inst, rank, o.recv, recv_bytes), what);
  });
  if (r != CUDA_SUCCESS) {
    std::lock_guard<std::mutex> l(S().mu);
    AbortInstance(inst);  // the other ranks would wait for this one forever
    Warn(std::string(what) + ": Cuda failure " + std::to_string(static_cast<int>(r)) +
         " enqueueing rank " + std::to_string(o.comm->rank));
    return r == CUDA_ERROR_NOT_PERMITTED ? ncclInvalidUsage : ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

ncclResult_t Collective(Kind kind, const void* send, void* recv, size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  if (InHostCallback()) return ncclInvalidUsage;
  auto* c = reinterpret_cast<Comm*>(comm);
  {
    std::lock_guard<std::mutex> l(S().mu);
    if (ncclResult_t r = CheckArgs(c, kind, send, recv, count, type, op, root); r != ncclSuccess) {
      if (g_group.depth > 0) g_group.error = r;
      return r;
    }
  }
  if (count == 0) return ncclSuccess;  // nothing moves; no rank waits for another
  GroupState::Op o{c, kind, send, recv, count, type, op, root, reinterpret_cast<CUstream>(stream)};
  if (g_group.depth > 0) {
    g_group.ops.push_back(o);
    return ncclSuccess;
  }
  return EnqueueOp(o, /*grouped=*/false);
}

// ncclCommInitRank with an explicit device (NCCL's ncclCommInitRankDev).
ncclResult_t InitRankOnDevice(ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank,
                              int device) {
  std::unique_lock<std::mutex> lock(S().mu);
  if (out == nullptr) {
    Warn("CommInitRank : newcomm argument is NULL");
    return ncclInvalidArgument;
  }
  *out = nullptr;
  if (nranks < 1) {
    Warn("invalid device count (" + std::to_string(nranks) + ") requested");
    return ncclInvalidArgument;
  }
  if (rank < 0 || rank >= nranks) {
    Warn("rank " + std::to_string(rank) + " exceeds ndev=" + std::to_string(nranks));
    return ncclInvalidArgument;
  }
  bool ok = false;
  const uint64_t key = KeyOf(id, &ok);
  if (!ok) {
    Warn("ncclCommInitRank: the unique id was not made by ncclGetUniqueId");
    return ncclInvalidArgument;
  }
  Comm* c = nullptr;
  if (ncclResult_t r = JoinClique(out, nranks, key, rank, device, &c); r != ncclSuccess) {
    return r;
  }
  if (g_group.depth > 0) {
    g_group.inits.push_back(c);
    return ncclSuccess;
  }
  return WaitInit(lock, c);
}

ncclResult_t DestroyOrAbort(ncclComm_t comm, bool abort) {
  if (InHostCallback()) return ncclInvalidUsage;
  if (comm == nullptr) return ncclSuccess;
  std::lock_guard<std::mutex> l(S().mu);
  auto* c = reinterpret_cast<Comm*>(comm);
  if (!IsLive(c)) {
    if (abort) return ncclSuccess;
    Warn("comm " + std::to_string(reinterpret_cast<uintptr_t>(c)) + " has already been destroyed");
    return ncclInvalidArgument;
  }
  DestroyLocked(c);
  return ncclSuccess;
}

ncclResult_t CommQuery(ncclComm_t comm, int* out, const char* what, int Comm::*field) {
  if (InHostCallback()) return ncclInvalidUsage;
  std::lock_guard<std::mutex> l(S().mu);
  auto* c = reinterpret_cast<Comm*>(comm);
  if (ncclResult_t r = CheckComm(c, what); r != ncclSuccess) return r;
  if (out == nullptr) {
    Warn(std::string(what) + " : argument is NULL");
    return ncclInvalidArgument;
  }
  *out = c->*field;
  return ncclSuccess;
}

}  // namespace
}  // namespace vgpu::cudasim

using namespace vgpu::cudasim;  // NOLINT(build/namespaces): C entry points below

extern "C" {

VGPU_CUDASIM_EXPORT ncclResult_t ncclGetVersion(int* version) {
  if (InHostCallback()) return ncclInvalidUsage;
  if (version == nullptr) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

VGPU_CUDASIM_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (InHostCallback()) return ncclInvalidUsage;
  std::lock_guard<std::mutex> l(S().mu);
  if (id == nullptr) {
    Warn("GetUniqueId : out argument is NULL");
    return ncclInvalidArgument;
  }
  std::memset(id->internal, 0, sizeof(id->internal));
  std::memcpy(id->internal, kIdMagic, sizeof(kIdMagic));
  const uint64_t key = S().next_id++;
  std::memcpy(id->internal + sizeof(kIdMagic), &key, sizeof(key));
  return ncclSuccess;
}

VGPU_CUDASIM_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id,
                                                  int rank) {
  if (InHostCallback()) return ncclInvalidUsage;
  int device = 0;  // cudaGetDevice without a current context: device 0
  if (CurrentDevice(&device) != CUDA_SUCCESS) device = 0;
  return InitRankOnDevice(comm, nranks, id, rank, device);
}

VGPU_CUDASIM_EXPORT ncclResult_t ncclGroupStart() {
  if (InHostCallback()) return ncclInvalidUsage;
  ++g_group.depth;
  return ncclSuccess;
}

VGPU_CUDASIM_EXPORT ncclResult_t ncclGroupEnd() {
  if (InHostCallback()) return ncclInvalidUsage;
  if (g_group.depth == 0) {
    std::lock_guard<std::mutex> l(S().mu);
    Warn("ncclGroupEnd: not in a group call.");
    return ncclInvalidUsage;
  }
  if (--g_group.depth > 0) return ncclSuccess;
  GroupState group = std::move(g_group);
  g_group = GroupState();
  ncclResult_t result = group.error;
  // Inits first: collectives in the same group need their communicators.
  {
    std::unique_lock<std::mutex> lock(S().mu);
    for (Comm* c : group.inits) {
      ncclResult_t r = WaitInit(lock, c);
      if (result == ncclSuccess) result = r;
    }
  }
  if (result != ncclSuccess) return result;  // NCCL drops the group's operations
  for (const GroupState::Op& o : group.ops) {
    ncclResult_t r = EnqueueOp(o, /*grouped=*/true);
    if (result == ncclSuccess) result = r;
  }
  return result;
}

VGPU_CUDASIM_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (InHostCallback()) return ncclInvalidUsage;
  {
    std::lock_guard<std::mutex> l(S().mu);
    if (comms == nullptr) {
      Warn("CommInitAll : comms argument is NULL");
      return ncclInvalidArgument;
    }
    if (ndev < 0) {
      Warn("Invalid device count requested : " + std::to_string(ndev));
      return ncclInvalidArgument;
    }
    const int total = Profile().devices;
    if (devlist != nullptr) {
      std::vector<bool> seen(total, false);
      for (int i = 0; i < ndev; ++i) {
        if (devlist[i] < 0 || devlist[i] >= total) {
          Warn("Invalid device " + std::to_string(devlist[i]) +
               " (totalnDev=" + std::to_string(total) + ")");
          return ncclInvalidArgument;
        }
        if (seen[devlist[i]]) return ncclInvalidUsage;  // NCCL says nothing here
        seen[devlist[i]] = true;
      }
    }
  }
  ncclUniqueId id;
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) return r;
  ncclGroupStart();
  for (int i = 0; i < ndev; ++i) {
    InitRankOnDevice(comms + i, ndev, id, i, devlist != nullptr ? devlist[i] : i);
  }
  ncclResult_t r = ncclGroupEnd();
  if (r != ncclSuccess) {
    // The communicators never became usable; free them so nothing leaks.
    std::lock_guard<std::mutex> l(S().mu);
    for (int i = 0; i < ndev; ++i) {
      auto* c = reinterpret_cast<Comm*>(comms[i]);
      if (IsLive(c)) DestroyLocked(c);
      comms[i] = nullptr;
    }
  }
  return r;
}

VGPU_CUDASIM_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return DestroyOrAbort(comm, false);
}

VGPU_CUDASIM_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return DestroyOrAbort(comm, true);
}

VGPU_CUDASIM_EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  return CommQuery(comm, count, "CommCount", &Comm::nranks);
}

VGPU_CUDASIM_EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  return CommQuery(comm, device, "CommCuDevice", &Comm::device);
}

VGPU_CUDASIM_EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  return CommQuery(comm, rank, "CommUserRank", &Comm::rank);
}

VGPU_CUDASIM_EXPORT const char* ncclGetErrorString(ncclResult_t code) {
  switch (code) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

// As NCCL: one process-wide message, never cleared; `comm` is unused. The returned pointer
// stays valid until the next error (a thread-local copy keeps it stable for the caller).
VGPU_CUDASIM_EXPORT const char* ncclGetLastError(ncclComm_t) {
  thread_local std::string copy;
  std::lock_guard<std::mutex> l(S().mu);
  copy = S().last_error;
  return copy.c_str();
}

VGPU_CUDASIM_EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                               ncclDataType_t datatype, ncclRedOp_t op,
                                               ncclComm_t comm, cudaStream_t stream) {
  return Collective(Kind::kAllReduce, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
}

VGPU_CUDASIM_EXPORT ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff,
                                                   size_t recvcount, ncclDataType_t datatype,
                                                   ncclRedOp_t op, ncclComm_t comm,
                                                   cudaStream_t stream) {
  return Collective(Kind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0, comm,
                    stream);
}

VGPU_CUDASIM_EXPORT ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff,
                                               size_t sendcount, ncclDataType_t datatype,
                                               ncclComm_t comm, cudaStream_t stream) {
  return Collective(Kind::kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, comm,
                    stream);
}

VGPU_CUDASIM_EXPORT ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                               ncclDataType_t datatype, int root, ncclComm_t comm,
                                               cudaStream_t stream) {
  return Collective(Kind::kBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, root, comm,
                    stream);
}

VGPU_CUDASIM_EXPORT ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                                            ncclDataType_t datatype, ncclRedOp_t op, int root,
                                            ncclComm_t comm, cudaStream_t stream) {
  return Collective(Kind::kReduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}

}  // extern "C"
