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

#include "htab.h"
#include "log.h"
#include "proc.h"

/* ---- the child ------------------------------------------------------------ */

static int hash_fd(int fd, uint64_t *hash, off_t *size)
{
	unsigned char buf[65536];
	uint64_t h = 0xcbf29ce484222325ull;
	off_t off = 0;

	for (;;) {
		ssize_t n = pread(fd, buf, sizeof(buf), off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		h = htab_fnv1a(h, buf, (size_t)n);
		off += n;
	}
	*hash = h;
	*size = off;
	return 0;
}

static int write_all(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n > 0) {
		ssize_t k = write(fd, c, n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		c += k;
		n -= (size_t)k;
	}
	return 0;
}

static int copy_fd(int from, int to)
{
	unsigned char buf[65536];
	off_t off = 0;

	for (;;) {
		ssize_t n = pread(from, buf, sizeof(buf), off);
		int r;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return 0;
		r = write_all(to, buf, (size_t)n);
		if (r < 0)
			return r;
		off += n;
	}
}

/* 1 when both files have the same content, 0 when not, or -errno. */
static int same_content(int a, int b)
{
	unsigned char ba[16384], bb[16384];
	off_t off = 0;

	for (;;) {
		ssize_t na = pread(a, ba, sizeof(ba), off), nb;

		if (na < 0)
			return -errno;
		nb = pread(b, bb, (size_t)na ? (size_t)na : 1, off);
		if (nb < 0)
			return -errno;
		if (na != nb || memcmp(ba, bb, (size_t)na) != 0)
			return 0;
		if (na == 0)
			return 1;
		off += na;
	}
}

/* The agent's content at a path the target user can read in the target's
 * /tmp: /tmp/.jprofagent-<uid>-<hash>.so, created atomically (O_TMPFILE +
 * linkat), or reused when a file of that name is ours and identical. Runs
 * with the target's uid in its mount namespace. */
static int copy_agent(int agent_fd, uid_t uid, char *path, size_t len, struct attach_result *res)
{
	char proc_path[64];
	struct stat st;
	uint64_t hash = 0;
	off_t size = 0;
	int tfd = -1, efd = -1, r;

	r = hash_fd(agent_fd, &hash, &size);
	if (r < 0) {
		attach_res_set(res, r, "internal", "cannot read the agent: %s", strerror(-r));
		goto out;
	}
	snprintf(path, len, "/tmp/.jprofagent-%u-%016" PRIx64 ".so", (unsigned)uid, hash);
	tfd = open("/tmp", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
	if (tfd < 0) {
		r = -errno;
		attach_res_set(res, r, "internal", "cannot create a file in the target's /tmp: %s", strerror(-r));
		goto out;
	}
	r = copy_fd(agent_fd, tfd);
	if (r == 0 && fchmod(tfd, 0644) < 0)
		r = -errno;
	if (r < 0) {
		attach_res_set(res, r, "internal", "cannot copy the agent to the target's /tmp: %s", strerror(-r));
		goto out;
	}
	snprintf(proc_path, sizeof(proc_path), "/proc/self/fd/%d", tfd);
	if (linkat(AT_FDCWD, proc_path, AT_FDCWD, path, AT_SYMLINK_FOLLOW) == 0) {
		r = 0;
		goto out;
	}
	r = -errno;
	if (r != -EEXIST) {
		attach_res_set(res, r, "internal", "cannot create %s: %s", path, strerror(-r));
		goto out;
	}
	/* Already there (an earlier attach): only a file this user owns, that
	 * nobody else can change and that holds exactly the agent is reused. */
	efd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (efd < 0) {
		r = -errno;
		attach_res_set(res, r, "internal", "%s exists but cannot be opened: %s", path, strerror(-r));
		goto out;
	}
	if (fstat(efd, &st) < 0) {
		r = -errno;
		attach_res_set(res, r, "internal", "cannot stat %s: %s", path, strerror(-r));
		goto out;
	}
	if (!S_ISREG(st.st_mode) || st.st_uid != uid || (st.st_mode & 022) || st.st_size != size) {
		r = -EEXIST;
		attach_res_set(res, r, "internal",
			"%s exists and is not our copy of the agent (type, owner, mode or size differ); "
			"remove it", path);
		goto out;
	}
	r = same_content(agent_fd, efd);
	if (r <= 0) {
		if (r == 0)
			r = -EEXIST;
		attach_res_set(res, r, "internal", "%s exists with a different content; remove it", path);
		goto out;
	}
	r = 0;
out:
	if (efd >= 0)
		close(efd);
	if (tfd >= 0)
		close(tfd);
	return r;
}

/* Connects to the JVM's attach socket before the deadline. */
static int connect_jvm(const char *sock_path, uint64_t deadline, int *out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, r;

	*out = -1;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		socklen_t sl = sizeof(r);

		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			break;
		r = -errno;
		if (r == -EAGAIN) {  /* backlog full: try again shortly */
			if (attach_ms_left(deadline) == 0) {
				r = -ETIMEDOUT;
				goto fail;
			}
			attach_sleep_ms(ATTACH_POLL_MS);
			continue;
		}
		if (r != -EINPROGRESS)
			goto fail;
		r = poll(&p, 1, attach_ms_left(deadline));
		if (r == 0) {
			r = -ETIMEDOUT;
			goto fail;
		}
		if (r < 0) {
			r = -errno;
			goto fail;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &r, &sl) < 0) {
			r = -errno;
			goto fail;
		}
		if (r != 0) {
			r = -r;
			goto fail;
		}
		break;
	}
	*out = fd;
	return 0;
fail:
	close(fd);
	return r;
}

