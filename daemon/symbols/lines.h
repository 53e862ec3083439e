/* Source file and line of user addresses, from DWARF (.debug_info and
 * .debug_line, elfutils libdw), for profiles that carry them (pprof).
 *
 * Opening the debug info of a big binary costs seconds and hundreds of MiB,
 * so nothing here runs on the caller's thread: an address asked for is
 * queued, a worker thread resolves it (the binary's separate debug file by
 * build-id under the debug root, else the binary itself through
 * /proc/PID/map_files or the process's root), and the answer is cached by
 * (build-id, ELF address), plus the file's device and inode when the
 * build-id is only a claim (frame_loc.build_id_shared false: a file a user
 * could write), so that such a file's lines serve that file alone. A caller waits for queued addresses at most until
 * a deadline it gives; what is not resolved by then goes without a line.
 *
 * Only files with a GNU build-id are read (the build-id is checked on the
 * opened file, so a mapping replaced since cannot lend another file's lines).
 * Files are read with ELF_C_READ (pread, never mmap: a user truncating their
 * binary cannot SIGBUS the daemon), and only their debug sections are kept,
 * copied; a file whose debug sections exceed the memory cap is not read at
 * all; files are evicted least recently used beyond the cap. */
#ifndef JPROF_LINES_H
#define JPROF_LINES_H

#include <stddef.h>
#include <stdint.h>

#include "frame.h"

/* Default cap on debug sections held open (bytes, as libdw reads them). */
#define LINES_MEM_DEFAULT (512ull << 20)
/* Addresses remembered (answered or queued) before the cache starts over. */
#define LINES_MAX_ADDRS 100000u
/* Inlined frames reported for one address, the function itself included. */
#define LINES_MAX_FRAMES 8

struct lines;

struct lines_stats {
	uint64_t queued;        /* addresses handed to the worker */
	uint64_t resolved;      /* ... that got a line */
	uint64_t unresolved;    /* ... that did not (no DWARF there, unreadable file) */
	uint64_t files_opened;  /* debug info loaded */
	uint64_t files_failed;  /* no DWARF, unreadable, build-id mismatch, corrupt */
	uint64_t files_too_big; /* debug sections beyond the memory cap */
	uint64_t files_evicted;
	uint64_t mem_bytes;     /* debug sections held now */
	uint64_t timeouts;      /* lookups a caller stopped waiting for */
};

/* proc_root: NULL for "/proc"; debug_root: NULL for /usr/lib/debug;
 * mem_cap: 0 for LINES_MEM_DEFAULT. Starts the worker. 0, -ENOMEM, or the
 * -errno of pthread_create. */
int lines_new(const char *proc_root, const char *debug_root, uint64_t mem_cap, struct lines **out);
void lines_free(struct lines *l);   /* NULL-safe; joins the worker */

/* Debug file of a build-id that a debuginfod server gave (path in its
 * cache): used in place of the debug root's for later lookups. */
int lines_add_debug_file(struct lines *l, const uint8_t *bid, size_t bid_len, const char *path);

/* File and line of a user frame (loc->build_id, loc->vaddr; loc->pid and
 * its mapping to open the binary). Queues the address when new; waits while
 * it is queued until deadline_ns (CLOCK_MONOTONIC; 0: never waits). Fills
 * up to max frames, innermost first (inlined functions, then the function
 * holding the address), and returns how many: 0 when unknown (yet). Thread
 * safe. */
size_t lines_lookup(struct lines *l, const struct frame_loc *loc, uint64_t deadline_ns,
		    struct frame_line *out, size_t max);

/* The same lookup as a callback (arg = the struct lines), for exporters
 * that do not link this layer (pprof_set_lines). */
size_t lines_lookup_cb(void *arg, const struct frame_loc *loc, uint64_t deadline_ns,
		       struct frame_line *out, size_t max);

void lines_get_stats(struct lines *l, struct lines_stats *out);

/* ---- the resolver itself, without queue or thread (tests, fuzzing) ---- */

struct lines_file;
/* Debug info of the ELF file on fd (borrowed; read now, with pread),
 * checked to carry build-id bid (bid_len 0: no check): its .debug_*
 * sections, decompressed, are copied into an image in memory that libdw
 * reads (lines.c says why). -ENOENT: no DWARF line info; -EFBIG: debug
 * sections beyond cap bytes; -EINVAL: not a little-endian ELF64 file,
 * build-id mismatch; -ENOMEM. */
int lines_file_open(int fd, const uint8_t *bid, size_t bid_len, uint64_t cap,
		    struct lines_file **out);
/* The same from an image in memory (copied). */
int lines_file_open_memory(const void *image, size_t size, uint64_t cap, struct lines_file **out);
void lines_file_free(struct lines_file *f);
uint64_t lines_file_cost(const struct lines_file *f);
/* Frames of ELF address vaddr, innermost first; returns how many (0: none). */
size_t lines_file_lookup(struct lines_file *f, uint64_t vaddr, struct frame_line *out, size_t max);

#endif
