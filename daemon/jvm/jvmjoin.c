#include "jvmjoin_int.h"

#include <linux/types.h>

#include "bpf/sampler.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Arrays of a thread queue that emptied keep this many elements at most. */
#define JOIN_KEEP_CAP 64

/* ---- memory bounds ---- */

struct jvm_budget *jvm_budget_new(size_t limit)
{
	struct jvm_budget *b = calloc(1, sizeof(*b));

	if (b)
		*b = (struct jvm_budget){ .limit = limit, .refs = 1 };
	return b;
}

void jvm_budget_unref(struct jvm_budget *b)
{
	if (b && --b->refs == 0)
		free(b);
}

void jvm_budget_get(const struct jvm_budget *b, size_t *used, size_t *peak, size_t *limit)
{
	*used = b->used;
	*peak = b->peak;
	*limit = b->limit;
}

struct jvm_budget *jvm_join_budget(const struct jvm_join *j)
{
	return j->budget;
}

/* Brings the peak and the uid's budget up to date with j->bytes (which
 * the maps change behind our back). Unsigned arithmetic wraps, so the
 * difference is right when the bytes went down too. */
static void bytes_sync(struct jvm_join *j)
{
	if (j->bytes > j->st.bytes_peak)
		j->st.bytes_peak = j->bytes;
	if (!j->budget)
		return;
	j->budget->used += j->bytes - j->synced;
	j->synced = j->bytes;
	if (j->budget->used > j->budget->peak)
		j->budget->peak = j->budget->used;
}

int jvm_join_bytes_fit(struct jvm_join *j, size_t more, bool count)
{
	bytes_sync(j);
	if (j->bytes + more > j->o.max_bytes) {
		if (count)
			j->st.over_bytes++;
		return -ENOBUFS;
	}
	if (j->budget && j->budget->used + more > j->budget->limit) {
		if (count)
			j->st.over_budget++;
		return -EDQUOT;
	}
	return 0;
}

void jvm_join_bytes_add(struct jvm_join *j, size_t n)
{
	j->bytes += n;
	bytes_sync(j);
}

static void bytes_sub(struct jvm_join *j, size_t n)
{
	j->bytes -= n;
	bytes_sync(j);
}

/* malloc within the bounds (counted when refused); NULL when refused. */
static void *bounded_alloc(struct jvm_join *j, size_t n)
{
	void *p;

	if (jvm_join_bytes_fit(j, n, true) < 0)
		return NULL;
	p = malloc(n ? n : 1);
	if (p)
		jvm_join_bytes_add(j, n);
	return p;
}

static void bounded_free(struct jvm_join *j, void *p, size_t n)
{
	if (!p)
		return;
	free(p);
	bytes_sub(j, n);
}

int jvm_join_grow(struct jvm_join *j, void **p, size_t *cap, size_t need, size_t elem)
{
	size_t c = *cap ? *cap : 16;
	void *n;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	if (jvm_join_bytes_fit(j, (c - *cap) * elem, true) < 0)
		return -ENOBUFS;
	n = realloc(*p, c * elem);
	if (!n)
		return -ENOMEM;
	jvm_join_bytes_add(j, (c - *cap) * elem);
	*p = n;
	*cap = c;
	return 0;
}

/* Frees an emptied array that grew past JOIN_KEEP_CAP. */
static void trim(struct jvm_join *j, void **p, size_t *cap, size_t n, size_t elem)
{
	if (n || *cap <= JOIN_KEEP_CAP)
		return;
	bounded_free(j, *p, *cap * elem);
	*p = NULL;
	*cap = 0;
}

/* ---- heaps on time ---- */

static uint64_t heap_time(const void *base, size_t elem, size_t i)
{
	uint64_t t;

	memcpy(&t, (const char *)base + i * elem, sizeof(t));
	return t;
}

static void heap_swap(void *base, size_t elem, size_t a, size_t b)
{
	char tmp[sizeof(struct bpf_rec)];
	char *pa = (char *)base + a * elem, *pb = (char *)base + b * elem;

	memcpy(tmp, pa, elem);
	memcpy(pa, pb, elem);
	memcpy(pb, tmp, elem);
}

