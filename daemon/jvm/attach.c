/* HotSpot dynamic attach: see attach.h and docs/attach.md. This file is the
 * daemon's side; attach_probe.c reads /proc, attach_child.c is the helper.
 *
 * attach_start forks a child that does everything that changes process
 * state (setns, setgroups/setgid/setuid) or may block (waiting for the
 * attach socket, talking to the JVM). The child writes one struct
 * attach_result into a pipe and _exits; the parent watches the child's pidfd
 * from the loop and, once it exited, reads the pipe and calls done (the loop
 * reaps the child). A loop timer reports "timeout" when the overall timeout
 * passes.
 *
 * Nothing here waits for the helper. One that must stop (timeout, cancel,
 * a failed start) becomes an orphan: SIGTERM (so it removes its trigger
 * file), SIGKILL a grace period later, and a child source that reaps it
 * whenever it exits. A helper can outlive SIGKILL: one blocked in an
 * uninterruptible wait (a FUSE server in the target's mount namespace that
 * never answers) dies only when that wait ends. It is counted as abandoned
 * and reaped from the loop when it finally exits. */
#include "attach_int.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
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

/* At most one log line per this long about abandoned helpers: a peer can
 * make the daemon start one attach after another. */
#define ATTACH_ABANDON_LOG_MS 60000

struct attach_req {
	struct loop *loop;
	pid_t pid;           /* target (host pid) */
	uid_t uid;           /* target euid, for the audit line */
	int target_fd;       /* its pidfd, kept across tries: a recycled pid is never attached */
	pid_t child;         /* the helper; -1 when none or reaped */
	int child_fd;        /* its pidfd, -1 when none */
	int rfd;             /* result pipe, read end; -1 when none */
	struct loop_source *exit_src, *timer;
	attach_done_fn done;
	void *arg;
	attach_slow_fn slow;
	void *slow_arg;
	struct attach_result res;
	size_t got;          /* bytes of res read from the pipe */
	/* Tries of a JVM in its start-up (see attach_start). */
	char agent_path[ATTACH_ARG_MAX], options[ATTACH_ARG_MAX];
	unsigned timeout_ms;
	unsigned tries;      /* helpers started */
	unsigned waits;      /* waits for the JVM so far */
	unsigned wait_ms;    /* before the next try */
	uint64_t first_ms;   /* when the first try started */
	bool slow_told;
};

/* A helper whose request is gone, until the loop reaps it. */
struct orphan {
	struct orphan *prev, *next;
	pid_t pid;
	int pidfd;           /* -1: no child source, its timer polls waitpid */
	struct loop_source *exit_src, *timer;
	bool killed;         /* SIGKILL sent */
	bool abandoned;      /* still there a grace period after SIGKILL */
};

/* Process-wide, like the children themselves: the list keeps orphans
 * reachable until they are reaped, even past the loop that watched them. */
static struct orphan *orphans;
static struct attach_stats stats;
static uint64_t abandon_logged_ms;

/* ---- orphans ------------------------------------------------------------- */

static void orphan_free(struct orphan *o)
{
	loop_remove(o->exit_src);
	loop_remove(o->timer);
	if (o->pidfd >= 0)
		close(o->pidfd);
	if (o->prev)
		o->prev->next = o->next;
	else
		orphans = o->next;
	if (o->next)
		o->next->prev = o->prev;
	stats.helpers_unreaped--;
	if (o->abandoned)
		stats.helpers_stuck--;
	free(o);
}

static void on_orphan_exit(struct loop_source *src, const siginfo_t *si, void *arg)
{
	struct orphan *o = arg;

	if (o->abandoned)
		log_info("attach: abandoned helper %d exited at last; reaped", (int)o->pid);
	orphan_free(o);  /* the loop reaps it once we return */
}

static void orphan_abandon(struct orphan *o)
{
	uint64_t now = attach_now_ms();

	o->abandoned = true;
	stats.helpers_abandoned++;
	stats.helpers_stuck++;
	if (!abandon_logged_ms || now - abandon_logged_ms >= ATTACH_ABANDON_LOG_MS) {
		abandon_logged_ms = now;
		log_warn("attach: helper %d did not exit after SIGKILL (an uninterruptible wait, e.g. "
			 "on a file system of the target that does not answer); abandoned, reaped when it "
			 "exits (%" PRIu64 " abandoned so far, %u not reaped)",
			 (int)o->pid, stats.helpers_abandoned, stats.helpers_stuck);
	}
}

/* Every grace period: SIGKILL, then "abandoned". Without a child source
 * (no pidfd) it also polls for the exit, without waiting. */
static void on_orphan_timer(struct loop_source *src, void *arg)
{
	struct orphan *o = arg;
	int st;

	if (!o->exit_src && waitpid(o->pid, &st, WNOHANG) == o->pid) {
		orphan_free(o);
		return;
	}
	if (!o->killed) {
		kill(o->pid, SIGKILL);
		o->killed = true;
		return;
	}
	if (!o->abandoned)
		orphan_abandon(o);
	if (o->exit_src) {
		loop_remove(o->timer);
		o->timer = NULL;
	}
}

