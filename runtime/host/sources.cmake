# The host platform's part of vgpu_runtime (included by runtime/CMakeLists.txt for "host" in
# VGPU_PLATFORMS): simulated GPUs in host memory, BLAS from OpenBLAS.
file(GLOB VGPU_HOST_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.cc)
list(APPEND VGPU_RUNTIME_SOURCES ${VGPU_HOST_SOURCES})
list(APPEND VGPU_RUNTIME_PRIVATE_INCLUDES ${OpenBLAS_INCLUDE_DIRS})
list(APPEND VGPU_RUNTIME_PRIVATE_DEPS ${OpenBLAS_LIBRARIES})
