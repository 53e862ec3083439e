/* State shared by the unwind table modules (unwtab.c: processes and the
 * worker; unwtab_rows.c: the row allocator and table loads; unwtab_table.c:
 * finding and building tables). Internal: not for other modules. */
#ifndef JPROF_UNWTAB_INT_H
#define JPROF_UNWTAB_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "procmaps.h"
#include "unwcache.h"
#include "unwtab.h"
#include "uwalk.h"

/* /proc's start times count USER_HZ ticks (100 on x86-64): an entry holds
 * the start rounded down to one, as BPF compares it. */
#define TICK_NS 10000000ull
#define REFRESH_NS 250000000ull    /* a process's maps are read at most every 250 ms, */
#define REFRESH_MAX_NS 2000000000ull  /* backing off to 2 s while they show nothing new */
#define SWEEP_NS 5000000000ull     /* exited processes are looked for every 5 s */
/* A host-view request for a process younger than this waits until it is
 * this old: most processes a busy host starts (a compiler's as and cc1
 * per file, a shell loop's commands) have exited by then, and reading
 * their maps and building their tables (BPF asks at their first sample)
 * was the worker's largest cost under process churn. */
#define DEFER_NS 100000000ull
#define MAX_IDLE_TABLES 512        /* unreferenced tables kept for reuse */
#define MAX_QUEUE 4096
#define UPLOAD_CHUNK 8192
/* The BPF row search takes 24 steps: no table may be longer. */
#define MAX_TABLE_ROWS (1u << 24)
/* A file owner's charge for build CPU time (the worker's, on its files) up
 * to which its files are built at once; past it, while other requests
 * wait, they wait until it has drained to that, by one ns per
 * UID_BUILD_DRAIN_DIV ns of the worker's time (worker_clock): a process of
 * another user waits for one such build at most. */
#define UID_BUILD_BURST_NS (CFI_BUILD_CPU_NS / 4)
#define UID_BUILD_DRAIN_DIV 2
#define MAX_UID_CHARGES 256
/* A table refused for want of rows is built again after this long (rows
 * free up: processes exit, idle tables age out), the wait doubling to
 * ROOM_RETRY_MAX_NS while there is still none; its processes are read again
 * then (sweep). Before, such a table stayed without rows for as long as the
 * daemon ran: gcc's cc1 at 0% complete stacks after a JVM had come and gone. */
/* A table in use by live processes none of which has had a CFI walk for
 * this long (nor been loaded) gives its rows to a table that finds none
 * free (idle tables go first); its processes get it back at their next
 * sample. Before, rows went to whichever binaries were mapped first: on a
 * host up for an hour, the tables of idle daemons (postgres backends,
 * nginx, a JVM's libjvm) held every row and gcc's cc1 got none. */
#define COLD_NS 30000000000ull
/* A binary counts as sampled without a table (status) if a process
 * mapping it was sampled within this long. */
#define MISSING_S 60
#define UNWTAB_MAX_MISSING 16
#define ROOM_RETRY_NS 10000000000ull
#define ROOM_RETRY_MAX_NS 300000000000ull

struct table {
	dev_t dev;
	ino_t ino;
	off_t size;
	int64_t mtime_ns;
	uint8_t build_id[64];
	size_t build_id_len;
	struct cfi_segment segs[8];
	size_t nsegs;
	uint32_t first, count;    /* count 0: no table (kept so it is not rebuilt) */
	uint32_t owner;           /* euid of the process it was built for: its share */
	uint32_t share_rows;      /* count 0 for the share: its rows, built once it has room */
	bool shared;              /* from a file no user could write: found by build-id */
	uint32_t refs;
	uint64_t last_used;
	uint8_t *spill;           /* evicted rows, encoded (rowcode.h); NULL: none */
	size_t spill_len;
	uint32_t spill_rows;
	uint64_t room_at;         /* count 0 for want of rows: built again then (0: not so) */
	uint64_t loaded_ns;       /* its rows went into BPF then */
	uint64_t room_wait;       /* the wait before room_at, doubling */
	uint32_t hot_s;           /* unwtab_cold.c's scratch: latest sampled_s of its processes */
	uint32_t want_rows;       /* rows it needs, when refused for room */
	enum cfi_error error;     /* count 0 and no other cause: why no table was built */
	char *path;               /* as first mapped (status: binaries without tables) */
};

struct proc {
	uint32_t tgid;
	uint64_t start_ns;        /* tick-rounded */
	uint64_t loaded_ns;
	uint64_t refresh_ns;      /* its maps are not read again sooner */
	uint64_t maps_hash;       /* of its executable mappings */
	bool retry;               /* a build of its was put off: read again when asked */
	bool short_rows;          /* a table of its had no room when its entry was written */
	uint32_t sampled_s;       /* CLOCK_BOOTTIME s of its last CFI walk (its entry's, cached) */
	uint32_t cold_s;          /* a table of its was taken back then for want of use
				   * (unwtab_cold.c); 0: none */
	struct table **refs;
	size_t nrefs;
};