static int send_all(int fd, const char *buf, size_t len, uint64_t deadline)
{
	while (len > 0) {
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);

		if (n > 0) {
			buf += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		n = poll(&p, 1, attach_ms_left(deadline));
		if (n == 0)
			return -ETIMEDOUT;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
	return 0;
}

/* Reads until EOF (the JVM closes after its reply); keeps the first len-1
 * bytes. Returns the kept length or -errno. */
static ssize_t recv_all(int fd, char *buf, size_t len, uint64_t deadline)
{
	size_t n = 0;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		char tmp[1024];
		ssize_t k = recv(fd, tmp, sizeof(tmp), 0);
		int pr;

		if (k == 0)
			break;
		if (k > 0) {
			size_t keep = (size_t)k < len - 1 - n ? (size_t)k : len - 1 - n;

			memcpy(buf + n, tmp, keep);
			n += keep;
			continue;
		}
		if (errno != EAGAIN && errno != EINTR)
			return -errno;
		pr = poll(&p, 1, attach_ms_left(deadline));
		if (pr == 0)
			return -ETIMEDOUT;
		if (pr < 0 && errno != EINTR)
			return -errno;
	}
	buf[n] = '\0';
	return (ssize_t)n;
}

/* Makes the JVM's text printable and on one line for the message. */
static void flatten(char *s)
{
	size_t n = strlen(s);

	while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == ' '))
		s[--n] = '\0';
	for (size_t i = 0; i < n; i++)
		if (s[i] == '\n')
			s[i] = '|';
		else if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] >= 0x7f)
			s[i] = '?';
}

/* Interprets the reply to "load". The first line is the command status (0 =
 * executed). JDK 17.0.x and 21+ then print "return code: N" with the agent's
 * Agent_OnAttach result, older ones just "N"; a library that cannot be loaded
 * gives a non-zero status (JDK 17) or status 0 followed by the dlopen error
 * (JDK 25). So: success only when the status is 0 and what follows is empty
 * or a zero return code. */
