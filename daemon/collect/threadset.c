#include "threadset.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "htab.h"
#include "log.h"
#include "proc.h"
#include "quota.h"
#include "sampler.h"
#include <linux/types.h>
#include "bpf/sampler.h"

struct ts_thread {
	pid_t tid;
	uint32_t epoch;             /* last rescan that saw it */
	struct sampler_events *ev;
	bool agent;                 /* a record+signal event whose fd the agent holds */
};

struct threadset {
	struct sampler *sampler;
	struct threadset_config cfg;
	struct htab_map tids;       /* tid -> struct ts_thread * */
	uint32_t epoch;
	bool watching;
	uint64_t over_limit;
	bool over_quota;            /* said once that the uid's quota stopped us */
	int last_err;               /* why the last event could not be opened */
	uint64_t closed_ns;         /* counted by events already closed */
};

static struct ts_thread *find(const struct threadset *ts, pid_t tid)
{
	uint64_t *v = htab_map_get(&ts->tids, (uint64_t)tid);

	return v ? (struct ts_thread *)(uintptr_t)*v : NULL;
}

static int insert(struct threadset *ts, pid_t tid, struct sampler_events *ev, bool agent)
{
	struct ts_thread *t = calloc(1, sizeof(*t));
	int r;

	if (!t)
		return -ENOMEM;
	*t = (struct ts_thread){ .tid = tid, .epoch = ts->epoch, .ev = ev, .agent = agent };
	r = htab_map_put(&ts->tids, (uint64_t)tid, (uint64_t)(uintptr_t)t);
	if (r < 0) {
		free(t);
		return r;
	}
	sampler_cover_tid(ts->sampler, (uint32_t)tid, ts->cfg.source);
	return 0;
}

/* Keeps what an event counted before it is closed. */
static void bank_count(struct threadset *ts, const struct sampler_events *ev)
{
	uint64_t ns;

	if (sampler_events_count_ns(ev, &ns) == 0)
		ts->closed_ns += ns;
}

/* Closes an event that event_open() opened and gives its quota back. */
static void event_close(struct threadset *ts, struct sampler_events *ev)
{
	bank_count(ts, ev);
	sampler_events_close(ev);
	quota_give(ts->cfg.quota, ts->cfg.uid, QUOTA_PERF_EVENTS, 1);
}

static void close_thread(struct threadset *ts, struct ts_thread *t)
{
	sampler_uncover_tid(ts->sampler, (uint32_t)t->tid, ts->cfg.source);
	event_close(ts, t->ev);
	free(t);
}

/* Opens one event for tid, stopped while the set is gated. libbpf starts
 * an event as it attaches the program, so it is stopped right after: a
 * sample in between would need a period of the thread's CPU time within
 * two system calls of the daemon. */
static int thread_event_open(struct threadset *ts, pid_t tid, uint64_t flags,
			     struct sampler_events **ev)
{
	int r = sampler_thread_event_open(ts->sampler, ts->cfg.source, tid, ts->cfg.period_ns, flags,
					  ev);

	if (r == 0 && ts->cfg.gated) {
		r = sampler_events_enable(*ev, false);
		if (r < 0) {
			sampler_events_close(*ev);
			*ev = NULL;
		}
	}
	return r;
}

/* Opens one event for tid, charged to the requester's perf-event quota. */
static int event_open(struct threadset *ts, pid_t tid, uint64_t flags, struct sampler_events **ev)
{
	int r = quota_take(ts->cfg.quota, ts->cfg.uid, QUOTA_PERF_EVENTS, 1);

	if (r == 0) {
		r = thread_event_open(ts, tid, flags, ev);
		if (r < 0)
			quota_give(ts->cfg.quota, ts->cfg.uid, QUOTA_PERF_EVENTS, 1);
	}
	if (r < 0)
		ts->last_err = r;
	return r;
}

int threadset_add(struct threadset *ts, pid_t tid)
{
	struct ts_thread *t = find(ts, tid);
	struct sampler_events *ev;
	int r;

	if (t) {
		t->epoch = ts->epoch;
		return 0;
	}
	if (htab_map_count(&ts->tids) >= ts->cfg.max_threads) {
		if (ts->over_limit++ == 0)
			log_warn("session %u: pid %d has more than %u threads; the rest are not sampled",
				 ts->cfg.source, (int)ts->cfg.pid, ts->cfg.max_threads);
		return 0;
	}
	r = event_open(ts, tid, ts->cfg.event_flags & JP_COOKIE_RECORD, &ev);
	if (r == -ESRCH || r == -ENOENT)
		return 0;  /* the thread exited meanwhile */
	if (r == -EDQUOT || r == -EUSERS) {
		ts->over_limit++;
		if (!ts->over_quota)
			log_warn("session %u: uid %u reached its perf-event quota; further threads of pid %d are not sampled",
				 ts->cfg.source, (unsigned)ts->cfg.uid, (int)ts->cfg.pid);
		ts->over_quota = true;
		return 0;
	}
	if (r < 0) {
		log_warn("session %u: cannot open event for pid %d tid %d: %s", ts->cfg.source,
			 (int)ts->cfg.pid, (int)tid, strerror(-r));
		return r;
	}
	r = insert(ts, tid, ev, false);
	if (r < 0)
		event_close(ts, ev);
	return r;
}

