/* Function symbols of one ELF file (libelf/gelf), with separate debug info,
 * build-id and PT_LOAD translation. Everything needed is copied out at load
 * time, so no file descriptor or mapping is kept open afterwards.
 *
 * What a table holds is bounded by the file, not by how it is laid out: a
 * fixed 16-byte entry per function symbol kept (one per address), and the
 * names of those symbols copied once, never more bytes than the string
 * table has, however many symbols share a name. Formatted names are cached
 * per name, up to ELFSYM_PRETTY_MAX bytes. */
#ifndef JPROF_ELFSYM_H
#define JPROF_ELFSYM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ELFSYM_DEBUG_ROOT "/usr/lib/debug"
#define ELFSYM_BUILD_ID_MAX 64
/* Longest formatted (demangled, sanitized) name kept, NUL included. */
#define ELFSYM_NAME_MAX 1024

/* Where the symbol table came from. */
enum elfsym_source {
	ELFSYM_SRC_NONE = 0,       /* no function symbols at all */
	ELFSYM_SRC_SYMTAB,         /* the file's own .symtab */
	ELFSYM_SRC_DEBUG_BUILD_ID, /* <debug_root>/.build-id/xx/rest.debug */
	ELFSYM_SRC_DEBUGLINK,      /* <debug_root>/<dir>/<.gnu_debuglink name> */
	ELFSYM_SRC_DYNSYM,         /* .dynsym only (stripped file) */
	ELFSYM_SRC_DEBUGINFOD,     /* a debug file a debuginfod server gave (dbginfod.h) */
	ELFSYM_SRC_GOPCLNTAB,      /* a Go binary's .gopclntab (no .symtab; gopclntab.h) */
};

/* Whether the symbol table's names were read (elfsym_names). */
enum elfsym_names {
	ELFSYM_NAMES_READ = 0,     /* read (or the file has none) */
	ELFSYM_NAMES_OVER_BUDGET,  /* the table needs more than limits.max_bytes: not read */
	ELFSYM_NAMES_DEFERRED,     /* more entries than limits.max_entries: not read */
};

/* Bounds of one load (NULL: none). A table past either is not read at all
 * (not even its section contents): the file keeps its segments, build-id
 * and .eh_frame_hdr function starts, as a stripped file would. */
struct elfsym_limits {
	size_t max_bytes;    /* what the kept table may need (elfsym_table_bytes); 0: no limit */
	size_t max_entries;  /* entries of the symbol table section; 0: no limit */
	bool no_debug_files; /* do not look for separate debug files */
	/* Set (by another thread): the load stops soon, -ECANCELED. */
	const atomic_bool *cancel;
};

/* Largest string table read: name offsets are 30 bits. */
#define ELFSYM_STRTAB_MAX ((size_t)1 << 30)
/* Formatted names cached per table, in bytes; past it names are formatted
 * on each lookup. */
#define ELFSYM_PRETTY_MAX ((size_t)4 << 20)

struct elfsym;

/* Loads from an open fd (borrowed; position not used). path is the file's
 * logical path, used only to find .gnu_debuglink files (may be NULL).
 * debug_root: NULL for ELFSYM_DEBUG_ROOT. Returns 0, -ENOEXEC for a file
 * that is not a readable ELF (corrupt, truncated), -ENOMEM. */
int elfsym_open_fd(int fd, const char *path, const char *debug_root, struct elfsym **out);
/* Same, within limits (may be NULL); also -ECANCELED (limits->cancel). */
int elfsym_open_fd_limited(int fd, const char *path, const char *debug_root,
			   const struct elfsym_limits *limits, struct elfsym **out);
/* Same, opening path itself (regular files only; never blocks on FIFOs). */
int elfsym_open(const char *path, const char *debug_root, struct elfsym **out);
/* path opened read-only if it is a regular file (O_NONBLOCK: a FIFO put
 * where a file was expected must not hang the daemon): the fd, -ENOEXEC
 * (not a regular file) or -errno. */
int elfsym_open_regular(const char *path);
/* Loads an ELF image from memory (copied first; e.g. the vdso). No debug
 * file lookup. */
int elfsym_open_memory(const void *image, size_t size, struct elfsym **out);
void elfsym_free(struct elfsym *e);

/* Build-id bytes (NULL and *len = 0 when the file has none). */
const uint8_t *elfsym_build_id(const struct elfsym *e, size_t *len);
/* Takes the .symtab of the separate debug file at path (it must carry e's
 * build-id) in place of e's symbols: 1 taken, 0 unusable, -ENOMEM. */
int elfsym_adopt_debug_file(struct elfsym *e, const char *path);
/* Same, with limits (may be NULL): a table past them is not taken (0) and
 * elfsym_names(e) says why. */
int elfsym_adopt_debug_file_limited(struct elfsym *e, const char *path,
				    const struct elfsym_limits *limits);
/* Moves the symbols of from (loaded from a debug file, e.g. off the loop)
 * into e, if its build-id is e's: 1 taken (from keeps its other parts), 0
 * not. */
int elfsym_adopt(struct elfsym *e, struct elfsym *from, enum elfsym_source source);
enum elfsym_source elfsym_source(const struct elfsym *e);
size_t elfsym_count(const struct elfsym *e);
enum elfsym_names elfsym_names(const struct elfsym *e);
/* Bytes held by e (symbols, names, function starts, cached formatted names). */
size_t elfsym_mem_bytes(const struct elfsym *e);
/* When the names were not read (elfsym_names): the bytes the table would
 * have needed at most, what max_bytes is compared with. 0 otherwise. */
size_t elfsym_table_bytes(const struct elfsym *e);

/* File offset -> ELF virtual address through the PT_LOAD segment that
 * contains the offset. 0, or -ENOENT when no segment contains it. */
int elfsym_offset_to_vaddr(const struct elfsym *e, uint64_t offset, uint64_t *vaddr);

/* Function covering vaddr: [value, value + size), or exactly value for a
 * size-0 symbol. Fills name (demangled, sanitized, NUL-terminated) and
 * *sym_start (may be NULL). 0, or -ENOENT when no symbol covers vaddr. */
int elfsym_lookup(struct elfsym *e, uint64_t vaddr, char *name, size_t name_size,
		  uint64_t *sym_start);

/* Start of the function holding vaddr by the file's .eh_frame_hdr table
 * (one entry per function with CFI, present in stripped files too): the
 * last start at or below vaddr. 0, or -ENOENT (no table, or below it). */
int elfsym_function_start(const struct elfsym *e, uint64_t vaddr, uint64_t *start);

/* Symbol by raw (mangled) name, for tests and diagnostics. 0 or -ENOENT. */
int elfsym_find(const struct elfsym *e, const char *raw_name, uint64_t *value, uint64_t *size);

/* Demangles C++ (_Z) and Rust (legacy _ZN..17h<hash>E and v0 _R) names with
 * libiberty, then sanitizes. Returns the length written (NUL excluded). */
size_t elfsym_format_name(const char *raw, char *out, size_t out_size);

/* Copies len bytes as valid UTF-8: invalid bytes and control characters
 * become "\xNN". Truncates on a character boundary. Returns the length
 * written (NUL excluded); out_size must be >= 1. */
size_t elfsym_sanitize(const char *in, size_t len, char *out, size_t out_size);

#endif
