#include <cblas.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "vgpu/runtime/host/host_internal.h"
#include "vgpu/runtime/host/host_platform.h"

namespace vgpu::host {
namespace {

class HostBlas : public Blas {
 public:
  absl::Status Sgemm(Stream* stream, Transpose ta, Transpose tb, int m, int n, int k, float alpha,
                     const float* a, int lda, const float* b, int ldb, float beta, float* c,
                     int ldc) override {
    if (m < 0 || n < 0 || k < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Sgemm: negative size m=", m, " n=", n, " k=", k));
    }
    return EnqueueHostTask(stream, [=] {
      cblas_sgemm(CblasColMajor, ta == Transpose::kYes ? CblasTrans : CblasNoTrans,
                  tb == Transpose::kYes ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb,
                  beta, c, ldc);
      return absl::OkStatus();
    });
  }
  absl::Status Saxpy(Stream* stream, int n, float alpha, const float* x, float* y) override {
    return EnqueueHostTask(stream, [=] {
      cblas_saxpy(n, alpha, x, 1, y, 1);
      return absl::OkStatus();
    });
  }
  absl::Status Sscal(Stream* stream, int n, float alpha, float* x) override {
    return EnqueueHostTask(stream, [=] {
      cblas_sscal(n, alpha, x, 1);
      return absl::OkStatus();
    });
  }
};

}  // namespace

std::unique_ptr<Blas> CreateHostBlas() { return std::make_unique<HostBlas>(); }

}  // namespace vgpu::host
