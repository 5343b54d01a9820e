// libvgpu_cudasim_cuda.so: a strict stand-in for libcuda.so.1 (tests only; see cudasim.h and
// docs/cuda.md). It exports cuGetProcAddress_v2 like the real driver, so the cuda platform loads
// it through its ordinary path, and behaves as cuda.h and the programming guide say:
//
//  * Device memory is not host memory. Device addresses come from a PROT_NONE range (host code
//    that dereferences one crashes); the bytes live in a "mirror" range at the same offset,
//    mapped only while allocated. Every copy, memset, kernel and library call declares the
//    ranges it touches (cudasim::Access); one not allocated, freed, or VMM-mapped without
//    cuMemSetAccess is a sticky CUDA_ERROR_ILLEGAL_ADDRESS for the context.
//  * Streams are asynchronous: each has a worker thread running its work in order after a
//    latency (VGPU_CUDASIM_LATENCY_US, default 50). Events capture work; waits order streams.
//  * A race detector: vector clocks per stream (host syncs merge into one host clock) and the
//    last writer and readers of every byte range; two unordered accesses, one a write, print
//    "cudasim: data race: ..." and become the context's sticky CUDA_ERROR_LAUNCH_FAILED
//    (VGPU_CUDASIM_RACES=abort|error|warn, default error). Work bodies run one at a time under
//    an execution lock (so the simulator itself has no data races); latencies overlap.
//  * Contexts: per-thread current-context stacks, primary-context retain counts, green
//    contexts with the cc 9.0 split rules, destroyed handles refused, CUDA calls from
//    cuLaunchHostFunc callbacks refused with CUDA_ERROR_NOT_PERMITTED.
//  * Profiles (VGPU_CUDASIM_PROFILE=small|h100) and overheads charged to device memory (table
//    kOverheads below), VMM with the driver's rules, stream-ordered memory pools.
//
// Thread safety: all state sits behind one mutex (State::mu); work bodies and changes to the
// mirror's mappings also take State::exec_mu (always before mu).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "vgpu/tests/cudasim/cudasim.h"
#include "vgpu/tests/cudasim/internal.h"

namespace vgpu::cudasim {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kPage = 4096;
constexpr uint64_t kGranularity = 2 * kMiB;  // VMM granularity (minimum and recommended)
constexpr uint64_t kPoisonCap = 64 * kMiB;   // new memory is filled with 0xFF up to this much
// ... and a physical allocation (cuMemCreate) up to this much: allocators create a card's worth
// of 2 MiB pages, and filling every byte would touch all of it on the machine running the tests.
constexpr uint64_t kVmmPoisonCap = 64 * 1024;
constexpr unsigned char kPoison = 0xFF;
constexpr int kMaxDevices = 8;
constexpr int kSmPartitionMin = 8;  // cc 9.0: minSmPartitionSize and smCoscheduledAlignment

// Device memory the driver takes for itself, as on a real card (plausible values; cuMemGetInfo
// shows them):
//   primary context          512 MiB (h100)  16 MiB (small)   while retained
//   loaded module (fatbin)     2 MiB                            until cuModuleUnload
//   green context              0 (shares its primary context's state)
//   streams, events            0
struct Overheads {
  uint64_t primary_context;
  uint64_t module;
};

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

// ---- vector clocks ------------------------------------------------------------------------

// Sorted (stream id, count) pairs; a missing stream counts 0.
using VC = std::vector<std::pair<uint32_t, uint64_t>>;

uint64_t Get(const VC& vc, uint32_t id) {
  auto it = std::lower_bound(vc.begin(), vc.end(), std::make_pair(id, uint64_t{0}));
  return it != vc.end() && it->first == id ? it->second : 0;
}
void Set(VC* vc, uint32_t id, uint64_t v) {
  auto it = std::lower_bound(vc->begin(), vc->end(), std::make_pair(id, uint64_t{0}));
  if (it != vc->end() && it->first == id) {
    it->second = std::max(it->second, v);
  } else {
    vc->insert(it, {id, v});
  }
}
void Join(VC* into, const VC& from) {
  for (const auto& [id, v] : from) Set(into, id, v);
}

// ---- objects (never freed, so stale handles are recognised) --------------------------------

struct Ctx;
struct Stream;

struct AccessRecord {
  uint32_t stream = 0;  // 0: none
  uint64_t seq = 0;
  const char* what = "";
};

struct Op {
  enum Kind { kWork, kHostFn, kWait } kind = kWork;
  uint64_t seq = 0;
  std::shared_ptr<const VC> vc;
  const char* what = "";
  std::vector<Access> accesses;
  Work work;
  CUhostFn fn = nullptr;
  void* data = nullptr;
  std::vector<std::pair<Stream*, uint64_t>> deps;  // run only after these completed
};

struct Stream {
  uint32_t id = 0;
  Ctx* ctx = nullptr;
  unsigned flags = 0;
  int priority = 0;
  bool legacy = false;      // the context's NULL / CU_STREAM_LEGACY stream
  bool per_thread = false;  // a CU_STREAM_PER_THREAD stream
  bool alive = true;
  bool stop = false;
  std::deque<Op> queue;
  uint64_t enqueued = 0, completed = 0;
  VC vc;
  std::condition_variable cv;
  std::thread worker;
  bool Blocking() const { return !legacy && (flags & CU_STREAM_NON_BLOCKING) == 0; }
};

struct Module;
struct GreenCtx;

struct Ctx {
  int device = 0;
  bool primary = false;
  GreenCtx* green = nullptr;
  int sm_count = 0;
  bool alive = true;
  CUresult sticky = CUDA_SUCCESS;
  Stream* legacy = nullptr;
  std::map<std::thread::id, Stream*> per_thread;
  std::set<Stream*> streams;  // alive ones, special streams included
  std::set<Module*> modules;
};

struct GreenCtx {
  Ctx* ctx = nullptr;
  bool alive = true;
};

struct Event {
  Ctx* ctx = nullptr;
  bool alive = true;
  Stream* stream = nullptr;  // the latest capture: `stream` up to `seq`
  uint64_t seq = 0;
  VC vc;
};

struct Module {
  Ctx* ctx = nullptr;
  bool loaded = true;
  std::map<std::string, struct Function*> functions;
};

struct Function {
  Module* module = nullptr;
  std::string name;
};

struct ResourceDesc {
  int device = 0;
  unsigned sm_count = 0;
};

// Mirror-backed ranges of the device address arena and pinned host allocations.
struct Region {
  enum Kind { kAlloc, kPool, kVmm, kPinned } kind = kAlloc;
  uint64_t end = 0;
  int device = -1;           // owning device (-1: pinned host memory)
  uint32_t access_mask = 0;  // kVmm: devices given access by cuMemSetAccess
  uint64_t handle = 0;       // kVmm: the physical allocation mapped
  Ctx* owner = nullptr;      // kAlloc: the primary context it was allocated in
};

struct Physical {
  int device = 0;
  uint64_t bytes = 0;
  uint64_t phys_offset = 0;  // in the device's physical memory file
  int maps = 0;
  bool released = false;
};

struct Reservation {
  uint64_t bytes = 0;
};

struct PoolBlock {
  uint64_t ptr = 0, bytes = 0;
  Stream* freed_on = nullptr;  // the cuMemFreeAsync stream and its op
  uint64_t free_seq = 0;
};

struct Pool {
  int device = 0;
  bool alive = true;
  uint64_t reserved = 0, used = 0, threshold = 0;
  std::vector<PoolBlock> cached;
  std::map<uint64_t, uint64_t> live;  // ptr -> bytes
};

struct Segment {
  uint64_t end = 0;
  AccessRecord writer;
  std::vector<AccessRecord> readers;  // at most one per stream
};

struct Device {
  uint64_t capacity = 0;
  uint64_t used = 0;
  int primary_refs = 0;
  Ctx* primary = nullptr;
  int phys_fd = -1;
  std::map<uint64_t, uint64_t> phys_free;  // offset -> bytes
  bool peer[kMaxDevices] = {};             // peer access enabled from this device to others
};

enum class RaceMode { kAbort, kError, kWarn };

struct State {
  std::mutex exec_mu;  // held while work bodies run and while mirror mappings change
  std::mutex mu;
  std::condition_variable done_cv;  // notified when any op completes

  // Configuration.
  std::string profile;
  std::string device_name;
  int devices = 2;
  int sm_count = 32;
  Overheads overheads{};
  int driver_version = 13000;
  bool no_pools = false;
  uint64_t latency_us = 50;
  RaceMode races = RaceMode::kError;
  // VGPU_CUDASIM_MUTATE, for the mutation check (tests/cudasim_mutation_test.sh): the driver
  // accepts and then drops every cuEventRecord or every cuStreamWaitEvent, which is what
  // deleting the platform's call (or making Stream::WaitEvent a no-op) would do.
  bool drop_event_record = false;
  bool drop_stream_wait = false;
  FILE* trace = nullptr;

  std::atomic<bool> initialized{false};
  Device device[kMaxDevices];

  // Address arena: device addresses [arena, arena + arena_bytes) are PROT_NONE forever; the
  // bytes of address a live at mirror + (a - arena).
  uint64_t arena = 0, arena_bytes = 0;
  char* mirror = nullptr;
  std::map<uint64_t, uint64_t> va_free;  // offset -> bytes
  uint64_t va_next = 0;                  // next-fit cursor: freed addresses are reused late

  std::map<uint64_t, Region> regions;  // start -> region
  std::map<uint64_t, Reservation> reservations;
  std::map<uint64_t, Physical> physical;
  uint64_t next_handle = 1;
  std::map<uint64_t, Segment> history;  // race detector: start -> segment

  std::unordered_set<const void*> ctxs, streams, events, modules, functions, greens, descs, pools;
  std::set<Pool*> live_pools;
  uint32_t next_stream_id = 1;
  VC host_vc;  // what the host has synchronised with (any thread)

  // Counters for tests (vgpu_cudasim_counter).
  std::map<std::string, uint64_t> counters;
};

State& S();
thread_local std::vector<Ctx*> t_stack;
thread_local bool t_in_callback = false;

void Tracef(const char* fmt, ...) {
  State& s = S();
  if (s.trace == nullptr) return;
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(s.trace, fmt, ap);
  va_end(ap);
  std::fputc('\n', s.trace);
  std::fflush(s.trace);
}

uint64_t EnvU64(const char* name, uint64_t def) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == '\0') return def;
  return std::strtoull(e, nullptr, 10);
}

