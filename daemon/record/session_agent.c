/* The JVM agent of a recording (session_int.h): the decision before the
 * start, the attach, binding a connected agent, and the agent link's
 * callbacks (perf fds, method and thread names, its events, its signal). */
#include "session_int.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

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
/* No Java frames for this recording. With "java":"require" that ends it;
 * otherwise the client is warned and native stacks go on. May free s. */
static void java_fail(struct session *s, enum java_state st, const char *code, const char *msg)
{
	s->java = st;
	/* A native recording from here on (samples already joined keep theirs). */
	pipeline_source_expect_java(s->src, false);
	snprintf(s->java_code, sizeof(s->java_code), "%s", code);
	snprintf(s->java_msg, sizeof(s->java_msg), "%s", msg);
	log_warn("session %u: pid %d: no Java frames: %s (%s)", s->id, (int)s->p.pid, msg, code);
	/* alloc and lock have nothing to record without the agent. */
	if ((s->p.java == JPROF_JAVA_REQUIRE || s->agent_event) && !s->finishing) {
		session_abort(s, strcmp(code, "not_a_jvm") == 0 ? JPROF_E_NOT_A_JVM : JPROF_E_ATTACH_FAILED,
			      msg);
		return;
	}
	session_send_warning(s, code, msg);
}

static int jvm_perf_fd(void *ctx, uint32_t ns_tid, int *fd)
{
	struct session *s = ctx;
	pid_t host;
	int r;

	if (s->finishing || (!s->threads && !s->agent_event))
		return -ECANCELED;
	if (agent_is_process(s->agent, s->p.pid, s->p.pidfd) < 0) {
		log_audit("denied: a perf event of pid %d to an agent whose process is gone",
			  (int)s->p.pid);
		return -ESRCH;
	}
	/* Only threads of the agent's own process: the recorded pid. */
	r = proc_ns_tid_to_host(s->p.pid, (pid_t)ns_tid, &host);
	if (r < 0) {
		log_audit("denied: the agent of pid %d asked for an event on tid %u, not one of its threads",
			  (int)s->p.pid, ns_tid);
		return -EPERM;
	}
	if (!s->threads) {
		/* No perf event for alloc/lock alone; the agent asks for every thread
		 * anyway, which maps its tids for the samples' thread labels. */
		jvm_join_map_tid(s->join, ns_tid, (uint32_t)host);
		return -EOPNOTSUPP;
	}
	r = threadset_agent_fd(s->threads, host, fd);
	if (r != 0)
		return r < 0 ? r : 0;
	jvm_join_map_tid(s->join, ns_tid, (uint32_t)host);
	log_audit("perf event of pid %d tid %d handed to its agent (session %u)", (int)s->p.pid,
		  (int)host, s->id);
	return 0;
}

static void jvm_method(void *ctx, const struct agentlink_method *m)
{
	struct session *s = ctx;

	jvm_join_method(s->join, m->id, m->cls, m->cls_len, m->name, m->name_len, m->sig,
			m->sig_len, m->lines, m->nlines, m->unknown);
	/* Only the last answer can release every held sample: checking after
	 * each one would cost the held samples' count per name. */
	if (s->java_finishing && jvm_join_unanswered(s->join) == 0) {
		pipeline_source_join_run(s->src, UINT64_MAX, true);
		if (jvm_join_held(s->join) == 0)
			session_complete(s, s->final_status);
	}
}

static void jvm_thread_name(void *ctx, uint32_t ns_tid, const char *name, size_t len)
{
	struct session *s = ctx;
	pid_t host;

	/* Only threads of the recorded process; one that has ended meanwhile
	 * keeps its /proc name. */
	if (!s->join || proc_ns_tid_to_host(s->p.pid, (pid_t)ns_tid, &host) < 0)
		return;
	jvm_join_thread_name(s->join, (uint32_t)host, name, len);
}

static void jvm_thread_java_id(void *ctx, uint32_t ns_tid, uint64_t java_id)
{
	struct session *s = ctx;
	pid_t host;

	if (s->join && proc_ns_tid_to_host(s->p.pid, (pid_t)ns_tid, &host) == 0)
		jvm_join_thread_java_id(s->join, (uint32_t)host, java_id);
}

static void set_thread_name(uint32_t tid, const char *name, void *arg)
{
	struct session *s = arg;

	if (store_set_thread_name(s->store, (uint32_t)s->p.pid, tid, name) == 0)
		store_set_thread_java_id(s->store, (uint32_t)s->p.pid, tid,
					 jvm_join_thread_java_id_of(s->join, tid));
}