static int scan_cb(pid_t tid, void *arg)
{
	threadset_add(arg, tid);
	return 0;
}

static bool keep_seen(uint64_t key, uint64_t *val, void *arg)
{
	struct threadset *ts = arg;
	struct ts_thread *t = (struct ts_thread *)(uintptr_t)*val;

	if (t->epoch == ts->epoch)
		return true;
	close_thread(ts, t);
	return false;
}

void threadset_rescan(struct threadset *ts)
{
	ts->epoch++;
	if (proc_foreach_task(ts->cfg.pid, scan_cb, ts) < 0)
		return;  /* process gone: its pidfd reports that */
	htab_map_retain(&ts->tids, keep_seen, ts);
}

int threadset_agent_fd(struct threadset *ts, pid_t host_tid, int *fd)
{
	struct ts_thread *t = find(ts, host_tid);
	struct sampler_events *ev;
	int r;

	if (t && t->agent) {
		*fd = sampler_events_fd(t->ev);
		return 1;
	}
	if (!t && htab_map_count(&ts->tids) >= ts->cfg.max_threads)
		return -EMFILE;
	if (t)  /* replaces the plain event: still one event for this thread */
		r = thread_event_open(ts, host_tid, JP_COOKIE_RECORD | JP_COOKIE_SIGNAL, &ev);
	else
		r = event_open(ts, host_tid, JP_COOKIE_RECORD | JP_COOKIE_SIGNAL, &ev);
	if (r < 0)
		return r;
	if (t) {
		bank_count(ts, t->ev);
		sampler_events_close(t->ev);
		t->ev = ev;
		t->agent = true;
		t->epoch = ts->epoch;
	} else {
		r = insert(ts, host_tid, ev, true);
		if (r < 0) {
			event_close(ts, ev);
			return r;
		}
	}
	*fd = sampler_events_fd(ev);
	return 0;
}

static bool enable_one(uint64_t key, uint64_t *val, void *arg)
{
	struct ts_thread *t = (struct ts_thread *)(uintptr_t)*val;
	int *first = arg;
	int r = sampler_events_enable(t->ev, true);

	if (r < 0 && *first == 0)
		*first = r;
	return true;
}

int threadset_open_gate(struct threadset *ts)
{
	int r = 0;

	if (!ts || !ts->cfg.gated)
		return 0;
	ts->cfg.gated = false;
	htab_map_retain(&ts->tids, enable_one, &r);
	/* -ESRCH: a thread that ended before its rescan; nothing to sample. */
	return r == -ESRCH ? 0 : r;
}

size_t threadset_count(const struct threadset *ts)
{
	return ts ? htab_map_count(&ts->tids) : 0;
}

uint64_t threadset_cpu_ns(const struct threadset *ts)
{
	uint64_t sum, key, val, ns;
	size_t pos = 0;

	if (!ts)
		return 0;
	sum = ts->closed_ns;
	while (htab_map_next(&ts->tids, &pos, &key, &val)) {
		const struct ts_thread *t = (const struct ts_thread *)(uintptr_t)val;

		if (sampler_events_count_ns(t->ev, &ns) == 0)
			sum += ns;
	}
	return sum;
}

int threadset_new(struct sampler *s, const struct threadset_config *cfg, struct threadset **out)
{
	struct threadset *ts = calloc(1, sizeof(*ts));
	int r;

	*out = NULL;
	if (!ts)
		return -ENOMEM;
	ts->sampler = s;
	ts->cfg = *cfg;
	ts->epoch = 1;
	/* Watch before listing threads so none is created unseen. */
	r = sampler_watch_tgid(s, (uint32_t)cfg->pid);
	if (r < 0)
		goto fail;
	ts->watching = true;
	r = proc_foreach_task(cfg->pid, scan_cb, ts);
	if (r < 0 || htab_map_count(&ts->tids) == 0)
		r = r < 0 || !ts->last_err || ts->last_err == -ENOENT ? -ESRCH : ts->last_err;
	if (r < 0)
		goto fail;
	*out = ts;
	return 0;
fail:
	threadset_free(ts);
	return r;
}

static bool drop_all(uint64_t key, uint64_t *val, void *arg)
{
	close_thread(arg, (struct ts_thread *)(uintptr_t)*val);
	return false;
}

void threadset_free(struct threadset *ts)
{
	if (!ts)
		return;
	htab_map_retain(&ts->tids, drop_all, ts);
	htab_map_release(&ts->tids);
	if (ts->watching)
		sampler_unwatch_tgid(ts->sampler, (uint32_t)ts->cfg.pid);
	free(ts);
}
