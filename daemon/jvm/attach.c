/* HotSpot dynamic attach: see attach.h and docs/attach.md. This file is the
 * daemon's side; attach_probe.c reads /proc, attach_child.c is the helper.
 *
 * attach_start forks a child that does everything that changes process
 * state (setns, setgroups/setgid/setuid) or may block (waiting for the
 * attach socket, talking to the JVM). The child writes one struct
 * attach_result into a pipe and _exits; the parent watches the child's pidfd
 * from the loop and, once it exited, reads the pipe and calls done (the loop
 * reaps the child). A loop timer stops the child when the overall timeout
 * passes. */
#include "attach_int.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "loop.h"
#include "proc.h"

struct attach_req {
	struct loop *loop;
	pid_t pid;           /* target (host pid) */
	uid_t uid;           /* target euid, for the audit line */
	pid_t child;         /* the helper; -1 when none or reaped */
	int child_fd;        /* its pidfd, -1 when none */
	int rfd;             /* result pipe, read end; -1 when none */
	struct loop_source *exit_src, *timer;
	attach_done_fn done;
	void *arg;
	struct attach_result res;
	size_t got;          /* bytes of res read from the pipe */
	bool stopping;       /* timed out: SIGTERM sent, res says "timeout" */
};

/* ---- parent --------------------------------------------------------------- */

/* Stops the helper and reaps it before returning, for callers that need it
 * gone (attach_cancel, a failed start): SIGTERM lets it remove the trigger
 * file, SIGKILL follows if it has not exited within the grace period. */
static void stop_child_now(struct attach_req *req)
{
	struct pollfd exited = { .fd = req->child_fd, .events = POLLIN };
	int st;

	if (req->child <= 0)
		return;
	kill(req->child, SIGTERM);
	if (req->child_fd < 0 || poll(&exited, 1, ATTACH_KILL_GRACE_MS) <= 0)
		kill(req->child, SIGKILL);
	while (waitpid(req->child, &st, 0) < 0 && errno == EINTR)
		;
	req->child = -1;
}

static void req_release(struct attach_req *req)
{
	stop_child_now(req);
	loop_remove(req->exit_src);
	loop_remove(req->timer);
	req->exit_src = req->timer = NULL;
	if (req->rfd >= 0)
		close(req->rfd);
	if (req->child_fd >= 0)
		close(req->child_fd);
	free(req);
}

static void req_finish(struct attach_req *req)
{
	/* uid -1: the process was gone before we could read it */
	if (req->res.status == 0)
		log_audit("attach: loaded agent into pid %d (uid %d): %s", (int)req->pid,
			  (int)req->uid, req->res.message);
	else
		log_audit("attach: pid %d (uid %d) failed: %s: %s", (int)req->pid, (int)req->uid,
			  req->res.code, req->res.message);
	if (req->done)
		req->done(&req->res, req->arg);
	req_release(req);
}

/* The helper has exited, so whatever it wrote is in the pipe: one struct
 * attach_result, or less when it died on the way. */
static void read_result(struct attach_req *req)
{
	while (req->got < sizeof(req->res)) {
		ssize_t n = read(req->rfd, (char *)&req->res + req->got, sizeof(req->res) - req->got);

		if (n > 0)
			req->got += (size_t)n;
		else if (n == 0 || errno != EINTR)
			break;
	}
	if (req->got != sizeof(req->res)) {
		memset(&req->res, 0, sizeof(req->res));
		attach_res_set(&req->res, -EIO, "internal", "the attach helper process died without a result");
	}
	req->res.code[sizeof(req->res.code) - 1] = '\0';
	req->res.message[sizeof(req->res.message) - 1] = '\0';
}

static void on_child_exit(struct loop_source *src, const siginfo_t *si, void *arg)
{
	struct attach_req *req = arg;

	req->child = -1;  /* the loop reaps it once we return */
	if (!req->stopping)
		read_result(req);
	req_finish(req);
}

