// Fault injection, a platform capability (Platform::GetFaultInjector) for reliability tests:
// named faults and counters set and read by name, so tools and tests need no backend header.
// The host platform has one (its names: runtime/host/host_faults.h) and applies
// VGPU_HOST_FAULTS itself when it is created; platforms without one return Unimplemented.
//
// Thread safety: implementations are safe from any thread, also while devices run.
#ifndef VGPU_RUNTIME_FAULT_INJECTOR_H_
#define VGPU_RUNTIME_FAULT_INJECTOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vgpu {

class FaultInjector {
 public:
  virtual ~FaultInjector() = default;
  // Sets fault `name` (e.g. "fail_memcpy_at": fail the k-th memcpy; 0 means never).
  // InvalidArgument naming the known faults for an unknown name.
  virtual absl::Status Set(absl::string_view name, int64_t value) = 0;
  // A fault's value or a counter's (e.g. "memcpy_calls"); InvalidArgument for an unknown name.
  virtual absl::StatusOr<int64_t> Get(absl::string_view name) const = 0;
  // The names Set takes, in the order messages list them.
  virtual std::vector<std::string> FaultNames() const = 0;
};

// Applies "name=value,..." (whitespace-separated items skipped when empty) through Set.
// Errors are InvalidArgument and start with `variable`, the setting the text came from (e.g.
// "VGPU_HOST_FAULTS"), then name the bad item. An empty spec changes nothing.
absl::Status ApplyFaultSpec(FaultInjector& faults, absl::string_view variable,
                            absl::string_view spec);

}  // namespace vgpu

#endif  // VGPU_RUNTIME_FAULT_INJECTOR_H_
