# ELF fixtures for test_elfsym and test_symbols, built into progs/ with
# frame pointers and without sanitizers (they are inspected, not tested).
enable_language(CXX)
find_program(JPROF_STRIP NAMES strip REQUIRED)
find_program(JPROF_OBJCOPY NAMES objcopy REQUIRED)

set(SYMFIX_DIR ${CMAKE_CURRENT_BINARY_DIR}/progs)
set(SYMFIX_SRC ${CMAKE_CURRENT_SOURCE_DIR}/unit/fixtures)
set(SYMFIX_CFLAGS -O1 -g -fno-omit-frame-pointer -fno-inline -Wall)

function(symfix_target name)
  set_target_properties(${name} PROPERTIES
    RUNTIME_OUTPUT_DIRECTORY ${SYMFIX_DIR}
    LIBRARY_OUTPUT_DIRECTORY ${SYMFIX_DIR})
  # Replace the directory-wide options (sanitizers, -Werror) inherited
  # from the top level: fixtures must look like ordinary binaries.
  set_property(TARGET ${name} PROPERTY COMPILE_OPTIONS ${SYMFIX_CFLAGS} ${ARGN})
  set_property(TARGET ${name} PROPERTY LINK_OPTIONS "")
endfunction()

add_executable(symfix_pie ${SYMFIX_SRC}/symfix.c)
symfix_target(symfix_pie -fPIE)
target_link_options(symfix_pie PRIVATE -pie)

add_executable(symfix_nopie ${SYMFIX_SRC}/symfix.c)
symfix_target(symfix_nopie -fno-pie)
target_link_options(symfix_nopie PRIVATE -no-pie)

# -rdynamic puts the global functions into .dynsym, which survives strip.
add_executable(symfix_rdyn ${SYMFIX_SRC}/symfix.c)
symfix_target(symfix_rdyn -fPIE)
target_link_options(symfix_rdyn PRIVATE -pie -rdynamic)

add_library(symfix_dso SHARED ${SYMFIX_SRC}/symfix_dso.c)
symfix_target(symfix_dso -fPIC)

add_executable(symfix_cxx ${SYMFIX_SRC}/symfix_cxx.cpp)
symfix_target(symfix_cxx -fPIE)
target_link_options(symfix_cxx PRIVATE -pie)

add_custom_command(OUTPUT ${SYMFIX_DIR}/symfix_stripped
  COMMAND ${JPROF_STRIP} -o ${SYMFIX_DIR}/symfix_stripped $<TARGET_FILE:symfix_rdyn>
  DEPENDS symfix_rdyn
  COMMENT "symfix_stripped: .dynsym only")

# Separate debug info: symfix.debug holds .symtab, symfix_dbglink has none
# but names symfix.debug in .gnu_debuglink. Both keep the build-id.
add_custom_command(OUTPUT ${SYMFIX_DIR}/symfix.debug ${SYMFIX_DIR}/symfix_dbglink
  COMMAND ${JPROF_OBJCOPY} --only-keep-debug $<TARGET_FILE:symfix_pie> symfix.debug
  COMMAND ${JPROF_STRIP} -o symfix_dbglink.tmp $<TARGET_FILE:symfix_pie>
  COMMAND ${JPROF_OBJCOPY} --add-gnu-debuglink=symfix.debug symfix_dbglink.tmp symfix_dbglink
  COMMAND ${CMAKE_COMMAND} -E remove symfix_dbglink.tmp
  WORKING_DIRECTORY ${SYMFIX_DIR}
  DEPENDS symfix_pie
  COMMENT "symfix.debug + symfix_dbglink: separate debug info")

add_custom_target(symfix_derived ALL DEPENDS
  ${SYMFIX_DIR}/symfix_stripped ${SYMFIX_DIR}/symfix.debug ${SYMFIX_DIR}/symfix_dbglink)
