#include "pipeline.h"

#include <errno.h>
#include <sys/epoll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "builder.h"
#include "clock.h"
#include "jprof_agent.h"
#include "jvmjoin.h"
#include "log.h"
#include "loop.h"
#include "procinfo.h"
#include "sampler.h"
#include "symbols.h"
#include <linux/types.h>
#include "bpf/sampler.h"

#define PIPELINE_MAX_TICKS 8
#define SYMBOLS_EXPIRE_EVERY 2         /* drains */
#define SYMBOLS_IDLE_S 60

struct pipeline_source {
	struct pipeline *p;
	struct pipeline_source *next;
	uint32_t id;
	struct pipeline_source_config cfg;
	struct jvm_join *join;
	uint32_t jvm_pid;
	uint64_t jvm_start_ns;     /* of the BPF records joined: the recorded process's */
	uint64_t jvm_period_ns;
	bool java_expected;        /* pipeline_source_expect_java */
};

struct pipeline_tick {
	void (*fn)(void *arg, uint64_t now_ns);
	void *arg;
};

struct pipeline {
	struct loop *loop;
	struct symbols *sym;
	struct sampler *sampler;
	struct procinfo *pi;
	struct builder *builder;
	struct pipeline_config cfg;
	struct loop_source *drain_timer;
	struct loop_source *drained_src;  /* the sampler's grace period is over */
	struct pipeline_consumer host;
	struct pipeline_source *sources;
	uint32_t next_id;
	struct pipeline_tick ticks[PIPELINE_MAX_TICKS];
	unsigned nticks;
	uint64_t drains;
};

static struct pipeline_source *find_source(const struct pipeline *p, uint32_t id)
{
	for (struct pipeline_source *s = p->sources; s; s = s->next)
		if (s->id == id)
			return s;
	return NULL;
}

/* One built sample to its consumer and, when it stands for its thread in the
 * host view, to the host consumer too. */
static void deliver(struct pipeline *p, const struct pipeline_source *src,
		    const struct built_sample *bs, bool host_feed)
{
	if (src && src->cfg.consumer.sample)
		src->cfg.consumer.sample(bs, src->cfg.consumer.arg);
	if ((!src || host_feed) && p->host.sample)
		p->host.sample(bs, p->host.arg);
}

/* The JVM agent's own thread (jprofd's work inside the JVM: its socket,
 * naming methods, the scan of loaded classes when it arrives) is not the
 * recorded program's: left out of recordings, still counted in the host
 * view. Known by the name it gives itself first thing (a Java thread the
 * program names so would be left out too). */
static bool agent_thread(const struct raw_sample *rs)
{
	return rs->thread_comm && strcmp(rs->thread_comm, JPAG_AGENT_THREAD_NAME) == 0;
}

void pipeline_on_sample(const struct raw_sample *rs, void *arg)
{
	struct pipeline *p = arg;
	struct pipeline_source *src = NULL;
	struct builder_opts o = { 0 };
	struct built_sample bs;

	if (!rs->pid || !rs->values[0])
		return;  /* idle is counted by the collector, never stored */
	if (rs->source != JP_SRC_HOST && agent_thread(rs)) {
		if (rs->host_feed && p->host.sample && builder_build(p->builder, rs, &o, &bs) == 0)
			deliver(p, NULL, &bs, true);
		return;
	}
	if (rs->source != JP_SRC_HOST) {
		src = find_source(p, rs->source);
		if (!src)
			return;  /* a recording that has just ended */
		if (rs->time_ns && rs->agent && src->join) {
			src->jvm_start_ns = rs->start_ns;
			jvm_join_add_bpf(src->join, rs->tid, rs->time_ns, rs->kips, rs->nk, rs->uips,
					 rs->nu, rs->kernel_mode, rs->kstack_lost, rs->ustack_lost,
					 rs->host_feed);
			return;
		}
		if (rs->time_ns && (rs->agent || !src->cfg.per_sample))
			return;  /* per-sample records belong to a join that is gone */
		o.process_root = src->cfg.process_root;
		o.thread_state = src->cfg.thread_state;
		/* An agent is coming or bound, but this thread's event is not
		 * its yet. Not after the agent failed (java_fail clears it): the
		 * recording is a native one, JIT code shown as such, although a
		 * join made for the agent may still hold samples taken before. */
		o.java_unarmed = src->java_expected;
	} else if (!p->host.sample) {
		return;
	}
	if (builder_build(p->builder, rs, &o, &bs) < 0)
		return;
	/* A whole-host recording's own per-CPU events never feed the host view. */
	deliver(p, src, &bs, rs->host_feed && !o.process_root);
}


_Static_assert(JVM_EVENT_VALUES == EVENT_MAX_VALUES, "agent event values and event values differ");

static void on_jvm_sample(const struct jvm_sample *js, void *arg)
{
	struct pipeline_source *src = arg;
	struct pipeline *p = src->p;
	const struct event_info *ev = event_get(js->values ? (enum event_id)js->event : EVENT_CPU);
	uint64_t values[EVENT_MAX_VALUES];
	struct built_sample bs;

	if (!ev)
		return;
	/* Agent events carry their own values; CPU samples weigh a period. */
	if (js->values)
		memcpy(values, js->values, sizeof(values));
	else
		event_values_periodic(ev, 1, src->jvm_period_ns, values);
	if (builder_build_jvm(p->builder, src->jvm_pid, src->jvm_start_ns, src->join, js, ev, values,
			      &bs) < 0)
		return;
	deliver(p, src, &bs, js->host_feed);
}

