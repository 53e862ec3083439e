/* Unwind tables: cache, row allocator, per-process entries, worker. See unwtab.h. */
#include "unwtab.h"

#include <bpf/bpf.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "proc.h"
#include "procmaps.h"

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
	uint8_t *spill;           /* evicted rows, encoded (spill_encode); NULL: none */
	size_t spill_len;
	uint32_t spill_rows;
	uint64_t room_at;         /* count 0 for want of rows: built again then (0: not so) */
	uint64_t loaded_ns;       /* its rows went into BPF then */
	uint64_t room_wait;       /* the wait before room_at, doubling */
};

struct proc {
	uint32_t tgid;
	uint64_t start_ns;        /* tick-rounded */
	uint64_t loaded_ns;
	uint64_t refresh_ns;      /* its maps are not read again sooner */
	uint64_t maps_hash;       /* of its executable mappings */
	bool retry;               /* a build of its was put off: read again when asked */
	bool short_rows;          /* a table of its had no room when its entry was written */
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
};

/* Build CPU time charged to one file owner, drained up to worker_clock()
 * at at. */
struct uid_charge {
	uint32_t uid;
	uint64_t ns, at;
};

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
	struct request *queue;     /* under mu */
	size_t nq;
	struct request *later;     /* under mu: young processes' requests (DEFER_NS), retries */
	size_t nlater;
	size_t nretry;             /* under mu: of those, retries of builds put off */
	uint64_t wakes_at;         /* under mu: CLOCK_BOOTTIME the idle worker wakes by */
	struct unwtab_stats shared;  /* under mu: copied from st after each batch */

	/* Worker only. */
	struct unwtab_stats st;
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
};

/* What load_proc learns of one process, read only when needed. */
struct proc_view {
	uint32_t tgid;
	int64_t uid;               /* effective; -1: not read yet */
	bool fuse_free;            /* in the daemon's mount namespace, which has no FUSE mount */
	uint64_t retry_ns;         /* a build was put off: worth trying again in this long */
};

/* ---- row allocator ---- */

static void rows_release(struct unwtab *u, uint32_t first, uint32_t count)
{
	size_t i = 0;
	struct range *r;

	if (!count)
		return;
	while (i < u->nfree && u->free[i].first < first)
		i++;
	if (i > 0 && u->free[i - 1].first + u->free[i - 1].count == first) {
		u->free[i - 1].count += count;
		if (i < u->nfree && first + count == u->free[i].first) {
			u->free[i - 1].count += u->free[i].count;
			memmove(&u->free[i], &u->free[i + 1], (u->nfree - i - 1) * sizeof(*r));
			u->nfree--;
		}
		return;
	}
	if (i < u->nfree && first + count == u->free[i].first) {
		u->free[i].first = first;
		u->free[i].count += count;
		return;
	}
	r = realloc(u->free, (u->nfree + 1) * sizeof(*r));
	if (!r)
		return;  /* the rows are lost to the allocator, not to correctness */
	u->free = r;
	memmove(&u->free[i + 1], &u->free[i], (u->nfree - i) * sizeof(*r));
	u->free[i] = (struct range){ first, count };
	u->nfree++;
}

static int rows_take(struct unwtab *u, uint32_t count, uint32_t *first)
{
	for (size_t i = 0; i < u->nfree; i++) {
		if (u->free[i].count < count)
			continue;
		*first = u->free[i].first;
		u->free[i].first += count;
		u->free[i].count -= count;
		if (!u->free[i].count) {
			memmove(&u->free[i], &u->free[i + 1], (u->nfree - i - 1) * sizeof(u->free[0]));
			u->nfree--;
		}
		return 0;
	}
	return -ENOSPC;
}

/* ---- evicted rows kept encoded ---- */

/* Rows are sorted by pc and neighbours look alike: each is the pc's
 * distance from the previous one, then the CFA and rbp offsets as zigzag
 * varints (most fit one byte), then the kind. */
