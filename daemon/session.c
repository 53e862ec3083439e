#include "session.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "jprof_proto.h"
#include "log.h"
#include "loop.h"
#include "proc.h"
#include "sampler.h"
#include "store.h"
#include "symbols.h"
#include <linux/types.h>
#include "../bpf/sampler.h"

#define MAX_FRAMES (2 * JP_MAX_STACK_DEPTH + 4)

struct tid_slot {
	pid_t tid;                  /* 0 = empty */
	uint32_t epoch;             /* last rescan that saw it */
	struct sampler_events *ev;
};

struct session {
	struct session_mgr *mgr;
	struct session *next;
	uint32_t id;                /* sampler source id */
	struct session_params p;
	struct session_sink sink;
	uint64_t start_mono_ns;
	uint64_t start_unix_ns;
	uint64_t end_mono_ns;       /* set when finished */
	struct loop_source *end_timer;
	struct loop_source *pidfd_src;
	struct sampler_events *cpu_events;
	struct tid_slot *tids;
	size_t tid_cap, ntids;
	uint32_t epoch;
	bool watching;
	bool finishing;
	struct store *store;
	uint64_t samples;
	uint64_t stacks_lost;       /* samples with a stack that could not be read */
	uint64_t threads_over_limit;
	char comm[64];
};

struct session_mgr {
	struct loop *loop;
	struct sampler *sampler;
	struct symbols *symbols;
	struct session_limits lim;
	struct session *sessions;
	size_t count;
	uint32_t next_id;
	struct loop_source *drain_timer;
};

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- per-session thread table (open addressing, rebuilt on removal) ---- */

static struct tid_slot *tid_find(struct session *s, pid_t tid)
{
	if (!s->tid_cap)
		return NULL;
	for (size_t i = 0, h = (size_t)tid * 2654435761u; i < s->tid_cap; i++) {
		struct tid_slot *t = &s->tids[(h + i) & (s->tid_cap - 1)];

		if (t->tid == tid)
			return t;
		if (t->tid == 0)
			return NULL;
	}
	return NULL;
}

static int tid_table_resize(struct session *s, size_t cap)
{
	struct tid_slot *old = s->tids, *n = calloc(cap, sizeof(*n));
	size_t old_cap = s->tid_cap;

	if (!n)
		return -ENOMEM;
	s->tids = n;
	s->tid_cap = cap;
	for (size_t i = 0; i < old_cap; i++) {
		if (!old[i].tid)
			continue;
		for (size_t j = 0, h = (size_t)old[i].tid * 2654435761u;; j++) {
			struct tid_slot *t = &n[(h + j) & (cap - 1)];

			if (!t->tid) {
				*t = old[i];
				break;
			}
		}
	}
	free(old);
	return 0;
}

static int tid_insert(struct session *s, pid_t tid, struct sampler_events *ev)
{
	int r;

	if ((s->ntids + 1) * 2 > s->tid_cap) {
		r = tid_table_resize(s, s->tid_cap ? s->tid_cap * 2 : 64);
		if (r < 0)
			return r;
	}
	for (size_t j = 0, h = (size_t)tid * 2654435761u;; j++) {
		struct tid_slot *t = &s->tids[(h + j) & (s->tid_cap - 1)];

		if (!t->tid) {
			*t = (struct tid_slot){ .tid = tid, .epoch = s->epoch, .ev = ev };
			s->ntids++;
			return 0;
		}
	}
}

static void tid_close(struct session *s, struct tid_slot *t)
{
	sampler_uncover_tid(s->mgr->sampler, (uint32_t)t->tid, s->id);
	sampler_events_close(t->ev);
	t->ev = NULL;
}

/* ---- events ---- */

static uint64_t interval_ns(const struct session *s)
{
	return s->p.interval_us * 1000ull;
}