_Static_assert(sizeof(struct agent_rec) <= sizeof(struct bpf_rec), "heap_swap buffer");

/* Element *n (written by the caller) joins the heap. */
static void heap_push(void *base, size_t elem, size_t *n)
{
	size_t i = (*n)++;

	while (i > 0 && heap_time(base, elem, (i - 1) / 2) > heap_time(base, elem, i)) {
		heap_swap(base, elem, (i - 1) / 2, i);
		i = (i - 1) / 2;
	}
}

/* Moves the earliest element to out. */
static void heap_pop(void *base, size_t elem, size_t *n, void *out)
{
	size_t i = 0, last = --*n;

	memcpy(out, base, elem);
	memcpy(base, (char *)base + last * elem, elem);
	for (;;) {
		size_t l = 2 * i + 1, min = i;

		if (l < last && heap_time(base, elem, l) < heap_time(base, elem, min))
			min = l;
		if (l + 1 < last && heap_time(base, elem, l + 1) < heap_time(base, elem, min))
			min = l + 1;
		if (min == i)
			break;
		heap_swap(base, elem, i, min);
		i = min;
	}
}

/* ---- tables ---- */

void *jvm_join_table_get(struct jvm_join *j, struct htab_map *map, uint64_t key, bool create,
			 void **arr, size_t *n, size_t *cap, size_t elem)
{
	uint64_t *idx;
	char *e;

	if (key == 0)
		return NULL;
	idx = htab_map_get(map, key);
	if (idx)
		return (char *)*arr + *idx * elem;
	if (!create || jvm_join_bytes_fit(j, htab_map_insert_cost(map), true) < 0 ||
	    jvm_join_grow(j, arr, cap, *n + 1, elem) < 0 || htab_map_put(map, key, *n) < 0)
		return NULL;
	e = (char *)*arr + (*n)++ * elem;
	memset(e, 0, elem);
	return e;
}

static struct tidq *tidq_get(struct jvm_join *j, uint32_t tid)
{
	struct tidq *t;

	if (j->nq >= j->o.max_tids && !htab_map_get(&j->q_of_tid, tid)) {
		j->st.over_tids++;
		return NULL;
	}
	t = jvm_join_table_get(j, &j->q_of_tid, tid, true, (void **)&j->q, &j->nq, &j->qcap,
			       sizeof(*j->q));
	if (t)
		t->tid = tid;
	return t;
}

void jvm_join_map_tid(struct jvm_join *j, uint32_t ns_tid, uint32_t host_tid)
{
	/* Only threads the daemon checked (it hands out their perf fds). */
	if (ns_tid)
		htab_map_put(&j->host_of_ns, ns_tid, host_tid);
}

static uint32_t host_tid(const struct jvm_join *j, uint32_t ns)
{
	const uint64_t *host = htab_map_get(&j->host_of_ns, ns);

	return host ? (uint32_t)*host : ns;  /* unmapped: same pid namespace, the ids agree */
}

/* ---- lifecycle ---- */

struct jvm_join *jvm_join_new(const struct jvm_join_opts *opts)
{
	struct jvm_join *j = calloc(1, sizeof(*j));

	if (!j)
		return NULL;
	j->o = *opts;
	if (!j->o.name_wait_ns)
		j->o.name_wait_ns = 2000000000ull;
	if (!j->o.late_ns)
		j->o.late_ns = 250000000ull;
	if (!j->o.max_pending)
		j->o.max_pending = 1000000;
	if (!j->o.future_ns)
		j->o.future_ns = 1000000000ull;
	if (!j->o.max_bytes)
		j->o.max_bytes = 64u << 20;
	if (!j->o.max_methods)
		j->o.max_methods = 131072;
	if (!j->o.max_tids)
		j->o.max_tids = 65536;
	j->budget = j->o.budget;
	j->o.budget = NULL;
	if (j->budget)
		j->budget->refs++;
	j->q_of_tid.bytes = &j->bytes;
	j->host_of_ns.bytes = &j->bytes;
	j->m_of_id.bytes = &j->bytes;
	j->tn_of_tid.bytes = &j->bytes;
	jvm_join_bytes_add(j, sizeof(*j));
	return j;
}

