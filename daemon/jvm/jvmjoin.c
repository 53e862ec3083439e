#include "jvmjoin.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "htab.h"

enum { M_NEW = 0, M_ASKED, M_NAMED, M_UNKNOWN };

struct jmethod {
	uint64_t id;
	uint8_t state;
	char *cls, *name, *sig;   /* cls dotted ("java.lang.String") */
	struct jpag_line *lines;
	unsigned nlines;
};

struct bpf_rec {
	uint64_t time;
	uint32_t nk, nu;
	bool kernel_mode, kstack_lost, ustack_lost;
	bool host_feed;
	uint64_t *ips;            /* nk kernel then nu user, leaf first each */
};

struct agent_rec {
	uint64_t time;
	int32_t num;
	struct jvm_frame *frames; /* leaf first, as ASGCT writes them */
};

struct tidq {
	uint32_t tid;
	struct bpf_rec *b;
	size_t nb, capb;
	struct agent_rec *a;
	size_t na, capa;
};

struct held {
	uint64_t created;
	struct bpf_rec b;
	uint32_t tid;
	unsigned njava;
	struct jvm_frame *java;   /* root first */
};

/* Queues and methods live in arrays (in the order first seen); the maps
 * give a tid or method id its index. */
struct jvm_join {
	struct jvm_join_opts o;
	struct tidq *q;
	size_t qcap, nq;
	struct htab_map q_of_tid;
	struct htab_map host_of_ns;   /* agent's namespace tid -> host tid */
	struct jmethod *m;
	size_t mcap, nm;
	struct htab_map m_of_id;
	uint64_t *wanted;
	size_t nwanted, capwanted;
	struct held *held;
	size_t nheld, capheld;
	size_t pending;           /* records queued + held */
	struct jvm_join_stats st;
};

/* memmove that accepts (NULL, 0): empty queues have no storage yet. */
static void move(void *dst, const void *src, size_t n)
{
	if (n)
		memmove(dst, src, n);
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
	size_t c = *cap ? *cap : 16;
	void *n;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	n = realloc(*p, c * elem);
	if (!n)
		return -ENOMEM;
	*p = n;
	*cap = c;
	return 0;
}

/* ---- tables ---- */

/* Entry of key in a map from key to array index: the index of an existing
 * one, or a new zeroed element appended to the array. NULL on 0 keys (never
 * valid) and ENOMEM. */
static void *table_get(struct htab_map *map, uint64_t key, bool create, void **arr, size_t *n,
		       size_t *cap, size_t elem)
{
	uint64_t *idx;
	char *e;

	if (key == 0)
		return NULL;
	idx = htab_map_get(map, key);
	if (idx)
		return (char *)*arr + *idx * elem;
	if (!create || grow(arr, cap, *n + 1, elem) < 0 || htab_map_put(map, key, *n) < 0)
		return NULL;
	e = (char *)*arr + (*n)++ * elem;
	memset(e, 0, elem);
	return e;
}

static struct tidq *tidq_get(struct jvm_join *j, uint32_t tid, bool create)
{
	struct tidq *t = table_get(&j->q_of_tid, tid, create, (void **)&j->q, &j->nq, &j->qcap,
				   sizeof(*j->q));

	if (t)
		t->tid = tid;
	return t;
}

static struct jmethod *method_get(struct jvm_join *j, uint64_t id, bool create)
{
	struct jmethod *m = table_get(&j->m_of_id, id, create, (void **)&j->m, &j->nm, &j->mcap,
				      sizeof(*j->m));

	if (m)
		m->id = id;
	return m;
}

void jvm_join_map_tid(struct jvm_join *j, uint32_t ns_tid, uint32_t host_tid)
{
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
		j->o.late_ns = 50000000ull;
	if (!j->o.max_pending)
		j->o.max_pending = 1000000;
	return j;
}