static int add_thread(struct session *s, pid_t tid)
{
	struct tid_slot *t = tid_find(s, tid);
	struct sampler_events *ev;
	int r;

	if (t) {
		t->epoch = s->epoch;
		return 0;
	}
	if (s->ntids >= s->mgr->lim.max_threads) {
		if (s->threads_over_limit++ == 0)
			log_warn("session %u: pid %d has more than %u threads; the rest are not sampled",
				 s->id, (int)s->p.pid, s->mgr->lim.max_threads);
		return 0;
	}
	r = sampler_thread_event_open(s->mgr->sampler, s->id, tid, interval_ns(s), 0, &ev);
	if (r == -ESRCH || r == -ENOENT)
		return 0;  /* the thread exited meanwhile */
	if (r < 0) {
		log_warn("session %u: cannot open event for pid %d tid %d: %s", s->id, (int)s->p.pid,
			 (int)tid, strerror(-r));
		return r;
	}
	r = tid_insert(s, tid, ev);
	if (r < 0) {
		sampler_events_close(ev);
		return r;
	}
	sampler_cover_tid(s->mgr->sampler, (uint32_t)tid, s->id);
	return 0;
}

static int rescan_cb(pid_t tid, void *arg)
{
	add_thread(arg, tid);
	return 0;
}

/* Adds threads we missed and closes events of threads that are gone. */
static void rescan_threads(struct session *s)
{
	size_t live = 0;

	s->epoch++;
	if (proc_foreach_task(s->p.pid, rescan_cb, s) < 0)
		return;  /* process gone: its pidfd reports that */
	for (size_t i = 0; i < s->tid_cap; i++) {
		struct tid_slot *t = &s->tids[i];

		if (!t->tid)
			continue;
		if (t->epoch != s->epoch)
			tid_close(s, t);
		else
			live++;
	}
	if (live != s->ntids) {
		/* Rebuild without the closed entries. */
		struct tid_slot *old = s->tids;
		size_t old_cap = s->tid_cap;

		s->tids = NULL;
		s->tid_cap = 0;
		s->ntids = 0;
		for (size_t i = 0; i < old_cap; i++)
			if (old[i].tid && old[i].ev)
				tid_insert(s, old[i].tid, old[i].ev);
		free(old);
	}
}

static void close_events(struct session *s)
{
	for (size_t i = 0; i < s->tid_cap; i++)
		if (s->tids[i].tid && s->tids[i].ev)
			tid_close(s, &s->tids[i]);
	free(s->tids);
	s->tids = NULL;
	s->tid_cap = s->ntids = 0;
	sampler_events_close(s->cpu_events);
	s->cpu_events = NULL;
	if (s->watching) {
		sampler_unwatch_tgid(s->mgr->sampler, (uint32_t)s->p.pid);
		s->watching = false;
	}
}

/* ---- samples ---- */

static struct session *find_by_source(struct session_mgr *m, uint32_t source)
{
	for (struct session *s = m->sessions; s; s = s->next)
		if (s->id == source)
			return s;
	return NULL;
}

static uint32_t intern(struct session *s, enum frame_kind kind, const char *name, const char *module)
{
	int id = store_frame_intern(s->store, kind, name, module);

	return id < 0 ? store_truncated_frame(s->store) : (uint32_t)id;
}

static void name_thread(struct session *s, uint32_t pid, uint32_t tid)
{
	char name[64];

	if (!store_process_name(s->store, pid)) {
		if (proc_read_comm((pid_t)pid, 0, name, sizeof(name)) < 0)
			snprintf(name, sizeof(name), "[exited]");
		store_set_process_name(s->store, pid, name);
	}
	if (!store_thread_name(s->store, pid, tid)) {
		if (proc_read_comm((pid_t)pid, (pid_t)tid, name, sizeof(name)) < 0)
			snprintf(name, sizeof(name), "[exited]");
		store_set_thread_name(s->store, pid, tid, name);
	}
}

