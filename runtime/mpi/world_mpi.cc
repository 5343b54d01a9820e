// runtime/mpi/world.h on MPI (runtime/CMakeLists.txt compiles this file when find_package(MPI)
// finds a library and VGPU_WITH_MPI is ON).
//
// No blocking MPI call after World::Get: every message is a nonblocking MPI_Isend/MPI_Irecv,
// and an Exchange polls its requests with MPI_Testsome, sleeping 50 us doubling to 1 ms
// between polls, until they are done or the call's deadline passes. On a deadline the
// requests still open are cancelled where MPI can (receives) and buried with the buffers
// they point into (the world's own staging memory, never the caller's), and reaped by later
// calls once MPI lets go of them.
//
// The collectives go through rank 0 in chunks of at most kChunkBytes and run on their own
// duplicate of MPI_COMM_WORLD; each one's messages carry its sequence number as the tag, so a
// late message of an abandoned collective never matches a later collective's receive. Send and
// Recv run on a second duplicate, with the user's tags.
// The C API only: without these, Open MPI's (and MPICH's) mpi.h drags in the removed C++
// bindings, which need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "vgpu/runtime/mpi/world.h"
#include "vgpu/runtime/status.h"

namespace vgpu {
namespace mpi {
namespace {

// The largest message a collective sends: bounds the staging memory (rank 0 holds one chunk
// per rank) whatever the buffer's size.
constexpr size_t kChunkBytes = size_t{4} << 20;

constexpr absl::Duration kFirstPoll = absl::Microseconds(50);
constexpr absl::Duration kLongestPoll = absl::Milliseconds(1);
// How long a waiting call keeps yielding the core instead of sleeping after the last progress:
// MPI moves a large message in fragments, each needing a test on both sides, so sleeping
// between tests costs a sleep per fragment (a 1 MiB all-reduce took ~30 ms that way, ~1 ms
// yielding). Past this, the wait is a real one and sleeps back off to kLongestPoll, so a
// stuck peer does not eat a core.
constexpr absl::Duration kYieldWindow = absl::Milliseconds(20);

// The idle step of every polling loop.
class Poller {
 public:
  // `progressed`: something completed since the last call (the yield window starts again).
  void Idle(bool progressed, absl::Duration left) {
    const absl::Time now = absl::Now();
    if (progressed) {
      last_progress_ = now;
      pause_ = kFirstPoll;
    }
    if (now - last_progress_ < kYieldWindow) {
      sched_yield();
      return;
    }
    absl::SleepFor(std::min(pause_, left));
    pause_ = std::min(pause_ * 2, kLongestPoll);
  }

