/* Unwind tables: per-process entries and the worker. See unwtab.h. */
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
							  clock_ns(CLOCK_BOOTTIME) + wait_ns, true, false, 0 };
		u->nretry++;
	}
	pthread_mutex_unlock(&u->mu);
}

/* -ESRCH: the process (the one that started at want_start) is gone. */
static int load_proc(struct unwtab *u, uint32_t tgid, uint64_t want_start, bool urgent)
{
	struct jp_unwind_proc *ent = &u->entry;
	struct procmaps *m = NULL;
	struct proc *p, np = { .tgid = tgid };
	struct proc_view pv = { .tgid = tgid, .uid = -1, .urgent = urgent };
	struct young_snap *snap = NULL;
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
	fresh = p && !p->retry && !(urgent && p->short_rows) && now - p->loaded_ns < p->refresh_ns &&
		(p->refresh_ns == REFRESH_NS || bpf_map_lookup_elem(u->procs_fd, &tgid, ent) == 0);
	/* BPF asks again at every sample that leaves the known mappings,
	 * which some processes' stacks do all the time (garbage frame
	 * pointers): within the interval not even their start time is
	 * read, BPF sent it. */
	if (fresh && want_start && p->start_ns == want_start - want_start % TICK_NS)
		return 0;
	/* Gone (most deferred requests): known without a path lookup in /proc.
	 * Its uid only if a table is to be built for it (its share). Unless
	 * young samples of it wait: then its maps as read while it ran. */
	if ((kill((pid_t)tgid, 0) < 0 && errno == ESRCH) ||
	    proc_read_start_boottime((pid_t)tgid, &start) < 0)
		start = 0;
	start -= start % TICK_NS;
	if (!start || (want_start && want_start - want_start % TICK_NS != start)) {
		snap = want_start ? unwtab_young_snap_take(u, tgid, want_start) : NULL;
		if (!snap)
			return -ESRCH;  /* the pid is another process's now, or none's */
		start = snap->start_ns;
		pv.gone = true;
	}
	if (fresh && p->start_ns == start)
		goto out;
	if (!p && now < u->full_until)
		goto out;  /* no room for another process until the next sweep */
	if (snap) {
		m = snap->maps;
		snap->maps = NULL;
		pv.uid = snap->uid;
	} else {
		snprintf(path, sizeof(path), "/proc/%u/maps", tgid);
		u->st.proc_reads++;
		if (procmaps_read(path, &m) < 0)
			return -ESRCH;
		/* Alive and read: a snapshot of it is not needed. */
		unwtab_young_snap_free(unwtab_young_snap_take(u, tgid, start));
	}
	h = hash_exec_maps(m);
	/* Its entry gone from BPF with the same maps (deleted by an exec of
	 * the same binary): written again below; so is the entry of a process
	 * that had a table taken for want of use, or one whose tables found
	 * no room when a recording of it starts: room is made now. */
	if (p && !p->retry && !p->cold_s && !(urgent && p->short_rows) && p->start_ns == start &&
	    p->maps_hash == h &&
	    bpf_map_lookup_elem(u->procs_fd, &tgid, ent) == 0) {
		/* Nothing new mapped: its misses are not dlopen()s; a
		 * process that does map new code later waits at most
		 * REFRESH_MAX_NS for it. */
		p->loaded_ns = now;
		p->refresh_ns = p->refresh_ns * 2 < REFRESH_MAX_NS ? p->refresh_ns * 2 : REFRESH_MAX_NS;
		u->st.maps_unchanged++;
		goto out;
	}
	if (snap) {
		nfuse = snap->nfuse;
		memcpy(fuse, snap->fuse, sizeof(fuse));
		pv.fuse_free = snap->fuse_free;
	} else {
		nfuse = procmaps_fuse_devices_of(&u->fuse, "/proc", (int)tgid, fuse,
						 sizeof(fuse) / sizeof(fuse[0]), &pv.fuse_free);
	}
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
			t = unwtab_table_for(u, &pv, src[i], pass == 1, &need);
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
		u->full_until = now + u->sweep_ns;
		proc_unref(&np);
		goto out;
	}
	np.start_ns = start;
	np.sampled_s = p ? p->sampled_s : 0;
	np.loaded_ns = now;
	np.refresh_ns = REFRESH_NS;
	np.maps_hash = h;
	np.retry = pv.retry_ns != 0;
	for (size_t i = 0; i < np.nrefs; i++)
		np.short_rows |= np.refs[i]->room_at != 0;
	if (np.retry)
		retry_later(u, tgid, start, pv.retry_ns);
	if (p) {
		u->st.cold_reloads += p->cold_s ? 1 : 0;
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
	unwtab_young_snap_free(snap);
	return 0;
}

