/* What a recording tells its client (session_int.h): its messages, and at
 * the end the profile, rendered by the render worker. */
#include "session_int.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "event.h"
#include "jprof_proto.h"
#include "log.h"
#include "profile_msg.h"
#include "render.h"
#include "store.h"
#include "threadset.h"

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


void session_send_warning(struct session *s, const char *code, const char *msg)
{
	struct json_object *o = jprof_response_new(s->p.req_id, "warning");

	if (!o)
		return;
	json_object_object_add(o, "code", json_object_new_string(code));
	json_object_object_add(o, "message", json_object_new_string(msg));
	session_send_obj(s, o);
}

void session_send_progress(struct session *s)
{
	struct json_object *o = jprof_response_new(s->p.req_id, "progress");

	if (!o)
		return;
	json_object_object_add(o, "elapsed_ms", json_object_new_int64((int64_t)elapsed_ms(s)));
	json_object_object_add(o, "duration_ms", json_object_new_int64((int64_t)s->p.duration_ms));
	json_object_object_add(o, "samples", json_object_new_int64((int64_t)s->samples));
	json_object_object_add(o, "threads", json_object_new_int64((int64_t)session_thread_count(s)));
	session_send_obj(s, o);
}

void session_send_started(struct session *s)
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

/* The sampling period of the recording: the first of its events that has
 * one (cpu's interval; the other events are not sampled at an interval). */
static const struct event_info *periodic_event(const struct session *s)
{
	for (size_t i = 0; i < s->p.events.n; i++)
		if (event_get(s->p.events.ids[i])->period_type.unit)
			return event_get(s->p.events.ids[i]);
	return s->event;
}

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

/* Builds the profile message but for its data, here on the loop (the
 * summary reads the threads, the agent, the sampler), then lets go of
 * everything but the store and hands store and message to the render
 * worker; on_rendered sends the line. The session waits on the manager's
 * rendering list, still charged to its connection, so a uid's renderings
 * are bounded by its recordings. */
void session_send_profile(struct session *s, const char *status)
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
	json_object_object_add(sum, "threads", json_object_new_int64((int64_t)session_thread_count(s)));
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
