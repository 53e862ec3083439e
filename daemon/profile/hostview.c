#include "hostview.h"

#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "htab.h"
#include "sample.h"
#include "store.h"

#define HV_MIN_BYTES ((size_t)1 << 20)
/* User frames per sampled address in the buckets, as pprof recordings keep
 * them, so a pprof `profile` query says which lines of a function are hot
 * (other formats merge them back by function). Costs memory, within the
 * cap (docs/benchmarks.md "host view per address"); bench builds set 0 to
 * compare. */
#ifndef HOSTVIEW_ADDRS
#define HOSTVIEW_ADDRS STORE_PPROF_ADDRS
#endif
#define HV_CGROUP_MAX 1024

struct hv_bucket {
	struct hv_bucket *next;     /* newer, or another bucket of the same window */
	uint64_t start_ns;          /* aligned to len_ns */
	uint64_t len_ns;            /* its window: fine_ns, or bucket_ns once compacted */
	/* The time its samples were taken in: a drain delivers the samples
	 * taken since the previous drain, so a window's data starts at the last
	 * drain before its first sample and ends at its last drain (while open:
	 * the latest one). Queries report this, not the nominal window, so a
	 * profile's duration is the time its samples cover. */
	uint64_t from_ns, to_ns;
	struct store *st;
	/* pid -> start of the one process with that pid here. A pid is reused:
	 * a process that takes the pid of one this bucket already holds goes to
	 * another bucket of the same window, so a store never mixes the stacks,
	 * names and labels of two processes under one pid. */
	struct htab_map procs;
	size_t procs_bytes;
	size_t bytes;               /* as of the end of its window (closed buckets) */
};

struct hostview_tap {
	struct hostview *hv;
	struct hostview_tap *next;
	struct store *st;
	struct hostview_filter f;
	uint64_t from_ns;           /* the drain before it opened: where its data starts */
	char comm[64], unit[256], cgroup[512];
};

struct hostview {
	struct hostview_config cfg;
	struct hostview_tap *taps;
	/* Windows are fine_ns long while they are among the newest fine_keep_ns,
	 * then compacted into windows of bucket_ns (host_bucket): a query of
	 * the last seconds is cut to within a second, an older range to within
	 * a bucket, and old data costs what coarse windows cost. */
	uint64_t bucket_ns, fine_ns, fine_keep_ns, retention_ns;
	/* oldest .. newest; open .. newest are the newest window's buckets */
	struct hv_bucket *oldest, *open, *newest;
	size_t closed_bytes;        /* sum of bytes of the buckets before open */
	uint64_t last_now;          /* the latest drain (tick or sample); 0 = none yet */
	struct hostview_stats st;
};

static void hv_compact(struct hostview *hv, uint64_t now_ns);

/* ---- buckets ---- */

static size_t hv_bucket_bytes(const struct hv_bucket *b)
{
	struct store_totals t;

	store_get_totals(b->st, &t);
	return t.bytes + b->procs_bytes;
}

static void hv_bucket_free(struct hv_bucket *b)
{
	if (!b)
		return;
	store_free(b->st);
	htab_map_release(&b->procs);
	free(b);
}

/* Bytes of the newest window's buckets (there is one, unless pids were
 * reused within the window). */
static size_t hv_open_bytes(const struct hostview *hv)
{
	size_t n = 0;

	for (const struct hv_bucket *b = hv->open; b; b = b->next)
		n += hv_bucket_bytes(b);
	return n;
}

/* Drops the oldest bucket (never one of the newest window). */
static void hv_evict_oldest(struct hostview *hv)
{
	struct hv_bucket *b = hv->oldest;

	if (!b || b == hv->open)
		return;
	hv->oldest = b->next;
	hv->closed_bytes -= b->bytes;
	hv->st.buckets--;
	hv_bucket_free(b);
}

static void hv_enforce_cap(struct hostview *hv)
{
	size_t cur = hv_open_bytes(hv);

	while (hv->oldest && hv->oldest != hv->open && hv->closed_bytes + cur > hv->cfg.max_bytes) {
		hv_evict_oldest(hv);
		hv->st.evicted_memory++;
	}
}

