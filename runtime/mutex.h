// The mutex the library's own classes use: std::mutex with the lock attributes libstdc++ lacks,
// so Clang's thread-safety analysis checks every ABSL_GUARDED_BY against it (the `tsa` preset),
// and ThreadSanitizer sees every lock and unlock (a system Abseil built without TSan hides
// absl::Mutex's from it, which shows up as false races). Await(condition) gives absl::Mutex's
// "wait until this holds" without a separate condition variable.
//
// Thread safety: a Mutex is what makes other classes thread-safe; MutexLock is a scoped owner
// used by one thread.
#ifndef VGPU_RUNTIME_MUTEX_H_
#define VGPU_RUNTIME_MUTEX_H_

#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"  // absl::Condition

namespace vgpu {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  // Waiters are woken while the lock is still held, so a waiter that then destroys the object
  // the mutex lives in never races with this call.
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    if (waiters_ > 0) cv_.notify_all();
    mu_.unlock();
  }
  // Blocks, with the lock released while waiting, until `condition` holds; the lock is held
  // when it is evaluated and on return.
  void Await(const absl::Condition& condition) ABSL_EXCLUSIVE_LOCKS_REQUIRED(this) {
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    // Waiting releases the lock as Unlock() does: the caller may have changed what the other
    // waiters wait for.
    if (waiters_ > 0) cv_.notify_all();
    ++waiters_;
    cv_.wait(lock, [&] { return condition.Eval(); });
    --waiters_;
    lock.release();
  }
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int waiters_ = 0;  // guarded by mu_
};

// Holds a Mutex for its scope; Release() gives it up early.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() {
    if (mu_ != nullptr) mu_->Unlock();
  }
  void Release() ABSL_UNLOCK_FUNCTION() {
    mu_->Unlock();
    mu_ = nullptr;
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* mu_;
};

}  // namespace vgpu

#endif  // VGPU_RUNTIME_MUTEX_H_
