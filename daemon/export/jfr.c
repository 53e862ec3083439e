/* One JFR chunk, laid out as
 *   header (68 bytes) | metadata event | checkpoint event | sample events
 * with ticks in nanoseconds of CLOCK_MONOTONIC, the clock of the store's
 * sample times, so a sample's time is its tick count. */
#include "jfr.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "jfr_enc.h"
#include "jfr_meta.h"
#include "jfr_pools.h"

#define JFR_HEADER_SIZE 68
#define JFR_TICKS_PER_SECOND 1000000000ULL
/* Chunk format 2.1 (JDK 14 and later); features: compressed integers
 * (bit 0) in a complete, final chunk (bit 1). */
#define JFR_MAJOR 2
#define JFR_MINOR 1
#define JFR_FEATURES 3
/* One kept time stands for values[0] samples (1 in a recording): events
 * per time at most, so a damaged count cannot blow the file up. */
#define JFR_MAX_EVENTS_PER_TIME 1000

struct jfr_sample {
	uint64_t time_ns;
	uint64_t count;
	uint32_t stack;
	uint32_t tid;
	size_t seq;          /* order added: ties keep it */
};

struct jfr_samples {
	struct jfr_sample *v;
	size_t n, cap;
};

static int jfr_collect(const struct store_time *t, void *arg)
{
	struct jfr_samples *s = arg;

	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 1024;
		struct jfr_sample *v = realloc(s->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n] = (struct jfr_sample){ t->time_ns, t->values ? t->values[0] : 1, t->stack, t->tid,
					  s->n };
	s->n++;
	return 0;
}

static int jfr_by_time(const void *a, const void *b)
{
	const struct jfr_sample *x = a, *y = b;

	if (x->time_ns != y->time_ns)
		return x->time_ns < y->time_ns ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The chunk's clock: its start in ticks (the earlier of the recording's
 * start and its first sample) and in wall-clock nanoseconds, and its length
 * (covering the last sample). */
struct jfr_clock {
	uint64_t start_ticks, start_unix_ns, duration_ns;
};

static struct jfr_clock jfr_clock(const struct export_meta *m, const struct jfr_samples *s)
{
	struct jfr_clock c = { m->start_mono_ns, m->start_unix_ns, m->duration_ns };

	if (s->n && (c.start_ticks == 0 || s->v[0].time_ns < c.start_ticks)) {
		uint64_t early = c.start_ticks ? c.start_ticks - s->v[0].time_ns : 0;

		c.start_ticks = s->v[0].time_ns;
		c.start_unix_ns = c.start_unix_ns > early ? c.start_unix_ns - early : 0;
		c.duration_ns += early;
	}
	if (s->n && s->v[s->n - 1].time_ns - c.start_ticks > c.duration_ns)
		c.duration_ns = s->v[s->n - 1].time_ns - c.start_ticks;
	return c;
}

static int jfr_write_samples(const struct export_job *job, struct jfr_pools *p,
			     const struct jfr_samples *s, struct buf *events)
{
	struct buf ev = BUF_INIT;
	int r = 0;

	for (size_t i = 0; r == 0 && i < s->n; i++) {
		const struct jfr_sample *x = &s->v[i];

		if (export_cancelled(job)) {
			r = -ECANCELED;
			break;
		}
		const struct store_stack *st = store_stack_get(p->st, x->stack);
		int64_t thread = st ? jfr_pools_thread(p, st->pid, x->tid) : -EINVAL;
		bool java = false;
		int64_t stack = thread < 0 ? thread : jfr_pools_stack(p, x->stack, &java);
		uint64_t n = x->count ? x->count : 1;

		if (stack < 0) {
			r = (int)stack;
			break;
		}
		buf_reset(&ev);
		/* startTime, sampledThread, stackTrace, state (metadata order) */
		r = jfr_put_varints(&ev, (uint64_t[]){ java ? JFR_EVENT_EXECUTION_SAMPLE : JFR_EVENT_NATIVE_SAMPLE,
						       x->time_ns, (uint64_t)thread, (uint64_t)stack,
						       JFR_STATE_RUNNABLE }, 5);
		for (uint64_t k = 0; r == 0 && k < n && k < JFR_MAX_EVENTS_PER_TIME; k++)
			r = jfr_put_sized(events, &ev);
	}
	buf_release(&ev);
	return r;
}

