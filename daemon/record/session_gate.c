/* The start gate of a `record --pid` (session_int.h). */
#include "session_int.h"

#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "jprof_proto.h"
#include "log.h"
#include "loop.h"
#include "pipeline.h"
#include "sampler.h"
#include "threadset.h"

/* ---- the start gate ----
 * A `record --pid` opens its per-thread events stopped and starts them all
 * at once when the process is ready: a JVM's agent has armed the events of
 * the threads it knows (their samples carry Java frames from the first
 * one), and the process's unwind tables are built (no frame-pointer-only
 * stacks first). A deadline bounds the wait; the recording's time, and its
 * duration, count from the opening. */

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
	r = loop_add_timer(s->mgr->loop, s->p.duration_ms, 0, session_on_end_timer, s, &s->end_timer);
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

void session_on_gate_timer(struct loop_source *src, void *arg)
{
	session_gate_check(arg);
}
