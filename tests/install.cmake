# find_package(vgpu) from a separate project: install into a scratch prefix, build the tiny
# consumer in tests/consumer against it, and run it.
add_test(NAME install_consumer
  COMMAND ${CMAKE_COMMAND}
    -DSRC=${PROJECT_SOURCE_DIR} -DBIN=${PROJECT_BINARY_DIR}
    -DWORK=${PROJECT_BINARY_DIR}/install_consumer
    -DGENERATOR=${CMAKE_GENERATOR}
    -P ${CMAKE_CURRENT_SOURCE_DIR}/consumer/run.cmake)
set_tests_properties(install_consumer PROPERTIES LABELS install TIMEOUT 600)

# Every header in a library folder is listed public or private, and public headers include
# only public ones (cmake/VgpuPublicHeaders.cmake says how to add a header).
add_test(NAME public_headers
  COMMAND ${CMAKE_COMMAND} -DSRC=${PROJECT_SOURCE_DIR} -P ${PROJECT_SOURCE_DIR}/cmake/CheckPublicHeaders.cmake)
set_tests_properties(public_headers PROPERTIES LABELS unit)
