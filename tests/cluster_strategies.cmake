# The cluster strategies and the collectives across processes, run by mpiexec on this machine
# (label cluster; tests/cluster.cmake's vgpu_add_mpi_test and its Open MPI environment).
# Nothing is added in a build without MPI.
include(${CMAKE_CURRENT_LIST_DIR}/cluster.cmake)

if(VGPU_HAVE_MPI)
  # Alone these tests run their one-process path as unit tests; under mpirun Open MPI needs the
  # same environment even for a singleton.
  foreach(t communicator_mpi_test multi_worker_mirrored_test parameter_server_test)
    if(TARGET ${t})
      set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT ${VGPU_MPI_TEST_ENVIRONMENT})
    endif()
  endforeach()

  vgpu_add_mpi_test(NAME communicator_mpi_test_np2 NP 2 COMMAND communicator_mpi_test)
  vgpu_add_mpi_test(NAME communicator_mpi_test_np3 NP 3 COMMAND communicator_mpi_test)
  vgpu_add_mpi_test(NAME multi_worker_mirrored_test_np2 NP 2 COMMAND multi_worker_mirrored_test)
  vgpu_add_mpi_test(NAME multi_worker_mirrored_test_np4 NP 4 COMMAND multi_worker_mirrored_test)
  # 1 ps + 2 workers, then 2 ps + 2 workers (VGPU_TEST_PS_TASKS: the last ranks serve).
  vgpu_add_mpi_test(NAME parameter_server_test_np3_ps1 NP 3 COMMAND parameter_server_test)
  vgpu_add_mpi_test(NAME parameter_server_test_np4_ps2 NP 4 COMMAND parameter_server_test)
  set_property(TEST parameter_server_test_np4_ps2 APPEND PROPERTY ENVIRONMENT VGPU_TEST_PS_TASKS=2)

  # vgpu-info under mpirun: one report of the whole cluster from rank 0.
  if(TARGET vgpu-info)
    vgpu_add_mpi_test(NAME vgpu_info_cluster_np2 NP 2 COMMAND vgpu-info)
    set_tests_properties(vgpu_info_cluster_np2 PROPERTIES PASS_REGULAR_EXPRESSION
      "Cluster: 2 processes, worker \\(2 tasks\\).*== rank 0: /job:worker/task:0 ==.*/job:worker/replica:0/task:0/device:GPU:0.*== rank 1: /job:worker/task:1 ==.*/job:worker/replica:0/task:1/device:GPU:0")
    vgpu_add_mpi_test(NAME vgpu_info_cluster_json_np3 NP 3 COMMAND vgpu-info --json)
    set_tests_properties(vgpu_info_cluster_json_np3 PROPERTIES PASS_REGULAR_EXPRESSION
      "^\\{\"cluster\":\\{\"processes\":3,.*\"ranks\":\\[\\{\"platform\".*/job:worker/replica:0/task:2/device:GPU:0")
  endif()

  # vgpu-train under mpirun: the issue's done-when commands (Fashion-MNIST, 2 epochs, >= 0.85,
  # one parameter checksum on every rank), then faults.
  set(_ct ${CMAKE_CURRENT_SOURCE_DIR}/cluster_train_check.sh)
  set(_cf ${CMAKE_CURRENT_SOURCE_DIR}/cluster_fault_check.sh)
  set(_mpi ${VGPU_MPIEXEC_EXECUTABLE})
  set(_train $<TARGET_FILE:vgpu-train>)
  function(vgpu_cluster_run name)
    add_test(NAME ${name} COMMAND ${ARGN})
    set_tests_properties(${name} PROPERTIES LABELS cluster TIMEOUT 600 PROCESSORS 2
      ENVIRONMENT "${VGPU_MPI_TEST_ENVIRONMENT}")
  endfunction()
  vgpu_cluster_run(train_cluster_mwm_np2 sh ${_ct} ${_mpi} 2 ${_train} 0.85
    --strategy multi-worker-mirrored --devices 2 --epochs 2 --batch 256 --check-replicas)
  vgpu_cluster_run(train_cluster_mwm_np4 sh ${_ct} ${_mpi} 4 ${_train} -
    --strategy multi-worker-mirrored --devices 1 --epochs 1 --batch 256 --train-limit 8192
    --check-replicas)
  vgpu_cluster_run(train_cluster_ps_np3_ps1 sh ${_ct} ${_mpi} 3 ${_train} 0.85
    --strategy parameter-server --ps-tasks 1 --devices 2 --epochs 2 --batch 256)
  vgpu_cluster_run(train_cluster_ps_np4_ps2_async sh ${_ct} ${_mpi} 4 ${_train} -
    --strategy parameter-server --ps-tasks 2 --ps-async --ps-sharding by-size --ps-device gpu
    --devices 1 --epochs 1 --batch 256 --train-limit 8192)
  # Ranks given different jobs (mpirun's MPMD form) are refused before training, naming both.
  vgpu_cluster_run(train_cluster_ranks_disagree ${_mpi} --oversubscribe
    -np 1 ${_train} --strategy multi-worker-mirrored --quiet --batch 256 :
    -np 1 ${_train} --strategy multi-worker-mirrored --quiet --batch 128)
  set_tests_properties(train_cluster_ranks_disagree PROPERTIES PASS_REGULAR_EXPRESSION
    "disagree on --batch: rank 0 has 256, rank 1 has 128")
  vgpu_cluster_run(train_cluster_ps_uneven_workers ${_mpi} --oversubscribe
    -np 1 ${_train} --strategy parameter-server --devices 2 --quiet :
    -np 2 ${_train} --strategy parameter-server --devices 1 --quiet)
  set_tests_properties(train_cluster_ps_uneven_workers PROPERTIES PASS_REGULAR_EXPRESSION
    "every worker must bring the same number of devices; worker rank 0 has 2, worker rank 1 has 1")
  # A rank killed, a rank stuck, and a rank whose device fails: the others end within 30 s,
  # naming it.
  vgpu_cluster_run(train_cluster_killed_rank bash ${_cf} ${_mpi} ${_train} kill 30
    --strategy multi-worker-mirrored --devices 2 --epochs 1000 --batch 256)
  vgpu_cluster_run(train_cluster_stuck_rank bash ${_cf} ${_mpi} ${_train} stop 30
    --strategy multi-worker-mirrored --devices 2 --epochs 1000 --batch 256
    --collective-timeout 5)
  vgpu_cluster_run(train_cluster_failed_rank bash ${_cf} ${_mpi} ${_train} fail 30
    --strategy multi-worker-mirrored --devices 2 --epochs 1000 --batch 256)
endif()
