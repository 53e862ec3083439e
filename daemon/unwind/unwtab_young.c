/* Unwind tables: samples of young processes (no tables in BPF when taken),
 * held with a copy of their user stack and walked with the same rows once
 * their process's entry is written. See unwtab.h. */
#include <bpf/bpf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "clock.h"
#include "proc.h"
#include "procmaps.h"
#include "unwtab_int.h"

/* What a few hundred samples of 16 KiB take: a build's first second at
 * 99 Hz on a few CPUs, while cc1's table is built. */
#define YOUNG_MAX_BYTES (8u << 20)
/* A process's tables take a second or two on a busy host (a large binary's
 * first build). The host view files a sample by the drain that delivers
 * it: held longer, samples of a burst of young processes would land
 * seconds late, and a window could show more CPU than the host has (with
 * 10 s, 259% per CPU in test_hostview_window on a busy machine). */
#define YOUNG_MAX_AGE_NS 3000000000ull

/* The owner of tgid (of /proc/PID: its effective uid), YOUNG_UID_UNKNOWN
 * when it has exited. */
static uint32_t young_owner_of(uint32_t tgid)
{
	char path[32];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%u", tgid);
	return stat(path, &st) == 0 ? (uint32_t)st.st_uid : YOUNG_UID_UNKNOWN;
}

/* uid's entry in the owners' table (mu held); a new one if create and
 * there is room, else NULL. */
static struct young_owner *young_owner(struct unwtab *u, uint32_t uid, bool create)
{
	for (size_t i = 0; i < u->young_nowners; i++)
		if (u->young_owners[i].uid == uid)
			return &u->young_owners[i];
	if (!create || u->young_nowners == YOUNG_OWNERS_MAX)
		return NULL;
	u->young_owners[u->young_nowners] = (struct young_owner){ uid, 0 };
	return &u->young_owners[u->young_nowners++];
}

/* y's memory given back (mu held): the owner's entry goes at zero. */
static void young_uncharge(struct unwtab *u, const struct young_sample *y)
{
	struct young_owner *o = young_owner(u, y->uid, false);

	u->young_bytes -= y->bytes;
	if (!o)
		return;
	o->bytes -= y->bytes;
	if (o->bytes == 0)
		*o = u->young_owners[--u->young_nowners];
}

static void young_append(struct young_sample ***tail, struct young_sample *y)
{
	y->next = NULL;
	**tail = y;
	*tail = &y->next;
}

int unwtab_young_add(struct unwtab *u, const struct jp_msg_ustack_copy *m, const uint64_t *kips,
		     uint32_t nk, const uint64_t *fpips, uint32_t nfp)
{
	uint32_t len = m->len < JP_USTACK_COPY_BYTES ? m->len : JP_USTACK_COPY_BYTES;
	/* ips: the walk's result, written over nothing else. */
	size_t bytes = sizeof(struct young_sample) +
		       ((size_t)nk + nfp + JP_MAX_STACK_DEPTH) * sizeof(uint64_t) + len;
	uint32_t uid = young_owner_of(m->key.tgid);
	struct young_owner *owner;
	struct young_sample *y;
	int r = 0;

	pthread_mutex_lock(&u->mu);
	if (u->young_bytes + bytes > u->young_max_bytes) {
		u->young_over_memory++;
		r = -ENOSPC;
		goto out;
	}
	/* No room in the owners' table (64 users with samples held at once)
	 * is no room at all: never uncharged memory. */
	owner = young_owner(u, uid, true);
	if (!owner || owner->bytes + bytes > u->young_max_bytes / YOUNG_UID_SHARE_DIV) {
		u->young_uid_share++;
		r = -ENOSPC;
		goto out;
	}
	y = malloc(bytes);
	if (!y) {
		r = -ENOMEM;
		goto out;
	}
	memset(y, 0, sizeof(*y));
	y->key = m->key;
	y->time_ns = m->time_ns;
	y->arrived_ns = clock_mono_ns();
	y->regs = (struct uwalk_regs){ m->ip, m->sp, m->bp };
	y->len = len;
	y->nk = nk;
	y->nfp = nfp;
	y->bytes = bytes;
	y->uid = uid;
	y->kips = (uint64_t *)(y + 1);
	y->fpips = y->kips + nk;
	y->ips = y->fpips + nfp;
	y->stack = (uint8_t *)(y->ips + JP_MAX_STACK_DEPTH);
	if (nk)
		memcpy(y->kips, kips, nk * sizeof(*kips));
	if (nfp)
		memcpy(y->fpips, fpips, nfp * sizeof(*fpips));
	memcpy(y->stack, m->stack, len);
	young_append(&u->young_in_tail, y);
	u->young_bytes += bytes;
	owner->bytes += bytes;
	u->young_new = true;
	/* Its process is read now, not when 100 ms old: by then most such
	 * processes have exited, and their maps with them. */
	unwtab_undefer(u, m->key.tgid);
	pthread_cond_signal(&u->wake);
out:
	pthread_mutex_unlock(&u->mu);
	return r;
}