struct range {
	uint32_t first, count;
};

struct request {
	uint32_t tgid;
	uint64_t start_ns;
	uint64_t due_ns;           /* deferred requests: CLOCK_BOOTTIME it is taken at */
	bool retry;                /* a build put off (not pending for a recording) */
	bool urgent;               /* a recording of it starts: tables refused for room are
				    * tried again now (room is made from unsampled tables) */
	uint64_t asked_ns;         /* urgent: CLOCK_MONOTONIC of the request (its wait, logged) */
};

/* Build CPU time charged to one file owner, drained up to worker_clock()
 * at at. */
struct uid_charge {
	uint32_t uid;
	uint64_t ns, at;
};

/* A sample of a process that had no tables in BPF, held until they are
 * loaded (unwtab_young.c). One allocation: the struct, then stack bytes
 * (len), kernel ips (nk), frame-pointer user ips (nfp). */
struct young_sample {
	struct young_sample *next;
	struct jp_count_key key;
	uint64_t time_ns;
	uint64_t arrived_ns;       /* CLOCK_MONOTONIC: the age cap counts from here */
	struct uwalk_regs regs;
	uint32_t len, nk, nfp;
	uint32_t n;                /* walked frames in ips (when walked) */
	uint32_t uid;              /* its process's owner (YOUNG_UID_UNKNOWN: gone) */
	bool walked;
	size_t bytes;              /* charged to the memory cap */
	uint64_t *kips, *fpips, *ips;
	uint8_t *stack;
};

/* The young samples' memory one process owner may hold (struct
 * young_owner): YOUNG_UID_SHARE_DIV-th of the cap. One user's burst of
 * short processes (a fork loop) leaves the rest to everyone else's. */
#define YOUNG_UID_SHARE_DIV 2
#define YOUNG_OWNERS_MAX 64
#define YOUNG_UID_UNKNOWN UINT32_MAX

struct young_owner {
	uint32_t uid;
	size_t bytes;
};

/* A process found gone when its request was served. */
struct young_gone {
	uint32_t tgid;
	uint64_t start_ns;         /* tick-rounded */
};
#define YOUNG_GONE_MAX 64
/* A snapshot no request took within this long is of a process whose
 * samples are delivered by now (YOUNG_MAX_AGE_NS is 3 s). */
#define YOUNG_SNAP_MAX_AGE_NS 15000000000ull

struct unwtab {
	int rows_fd, procs_fd;
	uint32_t cap;
	/* unwind_rows mapped into the daemon (BPF_F_MMAPABLE): rows are
	 * written and read back with memcpy, not bpf() syscalls. NULL: the
	 * map is not mappable (tests, older kernels); batch syscalls then. */
	uint8_t *rows_map;
	size_t rows_map_len;
	pthread_t thread;
	bool started;
	pthread_mutex_t mu;
	pthread_cond_t wake, idle;
	bool stop, busy;
	atomic_bool cancel;         /* unwtab_free: a build in progress stops */
	uint32_t building;          /* the tgid the worker is loading, 0: none */
	pid_t worker_tid;
	/* under mu: the worker runs at the loop's priority, not nice 5, while a
	 * recording waits for it (unwtab_request urgent) */
	bool boosted;
	int boost_nice;
	/* A recording's request is queued: a host-view request being served
	 * builds no more tables (they are asked for again after it). */
	atomic_bool urgent_waiting;
	struct unwcache *cache_next;  /* under mu: unwtab_set_cache's, taken by the worker */
	struct request *queue;     /* under mu */
	size_t nq;
	struct request *later;     /* under mu: young processes' requests (DEFER_NS), retries */
	size_t nlater;
	size_t nretry;             /* under mu: of those, retries of builds put off */
	uint64_t wakes_at;         /* under mu: CLOCK_BOOTTIME the idle worker wakes by */
	struct unwtab_stats shared;  /* under mu: copied from st after each batch */

	/* Worker only. */
	struct unwtab_stats st;
	struct unwcache *cache;    /* built tables on disk; NULL: none */
	struct table **tables;
	size_t ntables;
	struct proc *procs;
	size_t nprocs;
	struct range *free;        /* sorted by first, coalesced */
	size_t nfree;
	uint64_t last_sweep;
	uint64_t full_until;       /* unwind_procs was full: no loads before then */
	struct jp_unwind_proc entry;
	struct procmaps_fuse_cache fuse;
	size_t spill_max;          /* bytes of evicted rows kept encoded */
	struct uid_charge charges[MAX_UID_CHARGES];
	size_t ncharges;
	uint64_t idle_ns;          /* time spent waiting for requests */
	uint64_t room_retry_ns;    /* ROOM_RETRY_NS (unwtab_set_room_retry: tests) */
	uint64_t cold_ns;          /* COLD_NS (unwtab_set_cold: tests) */
	uint64_t sweep_ns;         /* SWEEP_NS (unwtab_set_sweep: tests) */
	uint64_t cold_read_ns;     /* processes' sampled_s were read from BPF then */
	struct jp_unwind_proc *cold_ent;  /* unwtab_cold.c's scratch (u->entry is load_proc's) */
	struct unwtab_missing missing[UNWTAB_MAX_MISSING];  /* under mu: unwtab_missing's */
	size_t nmissing;