void session_jvm_thread_names(struct session *s)
{
	if (s->join && s->store)
		jvm_join_each_thread_name(s->join, set_thread_name, s);
}

static void on_agent_gone_timer(struct loop_source *src, void *arg)
{
	struct session *s = arg;

	loop_remove(s->agent_ev_timer);
	s->agent_ev_timer = NULL;
	session_stop(s, "agent_gone");
}

static void jvm_gone(void *ctx, const char *why)
{
	struct session *s = ctx;

	s->agent = NULL;
	if (s->agent_ev == AGENT_EV_STOPPING) {
		session_jvm_event_off_done(s);
		return;
	}
	if (s->java_finishing) {
		session_complete(s, s->final_status);
		return;
	}
	if (s->java == JAVA_ACTIVE) {
		s->java = JAVA_GONE;
		snprintf(s->java_code, sizeof(s->java_code), "agent_gone");
		snprintf(s->java_msg, sizeof(s->java_msg), "the JVM agent went away: %s", why);
		session_send_warning(s, s->java_code, s->java_msg);
	}
	/* alloc/lock alone have nothing more to record: end with what came,
	 * unless the process is exiting (its pidfd ends the recording first);
	 * with cpu, its native samples go on. */
	if (s->agent_event && !s->finishing) {
		loop_remove(s->agent_ev_timer);
		s->agent_ev_timer = NULL;
		s->agent_ev = AGENT_EV_NONE;
		s->agent_ev_on = 0;
		if (!s->threads && loop_add_timer(s->mgr->loop, JVM_AGENT_GONE_MS, 0,
						  on_agent_gone_timer, s, &s->agent_ev_timer) < 0)
			session_stop(s, "agent_gone");
	}
}


static void jvm_signal(void *ctx, uint32_t sig, uint32_t proposed, bool took_over)
{
	struct session *s = ctx;
	char msg[256];

	s->java_signal = sig;
	if (!took_over) {
		s->java_signal_foreign = true;
		log_info("session %u: pid %d: another handler holds signal %u; the agent records "
			 "with signal %u", s->id, (int)s->p.pid, proposed, sig);
		return;
	}
	s->java_signal_moves++;
	snprintf(msg, sizeof(msg),
		 "another handler (another profiler?) took over signal %u in pid %d during the "
		 "recording; the agent moved to signal %u, samples in between have no Java frames",
		 proposed, (int)s->p.pid, sig);
	log_warn("session %u: %s", s->id, msg);
	session_send_warning(s, "java_signal_taken", msg);
}

/* The agent armed the events of every thread it knew at START: their
 * samples carry Java frames from the first one. Believed once per binding
 * (an agent that says it early only costs its own recording's first
 * samples their Java frames). May free s (the gate's opening). */
static void jvm_threads_armed(void *ctx)
{
	struct session *s = ctx;

	if (s->java != JAVA_ACTIVE || s->java_armed)
		return;
	s->java_armed = true;
	log_info("session %u: the agent of pid %d armed its threads' events %llu ms after the "
		 "request", s->id, (int)s->p.pid, (unsigned long long)since_request_ms(s));
	session_gate_check(s);
}

bool session_jvm_ready(const struct session *s)
{
	switch (s->java) {
	case JAVA_ATTACHING:
	case JAVA_WAIT_AGENT:
		return false;
	case JAVA_ACTIVE:
		return s->java_armed;
	default:
		return true;  /* no agent to wait for */
	}
}

static const struct agentlink_ops jvm_ops = {
	.threads_armed = jvm_threads_armed,
	.perf_fd = jvm_perf_fd,
	.method = jvm_method,
	.thread_name = jvm_thread_name,
	.thread_java_id = jvm_thread_java_id,
	.event_status = session_jvm_event_status,
	.event = session_jvm_event,
	.events_done = session_jvm_events_done,
	.signal = jvm_signal,
	.gone = jvm_gone,
};

/* The byte budget shared by the joins of the requester's recordings. */
static struct jvm_budget *uid_budget(struct session *s)
{
	for (struct session *o = s->mgr->sessions; o; o = o->next)
		if (o != s && o->join && o->p.uid == s->p.uid)
			return jvm_join_budget(o->join);
	return NULL;
}

/* cpu-clock samples of one thread are an interval of CPU time apart; the
 * BPF program drops a record less than half an interval after the
 * thread's last one of the same recording (a period the JVM shortened
 * through its copy of the event). Each recording one agent serves keeps
 * its own gap: the BPF program's last times are per recording and thread. */