static size_t spill_put(uint8_t *o, uint64_t v)
{
	size_t n = 0;

	do {
		o[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
		v >>= 7;
	} while (v);
	return n;
}

static bool spill_get(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	uint64_t r = 0;

	for (unsigned sh = 0; *p < end && sh < 64; sh += 7) {
		uint8_t b = *(*p)++;

		r |= (uint64_t)(b & 0x7f) << sh;
		if (!(b & 0x80)) {
			*v = r;
			return true;
		}
	}
	return false;
}

static uint64_t zz(int64_t v)
{
	return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static int64_t unzz(uint64_t v)
{
	return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

/* Encodes n rows; NULL on ENOMEM. */
static uint8_t *spill_encode(const struct jp_unwind_row *rows, size_t n, size_t *len)
{
	uint8_t *o = malloc(n * 21 + 1), *fit;  /* 5 + 10 + 5 + 1 bytes at worst */
	uint32_t pc = 0;
	size_t k = 0;

	if (!o)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		k += spill_put(o + k, rows[i].pc - pc);
		k += spill_put(o + k, zz(rows[i].cfa_off));
		k += spill_put(o + k, zz(rows[i].rbp_off));
		o[k++] = rows[i].kind;
		pc = rows[i].pc;
	}
	fit = realloc(o, k ? k : 1);
	*len = k;
	return fit ? fit : o;
}

/* Decodes n rows into out; -EINVAL if the encoding does not hold n. */
static int spill_decode(const uint8_t *p, size_t len, struct jp_unwind_row *out, size_t n)
{
	const uint8_t *end = p + len;
	uint64_t d, c, b;
	uint32_t pc = 0;

	for (size_t i = 0; i < n; i++) {
		if (!spill_get(&p, end, &d) || !spill_get(&p, end, &c) || !spill_get(&p, end, &b) ||
		    p >= end)
			return -EINVAL;
		pc += (uint32_t)d;
		out[i] = (struct jp_unwind_row){ .pc = pc, .cfa_off = (int32_t)unzz(c),
						 .rbp_off = (int16_t)unzz(b), .kind = *p++ };
	}
	return p == end ? 0 : -EINVAL;
}

/* An array map's values are 8-byte aligned: the stride in its mapping. */
#define ROW_STRIDE ((sizeof(struct jp_unwind_row) + 7) & ~(size_t)7)

/* Reads rows [first, first + n) back from the BPF array. */
static int rows_read(struct unwtab *u, uint32_t first, struct jp_unwind_row *rows, size_t n)
{
	uint32_t keys[UPLOAD_CHUNK], in, out;
	int r = 0;

	if (u->rows_map) {
		for (size_t i = 0; i < n; i++)
			memcpy(&rows[i], u->rows_map + (first + i) * ROW_STRIDE, sizeof(*rows));
		return 0;
	}
	for (size_t done = 0; done < n && r == 0;) {
		__u32 cnt = (__u32)(n - done < UPLOAD_CHUNK ? n - done : UPLOAD_CHUNK);

		/* An array's batch starts after in_batch: the key before. */
		in = first + (uint32_t)done - 1;
		r = bpf_map_lookup_batch(u->rows_fd, first + done ? &in : NULL, &out, keys,
					 rows + done, &cnt, NULL);
		if ((r == 0 || r == -ENOENT) && cnt > 0 && keys[0] == first + done) {
			done += cnt;
			r = 0;
		} else if (r == 0) {
			r = -EIO;
		}
	}
	return r;
}

/* ---- tables ---- */

static void table_drop(struct unwtab *u, size_t i)
{
	struct table *t = u->tables[i];

	rows_release(u, t->first, t->count);
	u->st.rows_used -= t->count;
	u->st.tables -= t->count ? 1 : 0;
	u->st.spill_bytes -= t->spill_len;
	free(t->spill);
	free(t);
	u->tables[i] = u->tables[--u->ntables];
}

/* The least recently used unreferenced table (with rows in BPF, or with
 * rows kept encoded), or SIZE_MAX. */
static size_t lru_idle(const struct unwtab *u, bool with_rows, bool spilled)
{
	size_t best = SIZE_MAX;

	for (size_t i = 0; i < u->ntables; i++) {
		const struct table *t = u->tables[i];

		if (t->refs || (with_rows && !t->count) || (spilled && !t->spill))
			continue;
		if (best == SIZE_MAX || t->last_used < u->tables[best]->last_used)
			best = i;
	}
	return best;
}

/* Takes t's rows out of BPF, keeping them encoded when they fit the
 * budget (older copies go first); false when t has to go altogether. */
static bool table_spill(struct unwtab *u, struct table *t)
{
	struct jp_unwind_row *rows = malloc((size_t)t->count * sizeof(*rows));
	size_t len = 0;
	uint8_t *enc = NULL;

	if (rows && rows_read(u, t->first, rows, t->count) == 0)
		enc = spill_encode(rows, t->count, &len);
	free(rows);
	if (!enc || len > u->spill_max) {
		free(enc);
		return false;
	}
	while (u->st.spill_bytes + len > u->spill_max) {
		size_t old = lru_idle(u, false, true);

		if (old == SIZE_MAX || u->tables[old] == t) {
			free(enc);
			return false;
		}
		table_drop(u, old);
	}
	rows_release(u, t->first, t->count);
	u->st.rows_used -= t->count;
	u->st.tables--;
	t->spill = enc;
	t->spill_len = len;
	t->spill_rows = t->count;
	t->first = t->count = 0;
	u->st.spill_bytes += len;
	return true;
}

/* Evicts the least recently used unreferenced table; with_rows_only (room
 * is needed): one with rows in BPF, whose rows are kept encoded if they
 * can be. false if none. */
static bool evict_one(struct unwtab *u, bool with_rows_only)
{
	size_t best = lru_idle(u, with_rows_only, false);
	struct table *t;

	if (best == SIZE_MAX)
		return false;
	t = u->tables[best];
	u->st.evicted += t->count ? 1 : 0;
	if (!with_rows_only || !table_spill(u, t)) {
		/* table_spill may have dropped others: find it again. */
		for (best = 0; best < u->ntables && u->tables[best] != t; best++)
			;
		table_drop(u, best);
	}
	return true;
}

static int upload(struct unwtab *u, uint32_t first, const struct jp_unwind_row *rows, size_t n)
{
	uint32_t keys[UPLOAD_CHUNK];
	int r = 0;

	if (u->rows_map) {
		/* Rows no process entry points at yet: BPF reads them only
		 * after the entry's update, a syscall after these stores. */
		for (size_t i = 0; i < n; i++)
			memcpy(u->rows_map + (first + i) * ROW_STRIDE, &rows[i], sizeof(*rows));
		u->st.rows_uploaded += n;
		return 0;
	}
	for (size_t done = 0; done < n && r == 0; done += UPLOAD_CHUNK) {
		__u32 cnt = (__u32)(n - done < UPLOAD_CHUNK ? n - done : UPLOAD_CHUNK);

		for (__u32 k = 0; k < cnt; k++)
			keys[k] = first + (uint32_t)(done + k);
		r = bpf_map_update_batch(u->rows_fd, keys, rows + done, &cnt, NULL);
		if (r == 0)  /* a failed batch counts none: the table is not loaded */
			u->st.rows_uploaded += cnt;
	}
	return r;
}

/* Loads a built table's rows into BPF, evicting idle tables for room. */
static void table_load(struct unwtab *u, struct table *t, const struct cfi_table *ct)
{
	uint32_t first;

	if (!ct->n || ct->n > u->cap)
		goto full;
	while (rows_take(u, (uint32_t)ct->n, &first) < 0)
		if (!evict_one(u, true))
			goto full;
	if (upload(u, first, ct->rows, ct->n) < 0) {
		rows_release(u, first, (uint32_t)ct->n);
		goto full;
	}
	t->first = first;
	t->count = (uint32_t)ct->n;
	t->loaded_ns = clock_mono_ns();
	u->st.rows_used += t->count;
	u->st.tables++;
	return;
full:
	u->st.rows_full++;
}

/* A table left without rows for want of room whose wait is over: to be
 * built again. */
static bool room_retry(const struct table *t)
{
	return t->room_at && !t->count && !t->spill && clock_mono_ns() >= t->room_at;
}

/* After a load: rows refused for room start (or lengthen) the wait. */
static void room_after_load(struct unwtab *u, struct table *t, size_t rows)
{
	if (t->count || rows > u->cap) {
		t->room_at = t->room_wait = 0;  /* loaded, or never fits */
		return;
	}
	t->room_wait = !t->room_wait ? u->room_retry_ns :
		t->room_wait * 2 < ROOM_RETRY_MAX_NS ? t->room_wait * 2 : ROOM_RETRY_MAX_NS;
	t->room_at = clock_mono_ns() + t->room_wait;
}

/* An evicted table needed again: its kept rows back into BPF. */
static void table_unspill(struct unwtab *u, struct table *t)
{
	struct cfi_table ct = { .n = t->spill_rows };

	ct.rows = malloc((size_t)t->spill_rows * sizeof(*ct.rows));
	if (ct.rows && spill_decode(t->spill, t->spill_len, ct.rows, ct.n) == 0) {
		/* Referenced meanwhile, so making room never drops t itself. */
		t->refs++;
		table_load(u, t, &ct);
		t->refs--;
		room_after_load(u, t, ct.n);
	}
	free(ct.rows);
	/* No room even after evicting every idle table: like a new table that
	 * does not fit, it stays without rows (frame pointers), not retried at
	 * every load of a process that maps it (each try would evict all
	 * idle tables again). */
	u->st.reloads += t->count ? 1 : 0;
	u->st.spill_bytes -= t->spill_len;
	free(t->spill);
	t->spill = NULL;
	t->spill_len = 0;
	t->spill_rows = 0;
}

static bool same_file(const struct table *t, const struct stat *sb)
{
	return t->dev == sb->st_dev && t->ino == sb->st_ino && t->size == sb->st_size &&
	       t->mtime_ns == sb->st_mtim.tv_sec * 1000000000ll + sb->st_mtim.tv_nsec;
}

/* By build-id between trusted files (shared: the same code in two
 * containers), else by file identity: a table read from a file a user
 * could write never serves another file. */
static struct table *table_find(struct unwtab *u, const struct stat *sb, const uint8_t *bid,
				size_t bid_len, bool shared)
{
	for (size_t i = 0; i < u->ntables; i++) {
		struct table *t = u->tables[i];

		if (shared ? (t->shared && t->build_id_len == bid_len &&
			      memcmp(t->build_id, bid, bid_len) == 0)
			   : same_file(t, sb))
			return t;
	}
	return NULL;
}

/* The file a table was built from, seen again (every reload of a process's
 * maps, every process of the same binary on one filesystem): no need to
 * open it and read its build-id. */
static struct table *table_find_file(struct unwtab *u, const struct stat *sb)
{
	for (size_t i = 0; i < u->ntables; i++)
		if (same_file(u->tables[i], sb))
			return u->tables[i];
	return NULL;
}

/* One user's processes may hold at most this share of the rows (root's:
 * all): a user mapping many large binaries of distinct build-ids would
 * otherwise fill the array with tables it keeps referenced, and every
 * other user's processes would be left to frame pointers. */
#define UID_SHARE_DIV 2

static uint64_t rows_owned(const struct unwtab *u, uint32_t uid)
{
	uint64_t n = 0;

	/* Idle tables (no live process maps them) are evicted when room is
	 * needed: only those in use count. */
	for (size_t i = 0; i < u->ntables; i++)
		if (u->tables[i]->owner == uid && u->tables[i]->refs)
			n += u->tables[i]->count;
	return n;
}

static bool share_full(const struct unwtab *u, uint32_t uid, uint64_t more)
{
	return uid != 0 && rows_owned(u, uid) + more > u->cap / UID_SHARE_DIV;
}

static bool over_share(struct unwtab *u, uint32_t uid, uint64_t more)
{
	if (!share_full(u, uid, more))
		return false;
	u->st.uid_share++;
	return true;
}

/* ---- build time charged to file owners ---- */

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The time the worker had, the clock charges drain by: its CPU time and
 * the time it waited for requests, not wall time. On a busy host, where
 * nice 5 gets it a small share, a wall-time drain emptied a user's charge
 * while another build ran, and its next build went ahead of the requests
 * waiting; a CPU-time drain alone never emptied it while the worker idled
 * (only that user's retries to serve). */
static uint64_t worker_clock(const struct unwtab *u)
{
	return thread_cpu_ns() + u->idle_ns;
}

/* c's charge drained up to now (worker_clock). */
static uint64_t charge_drain(struct uid_charge *c, uint64_t now)
{
	uint64_t d = (now - c->at) / UID_BUILD_DRAIN_DIV;

	c->ns = c->ns > d ? c->ns - d : 0;
	c->at = now;
	return c->ns;
}

static struct uid_charge *charge_find(struct unwtab *u, uint32_t uid)
{
	for (size_t i = 0; i < u->ncharges; i++)
		if (u->charges[i].uid == uid)
			return &u->charges[i];
	return NULL;
}

/* How long until owner's files may be built: 0, now. Root's always may
 * (its files are the system's), and anyone's when no other request waits
 * (the worker would idle). Otherwise the wall time the charge takes to
 * drain if the worker had all of it (on a busy host longer: the retry may
 * wait again). */
static uint64_t build_wait(struct unwtab *u, uint32_t owner)
{
	struct uid_charge *c = owner ? charge_find(u, owner) : NULL;
	uint64_t ns = c ? charge_drain(c, worker_clock(u)) : 0;
	bool others;

	if (ns < UID_BUILD_BURST_NS)
		return 0;
	pthread_mutex_lock(&u->mu);
	others = u->nq > 0;
	pthread_mutex_unlock(&u->mu);
	return others ? (ns - UID_BUILD_BURST_NS + 1) * UID_BUILD_DRAIN_DIV : 0;
}

static void charge_add(struct unwtab *u, uint32_t owner, uint64_t ns)
{
	uint64_t now = worker_clock(u);
	struct uid_charge *c;

	if (!owner)
		return;
	c = charge_find(u, owner);
	if (!c && u->ncharges < MAX_UID_CHARGES) {
		c = &u->charges[u->ncharges++];
		*c = (struct uid_charge){ .uid = owner, .at = now };
	}
	/* Full: one drained to nothing gives way, else the last. */
	for (size_t i = 0; !c && i < u->ncharges; i++)
		if (charge_drain(&u->charges[i], now) == 0 || i == u->ncharges - 1)
			c = &u->charges[i];
	if (c->uid != owner)
		*c = (struct uid_charge){ .uid = owner, .at = now };
	charge_drain(c, now);
	c->ns += ns;
}

/* The host's separate debug file of a build-id (Debian's -dbgsym packages),
 * for binaries whose CFI is only in .debug_frame there; -1 if none. */
static int open_debug_file(const uint8_t *bid, size_t len)
{
	char path[64 + 2 * 64];
	struct stat sb;
	size_t o;
	int fd;

	if (len < 2)
		return -1;
	o = (size_t)snprintf(path, sizeof(path), "/usr/lib/debug/.build-id/%02x/", bid[0]);
	for (size_t i = 1; i < len; i++)
		o += (size_t)snprintf(path + o, sizeof(path) - o, "%02x", bid[i]);
	snprintf(path + o, sizeof(path) - o, ".debug");
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd >= 0 && (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode))) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* The table of the binary behind one mapping of tgid, built if new; NULL
 * when the file cannot be read. */
static bool proc_uid(struct proc_view *pv)
{
	uid_t uids[4];

	if (pv->uid < 0 && proc_read_uids((pid_t)pv->tgid, uids) == 0)
		pv->uid = uids[1];  /* effective: whose process it is now */
	return pv->uid >= 0;
}

/* The table already built from the file a mapping shows, found by its path
 * rather than through /proc/PID/map_files (whose lookup costs several times
 * more, once per mapping of every new process). Only where the path names
 * the mapped file: the process in the daemon's mount namespace, which has
 * no FUSE mount the lookup could wait on, and the file at that path has
 * the device and inode the mapping shows. NULL: look it up the usual way. */
static struct table *table_by_path(struct unwtab *u, const struct proc_view *pv,
				   const struct procmaps_entry *e)
{
	struct stat sb;

	if (!pv->fuse_free || e->deleted || e->path[0] != '/' || stat(e->path, &sb) < 0 ||
	    !S_ISREG(sb.st_mode) || sb.st_ino != e->inode ||
	    major(sb.st_dev) != e->dev_major || minor(sb.st_dev) != e->dev_minor)
		return NULL;
	return table_find_file(u, &sb);
}

/* A table left without rows for its user's share (t->share_rows) that
 * the share of pv's user now has room for: to be built again. */
static bool share_retry(struct unwtab *u, struct proc_view *pv, const struct table *t)
{
	return t->share_rows && !t->count && !t->spill && proc_uid(pv) &&
	       !share_full(u, (uint32_t)pv->uid, t->share_rows);
}

/* build false: only a table already known (*need_build set when the file
 * has none yet), so that building one never evicts a table another mapping
 * of the same process is about to use. */
static struct table *table_for(struct unwtab *u, struct proc_view *pv,
				const struct procmaps_entry *e, bool build, bool *need_build)
{
	char path[96];
	uint8_t bid[64];
	struct stat sb;
	bool shared;
	struct table *t = NULL, *old = NULL, **tabs = NULL;
	struct cfi_table *ct = NULL;
	enum cfi_error why = CFI_OK;
	uint64_t t0, c0, wait;
	uint32_t tgid = pv->tgid, uid;
	int fd, dfd, len, r;

	fd = -1;
	t = table_by_path(u, pv, e);
	if (t && !share_retry(u, pv, t) && !room_retry(t))
		goto out;
	t = NULL;
	/* map_files: the file as mapped, whatever its path now says (replaced,
	 * deleted, another mount namespace). */
	snprintf(path, sizeof(path), "/proc/%u/map_files/%llx-%llx", tgid,
		 (unsigned long long)e->start, (unsigned long long)e->end);
	/* Only regular files: opening a device a process mapped could have
	 * side effects. */
	if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
		t = table_find_file(u, &sb);
		if (t && !share_retry(u, pv, t) && !room_retry(t))
			goto out;
		t = NULL;
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	}
	if (fd < 0 || fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		u->st.open_failed++;
		goto out;
	}
	len = cfi_read_build_id(fd, bid, sizeof(bid));
	if (len < 0) {
		u->st.rejected[CFI_ERR_NOT_ELF]++;
		goto out;
	}
	shared = len > 0 && proc_file_root_only(&sb);
	t = table_find(u, &sb, bid, (size_t)len, shared);
	if (t && (share_retry(u, pv, t) || room_retry(t))) {
		old = t;  /* built again in place: processes may reference it */
		t = NULL;
		if (old->room_at && build)
			u->st.room_retries++;
	}
	if (!t && !build)
		*need_build = true;
	if (t || !build || !proc_uid(pv))
		goto out;
	uid = (uint32_t)pv->uid;
	if (over_share(u, uid, 0))
		goto out;
	/* Its owner's builds took their time: later, and the process's other
	 * mappings meanwhile. */
	wait = build_wait(u, (uint32_t)sb.st_uid);
	if (wait) {
		u->st.builds_deferred++;
		if (!pv->retry_ns || wait < pv->retry_ns)
			pv->retry_ns = wait;
		goto out;
	}
	if (!old) {
		tabs = realloc(u->tables, (u->ntables + 1) * sizeof(*tabs));
		t = calloc(1, sizeof(*t));
		if (tabs)
			u->tables = tabs;
		if (!tabs || !t) {
			free(t);
			t = NULL;
			goto out;
		}
	}
	t = old ? old : t;
	t->dev = sb.st_dev;
	t->ino = sb.st_ino;
	t->size = sb.st_size;
	t->mtime_ns = sb.st_mtim.tv_sec * 1000000000ll + sb.st_mtim.tv_nsec;
	memcpy(t->build_id, bid, (size_t)len);
	t->build_id_len = (size_t)len;
	t->shared = shared;
	t0 = clock_mono_ns();
	c0 = thread_cpu_ns();
	t->owner = uid;
	t->share_rows = 0;
	dfd = open_debug_file(bid, (size_t)len);
	r = cfi_build_fd(fd, dfd,
			 &(struct cfi_limits){ .max_rows = u->cap < MAX_TABLE_ROWS ? u->cap : MAX_TABLE_ROWS,
					       .cancel = &u->cancel },
			 &ct, &why);
	if (dfd >= 0)
		close(dfd);
	c0 = thread_cpu_ns() - c0;
	charge_add(u, (uint32_t)sb.st_uid, c0);
	u->st.build_cpu_ns_total += c0;
	if (r == 0 && over_share(u, uid, ct->n)) {
		/* Kept without rows, so that the next process of it does not
		 * build it again; built again once the share has room. */
		t->share_rows = (uint32_t)ct->n;
	} else if (r == 0) {
		memcpy(t->segs, ct->segs, sizeof(t->segs));
		t->nsegs = ct->nsegs;
		table_load(u, t, ct);
		room_after_load(u, t, ct->n);
	} else {
		u->st.rejected[why]++;
	}
	t0 = clock_mono_ns() - t0;
	/* Which binaries a host keeps building (debug level): the worker's
	 * largest cost on a host that starts new programs all the time. */
	log_debug("unwind: built %s for pid %u: %zu rows, %llu ms (%llu ms CPU)%s%s", e->path, tgid,
		  r == 0 ? ct->n : 0, (unsigned long long)(t0 / 1000000ull),
		  (unsigned long long)(c0 / 1000000ull), r < 0 ? ", rejected: " : "",
		  r < 0 ? cfi_error_name(why) : "");
	u->st.builds++;
	u->st.build_ns_total += t0;
	if (t0 > u->st.build_ns_max)
		u->st.build_ns_max = t0;
	cfi_table_free(ct);
	if (!old)
		u->tables[u->ntables++] = t;
out:
	if (t && !t->count && t->spill)
		table_unspill(u, t);
	if (fd >= 0)
		close(fd);
	return t;
}

/* ---- processes ---- */

static struct proc *proc_find(struct unwtab *u, uint32_t tgid)
{
	for (size_t i = 0; i < u->nprocs; i++)
		if (u->procs[i].tgid == tgid)
			return &u->procs[i];
	return NULL;
}

static void proc_unref(struct proc *p)
{
	for (size_t i = 0; i < p->nrefs; i++)
		p->refs[i]->refs--;
	free(p->refs);
	p->refs = NULL;
	p->nrefs = 0;
}

static void proc_drop(struct unwtab *u, size_t i)
{
	proc_unref(&u->procs[i]);
	u->procs[i] = u->procs[--u->nprocs];
	u->st.procs = u->nprocs;
}

static uint64_t hash_exec_maps(const struct procmaps *m)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < m->count; i++) {
		const struct procmaps_entry *e = &m->entries[i];

		if (!(e->perms & PROCMAPS_EXEC))
			continue;
		h = (h ^ e->start) * 0x100000001b3ull;
		h = (h ^ e->offset) * 0x100000001b3ull;
		h = (h ^ e->inode) * 0x100000001b3ull;
	}
	return h;
}