/* Row idx of the mapped array, or read with a syscall into scratch. */
struct young_rows {
	struct unwtab *u;
	struct jp_unwind_row row;
};

static const struct jp_unwind_row *young_row(void *arg, uint32_t idx)
{
	struct young_rows *yr = arg;
	struct unwtab *u = yr->u;

	if (idx >= u->cap)
		return NULL;
	if (u->rows_map)
		return (const struct jp_unwind_row *)(u->rows_map + (size_t)idx * ROW_STRIDE);
	if (bpf_map_lookup_elem(u->rows_fd, &idx, &yr->row) < 0)
		return NULL;
	return &yr->row;
}

bool unwtab_young_holds(struct unwtab *u, uint32_t tgid)
{
	bool held = false;

	pthread_mutex_lock(&u->mu);
	for (struct young_sample *y = u->young_in; y && !held; y = y->next)
		held = y->key.tgid == tgid;
	pthread_mutex_unlock(&u->mu);
	return held;
}

/* y's process entry, if written for the process y was taken from. */
static bool young_entry(struct unwtab *u, const struct young_sample *y)
{
	struct jp_unwind_proc *e = &u->young_entry;

	return bpf_map_lookup_elem(u->procs_fd, &y->key.tgid, e) == 0 &&
	       e->start_ns == y->key.start_ns - y->key.start_ns % TICK_NS;
}

/* y's process was found gone when its request was served. */
static bool young_gone(const struct unwtab *u, const struct young_sample *y)
{
	uint64_t start = y->key.start_ns - y->key.start_ns % TICK_NS;

	for (size_t i = 0; i < YOUNG_GONE_MAX; i++)
		if (u->young_gone[i].tgid == y->key.tgid && u->young_gone[i].start_ns == start)
			return true;
	return false;
}

void unwtab_young_work(struct unwtab *u, uint32_t gone_tgid, uint64_t gone_start)
{
	struct young_sample *list, *keep = NULL, **keep_tail = &keep, *done = NULL,
			    **done_tail = &done;
	struct young_rows yr = { .u = u };
	uint64_t now = clock_mono_ns();
	uint32_t have_tgid = 0;
	bool have = false;

	pthread_mutex_lock(&u->mu);
	list = u->young_in;
	u->young_in = NULL;
	u->young_in_tail = &u->young_in;
	u->young_new = false;
	pthread_mutex_unlock(&u->mu);
	/* Remembered for samples that arrive after their request was served. */
	if (gone_tgid && gone_start) {
		u->young_gone[u->young_gone_next++ % YOUNG_GONE_MAX] =
			(struct young_gone){ gone_tgid, gone_start - gone_start % TICK_NS };
	}
	while (list) {
		struct young_sample *y = list;
		struct uwalk_result res;

		list = y->next;
		/* Samples of one process arrive together: one lookup for them. */
		if (y->key.tgid != have_tgid || !have) {
			have_tgid = y->key.tgid;
			have = young_entry(u, y);
		}
		if (have) {
			uwalk_walk(&u->young_entry, young_row, &yr, &y->regs, y->stack, y->len,
				   y->ips, JP_MAX_STACK_DEPTH, &res);
			y->n = res.n;
			y->walked = res.n > 0;
			u->st.young_unwound++;
			u->st.young_to_root += res.root;
			u->st.young_short_copy += res.short_copy && !res.root;
			young_append(&done_tail, y);
		} else if (young_gone(u, y)) {
			u->st.young_gone++;
			young_append(&done_tail, y);
		} else if (now - y->arrived_ns >= u->young_max_age_ns) {
			u->st.young_expired++;
			young_append(&done_tail, y);
		} else {
			young_append(&keep_tail, y);
		}
	}
	pthread_mutex_lock(&u->mu);
	/* Arrivals meanwhile go after the ones kept: oldest first. */
	if (keep) {
		*keep_tail = u->young_in;
		if (!u->young_in)
			u->young_in_tail = keep_tail;
		u->young_in = keep;
	}
	if (done) {
		*u->young_done_tail = done;
		u->young_done_tail = done_tail;
	}
	pthread_mutex_unlock(&u->mu);
}

void unwtab_young_take(struct unwtab *u, void (*fn)(const struct unwtab_young_out *o, void *arg),
		       void *arg)
{
	uint64_t now = clock_mono_ns();
	struct young_sample *list;

	pthread_mutex_lock(&u->mu);
	/* Past the age cap while the worker is busy (a build): delivered now
	 * with their frame-pointer stacks, not when it is done. */
	for (struct young_sample **pp = &u->young_in, *y; (y = *pp);) {
		if (now - y->arrived_ns < u->young_max_age_ns) {
			pp = &y->next;
			continue;
		}
		*pp = y->next;
		if (u->young_in_tail == &y->next)
			u->young_in_tail = pp;
		u->young_expired_loop++;
		young_append(&u->young_done_tail, y);
	}
	list = u->young_done;
	u->young_done = NULL;
	u->young_done_tail = &u->young_done;
	for (struct young_sample *y = list; y; y = y->next)
		young_uncharge(u, y);
	pthread_mutex_unlock(&u->mu);
	while (list) {
		struct young_sample *y = list;
		struct unwtab_young_out o = {
			.key = &y->key, .time_ns = y->time_ns, .kips = y->kips, .nk = y->nk,
			.uips = y->walked ? y->ips : y->fpips, .nu = y->walked ? y->n : y->nfp,
			.walked = y->walked,
		};

		list = y->next;
		fn(&o, arg);
		free(y);
	}
}

