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
#include "authz.h"
#include "event.h"
#include "jprof_proto.h"
#include "jring.h"
#include "jvmjoin.h"
#include "log.h"
#include "pprof.h"
#include "loop.h"
#include "proc.h"
#include "pipeline.h"
#include "profile_msg.h"
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
static size_t thread_count(const struct session *s)
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

/* ---- the requester's right, checked again ----
 * The kernel checks ptrace access once, at attach; an exec of a setuid or
 * setgid program (or of one with file capabilities) takes the process out
 * of its owner's reach. An unprivileged recording therefore keeps its
 * samples in s->pending until a check of the requester's right made after
 * their drain passes (after every drain, at once after an exec the sampler
 * reports, and at the end); a failed check drops them and ends the
 * recording with status "access_lost". */

enum access { ACCESS_OK, ACCESS_LOST, ACCESS_GONE };

static enum access access_check(struct session *s)
{
	char why[256];
	int r = authz_check_pid(&s->p.peer, s->p.pid, s->proc_start_ns, why, sizeof(why));

	if (r == -ESRCH)
		return ACCESS_GONE;  /* reaped: nothing left to read */
	if (r < 0) {
		log_audit("session %u: uid %u may no longer record pid %d: %s; recording ends",
			  s->id, (unsigned)s->p.peer.uid, (int)s->p.pid, why);
		return ACCESS_LOST;
	}
	return ACCESS_OK;
}

/* A store for the recording's samples; one that keeps each sample's time
 * when the format asked for is time-ordered (up to SESSION_MAX_TIMES). */
static struct store *session_store_new(struct session *s)
{
	/* pprof says which addresses (and lines) of a function are hot. */
	struct store_limits lim = { .max_addrs = s->p.format == JPROF_FMT_PPROF ? STORE_PPROF_ADDRS : 0 };
	struct store *st = store_new(&lim, s->types, s->ntypes);

	if (st && s->timed && store_keep_times(st, SESSION_MAX_TIMES) < 0) {
		store_free(st);
		return NULL;
	}
	return st;
}

static int pending_reset(struct session *s, bool keep)
{
	int r = keep ? store_merge(s->store, s->pending, NULL, NULL) : 0;

	if (keep) {
		s->samples += s->pending_samples;
		s->stacks_lost += s->pending_lost;
	}
	s->pending_samples = s->pending_lost = 0;
	store_free(s->pending);
	s->pending = session_store_new(s);
	if (r < 0 || !s->pending) {
		log_err("session %u: cannot keep checked samples: %s", s->id,
			strerror(r < 0 ? -r : ENOMEM));
		return r < 0 ? r : -ENOMEM;
	}
	return 0;
}

static void access_passed(struct session *s)
{
	struct sampler_stats st;

	s->exec_seen = false;
	sampler_get_stats(s->mgr->sampler, &st);
	s->ringbuf_full_mark = st.ringbuf_full;
	if (pending_reset(s, true) < 0)
		s->access_lost = true;  /* cannot hold samples back any more */
}

/* The final check, as the recording ends: the status to report. */
static const char *access_final(struct session *s, const char *status)
{
	struct sampler_stats st;

	if (!s->pending || s->access_lost)
		return s->access_lost ? "access_lost" : status;
	switch (access_check(s)) {
	case ACCESS_OK:
		access_passed(s);
		return status;
	case ACCESS_LOST:
		s->access_lost = true;
		pending_reset(s, false);
		return "access_lost";
	case ACCESS_GONE:
		break;
	}
	/* Reaped before it could be checked. Its credentials can only have
	 * changed by an exec (its uids and gids were all the requester's, so
	 * setuid() has nothing to switch to): keep the samples unless one was
	 * seen, or the sampler dropped messages and could have lost one. */
	sampler_get_stats(s->mgr->sampler, &st);
	if (s->exec_seen || st.ringbuf_full != s->ringbuf_full_mark) {
		log_info("session %u: pid %d exec'd and exited before its credentials could be read; "
			 "%llu samples since the last check dropped", s->id, (int)s->p.pid,
			 (unsigned long long)s->pending_samples);
		pending_reset(s, false);
	} else {
		pending_reset(s, true);
	}
	return status;
}

static void finish(struct session *s, const char *status);

/* After a drain or an exec: keeps the held samples, or ends the recording
 * (true: s is freed). */
static bool access_recheck(struct session *s)
{
	if (!s->pending || s->finishing)
		return false;
	switch (access_check(s)) {
	case ACCESS_OK:
		access_passed(s);
		break;
	case ACCESS_LOST:
		s->access_lost = true;
		pending_reset(s, false);
		finish(s, "access_lost");  /* no name wait: frees s */
		return true;
	case ACCESS_GONE:
		break;  /* its pidfd ends the recording; access_final decides */
	}
	return false;
}

