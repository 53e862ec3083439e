/* Internals shared by the recording session's files: session.c (lifecycle,
 * samples), session_access.c (the requester's right, checked again),
 * session_gate.c (the start gate), session_profile.c (messages, the
 * profile), session_jvm.c (the JVM agent's ring, the join, the summary) and
 * session_agent.c (attach, binding, the agent's callbacks). Not for other
 * modules. */
#ifndef JPROF_SESSION_INT_H
#define JPROF_SESSION_INT_H

#include <json-c/json.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "clock.h"
#include "jring.h"
#include "session.h"
#include "store.h"

struct attach_result;
struct attach_req;
struct event_info;
struct jvm_join;
struct built_sample;
struct loop_source;
struct pipeline_source;
struct render;
struct render_job;
struct sampler_events;
struct store;
struct threadset;

#define JVM_RING_SLOTS 4096            /* 16 MiB: room for 100 ms of records at 41 k/s */
/* The ring is read in quarters, four times as often: the same 4096 records
 * per 100 ms, but no loop round copies more than 4 MiB of a full ring
 * (about 3 ms), so others wait no longer behind a flooding agent. */
#define JVM_RING_PERIOD_MS 25
/* Records joined per loop round (a slice of the join): a few ms of work
 * in a release build, up to about 30 under ASan, for the heaviest records. */
#define JVM_JOIN_SLICE 1024
#define JVM_RING_READ_MAX (JVM_RING_SLOTS / 4)
#define JVM_ATTACH_TIMEOUT_MS 10000
#define JVM_CONNECT_WAIT_MS 5000       /* from a loaded agent to its connection */
#define JVM_SIGNAL SIGPROF
/* Bounds on what one hostile agent (its ring, its method names) can make
 * the daemon hold: heap bytes of one recording's join, of all the joins of
 * one uid's recordings, and method ids per recording. */
#define JVM_SESSION_MAX_BYTES (64u << 20)
#define JVM_UID_MAX_BYTES (128u << 20)
#define JVM_MAX_METHODS 131072
/* alloc/lock: the agent's answer to EVENT_ON, and its last records after
 * EVENT_OFF (it sends them at least every 100 ms). */
#define JVM_EVENT_ANSWER_MS 5000
#define JVM_EVENT_DRAIN_MS 2000
/* alloc/lock: after the agent left, how long an exit of the process may
 * take to show on its pidfd (the recording then ends "process_exited"):
 * the agent leaves at VMDeath, and the JVM's shutdown goes on after it. */
#define JVM_AGENT_GONE_MS 2000
/* Larger than any Java object (an array is at most 2^31 elements of 8
 * bytes): an agent claiming more is not believed. */
#define JVM_ALLOC_MAX_BYTES (1ull << 36)
#define JVM_NAME_WAIT_MS 1000          /* at the end, for the last method names */
/* The start gate: how often it looks whether the process is ready, and the
 * deadline when session_limits.gate_ms is 0. */
#define SESSION_GATE_POLL_MS 5
#define SESSION_GATE_DEFAULT_MS 2000
/* Sample times a recording in a time-ordered format keeps (about 40 bytes
 * each); later samples still count in the profile, and the output says
 * where its timeline was cut. */
#define SESSION_MAX_TIMES 1000000

enum java_state {
	JAVA_NONE = 0,       /* not a JVM recording (or java off) */
	JAVA_ATTACHING,      /* loading the agent */
	JAVA_WAIT_AGENT,     /* loaded, waiting for it to connect */
	JAVA_ACTIVE,         /* bound to a connected agent */
	JAVA_FAILED,         /* could not get an agent; native stacks only */
	JAVA_GONE,           /* the agent went away mid-recording */
};

