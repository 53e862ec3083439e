#include "timeline.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Both formats come from one model: the kept sample times sorted per thread,
 * walked as a flame chart. A sample at t stands for [t, t + count *
 * interval). While a thread's samples follow each other (the next one starts
 * no later than tl_join_gap after the current one ends), the frames two
 * consecutive samples share from the root stay one open slice and the
 * current sample ends where the next begins; a longer gap (the thread
 * blocked, or was not sampled) ends every open slice where the last sample
 * ends. Times are relative to the recording's start (see timeline_base). */

/* One kept sample. */
struct tl_sample {
	uint64_t time_ns;
	uint64_t count;     /* values[0]: how many samples the record stands for */
	uint32_t stack;
	uint32_t pid, tid;
	uint32_t seq;       /* order added, for a stable sort */
};

struct tl_thread {
	uint32_t pid, tid;
	size_t first, n;    /* its samples in tl_model.s */
};

struct tl_model {
	const struct store *st;
	struct tl_sample *s;
	size_t ns;
	struct tl_thread *th;
	size_t nth;
	uint64_t base_ns;      /* the time 0 of the output (CLOCK_MONOTONIC) */
	uint64_t interval_ns;  /* what one sample stands for */
	uint64_t end_ns;       /* the latest slice end, relative to base_ns */
	uint32_t no_stack;     /* frame id used for a stack without frames */
	struct store_totals totals;
};

/* A slice being built: one frame of the open stack. */
struct tl_open {
	uint32_t frame;
	uint64_t start;
	uint64_t samples;
};

/* What a format does with the walk of one thread, in time order (open may
 * be NULL). */
struct tl_walk_ops {
	int (*open)(void *arg, const struct tl_thread *th, uint32_t frame, uint64_t at);
	int (*close)(void *arg, const struct tl_thread *th, const struct tl_open *o, uint32_t depth,
		     uint64_t at);
};

/* Frame names rendered once, each as a JSON string literal. */
struct tl_names {
	struct buf text;
	size_t *off;          /* frame id -> offset in text; [no_stack + 1] = end */
};

static const uint64_t tl_default_interval_ns = 1000000;
/* A CPU sample comes after each interval of the thread's CPU time, so a
 * thread that only waited for a CPU (preempted on a busy machine) shows a
 * wall-clock gap that is not a pause of its code. Gaps up to this long are
 * read as such a wait: a few of the scheduler's time slices at a load of a
 * few runnable threads per CPU. */
static const uint64_t tl_min_join_gap_ns = 20000000;

/* How long after a sample's end the next one may start and still continue
 * its slices: two intervals, and at least tl_min_join_gap_ns. */
static uint64_t tl_join_gap(const struct tl_model *m)
{
	uint64_t two = 2 * m->interval_ns;

	return two > tl_min_join_gap_ns ? two : tl_min_join_gap_ns;
}

