#include "vgpu/runtime/cuda/cuda_platform.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "vgpu/runtime/cuda/call_log.h"
#include "vgpu/runtime/cuda/cuda_executor.h"
#include "vgpu/runtime/cuda/cuda_nccl.h"
#include "vgpu/runtime/cuda/dynamic_library.h"
#include "vgpu/runtime/platform_registry.h"
#include "vgpu/runtime/status.h"

namespace vgpu {
namespace cuda {

// ---------------------------------------------------------------------------------------------
// Platform

CudaPlatform::CudaPlatform() = default;
CudaPlatform::~CudaPlatform() = default;

void CudaPlatform::Init() {
  std::string library = LibraryNames(kDriverLibraryEnv, {kDefaultDriverLibrary}).front();
  absl::StatusOr<std::unique_ptr<CudaDriver>> driver = LoadCudaDriver(library);
  if (!driver.ok()) {
    reason_ = std::string(driver.status().message());
    return;
  }
  driver_ = *std::move(driver);
  const CudaDriver& d = *driver_;
  if (absl::Status s = ToStatus(d.cuDriverGetVersion(&driver_->driver_version),
                                absl::StrCat("cuDriverGetVersion (", library, ")"));
      !s.ok()) {
    reason_ = std::string(s.message());
    return;
  }
  if (driver_->driver_version < kMinimumDriverVersion) {
    reason_ = absl::StrCat("the CUDA driver ", library, " is version ",
                           VersionString(driver_->driver_version), " (", driver_->driver_version,
                           "); vgpu needs ", VersionString(kMinimumDriverVersion), " (",
                           kMinimumDriverVersion,
                           ") or newer (cuGetProcAddress_v2 and the entry points it loads); "
                           "update the NVIDIA driver");
    return;
  }
  if (absl::Status s = ToStatus(d.cuInit(0), absl::StrCat("cuInit (", library, ")")); !s.ok()) {
    reason_ = std::string(s.message());
    return;
  }
  int count = 0;
  if (absl::Status s = ToStatus(d.cuDeviceGetCount(&count), "cuDeviceGetCount"); !s.ok()) {
    reason_ = std::string(s.message());
    return;
  }
  if (count == 0) {
    reason_ =
        absl::StrCat("the CUDA driver ", VersionString(d.driver_version), " found no devices");
    return;
  }
  for (int i = 0; i < count; ++i) {
    CUdevice device = 0;
    absl::Status s = ToStatus(d.cuDeviceGet(&device, i), absl::StrCat("cuDeviceGet(", i, ")"));
    auto executor = std::make_unique<CudaExecutor>(this, driver_.get(), i, device);
    if (s.ok()) s = executor->Init();
    if (!s.ok()) {
      // All or nothing: ordinals must mean the same as CUDA's.
      executors_.clear();
      reason_ = absl::StrCat("device ", i, " failed to initialise: ", s.message());
      return;
    }
    executors_.push_back(std::move(executor));
  }
  EnablePeerAccess();
}

void CudaPlatform::EnablePeerAccess() {
  const CudaDriver& d = *driver_;
  for (auto& from : executors_) {
    for (auto& to : executors_) {
      if (from->device() == to->device() || !from->CanAccessPeer(*to)) continue;
      // Enabled from `from`'s context onto `to`'s; already enabled (by the application on the
      // same primary context) counts as enabled.
      ScopedContext scope(d, from->context());
      if (!scope.status().ok()) continue;
      CUresult r = d.cuCtxEnablePeerAccess(to->context(), 0);
      if (r == CUDA_SUCCESS || r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) {
        from->SetPeerAccessEnabled(static_cast<int>(to->device()));
      } else {
        peer_errors_.push_back(
            absl::StrCat(from->ordinal(), "->", to->ordinal(), ": ", CuResultName(r)));
      }
    }
  }
}

std::string CudaPlatform::Summary() const {
  // Library code does not print: a call log that was asked for and is off is said here.
  const absl::Status log = call_log::OpenStatus();
  const std::string log_note = log.ok() ? "" : absl::StrCat("; ", log.message());
  if (executors_.empty()) return absl::StrCat("0 CUDA devices: ", reason_, log_note);
  return absl::StrCat("CUDA driver ", VersionString(driver_->driver_version), " (",
                      driver_->driver_version, ", ", driver_->library, "), ", executors_.size(),
                      " device(s), kernels fatbin sm_90 + compute_80 PTX, green contexts ",
                      driver_->HasGreenContexts() ? "available" : "unavailable",
                      peer_errors_.empty() ? std::string()
                                           : absl::StrCat(", peer access not enabled for ",
                                                          absl::StrJoin(peer_errors_, ", ")),
                      log_note);
}

absl::StatusOr<PhysicalDeviceInfo> CudaPlatform::Describe(int ordinal) {
  VGPU_ASSIGN_OR_RETURN(Executor * e, GetExecutor(ordinal));
  return e->Describe();
}

absl::StatusOr<Executor*> CudaPlatform::GetExecutor(int ordinal) {
  if (ordinal < 0 || ordinal >= DeviceCount()) {
    if (executors_.empty()) {
      return absl::NotFoundError(absl::StrCat("cuda device ", ordinal, ": ", Summary()));
    }
    return absl::NotFoundError(absl::StrCat("cuda platform has no device ", ordinal, " (it has ",
                                            DeviceCount(), ", ordinals 0..", DeviceCount() - 1,
                                            ")"));
  }
  return executors_[ordinal].get();
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> CudaPlatform::CreateCommunicator(
    absl::Span<Executor* const> executors) {
  return CreateNcclCommunicator(executors);
}

absl::StatusOr<std::vector<uint8_t>> CudaPlatform::NcclUniqueId() { return cuda::NcclUniqueId(); }

absl::StatusOr<std::unique_ptr<NcclCommunicator>> CudaPlatform::CreateRankCommunicator(
    Executor* executor, int rank, int nranks, absl::Span<const uint8_t> id) {
  return CreateNcclRankCommunicator(executor, rank, nranks, id);
}

CudaExecutor* CudaPlatform::ExecutorForDevice(int cuda_ordinal) const {
  for (const auto& e : executors_) {
    if (static_cast<int>(e->device()) == cuda_ordinal) return e.get();
  }
  return nullptr;
}

}  // namespace cuda

std::unique_ptr<Platform> CreateCudaPlatform() {
  auto platform = std::make_unique<cuda::CudaPlatform>();
  platform->Init();
  return platform;
}

}  // namespace vgpu

// Priority 100: "auto" prefers a GPU to the host simulation.
VGPU_REGISTER_PLATFORM(cuda, 100, [](const vgpu::SettingLookup&) {
  return absl::StatusOr<std::unique_ptr<vgpu::Platform>>(vgpu::CreateCudaPlatform());
})
