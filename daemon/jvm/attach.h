/* Loading the jprofd agent into a running HotSpot JVM through its dynamic
 * attach protocol (.attach_pid trigger file, SIGQUIT, the .java_pid<nspid>
 * socket, the "load" command).
 *
 * The work runs in a forked child that enters the target's mount namespace
 * and takes its euid/egid, so no process-wide state of the daemon changes and
 * every file it creates belongs to the target's user. Every wait and read has
 * a deadline. The loop watches the child's exit (a child source on its
 * pidfd, so nothing waits); the parent then reads its result from a pipe.
 * The daemon never waits for the child, not even to stop it. */
#ifndef JPROF_ATTACH_H
#define JPROF_ATTACH_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct loop;
struct attach_req;

/* JNI_EDETACHED: what GetEnv answers before JVMTI's live phase, and the
 * agent then returns from Agent_OnAttach. */
#define ATTACH_RC_NOT_LIVE (-2)

struct attach_result {
	int status;            /* 0 when the agent loaded, else -errno */
	/* "", or why it failed: "not_a_jvm", "not_hotspot", "attach_disabled",
	 * "no_sigquit_handler", "no_attach_socket", "attach_refused",
	 * "agent_load_failed", "timeout", "no_such_process", "internal" */
	char code[32];
	char message[512];     /* for people; includes the JVM's own text if any */
	/* With "agent_load_failed": the JVM was not in JVMTI's live phase yet
	 * (in its start-up). JDK 17 runs Agent_OnAttach, whose GetEnv fails,
	 * and the agent returns ATTACH_RC_NOT_LIVE; JDK 21+ refuses the load
	 * ("only permitted in the live phase"). */
	bool not_live;
};

/* Cheap synchronous check from /proc only (no signal is sent): is pid a
 * HotSpot JVM (libjvm.so mapped) that can be attached (SIGQUIT caught, not
 * started with -XX:+DisableAttachMechanism or -Xrs, as far as its command
 * line and JAVA_TOOL_OPTIONS / JDK_JAVA_OPTIONS / _JAVA_OPTIONS show)?
 * Returns 0 when attaching should work, else -errno with *res filled. A
 * JVM still starting up (younger than 15 s, SIGQUIT not handled yet, no
 * -Xrs) counts as attachable: attach_start waits for it. */
int attach_probe(pid_t pid, struct attach_result *res);

/* True when pid maps libjvm.so (any HotSpot JVM, attachable or not). */
bool attach_is_jvm(pid_t pid);

typedef void (*attach_done_fn)(const struct attach_result *res, void *arg);

/* Starts loading agent_path (absolute, on the daemon's side) with options into
 * pid. If the target cannot read the file at that path in its own mount
 * namespace, it is copied into the target's /tmp first (owned by the target
 * user, named after its content so a second attach reuses it). done runs from
 * the loop exactly once, unless attach_cancel comes first. SIGCHLD must be
 * blocked (see loop_add_child).
 *
 * A JVM in its start-up (younger than 15 s) cannot take the agent yet: no
 * SIGQUIT handler, or Agent_OnAttach fails before JVMTI is live. Then the
 * attach is tried again from loop timers (waits doubling from 50 ms to
 * 800 ms, each try with its own timeout_ms) until it works, fails another
 * way, the process exits or is 15 s old; attach_cancel stops it. */
int attach_start(struct loop *loop, pid_t pid, const char *agent_path, const char *options,
		 unsigned timeout_ms, attach_done_fn done, void *arg, struct attach_req **out);

/* slow runs once (from the loop) when tries of a starting JVM have taken
 * more than a second, with a message for the user: the attach goes on
 * (slow may attach_cancel it). */
typedef void (*attach_slow_fn)(const char *message, void *arg);
void attach_on_slow(struct attach_req *req, attach_slow_fn slow, void *arg);

/* Frees the request; done is not called. Never waits: a running helper
 * gets SIGTERM, SIGKILL 100 ms later, and is reaped from the loop whenever
 * it exits (see attach_stats). NULL-safe. */
void attach_cancel(struct attach_req *req);

/* Helpers stopped without waiting for them (timeout, cancel). One still
 * there 100 ms after SIGKILL is in an uninterruptible wait (e.g. on a file
 * system of the target that never answers): it is abandoned, and reaped
 * from the loop when that wait ends. */
struct attach_stats {
	uint64_t helpers_abandoned;  /* ever */
	unsigned helpers_stuck;      /* abandoned and not reaped yet */
	unsigned helpers_unreaped;   /* stopped and not reaped yet (stuck included) */
};

void attach_get_stats(struct attach_stats *out);

#endif