void unwtab_young_limits(struct unwtab *u, size_t max_bytes, uint64_t max_age_ns)
{
	pthread_mutex_lock(&u->mu);
	u->young_max_bytes = max_bytes ? max_bytes : YOUNG_MAX_BYTES;
	u->young_max_age_ns = max_age_ns ? max_age_ns : YOUNG_MAX_AGE_NS;
	pthread_mutex_unlock(&u->mu);
}

void unwtab_young_free_all(struct unwtab *u)
{
	struct young_sample *lists[2] = { u->young_in, u->young_done };

	for (int i = 0; i < 2; i++)
		while (lists[i]) {
			struct young_sample *y = lists[i];

			lists[i] = y->next;
			free(y);
		}
	u->young_in = u->young_done = NULL;
	u->young_in_tail = &u->young_in;
	u->young_done_tail = &u->young_done;
	u->young_bytes = 0;
	u->young_nowners = 0;
	while (u->snaps) {
		struct young_snap *sn = u->snaps;

		u->snaps = sn->next;
		unwtab_young_snap_free(sn);
	}
	u->nsnaps = 0;
}

/* Snapshots kept at most: one per process sampled without tables in the
 * last seconds (the sampler asks at most once per process per 250 ms). */
#define YOUNG_SNAPS_MAX 256

void unwtab_young_snap_free(struct young_snap *s)
{
	if (!s)
		return;
	procmaps_free(s->maps);
	free(s);
}

void unwtab_young_snapshot(struct unwtab *u, uint32_t tgid, uint64_t start_ns)
{
	struct young_snap *s = NULL, **pp;
	char path[64];
	uid_t uids[4];
	uint64_t start;

	if (!start_ns)
		return;
	start = start_ns - start_ns % TICK_NS;
	pthread_mutex_lock(&u->mu);
	for (s = u->snaps; s && !(s->tgid == tgid && s->start_ns == start); s = s->next)
		;
	pthread_mutex_unlock(&u->mu);
	if (s)
		return;  /* read already: a young process's maps rarely change */
	s = calloc(1, sizeof(*s));
	if (!s)
		return;
	s->tgid = tgid;
	s->start_ns = start;
	s->taken_ns = clock_mono_ns();
	s->uid = proc_read_uids((pid_t)tgid, uids) == 0 ? (int64_t)uids[1] : -1;
	snprintf(path, sizeof(path), "/proc/%u/maps", tgid);
	if (s->uid < 0 || procmaps_read(path, &s->maps) < 0) {
		unwtab_young_snap_free(s);
		return;
	}
	s->nfuse = procmaps_fuse_devices_of(&u->snap_fuse, "/proc", (int)tgid, s->fuse,
					    sizeof(s->fuse) / sizeof(s->fuse[0]), &s->fuse_free);
	pthread_mutex_lock(&u->mu);
	s->next = u->snaps;
	u->snaps = s;
	s = NULL;
	if (++u->nsnaps > YOUNG_SNAPS_MAX) {
		for (pp = &u->snaps; (*pp)->next; pp = &(*pp)->next)
			;
		s = *pp;  /* the oldest */
		*pp = NULL;
		u->nsnaps--;
	}
	pthread_mutex_unlock(&u->mu);
	unwtab_young_snap_free(s);
}

struct young_snap *unwtab_young_snap_take(struct unwtab *u, uint32_t tgid, uint64_t start_ns)
{
	uint64_t start = start_ns - start_ns % TICK_NS;
	struct young_snap *s, **pp;

	pthread_mutex_lock(&u->mu);
	for (pp = &u->snaps; (s = *pp); pp = &s->next)
		if (s->tgid == tgid && (!start_ns || s->start_ns == start))
			break;
	if (s) {
		*pp = s->next;
		u->nsnaps--;
	}
	pthread_mutex_unlock(&u->mu);
	return s;
}

void unwtab_young_snap_expire(struct unwtab *u, uint64_t max_age_ns)
{
	struct young_snap *old = NULL, *s, **pp;
	uint64_t now = clock_mono_ns();

	pthread_mutex_lock(&u->mu);
	for (pp = &u->snaps; (s = *pp);) {
		if (now - s->taken_ns < max_age_ns) {
			pp = &s->next;
			continue;
		}
		*pp = s->next;
		u->nsnaps--;
		s->next = old;
		old = s;
	}
	pthread_mutex_unlock(&u->mu);
	while (old) {
		s = old;
		old = s->next;
		unwtab_young_snap_free(s);
	}
}
