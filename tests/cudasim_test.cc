// The CUDA simulator's Driver API library (tests/cudasim/driver.cc) against the rules it must
// enforce: asynchronous streams, events and waits, the race detector, the context stack,
// destroyed handles, callbacks, poison, illegal addresses, VMM, green contexts, stream-ordered
// pools, profiles and memory overheads. Each test loads its own copy of the library (a fresh
// simulator with its own settings), through cuGetProcAddress_v2 as the platform does.
// Labels: unit, cudasim.
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#if VGPU_HAVE_CUDA
#include <cuda.h>
#include <cudaTypedefs.h>
#endif

namespace {

#if VGPU_HAVE_CUDA

#define SIM_FUNCTIONS(X)              \
  X(cuInit, 2000)                     \
  X(cuDriverGetVersion, 2020)         \
  X(cuDeviceGetCount, 2000)           \
  X(cuDeviceGetName, 2000)            \
  X(cuDeviceGetAttribute, 2000)       \
  X(cuDeviceTotalMem, 3020)           \
  X(cuDevicePrimaryCtxRetain, 7000)   \
  X(cuDevicePrimaryCtxRelease, 11000) \
  X(cuCtxSetCurrent, 4000)            \
  X(cuCtxGetCurrent, 4000)            \
  X(cuCtxPushCurrent, 4000)           \
  X(cuCtxPopCurrent, 4000)            \
  X(cuMemGetInfo, 3020)               \
  X(cuMemAlloc, 3020)                 \
  X(cuMemFree, 3020)                  \
  X(cuMemHostAlloc, 2020)             \
  X(cuMemFreeHost, 2000)              \
  X(cuStreamCreate, 2000)             \
  X(cuStreamDestroy, 4000)            \
  X(cuStreamSynchronize, 2000)        \
  X(cuStreamQuery, 2000)              \
  X(cuStreamWaitEvent, 3020)          \
  X(cuLaunchHostFunc, 10000)          \
  X(cuEventCreate, 2000)              \
  X(cuEventDestroy, 4000)             \
  X(cuEventRecord, 2000)              \
  X(cuEventQuery, 2000)               \
  X(cuEventSynchronize, 2000)         \
  X(cuMemcpyHtoDAsync, 3020)          \
  X(cuMemcpyDtoHAsync, 3020)          \
  X(cuMemsetD32Async, 3020)           \
  X(cuModuleLoadData, 2000)           \
  X(cuModuleUnload, 2000)             \
  X(cuModuleGetFunction, 2000)        \
  X(cuLaunchKernel, 4000)             \
  X(cuGetErrorName, 6000)             \
  X(cuMemAddressReserve, 10020)       \
  X(cuMemAddressFree, 10020)          \
  X(cuMemCreate, 10020)               \
  X(cuMemRelease, 10020)              \
  X(cuMemMap, 10020)                  \
  X(cuMemUnmap, 10020)                \
  X(cuMemSetAccess, 10020)            \
  X(cuMemGetAllocationGranularity, 10020)

#define SIM_OPTIONAL(X)                 \
  X(cuDeviceGetDevResource, 12040)      \
  X(cuDevSmResourceSplitByCount, 12040) \
  X(cuDevResourceGenerateDesc, 12040)   \
  X(cuGreenCtxCreate, 12040)            \
  X(cuGreenCtxDestroy, 12040)           \
  X(cuCtxFromGreenCtx, 12040)           \
  X(cuGreenCtxStreamCreate, 12050)      \
  X(cuMemPoolCreate, 11020)             \
  X(cuMemPoolDestroy, 11020)            \
  X(cuMemAllocFromPoolAsync, 11020)     \
  X(cuMemFreeAsync, 11020)

// One simulator instance: a private copy of the library loaded with `env` set.
struct Sim {
#define SIM_DECLARE(name, version) PFN_##name##_v##version name = nullptr;
  SIM_FUNCTIONS(SIM_DECLARE)
  SIM_OPTIONAL(SIM_DECLARE)
#undef SIM_DECLARE
  void* handle = nullptr;
  unsigned long long (*counter)(const char*) = nullptr;
  bool (*in_host_callback)() = nullptr;

  unsigned long long Counter(const char* name) const { return counter(name); }
};

// Loads a fresh simulator. Copies are never unloaded: their stream threads live on.
Sim LoadSim(const std::map<std::string, std::string>& env = {}) {
  static std::atomic<int> n{0};
  const std::string copy = std::string(::testing::TempDir()) + "/cudasim_copy_" +
                           std::to_string(getpid()) + "_" + std::to_string(n++) + ".so";
  std::filesystem::copy_file(VGPU_CUDASIM_LIBCUDA, copy,
                             std::filesystem::copy_options::overwrite_existing);
  for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
  Sim sim;
  sim.handle = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
  EXPECT_NE(sim.handle, nullptr) << dlerror();
  std::filesystem::remove(copy);  // the loaded copy stays mapped; no file is left behind
  if (sim.handle == nullptr) return sim;
  auto get_proc =
      reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(sim.handle, "cuGetProcAddress_v2"));
  EXPECT_NE(get_proc, nullptr);
  CUdriverProcAddressQueryResult found;
#define SIM_LOAD(name, version)                                     \
  {                                                                 \
    void* fn = nullptr;                                             \
    if (get_proc(#name, &fn, version, 0, &found) == CUDA_SUCCESS) { \
      sim.name = reinterpret_cast<PFN_##name##_v##version>(fn);     \
    }                                                               \
  }
  SIM_FUNCTIONS(SIM_LOAD)
  SIM_OPTIONAL(SIM_LOAD)
#undef SIM_LOAD
  sim.counter = reinterpret_cast<unsigned long long (*)(const char*)>(
      dlsym(sim.handle, "vgpu_cudasim_counter"));
  sim.in_host_callback =
      reinterpret_cast<bool (*)()>(dlsym(sim.handle, "_ZN4vgpu7cudasim14InHostCallbackEv"));
  EXPECT_NE(sim.counter, nullptr);
  EXPECT_NE(sim.in_host_callback, nullptr);
  // Touch the state once so the settings are read while `env` is set.
  int version = 0;
  if (sim.cuDriverGetVersion != nullptr) sim.cuDriverGetVersion(&version);
  for (const auto& [k, v] : env) unsetenv(k.c_str());
  return sim;
}

// A host function that blocks its stream until Open().
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::thread::id ran_on;
  static void CUDA_CB Wait(void* self) {
    auto* g = static_cast<Gate*>(self);
    std::unique_lock<std::mutex> l(g->mu);
    g->ran_on = std::this_thread::get_id();
    g->cv.wait(l, [&] { return g->open; });
  }
  void Open() {
    std::lock_guard<std::mutex> l(mu);
    open = true;
    cv.notify_all();
  }
};