/* Takes the helper pid (and its pidfd, -1 if none) out of a request: stops
 * it and lets the loop reap it, without waiting here. */
static void orphan_adopt(struct loop *loop, pid_t pid, int pidfd)
{
	struct orphan *o = calloc(1, sizeof(*o));

	if (!o) {
		/* Nothing left to watch it with: it stays a zombie until we exit. */
		kill(pid, SIGKILL);
		if (pidfd >= 0)
			close(pidfd);
		log_err("attach: out of memory; helper %d is killed but not reaped", (int)pid);
		return;
	}
	*o = (struct orphan){ .pid = pid, .pidfd = pidfd, .next = orphans };
	if (orphans)
		orphans->prev = o;
	orphans = o;
	stats.helpers_unreaped++;
	kill(pid, SIGTERM);
	if (pidfd >= 0 && loop_add_child(loop, pidfd, on_orphan_exit, o, &o->exit_src) < 0)
		o->exit_src = NULL;
	if (loop_add_timer(loop, ATTACH_KILL_GRACE_MS, ATTACH_KILL_GRACE_MS, on_orphan_timer, o,
			   &o->timer) < 0) {
		o->timer = NULL;
		kill(pid, SIGKILL);
		o->killed = true;
	}
}

void attach_get_stats(struct attach_stats *out)
{
	*out = stats;
}

/* ---- parent --------------------------------------------------------------- */

/* Ends the current try: its helper (if still running) stopped and reaped
 * in the background, its pipe and sources gone. */
static void req_end_try(struct attach_req *req)
{
	loop_remove(req->exit_src);
	loop_remove(req->timer);
	req->exit_src = req->timer = NULL;
	if (req->child > 0) {
		orphan_adopt(req->loop, req->child, req->child_fd);
		req->child_fd = -1;
	}
	req->child = -1;
	if (req->rfd >= 0)
		close(req->rfd);
	if (req->child_fd >= 0)
		close(req->child_fd);
	req->rfd = req->child_fd = -1;
	req->got = 0;
}