/* tgid had a build put off: asked for again in wait_ns, unless it is
 * waiting already. Not pending for a recording (unwtab_pending). */
static void retry_later(struct unwtab *u, uint32_t tgid, uint64_t start, uint64_t wait_ns)
{
	size_t i;

	pthread_mutex_lock(&u->mu);
	for (i = 0; i < u->nlater && u->later[i].tgid != tgid; i++)
		;
	if (i == u->nlater && u->nlater < MAX_QUEUE) {
		u->later[u->nlater++] = (struct request){ tgid, start,
							  clock_ns(CLOCK_BOOTTIME) + wait_ns, true };
		u->nretry++;
	}
	pthread_mutex_unlock(&u->mu);
}

/* -ESRCH: the process (the one that started at want_start) is gone. */
static int load_proc(struct unwtab *u, uint32_t tgid, uint64_t want_start)
{
	struct jp_unwind_proc *ent = &u->entry;
	struct procmaps *m = NULL;
	struct proc *p, np = { .tgid = tgid };
	struct proc_view pv = { .tgid = tgid, .uid = -1 };
	/* Per entry of ent->maps: its mapping when it may have a table, and
	 * the table. */
	const struct procmaps_entry *src[JP_UNWIND_MAX_MAPS];
	struct table *tabs[JP_UNWIND_MAX_MAPS];
	char path[64];
	unsigned fuse[64];
	size_t nfuse;
	uint64_t start, now = clock_mono_ns(), h;
	bool fresh;

	p = proc_find(u, tgid);
	/* Read moments ago. Past the first interval only while its entry is
	 * still in BPF: an exec deletes it, and the new image should not
	 * wait for the back-off. */
	fresh = p && !p->retry && now - p->loaded_ns < p->refresh_ns &&
		(p->refresh_ns == REFRESH_NS || bpf_map_lookup_elem(u->procs_fd, &tgid, ent) == 0);
	/* BPF asks again at every sample that leaves the known mappings,
	 * which some processes' stacks do all the time (garbage frame
	 * pointers): within the interval not even their start time is
	 * read, BPF sent it. */
	if (fresh && want_start && p->start_ns == want_start - want_start % TICK_NS)
		return 0;
	/* Gone (most deferred requests): known without a path lookup in /proc.
	 * Its uid only if a table is to be built for it (its share). */
	if ((kill((pid_t)tgid, 0) < 0 && errno == ESRCH) ||
	    proc_read_start_boottime((pid_t)tgid, &start) < 0)
		return -ESRCH;
	start -= start % TICK_NS;
	if (want_start && want_start - want_start % TICK_NS != start)
		return -ESRCH;  /* the pid is another process's now */
	if (fresh && p->start_ns == start)
		return 0;
	if (!p && now < u->full_until)
		return 0;  /* no room for another process until the next sweep */
	snprintf(path, sizeof(path), "/proc/%u/maps", tgid);
	u->st.proc_reads++;
	if (procmaps_read(path, &m) < 0)
		return -ESRCH;
	h = hash_exec_maps(m);
	/* Its entry gone from BPF with the same maps (deleted by an exec of
	 * the same binary): written again below. */
	if (p && !p->retry && p->start_ns == start && p->maps_hash == h &&
	    bpf_map_lookup_elem(u->procs_fd, &tgid, ent) == 0) {
		/* Nothing new mapped: its misses are not dlopen()s; a
		 * process that does map new code later waits at most
		 * REFRESH_MAX_NS for it. */
		p->loaded_ns = now;
		p->refresh_ns = p->refresh_ns * 2 < REFRESH_MAX_NS ? p->refresh_ns * 2 : REFRESH_MAX_NS;
		u->st.maps_unchanged++;
		goto out;
	}
	nfuse = procmaps_fuse_devices_of(&u->fuse, "/proc", (int)tgid, fuse,
					 sizeof(fuse) / sizeof(fuse[0]), &pv.fuse_free);
	memset(ent, 0, sizeof(*ent));
	ent->start_ns = start;
	np.refs = calloc(JP_UNWIND_MAX_MAPS, sizeof(*np.refs));
	if (!np.refs)
		goto out;
	for (size_t i = 0; i < m->count; i++) {
		const struct procmaps_entry *e = &m->entries[i];
		struct jp_unwind_map *mm;

		if (!(e->perms & PROCMAPS_EXEC))
			continue;
		if (ent->n == JP_UNWIND_MAX_MAPS) {
			u->st.too_many_maps++;
			break;
		}
		src[ent->n] = NULL;
		tabs[ent->n] = NULL;
		mm = &ent->maps[ent->n++];
		mm->start = e->start;
		mm->end = e->end;
		if (procmaps_is_anon(e) || e->path[0] == '[')
			continue;  /* JIT code, the vdso: frame pointers */
		if (procmaps_on_devices(e, fuse, nfuse)) {
			u->st.untrusted_fs++;
			continue;
		}
		src[ent->n - 1] = e;
	}
	/* The tables known already first, referenced at once: the builds
	 * after them may evict idle tables for room, never these. */
	for (int pass = 0; pass < 2; pass++) {
		for (uint32_t i = 0; i < ent->n; i++) {
			bool need = false;
			struct table *t;

			if (!src[i] || tabs[i])
				continue;
			t = table_for(u, &pv, src[i], pass == 1, &need);
			if (!need)
				src[i] = t ? src[i] : NULL;
			if (!t)
				continue;
			t->refs++;
			t->last_used = now;
			np.refs[np.nrefs++] = t;
			tabs[i] = t;
		}
	}
	for (uint32_t i = 0; i < ent->n; i++) {
		struct jp_unwind_map *mm = &ent->maps[i];
		struct table *t = tabs[i];
		struct cfi_table view;
		uint64_t vaddr;

		if (!t || !t->count)
			continue;
		view = (struct cfi_table){ .nsegs = t->nsegs };
		memcpy(view.segs, t->segs, sizeof(view.segs));
		if (cfi_offset_to_vaddr(&view, src[i]->offset, &vaddr) == 0) {
			mm->bias = src[i]->start - vaddr;
			mm->row_first = t->first;
			mm->row_count = t->count;
		}
	}
	/* Kept for every process until it exits: only as many as it uses. */
	if (np.nrefs < JP_UNWIND_MAX_MAPS) {
		struct table **fit = np.nrefs ? realloc(np.refs, np.nrefs * sizeof(*np.refs)) : NULL;

		if (fit || !np.nrefs) {
			if (!np.nrefs)
				free(np.refs);
			np.refs = fit;
		}
	}
	if (bpf_map_update_elem(u->procs_fd, &tgid, ent, BPF_ANY) < 0) {
		/* Full (E2BIG): every process sampled meanwhile would be read
		 * in vain; wait for the sweep to free entries. */
		u->st.procs_full++;
		u->full_until = now + SWEEP_NS;
		proc_unref(&np);
		goto out;
	}
	np.start_ns = start;
	np.loaded_ns = now;
	np.refresh_ns = REFRESH_NS;
	np.maps_hash = h;
	np.retry = pv.retry_ns != 0;
	for (size_t i = 0; i < np.nrefs; i++)
		np.short_rows |= np.refs[i]->room_at != 0;
	if (np.retry)
		retry_later(u, tgid, start, pv.retry_ns);
	if (p) {
		proc_unref(p);
		*p = np;
	} else {
		struct proc *ps = realloc(u->procs, (u->nprocs + 1) * sizeof(*ps));

		if (!ps) {
			proc_unref(&np);
			bpf_map_delete_elem(u->procs_fd, &tgid);
			goto out;
		}
		u->procs = ps;
		u->procs[u->nprocs++] = np;
	}
	u->st.procs = u->nprocs;
out:
	procmaps_free(m);
	return 0;
}

