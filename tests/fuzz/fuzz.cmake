# libFuzzer harnesses for the parsers of untrusted input (tests/fuzz/).
# They need clang, so they live in their own build directory, configured
#   CC=clang cmake -S . -B build-fuzz -DJPROF_FUZZ=ON -DJPROF_SANITIZE=ON
#   cmake --build build-fuzz --target fuzz
#   (cd build-fuzz && ctest -L fuzz)
# The layer libraries a harness links are built there with coverage
# instrumentation and ASan + UBSan; nothing else of the project needs to be
# built. ctest runs each harness for JPROF_FUZZ_SECONDS from its committed
# seed corpus (tests/fuzz/corpus/<name>) with a fixed seed; any crash, leak,
# timeout or broken invariant fails the test and leaves the input in
# build-fuzz/tests/fuzz/artifacts/. bench/fuzz.sh runs them for longer.
# The seeds were made from real inputs by tests/fuzz/make_corpus.py; files
# named regress-* are inputs of findings that were fixed, kept so that the
# short run replays them.
option(JPROF_FUZZ "Build the libFuzzer harnesses (clang only)" OFF)
set(JPROF_FUZZ_SECONDS 5 CACHE STRING "How long ctest runs each fuzz harness")

if(JPROF_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "JPROF_FUZZ needs clang (configure with CC=clang)")
  endif()
  if(NOT JPROF_SANITIZE)
    message(FATAL_ERROR "JPROF_FUZZ needs -DJPROF_SANITIZE=ON: the harnesses find bugs through ASan and UBSan")
  endif()

  set(FUZZ_SRC ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
  set(FUZZ_OUT ${CMAKE_CURRENT_BINARY_DIR}/fuzz)
  file(MAKE_DIRECTORY ${FUZZ_OUT}/artifacts)

  # Coverage feedback from the code under test, not only from the harness.
  foreach(lib jprofproto jprof_core jprof_symbols jprof_jvm jprof_unwind)
    target_compile_options(${lib} PRIVATE -fsanitize=fuzzer-no-link)
  endforeach()

  # Harness name -> the library it exercises.
  set(JPROF_FUZZERS
    "proto:jprofproto"       # control socket request lines
    "agent:jprof_jvm"        # agent frames (agentlink)
    "ring:jprof_jvm"         # shared ring -> Java join (jring, jvmjoin)
    "procmaps:jprof_symbols" # /proc/PID/maps
    "kallsyms:jprof_symbols" # /proc/kallsyms
    "elf:jprof_symbols"      # ELF files named by a process's mappings
    "cfi:jprof_unwind"       # their .eh_frame, compiled to unwind tables
    "lines:jprof_symbols")   # their DWARF, for file:line
  math(EXPR fuzz_timeout "${JPROF_FUZZ_SECONDS} + 120")
  add_custom_target(fuzz)
  foreach(entry ${JPROF_FUZZERS})
    string(REPLACE ":" ";" parts ${entry})
    list(GET parts 0 name)
    list(GET parts 1 lib)
    add_executable(fuzz_${name} ${FUZZ_SRC}/fuzz_${name}.c)
    target_include_directories(fuzz_${name} PRIVATE ${FUZZ_SRC})
    target_compile_options(fuzz_${name} PRIVATE -fsanitize=fuzzer)
    target_link_options(fuzz_${name} PRIVATE -fsanitize=fuzzer)
    target_link_libraries(fuzz_${name} PRIVATE ${lib})
    set_target_properties(fuzz_${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${FUZZ_OUT})
    add_dependencies(fuzz fuzz_${name})

    # New inputs go to the build tree; the committed seeds are only read.
    file(MAKE_DIRECTORY ${FUZZ_OUT}/corpus/${name})
    # <name>.dict: tokens; <name>.options: more flags, one a line.
    set(extra)
    if(EXISTS ${FUZZ_SRC}/${name}.dict)
      list(APPEND extra -dict=${FUZZ_SRC}/${name}.dict)
    endif()
    if(EXISTS ${FUZZ_SRC}/${name}.options)
      file(STRINGS ${FUZZ_SRC}/${name}.options opts REGEX "^-")
      list(APPEND extra ${opts})
    endif()
    add_test(NAME fuzz.${name}
      COMMAND fuzz_${name} -seed=1 -max_total_time=${JPROF_FUZZ_SECONDS} -timeout=10
              -rss_limit_mb=2048 -print_final_stats=1 ${extra}
              -artifact_prefix=${FUZZ_OUT}/artifacts/${name}-
              ${FUZZ_OUT}/corpus/${name} ${FUZZ_SRC}/corpus/${name})
    set_tests_properties(fuzz.${name} PROPERTIES LABELS fuzz
      TIMEOUT ${fuzz_timeout}
      ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=1;LSAN_OPTIONS=suppressions=${FUZZ_SRC}/lsan.supp;UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1")
  endforeach()
endif()
