# find_package(vgpu) from a separate project: install into a scratch prefix, build the tiny
# consumer in tests/consumer against it, and run it.
add_test(NAME install_consumer
  COMMAND ${CMAKE_COMMAND}
    -DSRC=${PROJECT_SOURCE_DIR} -DBIN=${PROJECT_BINARY_DIR}
    -DWORK=${PROJECT_BINARY_DIR}/install_consumer
    -DGENERATOR=${CMAKE_GENERATOR}
    -P ${CMAKE_CURRENT_SOURCE_DIR}/consumer/run.cmake)
set_tests_properties(install_consumer PROPERTIES LABELS install TIMEOUT 600)