static void held_free(struct held *h)
{
	free(h->b.ips);
	free(h->java);
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
	for (size_t i = 0; i < j->nm; i++) {
		free(j->m[i].cls);
		free(j->m[i].name);
		free(j->m[i].sig);
		free(j->m[i].lines);
	}
	for (size_t i = 0; i < j->nheld; i++)
		held_free(&j->held[i]);
	free(j->held);
	free(j->wanted);
	free(j->q);
	free(j->m);
	htab_map_release(&j->q_of_tid);
	htab_map_release(&j->host_of_ns);
	htab_map_release(&j->m_of_id);
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
	size_t pos;

	j->st.bpf_records++;
	if (j->pending >= j->o.max_pending || !(t = tidq_get(j, tid, true)) ||
	    grow((void **)&t->b, &t->capb, t->nb + 1, sizeof(*t->b)) < 0) {
		j->st.dropped++;
		return;
	}
	r.ips = malloc((nk + nu ? nk + nu : 1) * sizeof(uint64_t));
	if (!r.ips) {
		j->st.dropped++;
		return;
	}
	move(r.ips, kips, nk * sizeof(uint64_t));
	move(r.ips + nk, uips, nu * sizeof(uint64_t));
	/* Keep the queue in time order (records of one thread arrive in order;
	 * this only guards against the exception). */
	pos = t->nb;
	while (pos > 0 && t->b[pos - 1].time > time_ns)
		pos--;
	move(&t->b[pos + 1], &t->b[pos], (t->nb - pos) * sizeof(*t->b));
	t->b[pos] = r;
	t->nb++;
	j->pending++;
}

void jvm_join_add_agent(struct jvm_join *j, uint32_t ns_tid, uint64_t time_ns, int32_t num_frames,
			const struct jpring_frame *frames)
{
	struct tidq *t;
	struct agent_rec r = { .time = time_ns, .num = num_frames };
	size_t pos, n = num_frames > 0 ? (size_t)num_frames : 0;

	j->st.agent_records++;
	if (j->pending >= j->o.max_pending || !(t = tidq_get(j, host_tid(j, ns_tid), true)) ||
	    grow((void **)&t->a, &t->capa, t->na + 1, sizeof(*t->a)) < 0) {
		j->st.dropped++;
		return;
	}
	if (n) {
		r.frames = malloc(n * sizeof(*r.frames));
		if (!r.frames) {
			j->st.dropped++;
			return;
		}
		for (size_t i = 0; i < n; i++) {
			r.frames[i].method_id = frames[i].method_id;
			r.frames[i].bci = frames[i].bci;
		}
	}
	pos = t->na;
	while (pos > 0 && t->a[pos - 1].time > time_ns)
		pos--;
	move(&t->a[pos + 1], &t->a[pos], (t->na - pos) * sizeof(*t->a));
	t->a[pos] = r;
	t->na++;
	j->pending++;
}

/* Java names come from the profiled process: keep them printable UTF-8. */
static char *clean_text(const char *s, size_t len, bool jvm_class)
{
	char *out = malloc(len + 1), *o = out;
	size_t i = 0;

	if (!out)
		return NULL;
	if (jvm_class && len >= 2 && s[0] == 'L' && s[len - 1] == ';') {
		s++;
		len -= 2;
	}
	while (i < len) {
		unsigned char c = (unsigned char)s[i];
		size_t n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 :
			   (c & 0xf8) == 0xf0 ? 4 : 0;
		bool ok = n > 0 && i + n <= len;

		for (size_t k = 1; ok && k < n; k++)
			ok = ((unsigned char)s[i + k] & 0xc0) == 0x80;
		if (!ok || (n == 1 && (c < 0x20 || c == 0x7f))) {
			*o++ = '?';
			i++;
			continue;
		}
		if (n == 1 && jvm_class && c == '/')
			*o++ = '.';
		else
			memcpy(o, s + i, n), o += n;
		i += n;
	}
	*o = '\0';
	return out;
}

void jvm_join_method(struct jvm_join *j, uint64_t id, const char *cls, size_t cls_len,
		     const char *name, size_t name_len, const char *sig, size_t sig_len,
		     const struct jpag_line *lines, unsigned nlines, bool unknown)
{
	struct jmethod *m = method_get(j, id, false);

	/* Only ids we asked about: an agent cannot fill the table with junk. */
	if (!m || m->state == M_NAMED || m->state == M_UNKNOWN)
		return;
	if (unknown) {
		m->state = M_UNKNOWN;
		j->st.methods_unknown++;
		return;
	}
	m->cls = clean_text(cls, cls_len, true);
	m->name = clean_text(name, name_len, false);
	m->sig = clean_text(sig, sig_len, false);
	if (nlines) {
		m->lines = malloc(nlines * sizeof(*m->lines));
		if (m->lines) {
			memcpy(m->lines, lines, nlines * sizeof(*m->lines));
			m->nlines = nlines;
		}
	}
	m->state = (m->cls && m->name && m->sig) ? M_NAMED : M_UNKNOWN;
	j->st.methods_named++;
}