struct session {
	struct session_mgr *mgr;
	size_t lines_from;          /* store frames whose source lines were asked for */
	struct session *next;
	uint32_t id;                /* sampler source id */
	struct session_params p;
	struct session_sink sink;
	/* When sampling began: the request, or, gated, the gate's opening (the
	 * recording's time base: timeline, JFR, pprof duration, -d). */
	uint64_t start_mono_ns;
	uint64_t start_unix_ns;
	uint64_t request_mono_ns;   /* the request: attach_ms and first_java_ms count from it */
	/* The start gate of a `record --pid` with perf events: they stay
	 * stopped until the agent armed its threads' fds (JVMs) and the unwind
	 * tables are built, or until gate_deadline_ns. */
	bool gated;
	bool gate_deadline_hit;
	uint64_t gate_deadline_ns;
	uint64_t gate_wait_ms;      /* from the request to the gate's opening */
	struct loop_source *gate_timer;
	bool java_armed;            /* the bound agent sent JPAG_THREADS_ARMED */
	uint64_t end_mono_ns;       /* set when finished */
	struct loop_source *end_timer;
	struct loop_source *pidfd_src;
	struct pipeline_source *src;
	const struct event_info *event;  /* the first event (p.events.ids[0]) */
	/* The store's sample types: the union of the events' (event_set_types) */
	struct sample_type types[STORE_MAX_VALUES];
	size_t ntypes;
	size_t main_type;           /* the first event's main value */
	char events_name[64];       /* "cpu,alloc,lock" */
	/* The first of the events the JVM agent records (alloc, lock), NULL if none. */
	const struct event_info *agent_event;
	struct sampler_events *cpu_events;
	struct threadset *threads;
	bool offcpu_target;         /* an off-CPU target in the sampler (and a watch for --pid) */
	bool finishing;
	struct store *store;
	/* Ended: the profile is being rendered (render.h), s is on the
	 * manager's rendering list and holds nothing else. */
	struct render_job *render_job;
	uint64_t samples;
	uint64_t stacks_lost;       /* samples with a stack that could not be read */
	uint64_t threads_over_limit;
	char comm[64];
	/* The requester's right, checked again (unprivileged recordings):
	 * samples wait in pending until a check after their drain passes. */
	struct store *pending;      /* NULL: privileged, samples go to store */
	uint64_t pending_samples, pending_lost;
	uint64_t proc_start_ns;     /* the recorded process's start (boot time) */
	bool exec_seen;             /* the process exec'd since the last check passed */
	bool access_lost;           /* the check failed: samples are dropped */
	uint64_t ringbuf_full_mark; /* sampler ring overflows at the last check */
	struct loop_source *access_timer;  /* the check after an exec */
	/* JVM */
	enum java_state java;
	bool java_finishing;        /* end reached, waiting for the last names */
	const char *final_status;
	char java_code[32];
	char java_msg[512];
	struct attach_req *attach;  /* NULL while JAVA_ATTACHING: another's attach is waited for */
	struct agent *agent;
	int agent_set;              /* the agent's event set serving this recording */
	struct jvm_join *join;
	struct loop_source *ring_timer;
	struct loop_source *java_timer;  /* connect wait, then name wait at the end */
	struct loop_source *join_timer;  /* the next slice of the join, when one is due */
	uint64_t join_horizon;      /* the join takes agent records up to here */
	bool join_final;            /* the final join is running in slices */
	bool timed;                 /* the format is time-ordered: every sample keeps its time */
	size_t threads_at_end;      /* threads with an event when the events were closed */
	uint64_t cpu_ns_at_end;     /* threadset_cpu_ns when the events were closed */
	bool thread_events;         /* per-thread cpu-clock events (threadset) were opened */
	uint64_t attach_ms;
	uint64_t first_java_ms;     /* 0 until the first sample with Java frames */
	bool ring_corrupt_reported;
	/* alloc/lock: the agent's JVMTI event */
	enum { AGENT_EV_NONE = 0, AGENT_EV_ASKED, AGENT_EV_ON, AGENT_EV_STOPPING } agent_ev;
	struct loop_source *agent_ev_timer;  /* waits for its answer, or for its last records */
	uint32_t agent_ev_kind;     /* the JPAG_EV_* asked for (ASKED) */
	uint32_t agent_ev_on;       /* the JPAG_EV_* bits the agent turned on */
	uint64_t agent_ev_samples;  /* records received */
	struct jring_stats ring_st; /* last seen */
	uint32_t java_signal;       /* the agent's signal: JVM_SIGNAL unless it said otherwise */
	bool java_signal_foreign;   /* another handler held JVM_SIGNAL at START */
	uint32_t java_signal_moves; /* another handler took the agent's signal over */
	/* wall: the agent's timer samples its blocked Java threads */
	bool java_wall;             /* the agent said its timer runs */
	uint64_t java_wall_records; /* wall records taken from the ring */
	uint64_t offcpu_covered;    /* off-CPU intervals left out: the agent's timer covers them */
};

struct session_mgr {
	struct loop *loop;
	struct sampler *sampler;
	struct pipeline *pipeline;
	struct session_limits lim;
	struct session *sessions;
	size_t count;
	struct render *render;      /* NULL: profiles are rendered on the loop */
	struct session *rendering;  /* ended, waiting for their profile */
	struct agentlink *agents;
	const char *agent_path;
	const char *agent_socket;
	struct session_gate_stats gate;
};


static inline bool session_has(const struct session *s, enum event_id id)
{
	return event_set_has(&s->p.events, id);
}

static inline uint64_t interval_ns(const struct session *s)
{
	return s->p.interval_us * 1000ull;
}

/* Of sampling: 0 while gated. */
static inline uint64_t elapsed_ms(const struct session *s)
{
	uint64_t end = s->end_mono_ns ? s->end_mono_ns : clock_ns(CLOCK_MONOTONIC);

	return s->gated || end < s->start_mono_ns ? 0 : (end - s->start_mono_ns) / 1000000ull;
}

static inline uint64_t since_request_ms(const struct session *s)
{
	return (clock_ns(CLOCK_MONOTONIC) - s->request_mono_ns) / 1000000ull;
}