/* A new empty bucket for the window at start; NULL on ENOMEM. */
static struct hv_bucket *hv_bucket_new(struct hostview *hv, uint64_t start)
{
	struct store_limits lim = { 0 };
	struct hv_bucket *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	/* One bucket alone may use all of the cap; the older ones go first. */
	lim.max_bytes = hv->cfg.max_bytes;
	lim.max_addrs = HOSTVIEW_ADDRS;
	b->st = store_new(&lim, NULL, 0);
	if (!b->st) {
		free(b);
		return NULL;
	}
	b->procs.bytes = &b->procs_bytes;
	b->start_ns = start;
	b->len_ns = hv->fine_ns;
	return b;
}

static void hv_append(struct hostview *hv, struct hv_bucket *b)
{
	if (hv->newest)
		hv->newest->next = b;
	else
		hv->oldest = b;
	hv->newest = b;
	hv->st.buckets++;
}

/* Makes the window of now_ns the open one (a late sample of an older window
 * joins the newest). false on ENOMEM. */
static bool hv_window(struct hostview *hv, uint64_t now_ns)
{
	uint64_t start = now_ns - now_ns % hv->fine_ns;
	uint64_t prev = hv->last_now ? hv->last_now : hv->cfg.start_ns;
	bool adjacent = hv->newest && hv->newest->start_ns + hv->fine_ns == start;
	struct hv_bucket *b;

	if (now_ns > hv->last_now)
		hv->last_now = now_ns;
	if (hv->newest && start <= hv->newest->start_ns) {
		for (b = hv->open; b; b = b->next)
			b->to_ns = hv->last_now;
		return true;
	}
	b = hv_bucket_new(hv, start);
	if (!b)
		return false;
	/* The samples of this drain were taken since the previous one (prev),
	 * which the daemon's ticks keep within a drain interval (before the
	 * first drain: since the sampler started). Without a recent one
	 * (nothing heard for a whole window) we do not know: the window's own
	 * start is the honest guess. */
	b->from_ns = prev && prev + hv->fine_ns >= start ? prev : start;
	b->to_ns = hv->last_now;
	for (struct hv_bucket *o = hv->open; o; o = o->next) {
		/* Its last drain, within its own window when one was skipped. */
		if (!adjacent && o->to_ns > o->start_ns + hv->fine_ns)
			o->to_ns = o->start_ns + hv->fine_ns;
		if (adjacent)
			o->to_ns = b->from_ns;
		o->bytes = hv_bucket_bytes(o);
		hv->closed_bytes += o->bytes;
	}
	hv_append(hv, b);
	hv->open = b;
	hv_enforce_cap(hv);
	return true;
}

/* The bucket of the open window that holds process (pid, start) or can take
 * it; another bucket of that window when each has another process with
 * that pid. NULL on ENOMEM. */
static struct hv_bucket *hv_bucket_for(struct hostview *hv, uint64_t now_ns, uint32_t pid,
				       uint64_t start)
{
	struct hv_bucket *b, *free_b = NULL;

	if (!hv_window(hv, now_ns))
		return NULL;
	for (b = hv->open; b; b = b->next) {
		const uint64_t *v = htab_map_get(&b->procs, pid);

		if (v && *v == start)
			return b;
		if (!v && !free_b)
			free_b = b;
	}
	if (!free_b) {
		free_b = hv_bucket_new(hv, hv->newest->start_ns);
		if (!free_b)
			return NULL;
		free_b->from_ns = hv->open->from_ns;
		free_b->to_ns = hv->open->to_ns;
		hv_append(hv, free_b);
		hv->st.reuse_buckets++;
	}
	return htab_map_put(&free_b->procs, pid, start) < 0 ? NULL : free_b;
}

static bool hv_match_names(uint32_t pid, uint64_t start, const struct sample_names *n,
			   const struct hostview_filter *f);

int hostview_tap_open(struct hostview *hv, const struct hostview_filter *filter,
		      struct hostview_tap **out)
{
	struct hostview_tap *t = calloc(1, sizeof(*t));

