# vgpu-bench smoke tests: the replay's last line is one JSON object with every key design.md
# section 7 names. Label `bench` for the ones that replay a whole trace: the default preset runs
# them; the sanitizer presets run only `unit` and `stress`, where they would just be slow.
# The traces come from ../shared/traces beside the repository; without them the tests report
# "SKIPPED".
set(VGPU_TRACES ${PROJECT_SOURCE_DIR}/../shared/traces)

foreach(growth off on)
  set(flag "")
  if(growth STREQUAL "on")
    set(flag "--allow-growth")
  endif()
  add_test(NAME vgpu_bench_replay_json_growth_${growth}
    COMMAND sh -c "t=${VGPU_TRACES}/transformer_train.trace; \
if [ ! -f \"$t\" ]; then echo \"SKIPPED: $t is absent\"; exit 0; fi; \
$<TARGET_FILE:vgpu-bench> replay \"$t\" --min-limit ${flag} 2>/dev/null | tail -n 1")
  set_tests_properties(vgpu_bench_replay_json_growth_${growth} PROPERTIES LABELS bench TIMEOUT 300
    SKIP_REGULAR_EXPRESSION "SKIPPED:"
    PASS_REGULAR_EXPRESSION "^{\"trace\":\"transformer_train\",\"allocator\":\"bfc\",\"allow_growth\":(true|false),\"events\":6888,\"ns_per_op\":[0-9.e+]+,\"baseline_ns_per_op\":[0-9.e+]+,\"peak_live_bytes\":10762125316,\"peak_reserved_bytes\":[0-9]+,\"min_limit_bytes\":[0-9]+,\"min_limit_ratio\":1\\.0[0-9]*,\"first_fit_ratio\":1\\.0[0-9]*,\"peak_rss_bytes\":[0-9]+}")
endforeach()

# Bookkeeping grows with the blocks, not the pool: a 64 GiB limit keeps the whole process under
# 128 MiB resident (issue #4's bar; --no-baseline leaves out the malloc child, whose glibc heap
# is not ours). The JSON's peak_rss_bytes is this process's VmHWM.
foreach(allocator bfc vmm)
  add_test(NAME vgpu_bench_replay_64gib_rss_${allocator}
    COMMAND sh -c "t=${VGPU_TRACES}/random_mixed.trace; \
if [ ! -f \"$t\" ]; then echo \"SKIPPED: $t is absent\"; exit 0; fi; \
$<TARGET_FILE:vgpu-bench> replay \"$t\" --allocator ${allocator} --limit 64GiB --no-baseline \
  2>/dev/null | tail -n 1 | sed -n 's/.*\"peak_rss_bytes\":\\([0-9]*\\).*/rss=\\1/p' | \
  awk -F= '{ print $0, ($2 < 134217728 ? \"under-128MiB\" : \"OVER-128MiB\") }'")
  set_tests_properties(vgpu_bench_replay_64gib_rss_${allocator} PROPERTIES LABELS bench
    TIMEOUT 300 SKIP_REGULAR_EXPRESSION "SKIPPED:" PASS_REGULAR_EXPRESSION "rss=[0-9]+ under-128MiB")
endforeach()

# A limit below the peak: the JSON still comes, and the exit status says allocations failed.
add_test(NAME vgpu_bench_replay_too_small_limit
  COMMAND sh -c "t=${VGPU_TRACES}/transformer_train.trace; \
if [ ! -f \"$t\" ]; then echo \"SKIPPED: $t is absent\"; exit 0; fi; \
$<TARGET_FILE:vgpu-bench> replay \"$t\" --limit 1GiB 2>&1; echo \"exit=$?\"")
set_tests_properties(vgpu_bench_replay_too_small_limit PROPERTIES LABELS bench
  SKIP_REGULAR_EXPRESSION "SKIPPED:"
  PASS_REGULAR_EXPRESSION "out of memory.*\"min_limit_bytes\":null.*exit=3")

add_test(NAME vgpu_bench_bad_arguments
  COMMAND sh -c "$<TARGET_FILE:vgpu-bench> replay x.trace --limit lots 2>&1; echo \"exit=$?\"")
set_tests_properties(vgpu_bench_bad_arguments PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "--limit: .*lots.*usage: vgpu-bench replay.*exit=2")

add_test(NAME vgpu_bench_missing_trace
  COMMAND sh -c "$<TARGET_FILE:vgpu-bench> replay /nonexistent.trace 2>&1; echo \"exit=$?\"")
set_tests_properties(vgpu_bench_missing_trace PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "cannot open trace file /nonexistent.trace.*exit=1")

# vgpu-bench alloc on the host platform, one quick benchmark: ends with its JSON line.
add_test(NAME vgpu_bench_alloc_json
  COMMAND sh -c "VGPU_PLATFORM=host $<TARGET_FILE:vgpu-bench> alloc \
--benchmark_filter=1MiB/real_time/threads:1 --benchmark_min_time=0.01 2>/dev/null | tail -n 1")
set_tests_properties(vgpu_bench_alloc_json PROPERTIES LABELS bench TIMEOUT 300
  PASS_REGULAR_EXPRESSION "^{\"benchmark\":\"alloc\",\"platform\":\"host\",\"allocator\":\"bfc\",\"results\":\\[{\"name\":\"bfc/1MiB/real_time/threads:1\".*\"speedup_1MiB\":[0-9.e+]+}")

add_test(NAME vgpu_bench_replay_cuda_without_gpu
  COMMAND sh -c "VGPU_PLATFORM=cuda $<TARGET_FILE:vgpu-bench> replay ${VGPU_TRACES}/transformer_train.trace --platform cuda 2>&1; echo \"exit=$?\"")
set_tests_properties(vgpu_bench_replay_cuda_without_gpu PROPERTIES LABELS unit
  PASS_REGULAR_EXPRESSION "(--platform cuda: .*has no device.*exit=1)|(cannot open trace)|(\"trace\":\"transformer_train\")")

add_test(NAME vgpu_bench_replay_memory_history
  COMMAND sh -c "t=${VGPU_TRACES}/transformer_train.trace; \
if [ ! -f \"$t\" ]; then echo \"SKIPPED: $t is absent\"; exit 0; fi; \
h=${CMAKE_CURRENT_BINARY_DIR}/vgpu_bench_history.json; rm -f \"$h\"; \
$<TARGET_FILE:vgpu-bench> replay \"$t\" --allow-growth --memory-history \"$h\" >/dev/null 2>&1; \
head -c 300 \"$h\"")
set_tests_properties(vgpu_bench_replay_memory_history PROPERTIES LABELS bench
  SKIP_REGULAR_EXPRESSION "SKIPPED:"
  PASS_REGULAR_EXPRESSION "\"recorded\":6900,\"dropped\":0,\"limits\":{[^}]*},\"allocators\":\\[\"replay/transformer_train\"\\],\"events\":\\[{\"t_ns\":[0-9]+,\"allocator\":0,\"kind\":\"map\"")
