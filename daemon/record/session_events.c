/* The JVM agent's JVMTI events of a recording (session_int.h): alloc and
 * lock turned on and off, their records, and the wall timer's answer.
 * The agent's connection and the rest of its callbacks: session_agent.c. */
#include "session_int.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "agentlink.h"
#include "jprof_proto.h"
#include "jvmjoin.h"
#include "log.h"
#include "loop.h"

static enum event_id agent_kind_event(uint32_t kind)
{
	return kind == JPAG_EV_ALLOC ? EVENT_ALLOC : EVENT_LOCK;
}

/* The next of the recording's agent events the agent has not turned on,
 * in the order given (the agent answers one EVENT_ON at a time); 0: none. */
static uint32_t agent_next_kind(const struct session *s)
{
	for (size_t i = 0; i < s->p.events.n; i++) {
		enum event_id id = s->p.events.ids[i];
		uint32_t kind = id == EVENT_ALLOC ? JPAG_EV_ALLOC : id == EVENT_LOCK ? JPAG_EV_LOCK : 0;

		if (kind && !(s->agent_ev_on & kind))
			return kind;
	}
	return 0;
}

static void on_event_answer_timeout(struct loop_source *src, void *arg);

/* Asks the agent for the next event: 0, or -errno with the recording ended. */
int session_jvm_ask_event(struct session *s, struct agent *a)
{
	uint32_t kind = agent_next_kind(s);
	char msg[256];
	int r;

	r = agent_event_on(a, s, kind, kind == JPAG_EV_ALLOC ? s->p.alloc_bytes
			   : s->p.lock_threshold_ns);
	if (r == 0)
		r = loop_add_timer(s->mgr->loop, JVM_EVENT_ANSWER_MS, 0, on_event_answer_timeout, s,
				   &s->agent_ev_timer);
	if (r == -EBUSY) {
		/* One JVMTI environment for both: one recording's at a time. */
		snprintf(msg, sizeof(msg), "another recording of pid %d uses the JVM agent's "
			 "allocation and lock events; one at a time per JVM", (int)s->p.pid);
		session_abort(s, JPROF_E_EVENT_UNAVAILABLE, msg);
		return r;
	}
	if (r < 0) {
		snprintf(msg, sizeof(msg), "cannot turn the %s event on in pid %d: %s",
			 event_get(agent_kind_event(kind))->name, (int)s->p.pid, strerror(-r));
		session_abort(s, JPROF_E_INTERNAL, msg);
		return r;
	}
	s->agent_ev = AGENT_EV_ASKED;
	s->agent_ev_kind = kind;
	return 0;
}

static void on_event_answer_timeout(struct loop_source *src, void *arg)
{
	struct session *s = arg;
	char msg[256];

	loop_remove(s->agent_ev_timer);
	s->agent_ev_timer = NULL;
	snprintf(msg, sizeof(msg),
		 "the JVM agent of pid %d did not answer the request to turn the %s event on "
		 "(an older agent already loaded in this JVM?)", (int)s->p.pid,
		 event_get(agent_kind_event(s->agent_ev_kind))->name);
	session_abort(s, JPROF_E_EVENT_UNAVAILABLE, msg);
}

void session_jvm_event_status(void *ctx, uint32_t event, int status, const char *why)
{
	struct session *s = ctx;
	char msg[512];

	if (event == JPAG_EV_WALL) {
		if (!session_has(s, EVENT_WALL) || s->java_wall)
			return;
		if (status == 0) {
			s->java_wall = true;
			log_info("session %u: pid %d: the agent's wall timer runs", s->id, (int)s->p.pid);
			return;
		}
		snprintf(msg, sizeof(msg), "the JVM agent of pid %d cannot sample blocked threads (%s): "
			 "their time has native and kernel frames only", (int)s->p.pid,
			 why[0] ? why : strerror(-status));
		log_warn("session %u: %s", s->id, msg);
		session_send_warning(s, "java_wall_unavailable", msg);
		return;
	}
	if (s->agent_ev != AGENT_EV_ASKED || event != s->agent_ev_kind)
		return;
	loop_remove(s->agent_ev_timer);
	s->agent_ev_timer = NULL;
	if (status == 0) {
		s->agent_ev_on |= event;
		log_info("session %u: pid %d: %s event on", s->id, (int)s->p.pid,
			 event_get(agent_kind_event(event))->name);
		if (agent_next_kind(s) && s->agent && !s->finishing)
			session_jvm_ask_event(s, s->agent);  /* ends the recording on failure */
		else
			s->agent_ev = AGENT_EV_ON;
		return;
	}
	s->agent_ev = s->agent_ev_on ? AGENT_EV_ON : AGENT_EV_NONE;
	snprintf(msg, sizeof(msg), "the JVM of pid %d refused the %s event: %s", (int)s->p.pid,
		 event_get(agent_kind_event(event))->name, why[0] ? why : strerror(-status));
	log_warn("session %u: %s", s->id, msg);
	if (!s->finishing)
		session_abort(s, JPROF_E_EVENT_UNAVAILABLE, msg);
}

