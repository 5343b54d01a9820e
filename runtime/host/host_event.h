// The host platform's Event (runtime/host/internal.h's streams record and wait on it).
//
// Thread safety: safe from any thread.
#ifndef VGPU_RUNTIME_HOST_HOST_EVENT_H_
#define VGPU_RUNTIME_HOST_HOST_EVENT_H_

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "vgpu/runtime/platform.h"

namespace vgpu::host {

// Events: a generation counter. Record() bumps `recorded` now and marks `completed` when the
// stream reaches it; waiters capture the generation current at their call (CUDA semantics).
class HostEvent : public Event {
 public:
  uint64_t BeginRecord() {
    std::lock_guard<std::mutex> l(mu_);
    return ++recorded_;
  }
  void Complete(uint64_t gen) {
    // Notify under the lock: a waiter may destroy the event as soon as it sees completion.
    std::lock_guard<std::mutex> l(mu_);
    completed_ = std::max(completed_, gen);
    cv_.notify_all();
  }
  uint64_t recorded() {
    std::lock_guard<std::mutex> l(mu_);
    return recorded_;
  }
  void WaitFor(uint64_t gen) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return completed_ >= gen; });
  }
  absl::StatusOr<bool> Query() override {
    std::lock_guard<std::mutex> l(mu_);
    return completed_ >= recorded_;
  }
  absl::Status Synchronize() override {
    WaitFor(recorded());
    return absl::OkStatus();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t recorded_ = 0;
  uint64_t completed_ = 0;
};

}  // namespace vgpu::host

#endif  // VGPU_RUNTIME_HOST_HOST_EVENT_H_
