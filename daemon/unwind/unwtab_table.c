/* Unwind tables: finding a mapping's table, users' shares, build time
 * charged to file owners, building. See unwtab.h. */
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
#include "unwtab_int.h"

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

/* The table of the file open on fd (sb; its debug file on dfd, -1: none):
 * from the disk cache when it holds the file's key, else built, and then
 * written there. */
static int table_make(struct unwtab *u, int fd, int dfd, const struct stat *sb,
		      struct cfi_table **ct, enum cfi_error *why, bool *cached)
{
	struct unwcache_src src = { .uid = sb->st_uid, .root_only = proc_file_root_only(sb) };
	size_t max_rows = u->cap < MAX_TABLE_ROWS ? u->cap : MAX_TABLE_ROWS;
	struct unwcache_stats cs;
	struct unwcache_key key;
	bool keyed = u->cache && unwcache_key(u->cache, fd, dfd, &key) == 0;
	int r = -ENOENT;

	*cached = false;
	if (keyed)
		r = unwcache_get(u->cache, &key, &src, max_rows, ct);
	if (r == 0) {
		*cached = true;
		*why = CFI_OK;
	} else {
		r = cfi_build_fd(fd, dfd, &(struct cfi_limits){ .max_rows = max_rows,
							       .cancel = &u->cancel }, ct, why);
		if (r == 0 && keyed)
			unwcache_put(u->cache, &key, &src, *ct);
	}
	if (u->cache) {
		unwcache_get_stats(u->cache, &cs);
		u->st.cache_hits = cs.hits;
		u->st.cache_writes = cs.writes;
		u->st.cache_rejected = cs.rejected;
		u->st.cache_evicted = cs.evicted;
		u->st.cache_bytes = cs.bytes;
	}
	return r;
}

void unwtab_set_cache(struct unwtab *u, const char *dir, uint64_t max_bytes)
{
	struct unwcache *c = NULL;

	if (unwcache_open(dir, max_bytes, &c) < 0 || !c)
		return;
	log_info("unwind: built tables kept in %s (at most %llu MiB)", dir,
		 (unsigned long long)((max_bytes ? max_bytes : UNWCACHE_DEFAULT_BYTES) >> 20));
	pthread_mutex_lock(&u->mu);
	unwcache_free(u->cache_next);
	u->cache_next = c;
	pthread_mutex_unlock(&u->mu);
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

/* Refused for want of rows and worth building again now: its wait is
 * over, or a recording of the process starts (room is then made from
 * tables no one has sampled lately). */
static bool room_due(const struct proc_view *pv, const struct table *t)
{
	return unwtab_room_retry(t) || (pv->urgent && t->room_at && !t->count && !t->spill);
}

/* The file a mapping of an exited process showed (its maps read while it
 * ran: young samples wait for it), which has no map_files any more: by its
 * path, only where the path names the mapped file (the daemon's mount
 * namespace, no FUSE mount), and only the regular file of the mapping's
 * device and inode. Opened as O_PATH and checked before it is read
 * through /proc/self/fd, so the path swapped for a device or FIFO meanwhile
 * is never opened for reading. -1 if not. */
static int open_exited(const struct proc_view *pv, const struct procmaps_entry *e)
{
	char fdpath[64];
	struct stat sb;
	int pfd, fd = -1;

	if (!pv->fuse_free || e->deleted || e->path[0] != '/')
		return -1;
	pfd = open(e->path, O_PATH | O_CLOEXEC);
	if (pfd < 0)
		return -1;
	if (fstat(pfd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_ino == e->inode &&
	    major(sb.st_dev) == e->dev_major && minor(sb.st_dev) == e->dev_minor) {
		snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", pfd);
		fd = open(fdpath, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	}
	close(pfd);
	return fd;
}

/* build false: only a table already known (*need_build set when the file
 * has none yet), so that building one never evicts a table another mapping
 * of the same process is about to use. */
struct table *unwtab_table_for(struct unwtab *u, struct proc_view *pv,
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
	bool cached;

	fd = -1;
	t = table_by_path(u, pv, e);
	if (t && !share_retry(u, pv, t) && !room_due(pv, t))
		goto out;
	t = NULL;
	/* map_files: the file as mapped, whatever its path now says (replaced,
	 * deleted, another mount namespace). */
	snprintf(path, sizeof(path), "/proc/%u/map_files/%llx-%llx", tgid,
		 (unsigned long long)e->start, (unsigned long long)e->end);
	/* Only regular files: opening a device a process mapped could have
	 * side effects. */
	if (pv->gone) {
		fd = open_exited(pv, e);
	} else if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
		t = table_find_file(u, &sb);
		if (t && !share_retry(u, pv, t) && !room_due(pv, t))
			goto out;
		t = NULL;
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	}
	if (fd < 0 || fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		u->st.open_failed++;
		goto out;
	}
	if (pv->gone) {
		t = table_find_file(u, &sb);
		if (t && !share_retry(u, pv, t) && !unwtab_room_retry(t))
			goto out;
		t = NULL;
	}
	len = cfi_read_build_id(fd, bid, sizeof(bid));
	if (len < 0) {
		u->st.rejected[CFI_ERR_NOT_ELF]++;
		goto out;
	}
	shared = len > 0 && proc_file_root_only(&sb);
	t = table_find(u, &sb, bid, (size_t)len, shared);
	if (t && (share_retry(u, pv, t) || room_due(pv, t))) {
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
	/* A recording waits behind this request: it goes first, this table
	 * after it. Before, it waited for every build of the process being
	 * served (a host-view request of a new program and its libraries). */
	if (!pv->urgent && atomic_load(&u->urgent_waiting)) {
		pv->retry_ns = 1;
		goto out;
	}
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
	if (!t->path)
		t->path = strdup(e->path);
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
	r = table_make(u, fd, dfd, &sb, &ct, &why, &cached);
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
		unwtab_table_load(u, t, ct);
		unwtab_room_after_load(u, t, ct->n);
	} else {
		u->st.rejected[why]++;
		t->error = why;
	}
	t0 = clock_mono_ns() - t0;
	/* Which binaries a host keeps building (debug level): the worker's
	 * largest cost on a host that starts new programs all the time. */
	if (cached) {
		log_debug("unwind: loaded %s for pid %u from the cache: %zu rows, %llu ms (%llu ms CPU)",
			  e->path, tgid, ct->n, (unsigned long long)(t0 / 1000000ull),
			  (unsigned long long)(c0 / 1000000ull));
	} else {
		log_debug("unwind: built %s for pid %u: %zu rows, %llu ms (%llu ms CPU)%s%s", e->path,
			  tgid, r == 0 ? ct->n : 0, (unsigned long long)(t0 / 1000000ull),
			  (unsigned long long)(c0 / 1000000ull), r < 0 ? ", rejected: " : "",
			  r < 0 ? cfi_error_name(why) : "");
		u->st.builds++;
		u->st.build_ns_total += t0;
		if (t0 > u->st.build_ns_max)
			u->st.build_ns_max = t0;
	}
	cfi_table_free(ct);
	if (!old)
		u->tables[u->ntables++] = t;
out:
	if (t && !t->count && t->spill)
		unwtab_table_unspill(u, t);
	if (fd >= 0)
		close(fd);
	return t;
}