/* Forgets exited processes and trims the cache of idle tables. */
static void sweep(struct unwtab *u)
{
	size_t idle = 0;

	for (size_t i = 0; i < u->nprocs;) {
		uint64_t start;

		/* kill(0) first: an exited process costs no /proc lookup. */
		/* An exited process's entry stays while samples of it are held
		 * to be walked with it. */
		if ((!(kill((pid_t)u->procs[i].tgid, 0) < 0 && errno == ESRCH) &&
		     proc_read_start_boottime((pid_t)u->procs[i].tgid, &start) == 0 &&
		     start - start % TICK_NS == u->procs[i].start_ns) ||
		    unwtab_young_holds(u, u->procs[i].tgid)) {
			i++;
			continue;
		}
		bpf_map_delete_elem(u->procs_fd, &u->procs[i].tgid);
		proc_drop(u, i);
	}
	unwtab_young_snap_expire(u, YOUNG_SNAP_MAX_AGE_NS);
	for (size_t i = 0; i < u->ntables; i++)
		idle += !u->tables[i]->refs;
	for (; idle > MAX_IDLE_TABLES && unwtab_evict_one(u, false); idle--)
		;
	unwtab_cold_sweep(u);
	unwtab_missing_sweep(u);
	/* Processes written without a table for want of room: read again once
	 * it is loaded (by another process of it) or may be built again; those
	 * that had a table taken for want of use, once they are sampled again
	 * (not at the table's room wait: it would be built again for nobody). */
	for (size_t i = 0; i < u->nprocs; i++) {
		struct proc *p = &u->procs[i];
		bool again = false;

		for (size_t k = 0; p->short_rows && !p->cold_s && k < p->nrefs && !again; k++)
			again = (p->refs[k]->count && p->refs[k]->loaded_ns > p->loaded_ns) ||
				unwtab_room_retry(p->refs[k]);
		if (unwtab_cold_woke(u, p))
			again = true;
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

/* A recording waited for its process's tables: how long, in the log (the
 * bench reads it) and in status. */
static void urgent_served(struct unwtab *u, const struct request *req, uint64_t served_ns)
{
	uint64_t now = clock_mono_ns(), total = now - req->asked_ns;

	log_debug("unwind: pid %u (a recording starts) served %llu ms after its request, its "
		  "tables loaded in %llu ms", req->tgid,
		  (unsigned long long)((served_ns - req->asked_ns) / 1000000ull),
		  (unsigned long long)((now - served_ns) / 1000000ull));
	if (total > u->st.urgent_wait_ns_max)
		u->st.urgent_wait_ns_max = total;
}

/* While a recording waits for the worker it runs at the event loop's
 * priority: at nice 5 on a host with every CPU busy, a build of 40 ms of
 * CPU (python3) took 1.4 s, and the recording's start gate its full 2 s
 * (docs/benchmarks.md). Back to nice 5 once no recording's request is
 * queued (mu held). Lowering a nice value needs CAP_SYS_NICE: without it
 * the worker stays at 5. */
static void boost(struct unwtab *u)
{
	if (u->boosted)
		return;
	u->boosted = true;
	u->boost_nice = getpriority(PRIO_PROCESS, 0);  /* this thread's: the loop's */
	if (u->worker_tid)
		setpriority(PRIO_PROCESS, (id_t)u->worker_tid, u->boost_nice);
}

static bool urgent_queued(const struct unwtab *u)
{
	for (size_t i = 0; i < u->nq; i++)
		if (u->queue[i].urgent)
			return true;
	return false;
}

static void unboost(struct unwtab *u)
{
	if (!u->boosted || urgent_queued(u))
		return;
	u->boosted = false;
	setpriority(PRIO_PROCESS, (id_t)u->worker_tid, 5);
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
	u->worker_tid = (pid_t)syscall(SYS_gettid);
	if (u->boosted)  /* a recording asked before the worker ran */
		setpriority(PRIO_PROCESS, (id_t)u->worker_tid, u->boost_nice);
	for (;;) {
		uint64_t served_ns;
		uint64_t builds, idle;
		bool sweep_due = false, gone;

		/* Woken by a request, a deferred one's time, or the sweep's. */
		while (!u->stop) {
			uint64_t next = later_promote(u);
			uint64_t wait = next < u->sweep_ns ? next : u->sweep_ns;

			if (u->nq || sweep_due || u->young_new)
				break;
			u->wakes_at = clock_ns(CLOCK_BOOTTIME) + wait;
			idle = clock_mono_ns();
			sweep_due = wait_wake(u, wait) && wait == u->sweep_ns;
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
		atomic_store(&u->urgent_waiting, urgent_queued(u));
		u->busy = true;
		u->building = req.tgid;
		if (u->cache_next) {
			u->cache = u->cache_next;
			u->cache_next = NULL;
		}
		pthread_mutex_unlock(&u->mu);

		builds = u->st.builds;
		served_ns = clock_mono_ns();
		gone = req.tgid && load_proc(u, req.tgid, req.start_ns, req.urgent) == -ESRCH;
		if (req.urgent && req.asked_ns)
			urgent_served(u, &req, served_ns);
		/* A deferred request's process gone meanwhile cost one failed
		 * open of its stat. */
		if (gone && req.due_ns && !req.retry)
			u->st.deferred_gone++;
		/* Samples held for tables: walked now that the entry is written,
		 * or given up if the process was gone. */
		unwtab_young_work(u, gone ? req.tgid : 0, gone ? req.start_ns : 0);
		/* A build's rows (megabytes for a large binary) were freed once
		 * uploaded: give the heap back rather than keep it as RSS. */
		if (u->st.builds != builds)
			malloc_trim(0);
		if (clock_mono_ns() - u->last_sweep >= u->sweep_ns) {
			sweep(u);
			u->last_sweep = clock_mono_ns();
		}

		pthread_mutex_lock(&u->mu);
		u->busy = false;
		u->building = 0;
		unboost(u);
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
	u->cold_ns = COLD_NS;
	u->sweep_ns = SWEEP_NS;
	u->young_in_tail = &u->young_in;
	u->young_done_tail = &u->young_done;

	procmaps_fuse_cache_init(&u->fuse);
	procmaps_fuse_cache_init(&u->snap_fuse);
	pthread_mutex_init(&u->mu, NULL);
	unwtab_young_limits(u, 0, 0);
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
	unwtab_young_free_all(u);
	unwcache_free(u->cache);
	unwcache_free(u->cache_next);
	while (u->nprocs)
		proc_drop(u, u->nprocs - 1);
	for (size_t i = 0; i < u->ntables; i++) {
		free(u->tables[i]->spill);
		free(u->tables[i]->path);
		free(u->tables[i]);
	}
	free(u->tables);
	free(u->procs);
	free(u->free);
	free(u->queue);
	free(u->later);
	free(u->cold_ent);
	if (u->rows_map)
		munmap(u->rows_map, u->rows_map_len);
	procmaps_fuse_cache_release(&u->fuse);
	procmaps_fuse_cache_release(&u->snap_fuse);
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
	u->later[u->nlater++] = (struct request){ tgid, start_ns, due, false, false, 0 };
	u->shared.requests++;
	u->shared.deferred++;
	/* Woken only to wait for this one: when idle it sleeps until the
	 * earliest due (almost always before this) or the sweep. A futex wake
	 * per new process was 5% of the daemon's CPU under churn. */
	if (u->wakes_at && due < u->wakes_at)
		pthread_cond_signal(&u->wake);
	return true;
}

void unwtab_undefer(struct unwtab *u, uint32_t tgid)
{
	for (size_t i = 0; i < u->nlater; i++) {
		if (u->later[i].tgid != tgid || u->later[i].retry)
			continue;
		if (u->nq < MAX_QUEUE && !queued(u, tgid)) {
			u->queue[u->nq] = u->later[i];
			u->queue[u->nq++].due_ns = 0;
		}
		u->later[i] = u->later[--u->nlater];
		return;
	}
}

void unwtab_request(struct unwtab *u, uint32_t tgid, uint64_t start_ns, bool urgent)
{
	struct request req = { tgid, start_ns, 0, false, urgent, urgent ? clock_mono_ns() : 0 };
	size_t i;

	pthread_mutex_lock(&u->mu);
	if (!urgent && request_defer(u, tgid, start_ns))
		goto out;
	if (urgent) {
		boost(u);
		atomic_store(&u->urgent_waiting, true);
	}
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
		u->queue[i].urgent |= urgent;
		if (urgent && !u->queue[i].asked_ns)
			u->queue[i].asked_ns = req.asked_ns;
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
	out->young_over_memory = u->young_over_memory;
	out->young_uid_share = u->young_uid_share;
	out->young_expired += u->young_expired_loop;
	out->young_held_bytes = u->young_bytes;
	out->young_held = 0;
	for (const struct young_sample *y = u->young_in; y; y = y->next)
		out->young_held++;
	for (const struct young_sample *y = u->young_done; y; y = y->next)
		out->young_held++;
	pthread_mutex_unlock(&u->mu);
}

void unwtab_set_room_retry(struct unwtab *u, uint64_t ns)
{
	pthread_mutex_lock(&u->mu);
	u->room_retry_ns = ns ? ns : ROOM_RETRY_NS;
	pthread_mutex_unlock(&u->mu);
}

void unwtab_set_sweep(struct unwtab *u, uint64_t ns)
{
	pthread_mutex_lock(&u->mu);
	u->sweep_ns = ns ? ns : SWEEP_NS;
	pthread_cond_signal(&u->wake);
	pthread_mutex_unlock(&u->mu);
}

void unwtab_set_cold(struct unwtab *u, uint64_t ns)
{
	pthread_mutex_lock(&u->mu);
	u->cold_ns = ns ? ns : COLD_NS;
	pthread_mutex_unlock(&u->mu);
}
