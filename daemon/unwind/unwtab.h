/* The unwind tables the BPF unwinder reads, kept up to date on a worker
 * thread: built on first need of a process (a sample of it without tables,
 * or a recording that starts), shared by every process that maps the same
 * binary (same build-id, or same file), refreshed when a process maps new
 * code (dlopen), released when no live process maps them any more, and
 * evicted least recently used when the row array is full. An evicted
 * table's rows are kept in the daemon, encoded (about 4 bytes a row, at
 * most half the array's size in all), so a binary that runs again (a
 * compiler per file) is loaded again in milliseconds rather than rebuilt
 * from its CFI (half a second for cc1). Built tables are also kept on disk
 * (unwcache.h), so that a restart of the daemon loads them rather than
 * builds them again.
 *
 * The event loop only queues requests (unwtab_request never blocks on a
 * build); reading ELF files, building, and writing the BPF maps
 * (unwind_rows, unwind_procs) happen on the worker.
 *
 * Builds are any user's to trigger, with files of their making: each stops
 * at CFI_BUILD_CPU_NS, a file whose build failed is remembered (not built
 * again for its next process), and the CPU time of builds is charged to
 * the owner of the file. While other requests wait, an owner (not root)
 * whose charge passes a quarter of a build's budget waits: its processes
 * are loaded without those builds, and asked for again once the charge
 * has drained (at half the rate of the worker's time: its CPU time, and
 * its time idle), so another user's new process waits behind one build of
 * theirs at most. The worker runs at nice 5 (builds yield to the event
 * loop), and at the loop's priority while a recording waits for it. */
#ifndef JPROF_UNWTAB_H
#define JPROF_UNWTAB_H

#include <stdbool.h>
#include <stdint.h>

#include "cfi.h"

struct unwtab;

/* Why a binary a process was sampled in has no rows in BPF. */
enum unwtab_why {
	UNWTAB_NO_ROOM,    /* no free rows even after evicting (rows_full; retried) */
	UNWTAB_UID_SHARE,  /* its user's processes hold their share of the rows */
	UNWTAB_TAKEN,      /* taken for a table in use (evicted_cold); back at the next sweep */
	UNWTAB_REJECTED,   /* no table can be built from it (error says why) */
	UNWTAB_NWHY
};

/* One such binary (unwtab_missing). */
struct unwtab_missing {
	char path[160];        /* as the process mapped it (truncated) */
	enum unwtab_why why;
	enum cfi_error error;  /* UNWTAB_REJECTED */
	uint32_t rows;         /* what it needs, where known (0: not known) */
};

struct unwtab_stats {
	uint64_t procs;           /* processes with tables in BPF */
	uint64_t tables;          /* binaries loaded */
	uint64_t rows_used;
	uint64_t rows_capacity;
	uint64_t requests;        /* processes asked for (BPF misses, recordings) */
	uint64_t deferred;        /* of those, held until the process was 100 ms old */
	uint64_t deferred_gone;   /* of those, exited before: nothing read */
	uint64_t proc_reads;      /* /proc/PID/maps read for them */
	uint64_t maps_unchanged;  /* of those, read again and showing no new code */
	uint64_t rows_uploaded;   /* rows written to unwind_rows (builds and reloads) */
	uint64_t rows_mapped;     /* 1: unwind_rows written through a mapping, not syscalls */
	uint64_t builds;          /* tables built */
	uint64_t build_ns_max;    /* longest build of one binary */
	uint64_t build_ns_total;
	uint64_t evicted;         /* tables evicted to make room */
	uint64_t reloads;         /* evicted tables loaded again from the daemon's copy, not rebuilt */
	uint64_t spill_bytes;     /* memory of those copies (bounded) */
	uint64_t rows_full;       /* tables not loaded: no room even after evicting */
	uint64_t room_retries;    /* tables refused for room built again later (ROOM_RETRY_NS) */
	uint64_t evicted_cold;    /* tables in use whose rows went to another: unsampled (COLD_NS) */
	uint64_t cold_reloads;    /* processes given such tables back (sampled again, recorded) */
	uint64_t open_failed;     /* mapped files that could not be opened */
	uint64_t untrusted_fs;    /* mappings of files on FUSE: not read (they could stall) */
	uint64_t too_many_maps;   /* executable mappings beyond the per-process limit */
	uint64_t procs_full;      /* processes left without tables: unwind_procs was full */
	uint64_t uid_share;       /* tables not built: their user's processes hold their share */
	uint64_t builds_deferred; /* builds put off: their file's owner spent its build time */
	uint64_t build_cpu_ns_total;  /* CPU time of the builds (the worker thread's) */
	/* The disk cache of built tables (unwcache.h); all 0 when it is off. */
	uint64_t cache_hits;      /* tables loaded from it rather than built */
	uint64_t cache_writes;    /* tables written to it */
	uint64_t cache_rejected;  /* entries refused (corrupt, truncated...): built again */
	uint64_t cache_evicted;   /* entries removed to stay within its size */
	uint64_t cache_bytes;     /* its size, as of the last write */
	uint64_t urgent_wait_ns_max;  /* longest wait of a recording's request for the worker */
	/* Binaries that live processes sampled within the last minute map and
	 * that have no rows, by cause: a gauge, counted at each sweep (5 s). */
	uint64_t sampled_missing[UNWTAB_NWHY];
	uint64_t rejected[CFI_NERRORS];  /* binaries without a table, by cause */
	/* Samples of processes without tables in BPF, sent with a copy of
	 * their user stack (bpf: young_copy) and held here until the tables
	 * are loaded. */
	uint64_t young_held;       /* held now */
	uint64_t young_held_bytes; /* their memory (capped: unwtab_young_limits) */
	uint64_t young_unwound;    /* walked with the tables */
	uint64_t young_to_root;    /* ... of which reached the outermost frame */
	uint64_t young_short_copy; /* ... of which ran off the copied stack */
	uint64_t young_gone;       /* given up: the process exited before its maps were read */
	uint64_t young_expired;    /* given up: no tables within the age cap */
	uint64_t young_over_memory;  /* not held: the memory cap was reached */
	uint64_t young_uid_share;    /* not held: its owner's share of the cap was */
};

