// cuBLAS for the cuda platform, loaded with dlopen on the first Executor::GetBlas() (never
// linked). One handle per context a stream runs in (the primary context, and each green
// context of an SM partition: a handle belongs to the context it was created in), made on
// first use; a handle is not thread-safe, so cublasSetStream + the call run under the BLAS
// mutex.
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "vgpu/runtime/mutex.h"
#include "vgpu/runtime/cuda/call_log.h"
#include "vgpu/runtime/cuda/cuda_executor.h"
#include "vgpu/runtime/cuda/dynamic_library.h"
#include "vgpu/runtime/status.h"

namespace vgpu::cuda {
namespace {

// Environment variable naming the cuBLAS library (default: libcublas.so.13, then .12).
constexpr char kCublasLibraryEnv[] = "VGPU_CUBLAS_LIBRARY";
// The oldest cuBLAS whose API and behaviour we rely on (cublasSetWorkspace_v2 with the
// per-stream workspace rules of cuBLAS 12), as CUBLAS_VERSION encodes it.
constexpr int kMinCublasVersion = 120000;

struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  decltype(&cublasGetVersion_v2) get_version = nullptr;
  decltype(&cublasGetProperty) get_property = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  decltype(&cublasSaxpy_v2) saxpy = nullptr;
  decltype(&cublasSscal_v2) sscal = nullptr;
  std::string library;
  int version = 0;  // CUBLAS_VERSION encoding: 130100 is 13.1.0
};

std::string CublasVersionText(int v) {
  return absl::StrCat(v / 10000, ".", v / 100 % 100, ".", v % 100);
}

// Loaded once per process; the library stays loaded. A candidate that opens but lacks a
// symbol, or is older than kMinCublasVersion, gives way to the next one; the error names
// every candidate tried and why each was refused.
absl::StatusOr<const CublasApi*> LoadCublas() {
  static absl::StatusOr<const CublasApi*>* api = [] {
    std::vector<std::string> errors;
    const std::vector<std::string> names =
        LibraryNames(kCublasLibraryEnv, {"libcublas.so.13", "libcublas.so.12", "libcublas.so"});
    for (const std::string& name : names) {
      absl::StatusOr<void*> h = OpenLibrary(name);
      if (!h.ok()) {
        errors.push_back(std::string(h.status().message()));
        continue;
      }
      auto* a = new CublasApi();
      a->library = name;
      SymbolLoader sym(*h);
      sym(a->create, "cublasCreate_v2");
      sym(a->destroy, "cublasDestroy_v2");
      sym(a->set_stream, "cublasSetStream_v2");
      sym(a->set_workspace, "cublasSetWorkspace_v2");
      sym(a->get_version, "cublasGetVersion_v2");
      sym(a->get_property, "cublasGetProperty");
      sym(a->sgemm, "cublasSgemm_v2");
      sym(a->saxpy, "cublasSaxpy_v2");
      sym(a->sscal, "cublasSscal_v2");
      if (!sym.missing().empty()) {
        for (const std::string& symbol : sym.missing()) {
          errors.push_back(absl::StrCat(name, " lacks ", symbol));
        }
        delete a;
        continue;
      }
      // VGPU_CUDA_CALL_LOG: log every call the platform makes through this table.
      const call_log::ResultNamer<cublasStatus_t> namer{
          &CublasStatusName, [](cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS; }};
#define VGPU_CUBLAS_WRAP(field, symbol)                      \
  {                                                          \
    struct Tag;                                              \
    a->field = call_log::Wrap<Tag>(symbol, a->field, namer); \
  }
      VGPU_CUBLAS_WRAP(create, "cublasCreate_v2")
      VGPU_CUBLAS_WRAP(destroy, "cublasDestroy_v2")
      VGPU_CUBLAS_WRAP(set_stream, "cublasSetStream_v2")
      VGPU_CUBLAS_WRAP(set_workspace, "cublasSetWorkspace_v2")
      VGPU_CUBLAS_WRAP(get_version, "cublasGetVersion_v2")
      VGPU_CUBLAS_WRAP(get_property, "cublasGetProperty")
      VGPU_CUBLAS_WRAP(sgemm, "cublasSgemm_v2")
      VGPU_CUBLAS_WRAP(saxpy, "cublasSaxpy_v2")
      VGPU_CUBLAS_WRAP(sscal, "cublasSscal_v2")
#undef VGPU_CUBLAS_WRAP
      // cublasGetProperty needs no handle (cublasGetVersion_v2 takes one, so it needs a
      // context).
      int major = 0, minor = 0, patch = 0;
      if (a->get_property(MAJOR_VERSION, &major) != CUBLAS_STATUS_SUCCESS ||
          a->get_property(MINOR_VERSION, &minor) != CUBLAS_STATUS_SUCCESS ||
          a->get_property(PATCH_LEVEL, &patch) != CUBLAS_STATUS_SUCCESS) {
        errors.push_back(absl::StrCat(name, ": cublasGetProperty failed"));
        delete a;
        continue;
      }
      a->version = major * 10000 + minor * 100 + patch;
      if (a->version < kMinCublasVersion) {
        errors.push_back(absl::StrCat(name, " is cuBLAS ", CublasVersionText(a->version),
                                      "; vgpu needs >= ", CublasVersionText(kMinCublasVersion)));
        delete a;
        continue;
      }
      return new absl::StatusOr<const CublasApi*>(a);
    }
    return new absl::StatusOr<const CublasApi*>(absl::FailedPreconditionError(
        absl::StrCat("cuBLAS could not be loaded (tried ", absl::StrJoin(names, ", "), "; set ",
                     kCublasLibraryEnv, " to its path; vgpu needs cuBLAS >= ",
                     CublasVersionText(kMinCublasVersion), "): ", absl::StrJoin(errors, "; "))));
  }();
  return *api;
}

cublasOperation_t Op(Transpose t) { return t == Transpose::kYes ? CUBLAS_OP_T : CUBLAS_OP_N; }

class CudaBlas : public Blas {
 public:
  CudaBlas(CudaExecutor* executor, const CublasApi* api) : executor_(executor), api_(api) {}
  ~CudaBlas() override {
    vgpu::MutexLock l(&mu_);
    for (auto& [key, entry] : handles_) {
      ScopedContext scope(executor_->driver(), entry.context);
      if (scope.status().ok()) api_->destroy(entry.handle);
    }
  }