/* ---- naming ---- */

const char *jvm_join_error_marker(int32_t code)
{
	switch (code) {
	case JPRING_NO_CLASS_LOAD:
		return "[no_class_load]";
	case JPRING_GC_ACTIVE:
		return "[gc_active]";
	case JPRING_UNKNOWN_NOT_JAVA:
	case JPRING_NOT_WALKABLE_NOT_JAVA:
		return NULL;  /* not a Java thread: its native stack says it all */
	case JPRING_UNKNOWN_JAVA:
		return "[unknown_java]";
	case JPRING_NOT_WALKABLE_JAVA:
		return "[not_walkable_java]";
	case JPRING_UNKNOWN_STATE:
		return "[unknown_state]";
	case JPRING_THREAD_EXIT:
		return "[thread_exit]";
	case JPRING_DEOPT:
		return "[deoptimization]";
	case JPRING_SAFEPOINT:
		return "[safepoint]";
	default:
		return "[java_error]";
	}
}

size_t jvm_join_frame_name(const struct jvm_join *j, const struct jvm_frame *f, char *buf,
			   size_t len)
{
	const struct jmethod *m = method_get((struct jvm_join *)j, f->method_id, false);
	int n;

	if (!m || m->state != M_NAMED) {
		n = snprintf(buf, len, "[unknown_java_method]");
	} else if (j->o.signatures) {
		n = snprintf(buf, len, "%s.%s%s", m->cls, m->name, m->sig);
	} else if (j->o.lines && m->nlines && f->bci >= 0) {
		int32_t line = -1, best = -1;

		/* The entry that starts last at or before bci (tables need not be sorted). */
		for (unsigned i = 0; i < m->nlines; i++) {
			if (m->lines[i].bci <= f->bci && m->lines[i].bci > best) {
				best = m->lines[i].bci;
				line = m->lines[i].line;
			}
		}
		n = line >= 0 ? snprintf(buf, len, "%s.%s:%d", m->cls, m->name, line)
			      : snprintf(buf, len, "%s.%s", m->cls, m->name);
	} else {
		n = snprintf(buf, len, "%s.%s", m->cls, m->name);
	}
	if (n < 0)
		return 0;
	return (size_t)n >= len ? len - 1 : (size_t)n;
}

/* ---- joining ---- */

static bool names_ready(struct jvm_join *j, const struct jvm_frame *f, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		struct jmethod *m = method_get(j, f[i].method_id, false);

		if (m && m->state != M_NAMED && m->state != M_UNKNOWN)
			return false;
	}
	return true;
}

static void want(struct jvm_join *j, const struct jvm_frame *f, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		struct jmethod *m = method_get(j, f[i].method_id, true);

		if (!m || m->state != M_NEW)
			continue;
		m->state = M_ASKED;
		if (grow((void **)&j->wanted, &j->capwanted, j->nwanted + 1, sizeof(uint64_t)) == 0)
			j->wanted[j->nwanted++] = m->id;
	}
}

static void emit_rec(struct jvm_join *j, uint32_t tid, const struct bpf_rec *b,
		     const struct jvm_frame *java, unsigned njava, const char *marker,
		     bool java_context, jvm_emit_fn emit, void *arg)
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

	emit(&s, arg);
}

/* A BPF record and its agent record: emit now or hold for names. Takes b->ips. */
static void joined(struct jvm_join *j, uint32_t tid, struct bpf_rec *b, const struct agent_rec *a,
		   uint64_t now, jvm_emit_fn emit, void *arg)
{
	struct jvm_frame *root_first = NULL;
	unsigned n = a->num > 0 ? (unsigned)a->num : 0;

	j->st.joined++;
	if (n == 0) {
		bool java_ctx = a->num < 0 && jvm_join_error_marker(a->num) != NULL;

		emit_rec(j, tid, b, NULL, 0, a->num < 0 ? jvm_join_error_marker(a->num) : NULL,
			 java_ctx, emit, arg);
		free(b->ips);
		return;
	}
	root_first = malloc(n * sizeof(*root_first));
	if (!root_first) {
		free(b->ips);
		return;
	}
	for (unsigned i = 0; i < n; i++)
		root_first[i] = a->frames[n - 1 - i];
	want(j, root_first, n);
	if (names_ready(j, root_first, n) ||
	    grow((void **)&j->held, &j->capheld, j->nheld + 1, sizeof(*j->held)) < 0) {
		emit_rec(j, tid, b, root_first, n, NULL, true, emit, arg);
		free(b->ips);
		free(root_first);
		return;
	}
	j->held[j->nheld++] = (struct held){ .created = now, .b = *b, .tid = tid, .njava = n,
					     .java = root_first };
	j->pending++;
}

