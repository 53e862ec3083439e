#include "session.h"
#include "session_int.h"

#include <errno.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "agentlink.h"
#include "attach.h"
#include "event.h"
#include "jprof_proto.h"
#include "jring.h"
#include "jvmjoin.h"
#include "log.h"
#include "pprof.h"
#include "loop.h"
#include "proc.h"
#include "pipeline.h"
#include "render.h"
#include "sample.h"
#include "sampler.h"
#include "store.h"
#include "threadset.h"
#include <linux/types.h>
#include "bpf/sampler.h"


/* ---- events ---- */


/* Threads sampled: those with an event now, or at the end of the recording
 * once the events are closed (the final summary). */
size_t session_thread_count(const struct session *s)
{
	return s->threads ? threadset_count(s->threads) : s->threads_at_end;
}

static void close_events(struct session *s)
{
	if (s->threads) {
		s->threads_at_end = threadset_count(s->threads);
		s->cpu_ns_at_end = threadset_cpu_ns(s->threads);
	}
	if (s->offcpu_target) {
		sampler_offcpu_remove(s->mgr->sampler, s->id, s->p.all ? 0 : (uint32_t)s->p.pid);
		if (!s->p.all)
			sampler_unwatch_tgid(s->mgr->sampler, (uint32_t)s->p.pid);
		s->offcpu_target = false;
	}
	threadset_free(s->threads);
	s->threads = NULL;
	sampler_events_close(s->cpu_events);
	s->cpu_events = NULL;
}

/* ---- samples: the pipeline's built samples of this recording ---- */

static void on_sample(const struct built_sample *bs, void *arg)
{
	struct session *s = arg;
	struct built_sample wall;

	/* Before the start gate opened (an off-CPU interval, a record of an
	 * event libbpf ran for an instant): outside the recording's time. */
	if (s->gated || (bs->time_ns && bs->time_ns < s->start_mono_ns))
		return;
	/* A wall-clock recording's CPU samples and off-CPU intervals are both
	 * wall time: their values (count, nanoseconds) under its own types.
	 * Samples of the other events (alloc, lock) keep theirs: the store
	 * files each event's values under its own types. */
	if ((bs->event->id == EVENT_CPU || bs->event->id == EVENT_OFFCPU) &&
	    session_has(s, EVENT_WALL)) {
		if (session_jvm_wall_covers(s, bs))
			return;
		wall = *bs;
		wall.event = event_get(EVENT_WALL);
		bs = &wall;
	}
	if (s->access_lost)
		return;  /* taken after the requester lost the right to them */
	if (s->pending) {
		sample_store_add(s->pending, bs, NULL);
		s->pending_samples += bs->values[0];
		if (bs->stack_lost)
			s->pending_lost += bs->values[0];
	} else {
		sample_store_add(s->store, bs, NULL);
		s->samples += bs->values[0];
		if (bs->stack_lost)
			s->stacks_lost += bs->values[0];
	}
	if (bs->has_java && bs->time_ns > s->request_mono_ns) {
		/* The earliest sample taken, not the first one emitted: samples
		 * waiting for method names come out later than newer ones. */
		uint64_t ms = (bs->time_ns - s->request_mono_ns + 999999) / 1000000;

		if (!s->first_java_ms || ms < s->first_java_ms)
			s->first_java_ms = ms;
	}
}