 private:
  absl::Time last_progress_ = absl::Now();
  absl::Duration pause_ = kFirstPoll;
};

// The one translation of MPI error codes (MPI_ERRORS_RETURN is set on the world's
// communicators) into a status; `op` says what failed, on which rank.
absl::Status ToStatus(int mpi_error, absl::string_view op) {
  if (mpi_error == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(mpi_error, text, &length) != MPI_SUCCESS) length = 0;
  int error_class = MPI_ERR_UNKNOWN;
  if (MPI_Error_class(mpi_error, &error_class) != MPI_SUCCESS) error_class = MPI_ERR_UNKNOWN;
  std::string message =
      absl::StrCat(op, ": ", length > 0 ? absl::string_view(text, length) : "unknown MPI error",
                   " (MPI error ", mpi_error, ")");
  switch (error_class) {
    case MPI_ERR_BUFFER:
    case MPI_ERR_COUNT:
    case MPI_ERR_TYPE:
    case MPI_ERR_TAG:
    case MPI_ERR_COMM:
    case MPI_ERR_RANK:
    case MPI_ERR_ROOT:
    case MPI_ERR_GROUP:
    case MPI_ERR_OP:
    case MPI_ERR_ARG:
    case MPI_ERR_TRUNCATE:
      return absl::InvalidArgumentError(message);
    case MPI_ERR_NO_MEM:
      return absl::ResourceExhaustedError(message);
    case MPI_ERR_UNSUPPORTED_OPERATION:
      return absl::UnimplementedError(message);
    case MPI_ERR_OTHER:  // Open MPI's class for a lost connection to a peer
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

// Memory MPI reads from or writes into; shared with the graveyard when a call gives up.
using Staging = std::shared_ptr<char[]>;
Staging NewStaging(size_t bytes) { return Staging(new char[std::max<size_t>(bytes, 1)]); }

std::string RankList(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return absl::StrJoin(ranks, ", ");
}

// One call: its name in messages ("AllReduce on rank 3"), deadline and tag.
struct Call {
  std::string where;
  absl::Duration timeout;
  absl::Time deadline;
  int tag = 0;
};

absl::Status TimedOut(const Call& call, absl::string_view waiting_for) {
  return absl::DeadlineExceededError(absl::StrCat(call.where, " timed out after ",
                                                  absl::FormatDuration(call.timeout),
                                                  " waiting for ", waiting_for));
}

class MpiWorld;

// The nonblocking messages of one step of a call, polled together until done or the deadline.
// Whatever is still open when it is destroyed (a deadline, an error, an early return) goes to
// the world's graveyard with the staging memory it was given.
class Exchange {
 public:
  Exchange(MpiWorld* world, const Call& call, MPI_Comm comm)
      : world_(world), call_(call), comm_(comm) {}
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;
  ~Exchange();

  void Keep(const Staging& staging) { keep_.push_back(staging); }
  absl::Status Send(const char* data, size_t bytes, int peer);
  // Exactly `bytes` from `peer`; a message of another size is InvalidArgument.
  absl::Status Recv(char* data, size_t bytes, int peer);
  // A receive already started (MPI_Imrecv).
  void Adopt(MPI_Request request, int peer, size_t bytes) {
    open_.push_back({request, peer, true, bytes});
  }
  absl::Status Wait();

 private:
  struct Open {
    MPI_Request request;
    int peer;
    bool receive;
    size_t bytes;
  };
  MpiWorld* world_;
  const Call& call_;
  MPI_Comm comm_;
  std::vector<Open> open_;
  std::vector<Staging> keep_;
};

class MpiWorld final : public World {
 public:
  static absl::StatusOr<World*> Create();

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }

  absl::Status SetDefaultTimeout(absl::Duration timeout) override {
    if (timeout <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "vgpu mpi: default timeout ", absl::FormatDuration(timeout), " must be positive"));
    }
    default_timeout_ = timeout;
    return absl::OkStatus();
  }
  absl::Duration default_timeout() const override { return default_timeout_; }
  absl::Status Barrier(absl::Duration timeout) override;
  absl::Status Broadcast(void* data, size_t bytes, int root, absl::Duration timeout) override;
  absl::Status AllGather(const void* send, size_t bytes, void* recv,
                         absl::Duration timeout) override;
  absl::Status AllReduce(float* data, size_t count, ReduceOp op, absl::Duration timeout) override;
  absl::Status Send(const void* data, size_t bytes, int to, int tag,
                    absl::Duration timeout) override;
  absl::StatusOr<int> Recv(void* data, size_t bytes, int from, int tag,
                           absl::Duration timeout) override;
  [[noreturn]] void Abort(absl::string_view message, int exit_code) override;

  // Requests a call gave up on, with the memory they use; freed once MPI completes them.
  void Bury(MPI_Request request, std::vector<Staging> keep) {
    graveyard_.push_back({request, std::move(keep)});
  }
  // Before MPI_Finalize: frees every buried request, keeping the memory they use.
  void ForgetGraveyard();

 private:
  struct Grave {
    MPI_Request request;
    std::vector<Staging> keep;
  };

