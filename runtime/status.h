// Status helpers shared by every vgpu unit: early-return macros for absl::Status and
// absl::StatusOr (Debian's Abseil 20220623 has none), and small constructors that keep
// error messages uniform.
//
// Thread safety: stateless macros and free functions; safe from any thread.
#ifndef VGPU_RUNTIME_STATUS_H_
#define VGPU_RUNTIME_STATUS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define VGPU_STATUS_CONCAT_INNER_(a, b) a##b
#define VGPU_STATUS_CONCAT_(a, b) VGPU_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define VGPU_RETURN_IF_ERROR(expr)                                   \
  do {                                                               \
    ::absl::Status vgpu_status_ = (expr);                            \
    if (!vgpu_status_.ok()) return vgpu_status_;                     \
  } while (0)

// `VGPU_ASSIGN_OR_RETURN(auto x, Foo());` declares/assigns `x` from a StatusOr or returns its
// error from the enclosing function.
#define VGPU_ASSIGN_OR_RETURN(lhs, rexpr) \
  VGPU_ASSIGN_OR_RETURN_IMPL_(VGPU_STATUS_CONCAT_(vgpu_statusor_, __LINE__), lhs, rexpr)

#define VGPU_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

#endif  // VGPU_RUNTIME_STATUS_H_