void session_mgr_on_new_thread(uint32_t tgid, uint32_t tid, void *arg)
{
	struct session_mgr *m = arg;

	for (struct session *s = m->sessions; s; s = s->next) {
		if (s->p.all || s->finishing || (uint32_t)s->p.pid != tgid || !s->threads)
			continue;
		if (tid)
			threadset_add(s->threads, (pid_t)tid);
		else
			threadset_rescan(s->threads);
	}
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

/* Everything but the store and the session itself: what samples, times,
 * watches or holds the process. Idempotent. */
void session_release(struct session *s)
{
	close_events(s);
	if (s->join)
		sampler_set_min_gap(s->mgr->sampler, s->id, 0);
	session_jvm_release_attach(s);
	session_jvm_unbind(s);
	loop_remove(s->ring_timer);
	loop_remove(s->java_timer);
	loop_remove(s->join_timer);
	loop_remove(s->agent_ev_timer);
	s->ring_timer = s->java_timer = s->join_timer = s->agent_ev_timer = NULL;
	jvm_join_free(s->join);
	s->join = NULL;
	loop_remove(s->end_timer);
	loop_remove(s->gate_timer);
	loop_remove(s->access_timer);
	loop_remove(s->pidfd_src);
	s->end_timer = s->gate_timer = s->access_timer = s->pidfd_src = NULL;
	if (s->p.pidfd >= 0)
		close(s->p.pidfd);
	s->p.pidfd = -1;
	pipeline_source_close(s->src);
	s->src = NULL;
	store_free(s->pending);
	s->pending = NULL;
}

static void session_free(struct session *s)
{
	if (!s)
		return;
	render_cancel(s->render_job);
	session_release(s);
	store_free(s->store);
	free(s);
}

/* Takes s off the manager's rendering list, if it is there. */
static void unlink_rendering(struct session *s)
{
	for (struct session **pp = &s->mgr->rendering; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			return;
		}
	}
}

/* After its last line: the connection lets go of s, and s goes. */
void session_end(struct session *s)
{
	unlink_rendering(s);
	if (s->sink.done)
		s->sink.done(s->sink.ctx, s);
	session_free(s);
}

/* Renders and sends the profile, then frees the session. */
void session_complete(struct session *s, const char *status)
{
	struct store_totals tot;

	s->java_finishing = false;
	loop_remove(s->java_timer);
	s->java_timer = NULL;
	if (s->join)
		pipeline_source_join_flush(s->src);
	session_jvm_unbind(s);  /* the agent closes this recording's fds (the last: the ring) */
	status = session_access_final(s, status);
	store_get_totals(s->store, &tot);
	log_info("session %u: %s after %llu ms, %llu samples, %zu stacks%s", s->id, status,
		 (unsigned long long)elapsed_ms(s), (unsigned long long)tot.values[0], tot.stacks,
		 tot.truncated ? " (truncated)" : "");
	if (s->first_java_ms)
		log_info("session %u: first sample with Java frames taken %llu ms after the request",
			 s->id, (unsigned long long)s->first_java_ms);
	unlink_session(s);
	session_send_profile(s, status);  /* ends s, now or once rendered */
}

void session_finish(struct session *s, const char *status)
{
	if (s->finishing)
		return;
	s->finishing = true;
	s->end_mono_ns = clock_ns(CLOCK_MONOTONIC);
	if (s->gated) {  /* nothing was sampled: a recording of 0 ms */
		s->gated = false;
		s->start_mono_ns = s->end_mono_ns;
		loop_remove(s->gate_timer);
		s->gate_timer = NULL;
	}
	session_jvm_release_attach(s);
	/* Stop sampling first (this also silences the agent's copies of the
	 * events), then drain: every sample taken so far arrives. */
	close_events(s);
	pipeline_drain(s->mgr->pipeline);
	if (s->join && session_jvm_event_off(s, status))
		return;  /* session_jvm_finish once the agent's last records are in */
	if (s->join)
		session_jvm_finish(s, status);  /* completes the session */
	else
		session_complete(s, status);
}

/* Ends a recording with an error instead of a profile. */
void session_abort(struct session *s, const char *code, const char *msg)
{
	s->finishing = true;
	log_info("session %u: ended: %s", s->id, msg);
	session_send_error(s, code, msg);
	unlink_session(s);
	if (s->sink.done)
		s->sink.done(s->sink.ctx, s);
	session_free(s);
}

void session_stop(struct session *s, const char *status)
{
	session_finish(s, status);
}

void session_abandon(struct session *s)
{
	if (s && s->render_job) {
		/* Ended, its profile being rendered: nobody to send it to. */
		log_info("session %u: client gone before its profile was rendered", s->id);
		unlink_rendering(s);
		session_free(s);  /* cancels the job */
		return;
	}
	if (!s || (s->finishing && !s->java_finishing))
		return;
	s->finishing = true;
	log_info("session %u: client gone after %llu ms; recording dropped", s->id,
		 (unsigned long long)elapsed_ms(s));
	unlink_session(s);
	session_free(s);
}