/* Forgets exited processes and trims the cache of idle tables. */
static void sweep(struct unwtab *u)
{
	size_t idle = 0;

	for (size_t i = 0; i < u->nprocs;) {
		uint64_t start;

		/* kill(0) first: an exited process costs no /proc lookup. */
		if (!(kill((pid_t)u->procs[i].tgid, 0) < 0 && errno == ESRCH) &&
		    proc_read_start_boottime((pid_t)u->procs[i].tgid, &start) == 0 &&
		    start - start % TICK_NS == u->procs[i].start_ns) {
			i++;
			continue;
		}
		bpf_map_delete_elem(u->procs_fd, &u->procs[i].tgid);
		proc_drop(u, i);
	}
	for (size_t i = 0; i < u->ntables; i++)
		idle += !u->tables[i]->refs;
	for (; idle > MAX_IDLE_TABLES && evict_one(u, false); idle--)
		;
	/* Processes written without a table for want of room: read again once
	 * it is loaded (by another process of it) or may be built again. */
	for (size_t i = 0; i < u->nprocs; i++) {
		struct proc *p = &u->procs[i];
		bool again = false;

		for (size_t k = 0; p->short_rows && k < p->nrefs && !again; k++)
			again = (p->refs[k]->count && p->refs[k]->loaded_ns > p->loaded_ns) ||
				room_retry(p->refs[k]);
		if (again) {
			log_debug("unwind: pid %u read again: a table of its may have room now", p->tgid);
			p->retry = true;
			retry_later(u, p->tgid, p->start_ns, 0);
		}
	}
}

