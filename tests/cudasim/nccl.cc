// The CUDA simulator's NCCL (libvgpu_cudasim_nccl.so, standing in for libnccl.so.2), with
// NCCL 2.28's semantics: communicators over the simulated devices, group calls, and
// collectives that run as stream work, in one process or across processes (below).
// Tests-only (tests/cudasim.cmake builds it).
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
// - Across processes (ncclCommInitRank bootstrapped over MPI): ncclGetUniqueId creates a
//   POSIX shared-memory segment (/vgpu-cudasim-nccl-<pid>-<nonce>; unlinked once every rank
//   joined, or at the creator's exit) and writes its name and nonce into the id. Every rank
//   of such an id (at most 64 ranks) registers there too (pid, device, PCI bus id). When
//   every rank is in this process the in-process rules above apply unchanged; when some are
//   in other processes, init completes once all nranks have registered (deadline:
//   VGPU_CUDASIM_NCCL_TIMEOUT_S) and the clique is cross-process. The rule for duplicates:
//   every process simulates its own cards, and card d has the same PCI bus id in every
//   process (0000:<10+d>:00.0), so ranks of two processes on card d ARE on one GPU, as on a
//   real node: every rank fails with ncclInvalidUsage and "Duplicate GPU detected : rank X
//   and rank Y both on CUDA device Z", as in one process. A process holds at most one rank
//   of a cross-process communicator (ncclInvalidUsage otherwise). Each collective, when it
//   reaches the head of the rank's stream (the host-function step below), copies the rank's
//   input into the rank's own data segment (<name>-d<rank>), waits for every rank at a
//   process-shared barrier (deadline as above), checks that the ranks' collectives match,
//   copies every rank's input back, and waits again before the data segments are reused; the
//   output step then computes as in one process, so results are bitwise those of one process.
//   A timed-out or mismatched cross-process collective fails the stream
//   (CUDA_ERROR_LAUNCH_TIMEOUT) and leaves the communicator unusable.
//
// Thread safety: every entry point may be called from any thread; state is under one mutex.
#include <cuda.h>
#include <fcntl.h>
#include <nccl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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
#include <random>
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
// The unique id: kIdMagic, the clique key (8 bytes), then for a cross-process id the name
// of its shared-memory segment (NUL-terminated).
constexpr size_t kIdKeyOffset = sizeof(kIdMagic);
constexpr size_t kIdNameOffset = kIdKeyOffset + sizeof(uint64_t);
constexpr size_t kIdNameBytes = NCCL_UNIQUE_ID_BYTES - kIdNameOffset;
constexpr int kMaxSharedRanks = 64;
constexpr uint64_t kSharedMagic = 0x76677075636e636cULL;  // "vgpucncl"

// A rank's record in a cross-process clique's segment.
struct SharedSlot {
  std::atomic<int32_t> state;  // 0 free, 1 claimed, 2 published
  int32_t pid;
  int32_t device;
  char bus_id[32];
  // The rank's current collective (written before each exchange's first barrier).
  uint64_t seq;
  int32_t kind, type, op, root;
  uint64_t count;
  uint64_t bytes;     // its input, at the start of its data segment
  uint64_t capacity;  // its data segment's size
};
// The segment a cross-process unique id names (zeroed by ftruncate: atomics start at 0).
struct SharedClique {
  uint64_t magic;
  uint64_t nonce;
  std::atomic<int32_t> nranks;    // 0 until the first rank sets it
  std::atomic<int32_t> arrived;   // ranks published
  std::atomic<uint64_t> barrier;  // arrivals at every barrier so far
  SharedSlot slots[kMaxSharedRanks];
};
static_assert(std::atomic<int32_t>::is_always_lock_free &&
                  std::atomic<uint64_t>::is_always_lock_free,
              "process-shared atomics must be lock-free");

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
  // Cross-process ids: the segment, mapped (null for ids of ncclCommInitAll or > 64 ranks).
  SharedClique* shared = nullptr;
  std::string shm_name;
  bool cross = false;     // init completed with ranks in other processes
  uint64_t barriers = 0;  // process-shared barriers this process's rank passed
  // Data segments: this process's rank's own, and the peers' (mapped read-only), by rank.
  std::vector<std::pair<uint8_t*, uint64_t>> data;
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
  std::vector<std::string> created;  // segments this process made, unlinked at exit
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

// --- Cross-process cliques (see the header) ---

void UnlinkCreated() {
  // At exit a stuck stream thread may hold the mutex: then leave the names (no hang at exit).
  std::unique_lock<std::mutex> l(S().mu, std::try_to_lock);
  if (!l.owns_lock()) return;
  for (const std::string& name : S().created) shm_unlink(name.c_str());
}

