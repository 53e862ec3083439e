/* Layer jvm (daemon/jvm/): loading the agent (attach), agent connections
 * (agentlink), the agent's sample ring (jring) and the Java join (jvmjoin).
 * Uses core only.
 *
 * Connections from JVM agents (libjprofagent.so) on the daemon socket, speaking
 * the binary agent protocol (proto/jprof_agent.h). The control server hands a
 * connection over when its first bytes are the agent magic. An agent is the
 * process that connected (SO_PEERPIDFD: that very process, not just a pid;
 * pid + start time on kernels before 6.5); what it says about itself is
 * informational. The connection is closed (audit line) as soon as that
 * process is found gone: before every frame is handled, every fd is sent,
 * and whenever a recording checks it (agent_is_process, before each fd
 * handed out and each read of the ring).
 *
 * A recording binds an agent with agent_start(): the agent gets a ring
 * and asks for one perf fd per thread; each request goes to the session
 * (ops->perf_fd), which checks the thread belongs to the agent's process and
 * opens the event. One agent per process: a newer connection of a process
 * whose agent is bound to a recording is refused. Several recordings of
 * one process share its agent (agent_start). */
#ifndef JPROF_AGENTLINK_H
#define JPROF_AGENTLINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "jprof_agent.h"

#define AGENTLINK_MAX_AGENTS 1024      /* agent connections at once, all uids */

struct loop;
struct quota;
struct agent;
struct agentlink;
struct jring;

struct agentlink_method {
	uint64_t id;
	const char *cls;              /* JVM form, "Ljava/lang/String;", not NUL-terminated */
	size_t cls_len;
	const char *name;
	size_t name_len;
	const char *sig;
	size_t sig_len;
	const struct jpag_line *lines;  /* unaligned-safe copy */
	unsigned nlines;
	bool unknown;                 /* the agent could not name it */
};

struct agentlink_ops {
	/* The agent asks for an event on its thread ns_tid. Return the fd to
	 * pass (still owned by the caller) or -errno. */
	int (*perf_fd)(void *ctx, uint32_t ns_tid, int *fd);
	void (*method)(void *ctx, const struct agentlink_method *m);
	/* The Java name of the agent's thread ns_tid (not NUL-terminated, 1 to
	 * JPAG_THREAD_NAME_MAX bytes, unchecked text). */
	void (*thread_name)(void *ctx, uint32_t ns_tid, const char *name, size_t len);
	/* The Java id of that thread (java.lang.Thread's, not 0), after its
	 * name; NULL: ignored. */
	void (*thread_java_id)(void *ctx, uint32_t ns_tid, uint64_t java_id);
	/* The agent records with signal instead of the proposed one (another
	 * handler held it at START, or took_over: took the agent's over
	 * during the recording). Both checked plausible; NULL: ignored. */
	void (*signal)(void *ctx, uint32_t signal, uint32_t proposed, bool took_over);
	/* The answer to agent_event_on: status 0, or -errno and the agent's
	 * reason (unchecked text, NUL-terminated). */
	void (*event_status)(void *ctx, uint32_t event, int status, const char *why);
	/* One sample of an event (validated lengths; the rest is the agent's
	 * word): frames leaf first, cls the class signature in JVM form
	 * (not NUL-terminated, cls_len may be 0). */
	void (*event)(void *ctx, const struct jpag_event_rec *rec, const char *cls,
		      const struct jpring_frame *frames);
	/* EVENT_OFF is done: every record was sent. */
	void (*events_done)(void *ctx);
	/* JPAG_THREADS_ARMED: the agent says it armed the events of every
	 * thread it knew at START (its word only; may come never or twice). */
	void (*threads_armed)(void *ctx);
	/* The agent disconnected or misbehaved; the binding is gone. */
	void (*gone)(void *ctx, const char *why);
};

struct agentlink_stats {
	uint64_t connected;           /* agents now */
	uint64_t accepted, rejected;
	uint64_t fds_passed, fds_denied;
	uint64_t protocol_errors;
	uint64_t identity_lost;       /* connections whose process had exited */
};

typedef void (*agentlink_connect_fn)(struct agent *a, pid_t pid, void *arg);

int agentlink_new(struct loop *loop, agentlink_connect_fn on_connect, void *arg,
		  struct agentlink **out);
void agentlink_free(struct agentlink *l);
/* Counts agent connections per uid (QUOTA_AGENTS, quota.h): one past the
 * quota is answered with an ERROR frame and closed. */
void agentlink_set_quota(struct agentlink *l, struct quota *q);

/* Takes over a connected socket (fd taken) whose peer pid/uid are known and
 * whose first `len` bytes were already read into `buffered`. */
int agentlink_adopt(struct agentlink *l, int fd, pid_t pid, uid_t uid, const void *buffered,
		    size_t len);

/* The live agent of the process pidfd pins (pid its pid), or NULL. */
struct agent *agentlink_find(struct agentlink *l, pid_t pid, int pidfd);
/* 0 when a's connection still belongs to the process pidfd pins (pid its
 * pid), -ESRCH otherwise; a connection whose process is gone is closed. */
int agent_is_process(struct agent *a, pid_t pid, int pidfd);
pid_t agent_pid(const struct agent *a);
const char *agent_jvm(const struct agent *a);

/* Binds a recording (ctx: its identity, handed to every ops call). The
 * first creates the ring and sends START with it and flags (JPAG_START_*);
 * while it runs, others join with an event set of their own (SET_ADD: same
 * ring and signal, their own interval and perf fds; ring records and
 * set-scoped frames go to the recording of their set; names to all).
 * Returns the event set (0 .. JPAG_MAX_SETS-1), -EMLINK when every set is
 * in use, -EBUSY when the agent cannot serve another (an agent without
 * sets, or ctx bound already). */
int agent_start(struct agent *a, uint64_t interval_ns, uint32_t signal, uint32_t nslots,
		uint32_t flags, const struct agentlink_ops *ops, void *ctx);
/* Unbinds ctx: its set's fds are closed (SET_DEL), or, for the last
 * recording, STOP and the ring goes. NULL-safe; no ops call to ctx
 * afterwards. */
void agent_stop(struct agent *a, void *ctx);
/* The shared ring (NULL while no recording is bound). */
struct jring *agent_ring(struct agent *a);
/* The ctx bound to event set `set`, or NULL (records of no recording). */
void *agent_set_ctx(const struct agent *a, uint32_t set);
/* After agent_start: turns a JVMTI event on (ops->event_status answers);
 * -EBUSY while another recording of this agent has its events on. */
int agent_event_on(struct agent *a, void *ctx, uint32_t event, uint64_t param);
/* Turns it off; ops->events_done follows the last records. */
int agent_event_off(struct agent *a, void *ctx);
/* Asks the agent to name method ids (at most JPAG_RESOLVE_MAX per call). */
int agent_resolve(struct agent *a, const uint64_t *ids, unsigned n);

void agentlink_get_stats(const struct agentlink *l, struct agentlink_stats *out);

#endif