/* Without a helper (a failed probe) this reports the result. Otherwise the
 * first expiry is the timeout: SIGTERM, so the helper removes its trigger
 * file and exits; the next ones, every grace period, SIGKILL. The helper's
 * exit then reports "timeout". */
static void on_timer(struct loop_source *src, void *arg)
{
	struct attach_req *req = arg;

	if (req->child <= 0) {
		req_finish(req);
		return;
	}
	if (req->stopping) {
		kill(req->child, SIGKILL);
		return;
	}
	req->stopping = true;
	attach_res_set(&req->res, -ETIMEDOUT, "timeout", "attaching to pid %d took too long", (int)req->pid);
	kill(req->child, SIGTERM);
}

int attach_start(struct loop *loop, pid_t pid, const char *agent_path, const char *options,
		 unsigned timeout_ms, attach_done_fn done, void *arg, struct attach_req **out)
{
	struct attach_req *req = NULL;
	struct child_ctx c;
	uid_t uids[4];
	int pipefd[2] = { -1, -1 }, pidfd = -1, r;

	*out = NULL;
	if (!loop || !agent_path || agent_path[0] != '/' || strlen(agent_path) >= ATTACH_ARG_MAX ||
	    (options && strlen(options) >= ATTACH_ARG_MAX) || timeout_ms == 0 || !done)
		return -EINVAL;
	req = calloc(1, sizeof(*req));
	if (!req)
		return -ENOMEM;
	*req = (struct attach_req){ .loop = loop, .pid = pid, .uid = (uid_t)-1, .child = -1,
				    .child_fd = -1, .rfd = -1, .done = done, .arg = arg };
	if (pid > 0 && proc_read_uids(pid, uids) == 0)
		req->uid = uids[1];
	/* The pidfd pins the target before anything is checked: the child
	 * signals through it, so a recycled pid is never signalled. */
	pidfd = pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
	if (pid > 0 && pidfd < 0 && errno != ESRCH) {
		r = -errno;
		goto out;
	}
	if (pidfd < 0) {
		r = -ESRCH;
		attach_res_set(&req->res, r, "no_such_process", "no process %d", (int)pid);
	} else {
		r = attach_probe(pid, &req->res);
	}
	if (r < 0) {
		/* Reported from the loop like every other result. */
		r = loop_add_timer(loop, 0, 0, on_timer, req, &req->timer);
		goto out;
	}
	if (pipe2(pipefd, O_CLOEXEC | O_NONBLOCK) < 0) {
		r = -errno;
		goto out;
	}
	c = (struct child_ctx){ .pid = pid, .pidfd = pidfd, .agent_path = agent_path,
				.options = options ? options : "",
				.deadline = attach_now_ms() + (timeout_ms > 2 * ATTACH_CHILD_MARGIN_MS
							? timeout_ms - ATTACH_CHILD_MARGIN_MS
							: timeout_ms / 2) };
	req->rfd = pipefd[0];
	r = loop_add_timer(loop, timeout_ms, ATTACH_KILL_GRACE_MS, on_timer, req, &req->timer);
	if (r < 0)
		goto out;
	req->child = fork();
	if (req->child < 0) {
		r = -errno;
		goto out;
	}
	if (req->child == 0)
		attach_child_main(&c, pipefd[1]);
	/* Not reaped before we say so, so the pid is still this child's. */
	req->child_fd = (int)syscall(SYS_pidfd_open, req->child, 0);
	if (req->child_fd < 0) {
		r = -errno;
		goto out;
	}
	r = loop_add_child(loop, req->child_fd, on_child_exit, req, &req->exit_src);
out:
	if (pipefd[1] >= 0)
		close(pipefd[1]);
	if (pidfd >= 0)
		close(pidfd);
	if (r < 0) {
		log_err("attach to pid %d: cannot start: %s", (int)pid, strerror(-r));
		req_release(req);
		return r;
	}
	*out = req;
	return 0;
}

void attach_cancel(struct attach_req *req)
{
	if (!req)
		return;
	log_audit("attach: pid %d (uid %d) cancelled", (int)req->pid, (int)req->uid);
	req_release(req);
}