/* rows_fd, procs_fd: the BPF maps unwind_rows (capacity rows_capacity) and
 * unwind_procs, borrowed. Starts the worker. */
int unwtab_new(int rows_fd, int procs_fd, uint32_t rows_capacity, struct unwtab **out);
/* Keeps built tables in dir (unwcache.h; NULL, "" or "off": not), at most
 * max_bytes (0: the default). Called once, before the first request;
 * opening the directory logs why the cache is off if it cannot be. */
void unwtab_set_cache(struct unwtab *u, const char *dir, uint64_t max_bytes);
/* Stops the worker; NULL-safe. The BPF maps are left as they are. */
void unwtab_free(struct unwtab *u);

/* Asks for tgid's tables (start_ns: CLOCK_BOOTTIME start of the process as
 * BPF saw it, 0 if not known). Never blocks; duplicates are merged, and a
 * process loaded less than 250 ms ago is not read again. A process younger
 * than 100 ms (by start_ns) is served when it is 100 ms old, if it still
 * runs, unless urgent: most new processes have exited by then. urgent (a
 * recording of that process starts): served next, before the host view's
 * requests, whose builds can take seconds in all on a busy host. */
void unwtab_request(struct unwtab *u, uint32_t tgid, uint64_t start_ns, bool urgent);

/* True while tgid is queued or being built (never waits for a build). */
bool unwtab_pending(struct unwtab *u, uint32_t tgid);

/* Waits until the worker has no queued request (tests, recordings that want
 * tables before they start); 0, or -ETIMEDOUT. */
int unwtab_wait_idle(struct unwtab *u, uint64_t timeout_ns);

void unwtab_get_stats(struct unwtab *u, struct unwtab_stats *out);
/* The binaries sampled_missing counts, as of the last sweep, at most n of
 * them (the most rows first); returns how many were written. */
size_t unwtab_missing(struct unwtab *u, struct unwtab_missing *out, size_t n);
const char *unwtab_why_name(enum unwtab_why why);

/* A sample handed back by unwtab_young_take: its user stack walked with the
 * process's tables (walked), or the frame-pointer walk BPF made when the
 * tables never came. */
struct unwtab_young_out {
	const struct jp_count_key *key;
	uint64_t time_ns;          /* CLOCK_MONOTONIC, when it was taken */
	const uint64_t *kips, *uips;
	uint32_t nk, nu;
	bool walked;
};

/* Holds a JP_MSG_USTACK_COPY sample (kips, fpips: its kernel stack and
 * frame-pointer user stack, read by the caller while their ids are valid)
 * until its process's tables are loaded; the process's request is served
 * now rather than deferred. -ENOSPC over the memory cap (the caller
 * delivers the frame-pointer stack), -ENOMEM. Never blocks on a build. */
int unwtab_young_add(struct unwtab *u, const struct jp_msg_ustack_copy *m, const uint64_t *kips,
		     uint32_t nk, const uint64_t *fpips, uint32_t nfp);
/* Reads tgid's maps now (the caller's thread), for young samples of it to
 * be walked even if it exits before the worker loads it: called when a
 * process without tables is sampled (start_ns: its start, as BPF read it). */
void unwtab_young_snapshot(struct unwtab *u, uint32_t tgid, uint64_t start_ns);
/* Hands each sample walked or given up since the last call to fn, oldest
 * first, and frees them (the caller's thread: the event loop). */
void unwtab_young_take(struct unwtab *u, void (*fn)(const struct unwtab_young_out *o, void *arg),
		       void *arg);
/* Caps on held samples: memory (0: 8 MiB) and age (0: 3 s). */
void unwtab_young_limits(struct unwtab *u, size_t max_bytes, uint64_t max_age_ns);
/* The first wait before a table refused for want of rows is built again
 * (0: the default, 10 s); for tests. */
void unwtab_set_room_retry(struct unwtab *u, uint64_t ns);
/* How long the processes of a table in use must have gone without a CFI
 * walk before its rows may go to another table (0: the default, 30 s); for
 * tests. */
void unwtab_set_cold(struct unwtab *u, uint64_t ns);
/* How often exited processes are looked for and the cold stamps read (0:
 * the default, 5 s); for tests, which would otherwise wait for it. */
void unwtab_set_sweep(struct unwtab *u, uint64_t ns);

#endif