  // The primary context's handle, made now so that a missing or broken cuBLAS fails GetBlas.
  absl::Status Init() ABSL_LOCKS_EXCLUDED(mu_) {
    vgpu::MutexLock l(&mu_);
    return HandleLocked({0, -1}, executor_->context()).status();
  }

  absl::Status Sgemm(Stream* stream, Transpose trans_a, Transpose trans_b, int m, int n, int k,
                     float alpha, const float* a, int lda, const float* b, int ldb, float beta,
                     float* c, int ldc) override {
    if (m < 0 || n < 0 || k < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Sgemm: negative size m=", m, " n=", n, " k=", k));
    }
    return Run(stream, "cublasSgemm", [&](cublasHandle_t h) {
      return api_->sgemm(h, Op(trans_a), Op(trans_b), m, n, k, &alpha, a, lda, b, ldb, &beta, c,
                         ldc);
    });
  }
  absl::Status Saxpy(Stream* stream, int n, float alpha, const float* x, float* y) override {
    if (n < 0) return absl::InvalidArgumentError(absl::StrCat("Saxpy: negative n=", n));
    return Run(stream, "cublasSaxpy",
               [&](cublasHandle_t h) { return api_->saxpy(h, n, &alpha, x, 1, y, 1); });
  }
  absl::Status Sscal(Stream* stream, int n, float alpha, float* x) override {
    if (n < 0) return absl::InvalidArgumentError(absl::StrCat("Sscal: negative n=", n));
    return Run(stream, "cublasSscal",
               [&](cublasHandle_t h) { return api_->sscal(h, n, &alpha, x, 1); });
  }

