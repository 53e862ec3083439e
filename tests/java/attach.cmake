# Attach tests (tests/unit/test_attach.c): a JVM to attach to and a tiny
# JVMTI agent, both in ${CMAKE_CURRENT_BINARY_DIR}/java (JPROF_JAVA_DIR).
find_package(Java 17 REQUIRED COMPONENTS Development)

set(JPROF_ATTACH_JAVA_OUT ${CMAKE_CURRENT_BINARY_DIR}/java)
file(MAKE_DIRECTORY ${JPROF_ATTACH_JAVA_OUT})
add_custom_command(OUTPUT ${JPROF_ATTACH_JAVA_OUT}/AttachTarget.class
  COMMAND ${Java_JAVAC_EXECUTABLE} --release 17 -d ${JPROF_ATTACH_JAVA_OUT}
          ${CMAKE_CURRENT_LIST_DIR}/AttachTarget.java
  DEPENDS ${CMAKE_CURRENT_LIST_DIR}/AttachTarget.java
  COMMENT "javac AttachTarget.java")
add_custom_target(attach_java_classes ALL DEPENDS ${JPROF_ATTACH_JAVA_OUT}/AttachTarget.class)

# Loaded into the JVMs under test, so built like jprofagent: no sanitizers
# (the JVM's launcher did not load their runtime). sigprof_test_agent stands
# for another profiler in tests/integration/test_signal_coexistence.py.
set(JPROF_ATTACH_AGENT_COPTS -O2 -g -Wall -Wextra -fPIC)
if(JPROF_WERROR)
  list(APPEND JPROF_ATTACH_AGENT_COPTS -Werror)
endif()
foreach(agent attach_test_agent sigprof_test_agent)
  add_library(${agent} SHARED ${CMAKE_CURRENT_LIST_DIR}/${agent}.c)
  target_include_directories(${agent} PRIVATE ${JPROF_JNI_INCLUDE} ${JPROF_JNI_INCLUDE}/linux)
  set_target_properties(${agent} PROPERTIES
    LIBRARY_OUTPUT_DIRECTORY ${JPROF_ATTACH_JAVA_OUT}
    COMPILE_OPTIONS "${JPROF_ATTACH_AGENT_COPTS}"
    LINK_OPTIONS "-Wl,-z,defs")
  target_link_libraries(${agent} PRIVATE Threads::Threads)
endforeach()

# test_attach is defined after the fragments are included.
cmake_language(DEFER CALL add_dependencies test_attach attach_test_agent attach_java_classes)
