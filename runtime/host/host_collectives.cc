#include "vgpu/runtime/host/host_collectives.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "vgpu/runtime/mutex.h"
#include "vgpu/runtime/host/host_platform.h"
#include "vgpu/runtime/status.h"

namespace vgpu::host {
namespace {

// out[begin, end) = scale * sum_j bufs[j][begin, end), summed in rank order in float; `out` may
// be one of the inputs (each element is read before it is written).
void ReduceSlice(const std::vector<float*>& bufs, float* out, uint64_t begin, uint64_t end,
                 float scale) {
  constexpr uint64_t kBlock = 2048;  // 8 KiB: stays in L1 while the ranks are added in
  float acc[kBlock];
  for (uint64_t b = begin; b < end; b += kBlock) {
    const uint64_t n = std::min(kBlock, end - b);
    std::memcpy(acc, bufs[0] + b, n * sizeof(float));
    for (size_t j = 1; j < bufs.size(); ++j) {
      const float* in = bufs[j] + b;
      for (uint64_t i = 0; i < n; ++i) acc[i] += in[i];
    }
    if (scale != 1.0f) {
      for (uint64_t i = 0; i < n; ++i) acc[i] *= scale;
    }
    std::memcpy(out + b, acc, n * sizeof(float));
  }
}

class HostCommunicator : public NcclCommunicator {
 public:
  explicit HostCommunicator(std::vector<Executor*> executors,
                            std::vector<std::vector<std::unique_ptr<Event>>> events)
      : executors_(std::move(executors)), events_(std::move(events)) {}

  int size() const override { return static_cast<int>(executors_.size()); }

  absl::Status AllReduce(absl::Span<const AllReduceBuffer> buffers, uint64_t count,
                         AllReduceOp op) override ABSL_LOCKS_EXCLUDED(mu_) {
    const size_t n = executors_.size();
    if (buffers.size() != n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "host communicator AllReduce: ", buffers.size(), " buffers for ", n, " ranks"));
    }
    for (size_t i = 0; i < n; ++i) {
      if (buffers[i].stream == nullptr || buffers[i].stream->executor() != executors_[i]) {
        return absl::InvalidArgumentError(
            absl::StrCat("host communicator AllReduce: the stream of rank ", i,
                         " does not belong to host device ", executors_[i]->ordinal()));
      }
      if (buffers[i].data == nullptr && count > 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("host communicator AllReduce: null buffer for rank ", i));
      }
    }
    if (count == 0) return absl::OkStatus();
    vgpu::MutexLock l(&mu_);
    auto bufs = std::make_shared<std::vector<float*>>();
    for (const AllReduceBuffer& b : buffers) bufs->push_back(b.data);
    const float scale = op == AllReduceOp::kMean ? 1.0f / static_cast<float>(n) : 1.0f;
    auto slice_begin = [count, n](size_t r) { return count * r / n; };

    // Phase 0: inputs ready. Phase 1: own slice reduced. Phase 2: other slices gathered.
    // Every phase's events are recorded (which always succeeds) before any stream waits on
    // them, so a failed enqueue below can leave results stale but never a stream waiting on an
    // event that is not coming. After an error the remaining ranks are still enqueued: healthy
    // streams finish the collective and the first error is returned.
    absl::Status first_error;
    auto keep = [&first_error](absl::Status s) {
      if (!s.ok() && first_error.ok()) first_error = std::move(s);
    };
    for (int phase = 0; phase < 3; ++phase) {
      if (phase > 0) {
        for (size_t r = 0; r < n; ++r) {
          Stream* s = buffers[r].stream;
          for (size_t k = 0; k < n; ++k) {
            if (k != r) keep(s->WaitEvent(events_[phase - 1][k].get()));
          }
          const uint64_t begin = slice_begin(r), end = slice_begin(r + 1);
          if (phase == 1) {
            keep(EnqueueHostTask(s, [bufs, r, begin, end, scale] {
              ReduceSlice(*bufs, (*bufs)[r], begin, end, scale);
              return absl::OkStatus();
            }));
          } else {
            keep(EnqueueHostTask(s, [bufs, r, slice_begin] {
              for (size_t k = 0; k < bufs->size(); ++k) {
                if (k == r) continue;
                const uint64_t b = slice_begin(k), e = slice_begin(k + 1);
                std::memcpy((*bufs)[r] + b, (*bufs)[k] + b, (e - b) * sizeof(float));
              }
              return absl::OkStatus();
            }));
          }
        }
      }
      for (size_t r = 0; r < n; ++r) keep(buffers[r].stream->RecordEvent(events_[phase][r].get()));
    }
    // Nothing later on a rank's stream may overwrite its slice while another rank copies it.
    for (size_t r = 0; r < n; ++r) {
      for (size_t k = 0; k < n; ++k) {
        if (k != r) keep(buffers[r].stream->WaitEvent(events_[2][k].get()));
      }
    }
    return first_error;
  }

 private:
  std::vector<Executor*> executors_;
  // One collective at a time records and waits on the events.
  vgpu::Mutex mu_;
  std::vector<std::vector<std::unique_ptr<Event>>> events_ ABSL_GUARDED_BY(mu_);  // [phase][rank]
};

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCommunicator>> CreateHostCommunicator(
    absl::Span<Executor* const> executors) {
  std::vector<std::vector<std::unique_ptr<Event>>> events(3);
  for (auto& phase : events) {
    for (Executor* e : executors) {
      VGPU_ASSIGN_OR_RETURN(std::unique_ptr<Event> ev, e->CreateEvent());
      phase.push_back(std::move(ev));
    }
  }
  return std::unique_ptr<NcclCommunicator>(std::make_unique<HostCommunicator>(
      std::vector<Executor*>(executors.begin(), executors.end()), std::move(events)));
}

}  // namespace vgpu::host