static void on_access_timer(struct loop_source *src, void *arg)
{
	struct session *s = arg;

	loop_remove(s->access_timer);
	s->access_timer = NULL;
	access_recheck(s);
}

void session_mgr_on_exec(uint32_t tgid, void *arg)
{
	struct session_mgr *m = arg;

	/* Called inside a drain: only note it and check from the loop. */
	for (struct session *s = m->sessions; s; s = s->next) {
		if (s->p.all || (uint32_t)s->p.pid != tgid || !s->pending || s->finishing)
			continue;
		s->exec_seen = true;
		if (!s->access_timer)
			loop_add_timer(m->loop, 0, 0, on_access_timer, s, &s->access_timer);
	}
}

/* An unprivileged recording: when the process started (so a check never
 * reads a successor's credentials), and a store to hold samples in. */
static int access_init(struct session *s)
{
	struct sampler_stats st;
	int r;

	if (s->p.peer.privileged || s->p.all)
		return 0;
	r = proc_read_start_boottime(s->p.pid, &s->proc_start_ns);
	if (r == 0 && proc_pidfd_running(s->p.pidfd) != 1)
		r = -ESRCH;  /* the start time may be a successor's */
	if (r < 0)
		return r == -ENOENT ? -ESRCH : r;
	s->pending = session_store_new(s);
	if (!s->pending)
		return -ENOMEM;
	sampler_get_stats(s->mgr->sampler, &st);
	s->ringbuf_full_mark = st.ringbuf_full;
	return 0;
}

/* ---- messages ---- */

void session_send_obj(struct session *s, struct json_object *o)
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

void session_send_error(struct session *s, const char *code, const char *msg)
{
	char *line = jprof_error_line(s->p.req_id, true, code, msg);

	if (line)
		s->sink.send(s->sink.ctx, line, strlen(line));
	free(line);
}


static void send_progress(struct session *s)
{
	struct json_object *o = jprof_response_new(s->p.req_id, "progress");

	if (!o)
		return;
	json_object_object_add(o, "elapsed_ms", json_object_new_int64((int64_t)elapsed_ms(s)));
	json_object_object_add(o, "duration_ms", json_object_new_int64((int64_t)s->p.duration_ms));
	json_object_object_add(o, "samples", json_object_new_int64((int64_t)s->samples));
	json_object_object_add(o, "threads", json_object_new_int64((int64_t)thread_count(s)));
	session_send_obj(s, o);
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
	json_object_object_add(o, "event", json_object_new_string(s->events_name));
	json_object_object_add(o, "duration_ms", json_object_new_int64((int64_t)s->p.duration_ms));
	json_object_object_add(o, "interval_us", json_object_new_int64((int64_t)s->p.interval_us));
	if (session_has(s, EVENT_OFFCPU) || session_has(s, EVENT_WALL))
		json_object_object_add(o, "threshold_us",
				       json_object_new_int64((int64_t)(s->p.threshold_ns / 1000)));
	else if (session_has(s, EVENT_LOCK))  /* as before lock_threshold_us existed */
		json_object_object_add(o, "threshold_us",
				       json_object_new_int64((int64_t)(s->p.lock_threshold_ns / 1000)));
	if (session_has(s, EVENT_LOCK))
		json_object_object_add(o, "lock_threshold_us",
				       json_object_new_int64((int64_t)(s->p.lock_threshold_ns / 1000)));
	if (session_has(s, EVENT_ALLOC))
		json_object_object_add(o, "alloc_bytes", json_object_new_int64((int64_t)s->p.alloc_bytes));
	session_send_obj(s, o);
}

/* The start gate opened: sampling runs from now, for the whole duration. */
static void send_sampling(struct session *s)
{
	struct json_object *o = jprof_response_new(s->p.req_id, "sampling");

	if (!o)
		return;
	json_object_object_add(o, "wait_ms", json_object_new_int64((int64_t)s->gate_wait_ms));
	json_object_object_add(o, "ready", json_object_new_boolean(!s->gate_deadline_hit));
	session_send_obj(s, o);
}

/* ---- the start gate ----
 * A `record --pid` opens its per-thread events stopped and starts them all
 * at once when the process is ready: a JVM's agent has armed the events of
 * the threads it knows (their samples carry Java frames from the first
 * one), and the process's unwind tables are built (no frame-pointer-only
 * stacks first). A deadline bounds the wait; the recording's time, and its
 * duration, count from the opening. */

static void on_end_timer(struct loop_source *src, void *arg);

