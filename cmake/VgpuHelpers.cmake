# One include root: every header is included as "vgpu/<folder>/<file>.h", in the build tree
# and once installed. The build tree gets it from ${PROJECT_BINARY_DIR}/include/vgpu, whose
# entries are links to the source folders (runtime/, allocator/, ... stay at the top of the
# repository, docs/architecture.md); an install copies the public headers to <prefix>/include/vgpu.
set(VGPU_INCLUDE_ROOT ${PROJECT_BINARY_DIR}/include)
file(MAKE_DIRECTORY ${VGPU_INCLUDE_ROOT}/vgpu)
foreach(dir runtime allocator devices strategies tools tests)
  if(NOT EXISTS ${VGPU_INCLUDE_ROOT}/vgpu/${dir})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${dir} ${VGPU_INCLUDE_ROOT}/vgpu/${dir} SYMBOLIC)
  endif()
endforeach()

# vgpu_library(NAME <name> SOURCES ... DEPS ...): one static library per folder, exported as
# vgpu::<short name>.
function(vgpu_library)
  cmake_parse_arguments(ARG "" "NAME;ALIAS" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(${ARG_NAME} STATIC ${ARG_SOURCES})
  add_library(vgpu::${ARG_ALIAS} ALIAS ${ARG_NAME})
  set_target_properties(${ARG_NAME} PROPERTIES EXPORT_NAME ${ARG_ALIAS})
  target_include_directories(${ARG_NAME} PUBLIC
    $<BUILD_INTERFACE:${VGPU_INCLUDE_ROOT}>
    $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/generated>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(${ARG_NAME} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  # The libraries are position-independent (they may be linked into a user's shared library),
  # and GCC then treats every external function as one a preloaded library could replace, so it
  # never inlines a call to one: -fno-semantic-interposition lets it inline within a file, as
  # it does in an executable (allocator replays 5-9 % faster, docs/allocator.md).
  target_compile_options(${ARG_NAME} PRIVATE -Wall -Wextra -Wno-unused-parameter
                         $<$<COMPILE_LANGUAGE:CXX>:-fno-semantic-interposition>)
endfunction()