static void held_free(struct jvm_join *j, struct held *h)
{
	if (h->leaf)
		bounded_free(j, h->leaf, strlen(h->leaf) + 1);
	bounded_free(j, h->b.ips, (h->b.nk + h->b.nu) * sizeof(uint64_t));
	bounded_free(j, h->java, h->njava * sizeof(*h->java));
}

void jvm_join_free(struct jvm_join *j)
{
	if (!j)
		return;
	for (size_t i = 0; i < j->nq; i++) {
		struct tidq *t = &j->q[i];

		for (size_t k = 0; k < t->nb; k++)
			free(t->b[k].ips);
		for (size_t k = 0; k < t->na; k++)
			free(t->a[k].frames);
		free(t->b);
		free(t->a);
	}
	for (size_t i = 0; i < j->nheld; i++) {
		free(j->held[i].b.ips);
		free(j->held[i].java);
		free(j->held[i].leaf);
	}
	free(j->held);
	jvm_join_methods_free(j);
	for (size_t i = 0; i < j->ntn; i++)
		free(j->tn[i].name);
	free(j->tn);
	htab_map_release(&j->tn_of_tid);
	free(j->q);
	htab_map_release(&j->q_of_tid);
	htab_map_release(&j->host_of_ns);
	/* All of it is gone: give the uid's budget back what we held. */
	j->bytes = 0;
	bytes_sync(j);
	jvm_budget_unref(j->budget);
	free(j);
}

/* ---- input ---- */

void jvm_join_add_bpf(struct jvm_join *j, uint32_t tid, uint64_t time_ns, const uint64_t *kips,
		      unsigned nk, const uint64_t *uips, unsigned nu, bool kernel_mode,
		      bool kstack_lost, bool ustack_lost, bool host_feed)
{
	struct tidq *t;
	struct bpf_rec r = {
		.time = time_ns, .nk = nk, .nu = nu, .kernel_mode = kernel_mode,
		.kstack_lost = kstack_lost, .ustack_lost = ustack_lost, .host_feed = host_feed,
	};

	j->st.bpf_records++;
	if (j->pending >= j->o.max_pending) {
		j->st.dropped++;
		return;
	}
	/* Refusals past the bounds are counted where they happen. */
	if (!(t = tidq_get(j, tid)) ||
	    jvm_join_grow(j, (void **)&t->b, &t->capb, t->nb + 1, sizeof(*t->b)) < 0 ||
	    !(r.ips = bounded_alloc(j, (nk + nu) * sizeof(uint64_t))))
		return;
	jvm_join_move(r.ips, kips, nk * sizeof(uint64_t));
	jvm_join_move(r.ips + nk, uips, nu * sizeof(uint64_t));
	t->b[t->nb] = r;
	heap_push(t->b, sizeof(*t->b), &t->nb);
	j->pending++;
}

/* Counts an agent record and says whether the bounds let it in. */
static bool agent_rec_admitted(struct jvm_join *j, uint64_t time_ns, uint64_t now_ns)
{
	j->st.agent_records++;
	/* A record from the future would wait for a horizon that never comes
	 * (and hold its memory until the end); one from before the recording
	 * has no BPF record to meet. */
	if (time_ns > now_ns + j->o.future_ns) {
		j->st.agent_future++;
		return false;
	}
	if (time_ns < j->o.start_ns) {
		j->st.agent_before_start++;
		return false;
	}
	if (j->pending >= j->o.max_pending) {
		j->st.dropped++;
		return false;
	}
	return true;
}

/* Shared memory: anything but a known type is unknown. */
static uint8_t frame_type(int32_t t)
{
	return t >= JPRING_TYPE_INTERPRETED && t <= JPRING_TYPE_C1 ? (uint8_t)t
								    : JPRING_TYPE_UNKNOWN;
}