void session_on_end_timer(struct loop_source *src, void *arg)
{
	session_finish(arg, "complete");
}

static void on_pidfd(struct loop_source *src, int fd, uint32_t events, void *arg)
{
	struct session *s = arg;

	/* A pidfd polls readable once the process has exited. */
	log_info("session %u: pid %d exited", s->id, (int)s->p.pid);
	session_finish(s, "process_exited");
}

/* After every drain (a pipeline tick). */
static void on_tick(void *arg, uint64_t now)
{
	struct session_mgr *m = arg;
	/* Agent records up to here have their BPF records in this drain. */
	uint64_t horizon = now - 1000000ull;

	for (struct session *s = m->sessions, *next; s; s = next) {
		next = s->next;
		if (s->finishing)
			continue;
		session_jvm_step(s, horizon);
		if (session_access_recheck(s))
			continue;
		if (s->threads)
			threadset_rescan(s->threads);
		/* The worker reads source lines while the recording runs, so
		 * the rendering (on the loop, never waiting) finds them. */
		if (s->p.format == JPROF_FMT_PPROF)
			s->lines_from = pprof_lines_prefetch(s->store, s->lines_from);
		if (s->p.progress)
			session_send_progress(s);
	}
}

/* The sampler times the recorded tasks off the CPU: the whole host, or the
 * process (watched, so an exec is reported for the right's re-check). */
static int offcpu_start(struct session *s, const char **code, char *msg, size_t len)
{
	struct sampler *sp = s->mgr->sampler;
	uint32_t tgid = s->p.all ? 0 : (uint32_t)s->p.pid;
	int r = 0;

	if (tgid) {
		r = sampler_watch_tgid(sp, tgid);
		if (r < 0)
			return r;
	}
	r = sampler_offcpu_add(sp, s->id, tgid, s->p.threshold_ns);
	if (r < 0) {
		if (tgid)
			sampler_unwatch_tgid(sp, tgid);
		if (r == -EBUSY) {
			*code = JPROF_E_LIMIT;
			if (tgid)
				snprintf(msg, len, "pid %d is already recorded off-CPU by another recording",
					 (int)tgid);
			else
				snprintf(msg, len, "another whole-host off-CPU recording is running");
		}
		return r;
	}
	s->offcpu_target = true;
	return 0;
}

