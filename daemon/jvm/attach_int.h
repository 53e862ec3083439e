/* Internals shared by the attach files: attach.c (the daemon's side: the
 * helper process, its pidfd, the timer), attach_probe.c (reading /proc:
 * is it a JVM, may it be attached) and attach_child.c (the forked helper:
 * namespaces, credentials, the attach socket). Not for other modules. */
#ifndef JPROF_ATTACH_INT_H
#define JPROF_ATTACH_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "attach.h"

/* HotSpot's attach listener rejects longer arguments (arg_length_max). */
#define ATTACH_ARG_MAX 1024
/* How often the child looks for the attach socket after SIGQUIT. */
#define ATTACH_POLL_MS 20
/* The child gives up this much before the parent's timer, so that its own,
 * more precise reason ("no_attach_socket") usually wins over "timeout". */
#define ATTACH_CHILD_MARGIN_MS 150
/* A helper told to stop (SIGTERM) gets this long before SIGKILL, and as
 * long again before it counts as abandoned. */
#define ATTACH_KILL_GRACE_MS 100
/* A JVM this young (since its process started) may still be starting up:
 * no SIGQUIT handler yet, or JVMTI not live so Agent_OnAttach fails. Its
 * attach is tried again until then (issue 13: a loaded machine took more
 * than a second after libjvm.so was mapped). */
#define ATTACH_YOUNG_MS 15000
/* What JDK 21+ answers a load before JVMTI's live phase ("Dynamic agent
 * loading is only permitted in the live phase"). */
#define ATTACH_NOT_LIVE_TEXT "only permitted in the live phase"
/* Waits between those tries: doubling from the first to the last. */
#define ATTACH_RETRY_FIRST_MS 50
#define ATTACH_RETRY_MAX_MS 800
/* Tries taking longer than this are reported (attach_on_slow). */
#define ATTACH_SLOW_MS 1000
/* Upper bound of /proc/PID/environ we look at. */
#define ATTACH_ENVIRON_MAX (4u << 20)

struct child_ctx {
	pid_t pid;
	int pidfd;            /* target, so a recycled pid is never signalled */
	const char *agent_path;
	const char *options;
	uint64_t deadline;    /* CLOCK_MONOTONIC ms */
};

/* attach_probe, but -EAGAIN (code "jvm_starting") for a JVM still starting
 * up (young, SIGQUIT not handled yet, no -Xrs): try again later. */
int attach_probe_now(pid_t pid, struct attach_result *res);
/* True while pid is younger than ATTACH_YOUNG_MS. */
bool attach_jvm_young(pid_t pid);
void attach_res_set(struct attach_result *res, int status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
uint64_t attach_now_ms(void);
/* Milliseconds until deadline (CLOCK_MONOTONIC ms), 0 when passed. */
int attach_ms_left(uint64_t deadline);
void attach_sleep_ms(unsigned ms);
/* The whole file (at most max bytes), NUL-terminated, in *out (caller frees). */
int attach_read_file(const char *path, size_t max, char **out, size_t *len);
int attach_status_field(const char *status, const char *key, char *val, size_t len);
/* /proc/PID/status, NUL-terminated, in *out (caller frees). */
int attach_read_status(pid_t pid, char **out);
int attach_status_effective_id(const char *status, const char *key, unsigned *id);
int attach_status_ns_pid(const char *status, pid_t pid, pid_t *nspid);
/* The forked helper: attaches, writes one struct attach_result to wfd, exits. */
__attribute__((noreturn)) void attach_child_main(const struct child_ctx *c, int wfd);

#endif