  void Reap();
  // Checks the timeout and sets up a call; a collective takes the next sequence number (before
  // any check, so every rank stays in step).
  absl::StatusOr<Call> Begin(absl::string_view what, absl::Duration timeout, bool collective);
  absl::Status CheckPeer(const Call& call, int peer, absl::string_view role, bool any) const;
  // A point-to-point message's tag, size and buffer (Send and Recv alike).
  absl::Status CheckMessage(const Call& call, int tag, const void* data, size_t bytes) const;
  absl::Status BroadcastChunks(const Call& call, char* data, size_t bytes, int root);

  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  int tag_ub_ = 32767;  // the least MPI guarantees
  absl::Duration default_timeout_ = kDefaultTimeout;
  MPI_Comm collectives_ = MPI_COMM_NULL;
  MPI_Comm point_to_point_ = MPI_COMM_NULL;
  uint64_t sequence_ = 0;
  std::vector<Grave> graveyard_;
};

Exchange::~Exchange() {
  for (Open& open : open_) {
    if (open.request == MPI_REQUEST_NULL) continue;
    // A receive not yet matched is cancelled; a send (or a matched receive) must finish in
    // MPI's own time, so its staging memory stays alive in the graveyard until then.
    if (open.receive) MPI_Cancel(&open.request);
    world_->Bury(open.request, keep_);
  }
}

absl::Status Exchange::Send(const char* data, size_t bytes, int peer) {
  MPI_Request request = MPI_REQUEST_NULL;
  int error = MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peer, call_.tag, comm_, &request);
  VGPU_RETURN_IF_ERROR(ToStatus(error, absl::StrCat(call_.where, ": sending to rank ", peer)));
  open_.push_back({request, peer, false, bytes});
  return absl::OkStatus();
}

absl::Status Exchange::Recv(char* data, size_t bytes, int peer) {
  MPI_Request request = MPI_REQUEST_NULL;
  int error = MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, peer, call_.tag, comm_, &request);
  VGPU_RETURN_IF_ERROR(ToStatus(error, absl::StrCat(call_.where, ": receiving from rank ", peer)));
  open_.push_back({request, peer, true, bytes});
  return absl::OkStatus();
}

absl::Status Exchange::Wait() {
  const int n = static_cast<int>(open_.size());
  std::vector<MPI_Request> requests(n);
  for (int i = 0; i < n; ++i) requests[i] = open_[i].request;
  std::vector<int> done(n);
  std::vector<MPI_Status> statuses(n);
  Poller poller;
  int remaining = n;
  while (remaining > 0) {
    int count = 0;
    int error = MPI_Testsome(n, requests.data(), &count, done.data(), statuses.data());
    for (int i = 0; i < n; ++i) open_[i].request = requests[i];  // completed ones are null
    if (error != MPI_SUCCESS && error != MPI_ERR_IN_STATUS) {
      return ToStatus(error, absl::StrCat(call_.where, ": testing requests"));
    }
    if (count == MPI_UNDEFINED) break;
    for (int k = 0; k < count; ++k) {
      const Open& open = open_[done[k]];
      const MPI_Status& status = statuses[k];
      --remaining;
      if (error == MPI_ERR_IN_STATUS && status.MPI_ERROR != MPI_SUCCESS) {
        int error_class = MPI_ERR_UNKNOWN;
        MPI_Error_class(status.MPI_ERROR, &error_class);
        if (open.receive && error_class == MPI_ERR_TRUNCATE) {
          return absl::InvalidArgumentError(
              absl::StrCat(call_.where, ": rank ", open.peer, " sent a message larger than the ",
                           open.bytes, " bytes expected (do all ranks pass the same size?)"));
        }
        return ToStatus(status.MPI_ERROR,
                        absl::StrCat(call_.where,
                                     open.receive ? ": receiving from rank " : ": sending to rank ",
                                     open.peer));
      }
      if (open.receive) {
        int got = 0;
        MPI_Get_count(&status, MPI_BYTE, &got);
        if (got < 0 || static_cast<size_t>(got) != open.bytes) {
          return absl::InvalidArgumentError(
              absl::StrCat(call_.where, ": rank ", open.peer, " sent ", got, " bytes where ",
                           open.bytes, " were expected (do all ranks pass the same size?)"));
        }
      }
    }
    if (remaining == 0) break;
    absl::Duration left = call_.deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      std::vector<int> missing;
      for (const Open& open : open_) {
        if (open.request != MPI_REQUEST_NULL) missing.push_back(open.peer);
      }
      return TimedOut(call_, absl::StrCat("rank(s) ", RankList(missing)));
    }
    poller.Idle(count > 0, left);
  }
  open_.clear();
  return absl::OkStatus();
}

