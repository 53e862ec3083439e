/* Recording sessions: one per `record` request. A session owns its perf
 * events (per-thread for one process, per-CPU for the whole host), a store
 * of symbolized stacks, and its timers; it reports progress and finally the
 * rendered profile through its sink.
 *
 * A session is a pipeline source: the pipeline delivers its built samples
 * (Java frames joined) to the session's store, and runs the manager's tick
 * after every drain (JVM join steps, thread rescans, progress). */
#ifndef JPROF_SESSION_H
#define JPROF_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "authz.h"
#include "event.h"
#include "export.h"

struct agent;
struct agentlink;
struct loop;
struct pipeline;
struct quota;
struct render;
struct sampler;
struct session;
struct session_mgr;

struct session_sink {
	/* One complete protocol line for the client. */
	void (*send)(void *ctx, const char *line, size_t len);
	/* The session has ended and is about to be freed. */
	void (*done)(void *ctx, struct session *s);
	void *ctx;
};

struct session_params {
	int64_t req_id;
	pid_t pid;                 /* when !all */
	int pidfd;                 /* taken: the process, checked by the caller; -1 when all */
	bool all;
	uid_t uid;                 /* requester, for status */
	/* The requester. Unless privileged, its right to read the process is
	 * checked again after every drain and every exec of the process, and
	 * the recording ends "access_lost" when it no longer holds. */
	struct authz_peer peer;
	uint64_t duration_ms;
	uint64_t interval_us;      /* cpu */
	enum event_id event;       /* events.ids[0] */
	struct event_set events;   /* every event recorded, in the order given */
	uint64_t threshold_ns;     /* offcpu, wall: shorter intervals are skipped */
	uint64_t lock_threshold_ns;  /* lock: shorter waits are skipped */
	uint64_t alloc_bytes;      /* alloc: JVMTI heap sampling interval */
	enum jprof_format format;
	bool progress;
	bool thread_frames;
	int java;                  /* enum jprof_java */
	bool java_lines;
	bool java_signatures;
	bool java_types;
};

/* The start gates of `record --pid` since the daemon started: how many
 * opened because the process was ready, how many at their deadline, and
 * the time recordings waited (from the request to the opening). */
struct session_gate_stats {
	uint64_t opened_ready;
	uint64_t opened_deadline;
	uint64_t wait_ms_total;
	uint64_t wait_ms_max;
};

struct session_info {
	uint32_t id;
	int64_t req_id;
	pid_t pid;
	bool all;
	uid_t uid;
	uint64_t elapsed_ms;
	uint64_t duration_ms;
	uint64_t samples;
	unsigned threads;
};

struct session_limits {
	unsigned max_sessions;           /* total; default 64 */
	unsigned max_threads;            /* per-thread events per session; default 8192 */
	unsigned gate_ms;                /* longest start-gate wait of `record --pid`; default 2000 */
	struct quota *quota;             /* per-thread events charged to the requester's uid */
};

int session_mgr_new(struct loop *loop, struct pipeline *pipeline, const struct session_limits *lim,
		    struct session_mgr **out);
/* The sampler is created with the manager's new-thread callback, so it
 * comes second. */
void session_mgr_set_sampler(struct session_mgr *m, struct sampler *sampler);
/* Ends every session with a shutting_down error to its client; NULL-safe. */
void session_mgr_free(struct session_mgr *m);

/* Where profiles are rendered (NULL, the default: on the loop). Set before
 * the first recording; freed after the manager. */
void session_mgr_set_render(struct session_mgr *m, struct render *rw);

/* JVM support: where agents connect, the agent library to load, and the
 * socket path the agent is told to connect to (as the target sees it). */
void session_mgr_set_jvm(struct session_mgr *m, struct agentlink *agents, const char *agent_path,
			 const char *agent_socket);
/* The agent link's connect callback. */
void session_mgr_on_agent(struct agent *a, pid_t pid, void *mgr);

/* The sampler's new-thread callback. */
void session_mgr_on_new_thread(uint32_t tgid, uint32_t tid, void *mgr);
/* The sampler's exec callback: recordings of tgid check their right again. */
void session_mgr_on_exec(uint32_t tgid, void *mgr);

/* Starts a recording. On success the "started" line has been sent and *out
 * is set. On failure returns -errno with err_code/err_msg set for the client
 * and the pidfd closed. */
int session_start(struct session_mgr *m, const struct session_params *p,
		  const struct session_sink *sink, struct session **out,
		  const char **err_code, char *err_msg, size_t err_len);

/* Ends early (e.g. "cancelled"): final drain, profile sent, sink->done. */
void session_stop(struct session *s, const char *status);
/* The client is gone: stop sampling and free without sending anything. */
void session_abandon(struct session *s);

int64_t session_req_id(const struct session *s);
size_t session_count(const struct session_mgr *m);
void session_get_gate_stats(const struct session_mgr *m, struct session_gate_stats *out);
void session_get_info(const struct session *s, struct session_info *out);
int session_foreach(struct session_mgr *m, int (*fn)(struct session *s, void *arg), void *arg);

#endif
