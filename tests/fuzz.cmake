# libFuzzer targets: tests/fuzz/<name>_fuzz.cc, each with a seed corpus in
# tests/fuzz/<name>_corpus/. Built by the `fuzz` preset (clang); CTest runs each for a bounded
# number of inputs (label fuzz). A crash, leak or sanitizer report fails the test.
set(VGPU_FUZZ_RUNS 100000 CACHE STRING "Inputs each fuzzer runs in CTest")
add_custom_target(fuzzers)
if(VGPU_BUILD_FUZZERS)
  file(GLOB fuzz_sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/*_fuzz.cc)
  foreach(src ${fuzz_sources})
    get_filename_component(name ${src} NAME_WE)
    string(REGEX REPLACE "_fuzz$" "" stem ${name})
    add_executable(${name} ${src})
    target_link_libraries(${name} PRIVATE vgpu::vgpu)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
    add_dependencies(fuzzers ${name})
    set(corpus ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/${stem}_corpus)
    # Work on a copy so new inputs never land in the source tree.
    add_test(NAME ${name}
      COMMAND sh -c "rm -rf '${name}_work' && mkdir -p '${name}_work' && cp -r '${corpus}'/. '${name}_work'/ 2>/dev/null; exec $<TARGET_FILE:${name}> -runs=${VGPU_FUZZ_RUNS} -seed=1 -max_len=4096 -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 '${name}_work'")
    set_tests_properties(${name} PROPERTIES LABELS fuzz TIMEOUT 900)
  endforeach()
endif()

# ---- Fuzzers of the tools' parsing link the tools' library (tools/CMakeLists.txt) ------------
if(VGPU_BUILD_FUZZERS AND TARGET vgpu_tools_lib)
  foreach(name history_fuzz bench_flags_fuzz info_flags_fuzz train_flags_fuzz)
    if(TARGET ${name})
      target_link_libraries(${name} PRIVATE vgpu_tools_lib)
    endif()
  endforeach()
endif()