	*out = NULL;
	if (!t)
		return -ENOMEM;
	/* A tap is bounded like the buckets: by the host view's memory cap. */
	/* Taps serve pprof scrapes: addresses kept (store_limits.max_addrs). */
	t->st = store_new(&(struct store_limits){ .max_bytes = hv->cfg.max_bytes,
						  .max_addrs = STORE_PPROF_ADDRS }, NULL, 0);
	if (!t->st) {
		free(t);
		return -ENOMEM;
	}
	if (filter) {
		t->f.pid = filter->pid;
		t->f.start_ns = filter->start_ns;
		if (filter->comm) {
			snprintf(t->comm, sizeof(t->comm), "%s", filter->comm);
			t->f.comm = t->comm;
		}
		if (filter->unit) {
			snprintf(t->unit, sizeof(t->unit), "%s", filter->unit);
			t->f.unit = t->unit;
		}
		if (filter->cgroup) {
			snprintf(t->cgroup, sizeof(t->cgroup), "%s", filter->cgroup);
			t->f.cgroup = t->cgroup;
		}
	}
	/* Its first drain brings the samples taken since the last one. */
	t->from_ns = hv->last_now;
	t->hv = hv;
	t->next = hv->taps;
	hv->taps = t;
	*out = t;
	return 0;
}

struct store *hostview_tap_close(struct hostview_tap *t)
{
	struct hostview_tap **pp;
	struct store *st;

	if (!t)
		return NULL;
	for (pp = &t->hv->taps; *pp; pp = &(*pp)->next) {
		if (*pp == t) {
			*pp = t->next;
			break;
		}
	}
	st = t->st;
	free(t);
	return st;
}

void hostview_tap_span(const struct hostview_tap *t, uint64_t *from_ns, uint64_t *to_ns)
{
	*from_ns = t->from_ns;
	*to_ns = t->hv->last_now;
}

void hostview_add(struct hostview *hv, const struct built_sample *bs, uint64_t now_ns)
{
	struct hv_bucket *b;

	if (!hv || !bs || !bs->pid || !bs->values[0])
		return;
	b = hv_bucket_for(hv, now_ns, bs->pid, bs->start_ns);
	if (!b)
		return;
	sample_store_add(b->st, bs, NULL);
	for (struct hostview_tap *t = hv->taps; t; t = t->next)
		if (hv_match_names(bs->pid, bs->start_ns, bs->names, &t->f))
			sample_store_add(t->st, bs, NULL);
	hv->st.samples += bs->values[0];
	hv_enforce_cap(hv);
}

/* A sample taken in a closed window (a young process's): to its bucket, not to taps. */
static bool hv_add_late(struct hostview *hv, const struct built_sample *bs)
{
	if (!hv || !bs || !bs->time_ns || !bs->pid || !bs->values[0] || !hv->open ||
	    bs->time_ns >= hv->open->start_ns)
		return false;
	for (struct hv_bucket *b = hv->oldest; b && b != hv->open; b = b->next) {
		const uint64_t *v = htab_map_get(&b->procs, bs->pid);
		if (bs->time_ns < b->start_ns || bs->time_ns - b->start_ns >= b->len_ns ||
		    (v && *v != bs->start_ns))
			continue;
		if (!v && htab_map_put(&b->procs, bs->pid, bs->start_ns) < 0)
			return false;
		sample_store_add(b->st, bs, NULL);
		hv->closed_bytes += hv_bucket_bytes(b) - b->bytes;  /* unsigned: wraps right */
		b->bytes = hv_bucket_bytes(b);
		hv->st.samples += bs->values[0];
		hv_enforce_cap(hv);
		return true;
	}
	return false;
}

void hostview_consume(const struct built_sample *bs, void *hv)
{
	if (!hv_add_late(hv, bs))  /* else the drain's bucket (and taps) */
		hostview_add(hv, bs, clock_mono_ns());
}

void hostview_on_tick(void *hv, uint64_t now_ns)
{
	hostview_tick(hv, now_ns);
}