/* ns from now as the condition variables' clock (CLOCK_REALTIME) reads. */
static struct timespec deadline_in(uint64_t ns)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)(ns / 1000000000ull);
	ts.tv_nsec += (long)(ns % 1000000000ull);
	if (ts.tv_nsec >= 1000000000l) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000l;
	}
	return ts;
}

/* Waits on wake for at most ns (mu held); true if the time ran out. */
static bool wait_wake(struct unwtab *u, uint64_t ns)
{
	struct timespec ts = deadline_in(ns);

	return pthread_cond_timedwait(&u->wake, &u->mu, &ts) == ETIMEDOUT;
}

static bool queued(const struct unwtab *u, uint32_t tgid)
{
	for (size_t i = 0; i < u->nq; i++)
		if (u->queue[i].tgid == tgid)
			return true;
	return false;
}

/* Moves the deferred requests that are due to the queue's tail (mu held);
 * the time until the next one is due, or UINT64_MAX. */
static uint64_t later_promote(struct unwtab *u)
{
	uint64_t now = clock_ns(CLOCK_BOOTTIME), next = UINT64_MAX;

	for (size_t i = 0; i < u->nlater;) {
		const struct request *r = &u->later[i];

		if (r->due_ns > now) {
			next = r->due_ns - now < next ? r->due_ns - now : next;
			i++;
			continue;
		}
		if (u->nq < MAX_QUEUE && !queued(u, r->tgid))
			u->queue[u->nq++] = *r;
		u->nretry -= r->retry;
		u->later[i] = u->later[--u->nlater];
	}
	return next;
}