static void add_sample(struct session *s, const struct sampler_sample *smp)
{
	struct symbols *sym = s->mgr->symbols;
	uint32_t ids[MAX_FRAMES];
	struct sym_result r;
	size_t n = 0;

	name_thread(s, smp->tgid, smp->tid);
	if (s->p.all) {
		/* Whole-host profiles start with the process, as folded tools expect. */
		const char *comm = store_process_name(s->store, smp->tgid);

		ids[n++] = intern(s, FRAME_MARKER, comm ? comm : "[unknown]", "");
	}
	if (smp->ustack_lost)
		ids[n++] = intern(s, FRAME_MARKER, "[user_stack_lost]", "");
	for (uint32_t i = smp->nu; i-- > 0;) {
		/* Every user frame but an interrupted leaf is a return address; in
		 * kernel mode even the leaf points after the syscall instruction. */
		bool ret = i > 0 || smp->kernel_mode;

		if (symbols_resolve_user(sym, (pid_t)smp->tgid, smp->uips[i], ret, &r) < 0)
			continue;
		ids[n++] = intern(s, r.kind, r.name, r.module);
	}
	if (smp->kstack_lost)
		ids[n++] = intern(s, FRAME_MARKER, "[kernel_stack_lost]", "");
	for (uint32_t i = smp->nk; i-- > 0;) {
		uint64_t addr = i > 0 ? smp->kips[i] - 1 : smp->kips[i];

		if (symbols_resolve_kernel(sym, addr, &r) < 0)
			continue;
		ids[n++] = intern(s, FRAME_KERNEL, r.name, r.module);
	}
	if (smp->ustack_lost || smp->kstack_lost)
		s->stacks_lost += smp->count;
	s->samples += smp->count;
	store_add(s->store, smp->tgid, smp->tid, ids, n, smp->count, smp->count * interval_ns(s));
}

void session_mgr_on_sample(const struct sampler_sample *smp, void *arg)
{
	struct session *s;

	if (smp->source == JP_SRC_HOST)
		return;  /* the host view has no consumer yet */
	s = find_by_source(arg, smp->source);
	if (s)
		add_sample(s, smp);
}

void session_mgr_on_new_thread(uint32_t tgid, uint32_t tid, void *arg)
{
	struct session_mgr *m = arg;

	for (struct session *s = m->sessions; s; s = s->next)
		if (!s->p.all && !s->finishing && (uint32_t)s->p.pid == tgid)
			add_thread(s, (pid_t)tid);
}

/* ---- messages ---- */

static void send_obj(struct session *s, struct json_object *o)
{
	size_t len;
	char *line = o ? jprof_json_line(o, &len) : NULL;

	if (line)
		s->sink.send(s->sink.ctx, line, len);
	else
		log_err("session %u: out of memory building a message", s->id);
	free(line);
	json_object_put(o);
}

static void send_error(struct session *s, const char *code, const char *msg)
{
	char *line = jprof_error_line(s->p.req_id, true, code, msg);

	if (line)
		s->sink.send(s->sink.ctx, line, strlen(line));
	free(line);
}

static uint64_t elapsed_ms(const struct session *s)
{
	uint64_t end = s->end_mono_ns ? s->end_mono_ns : clock_ns(CLOCK_MONOTONIC);

	return (end - s->start_mono_ns) / 1000000ull;
}

static void send_progress(struct session *s)
{
	struct json_object *o = jprof_response_new(s->p.req_id, "progress");

	if (!o)
		return;
	json_object_object_add(o, "elapsed_ms", json_object_new_int64((int64_t)elapsed_ms(s)));
	json_object_object_add(o, "duration_ms", json_object_new_int64((int64_t)s->p.duration_ms));
	json_object_object_add(o, "samples", json_object_new_int64((int64_t)s->samples));
	json_object_object_add(o, "threads", json_object_new_int64((int64_t)s->ntids));
	send_obj(s, o);
}

