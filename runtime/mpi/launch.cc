// DetectLaunch and the deadline setting (runtime/mpi/world.h): both read only the environment,
// so they work in every build, with or without MPI.
#include <climits>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "vgpu/runtime/mpi/world.h"
#include "vgpu/runtime/numbers.h"

namespace vgpu {
namespace mpi {
namespace {

using Lookup = std::function<std::optional<std::string>(absl::string_view)>;

std::optional<std::string> ProcessEnvironment(absl::string_view name) {
  const char* value = std::getenv(std::string(name).c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

// One launcher variable as an int in [min, INT_MAX]; nullopt when unset.
absl::StatusOr<std::optional<int>> ReadInt(const Lookup& lookup, absl::string_view name, int min) {
  std::optional<std::string> text = lookup(name);
  if (!text.has_value()) return std::optional<int>();
  absl::StatusOr<int64_t> v = ParseInt64InRange(*text, min, INT_MAX);
  if (!v.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("launcher variable ", name, ": ", v.status().message()));
  }
  return std::optional<int>(static_cast<int>(*v));
}

// A pair of variables that come together (a rank and its size): both or neither.
struct Pair {
  std::optional<int> index;
  std::optional<int> count;
};

absl::StatusOr<Pair> ReadPair(const Lookup& lookup, absl::string_view index_name,
                              absl::string_view count_name) {
  Pair p;
  absl::StatusOr<std::optional<int>> index = ReadInt(lookup, index_name, 0);
  if (!index.ok()) return index.status();
  absl::StatusOr<std::optional<int>> count = ReadInt(lookup, count_name, 1);
  if (!count.ok()) return count.status();
  p.index = *index;
  p.count = *count;
  if (p.index.has_value() != p.count.has_value()) {
    absl::string_view set = p.index.has_value() ? index_name : count_name;
    absl::string_view unset = p.index.has_value() ? count_name : index_name;
    return absl::InvalidArgumentError(absl::StrCat("launcher variable ", unset, " is not set but ",
                                                   set, " is: the launcher sets both"));
  }
  if (p.index.has_value() && *p.index >= *p.count) {
    return absl::InvalidArgumentError(
        absl::StrCat("launcher variable ", index_name, " is ", *p.index, " but ", count_name,
                     " is ", *p.count, ": it must be below it (0..", *p.count - 1, ")"));
  }
  return p;
}

}  // namespace

absl::StatusOr<LaunchInfo> DetectLaunch(Lookup lookup) {
  if (lookup == nullptr) lookup = ProcessEnvironment;
  LaunchInfo info;

  // Open MPI's mpirun (and prterun): all four, the world and this node.
  constexpr absl::string_view kRank = "OMPI_COMM_WORLD_RANK";
  constexpr absl::string_view kSize = "OMPI_COMM_WORLD_SIZE";
  constexpr absl::string_view kLocalRank = "OMPI_COMM_WORLD_LOCAL_RANK";
  constexpr absl::string_view kLocalSize = "OMPI_COMM_WORLD_LOCAL_SIZE";
  absl::StatusOr<Pair> world = ReadPair(lookup, kRank, kSize);
  if (!world.ok()) return world.status();
  absl::StatusOr<Pair> local = ReadPair(lookup, kLocalRank, kLocalSize);
  if (!local.ok()) return local.status();
  if (world->index.has_value()) {
    info.under_launcher = true;
    info.rank = *world->index;
    info.size = *world->count;
    if (local->index.has_value()) {
      if (*local->count > info.size) {
        return absl::InvalidArgumentError(
            absl::StrCat("launcher variable ", kLocalSize, " is ", *local->count, " but ", kSize,
                         " is ", info.size, ": a node cannot hold more ranks than the job"));
      }
      info.local_rank = *local->index;
      info.local_size = *local->count;
    } else {
      // No node information: every rank on this node (a single-node job).
      info.local_rank = info.rank;
      info.local_size = info.size;
    }
    return info;
  }
  if (local->index.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("launcher variable ", kLocalRank, " is set but ",
                                                   kRank, " and ", kSize, " are not"));
  }

  // PMIx (PMIX_RANK) or PMI-1/2 (PMI_RANK): the rank, and PMI_SIZE for the size.
  constexpr absl::string_view kPmixRank = "PMIX_RANK";
  constexpr absl::string_view kPmiRank = "PMI_RANK";
  constexpr absl::string_view kPmiSize = "PMI_SIZE";
  absl::StatusOr<std::optional<int>> pmix_rank = ReadInt(lookup, kPmixRank, 0);
  if (!pmix_rank.ok()) return pmix_rank.status();
  absl::StatusOr<std::optional<int>> pmi_rank = ReadInt(lookup, kPmiRank, 0);
  if (!pmi_rank.ok()) return pmi_rank.status();
  absl::StatusOr<std::optional<int>> pmi_size = ReadInt(lookup, kPmiSize, 1);
  if (!pmi_size.ok()) return pmi_size.status();
  if (pmix_rank->has_value() && pmi_rank->has_value() && **pmix_rank != **pmi_rank) {
    return absl::InvalidArgumentError(absl::StrCat("launcher variables ", kPmixRank, " (",
                                                   **pmix_rank, ") and ", kPmiRank, " (",
                                                   **pmi_rank, ") disagree"));
  }
  absl::string_view rank_name = pmix_rank->has_value() ? kPmixRank : kPmiRank;
  std::optional<int> rank = pmix_rank->has_value() ? *pmix_rank : *pmi_rank;
  if (!rank.has_value()) {
    if (pmi_size->has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("launcher variable ", kPmiSize,
                                                     " is set but neither ", kPmixRank, " nor ",
                                                     kPmiRank, " is"));
    }
    return info;  // a plain run: rank 0 of 1
  }
  if (!pmi_size->has_value()) {
    // PMIx keeps the size to itself (Open MPI's singleton sets only PMIX_RANK=0 when a plain
    // run initialises MPI): rank 0 is taken as a job of 1, another rank cannot be placed.
    if (*rank == 0 && rank_name == kPmixRank) {
      info.under_launcher = true;
      return info;
    }
    return absl::InvalidArgumentError(absl::StrCat("launcher variable ", rank_name, " is ", *rank,
                                                   " but ", kPmiSize,
                                                   " (the job's size) is not set"));
  }
  if (*rank >= **pmi_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("launcher variable ", rank_name, " is ", *rank, " but ", kPmiSize, " is ",
                     **pmi_size, ": it must be below it (0..", **pmi_size - 1, ")"));
  }
  info.under_launcher = true;
  info.rank = *rank;
  info.size = **pmi_size;
  info.local_rank = info.rank;  // no node information: a single-node job
  info.local_size = info.size;
  return info;
}

absl::StatusOr<absl::Duration> TimeoutFromEnvironment(Lookup lookup) {
  if (lookup == nullptr) lookup = ProcessEnvironment;
  std::optional<std::string> text = lookup(kTimeoutVariable);
  if (!text.has_value()) return kDefaultTimeout;
  absl::StatusOr<double> seconds =
      ParseDecimalInRange(*text, kMinTimeoutSeconds, kMaxTimeoutSeconds);
  if (!seconds.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kTimeoutVariable, " (seconds): ", seconds.status().message()));
  }
  return absl::Seconds(*seconds);
}

absl::Duration DefaultTimeout() {
  absl::StatusOr<absl::Duration> timeout = TimeoutFromEnvironment();
  return timeout.ok() ? *timeout : kDefaultTimeout;
}

}  // namespace mpi
}  // namespace vgpu