/* The "truncated at N samples" marker: a jprofd.RecordingTruncated event
 * at the time of the last kept sample. */
static int jfr_write_truncated(const struct store_totals *tot, uint64_t when, struct buf *events)
{
	struct buf ev = BUF_INIT, msg = BUF_INIT;
	int r = buf_printf(&msg, "truncated at %llu samples: the times of %llu more samples were not kept",
			   (unsigned long long)tot->times, (unsigned long long)tot->times_dropped);

	if (r == 0)
		r = jfr_put_varints(&ev, (uint64_t[]){ JFR_EVENT_TRUNCATED, when }, 2);
	if (r == 0)
		r = jfr_put_string_n(&ev, msg.data, msg.len);
	if (r == 0)
		r = jfr_put_varints(&ev, (uint64_t[]){ tot->times, tot->times_dropped }, 2);
	if (r == 0)
		r = jfr_put_sized(events, &ev);
	buf_release(&ev);
	buf_release(&msg);
	return r;
}

static int jfr_header(struct buf *out)
{
	static const char head[8] = { 'F', 'L', 'R', '\0', 0, JFR_MAJOR, 0, JFR_MINOR };
	char zero[JFR_HEADER_SIZE - 8] = { 0 };
	int r = buf_append(out, head, sizeof(head));

	if (r == 0)
		r = buf_append(out, zero, sizeof(zero));
	return r;
}

int jfr_render(const struct export_job *job, struct buf *out)
{
	struct jfr_samples s = { NULL, 0, 0 };
	struct jfr_pools p;
	struct buf events = BUF_INIT;
	struct store_totals tot;
	struct jfr_clock clk;
	size_t base = out->len, meta_at, pool_at;
	int r;

	r = jfr_pools_init(&p, job->st);
	if (r < 0)
		return r;
	r = store_foreach_time(job->st, jfr_collect, &s);
	if (r < 0)
		goto out;
	if (s.n)
		qsort(s.v, s.n, sizeof(*s.v), jfr_by_time);
	clk = jfr_clock(job->meta, &s);
	store_get_totals(job->st, &tot);
	/* Events first, into their own buffer: they fill the pools. */
	r = jfr_write_samples(job, &p, &s, &events);
	if (r == 0 && tot.times_dropped)
		r = jfr_write_truncated(&tot, s.n ? s.v[s.n - 1].time_ns : clk.start_ticks, &events);
	if (r == 0)
		r = jfr_header(out);
	meta_at = out->len - base;
	if (r == 0)
		r = jfr_meta_write(out, clk.start_ticks);
	pool_at = out->len - base;
	if (r == 0)
		r = jfr_pools_write(&p, out, clk.start_ticks);
	if (r == 0)
		r = buf_append(out, events.data, events.len);
	if (r < 0)
		goto out;
	/* Header: size, constant pool and metadata offsets, start (wall ns),
	 * duration, start ticks, ticks per second, features. */
	jfr_patch_u64(out, base + 8, out->len - base);
	jfr_patch_u64(out, base + 16, pool_at);
	jfr_patch_u64(out, base + 24, meta_at);
	jfr_patch_u64(out, base + 32, clk.start_unix_ns);
	jfr_patch_u64(out, base + 40, clk.duration_ns);
	jfr_patch_u64(out, base + 48, clk.start_ticks);
	jfr_patch_u64(out, base + 56, JFR_TICKS_PER_SECOND);
	out->data[base + 67] = JFR_FEATURES;
out:
	free(s.v);
	buf_release(&events);
	jfr_pools_release(&p);
	return r;
}