void MpiWorld::Reap() {
  size_t kept = 0;
  for (Grave& grave : graveyard_) {
    int done = 0;
    if (MPI_Test(&grave.request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) done = 1;
    if (!done) graveyard_[kept++] = std::move(grave);
  }
  graveyard_.resize(kept);
}

void MpiWorld::ForgetGraveyard() {
  // The staging memory stays (the world is never destroyed): MPI may still point into it.
  for (Grave& grave : graveyard_) {
    if (grave.request != MPI_REQUEST_NULL) MPI_Request_free(&grave.request);
  }
}

absl::StatusOr<Call> MpiWorld::Begin(absl::string_view what, absl::Duration timeout,
                                     bool collective) {
  Call call;
  if (collective) {
    call.tag = static_cast<int>(sequence_ % (static_cast<uint64_t>(tag_ub_) + 1));
    ++sequence_;
  }
  call.where = absl::StrCat("vgpu mpi: ", what, " on rank ", rank_);
  if (timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat(call.where, ": negative timeout ", absl::FormatDuration(timeout),
                     " (zero means the default, ", absl::FormatDuration(default_timeout_), ")"));
  }
  Reap();
  call.timeout = timeout == absl::ZeroDuration() ? default_timeout_ : timeout;
  call.deadline = absl::Now() + call.timeout;
  return call;
}

absl::Status MpiWorld::CheckPeer(const Call& call, int peer, absl::string_view role,
                                 bool any) const {
  if (any && peer == kAnySource) return absl::OkStatus();
  if (peer < 0 || peer >= size_) {
    return absl::InvalidArgumentError(absl::StrCat(call.where, ": ", role, " rank ", peer,
                                                   " is outside the world's ranks 0..", size_ - 1,
                                                   any ? " (or World::kAnySource)" : ""));
  }
  return absl::OkStatus();
}

absl::Status MpiWorld::CheckMessage(const Call& call, int tag, const void* data,
                                    size_t bytes) const {
  if (tag < 0 || tag > tag_ub_) {
    return absl::InvalidArgumentError(
        absl::StrCat(call.where, ": tag ", tag, " is outside 0..", tag_ub_, " (MPI_TAG_UB)"));
  }
  if (bytes > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat(call.where, ": one message holds at most ", INT_MAX, " bytes"));
  }
  if (bytes > 0 && data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(call.where, ": null buffer"));
  }
  return absl::OkStatus();
}

absl::Status MpiWorld::Barrier(absl::Duration timeout) {
  VGPU_ASSIGN_OR_RETURN(Call call, Begin("Barrier", timeout, true));
  Exchange arrive(this, call, collectives_);
  if (rank_ != 0) {
    VGPU_RETURN_IF_ERROR(arrive.Send(nullptr, 0, 0));
    VGPU_RETURN_IF_ERROR(arrive.Recv(nullptr, 0, 0));  // the release
    return arrive.Wait();
  }
  for (int peer = 1; peer < size_; ++peer) VGPU_RETURN_IF_ERROR(arrive.Recv(nullptr, 0, peer));
  VGPU_RETURN_IF_ERROR(arrive.Wait());
  Exchange release(this, call, collectives_);
  for (int peer = 1; peer < size_; ++peer) VGPU_RETURN_IF_ERROR(release.Send(nullptr, 0, peer));
  return release.Wait();
}