static int parse_reply(char *reply, struct attach_result *res)
{
	char *rest, *end, *line2;
	long status, rc;
	int r;

	rest = strchr(reply, '\n');
	if (rest)
		*rest++ = '\0';
	else
		rest = reply + strlen(reply);
	status = strtol(reply, &end, 10);
	if (end == reply || *end != '\0') {
		r = -EPROTO;
		flatten(reply);
		attach_res_set(res, r, "internal", "unexpected reply from the JVM: \"%s\"", reply);
		goto out;
	}
	if (status != 0) {
		r = -EIO;
		flatten(rest);
		attach_res_set(res, r, "agent_load_failed", "the JVM could not load the agent (status %ld): %s",
			status, rest);
		res->not_live = strstr(rest, ATTACH_NOT_LIVE_TEXT) != NULL;
		goto out;
	}
	line2 = rest;
	if (strncmp(line2, "return code: ", 13) == 0)
		line2 += 13;
	rc = strtol(line2, &end, 10);
	if (*rest == '\0' || (end != line2 && (*end == '\n' || *end == '\0') && rc == 0)) {
		r = 0;
		attach_res_set(res, 0, "", "agent loaded");
		goto out;
	}
	r = -EIO;
	flatten(rest);
	if (end != line2 && (*end == '\n' || *end == '\0')) {
		attach_res_set(res, r, "agent_load_failed", "Agent_OnAttach failed: %s", rest);
		res->not_live = rc == ATTACH_RC_NOT_LIVE;
	} else {
		attach_res_set(res, r, "agent_load_failed", "the JVM could not load the agent: %s", rest);
		res->not_live = strstr(rest, ATTACH_NOT_LIVE_TEXT) != NULL;
	}
out:
	return r;
}

static bool same_file(const char *path, const struct stat *ref)
{
	struct stat st;

	return stat(path, &st) == 0 && st.st_dev == ref->st_dev && st.st_ino == ref->st_ino;
}

/* The trigger file while it exists, so that a child stopped by SIGTERM (the
 * parent's timeout or cancel) or SIGALRM removes it: a leftover would turn
 * a later SIGQUIT meant for a thread dump into a listener start. */
static char child_trigger[64];
static volatile sig_atomic_t child_trigger_set;

static void child_on_signal(int sig)
{
	if (child_trigger_set)
		unlink(child_trigger);
	_exit(128 + sig);
}

/* Asks the JVM to start its attach listener: the trigger file (owned by the
 * JVM's euid, as HotSpot requires) makes its signal thread open the socket
 * on SIGQUIT instead of printing a thread dump. Waits for the socket. */
static int start_listener(const struct child_ctx *c, pid_t nspid, const char *sock_path,
			  struct attach_result *res)
{
	char *trigger = child_trigger;
	struct stat st;
	int fd, r;

	snprintf(child_trigger, sizeof(child_trigger), "/tmp/.attach_pid%d", (int)nspid);
	child_trigger_set = 1;
	/* An existing one (another attacher's, or left over) serves as well. */
	fd = open(trigger, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		r = -errno;
		attach_res_set(res, r, "internal", "cannot create %s: %s", trigger, strerror(-r));
		goto out;
	}
	close(fd);
	if (syscall(SYS_pidfd_send_signal, c->pidfd, SIGQUIT, NULL, 0) < 0) {
		r = -errno;
		if (r == -ESRCH)
			attach_res_set(res, r, "no_such_process", "process %d is gone", (int)c->pid);
		else
			attach_res_set(res, r, "internal", "cannot send SIGQUIT to %d: %s", (int)c->pid,
				strerror(-r));
		goto out;
	}
	while (lstat(sock_path, &st) < 0) {
		if (attach_ms_left(c->deadline) == 0) {
			r = -ETIMEDOUT;
			attach_res_set(res, r, "no_attach_socket",
				"JVM %d did not open %s after SIGQUIT (attach mechanism disabled in a "
				"way jprofd cannot see, or the JVM does not respond)",
				(int)c->pid, sock_path);
			goto out;
		}
		attach_sleep_ms(ATTACH_POLL_MS);
	}
	r = 0;
out:
	unlink(trigger);
	child_trigger_set = 0;
	return r;
}

