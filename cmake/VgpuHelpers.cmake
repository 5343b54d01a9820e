# vgpu_library(NAME <name> SOURCES ... DEPS ...): one static library per folder, exported as
# vgpu::<short name>. Headers are included as "runtime/status.h" etc. from the source root
# (or <prefix>/include/vgpu once installed).
function(vgpu_library)
  cmake_parse_arguments(ARG "" "NAME;ALIAS" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${ARG_NAME} STATIC ${ARG_SOURCES})
  add_library(vgpu::${ARG_ALIAS} ALIAS ${ARG_NAME})
  set_target_properties(${ARG_NAME} PROPERTIES EXPORT_NAME ${ARG_ALIAS})
  target_include_directories(${ARG_NAME} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/generated>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/vgpu>)
  target_link_libraries(${ARG_NAME} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  target_compile_options(${ARG_NAME} PRIVATE -Wall -Wextra -Wno-unused-parameter)
endfunction()
