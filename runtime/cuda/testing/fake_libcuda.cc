// A fake CUDA driver for tests on machines without a GPU: a shared library exporting
// cuGetProcAddress_v2 that hands out host-memory implementations of the Driver API entry points
// the cuda platform uses. "Device" memory is malloc'ed host memory, every async call completes
// before it returns, and cuLaunchKernel runs a host emulation of the kernels in
// runtime/cuda/kernels.cu, so the platform's own code (discovery, bookkeeping, error mapping,
// kernel parameter packing, the bad-label flag) runs for real. Green contexts and VMM are
// absent, as on an old driver. Stream-ordered memory pools (cuMemPoolCreate, ...) are
// bookkeeping over host memory: freed blocks are cached per pool and reused, and count against
// the device's capacity until trimmed. Built by tests/cuda.cmake; tests point
// VGPU_CUDA_DRIVER_LIBRARY at it.
//
// Configuration: VGPU_FAKE_CUDA_DEVICES (default 2), VGPU_FAKE_CUDA_BYTES per device
// (default 256 MiB), VGPU_FAKE_CUDA_NO_POOLS=1 (when the driver is loaded: no pool entry
// points, as on a driver older than 11.2). Thread safety: one mutex around all state.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace {

struct Device {
  uint64_t capacity = 0;
  uint64_t used = 0;
};

struct Pool {
  int device = 0;
  uint64_t reserved = 0;  // live + cached, counted in the device's `used`
  uint64_t used = 0;
  uint64_t release_threshold = 0;
  std::multimap<size_t, CUdeviceptr> cached;  // size -> block
  std::map<CUdeviceptr, size_t> live;
};

struct State {
  std::mutex mu;
  std::set<Pool*> pools;
  std::map<CUdeviceptr, std::pair<int, size_t>> pool_blocks;  // every pool block: (device, size)
  int devices = 2;
  Device device[8];
  std::map<CUdeviceptr, std::pair<int, size_t>> allocations;  // ptr -> (device, bytes)
  std::set<void*> host_allocations;
  int peer_copies = 0;
  int launches = 0;
};

State& S() {
  static State* s = [] {
    auto* st = new State();
    if (const char* e = std::getenv("VGPU_FAKE_CUDA_DEVICES")) st->devices = std::atoi(e);
    st->devices = std::clamp(st->devices, 0, 8);
    uint64_t bytes = uint64_t{256} << 20;
    if (const char* e = std::getenv("VGPU_FAKE_CUDA_BYTES")) bytes = std::strtoull(e, nullptr, 10);
    for (Device& d : st->device) d.capacity = bytes;
    return st;
  }();
  return *s;
}

thread_local CUcontext g_current = nullptr;
// Primary context handles are just tagged numbers; device = handle - 1.
CUcontext CtxOf(CUdevice d) { return reinterpret_cast<CUcontext>(uintptr_t(d) + 1); }
int DeviceOfCurrent() { return static_cast<int>(reinterpret_cast<uintptr_t>(g_current)) - 1; }
bool ValidDevice(CUdevice d) { return d >= 0 && d < S().devices; }

CUresult CUDAAPI Init(unsigned int) {
  return S().devices > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}
