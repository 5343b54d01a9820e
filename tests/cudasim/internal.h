// Internals of libvgpu_cudasim_cuda.so shared between its source files (driver.cc: the Driver
// API and the engine; kernels.cc: host emulations of runtime/cuda/kernels.cu). Not exported.
//
// Thread safety: PrepareKernel is pure (reads its arguments only); the Work it returns runs on a
// stream thread under the simulator's execution lock.
#ifndef VGPU_TESTS_CUDASIM_INTERNAL_H_
#define VGPU_TESTS_CUDASIM_INTERNAL_H_

#include <cuda.h>

#include <string>
#include <vector>

#include "vgpu/tests/cudasim/cudasim.h"

namespace vgpu::cudasim {

// The kernels runtime/cuda/kernels.cu defines, by name (cuModuleGetFunction refuses others).
bool IsKnownKernel(const std::string& name);

// Checks the launch geometry of kernel `name` (synchronous errors, as cuLaunchKernel returns),
// reads its parameters exactly as kernels.cu declares them, and returns in `accesses` every
// device range it reads or writes and in `work` its host emulation.
CUresult PrepareKernel(const std::string& name, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned by, unsigned bz, void** params, std::vector<Access>* accesses,
                       Work* work);

}  // namespace vgpu::cudasim

#endif  // VGPU_TESTS_CUDASIM_INTERNAL_H_