static void gate_open(struct session *s)
{
	uint64_t now = clock_ns(CLOCK_MONOTONIC);
	char msg[256];
	int r;

	loop_remove(s->gate_timer);
	s->gate_timer = NULL;
	s->gate_deadline_hit = now >= s->gate_deadline_ns;
	s->gate_wait_ms = (now - s->request_mono_ns) / 1000000ull;
	if (s->gate_deadline_hit)
		s->mgr->gate.opened_deadline++;
	else
		s->mgr->gate.opened_ready++;
	s->mgr->gate.wait_ms_total += s->gate_wait_ms;
	if (s->gate_wait_ms > s->mgr->gate.wait_ms_max)
		s->mgr->gate.wait_ms_max = s->gate_wait_ms;
	/* Off-CPU intervals (counts without a time) of the gated wait are
	 * outside the recording: those still open are forgotten, and those
	 * ended are drained now, while on_sample still drops them. */
	if (s->offcpu_target) {
		sampler_offcpu_restart(s->mgr->sampler, s->id);
		pipeline_drain(s->mgr->pipeline);
	}
	s->gated = false;
	r = threadset_open_gate(s->threads);
	if (r < 0)
		log_warn("session %u: starting the events of pid %d: %s", s->id, (int)s->p.pid,
			 strerror(-r));
	s->start_mono_ns = now;
	s->start_unix_ns = clock_ns(CLOCK_REALTIME);
	r = loop_add_timer(s->mgr->loop, s->p.duration_ms, 0, on_end_timer, s, &s->end_timer);
	if (r < 0) {
		log_err("session %u: cannot time its end: %s", s->id, strerror(-r));
		session_abort(s, JPROF_E_INTERNAL, "cannot start recording: no timer for its end");
		return;
	}
	log_info("session %u: sampling pid %d %llu ms after the request%s", s->id, (int)s->p.pid,
		 (unsigned long long)s->gate_wait_ms,
		 s->gate_deadline_hit ? " (the gate's deadline)" : "");
	if (s->gate_deadline_hit) {
		bool java = session_jvm_ready(s);

		snprintf(msg, sizeof(msg), "pid %d was not ready after %llu ms (%s); sampling "
			 "started anyway: its first samples may lack %s", (int)s->p.pid,
			 (unsigned long long)s->gate_wait_ms,
			 !java ? "the JVM agent had not armed its threads' events"
			 : "its unwind tables were still being built",
			 !java ? "Java frames" : "frames of code without frame pointers");
		session_send_warning(s, "sampling_not_ready", msg);
	}
	send_sampling(s);
}

void session_gate_check(struct session *s)
{
	if (!s->gated || s->finishing)
		return;
	if (clock_ns(CLOCK_MONOTONIC) < s->gate_deadline_ns &&
	    (!session_jvm_ready(s) || sampler_unwind_pending(s->mgr->sampler, (uint32_t)s->p.pid)))
		return;
	gate_open(s);
}

static void on_gate_timer(struct loop_source *src, void *arg)
{
	session_gate_check(arg);
}

/* The sampling period of the recording: the first of its events that has
 * one (cpu's interval; the other events are not sampled at an interval). */
static const struct event_info *periodic_event(const struct session *s)
{
	for (size_t i = 0; i < s->p.events.n; i++)
		if (event_get(s->p.events.ids[i])->period_type.unit)
			return event_get(s->p.events.ids[i]);
	return s->event;
}

static void session_end(struct session *s);

/* The worker rendered the profile (render.h): the line goes to the client,
 * then the session ends. */
static void on_rendered(void *arg, int err, struct buf *out)
{
	struct session *s = arg;

	s->render_job = NULL;
	if (err < 0) {
		log_err("session %u: rendering %s failed: %s", s->id, jprof_format_info(s->p.format)->name,
			strerror(-err));
		session_send_error(s, JPROF_E_INTERNAL, "rendering the profile failed");
	} else {
		s->sink.send(s->sink.ctx, out->data, out->len);
	}
	session_end(s);
}

static void session_release(struct session *s);

/* Builds the profile message but for its data, here on the loop (the
 * summary reads the threads, the agent, the sampler), then lets go of
 * everything but the store and hands store and message to the render
 * worker; on_rendered sends the line. The session waits on the manager's
 * rendering list, still charged to its connection, so a uid's renderings
 * are bounded by its recordings. */