/* Everything that needs the target's namespace and identity. Fills res. */
static void child_attach(const struct child_ctx *c, struct attach_result *res)
{
	char path[128], sock_path[64], agent_use[PATH_MAX], *status = NULL;
	char reply[2048], req[2 * ATTACH_ARG_MAX + 64];
	struct stat agent_st, st_self, st_target;
	unsigned euid = 0, egid = 0;
	pid_t nspid = 0;
	struct ucred peer = { .pid = 0 };
	socklen_t peer_len = sizeof(peer);
	bool existed;
	int agent_fd = -1, ns_fd = -1, sfd = -1, r;
	size_t rl;
	ssize_t n;

	/* As root, in our own namespace: the agent file, the target's mount
	 * namespace and its ids. */
	agent_fd = open(c->agent_path, O_RDONLY | O_CLOEXEC);
	if (agent_fd < 0 || fstat(agent_fd, &agent_st) < 0) {
		r = -errno;
		attach_res_set(res, r, "internal", "cannot open the agent %s: %s", c->agent_path, strerror(-r));
		goto out;
	}
	snprintf(path, sizeof(path), "/proc/%d/ns/mnt", (int)c->pid);
	ns_fd = open(path, O_RDONLY | O_CLOEXEC);
	r = ns_fd < 0 ? -errno : attach_read_status(c->pid, &status);
	if (r == 0 && (attach_status_effective_id(status, "Uid", &euid) < 0 ||
		       attach_status_effective_id(status, "Gid", &egid) < 0 ||
		       attach_status_ns_pid(status, c->pid, &nspid) < 0))
		r = -EIO;
	if (r == 0 && fstat(ns_fd, &st_target) < 0)
		r = -errno;
	/* Still the same process: what we read belongs to it, not to a new one
	 * that reused the pid. */
	if (r == 0 && syscall(SYS_pidfd_send_signal, c->pidfd, 0, NULL, 0) < 0)
		r = -errno;
	if (r < 0) {
		if (r == -ENOENT || r == -ESRCH)
			attach_res_set(res, -ESRCH, "no_such_process", "process %d is gone", (int)c->pid);
		else
			attach_res_set(res, r, "internal", "cannot read /proc/%d: %s", (int)c->pid, strerror(-r));
		goto out;
	}
	if (stat("/proc/self/ns/mnt", &st_self) < 0) {
		r = -errno;
		attach_res_set(res, r, "internal", "cannot stat /proc/self/ns/mnt: %s", strerror(-r));
		goto out;
	}
	if ((st_self.st_dev != st_target.st_dev || st_self.st_ino != st_target.st_ino) &&
	    setns(ns_fd, CLONE_NEWNS) < 0) {
		r = -errno;
		attach_res_set(res, r, "internal", "cannot enter the mount namespace of %d: %s", (int)c->pid,
			strerror(-r));
		goto out;
	}
	if (chdir("/") < 0) {
		r = -errno;
		attach_res_set(res, r, "internal", "chdir(/): %s", strerror(-r));
		goto out;
	}
	/* Supplementary groups first and the uid last: each step needs the
	 * privilege the next one drops. */
	if (setgroups(0, NULL) < 0 || setgid((gid_t)egid) < 0 || setuid((uid_t)euid) < 0) {
		r = -errno;
		attach_res_set(res, r, "internal", "cannot switch to uid %u gid %u: %s", euid, egid,
			strerror(-r));
		goto out;
	}

	/* The JVM loads the agent by path, in its namespace, as its user. */
	snprintf(agent_use, sizeof(agent_use), "%s", c->agent_path);
	if (access(c->agent_path, R_OK) < 0 || !same_file(c->agent_path, &agent_st)) {
		r = copy_agent(agent_fd, (uid_t)euid, agent_use, sizeof(agent_use), res);
		if (r < 0)
			goto out;
	}

	snprintf(sock_path, sizeof(sock_path), "/tmp/.java_pid%d", (int)nspid);
	existed = lstat(sock_path, &st_self) == 0;
	if (!existed) {
		r = start_listener(c, nspid, sock_path, res);
		if (r < 0)
			goto out;
	}
	r = connect_jvm(sock_path, c->deadline, &sfd);
	if (r == -ECONNREFUSED && existed) {
		/* Left behind by a JVM that died (SIGKILL) with the same pid:
		 * remove it and start this JVM's listener. */
		if (unlink(sock_path) < 0) {
			r = -errno;
			attach_res_set(res, r, "attach_refused", "stale %s cannot be removed: %s", sock_path,
				strerror(-r));
			goto out;
		}
		r = start_listener(c, nspid, sock_path, res);
		if (r < 0)
			goto out;
		r = connect_jvm(sock_path, c->deadline, &sfd);
	}
	if (r < 0) {
		if (r == -ETIMEDOUT)
			attach_res_set(res, r, "timeout", "connecting to %s timed out", sock_path);
		else
			attach_res_set(res, r, "attach_refused", "cannot connect to %s: %s", sock_path,
				strerror(-r));
		goto out;
	}
	/* Anyone could have created a socket of that name first: talk only to
	 * the target itself. */
	if (getsockopt(sfd, SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) < 0 || peer.pid != c->pid) {
		r = -ECONNREFUSED;
		attach_res_set(res, r, "attach_refused", "%s is not served by process %d (peer pid %d)",
			sock_path, (int)c->pid, (int)peer.pid);
		goto out;
	}
	/* Protocol 1: "1", the command and three arguments, each NUL-ended;
	 * "true" says the library path is absolute. */
	rl = 0;
	memcpy(req + rl, "1\0load\0", 7);
	rl += 7;
	memcpy(req + rl, agent_use, strlen(agent_use) + 1);
	rl += strlen(agent_use) + 1;
	memcpy(req + rl, "true\0", 5);
	rl += 5;
	memcpy(req + rl, c->options, strlen(c->options) + 1);
	rl += strlen(c->options) + 1;
	r = send_all(sfd, req, rl, c->deadline);
	if (r < 0) {
		if (r == -ETIMEDOUT)
			attach_res_set(res, r, "timeout", "sending the request to JVM %d timed out", (int)c->pid);
		else
			attach_res_set(res, r, "attach_refused", "JVM %d closed the attach connection: %s",
				(int)c->pid, strerror(-r));
		goto out;
	}
	n = recv_all(sfd, reply, sizeof(reply), c->deadline);
	if (n < 0) {
		r = (int)n;
		if (r == -ETIMEDOUT)
			attach_res_set(res, r, "timeout", "JVM %d did not answer in time", (int)c->pid);
		else
			attach_res_set(res, r, "attach_refused", "reading the reply of JVM %d: %s", (int)c->pid,
				strerror(-r));
		goto out;
	}
	if (n == 0) {
		/* HotSpot closes without a word when the peer's credentials do
		 * not match its own. */
		r = -ECONNREFUSED;
		attach_res_set(res, r, "attach_refused", "JVM %d closed the attach connection without a reply",
			(int)c->pid);
		goto out;
	}
	r = parse_reply(reply, res);
	if (r == 0 && strcmp(agent_use, c->agent_path) != 0)
		attach_res_set(res, 0, "", "agent loaded from the copy %s", agent_use);
out:
	if (sfd >= 0)
		close(sfd);
	if (ns_fd >= 0)
		close(ns_fd);
	if (agent_fd >= 0)
		close(agent_fd);
	free(status);
}

static void close_all_but(int a, int b)
{
	int lo = a < b ? a : b, hi = a < b ? b : a;

	if (lo > 3)
		close_range(3, (unsigned)lo - 1, 0);
	if (hi > lo + 1)
		close_range((unsigned)lo + 1, (unsigned)hi - 1, 0);
	close_range((unsigned)hi + 1, ~0u, 0);
}

void attach_child_main(const struct child_ctx *c, int wfd)
{
	struct attach_result res;
	sigset_t none;
	unsigned secs;

	/* Neither the daemon's blocked signals nor its dispositions apply
	 * here; alarm() is the last resort against any wait we missed. */
	signal(SIGALRM, child_on_signal);
	signal(SIGTERM, child_on_signal);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	secs = (unsigned)(attach_ms_left(c->deadline) / 1000) + 2;
	alarm(secs);
	/* Other fds of the daemon (sockets, other attaches' pipes) must not
	 * live on in this child. */
	close_all_but(wfd, c->pidfd);
	memset(&res, 0, sizeof(res));
	child_attach(c, &res);
	write_all(wfd, &res, sizeof(res));
	_exit(0);
}