void pipeline_source_expect_java(struct pipeline_source *src, bool on)
{
	if (src)
		src->java_expected = on;
}

void pipeline_source_set_join(struct pipeline_source *src, struct jvm_join *j, uint32_t pid,
			      uint64_t period_ns)
{
	src->join = j;
	src->jvm_pid = pid;
	src->jvm_period_ns = period_ns;
}

void pipeline_source_join_run(struct pipeline_source *src, uint64_t horizon_ns, bool final)
{
	if (src && src->join)
		jvm_join_run(src->join, horizon_ns, clock_mono_ns(), final, on_jvm_sample, src);
}

bool pipeline_source_join_run_some(struct pipeline_source *src, uint64_t horizon_ns, bool final,
				   size_t max)
{
	if (!src || !src->join)
		return false;
	return jvm_join_run_some(src->join, horizon_ns, clock_mono_ns(), final, max, on_jvm_sample,
				 src);
}

void pipeline_source_join_flush(struct pipeline_source *src)
{
	if (src && src->join)
		jvm_join_flush(src->join, on_jvm_sample, src);
}

int pipeline_source_open(struct pipeline *p, const struct pipeline_source_config *cfg,
			 struct pipeline_source **out)
{
	struct pipeline_source *src = calloc(1, sizeof(*src));

	*out = NULL;
	if (!src)
		return -ENOMEM;
	do {
		src->id = ++p->next_id;
	} while (src->id == JP_SRC_HOST || find_source(p, src->id));
	src->p = p;
	src->cfg = *cfg;
	src->next = p->sources;
	p->sources = src;
	*out = src;
	return 0;
}

void pipeline_source_close(struct pipeline_source *src)
{
	struct pipeline_source **pp;

	if (!src)
		return;
	for (pp = &src->p->sources; *pp; pp = &(*pp)->next) {
		if (*pp == src) {
			*pp = src->next;
			break;
		}
	}
	free(src);
}

uint32_t pipeline_source_id(const struct pipeline_source *src)
{
	return src->id;
}

void pipeline_set_host(struct pipeline *p, const struct pipeline_consumer *c)
{
	p->host = c ? *c : (struct pipeline_consumer){ 0 };
}

int pipeline_add_tick(struct pipeline *p, void (*fn)(void *arg, uint64_t now_ns), void *arg)
{
	if (p->nticks >= PIPELINE_MAX_TICKS)
		return -ENOSPC;
	p->ticks[p->nticks++] = (struct pipeline_tick){ fn, arg };
	return 0;
}

void pipeline_drain(struct pipeline *p)
{
	if (p->sampler)
		sampler_drain(p->sampler);
}

static void drain_failed(void)
{
	log_err("pipeline: a drain failed; samples of the last interval may be missing");
}

/* The drain timer: flips the sampler's generation; the old one is read
 * when the sampler's thread has seen the grace period out (on_drained). */
static void on_drain(struct loop_source *ls, void *arg)
{
	struct pipeline *p = arg;

	if (sampler_drain_begin(p->sampler) < 0)
		drain_failed();
}

static void on_drained(struct loop_source *ls, int fd, uint32_t events, void *arg)
{
	struct pipeline *p = arg;
	uint64_t now;
	int r = sampler_drain_end(p->sampler);

	if (r == 0)
		return;  /* sampler_drain completed it already */
	if (r < 0)
		drain_failed();
	now = clock_mono_ns();
	/* Processes come and go: drop their cached maps and unused ELF tables
	 * once idle for a while, so memory follows the live set, not history. */
	if (++p->drains % SYMBOLS_EXPIRE_EVERY == 0)
		symbols_expire(p->sym, SYMBOLS_IDLE_S);
	procinfo_expire(p->pi, now);
	for (unsigned i = 0; i < p->nticks; i++)
		p->ticks[i].fn(p->ticks[i].arg, now);
}

int pipeline_set_sampler(struct pipeline *p, struct sampler *s)
{
	int r;

	p->sampler = s;
	r = loop_add_io(p->loop, sampler_drain_fd(s), EPOLLIN, on_drained, p, &p->drained_src);
	if (r < 0)
		return r;
	return loop_add_timer(p->loop, p->cfg.drain_ms, p->cfg.drain_ms, on_drain, p, &p->drain_timer);
}

struct procinfo *pipeline_procinfo(struct pipeline *p)
{
	return p->pi;
}

int pipeline_new(struct loop *loop, struct symbols *sym, const struct pipeline_config *cfg,
		 struct pipeline **out)
{
	struct pipeline *p = calloc(1, sizeof(*p));
	int r = -ENOMEM;

	*out = NULL;
	if (!p)
		return -ENOMEM;
	p->loop = loop;
	p->sym = sym;
	if (cfg)
		p->cfg = *cfg;
	if (!p->cfg.drain_ms)
		p->cfg.drain_ms = 1000;
	r = procinfo_new(&p->pi);
	if (r < 0)
		goto fail;
	r = builder_new(sym, p->pi, &p->builder);
	if (r < 0)
		goto fail;
	*out = p;
	return 0;
fail:
	pipeline_free(p);
	return r;
}

void pipeline_free(struct pipeline *p)
{
	if (!p)
		return;
	loop_remove(p->drain_timer);
	loop_remove(p->drained_src);
	while (p->sources)
		pipeline_source_close(p->sources);
	builder_free(p->builder);
	procinfo_free(p->pi);
	free(p);
}
