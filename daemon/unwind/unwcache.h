/* Built unwind tables kept on disk (unwind_cache_dir, default
 * /var/cache/jprofd/unwind), so that a binary seen before (a restart of the
 * daemon, a table evicted from memory) is loaded in milliseconds rather
 * than built again from its CFI (half a second for gcc's cc1).
 *
 * A file's table is found by a key, not by its build-id or path, which its
 * owner chooses: the SHA-256 of everything the builder (cfi_build_fd) reads
 * of the file and of its separate debug file (ELF header, program and
 * section headers, the section name table, every .eh_frame*, .debug_frame*
 * section and PT_GNU_EH_FRAME segment), with the daemon's own build-id, so
 * that equal keys are equal inputs to the same builder: the same rows by
 * construction. An entry also records whose file it was built from, and
 * one built from a file a user could write serves only files of that
 * owner: no user's file can give rows to root's or another user's binary.
 *
 * The directory and every one of its parents must be the daemon's (or
 * root's) and not writable by others (sticky ones like /tmp excepted); the
 * directory is made 0700 and its files 0600, and a file not so, or linked
 * twice, is never read. Entries are written to a temporary name and
 * renamed; each carries its length, its row count and a SHA-256 of its
 * bytes, and is parsed within those bounds: a truncated, corrupt or
 * foreign entry is removed and the table built again. The directory is
 * kept within max_bytes by removing the least recently used entries (a
 * hit touches its entry's mtime).
 *
 * Not thread-safe: one user (the unwind worker). */
#ifndef JPROF_UNWCACHE_H
#define JPROF_UNWCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cfi.h"

#define UNWCACHE_DEFAULT_DIR "/var/cache/jprofd/unwind"
#define UNWCACHE_DEFAULT_BYTES (256ull << 20)

struct unwcache;

struct unwcache_key {
	uint8_t sha[32];
};

/* The file a table is built from or asked for. */
struct unwcache_src {
	uint32_t uid;      /* its owner */
	bool root_only;    /* root's, and writable by no one else (proc_file_root_only) */
};

struct unwcache_stats {
	uint64_t hits;          /* tables loaded from the cache */
	uint64_t misses;        /* keys not found (built, then written) */
	uint64_t writes;        /* entries written */
	uint64_t rejected;      /* entries refused: corrupt, truncated, not the daemon's, another
				 * owner's (removed, but for the last) */
	uint64_t evicted;       /* entries removed to stay within max_bytes */
	uint64_t unkeyed;       /* files that could not be hashed (not cached) */
	uint64_t bytes;         /* in the directory, as of the last write */
	uint64_t files;
};

/* Opens (making it if needed) the cache in dir. 0 with *out NULL when the
 * cache is off: dir is "" or "off", or cannot be made safely (logged once,
 * with why). -ENOMEM. */
int unwcache_open(const char *dir, uint64_t max_bytes, struct unwcache **out);
/* NULL-safe. */
void unwcache_free(struct unwcache *c);

/* The key of the ELF file open on fd with its debug file on debug_fd (-1:
 * none), as cfi_build_fd(fd, debug_fd) would read them. 0; -EINVAL when
 * the file is not one the builder could use, or cannot be read whole,
 * -E2BIG when it names more than 128 MiB to hash (then it is not cached);
 * -ENOMEM. */
int unwcache_key(const struct unwcache *c, int fd, int debug_fd, struct unwcache_key *out);

/* The table of key, if cached, from a file src may be served (see above)
 * and of at most max_rows rows: 0 and *out (free with cfi_table_free);
 * -ENOENT if there is none; -EBADMSG if the entry was refused. */
int unwcache_get(struct unwcache *c, const struct unwcache_key *key, const struct unwcache_src *src,
		 size_t max_rows, struct cfi_table **out);
/* Writes t as key's entry, built from src; removes old entries past
 * max_bytes. -errno (logged at debug: the table is in BPF anyway). */
int unwcache_put(struct unwcache *c, const struct unwcache_key *key, const struct unwcache_src *src,
		 const struct cfi_table *t);

void unwcache_get_stats(const struct unwcache *c, struct unwcache_stats *out);

#endif
