// A separate project that finds the installed vgpu with find_package(vgpu).
#include <cstdio>

#include "vgpu/allocator/allocator.h"
#include "vgpu/runtime/platform.h"

int main() {
  auto platform = vgpu::GetPlatform("host");
  if (!platform.ok()) return 1;
  std::printf("host devices: %d\n", (*platform)->DeviceCount());
  auto exec = (*platform)->GetExecutor(0);
  if (!exec.ok()) return 1;
  auto p = (*exec)->Allocate(1 << 20);
  if (!p.ok() || !(*exec)->Free(*p).ok()) return 1;
  return 0;
}
