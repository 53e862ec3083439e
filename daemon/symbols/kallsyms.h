/* Kernel text symbols from /proc/kallsyms (or a fixture file with the same
 * format: "<hex addr> <type> <name>[\t[module]]"). */
#ifndef JPROF_KALLSYMS_H
#define JPROF_KALLSYMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How far past the last symbol of a module (or of the whole table) an
 * address is still attributed to it: kallsyms has no sizes, and beyond the
 * last function of a region lies memory that is not code we know. */
#define KALLSYMS_TAIL_SPAN 0x10000u

struct kallsyms;

/* Parses path (NULL: /proc/kallsyms). Returns 0, -errno if unreadable,
 * -ENOMEM. A file whose addresses are all zero (kptr_restrict, or a reader
 * without CAP_SYSLOG) loads fine but kallsyms_available() is false. */
int kallsyms_load(const char *path, struct kallsyms **out);
/* Parses text already in memory (len bytes). */
int kallsyms_parse(const char *text, size_t len, struct kallsyms **out);
void kallsyms_free(struct kallsyms *k);

/* False when the table has no usable (non-zero) addresses. */
bool kallsyms_available(const struct kallsyms *k);
size_t kallsyms_count(const struct kallsyms *k);

/* Nearest preceding text symbol, bounded as described above. Sets *name and
 * *module ("" for vmlinux) to strings owned by k, *sym_addr (may be NULL).
 * 0, -ENOENT when unresolved, -ENODATA when the table is unavailable. */
int kallsyms_lookup(const struct kallsyms *k, uint64_t addr, const char **name,
		    const char **module, uint64_t *sym_addr);

/* Address of a symbol by name (first match), for tests. 0 or -ENOENT. */
int kallsyms_find(const struct kallsyms *k, const char *name, uint64_t *addr);

#endif
