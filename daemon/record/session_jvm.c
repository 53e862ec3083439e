/* The JVM side of a running recording (session_int.h): the agent's ring
 * read into the join, the join in slices, the last method names, the
 * summary's "java" member. The agent's connection: session_agent.c. */
#include "session_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentlink.h"
#include "attach.h"
#include "jprof_proto.h"
#include "jvmjoin.h"
#include "log.h"
#include "loop.h"
#include "pipeline.h"
#include "proc.h"
#include "sampler.h"
#include "threadset.h"

static const char *const java_state_names[] = {
	[JAVA_NONE] = "off", [JAVA_ATTACHING] = "attaching", [JAVA_WAIT_AGENT] = "waiting_for_agent",
	[JAVA_ACTIVE] = "active", [JAVA_FAILED] = "failed", [JAVA_GONE] = "agent_gone",
};

/* ---- JVM: agent binding, ring, join ---- */



struct ring_ctx {
	struct agent *a;
	uint64_t now;
};

/* One record of the agent's ring, to the recording whose event set took it
 * (any recording of the JVM may be the one reading): each gets exactly the
 * records of its own events. */
static void ring_record(const struct jring_record *rec, void *arg)
{
	struct ring_ctx *c = arg;
	struct session *s = agent_set_ctx(c->a, rec->set);
	uint64_t v[2];

	if (!s || !s->join)
		return;  /* a set that ended */
	/* Taken before the start gate opened (the wall timer runs from
	 * START): outside the recording's time. */
	if (s->gated || rec->time_ns < s->start_mono_ns)
		return;
	if (rec->kind == JPRING_KIND_CPU) {
		jvm_join_add_agent(s->join, rec->tid, rec->time_ns, c->now, rec->num_frames,
				   rec->frames);
		return;
	}
	/* A wall record (jring checked its state and weight): only in a wall
	 * recording whose agent said its timer runs. It stands for weight
	 * intervals of blocked time, without a BPF record to join. */
	if (!session_has(s, EVENT_WALL) || !s->java_wall)
		return;
	v[0] = 1;
	v[1] = (uint64_t)rec->weight * interval_ns(s);
	s->java_wall_records++;
	jvm_join_add_wall(s->join, rec->tid, rec->time_ns, c->now, EVENT_WALL, v, 2, rec->state,
			  rec->num_frames, rec->frames);
}

/* The agent's wall timer signals the threads it named (JPAG_THREAD_NAME)
 * when they sleep (S) or wait uninterruptibly (D); it leaves runnable
 * threads that wait for a CPU to the off-CPU collector ("[runnable]"). */
bool session_jvm_wall_covers(struct session *s, const struct built_sample *bs)
{
	const struct sample_frame *leaf;

	if (!s->java_wall || s->java != JAVA_ACTIVE || !s->agent || !s->join ||
	    bs->event->id != EVENT_OFFCPU || !bs->nframes)
		return false;
	leaf = &bs->frames[bs->nframes - 1];
	if (leaf->kind == FRAME_MARKER && strcmp(leaf->name, "[runnable]") == 0)
		return false;
	if (!jvm_join_has_thread(s->join, bs->tid))
		return false;
	s->offcpu_covered++;
	return true;
}

/* Once per recording: a bound refused records or names (the summary counts them). */
static void warn_limits(struct session *s)
{
	struct jvm_join_stats js;
	char msg[256];

	if (!s->join || !jvm_join_limit_news(s->join))
		return;
	jvm_join_get_stats(s->join, &js);
	snprintf(msg, sizeof(msg),
		 "the JVM agent of pid %d sent more than jprofd keeps (implausible times, or past the "
		 "memory or method bounds); the excess is dropped and counted in summary.java.limits",
		 (int)s->p.pid);
	log_warn("session %u: %s (future %llu, before start %llu, over bytes %llu, over uid bytes %llu)",
		 s->id, msg, (unsigned long long)js.agent_future,
		 (unsigned long long)js.agent_before_start, (unsigned long long)js.over_bytes,
		 (unsigned long long)js.over_budget);
	session_send_warning(s, "java_limit", msg);
}

