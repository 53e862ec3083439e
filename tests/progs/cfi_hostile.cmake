# cfi_long, cfi_regs: binaries whose CFI is hostile to the unwind table
# builder (security/test_hostile_cfi.py, unit/test_cfi.c, unit/test_unwtab.c).
# Included before progs.cmake (alphabetical): its variables are not set yet.
enable_language(ASM)
set(cfi_hostile_copts -O0 -g -Wall -Wextra)
if(JPROF_WERROR)
  list(APPEND cfi_hostile_copts -Werror)
endif()
foreach(kind long regs)
  add_executable(prog_cfi_${kind} ${CMAKE_CURRENT_LIST_DIR}/cfi_hostile.c
    ${CMAKE_CURRENT_LIST_DIR}/cfi_hostile_${kind}.S)
  set_target_properties(prog_cfi_${kind} PROPERTIES
    OUTPUT_NAME cfi_${kind}
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/progs
    # Not the directory-wide options (sanitizers in ASan builds).
    COMPILE_OPTIONS "${cfi_hostile_copts}"
    LINK_OPTIONS "")
endforeach()