static void send_started(struct session *s)
{
	struct json_object *o = jprof_response_new(s->p.req_id, "started");
	struct json_object *t = json_object_new_object();

	if (!o || !t) {
		json_object_put(o);
		json_object_put(t);
		return;
	}
	json_object_object_add(o, "session", json_object_new_int64(s->id));
	json_object_object_add(t, "pid", json_object_new_int64(s->p.all ? 0 : s->p.pid));
	json_object_object_add(t, "comm", s->p.all ? NULL : json_object_new_string(s->comm));
	json_object_object_add(t, "all", json_object_new_boolean(s->p.all));
	json_object_object_add(o, "target", t);
	json_object_object_add(o, "duration_ms", json_object_new_int64((int64_t)s->p.duration_ms));
	json_object_object_add(o, "interval_us", json_object_new_int64((int64_t)s->p.interval_us));
	send_obj(s, o);
}

static void send_profile(struct session *s, const char *status)
{
	struct export_meta meta = {
		.pid = s->p.all ? 0 : (uint32_t)s->p.pid,
		.comm = s->p.all ? NULL : s->comm,
		.event = "cpu-clock",
		.start_unix_ns = s->start_unix_ns,
		.duration_ns = elapsed_ms(s) * 1000000ull,
		.interval_ns = interval_ns(s),
		.status = status,
	};
	struct export_options opt = { .thread_frames = s->p.thread_frames };
	struct buf out = BUF_INIT;
	struct store_totals tot;
	struct json_object *o, *sum;
	int r;

	r = export_render(s->store, &meta, &opt, s->p.format, &out);
	if (r < 0) {
		log_err("session %u: rendering %s failed: %s", s->id, export_format_name(s->p.format),
			strerror(-r));
		send_error(s, JPROF_E_INTERNAL, "rendering the profile failed");
		goto out;
	}
	store_get_totals(s->store, &tot);
	o = jprof_response_new(s->p.req_id, "profile");
	sum = json_object_new_object();
	if (!o || !sum) {
		json_object_put(o);
		json_object_put(sum);
		send_error(s, JPROF_E_INTERNAL, "out of memory");
		goto out;
	}
	json_object_object_add(o, "status", json_object_new_string(status));
	json_object_object_add(o, "format", json_object_new_string(export_format_name(s->p.format)));
	if (export_format_is_binary(s->p.format)) {
		char *b64 = jprof_base64_encode(out.data ? out.data : "", out.len);

		json_object_object_add(o, "encoding", json_object_new_string("base64"));
		json_object_object_add(o, "data", b64 ? json_object_new_string(b64) : NULL);
		free(b64);
	} else {
		json_object_object_add(o, "encoding", json_object_new_string("utf-8"));
		json_object_object_add(o, "data",
				       json_object_new_string_len(out.data ? out.data : "", (int)out.len));
	}
	json_object_object_add(sum, "samples", json_object_new_int64((int64_t)tot.samples));
	json_object_object_add(sum, "weight_ns", json_object_new_int64((int64_t)tot.weight_ns));
	json_object_object_add(sum, "stacks", json_object_new_int64((int64_t)tot.stacks));
	json_object_object_add(sum, "truncated", json_object_new_boolean(tot.truncated));
	json_object_object_add(sum, "duration_ms", json_object_new_int64((int64_t)elapsed_ms(s)));
	json_object_object_add(sum, "lost", json_object_new_int64((int64_t)s->stacks_lost));
	json_object_object_add(sum, "threads", json_object_new_int64((int64_t)s->ntids));
	json_object_object_add(o, "summary", sum);
	send_obj(s, o);
out:
	buf_release(&out);
}

/* ---- lifecycle ---- */

static void unlink_session(struct session *s)
{
	struct session **pp = &s->mgr->sessions;

	while (*pp && *pp != s)
		pp = &(*pp)->next;
	if (*pp) {
		*pp = s->next;
		s->mgr->count--;
	}
}

