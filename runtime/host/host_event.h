// The host platform's Event (host_stream.cc's streams record and wait on it).
//
// Thread safety: safe from any thread.
#ifndef VGPU_RUNTIME_HOST_HOST_EVENT_H_
#define VGPU_RUNTIME_HOST_HOST_EVENT_H_

#include <algorithm>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "vgpu/runtime/mutex.h"
#include "vgpu/runtime/platform.h"

namespace vgpu::host {

// Events: a generation counter. Record() bumps `recorded` now and marks `completed` when the
// stream reaches it; waiters capture the generation current at their call (CUDA semantics).
class HostEvent : public Event {
 public:
  HostEvent() = default;
  // A waiter may destroy the event as soon as it sees completion, while the completing thread
  // is still inside mu_.Unlock(): taking mu_ here waits for it to leave (as
  // absl::Notification's destructor does).
  ~HostEvent() override { vgpu::MutexLock l(&mu_); }

  uint64_t BeginRecord() ABSL_LOCKS_EXCLUDED(mu_) {
    vgpu::MutexLock l(&mu_);
    return ++recorded_;
  }
  void Complete(uint64_t gen) ABSL_LOCKS_EXCLUDED(mu_) {
    vgpu::MutexLock l(&mu_);
    completed_ = std::max(completed_, gen);
  }
  uint64_t recorded() ABSL_LOCKS_EXCLUDED(mu_) {
    vgpu::MutexLock l(&mu_);
    return recorded_;
  }
  void WaitFor(uint64_t gen) ABSL_LOCKS_EXCLUDED(mu_) {
    vgpu::MutexLock l(&mu_);
    auto reached = [this, gen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return completed_ >= gen; };
    mu_.Await(absl::Condition(&reached));
  }
  absl::StatusOr<bool> Query() override ABSL_LOCKS_EXCLUDED(mu_) {
    vgpu::MutexLock l(&mu_);
    return completed_ >= recorded_;
  }
  absl::Status Synchronize() override ABSL_LOCKS_EXCLUDED(mu_) {
    WaitFor(recorded());
    return absl::OkStatus();
  }

 private:
  vgpu::Mutex mu_;
  uint64_t recorded_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace vgpu::host

#endif  // VGPU_RUNTIME_HOST_HOST_EVENT_H_