absl::Status MpiWorld::BroadcastChunks(const Call& call, char* data, size_t bytes, int root) {
  const size_t capacity = std::min(bytes, kChunkBytes);
  Staging staging = NewStaging(capacity);
  // At least one message, so that an empty broadcast still meets every rank.
  for (size_t offset = 0; offset == 0 || offset < bytes; offset += kChunkBytes) {
    const size_t n = std::min(kChunkBytes, bytes - offset);
    Exchange exchange(this, call, collectives_);
    exchange.Keep(staging);
    if (rank_ == root) {
      if (n > 0) std::memcpy(staging.get(), data + offset, n);
      for (int peer = 0; peer < size_; ++peer) {
        if (peer != root) VGPU_RETURN_IF_ERROR(exchange.Send(staging.get(), n, peer));
      }
      VGPU_RETURN_IF_ERROR(exchange.Wait());
    } else {
      VGPU_RETURN_IF_ERROR(exchange.Recv(staging.get(), n, root));
      VGPU_RETURN_IF_ERROR(exchange.Wait());
      if (n > 0) std::memcpy(data + offset, staging.get(), n);
    }
  }
  return absl::OkStatus();
}

absl::Status MpiWorld::Broadcast(void* data, size_t bytes, int root, absl::Duration timeout) {
  VGPU_ASSIGN_OR_RETURN(Call call,
                        Begin(absl::StrCat("Broadcast from rank ", root), timeout, true));
  VGPU_RETURN_IF_ERROR(CheckPeer(call, root, "root", false));
  if (bytes > 0 && data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(call.where, ": null buffer of ", bytes, " bytes"));
  }
  return BroadcastChunks(call, static_cast<char*>(data), bytes, root);
}

absl::Status MpiWorld::AllGather(const void* send, size_t bytes, void* recv,
                                 absl::Duration timeout) {
  VGPU_ASSIGN_OR_RETURN(Call call, Begin("AllGather", timeout, true));
  if (bytes > SIZE_MAX / static_cast<size_t>(size_)) {
    return absl::InvalidArgumentError(
        absl::StrCat(call.where, ": ", bytes, " bytes times ", size_, " ranks overflows size_t"));
  }
  if (bytes > 0 && (send == nullptr || recv == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat(call.where, ": null buffer for blocks of ", bytes, " bytes"));
  }
  const char* mine = static_cast<const char*>(send);
  char* all = static_cast<char*>(recv);
  const size_t capacity = std::min(bytes, kChunkBytes);
  // Gather to rank 0, one chunk of every block at a time.
  if (rank_ == 0) {
    if (bytes > 0) std::memmove(all, mine, bytes);
    Staging staging = NewStaging(capacity * (size_ - 1));
    for (size_t offset = 0; offset == 0 || offset < bytes; offset += kChunkBytes) {
      const size_t n = std::min(kChunkBytes, bytes - offset);
      Exchange exchange(this, call, collectives_);
      exchange.Keep(staging);
      for (int peer = 1; peer < size_; ++peer) {
        VGPU_RETURN_IF_ERROR(exchange.Recv(staging.get() + capacity * (peer - 1), n, peer));
      }
      VGPU_RETURN_IF_ERROR(exchange.Wait());
      for (int peer = 1; peer < size_ && n > 0; ++peer) {
        std::memcpy(all + bytes * peer + offset, staging.get() + capacity * (peer - 1), n);
      }
    }
  } else {
    Staging staging = NewStaging(capacity);
    for (size_t offset = 0; offset == 0 || offset < bytes; offset += kChunkBytes) {
      const size_t n = std::min(kChunkBytes, bytes - offset);
      Exchange exchange(this, call, collectives_);
      exchange.Keep(staging);
      if (n > 0) std::memcpy(staging.get(), mine + offset, n);
      VGPU_RETURN_IF_ERROR(exchange.Send(staging.get(), n, 0));
      VGPU_RETURN_IF_ERROR(exchange.Wait());
    }
  }
  // Then every block from rank 0 to everyone.
  return BroadcastChunks(call, all, bytes * size_, 0);
}

