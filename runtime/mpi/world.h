// The MPI world this process belongs to: how it was launched (mpirun's environment, read
// without initialising MPI), and host-memory collectives over MPI_COMM_WORLD with deadlines, so
// that a lost or stuck rank becomes an error naming it instead of a hang. This is the only
// transport between processes (NCCL across processes is bootstrapped through it); MPI is
// optional at build time: in a build without it, World::Get returns Unimplemented and
// DetectLaunch still works (so a run under mpirun without MPI support is refused clearly).
//
// Thread safety: DetectLaunch is safe from any thread. World::Get is safe from any thread and
// initialises MPI once per process. The collectives of one World must be called from one thread
// at a time, in the same order on every rank (MPI's rule for a communicator); Abort is safe from
// any thread.
#ifndef VGPU_RUNTIME_MPI_WORLD_H_
#define VGPU_RUNTIME_MPI_WORLD_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace vgpu {
namespace mpi {

// What the launcher says about this process, from its environment (Open MPI:
// OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE; also PMIX_RANK / PMI_RANK and
// PMI_SIZE). A plain run is rank 0 of 1.
struct LaunchInfo {
  bool under_launcher = false;
  int rank = 0;
  int size = 1;
  int local_rank = 0;  // the card this process uses among those of its node
  int local_size = 1;
};
// `lookup` reads one variable (nullopt when unset); nullptr reads the process environment.
// InvalidArgument naming the variable for a malformed or inconsistent value (rank >= size...).
absl::StatusOr<LaunchInfo> DetectLaunch(
    std::function<std::optional<std::string>(absl::string_view)> lookup = nullptr);

// Whether this build has MPI.
bool Available();

// The variable that sets the default deadline, and the deadline when it is unset.
inline constexpr char kTimeoutVariable[] = "VGPU_MPI_TIMEOUT_S";
inline constexpr absl::Duration kDefaultTimeout = absl::Seconds(60);
// The longest and shortest deadlines VGPU_MPI_TIMEOUT_S accepts (seconds).
inline constexpr double kMinTimeoutSeconds = 0.001;
inline constexpr double kMaxTimeoutSeconds = 7 * 24 * 3600;

// The default deadline of a blocking collective (VGPU_MPI_TIMEOUT_S overrides, seconds).
// VGPU_MPI_TIMEOUT_S unset or malformed gives kDefaultTimeout here; a malformed value is never
// silently used, because World::Get reads it through TimeoutFromEnvironment and refuses it.
absl::Duration DefaultTimeout();
// VGPU_MPI_TIMEOUT_S as `lookup` (nullptr: the process environment) gives it: a decimal number
// of seconds in [kMinTimeoutSeconds, kMaxTimeoutSeconds] ("2.5", "600"); kDefaultTimeout when
// unset; InvalidArgument naming the variable and quoting the value otherwise.
absl::StatusOr<absl::Duration> TimeoutFromEnvironment(
    std::function<std::optional<std::string>(absl::string_view)> lookup = nullptr);

enum class ReduceOp { kSum, kMean };

class World {
 public:
  // Initialises MPI on first call (MPI_Init_thread; FailedPrecondition when the library
  // offers less than MPI_THREAD_SERIALIZED) and finalises it at exit. Unimplemented in a build
  // without MPI.
  //
  // When the application initialised MPI itself, the world uses it (it must offer
  // MPI_THREAD_SERIALIZED) and leaves finalising it to the application. The world talks on its
  // own duplicates of MPI_COMM_WORLD (one for the collectives, one for Send/Recv), so its
  // messages never mix with the application's. InvalidArgument when VGPU_MPI_TIMEOUT_S is
  // malformed. The first result, error included, is the answer for the life of the process.
  static absl::StatusOr<World*> Get();

  virtual ~World() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  // The deadline a call with a zero timeout gets (initially VGPU_MPI_TIMEOUT_S, else
  // kDefaultTimeout); a tool sets it from its flag. Not positive: InvalidArgument. Call it
  // while no other thread uses the world.
  virtual absl::Status SetDefaultTimeout(absl::Duration timeout) = 0;
  virtual absl::Duration default_timeout() const = 0;

  // Each waits at most `timeout` (DefaultTimeout() when zero): DeadlineExceeded naming the
  // operation, this rank and the ranks that did not arrive, where MPI can say. The buffers are
  // host memory.
  //
  // The collectives go through rank 0 (it gathers, combines and sends the result back), in
  // chunks of at most 4 MiB, and each call has its own sequence number in its messages: a
  // collective one rank gave up on (a deadline) leaves no message that a later collective
  // could take for its own, so the next collective that every rank enters works again. MPI
  // never holds the caller's buffers after a call returns, even a timed-out one (the messages
  // are staged in the world's own memory). A negative timeout is InvalidArgument.
  virtual absl::Status Barrier(absl::Duration timeout = absl::ZeroDuration()) = 0;
  virtual absl::Status Broadcast(void* data, size_t bytes, int root,
                                 absl::Duration timeout = absl::ZeroDuration()) = 0;
  // recv holds size() * bytes: block r from rank r.
  virtual absl::Status AllGather(const void* send, size_t bytes, void* recv,
                                 absl::Duration timeout = absl::ZeroDuration()) = 0;
  // In place over `count` floats of every rank. Every rank sums in the same order (rank 0
  // first), so the result is bitwise equal on every rank.
  virtual absl::Status AllReduce(float* data, size_t count, ReduceOp op,
                                 absl::Duration timeout = absl::ZeroDuration()) = 0;
  // Point to point (the parameter server's pushes and pulls); `tag` >= 0. Recv takes exactly
  // `bytes` (InvalidArgument naming the sender when the message size differs) from rank
  // `from`, or from any rank with kAnySource, and returns the sender's rank.
  // A message of the wrong size is consumed (so it does not block the next Recv). One message
  // is at most 2^31 - 1 bytes (MPI's int count); larger is InvalidArgument. Send is MPI's
  // standard mode: a small message returns at once, a large one (beyond the transport's eager
  // limit, a few KiB) once the receiver's Recv takes it, so two ranks that both Send a large
  // message to each other before receiving time out. `data` is copied first: a timed-out Send
  // never reads it later. The user's tags and the collectives' messages never mix.
  static constexpr int kAnySource = -1;
  virtual absl::Status Send(const void* data, size_t bytes, int to, int tag,
                            absl::Duration timeout = absl::ZeroDuration()) = 0;
  virtual absl::StatusOr<int> Recv(void* data, size_t bytes, int from, int tag,
                                   absl::Duration timeout = absl::ZeroDuration()) = 0;

  // Ends every rank of the job: prints "vgpu: rank R: <message>" to stderr, then MPI_Abort.
  [[noreturn]] virtual void Abort(absl::string_view message, int exit_code = 1) = 0;
};

}  // namespace mpi
}  // namespace vgpu

#endif  // VGPU_RUNTIME_MPI_WORLD_H_
