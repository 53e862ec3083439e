/* Function names of a Go binary from its .gopclntab: the table the Go
 * runtime itself uses for tracebacks, present even when .symtab is stripped
 * (go build -ldflags=-s, Debian's go and link). Formats of Go 1.2-1.15,
 * 1.16-1.17 and 1.18 on (header magic 0xfffffffb, 0xfffffffa, 0xfffffff0 /
 * 0xfffffff1). The section is the file's: every count and offset is
 * checked against its size, and a table that breaks a rule is refused. */
#ifndef JPROF_GOPCLNTAB_H
#define JPROF_GOPCLNTAB_H

#include <stddef.h>
#include <stdint.h>

struct gopclntab_func {
	uint64_t entry;      /* the function's first address */
	uint32_t name;       /* offset of its NUL-terminated name in names */
};

struct gopclntab {
	struct gopclntab_func *funcs;  /* nfuncs + 1: the last is the end of the text */
	size_t nfuncs;
	const char *names;   /* into the section data given to gopclntab_parse */
	size_t names_len;
};

/* Most functions read from one table (Go binaries have tens of thousands). */
#define GOPCLNTAB_MAX_FUNCS ((size_t)1 << 22)

/* Parses data (size bytes, borrowed; out->names points into it). text:
 * the address of .text, used when the header does not carry the text start
 * (a PIE binary, whose header field is filled by a relocation). 0, -EINVAL
 * (not a table this parser knows, or inconsistent), -E2BIG, -ENOMEM. */
int gopclntab_parse(const uint8_t *data, size_t size, uint64_t text, struct gopclntab *out);
void gopclntab_release(struct gopclntab *t);

#endif