static void session_free(struct session *s)
{
	if (!s)
		return;
	close_events(s);
	loop_remove(s->end_timer);
	loop_remove(s->pidfd_src);
	if (s->p.pidfd >= 0)
		close(s->p.pidfd);
	store_free(s->store);
	free(s);
}

static void finish(struct session *s, const char *status)
{
	struct store_totals tot;

	if (s->finishing)
		return;
	s->finishing = true;
	s->end_mono_ns = clock_ns(CLOCK_MONOTONIC);
	/* Stop sampling first, then drain: every sample taken so far arrives. */
	close_events(s);
	sampler_drain(s->mgr->sampler);
	store_get_totals(s->store, &tot);
	log_info("session %u: %s after %llu ms, %llu samples, %zu stacks%s", s->id, status,
		 (unsigned long long)elapsed_ms(s), (unsigned long long)tot.samples, tot.stacks,
		 tot.truncated ? " (truncated)" : "");
	send_profile(s, status);
	unlink_session(s);
	if (s->sink.done)
		s->sink.done(s->sink.ctx, s);
	session_free(s);
}

void session_stop(struct session *s, const char *status)
{
	finish(s, status);
}

void session_abandon(struct session *s)
{
	if (!s || s->finishing)
		return;
	s->finishing = true;
	log_info("session %u: client gone after %llu ms; recording dropped", s->id,
		 (unsigned long long)elapsed_ms(s));
	unlink_session(s);
	session_free(s);
}

static void on_end_timer(struct loop_source *src, void *arg)
{
	finish(arg, "complete");
}

static void on_pidfd(struct loop_source *src, int fd, uint32_t events, void *arg)
{
	struct session *s = arg;

	/* A pidfd polls readable once the process has exited. */
	log_info("session %u: pid %d exited", s->id, (int)s->p.pid);
	finish(s, "process_exited");
}

static void on_drain(struct loop_source *src, void *arg)
{
	struct session_mgr *m = arg;

	sampler_drain(m->sampler);
	for (struct session *s = m->sessions; s; s = s->next) {
		if (!s->p.all)
			rescan_threads(s);
		if (s->p.progress)
			send_progress(s);
	}
}

static uint32_t alloc_id(struct session_mgr *m)
{
	for (;;) {
		uint32_t id = ++m->next_id;

		if (id != JP_SRC_HOST && !find_by_source(m, id))
			return id;
	}
}