static int tl_cmp_sample(const void *a, const void *b)
{
	const struct tl_sample *x = a, *y = b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	if (x->tid != y->tid)
		return x->tid < y->tid ? -1 : 1;
	if (x->time_ns != y->time_ns)
		return x->time_ns < y->time_ns ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

struct tl_collect {
	struct tl_model *m;
	size_t cap;
};

static int tl_collect_time(const struct store_time *t, void *arg)
{
	struct tl_collect *c = arg;
	const struct store_stack *stk = store_stack_get(c->m->st, t->stack);
	struct tl_sample *s;

	if (!stk)
		return 0;
	if (c->m->ns == c->cap)
		return -ERANGE;  /* more times than the totals said: a store bug */
	s = &c->m->s[c->m->ns];
	s->time_ns = t->time_ns;
	s->count = t->values[0] ? t->values[0] : 1;
	s->stack = t->stack;
	s->pid = stk->pid;
	s->tid = t->tid;
	s->seq = (uint32_t)c->m->ns;
	c->m->ns++;
	return 0;
}

/* The output's time 0: the recording's start when known and not after the
 * first sample, else the first sample. */
static void timeline_base(struct tl_model *m, const struct export_meta *meta)
{
	uint64_t first = UINT64_MAX;

	for (size_t i = 0; i < m->ns; i++)
		if (m->s[i].time_ns < first)
			first = m->s[i].time_ns;
	if (meta->start_mono_ns && meta->start_mono_ns <= first)
		m->base_ns = meta->start_mono_ns;
	else
		m->base_ns = m->ns ? first : 0;
}

/* The interval when the profile has none in nanoseconds: the smallest gap
 * between two samples of a thread, or 1 ms. */
static uint64_t timeline_guess_interval(const struct tl_model *m)
{
	uint64_t best = UINT64_MAX, gap;

	for (size_t i = 1; i < m->ns; i++) {
		if (m->s[i].pid != m->s[i - 1].pid || m->s[i].tid != m->s[i - 1].tid)
			continue;
		gap = m->s[i].time_ns - m->s[i - 1].time_ns;
		if (gap && gap < best)
			best = gap;
	}
	return best == UINT64_MAX ? tl_default_interval_ns : best;
}

static void timeline_model_free(struct tl_model *m)
{
	free(m->s);
	free(m->th);
}

static int timeline_model_build(struct tl_model *m, const struct export_job *job)
{
	struct tl_collect c = { m, 0 };
	int r = 0;

	memset(m, 0, sizeof(*m));
	m->st = job->st;
	m->no_stack = (uint32_t)store_frame_count(job->st);
	store_get_totals(job->st, &m->totals);
	c.cap = m->totals.times;
	if (c.cap) {
		m->s = calloc(c.cap, sizeof(*m->s));
		m->th = calloc(c.cap, sizeof(*m->th));
		if (!m->s || !m->th) {
			r = -ENOMEM;
			goto out;
		}
		r = store_foreach_time(job->st, tl_collect_time, &c);
		if (r < 0)
			goto out;
	}
	if (m->ns)  /* qsort must not get NULL, even for 0 elements */
		qsort(m->s, m->ns, sizeof(*m->s), tl_cmp_sample);
	for (size_t i = 0; i < m->ns; i++) {
		if (!i || m->s[i].pid != m->s[i - 1].pid || m->s[i].tid != m->s[i - 1].tid) {
			m->th[m->nth].pid = m->s[i].pid;
			m->th[m->nth].tid = m->s[i].tid;
			m->th[m->nth].first = i;
			m->nth++;
		}
		m->th[m->nth - 1].n++;
	}
	timeline_base(m, job->meta);
	m->interval_ns = export_interval_ns(job->meta);
	if (!m->interval_ns)
		m->interval_ns = timeline_guess_interval(m);
	r = 0;
out:
	if (r < 0)
		timeline_model_free(m);
	return r;
}

/* Frame i of a sample's stack (root first); a stack without frames is the
 * single no-stack frame. */
static uint32_t tl_frame_at(const struct tl_model *m, const struct store_stack *stk, size_t i)
{
	return stk->nframes ? stk->frames[i] : m->no_stack;
}

static size_t tl_depth(const struct store_stack *stk)
{
	return stk->nframes ? stk->nframes : 1;
}

static int tl_close_to(const struct tl_walk_ops *ops, void *arg, const struct tl_thread *th,
		       struct tl_open *open, size_t *nopen, size_t keep, uint64_t at)
{
	int r = 0;

	while (r == 0 && *nopen > keep) {
		(*nopen)--;
		r = ops->close(arg, th, &open[*nopen], (uint32_t)*nopen, at);
	}
	return r;
}

/* Walks one thread's samples as a flame chart (see the top of the file). */
static int timeline_walk(struct tl_model *m, const struct tl_thread *th,
			 const struct tl_walk_ops *ops, void *arg)
{
	struct tl_open *open = NULL, *grown;
	size_t nopen = 0, cap = 0, keep, depth, i, j;
	uint64_t t, prev_end = 0, join = tl_join_gap(m);
	int r = 0;

	for (i = th->first; i < th->first + th->n; i++) {
		const struct tl_sample *s = &m->s[i];
		const struct store_stack *stk = store_stack_get(m->st, s->stack);
		uint64_t close_at;

		t = s->time_ns - m->base_ns;
		depth = tl_depth(stk);
		keep = 0;
		close_at = prev_end;
		if (i > th->first && t <= prev_end + join) {
			while (keep < nopen && keep < depth && open[keep].frame == tl_frame_at(m, stk, keep))
				keep++;
			close_at = t;
		}
		r = tl_close_to(ops, arg, th, open, &nopen, keep, close_at);
		if (r < 0)
			goto out;
		if (depth > cap) {
			grown = realloc(open, depth * sizeof(*open));
			if (!grown) {
				r = -ENOMEM;
				goto out;
			}
			open = grown;
			cap = depth;
		}
		for (j = keep; j < depth; j++) {
			open[j] = (struct tl_open){ tl_frame_at(m, stk, j), t, 0 };
			r = ops->open ? ops->open(arg, th, open[j].frame, t) : 0;
			if (r < 0)
				goto out;
		}
		nopen = depth;
		for (j = 0; j < nopen; j++)
			open[j].samples += s->count;
		prev_end = t + s->count * m->interval_ns;
	}
	r = tl_close_to(ops, arg, th, open, &nopen, 0, prev_end);
	if (prev_end > m->end_ns)
		m->end_ns = prev_end;
out:
	free(open);
	return r;
}

static void timeline_names_free(struct tl_names *n)
{
	buf_release(&n->text);
	free(n->off);
}

/* Every frame's display name (flags: export_frame_name's) as a JSON string,
 * plus the no-stack frame. */
static int timeline_names_build(struct tl_names *n, const struct tl_model *m, unsigned flags)
{
	struct buf tmp = BUF_INIT;
	int r = 0;

	n->text = (struct buf)BUF_INIT;
	n->off = malloc((m->no_stack + 2) * sizeof(*n->off));
	if (!n->off) {
		r = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < m->no_stack; i++) {
		buf_reset(&tmp);
		r = export_frame_name(store_frame_get(m->st, i), flags, &tmp);
		n->off[i] = n->text.len;
		if (r == 0)
			r = export_json_string(&n->text, tmp.data ? tmp.data : "");
		if (r < 0)
			goto out;
	}
	n->off[m->no_stack] = n->text.len;
	r = export_json_string(&n->text, EXPORT_NO_STACK);
	n->off[m->no_stack + 1] = n->text.len;
out:
	buf_release(&tmp);
	if (r < 0)
		timeline_names_free(n);
	return r;
}

static int timeline_put_name(struct buf *out, const struct tl_names *n, uint32_t frame)
{
	return buf_append(out, n->text.data + n->off[frame], n->off[frame + 1] - n->off[frame]);
}

/* "<thread name> tid=<tid>", or "tid=<tid>" when unnamed: the track's and
 * the profile's name, as a JSON string; suffix (may be NULL) appended. */
static int timeline_thread_label(struct buf *out, const struct store *st, uint32_t pid,
				 uint32_t tid, const char *suffix)
{
	const char *name = store_thread_name(st, pid, tid);
	struct buf tmp = BUF_INIT;
	int r = 0;

	if (name && *name) {
		r = export_text(name, 0, &tmp);
		if (r == 0)
			r = buf_putc(&tmp, ' ');
	}
	if (r == 0)
		r = buf_puts(&tmp, "tid=");
	if (r == 0)
		r = export_put_u64(&tmp, tid);
	if (r == 0 && suffix)
		r = buf_puts(&tmp, suffix);
	if (r == 0)
		r = export_json_string(out, tmp.data);
	buf_release(&tmp);
	return r;
}

/* " [truncated at N samples]" when times were dropped, else nothing. */
static int timeline_truncated_text(const struct tl_model *m, struct buf *out)
{
	if (!m->totals.times_dropped)
		return 0;
	return buf_printf(out, " [truncated at %llu samples]", (unsigned long long)m->totals.times);
}

/* Nanoseconds as microseconds with three decimals: exact, and the unit of
 * the Trace Event format's ts and dur. */
static int timeline_put_us(struct buf *out, uint64_t ns)
{
	char frac[4] = { '.', (char)('0' + ns / 100 % 10), (char)('0' + ns / 10 % 10),
			 (char)('0' + ns % 10) };
	int r = export_put_u64(out, ns / 1000);

	return r < 0 ? r : buf_append(out, frac, sizeof(frac));
}

/* ---- Trace Event JSON -------------------------------------------------------- */

struct tl_slice {
	uint64_t start, end, samples;
	uint32_t frame;
	uint32_t thread;   /* index in tl_model.th */
	uint32_t depth;
};

struct tl_trace {
	struct tl_model *m;
	struct tl_slice *v;
	size_t n, cap;
};

static int tl_trace_close(void *arg, const struct tl_thread *th, const struct tl_open *o,
			  uint32_t depth, uint64_t at)
{
	struct tl_trace *tr = arg;
	struct tl_slice *grown;
	size_t cap;

	if (tr->n == tr->cap) {
		cap = tr->cap ? tr->cap * 2 : 1024;
		grown = realloc(tr->v, cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		tr->v = grown;
		tr->cap = cap;
	}
	tr->v[tr->n++] = (struct tl_slice){ o->start, at, o->samples, o->frame,
					    (uint32_t)(th - tr->m->th), depth };
	return 0;
}

/* Time order; at one time a thread's outer slice first, and of two slices
 * at one depth the one that ends first (a zero-length one). */
static int tl_cmp_slice(const void *a, const void *b)
{
	const struct tl_slice *x = a, *y = b;

	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	if (x->thread != y->thread)
		return x->thread < y->thread ? -1 : 1;
	if (x->depth != y->depth)
		return x->depth < y->depth ? -1 : 1;
	return x->end < y->end ? -1 : x->end > y->end;
}

/* Opens the next element of the event array: one event per line. */
static int timeline_trace_next(struct buf *out, bool *first)
{
	int r = buf_puts(out, *first ? "\n{" : ",\n{");

	*first = false;
	return r;
}

/* {"name":"process_name"|"thread_name","ph":"M","pid":P,"tid":T,"args":{"name":
 * — the caller writes the name and closes with "}}". */
static int timeline_trace_meta_head(struct buf *out, bool *first, const char *what, uint32_t pid,
				    uint32_t tid)
{
	int r = timeline_trace_next(out, first);

	if (r == 0)
		r = buf_puts(out, "\"name\":\"");

	if (r == 0)
		r = buf_puts(out, what);
	if (r == 0)
		r = buf_puts(out, "\",\"ph\":\"M\"");
	if (r == 0)
		r = export_json_u64(out, "pid", pid, false);
	if (r == 0)
		r = export_json_u64(out, "tid", tid, false);
	if (r == 0)
		r = buf_puts(out, ",\"args\":{\"name\":");
	return r;
}

static int timeline_trace_process(struct buf *out, bool *first, const struct store *st,
				  uint32_t pid)
{
	const char *comm = store_process_name(st, pid);
	struct buf tmp = BUF_INIT;
	int r = timeline_trace_meta_head(out, first, "process_name", pid, pid);

	if (r == 0)
		r = comm && *comm ? export_text(comm, 0, &tmp) : buf_printf(&tmp, "pid %u", pid);
	if (r == 0)
		r = export_json_string(out, tmp.data);
	if (r == 0)
		r = buf_puts(out, "}}");
	buf_release(&tmp);
	return r;
}

/* The metadata events: one process_name per process, one thread_name per
 * thread. */
static int timeline_trace_names(struct buf *out, bool *first, const struct tl_model *m,
				uint32_t meta_pid)
{
	int r = 0;

	if (!m->nth && meta_pid)
		r = timeline_trace_process(out, first, m->st, meta_pid);
	for (size_t i = 0; r == 0 && i < m->nth; i++) {
		const struct tl_thread *th = &m->th[i];

		if (!i || th->pid != m->th[i - 1].pid)
			r = timeline_trace_process(out, first, m->st, th->pid);
		if (r == 0)
			r = timeline_trace_meta_head(out, first, "thread_name", th->pid, th->tid);
		if (r == 0)
			r = timeline_thread_label(out, m->st, th->pid, th->tid, NULL);
		if (r == 0)
			r = buf_puts(out, "}}");
	}
	return r;
}

static int timeline_trace_slice(struct buf *out, bool *first, const struct tl_model *m,
				const struct tl_names *names, const struct tl_slice *sl)
{
	const struct tl_thread *th = &m->th[sl->thread];
	const struct store_frame *f = store_frame_get(m->st, sl->frame);
	int r = timeline_trace_next(out, first);

	if (r == 0)
		r = buf_puts(out, "\"ph\":\"X\",\"name\":");
	if (r == 0)
		r = timeline_put_name(out, names, sl->frame);
	if (r == 0)
		r = export_json_strfield(out, "cat", f ? frame_kind_name(f->kind) : "marker", false);
	if (r == 0)
		r = export_json_key(out, "ts", false);
	if (r == 0)
		r = timeline_put_us(out, sl->start);
	if (r == 0)
		r = export_json_key(out, "dur", false);
	if (r == 0)
		r = timeline_put_us(out, sl->end - sl->start);
	if (r == 0)
		r = export_json_u64(out, "pid", th->pid, false);
	if (r == 0)
		r = export_json_u64(out, "tid", th->tid, false);
	if (r == 0)
		r = buf_puts(out, ",\"args\":{");
	if (r == 0)
		r = export_json_u64(out, "samples", sl->samples, true);
	if (r == 0)
		r = buf_puts(out, "}}");
	return r;
}

/* The global instant event that marks the end of the kept samples. */
static int timeline_trace_truncated(struct buf *out, bool *first, const struct tl_model *m,
				    uint32_t pid)
{
	struct buf name = BUF_INIT;
	int r = buf_printf(&name, "truncated at %llu samples", (unsigned long long)m->totals.times);

	if (r == 0)
		r = timeline_trace_next(out, first);
	if (r == 0)
		r = buf_puts(out, "\"ph\":\"i\",\"s\":\"g\",\"name\":");
	if (r == 0)
		r = export_json_string(out, name.data);
	if (r == 0)
		r = export_json_strfield(out, "cat", "jprofd", false);
	if (r == 0)
		r = export_json_key(out, "ts", false);
	if (r == 0)
		r = timeline_put_us(out, m->end_ns);
	if (r == 0)
		r = export_json_u64(out, "pid", pid, false);
	if (r == 0)
		r = export_json_u64(out, "tid", 0, false);
	if (r == 0)
		r = buf_puts(out, ",\"args\":{");
	if (r == 0)
		r = export_json_u64(out, "samples_kept", m->totals.times, true);
	if (r == 0)
		r = export_json_u64(out, "samples_dropped", m->totals.times_dropped, false);
	if (r == 0)
		r = buf_puts(out, "}}");
	buf_release(&name);
	return r;
}

/* "otherData": what the recording was (chrome://tracing shows it as the
 * trace's metadata). */
static int timeline_trace_other(struct buf *out, const struct tl_model *m,
				const struct export_meta *meta)
{
	int r = buf_puts(out, "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{");

	if (r == 0)
		r = export_json_strfield(out, "format", "jprofd-timeline", true);
	if (r == 0)
		r = export_json_u64(out, "version", 1, false);
	if (r == 0)
		r = buf_putc(out, ',');
	if (r == 0)
		r = export_json_meta(out, meta);
	if (r == 0)
		r = export_json_u64(out, "ts_zero_mono_ns", m->base_ns, false);
	if (r == 0)
		r = export_json_u64(out, "samples", m->totals.times, false);
	if (r == 0)
		r = export_json_u64(out, "samples_dropped", m->totals.times_dropped, false);
	if (r == 0)
		r = export_json_key(out, "truncated", false);
	if (r == 0)
		r = buf_puts(out, m->totals.times_dropped ? "true" : "false");
	if (r == 0 && m->totals.times_dropped)
		r = export_json_u64(out, "truncated_at", m->totals.times, false);
	if (r == 0)
		r = buf_puts(out, "}}\n");
	return r;
}

int timeline_render_trace(const struct export_job *job, struct buf *out)
{
	/* A slice is written whole, when it closes. */
	static const struct tl_walk_ops ops = { NULL, tl_trace_close };
	struct tl_model m;
	struct tl_trace tr = { &m, NULL, 0, 0 };
	struct tl_names names = { BUF_INIT, NULL };
	bool first = true;
	uint32_t pid;
	size_t i;
	int r;

	r = timeline_model_build(&m, job);
	if (r < 0)
		return r;
	r = timeline_names_build(&names, &m, 0);
	if (r < 0)
		goto out;
	for (i = 0; i < m.nth; i++) {
		r = timeline_walk(&m, &m.th[i], &ops, &tr);
		if (r < 0)
			goto out;
	}
	if (tr.n)
		qsort(tr.v, tr.n, sizeof(*tr.v), tl_cmp_slice);
	pid = m.nth ? m.th[0].pid : job->meta->pid;
	r = buf_puts(out, "{\"traceEvents\":[");
	if (r == 0)
		r = timeline_trace_names(out, &first, &m, job->meta->pid);
	for (i = 0; r == 0 && i < tr.n; i++)
		r = timeline_trace_slice(out, &first, &m, &names, &tr.v[i]);
	if (r == 0 && m.totals.times_dropped)
		r = timeline_trace_truncated(out, &first, &m, pid);
	if (r == 0)
		r = timeline_trace_other(out, &m, job->meta);
out:
	free(tr.v);
	timeline_names_free(&names);
	timeline_model_free(&m);
	return r;
}

/* ---- speedscope ----------------------------------------------------------------- */

struct tl_scope {
	struct buf *out;
	bool first;        /* no event written yet in this profile */
};

static int tl_scope_event(struct tl_scope *sc, char type, uint32_t frame, uint64_t at)
{
	char head[] = "{\"type\":\"O\"";
	int r;

	head[9] = type;
	r = buf_puts(sc->out, sc->first ? "\n" : ",\n");
	sc->first = false;
	if (r == 0)
		r = buf_puts(sc->out, head);
	if (r == 0)
		r = export_json_u64(sc->out, "frame", frame, false);
	if (r == 0)
		r = export_json_u64(sc->out, "at", at, false);
	if (r == 0)
		r = buf_putc(sc->out, '}');
	return r;
}

static int tl_scope_open(void *arg, const struct tl_thread *th, uint32_t frame, uint64_t at)
{
	(void)th;
	return tl_scope_event(arg, 'O', frame, at);
}

static int tl_scope_close(void *arg, const struct tl_thread *th, const struct tl_open *o,
			  uint32_t depth, uint64_t at)
{
	(void)th;
	(void)depth;
	return tl_scope_event(arg, 'C', o->frame, at);
}

/* One evented profile's head, up to and including "events":[. */
static int timeline_scope_head(struct buf *out, bool first, uint64_t end)
{
	int r = buf_puts(out, first ? "\n{\"type\":\"evented\"" : ",\n{\"type\":\"evented\"");

	if (r == 0)
		r = export_json_strfield(out, "unit", "nanoseconds", false);
	if (r == 0)
		r = export_json_u64(out, "startValue", 0, false);
	if (r == 0)
		r = export_json_u64(out, "endValue", end, false);
	if (r == 0)
		r = export_json_key(out, "name", false);
	return r;
}

/* The file's head: schema, name, the active profile (the thread with the
 * most samples) and the shared frames. */
static int timeline_scope_file(struct buf *out, const struct tl_model *m,
			       const struct tl_names *names, const struct export_meta *meta,
			       const char *trunc)
{
	struct buf title = BUF_INIT;
	size_t active = 0;
	int r;

	for (size_t i = 1; i < m->nth; i++)
		if (m->th[i].n > m->th[active].n)
			active = i;
	r = export_target_text(meta, &title);
	if (r == 0)
		r = buf_puts(&title, trunc);
	if (r == 0)
		r = buf_puts(out, "{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\"");
	if (r == 0)
		r = export_json_strfield(out, "exporter", "jprofd " JPROF_VERSION, false);
	if (r == 0)
		r = export_json_strfield(out, "name", title.data, false);
	if (r == 0)
		r = export_json_u64(out, "activeProfileIndex", active, false);
	if (r == 0)
		r = buf_puts(out, ",\"shared\":{\"frames\":[");
	for (uint32_t i = 0; r == 0 && i <= m->no_stack; i++) {
		r = buf_puts(out, i ? ",\n{\"name\":" : "\n{\"name\":");
		if (r == 0)
			r = timeline_put_name(out, names, i);
		if (r == 0)
			r = buf_putc(out, '}');
	}
	if (r == 0)
		r = buf_puts(out, "]},\"profiles\":[");
	buf_release(&title);
	return r;
}

int timeline_render_speedscope(const struct export_job *job, struct buf *out)
{
	static const struct tl_walk_ops ops = { tl_scope_open, tl_scope_close };
	struct tl_names names = { BUF_INIT, NULL };
	struct buf trunc = BUF_INIT, events = BUF_INIT, title = BUF_INIT;
	struct tl_scope sc = { &events, true };
	const char *cut;
	size_t *evoff = NULL;   /* thread i's events: events.data[evoff[i] .. evoff[i + 1]) */
	struct tl_model m;
	size_t i;
	int r;

	r = timeline_model_build(&m, job);
	if (r < 0)
		return r;
	/* Speedscope has no field for a frame's kind: names carry collapsed's
	 * suffixes, as in the folded stacks speedscope also reads. */
	r = timeline_names_build(&names, &m, EXPORT_NAME_SUFFIX | EXPORT_NAME_JAVA_SUFFIX);
	if (r == 0)
		r = timeline_truncated_text(&m, &trunc);
	if (r < 0)
		goto out;
	cut = trunc.data ? trunc.data : "";
	evoff = calloc(m.nth + 1, sizeof(*evoff));
	if (!evoff) {
		r = -ENOMEM;
		goto out;
	}
	/* Events first: the walk finds the end every profile shares. */
	for (i = 0; i < m.nth; i++) {
		sc.first = true;
		r = timeline_walk(&m, &m.th[i], &ops, &sc);
		if (r < 0)
			goto out;
		evoff[i + 1] = events.len;
	}
	r = timeline_scope_file(out, &m, &names, job->meta, cut);
	for (i = 0; r == 0 && i < m.nth; i++) {
		r = timeline_scope_head(out, i == 0, m.end_ns);
		if (r == 0)
			r = timeline_thread_label(out, m.st, m.th[i].pid, m.th[i].tid, cut);
		if (r == 0)
			r = buf_puts(out, ",\"events\":[");
		if (r == 0 && evoff[i + 1] > evoff[i])
			r = buf_append(out, events.data + evoff[i], evoff[i + 1] - evoff[i]);
		if (r == 0)
			r = buf_puts(out, "\n]}");
	}
	if (r == 0 && !m.nth) {
		/* Speedscope needs a profile to show: an empty one that says so. */
		r = export_target_text(job->meta, &title);
		if (r == 0)
			r = buf_puts(&title, ": no samples");
		if (r == 0)
			r = timeline_scope_head(out, true, 0);
		if (r == 0)
			r = export_json_string(out, title.data);
		if (r == 0)
			r = buf_puts(out, ",\"events\":[]}");
	}
	if (r == 0)
		r = buf_puts(out, "\n]}\n");
out:
	free(evoff);
	buf_release(&trunc);
	buf_release(&events);
	buf_release(&title);
	timeline_names_free(&names);
	timeline_model_free(&m);
	return r;
}
