# The cluster tests: programs that mpiexec runs as several ranks on this one machine.
#
#   vgpu_add_mpi_test(NAME <name> NP <ranks> COMMAND <program> [<arg>...]
#                     [LABELS <label>...] [TIMEOUT <seconds>])
#
# adds the CTest test <name>: `mpiexec --oversubscribe -np <ranks> <program> <arg>...`, with
# the label `cluster` (plus LABELS), TIMEOUT seconds (default 300) and the environment that
# lets Open MPI run in a container as root with shared memory only (below). <program> may be a
# target name (the test then runs its file) or a path; arguments may use generator
# expressions. A binary with a GTEST_SKIP'd test reports Skipped, as in tests/CMakeLists.txt.
# In a build without MPI (VGPU_HAVE_MPI off, runtime/CMakeLists.txt) it adds nothing, so
# callers need no check of their own.
#
# Calling it from another tests/*.cmake: tests/CMakeLists.txt includes those files in name
# order, so first `include(${CMAKE_CURRENT_LIST_DIR}/cluster.cmake)` (this file is guarded:
# its tests are registered once, whoever includes it first).
#
# The environment, for Open MPI 4.1 (Debian 12), set through MCA variables so no command line
# changes: OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM) (CI runs as root; mpirun refuses otherwise);
# btl self,vader (this process and shared memory: no network in a container) with vader's
# single-copy mechanism off (CMA's process_vm_readv is denied without CAP_SYS_PTRACE in most
# containers); rmaps_base_oversubscribe and hwloc_base_binding_policy none (more ranks than
# cores, and no binding of 4 ranks to 2 cores). The PRTE_MCA_/PMIX_MCA_ twins are what Open MPI
# 5's launcher (prterun) reads instead; 4.1 ignores them. LSAN_OPTIONS=detect_leaks=0: in the
# asan preset, Open MPI leaks at MPI_Finalize from components it has already dlclose'd, so
# LeakSanitizer can neither name nor suppress them (the rest of ASan stays on). Under the tsan
# preset the tcp transport, which self,vader keeps out, reports a lock-order inversion inside
# Open MPI.
include_guard(GLOBAL)

set(VGPU_MPI_TEST_ENVIRONMENT
  OMPI_ALLOW_RUN_AS_ROOT=1
  OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  OMPI_MCA_btl=self,vader
  OMPI_MCA_btl_vader_single_copy_mechanism=none
  OMPI_MCA_rmaps_base_oversubscribe=1
  OMPI_MCA_hwloc_base_binding_policy=none
  PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
  PRTE_MCA_hwloc_default_binding_policy=none
  PMIX_MCA_gds=hash
  LSAN_OPTIONS=detect_leaks=0)

function(vgpu_add_mpi_test)
  cmake_parse_arguments(ARG "" "NAME;NP;TIMEOUT" "COMMAND;LABELS" ${ARGN})
  if(NOT ARG_NAME OR NOT ARG_NP OR NOT ARG_COMMAND)
    message(FATAL_ERROR "vgpu_add_mpi_test: NAME, NP and COMMAND are required")
  endif()
  if(NOT ARG_NP MATCHES "^[1-9][0-9]*$")
    message(FATAL_ERROR "vgpu_add_mpi_test(${ARG_NAME}): NP must be a positive number, not '${ARG_NP}'")
  endif()
  if(NOT VGPU_HAVE_MPI OR NOT VGPU_MPIEXEC_EXECUTABLE)
    return()
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  list(POP_FRONT ARG_COMMAND program)
  if(TARGET ${program})
    set(program $<TARGET_FILE:${program}>)
  endif()
  add_test(NAME ${ARG_NAME}
    COMMAND ${VGPU_MPIEXEC_EXECUTABLE} --oversubscribe -np ${ARG_NP} ${program} ${ARG_COMMAND})
  set_tests_properties(${ARG_NAME} PROPERTIES
    LABELS "cluster;${ARG_LABELS}"
    TIMEOUT ${ARG_TIMEOUT}
    PROCESSORS ${ARG_NP}
    SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]"
    ENVIRONMENT "${VGPU_MPI_TEST_ENVIRONMENT};VGPU_TEST_SRCDIR=${PROJECT_SOURCE_DIR};VGPU_TEST_BINDIR=${PROJECT_BINARY_DIR}")
endfunction()

# The MPI world (runtime/mpi/world.h). tests/CMakeLists.txt already made mpi_world_test a
# 1-rank unit test (and mpi_launch_test); these are its multi-rank runs.
if(TARGET mpi_world_test)
  # What the build found, for the test to check against Available().
  if(VGPU_HAVE_MPI)
    target_compile_definitions(mpi_world_test PRIVATE VGPU_HAVE_MPI=1)
  else()
    target_compile_definitions(mpi_world_test PRIVATE VGPU_HAVE_MPI=0)
  endif()
  if(VGPU_HAVE_MPI)
    # Alone, Open MPI starts as a singleton: the same shared-memory settings apply.
    set_property(TEST mpi_world_test APPEND PROPERTY ENVIRONMENT ${VGPU_MPI_TEST_ENVIRONMENT})
  endif()
  vgpu_add_mpi_test(NAME mpi_world_test_np2 NP 2 COMMAND mpi_world_test TIMEOUT 300)
  vgpu_add_mpi_test(NAME mpi_world_test_np4 NP 4 COMMAND mpi_world_test TIMEOUT 300)
endif()