int session_start(struct session_mgr *m, const struct session_params *p,
		  const struct session_sink *sink, struct session **out,
		  const char **err_code, char *err_msg, size_t err_len)
{
	struct session *s = NULL;
	int r;

	*out = NULL;
	if (m->count >= m->lim.max_sessions) {
		*err_code = JPROF_E_LIMIT;
		snprintf(err_msg, err_len, "too many recordings (%u) are running", m->lim.max_sessions);
		r = -EBUSY;
		goto fail;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		r = -ENOMEM;
		goto fail_internal;
	}
	s->mgr = m;
	s->p = *p;
	s->sink = *sink;
	s->id = alloc_id(m);
	s->store = store_new(NULL);
	if (!s->store) {
		r = -ENOMEM;
		goto fail_internal;
	}
	s->start_mono_ns = clock_ns(CLOCK_MONOTONIC);
	s->start_unix_ns = clock_ns(CLOCK_REALTIME);
	if (p->all) {
		r = sampler_cpu_events_open(m->sampler, s->id, interval_ns(s), &s->cpu_events);
		if (r < 0)
			goto fail_internal;
	} else {
		if (proc_read_comm(p->pid, 0, s->comm, sizeof(s->comm)) < 0)
			snprintf(s->comm, sizeof(s->comm), "?");
		store_set_process_name(s->store, (uint32_t)p->pid, s->comm);
		/* Watch before listing threads so none is created unseen. */
		r = sampler_watch_tgid(m->sampler, (uint32_t)p->pid);
		if (r < 0)
			goto fail_internal;
		s->watching = true;
		s->epoch = 1;
		r = proc_foreach_task(p->pid, rescan_cb, s);
		if (r < 0 || s->ntids == 0) {
			*err_code = JPROF_E_NO_SUCH_PROCESS;
			snprintf(err_msg, err_len, "pid %d exited before recording started", (int)p->pid);
			r = -ESRCH;
			goto fail;
		}
		r = loop_add_io(m->loop, p->pidfd, EPOLLIN, on_pidfd, s, &s->pidfd_src);
		if (r < 0)
			goto fail_internal;
	}
	r = loop_add_timer(m->loop, p->duration_ms, 0, on_end_timer, s, &s->end_timer);
	if (r < 0)
		goto fail_internal;
	s->next = m->sessions;
	m->sessions = s;
	m->count++;
	log_audit("session %u started: uid %u records %s%d for %llu ms every %llu us", s->id,
		  (unsigned)p->uid, p->all ? "the whole host" : "pid ", p->all ? 0 : (int)p->pid,
		  (unsigned long long)p->duration_ms, (unsigned long long)p->interval_us);
	send_started(s);
	*out = s;
	return 0;
fail_internal:
	*err_code = JPROF_E_INTERNAL;
	snprintf(err_msg, err_len, "cannot start recording: %s", strerror(-r));
	log_err("cannot start recording of %s%d: %s", p->all ? "host " : "pid ", p->all ? 0 : (int)p->pid,
		strerror(-r));
fail:
	if (s) {
		s->finishing = true;
		session_free(s);  /* closes the pidfd */
	} else if (p->pidfd >= 0) {
		close(p->pidfd);
	}
	return r;
}

int session_mgr_new(struct loop *loop, struct symbols *symbols, const struct session_limits *lim,
		    struct session_mgr **out)
{
	struct session_mgr *m = calloc(1, sizeof(*m));

	*out = NULL;
	if (!m)
		return -ENOMEM;
	m->loop = loop;
	m->symbols = symbols;
	if (lim)
		m->lim = *lim;
	if (!m->lim.max_sessions)
		m->lim.max_sessions = 64;
	if (!m->lim.max_threads)
		m->lim.max_threads = 8192;
	if (!m->lim.drain_ms)
		m->lim.drain_ms = 1000;
	*out = m;
	return 0;
}

int session_mgr_set_sampler(struct session_mgr *m, struct sampler *sampler)
{
	m->sampler = sampler;
	return loop_add_timer(m->loop, m->lim.drain_ms, m->lim.drain_ms, on_drain, m, &m->drain_timer);
}

void session_mgr_free(struct session_mgr *m)
{
	if (!m)
		return;
	while (m->sessions) {
		struct session *s = m->sessions;

		s->finishing = true;
		send_error(s, JPROF_E_SHUTTING_DOWN, "jprofd is shutting down; the recording was stopped");
		unlink_session(s);
		if (s->sink.done)
			s->sink.done(s->sink.ctx, s);
		session_free(s);
	}
	loop_remove(m->drain_timer);
	free(m);
}

int64_t session_req_id(const struct session *s)
{
	return s->p.req_id;
}

size_t session_count(const struct session_mgr *m)
{
	return m->count;
}

void session_get_info(const struct session *s, struct session_info *out)
{
	*out = (struct session_info){
		.id = s->id,
		.req_id = s->p.req_id,
		.pid = s->p.all ? 0 : s->p.pid,
		.all = s->p.all,
		.uid = s->p.uid,
		.elapsed_ms = elapsed_ms(s),
		.duration_ms = s->p.duration_ms,
		.samples = s->samples,
		.threads = (unsigned)s->ntids,
	};
}

int session_foreach(struct session_mgr *m, int (*fn)(struct session *s, void *arg), void *arg)
{
	for (struct session *s = m->sessions, *next; s; s = next) {
		int r;

		next = s->next;
		r = fn(s, arg);
		if (r)
			return r;
	}
	return 0;
}