absl::Status MpiWorld::AllReduce(float* data, size_t count, ReduceOp op, absl::Duration timeout) {
  VGPU_ASSIGN_OR_RETURN(
      Call call, Begin(op == ReduceOp::kMean ? "AllReduce (mean)" : "AllReduce", timeout, true));
  if (count > SIZE_MAX / sizeof(float)) {
    return absl::InvalidArgumentError(
        absl::StrCat(call.where, ": ", count, " floats overflow size_t bytes"));
  }
  if (count > 0 && data == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(call.where, ": null buffer of ", count, " floats"));
  }
  constexpr size_t kChunkFloats = kChunkBytes / sizeof(float);
  const size_t capacity = std::min(count, kChunkFloats);
  const float scale = static_cast<float>(size_);
  Staging out = NewStaging(capacity * sizeof(float));
  if (rank_ == 0) {
    Staging in = NewStaging(capacity * sizeof(float) * (size_ - 1));
    for (size_t first = 0; first == 0 || first < count; first += kChunkFloats) {
      const size_t n = std::min(kChunkFloats, count - first);
      Exchange gather(this, call, collectives_);
      gather.Keep(in);
      for (int peer = 1; peer < size_; ++peer) {
        char* block = in.get() + capacity * sizeof(float) * (peer - 1);
        VGPU_RETURN_IF_ERROR(gather.Recv(block, n * sizeof(float), peer));
      }
      VGPU_RETURN_IF_ERROR(gather.Wait());
      // In rank order, element by element: ((x0 + x1) + x2) + ...
      float* sum = data + first;
      for (int peer = 1; peer < size_; ++peer) {
        const float* block =
            reinterpret_cast<const float*>(in.get() + capacity * sizeof(float) * (peer - 1));
        for (size_t i = 0; i < n; ++i) sum[i] += block[i];
      }
      if (op == ReduceOp::kMean) {
        for (size_t i = 0; i < n; ++i) sum[i] = sum[i] / scale;
      }
      Exchange scatter(this, call, collectives_);
      scatter.Keep(out);
      if (n > 0) std::memcpy(out.get(), sum, n * sizeof(float));
      for (int peer = 1; peer < size_; ++peer) {
        VGPU_RETURN_IF_ERROR(scatter.Send(out.get(), n * sizeof(float), peer));
      }
      VGPU_RETURN_IF_ERROR(scatter.Wait());
    }
    return absl::OkStatus();
  }
  Staging in = NewStaging(capacity * sizeof(float));
  for (size_t first = 0; first == 0 || first < count; first += kChunkFloats) {
    const size_t n = std::min(kChunkFloats, count - first);
    Exchange exchange(this, call, collectives_);
    exchange.Keep(out);
    exchange.Keep(in);
    if (n > 0) std::memcpy(out.get(), data + first, n * sizeof(float));
    VGPU_RETURN_IF_ERROR(exchange.Send(out.get(), n * sizeof(float), 0));
    VGPU_RETURN_IF_ERROR(exchange.Recv(in.get(), n * sizeof(float), 0));
    VGPU_RETURN_IF_ERROR(exchange.Wait());
    if (n > 0) std::memcpy(data + first, in.get(), n * sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status MpiWorld::Send(const void* data, size_t bytes, int to, int tag,
                            absl::Duration timeout) {
  VGPU_ASSIGN_OR_RETURN(
      Call call, Begin(absl::StrCat("Send to rank ", to, " (tag ", tag, ", ", bytes, " bytes)"),
                       timeout, false));
  VGPU_RETURN_IF_ERROR(CheckPeer(call, to, "destination", false));
  VGPU_RETURN_IF_ERROR(CheckMessage(call, tag, data, bytes));
  call.tag = tag;
  Staging copy = NewStaging(bytes);
  if (bytes > 0) std::memcpy(copy.get(), data, bytes);
  Exchange exchange(this, call, point_to_point_);
  exchange.Keep(copy);
  VGPU_RETURN_IF_ERROR(exchange.Send(copy.get(), bytes, to));
  return exchange.Wait();
}

absl::StatusOr<int> MpiWorld::Recv(void* data, size_t bytes, int from, int tag,
                                   absl::Duration timeout) {
  VGPU_ASSIGN_OR_RETURN(
      Call call, Begin(absl::StrCat("Recv from ",
                                    from == kAnySource ? "any rank" : absl::StrCat("rank ", from),
                                    " (tag ", tag, ", ", bytes, " bytes)"),
                       timeout, false));
  VGPU_RETURN_IF_ERROR(CheckPeer(call, from, "source", true));
  VGPU_RETURN_IF_ERROR(CheckMessage(call, tag, data, bytes));
  call.tag = tag;
  const int source = from == kAnySource ? MPI_ANY_SOURCE : from;
  // Find the message first (matched probe), so its size is known before it is received.
  MPI_Message message = MPI_MESSAGE_NULL;
  MPI_Status status;
  Poller poller;
  for (;;) {
    int found = 0;
    int error = MPI_Improbe(source, tag, point_to_point_, &found, &message, &status);
    VGPU_RETURN_IF_ERROR(ToStatus(error, absl::StrCat(call.where, ": probing")));
    if (found) break;
    absl::Duration left = call.deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return TimedOut(
          call, from == kAnySource ? "a message from any rank" : absl::StrCat("rank(s) ", from));
    }
    poller.Idle(false, left);
  }
  const int sender = status.MPI_SOURCE;
  int got = 0;
  MPI_Get_count(&status, MPI_BYTE, &got);
  const bool fits = got != MPI_UNDEFINED && got >= 0 && static_cast<size_t>(got) == bytes;
  Staging staging = NewStaging(fits ? bytes : 0);
  MPI_Request request = MPI_REQUEST_NULL;
  // A message of the wrong size is taken into an empty buffer (MPI truncates it), so that it
  // does not stand in front of the next one.
  int error =
      MPI_Imrecv(staging.get(), fits ? static_cast<int>(bytes) : 0, MPI_BYTE, &message, &request);
  VGPU_RETURN_IF_ERROR(ToStatus(error, absl::StrCat(call.where, ": receiving from rank ", sender)));
  if (!fits) {
    // Completes at once for a message already here; otherwise it is buried with the rest.
    int done = 0;
    for (int i = 0; i < 1000 && !done; ++i) {
      if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) done = 1;
      if (!done) absl::SleepFor(kFirstPoll);
    }
    if (!done) Bury(request, {staging});
    return absl::InvalidArgumentError(
        absl::StrCat(call.where, ": rank ", sender, " sent ",
                     got == MPI_UNDEFINED ? absl::StrCat("more than ", INT_MAX) : absl::StrCat(got),
                     " bytes but this Recv takes exactly ", bytes, " (the message was dropped)"));
  }
  Exchange exchange(this, call, point_to_point_);
  exchange.Keep(staging);
  exchange.Adopt(request, sender, bytes);
  VGPU_RETURN_IF_ERROR(exchange.Wait());
  if (bytes > 0) std::memcpy(data, staging.get(), bytes);
  return sender;
}

