// The allocators' locks, annotated for Clang's thread-safety analysis (ABSL_GUARDED_BY and
// friends work with them as with absl::Mutex):
//   SpinLock / SpinLockGuard   - BFCAllocator's lock: critical sections of tens of nanoseconds.
//   FutexMutex / FutexMutexLock - the vmm allocator's lock: held for hundreds of nanoseconds on
//                                the host but for driver calls (tens of microseconds) on a card,
//                                so waiters must sleep, not spin; its uncontended Lock/Unlock are
//                                one atomic each, inline (std::mutex is two library calls).
//   StdMutex / StdMutexLock    - std::mutex for the async allocator, stream slots, trace
//                                recording and memory history: Debian's absl::Mutex runs deadlock
//                                detection on every Lock (about 4x std::mutex, measured with
//                                vgpu-bench replay of the vmm kind), too slow for a per-allocation
//                                lock.
//
// Thread safety: these are the locks; a guard object belongs to one thread.
#ifndef VGPU_ALLOCATOR_LOCKS_H_
#define VGPU_ALLOCATOR_LOCKS_H_

#include <atomic>
#include <cstdint>
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

// A mutex on the Linux futex (the three-state mutex of Drepper's "Futexes Are Tricky"): 0 free,
// 1 held, 2 held with possible sleepers. Uncontended, Lock is one compare-exchange and Unlock
// one exchange, both inline; a contended Lock spins briefly, then sleeps in the kernel, and
// Unlock wakes one sleeper only when there may be one. Not recursive. The atomics carry the
// acquire/release ordering, so ThreadSanitizer sees the lock as it sees any atomic.
class ABSL_LOCKABLE FutexMutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    uint32_t c = 0;
    if (!state_.compare_exchange_strong(c, 1, std::memory_order_acquire,
                                        std::memory_order_relaxed)) {
      LockSlow();
    }
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    if (state_.exchange(0, std::memory_order_release) == 2) WakeOne();
  }

 private:
  void LockSlow();
  void WakeOne();
  std::atomic<uint32_t> state_{0};
};

// std::mutex with the lock attributes libstdc++ lacks.
class ABSL_LOCKABLE StdMutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// Holds a FutexMutex or StdMutex for its scope; Release() gives it up early
// (absl::ReleasableMutexLock).
template <class M>
class ABSL_SCOPED_LOCKABLE ReleasableLock {
 public:
  explicit ReleasableLock(M* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~ReleasableLock() ABSL_UNLOCK_FUNCTION() {
    if (mu_ != nullptr) mu_->Unlock();
  }
  void Release() ABSL_UNLOCK_FUNCTION() {
    mu_->Unlock();
    mu_ = nullptr;
  }
  ReleasableLock(const ReleasableLock&) = delete;
  ReleasableLock& operator=(const ReleasableLock&) = delete;

 private:
  M* mu_;
};
using FutexMutexLock = ReleasableLock<FutexMutex>;
using StdMutexLock = ReleasableLock<StdMutex>;

}  // namespace vgpu

#endif  // VGPU_ALLOCATOR_LOCKS_H_