void hostview_tick(struct hostview *hv, uint64_t now_ns)
{
	if (!hv)
		return;
	if (now_ns > hv->last_now)
		hv->last_now = now_ns;
	/* A drain without samples still extends what the open window covers. */
	for (struct hv_bucket *b = hv->open; b; b = b->next)
		b->to_ns = hv->last_now;
	/* A bucket is gone once all of it is older than the retention. */
	while (hv->oldest && hv->oldest->start_ns + hv->oldest->len_ns + hv->retention_ns <= now_ns) {
		if (hv->oldest == hv->open) {
			/* The newest window too: nothing is left. */
			struct hv_bucket *b = hv->oldest;

			hv->oldest = b->next;
			hv_bucket_free(b);
			if (!hv->oldest) {
				hv->open = hv->newest = NULL;
				hv->closed_bytes = 0;
			} else {
				hv->open = hv->oldest;
			}
			hv->st.buckets--;
		} else {
			hv_evict_oldest(hv);
		}
		hv->st.evicted_age++;
	}
	hv_compact(hv, now_ns);
	hv_enforce_cap(hv);
}

/* ---- compaction: fine windows into coarse ones ---- */

struct hv_compact_arg {
	const struct hv_bucket *src;
	const struct hv_bucket *head;  /* the coarse buckets before dst */
	struct hv_bucket *dst;
	bool left;                  /* a stack was skipped: its pid is another process here */
	int err;
};

/* store_merge filter: the stacks of processes dst holds already, or whose
 * pid it does not hold yet (which it takes), unless an earlier coarse
 * bucket took their process. */
static bool hv_compact_stack(const struct store *src, const struct store_stack *s,
			     struct store *dst, uint32_t *prefix, void *arg)
{
	struct hv_compact_arg *a = arg;
	const uint64_t *start = htab_map_get(&a->src->procs, s->pid);
	const uint64_t *have = htab_map_get(&a->dst->procs, s->pid);
	uint64_t st = start ? *start : 0;

	(void)src;
	(void)dst;
	(void)prefix;
	for (const struct hv_bucket *e = a->head; e && e != a->dst; e = e->next) {
		const uint64_t *took = htab_map_get(&e->procs, s->pid);

		if (took && *took == st)
			return false;  /* merged there already */
	}
	if (have && *have != st) {
		a->left = true;
		return false;
	}
	if (!have && htab_map_put(&a->dst->procs, s->pid, st) < 0) {
		a->err = -ENOMEM;
		return false;
	}
	return true;
}

/* Merges the fine buckets first..last (one coarse window's) into a list of
 * coarse buckets at *head (one per process a pid stands for). */
static int hv_compact_run(struct hostview *hv, struct hv_bucket *first, struct hv_bucket *last,
			  uint64_t cstart, struct hv_bucket **head)
{
	struct hv_bucket *tail = NULL;
	int r = 0;

	*head = NULL;
	for (struct hv_bucket *b = first;; b = b->next) {
		struct hv_bucket *dst = *head;
		bool done = false;

		while (!done) {
			struct hv_compact_arg a = { .src = b };

			if (!dst) {
				dst = hv_bucket_new(hv, cstart);
				if (!dst) {
					r = -ENOMEM;
					goto out;
				}
				dst->len_ns = hv->bucket_ns;
				dst->from_ns = b->from_ns;
				if (tail)
					tail->next = dst;
				else
					*head = dst;
				tail = dst;
			}
			a.dst = dst;
			a.head = *head;
			r = store_merge(dst->st, b->st, hv_compact_stack, &a);
			if (r == 0)
				r = a.err;
			if (r < 0)
				goto out;
			if (b->from_ns < dst->from_ns)
				dst->from_ns = b->from_ns;
			if (b->to_ns > dst->to_ns)
				dst->to_ns = b->to_ns;
			done = !a.left;
			dst = dst->next;
		}
		if (b == last)
			break;
	}
	for (struct hv_bucket *c = *head; c; c = c->next)
		c->bytes = hv_bucket_bytes(c);
out:
	if (r < 0) {
		while (*head) {
			struct hv_bucket *c = *head;

			*head = c->next;
			hv_bucket_free(c);
		}
	}
	return r;
}

