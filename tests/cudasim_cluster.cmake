# The cluster strategies on the cuda platform, on the CUDA simulator (tests/cudasim.cmake):
# every rank loads the simulator (its own simulated H100; the ranks of a node share card
# local_rank % cards), and gradients cross processes staged through the host (communicators
# "mpi"/"hierarchical": device memory copied to and from host around MPI). Labels cluster and
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
