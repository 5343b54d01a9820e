// Fuzzes the device-name parser: never crashes; every accepted name prints canonically and
// parses back to the same value; matching and merging with a fixed device never crash and
// agree with each other.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "vgpu/devices/device_name.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<vgpu::DeviceName> n = vgpu::DeviceName::Parse(text);
  if (!n.ok()) {
    if (n.status().message().empty()) std::abort();  // errors must say something
    return 0;
  }
  std::string canonical = n->ToString();
  absl::StatusOr<vgpu::DeviceName> again = vgpu::DeviceName::Parse(canonical);
  if (!again.ok() || *again != *n || again->ToString() != canonical) std::abort();
  n->ShortString();
  const vgpu::DeviceName gpu1 = vgpu::DeviceName::Local("GPU", 1);
  // A name always specifies itself; a spec matching a full name merges into it cleanly.
  if (!vgpu::IsSpecification(*n, *n)) std::abort();
  vgpu::DeviceName merged = *n;
  absl::Status strict = vgpu::MergeDeviceNames(&merged, gpu1);
  if (vgpu::IsSpecification(*n, gpu1) && (!strict.ok() || merged != gpu1)) std::abort();
  if (!strict.ok() && merged != *n) std::abort();  // errors leave the target unchanged
  vgpu::DeviceName soft = *n;
  vgpu::MergeDeviceNames(&soft, gpu1, /*allow_soft_placement=*/true).IgnoreError();
  if (vgpu::Matches(text, gpu1.ToString()) != vgpu::IsSpecification(*n, gpu1)) std::abort();
  return 0;
}