CUresult CUDAAPI DriverGetVersion(int* v) {
  *v = 13000;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI DeviceGetCount(int* n) {
  *n = S().devices;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI DeviceGet(CUdevice* d, int i) {
  if (i < 0 || i >= S().devices) return CUDA_ERROR_INVALID_DEVICE;
  *d = i;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI DeviceGetName(char* name, int len, CUdevice d) {
  if (!ValidDevice(d)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, len, "Fake GPU %d", d);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI DeviceGetUuid(CUuuid* uuid, CUdevice d) {
  if (!ValidDevice(d)) return CUDA_ERROR_INVALID_DEVICE;
  for (int i = 0; i < 16; ++i) uuid->bytes[i] = static_cast<char>(0x10 * d + i);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI DeviceGetPCIBusId(char* bus, int len, CUdevice d) {
  if (!ValidDevice(d)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(bus, len, "0000:%02x:00.0", 0x10 + d);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI DeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice d) {
  if (!ValidDevice(d)) return CUDA_ERROR_INVALID_DEVICE;
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *v = 132;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *v = 9;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *v = 0;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
      *v = 1;
      return CUDA_SUCCESS;
    default:
      *v = 0;
      return CUDA_SUCCESS;
  }
}
CUresult CUDAAPI DeviceTotalMem(size_t* bytes, CUdevice d) {
  if (!ValidDevice(d)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = S().device[d].capacity;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI PrimaryCtxRetain(CUcontext* ctx, CUdevice d) {
  if (!ValidDevice(d)) return CUDA_ERROR_INVALID_DEVICE;
  *ctx = CtxOf(d);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI PrimaryCtxRelease(CUdevice) { return CUDA_SUCCESS; }
CUresult CUDAAPI CtxSetCurrent(CUcontext c) {
  g_current = c;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI CtxGetCurrent(CUcontext* c) {
  *c = g_current;
  return CUDA_SUCCESS;
}
// A per-thread stack under the current context, as the driver keeps one.
thread_local std::vector<CUcontext> g_stack;
CUresult CUDAAPI CtxPushCurrent(CUcontext c) {
  g_stack.push_back(g_current);
  g_current = c;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI CtxPopCurrent(CUcontext* c) {
  if (g_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (c != nullptr) *c = g_current;
  g_current = g_stack.back();
  g_stack.pop_back();
  return CUDA_SUCCESS;
}
CUresult CUDAAPI CtxEnablePeerAccess(CUcontext, unsigned int) { return CUDA_SUCCESS; }
CUresult CUDAAPI CtxDisablePeerAccess(CUcontext) { return CUDA_SUCCESS; }
CUresult CUDAAPI StreamQuery(CUstream) { return CUDA_SUCCESS; }
CUresult CUDAAPI CtxGetStreamPriorityRange(int* least, int* greatest) {
  if (g_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *least = 0;
  *greatest = -5;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemGetInfo(size_t* free_bytes, size_t* total) {
  if (g_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard<std::mutex> l(S().mu);
  const Device& d = S().device[DeviceOfCurrent()];
  *free_bytes = d.capacity - d.used;
  *total = d.capacity;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemAlloc(CUdeviceptr* p, size_t bytes) {
  if (g_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> l(S().mu);
  int dev = DeviceOfCurrent();
  Device& d = S().device[dev];
  if (d.used + bytes > d.capacity) return CUDA_ERROR_OUT_OF_MEMORY;
  void* mem = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (mem == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  d.used += bytes;
  *p = reinterpret_cast<CUdeviceptr>(mem);
  S().allocations[*p] = {dev, bytes};
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemFree(CUdeviceptr p) {
  std::lock_guard<std::mutex> l(S().mu);
  auto it = S().allocations.find(p);
  if (it == S().allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  S().device[it->second.first].used -= it->second.second;
  S().allocations.erase(it);
  std::free(reinterpret_cast<void*>(p));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemHostAlloc(void** p, size_t bytes, unsigned int) {
  *p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  std::lock_guard<std::mutex> l(S().mu);
  S().host_allocations.insert(*p);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemFreeHost(void* p) {
  std::lock_guard<std::mutex> l(S().mu);
  if (S().host_allocations.erase(p) == 0) return CUDA_ERROR_INVALID_VALUE;
  std::free(p);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemHostGetDevicePointer(CUdeviceptr* d, void* p, unsigned int) {
  *d = reinterpret_cast<CUdeviceptr>(p);  // unified addressing
  return CUDA_SUCCESS;
}
CUresult CUDAAPI PointerGetAttribute(void* data, CUpointer_attribute a, CUdeviceptr p) {
  if (a != CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) return CUDA_ERROR_NOT_SUPPORTED;
  std::lock_guard<std::mutex> l(S().mu);
  for (const auto* m : {&S().allocations, &S().pool_blocks}) {
    auto it = m->upper_bound(p);
    if (it == m->begin()) continue;
    --it;
    if (p >= it->first + it->second.second) continue;
    *static_cast<int*>(data) = it->second.first;
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

// ---- stream-ordered memory pools ------------------------------------------------------------

// Requires S().mu.
void ReleaseCached(Pool* pool, uint64_t keep) {
  while (pool->reserved > keep && !pool->cached.empty()) {
    auto largest = std::prev(pool->cached.end());
    S().device[pool->device].used -= largest->first;
    pool->reserved -= largest->first;
    S().pool_blocks.erase(largest->second);
    std::free(reinterpret_cast<void*>(largest->second));
    pool->cached.erase(largest);
  }
}
Pool* FindPool(CUmemoryPool handle) {
  auto* pool = reinterpret_cast<Pool*>(handle);
  return S().pools.count(pool) != 0 ? pool : nullptr;
}
CUresult CUDAAPI MemPoolCreate(CUmemoryPool* out, const CUmemPoolProps* props) {
  if (props == nullptr || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || !ValidDevice(props->location.id)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::lock_guard<std::mutex> l(S().mu);
  auto* pool = new Pool();
  pool->device = props->location.id;
  S().pools.insert(pool);
  *out = reinterpret_cast<CUmemoryPool>(pool);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemPoolDestroy(CUmemoryPool handle) {
  std::lock_guard<std::mutex> l(S().mu);
  Pool* pool = FindPool(handle);
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (auto& [p, size] : pool->live) pool->cached.emplace(size, p);  // released at once here
  pool->live.clear();
  ReleaseCached(pool, 0);
  S().pools.erase(pool);
  delete pool;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemAllocFromPoolAsync(CUdeviceptr* p, size_t bytes, CUmemoryPool handle,
                                       CUstream) {
  if (g_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> l(S().mu);
  Pool* pool = FindPool(handle);
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const size_t size = (bytes + 255) / 256 * 256;
  auto it = pool->cached.lower_bound(size);
  if (it != pool->cached.end() && it->first / 2 <= size) {
    *p = it->second;
    pool->live[*p] = it->first;
    pool->used += it->first;
    pool->cached.erase(it);
    return CUDA_SUCCESS;
  }
  Device& d = S().device[pool->device];
  if (d.used + size > d.capacity) return CUDA_ERROR_OUT_OF_MEMORY;
  void* mem = std::aligned_alloc(256, size);
  if (mem == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  d.used += size;
  *p = reinterpret_cast<CUdeviceptr>(mem);
  pool->reserved += size;
  pool->used += size;
  pool->live[*p] = size;
  S().pool_blocks[*p] = {pool->device, size};
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemFreeAsync(CUdeviceptr p, CUstream) {
  std::lock_guard<std::mutex> l(S().mu);
  for (Pool* pool : S().pools) {
    auto it = pool->live.find(p);
    if (it == pool->live.end()) continue;
    pool->used -= it->second;
    pool->cached.emplace(it->second, p);  // streams are synchronous: reusable at once
    pool->live.erase(it);
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}
CUresult CUDAAPI MemPoolTrimTo(CUmemoryPool handle, size_t keep) {
  std::lock_guard<std::mutex> l(S().mu);
  Pool* pool = FindPool(handle);
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ReleaseCached(pool, keep);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemPoolSetAttribute(CUmemoryPool handle, CUmemPool_attribute attr, void* value) {
  std::lock_guard<std::mutex> l(S().mu);
  Pool* pool = FindPool(handle);
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (attr != CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) return CUDA_ERROR_NOT_SUPPORTED;
  pool->release_threshold = *static_cast<cuuint64_t*>(value);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemPoolGetAttribute(CUmemoryPool handle, CUmemPool_attribute attr, void* value) {
  std::lock_guard<std::mutex> l(S().mu);
  Pool* pool = FindPool(handle);
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* out = static_cast<cuuint64_t*>(value);
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      *out = pool->release_threshold;
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
CUstream NewHandle() {
  static std::atomic<uintptr_t> next{0x100000};
  return reinterpret_cast<CUstream>(next.fetch_add(16));
}
CUresult CUDAAPI StreamCreateWithPriority(CUstream* s, unsigned int, int) {
  if (g_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *s = NewHandle();
  return CUDA_SUCCESS;
}
CUresult CUDAAPI StreamDestroy(CUstream) { return CUDA_SUCCESS; }
CUresult CUDAAPI StreamSynchronize(CUstream) { return CUDA_SUCCESS; }
CUresult CUDAAPI StreamWaitEvent(CUstream, CUevent, unsigned int) { return CUDA_SUCCESS; }
CUresult CUDAAPI LaunchHostFunc(CUstream, CUhostFn fn, void* data) {
  fn(data);  // everything before it has completed already
  return CUDA_SUCCESS;
}
CUresult CUDAAPI EventCreate(CUevent* e, unsigned int) {
  *e = reinterpret_cast<CUevent>(NewHandle());
  return CUDA_SUCCESS;
}
CUresult CUDAAPI EventDestroy(CUevent) { return CUDA_SUCCESS; }
CUresult CUDAAPI EventRecord(CUevent, CUstream) { return CUDA_SUCCESS; }
CUresult CUDAAPI EventQuery(CUevent) { return CUDA_SUCCESS; }
CUresult CUDAAPI EventSynchronize(CUevent) { return CUDA_SUCCESS; }
CUresult CUDAAPI MemcpyHtoDAsync(CUdeviceptr d, const void* s, size_t n, CUstream) {
  std::memmove(reinterpret_cast<void*>(d), s, n);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemcpyDtoHAsync(void* d, CUdeviceptr s, size_t n, CUstream) {
  std::memmove(d, reinterpret_cast<void*>(s), n);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemcpyDtoDAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream) {
  std::memmove(reinterpret_cast<void*>(d), reinterpret_cast<void*>(s), n);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemcpyPeerAsync(CUdeviceptr d, CUcontext dc, CUdeviceptr s, CUcontext sc, size_t n,
                                 CUstream) {
  if (dc == nullptr || sc == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  std::memmove(reinterpret_cast<void*>(d), reinterpret_cast<void*>(s), n);
  std::lock_guard<std::mutex> l(S().mu);
  ++S().peer_copies;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream) {
  std::memset(reinterpret_cast<void*>(d), v, n);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI MemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream) {
  std::fill_n(reinterpret_cast<unsigned int*>(d), n, v);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI DeviceCanAccessPeer(int* can, CUdevice, CUdevice) {
  *can = 1;
  return CUDA_SUCCESS;
}

// ---- modules and kernels --------------------------------------------------------------------

struct FakeFunction {
  std::string name;
};
struct FakeModule {
  std::map<std::string, FakeFunction> functions;
};

CUresult CUDAAPI ModuleLoadData(CUmodule* m, const void* image) {
  uint32_t magic = 0;
  std::memcpy(&magic, image, 4);
  if (magic != 0xBA55ED50u) return CUDA_ERROR_INVALID_IMAGE;
  *m = reinterpret_cast<CUmodule>(new FakeModule());
  return CUDA_SUCCESS;
}
CUresult CUDAAPI ModuleUnload(CUmodule m) {
  delete reinterpret_cast<FakeModule*>(m);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI ModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  static const std::set<std::string> kKnown = {
      "vgpu_sum_n", "vgpu_sum_n_vec4", "vgpu_fill",         "vgpu_bias_add",   "vgpu_bias_grad",
      "vgpu_relu",  "vgpu_relu_grad",  "vgpu_softmax_xent", "vgpu_sgd_update", "vgpu_adam_update"};
  if (kKnown.count(name) == 0) return CUDA_ERROR_NOT_FOUND;
  auto* mod = reinterpret_cast<FakeModule*>(m);
  FakeFunction& fn = mod->functions[name];
  fn.name = name;
  *f = reinterpret_cast<CUfunction>(&fn);
  return CUDA_SUCCESS;
}

struct SumArgs {
  const float* in[16];
  int n;
};

template <typename T>
T Arg(void** params, int i) {
  T v;
  std::memcpy(&v, params[i], sizeof(T));
  return v;
}

// Host versions of runtime/cuda/kernels.cu, reading the parameters exactly as the real kernels
// declare them, so a packing mistake in the launcher shows up as a wrong result.
CUresult CUDAAPI LaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                              unsigned by, unsigned bz, unsigned shmem, CUstream, void** p,
                              void** extra) {
  if (g_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (gx == 0 || bx == 0 || gy != 1 || gz != 1 || bz != 1 || bx * by > 1024 || extra != nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  {
    std::lock_guard<std::mutex> l(S().mu);
    ++S().launches;
  }
  const std::string& name = reinterpret_cast<FakeFunction*>(f)->name;
  using u64 = unsigned long long;
  if (name == "vgpu_sum_n" || name == "vgpu_sum_n_vec4") {
    auto a = Arg<SumArgs>(p, 0);
    auto out = Arg<float*>(p, 1);
    auto n = Arg<u64>(p, 2);
    auto scale = Arg<float>(p, 3);
    if (name == "vgpu_sum_n_vec4") {
      for (int j = 0; j < a.n; ++j) {
        if (reinterpret_cast<uintptr_t>(a.in[j]) % 16 != 0) return CUDA_ERROR_MISALIGNED_ADDRESS;
      }
      if (reinterpret_cast<uintptr_t>(out) % 16 != 0) return CUDA_ERROR_MISALIGNED_ADDRESS;
    }
    for (u64 i = 0; i < n; ++i) {
      float acc = a.in[0][i];
      for (int j = 1; j < a.n; ++j) acc += a.in[j][i];
      out[i] = acc * scale;
    }
  } else if (name == "vgpu_fill") {
    std::fill_n(Arg<float*>(p, 0), Arg<u64>(p, 1), Arg<float>(p, 2));
  } else if (name == "vgpu_bias_add") {
    int rows = Arg<int>(p, 0), cols = Arg<int>(p, 1);
    auto bias = Arg<const float*>(p, 2);
    auto y = Arg<float*>(p, 3);
    for (long i = 0; i < long(rows) * cols; ++i) y[i] += bias[i % cols];
  } else if (name == "vgpu_bias_grad") {
    if (bx != 32 || by != 8) return CUDA_ERROR_INVALID_VALUE;  // the kernel assumes (32, 8)
    int rows = Arg<int>(p, 0), cols = Arg<int>(p, 1);
    auto dy = Arg<const float*>(p, 2);
    auto db = Arg<float*>(p, 3);
    if (gx * 32 < unsigned(cols)) return CUDA_ERROR_INVALID_VALUE;  // too few blocks
    for (int c = 0; c < cols; ++c) {
      float s = 0;
      for (int r = 0; r < rows; ++r) s += dy[long(r) * cols + c];
      db[c] = s;
    }
  } else if (name == "vgpu_relu") {
    auto n = Arg<u64>(p, 0);
    auto x = Arg<const float*>(p, 1);
    auto y = Arg<float*>(p, 2);
    for (u64 i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0;
  } else if (name == "vgpu_relu_grad") {
    auto n = Arg<u64>(p, 0);
    auto y = Arg<const float*>(p, 1);
    auto dy = Arg<const float*>(p, 2);
    auto dx = Arg<float*>(p, 3);
    for (u64 i = 0; i < n; ++i) dx[i] = y[i] > 0 ? dy[i] : 0;
  } else if (name == "vgpu_softmax_xent") {
    int rows = Arg<int>(p, 0), cols = Arg<int>(p, 1);
    auto z = Arg<const float*>(p, 2);
    auto labels = Arg<const int*>(p, 3);
    auto scale = Arg<float>(p, 4);
    auto dl = Arg<float*>(p, 5);
    auto loss = Arg<float*>(p, 6);
    auto correct = Arg<int*>(p, 7);
    auto error = Arg<unsigned long long*>(p, 8);
    if (bx % 32 != 0) return CUDA_ERROR_INVALID_VALUE;  // one warp per row
    for (int r = 0; r < rows; ++r) {
      const float* row = z + long(r) * cols;
      int label = labels[r];
      if (label < 0 || label >= cols) {
        *error = (u64(r + 1) << 32) | unsigned(label);
        if (dl != nullptr) std::fill_n(dl + long(r) * cols, cols, 0.0f);
        continue;
      }
      int best = 0;
      for (int c = 1; c < cols; ++c) best = row[c] > row[best] ? c : best;
      float sum = 0;
      for (int c = 0; c < cols; ++c) sum += std::exp(row[c] - row[best]);
      *loss += std::log(sum) - (row[label] - row[best]);
      if (best == label) ++*correct;
      if (dl != nullptr) {
        for (int c = 0; c < cols; ++c) {
          dl[long(r) * cols + c] =
              scale * (std::exp(row[c] - row[best]) / sum - (c == label ? 1.0f : 0.0f));
        }
      }
    }
  } else if (name == "vgpu_sgd_update") {
    auto n = Arg<u64>(p, 0);
    auto lr = Arg<float>(p, 1);
    auto g = Arg<const float*>(p, 2);
    auto w = Arg<float*>(p, 3);
    for (u64 i = 0; i < n; ++i) w[i] -= lr * g[i];
  } else if (name == "vgpu_adam_update") {
    auto n = Arg<u64>(p, 0);
    float b1 = Arg<float>(p, 1), b2 = Arg<float>(p, 2), eps = Arg<float>(p, 3);
    float step_size = Arg<float>(p, 4), inv_sqrt_c2 = Arg<float>(p, 5);
    auto g = Arg<const float*>(p, 6);
    auto m = Arg<float*>(p, 7);
    auto v = Arg<float*>(p, 8);
    auto w = Arg<float*>(p, 9);
    for (u64 i = 0; i < n; ++i) {
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      w[i] -= step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_c2 + eps);
    }
  } else {
    return CUDA_ERROR_NOT_FOUND;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI GetErrorName(CUresult r, const char** s) {
  switch (r) {
    case CUDA_ERROR_OUT_OF_MEMORY:
      *s = "CUDA_ERROR_OUT_OF_MEMORY";
      return CUDA_SUCCESS;
    case CUDA_ERROR_INVALID_VALUE:
      *s = "CUDA_ERROR_INVALID_VALUE";
      return CUDA_SUCCESS;
    default:
      *s = nullptr;
      return CUDA_ERROR_INVALID_VALUE;
  }
}
CUresult CUDAAPI GetErrorString(CUresult r, const char** s) {
  *s = r == CUDA_ERROR_OUT_OF_MEMORY ? "out of memory (fake driver)" : "fake driver error";
  return CUDA_SUCCESS;
}
CUresult CUDAAPI NotSupported() { return CUDA_ERROR_NOT_SUPPORTED; }

struct Entry {
  const char* name;
  void* fn;
};

#define VGPU_FAKE(name, version, impl) \
  Entry { #name, reinterpret_cast < void*>(static_cast <PFN_##name##_v##version>(&impl)) }

const Entry kEntries[] = {
    VGPU_FAKE(cuInit, 2000, Init),
    VGPU_FAKE(cuDriverGetVersion, 2020, DriverGetVersion),
    VGPU_FAKE(cuDeviceGetCount, 2000, DeviceGetCount),
    VGPU_FAKE(cuDeviceGet, 2000, DeviceGet),
    VGPU_FAKE(cuDeviceGetName, 2000, DeviceGetName),
    VGPU_FAKE(cuDeviceGetUuid, 11040, DeviceGetUuid),
    VGPU_FAKE(cuDeviceGetPCIBusId, 4010, DeviceGetPCIBusId),
    VGPU_FAKE(cuDeviceGetAttribute, 2000, DeviceGetAttribute),
    VGPU_FAKE(cuDeviceTotalMem, 3020, DeviceTotalMem),
    VGPU_FAKE(cuDevicePrimaryCtxRetain, 7000, PrimaryCtxRetain),
    VGPU_FAKE(cuDevicePrimaryCtxRelease, 11000, PrimaryCtxRelease),
    VGPU_FAKE(cuCtxSetCurrent, 4000, CtxSetCurrent),
    VGPU_FAKE(cuCtxGetCurrent, 4000, CtxGetCurrent),
    VGPU_FAKE(cuCtxGetStreamPriorityRange, 5050, CtxGetStreamPriorityRange),
    VGPU_FAKE(cuCtxPushCurrent, 4000, CtxPushCurrent),
    VGPU_FAKE(cuCtxPopCurrent, 4000, CtxPopCurrent),
    VGPU_FAKE(cuCtxEnablePeerAccess, 4000, CtxEnablePeerAccess),
    VGPU_FAKE(cuCtxDisablePeerAccess, 4000, CtxDisablePeerAccess),
    VGPU_FAKE(cuStreamQuery, 2000, StreamQuery),
    VGPU_FAKE(cuMemGetInfo, 3020, MemGetInfo),
    VGPU_FAKE(cuMemAlloc, 3020, MemAlloc),
    VGPU_FAKE(cuMemFree, 3020, MemFree),
    VGPU_FAKE(cuMemHostAlloc, 2020, MemHostAlloc),
    VGPU_FAKE(cuMemFreeHost, 2000, MemFreeHost),
    VGPU_FAKE(cuMemHostGetDevicePointer, 3020, MemHostGetDevicePointer),
    VGPU_FAKE(cuPointerGetAttribute, 4000, PointerGetAttribute),
    VGPU_FAKE(cuStreamCreateWithPriority, 5050, StreamCreateWithPriority),
    VGPU_FAKE(cuStreamDestroy, 4000, StreamDestroy),
    VGPU_FAKE(cuStreamSynchronize, 2000, StreamSynchronize),
    VGPU_FAKE(cuStreamWaitEvent, 3020, StreamWaitEvent),
    VGPU_FAKE(cuLaunchHostFunc, 10000, LaunchHostFunc),
    VGPU_FAKE(cuEventCreate, 2000, EventCreate),
    VGPU_FAKE(cuEventDestroy, 4000, EventDestroy),
    VGPU_FAKE(cuEventRecord, 2000, EventRecord),
    VGPU_FAKE(cuEventQuery, 2000, EventQuery),
    VGPU_FAKE(cuEventSynchronize, 2000, EventSynchronize),
    VGPU_FAKE(cuMemcpyHtoDAsync, 3020, MemcpyHtoDAsync),
    VGPU_FAKE(cuMemcpyDtoHAsync, 3020, MemcpyDtoHAsync),
    VGPU_FAKE(cuMemcpyDtoDAsync, 3020, MemcpyDtoDAsync),
    VGPU_FAKE(cuMemcpyPeerAsync, 4000, MemcpyPeerAsync),
    VGPU_FAKE(cuMemsetD8Async, 3020, MemsetD8Async),
    VGPU_FAKE(cuMemsetD32Async, 3020, MemsetD32Async),
    VGPU_FAKE(cuDeviceCanAccessPeer, 4000, DeviceCanAccessPeer),
    VGPU_FAKE(cuModuleLoadData, 2000, ModuleLoadData),
    VGPU_FAKE(cuModuleUnload, 2000, ModuleUnload),
    VGPU_FAKE(cuModuleGetFunction, 2000, ModuleGetFunction),
    VGPU_FAKE(cuLaunchKernel, 4000, LaunchKernel),
    VGPU_FAKE(cuGetErrorName, 6000, GetErrorName),
    VGPU_FAKE(cuGetErrorString, 6000, GetErrorString),
    // VMM entry points exist but the device reports no VMM support (attribute 0).
    {"cuMemAddressReserve", reinterpret_cast<void*>(&NotSupported)},
    {"cuMemAddressFree", reinterpret_cast<void*>(&NotSupported)},
    {"cuMemCreate", reinterpret_cast<void*>(&NotSupported)},
    {"cuMemRelease", reinterpret_cast<void*>(&NotSupported)},
    {"cuMemMap", reinterpret_cast<void*>(&NotSupported)},
    {"cuMemUnmap", reinterpret_cast<void*>(&NotSupported)},
    {"cuMemSetAccess", reinterpret_cast<void*>(&NotSupported)},
    {"cuMemGetAllocationGranularity", reinterpret_cast<void*>(&NotSupported)},
    VGPU_FAKE(cuMemPoolCreate, 11020, MemPoolCreate),
    VGPU_FAKE(cuMemPoolDestroy, 11020, MemPoolDestroy),
    VGPU_FAKE(cuMemAllocFromPoolAsync, 11020, MemAllocFromPoolAsync),
    VGPU_FAKE(cuMemFreeAsync, 11020, MemFreeAsync),
    VGPU_FAKE(cuMemPoolTrimTo, 11020, MemPoolTrimTo),
    VGPU_FAKE(cuMemPoolSetAttribute, 11020, MemPoolSetAttribute),
    VGPU_FAKE(cuMemPoolGetAttribute, 11020, MemPoolGetAttribute),
};

bool IsPoolEntryPoint(const char* symbol) {
  return std::strncmp(symbol, "cuMemPool", 9) == 0 ||
         std::strcmp(symbol, "cuMemAllocFromPoolAsync") == 0 ||
         std::strcmp(symbol, "cuMemFreeAsync") == 0;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(
    const char* symbol, void** pfn, int, cuuint64_t, CUdriverProcAddressQueryResult* status) {
  const char* no_pools = std::getenv("VGPU_FAKE_CUDA_NO_POOLS");
  const bool hide =
      no_pools != nullptr && std::strcmp(no_pools, "1") == 0 && IsPoolEntryPoint(symbol);
  for (const Entry& e : kEntries) {
    if (!hide && std::strcmp(e.name, symbol) == 0) {
      *pfn = e.fn;
      if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
  }
  *pfn = nullptr;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}

// Counters for tests: {peer copies, kernel launches}.
__attribute__((visibility("default"))) void vgpu_fake_cuda_counters(int* peer_copies,
                                                                    int* launches) {
  std::lock_guard<std::mutex> l(S().mu);
  *peer_copies = S().peer_copies;
  *launches = S().launches;
}

// Pools alive, and the bytes all pools hold (reserved), for tests.
__attribute__((visibility("default"))) void vgpu_fake_cuda_pool_counters(int* pools,
                                                                         uint64_t* reserved) {
  std::lock_guard<std::mutex> l(S().mu);
  *pools = static_cast<int>(S().pools.size());
  *reserved = 0;
  for (const Pool* p : S().pools) *reserved += p->reserved;
}

}  // extern "C"