/* JVMTI samples objects at a random byte distance, exponential with mean
 * alloc_bytes: an object of size bytes is sampled with probability
 * 1 - exp(-size / alloc_bytes). Each sample stands for 1 / p objects of its
 * size (unbiased whatever the object sizes; see docs/protocol.md). */
static void alloc_values(uint64_t size, uint64_t interval, uint64_t v[3])
{
	double p = -expm1(-(double)size / (double)interval);
	double w = p > 0 ? 1.0 / p : 1.0;

	v[0] = 1;
	v[1] = (uint64_t)llround(w);
	v[2] = (uint64_t)llround(w * (double)size);
}

void session_jvm_event(void *ctx, const struct jpag_event_rec *rec, const char *cls,
		      const struct jpring_frame *frames)
{
	struct session *s = ctx;
	uint64_t v[3];

	if ((rec->event != JPAG_EV_ALLOC && rec->event != JPAG_EV_LOCK) ||
	    !(s->agent_ev_on & rec->event) || !s->join)
		return;
	if (s->gated || rec->time_ns < s->start_mono_ns)
		return;  /* before the start gate opened */
	if (rec->event == JPAG_EV_ALLOC) {
		if (rec->value == 0 || rec->value > JVM_ALLOC_MAX_BYTES)
			return;
		alloc_values(rec->value, s->p.alloc_bytes, v);
	} else {
		/* The event went on after the request: no real wait is longer
		 * than the time since. */
		if (rec->value > clock_ns(CLOCK_MONOTONIC) - s->request_mono_ns)
			return;
		v[0] = v[1] = 1;
		v[2] = rec->value;
	}
	s->agent_ev_samples++;
	jvm_join_add_event(s->join, rec->tid, rec->time_ns, clock_ns(CLOCK_MONOTONIC),
			   agent_kind_event(rec->event),
			   v, 3, cls, rec->class_len, frames, rec->nframes);
}

void session_jvm_event_off_done(struct session *s)
{
	loop_remove(s->agent_ev_timer);
	s->agent_ev_timer = NULL;
	s->agent_ev = AGENT_EV_NONE;
	s->agent_ev_on = 0;
	session_jvm_finish(s, s->final_status);
}

void session_jvm_events_done(void *ctx)
{
	struct session *s = ctx;

	if (s->agent_ev == AGENT_EV_STOPPING)
		session_jvm_event_off_done(s);
}

static void on_event_drain_timeout(struct loop_source *src, void *arg)
{
	struct session *s = arg;

	log_warn("session %u: pid %d: the agent's last %s records did not come in %d ms", s->id,
		 (int)s->p.pid, s->events_name, JVM_EVENT_DRAIN_MS);
	session_jvm_event_off_done(s);
}

bool session_jvm_event_off(struct session *s, const char *status)
{
	if (s->agent_ev == AGENT_EV_ASKED) {
		/* Ended before the answer: STOP turns it off in the agent (and
		 * EVENT_OFF below the events already on, with their last records). */
		loop_remove(s->agent_ev_timer);
		s->agent_ev_timer = NULL;
		s->agent_ev = s->agent_ev_on ? AGENT_EV_ON : AGENT_EV_NONE;
	}
	if (s->agent_ev != AGENT_EV_ON || !s->agent || agent_event_off(s->agent, s) < 0)
		return false;
	s->agent_ev = AGENT_EV_STOPPING;
	s->final_status = status;
	loop_remove(s->agent_ev_timer);
	s->agent_ev_timer = NULL;
	if (loop_add_timer(s->mgr->loop, JVM_EVENT_DRAIN_MS, 0, on_event_drain_timeout, s,
			   &s->agent_ev_timer) < 0) {
		s->agent_ev = AGENT_EV_NONE;
		return false;
	}
	return true;
}
