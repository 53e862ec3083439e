# Java workloads for the JVM tests (tests/java/*.java), compiled at build
# time into ${CMAKE_CURRENT_BINARY_DIR}/java (the tests' JPROF_JAVA_DIR).
# --release 17: the same class files run on JDK 17 and JDK 25.
find_program(JPROF_JAVAC javac
  PATHS /usr/lib/jvm/java-17-openjdk-amd64/bin /usr/lib/jvm/default-java/bin
  NO_DEFAULT_PATH)
if(NOT JPROF_JAVAC)
  find_program(JPROF_JAVAC javac REQUIRED)
endif()

set(JPROF_JAVA_OUT ${CMAKE_CURRENT_BINARY_DIR}/java)
set(JPROF_JAVA_WORKLOADS CpuSplit IoRead Alloc LateThreads Idle ThreadNames HardWalks Inlining
  AllocSplit LockWait LockContend WallSplit WallBench AllocLock ShortThreads GcNative
  RtStubs JavacLoop DeoptRoots Hot)
set(JPROF_JAVA_SOURCES "")
set(JPROF_JAVA_CLASSES "")
foreach(w ${JPROF_JAVA_WORKLOADS})
  list(APPEND JPROF_JAVA_SOURCES ${CMAKE_CURRENT_LIST_DIR}/${w}.java)
  list(APPEND JPROF_JAVA_CLASSES ${JPROF_JAVA_OUT}/${w}.class)
endforeach()
add_custom_command(OUTPUT ${JPROF_JAVA_CLASSES}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${JPROF_JAVA_OUT}
  COMMAND ${JPROF_JAVAC} --release 17 -g -encoding UTF-8 -Xlint:all -Werror
          -d ${JPROF_JAVA_OUT} ${JPROF_JAVA_SOURCES}
  DEPENDS ${JPROF_JAVA_SOURCES}
  COMMENT "javac Java workloads")
add_custom_target(java_workloads ALL DEPENDS ${JPROF_JAVA_CLASSES})