static void req_release(struct attach_req *req)
{
	req_end_try(req);
	if (req->target_fd >= 0)
		close(req->target_fd);
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

static int try_later(struct attach_req *req);

/* A try that could not start the next one: reported as this failure. */
static void req_fail(struct attach_req *req, int r, const char *what)
{
	req_end_try(req);
	attach_res_set(&req->res, r, "internal", "%s: %s", what, strerror(-r));
	log_err("attach to pid %d: %s: %s", (int)req->pid, what, strerror(-r));
	req_finish(req);
}

/* A JVM in its start-up that could not take the agent yet, still running
 * and young enough to try again. */
static bool req_may_retry(const struct attach_req *req)
{
	const struct attach_result *res = &req->res;

	if (res->status >= 0 || (res->status != -EAGAIN && !res->not_live))
		return false;
	return proc_pidfd_running(req->target_fd) == 1 && attach_jvm_young(req->pid);
}

static void on_child_exit(struct loop_source *src, const siginfo_t *si, void *arg)
{
	struct attach_req *req = arg;
	int r;

	req->child = -1;  /* the loop reaps it once we return */
	read_result(req);
	if (!req_may_retry(req)) {
		req_finish(req);
		return;
	}
	r = try_later(req);
	if (r < 0)
		req_fail(req, r, "cannot wait for its start-up");
}

/* Without a helper (a failed probe) this reports the result. Otherwise the
 * timeout passed: "timeout" now, and the helper is stopped and reaped in
 * the background (see orphan_adopt). */
static void on_timer(struct loop_source *src, void *arg)
{
	struct attach_req *req = arg;

	if (req->child > 0)
		attach_res_set(&req->res, -ETIMEDOUT, "timeout", "attaching to pid %d took too long",
			       (int)req->pid);
	req_finish(req);
}

/* One try: the helper forked, its exit and this try's timeout watched. */
static int req_spawn(struct attach_req *req)
{
	struct child_ctx c;
	int pipefd[2] = { -1, -1 }, r;

	memset(&req->res, 0, sizeof(req->res));
	if (pipe2(pipefd, O_CLOEXEC | O_NONBLOCK) < 0) {
		r = -errno;
		goto out;
	}
	c = (struct child_ctx){ .pid = req->pid, .pidfd = req->target_fd, .agent_path = req->agent_path,
				.options = req->options,
				.deadline = attach_now_ms() + (req->timeout_ms > 2 * ATTACH_CHILD_MARGIN_MS
							? req->timeout_ms - ATTACH_CHILD_MARGIN_MS
							: req->timeout_ms / 2) };
	req->rfd = pipefd[0];
	r = loop_add_timer(req->loop, req->timeout_ms, 0, on_timer, req, &req->timer);
	if (r < 0)
		goto out;
	req->child = fork();
	if (req->child < 0) {
		r = -errno;
		goto out;
	}
	if (req->child == 0)
		attach_child_main(&c, pipefd[1]);
	req->tries++;
	/* Not reaped before we say so, so the pid is still this child's. */
	req->child_fd = (int)syscall(SYS_pidfd_open, req->child, 0);
	if (req->child_fd < 0) {
		r = -errno;
		goto out;
	}
	r = loop_add_child(req->loop, req->child_fd, on_child_exit, req, &req->exit_src);
out:
	if (pipefd[1] >= 0)
		close(pipefd[1]);
	return r;
}

/* The next try of a starting JVM: probed again first, so a JVM that has
 * still no SIGQUIT handler is never signalled. */
static void on_retry(struct loop_source *src, void *arg)
{
	struct attach_req *req = arg;
	int r;

	loop_remove(req->timer);
	req->timer = NULL;
	if (proc_pidfd_running(req->target_fd) != 1) {
		attach_res_set(&req->res, -ESRCH, "no_such_process", "process %d exited while starting up",
			       (int)req->pid);
		req_finish(req);
		return;
	}
	r = attach_probe_now(req->pid, &req->res);
	if (r < 0 && !req_may_retry(req)) {
		req_finish(req);
		return;
	}
	r = r < 0 ? try_later(req) : req_spawn(req);
	if (r < 0)
		req_fail(req, r, "cannot try again");
}

/* The JVM cannot take the agent yet (req->res says why): another try
 * after a wait, from a loop timer. 0 or -errno. */
static int try_later(struct attach_req *req)
{
	char msg[sizeof(req->res.message) + 160];
	uint64_t waited;
	attach_slow_fn tell = NULL;
	void *tell_arg = req->slow_arg;
	int r;

	req_end_try(req);
	waited = attach_now_ms() - req->first_ms;
	if (!req->slow_told && waited >= ATTACH_SLOW_MS) {
		req->slow_told = true;
		tell = req->slow;
		snprintf(msg, sizeof(msg), "JVM %d is still starting up (%s); trying again until it is %d s "
			 "old", (int)req->pid, req->res.message, ATTACH_YOUNG_MS / 1000);
	}
	/* Once per attach at info level (why it waits), then debug. */
	log_msg(req->waits++ ? LOG_LVL_DEBUG : LOG_LVL_INFO,
		"attach: pid %d is starting up (%s; %" PRIu64 " ms, %u agent loads so far); trying "
		"again in %u ms until it is %d s old", (int)req->pid, req->res.message, waited,
		req->tries, req->wait_ms, ATTACH_YOUNG_MS / 1000);
	r = loop_add_timer(req->loop, req->wait_ms, 0, on_retry, req, &req->timer);
	if (r < 0)
		return r;
	req->wait_ms = req->wait_ms * 2 > ATTACH_RETRY_MAX_MS ? ATTACH_RETRY_MAX_MS : req->wait_ms * 2;
	/* Last: the callback may cancel the request. */
	if (tell)
		tell(msg, tell_arg);
	return 0;
}

void attach_on_slow(struct attach_req *req, attach_slow_fn slow, void *arg)
{
	if (!req)
		return;
	req->slow = slow;
	req->slow_arg = arg;
}

int attach_start(struct loop *loop, pid_t pid, const char *agent_path, const char *options,
		 unsigned timeout_ms, attach_done_fn done, void *arg, struct attach_req **out)
{
	struct attach_req *req = NULL;
	uid_t uids[4];
	int r;

	*out = NULL;
	if (!loop || !agent_path || agent_path[0] != '/' || strlen(agent_path) >= ATTACH_ARG_MAX ||
	    (options && strlen(options) >= ATTACH_ARG_MAX) || timeout_ms == 0 || !done)
		return -EINVAL;
	req = calloc(1, sizeof(*req));
	if (!req)
		return -ENOMEM;
	*req = (struct attach_req){ .loop = loop, .pid = pid, .uid = (uid_t)-1, .target_fd = -1,
				    .child = -1, .child_fd = -1, .rfd = -1, .done = done, .arg = arg,
				    .timeout_ms = timeout_ms, .wait_ms = ATTACH_RETRY_FIRST_MS,
				    .first_ms = attach_now_ms() };
	snprintf(req->agent_path, sizeof(req->agent_path), "%s", agent_path);
	snprintf(req->options, sizeof(req->options), "%s", options ? options : "");
	if (pid > 0 && proc_read_uids(pid, uids) == 0)
		req->uid = uids[1];
	/* The pidfd pins the target before anything is checked: the child
	 * signals through it, so a recycled pid is never signalled. */
	req->target_fd = pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
	if (pid > 0 && req->target_fd < 0 && errno != ESRCH) {
		r = -errno;
		goto out;
	}
	if (req->target_fd < 0) {
		r = -ESRCH;
		attach_res_set(&req->res, r, "no_such_process", "no process %d", (int)pid);
	} else {
		r = attach_probe_now(pid, &req->res);
	}
	if (r == -EAGAIN && req_may_retry(req)) {
		r = try_later(req);
		goto out;
	}
	if (r < 0) {
		/* Reported from the loop like every other result. */
		r = loop_add_timer(loop, 0, 0, on_timer, req, &req->timer);
		goto out;
	}
	r = req_spawn(req);
out:
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