void jvm_join_add_agent(struct jvm_join *j, uint32_t ns_tid, uint64_t time_ns, uint64_t now_ns,
			int32_t num_frames, const struct jpring_frame *frames)
{
	struct tidq *t;
	struct agent_rec r = { .time = time_ns, .num = num_frames };
	size_t n = num_frames > 0 ? (size_t)num_frames : 0;

	if (!agent_rec_admitted(j, time_ns, now_ns))
		return;
	if (!(t = tidq_get(j, host_tid(j, ns_tid))) ||
	    jvm_join_grow(j, (void **)&t->a, &t->capa, t->na + 1, sizeof(*t->a)) < 0 ||
	    (n && !(r.frames = bounded_alloc(j, n * sizeof(*r.frames)))))
		return;
	for (size_t i = 0; i < n; i++) {
		r.frames[i].method_id = frames[i].method_id;
		r.frames[i].bci = frames[i].bci;
		r.frames[i].type = frame_type(frames[i].type);
	}
	t->a[t->na] = r;
	heap_push(t->a, sizeof(*t->a), &t->na);
	j->pending++;
}

/* An agent sample that joins nothing: held until its frames are named.
 * Takes leaf (the class frame, malloc'd, or NULL); native: the frames are
 * native pcs (JPRING_BCI_NATIVE, leaf first), kept as its user stack. */
static void add_held(struct jvm_join *j, uint32_t ns_tid, uint64_t time_ns, uint64_t now_ns,
		     int event, const uint64_t *values, unsigned nvalues, char *leaf,
		     const char *marker, const char *state, const struct jpring_frame *frames,
		     unsigned nframes, bool native)
{
	struct held h = { .created = now_ns, .event = event, .marker = marker, .state = state };
	size_t bytes;

	bytes = nframes * (native ? sizeof(uint64_t) : sizeof(*h.java)) + (leaf ? strlen(leaf) + 1 : 0);
	if (jvm_join_bytes_fit(j, bytes, true) < 0 ||
	    jvm_join_grow(j, (void **)&j->held, &j->capheld, j->nheld + 1, sizeof(*j->held)) < 0 ||
	    (nframes && !native && !(h.java = malloc(nframes * sizeof(*h.java)))) ||
	    (nframes && native && !(h.b.ips = malloc(nframes * sizeof(uint64_t))))) {
		free(leaf);
		return;
	}
	/* The BPF stack's own flag bits are not the agent's to set. */
	for (unsigned i = 0; native && i < nframes; i++)
		h.b.ips[i] = frames[i].method_id & ~(JP_IP_SIGNAL | JP_IP_INTERRUPTED);
	h.b.nu = native ? nframes : 0;
	h.njava = native ? 0 : nframes;
	/* Root first, as held samples keep them. */
	for (unsigned i = 0; i < h.njava; i++) {
		h.java[i].method_id = frames[nframes - 1 - i].method_id;
		h.java[i].bci = frames[nframes - 1 - i].bci;
		h.java[i].type = frame_type(frames[nframes - 1 - i].type);
	}
	h.leaf = leaf;
	h.tid = host_tid(j, ns_tid);
	h.b.time = time_ns;
	for (unsigned i = 0; i < nvalues && i < JVM_EVENT_VALUES; i++)
		h.values[i] = values[i];
	jvm_join_want(j, h.java, h.njava);
	jvm_join_bytes_add(j, bytes);
	j->held[j->nheld++] = h;
	j->pending++;
	/* The next run looks at it even when no new name comes. */
	j->names_changed = true;
}

void jvm_join_add_event(struct jvm_join *j, uint32_t ns_tid, uint64_t time_ns, uint64_t now_ns,
			int event, const uint64_t *values, unsigned nvalues, const char *cls,
			size_t cls_len, const struct jpring_frame *frames, unsigned nframes)
{
	char *leaf = NULL;

	if (!agent_rec_admitted(j, time_ns, now_ns))
		return;
	if (cls_len && !(leaf = jvm_join_class_name(cls, cls_len)))
		return;
	add_held(j, ns_tid, time_ns, now_ns, event, values, nvalues, leaf, NULL, NULL, frames,
		 nframes, false);
}