// Maps a segment of `bytes` (creating it when `create`); nullptr with errno set on failure.
void* MapSegment(const std::string& name, uint64_t bytes, bool create, bool writable) {
  const int flags = create ? O_CREAT | O_RDWR : (writable ? O_RDWR : O_RDONLY);
  const int fd = shm_open(name.c_str(), flags, 0600);
  if (fd < 0) return nullptr;
  if (create && ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    close(fd);
    return nullptr;
  }
  void* p = mmap(nullptr, bytes, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  return p == MAP_FAILED ? nullptr : p;
}

// A new cross-process segment for a unique id: its name, or "" when shared memory is
// unavailable (the id then works in this process only). Caller holds S().mu.
std::string CreateSharedClique(uint64_t nonce) {
  static const bool registered = [] { return std::atexit(&UnlinkCreated) == 0; }();
  (void)registered;
  char name[64];
  std::snprintf(name, sizeof(name), "/vgpu-cudasim-nccl-%d-%016llx", static_cast<int>(getpid()),
                static_cast<unsigned long long>(nonce));
  auto* q = static_cast<SharedClique*>(MapSegment(name, sizeof(SharedClique), true, true));
  if (q == nullptr) return "";
  q->magic = kSharedMagic;
  q->nonce = nonce;
  munmap(q, sizeof(SharedClique));
  S().created.push_back(name);
  return name;
}

// Registers `rank` (on `device`) in the clique's segment. Caller holds S().mu.
ncclResult_t RegisterShared(Clique* q, const std::string& name, uint64_t nonce, int nranks,
                            int rank, int device) {
  if (q->shared == nullptr) {
    auto* sh = static_cast<SharedClique*>(MapSegment(name, sizeof(SharedClique), false, true));
    if (sh == nullptr || sh->magic != kSharedMagic || sh->nonce != nonce) {
      if (sh != nullptr) munmap(sh, sizeof(SharedClique));
      Warn("ncclCommInitRank: the unique id's segment " + name + " is gone (" +
           std::strerror(errno) + "): its creator exited or every rank already joined");
      return ncclInvalidArgument;
    }
    q->shared = sh;
    q->shm_name = name;
    q->data.assign(nranks, {nullptr, 0});
  }
  SharedClique* sh = q->shared;
  int32_t expected = 0;
  if (!sh->nranks.compare_exchange_strong(expected, nranks) && expected != nranks) {
    Warn("ncclCommInitRank: rank " + std::to_string(rank) +
         " says nranks=" + std::to_string(nranks) + " but the unique id's communicator has " +
         std::to_string(expected));
    return ncclInvalidArgument;
  }
  int32_t free_slot = 0;
  SharedSlot& slot = sh->slots[rank];
  if (!slot.state.compare_exchange_strong(free_slot, 1)) {
    Warn("ncclCommInitRank: rank " + std::to_string(rank) + " joined the same unique id twice");
    return ncclInvalidUsage;
  }
  slot.pid = static_cast<int32_t>(getpid());
  slot.device = device;
  std::snprintf(slot.bus_id, sizeof(slot.bus_id), "%s", BusIdText(device).c_str());
  slot.state.store(2);
  sh->arrived.fetch_add(1);
  return ncclSuccess;
}

// Completes the init of a clique whose ranks are not all in this process, once every rank
// has registered: the same duplicate-GPU rule as FinishInit over the bus ids, then this
// process's rank's buffers. Every process decides the same from the segment. Caller holds mu.
void FinishCross(Clique* q) {
  SharedClique* sh = q->shared;
  ncclResult_t result = ncclSuccess;
  for (int r = q->nranks - 1; r >= 0 && result == ncclSuccess; --r) {
    for (int i = 0; i < q->nranks; ++i) {
      if (i != r && std::strcmp(sh->slots[i].bus_id, sh->slots[r].bus_id) == 0) {
        Warn("Duplicate GPU detected : rank " + std::to_string(r) + " and rank " +
             std::to_string(i) + " both on CUDA device " + sh->slots[r].bus_id);
        result = ncclInvalidUsage;
        break;
      }
    }
  }
  std::vector<Comm*> local;
  for (Comm* c : q->ranks) {
    if (c != nullptr) local.push_back(c);
  }
  if (result == ncclSuccess && local.size() > 1) {
    Warn(
        "ncclCommInitRank: the simulator holds at most one rank of a cross-process "
        "communicator per process; this one has " +
        std::to_string(local.size()));
    result = ncclInvalidUsage;
  }
  const uint64_t bytes = kRankBaseBytes + kBuffSize * 2 * kChannels * (q->nranks - 1);
  if (result == ncclSuccess) {
    Comm* c = local[0];
    if (ChargeDeviceMemory(c->device, bytes, "NCCL buffers") != CUDA_SUCCESS) {
      Warn("Cuda failure 2 'out of memory' (NCCL buffers of rank " + std::to_string(c->rank) +
           " on device " + std::to_string(c->device) + ")");
      result = ncclUnhandledCudaError;
    } else {
      c->charged = bytes;
    }
  }
  for (Comm* c : local) {
    c->init_done = true;
    c->init_result = result;
  }
  q->complete = true;
  q->cross = true;
  shm_unlink(q->shm_name.c_str());  // every rank has it mapped
  S().cv.notify_all();
}

// This process's rank's data segment holds at least `bytes`. Caller holds S().mu.
bool EnsureOwnData(Clique* q, int rank, uint64_t bytes) {
  auto& [ptr, cap] = q->data[rank];
  if (ptr != nullptr && cap >= bytes) return true;
  uint64_t want = std::max<uint64_t>(bytes, 4096);
  want = std::max(want, cap * 2);
  const std::string name = q->shm_name + "-d" + std::to_string(rank);
  if (ptr != nullptr) {
    munmap(ptr, cap);
  } else {
    S().created.push_back(name);  // unlinked at exit if the comm is never destroyed
  }
  ptr = static_cast<uint8_t*>(MapSegment(name, want, true, true));
  cap = ptr != nullptr ? want : 0;
  q->shared->slots[rank].capacity = cap;
  return ptr != nullptr;
}

// Peer `rank`'s data segment, mapped at its current size. Caller holds S().mu.
const uint8_t* PeerData(Clique* q, int rank) {
  auto& [ptr, cap] = q->data[rank];
  const uint64_t want = q->shared->slots[rank].capacity;
  if (ptr != nullptr && cap == want) return ptr;
  if (ptr != nullptr) munmap(ptr, cap);
  ptr = static_cast<uint8_t*>(
      MapSegment(q->shm_name + "-d" + std::to_string(rank), want, false, false));
  cap = ptr != nullptr ? want : 0;
  return ptr;
}

// Every rank of the clique's next process-shared barrier, or false at the deadline.
bool SharedBarrier(Clique* q) {
  const uint64_t target = ++q->barriers * static_cast<uint64_t>(q->nranks);
  q->shared->barrier.fetch_add(1);
  const auto deadline = std::chrono::steady_clock::now() + Timeout();
  while (q->shared->barrier.load() < target) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return true;
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
  if (q->shared != nullptr) shm_unlink(q->shm_name.c_str());  // every rank was in this process
  S().cv.notify_all();
}

// Waits (with S().mu held through `lock`) until `c`'s clique is complete.
ncclResult_t WaitInit(std::unique_lock<std::mutex>& lock, Comm* c) {
  Clique* q = c->clique;
  const auto deadline = std::chrono::steady_clock::now() + Timeout();
  bool done = c->init_done;
  while (!done && std::chrono::steady_clock::now() < deadline) {
    if (q->shared != nullptr && !q->complete && q->shared->arrived.load() >= q->nranks) {
      FinishCross(q);  // some ranks are in other processes
    }
    done = S().cv.wait_for(lock, q->shared != nullptr ? std::chrono::milliseconds(1) : Timeout(),
                           [c] { return c->init_done; });
  }
  if (!done) {
    const int arrived = q->shared != nullptr ? q->shared->arrived.load() : q->arrived;
    Warn("ncclCommInitRank: rank " + std::to_string(c->rank) + " of " + std::to_string(c->nranks) +
         " timed out waiting for the other ranks (" + std::to_string(arrived) + " arrived)");
    std::fprintf(stderr, "cudasim NCCL: %s\n", S().last_error.c_str());
    return ncclSystemError;
  }
  return c->init_result;
}

// Registers rank `rank` of unique id `key` on `device`; *out gets the comm at once.
ncclResult_t JoinClique(ncclComm_t* out, int nranks, uint64_t key, const std::string& shm_name,
                        int rank, int device, Comm** joined) {
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
  if (!shm_name.empty() && nranks <= kMaxSharedRanks) {
    if (ncclResult_t r = RegisterShared(q, shm_name, key, nranks, rank, device); r != ncclSuccess) {
      return r;
    }
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
  std::memcpy(&key, id.internal + kIdKeyOffset, sizeof(key));
  return key;
}

// The segment name of a cross-process id ("" for an in-process one).
std::string ShmNameOf(const ncclUniqueId& id) {
  const char* p = id.internal + kIdNameOffset;
  return std::string(p, strnlen(p, kIdNameBytes));
}

// A unique id; `shared`: one that other processes can join (see the header). Caller holds mu.
void MakeId(ncclUniqueId* id, bool shared) {
  std::memset(id->internal, 0, sizeof(id->internal));
  std::memcpy(id->internal, kIdMagic, sizeof(kIdMagic));
  uint64_t key = S().next_id++;
  std::string name;
  if (shared) {
    static std::mt19937_64 rng(std::random_device{}() ^ static_cast<uint64_t>(getpid()));
    const uint64_t nonce = rng() | (uint64_t{1} << 63);  // never a counter's key
    name = CreateSharedClique(nonce);
    if (!name.empty()) key = nonce;
  }
  std::memcpy(id->internal + kIdKeyOffset, &key, sizeof(key));
  std::memcpy(id->internal + kIdNameOffset, name.data(), std::min(name.size(), kIdNameBytes - 1));
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
  Clique* q = c->clique;
  if (q->cross) {
    for (auto& [ptr, cap] : q->data) {
      if (ptr != nullptr) munmap(ptr, cap);
      ptr = nullptr;
      cap = 0;
    }
    shm_unlink((q->shm_name + "-d" + std::to_string(c->rank)).c_str());
  }
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

// The barrier of a cross-process clique (one rank in this process): the exchange of inputs
// through the segments described in the header. Returns "" or why it failed.
std::string CrossExchange(Instance* inst, int rank) {
  Clique* q = inst->clique;
  SharedClique* sh = q->shared;
  {
    std::lock_guard<std::mutex> l(S().mu);
    const std::vector<uint8_t>& in = inst->inputs[rank];
    if (!EnsureOwnData(q, rank, in.size())) {
      return "could not map its data segment: " + std::string(std::strerror(errno));
    }
    if (!in.empty()) std::memcpy(q->data[rank].first, in.data(), in.size());
    SharedSlot& me = sh->slots[rank];
    me.seq = inst->seq;
    me.kind = static_cast<int32_t>(inst->kind);
    me.type = inst->type;
    me.op = inst->op;
    me.root = inst->root;
    me.count = inst->count;
    me.bytes = in.size();
  }
  if (!SharedBarrier(q)) return "timed out waiting for the other processes' ranks";
  std::string error;
  {
    std::lock_guard<std::mutex> l(S().mu);
    const SharedSlot& me = sh->slots[rank];
    const bool reduces = inst->kind != Kind::kAllGather && inst->kind != Kind::kBroadcast;
    for (int i = 0; i < q->nranks && error.empty(); ++i) {
      const SharedSlot& p = sh->slots[i];
      if (p.seq != me.seq || p.kind != me.kind || p.type != me.type || p.count != me.count ||
          (reduces && p.op != me.op) || p.root != me.root) {
        error = "rank " + std::to_string(i) + "'s collective #" + std::to_string(p.seq) +
                " does not match (every rank must issue the same collectives in the same order)";
        break;
      }
      if (i == rank) continue;
      const uint8_t* d = p.bytes != 0 ? PeerData(q, i) : nullptr;
      if (p.bytes != 0 && d == nullptr) {
        error = "could not map rank " + std::to_string(i) + "'s data segment";
        break;
      }
      inst->inputs[i].assign(d, d + p.bytes);
    }
  }
  // The segments are reused by the next collective only once every rank has read them.
  if (!SharedBarrier(q) && error.empty()) return "timed out after the exchange";
  return error;
}

void CUDA_CB Barrier(void* data) {
  std::unique_ptr<BarrierArgs> args(static_cast<BarrierArgs*>(data));
  Instance* inst = args->inst.get();
  if (inst->clique->cross) {
    std::string error = CrossExchange(inst, args->rank);
    std::lock_guard<std::mutex> l(S().mu);
    if (error.empty()) {
      inst->arrived = inst->nranks;
      inst->arrived_by.assign(inst->nranks, true);
      return;
    }
    std::fprintf(stderr, "cudasim NCCL: %s rank %d across processes: %s\n", KindName(inst->kind),
                 args->rank, error.c_str());
    inst->timed_out = true;
    AbortInstance(args->inst);
    return;
  }
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
      inst->left = q->cross ? 1 : c->nranks;  // cross: this process's one rank
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
  if (ncclResult_t r = JoinClique(out, nranks, key, ShmNameOf(id), rank, device, &c);
      r != ncclSuccess) {
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
  MakeId(id, /*shared=*/true);
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
  {
    std::lock_guard<std::mutex> l(S().mu);
    MakeId(&id, /*shared=*/false);  // its ranks are all in this process
  }
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