	/* Young samples (unwtab_young.c), under mu. */
	struct young_sample *young_in;     /* waiting for their process's tables */
	struct young_sample **young_in_tail;
	struct young_sample *young_done;   /* walked (or given up): for unwtab_young_take */
	struct young_sample **young_done_tail;
	bool young_new;                    /* young_in grew since the worker looked */
	size_t young_bytes;
	struct young_owner young_owners[YOUNG_OWNERS_MAX];  /* bytes > 0 */
	size_t young_nowners;
	uint64_t young_uid_share;          /* refused: the owner's share was full */
	size_t young_max_bytes;
	uint64_t young_max_age_ns;
	uint64_t young_over_memory;
	uint64_t young_expired_loop;       /* expired by unwtab_young_take */
	struct young_snap *snaps;          /* newest first */
	size_t nsnaps;
	struct procmaps_fuse_cache snap_fuse;  /* the event loop's */
	/* Worker only. */
	struct jp_unwind_proc young_entry;  /* scratch */
	struct young_gone young_gone[YOUNG_GONE_MAX];  /* a ring */
	size_t young_gone_next;
};

/* What load_proc learns of one process, read only when needed. */
struct proc_view {
	uint32_t tgid;
	int64_t uid;               /* effective; -1: not read yet */
	bool fuse_free;            /* in the daemon's mount namespace, which has no FUSE mount */
	uint64_t retry_ns;         /* a build was put off: worth trying again in this long */
	bool urgent;               /* request.urgent */
	bool gone;                 /* exited: its maps as read while it ran (young_snap) */
};

/* A process's maps read while it ran, when it was first sampled without
 * tables (unwtab_young_snapshot): its young samples are walked with them
 * if it has exited before the worker gets to it. */
struct young_snap {
	struct young_snap *next;
	uint32_t tgid;
	uint64_t start_ns;         /* tick-rounded */
	uint64_t taken_ns;         /* CLOCK_MONOTONIC */
	int64_t uid;               /* effective, -1: not read */
	bool fuse_free;
	unsigned fuse[64];
	size_t nfuse;
	struct procmaps *maps;
};

/* An array map's values are 8-byte aligned: the stride in its mapping. */
#define ROW_STRIDE ((sizeof(struct jp_unwind_row) + 7) & ~(size_t)7)

/* unwtab_rows.c */
bool unwtab_evict_one(struct unwtab *u, bool with_rows_only);
void unwtab_table_load(struct unwtab *u, struct table *t, const struct cfi_table *ct);
bool unwtab_room_retry(const struct table *t);
void unwtab_room_after_load(struct unwtab *u, struct table *t, size_t rows);
void unwtab_table_unspill(struct unwtab *u, struct table *t);
void unwtab_table_unload(struct unwtab *u, struct table *t);

/* unwtab_cold.c */
bool unwtab_evict_cold(struct unwtab *u, const struct table *keep);
/* Reads every process's last-sample stamp (the sweep). */
void unwtab_cold_sweep(struct unwtab *u);
/* Counts the sampled binaries without rows (stats, unwtab_missing). */
void unwtab_missing_sweep(struct unwtab *u);
/* p had a table taken and has been sampled since: read it again (which
 * loads the table back and clears cold_s). */
bool unwtab_cold_woke(struct unwtab *u, struct proc *p);

/* unwtab_young.c (worker, mu not held) */
/* Walks the held samples whose process's entry is in BPF now; gives up on
 * those of processes gone before it was written (gone_tgid, gone_start: a
 * load that found the process gone; 0: none) and on those past the age
 * cap. */
void unwtab_young_work(struct unwtab *u, uint32_t gone_tgid, uint64_t gone_start);
/* True while samples of tgid are held (its entry must outlive its exit). */
bool unwtab_young_holds(struct unwtab *u, uint32_t tgid);
void unwtab_young_free_all(struct unwtab *u);
/* The snapshot of tgid (start_ns: the request's, 0: any), taken off the
 * list; NULL if none. Free with unwtab_young_snap_free. */
struct young_snap *unwtab_young_snap_take(struct unwtab *u, uint32_t tgid, uint64_t start_ns);
void unwtab_young_snap_free(struct young_snap *s);
/* Drops snapshots older than max_age_ns (sweep). */
void unwtab_young_snap_expire(struct unwtab *u, uint64_t max_age_ns);
/* Moves tgid's deferred request, if any, to the queue (mu held). */
void unwtab_undefer(struct unwtab *u, uint32_t tgid);

/* unwtab_table.c */
struct table *unwtab_table_for(struct unwtab *u, struct proc_view *pv,
			       const struct procmaps_entry *e, bool build, bool *need_build);

#endif