void jvm_join_add_wall(struct jvm_join *j, uint32_t ns_tid, uint64_t time_ns, uint64_t now_ns,
		       int event, const uint64_t *values, unsigned nvalues, uint16_t state,
		       int32_t num_frames, const struct jpring_frame *frames)
{
	unsigned n = num_frames > 0 ? (unsigned)num_frames : 0;
	const char *marker = num_frames < 0 ? jvm_join_error_marker(num_frames) : NULL;
	const char *st;

	switch (state) {
	case JPRING_STATE_SLEEPING:
		st = "[sleeping]";
		break;
	case JPRING_STATE_UNINTERRUPTIBLE:
		st = "[uninterruptible]";
		break;
	default:
		return;  /* the ring reader checked it; never trust twice-read memory */
	}
	if (n > JPRING_MAX_FRAMES)
		return;
	if (!agent_rec_admitted(j, time_ns, now_ns))
		return;
	/* The agent stepped over a leaf it could not walk from (a stub). */
	if (n && frames[0].bci == JPRING_BCI_STUB) {
		marker = jvm_join_stub_marker(frames[0].method_id);
		frames++;
		n--;
	}
	/* A thread without Java frames: its native ones, all of them or none. */
	if (n && frames[0].bci == JPRING_BCI_NATIVE) {
		for (unsigned i = 0; i < n; i++)
			if (frames[i].bci != JPRING_BCI_NATIVE)
				return;
		add_held(j, ns_tid, time_ns, now_ns, event, values, nvalues, NULL, NULL, st, frames,
			 n, true);
		return;
	}
	add_held(j, ns_tid, time_ns, now_ns, event, values, nvalues, NULL, marker, st, frames, n,
		 false);
}

/* ---- joining ---- */

/* Settled frames stay settled, so each frame is looked at once until it is. */
static bool held_ready(const struct jvm_join *j, struct held *h)
{
	while (h->settled < h->njava && jvm_join_frame_settled(j, &h->java[h->settled]))
		h->settled++;
	return h->settled == h->njava;
}

static void emit_rec(struct jvm_join *j, uint32_t tid, const struct bpf_rec *b,
		     const struct jvm_frame *java, unsigned njava, const char *marker,
		     bool java_context, const struct held *ev, jvm_emit_fn emit, void *arg)
{
	struct jvm_sample s = {
		.tid = tid,
		.time_ns = b->time,
		.java = java,
		.njava = njava,
		.marker = marker,
		.java_context = java_context,
		.kips = b->ips,
		.nk = b->nk,
		.uips = b->ips + b->nk,
		.nu = b->nu,
		.kernel_mode = b->kernel_mode,
		.kstack_lost = b->kstack_lost,
		.ustack_lost = b->ustack_lost,
		.host_feed = b->host_feed,
	};

	if (ev && ev->event) {
		s.event = ev->event;
		s.values = ev->values;
		s.leaf = ev->leaf;
		s.state = ev->state;
	} else if (j->o.running_leaf) {
		/* A perf-event sample: the thread was on a CPU. */
		s.state = "[running]";
	}
	emit(&s, arg);
}

static void bpf_rec_free(struct jvm_join *j, struct bpf_rec *b)
{
	bounded_free(j, b->ips, (b->nk + b->nu) * sizeof(uint64_t));
	b->ips = NULL;
}