static void jvm_set_gaps(struct session_mgr *m, struct agent *a)
{
	for (struct session *o = m->sessions; o; o = o->next)
		if (o->agent == a && o->threads)
			sampler_set_min_gap(m->sampler, o->id, interval_ns(o) / 2);
}

void session_jvm_unbind(struct session *s)
{
	struct agent *a = s->agent;

	if (!a)
		return;
	agent_stop(a, s);
	s->agent = NULL;
	jvm_set_gaps(s->mgr, a);
}

static void bind_agent(struct session *s, struct agent *a)
{
	struct jvm_join_opts jo = {
		.interval_ns = interval_ns(s),
		.lines = s->p.java_lines,
		.signatures = s->p.java_signatures,
		.positions = s->p.format == JPROF_FMT_JFR,
		.start_ns = s->start_mono_ns,
		.max_bytes = JVM_SESSION_MAX_BYTES,
		.max_methods = JVM_MAX_METHODS,
		.running_leaf = session_has(s, EVENT_WALL),
	};
	struct jvm_budget *own = NULL;
	char msg[256];
	int r;

	if (!s->join) {
		jo.budget = uid_budget(s);
		if (!jo.budget)
			jo.budget = own = jvm_budget_new(JVM_UID_MAX_BYTES);
		s->join = jo.budget ? jvm_join_new(&jo) : NULL;
		jvm_budget_unref(own);
		if (!s->join) {
			java_fail(s, JAVA_FAILED, "internal", "out of memory");
			return;
		}
		pipeline_source_set_join(s->src, s->join, (uint32_t)s->p.pid, interval_ns(s));
	}
	s->java_armed = false;
	s->java_signal = JVM_SIGNAL;
	s->java_signal_foreign = false;
	s->java_signal_moves = 0;
	s->java_wall = false;
	/* The ring is the agent's, shared by every recording of the JVM that
	 * joins this one: always one for perf samples, whoever comes first. */
	r = agent_start(a, interval_ns(s), JVM_SIGNAL, JVM_RING_SLOTS,
			session_has(s, EVENT_WALL) ? JPAG_START_WALL : 0, &jvm_ops, s);
	if (r < 0) {
		if (r == -EMLINK)
			snprintf(msg, sizeof(msg), "the agent of pid %d serves %d recordings already, "
				 "the most at once", (int)s->p.pid, JPAG_MAX_SETS);
		else
			snprintf(msg, sizeof(msg), r == -EBUSY ?
				 "another recording of pid %d is using its agent (an agent from an "
				 "older jprofd serves one at a time)" :
				 "cannot start the agent of pid %d: %s", (int)s->p.pid, strerror(-r));
		java_fail(s, JAVA_FAILED, r == -EBUSY || r == -EMLINK ? "agent_busy" : "internal",
			  msg);
		return;
	}
	s->agent = a;
	s->agent_set = r;
	jvm_set_gaps(s->mgr, a);
	/* Again after an agent that failed (java_fail cleared it). */
	pipeline_source_expect_java(s->src, true);
	if (s->agent_event && s->agent_ev == AGENT_EV_NONE && session_jvm_ask_event(s, a) < 0)
		return;
	s->java = JAVA_ACTIVE;
	s->java_code[0] = s->java_msg[0] = '\0';
	loop_remove(s->java_timer);
	s->java_timer = NULL;
	if (!s->ring_timer)
		loop_add_timer(s->mgr->loop, JVM_RING_PERIOD_MS, JVM_RING_PERIOD_MS, session_jvm_on_ring_timer, s,
			       &s->ring_timer);
	log_info("session %u: bound to the agent of pid %d (%s), event set %d, %llu ms after the "
		 "request", s->id, (int)s->p.pid, agent_jvm(a), s->agent_set,
		 (unsigned long long)since_request_ms(s));
}

/* A session of pid waiting for an agent (its attach, another's, or the
 * connection), not bound yet. */
static bool wants_agent(const struct session *s, pid_t pid)
{
	return !s->p.all && s->p.pid == pid && !s->finishing && !s->agent &&
	       s->p.java != JPROF_JAVA_OFF &&
	       (s->java == JAVA_ATTACHING || s->java == JAVA_WAIT_AGENT);
}

void session_mgr_on_agent(struct agent *a, pid_t pid, void *arg)
{
	struct session_mgr *m = arg;
	struct session *s;

	/* Every recording of the process that waits: one agent serves them
	 * all. bind_agent may free s (a failure with "require"): start over
	 * (a bound or failed one waits no more). */
	for (s = m->sessions; s;) {
		if (!wants_agent(s, pid)) {
			s = s->next;
			continue;
		}
		/* The pid is not enough: the connection must come from the very
		 * process recorded, not from an earlier holder of its pid. */
		if (agent_is_process(a, s->p.pid, s->p.pidfd) < 0) {
			log_audit("agent of pid %d not bound to session %u: not the recorded process",
				  (int)pid, s->id);
			return;
		}
		bind_agent(s, a);
		s = m->sessions;
	}
}