/* session.c */
/* Threads sampled: those with an event now, or at the end of the recording
 * once the events are closed (the final summary). */
size_t session_thread_count(const struct session *s);
/* Renders and sends the profile, then frees the session. */
void session_complete(struct session *s, const char *status);
/* Stops sampling, drains, and completes (at once or after the JVM's last
 * records and names). */
void session_finish(struct session *s, const char *status);
/* Ends a recording with an error instead of a profile. */
void session_abort(struct session *s, const char *code, const char *msg);
/* Everything but the store and the session itself: what samples, times,
 * watches or holds the process. Idempotent. */
void session_release(struct session *s);
/* After its last line: the connection lets go of s, and s goes. */
void session_end(struct session *s);
/* Loop timer: the recording's duration is over. */
void session_on_end_timer(struct loop_source *src, void *arg);

/* session_access.c */
/* A store for the recording's samples; one that keeps each sample's time
 * when the format asked for is time-ordered (up to SESSION_MAX_TIMES). */
struct store *session_store_new(struct session *s);
/* An unprivileged recording: when the process started, and a store to hold
 * samples in until they are checked. 0, -ESRCH (gone) or -errno. */
int session_access_init(struct session *s);
/* After a drain or an exec: keeps the held samples, or ends the recording
 * (true: s is freed). */
bool session_access_recheck(struct session *s);
/* The final check, as the recording ends: the status to report. */
const char *session_access_final(struct session *s, const char *status);

/* session_gate.c */
/* Opens the start gate if the process is ready now (the agent's message). */
void session_gate_check(struct session *s);
/* Loop timer: looks whether the gate can open. */
void session_on_gate_timer(struct loop_source *src, void *arg);

/* session_profile.c */
void session_send_obj(struct session *s, struct json_object *o);
void session_send_error(struct session *s, const char *code, const char *msg);
void session_send_warning(struct session *s, const char *code, const char *msg);
void session_send_started(struct session *s);
void session_send_progress(struct session *s);
/* Builds the profile message but for its data, lets go of everything but
 * the store, and hands both to the render worker; ends s once sent. */
void session_send_profile(struct session *s, const char *status);

/* session_agent.c and session_jvm.c */
/* Decides, before anything starts, whether a JVM recording can go ahead.
 * Returns 0 (s->java set) or -errno with the client's error filled in. */
int session_jvm_check(struct session *s, struct attach_result *res, const char **code, char *msg,
		      size_t len);
/* The start gate's JVM side: false while an agent is expected (attaching,
 * waiting for its connection) or bound but has not armed its threads. */
bool session_jvm_ready(const struct session *s);
/* Lets go of the agent (the last recording: it stops); another recording
 * it serves may take over the throttle gap. */
void session_jvm_unbind(struct session *s);
/* Cancels s's attach; a recording that waited for it attaches itself. */
void session_jvm_release_attach(struct session *s);
/* Loop timer: bind, attach or warn as session_jvm_check decided. */
void session_jvm_on_begin(struct loop_source *src, void *arg);
/* Loop timer of a bound agent: empties (a quarter of) its ring. */
void session_jvm_on_ring_timer(struct loop_source *src, void *arg);
/* After a drain: empty the ring, join up to horizon, ask for names. */
void session_jvm_step(struct session *s, uint64_t horizon);
void session_jvm_read_ring(struct session *s);
void session_jvm_request_names(struct session *s);
/* The end of a JVM recording, after the last drain: joins what is left (in
 * slices), waits a moment for the last method names, completes. */
void session_jvm_finish(struct session *s, const char *status);
/* alloc/lock: turns the agent's event off and finishes once its last
 * records arrived (or after a wait). False when there is nothing to wait
 * for (call session_jvm_finish). */
bool session_jvm_event_off(struct session *s, const char *status);
/* session_events.c: the agent's alloc/lock events. Asks the agent for
 * the recording's next event: 0, or -errno with the recording ended. */
int session_jvm_ask_event(struct session *s, struct agent *a);
/* Its events are off (or the agent gone): finishes. */
void session_jvm_event_off_done(struct session *s);
/* The agent link's callbacks (agentlink.h) for events. */
void session_jvm_event_status(void *ctx, uint32_t event, int status, const char *why);
void session_jvm_event(void *ctx, const struct jpag_event_rec *rec, const char *cls,
		       const struct jpring_frame *frames);
void session_jvm_events_done(void *ctx);
/* The "java" member of the profile summary. */
/* The JVM's Java thread names (from its agent) over the store's /proc
 * names, for rendering. */
void session_jvm_thread_names(struct session *s);
void session_jvm_summary(struct session *s, struct json_object *sum);
/* wall: true for a built off-CPU sample of a thread whose blocked time the
 * agent's wall timer already samples (counting both would count it twice). */
bool session_jvm_wall_covers(struct session *s, const struct built_sample *bs);

#endif