const uint32_t kFatbin[4] = {0xBA55ED50u, 0, 0, 0};

class CudasimTest : public ::testing::Test {
 protected:
  // Loads a simulator, initialises it and makes device 0's primary context current.
  void Start(const std::map<std::string, std::string>& env = {}) {
    sim_ = LoadSim(env);
    ASSERT_NE(sim_.cuInit, nullptr);
    ASSERT_EQ(sim_.cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(sim_.cuDevicePrimaryCtxRetain(&ctx_, 0), CUDA_SUCCESS);
    ASSERT_EQ(sim_.cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
  }
  CUstream NewStream(unsigned flags = CU_STREAM_NON_BLOCKING) {
    CUstream s = nullptr;
    EXPECT_EQ(sim_.cuStreamCreate(&s, flags), CUDA_SUCCESS);
    return s;
  }
  CUdeviceptr Alloc(size_t bytes) {
    CUdeviceptr p = 0;
    EXPECT_EQ(sim_.cuMemAlloc(&p, bytes), CUDA_SUCCESS);
    return p;
  }
  uint32_t* Pinned(size_t words) {
    void* p = nullptr;
    EXPECT_EQ(sim_.cuMemHostAlloc(&p, words * 4, 0), CUDA_SUCCESS);
    return static_cast<uint32_t*>(p);
  }
  std::vector<uint32_t> Read(CUdeviceptr p, size_t words, CUstream s) {
    std::vector<uint32_t> out(words);
    EXPECT_EQ(sim_.cuMemcpyDtoHAsync(out.data(), p, words * 4, s), CUDA_SUCCESS);
    EXPECT_EQ(sim_.cuStreamSynchronize(s), CUDA_SUCCESS);
    return out;
  }
  CUfunction Kernel(const char* name) {
    CUmodule m = nullptr;
    EXPECT_EQ(sim_.cuModuleLoadData(&m, kFatbin), CUDA_SUCCESS);
    CUfunction f = nullptr;
    EXPECT_EQ(sim_.cuModuleGetFunction(&f, m, name), CUDA_SUCCESS);
    return f;
  }
  CUresult Fill(CUfunction f, CUstream s, CUdeviceptr x, unsigned long long n, float v) {
    void* params[] = {&x, &n, &v};
    return sim_.cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, s, params, nullptr);
  }

  Sim sim_;
  CUcontext ctx_ = nullptr;
};

TEST_F(CudasimTest, StreamsRunOffTheCallersThreadAndQueryIsNotReadyWhilePending) {
  ASSERT_NO_FATAL_FAILURE(Start());
  CUstream s = NewStream();
  Gate gate;
  ASSERT_EQ(sim_.cuLaunchHostFunc(s, &Gate::Wait, &gate), CUDA_SUCCESS);
  CUdeviceptr x = Alloc(64);
  ASSERT_EQ(sim_.cuMemsetD32Async(x, 5, 16, s), CUDA_SUCCESS);
  CUevent e = nullptr;
  ASSERT_EQ(sim_.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  EXPECT_EQ(sim_.cuEventQuery(e), CUDA_SUCCESS);  // never recorded: complete
  ASSERT_EQ(sim_.cuEventRecord(e, s), CUDA_SUCCESS);
  EXPECT_EQ(sim_.cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(sim_.cuEventQuery(e), CUDA_ERROR_NOT_READY);
  gate.Open();
  EXPECT_EQ(sim_.cuEventSynchronize(e), CUDA_SUCCESS);
  EXPECT_EQ(sim_.cuEventQuery(e), CUDA_SUCCESS);
  EXPECT_EQ(sim_.cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(sim_.cuStreamQuery(s), CUDA_SUCCESS);
  EXPECT_NE(gate.ran_on, std::this_thread::get_id());
  EXPECT_EQ(Read(x, 16, s), std::vector<uint32_t>(16, 5));
}

TEST_F(CudasimTest, NewMemoryIsPoisonedAndDeviceAddressesAreNotHostMemory) {
  ASSERT_NO_FATAL_FAILURE(Start());
  CUstream s = NewStream();
  CUdeviceptr x = Alloc(1000);
  EXPECT_EQ(Read(x, 250, s), std::vector<uint32_t>(250, 0xFFFFFFFFu));
  // The device address is in a PROT_NONE mapping: host code dereferencing it would crash.
  std::ifstream maps("/proc/self/maps");
  std::string line, perms;
  bool found = false;
  while (std::getline(maps, line)) {
    unsigned long long lo = 0, hi = 0;
    char p[8] = {};
    if (std::sscanf(line.c_str(), "%llx-%llx %4s", &lo, &hi, p) == 3 && x >= lo && x < hi) {
      found = true;
      perms = p;
    }
  }
  EXPECT_TRUE(found);
  EXPECT_EQ(perms, "---p");
}

TEST_F(CudasimTest, MissingWaitIsDetectedAsARaceAndIsStickyLaunchFailed) {
  ASSERT_NO_FATAL_FAILURE(Start());
  CUstream a = NewStream(), b = NewStream();
  CUdeviceptr x = Alloc(64);
  uint32_t* host = Pinned(16);
  Gate gate;
  ASSERT_EQ(sim_.cuLaunchHostFunc(a, &Gate::Wait, &gate), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuMemsetD32Async(x, 1, 16, a), CUDA_SUCCESS);
  // b reads x with no wait on a: it runs first (a is gated) and the write then races with it.
  ASSERT_EQ(sim_.cuMemcpyDtoHAsync(host, x, 64, b), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuStreamSynchronize(b), CUDA_SUCCESS);
  gate.Open();
  EXPECT_EQ(sim_.cuStreamSynchronize(a), CUDA_ERROR_LAUNCH_FAILED);
  EXPECT_EQ(sim_.Counter("races"), 1u);
  // Sticky for the context.
  CUdeviceptr y = 0;
  EXPECT_EQ(sim_.cuMemAlloc(&y, 64), CUDA_ERROR_LAUNCH_FAILED);
  EXPECT_EQ(sim_.cuStreamSynchronize(b), CUDA_ERROR_LAUNCH_FAILED);
  // Releasing the primary context to zero resets it; the next one is clean.
  ASSERT_EQ(sim_.cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  CUcontext fresh = nullptr;
  ASSERT_EQ(sim_.cuDevicePrimaryCtxRetain(&fresh, 0), CUDA_SUCCESS);
  EXPECT_EQ(sim_.cuCtxSetCurrent(ctx_), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  ASSERT_EQ(sim_.cuCtxSetCurrent(fresh), CUDA_SUCCESS);
  EXPECT_EQ(sim_.cuMemAlloc(&y, 64), CUDA_SUCCESS);
}

TEST_F(CudasimTest, MissingWaitYieldsStaleDataWhenRacesOnlyWarn) {
  ASSERT_NO_FATAL_FAILURE(Start({{"VGPU_CUDASIM_RACES", "warn"}}));
  CUstream a = NewStream(), b = NewStream();
  CUdeviceptr x = Alloc(64);
  ASSERT_EQ(sim_.cuMemsetD32Async(x, 7, 16, a), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuStreamSynchronize(a), CUDA_SUCCESS);
  Gate gate;
  ASSERT_EQ(sim_.cuLaunchHostFunc(a, &Gate::Wait, &gate), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuMemsetD32Async(x, 1, 16, a), CUDA_SUCCESS);
  std::vector<uint32_t> got = Read(x, 16, b);  // pageable: returns after the copy ran
  gate.Open();
  ASSERT_EQ(sim_.cuStreamSynchronize(a), CUDA_SUCCESS);
  EXPECT_EQ(got, std::vector<uint32_t>(16, 7));  // stale: the write had not run yet
  EXPECT_EQ(sim_.Counter("races"), 1u);
}

TEST_F(CudasimTest, WaitEventOrdersStreamsOnTheCaptureAtTheTimeOfTheWait) {
  ASSERT_NO_FATAL_FAILURE(Start());
  CUstream a = NewStream(), b = NewStream();
  CUdeviceptr x = Alloc(64), y = Alloc(64);
  Gate first, second;
  CUevent e = nullptr;
  ASSERT_EQ(sim_.cuEventCreate(&e, 0), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuLaunchHostFunc(a, &Gate::Wait, &first), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuMemsetD32Async(x, 1, 16, a), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuEventRecord(e, a), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuStreamWaitEvent(b, e, 0), CUDA_SUCCESS);
  // Recorded again later: b's wait still refers to the first capture.
  ASSERT_EQ(sim_.cuLaunchHostFunc(a, &Gate::Wait, &second), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuMemsetD32Async(y, 2, 16, a), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuEventRecord(e, a), CUDA_SUCCESS);
  uint32_t* host = Pinned(16);
  ASSERT_EQ(sim_.cuMemcpyDtoHAsync(host, x, 64, b), CUDA_SUCCESS);
  EXPECT_EQ(sim_.cuStreamQuery(b), CUDA_ERROR_NOT_READY);  // held by the wait
  first.Open();
  ASSERT_EQ(sim_.cuStreamSynchronize(b), CUDA_SUCCESS);  // while `second` is still closed
  EXPECT_EQ(std::vector<uint32_t>(host, host + 16), std::vector<uint32_t>(16, 1));
  EXPECT_EQ(sim_.cuStreamQuery(a), CUDA_ERROR_NOT_READY);
  second.Open();
  ASSERT_EQ(sim_.cuStreamSynchronize(a), CUDA_SUCCESS);
  EXPECT_EQ(sim_.Counter("races"), 0u);
}

TEST_F(CudasimTest, PageableCopiesStageTheSourceAndWaitForTheResult) {
  ASSERT_NO_FATAL_FAILURE(Start());
  CUstream s = NewStream();
  CUdeviceptr x = Alloc(64);
  Gate gate;
  ASSERT_EQ(sim_.cuLaunchHostFunc(s, &Gate::Wait, &gate), CUDA_SUCCESS);
  std::vector<uint32_t> src(16, 3);
  ASSERT_EQ(sim_.cuMemcpyHtoDAsync(x, src.data(), 64, s), CUDA_SUCCESS);
  std::fill(src.begin(), src.end(), 4);  // after the call: not what the copy sees
  gate.Open();
  std::vector<uint32_t> out(16, 0);
  ASSERT_EQ(sim_.cuMemcpyDtoHAsync(out.data(), x, 64, s), CUDA_SUCCESS);
  EXPECT_EQ(out, std::vector<uint32_t>(16, 3));  // no synchronize needed for pageable memory
}

TEST_F(CudasimTest, LegacyDefaultStreamSynchronisesWithBlockingStreams) {
  ASSERT_NO_FATAL_FAILURE(Start());
  CUstream blocking = NewStream(0), non_blocking = NewStream();
  Gate gate;
  ASSERT_EQ(sim_.cuLaunchHostFunc(blocking, &Gate::Wait, &gate), CUDA_SUCCESS);
  CUdeviceptr x = Alloc(64);
  ASSERT_EQ(sim_.cuMemsetD32Async(x, 9, 16, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuMemsetD32Async(x, 9, 16, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  EXPECT_EQ(sim_.cuStreamQuery(CU_STREAM_LEGACY), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(sim_.cuStreamSynchronize(non_blocking), CUDA_SUCCESS);  // not held
  gate.Open();
  EXPECT_EQ(sim_.cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(sim_.cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  EXPECT_EQ(sim_.Counter("races"), 0u);
}

TEST_F(CudasimTest, ContextStackAndCallsWithoutAContext) {
  ASSERT_NO_FATAL_FAILURE(Start());
  CUcontext c1 = nullptr, got = nullptr;
  ASSERT_EQ(sim_.cuDevicePrimaryCtxRetain(&c1, 1), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuCtxPushCurrent(c1), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuCtxGetCurrent(&got), CUDA_SUCCESS);
  EXPECT_EQ(got, c1);
  ASSERT_EQ(sim_.cuCtxPopCurrent(&got), CUDA_SUCCESS);
  EXPECT_EQ(got, c1);
  ASSERT_EQ(sim_.cuCtxGetCurrent(&got), CUDA_SUCCESS);
  EXPECT_EQ(got, ctx_);                               // the caller's context is back
  ASSERT_EQ(sim_.cuCtxSetCurrent(c1), CUDA_SUCCESS);  // replaces the top
  ASSERT_EQ(sim_.cuCtxPopCurrent(&got), CUDA_SUCCESS);
  EXPECT_EQ(got, c1);
  ASSERT_EQ(sim_.cuCtxGetCurrent(&got), CUDA_SUCCESS);
  EXPECT_EQ(got, nullptr);
  EXPECT_EQ(sim_.cuCtxPopCurrent(&got), CUDA_ERROR_INVALID_CONTEXT);
  CUdeviceptr p = 0;
  EXPECT_EQ(sim_.cuMemAlloc(&p, 64), CUDA_ERROR_INVALID_CONTEXT);
  CUstream s = nullptr;
  EXPECT_EQ(sim_.cuStreamCreate(&s, 0), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(sim_.cuStreamSynchronize(nullptr), CUDA_ERROR_INVALID_CONTEXT);
  size_t free_bytes = 0, total = 0;
  EXPECT_EQ(sim_.cuMemGetInfo(&free_bytes, &total), CUDA_ERROR_INVALID_CONTEXT);
  // Each thread has its own stack.
  ASSERT_EQ(sim_.cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
  std::thread([&] {
    CUcontext other = reinterpret_cast<CUcontext>(1);
    EXPECT_EQ(sim_.cuCtxGetCurrent(&other), CUDA_SUCCESS);
    EXPECT_EQ(other, nullptr);
  }).join();
}

TEST_F(CudasimTest, DestroyedHandlesAreRefused) {
  ASSERT_NO_FATAL_FAILURE(Start());
  CUstream s = NewStream();
  ASSERT_EQ(sim_.cuStreamDestroy(s), CUDA_SUCCESS);
  EXPECT_EQ(sim_.cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(sim_.cuStreamDestroy(s), CUDA_ERROR_INVALID_HANDLE);
  CUevent e = nullptr;
  ASSERT_EQ(sim_.cuEventCreate(&e, 0), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuEventDestroy(e), CUDA_SUCCESS);
  EXPECT_EQ(sim_.cuEventQuery(e), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(sim_.cuStreamSynchronize(reinterpret_cast<CUstream>(0x1234)),
            CUDA_ERROR_INVALID_HANDLE);
  // An event and a stream of different contexts: cuEventRecord refuses, WaitEvent accepts.
  CUcontext c1 = nullptr;
  ASSERT_EQ(sim_.cuDevicePrimaryCtxRetain(&c1, 1), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuCtxPushCurrent(c1), CUDA_SUCCESS);
  CUevent e1 = nullptr;
  ASSERT_EQ(sim_.cuEventCreate(&e1, 0), CUDA_SUCCESS);
  CUstream s1 = NewStream();
  ASSERT_EQ(sim_.cuEventRecord(e1, s1), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuCtxPopCurrent(nullptr), CUDA_SUCCESS);
  CUstream s0 = NewStream();
  EXPECT_EQ(sim_.cuEventRecord(e1, s0), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(sim_.cuStreamWaitEvent(s0, e1, 0), CUDA_SUCCESS);
  EXPECT_EQ(sim_.cuStreamSynchronize(s0), CUDA_SUCCESS);
  // Handles of a context released to zero die with it.
  ASSERT_EQ(sim_.cuDevicePrimaryCtxRelease(1), CUDA_SUCCESS);
  EXPECT_EQ(sim_.cuEventQuery(e1), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  EXPECT_EQ(sim_.cuStreamSynchronize(s1), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(sim_.cuCtxPushCurrent(c1), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  EXPECT_EQ(sim_.cuDevicePrimaryCtxRelease(1), CUDA_ERROR_INVALID_CONTEXT);
}

struct CallbackProbe {
  Sim* sim;
  CUevent event;
  CUresult get_current = CUDA_SUCCESS, destroy = CUDA_SUCCESS, alloc = CUDA_SUCCESS;
  bool in_callback = false;
  static void CUDA_CB Run(void* self) {
    auto* p = static_cast<CallbackProbe*>(self);
    CUcontext c = nullptr;
    p->get_current = p->sim->cuCtxGetCurrent(&c);
    p->destroy = p->sim->cuEventDestroy(p->event);
    CUdeviceptr d = 0;
    p->alloc = p->sim->cuMemAlloc(&d, 64);
    p->in_callback = p->sim->in_host_callback();
  }
};

TEST_F(CudasimTest, CudaCallsFromHostCallbacksAreNotPermitted) {
  ASSERT_NO_FATAL_FAILURE(Start());
  CUstream s = NewStream();
  CallbackProbe probe{&sim_, nullptr};
  ASSERT_EQ(sim_.cuEventCreate(&probe.event, 0), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuLaunchHostFunc(s, &CallbackProbe::Run, &probe), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(probe.get_current, CUDA_ERROR_NOT_PERMITTED);
  EXPECT_EQ(probe.destroy, CUDA_ERROR_NOT_PERMITTED);
  EXPECT_EQ(probe.alloc, CUDA_ERROR_NOT_PERMITTED);
  EXPECT_TRUE(probe.in_callback);
  EXPECT_FALSE(sim_.in_host_callback());
  EXPECT_EQ(sim_.cuEventDestroy(probe.event), CUDA_SUCCESS);  // fine from the host
}

TEST_F(CudasimTest, IllegalAddressIsStickyForTheContext) {
  ASSERT_NO_FATAL_FAILURE(Start());
  CUstream s = NewStream();
  CUdeviceptr x = Alloc(64);
  ASSERT_EQ(sim_.cuMemsetD32Async(x, 1, 16, s), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuStreamSynchronize(s), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuMemsetD32Async(x + 64, 1, 1, s), CUDA_SUCCESS);  // one word past the end
  EXPECT_EQ(sim_.cuStreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(sim_.Counter("illegal_addresses"), 1u);
  CUdeviceptr y = 0;
  EXPECT_EQ(sim_.cuMemAlloc(&y, 64), CUDA_ERROR_ILLEGAL_ADDRESS);
  CUstream t = nullptr;
  EXPECT_EQ(sim_.cuStreamCreate(&t, 0), CUDA_ERROR_ILLEGAL_ADDRESS);
}

TEST_F(CudasimTest, FreedMemoryIsAnIllegalAddress) {
  ASSERT_NO_FATAL_FAILURE(Start());
  CUstream s = NewStream();
  CUdeviceptr x = Alloc(64);
  ASSERT_EQ(sim_.cuMemFree(x), CUDA_SUCCESS);
  EXPECT_EQ(sim_.cuMemFree(x), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(sim_.cuMemsetD32Async(x, 1, 16, s), CUDA_SUCCESS);
  EXPECT_EQ(sim_.cuStreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);
}

TEST_F(CudasimTest, VirtualMemoryFollowsTheDriversRules) {
  ASSERT_NO_FATAL_FAILURE(Start());
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t g = 0;
  ASSERT_EQ(sim_.cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_SUCCESS);
  ASSERT_EQ(g, size_t{2} << 20);
  CUdeviceptr va = 0;
  EXPECT_EQ(sim_.cuMemAddressReserve(&va, g + 4096, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(sim_.cuMemAddressReserve(&va, 4 * g, 0, 0, 0), CUDA_SUCCESS);
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(sim_.cuMemCreate(&h, g / 2, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(sim_.cuMemCreate(&h, 2 * g, &prop, 0), CUDA_SUCCESS);
  const auto maps = sim_.Counter("map_calls");
  EXPECT_EQ(sim_.cuMemMap(va + 4096, g, 0, h, 0), CUDA_ERROR_INVALID_VALUE);       // unaligned
  EXPECT_EQ(sim_.cuMemMap(va, g, g / 2, h, 0), CUDA_ERROR_INVALID_VALUE);          // offset
  EXPECT_EQ(sim_.cuMemMap(va + 3 * g, 2 * g, 0, h, 0), CUDA_ERROR_INVALID_VALUE);  // outside
  ASSERT_EQ(sim_.cuMemMap(va, 2 * g, 0, h, 0), CUDA_SUCCESS);  // two granules, one call
  EXPECT_EQ(sim_.cuMemMap(va + g, 2 * g, 0, h, 0), CUDA_ERROR_INVALID_VALUE);  // overlaps
  EXPECT_EQ(sim_.Counter("map_calls"), maps + 1);
  // A mapping covers the whole allocation (cuda.h: offset "currently must be zero"; a real
  // H200 answers NOT_SUPPORTED to an offset and to a part alike).
  CUdeviceptr va2 = 0;
  ASSERT_EQ(sim_.cuMemAddressReserve(&va2, 2 * g, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(sim_.cuMemMap(va2, g, g, h, 0), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(sim_.cuMemMap(va2, g, 0, h, 0), CUDA_ERROR_NOT_SUPPORTED);
  // The same physical memory mapped twice shows the same bytes.
  ASSERT_EQ(sim_.cuMemMap(va2, 2 * g, 0, h, 0), CUDA_SUCCESS);
  CUmemAccessDesc access = {};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  EXPECT_EQ(sim_.cuMemSetAccess(va, 3 * g, &access, 1), CUDA_ERROR_INVALID_VALUE);  // unmapped
  ASSERT_EQ(sim_.cuMemSetAccess(va, 2 * g, &access, 1), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuMemSetAccess(va2, 2 * g, &access, 1), CUDA_SUCCESS);
  CUstream s = NewStream();
  ASSERT_EQ(sim_.cuMemsetD32Async(va + g, 6, 4, s), CUDA_SUCCESS);
  EXPECT_EQ(Read(va2 + g, 4, s), std::vector<uint32_t>(4, 6));
  // Released while mapped: the memory stays until the last unmap.
  ASSERT_EQ(sim_.cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(sim_.cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(sim_.Counter("physical_handles"), 1u);
  ASSERT_EQ(sim_.cuMemUnmap(va2, 2 * g), CUDA_SUCCESS);
  EXPECT_EQ(Read(va + g, 4, s), std::vector<uint32_t>(4, 6));
  EXPECT_EQ(sim_.cuMemUnmap(va, g), CUDA_ERROR_INVALID_VALUE);            // part of a mapping
  EXPECT_EQ(sim_.cuMemAddressFree(va, 4 * g), CUDA_ERROR_INVALID_VALUE);  // still mapped
  ASSERT_EQ(sim_.cuMemUnmap(va, 2 * g), CUDA_SUCCESS);
  EXPECT_EQ(sim_.Counter("physical_handles"), 0u);
  EXPECT_EQ(sim_.Counter("unmap_calls"), 2u);
  ASSERT_EQ(sim_.cuMemAddressFree(va, 4 * g), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuMemAddressFree(va2, 2 * g), CUDA_SUCCESS);
  // Two whole mappings side by side: one cuMemSetAccess and one cuMemUnmap span both (as on
  // an H200).
  CUmemGenericAllocationHandle h1 = 0, h2 = 0;
  ASSERT_EQ(sim_.cuMemAddressReserve(&va, 2 * g, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuMemCreate(&h1, g, &prop, 0), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuMemCreate(&h2, g, &prop, 0), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuMemMap(va, g, 0, h1, 0), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuMemMap(va + g, g, 0, h2, 0), CUDA_SUCCESS);
  EXPECT_EQ(sim_.cuMemSetAccess(va, 2 * g, &access, 1), CUDA_SUCCESS);
  EXPECT_EQ(sim_.cuMemUnmap(va, 2 * g), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuMemRelease(h1), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuMemRelease(h2), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuMemAddressFree(va, 2 * g), CUDA_SUCCESS);
  // Mapped without cuMemSetAccess: an illegal address.
  ASSERT_EQ(sim_.cuMemAddressReserve(&va, 2 * g, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuMemCreate(&h, g, &prop, 0), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuMemMap(va, g, 0, h, 0), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuMemsetD32Async(va, 1, 4, s), CUDA_SUCCESS);
  EXPECT_EQ(sim_.cuStreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);
}

TEST_F(CudasimTest, GreenContextsSplitLikeComputeCapability90AndKernelsRecordTheirSms) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_NE(sim_.cuGreenCtxCreate, nullptr);
  CUdevResource whole = {};
  ASSERT_EQ(sim_.cuDeviceGetDevResource(0, &whole, CU_DEV_RESOURCE_TYPE_SM), CUDA_SUCCESS);
  EXPECT_EQ(whole.sm.smCount, 32u);
  EXPECT_EQ(whole.sm.minSmPartitionSize, 8u);
  EXPECT_EQ(whole.sm.smCoscheduledAlignment, 8u);
  unsigned n = 0;
  ASSERT_EQ(sim_.cuDevSmResourceSplitByCount(nullptr, &n, &whole, nullptr, 0, 5), CUDA_SUCCESS);
  EXPECT_EQ(n, 4u);  // 5 rounds up to 8
  CUdevResource groups[5] = {}, rest = {};
  n = 5;
  ASSERT_EQ(sim_.cuDevSmResourceSplitByCount(groups, &n, &whole, &rest, 0, 12), CUDA_SUCCESS);
  EXPECT_EQ(n, 2u);  // 12 rounds up to 16: two fit
  EXPECT_EQ(groups[0].sm.smCount, 16u);
  EXPECT_EQ(rest.sm.smCount, 0u);
  n = 1;
  ASSERT_EQ(sim_.cuDevSmResourceSplitByCount(groups, &n, &whole, &rest, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(groups[0].sm.smCount, 8u);  // at least 8
  EXPECT_EQ(rest.sm.smCount, 24u);
  EXPECT_EQ(sim_.cuDevSmResourceSplitByCount(groups, &n, &rest, nullptr, 0, 8),
            CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION);  // outputs are not split again
  EXPECT_EQ(sim_.cuDevSmResourceSplitByCount(groups, &n, &whole, nullptr, 0, 33),
            CUDA_ERROR_INVALID_VALUE);
  CUdevResourceDesc desc = nullptr;
  ASSERT_EQ(sim_.cuDevResourceGenerateDesc(&desc, groups, 1), CUDA_SUCCESS);
  CUgreenCtx green = nullptr;
  EXPECT_EQ(sim_.cuGreenCtxCreate(&green, desc, 0, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(sim_.cuGreenCtxCreate(&green, desc, 0, CU_GREEN_CTX_DEFAULT_STREAM), CUDA_SUCCESS);
  CUcontext gctx = nullptr;
  ASSERT_EQ(sim_.cuCtxFromGreenCtx(&gctx, green), CUDA_SUCCESS);
  CUstream gs = nullptr;
  EXPECT_EQ(sim_.cuGreenCtxStreamCreate(&gs, green, 0, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(sim_.cuGreenCtxStreamCreate(&gs, green, CU_STREAM_NON_BLOCKING, 0), CUDA_SUCCESS);
  CUdeviceptr x = Alloc(4096);
  CUfunction fill = Kernel("vgpu_fill");  // loaded in the primary context
  ASSERT_EQ(sim_.cuCtxPushCurrent(gctx), CUDA_SUCCESS);
  EXPECT_EQ(Fill(fill, gs, x, 1024, 1.0f), CUDA_ERROR_INVALID_HANDLE);  // another context's
  CUfunction green_fill = Kernel("vgpu_fill");
  ASSERT_EQ(Fill(green_fill, gs, x, 1024, 2.0f), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuStreamSynchronize(gs), CUDA_SUCCESS);
  EXPECT_EQ(sim_.Counter("kernels_on_sms:8"), 1u);
  EXPECT_EQ(sim_.Counter("last_kernel_sms"), 8u);
  ASSERT_EQ(sim_.cuCtxPopCurrent(nullptr), CUDA_SUCCESS);
  CUstream s = NewStream();
  ASSERT_EQ(Fill(fill, s, x, 1024, 3.0f), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(sim_.Counter("kernels_on_sms:32"), 1u);
  const float three = 3.0f;
  uint32_t bits;
  std::memcpy(&bits, &three, 4);
  EXPECT_EQ(Read(x, 1024, s), std::vector<uint32_t>(1024, bits));
  // Destroying the green context invalidates its streams and context handle.
  ASSERT_EQ(sim_.cuGreenCtxDestroy(green), CUDA_SUCCESS);
  EXPECT_EQ(sim_.cuStreamSynchronize(gs), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(sim_.cuCtxSetCurrent(gctx), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  EXPECT_EQ(sim_.cuGreenCtxDestroy(green), CUDA_ERROR_CONTEXT_IS_DESTROYED);
}

TEST_F(CudasimTest, KernelsCheckEveryPointerArgument) {
  ASSERT_NO_FATAL_FAILURE(Start());
  CUstream s = NewStream();
  CUdeviceptr x = Alloc(4096);
  CUfunction fill = Kernel("vgpu_fill");
  CUmodule m = nullptr;
  ASSERT_EQ(sim_.cuModuleLoadData(&m, kFatbin), CUDA_SUCCESS);
  CUfunction f = nullptr;
  EXPECT_EQ(sim_.cuModuleGetFunction(&f, m, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  const uint32_t bad_image = 0x12345678u;
  EXPECT_EQ(sim_.cuModuleLoadData(&m, &bad_image), CUDA_ERROR_INVALID_IMAGE);
  unsigned long long n = 1024;
  float v = 1;
  void* params[] = {&x, &n, &v};
  EXPECT_EQ(sim_.cuLaunchKernel(fill, 1, 2, 1, 256, 1, 1, 0, s, params, nullptr),
            CUDA_ERROR_INVALID_VALUE);  // geometry
  n = 1025;                             // one float past the allocation
  ASSERT_EQ(sim_.cuLaunchKernel(fill, 1, 1, 1, 256, 1, 1, 0, s, params, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(sim_.cuStreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);
}

TEST_F(CudasimTest, PoolBlocksAreReusedInStreamOrder) {
  ASSERT_NO_FATAL_FAILURE(Start());
  CUmemPoolProps props = {};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CUmemoryPool pool = nullptr;
  ASSERT_EQ(sim_.cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
  CUstream a = NewStream(), b = NewStream();
  Gate gate;
  ASSERT_EQ(sim_.cuLaunchHostFunc(a, &Gate::Wait, &gate), CUDA_SUCCESS);
  CUdeviceptr p = 0, q = 0, r = 0;
  ASSERT_EQ(sim_.cuMemAllocFromPoolAsync(&p, 1 << 16, pool, a), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuMemFreeAsync(p, a), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuMemAllocFromPoolAsync(&q, 1 << 16, pool, a), CUDA_SUCCESS);
  EXPECT_EQ(q, p);  // same stream: reusable at once
  ASSERT_EQ(sim_.cuMemFreeAsync(q, a), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuMemAllocFromPoolAsync(&r, 1 << 16, pool, b), CUDA_SUCCESS);
  EXPECT_NE(r, p);  // another stream: not before the free has run
  ASSERT_EQ(sim_.cuMemFreeAsync(r, b), CUDA_SUCCESS);
  gate.Open();
  ASSERT_EQ(sim_.cuStreamSynchronize(a), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuStreamSynchronize(b), CUDA_SUCCESS);
  CUdeviceptr t = 0;
  ASSERT_EQ(sim_.cuMemAllocFromPoolAsync(&t, 1 << 16, pool, b), CUDA_SUCCESS);
  EXPECT_TRUE(t == p || t == r);
  // Used on b after a's free ran: ordered by that, not a race.
  ASSERT_EQ(sim_.cuMemsetD32Async(t, 1, 16, b), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuStreamSynchronize(b), CUDA_SUCCESS);
  EXPECT_EQ(sim_.Counter("races"), 0u);
  EXPECT_EQ(sim_.cuMemFreeAsync(t + 4, b), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(sim_.cuMemFreeAsync(t, b), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuMemPoolDestroy(pool), CUDA_SUCCESS);
  EXPECT_EQ(sim_.Counter("pools_alive"), 0u);
}

TEST_F(CudasimTest, SmallProfileAndOverheadsInMemGetInfo) {
  ASSERT_NO_FATAL_FAILURE(Start());
  constexpr size_t kMiB = size_t{1} << 20;
  int count = 0, sms = 0;
  ASSERT_EQ(sim_.cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 2);
  ASSERT_EQ(sim_.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 1),
            CUDA_SUCCESS);
  EXPECT_EQ(sms, 32);
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(sim_.cuMemGetInfo(&free_bytes, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, 1024 * kMiB);
  EXPECT_EQ(free_bytes, total - 16 * kMiB);  // the primary context
  CUmodule m = nullptr;
  ASSERT_EQ(sim_.cuModuleLoadData(&m, kFatbin), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuMemGetInfo(&free_bytes, &total), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes, total - 18 * kMiB);  // and a module
  CUdeviceptr p = Alloc(10 * kMiB);
  ASSERT_EQ(sim_.cuMemGetInfo(&free_bytes, &total), CUDA_SUCCESS);
  EXPECT_EQ(free_bytes, total - 28 * kMiB);
  EXPECT_EQ(sim_.cuMemAlloc(&p, total), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(sim_.cuModuleUnload(m), CUDA_SUCCESS);
  EXPECT_EQ(sim_.cuModuleUnload(m), CUDA_ERROR_INVALID_HANDLE);
  // Releasing the primary context gives back its memory and its allocations.
  ASSERT_EQ(sim_.cuDevicePrimaryCtxRelease(0), CUDA_SUCCESS);
  EXPECT_EQ(sim_.Counter("device_used_bytes:0"), 0u);
  EXPECT_EQ(sim_.Counter("contexts_alive"), 0u);
}

TEST_F(CudasimTest, H100Profile) {
  ASSERT_NO_FATAL_FAILURE(Start({{"VGPU_CUDASIM_PROFILE", "h100"}}));
  int count = 0, sms = 0;
  ASSERT_EQ(sim_.cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 1);
  char name[128] = {};
  ASSERT_EQ(sim_.cuDeviceGetName(name, sizeof(name), 0), CUDA_SUCCESS);
  EXPECT_STREQ(name, "NVIDIA H100 80GB HBM3");
  ASSERT_EQ(sim_.cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(sms, 132);
  size_t free_bytes = 0, total = 0;
  ASSERT_EQ(sim_.cuMemGetInfo(&free_bytes, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, size_t{81559} << 20);
  EXPECT_EQ(free_bytes, total - (size_t{512} << 20));
  // An allocation of most of the card costs nothing until touched.
  CUdeviceptr p = Alloc(size_t{70} << 30);
  EXPECT_NE(p, 0u);
  CUdevResource whole = {};
  ASSERT_EQ(sim_.cuDeviceGetDevResource(0, &whole, CU_DEV_RESOURCE_TYPE_SM), CUDA_SUCCESS);
  EXPECT_EQ(whole.sm.smCount, 132u);
}

TEST_F(CudasimTest, OldDriversLackNewerEntryPoints) {
  Sim old = LoadSim({{"VGPU_CUDASIM_DRIVER_VERSION", "12030"}});
  EXPECT_EQ(old.cuGreenCtxCreate, nullptr);
  EXPECT_NE(old.cuMemPoolCreate, nullptr);
  int v = 0;
  ASSERT_EQ(old.cuDriverGetVersion(&v), CUDA_SUCCESS);
  EXPECT_EQ(v, 12030);
  Sim older = LoadSim({{"VGPU_CUDASIM_DRIVER_VERSION", "11010"}});
  EXPECT_EQ(older.cuMemPoolCreate, nullptr);
  Sim no_pools = LoadSim({{"VGPU_CUDASIM_NO_POOLS", "1"}});
  EXPECT_EQ(no_pools.cuMemPoolCreate, nullptr);
  EXPECT_NE(no_pools.cuGreenCtxCreate, nullptr);
  // Nothing works before cuInit.
  int n = 0;
  EXPECT_EQ(no_pools.cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
  const char* s = nullptr;
  ASSERT_EQ(no_pools.cuGetErrorName(CUDA_ERROR_ILLEGAL_ADDRESS, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "CUDA_ERROR_ILLEGAL_ADDRESS");
}

TEST_F(CudasimTest, TraceHasOneLinePerExecutedOp) {
  const std::string trace =
      std::string(::testing::TempDir()) + "/cudasim_trace_" + std::to_string(getpid()) + ".txt";
  ASSERT_NO_FATAL_FAILURE(Start({{"VGPU_CUDASIM_TRACE", trace}}));
  CUstream s = NewStream();
  CUdeviceptr x = Alloc(64);
  ASSERT_EQ(sim_.cuMemsetD32Async(x, 1, 16, s), CUDA_SUCCESS);
  ASSERT_EQ(sim_.cuStreamSynchronize(s), CUDA_SUCCESS);
  std::ifstream in(trace);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_THAT(text.str(), ::testing::HasSubstr("cuMemsetD32Async -> 0"));
  std::remove(trace.c_str());
}

#else

TEST(CudasimTest, NeedsTheCudaBackend) { GTEST_SKIP() << "built without CUDA"; }

#endif  // VGPU_HAVE_CUDA

}  // namespace