static void *worker(void *arg)
{
	struct unwtab *u = arg;
	struct request req;

	/* Builds are CPU-bound (half a second for cc1): on a busy host the
	 * event loop should get the CPU first. Nice 5 (Linux applies it to
	 * the one thread) kept the loop's worst status round trip at the
	 * level of frame-pointer mode; nice 10 made builds wait seconds
	 * (docs/benchmarks.md). */
	setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 5);
	pthread_mutex_lock(&u->mu);
	for (;;) {
		uint64_t builds, idle;
		bool sweep_due = false;

		/* Woken by a request, a deferred one's time, or the sweep's. */
		while (!u->stop) {
			uint64_t next = later_promote(u), wait = next < SWEEP_NS ? next : SWEEP_NS;

			if (u->nq || sweep_due)
				break;
			u->wakes_at = clock_ns(CLOCK_BOOTTIME) + wait;
			idle = clock_mono_ns();
			sweep_due = wait_wake(u, wait) && wait == SWEEP_NS;
			u->idle_ns += clock_mono_ns() - idle;
		}
		u->wakes_at = 0;
		if (u->stop)
			break;
		/* One at a time: an urgent request waits for one build at most.
		 * None when the wait timed out: time to sweep. */
		req = (struct request){ 0 };
		if (u->nq) {
			req = u->queue[0];
			memmove(u->queue, u->queue + 1, (u->nq - 1) * sizeof(*u->queue));
			u->nq--;
		}
		u->busy = true;
		u->building = req.tgid;
		pthread_mutex_unlock(&u->mu);

		builds = u->st.builds;
		/* A deferred request's process gone meanwhile cost one failed
		 * open of its stat. */
		if (req.tgid && load_proc(u, req.tgid, req.start_ns) == -ESRCH && req.due_ns &&
		    !req.retry)
			u->st.deferred_gone++;
		/* A build's rows (megabytes for a large binary) were freed once
		 * uploaded: give the heap back rather than keep it as RSS. */
		if (u->st.builds != builds)
			malloc_trim(0);
		if (clock_mono_ns() - u->last_sweep >= SWEEP_NS) {
			sweep(u);
			u->last_sweep = clock_mono_ns();
		}

		pthread_mutex_lock(&u->mu);
		u->busy = false;
		u->building = 0;
		/* counted by unwtab_request */
		u->st.requests = u->shared.requests;
		u->st.deferred = u->shared.deferred;
		u->shared = u->st;
		if (!u->nq && u->nlater == u->nretry)
			pthread_cond_broadcast(&u->idle);
	}
	pthread_mutex_unlock(&u->mu);
	return NULL;
}

