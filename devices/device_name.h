// TensorFlow's device-name grammar, our own implementation: parse, print, compare and merge
// device names and partial specifications.
//
//   full     /job:localhost/replica:0/task:0/device:GPU:3
//   partial  /device:GPU:3   /job:localhost   /device:GPU:*   /replica:0/device:CPU
//   local    GPU:3   device:GPU:3   GPU   (no leading '/': a device part on its own)
//   legacy   /gpu:3  /cpu:0  /GPU:3  (and gpu:3 / cpu:0 without '/'): type upper-cased
//   wildcard `*` for any field value: /job:*/device:GPU:*
// Legacy forms upper-case the type ("/gpu:0" is GPU:0) but "/device:gpu:0" keeps "gpu", as in
// TensorFlow, so it does not match GPU devices. "" and "/" are the empty specification.
//
// Thread safety: DeviceName is a plain value type; the free functions are pure.
#ifndef VGPU_DEVICES_DEVICE_NAME_H_
#define VGPU_DEVICES_DEVICE_NAME_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace vgpu {

// A parsed name: every field is optional (unset = unspecified or `*`).
struct DeviceName {
  std::optional<std::string> job;
  std::optional<int> replica;
  std::optional<int> task;
  std::optional<std::string> type;  // "GPU", "CPU", ... (case kept, see above)
  std::optional<int> id;

  // InvalidArgument naming the text and the offending part.
  static absl::StatusOr<DeviceName> Parse(absl::string_view text);
  // A concrete local device name: /job:localhost/replica:0/task:0/device:<type>:<id>.
  static DeviceName Local(absl::string_view type, int id);
  // A concrete device of a cluster's task: /job:<job>/replica:0/task:<task>/device:<type>:<id>
  // (devices/cluster.h; Local is ForTask("localhost", 0, ...)).
  static DeviceName ForTask(absl::string_view job, int task, absl::string_view type, int id);

  bool HasJob() const { return job.has_value(); }
  bool IsFullySpecified() const { return job && replica && task && type && id; }
  bool IsEmpty() const { return !job && !replica && !task && !type && !id; }

  // Canonical form: the set fields in order, unset ones left out
  // ("/job:localhost/replica:0/task:0/device:GPU:3", "/device:GPU:*" for a type without id,
  // "/" for the empty specification).
  std::string ToString() const;
  // Only the device part, "GPU:3" / "GPU:*" / "*" (for messages).
  std::string ShortString() const;

  friend bool operator==(const DeviceName& a, const DeviceName& b) {
    return a.job == b.job && a.replica == b.replica && a.task == b.task && a.type == b.type &&
           a.id == b.id;
  }
  friend bool operator!=(const DeviceName& a, const DeviceName& b) { return !(a == b); }
};

// True when every field set in `spec` is set to the same value in `name` (TensorFlow's
// IsSpecification(less_specific, more_specific)). The empty spec matches everything.
bool IsSpecification(const DeviceName& spec, const DeviceName& name);
// IsSpecification and `name` fully specified.
bool IsCompleteSpecification(const DeviceName& spec, const DeviceName& name);
// Whether the concrete device `concrete_name` (a full name) satisfies `spec` (any form).
// False when either does not parse.
bool Matches(absl::string_view spec, absl::string_view concrete_name);

// Merges `other` into `target`, filling unset fields and checking set ones agree.
// A conflicting job, replica or task is always InvalidArgument. A conflicting type or id is
// InvalidArgument unless `allow_soft_placement`: then the conflicting id is cleared (and for
// a conflicting type both type and id), leaving the placer free to choose (TensorFlow's
// MergeDevNames). On error `target` is unchanged.
absl::Status MergeDeviceNames(DeviceName* target, const DeviceName& other,
                              bool allow_soft_placement = false);

}  // namespace vgpu

#endif  // VGPU_DEVICES_DEVICE_NAME_H_