/* Compacts the oldest fine windows once a whole coarse window of them is
 * older than fine_keep_ns. Never the open window. */
static void hv_compact(struct hostview *hv, uint64_t now_ns)
{
	if (hv->fine_ns == hv->bucket_ns)
		return;
	for (;;) {
		struct hv_bucket **pp = &hv->oldest, *first, *last, *coarse, *c;
		uint64_t cstart;
		size_t old_bytes = 0, new_bytes = 0, nold = 0, nnew = 0;

		while (*pp && (*pp)->len_ns != hv->fine_ns)
			pp = &(*pp)->next;
		first = *pp;
		if (!first || first == hv->open)
			return;
		cstart = first->start_ns - first->start_ns % hv->bucket_ns;
		if (cstart + hv->bucket_ns + hv->fine_keep_ns > now_ns)
			return;
		last = first;
		while (last->next && last->next != hv->open && last->next->len_ns == hv->fine_ns &&
		       last->next->start_ns < cstart + hv->bucket_ns)
			last = last->next;
		if (hv_compact_run(hv, first, last, cstart, &coarse) < 0)
			return;  /* out of memory: the fine windows stay (the cap evicts them) */
		for (c = first;; c = c->next) {
			old_bytes += c->bytes;
			nold++;
			if (c == last)
				break;
		}
		for (c = coarse; c; c = c->next) {
			new_bytes += c->bytes;
			nnew++;
			if (!c->next)
				break;
		}
		/* c: the last coarse bucket. Splice the coarse list in. */
		c->next = last->next;
		last->next = NULL;
		*pp = coarse;
		if (hv->newest == last)
			hv->newest = c;
		while (first) {
			struct hv_bucket *b = first;

			first = b->next;
			hv_bucket_free(b);
		}
		hv->closed_bytes = hv->closed_bytes - old_bytes + new_bytes;
		hv->st.buckets = hv->st.buckets - nold + nnew;
		hv->st.compacted += nold;
	}
}

/* ---- queries ---- */

/* cgroup filter: a path prefix ending at a component boundary, or a
 * container id (whole, or a prefix of at least 12 digits as docker prints). */
static bool hv_cgroup_match(const char *want, const struct store_labels *l)
{
	size_t n = strlen(want);

	if (want[0] == '/') {
		if (!strcmp(want, "/"))
			return l->cgroup[0] == '/';
		if (want[n - 1] == '/')
			n--;
		return !strncmp(l->cgroup, want, n) && (l->cgroup[n] == '\0' || l->cgroup[n] == '/');
	}
	return l->container[0] && n >= 12 && !strncmp(l->container, want, n);
}

/* comm NULL: unknown. start: the process's start (built_sample.start_ns). */
static bool hv_match_labels(uint32_t pid, uint64_t start, const char *comm,
			    const struct store_labels *l, const struct hostview_filter *f)
{
	if (!f)
		return true;
	if (f->pid && ((uint32_t)f->pid != pid || (f->start_ns && f->start_ns != start)))
		return false;
	if (f->comm && *f->comm && (!comm || strcmp(comm, f->comm)))
		return false;
	if (f->unit && *f->unit && strcmp(l->unit, f->unit))
		return false;
	if (f->cgroup && *f->cgroup && !hv_cgroup_match(f->cgroup, l))
		return false;
	return true;
}

static bool hv_match_names(uint32_t pid, uint64_t start, const struct sample_names *n,
			   const struct hostview_filter *f)
{
	struct store_labels l = { "", "", "" };

	if (n)
		l = (struct store_labels){ n->cgroup ? n->cgroup : "", n->unit ? n->unit : "",
					   n->container ? n->container : "" };
	return hv_match_labels(pid, start, n ? n->comm : NULL, &l, f);
}