static void send_profile(struct session *s, const char *status)
{
	const struct event_info *pe = periodic_event(s);
	struct export_meta meta = {
		.pid = s->p.all ? 0 : (uint32_t)s->p.pid,
		.comm = s->p.all ? NULL : s->comm,
		.event = s->p.events.n > 1 ? s->events_name : s->event->perf_name,
		.start_unix_ns = s->start_unix_ns,
		.start_mono_ns = s->start_mono_ns,
		.duration_ns = elapsed_ms(s) * 1000000ull,
		.period_type = pe->period_type,
		.period = pe->period_type.unit ? interval_ns(s) : 0,
		.status = status,
	};
	/* CPU profiles show sample counts (as always); other events, and
	 * several events, the first one's main value (off-CPU: nanoseconds), a
	 * count of intervals says little. Formats showing every event's main
	 * value in turn (text, html) get them all. */
	const char *mains[EVENT_COUNT];
	struct export_options opt = {
		.thread_frames = s->p.thread_frames,
		.java_types = s->p.java_types,
		.value = s->event->id == EVENT_CPU && s->p.events.n == 1 ? NULL
			 : s->types[s->main_type].type,
		.event_values = mains,
		.nevent_values = s->p.events.n,
	};
	struct render_req req = { .meta = &meta, .opt = &opt, .fmt = s->p.format, .uid = s->p.uid };
	struct buf none = BUF_INIT;
	struct json_object *o, *sum;
	int r;

	for (size_t i = 0; i < s->p.events.n; i++) {
		const struct event_info *ev = event_get(s->p.events.ids[i]);

		mains[i] = ev->types[ev->main_value].type;
	}
	session_jvm_thread_names(s);
	o = profile_msg_new(s->p.req_id, status, s->p.format, &none, s->store, &sum);
	if (!o) {
		session_send_error(s, JPROF_E_INTERNAL, "out of memory");
		session_end(s);
		return;
	}
	json_object_object_add(sum, "duration_ms", json_object_new_int64((int64_t)elapsed_ms(s)));
	json_object_object_add(sum, "lost", json_object_new_int64((int64_t)s->stacks_lost));
	json_object_object_add(sum, "threads", json_object_new_int64((int64_t)thread_count(s)));
	/* Per-thread cpu-clock events: the CPU time they counted, and the
	 * samples that time stands for, whatever became of them (a reader
	 * compares with samples to see losses). */
	if (s->thread_events) {
		uint64_t cpu = s->threads ? threadset_cpu_ns(s->threads) : s->cpu_ns_at_end;

		json_object_object_add(sum, "cpu_ns", json_object_new_int64((int64_t)cpu));
		json_object_object_add(sum, "samples_expected",
				       json_object_new_int64((int64_t)(cpu / interval_ns(s))));
	}
	session_jvm_summary(s, sum);
	session_release(s);
	req.st = s->store;
	req.msg = o;
	s->store = NULL;  /* the job's (without a worker, s is gone when it returns) */
	s->next = s->mgr->rendering;
	s->mgr->rendering = s;
	r = render_submit(s->mgr->render, &req, on_rendered, s, &s->render_job);
	if (r < 0) {  /* nothing was taken */
		s->store = req.st;
		json_object_put(o);
		on_rendered(s, r, NULL);
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
static void session_release(struct session *s)
{
	close_events(s);
	if (s->join)
		sampler_set_min_gap(s->mgr->sampler, s->id, 0);
	attach_cancel(s->attach);
	s->attach = NULL;
	agent_stop(s->agent);
	s->agent = NULL;
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
static void session_end(struct session *s)
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
	agent_stop(s->agent);  /* the agent closes its fds and unmaps the ring */
	s->agent = NULL;
	status = access_final(s, status);
	store_get_totals(s->store, &tot);
	log_info("session %u: %s after %llu ms, %llu samples, %zu stacks%s", s->id, status,
		 (unsigned long long)elapsed_ms(s), (unsigned long long)tot.values[0], tot.stacks,
		 tot.truncated ? " (truncated)" : "");
	if (s->first_java_ms)
		log_info("session %u: first sample with Java frames taken %llu ms after the request",
			 s->id, (unsigned long long)s->first_java_ms);
	unlink_session(s);
	send_profile(s, status);  /* ends s, now or once rendered */
}

static void finish(struct session *s, const char *status)
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
	attach_cancel(s->attach);
	s->attach = NULL;
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
	finish(s, status);
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
		if (access_recheck(s))
			continue;
		if (s->threads)
			threadset_rescan(s->threads);
		/* The worker reads source lines while the recording runs, so
		 * the rendering (on the loop, never waiting) finds them. */
		if (s->p.format == JPROF_FMT_PPROF)
			s->lines_from = pprof_lines_prefetch(s->store, s->lines_from);
		if (s->p.progress)
			send_progress(s);
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
		r = access_init(s);
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
		r = loop_add_timer(m->loop, SESSION_GATE_POLL_MS, SESSION_GATE_POLL_MS, on_gate_timer,
				   s, &s->gate_timer);
	} else {
		r = loop_add_timer(m->loop, p->duration_ms, 0, on_end_timer, s, &s->end_timer);
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
	send_started(s);
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
		.threads = (unsigned)thread_count(s),
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