/* Up to max records from the ring into the join queues. */
static void read_ring(struct session *s, unsigned max)
{
	struct ring_ctx c = { .a = s->agent, .now = clock_ns(CLOCK_MONOTONIC) };
	struct jring *ring;

	/* Records only while the agent's connection is still the recorded
	 * process's own (the ring is shared memory: its writer must be it). */
	if (!s->agent || agent_is_process(s->agent, s->p.pid, s->p.pidfd) < 0)
		return;
	ring = agent_ring(s->agent);
	if (!ring)
		return;
	/* A slot reserved but not written yet is waited for 1 s (a handler
	 * may be interrupted mid-write), then skipped. */
	jring_read(ring, max, 1000 / JVM_RING_PERIOD_MS, ring_record, &c);
	jring_get_stats(ring, &s->ring_st);
	warn_limits(s);
	if ((s->ring_st.corrupt || s->ring_st.header_corrupt) && !s->ring_corrupt_reported) {
		char msg[256];

		s->ring_corrupt_reported = true;
		snprintf(msg, sizeof(msg),
			 "the agent's sample ring of pid %d is corrupt (%llu bad slots%s); bad records are skipped",
			 (int)s->p.pid, (unsigned long long)s->ring_st.corrupt,
			 s->ring_st.header_corrupt ? ", header tampered with" : "");
		log_warn("session %u: %s", s->id, msg);
		session_send_warning(s, "ring_corrupt", msg);
	}
}

void session_jvm_read_ring(struct session *s)
{
	read_ring(s, JVM_RING_SLOTS);
}

void session_jvm_request_names(struct session *s)
{
	uint64_t ids[JPAG_RESOLVE_MAX];
	unsigned n;

	while (s->agent && (n = jvm_join_wanted(s->join, ids, JPAG_RESOLVE_MAX)) > 0)
		if (agent_resolve(s->agent, ids, n) < 0)
			break;
}

static void join_slice(struct session *s);
static void finish_slice(struct session *s);

static void on_join_timer(struct loop_source *src, void *arg)
{
	struct session *s = arg;

	loop_remove(s->join_timer);
	s->join_timer = NULL;
	if (s->join_final)
		finish_slice(s);
	else if (!s->finishing)
		join_slice(s);
}

/* Joins up to JVM_JOIN_SLICE records; the rest in later loop rounds, so a
 * flood from one agent delays other clients by one slice at a time. */
static void join_slice(struct session *s)
{
	if (pipeline_source_join_run_some(s->src, s->join_horizon, false, JVM_JOIN_SLICE))
		loop_add_timer(s->mgr->loop, 0, 0, on_join_timer, s, &s->join_timer);
	session_jvm_request_names(s);
}

static void on_names_timeout(struct loop_source *src, void *arg)
{
	struct session *s = arg;

	session_complete(s, s->final_status);
}

/* The final join, a slice at a time; then the wait for names. */
static void finish_slice(struct session *s)
{
	if (pipeline_source_join_run_some(s->src, UINT64_MAX, true, JVM_JOIN_SLICE)) {
		if (loop_add_timer(s->mgr->loop, 0, 0, on_join_timer, s, &s->join_timer) == 0)
			return;
		pipeline_source_join_run(s->src, UINT64_MAX, true);
	}
	s->join_final = false;
	session_jvm_request_names(s);
	if (jvm_join_held(s->join) && s->agent && !s->access_lost) {
		/* Give the agent a moment to name the last methods. */
		s->java_finishing = true;
		loop_remove(s->java_timer);
		s->java_timer = NULL;
		if (loop_add_timer(s->mgr->loop, JVM_NAME_WAIT_MS, 0, on_names_timeout, s,
				   &s->java_timer) == 0)
			return;
	}
	session_complete(s, s->final_status);
}

void session_jvm_finish(struct session *s, const char *status)
{
	loop_remove(s->join_timer);  /* a slice of the running join: the final one takes over */
	s->join_timer = NULL;
	s->final_status = status;
	s->join_final = true;
	session_jvm_read_ring(s);
	finish_slice(s);
}

void session_jvm_step(struct session *s, uint64_t horizon)
{
	if (!s->join)
		return;
	/* What the ring timer has not taken yet: a quarter at most, as the
	 * timer takes (more waits for the next round; its BPF records wait
	 * late_ns for it). */
	read_ring(s, JVM_RING_READ_MAX);
	s->join_horizon = horizon;
	if (!s->join_timer)  /* else the running slices take the new horizon */
		join_slice(s);
}

void session_jvm_on_ring_timer(struct loop_source *src, void *arg)
{
	/* Only empties the ring into the join queues; joining waits for the
	 * drain, when the matching BPF records have arrived. */
	read_ring(arg, JVM_RING_READ_MAX);
}

/* summary.java.limits: the bounds against a hostile agent, how close this
 * recording came, and what they refused. */
