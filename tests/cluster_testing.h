// What the cluster tests share: the MPI world when the test runs under a launcher, logical
// GPUs carved from one simulated card of a fresh host platform, a small synthetic data set
// (the same on every process), and the relative difference of two parameter vectors.
//
// Thread safety: call from the test's thread.
#ifndef VGPU_TESTS_CLUSTER_TESTING_H_
#define VGPU_TESTS_CLUSTER_TESTING_H_

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/devices/runtime.h"
#include "vgpu/runtime/host/host_platform.h"
#include "vgpu/runtime/mpi/world.h"
#include "vgpu/runtime/status_matchers.h"
#include "vgpu/tests/testing_runtime.h"

namespace vgpu::testing {

// The world when this process was started by a launcher (mpirun), else null: run alone, a
// cluster test takes its one-process path and never initialises MPI.
inline mpi::World* WorldOrNull() {
  auto launch = mpi::DetectLaunch();
  EXPECT_THAT(launch.status(), IsOk());
  if (!launch.ok() || !launch->under_launcher) return nullptr;
  auto world = mpi::World::Get();
  EXPECT_THAT(world.status(), IsOk());
  return world.ok() ? *world : nullptr;
}

struct HostDevices {
  std::unique_ptr<HostPlatform> platform;
  std::unique_ptr<Runtime> runtime;  // null when creation failed (a test failure is recorded)
};

// `logical` GPUs of `bytes_each` on one simulated card.
inline HostDevices MakeHostDevices(int logical, uint64_t bytes_each) {
  HostDevices d;
  HostPlatformOptions o;
  o.device_bytes = {logical * bytes_each + (uint64_t{16} << 20)};
  auto platform = HostPlatform::Create(o);
  EXPECT_THAT(platform.status(), IsOk());
  if (!platform.ok()) return d;
  d.platform = *std::move(platform);
  auto runtime =
      CreateTestingRuntime(d.platform.get(), 0, std::vector<uint64_t>(logical, bytes_each));
  EXPECT_THAT(runtime.status(), IsOk());
  if (runtime.ok()) d.runtime = *std::move(runtime);
  return d;
}

struct SyntheticData {
  std::vector<float> x;
  std::vector<int32_t> y;
};

// Inputs whose class shows in a few features, so training makes progress; a fixed seed gives
// the same set on every process.
inline SyntheticData MakeSyntheticData(int rows, int features, int classes, uint64_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  SyntheticData d;
  d.x.resize(static_cast<size_t>(rows) * features);
  d.y.resize(rows);
  for (int r = 0; r < rows; ++r) {
    d.y[r] = static_cast<int32_t>(rng() % classes);
    for (int f = 0; f < features; ++f) d.x[r * features + f] = u(rng) * 0.5f;
    d.x[r * features + d.y[r] % features] += 1.0f;
  }
  return d;
}

// ||a - b|| / ||b||.
inline double RelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return a.size() == b.size() ? std::sqrt(diff / norm) : INFINITY;
}

}  // namespace vgpu::testing

#endif  // VGPU_TESTS_CLUSTER_TESTING_H_
