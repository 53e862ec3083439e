/* HotSpot dynamic attach: see attach.h and docs/attach.md.
 *
 * attach_start forks a child that does everything that changes process
 * state (setns, setgroups/setgid/setuid) or may block (waiting for the
 * attach socket, talking to the JVM). The child writes one struct
 * attach_result into a pipe and _exits; the parent watches the child's pidfd
 * from the loop and, once it exited, reads the pipe and calls done (the loop
 * reaps the child). A loop timer stops the child when the overall timeout
 * passes. */
#include "attach.h"

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

/* HotSpot's attach listener rejects longer arguments (arg_length_max). */
#define ATTACH_ARG_MAX 1024
/* How often the child looks for the attach socket after SIGQUIT. */
#define ATTACH_POLL_MS 20
/* The child gives up this much before the parent's timer, so that its own,
 * more precise reason ("no_attach_socket") usually wins over "timeout". */
#define ATTACH_CHILD_MARGIN_MS 150
/* A helper told to stop (SIGTERM) gets this long before SIGKILL. */
#define ATTACH_KILL_GRACE_MS 100
/* Upper bound of /proc/PID/environ we look at. */
#define ATTACH_ENVIRON_MAX (4u << 20)

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

/* ---- small helpers ------------------------------------------------------ */

static void res_set(struct attach_result *res, int status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void res_set(struct attach_result *res, int status, const char *code, const char *fmt, ...)
{
	va_list ap;

	res->status = status;
	snprintf(res->code, sizeof(res->code), "%s", code);
	va_start(ap, fmt);
	vsnprintf(res->message, sizeof(res->message), fmt, ap);
	va_end(ap);
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int ms_left(uint64_t deadline)
{
	uint64_t now = now_ms();

	if (now >= deadline)
		return 0;
	return deadline - now > INT_MAX ? INT_MAX : (int)(deadline - now);
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Reads a whole (small, /proc) file into a NUL-terminated malloc'd buffer. */
static int read_file(const char *path, size_t max, char **out, size_t *len)
{
	size_t cap = 4096, n = 0;
	char *buf = NULL, *p;
	int fd, r = 0;

	*out = NULL;
	*len = 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	buf = malloc(cap + 1);
	if (!buf) {
		r = -ENOMEM;
		goto out;
	}
	for (;;) {
		ssize_t k;

		if (n == cap) {
			if (cap >= max)
				break;
			cap *= 2;
			p = realloc(buf, cap + 1);
			if (!p) {
				r = -ENOMEM;
				goto out;
			}
			buf = p;
		}
		k = read(fd, buf + n, cap - n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			r = -errno;
			goto out;
		}
		if (k == 0)
			break;
		n += (size_t)k;
	}
	buf[n] = '\0';
	*out = buf;
	*len = n;
	buf = NULL;
out:
	free(buf);
	close(fd);
	return r;
}

/* Value of "Key:" in /proc/PID/status, the rest of the line. */
static int status_field(const char *status, const char *key, char *val, size_t len)
{
	size_t kl = strlen(key);
	const char *p = status;

	while (p && *p) {
		const char *nl = strchr(p, '\n');
		size_t ll = nl ? (size_t)(nl - p) : strlen(p);

		if (ll > kl && strncmp(p, key, kl) == 0 && p[kl] == ':') {
			const char *v = p + kl + 1;
			size_t vl = ll - kl - 1;

			while (vl > 0 && (*v == ' ' || *v == '\t')) {
				v++;
				vl--;
			}
			if (vl >= len)
				vl = len - 1;
			memcpy(val, v, vl);
			val[vl] = '\0';
			return 0;
		}
		p = nl ? nl + 1 : NULL;
	}
	return -ENOENT;
}

static int read_status(pid_t pid, char **out)
{
	char path[64];
	size_t len;
	int r;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	r = read_file(path, 1u << 20, out, &len);
	return r == -ENOENT ? -ESRCH : r;
}

/* The second (effective) id of a "Uid:" / "Gid:" line. */
static int status_effective_id(const char *status, const char *key, unsigned *id)
{
	char val[128];
	unsigned a, b;

	if (status_field(status, key, val, sizeof(val)) < 0 || sscanf(val, "%u %u", &a, &b) != 2)
		return -EIO;
	*id = b;
	return 0;
}

/* The pid in the process's own (innermost) pid namespace: last of NStgid. */
static int status_ns_pid(const char *status, pid_t pid, pid_t *nspid)
{
	char val[256], *tok, *save = NULL;
	long last = -1;

	if (status_field(status, "NStgid", val, sizeof(val)) < 0) {
		*nspid = pid;  /* kernels before 4.1: no pid namespaces to care about */
		return 0;
	}
	for (tok = strtok_r(val, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save))
		last = strtol(tok, NULL, 10);
	if (last <= 0)
		return -EIO;
	*nspid = (pid_t)last;
	return 0;
}

/* ---- probe -------------------------------------------------------------- */

/* 1: maps a file named libjvm.so; 2: also an OpenJ9 VM (libj9vm*.so). */
static int maps_jvm_kind(pid_t pid)
{
	char path[64], line[4096];
	bool jvm = false, j9 = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return errno == ENOENT ? -ESRCH : -errno;
	while (fgets(line, sizeof(line), f)) {
		char *name, *nl = strchr(line, '\n');

		if (nl)
			*nl = '\0';
		else if (!feof(f)) {
			/* a path longer than the buffer: skip the rest of it */
			int c;

			while ((c = fgetc(f)) != EOF && c != '\n')
				;
		}
		name = strrchr(line, '/');
		if (!name)
			continue;
		name++;
		if (strcmp(name, "libjvm.so") == 0 || strcmp(name, "libjvm.so (deleted)") == 0)
			jvm = true;
		else if (strncmp(name, "libj9vm", 7) == 0 && strstr(name, ".so"))
			j9 = true;
	}
	fclose(f);
	if (j9)
		return 2;
	return jvm ? 1 : 0;
}

bool attach_is_jvm(pid_t pid)
{
	return pid > 0 && maps_jvm_kind(pid) > 0;
}

/* Applies one JVM option to the DisableAttachMechanism state. */
static void scan_option(const char *opt, size_t len, int *disabled)
{
	static const char on[] = "-XX:+DisableAttachMechanism", off[] = "-XX:-DisableAttachMechanism";

	if (len == sizeof(on) - 1 && memcmp(opt, on, len) == 0)
		*disabled = 1;
	else if (len == sizeof(off) - 1 && memcmp(opt, off, len) == 0)
		*disabled = 0;
}

/* Options in an environment variable: whitespace separated, as HotSpot and
 * the launcher split them. */
static void scan_env_options(const char *val, int *disabled)
{
	const char *p = val;

	while (*p) {
		size_t n;

		while (*p && isspace((unsigned char)*p))
			p++;
		n = 0;
		while (p[n] && !isspace((unsigned char)p[n]))
			n++;
		if (n)
			scan_option(p, n, disabled);
		p += n;
	}
}

static const char *env_value(const char *env, size_t len, const char *name)
{
	size_t nl = strlen(name);

	for (size_t i = 0; i < len; i += strlen(env + i) + 1)
		if (strncmp(env + i, name, nl) == 0 && env[i + nl] == '=')
			return env + i + nl + 1;
	return NULL;
}

/* Launcher options whose value is the next argument. */
static bool takes_value(const char *a)
{
	static const char *const opts[] = {
		"-cp", "-classpath", "--class-path", "-p", "--module-path", "--upgrade-module-path",
		"--add-modules", "--limit-modules", "--add-reads", "--add-exports", "--add-opens",
		"--patch-module", "--source", "--enable-native-access",
	};

	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++)
		if (strcmp(a, opts[i]) == 0)
			return true;
	return false;
}

/* 1 when the JVM's options as we can see them end with
 * -XX:+DisableAttachMechanism. HotSpot reads JAVA_TOOL_OPTIONS first, the
 * launcher puts JDK_JAVA_OPTIONS before the command line, and _JAVA_OPTIONS
 * comes last; the last setting wins. */
static int attach_disabled(pid_t pid)
{
	char path[64], *cmd = NULL, *env = NULL;
	size_t clen = 0, elen = 0;
	const char *v;
	int disabled = 0, r;

	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	r = read_file(path, ATTACH_ENVIRON_MAX, &env, &elen);
	if (r < 0)
		goto out;
	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	r = read_file(path, 1u << 20, &cmd, &clen);
	if (r < 0)
		goto out;
	if ((v = env_value(env, elen, "JAVA_TOOL_OPTIONS")))
		scan_env_options(v, &disabled);
	if ((v = env_value(env, elen, "JDK_JAVA_OPTIONS")))
		scan_env_options(v, &disabled);
	/* argv[0] is the launcher; JVM options end at the main class, -jar's
	 * file or -m's module: what follows belongs to the application. */
	for (size_t i = clen ? strlen(cmd) + 1 : 0; i < clen; i += strlen(cmd + i) + 1) {
		const char *a = cmd + i;

		if (a[0] != '-')
			break;
		if (strcmp(a, "-jar") == 0 || strcmp(a, "-m") == 0 || strcmp(a, "--module") == 0)
			break;
		if (takes_value(a)) {
			i += strlen(cmd + i) + 1;
			if (i >= clen)
				break;
			continue;
		}
		scan_option(a, strlen(a), &disabled);
	}
	if ((v = env_value(env, elen, "_JAVA_OPTIONS")))
		scan_env_options(v, &disabled);
	r = disabled;
out:
	free(env);
	free(cmd);
	return r == -ENOENT ? -ESRCH : r;
}

int attach_probe(pid_t pid, struct attach_result *res)
{
	char *status = NULL, val[64];
	unsigned long long cgt;
	int r, kind;

	memset(res, 0, sizeof(*res));
	if (pid <= 0) {
		r = -ESRCH;
		res_set(res, r, "no_such_process", "invalid pid %d", (int)pid);
		goto out;
	}
	r = read_status(pid, &status);
	if (r < 0) {
		if (r == -ESRCH)
			res_set(res, r, "no_such_process", "no process %d", (int)pid);
		else
			res_set(res, r, "internal", "cannot read /proc/%d/status: %s", (int)pid, strerror(-r));
		goto out;
	}
	kind = maps_jvm_kind(pid);
	if (kind < 0) {
		r = kind;
		if (r == -ESRCH)
			res_set(res, r, "no_such_process", "no process %d", (int)pid);
		else
			res_set(res, r, "internal", "cannot read /proc/%d/maps: %s", (int)pid, strerror(-r));
		goto out;
	}
	if (kind == 0) {
		r = -ENOEXEC;
		res_set(res, r, "not_a_jvm", "process %d is not a JVM (no libjvm.so mapped)", (int)pid);
		goto out;
	}
	if (kind == 2) {
		r = -ENOEXEC;
		res_set(res, r, "not_hotspot",
			"process %d is an OpenJ9 JVM; attaching to OpenJ9 is not supported", (int)pid);
		goto out;
	}
	/* Without a SIGQUIT handler (-Xrs, or ignored), the signal that starts
	 * the attach listener would kill the JVM or do nothing. */
	if (status_field(status, "SigCgt", val, sizeof(val)) < 0 ||
	    sscanf(val, "%llx", &cgt) != 1) {
		r = -EIO;
		res_set(res, r, "internal", "cannot parse SigCgt of /proc/%d/status", (int)pid);
		goto out;
	}
	if (!(cgt & (1ull << (SIGQUIT - 1)))) {
		r = -EPERM;
		res_set(res, r, "no_sigquit_handler",
			"JVM %d does not handle SIGQUIT (started with -Xrs, or still starting up): attaching would need it",
			(int)pid);
		goto out;
	}
	r = attach_disabled(pid);
	if (r < 0) {
		if (r == -ESRCH)
			res_set(res, r, "no_such_process", "no process %d", (int)pid);
		else
			res_set(res, r, "internal", "cannot read options of process %d: %s", (int)pid,
				strerror(-r));
		goto out;
	}
	if (r > 0) {
		r = -EPERM;
		res_set(res, r, "attach_disabled",
			"JVM %d was started with -XX:+DisableAttachMechanism", (int)pid);
		goto out;
	}
	r = 0;
out:
	free(status);
	return r;
}

/* ---- the child ------------------------------------------------------------ */

struct child_ctx {
	pid_t pid;
	int pidfd;            /* target, so a recycled pid is never signalled */
	const char *agent_path;
	const char *options;
	uint64_t deadline;    /* CLOCK_MONOTONIC ms */
};

static uint64_t fnv1a(uint64_t h, const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

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
		h = fnv1a(h, buf, (size_t)n);
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
		res_set(res, r, "internal", "cannot read the agent: %s", strerror(-r));
		goto out;
	}
	snprintf(path, len, "/tmp/.jprofagent-%u-%016" PRIx64 ".so", (unsigned)uid, hash);
	tfd = open("/tmp", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
	if (tfd < 0) {
		r = -errno;
		res_set(res, r, "internal", "cannot create a file in the target's /tmp: %s", strerror(-r));
		goto out;
	}
	r = copy_fd(agent_fd, tfd);
	if (r == 0 && fchmod(tfd, 0644) < 0)
		r = -errno;
	if (r < 0) {
		res_set(res, r, "internal", "cannot copy the agent to the target's /tmp: %s", strerror(-r));
		goto out;
	}
	snprintf(proc_path, sizeof(proc_path), "/proc/self/fd/%d", tfd);
	if (linkat(AT_FDCWD, proc_path, AT_FDCWD, path, AT_SYMLINK_FOLLOW) == 0) {
		r = 0;
		goto out;
	}
	r = -errno;
	if (r != -EEXIST) {
		res_set(res, r, "internal", "cannot create %s: %s", path, strerror(-r));
		goto out;
	}
	/* Already there (an earlier attach): only a file this user owns, that
	 * nobody else can change and that holds exactly the agent is reused. */
	efd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (efd < 0) {
		r = -errno;
		res_set(res, r, "internal", "%s exists but cannot be opened: %s", path, strerror(-r));
		goto out;
	}
	if (fstat(efd, &st) < 0) {
		r = -errno;
		res_set(res, r, "internal", "cannot stat %s: %s", path, strerror(-r));
		goto out;
	}
	if (!S_ISREG(st.st_mode) || st.st_uid != uid || (st.st_mode & 022) || st.st_size != size) {
		r = -EEXIST;
		res_set(res, r, "internal",
			"%s exists and is not our copy of the agent (type, owner, mode or size differ); "
			"remove it", path);
		goto out;
	}
	r = same_content(agent_fd, efd);
	if (r <= 0) {
		if (r == 0)
			r = -EEXIST;
		res_set(res, r, "internal", "%s exists with a different content; remove it", path);
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
			if (ms_left(deadline) == 0) {
				r = -ETIMEDOUT;
				goto fail;
			}
			sleep_ms(ATTACH_POLL_MS);
			continue;
		}
		if (r != -EINPROGRESS)
			goto fail;
		r = poll(&p, 1, ms_left(deadline));
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
		n = poll(&p, 1, ms_left(deadline));
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
		pr = poll(&p, 1, ms_left(deadline));
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
		res_set(res, r, "internal", "unexpected reply from the JVM: \"%s\"", reply);
		goto out;
	}
	if (status != 0) {
		r = -EIO;
		flatten(rest);
		res_set(res, r, "agent_load_failed", "the JVM could not load the agent (status %ld): %s",
			status, rest);
		goto out;
	}
	line2 = rest;
	if (strncmp(line2, "return code: ", 13) == 0)
		line2 += 13;
	rc = strtol(line2, &end, 10);
	if (*rest == '\0' || (end != line2 && (*end == '\n' || *end == '\0') && rc == 0)) {
		r = 0;
		res_set(res, 0, "", "agent loaded");
		goto out;
	}
	r = -EIO;
	flatten(rest);
	if (end != line2 && (*end == '\n' || *end == '\0'))
		res_set(res, r, "agent_load_failed", "Agent_OnAttach failed: %s", rest);
	else
		res_set(res, r, "agent_load_failed", "the JVM could not load the agent: %s", rest);
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
		res_set(res, r, "internal", "cannot create %s: %s", trigger, strerror(-r));
		goto out;
	}
	close(fd);
	if (syscall(SYS_pidfd_send_signal, c->pidfd, SIGQUIT, NULL, 0) < 0) {
		r = -errno;
		if (r == -ESRCH)
			res_set(res, r, "no_such_process", "process %d is gone", (int)c->pid);
		else
			res_set(res, r, "internal", "cannot send SIGQUIT to %d: %s", (int)c->pid,
				strerror(-r));
		goto out;
	}
	while (lstat(sock_path, &st) < 0) {
		if (ms_left(c->deadline) == 0) {
			r = -ETIMEDOUT;
			res_set(res, r, "no_attach_socket",
				"JVM %d did not open %s after SIGQUIT (attach mechanism disabled in a "
				"way jprofd cannot see, or the JVM does not respond)",
				(int)c->pid, sock_path);
			goto out;
		}
		sleep_ms(ATTACH_POLL_MS);
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
		res_set(res, r, "internal", "cannot open the agent %s: %s", c->agent_path, strerror(-r));
		goto out;
	}
	snprintf(path, sizeof(path), "/proc/%d/ns/mnt", (int)c->pid);
	ns_fd = open(path, O_RDONLY | O_CLOEXEC);
	r = ns_fd < 0 ? -errno : read_status(c->pid, &status);
	if (r == 0 && (status_effective_id(status, "Uid", &euid) < 0 ||
		       status_effective_id(status, "Gid", &egid) < 0 ||
		       status_ns_pid(status, c->pid, &nspid) < 0))
		r = -EIO;
	if (r == 0 && fstat(ns_fd, &st_target) < 0)
		r = -errno;
	/* Still the same process: what we read belongs to it, not to a new one
	 * that reused the pid. */
	if (r == 0 && syscall(SYS_pidfd_send_signal, c->pidfd, 0, NULL, 0) < 0)
		r = -errno;
	if (r < 0) {
		if (r == -ENOENT || r == -ESRCH)
			res_set(res, -ESRCH, "no_such_process", "process %d is gone", (int)c->pid);
		else
			res_set(res, r, "internal", "cannot read /proc/%d: %s", (int)c->pid, strerror(-r));
		goto out;
	}
	if (stat("/proc/self/ns/mnt", &st_self) < 0) {
		r = -errno;
		res_set(res, r, "internal", "cannot stat /proc/self/ns/mnt: %s", strerror(-r));
		goto out;
	}
	if ((st_self.st_dev != st_target.st_dev || st_self.st_ino != st_target.st_ino) &&
	    setns(ns_fd, CLONE_NEWNS) < 0) {
		r = -errno;
		res_set(res, r, "internal", "cannot enter the mount namespace of %d: %s", (int)c->pid,
			strerror(-r));
		goto out;
	}
	if (chdir("/") < 0) {
		r = -errno;
		res_set(res, r, "internal", "chdir(/): %s", strerror(-r));
		goto out;
	}
	/* Supplementary groups first and the uid last: each step needs the
	 * privilege the next one drops. */
	if (setgroups(0, NULL) < 0 || setgid((gid_t)egid) < 0 || setuid((uid_t)euid) < 0) {
		r = -errno;
		res_set(res, r, "internal", "cannot switch to uid %u gid %u: %s", euid, egid,
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
			res_set(res, r, "attach_refused", "stale %s cannot be removed: %s", sock_path,
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
			res_set(res, r, "timeout", "connecting to %s timed out", sock_path);
		else
			res_set(res, r, "attach_refused", "cannot connect to %s: %s", sock_path,
				strerror(-r));
		goto out;
	}
	/* Anyone could have created a socket of that name first: talk only to
	 * the target itself. */
	if (getsockopt(sfd, SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) < 0 || peer.pid != c->pid) {
		r = -ECONNREFUSED;
		res_set(res, r, "attach_refused", "%s is not served by process %d (peer pid %d)",
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
			res_set(res, r, "timeout", "sending the request to JVM %d timed out", (int)c->pid);
		else
			res_set(res, r, "attach_refused", "JVM %d closed the attach connection: %s",
				(int)c->pid, strerror(-r));
		goto out;
	}
	n = recv_all(sfd, reply, sizeof(reply), c->deadline);
	if (n < 0) {
		r = (int)n;
		if (r == -ETIMEDOUT)
			res_set(res, r, "timeout", "JVM %d did not answer in time", (int)c->pid);
		else
			res_set(res, r, "attach_refused", "reading the reply of JVM %d: %s", (int)c->pid,
				strerror(-r));
		goto out;
	}
	if (n == 0) {
		/* HotSpot closes without a word when the peer's credentials do
		 * not match its own. */
		r = -ECONNREFUSED;
		res_set(res, r, "attach_refused", "JVM %d closed the attach connection without a reply",
			(int)c->pid);
		goto out;
	}
	r = parse_reply(reply, res);
	if (r == 0 && strcmp(agent_use, c->agent_path) != 0)
		res_set(res, 0, "", "agent loaded from the copy %s", agent_use);
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

static __attribute__((noreturn)) void child_main(const struct child_ctx *c, int wfd)
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
	secs = (unsigned)(ms_left(c->deadline) / 1000) + 2;
	alarm(secs);
	/* Other fds of the daemon (sockets, other attaches' pipes) must not
	 * live on in this child. */
	close_all_but(wfd, c->pidfd);
	memset(&res, 0, sizeof(res));
	child_attach(c, &res);
	write_all(wfd, &res, sizeof(res));
	_exit(0);
}

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
		res_set(&req->res, -EIO, "internal", "the attach helper process died without a result");
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
	res_set(&req->res, -ETIMEDOUT, "timeout", "attaching to pid %d took too long", (int)req->pid);
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
		res_set(&req->res, r, "no_such_process", "no process %d", (int)pid);
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
				.deadline = now_ms() + (timeout_ms > 2 * ATTACH_CHILD_MARGIN_MS
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
		child_main(&c, pipefd[1]);
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