static void on_connect_timeout(struct loop_source *src, void *arg)
{
	struct session *s = arg;

	loop_remove(s->java_timer);
	s->java_timer = NULL;
	if (s->java == JAVA_WAIT_AGENT)
		java_fail(s, JAVA_FAILED, "agent_silent",
			  "the agent was loaded but did not connect back to jprofd");
}

/* An attach's result for s: its own, or that of another recording's
 * attach of its JVM that s waited for (one attach per JVM, bounded by the
 * same deadline). May free s. */
static void attach_followed(struct session *s, const struct attach_result *res)
{
	struct agent *a;

	s->attach_ms = since_request_ms(s);
	if (res->status < 0) {
		java_fail(s, JAVA_FAILED, res->code[0] ? res->code : "attach_failed",
			  res->message[0] ? res->message : "cannot load the agent");
		return;
	}
	s->java = JAVA_WAIT_AGENT;
	a = agentlink_find(s->mgr->agents, s->p.pid, s->p.pidfd);
	if (a)
		bind_agent(s, a);
	else
		loop_add_timer(s->mgr->loop, JVM_CONNECT_WAIT_MS, 0, on_connect_timeout, s,
			       &s->java_timer);
}

/* A session of the same JVM whose attach is in flight (s's attach to wait
 * for), or NULL. */
static struct session *attach_owner(const struct session *s)
{
	for (struct session *o = s->mgr->sessions; o; o = o->next)
		if (o != s && o->attach && o->p.pid == s->p.pid && !o->finishing)
			return o;
	return NULL;
}

static bool follows(const struct session *o, const struct session *s)
{
	return o != s && o->p.pid == s->p.pid && o->java == JAVA_ATTACHING && !o->attach &&
	       !o->agent;
}

static void on_attach_done(const struct attach_result *res, void *arg)
{
	struct session *s = arg;

	s->attach = NULL;
	/* The recordings that waited for this attach first (s may go below);
	 * each may go too, so start over after each. */
	for (struct session *o = s->mgr->sessions; o;) {
		if (!follows(o, s)) {
			o = o->next;
			continue;
		}
		attach_followed(o, res);
		o = s->mgr->sessions;
	}
	if (s->java != JAVA_ATTACHING) {
		s->attach_ms = since_request_ms(s);
		return;  /* the agent connected first */
	}
	attach_followed(s, res);
}

/* A JVM in its start-up that the attach keeps trying (attach_on_slow). */
static void on_attach_slow(const char *msg, void *arg)
{
	session_send_warning(arg, "jvm_starting", msg);
}

/* Decides, before anything starts, whether a JVM recording can go ahead.
 * Returns 0 (s->java set) or -errno with the client's error filled in. */
/* A JVM recorded off-CPU: its Java frames would need the agent's stack at
 * the time of each interval, which nothing joins yet, so the recording
 * keeps native and kernel frames and says so (a warning once started, an
 * error with "java":"require"). wall has the agent's own timer for blocked
 * threads. */
static int java_event_check(struct session *s, const char **code, char *msg, size_t len)
{
	/* With other events the agent is loaded for them (Java frames for
	 * their samples); off-CPU intervals keep native frames, and a warning
	 * at the start says so (session_start). */
	if (!session_has(s, EVENT_OFFCPU) || s->p.events.n > 1)
		return 0;
	if (s->p.java == JPROF_JAVA_REQUIRE) {
		*code = JPROF_E_BAD_REQUEST;
		snprintf(msg, len, "Java frames are not available for the %s event yet; "
			 "use \"java\": \"auto\" or \"off\" for native and kernel frames",
			 JPROF_EVENT_OFFCPU);
		return -ENOEXEC;
	}
	s->java = JAVA_FAILED;
	snprintf(s->java_code, sizeof(s->java_code), "java_frames_unavailable");
	snprintf(s->java_msg, sizeof(s->java_msg),
		 "pid %d is a JVM: the %s event records native and kernel frames only "
		 "(no Java frames yet)", (int)s->p.pid, JPROF_EVENT_OFFCPU);
	return 0;
}

