# The cluster strategies on the cuda platform, on the CUDA simulator (tests/cudasim.cmake):
# every rank loads the simulator (its own simulated H100; the ranks of a node share card
# local_rank % cards), and gradients cross processes staged through the host (communicators
# "mpi"/"hierarchical": device memory copied to and from host around MPI) or, with one card per
# process, through the simulator's cross-process NCCL ("nccl-mpi"). Labels cluster and
# cudasim.
include(${CMAKE_CURRENT_LIST_DIR}/cluster.cmake)

if(VGPU_HAVE_MPI AND TARGET vgpu_cudasim AND TARGET vgpu-train
   AND EXISTS /usr/share/datasets/fashion-mnist)
  set(_csc ${CMAKE_COMMAND} -E env VGPU_CUDASIM_LIB_DIR=${PROJECT_BINARY_DIR}/cudasim/lib
           VGPU_CUDASIM_PROFILE=h100 ${PROJECT_SOURCE_DIR}/scripts/cudasim)
  set(_ct ${CMAKE_CURRENT_SOURCE_DIR}/cluster_train_check.sh)
  add_test(NAME train_cluster_mwm_np2_on_cudasim
    COMMAND ${_csc} sh ${_ct} ${VGPU_MPIEXEC_EXECUTABLE} 2 $<TARGET_FILE:vgpu-train> 0.85
            --platform cuda --strategy multi-worker-mirrored --devices 2 --epochs 2 --batch 256
            --check-replicas)
  add_test(NAME train_cluster_ps_np3_on_cudasim
    COMMAND ${_csc} sh ${_ct} ${VGPU_MPIEXEC_EXECUTABLE} 3 $<TARGET_FILE:vgpu-train> 0.85
            --platform cuda --strategy parameter-server --ps-tasks 1 --devices 2 --epochs 2
            --batch 256)
  set_tests_properties(train_cluster_mwm_np2_on_cudasim train_cluster_ps_np3_on_cudasim
    PROPERTIES LABELS "cluster;cudasim" TIMEOUT 900 PROCESSORS 2
    ENVIRONMENT "${VGPU_MPI_TEST_ENVIRONMENT}"
    PASS_REGULAR_EXPRESSION "\"platform\":\"cuda\".*PASS: every worker's test_accuracy")
endif()

# Communicator "nccl-mpi" (NCCL across processes bootstrapped over MPI) on the simulator's
# cross-process NCCL: each rank on card local_rank of the "small" profile's 2 cards (auto picks
# nccl-mpi), then every rank on card 0 (NCCL's "Duplicate GPU detected": auto falls back to
# mpi); the host platform's nccl-mpi is FailedPrecondition. Then vgpu-train's
# multi-worker-mirrored with one card per process picks nccl-mpi.
if(VGPU_HAVE_MPI AND TARGET vgpu_cudasim AND TARGET nccl_mpi_gpu_test)
  add_dependencies(nccl_mpi_gpu_test vgpu_cudasim)
  set(_csn ${CMAKE_COMMAND} -E env VGPU_CUDASIM_LIB_DIR=${PROJECT_BINARY_DIR}/cudasim/lib
           VGPU_CUDASIM_PROFILE=small VGPU_CUDASIM_DEVICES=2 ${PROJECT_SOURCE_DIR}/scripts/cudasim)
  add_test(NAME nccl_mpi_np2_on_cudasim
    COMMAND ${_csn} ${VGPU_MPIEXEC_EXECUTABLE} --oversubscribe -np 2
            $<TARGET_FILE:nccl_mpi_gpu_test>)
  set_tests_properties(nccl_mpi_np2_on_cudasim PROPERTIES
    LABELS "cluster;cudasim" TIMEOUT 300 PROCESSORS 2
    ENVIRONMENT "${VGPU_MPI_TEST_ENVIRONMENT};VGPU_CUDASIM_NCCL_TIMEOUT_S=60"
    FAIL_REGULAR_EXPRESSION "\\[  SKIPPED \\]|\\[  FAILED  \\]")
endif()
if(VGPU_HAVE_MPI AND TARGET vgpu_cudasim AND TARGET vgpu-train
   AND EXISTS /usr/share/datasets/fashion-mnist)
  add_test(NAME train_cluster_mwm_nccl_mpi_np2_on_cudasim
    COMMAND ${CMAKE_COMMAND} -E env VGPU_CUDASIM_LIB_DIR=${PROJECT_BINARY_DIR}/cudasim/lib
            VGPU_CUDASIM_PROFILE=h100 VGPU_CUDASIM_DEVICES=2 ${PROJECT_SOURCE_DIR}/scripts/cudasim
            sh ${CMAKE_CURRENT_SOURCE_DIR}/cluster_train_check.sh ${VGPU_MPIEXEC_EXECUTABLE} 2
            $<TARGET_FILE:vgpu-train> 0.85 --platform cuda --strategy multi-worker-mirrored
            --devices 1 --epochs 2 --batch 256 --check-replicas)
  set_tests_properties(train_cluster_mwm_nccl_mpi_np2_on_cudasim
    PROPERTIES LABELS "cluster;cudasim" TIMEOUT 900 PROCESSORS 2
    ENVIRONMENT "${VGPU_MPI_TEST_ENVIRONMENT}"
    PASS_REGULAR_EXPRESSION "\"communicator\":\"nccl-mpi\".*PASS: every worker's test_accuracy")
  # Both ranks on one card: NCCL refuses, vgpu-train says so and trains over mpi anyway.
  add_test(NAME train_cluster_mwm_one_card_np2_on_cudasim
    COMMAND ${CMAKE_COMMAND} -E env VGPU_CUDASIM_LIB_DIR=${PROJECT_BINARY_DIR}/cudasim/lib
            VGPU_CUDASIM_PROFILE=h100 ${PROJECT_SOURCE_DIR}/scripts/cudasim
            sh ${CMAKE_CURRENT_SOURCE_DIR}/cluster_train_check.sh ${VGPU_MPIEXEC_EXECUTABLE} 2
            $<TARGET_FILE:vgpu-train> - --platform cuda --strategy multi-worker-mirrored
            --devices 1 --epochs 1 --batch 256 --train-limit 8192)
  set_tests_properties(train_cluster_mwm_one_card_np2_on_cudasim
    PROPERTIES LABELS "cluster;cudasim" TIMEOUT 900 PROCESSORS 2
    ENVIRONMENT "${VGPU_MPI_TEST_ENVIRONMENT}"
    PASS_REGULAR_EXPRESSION "\"communicator\":\"mpi\",\"communicator_fallback\":[^\n]*Duplicate GPU detected.*PASS: 2 ranks, one parameter checksum")
endif()
