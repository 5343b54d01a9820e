// What the CUDA driver allows and costs for virtual memory management, measured directly
// (no vgpu code): which cuMemMap / cuMemUnmap / cuMemSetAccess shapes a real driver accepts
// (the result codes, 0 = CUDA_SUCCESS, 801 = CUDA_ERROR_NOT_SUPPORTED) and the time of each
// call for 512 allocations of one granule and one allocation of 512 granules. The simulator
// (tests/cudasim) must give the same codes; docs/vmm.md and docs/gpu-results.md quote the
// figures. Build and run (scripts/gpu-bundle does the build):
//   g++ -O2 -I/usr/local/cuda/include scripts/cuda-vmm-probe.cc -o cuda-vmm-probe -ldl
//   ./cuda-vmm-probe            # VGPU_CUDA_DRIVER_LIBRARY=... picks another libcuda
#include <cuda.h>
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
typedef CUresult (*GetProc)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
static GetProc gp;
static void* Get(const char* n) {
  void* f = nullptr;
  CUdriverProcAddressQueryResult q;
  if (gp(n, &f, 12000, 0, &q) != CUDA_SUCCESS) return nullptr;
  return f;
}
#define F(name)                                                \
  auto name = reinterpret_cast<decltype(&::name)>(Get(#name)); \
  if (!name) {                                                 \
    printf("missing %s\n", #name);                             \
    return 1;                                                  \
  }
int main() {
  const char* path = getenv("VGPU_CUDA_DRIVER_LIBRARY");
  void* lib = dlopen(path ? path : "libcuda.so.1", RTLD_NOW);
  if (!lib) {
    printf("no driver\n");
    return 1;
  }
  gp = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2"));
  if (!gp) {
    printf("no cuGetProcAddress_v2\n");
    return 1;
  }
  F(cuInit)
  F(cuDeviceGet) F(cuDevicePrimaryCtxRetain) F(cuCtxSetCurrent) F(cuMemAddressReserve)
      F(cuMemCreate) F(cuMemMap) F(cuMemSetAccess) F(cuMemUnmap) F(cuMemRelease) F(cuMemAddressFree)
          F(cuMemGetAllocationGranularity) F(cuCtxSynchronize) CUdevice dev;
  CUcontext ctx;
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) ||
      cuCtxSetCurrent(ctx)) {
    printf("init failed\n");
    return 1;
  }
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t g = 0;
  cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  size_t rg = 0;
  cuMemGetAllocationGranularity(&rg, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  printf("granularity min %zu recommended %zu\n", g, rg);
  CUmemAccessDesc acc = {};
  acc.location = prop.location;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUdeviceptr va;
  cuMemAddressReserve(&va, 8 * g, 0, 0, 0);
  CUmemGenericAllocationHandle h2, a, b;
  cuMemCreate(&h2, 2 * g, &prop, 0);
  cuMemCreate(&a, g, &prop, 0);
  cuMemCreate(&b, g, &prop, 0);
  printf("P1 map at offset g: %d\n", cuMemMap(va, g, g, h2, 0));
  printf("P2 map prefix g of 2g at offset 0: %d\n", cuMemMap(va, g, 0, h2, 0));
  printf("P2b setaccess prefix: %d\n", cuMemSetAccess(va, g, &acc, 1));
  CUmemGenericAllocationHandle c;
  cuMemCreate(&c, g, &prop, 0);
  printf("P3 whole 1-granule handle at va+4g: %d\n", cuMemMap(va + 4 * g, g, 0, c, 0));
  printf("P3a the same handle again at va+5g: %d\n", cuMemMap(va + 5 * g, g, 0, c, 0));
  printf("P3b setaccess over both (2 mappings of one handle): %d\n",
         cuMemSetAccess(va + 4 * g, 2 * g, &acc, 1));
  printf("P3e unmap both: %d\n", cuMemUnmap(va + 4 * g, 2 * g));
  cuMemRelease(c);
  printf("P4 map whole 2g handle: %d\n", cuMemMap(va, 2 * g, 0, h2, 0));
  printf("P6 unmap sub-range of one mapping: %d\n", cuMemUnmap(va, g));
  printf("P6b unmap whole: %d\n", cuMemUnmap(va, 2 * g));
  cuMemMap(va, g, 0, a, 0);
  cuMemMap(va + g, g, 0, b, 0);
  printf("P5 setaccess spanning two handles: %d\n", cuMemSetAccess(va, 2 * g, &acc, 1));
  printf("P4b unmap spanning two handles: %d\n", cuMemUnmap(va, 2 * g));
  cuMemUnmap(va, g);
  cuMemUnmap(va + g, g);
  cuMemRelease(h2);
  cuMemRelease(a);
  cuMemRelease(b);
  cuMemAddressFree(va, 8 * g);
  // Timings: n granules, create / map / setaccess / unmap / release each.
  const int n = 512;
  CUdeviceptr big;
  cuMemAddressReserve(&big, n * g, 0, 0, 0);
  std::vector<CUmemGenericAllocationHandle> hs(n);
  using C = std::chrono::steady_clock;
  auto us = [](C::time_point t0) {
    return std::chrono::duration<double, std::micro>(C::now() - t0).count();
  };
  auto t = C::now();
  for (int i = 0; i < n; ++i) cuMemCreate(&hs[i], g, &prop, 0);
  double create = us(t) / n;
  t = C::now();
  for (int i = 0; i < n; ++i) cuMemMap(big + i * g, g, 0, hs[i], 0);
  double map = us(t) / n;
  t = C::now();
  for (int i = 0; i < n; ++i) cuMemSetAccess(big + i * g, g, &acc, 1);
  double sa1 = us(t) / n;
  t = C::now();
  CUresult r = cuMemSetAccess(big, n * g, &acc, 1);
  double saall = us(t);
  t = C::now();
  for (int i = 0; i < n; ++i) cuMemUnmap(big + i * g, g);
  double unmap = us(t) / n;
  t = C::now();
  for (int i = 0; i < n; ++i) cuMemRelease(hs[i]);
  double rel = us(t) / n;
  printf(
      "T per 2MiB granule (n=%d): create %.2f us, map %.2f us, setaccess %.2f us, setaccess over "
      "all %d mappings %.1f us (rc %d), unmap %.2f us, release %.2f us\n",
      n, create, map, sa1, n, saall, r, unmap, rel);
  CUmemGenericAllocationHandle one;
  t = C::now();
  cuMemCreate(&one, n * g, &prop, 0);
  double c1 = us(t);
  t = C::now();
  cuMemMap(big, n * g, 0, one, 0);
  double m1 = us(t);
  t = C::now();
  cuMemSetAccess(big, n * g, &acc, 1);
  double s1 = us(t);
  t = C::now();
  cuMemUnmap(big, n * g);
  double u1 = us(t);
  t = C::now();
  cuMemRelease(one);
  double r1 = us(t);
  printf(
      "T one %zu MiB allocation: create %.1f us, map %.1f us, setaccess %.1f us, unmap %.1f us, "
      "release %.1f us\n",
      n * g >> 20, c1, m1, s1, u1, r1);
  cuMemAddressFree(big, n * g);
  // Address space alone (what the vmm allocator's spare reservations save per new block): a
  // 4-granule reservation made and freed n times.
  std::vector<CUdeviceptr> vas(n);
  t = C::now();
  for (int i = 0; i < n; ++i) cuMemAddressReserve(&vas[i], 4 * g, 0, 0, 0);
  double ar = us(t) / n;
  t = C::now();
  for (int i = 0; i < n; ++i) cuMemAddressFree(vas[i], 4 * g);
  double af = us(t) / n;
  printf("T per 8MiB address range (n=%d): reserve %.2f us, free %.2f us\n", n, ar, af);
  return 0;
}