int session_jvm_check(struct session *s, struct attach_result *res, const char **code,
		      char *msg, size_t len)
{
	struct session_mgr *m = s->mgr;

	res->status = 0;
	if (s->agent_event && !m->agents) {
		*code = JPROF_E_UNAVAILABLE;
		snprintf(msg, len, "the %s event needs the JVM agent, which this daemon does not load",
			 s->agent_event->name);
		return -ENOTSUP;
	}
	if (s->p.all || s->p.java == JPROF_JAVA_OFF || !m->agents)
		return 0;
	if (agentlink_find(m->agents, s->p.pid, s->p.pidfd)) {
		s->java = JAVA_WAIT_AGENT;
		pipeline_source_expect_java(s->src, true);
		return java_event_check(s, code, msg, len);
	}
	if (attach_probe(s->p.pid, res) == 0) {
		s->java = JAVA_ATTACHING;
		pipeline_source_expect_java(s->src, true);
		return java_event_check(s, code, msg, len);
	}
	if (s->agent_event) {
		bool native = strcmp(res->code, "not_a_jvm") == 0;

		*code = native ? JPROF_E_NOT_A_JVM : JPROF_E_ATTACH_FAILED;
		snprintf(msg, len, native ? "the %s event records JVMs only: %s"
				   : "the %s event needs the JVM agent: %s",
			 s->agent_event->name, res->message);
		return -ENOEXEC;
	}
	if (strcmp(res->code, "not_a_jvm") != 0 && session_has(s, EVENT_OFFCPU))
		return java_event_check(s, code, msg, len);
	if (s->p.java == JPROF_JAVA_REQUIRE) {
		*code = strcmp(res->code, "not_a_jvm") == 0 ? JPROF_E_NOT_A_JVM : JPROF_E_ATTACH_FAILED;
		snprintf(msg, len, "%s", res->message);
		return -ENOEXEC;
	}
	/* auto: a non-JVM is simply a native recording; a JVM we cannot attach
	 * to is one too, with a warning once started. */
	s->java = strcmp(res->code, "not_a_jvm") == 0 ? JAVA_NONE : JAVA_FAILED;
	snprintf(s->java_code, sizeof(s->java_code), "%s", res->code);
	snprintf(s->java_msg, sizeof(s->java_msg), "%s", res->message);
	return 0;
}

/* After "started", from the loop (so the caller has registered the session
 * first): bind, attach or warn as session_jvm_check decided. May free s. */
static void java_begin(struct session *s)
{
	struct session_mgr *m = s->mgr;
	char opts[sizeof(((struct sockaddr_un *)0)->sun_path) + 16];
	struct agent *a;
	int r;

	switch (s->java) {
	case JAVA_WAIT_AGENT:
		a = agentlink_find(m->agents, s->p.pid, s->p.pidfd);
		if (a)
			bind_agent(s, a);
		break;
	case JAVA_ATTACHING:
		/* One attach per JVM: another recording's in flight is waited
		 * for (its result is ours). */
		if (attach_owner(s)) {
			log_info("session %u: pid %d: waiting for the attach of session %u", s->id,
				 (int)s->p.pid, attach_owner(s)->id);
			break;
		}
		snprintf(opts, sizeof(opts), "socket=%s", m->agent_socket);
		r = attach_start(m->loop, s->p.pid, m->agent_path, opts, JVM_ATTACH_TIMEOUT_MS,
				 on_attach_done, s, &s->attach);
		attach_on_slow(s->attach, on_attach_slow, s);
		if (r < 0) {
			char msg[256];

			snprintf(msg, sizeof(msg), "cannot start loading the agent: %s", strerror(-r));
			java_fail(s, JAVA_FAILED, "internal", msg);
		}
		break;
	case JAVA_FAILED: {
		char code[sizeof(s->java_code)], msg[sizeof(s->java_msg)];

		memcpy(code, s->java_code, sizeof(code));
		memcpy(msg, s->java_msg, sizeof(msg));
		java_fail(s, JAVA_FAILED, code, msg);
		break;
	}
	default:
		break;
	}
}

void session_jvm_release_attach(struct session *s)
{
	struct session *o;

	if (!s->attach)
		return;
	attach_cancel(s->attach);
	s->attach = NULL;
	/* Whoever waited for it attaches now, from the loop (not under the
	 * caller, which may be ending sessions). */
	for (o = s->mgr->sessions; o; o = o->next)
		if (follows(o, s) && !o->java_timer && !o->finishing) {
			loop_add_timer(s->mgr->loop, 0, 0, session_jvm_on_begin, o, &o->java_timer);
			return;
		}
}

void session_jvm_on_begin(struct loop_source *src, void *arg)
{
	struct session *s = arg;

	loop_remove(s->java_timer);
	s->java_timer = NULL;
	java_begin(s);
}