State& S() {
  static State* s = [] {
    auto* st = new State();
    const char* p = std::getenv("VGPU_CUDASIM_PROFILE");
    st->profile = p != nullptr && *p != '\0' ? p : "small";
    uint64_t bytes;
    if (st->profile == "h100") {
      st->devices = 1;
      st->sm_count = 132;
      bytes = 81559 * kMiB;
      st->device_name = "NVIDIA H100 80GB HBM3";
      st->overheads = {512 * kMiB, 2 * kMiB};
    } else {
      if (st->profile != "small") {
        std::fprintf(stderr, "cudasim: unknown VGPU_CUDASIM_PROFILE=%s; using small\n",
                     st->profile.c_str());
        st->profile = "small";
      }
      st->devices = 2;
      st->sm_count = 32;
      bytes = kGiB;
      st->device_name = "NVIDIA cudasim small GPU";
      st->overheads = {16 * kMiB, 2 * kMiB};
    }
    st->devices = static_cast<int>(
        std::clamp<uint64_t>(EnvU64("VGPU_CUDASIM_DEVICES", st->devices), 0, kMaxDevices));
    bytes = EnvU64("VGPU_CUDASIM_BYTES", bytes);
    st->driver_version = static_cast<int>(EnvU64("VGPU_CUDASIM_DRIVER_VERSION", 13000));
    const char* np = std::getenv("VGPU_CUDASIM_NO_POOLS");
    st->no_pools = np != nullptr && std::strcmp(np, "1") == 0;
    st->latency_us = EnvU64("VGPU_CUDASIM_LATENCY_US", 50);
    if (const char* r = std::getenv("VGPU_CUDASIM_RACES"); r != nullptr) {
      if (std::strcmp(r, "abort") == 0) st->races = RaceMode::kAbort;
      if (std::strcmp(r, "warn") == 0) st->races = RaceMode::kWarn;
    }
    if (const char* m = std::getenv("VGPU_CUDASIM_MUTATE"); m != nullptr && *m != '\0') {
      st->drop_event_record = std::strcmp(m, "drop_event_record") == 0;
      st->drop_stream_wait = std::strcmp(m, "drop_stream_wait") == 0;
      if (!st->drop_event_record && !st->drop_stream_wait) {
        std::fprintf(stderr,
                     "cudasim: unknown VGPU_CUDASIM_MUTATE=%s (drop_event_record or "
                     "drop_stream_wait)\n",
                     m);
        std::abort();
      }
      std::fprintf(stderr, "cudasim: mutation %s is on\n", m);
    }
    if (const char* t = std::getenv("VGPU_CUDASIM_TRACE"); t != nullptr && *t != '\0') {
      st->trace = std::fopen(t, "w");
    }
    for (int d = 0; d < st->devices; ++d) st->device[d].capacity = bytes;
    // Room for every device's memory three times over (VMM reservations, next-fit reuse);
    // kept small because sanitizers limit the address space (each test loads several copies).
    st->arena_bytes = std::min<uint64_t>(
        RoundUp(3 * bytes * std::max(st->devices, 1) + 8 * kGiB, kGranularity), 1024 * kGiB);
    void* a = mmap(nullptr, st->arena_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    void* m = mmap(nullptr, st->arena_bytes + kGranularity, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (a == MAP_FAILED || m == MAP_FAILED) {
      std::fprintf(stderr, "cudasim: cannot reserve %llu bytes of address space\n",
                   static_cast<unsigned long long>(st->arena_bytes));
      std::abort();
    }
    st->arena = reinterpret_cast<uint64_t>(a);
    // Device addresses aligned to 2 MiB: align the mirror's offsets the same way.
    st->arena = RoundUp(st->arena, kGranularity);
    st->arena_bytes -= kGranularity;
    st->mirror = reinterpret_cast<char*>(RoundUp(reinterpret_cast<uint64_t>(m), kGranularity));
    st->va_free[0] = st->arena_bytes;
    for (int d = 0; d < st->devices; ++d) {
      Device& dev = st->device[d];
      dev.phys_fd = memfd_create("cudasim-physical", MFD_CLOEXEC);
      // Twice the capacity, sparse, so fragmentation of physical offsets never matters.
      if (dev.phys_fd < 0 || ftruncate(dev.phys_fd, static_cast<off_t>(2 * bytes)) != 0) {
        std::fprintf(stderr, "cudasim: cannot create the physical memory file of device %d\n", d);
        std::abort();
      }
      dev.phys_free[0] = 2 * bytes;
    }
    return st;
  }();
  return *s;
}

// ---- small allocators -----------------------------------------------------------------------

// First fit at or after `*cursor` (wrapping once), aligned; returns false when nothing fits.
bool CarveRange(std::map<uint64_t, uint64_t>* free_ranges, uint64_t* cursor, uint64_t bytes,
                uint64_t align, uint64_t* out) {
  for (int pass = 0; pass < 2; ++pass) {
    for (auto it = free_ranges->begin(); it != free_ranges->end(); ++it) {
      uint64_t start = std::max(it->first, pass == 0 && cursor ? *cursor : 0);
      start = RoundUp(start, align);
      const uint64_t end = it->first + it->second;
      if (start >= end || end - start < bytes) continue;
      const uint64_t fs = it->first, fe = end;
      free_ranges->erase(it);
      if (start > fs) (*free_ranges)[fs] = start - fs;
      if (fe > start + bytes) (*free_ranges)[start + bytes] = fe - (start + bytes);
      *out = start;
      if (cursor) *cursor = start + bytes;
      return true;
    }
  }
  return false;
}

void ReturnRange(std::map<uint64_t, uint64_t>* free_ranges, uint64_t start, uint64_t bytes) {
  auto next = free_ranges->lower_bound(start);
  if (next != free_ranges->end() && next->first == start + bytes) {
    bytes += next->second;
    next = free_ranges->erase(next);
  }
  if (next != free_ranges->begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      prev->second += bytes;
      return;
    }
  }
  (*free_ranges)[start] = bytes;
}

void* MirrorOf(uint64_t dptr) { return S().mirror + (dptr - S().arena); }
bool InArena(uint64_t p) { return p >= S().arena && p < S().arena + S().arena_bytes; }

// Maps fresh zero pages (then poison) at the mirror of [dptr, dptr + bytes).
bool MapBacking(uint64_t dptr, uint64_t bytes) {
  void* want = MirrorOf(dptr);
  void* got = mmap(want, RoundUp(bytes, kPage), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  if (got != want) return false;
  std::memset(want, kPoison, std::min(bytes, kPoisonCap));
  return true;
}
// Makes the mirror of the range inaccessible again and gives its pages back. Needs exec_mu.
void UnmapBacking(uint64_t dptr, uint64_t bytes) {
  mmap(MirrorOf(dptr), RoundUp(bytes, kPage), PROT_NONE,
       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

// A device address range with a guard gap after it, so an overrun is an illegal address.
bool CarveDeviceVa(uint64_t bytes, uint64_t align, uint64_t* dptr) {
  State& s = S();
  uint64_t off = 0;
  const uint64_t span = RoundUp(bytes, kPage) + kPage;
  if (!CarveRange(&s.va_free, &s.va_next, span, align, &off)) return false;
  *dptr = s.arena + off;
  return true;
}
void ReturnDeviceVa(uint64_t dptr, uint64_t bytes) {
  ReturnRange(&S().va_free, dptr - S().arena, RoundUp(bytes, kPage) + kPage);
}

// ---- race detector -------------------------------------------------------------------------

// Splits history segments at `at` (requires mu).
void SplitAt(uint64_t at) {
  auto& h = S().history;
  auto it = h.upper_bound(at);
  if (it == h.begin()) return;
  --it;
  if (it->first < at && at < it->second.end) {
    Segment tail = it->second;
    it->second.end = at;
    h[at] = tail;
  }
}

void ForgetHistory(uint64_t start, uint64_t end) {
  SplitAt(start);
  SplitAt(end);
  auto& h = S().history;
  h.erase(h.lower_bound(start), h.lower_bound(end));
}

bool Ordered(const AccessRecord& before, const VC& vc) {
  return before.stream == 0 || Get(vc, before.stream) >= before.seq;
}

struct Race {
  AccessRecord other;
  uint64_t start = 0, end = 0;
};

// Checks [start, end) accessed by `me` (whose clock is `vc`) against earlier unordered
// accesses, then records it. Returns the first race found.
bool CheckAndRecord(uint64_t start, uint64_t end, bool write, const AccessRecord& me, const VC& vc,
                    Race* race) {
  State& s = S();
  bool found = false;
  SplitAt(start);
  SplitAt(end);
  // Fill gaps with empty segments so every byte has one.
  uint64_t pos = start;
  auto it = s.history.lower_bound(start);
  while (pos < end) {
    if (it == s.history.end() || it->first > pos) {
      uint64_t gap_end = it == s.history.end() ? end : std::min(end, it->first);
      it = s.history.emplace_hint(it, pos, Segment{gap_end, {}, {}});
    }
    Segment& seg = it->second;
    auto report = [&](const AccessRecord& other) {
      if (found || other.stream == me.stream) return;
      if (Ordered(other, vc)) return;
      found = true;
      race->other = other;
      race->start = it->first;
      race->end = seg.end;
    };
    report(seg.writer);
    if (write) {
      for (const AccessRecord& r : seg.readers) report(r);
      seg.writer = me;
      seg.readers.clear();
    } else {
      bool replaced = false;
      for (AccessRecord& r : seg.readers) {
        if (r.stream == me.stream) {
          r = me;
          replaced = true;
        }
      }
      if (!replaced) seg.readers.push_back(me);
    }
    pos = seg.end;
    ++it;
  }
  return found;
}

// ---- memory checks -------------------------------------------------------------------------

// Whether [p, p + bytes) is allocated and accessible from `device` (requires mu).
bool Accessible(uint64_t p, uint64_t bytes, int device, bool any_device) {
  State& s = S();
  if (bytes == 0) return true;
  if (p + bytes < p) return false;
  uint64_t pos = p;
  const uint64_t end = p + bytes;
  while (pos < end) {
    auto it = s.regions.upper_bound(pos);
    if (it == s.regions.begin()) return false;
    --it;
    const Region& r = it->second;
    if (pos >= r.end) return false;
    switch (r.kind) {
      case Region::kPinned:
        break;
      case Region::kVmm:
        if ((r.access_mask & (1u << device)) == 0) return false;
        break;
      case Region::kAlloc:
      case Region::kPool:
        if (!any_device && r.device != device && !s.device[device].peer[r.device]) return false;
        break;
    }
    pos = r.end;
  }
  return true;
}

bool IsPinned(const void* p, uint64_t bytes) {
  State& s = S();
  const uint64_t a = reinterpret_cast<uint64_t>(p);
  auto it = s.regions.upper_bound(a);
  if (it == s.regions.begin()) return false;
  --it;
  return it->second.kind == Region::kPinned && a + bytes <= it->second.end;
}

void* HostOf(CUdeviceptr p) { return InArena(p) ? MirrorOf(p) : reinterpret_cast<void*>(p); }

// ---- contexts and streams -------------------------------------------------------------------

void Count(const std::string& name, uint64_t n = 1) { S().counters[name] += n; }

CUresult Charge(int device, uint64_t bytes) {
  Device& d = S().device[device];
  if (d.used + bytes > d.capacity) return CUDA_ERROR_OUT_OF_MEMORY;
  d.used += bytes;
  return CUDA_SUCCESS;
}
void Uncharge(int device, uint64_t bytes) {
  Device& d = S().device[device];
  d.used -= std::min(d.used, bytes);
}

void WorkerLoop(Stream* st);

Stream* NewStream(Ctx* ctx, unsigned flags, int priority) {
  State& s = S();
  auto* st = new Stream();
  st->id = s.next_stream_id++;
  st->ctx = ctx;
  st->flags = flags;
  st->priority = priority;
  st->vc = s.host_vc;
  s.streams.insert(st);
  ctx->streams.insert(st);
  st->worker = std::thread(WorkerLoop, st);
  Count("streams_created");
  return st;
}

// Stops a stream after its queued work (requires the lock in `l`, which is released meanwhile).
void StopStream(Stream* st, std::unique_lock<std::mutex>& l) {
  if (!st->alive) return;
  st->alive = false;
  st->stop = true;
  st->ctx->streams.erase(st);
  st->cv.notify_all();
  l.unlock();
  if (st->worker.joinable()) st->worker.join();
  l.lock();
}

// The current context or null.
Ctx* Current() { return t_stack.empty() ? nullptr : t_stack.back(); }

// The current context, checked: INVALID_CONTEXT without one, CONTEXT_IS_DESTROYED after it
// died, its sticky error when it has one.
CUresult CurrentChecked(Ctx** out, bool sticky = true) {
  Ctx* c = Current();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (!c->alive) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  if (sticky && c->sticky != CUDA_SUCCESS) return c->sticky;
  *out = c;
  return CUDA_SUCCESS;
}

// Resolves a stream handle (special ones against the current context). Requires mu.
CUresult ResolveStream(CUstream h, Stream** out, bool sticky = true) {
  State& s = S();
  if (h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
    Ctx* c = nullptr;
    if (CUresult r = CurrentChecked(&c, sticky); r != CUDA_SUCCESS) return r;
    if (h == CU_STREAM_PER_THREAD) {
      Stream*& pt = c->per_thread[std::this_thread::get_id()];
      if (pt == nullptr) {
        pt = NewStream(c, 0, 0);
        pt->per_thread = true;
      }
      *out = pt;
    } else {
      if (c->legacy == nullptr) {
        c->legacy = NewStream(c, 0, 0);
        c->legacy->legacy = true;
      }
      *out = c->legacy;
    }
    return CUDA_SUCCESS;
  }
  if (s.streams.count(h) == 0) return CUDA_ERROR_INVALID_HANDLE;
  auto* st = reinterpret_cast<Stream*>(h);
  if (!st->alive) return CUDA_ERROR_INVALID_HANDLE;
  if (!st->ctx->alive) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  if (sticky && st->ctx->sticky != CUDA_SUCCESS) return st->ctx->sticky;
  *out = st;
  return CUDA_SUCCESS;
}

const char* Intern(const std::string& what) {
  static std::set<std::string>* names = new std::set<std::string>();
  return names->insert(what).first->c_str();
}

// Appends an op to a stream, with the legacy default stream's implicit synchronisation.
// Requires mu. Returns the op's sequence number.
uint64_t EnqueueLocked(Stream* st, Op op) {
  State& s = S();
  Ctx* c = st->ctx;
  if (st->legacy) {
    for (Stream* b : c->streams) {
      if (b == st || !b->Blocking()) continue;
      Join(&st->vc, b->vc);
      if (b->enqueued > b->completed) op.deps.emplace_back(b, b->enqueued);
    }
  } else if (st->Blocking() && c->legacy != nullptr && c->legacy != st) {
    Join(&st->vc, c->legacy->vc);
    if (c->legacy->enqueued > c->legacy->completed) {
      op.deps.emplace_back(c->legacy, c->legacy->enqueued);
    }
  }
  for (const auto& [dep, seq] : op.deps) {
    (void)seq;
    Join(&st->vc, dep->vc);
  }
  Join(&st->vc, s.host_vc);
  op.seq = ++st->enqueued;
  Set(&st->vc, st->id, op.seq);
  op.vc = std::make_shared<const VC>(st->vc);
  st->queue.push_back(std::move(op));
  st->cv.notify_all();
  return st->enqueued;
}

// Waits until `st` completed `seq` and merges what it saw into the host clock. Requires the
// lock in `l`.
void HostWait(Stream* st, uint64_t seq, std::unique_lock<std::mutex>& l) {
  State& s = S();
  VC seen = st->vc;
  s.done_cv.wait(l, [&] { return st->completed >= seq; });
  Join(&s.host_vc, seen);
}

void SetSticky(Ctx* c, CUresult r) {
  if (c->sticky == CUDA_SUCCESS) c->sticky = r;
}

void Execute(Stream* st, Op& op) {
  State& s = S();
  {
    std::unique_lock<std::mutex> l(s.mu);
    for (const auto& [dep, seq] : op.deps) {
      s.done_cv.wait(l, [&, d = dep, q = seq] { return d->completed >= q; });
    }
  }
  if (op.kind == Op::kWait) return;
  if (s.latency_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(s.latency_us));
  if (op.kind == Op::kHostFn) {
    Tracef("stream %u op %llu: host function", st->id, static_cast<unsigned long long>(op.seq));
    t_in_callback = true;
    op.fn(op.data);
    t_in_callback = false;
    return;
  }
  std::lock_guard<std::mutex> exec(s.exec_mu);
  WorkContext wc;
  {
    std::lock_guard<std::mutex> l(s.mu);
    Ctx* c = st->ctx;
    if (c->sticky != CUDA_SUCCESS) {
      Tracef("stream %u op %llu: %s skipped (context error %d)", st->id,
             static_cast<unsigned long long>(op.seq), op.what, c->sticky);
      return;
    }
    for (const Access& a : op.accesses) {
      if (!Accessible(a.ptr, a.bytes, c->device, a.any_device)) {
        std::fprintf(stderr,
                     "cudasim: illegal address: %s on stream %u (device %d) %s [0x%llx, 0x%llx) "
                     "is not allocated, freed, or not accessible from this device\n",
                     op.what, st->id, c->device, a.write ? "writes" : "reads",
                     static_cast<unsigned long long>(a.ptr),
                     static_cast<unsigned long long>(a.ptr + a.bytes));
        Count("illegal_addresses");
        SetSticky(c, CUDA_ERROR_ILLEGAL_ADDRESS);
        return;
      }
    }
    const AccessRecord me{st->id, op.seq, op.what};
    for (const Access& a : op.accesses) {
      if (a.bytes == 0) continue;
      Race race;
      if (CheckAndRecord(a.ptr, a.ptr + a.bytes, a.write, me, *op.vc, &race)) {
        std::fprintf(stderr,
                     "cudasim: data race: %s (%s) on stream %u vs %s on stream %u, bytes "
                     "[0x%llx,0x%llx)\n",
                     op.what, a.write ? "write" : "read", st->id, race.other.what,
                     race.other.stream, static_cast<unsigned long long>(race.start),
                     static_cast<unsigned long long>(race.end));
        Count("races");
        if (s.races == RaceMode::kAbort) std::abort();
        if (s.races == RaceMode::kError) {
          SetSticky(c, CUDA_ERROR_LAUNCH_FAILED);
          return;
        }
      }
    }
    wc.device = c->device;
    wc.sm_count = c->sm_count;
    wc.host = &HostOf;
  }
  CUresult r = op.work ? op.work(wc) : CUDA_SUCCESS;
  std::lock_guard<std::mutex> l(s.mu);
  Tracef("stream %u op %llu: %s -> %d", st->id, static_cast<unsigned long long>(op.seq), op.what,
         r);
  if (r != CUDA_SUCCESS) SetSticky(st->ctx, r);
}

void WorkerLoop(Stream* st) {
  State& s = S();
  std::unique_lock<std::mutex> l(s.mu);
  for (;;) {
    st->cv.wait(l, [&] { return !st->queue.empty() || st->stop; });
    if (st->queue.empty()) return;
    Op op = std::move(st->queue.front());
    st->queue.pop_front();
    l.unlock();
    Execute(st, op);
    const uint64_t seq = op.seq;
    op = Op();  // drop captured state before completion becomes visible
    l.lock();
    st->completed = seq;
    s.done_cv.notify_all();
  }
}

// Waits for all work of the device's contexts queued so far (requires the lock in `l`).
void DrainDevice(int device, std::unique_lock<std::mutex>& l) {
  State& s = S();
  std::vector<std::pair<Stream*, uint64_t>> pending;
  for (const void* h : s.streams) {
    auto* st = static_cast<Stream*>(const_cast<void*>(h));
    if (st->ctx->device == device && st->enqueued > st->completed) {
      pending.emplace_back(st, st->enqueued);
    }
  }
  for (auto& [st, seq] : pending) HostWait(st, seq, l);
}

// Frees a cuMemAlloc'd region: needs exec_mu held by the caller and mu in `l`.
void FreeAllocLocked(std::map<uint64_t, Region>::iterator it) {
  State& s = S();
  const uint64_t p = it->first, bytes = it->second.end - it->first;
  Uncharge(it->second.device, bytes);
  UnmapBacking(p, bytes);
  ForgetHistory(p, p + bytes);
  ReturnDeviceVa(p, bytes);
  s.regions.erase(it);
}

void DestroyCtxLocked(Ctx* c, std::unique_lock<std::mutex>& l) {
  State& s = S();
  std::vector<Stream*> streams(c->streams.begin(), c->streams.end());
  for (Stream* st : streams) StopStream(st, l);
  for (Module* m : c->modules) {
    if (m->loaded) Uncharge(c->device, s.overheads.module);
    m->loaded = false;
  }
  c->modules.clear();
  c->alive = false;
  Count("contexts_destroyed");
}

CUresult RetainPrimary(int device, Ctx** out, std::unique_lock<std::mutex>& l) {
  State& s = S();
  (void)l;
  Device& d = s.device[device];
  if (d.primary_refs == 0) {
    if (CUresult r = Charge(device, s.overheads.primary_context); r != CUDA_SUCCESS) return r;
    auto* c = new Ctx();
    c->device = device;
    c->primary = true;
    c->sm_count = s.sm_count;
    s.ctxs.insert(c);
    d.primary = c;
    Count("contexts_created");
  }
  ++d.primary_refs;
  *out = d.primary;
  return CUDA_SUCCESS;
}

void ReleasePrimary(int device, std::unique_lock<std::mutex>& l) {
  State& s = S();
  Device& d = s.device[device];
  if (d.primary_refs == 0) return;
  if (--d.primary_refs > 0) return;
  Ctx* c = d.primary;
  d.primary = nullptr;
  for (bool& p : d.peer) p = false;
  for (int o = 0; o < s.devices; ++o) s.device[o].peer[device] = false;
  Uncharge(device, s.overheads.primary_context);
  DestroyCtxLocked(c, l);
  // The context's allocations go with it.
  l.unlock();
  {
    std::lock_guard<std::mutex> exec(s.exec_mu);
    l.lock();
    for (auto it = s.regions.begin(); it != s.regions.end();) {
      if (it->second.kind == Region::kAlloc && it->second.owner == c) {
        auto next = std::next(it);
        FreeAllocLocked(it);
        it = next;
      } else {
        ++it;
      }
    }
    l.unlock();
  }
  l.lock();
}

// ---- entry points ---------------------------------------------------------------------------

#define SIM_ENTER()                                          \
  do {                                                       \
    if (t_in_callback) return CUDA_ERROR_NOT_PERMITTED;      \
    if (!S().initialized) return CUDA_ERROR_NOT_INITIALIZED; \
  } while (0)

bool ValidDevice(CUdevice d) { return d >= 0 && d < S().devices; }

// Read at each use (not once), so one process can load "old drivers" after new ones.
int DriverVersion() {
  return static_cast<int>(EnvU64("VGPU_CUDASIM_DRIVER_VERSION", S().driver_version));
}
bool NoPools() {
  const char* np = std::getenv("VGPU_CUDASIM_NO_POOLS");
  return S().no_pools || (np != nullptr && std::strcmp(np, "1") == 0);
}

CUresult CUDAAPI Init(unsigned int flags) {
  if (t_in_callback) return CUDA_ERROR_NOT_PERMITTED;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  if (s.devices == 0) return CUDA_ERROR_NO_DEVICE;
  s.initialized = true;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI DriverGetVersion(int* v) {
  if (t_in_callback) return CUDA_ERROR_NOT_PERMITTED;
  if (v == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *v = DriverVersion();
  return CUDA_SUCCESS;
}
CUresult CUDAAPI DeviceGetCount(int* n) {
  SIM_ENTER();
  if (n == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *n = S().devices;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI DeviceGet(CUdevice* d, int i) {
  SIM_ENTER();
  if (d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(i)) return CUDA_ERROR_INVALID_DEVICE;
  *d = i;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI DeviceGetName(char* name, int len, CUdevice d) {
  SIM_ENTER();
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(d)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, len, "%s", S().device_name.c_str());
  return CUDA_SUCCESS;
}
CUresult CUDAAPI DeviceGetUuid(CUuuid* uuid, CUdevice d) {
  SIM_ENTER();
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(d)) return CUDA_ERROR_INVALID_DEVICE;
  for (int i = 0; i < 16; ++i) uuid->bytes[i] = static_cast<char>(0x10 * d + i);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI DeviceGetPCIBusId(char* bus, int len, CUdevice d) {
  SIM_ENTER();
  if (bus == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(d)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(bus, len, "0000:%02x:00.0", 0x10 + d);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI DeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice d) {
  SIM_ENTER();
  if (v == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(d)) return CUDA_ERROR_INVALID_DEVICE;
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *v = S().sm_count;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *v = 9;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *v = 0;
      break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
      *v = NoPools() || DriverVersion() < 11020 ? 0 : 1;
      break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
      *v = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *v = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
      *v = 32;
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
      *v = 0x10 + d;
      break;
    default:
      if (a <= 0 || a >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
      *v = 0;
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI DeviceTotalMem(size_t* bytes, CUdevice d) {
  SIM_ENTER();
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(d)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = S().device[d].capacity;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI DeviceCanAccessPeer(int* can, CUdevice a, CUdevice b) {
  SIM_ENTER();
  if (can == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(a) || !ValidDevice(b)) return CUDA_ERROR_INVALID_DEVICE;
  *can = a != b ? 1 : 0;  // peer access is between distinct devices
  return CUDA_SUCCESS;
}

CUresult CUDAAPI PrimaryCtxRetain(CUcontext* ctx, CUdevice d) {
  SIM_ENTER();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(d)) return CUDA_ERROR_INVALID_DEVICE;
  std::unique_lock<std::mutex> l(S().mu);
  Ctx* c = nullptr;
  if (CUresult r = RetainPrimary(d, &c, l); r != CUDA_SUCCESS) return r;
  *ctx = reinterpret_cast<CUcontext>(c);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI PrimaryCtxRelease(CUdevice d) {
  SIM_ENTER();
  if (!ValidDevice(d)) return CUDA_ERROR_INVALID_DEVICE;
  std::unique_lock<std::mutex> l(S().mu);
  if (S().device[d].primary_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  ReleasePrimary(d, l);
  return CUDA_SUCCESS;
}

// A context handle given by the caller: INVALID_CONTEXT when unknown, CONTEXT_IS_DESTROYED
// when dead (requires mu).
CUresult CheckCtxHandle(CUcontext h, Ctx** out) {
  if (S().ctxs.count(h) == 0) return CUDA_ERROR_INVALID_CONTEXT;
  auto* c = reinterpret_cast<Ctx*>(h);
  if (!c->alive) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *out = c;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI CtxSetCurrent(CUcontext h) {
  SIM_ENTER();
  if (h == nullptr) {
    if (!t_stack.empty()) t_stack.pop_back();
    return CUDA_SUCCESS;
  }
  std::lock_guard<std::mutex> l(S().mu);
  Ctx* c = nullptr;
  if (CUresult r = CheckCtxHandle(h, &c); r != CUDA_SUCCESS) return r;
  if (t_stack.empty()) {
    t_stack.push_back(c);
  } else {
    t_stack.back() = c;
  }
  return CUDA_SUCCESS;
}
CUresult CUDAAPI CtxGetCurrent(CUcontext* h) {
  SIM_ENTER();
  if (h == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *h = reinterpret_cast<CUcontext>(Current());
  return CUDA_SUCCESS;
}
CUresult CUDAAPI CtxPushCurrent(CUcontext h) {
  SIM_ENTER();
  std::lock_guard<std::mutex> l(S().mu);
  Ctx* c = nullptr;
  if (CUresult r = CheckCtxHandle(h, &c); r != CUDA_SUCCESS) return r;
  t_stack.push_back(c);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI CtxPopCurrent(CUcontext* h) {
  SIM_ENTER();
  if (t_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (h != nullptr) *h = reinterpret_cast<CUcontext>(t_stack.back());
  t_stack.pop_back();
  return CUDA_SUCCESS;
}
CUresult CUDAAPI CtxGetDevice(CUdevice* d) {
  SIM_ENTER();
  if (d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> l(S().mu);
  Ctx* c = nullptr;
  if (CUresult r = CurrentChecked(&c, false); r != CUDA_SUCCESS) return r;
  *d = c->device;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI CtxSynchronize() {
  SIM_ENTER();
  State& s = S();
  std::unique_lock<std::mutex> l(s.mu);
  Ctx* c = nullptr;
  if (CUresult r = CurrentChecked(&c, false); r != CUDA_SUCCESS) return r;
  std::vector<std::pair<Stream*, uint64_t>> pending;
  for (Stream* st : c->streams) pending.emplace_back(st, st->enqueued);
  for (auto& [st, seq] : pending) HostWait(st, seq, l);
  return c->sticky;
}
CUresult CUDAAPI CtxGetStreamPriorityRange(int* least, int* greatest) {
  SIM_ENTER();
  std::lock_guard<std::mutex> l(S().mu);
  Ctx* c = nullptr;
  if (CUresult r = CurrentChecked(&c); r != CUDA_SUCCESS) return r;
  if (least != nullptr) *least = 0;
  if (greatest != nullptr) *greatest = -5;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI CtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  SIM_ENTER();
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  Ctx* c = nullptr;
  if (CUresult r = CurrentChecked(&c); r != CUDA_SUCCESS) return r;
  Ctx* p = nullptr;
  if (CUresult r = CheckCtxHandle(peer, &p); r != CUDA_SUCCESS) return r;
  if (p->device == c->device) return CUDA_ERROR_INVALID_DEVICE;
  if (s.device[c->device].peer[p->device]) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  s.device[c->device].peer[p->device] = true;
  Count("peer_enables");
  return CUDA_SUCCESS;
}
CUresult CUDAAPI CtxDisablePeerAccess(CUcontext peer) {
  SIM_ENTER();
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  Ctx* c = nullptr;
  if (CUresult r = CurrentChecked(&c); r != CUDA_SUCCESS) return r;
  Ctx* p = nullptr;
  if (CUresult r = CheckCtxHandle(peer, &p); r != CUDA_SUCCESS) return r;
  if (!s.device[c->device].peer[p->device]) return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
  s.device[c->device].peer[p->device] = false;
  return CUDA_SUCCESS;
}

// ---- memory ---------------------------------------------------------------------------------

CUresult CUDAAPI MemGetInfo(size_t* free_bytes, size_t* total) {
  SIM_ENTER();
  std::lock_guard<std::mutex> l(S().mu);
  Ctx* c = nullptr;
  if (CUresult r = CurrentChecked(&c); r != CUDA_SUCCESS) return r;
  const Device& d = S().device[c->device];
  if (free_bytes != nullptr) *free_bytes = d.capacity - std::min(d.used, d.capacity);
  if (total != nullptr) *total = d.capacity;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI MemAlloc(CUdeviceptr* p, size_t bytes) {
  SIM_ENTER();
  if (p == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  Ctx* c = nullptr;
  if (CUresult r = CurrentChecked(&c); r != CUDA_SUCCESS) return r;
  const int dev = c->device;
  if (CUresult r = Charge(dev, bytes); r != CUDA_SUCCESS) return r;
  uint64_t dptr = 0;
  if (!CarveDeviceVa(bytes, bytes >= kGranularity ? kGranularity : kPage, &dptr) ||
      !MapBacking(dptr, bytes)) {
    Uncharge(dev, bytes);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Region r;
  r.kind = Region::kAlloc;
  r.end = dptr + bytes;
  r.device = dev;
  r.owner = s.device[dev].primary;
  s.regions[dptr] = r;
  *p = dptr;
  Count("allocs");
  return CUDA_SUCCESS;
}

CUresult CUDAAPI MemFree(CUdeviceptr p) {
  SIM_ENTER();
  State& s = S();
  std::unique_lock<std::mutex> l(s.mu);
  auto it = s.regions.find(p);
  if (it == s.regions.end() || it->second.kind != Region::kAlloc) return CUDA_ERROR_INVALID_VALUE;
  // cuMemFree may synchronise (cuda.h): work queued before it completes first.
  DrainDevice(it->second.device, l);
  l.unlock();
  std::lock_guard<std::mutex> exec(s.exec_mu);
  l.lock();
  it = s.regions.find(p);
  if (it == s.regions.end() || it->second.kind != Region::kAlloc) return CUDA_ERROR_INVALID_VALUE;
  FreeAllocLocked(it);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI MemHostAlloc(void** p, size_t bytes, unsigned int flags) {
  SIM_ENTER();
  if (p == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & ~(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP |
                 CU_MEMHOSTALLOC_WRITECOMBINED)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  Ctx* c = nullptr;
  if (CUresult r = CurrentChecked(&c); r != CUDA_SUCCESS) return r;
  void* mem = mmap(nullptr, RoundUp(bytes, kPage), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  std::memset(mem, kPoison, std::min<uint64_t>(bytes, kPoisonCap));
  Region r;
  r.kind = Region::kPinned;
  r.end = reinterpret_cast<uint64_t>(mem) + bytes;
  s.regions[reinterpret_cast<uint64_t>(mem)] = r;
  *p = mem;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemFreeHost(void* p) {
  SIM_ENTER();
  State& s = S();
  std::unique_lock<std::mutex> l(s.mu);
  auto it = s.regions.find(reinterpret_cast<uint64_t>(p));
  if (it == s.regions.end() || it->second.kind != Region::kPinned) return CUDA_ERROR_INVALID_VALUE;
  // Pinned memory may be in use by queued copies: finish them first (cuMemFreeHost syncs).
  for (int d = 0; d < s.devices; ++d) DrainDevice(d, l);
  l.unlock();
  std::lock_guard<std::mutex> exec(s.exec_mu);
  l.lock();
  it = s.regions.find(reinterpret_cast<uint64_t>(p));
  if (it == s.regions.end()) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t bytes = it->second.end - it->first;
  ForgetHistory(it->first, it->second.end);
  s.regions.erase(it);
  munmap(p, RoundUp(bytes, kPage));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemHostGetDevicePointer(CUdeviceptr* d, void* p, unsigned int flags) {
  SIM_ENTER();
  if (d == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  Ctx* c = nullptr;
  if (CUresult r = CurrentChecked(&c); r != CUDA_SUCCESS) return r;
  if (!IsPinned(p, 1)) return CUDA_ERROR_INVALID_VALUE;
  *d = reinterpret_cast<CUdeviceptr>(p);  // unified addressing
  return CUDA_SUCCESS;
}
CUresult CUDAAPI PointerGetAttribute(void* data, CUpointer_attribute a, CUdeviceptr p) {
  SIM_ENTER();
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  auto it = s.regions.upper_bound(p);
  if (it == s.regions.begin()) return CUDA_ERROR_INVALID_VALUE;
  --it;
  if (p >= it->second.end) return CUDA_ERROR_INVALID_VALUE;
  const Region& r = it->second;
  int device = r.device;
  if (r.kind == Region::kVmm) device = s.physical[r.handle].device;
  switch (a) {
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      if (r.kind == Region::kPinned) return CUDA_ERROR_INVALID_VALUE;
      *static_cast<int*>(data) = device;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned*>(data) =
          r.kind == Region::kPinned ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(data) = it->first;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      *static_cast<size_t*>(data) = r.end - it->first;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

// ---- streams and events ---------------------------------------------------------------------

CUresult CUDAAPI StreamCreateWithPriority(CUstream* out, unsigned int flags, int priority) {
  SIM_ENTER();
  if (out == nullptr || (flags & ~CU_STREAM_NON_BLOCKING) != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> l(S().mu);
  Ctx* c = nullptr;
  if (CUresult r = CurrentChecked(&c); r != CUDA_SUCCESS) return r;
  *out = reinterpret_cast<CUstream>(NewStream(c, flags, std::clamp(priority, -5, 0)));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI StreamCreate(CUstream* out, unsigned int flags) {
  return StreamCreateWithPriority(out, flags, 0);
}
CUresult CUDAAPI StreamDestroy(CUstream h) {
  SIM_ENTER();
  State& s = S();
  std::unique_lock<std::mutex> l(s.mu);
  if (h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD ||
      s.streams.count(h) == 0) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  auto* st = reinterpret_cast<Stream*>(h);
  if (!st->alive || st->legacy || st->per_thread) return CUDA_ERROR_INVALID_HANDLE;
  if (!st->ctx->alive) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  // Queued work still runs (cuda.h); the handle is invalid from now on.
  StopStream(st, l);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI StreamSynchronize(CUstream h) {
  SIM_ENTER();
  std::unique_lock<std::mutex> l(S().mu);
  Stream* st = nullptr;
  if (CUresult r = ResolveStream(h, &st, false); r != CUDA_SUCCESS) return r;
  HostWait(st, st->enqueued, l);
  return st->ctx->sticky;
}
CUresult CUDAAPI StreamQuery(CUstream h) {
  SIM_ENTER();
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  Stream* st = nullptr;
  if (CUresult r = ResolveStream(h, &st); r != CUDA_SUCCESS) return r;
  if (st->completed < st->enqueued) return CUDA_ERROR_NOT_READY;
  Join(&s.host_vc, st->vc);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI StreamWaitEvent(CUstream h, CUevent e, unsigned int flags) {
  SIM_ENTER();
  if (flags != 0 && flags != CU_EVENT_WAIT_DEFAULT) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  Stream* st = nullptr;
  if (CUresult r = ResolveStream(h, &st); r != CUDA_SUCCESS) return r;
  if (s.events.count(e) == 0) return CUDA_ERROR_INVALID_HANDLE;
  auto* ev = reinterpret_cast<Event*>(e);
  if (!ev->alive) return CUDA_ERROR_INVALID_HANDLE;
  // The event may belong to another context or device (cuda.h). Never recorded: no-op.
  if (ev->stream == nullptr || s.drop_stream_wait) return CUDA_SUCCESS;
  Op op;
  op.kind = Op::kWait;
  op.what = "cuStreamWaitEvent";
  op.deps.emplace_back(ev->stream, ev->seq);
  Join(&st->vc, ev->vc);
  EnqueueLocked(st, std::move(op));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI LaunchHostFunc(CUstream h, CUhostFn fn, void* data) {
  SIM_ENTER();
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> l(S().mu);
  Stream* st = nullptr;
  if (CUresult r = ResolveStream(h, &st); r != CUDA_SUCCESS) return r;
  Op op;
  op.kind = Op::kHostFn;
  op.what = "host function";
  op.fn = fn;
  op.data = data;
  EnqueueLocked(st, std::move(op));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI EventCreate(CUevent* e, unsigned int flags) {
  SIM_ENTER();
  if (e == nullptr || (flags & ~(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> l(S().mu);
  Ctx* c = nullptr;
  if (CUresult r = CurrentChecked(&c); r != CUDA_SUCCESS) return r;
  auto* ev = new Event();
  ev->ctx = c;
  S().events.insert(ev);
  *e = reinterpret_cast<CUevent>(ev);
  return CUDA_SUCCESS;
}
// An event handle: INVALID_HANDLE when unknown or destroyed, or when its context died.
CUresult CheckEvent(CUevent e, Event** out) {
  if (S().events.count(e) == 0) return CUDA_ERROR_INVALID_HANDLE;
  auto* ev = reinterpret_cast<Event*>(e);
  if (!ev->alive) return CUDA_ERROR_INVALID_HANDLE;
  if (!ev->ctx->alive) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *out = ev;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI EventDestroy(CUevent e) {
  SIM_ENTER();
  std::lock_guard<std::mutex> l(S().mu);
  Event* ev = nullptr;
  if (CUresult r = CheckEvent(e, &ev); r != CUDA_SUCCESS) return r;
  ev->alive = false;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI EventRecord(CUevent e, CUstream h) {
  SIM_ENTER();
  std::lock_guard<std::mutex> l(S().mu);
  Event* ev = nullptr;
  if (CUresult r = CheckEvent(e, &ev); r != CUDA_SUCCESS) return r;
  Stream* st = nullptr;
  if (CUresult r = ResolveStream(h, &st); r != CUDA_SUCCESS) return r;
  if (st->ctx != ev->ctx) return CUDA_ERROR_INVALID_HANDLE;  // must share a context
  if (S().drop_event_record) return CUDA_SUCCESS;
  ev->stream = st;
  ev->seq = st->enqueued;
  ev->vc = st->vc;
  Count("event_records");
  return CUDA_SUCCESS;
}
CUresult CUDAAPI EventQuery(CUevent e) {
  SIM_ENTER();
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  Event* ev = nullptr;
  if (CUresult r = CheckEvent(e, &ev); r != CUDA_SUCCESS) return r;
  if (ev->ctx->sticky != CUDA_SUCCESS) return ev->ctx->sticky;
  if (ev->stream != nullptr && ev->stream->completed < ev->seq) return CUDA_ERROR_NOT_READY;
  Join(&s.host_vc, ev->vc);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI EventSynchronize(CUevent e) {
  SIM_ENTER();
  State& s = S();
  std::unique_lock<std::mutex> l(s.mu);
  Event* ev = nullptr;
  if (CUresult r = CheckEvent(e, &ev); r != CUDA_SUCCESS) return r;
  if (ev->stream != nullptr) {
    Stream* st = ev->stream;
    const uint64_t seq = ev->seq;
    VC vc = ev->vc;
    s.done_cv.wait(l, [&] { return st->completed >= seq; });
    Join(&s.host_vc, vc);
  }
  return ev->ctx->sticky;
}

// ---- copies and memsets ---------------------------------------------------------------------

CUresult EnqueueWork(CUstream h, std::vector<Access> accesses, Work work, const char* what,
                     Stream** on = nullptr, uint64_t* seq = nullptr) {
  State& s = S();
  Stream* st = nullptr;
  if (CUresult r = ResolveStream(h, &st); r != CUDA_SUCCESS) return r;
  Op op;
  op.kind = Op::kWork;
  op.what = what;
  op.accesses = std::move(accesses);
  op.work = std::move(work);
  const uint64_t n = EnqueueLocked(st, std::move(op));
  if (on != nullptr) *on = st;
  if (seq != nullptr) *seq = n;
  (void)s;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI MemcpyHtoDAsync(CUdeviceptr d, const void* src, size_t n, CUstream h) {
  SIM_ENTER();
  if (n == 0) return CUDA_SUCCESS;
  if (src == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> l(S().mu);
  std::vector<Access> acc = {Access{d, n, true, true}};
  Work work;
  if (IsPinned(src, n)) {  // truly asynchronous: the source must stay valid until it ran
    acc.push_back(Access{reinterpret_cast<CUdeviceptr>(src), n, false, true});
    work = [d, src, n](const WorkContext& wc) {
      std::memcpy(wc.host(d), src, n);
      return CUDA_SUCCESS;
    };
  } else {  // pageable: staged at call time, so the caller may reuse its buffer at once
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                      static_cast<const char*>(src) + n);
    work = [d, staged](const WorkContext& wc) {
      std::memcpy(wc.host(d), staged->data(), staged->size());
      return CUDA_SUCCESS;
    };
  }
  return EnqueueWork(h, std::move(acc), std::move(work), "cuMemcpyHtoDAsync");
}
CUresult CUDAAPI MemcpyDtoHAsync(void* dst, CUdeviceptr d, size_t n, CUstream h) {
  SIM_ENTER();
  if (n == 0) return CUDA_SUCCESS;
  if (dst == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::unique_lock<std::mutex> l(s.mu);
  const bool pinned = IsPinned(dst, n);
  std::vector<Access> acc = {Access{d, n, false, true}};
  if (pinned) acc.push_back(Access{reinterpret_cast<CUdeviceptr>(dst), n, true, true});
  Work work = [dst, d, n](const WorkContext& wc) {
    std::memcpy(dst, wc.host(d), n);
    return CUDA_SUCCESS;
  };
  Stream* st = nullptr;
  uint64_t seq = 0;
  if (CUresult r = EnqueueWork(h, std::move(acc), std::move(work), "cuMemcpyDtoHAsync", &st, &seq);
      r != CUDA_SUCCESS) {
    return r;
  }
  if (pinned) return CUDA_SUCCESS;
  // To pageable memory the copy is synchronous with respect to the host.
  HostWait(st, seq, l);
  return st->ctx->sticky;
}
CUresult CUDAAPI MemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) {
  SIM_ENTER();
  if (n == 0) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> l(S().mu);
  std::vector<Access> acc = {Access{src, n, false, true}, Access{dst, n, true, true}};
  return EnqueueWork(
      h, std::move(acc),
      [dst, src, n](const WorkContext& wc) {
        std::memmove(wc.host(dst), wc.host(src), n);
        return CUDA_SUCCESS;
      },
      "cuMemcpyDtoDAsync");
}
CUresult CUDAAPI MemcpyPeerAsync(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc,
                                 size_t n, CUstream h) {
  SIM_ENTER();
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  Ctx* dctx = nullptr;
  Ctx* sctx = nullptr;
  if (CUresult r = CheckCtxHandle(dc, &dctx); r != CUDA_SUCCESS) return r;
  if (CUresult r = CheckCtxHandle(sc, &sctx); r != CUDA_SUCCESS) return r;
  if (n == 0) return CUDA_SUCCESS;
  std::vector<Access> acc = {Access{src, n, false, true}, Access{dst, n, true, true}};
  const int ddev = dctx->device, sdev = sctx->device;
  CUresult r = EnqueueWork(
      h, std::move(acc),
      [dst, src, n, ddev, sdev](const WorkContext& wc) {
        // The pointers must lie on the contexts' devices.
        std::lock_guard<std::mutex> l2(S().mu);
        auto device_of = [](uint64_t p) {
          auto it = S().regions.upper_bound(p);
          if (it == S().regions.begin()) return -2;
          --it;
          if (it->second.kind == Region::kVmm) return S().physical[it->second.handle].device;
          return it->second.device;
        };
        if (device_of(dst) != ddev || device_of(src) != sdev) return CUDA_ERROR_ILLEGAL_ADDRESS;
        std::memmove(wc.host(dst), wc.host(src), n);
        return CUDA_SUCCESS;
      },
      "cuMemcpyPeerAsync");
  if (r == CUDA_SUCCESS) Count("peer_copies");
  return r;
}
CUresult CUDAAPI MemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream h) {
  SIM_ENTER();
  if (n == 0) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> l(S().mu);
  return EnqueueWork(
      h, {Access{d, n, true, false}},
      [d, v, n](const WorkContext& wc) {
        std::memset(wc.host(d), v, n);
        return CUDA_SUCCESS;
      },
      "cuMemsetD8Async");
}
CUresult CUDAAPI MemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream h) {
  SIM_ENTER();
  if (n == 0) return CUDA_SUCCESS;
  if (d % 4 != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> l(S().mu);
  return EnqueueWork(
      h, {Access{d, n * 4, true, false}},
      [d, v, n](const WorkContext& wc) {
        std::fill_n(static_cast<unsigned*>(wc.host(d)), n, v);
        return CUDA_SUCCESS;
      },
      "cuMemsetD32Async");
}

// ---- modules and kernels --------------------------------------------------------------------

CUresult CUDAAPI ModuleLoadData(CUmodule* m, const void* image) {
  SIM_ENTER();
  if (m == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint32_t magic = 0;
  std::memcpy(&magic, image, 4);
  if (magic != 0xBA55ED50u) return CUDA_ERROR_INVALID_IMAGE;  // a fatbin
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  Ctx* c = nullptr;
  if (CUresult r = CurrentChecked(&c); r != CUDA_SUCCESS) return r;
  if (CUresult r = Charge(c->device, s.overheads.module); r != CUDA_SUCCESS) return r;
  auto* mod = new Module();
  mod->ctx = c;
  s.modules.insert(mod);
  c->modules.insert(mod);
  *m = reinterpret_cast<CUmodule>(mod);
  Count("modules_loaded");
  return CUDA_SUCCESS;
}
CUresult CUDAAPI ModuleUnload(CUmodule m) {
  SIM_ENTER();
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  if (s.modules.count(m) == 0) return CUDA_ERROR_INVALID_HANDLE;
  auto* mod = reinterpret_cast<Module*>(m);
  if (!mod->loaded) return CUDA_ERROR_INVALID_HANDLE;
  mod->loaded = false;
  mod->ctx->modules.erase(mod);
  Uncharge(mod->ctx->device, s.overheads.module);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI ModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  SIM_ENTER();
  if (f == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  if (s.modules.count(m) == 0) return CUDA_ERROR_INVALID_HANDLE;
  auto* mod = reinterpret_cast<Module*>(m);
  if (!mod->loaded || !mod->ctx->alive) return CUDA_ERROR_INVALID_HANDLE;
  if (!IsKnownKernel(name)) return CUDA_ERROR_NOT_FOUND;
  Function*& fn = mod->functions[name];
  if (fn == nullptr) {
    fn = new Function();
    fn->module = mod;
    fn->name = name;
    s.functions.insert(fn);
  }
  *f = reinterpret_cast<CUfunction>(fn);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI LaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                              unsigned by, unsigned bz, unsigned shmem, CUstream h, void** params,
                              void** extra) {
  SIM_ENTER();
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  Ctx* c = nullptr;
  if (CUresult r = CurrentChecked(&c); r != CUDA_SUCCESS) return r;
  if (s.functions.count(f) == 0) return CUDA_ERROR_INVALID_HANDLE;
  auto* fn = reinterpret_cast<Function*>(f);
  if (!fn->module->loaded) return CUDA_ERROR_INVALID_HANDLE;
  if (extra != nullptr || shmem > 48 * 1024) return CUDA_ERROR_INVALID_VALUE;
  Stream* st = nullptr;
  if (CUresult r = ResolveStream(h, &st); r != CUDA_SUCCESS) return r;
  // A function runs in the context its module was loaded in: the stream's.
  if (fn->module->ctx != st->ctx) return CUDA_ERROR_INVALID_HANDLE;
  std::vector<Access> acc;
  Work body;
  if (CUresult r = PrepareKernel(fn->name, gx, gy, gz, bx, by, bz, params, &acc, &body);
      r != CUDA_SUCCESS) {
    return r;
  }
  const std::string name = fn->name;
  Work work = [body = std::move(body), name](const WorkContext& wc) {
    CUresult r = body(wc);
    std::lock_guard<std::mutex> l2(S().mu);
    Count("launches");
    Count("kernels_on_sms:" + std::to_string(wc.sm_count));
    S().counters["last_kernel_sms"] = static_cast<uint64_t>(wc.sm_count);
    return r;
  };
  return EnqueueWork(reinterpret_cast<CUstream>(st), std::move(acc), std::move(work), Intern(name));
}

// ---- VMM --------------------------------------------------------------------------------------

bool ValidProp(const CUmemAllocationProp* prop) {
  return prop != nullptr && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
         prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE && ValidDevice(prop->location.id);
}

CUresult CUDAAPI MemGetAllocationGranularity(size_t* g, const CUmemAllocationProp* prop,
                                             CUmemAllocationGranularity_flags option) {
  SIM_ENTER();
  if (g == nullptr || !ValidProp(prop)) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
      option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *g = kGranularity;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemAddressReserve(CUdeviceptr* p, size_t size, size_t alignment, CUdeviceptr addr,
                                   unsigned long long flags) {
  SIM_ENTER();
  if (p == nullptr || size == 0 || size % kGranularity != 0 || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (alignment != 0 && (alignment & (alignment - 1)) != 0) return CUDA_ERROR_INVALID_VALUE;
  (void)addr;  // a hint only
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  uint64_t dptr = 0;
  if (!CarveDeviceVa(size, std::max<uint64_t>(alignment, kGranularity), &dptr)) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  s.reservations[dptr] = Reservation{size};
  *p = dptr;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemAddressFree(CUdeviceptr p, size_t size) {
  SIM_ENTER();
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  auto it = s.reservations.find(p);
  if (it == s.reservations.end() || it->second.bytes != size) return CUDA_ERROR_INVALID_VALUE;
  // Every mapping in it must be gone first.
  auto r = s.regions.lower_bound(p);
  if (r != s.regions.end() && r->first < p + size) return CUDA_ERROR_INVALID_VALUE;
  s.reservations.erase(it);
  ReturnDeviceVa(p, size);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                           const CUmemAllocationProp* prop, unsigned long long flags) {
  SIM_ENTER();
  if (handle == nullptr || !ValidProp(prop) || flags != 0 || size == 0 ||
      size % kGranularity != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  const int dev = prop->location.id;
  Device& d = s.device[dev];
  if (CUresult r = Charge(dev, size); r != CUDA_SUCCESS) return r;
  uint64_t off = 0;
  if (!CarveRange(&d.phys_free, nullptr, size, kGranularity, &off)) {
    Uncharge(dev, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  // Poison what a first mapping will see (its start).
  const uint64_t poison = std::min<uint64_t>(size, kVmmPoisonCap);
  void* tmp =
      mmap(nullptr, poison, PROT_READ | PROT_WRITE, MAP_SHARED, d.phys_fd, static_cast<off_t>(off));
  if (tmp != MAP_FAILED) {
    std::memset(tmp, kPoison, poison);
    munmap(tmp, poison);
  }
  const uint64_t h = s.next_handle++;
  s.physical[h] = Physical{dev, size, off, 0, false};
  *handle = h;
  return CUDA_SUCCESS;
}
void FreePhysicalLocked(std::map<uint64_t, Physical>::iterator it) {
  State& s = S();
  Device& d = s.device[it->second.device];
  fallocate(d.phys_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
            static_cast<off_t>(it->second.phys_offset), static_cast<off_t>(it->second.bytes));
  ReturnRange(&d.phys_free, it->second.phys_offset, it->second.bytes);
  Uncharge(it->second.device, it->second.bytes);
  s.physical.erase(it);
}
CUresult CUDAAPI MemRelease(CUmemGenericAllocationHandle handle) {
  SIM_ENTER();
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  auto it = s.physical.find(handle);
  if (it == s.physical.end() || it->second.released) return CUDA_ERROR_INVALID_VALUE;
  it->second.released = true;
  // The memory stays until its last mapping is unmapped.
  if (it->second.maps == 0) FreePhysicalLocked(it);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemMap(CUdeviceptr p, size_t size, size_t offset,
                        CUmemGenericAllocationHandle handle, unsigned long long flags) {
  SIM_ENTER();
  if (flags != 0 || size == 0 || p % kGranularity != 0 || size % kGranularity != 0 ||
      offset % kGranularity != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  auto ph = s.physical.find(handle);
  if (ph == s.physical.end() || ph->second.released) return CUDA_ERROR_INVALID_HANDLE;
  if (offset + size > ph->second.bytes) return CUDA_ERROR_INVALID_VALUE;
  // cuda.h: the offset "currently must be zero"; an H200 (driver 580) answers
  // CUDA_ERROR_NOT_SUPPORTED to any other offset and to a part of the allocation.
  if (offset != 0 || size != ph->second.bytes) return CUDA_ERROR_NOT_SUPPORTED;
  // Inside one reservation, over nothing mapped.
  auto res = s.reservations.upper_bound(p);
  if (res == s.reservations.begin()) return CUDA_ERROR_INVALID_VALUE;
  --res;
  if (p + size > res->first + res->second.bytes) return CUDA_ERROR_INVALID_VALUE;
  auto next = s.regions.lower_bound(p);
  if (next != s.regions.end() && next->first < p + size) return CUDA_ERROR_INVALID_VALUE;
  if (next != s.regions.begin() && std::prev(next)->second.end > p) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const Device& d = s.device[ph->second.device];
  void* want = MirrorOf(p);
  void* got = mmap(want, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, d.phys_fd,
                   static_cast<off_t>(ph->second.phys_offset + offset));
  if (got != want) return CUDA_ERROR_OUT_OF_MEMORY;
  Region r;
  r.kind = Region::kVmm;
  r.end = p + size;
  r.device = ph->second.device;
  r.handle = handle;
  s.regions[p] = r;
  ++ph->second.maps;
  Count("map_calls");
  Count("mapped_bytes", size);
  return CUDA_SUCCESS;
}
// The kVmm regions exactly covering [p, p + size), or false.
bool CoveringMaps(uint64_t p, uint64_t size,
                  std::vector<std::map<uint64_t, Region>::iterator>* out) {
  State& s = S();
  uint64_t pos = p;
  auto it = s.regions.find(p);
  while (pos < p + size) {
    if (it == s.regions.end() || it->first != pos || it->second.kind != Region::kVmm) {
      return false;
    }
    if (it->second.end > p + size) return false;
    out->push_back(it);
    pos = it->second.end;
    ++it;
  }
  return true;
}
CUresult CUDAAPI MemSetAccess(CUdeviceptr p, size_t size, const CUmemAccessDesc* desc,
                              size_t count) {
  SIM_ENTER();
  if (desc == nullptr || count == 0 || size == 0 || p % kGranularity != 0 ||
      size % kGranularity != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  std::vector<std::map<uint64_t, Region>::iterator> maps;
  if (!CoveringMaps(p, size, &maps)) return CUDA_ERROR_INVALID_VALUE;
  uint32_t set = 0, clear = 0;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || !ValidDevice(desc[i].location.id)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    const uint32_t bit = 1u << desc[i].location.id;
    switch (desc[i].flags) {
      case CU_MEM_ACCESS_FLAGS_PROT_READWRITE:
      case CU_MEM_ACCESS_FLAGS_PROT_READ:
        set |= bit;
        break;
      case CU_MEM_ACCESS_FLAGS_PROT_NONE:
        clear |= bit;
        break;
      default:
        return CUDA_ERROR_INVALID_VALUE;
    }
  }
  for (auto& it : maps) it->second.access_mask = (it->second.access_mask | set) & ~clear;
  Count("set_access_calls");
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemUnmap(CUdeviceptr p, size_t size) {
  SIM_ENTER();
  if (size == 0 || p % kGranularity != 0 || size % kGranularity != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = S();
  std::lock_guard<std::mutex> exec(s.exec_mu);
  std::lock_guard<std::mutex> l(s.mu);
  std::vector<std::map<uint64_t, Region>::iterator> maps;
  // Whole mappings only (cuda.h: no sub-range of a mapping).
  if (!CoveringMaps(p, size, &maps)) return CUDA_ERROR_INVALID_VALUE;
  for (auto& it : maps) {
    auto ph = s.physical.find(it->second.handle);
    if (ph != s.physical.end() && --ph->second.maps == 0 && ph->second.released) {
      FreePhysicalLocked(ph);
    }
    s.regions.erase(it);
  }
  UnmapBacking(p, size);
  ForgetHistory(p, p + size);
  Count("unmap_calls");
  return CUDA_SUCCESS;
}

// ---- stream-ordered memory pools ------------------------------------------------------------

// Gives a cached block back to the device (needs exec_mu and mu).
void ReleaseBlockLocked(Pool* pool, const PoolBlock& b) {
  State& s = S();
  Uncharge(pool->device, b.bytes);
  pool->reserved -= b.bytes;
  UnmapBacking(b.ptr, b.bytes);
  ForgetHistory(b.ptr, b.ptr + b.bytes);
  s.regions.erase(b.ptr);
  ReturnDeviceVa(b.ptr, b.bytes);
}
bool FreeDone(const PoolBlock& b) {
  return b.freed_on == nullptr || b.freed_on->completed >= b.free_seq;
}
// Releases cached blocks whose free has run, largest first, while more than `keep` is reserved.
void TrimLocked(Pool* pool, uint64_t keep) {
  std::sort(pool->cached.begin(), pool->cached.end(),
            [](const PoolBlock& a, const PoolBlock& b) { return a.bytes > b.bytes; });
  for (auto it = pool->cached.begin(); it != pool->cached.end() && pool->reserved > keep;) {
    if (FreeDone(*it)) {
      ReleaseBlockLocked(pool, *it);
      it = pool->cached.erase(it);
    } else {
      ++it;
    }
  }
}
CUresult CheckPool(CUmemoryPool h, Pool** out) {
  if (S().pools.count(h) == 0) return CUDA_ERROR_INVALID_VALUE;
  auto* p = reinterpret_cast<Pool*>(h);
  if (!p->alive) return CUDA_ERROR_INVALID_VALUE;
  *out = p;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemPoolCreate(CUmemoryPool* out, const CUmemPoolProps* props) {
  SIM_ENTER();
  if (out == nullptr || props == nullptr || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !ValidDevice(props->location.id)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  auto* pool = new Pool();
  pool->device = props->location.id;
  s.pools.insert(pool);
  s.live_pools.insert(pool);
  *out = reinterpret_cast<CUmemoryPool>(pool);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemPoolDestroy(CUmemoryPool h) {
  SIM_ENTER();
  State& s = S();
  std::unique_lock<std::mutex> l(s.mu);
  Pool* pool = nullptr;
  if (CUresult r = CheckPool(h, &pool); r != CUDA_SUCCESS) return r;
  pool->alive = false;
  s.live_pools.erase(pool);
  // Cached blocks go once their frees ran; live ones when they are freed (cuda.h).
  std::vector<std::pair<Stream*, uint64_t>> pending;
  for (const PoolBlock& b : pool->cached) {
    if (!FreeDone(b)) pending.emplace_back(b.freed_on, b.free_seq);
  }
  for (auto& [st, seq] : pending) HostWait(st, seq, l);
  l.unlock();
  std::lock_guard<std::mutex> exec(s.exec_mu);
  l.lock();
  TrimLocked(pool, 0);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemAllocFromPoolAsync(CUdeviceptr* p, size_t bytes, CUmemoryPool h, CUstream hs) {
  SIM_ENTER();
  if (p == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  Pool* pool = nullptr;
  if (CUresult r = CheckPool(h, &pool); r != CUDA_SUCCESS) return r;
  Stream* st = nullptr;
  if (CUresult r = ResolveStream(hs, &st); r != CUDA_SUCCESS) return r;
  const uint64_t size = RoundUp(bytes, 512);
  // Reuse: at once on the stream that freed the block, elsewhere once that free has run.
  auto best = pool->cached.end();
  for (auto it = pool->cached.begin(); it != pool->cached.end(); ++it) {
    if (it->bytes < size || it->bytes / 2 > size) continue;
    if (it->freed_on != st && !FreeDone(*it)) continue;
    if (best == pool->cached.end() || it->bytes < best->bytes) best = it;
  }
  if (best != pool->cached.end()) {
    *p = best->ptr;
    pool->live[best->ptr] = best->bytes;
    pool->used += best->bytes;
    pool->cached.erase(best);
    Count("pool_reuses");
    return CUDA_SUCCESS;
  }
  if (CUresult r = Charge(pool->device, size); r != CUDA_SUCCESS) return r;
  uint64_t dptr = 0;
  if (!CarveDeviceVa(size, size >= kGranularity ? kGranularity : kPage, &dptr) ||
      !MapBacking(dptr, size)) {
    Uncharge(pool->device, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Region r;
  r.kind = Region::kPool;
  r.end = dptr + size;
  r.device = pool->device;
  s.regions[dptr] = r;
  pool->reserved += size;
  pool->used += size;
  pool->live[dptr] = size;
  *p = dptr;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemFreeAsync(CUdeviceptr p, CUstream hs) {
  SIM_ENTER();
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  Pool* owner = nullptr;
  for (const void* h : s.pools) {
    auto* pool = static_cast<Pool*>(const_cast<void*>(h));
    if (pool->live.count(p) != 0) owner = pool;
  }
  if (owner == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Stream* st = nullptr;
  if (CUresult r = ResolveStream(hs, &st, false); r != CUDA_SUCCESS) return r;
  const uint64_t bytes = owner->live[p];
  owner->live.erase(p);
  owner->used -= bytes;
  Op op;
  op.kind = Op::kWork;
  op.what = "cuMemFreeAsync";
  // When the free runs, the block's history ends: a later user ordered after it is no race.
  // A block of a destroyed pool goes back to the device then (work runs under exec_mu).
  op.work = [p, bytes, owner](const WorkContext& wc) {
    std::lock_guard<std::mutex> l2(S().mu);
    std::memset(wc.host(p), kPoison, std::min(bytes, kPoisonCap));
    ForgetHistory(p, p + bytes);
    if (!owner->alive) {
      for (auto it = owner->cached.begin(); it != owner->cached.end(); ++it) {
        if (it->ptr == p) {
          ReleaseBlockLocked(owner, *it);
          owner->cached.erase(it);
          break;
        }
      }
    }
    return CUDA_SUCCESS;
  };
  op.accesses = {Access{p, bytes, true, true}};
  const uint64_t seq = EnqueueLocked(st, std::move(op));
  owner->cached.push_back(PoolBlock{p, bytes, st, seq});
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemPoolTrimTo(CUmemoryPool h, size_t keep) {
  SIM_ENTER();
  State& s = S();
  std::lock_guard<std::mutex> exec(s.exec_mu);
  std::lock_guard<std::mutex> l(s.mu);
  Pool* pool = nullptr;
  if (CUresult r = CheckPool(h, &pool); r != CUDA_SUCCESS) return r;
  TrimLocked(pool, keep);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemPoolSetAttribute(CUmemoryPool h, CUmemPool_attribute attr, void* value) {
  SIM_ENTER();
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> l(S().mu);
  Pool* pool = nullptr;
  if (CUresult r = CheckPool(h, &pool); r != CUDA_SUCCESS) return r;
  if (attr != CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) return CUDA_ERROR_NOT_SUPPORTED;
  pool->threshold = *static_cast<cuuint64_t*>(value);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemPoolGetAttribute(CUmemoryPool h, CUmemPool_attribute attr, void* value) {
  SIM_ENTER();
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> l(S().mu);
  Pool* pool = nullptr;
  if (CUresult r = CheckPool(h, &pool); r != CUDA_SUCCESS) return r;
  auto* out = static_cast<cuuint64_t*>(value);
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      *out = pool->threshold;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
      *out = pool->reserved;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      *out = pool->used;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

// ---- green contexts ---------------------------------------------------------------------------

// What the simulator keeps in CUdevResource::_internal_padding.
struct ResourceTag {
  uint32_t magic;
  int32_t device;
  uint32_t split_id;  // the split call that produced it (0: not a split output)
};
constexpr uint32_t kTagMagic = 0xC0DA5117u;

void FillResource(CUdevResource* r, int device, unsigned sms, uint32_t split_id) {
  std::memset(r, 0, sizeof(*r));
  r->type = CU_DEV_RESOURCE_TYPE_SM;
  r->sm.smCount = sms;
  r->sm.minSmPartitionSize = kSmPartitionMin;
  r->sm.smCoscheduledAlignment = kSmPartitionMin;
  ResourceTag tag{kTagMagic, device, split_id};
  static_assert(sizeof(tag) <= sizeof(r->_internal_padding));
  std::memcpy(r->_internal_padding, &tag, sizeof(tag));
}
bool ReadTag(const CUdevResource* r, ResourceTag* tag) {
  std::memcpy(tag, r->_internal_padding, sizeof(*tag));
  return r->type == CU_DEV_RESOURCE_TYPE_SM && tag->magic == kTagMagic && ValidDevice(tag->device);
}

CUresult CUDAAPI DeviceGetDevResource(CUdevice d, CUdevResource* r, CUdevResourceType type) {
  SIM_ENTER();
  if (r == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(d)) return CUDA_ERROR_INVALID_DEVICE;
  if (type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  FillResource(r, d, static_cast<unsigned>(S().sm_count), 0);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI DevSmResourceSplitByCount(CUdevResource* result, unsigned int* nb_groups,
                                           const CUdevResource* input, CUdevResource* remaining,
                                           unsigned int use_flags, unsigned int min_count) {
  SIM_ENTER();
  if (nb_groups == nullptr || input == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (input->type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  ResourceTag tag;
  if (!ReadTag(input, &tag)) return CUDA_ERROR_INVALID_VALUE;
  // Split outputs must become a green context before they are split again (cuda.h).
  if (tag.split_id != 0) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
  if (use_flags != 0) return CUDA_ERROR_NOT_SUPPORTED;  // the simulator models default splits
  const unsigned total = input->sm.smCount;
  if (min_count > total) return CUDA_ERROR_INVALID_VALUE;
  const unsigned size = std::max<unsigned>(
      kSmPartitionMin, (min_count + kSmPartitionMin - 1) / kSmPartitionMin * kSmPartitionMin);
  const unsigned fit = total / size;
  if (result == nullptr) {
    *nb_groups = fit;
    return CUDA_SUCCESS;
  }
  if (*nb_groups == 0) return CUDA_ERROR_INVALID_VALUE;
  const unsigned groups = std::min(*nb_groups, fit);
  if (groups == 0) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
  static std::atomic<uint32_t> next_split{1};
  const uint32_t id = next_split.fetch_add(1);
  for (unsigned i = 0; i < groups; ++i) FillResource(&result[i], tag.device, size, id);
  if (remaining != nullptr) FillResource(remaining, tag.device, total - groups * size, id);
  *nb_groups = groups;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI DevResourceGenerateDesc(CUdevResourceDesc* desc, CUdevResource* resources,
                                         unsigned int n) {
  SIM_ENTER();
  if (desc == nullptr || resources == nullptr || n == 0) return CUDA_ERROR_INVALID_VALUE;
  ResourceTag first;
  unsigned sms = 0;
  for (unsigned i = 0; i < n; ++i) {
    if (resources[i].type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
    ResourceTag tag;
    if (!ReadTag(&resources[i], &tag)) return CUDA_ERROR_INVALID_VALUE;
    if (i == 0) first = tag;
    if (tag.device != first.device || tag.split_id != first.split_id) {
      return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
    }
    sms += resources[i].sm.smCount;
  }
  if (sms == 0) return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
  std::lock_guard<std::mutex> l(S().mu);
  auto* d = new ResourceDesc{first.device, sms};
  S().descs.insert(d);
  *desc = reinterpret_cast<CUdevResourceDesc>(d);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI GreenCtxCreate(CUgreenCtx* out, CUdevResourceDesc desc, CUdevice dev,
                                unsigned int flags) {
  SIM_ENTER();
  if (out == nullptr || flags != CU_GREEN_CTX_DEFAULT_STREAM) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidDevice(dev)) return CUDA_ERROR_INVALID_DEVICE;
  State& s = S();
  std::unique_lock<std::mutex> l(s.mu);
  if (s.descs.count(desc) == 0) return CUDA_ERROR_INVALID_VALUE;
  auto* d = reinterpret_cast<ResourceDesc*>(desc);
  if (d->device != dev) return CUDA_ERROR_INVALID_DEVICE;
  Ctx* primary = nullptr;  // a green context retains its device's primary context
  if (CUresult r = RetainPrimary(dev, &primary, l); r != CUDA_SUCCESS) return r;
  auto* c = new Ctx();
  c->device = dev;
  c->sm_count = static_cast<int>(d->sm_count);
  auto* g = new GreenCtx();
  g->ctx = c;
  c->green = g;
  s.ctxs.insert(c);
  s.greens.insert(g);
  Count("green_contexts_created");
  *out = reinterpret_cast<CUgreenCtx>(g);
  return CUDA_SUCCESS;
}
CUresult CheckGreen(CUgreenCtx h, GreenCtx** out) {
  if (S().greens.count(h) == 0) return CUDA_ERROR_INVALID_HANDLE;
  auto* g = reinterpret_cast<GreenCtx*>(h);
  if (!g->alive) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *out = g;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI GreenCtxDestroy(CUgreenCtx h) {
  SIM_ENTER();
  State& s = S();
  std::unique_lock<std::mutex> l(s.mu);
  GreenCtx* g = nullptr;
  if (CUresult r = CheckGreen(h, &g); r != CUDA_SUCCESS) return r;
  g->alive = false;
  DestroyCtxLocked(g->ctx, l);  // its streams and context handle die with it
  ReleasePrimary(g->ctx->device, l);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI CtxFromGreenCtx(CUcontext* out, CUgreenCtx h) {
  SIM_ENTER();
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> l(S().mu);
  GreenCtx* g = nullptr;
  if (CUresult r = CheckGreen(h, &g); r != CUDA_SUCCESS) return r;
  *out = reinterpret_cast<CUcontext>(g->ctx);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI GreenCtxGetDevResource(CUgreenCtx h, CUdevResource* r, CUdevResourceType type) {
  SIM_ENTER();
  if (r == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> l(S().mu);
  GreenCtx* g = nullptr;
  if (CUresult res = CheckGreen(h, &g); res != CUDA_SUCCESS) return res;
  if (type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  FillResource(r, g->ctx->device, static_cast<unsigned>(g->ctx->sm_count), 0);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI GreenCtxStreamCreate(CUstream* out, CUgreenCtx h, unsigned int flags,
                                      int priority) {
  SIM_ENTER();
  if (out == nullptr || flags != CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> l(S().mu);
  GreenCtx* g = nullptr;
  if (CUresult r = CheckGreen(h, &g); r != CUDA_SUCCESS) return r;
  if (g->ctx->sticky != CUDA_SUCCESS) return g->ctx->sticky;
  *out = reinterpret_cast<CUstream>(NewStream(g->ctx, flags, std::clamp(priority, -5, 0)));
  return CUDA_SUCCESS;
}

// ---- errors -----------------------------------------------------------------------------------

struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
};
#define SIM_ERR(code, text) \
  { code, #code, text }
const ErrorText kErrors[] = {
    SIM_ERR(CUDA_SUCCESS, "no error"),
    SIM_ERR(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
    SIM_ERR(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
    SIM_ERR(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
    SIM_ERR(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
    SIM_ERR(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
    SIM_ERR(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
    SIM_ERR(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"),
    SIM_ERR(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
    SIM_ERR(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
    SIM_ERR(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
    SIM_ERR(CUDA_ERROR_NOT_READY, "device not ready"),
    SIM_ERR(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
    SIM_ERR(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled"),
    SIM_ERR(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled"),
    SIM_ERR(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
    SIM_ERR(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address"),
    SIM_ERR(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
    SIM_ERR(CUDA_ERROR_NOT_PERMITTED, "operation not permitted"),
    SIM_ERR(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
    SIM_ERR(CUDA_ERROR_INVALID_RESOURCE_TYPE, "invalid resource type"),
    SIM_ERR(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, "invalid resource configuration"),
    SIM_ERR(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef SIM_ERR

CUresult CUDAAPI GetErrorName(CUresult r, const char** s) {
  if (s == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (const ErrorText& e : kErrors) {
    if (e.code == r) {
      *s = e.name;
      return CUDA_SUCCESS;
    }
  }
  *s = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}
CUresult CUDAAPI GetErrorString(CUresult r, const char** s) {
  if (s == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (const ErrorText& e : kErrors) {
    if (e.code == r) {
      *s = e.text;
      return CUDA_SUCCESS;
    }
  }
  *s = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

// ---- the entry table ------------------------------------------------------------------------

struct Entry {
  const char* name;
  int version;  // the driver version that introduced it
  void* fn;
};

#define SIM_ENTRY(name, version, impl) \
  Entry { #name, version, reinterpret_cast < void*>(static_cast <PFN_##name##_v##version>(&impl)) }

const Entry kEntries[] = {
    SIM_ENTRY(cuInit, 2000, Init),
    SIM_ENTRY(cuDriverGetVersion, 2020, DriverGetVersion),
    SIM_ENTRY(cuDeviceGetCount, 2000, DeviceGetCount),
    SIM_ENTRY(cuDeviceGet, 2000, DeviceGet),
    SIM_ENTRY(cuDeviceGetName, 2000, DeviceGetName),
    SIM_ENTRY(cuDeviceGetUuid, 11040, DeviceGetUuid),
    SIM_ENTRY(cuDeviceGetPCIBusId, 4010, DeviceGetPCIBusId),
    SIM_ENTRY(cuDeviceGetAttribute, 2000, DeviceGetAttribute),
    SIM_ENTRY(cuDeviceTotalMem, 3020, DeviceTotalMem),
    SIM_ENTRY(cuDeviceCanAccessPeer, 4000, DeviceCanAccessPeer),
    SIM_ENTRY(cuDevicePrimaryCtxRetain, 7000, PrimaryCtxRetain),
    SIM_ENTRY(cuDevicePrimaryCtxRelease, 11000, PrimaryCtxRelease),
    SIM_ENTRY(cuCtxSetCurrent, 4000, CtxSetCurrent),
    SIM_ENTRY(cuCtxGetCurrent, 4000, CtxGetCurrent),
    SIM_ENTRY(cuCtxPushCurrent, 4000, CtxPushCurrent),
    SIM_ENTRY(cuCtxPopCurrent, 4000, CtxPopCurrent),
    SIM_ENTRY(cuCtxGetDevice, 2000, CtxGetDevice),
    SIM_ENTRY(cuCtxSynchronize, 2000, CtxSynchronize),
    SIM_ENTRY(cuCtxGetStreamPriorityRange, 5050, CtxGetStreamPriorityRange),
    SIM_ENTRY(cuCtxEnablePeerAccess, 4000, CtxEnablePeerAccess),
    SIM_ENTRY(cuCtxDisablePeerAccess, 4000, CtxDisablePeerAccess),
    SIM_ENTRY(cuMemGetInfo, 3020, MemGetInfo),
    SIM_ENTRY(cuMemAlloc, 3020, MemAlloc),
    SIM_ENTRY(cuMemFree, 3020, MemFree),
    SIM_ENTRY(cuMemHostAlloc, 2020, MemHostAlloc),
    SIM_ENTRY(cuMemFreeHost, 2000, MemFreeHost),
    SIM_ENTRY(cuMemHostGetDevicePointer, 3020, MemHostGetDevicePointer),
    SIM_ENTRY(cuPointerGetAttribute, 4000, PointerGetAttribute),
    SIM_ENTRY(cuStreamCreate, 2000, StreamCreate),
    SIM_ENTRY(cuStreamCreateWithPriority, 5050, StreamCreateWithPriority),
    SIM_ENTRY(cuStreamDestroy, 4000, StreamDestroy),
    SIM_ENTRY(cuStreamSynchronize, 2000, StreamSynchronize),
    SIM_ENTRY(cuStreamQuery, 2000, StreamQuery),
    SIM_ENTRY(cuStreamWaitEvent, 3020, StreamWaitEvent),
    SIM_ENTRY(cuLaunchHostFunc, 10000, LaunchHostFunc),
    SIM_ENTRY(cuEventCreate, 2000, EventCreate),
    SIM_ENTRY(cuEventDestroy, 4000, EventDestroy),
    SIM_ENTRY(cuEventRecord, 2000, EventRecord),
    SIM_ENTRY(cuEventQuery, 2000, EventQuery),
    SIM_ENTRY(cuEventSynchronize, 2000, EventSynchronize),
    SIM_ENTRY(cuMemcpyHtoDAsync, 3020, MemcpyHtoDAsync),
    SIM_ENTRY(cuMemcpyDtoHAsync, 3020, MemcpyDtoHAsync),
    SIM_ENTRY(cuMemcpyDtoDAsync, 3020, MemcpyDtoDAsync),
    SIM_ENTRY(cuMemcpyPeerAsync, 4000, MemcpyPeerAsync),
    SIM_ENTRY(cuMemsetD8Async, 3020, MemsetD8Async),
    SIM_ENTRY(cuMemsetD32Async, 3020, MemsetD32Async),
    SIM_ENTRY(cuModuleLoadData, 2000, ModuleLoadData),
    SIM_ENTRY(cuModuleUnload, 2000, ModuleUnload),
    SIM_ENTRY(cuModuleGetFunction, 2000, ModuleGetFunction),
    SIM_ENTRY(cuLaunchKernel, 4000, LaunchKernel),
    SIM_ENTRY(cuGetErrorName, 6000, GetErrorName),
    SIM_ENTRY(cuGetErrorString, 6000, GetErrorString),
    SIM_ENTRY(cuMemAddressReserve, 10020, MemAddressReserve),
    SIM_ENTRY(cuMemAddressFree, 10020, MemAddressFree),
    SIM_ENTRY(cuMemCreate, 10020, MemCreate),
    SIM_ENTRY(cuMemRelease, 10020, MemRelease),
    SIM_ENTRY(cuMemMap, 10020, MemMap),
    SIM_ENTRY(cuMemUnmap, 10020, MemUnmap),
    SIM_ENTRY(cuMemSetAccess, 10020, MemSetAccess),
    SIM_ENTRY(cuMemGetAllocationGranularity, 10020, MemGetAllocationGranularity),
    SIM_ENTRY(cuDeviceGetDevResource, 12040, DeviceGetDevResource),
    SIM_ENTRY(cuDevSmResourceSplitByCount, 12040, DevSmResourceSplitByCount),
    SIM_ENTRY(cuDevResourceGenerateDesc, 12040, DevResourceGenerateDesc),
    SIM_ENTRY(cuGreenCtxCreate, 12040, GreenCtxCreate),
    SIM_ENTRY(cuGreenCtxDestroy, 12040, GreenCtxDestroy),
    SIM_ENTRY(cuCtxFromGreenCtx, 12040, CtxFromGreenCtx),
    SIM_ENTRY(cuGreenCtxGetDevResource, 12040, GreenCtxGetDevResource),
    SIM_ENTRY(cuGreenCtxStreamCreate, 12050, GreenCtxStreamCreate),
    SIM_ENTRY(cuMemPoolCreate, 11020, MemPoolCreate),
    SIM_ENTRY(cuMemPoolDestroy, 11020, MemPoolDestroy),
    SIM_ENTRY(cuMemAllocFromPoolAsync, 11020, MemAllocFromPoolAsync),
    SIM_ENTRY(cuMemFreeAsync, 11020, MemFreeAsync),
    SIM_ENTRY(cuMemPoolTrimTo, 11020, MemPoolTrimTo),
    SIM_ENTRY(cuMemPoolSetAttribute, 11020, MemPoolSetAttribute),
    SIM_ENTRY(cuMemPoolGetAttribute, 11020, MemPoolGetAttribute),
};
#undef SIM_ENTRY

bool IsPoolEntryPoint(const char* symbol) {
  return std::strncmp(symbol, "cuMemPool", 9) == 0 ||
         std::strcmp(symbol, "cuMemAllocFromPoolAsync") == 0 ||
         std::strcmp(symbol, "cuMemFreeAsync") == 0;
}

}  // namespace

// ---- cudasim.h ------------------------------------------------------------------------------

CUresult Enqueue(CUstream stream, std::vector<Access> accesses, Work work, const char* what) {
  if (t_in_callback) return CUDA_ERROR_NOT_PERMITTED;
  if (!S().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  std::lock_guard<std::mutex> l(S().mu);
  Ctx* c = nullptr;
  if (CUresult r = CurrentChecked(&c); r != CUDA_SUCCESS) return r;
  return EnqueueWork(stream, std::move(accesses), std::move(work),
                     Intern(what != nullptr ? what : "library work"));
}

CUresult CurrentDevice(int* device) {
  if (t_in_callback) return CUDA_ERROR_NOT_PERMITTED;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> l(S().mu);
  Ctx* c = nullptr;
  if (CUresult r = CurrentChecked(&c, false); r != CUDA_SUCCESS) return r;
  *device = c->device;
  return CUDA_SUCCESS;
}

CUresult StreamDevice(CUstream stream, int* device) {
  if (t_in_callback) return CUDA_ERROR_NOT_PERMITTED;
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> l(S().mu);
  Stream* st = nullptr;
  if (CUresult r = ResolveStream(stream, &st, false); r != CUDA_SUCCESS) return r;
  *device = st->ctx->device;
  return CUDA_SUCCESS;
}

CUresult ChargeDeviceMemory(int device, uint64_t bytes, const char* what) {
  if (t_in_callback) return CUDA_ERROR_NOT_PERMITTED;
  if (!ValidDevice(device)) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard<std::mutex> l(S().mu);
  CUresult r = Charge(device, bytes);
  Tracef("charge %llu bytes on device %d for %s -> %d", static_cast<unsigned long long>(bytes),
         device, what != nullptr ? what : "?", r);
  return r;
}

void ReleaseDeviceMemory(int device, uint64_t bytes) {
  if (!ValidDevice(device)) return;
  std::lock_guard<std::mutex> l(S().mu);
  Uncharge(device, bytes);
}

bool InHostCallback() { return t_in_callback; }

ProfileInfo Profile() {
  State& s = S();
  return ProfileInfo{s.profile, s.devices, s.sm_count, s.devices > 0 ? s.device[0].capacity : 0};
}

void Trace(const std::string& line) {
  std::lock_guard<std::mutex> l(S().mu);
  Tracef("%s", line.c_str());
}

}  // namespace vgpu::cudasim

// ---- exported C symbols ---------------------------------------------------------------------

extern "C" {

VGPU_CUDASIM_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version,
                                                 cuuint64_t flags,
                                                 CUdriverProcAddressQueryResult* status) {
  using namespace vgpu::cudasim;
  (void)flags;
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const bool hide_pools = NoPools() && IsPoolEntryPoint(symbol);
  const int driver_version = DriverVersion();
  for (const Entry& e : kEntries) {
    if (std::strcmp(e.name, symbol) != 0) continue;
    // Entry points newer than the pretended driver are absent.
    if (hide_pools || e.version > driver_version) break;
    if (cuda_version < e.version) {
      *pfn = nullptr;
      if (status != nullptr) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
      return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = e.fn;
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  *pfn = nullptr;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}

// Test hooks. A counter by name (0 when never counted): allocs, launches, "kernels_on_sms:N"
// (kernels run in a context of N SMs), last_kernel_sms, peer_copies, peer_enables,
// map_calls, mapped_bytes, unmap_calls, set_access_calls, races, illegal_addresses,
// event_records, pool_reuses, modules_loaded, streams_created, contexts_created,
// contexts_destroyed, green_contexts_created; and computed ones: contexts_alive,
// streams_alive, pools_alive, pool_reserved_bytes, device_used_bytes:N, physical_handles.
VGPU_CUDASIM_EXPORT unsigned long long vgpu_cudasim_counter(const char* name) {
  using namespace vgpu::cudasim;
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  const std::string n = name;
  if (n == "contexts_alive") {
    uint64_t alive = 0;
    for (const void* c : s.ctxs) alive += static_cast<const Ctx*>(c)->alive ? 1 : 0;
    return alive;
  }
  if (n == "streams_alive") {
    uint64_t alive = 0;
    for (const void* st : s.streams) alive += static_cast<const Stream*>(st)->alive ? 1 : 0;
    return alive;
  }
  if (n == "pools_alive") return s.live_pools.size();
  if (n == "pool_reserved_bytes") {
    uint64_t r = 0;
    for (const Pool* p : s.live_pools) r += p->reserved;
    return r;
  }
  if (n == "physical_handles") return s.physical.size();
  if (n.rfind("device_used_bytes:", 0) == 0) {
    const int d = std::atoi(n.c_str() + 18);
    return ValidDevice(d) ? s.device[d].used : 0;
  }
  auto it = s.counters.find(n);
  return it == s.counters.end() ? 0 : it->second;
}

// The calling thread's current-context stack depth.
VGPU_CUDASIM_EXPORT int vgpu_cudasim_context_stack_depth() {
  return static_cast<int>(vgpu::cudasim::t_stack.size());
}

}  // extern "C"