const char *hostview_group_name(enum hostview_group g)
{
	static const char *const names[] = {
		[HOSTVIEW_GROUP_NONE] = "none", [HOSTVIEW_GROUP_COMM] = "comm",
		[HOSTVIEW_GROUP_PID] = "pid", [HOSTVIEW_GROUP_THREAD] = "thread",
		[HOSTVIEW_GROUP_UNIT] = "unit", [HOSTVIEW_GROUP_CGROUP] = "cgroup",
	};

	return (unsigned)g < sizeof(names) / sizeof(names[0]) ? names[g] : NULL;
}

int hostview_group_parse(const char *name)
{
	for (int g = 0; g < HOSTVIEW_GROUP_COUNT; g++)
		if (!strcmp(name, hostview_group_name((enum hostview_group)g)))
			return g;
	return -EINVAL;
}

struct hv_merge {
	const struct hostview_filter *f;
	enum hostview_group g;
	const struct hv_bucket *b;   /* the source bucket: which process each pid is */
};

/* store_merge filter: keeps the stacks matching the filter and gives them
 * the group frame of their process or thread. */
static bool hv_merge_stack(const struct store *src, const struct store_stack *s, struct store *dst,
			   uint32_t *prefix, void *arg)
{
	const struct hv_merge *m = arg;
	const char *comm = store_process_name(src, s->pid);
	const uint64_t *start = htab_map_get(&m->b->procs, s->pid);
	struct store_labels l;
	char name[HV_CGROUP_MAX + 64];

	store_process_labels(src, s->pid, &l);
	if (!hv_match_labels(s->pid, start ? *start : 0, comm, &l, m->f))
		return false;
	if (!comm)
		comm = "[unknown]";
	switch (m->g) {
	case HOSTVIEW_GROUP_COMM:
		snprintf(name, sizeof(name), "%s", comm);
		break;
	case HOSTVIEW_GROUP_PID:
		snprintf(name, sizeof(name), "[%s pid=%u]", comm, (unsigned)s->pid);
		break;
	case HOSTVIEW_GROUP_THREAD: {
		const char *t = store_thread_name(src, s->pid, s->tid);

		snprintf(name, sizeof(name), "[%s tid=%u]", t ? t : "?", (unsigned)s->tid);
		break;
	}
	case HOSTVIEW_GROUP_UNIT:
		snprintf(name, sizeof(name), "%s", l.unit[0] ? l.unit : "[no unit]");
		break;
	case HOSTVIEW_GROUP_CGROUP:
		snprintf(name, sizeof(name), "%s", l.cgroup[0] ? l.cgroup : "[no cgroup]");
		break;
	default:
		return true;
	}
	*prefix = store_frame_ref(dst, FRAME_MARKER, name, "");
	return true;
}

int hostview_query_grouped(struct hostview *hv, uint64_t from_ns, uint64_t to_ns,
			   const struct hostview_filter *filter, enum hostview_group group,
			   bool addrs, struct store **out, uint64_t *span_from, uint64_t *span_to)
{
	/* Without addrs, store_merge gives each address frame of the buckets
	 * to its function's frame: other formats see what they always did. */
	struct store_limits lim = { .max_addrs = addrs ? STORE_PPROF_ADDRS : 0 };
	struct store *st = NULL;
	uint64_t sf = UINT64_MAX, stt = 0;
	bool any = false;
	int r = 0;

	*out = NULL;
	if (!hv || from_ns > to_ns)
		return -EINVAL;
	/* The newest data is that of the last drain (up to a second old): a
	 * range reaching past it is moved back by the difference, so that
	 * "the last 10 s" holds 10 s of samples. */
	if (hv->last_now && to_ns > hv->last_now && to_ns != UINT64_MAX) {
		uint64_t d = to_ns - hv->last_now;

		from_ns = from_ns > d ? from_ns - d : 0;
		to_ns = hv->last_now;
	}
	for (struct hv_bucket *b = hv->oldest; b; b = b->next) {
		uint64_t end = b->to_ns, lo, hi;

		if (b->from_ns > to_ns || end < from_ns)
			continue;
		/* A window is taken when most of it lies in the range, or when it
		 * holds most of the range: the answer's edges are then within
		 * half a window of the range's (a fine window near now). */
		lo = b->from_ns > from_ns ? b->from_ns : from_ns;
		hi = end < to_ns ? end : to_ns;
		if (2 * (hi - lo) < end - b->from_ns && 2 * (hi - lo) < to_ns - from_ns)
			continue;
		if (!st) {
			st = store_new(&lim, NULL, 0);
			if (!st) {
				r = -ENOMEM;
				goto out;
			}
		}
		any = true;
		if (b->from_ns < sf)
			sf = b->from_ns;
		if (end > stt)
			stt = end;
		r = store_merge(st, b->st, hv_merge_stack, &(struct hv_merge){ filter, group, b });
		if (r < 0)
			goto out;
	}
	if (!any) {
		r = -ENOENT;
		goto out;
	}
	/* Whole buckets were merged: the span is theirs, not the one asked
	 * for, or a profile would claim more CPU than the time it covers. */
	if (span_from)
		*span_from = sf;
	if (span_to)
		*span_to = stt;
	*out = st;
	st = NULL;
out:
	store_free(st);
	return r;
}