static void add_limits(struct jvm_join *join, struct json_object *java)
{
	struct json_object *l = json_object_new_object(), *d = json_object_new_object();
	struct jvm_budget *b = jvm_join_budget(join);
	size_t used = 0, peak = 0, limit = 0;
	struct jvm_join_stats js;

	if (!l || !d) {
		json_object_put(l);
		json_object_put(d);
		return;
	}
	jvm_join_get_stats(join, &js);
	if (b)
		jvm_budget_get(b, &used, &peak, &limit);
	jprof_json_add_u64(l, "session_bytes", JVM_SESSION_MAX_BYTES);
	jprof_json_add_u64(l, "session_bytes_peak", js.bytes_peak);
	jprof_json_add_u64(l, "uid_bytes", limit);
	jprof_json_add_u64(l, "uid_bytes_peak", peak);
	jprof_json_add_u64(l, "methods", JVM_MAX_METHODS);
	jprof_json_add_u64(l, "methods_tracked", js.methods);
	jprof_json_add_u64(d, "future_time", js.agent_future);
	jprof_json_add_u64(d, "before_start", js.agent_before_start);
	jprof_json_add_u64(d, "session_bytes", js.over_bytes);
	jprof_json_add_u64(d, "uid_bytes", js.over_budget);
	jprof_json_add_u64(d, "threads", js.over_tids);
	jprof_json_add_u64(d, "queue_full", js.dropped);
	jprof_json_add_u64(d, "frames_over_methods", js.frames_over_methods);
	json_object_object_add(l, "refused", d);
	json_object_object_add(java, "limits", l);
}

void session_jvm_summary(struct session *s, struct json_object *sum)
{
	struct json_object *j, *ring;
	struct jvm_join_stats js = { 0 };

	if (s->java == JAVA_NONE)
		return;
	j = json_object_new_object();
	ring = json_object_new_object();
	if (!j || !ring) {
		json_object_put(j);
		json_object_put(ring);
		return;
	}
	if (s->join)
		jvm_join_get_stats(s->join, &js);
	json_object_object_add(j, "state", json_object_new_string(java_state_names[s->java]));
	if (s->java_code[0]) {
		json_object_object_add(j, "code", json_object_new_string(s->java_code));
		json_object_object_add(j, "message", json_object_new_string(s->java_msg));
	}
	json_object_object_add(j, "attach_ms", json_object_new_int64((int64_t)s->attach_ms));
	json_object_object_add(j, "first_java_sample_ms", json_object_new_int64((int64_t)s->first_java_ms));
	json_object_object_add(j, "joined", json_object_new_int64((int64_t)js.joined));
	json_object_object_add(j, "without_java", json_object_new_int64((int64_t)js.bpf_unmatched));
	json_object_object_add(j, "agent_unmatched", json_object_new_int64((int64_t)js.agent_unmatched));
	json_object_object_add(j, "names_timed_out", json_object_new_int64((int64_t)js.names_timed_out));
	if (s->agent_event)
		json_object_object_add(j, "event_records",
				       json_object_new_int64((int64_t)s->agent_ev_samples));
	if (session_has(s, EVENT_WALL)) {
		json_object_object_add(j, "wall_timer", json_object_new_boolean(s->java_wall));
		jprof_json_add_u64(j, "wall_records", s->java_wall_records);
		jprof_json_add_u64(j, "offcpu_covered", s->offcpu_covered);
	}
	json_object_object_add(ring, "records", json_object_new_int64((int64_t)s->ring_st.records));
	json_object_object_add(ring, "dropped", json_object_new_int64((int64_t)s->ring_st.agent_dropped));
	json_object_object_add(ring, "overrun", json_object_new_int64((int64_t)s->ring_st.overrun));
	json_object_object_add(ring, "corrupt", json_object_new_int64((int64_t)s->ring_st.corrupt));
	json_object_object_add(ring, "stuck", json_object_new_int64((int64_t)s->ring_st.stuck));
	json_object_object_add(ring, "header_corrupt", json_object_new_boolean(s->ring_st.header_corrupt));
	json_object_object_add(j, "ring", ring);
	if (s->java_signal) {
		struct json_object *sg = json_object_new_object();

		if (sg) {
			jprof_json_add_u64(sg, "number", s->java_signal);
			json_object_object_add(sg, "foreign_at_start",
					       json_object_new_boolean(s->java_signal_foreign));
			jprof_json_add_u64(sg, "taken_over", s->java_signal_moves);
			json_object_object_add(j, "signal", sg);
		}
	}
	if (s->join)
		add_limits(s->join, j);
	json_object_object_add(sum, "java", j);
}

