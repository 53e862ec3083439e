# Turns a file into a C source defining `const char NAME[]` (NUL-terminated)
# and `const size_t NAME_len`, without xxd.
#   cmake -DINPUT=file -DOUTPUT=file.c -DNAME=symbol -P embed.cmake
# Every byte becomes a \xNN escape; one escape ends where the next one's
# backslash begins, so no byte can run into its neighbour.
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hexlen)
math(EXPR len "${hexlen} / 2")
# 16 bytes (32 hex digits) per line
string(REGEX REPLACE "(................................)" "\\1\n" body "${hex}")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "\\\\x\\1" body "${body}")
string(REPLACE "\n" "\"\n\t\"" body "${body}")
file(WRITE "${OUTPUT}.tmp"
  "/* Generated from ${INPUT} by cmake/embed.cmake; do not edit. */\n"
  "#include <stddef.h>\n\n"
  "const char ${NAME}[] =\n\t\"${body}\";\n"
  "const size_t ${NAME}_len = ${len};\n")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