int session_start(struct session_mgr *m, const struct session_params *p,
		  const struct session_sink *sink, struct session **out,
		  const char **err_code, char *err_msg, size_t err_len)
{
	struct session *s = NULL;
	char what[32];
	int r;

	*out = NULL;
	*err_code = NULL;
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
	r = pipeline_source_open(m->pipeline, &(struct pipeline_source_config){
		.process_root = p->all, .thread_state = event_set_has(&p->events, EVENT_WALL),
		.consumer = { on_sample, s },
		.per_sample = jprof_format_info(p->format)->time_ordered }, &s->src);
	if (r < 0)
		goto fail_internal;
	s->id = pipeline_source_id(s->src);
	s->event = event_get(p->event);
	r = event_set_types(&p->events, s->types, STORE_MAX_VALUES, &s->ntypes, &s->main_type);
	if (r < 0)
		goto fail_internal;
	event_set_name(&p->events, s->events_name, sizeof(s->events_name));
	for (size_t i = 0; i < p->events.n && !s->agent_event; i++)
		if (event_needs_jvm(p->events.ids[i]))
			s->agent_event = event_get(p->events.ids[i]);
	s->timed = jprof_format_info(p->format)->time_ordered;
	s->store = session_store_new(s);
	if (!s->store) {
		r = -ENOMEM;
		goto fail_internal;
	}
	s->start_mono_ns = clock_ns(CLOCK_MONOTONIC);
	s->start_unix_ns = clock_ns(CLOCK_REALTIME);
	s->request_mono_ns = s->start_mono_ns;
	if (p->all) {
		/* wall: both collectors, off-CPU first (it can be refused). */
		if (event_set_has(&p->events, EVENT_OFFCPU) || event_set_has(&p->events, EVENT_WALL)) {
			r = offcpu_start(s, err_code, err_msg, err_len);
			if (r < 0 && *err_code)
				goto fail;
			if (r < 0)
				goto fail_internal;
		}
		if (event_set_has(&p->events, EVENT_CPU) || event_set_has(&p->events, EVENT_WALL)) {
			r = sampler_cpu_events_open(m->sampler, s->id, interval_ns(s),
						    s->timed ? JP_COOKIE_RECORD : 0, &s->cpu_events);
			if (r < 0)
				goto fail_internal;
		}
	} else {
		struct attach_result probe;

		r = session_jvm_check(s, &probe, err_code, err_msg, err_len);
		if (r < 0)
			goto fail;
		if (proc_read_comm(p->pid, 0, s->comm, sizeof(s->comm)) < 0)
			snprintf(s->comm, sizeof(s->comm), "?");
		store_set_process_name(s->store, (uint32_t)p->pid, s->comm);
		/* Its unwind tables now, not at its first sample. */
		sampler_unwind_prepare(m->sampler, (uint32_t)p->pid);
		r = 0;
		if (session_has(s, EVENT_OFFCPU) || session_has(s, EVENT_WALL))
			r = offcpu_start(s, err_code, err_msg, err_len);
		/* alloc, lock: the agent's JVMTI events, no perf events (and
		 * nothing to gate) */
		s->gated = session_has(s, EVENT_CPU) || session_has(s, EVENT_WALL);
		if (r == 0 && s->gated)
			r = threadset_new(m->sampler, &(struct threadset_config){
				.source = s->id, .pid = p->pid, .period_ns = interval_ns(s),
				.max_threads = m->lim.max_threads, .quota = m->lim.quota,
				.uid = p->uid, .event_flags = s->timed ? JP_COOKIE_RECORD : 0,
				.gated = true }, &s->threads);
		s->thread_events = s->threads != NULL;
		if (r < 0 && r != -ESRCH && *err_code)
			goto fail;
		if (r < 0 && r != -ESRCH)
			goto fail_internal;
		if (r < 0) {
			*err_code = JPROF_E_NO_SUCH_PROCESS;
			snprintf(err_msg, err_len, "pid %d exited before recording started", (int)p->pid);
			r = -ESRCH;
			goto fail;
		}
		r = loop_add_io(m->loop, p->pidfd, EPOLLIN, on_pidfd, s, &s->pidfd_src);
		if (r < 0)
			goto fail_internal;
		r = session_access_init(s);
		if (r == -ESRCH) {
			*err_code = JPROF_E_NO_SUCH_PROCESS;
			snprintf(err_msg, err_len, "pid %d exited before recording started", (int)p->pid);
			goto fail;
		}
		if (r < 0)
			goto fail_internal;
	}
	if (s->gated) {
		s->gate_deadline_ns = s->request_mono_ns + (uint64_t)m->lim.gate_ms * 1000000ull;
		r = loop_add_timer(m->loop, SESSION_GATE_POLL_MS, SESSION_GATE_POLL_MS, session_on_gate_timer,
				   s, &s->gate_timer);
	} else {
		r = loop_add_timer(m->loop, p->duration_ms, 0, session_on_end_timer, s, &s->end_timer);
	}
	if (r < 0)
		goto fail_internal;
	s->next = m->sessions;
	m->sessions = s;
	m->count++;
	snprintf(what, sizeof(what), p->all ? "the whole host" : "pid %d", (int)p->pid);
	if (p->events.n > 1)
		log_audit("session %u started: uid %u records %s of %s for %llu ms, every %llu us of "
			  "CPU, off-CPU threshold %llu us, every %llu bytes, lock threshold %llu us",
			  s->id, (unsigned)p->uid, s->events_name, what,
			  (unsigned long long)p->duration_ms, (unsigned long long)p->interval_us,
			  (unsigned long long)(p->threshold_ns / 1000),
			  (unsigned long long)p->alloc_bytes,
			  (unsigned long long)(p->lock_threshold_ns / 1000));
	else if (p->event == EVENT_ALLOC)
		log_audit("session %u started: uid %u records %s of %s for %llu ms every %llu bytes",
			  s->id, (unsigned)p->uid, s->event->name, what,
			  (unsigned long long)p->duration_ms, (unsigned long long)p->alloc_bytes);
	else if (p->event == EVENT_LOCK)
		log_audit("session %u started: uid %u records %s of %s for %llu ms, threshold %llu us",
			  s->id, (unsigned)p->uid, s->event->name, what,
			  (unsigned long long)p->duration_ms,
			  (unsigned long long)(p->lock_threshold_ns / 1000));
	else
		log_audit("session %u started: uid %u records %s of %s for %llu ms, every %llu us of CPU, "
			  "off-CPU threshold %llu us", s->id, (unsigned)p->uid, s->event->name, what,
			  (unsigned long long)p->duration_ms,
			  (unsigned long long)(p->event == EVENT_OFFCPU ? 0 : p->interval_us),
			  (unsigned long long)(p->event == EVENT_CPU ? 0 : p->threshold_ns / 1000));
	session_send_started(s);
	/* A JVM recorded with the agent for the other events, whose off-CPU
	 * intervals get no Java stack yet: said once, as for -e offcpu alone. */
	if (session_has(s, EVENT_OFFCPU) && p->events.n > 1 &&
	    (s->java == JAVA_ATTACHING || s->java == JAVA_WAIT_AGENT)) {
		char msg[160];

		snprintf(msg, sizeof(msg), "pid %d is a JVM: the offcpu event records native and "
			 "kernel frames only (no Java frames yet)", (int)p->pid);
		session_send_warning(s, "java_frames_unavailable", msg);
	}
	if (s->java != JAVA_NONE)
		loop_add_timer(m->loop, 0, 0, session_jvm_on_begin, s, &s->java_timer);
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

int session_mgr_new(struct loop *loop, struct pipeline *pipeline, const struct session_limits *lim,
		    struct session_mgr **out)
{
	struct session_mgr *m = calloc(1, sizeof(*m));
	int r;

	*out = NULL;
	if (!m)
		return -ENOMEM;
	m->loop = loop;
	m->pipeline = pipeline;
	r = pipeline_add_tick(pipeline, on_tick, m);
	if (r < 0) {
		free(m);
		return r;
	}
	if (lim)
		m->lim = *lim;
	if (!m->lim.max_sessions)
		m->lim.max_sessions = 64;
	if (!m->lim.max_threads)
		m->lim.max_threads = 8192;
	if (!m->lim.gate_ms)
		m->lim.gate_ms = SESSION_GATE_DEFAULT_MS;
	*out = m;
	return 0;
}

void session_mgr_set_jvm(struct session_mgr *m, struct agentlink *agents, const char *agent_path,
			 const char *agent_socket)
{
	m->agents = agents;
	m->agent_path = agent_path;
	m->agent_socket = agent_socket;
}

void session_mgr_set_render(struct session_mgr *m, struct render *rw)
{
	m->render = rw;
}

void session_mgr_set_sampler(struct session_mgr *m, struct sampler *sampler)
{
	m->sampler = sampler;
}

void session_mgr_free(struct session_mgr *m)
{
	if (!m)
		return;
	while (m->sessions) {
		struct session *s = m->sessions;

		s->finishing = true;
		session_send_error(s, JPROF_E_SHUTTING_DOWN, "jprofd is shutting down; the recording was stopped");
		unlink_session(s);
		if (s->sink.done)
			s->sink.done(s->sink.ctx, s);
		session_free(s);
	}
	/* Profiles still being rendered are not waited for. */
	while (m->rendering) {
		struct session *s = m->rendering;

		session_send_error(s, JPROF_E_SHUTTING_DOWN,
				   "jprofd is shutting down; the recording's profile was not rendered");
		session_end(s);
	}
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

void session_get_gate_stats(const struct session_mgr *m, struct session_gate_stats *out)
{
	*out = m->gate;
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
		.threads = (unsigned)session_thread_count(s),
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
