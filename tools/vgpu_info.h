// vgpu-info's parts (internal to the tool): the self-test and the timeline renderer.
// Thread safety: each function runs on the calling thread only.
#ifndef VGPU_TOOLS_VGPU_INFO_H_
#define VGPU_TOOLS_VGPU_INFO_H_

#include <string>

#include "vgpu/devices/runtime.h"

namespace vgpu_info {

// Runs every check on `runtime`'s logical GPUs, one line each on stdout; returns the number of
// failed checks. `history_path`, when not empty, receives the allocators' memory history
// (allocator/memory_history.h's JSON plus a "limits" object: allocator name -> bytes).
int RunSelftest(vgpu::Runtime& runtime, const std::string& history_path);

// `vgpu-info timeline HISTORY.json --svg OUT.svg [--limit BYTES]`; argv[0] is "timeline".
// Returns the exit status (0, 1 for unreadable input, 2 for bad flags).
int TimelineMain(int argc, char** argv);

}  // namespace vgpu_info

#endif  // VGPU_TOOLS_VGPU_INFO_H_