/* Maps unwind_rows when it was created mappable; otherwise leaves it to
 * syscalls. */
static void rows_map_open(struct unwtab *u)
{
	struct bpf_map_info info = { 0 };
	__u32 len = sizeof(info);
	size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes;
	void *p;

	if (!u->cap || bpf_obj_get_info_by_fd(u->rows_fd, &info, &len) < 0 ||
	    !(info.map_flags & BPF_F_MMAPABLE) || info.value_size != sizeof(struct jp_unwind_row) ||
	    info.max_entries < u->cap)
		return;
	bytes = ((size_t)u->cap * ROW_STRIDE + page - 1) / page * page;
	p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, u->rows_fd, 0);
	if (p == MAP_FAILED)
		return;
	u->rows_map = p;
	u->rows_map_len = bytes;
	u->st.rows_mapped = 1;
}

int unwtab_new(int rows_fd, int procs_fd, uint32_t rows_capacity, struct unwtab **out)
{
	struct unwtab *u = calloc(1, sizeof(*u));
	pthread_condattr_t ca;
	int r;

	*out = NULL;
	if (!u)
		return -ENOMEM;
	u->rows_fd = rows_fd;
	u->procs_fd = procs_fd;
	u->cap = rows_capacity;
	u->st.rows_capacity = rows_capacity;
	/* Half the array's size: at about 4 bytes a row, 1.5 times its rows. */
	u->spill_max = (size_t)rows_capacity * sizeof(struct jp_unwind_row) / 2;
	u->shared = u->st;
	u->free = calloc(1, sizeof(*u->free));
	u->queue = calloc(MAX_QUEUE, sizeof(*u->queue));
	u->later = calloc(MAX_QUEUE, sizeof(*u->later));
	if (!u->free || !u->queue || !u->later) {
		r = -ENOMEM;
		goto fail;
	}
	rows_map_open(u);
	u->free[0] = (struct range){ 0, rows_capacity };
	u->nfree = rows_capacity ? 1 : 0;
	u->last_sweep = clock_mono_ns();
	u->room_retry_ns = ROOM_RETRY_NS;
	procmaps_fuse_cache_init(&u->fuse);
	pthread_mutex_init(&u->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_cond_init(&u->wake, &ca);
	pthread_cond_init(&u->idle, &ca);
	pthread_condattr_destroy(&ca);
	r = -pthread_create(&u->thread, NULL, worker, u);
	if (r < 0)
		goto fail;
	u->started = true;
	/* Its CPU time apart from the event loop's (top -H, bench/). */
	pthread_setname_np(u->thread, "jprofd-unwind");
	*out = u;
	return 0;
fail:
	unwtab_free(u);
	return r;
}

void unwtab_free(struct unwtab *u)
{
	if (!u)
		return;
	if (u->started) {
		/* A build in progress ends at its next look at its budget. */
		atomic_store(&u->cancel, true);
		pthread_mutex_lock(&u->mu);
		u->stop = true;
		pthread_cond_signal(&u->wake);
		pthread_mutex_unlock(&u->mu);
		pthread_join(u->thread, NULL);
		pthread_mutex_destroy(&u->mu);
		pthread_cond_destroy(&u->wake);
		pthread_cond_destroy(&u->idle);
	}
	while (u->nprocs)
		proc_drop(u, u->nprocs - 1);
	for (size_t i = 0; i < u->ntables; i++) {
		free(u->tables[i]->spill);
		free(u->tables[i]);
	}
	free(u->tables);
	free(u->procs);
	free(u->free);
	free(u->queue);
	free(u->later);
	if (u->rows_map)
		munmap(u->rows_map, u->rows_map_len);
	procmaps_fuse_cache_release(&u->fuse);
	free(u);
}

/* A host-view request of a process younger than DEFER_NS is held until it
 * is that old (true), so that one which exits before costs no read. */
static bool request_defer(struct unwtab *u, uint32_t tgid, uint64_t start_ns)
{
	uint64_t due = start_ns + DEFER_NS;
	size_t i;

	for (i = 0; i < u->nlater && u->later[i].tgid != tgid; i++)
		;
	if (i < u->nlater) {
		/* Held already, or the pid is another process's now. */
		u->nretry -= u->later[i].retry;
		u->later[i].retry = false;
		u->later[i].start_ns = start_ns;
		u->later[i].due_ns = due > u->later[i].due_ns ? due : u->later[i].due_ns;
		return true;
	}
	if (!start_ns || queued(u, tgid) || clock_ns(CLOCK_BOOTTIME) >= due ||
	    u->nlater == MAX_QUEUE)
		return false;
	u->later[u->nlater++] = (struct request){ tgid, start_ns, due, false };
	u->shared.requests++;
	u->shared.deferred++;
	/* Woken only to wait for this one: when idle it sleeps until the
	 * earliest due (almost always before this) or the sweep. A futex wake
	 * per new process was 5% of the daemon's CPU under churn. */
	if (u->wakes_at && due < u->wakes_at)
		pthread_cond_signal(&u->wake);
	return true;
}

void unwtab_request(struct unwtab *u, uint32_t tgid, uint64_t start_ns, bool urgent)
{
	struct request req = { tgid, start_ns, 0, false };
	size_t i;

	pthread_mutex_lock(&u->mu);
	if (!urgent && request_defer(u, tgid, start_ns))
		goto out;
	/* A recording starts: its process is served now, not when due. */
	for (i = 0; urgent && i < u->nlater; i++)
		if (u->later[i].tgid == tgid) {
			u->nretry -= u->later[i].retry;
			u->later[i] = u->later[--u->nlater];
			break;
		}
	for (i = 0; i < u->nq && u->queue[i].tgid != tgid; i++)
		;
	if (i < u->nq) {
		u->queue[i].start_ns = start_ns;
		u->queue[i].retry = false;  /* asked for: pending now */
		if (urgent) {  /* to the front */
			req = u->queue[i];
			memmove(u->queue + 1, u->queue, i * sizeof(*u->queue));
			u->queue[0] = req;
		}
	} else if (u->nq < MAX_QUEUE) {
		if (urgent) {
			memmove(u->queue + 1, u->queue, u->nq * sizeof(*u->queue));
			u->queue[0] = req;
		} else {
			u->queue[u->nq] = req;
		}
		u->nq++;
		u->shared.requests++;
		pthread_cond_signal(&u->wake);
	}
out:
	pthread_mutex_unlock(&u->mu);
}

bool unwtab_pending(struct unwtab *u, uint32_t tgid)
{
	bool pending;
	size_t i;

	pthread_mutex_lock(&u->mu);
	pending = tgid && u->building == tgid;
	for (i = 0; i < u->nq && !pending; i++)
		pending = u->queue[i].tgid == tgid && !u->queue[i].retry;
	for (i = 0; i < u->nlater && !pending; i++)
		pending = u->later[i].tgid == tgid && !u->later[i].retry;
	pthread_mutex_unlock(&u->mu);
	return pending;
}

int unwtab_wait_idle(struct unwtab *u, uint64_t timeout_ns)
{
	struct timespec ts = deadline_in(timeout_ns);
	int r = 0;

	pthread_mutex_lock(&u->mu);
	/* Retries of builds put off wait for their owner's charge to drain:
	 * not for them. */
	while ((u->nq || u->nlater > u->nretry || u->busy) && r == 0)
		r = pthread_cond_timedwait(&u->idle, &u->mu, &ts);
	pthread_mutex_unlock(&u->mu);
	return r ? -ETIMEDOUT : 0;
}

void unwtab_get_stats(struct unwtab *u, struct unwtab_stats *out)
{
	pthread_mutex_lock(&u->mu);
	*out = u->shared;
	pthread_mutex_unlock(&u->mu);
}

void unwtab_set_room_retry(struct unwtab *u, uint64_t ns)
{
	pthread_mutex_lock(&u->mu);
	u->room_retry_ns = ns ? ns : ROOM_RETRY_NS;
	pthread_mutex_unlock(&u->mu);
}