static void unmatched(struct jvm_join *j, uint32_t tid, struct bpf_rec *b, jvm_emit_fn emit,
		      void *arg)
{
	j->st.bpf_unmatched++;
	emit_rec(j, tid, b, NULL, 0, "[java_stack_missing]", true, emit, arg);
	free(b->ips);
}

static void join_tid(struct jvm_join *j, struct tidq *t, uint64_t horizon, uint64_t now,
		     bool final, jvm_emit_fn emit, void *arg)
{
	size_t bi = 0, ai = 0;

	for (; ai < t->na && (final || t->a[ai].time <= horizon); ai++) {
		struct agent_rec *a = &t->a[ai];
		ssize_t cand = -1;

		/* The latest BPF record at or before the agent record; any
		 * older ones have lost their agent record. */
		while (bi < t->nb && t->b[bi].time <= a->time) {
			if (cand >= 0)
				unmatched(j, t->tid, &t->b[cand], emit, arg);
			cand = (ssize_t)bi++;
		}
		if (cand >= 0 && a->time - t->b[cand].time <= j->o.interval_ns) {
			joined(j, t->tid, &t->b[cand], a, now, emit, arg);
		} else {
			if (cand >= 0)
				unmatched(j, t->tid, &t->b[cand], emit, arg);
			j->st.agent_unmatched++;
		}
		free(a->frames);
	}
	/* BPF records with no agent record in sight. */
	while (bi < t->nb && (final || t->b[bi].time + j->o.late_ns < horizon))
		unmatched(j, t->tid, &t->b[bi++], emit, arg);
	j->pending -= bi + ai;
	/* Only when something was taken: a queue without storage is NULL,
	 * and NULL + 0 is undefined. */
	if (bi)
		move(t->b, t->b + bi, (t->nb - bi) * sizeof(*t->b));
	t->nb -= bi;
	if (ai)
		move(t->a, t->a + ai, (t->na - ai) * sizeof(*t->a));
	t->na -= ai;
}

void jvm_join_run(struct jvm_join *j, uint64_t horizon_ns, uint64_t now_ns, bool final,
		  jvm_emit_fn emit, void *arg)
{
	size_t keep = 0;

	for (size_t i = 0; i < j->nq; i++)
		if (j->q[i].na || j->q[i].nb)
			join_tid(j, &j->q[i], horizon_ns, now_ns, final, emit, arg);
	for (size_t i = 0; i < j->nheld; i++) {
		struct held *h = &j->held[i];
		bool ready = names_ready(j, h->java, h->njava);

		if (ready || now_ns - h->created > j->o.name_wait_ns) {
			if (!ready)
				j->st.names_timed_out++;
			emit_rec(j, h->tid, &h->b, h->java, h->njava, NULL, true, emit, arg);
			held_free(h);
			j->pending--;
		} else {
			j->held[keep++] = *h;
		}
	}
	j->nheld = keep;
}

unsigned jvm_join_wanted(struct jvm_join *j, uint64_t *ids, unsigned max)
{
	unsigned n = j->nwanted < max ? (unsigned)j->nwanted : max;

	if (n == 0)
		return 0;  /* wanted may still be NULL, and NULL + 0 is undefined */
	move(ids, j->wanted, n * sizeof(uint64_t));
	move(j->wanted, j->wanted + n, (j->nwanted - n) * sizeof(uint64_t));
	j->nwanted -= n;
	return n;
}

size_t jvm_join_held(const struct jvm_join *j)
{
	return j->nheld;
}

void jvm_join_get_stats(const struct jvm_join *j, struct jvm_join_stats *out)
{
	*out = j->st;
}

void jvm_join_flush(struct jvm_join *j, jvm_emit_fn emit, void *arg)
{
	for (size_t i = 0; i < j->nheld; i++) {
		struct held *h = &j->held[i];

		if (!names_ready(j, h->java, h->njava))
			j->st.names_timed_out++;
		emit_rec(j, h->tid, &h->b, h->java, h->njava, NULL, true, emit, arg);
		held_free(h);
		j->pending--;
	}
	j->nheld = 0;
}
