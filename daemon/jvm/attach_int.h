/* Internals shared by the attach files: attach.c (the daemon's side: the
 * helper process, its pidfd, the timer), attach_probe.c (reading /proc:
 * is it a JVM, may it be attached) and attach_child.c (the forked helper:
 * namespaces, credentials, the attach socket). Not for other modules. */
#ifndef JPROF_ATTACH_INT_H
#define JPROF_ATTACH_INT_H

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
/* Upper bound of /proc/PID/environ we look at. */
#define ATTACH_ENVIRON_MAX (4u << 20)

struct child_ctx {
	pid_t pid;
	int pidfd;            /* target, so a recycled pid is never signalled */
	const char *agent_path;
	const char *options;
	uint64_t deadline;    /* CLOCK_MONOTONIC ms */
};

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
