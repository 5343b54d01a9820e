#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "vgpu/runtime/cuda/cuda_executor.h"
#include "vgpu/runtime/status.h"

namespace vgpu::cuda {
// ---------------------------------------------------------------------------------------------
// Events

CudaEvent::CudaEvent(CudaExecutor* executor, CUevent primary_event) : executor_(executor) {
  events_[executor->context()] = primary_event;
  executor_->EventCreated(this);
}

CudaEvent::~CudaEvent() {
  std::map<CUcontext, CUevent> events;
  {
    vgpu::MutexLock l(&mu_);
    events.swap(events_);
  }
  // Green-context events of contexts destroyed since were destroyed with them (executor).
  executor_->EventDestroyed(this, std::move(events));
}

std::vector<std::pair<CUcontext, CUevent>> CudaEvent::TakeEventsExcept(CUcontext keep) {
  vgpu::MutexLock l(&mu_);
  std::vector<std::pair<CUcontext, CUevent>> out;
  for (auto it = events_.begin(); it != events_.end();) {
    if (it->first == keep) {
      ++it;
      continue;
    }
    if (latest_ == it->second) latest_ = nullptr;  // its work ran before the context died
    out.push_back(*it);
    it = events_.erase(it);
  }
  return out;
}

absl::StatusOr<CUevent> CudaEvent::EventFor(CUcontext ctx) {
  vgpu::MutexLock l(&mu_);
  auto it = events_.find(ctx);
  if (it != events_.end()) return it->second;
  CUevent event = nullptr;
  VGPU_RETURN_IF_ERROR(
      ToStatus(executor_->driver().cuEventCreate(&event, CU_EVENT_DISABLE_TIMING),
               absl::StrCat(executor_->label(), ": cuEventCreate in an SM partition")));
  events_[ctx] = event;
  return event;
}

void CudaEvent::MarkRecorded(CUevent event) {
  vgpu::MutexLock l(&mu_);
  latest_ = event;
}

CUevent CudaEvent::latest() {
  vgpu::MutexLock l(&mu_);
  return latest_;
}

absl::StatusOr<bool> CudaEvent::Query() {
  CUevent event = latest();
  if (event == nullptr) return true;  // never recorded: complete, as in CUDA
  VGPU_CUDA_SCOPE(executor_->driver(), executor_->context());
  CUresult r = executor_->driver().cuEventQuery(event);
  if (r == CUDA_SUCCESS) return true;
  if (r == CUDA_ERROR_NOT_READY) return false;
  return ToStatus(r, absl::StrCat(executor_->label(), ": cuEventQuery"));
}

absl::Status CudaEvent::Synchronize() {
  CUevent event = latest();
  if (event == nullptr) return absl::OkStatus();
  VGPU_CUDA_SCOPE(executor_->driver(), executor_->context());
  return ToStatus(executor_->driver().cuEventSynchronize(event),
                  absl::StrCat(executor_->label(), ": cuEventSynchronize"));
}

}  // namespace vgpu::cuda
