// DetectLaunch and the deadline setting (runtime/mpi/world.h): every launcher's variables,
// every malformed or inconsistent value refused with the variable named. No MPI needed.
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/mpi/world.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu::mpi {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::IsOkAndHolds;
using ::vgpu::testing::StatusIs;

using Env = std::map<std::string, std::string>;

std::function<std::optional<std::string>(absl::string_view)> LookupIn(Env env) {
  return [env = std::move(env)](absl::string_view name) -> std::optional<std::string> {
    auto it = env.find(std::string(name));
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

void ExpectInfo(const Env& env, bool under, int rank, int size, int local_rank, int local_size) {
  SCOPED_TRACE(::testing::PrintToString(env));
  absl::StatusOr<LaunchInfo> info = DetectLaunch(LookupIn(env));
  ASSERT_THAT(info, IsOk());
  EXPECT_EQ(info->under_launcher, under);
  EXPECT_EQ(info->rank, rank);
  EXPECT_EQ(info->size, size);
  EXPECT_EQ(info->local_rank, local_rank);
  EXPECT_EQ(info->local_size, local_size);
}

void ExpectRefused(const Env& env, absl::string_view variable, absl::string_view also = "") {
  SCOPED_TRACE(::testing::PrintToString(env));
  EXPECT_THAT(DetectLaunch(LookupIn(env)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(std::string(variable)), HasSubstr(std::string(also)))));
}

TEST(DetectLaunch, PlainRunIsRankZeroOfOne) {
  ExpectInfo({}, false, 0, 1, 0, 1);
  ExpectInfo({{"PATH", "/usr/bin"}, {"OMPI_MCA_btl", "self"}}, false, 0, 1, 0, 1);
}

TEST(DetectLaunch, OpenMpi) {
  ExpectInfo({{"OMPI_COMM_WORLD_RANK", "5"},
              {"OMPI_COMM_WORLD_SIZE", "8"},
              {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
              {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}},
             true, 5, 8, 1, 4);
  // Surrounding whitespace is what a shell or a file adds: accepted, as numbers.h does.
  ExpectInfo({{"OMPI_COMM_WORLD_RANK", " 0"}, {"OMPI_COMM_WORLD_SIZE", "1\n"}}, true, 0, 1, 0, 1);
  // Without the node's variables, every rank is taken to be on this node.
  ExpectInfo({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"}}, true, 2, 3, 2, 3);
  // Open MPI also sets PMIX_RANK: its own variables win.
  ExpectInfo({{"OMPI_COMM_WORLD_RANK", "1"},
              {"OMPI_COMM_WORLD_SIZE", "2"},
              {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
              {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
              {"PMIX_RANK", "1"}},
             true, 1, 2, 1, 2);
}

TEST(DetectLaunch, PmixAndPmi) {
  ExpectInfo({{"PMIX_RANK", "3"}, {"PMI_SIZE", "4"}}, true, 3, 4, 3, 4);
  ExpectInfo({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}}, true, 0, 2, 0, 2);
  ExpectInfo({{"PMIX_RANK", "1"}, {"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}, true, 1, 2, 1, 2);
  // PMIx alone does not say the size: rank 0 is a job of 1 (Open MPI's singleton: a plain run
  // that initialised MPI has PMIX_RANK=0 and nothing else).
  ExpectInfo({{"PMIX_RANK", "0"}}, true, 0, 1, 0, 1);
}

TEST(DetectLaunch, MalformedValuesNameTheVariable) {
  for (const char* bad : {"", " ", "x", "1.0", "0x1", "-1", "+1", "1e3", "2147483648", "3 4"}) {
    ExpectRefused({{"OMPI_COMM_WORLD_RANK", bad}, {"OMPI_COMM_WORLD_SIZE", "4"}},
                  "OMPI_COMM_WORLD_RANK");
    ExpectRefused({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", bad}},
                  "OMPI_COMM_WORLD_SIZE");
    ExpectRefused({{"OMPI_COMM_WORLD_RANK", "0"},
                   {"OMPI_COMM_WORLD_SIZE", "4"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", bad},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}},
                  "OMPI_COMM_WORLD_LOCAL_RANK");
    ExpectRefused({{"OMPI_COMM_WORLD_RANK", "0"},
                   {"OMPI_COMM_WORLD_SIZE", "4"},
                   {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", bad}},
                  "OMPI_COMM_WORLD_LOCAL_SIZE");
    ExpectRefused({{"PMIX_RANK", bad}, {"PMI_SIZE", "4"}}, "PMIX_RANK");
    ExpectRefused({{"PMI_RANK", bad}, {"PMI_SIZE", "4"}}, "PMI_RANK");
    ExpectRefused({{"PMI_RANK", "0"}, {"PMI_SIZE", bad}}, "PMI_SIZE");
  }
}

TEST(DetectLaunch, SizeMustBePositive) {
  ExpectRefused({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "0"}},
                "OMPI_COMM_WORLD_SIZE", "outside 1..");
  ExpectRefused({{"OMPI_COMM_WORLD_RANK", "0"},
                 {"OMPI_COMM_WORLD_SIZE", "2"},
                 {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "0"}},
                "OMPI_COMM_WORLD_LOCAL_SIZE", "outside 1..");
  ExpectRefused({{"PMI_RANK", "0"}, {"PMI_SIZE", "-2"}}, "PMI_SIZE");
}

TEST(DetectLaunch, InconsistentValuesNameTheVariables) {
  ExpectRefused({{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}},
                "OMPI_COMM_WORLD_RANK is 4 but OMPI_COMM_WORLD_SIZE is 4");
  ExpectRefused({{"OMPI_COMM_WORLD_RANK", "0"},
                 {"OMPI_COMM_WORLD_SIZE", "4"},
                 {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}},
                "OMPI_COMM_WORLD_LOCAL_RANK is 2 but OMPI_COMM_WORLD_LOCAL_SIZE is 2");
  ExpectRefused({{"OMPI_COMM_WORLD_RANK", "0"},
                 {"OMPI_COMM_WORLD_SIZE", "2"},
                 {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}},
                "OMPI_COMM_WORLD_LOCAL_SIZE is 3 but OMPI_COMM_WORLD_SIZE is 2");
  ExpectRefused({{"PMIX_RANK", "2"}, {"PMI_SIZE", "2"}}, "PMIX_RANK is 2 but PMI_SIZE is 2");
  ExpectRefused({{"PMI_RANK", "7"}, {"PMI_SIZE", "2"}}, "PMI_RANK is 7 but PMI_SIZE is 2");
  ExpectRefused({{"PMIX_RANK", "0"}, {"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}, "PMIX_RANK",
                "PMI_RANK");
}

TEST(DetectLaunch, HalfAPairIsRefused) {
  ExpectRefused({{"OMPI_COMM_WORLD_RANK", "0"}}, "OMPI_COMM_WORLD_SIZE is not set");
  ExpectRefused({{"OMPI_COMM_WORLD_SIZE", "2"}}, "OMPI_COMM_WORLD_RANK is not set");
  ExpectRefused({{"OMPI_COMM_WORLD_RANK", "0"},
                 {"OMPI_COMM_WORLD_SIZE", "2"},
                 {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}},
                "OMPI_COMM_WORLD_LOCAL_SIZE is not set");
  ExpectRefused({{"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}},
                "OMPI_COMM_WORLD_LOCAL_RANK is set but OMPI_COMM_WORLD_RANK");
  ExpectRefused({{"PMIX_RANK", "1"}}, "PMI_SIZE", "PMIX_RANK is 1");
  ExpectRefused({{"PMI_RANK", "0"}}, "PMI_SIZE", "PMI_RANK is 0");
  ExpectRefused({{"PMI_SIZE", "2"}}, "PMI_SIZE is set but neither PMIX_RANK nor PMI_RANK");
}

TEST(DetectLaunch, ReadsTheProcessEnvironmentByDefault) {
  // Whatever this test runs under (alone, or mpirun), the default lookup agrees with an
  // explicit one over the same variables.
  Env env;
  for (const char* name :
       {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
    if (const char* value = std::getenv(name)) env[name] = value;
  }
  absl::StatusOr<LaunchInfo> from_process = DetectLaunch();
  absl::StatusOr<LaunchInfo> from_map = DetectLaunch(LookupIn(env));
  ASSERT_EQ(from_process.ok(), from_map.ok());
  if (from_process.ok()) {
    EXPECT_EQ(from_process->under_launcher, from_map->under_launcher);
    EXPECT_EQ(from_process->rank, from_map->rank);
    EXPECT_EQ(from_process->size, from_map->size);
  }
}

TEST(Timeout, DefaultIsSixtySecondsAndTheVariableOverrides) {
  EXPECT_THAT(TimeoutFromEnvironment(LookupIn({})), IsOkAndHolds(absl::Seconds(60)));
  EXPECT_EQ(kDefaultTimeout, absl::Seconds(60));
  EXPECT_THAT(TimeoutFromEnvironment(LookupIn({{"VGPU_MPI_TIMEOUT_S", "5"}})),
              IsOkAndHolds(absl::Seconds(5)));
  EXPECT_THAT(TimeoutFromEnvironment(LookupIn({{"VGPU_MPI_TIMEOUT_S", "0.25"}})),
              IsOkAndHolds(absl::Milliseconds(250)));
  EXPECT_THAT(TimeoutFromEnvironment(LookupIn({{"VGPU_MPI_TIMEOUT_S", " 600\r\n"}})),
              IsOkAndHolds(absl::Seconds(600)));
}

TEST(Timeout, MalformedValueIsReportedNamingTheVariable) {
  for (const char* bad : {"", "x", "0", "-1", "0x10", "inf", "nan", "1e999", "60s", "1000000"}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(TimeoutFromEnvironment(LookupIn({{"VGPU_MPI_TIMEOUT_S", bad}})),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("VGPU_MPI_TIMEOUT_S")));
  }
}

TEST(Timeout, DefaultTimeoutFallsBackOnAMalformedValue) {
  // DefaultTimeout has no error to return: a malformed variable gives the default there (and
  // World::Get refuses it).
  const char* saved = std::getenv("VGPU_MPI_TIMEOUT_S");
  std::string keep = saved ? saved : "";
  setenv("VGPU_MPI_TIMEOUT_S", "soon", 1);
  EXPECT_EQ(DefaultTimeout(), kDefaultTimeout);
  setenv("VGPU_MPI_TIMEOUT_S", "2.5", 1);
  EXPECT_EQ(DefaultTimeout(), absl::Milliseconds(2500));
  if (saved) {
    setenv("VGPU_MPI_TIMEOUT_S", keep.c_str(), 1);
  } else {
    unsetenv("VGPU_MPI_TIMEOUT_S");
  }
}

}  // namespace
}  // namespace vgpu::mpi
