# Test workloads for the integration tests (tests/integration). Their frame
# names are asserted, so they are built the same way in every build type:
# -O0 (gcc 12 omits the frame of a leaf that needs no stack even with
# -mno-omit-leaf-frame-pointer, and frame-pointer unwinding then skips the
# leaf's caller), frame pointers, no inlining, no sibling calls, and no sanitizers (an ASan
# interceptor around read() would add frames the tests do not expect; the
# sanitizers are for jprofd and jprofctl).
find_package(Threads REQUIRED)

set(JPROF_PROGS_OUT ${CMAKE_CURRENT_BINARY_DIR}/progs)
set(JPROF_PROGS_COPTS -O0 -g -Wall -Wextra -fno-omit-frame-pointer
  -mno-omit-leaf-frame-pointer -fno-inline -fno-optimize-sibling-calls)
if(JPROF_WERROR)
  list(APPEND JPROF_PROGS_COPTS -Werror)
endif()

# waiter: the off-CPU workload (test_offcpu.py); alternate: test_timeline.py;
# wall_split: test_wall.py; fp_garbage: test_fp_garbage.py; deep_stacks:
# test_big_outputs.py; tower: test_flamegraph_screen.py.
foreach(prog spin_chain read_zero thread_spawner alternate waiter short_threads wall_split
    fp_garbage deep_stacks tower)
  add_executable(prog_${prog} ${CMAKE_CURRENT_LIST_DIR}/${prog}.c)
  set_target_properties(prog_${prog} PROPERTIES
    OUTPUT_NAME ${prog}
    RUNTIME_OUTPUT_DIRECTORY ${JPROF_PROGS_OUT}
    # Replace (not append to) the directory-wide options, which carry
    # -fsanitize=... in sanitizer builds.
    COMPILE_OPTIONS "${JPROF_PROGS_COPTS}"
    LINK_OPTIONS "")
endforeach()
target_link_libraries(prog_thread_spawner PRIVATE Threads::Threads)
target_link_libraries(prog_short_threads PRIVATE Threads::Threads)
target_link_libraries(prog_wall_split PRIVATE Threads::Threads)
target_link_libraries(prog_deep_stacks PRIVATE Threads::Threads)

# DWARF unwinding workloads (test_dwarf_unwind.py): optimized and without
# frame pointers, as distributions build, so only .eh_frame finds callers.
set(JPROF_UNWIND_COPTS -O2 -g -Wall -Wextra -fomit-frame-pointer -fno-inline)
if(JPROF_WERROR)
  list(APPEND JPROF_UNWIND_COPTS -Werror)
endif()
# dbgframe: its own code has CFI in .debug_frame only (built without unwind
# tables, as some projects and hand-written assembly are).
foreach(kind pie nopie dbgframe)
  add_executable(prog_unwind_chain_${kind} ${CMAKE_CURRENT_LIST_DIR}/unwind_chain.c)
  if(kind STREQUAL "pie")
    set(copts ${JPROF_UNWIND_COPTS} -fPIE)
    set(lopts -pie)
  elseif(kind STREQUAL "dbgframe")
    set(copts ${JPROF_UNWIND_COPTS} -fPIE -fno-asynchronous-unwind-tables -fno-unwind-tables)
    set(lopts -pie)
  else()
    set(copts ${JPROF_UNWIND_COPTS} -fno-pie)
    set(lopts -no-pie)
  endif()
  set_target_properties(prog_unwind_chain_${kind} PROPERTIES
    OUTPUT_NAME unwind_chain_${kind}
    RUNTIME_OUTPUT_DIRECTORY ${JPROF_PROGS_OUT}
    POSITION_INDEPENDENT_CODE OFF
    COMPILE_OPTIONS "${copts}"
    LINK_OPTIONS "${lopts}")
  target_link_libraries(prog_unwind_chain_${kind} PRIVATE ${CMAKE_DL_LIBS})
endforeach()
add_library(prog_unwind_dso SHARED ${CMAKE_CURRENT_LIST_DIR}/unwind_dso.c)
set_target_properties(prog_unwind_dso PROPERTIES
  OUTPUT_NAME unwind_dso
  LIBRARY_OUTPUT_DIRECTORY ${JPROF_PROGS_OUT}
  COMPILE_OPTIONS "${JPROF_UNWIND_COPTS};-fPIC"
  LINK_OPTIONS "")

# line_spin: file:line from DWARF (test_lines.py); optimized, so its hot
# loop is an inlined function's, with debug info.
add_executable(prog_line_spin ${CMAKE_CURRENT_LIST_DIR}/line_spin.c)
set_target_properties(prog_line_spin PROPERTIES
  OUTPUT_NAME line_spin
  RUNTIME_OUTPUT_DIRECTORY ${JPROF_PROGS_OUT}
  COMPILE_OPTIONS "${JPROF_UNWIND_COPTS};-finline-functions"
  LINK_OPTIONS "")

# sig_spin: a signal handler's stacks through libc's signal frame
# (test_signal_frames.py); optimized, without frame pointers.
add_executable(prog_sig_spin ${CMAKE_CURRENT_LIST_DIR}/sig_spin.c)
set_target_properties(prog_sig_spin PROPERTIES
  OUTPUT_NAME sig_spin
  RUNTIME_OUTPUT_DIRECTORY ${JPROF_PROGS_OUT}
  COMPILE_OPTIONS "${JPROF_UNWIND_COPTS}"
  LINK_OPTIONS "")