int hostview_query(struct hostview *hv, uint64_t from_ns, uint64_t to_ns,
		   const struct hostview_filter *filter, struct store **out,
		   uint64_t *span_from, uint64_t *span_to)
{
	return hostview_query_grouped(hv, from_ns, to_ns, filter, HOSTVIEW_GROUP_NONE, false, out,
				      span_from, span_to);
}

void hostview_get_stats(const struct hostview *hv, struct hostview_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!hv)
		return;
	*out = hv->st;
	out->bytes = hv->closed_bytes + hv_open_bytes(hv);
	if (hv->oldest) {
		out->oldest_ns = hv->oldest->from_ns;
		out->newest_ns = hv->last_now;
	}
}

void hostview_get_config(const struct hostview *hv, struct hostview_config *out)
{
	*out = hv->cfg;
}

int hostview_new(const struct hostview_config *cfg, struct hostview **out)
{
	struct hostview *hv;

	*out = NULL;
	hv = calloc(1, sizeof(*hv));
	if (!hv)
		return -ENOMEM;
	if (cfg)
		hv->cfg = *cfg;
	if (!hv->cfg.bucket_s)
		hv->cfg.bucket_s = 10;
	if (!hv->cfg.retention_s)
		hv->cfg.retention_s = 600;
	if (!hv->cfg.max_bytes)
		hv->cfg.max_bytes = (size_t)64 << 20;
	if (hv->cfg.max_bytes < HV_MIN_BYTES)
		hv->cfg.max_bytes = HV_MIN_BYTES;
	if (hv->cfg.retention_s < hv->cfg.bucket_s)
		hv->cfg.retention_s = hv->cfg.bucket_s;
	hv->bucket_ns = hv->cfg.bucket_s * 1000000000ull;
	/* A tenth of a bucket of 20 s or more (a multiple of 10 s), else a
	 * second; a divisor of the bucket either way. */
	if (hv->cfg.fine_s)
		hv->fine_ns = hv->cfg.fine_s * 1000000000ull;
	else
		hv->fine_ns = hv->cfg.bucket_s >= 20 && hv->cfg.bucket_s % 10 == 0 ?
			hv->bucket_ns / 10 : 1000000000ull;
	if (hv->fine_ns > hv->bucket_ns || hv->bucket_ns % hv->fine_ns)
		hv->fine_ns = hv->bucket_ns;
	/* A range reaching past the fine windows ends within a bucket of
	 * what was asked: a tenth of a range at least 10 buckets long. */
	hv->fine_keep_ns = 10 * hv->bucket_ns;
	hv->retention_ns = hv->cfg.retention_s * 1000000000ull;
	*out = hv;
	return 0;
}

void hostview_free(struct hostview *hv)
{
	if (!hv)
		return;
	/* Taps belong to their openers, who close them first; be safe anyway. */
	while (hv->taps)
		store_free(hostview_tap_close(hv->taps));
	while (hv->oldest) {
		struct hv_bucket *b = hv->oldest;

		hv->oldest = b->next;
		hv_bucket_free(b);
	}
	free(hv);
}