/* A BPF record and its agent record: emit now or hold for names. Takes b->ips. */
static void joined(struct jvm_join *j, uint32_t tid, struct bpf_rec *b, const struct agent_rec *a,
		   uint64_t now, jvm_emit_fn emit, void *arg)
{
	struct jvm_frame *root_first = NULL;
	unsigned n = a->num > 0 ? (unsigned)a->num : 0;
	const struct jvm_frame *leaf = a->frames;
	const char *marker = NULL;
	struct held h;

	j->st.joined++;
	/* The agent stepped over a leaf it could not walk from (a stub). */
	if (n && leaf[0].bci == JPRING_BCI_STUB) {
		marker = jvm_join_stub_marker(leaf[0].method_id);
		leaf++;
		n--;
	}
	if (n == 0 && marker) {
		emit_rec(j, tid, b, NULL, 0, marker, true, NULL, emit, arg);
		bpf_rec_free(j, b);
		return;
	}
	if (n == 0) {
		bool java_ctx = a->num < 0 && jvm_join_error_marker(a->num) != NULL;

		emit_rec(j, tid, b, NULL, 0, a->num < 0 ? jvm_join_error_marker(a->num) : NULL,
			 java_ctx, NULL, emit, arg);
		bpf_rec_free(j, b);
		return;
	}
	root_first = malloc(n * sizeof(*root_first));
	if (!root_first) {
		bpf_rec_free(j, b);
		return;
	}
	for (unsigned i = 0; i < n; i++)
		root_first[i] = leaf[n - 1 - i];
	jvm_join_want(j, root_first, n);
	h = (struct held){ .created = now, .b = *b, .tid = tid, .njava = n, .java = root_first,
			   .marker = marker };
	/* Past the bounds a sample goes out at once, with the names known so far. */
	if (held_ready(j, &h) || jvm_join_bytes_fit(j, n * sizeof(*root_first), false) < 0 ||
	    jvm_join_grow(j, (void **)&j->held, &j->capheld, j->nheld + 1, sizeof(*j->held)) < 0) {
		emit_rec(j, tid, b, root_first, n, marker, true, NULL, emit, arg);
		bpf_rec_free(j, b);
		free(root_first);
		return;
	}
	jvm_join_bytes_add(j, n * sizeof(*root_first));
	j->held[j->nheld++] = h;
	j->pending++;
}

static void unmatched(struct jvm_join *j, uint32_t tid, struct bpf_rec *b, jvm_emit_fn emit,
		      void *arg)
{
	j->st.bpf_unmatched++;
	emit_rec(j, tid, b, NULL, 0, "[java_stack_missing]", true, NULL, emit, arg);
	bpf_rec_free(j, b);
}

/* How long after its BPF record an agent record may come. Not one interval:
 * a thread preempted between the overflow and its return to user space
 * takes the signal when it runs again (10-25 ms later on a loaded 2-CPU
 * machine, measured), with its user state unchanged, and a cpu-clock event
 * of a thread that does not run cannot overflow again in between. So the
 * latest BPF record before the agent record is still its own; late_ns, the
 * wait of a BPF record for its agent record, bounds the gap. */
static uint64_t join_window(const struct jvm_join *j)
{
	return j->o.late_ns > j->o.interval_ns ? j->o.late_ns : j->o.interval_ns;
}

/* Joins one thread's records up to horizon; each record taken costs one of
 * *budget (NULL: no limit). Returns false when the budget ran out first. */
static bool join_tid(struct jvm_join *j, struct tidq *t, uint64_t horizon, uint64_t now,
		     bool final, size_t *budget, jvm_emit_fn emit, void *arg)
{
	struct agent_rec a;
	struct bpf_rec b;
	bool done = true;

	while (t->na && (final || t->a[0].time <= horizon)) {
		if (budget && (*budget)-- == 0) {
			done = false;
			goto out;
		}
		struct bpf_rec cand;
		bool have = false;

		/* No BPF record of this thread queued at all: its own may
		 * come with a later drain (seen: a drain's BPF records do not
		 * always reach its horizon). It waits as long as a BPF record
		 * waits for its agent record. */
		if (!final && t->nb == 0 && t->a[0].time + j->o.late_ns >= horizon)
			break;
		heap_pop(t->a, sizeof(*t->a), &t->na, &a);
		j->pending--;
		/* The latest BPF record at or before the agent record; any
		 * older ones have lost their agent record. */
		while (t->nb && t->b[0].time <= a.time) {
			if (have)
				unmatched(j, t->tid, &cand, emit, arg);
			heap_pop(t->b, sizeof(*t->b), &t->nb, &cand);
			j->pending--;
			have = true;
		}
		if (have && a.time - cand.time <= join_window(j)) {
			joined(j, t->tid, &cand, &a, now, emit, arg);
		} else {
			if (have)
				unmatched(j, t->tid, &cand, emit, arg);
			j->st.agent_unmatched++;
		}
		bounded_free(j, a.frames, (a.num > 0 ? (size_t)a.num : 0) * sizeof(*a.frames));
	}
	/* BPF records with no agent record in sight. */
	while (t->nb && (final || t->b[0].time + j->o.late_ns < horizon)) {
		if (budget && (*budget)-- == 0) {
			done = false;
			goto out;
		}
		heap_pop(t->b, sizeof(*t->b), &t->nb, &b);
		j->pending--;
		unmatched(j, t->tid, &b, emit, arg);
	}
out:
	trim(j, (void **)&t->a, &t->capa, t->na, sizeof(*t->a));
	trim(j, (void **)&t->b, &t->capb, t->nb, sizeof(*t->b));
	return done;
}

