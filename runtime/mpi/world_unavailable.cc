// runtime/mpi/world.h in a build without MPI (runtime/CMakeLists.txt picks this file when
// find_package(MPI) fails or VGPU_WITH_MPI is OFF): no world, and an error that says why and
// how to get one. DetectLaunch (launch.cc) still works, so a run under mpirun is told that its
// launcher is wasted on this build.
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "vgpu/runtime/mpi/world.h"

namespace vgpu {
namespace mpi {

bool Available() { return false; }

absl::StatusOr<World*> World::Get() {
  std::string message = "this build of vgpu has no MPI: install libopenmpi-dev and rebuild";
  absl::StatusOr<LaunchInfo> launch = DetectLaunch();
  if (launch.ok() && launch->under_launcher) {
    absl::StrAppend(&message, " (this process was started by an MPI launcher as rank ",
                    launch->rank, " of ", launch->size,
                    ", but cannot join its world; each rank would run alone)");
  }
  return absl::UnimplementedError(message);
}

}  // namespace mpi
}  // namespace vgpu
