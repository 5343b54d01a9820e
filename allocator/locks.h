// The allocators' locks, annotated for Clang's thread-safety analysis (ABSL_GUARDED_BY and
// friends work with them as with absl::Mutex):
//   SpinLock / SpinLockGuard   - BFCAllocator's lock: critical sections of tens of nanoseconds.
//   StdMutex / StdMutexLock    - std::mutex for the vmm and async allocators, trace recording and
//                                memory history: Debian's absl::Mutex runs deadlock detection on
//                                every Lock (about 4x std::mutex, measured with vgpu-bench replay
//                                of the vmm kind), too slow for a per-allocation lock.
//
// Thread safety: these are the locks; a guard object belongs to one thread.
#ifndef VGPU_ALLOCATOR_LOCKS_H_
#define VGPU_ALLOCATOR_LOCKS_H_

#include <atomic>
#include <mutex>
#include <thread>

#include "absl/base/thread_annotations.h"

namespace vgpu {

// BFCAllocator's one lock. Critical sections are tens of nanoseconds, so a test-and-set lock
// that yields the core after a short spin beats a futex mutex (std::mutex costs two library
// calls per operation; Debian's absl::Mutex also runs deadlock detection).
class ABSL_LOCKABLE SpinLock {
 public:
  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      for (int i = 0; locked_.load(std::memory_order_relaxed); ++i) {
        if (i < 64) {
#if defined(__x86_64__) || defined(__i386__)
          __builtin_ia32_pause();
#endif
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  void unlock() ABSL_UNLOCK_FUNCTION() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

// Holds a SpinLock for its scope (std::lock_guard, which Clang's analysis cannot see through).
class ABSL_SCOPED_LOCKABLE SpinLockGuard {
 public:
  explicit SpinLockGuard(SpinLock& mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_.lock(); }
  ~SpinLockGuard() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  SpinLockGuard(const SpinLockGuard&) = delete;
  SpinLockGuard& operator=(const SpinLockGuard&) = delete;

 private:
  SpinLock& mu_;
};

// std::mutex with the lock attributes libstdc++ lacks.
class ABSL_LOCKABLE StdMutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// Holds a StdMutex for its scope; Release() gives it up early (absl::ReleasableMutexLock).
class ABSL_SCOPED_LOCKABLE StdMutexLock {
 public:
  explicit StdMutexLock(StdMutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~StdMutexLock() ABSL_UNLOCK_FUNCTION() {
    if (mu_ != nullptr) mu_->Unlock();
  }
  void Release() ABSL_UNLOCK_FUNCTION() {
    mu_->Unlock();
    mu_ = nullptr;
  }
  StdMutexLock(const StdMutexLock&) = delete;
  StdMutexLock& operator=(const StdMutexLock&) = delete;

 private:
  StdMutex* mu_;
};

}  // namespace vgpu

#endif  // VGPU_ALLOCATOR_LOCKS_H_