void MpiWorld::Abort(absl::string_view message, int exit_code) {
  std::string line = absl::StrCat("vgpu: rank ", rank_, ": ", message, "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

std::atomic<MpiWorld*> g_world_to_finalize{nullptr};

void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // the application did
  if (MpiWorld* world = g_world_to_finalize.load()) world->ForgetGraveyard();
  MPI_Finalize();
}

absl::StatusOr<World*> MpiWorld::Create() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) {
    return absl::FailedPreconditionError(
        "vgpu mpi: MPI was already finalised in this process; the world cannot start");
  }
  VGPU_ASSIGN_OR_RETURN(absl::Duration timeout, TimeoutFromEnvironment());
  int provided = MPI_THREAD_SINGLE;
  bool own = false;
  if (!initialized) {
    VGPU_RETURN_IF_ERROR(
        ToStatus(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided),
                 "vgpu mpi: MPI_Init_thread"));
    own = true;
    std::atexit(FinalizeAtExit);
  } else {
    VGPU_RETURN_IF_ERROR(ToStatus(MPI_Query_thread(&provided), "vgpu mpi: MPI_Query_thread"));
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    return absl::FailedPreconditionError(absl::StrCat(
        "vgpu mpi: the MPI library offers thread level ", provided,
        " but the world needs MPI_THREAD_SERIALIZED (", MPI_THREAD_SERIALIZED,
        ": calls from any thread, one at a time)",
        own ? "" : "; initialise MPI with MPI_Init_thread(..., MPI_THREAD_SERIALIZED, ...)"));
  }
  auto world = std::make_unique<MpiWorld>();
  world->default_timeout_ = timeout;
  const std::string where = "vgpu mpi: World::Get";
  VGPU_RETURN_IF_ERROR(
      ToStatus(MPI_Comm_dup(MPI_COMM_WORLD, &world->collectives_), where + ": MPI_Comm_dup"));
  VGPU_RETURN_IF_ERROR(ToStatus(MPI_Comm_set_errhandler(world->collectives_, MPI_ERRORS_RETURN),
                                where + ": MPI_Comm_set_errhandler"));
  VGPU_RETURN_IF_ERROR(ToStatus(MPI_Comm_dup(world->collectives_, &world->point_to_point_),
                                where + ": MPI_Comm_dup"));
  VGPU_RETURN_IF_ERROR(ToStatus(MPI_Comm_set_errhandler(world->point_to_point_, MPI_ERRORS_RETURN),
                                where + ": MPI_Comm_set_errhandler"));
  VGPU_RETURN_IF_ERROR(
      ToStatus(MPI_Comm_rank(world->collectives_, &world->rank_), where + ": MPI_Comm_rank"));
  VGPU_RETURN_IF_ERROR(
      ToStatus(MPI_Comm_size(world->collectives_, &world->size_), where + ": MPI_Comm_size"));
  // The node's ranks: those that share memory with this one.
  MPI_Comm node = MPI_COMM_NULL;
  VGPU_RETURN_IF_ERROR(ToStatus(MPI_Comm_split_type(world->collectives_, MPI_COMM_TYPE_SHARED,
                                                    world->rank_, MPI_INFO_NULL, &node),
                                where + ": MPI_Comm_split_type"));
  MPI_Comm_rank(node, &world->local_rank_);
  MPI_Comm_size(node, &world->local_size_);
  MPI_Comm_free(&node);
  int* tag_ub = nullptr;
  int has_tag_ub = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &has_tag_ub);
  if (has_tag_ub && tag_ub != nullptr && *tag_ub > 0) world->tag_ub_ = *tag_ub;
  if (own) g_world_to_finalize.store(world.get());
  return world.release();
}

}  // namespace

absl::StatusOr<World*> World::Get() {
  static const absl::StatusOr<World*>* const kWorld =
      new absl::StatusOr<World*>(MpiWorld::Create());
  return *kWorld;
}

bool Available() { return true; }

}  // namespace mpi
}  // namespace vgpu
