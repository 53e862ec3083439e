# Another profiler's stand-in for tests/integration/test_signal_coexistence.py:
# a JVMTI agent that owns SIGPROF (tests/java/sigprof_test_agent.c), built
# into the tests' JPROF_JAVA_DIR like attach_test_agent (no sanitizers: the
# JVM's launcher did not load their runtime).
add_library(sigprof_test_agent SHARED ${CMAKE_CURRENT_LIST_DIR}/sigprof_test_agent.c)
target_include_directories(sigprof_test_agent PRIVATE ${JPROF_JNI_INCLUDE} ${JPROF_JNI_INCLUDE}/linux)
set(JPROF_SIGAGENT_COPTS -O2 -g -Wall -Wextra -fPIC)
if(JPROF_WERROR)
  list(APPEND JPROF_SIGAGENT_COPTS -Werror)
endif()
set_target_properties(sigprof_test_agent PROPERTIES
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/java
  COMPILE_OPTIONS "${JPROF_SIGAGENT_COPTS}"
  LINK_OPTIONS "-Wl,-z,defs")
target_link_libraries(sigprof_test_agent PRIVATE pthread)
