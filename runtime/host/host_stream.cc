#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <set>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "vgpu/runtime/mutex.h"
#include "vgpu/runtime/host/host_event.h"
#include "vgpu/runtime/host/host_internal.h"
#include "vgpu/runtime/host/host_platform.h"

namespace vgpu::host {
namespace {

// ---------------------------------------------------------------------------------------------
// Streams: one worker thread runs the queued work in order. The first failing task makes the
// stream's error sticky; later tasks are skipped (as a CUDA context after a fault).
class HostStream : public Stream {
 public:
  HostStream(Executor* executor, int priority, HostFaultInjection* faults)
      : executor_(executor), priority_(priority), faults_(faults), worker_([this] { Run(); }) {}
  ~HostStream() override {
    {
      vgpu::MutexLock l(&mu_);
      stop_ = true;
    }
    worker_.join();
  }

  Executor* executor() const override { return executor_; }
  int priority() const override { return priority_; }

  absl::Status MemcpyH2D(void* dst, const void* src, uint64_t bytes) override {
    return Copy(dst, src, bytes);
  }
  absl::Status MemcpyD2H(void* dst, const void* src, uint64_t bytes) override {
    return Copy(dst, src, bytes);
  }
  absl::Status MemcpyD2D(void* dst, const void* src, uint64_t bytes) override {
    return Copy(dst, src, bytes);
  }
  absl::Status Memset8(void* dst, uint8_t value, uint64_t bytes) override {
    if (bytes == 0) return Error();
    if (dst == nullptr) return absl::InvalidArgumentError("Memset8: null destination");
    return Enqueue([=] {
      std::memset(dst, value, bytes);
      return absl::OkStatus();
    });
  }
  absl::Status Memset32(void* dst, uint32_t value, uint64_t count) override {
    if (count == 0) return Error();
    if (dst == nullptr) return absl::InvalidArgumentError("Memset32: null destination");
    return Enqueue([=] {
      std::fill_n(static_cast<uint32_t*>(dst), count, value);
      return absl::OkStatus();
    });
  }
  absl::Status RecordEvent(Event* event) override {
    auto* e = static_cast<HostEvent*>(event);
    uint64_t gen = e->BeginRecord();
    return EnqueueAlways([e, gen] { e->Complete(gen); });
  }
  absl::Status WaitEvent(Event* event) override {
    auto* e = static_cast<HostEvent*>(event);
    uint64_t gen = e->recorded();
    return Enqueue([e, gen] {
      e->WaitFor(gen);
      return absl::OkStatus();
    });
  }
  absl::Status LaunchHostFunc(std::function<void()> fn) override {
    return Enqueue([fn = std::move(fn)] {
      fn();
      return absl::OkStatus();
    });
  }
  absl::Status Synchronize() override ABSL_LOCKS_EXCLUDED(mu_) {
    vgpu::MutexLock l(&mu_);
    mu_.Await(absl::Condition(this, &HostStream::Idle));
    return error_;
  }

  // Queues `task`; returns the sticky error instead when the stream has failed.
  absl::Status Enqueue(std::function<absl::Status()> task) ABSL_LOCKS_EXCLUDED(mu_) {
    vgpu::MutexLock l(&mu_);
    if (!error_.ok()) return error_;
    queue_.push_back(std::move(task));
    return absl::OkStatus();
  }

 private:
  // Await conditions (vgpu::Mutex wakes the waiters whose condition became true on unlock).
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty() && !busy_; }
  bool HasWorkOrStop() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !queue_.empty(); }

  absl::Status Error() ABSL_LOCKS_EXCLUDED(mu_) {
    vgpu::MutexLock l(&mu_);
    return error_;
  }
  // Event completions run even on a failed stream so that waiters never hang.
  absl::Status EnqueueAlways(std::function<void()> fn) ABSL_LOCKS_EXCLUDED(mu_) {
    vgpu::MutexLock l(&mu_);
    queue_.push_back([fn = std::move(fn)] {
      fn();
      return absl::OkStatus();
    });
    always_.insert(queue_.size() + consumed_);
    return absl::OkStatus();
  }

  absl::Status Copy(void* dst, const void* src, uint64_t bytes) {
    if (bytes == 0) return Error();
    if (dst == nullptr || src == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("memcpy of ", bytes, " bytes: null pointer"));
    }
    int64_t call = ++faults_->memcpy_calls;
    bool fail = faults_->fail_memcpy_at.load() == call;
    bool corrupt = faults_->corrupt_memcpy_at.load() == call;
    return Enqueue([=] {
      if (fail) {
        return absl::InternalError(
            absl::StrCat("host platform: injected failure of memcpy #", call));
      }
      std::memmove(dst, src, bytes);
      if (corrupt) static_cast<uint8_t*>(dst)[bytes / 2] ^= 0x5a;
      return absl::OkStatus();
    });
  }

  void Run() ABSL_LOCKS_EXCLUDED(mu_) {
    mu_.Lock();
    while (true) {
      mu_.Await(absl::Condition(this, &HostStream::HasWorkOrStop));
      if (queue_.empty()) break;  // stop_ and drained
      std::function<absl::Status()> task = std::move(queue_.front());
      queue_.pop_front();
      uint64_t index = ++consumed_;
      bool always = always_.erase(index) > 0;
      bool skip = !error_.ok() && !always;
      busy_ = true;
      mu_.Unlock();
      absl::Status s = skip ? absl::OkStatus() : task();
      mu_.Lock();
      busy_ = false;
      if (!s.ok() && error_.ok()) error_ = s;
    }
    mu_.Unlock();
  }

  Executor* executor_;
  int priority_;
  HostFaultInjection* faults_;
  vgpu::Mutex mu_;
  std::deque<std::function<absl::Status()>> queue_ ABSL_GUARDED_BY(mu_);
  // 1-based positions of tasks that run even after an error.
  std::set<uint64_t> always_ ABSL_GUARDED_BY(mu_);
  uint64_t consumed_ ABSL_GUARDED_BY(mu_) = 0;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::thread worker_;  // last: starts after the members above exist
};

}  // namespace

std::unique_ptr<Stream> CreateHostStream(Executor* executor, int priority,
                                         HostFaultInjection* faults) {
  return std::make_unique<HostStream>(executor, priority, faults);
}

}  // namespace vgpu::host

namespace vgpu {

absl::Status EnqueueHostTask(Stream* stream, std::function<absl::Status()> task) {
  auto* host = dynamic_cast<host::HostStream*>(stream);
  if (host == nullptr) {
    return absl::InvalidArgumentError("host kernels need a host-platform stream");
  }
  return host->Enqueue(std::move(task));
}

}  // namespace vgpu
