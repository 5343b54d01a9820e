# Everything on the cuda code path, run on the CUDA simulator (tests/cudasim/, built by
# tests/cudasim.cmake) through scripts/cudasim, exactly as a user would: label `cudasim`.
# The fast, deterministic part is also labelled `unit`, so .ci/run runs it under ASan and TSan.
# A skipped test fails here: on the simulator there is always a device.
if(TARGET vgpu_cudasim)
  set(_cs ${CMAKE_COMMAND} -E env VGPU_CUDASIM_LIB_DIR=${PROJECT_BINARY_DIR}/cudasim/lib
          ${PROJECT_SOURCE_DIR}/scripts/cudasim)
  set(_cs_h100 ${CMAKE_COMMAND} -E env VGPU_CUDASIM_LIB_DIR=${PROJECT_BINARY_DIR}/cudasim/lib
               VGPU_CUDASIM_PROFILE=h100 ${PROJECT_SOURCE_DIR}/scripts/cudasim)

  # The gpu-labelled tests (cuda platform, platform and allocator conformance, vmm, async,
  # stream order under the simulator's race detector).
  foreach(_t cuda_platform_gpu_test platform_conformance_gpu_test allocator_conformance_gpu_test
             vmm_allocator_gpu_test async_allocator_gpu_test stream_order_gpu_test)
    if(TARGET ${_t})
      add_dependencies(${_t} vgpu_cudasim)
      set(_filter "")
      if(_t STREQUAL "stream_order_gpu_test")
        set(_filter "--gtest_filter=-Broken*")  # those poison the context: one process each
      endif()
      add_test(NAME ${_t}_on_cudasim COMMAND ${_cs} $<TARGET_FILE:${_t}> ${_filter})
      set_tests_properties(${_t}_on_cudasim PROPERTIES LABELS "cudasim;unit" TIMEOUT 600
        FAIL_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
    endif()
  endforeach()

  # Stream order broken on purpose (the allocator's waits off, RecordStream left out): the
  # simulator's race detector must report it, one process per case (a race is sticky).
  if(TARGET stream_order_gpu_test)
    foreach(_kind 0 1)
      foreach(_case WithoutTheWaitsTheReuseRaces WithoutRecordStreamTheReuseRaces)
        add_test(NAME stream_order_gpu_test_${_case}_${_kind}_on_cudasim
          COMMAND ${_cs} $<TARGET_FILE:stream_order_gpu_test>
                  --gtest_filter=BrokenStreamOrderGpuTest/${_kind}.${_case})
        set_tests_properties(stream_order_gpu_test_${_case}_${_kind}_on_cudasim PROPERTIES
          LABELS "cudasim;unit" TIMEOUT 600
          PASS_REGULAR_EXPRESSION "cudasim: data race: .*\\[  PASSED  \\] 1 test"
          FAIL_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
      endforeach()
    endforeach()
  endif()

  # vgpu-info on one simulated H100 with 4 and 8 logical devices (the plain selftest with no
  # settings is cuda_sim_vgpu_info_selftest_h100_defaults in tests/cuda.cmake).
  add_test(NAME vgpu_info_selftest_on_cudasim_h100_4
    COMMAND ${_cs_h100} $<TARGET_FILE:vgpu-info> --selftest
            --logical-devices 0:1GiB,1GiB,1GiB,1GiB)
  add_test(NAME vgpu_info_selftest_on_cudasim_h100_8
    COMMAND ${_cs_h100} $<TARGET_FILE:vgpu-info> --selftest
            --logical-devices 0:1GiB,1GiB,1GiB,1GiB,1GiB,1GiB,1GiB,1GiB)
  set_tests_properties(vgpu_info_selftest_on_cudasim_h100_4 vgpu_info_selftest_on_cudasim_h100_8 PROPERTIES LABELS "cudasim;unit" TIMEOUT 600
    PASS_REGULAR_EXPRESSION "Selftest: [0-9]+ check\\(s\\), 0 failed: PASS")
  # --json: one physical device of 132 SMs and four logical GPUs.
  add_test(NAME vgpu_info_json_on_cudasim_h100
    COMMAND ${_cs_h100} $<TARGET_FILE:vgpu-info> --json --logical-devices 0:1GiB,1GiB,1GiB,1GiB)
  set_tests_properties(vgpu_info_json_on_cudasim_h100 PROPERTIES LABELS "cudasim;unit"
    PASS_REGULAR_EXPRESSION "\"platform\":\"cuda\".*\"sm_count\":132.*device:GPU:0.*device:GPU:1.*device:GPU:2.*device:GPU:3"
    FAIL_REGULAR_EXPRESSION "device:GPU:4")

  # vgpu-bench on the cuda platform: replay (every allocator), alloc, allreduce.
  if(TARGET vgpu-bench)
    foreach(_alloc bfc vmm async)
      add_test(NAME vgpu_bench_replay_${_alloc}_on_cudasim
        COMMAND ${_cs} $<TARGET_FILE:vgpu-bench> replay ${PROJECT_SOURCE_DIR}/tools/traces/mlp_mirrored.trace
                --platform cuda --allocator ${_alloc} --limit 256MiB --no-baseline)
      set_tests_properties(vgpu_bench_replay_${_alloc}_on_cudasim PROPERTIES LABELS cudasim
        TIMEOUT 600 PASS_REGULAR_EXPRESSION "\"allocator\":\"${_alloc}\"")
    endforeach()
    add_test(NAME vgpu_bench_alloc_on_cudasim
      COMMAND ${_cs} $<TARGET_FILE:vgpu-bench> alloc --platform cuda
              --benchmark_filter=1MiB/real_time/threads:1 --benchmark_min_time=0.01)
    set_tests_properties(vgpu_bench_alloc_on_cudasim PROPERTIES LABELS cudasim TIMEOUT 600
      PASS_REGULAR_EXPRESSION "\"platform\":\"cuda\"")
    add_test(NAME vgpu_bench_allreduce_on_cudasim
      COMMAND ${_cs} $<TARGET_FILE:vgpu-bench> allreduce --platform cuda --devices 2
              --size 1000003 --iterations 2)
    set_tests_properties(vgpu_bench_allreduce_on_cudasim PROPERTIES LABELS cudasim TIMEOUT 600
      PASS_REGULAR_EXPRESSION "\"devices\":2.*\"bandwidth_gbps\":")
  endif()

  # vgpu-train on the cuda platform, every strategy, the same accuracy bar as on host. Four
  # 1 GiB logical GPUs on one simulated H100.
  if(TARGET vgpu-train AND EXISTS /usr/share/datasets/fashion-mnist)
    foreach(_strategy single mirrored model-parallel central-storage)
      add_test(NAME vgpu_train_${_strategy}_on_cudasim
        COMMAND ${_cs_h100} sh ${CMAKE_CURRENT_SOURCE_DIR}/vgpu_train_check.sh
                $<TARGET_FILE:vgpu-train> 0.85 --platform cuda --strategy ${_strategy}
                --devices 4 --epochs 2 --batch 256 --quiet)
      set_tests_properties(vgpu_train_${_strategy}_on_cudasim PROPERTIES LABELS cudasim
        TIMEOUT 900 PASS_REGULAR_EXPRESSION "\"platform\":\"cuda\".*PASS: test_accuracy")
    endforeach()
  endif()

  # The mutation check: with the driver dropping every cuEventRecord, or every
  # cuStreamWaitEvent (what deleting the platform's call would do), the suite must fail.
  if(TARGET cuda_platform_gpu_test AND TARGET vgpu-train)
    add_test(NAME cudasim_mutations_are_caught
      COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/cudasim_mutation_test.sh
              ${PROJECT_SOURCE_DIR}/scripts/cudasim ${PROJECT_BINARY_DIR}/cudasim/lib
              $<TARGET_FILE:cuda_platform_gpu_test> $<TARGET_FILE:vgpu-train>)
    set_tests_properties(cudasim_mutations_are_caught PROPERTIES LABELS cudasim TIMEOUT 900
      PASS_REGULAR_EXPRESSION "cudasim mutations: all [0-9]+ caught")
  endif()
endif()

# The driver probe (scripts/cuda-vmm-probe.cc) on the simulator: the VMM result codes must be
# the ones an H200 gave (driver 580, 2026-11-26, docs/gpu-results.md): no offset, no part of an
# allocation (801 = CUDA_ERROR_NOT_SUPPORTED), one handle at two addresses, access and unmap
# over several whole mappings, no unmap of part of a mapping (1 = CUDA_ERROR_INVALID_VALUE).
if(TARGET vgpu_cudasim)
  add_executable(cuda_vmm_probe ${PROJECT_SOURCE_DIR}/scripts/cuda-vmm-probe.cc)
  target_include_directories(cuda_vmm_probe PRIVATE ${VGPU_CUDA_INCLUDE_DIR})
  target_link_libraries(cuda_vmm_probe PRIVATE ${CMAKE_DL_LIBS})
  add_dependencies(cuda_vmm_probe vgpu_cudasim)
  add_test(NAME cuda_vmm_probe_on_cudasim COMMAND ${_cs} $<TARGET_FILE:cuda_vmm_probe>)
  set_tests_properties(cuda_vmm_probe_on_cudasim PROPERTIES LABELS "cudasim;unit" TIMEOUT 120
    PASS_REGULAR_EXPRESSION "P1 map at offset g: 801\nP2 map prefix g of 2g at offset 0: 801\nP2b setaccess prefix: 1\nP3 whole 1-granule handle at va\\+4g: 0\nP3a the same handle again at va\\+5g: 0\nP3b setaccess over both \\(2 mappings of one handle\\): 0\nP3e unmap both: 0\nP4 map whole 2g handle: 0\nP6 unmap sub-range of one mapping: 1\nP6b unmap whole: 0\nP5 setaccess spanning two handles: 0\nP4b unmap spanning two handles: 0\n")
endif()
