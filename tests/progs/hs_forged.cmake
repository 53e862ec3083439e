# hs_forged + fakejvm/libjvm.so: a process mapping a libjvm.so whose
# VMStructs are forged (unit/test_hotspot.c). Not sanitized (it is the
# hostile process, not jprofd).
add_library(prog_hs_fakejvm SHARED ${CMAKE_CURRENT_LIST_DIR}/hs_fakejvm.c)
set_target_properties(prog_hs_fakejvm PROPERTIES
  OUTPUT_NAME jvm
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/progs/fakejvm
  C_VISIBILITY_PRESET hidden
  COMPILE_OPTIONS "-O0;-g;-Wall;-Wextra;-fPIC"
  LINK_OPTIONS "")
add_executable(prog_hs_forged ${CMAKE_CURRENT_LIST_DIR}/hs_forged.c)
set_target_properties(prog_hs_forged PROPERTIES
  OUTPUT_NAME hs_forged
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/progs
  COMPILE_OPTIONS "-O0;-g;-Wall;-Wextra"
  LINK_OPTIONS "")
target_link_libraries(prog_hs_forged PRIVATE ${CMAKE_DL_LIBS})