/* Emits the held samples that are ready, or waited long enough; all of
 * them when all is set. */
static void release_held(struct jvm_join *j, uint64_t now_ns, bool all, jvm_emit_fn emit, void *arg)
{
	size_t keep = 0;

	for (size_t i = 0; i < j->nheld; i++) {
		struct held *h = &j->held[i];
		bool ready = held_ready(j, h);

		if (ready || all || now_ns - h->created > j->o.name_wait_ns) {
			if (!ready)
				j->st.names_timed_out++;
			emit_rec(j, h->tid, &h->b, h->java, h->njava, h->marker, true, h, emit, arg);
			held_free(j, h);
			j->pending--;
		} else {
			j->held[keep++] = *h;
		}
	}
	j->nheld = keep;
	j->names_changed = false;
}

static void release_due(struct jvm_join *j, uint64_t now_ns, jvm_emit_fn emit, void *arg)
{
	/* Held samples are in the order created: with no new names, only the
	 * oldest one can have become due. */
	if (j->nheld && (j->names_changed || now_ns - j->held[0].created > j->o.name_wait_ns))
		release_held(j, now_ns, false, emit, arg);
}

void jvm_join_run(struct jvm_join *j, uint64_t horizon_ns, uint64_t now_ns, bool final,
		  jvm_emit_fn emit, void *arg)
{
	for (size_t i = 0; i < j->nq; i++)
		if (j->q[i].na || j->q[i].nb)
			join_tid(j, &j->q[i], horizon_ns, now_ns, final, NULL, emit, arg);
	j->run_next = 0;
	release_due(j, now_ns, emit, arg);
}

bool jvm_join_run_some(struct jvm_join *j, uint64_t horizon_ns, uint64_t now_ns, bool final,
		       size_t max, jvm_emit_fn emit, void *arg)
{
	size_t budget = max;
	bool more = false;

	/* Resume at the thread where the last slice stopped, so that one busy
	 * thread cannot starve the others over a run of slices. */
	for (size_t n = 0; n < j->nq; n++) {
		size_t i = (j->run_next + n) % j->nq;

		if ((j->q[i].na || j->q[i].nb) &&
		    !join_tid(j, &j->q[i], horizon_ns, now_ns, final, &budget, emit, arg)) {
			j->run_next = i;
			more = true;
			break;
		}
	}
	if (!more)
		j->run_next = 0;
	release_due(j, now_ns, emit, arg);
	return more;
}

void jvm_join_flush(struct jvm_join *j, jvm_emit_fn emit, void *arg)
{
	release_held(j, 0, true, emit, arg);
}

size_t jvm_join_held(const struct jvm_join *j)
{
	return j->nheld;
}

bool jvm_join_limit_news(struct jvm_join *j)
{
	if (j->limit_reported || !(j->st.over_bytes || j->st.over_budget || j->st.over_tids ||
				   j->st.frames_over_methods || j->st.agent_future ||
				   j->st.agent_before_start))
		return false;
	j->limit_reported = true;
	return true;
}

void jvm_join_get_stats(const struct jvm_join *j, struct jvm_join_stats *out)
{
	*out = j->st;
	out->methods = j->nm;
	out->bytes = j->bytes;
}