  // cuBLAS 12/13's default workspace (cuBLAS docs, "cuBLAS workspace").
  uint64_t WorkspaceBytes() const override {
    return executor_->compute_capability_major() >= 9 ? uint64_t{32} << 20 : uint64_t{4} << 20;
  }
  absl::Status SetWorkspace(Stream* stream, void* workspace, uint64_t bytes) override
      ABSL_LOCKS_EXCLUDED(mu_) {
    CudaStream* s = AsCudaStream(stream);
    if (s == nullptr || s->cuda_executor() != executor_) {
      return absl::InvalidArgumentError(
          absl::StrCat("SetWorkspace: the stream does not belong to ", executor_->label()));
    }
    vgpu::MutexLock l(&mu_);
    if (workspace == nullptr) {
      workspaces_.erase(s->handle());
    } else {
      workspaces_[s->handle()] = {workspace, bytes};
    }
    return absl::OkStatus();
  }

 private:
  // (partition generation, SM partition): -1 is the primary context, as for kernel modules.
  using Key = std::pair<uint64_t, int>;
  struct Entry {
    CUcontext context = nullptr;
    cublasHandle_t handle = nullptr;
  };

  absl::StatusOr<cublasHandle_t> HandleLocked(Key key, CUcontext ctx)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = handles_.find(key);
    if (it != handles_.end()) return it->second.handle;
    VGPU_CUDA_SCOPE(executor_->driver(), ctx);
    cublasHandle_t handle = nullptr;
    VGPU_RETURN_IF_ERROR(ToStatus(
        api_->create(&handle),
        absl::StrCat(executor_->label(), ": cublasCreate",
                     key.second < 0 ? "" : " in SM partition ",
                     key.second < 0 ? "" : absl::StrCat(key.second), " (", api_->library, ")")));
    handles_[key] = Entry{ctx, handle};
    return handle;
  }

  template <typename F>
  absl::Status Run(Stream* stream, const char* what, F call) ABSL_LOCKS_EXCLUDED(mu_) {
    CudaStream* s = AsCudaStream(stream);
    if (s == nullptr || s->cuda_executor() != executor_) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": the stream does not belong to ", executor_->label()));
    }
    VGPU_CUDA_SCOPE(executor_->driver(), s->context());
    VGPU_RETURN_IF_ERROR(s->Begin());
    vgpu::MutexLock l(&mu_);
    const Key key{s->sm_partition() < 0 ? 0 : s->generation(), s->sm_partition()};
    VGPU_ASSIGN_OR_RETURN(cublasHandle_t handle, HandleLocked(key, s->context()));
    VGPU_RETURN_IF_ERROR(ToStatus(api_->set_stream(handle, s->handle()),
                                  absl::StrCat(executor_->label(), ": cublasSetStream")));
    // cublasSetStream resets the handle to the library's own workspace: set ours again.
    if (auto w = workspaces_.find(s->handle()); w != workspaces_.end()) {
      VGPU_RETURN_IF_ERROR(ToStatus(api_->set_workspace(handle, w->second.first, w->second.second),
                                    absl::StrCat(executor_->label(), ": cublasSetWorkspace of ",
                                                 w->second.second, " bytes")));
    }
    return ToStatus(call(handle), absl::StrCat(executor_->label(), ": ", what));
  }

  CudaExecutor* executor_;
  const CublasApi* api_;
  vgpu::Mutex mu_;
  std::map<Key, Entry> handles_ ABSL_GUARDED_BY(mu_);
  // SetWorkspace, per stream.
  std::map<CUstream, std::pair<void*, uint64_t>> workspaces_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<Blas>> CreateCudaBlas(CudaExecutor* executor) {
  VGPU_ASSIGN_OR_RETURN(const CublasApi* api, LoadCublas());
  auto blas = std::make_unique<CudaBlas>(executor, api);
  VGPU_RETURN_IF_ERROR(blas->Init());
  return std::unique_ptr<Blas>(std::move(blas));
}

}  // namespace vgpu::cuda
