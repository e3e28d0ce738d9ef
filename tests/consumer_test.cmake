# Installs the package from the build tree into a temporary prefix, then configures, builds and
# runs examples/consumer against it. Run by ctest as `cmake -P` with SOURCE_DIR, BINARY_DIR, WORK,
# WITH_TOKENIZERS (whether RetNet::tokenizers was built) and TEST_DATA.
file(REMOVE_RECURSE "${WORK}")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${err}")
  endif()
endfunction()
if(WITH_TOKENIZERS)
  set(tokenizers ON)
else()
  set(tokenizers OFF)
endif()
run(${CMAKE_COMMAND} --install "${BINARY_DIR}" --prefix "${WORK}/prefix")
run(${CMAKE_COMMAND} -S "${SOURCE_DIR}/examples/consumer" -B "${WORK}/build"
    "-DCMAKE_PREFIX_PATH=${WORK}/prefix" -DCMAKE_BUILD_TYPE=Release
    -DRETNET_CONSUMER_TOKENIZERS=${tokenizers})
run(${CMAKE_COMMAND} --build "${WORK}/build")
run("${WORK}/build/retnet_consumer")
if(tokenizers)
  run("${WORK}/build/retnet_consumer_tokenizers" "${TEST_DATA}/tokenizers/gpt2")
endif()
