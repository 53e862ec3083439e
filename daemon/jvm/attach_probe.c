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

#include "clock.h"
#include "log.h"
#include "proc.h"

/* ---- small helpers ------------------------------------------------------ */

void attach_res_set(struct attach_result *res, int status, const char *code, const char *fmt, ...)
{
	va_list ap;

	res->status = status;
	snprintf(res->code, sizeof(res->code), "%s", code);
	va_start(ap, fmt);
	vsnprintf(res->message, sizeof(res->message), fmt, ap);
	va_end(ap);
}

uint64_t attach_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int attach_ms_left(uint64_t deadline)
{
	uint64_t now = attach_now_ms();

	if (now >= deadline)
		return 0;
	return deadline - now > INT_MAX ? INT_MAX : (int)(deadline - now);
}

void attach_sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Reads a whole (small, /proc) file into a NUL-terminated malloc'd buffer. */
int attach_read_file(const char *path, size_t max, char **out, size_t *len)
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
int attach_status_field(const char *status, const char *key, char *val, size_t len)
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

int attach_read_status(pid_t pid, char **out)
{
	char path[64];
	size_t len;
	int r;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	r = attach_read_file(path, 1u << 20, out, &len);
	return r == -ENOENT ? -ESRCH : r;
}

/* The second (effective) id of a "Uid:" / "Gid:" line. */
int attach_status_effective_id(const char *status, const char *key, unsigned *id)
{
	char val[128];
	unsigned a, b;

	if (attach_status_field(status, key, val, sizeof(val)) < 0 || sscanf(val, "%u %u", &a, &b) != 2)
		return -EIO;
	*id = b;
	return 0;
}

/* The pid in the process's own (innermost) pid namespace: last of NStgid. */
int attach_status_ns_pid(const char *status, pid_t pid, pid_t *nspid)
{
	char val[256], *tok, *save = NULL;
	long last = -1;

	if (attach_status_field(status, "NStgid", val, sizeof(val)) < 0) {
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
/* ATTACH_OPT_* seen in the options so far (the last setting wins). */
#define ATTACH_OPT_DISABLED 1   /* -XX:+DisableAttachMechanism */
#define ATTACH_OPT_RS 2         /* -Xrs: the JVM never handles SIGQUIT */

static void scan_option(const char *opt, size_t len, int *disabled)
{
	static const char on[] = "-XX:+DisableAttachMechanism", off[] = "-XX:-DisableAttachMechanism";

	if (len == sizeof(on) - 1 && memcmp(opt, on, len) == 0)
		*disabled |= ATTACH_OPT_DISABLED;
	else if (len == sizeof(off) - 1 && memcmp(opt, off, len) == 0)
		*disabled &= ~ATTACH_OPT_DISABLED;
	else if (len == 4 && memcmp(opt, "-Xrs", 4) == 0)
		*disabled |= ATTACH_OPT_RS;
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

/* ATTACH_OPT_DISABLED when the JVM's options as we can see them end with
 * -XX:+DisableAttachMechanism, ATTACH_OPT_RS with -Xrs among them. HotSpot reads JAVA_TOOL_OPTIONS first, the
 * launcher puts JDK_JAVA_OPTIONS before the command line, and _JAVA_OPTIONS
 * comes last; the last setting wins. */
static int attach_disabled(pid_t pid)
{
	char path[64], *cmd = NULL, *env = NULL;
	size_t clen = 0, elen = 0;
	const char *v;
	int disabled = 0, r;

	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	r = attach_read_file(path, ATTACH_ENVIRON_MAX, &env, &elen);
	if (r < 0)
		goto out;
	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	r = attach_read_file(path, 1u << 20, &cmd, &clen);
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

bool attach_jvm_young(pid_t pid)
{
	uint64_t start, now = clock_ns(CLOCK_BOOTTIME);

	return proc_read_start_boottime(pid, &start) == 0 && now >= start &&
	       now - start < ATTACH_YOUNG_MS * 1000000ull;
}

int attach_probe(pid_t pid, struct attach_result *res)
{
	int r = attach_probe_now(pid, res);

	/* attach_start waits for a JVM that is still starting. */
	if (r == -EAGAIN) {
		memset(res, 0, sizeof(*res));
		r = 0;
	}
	return r;
}

int attach_probe_now(pid_t pid, struct attach_result *res)
{
	char *status = NULL, val[64];
	unsigned long long cgt;
	int r, kind, opts;

	memset(res, 0, sizeof(*res));
	if (pid <= 0) {
		r = -ESRCH;
		attach_res_set(res, r, "no_such_process", "invalid pid %d", (int)pid);
		goto out;
	}
	r = attach_read_status(pid, &status);
	if (r < 0) {
		if (r == -ESRCH)
			attach_res_set(res, r, "no_such_process", "no process %d", (int)pid);
		else
			attach_res_set(res, r, "internal", "cannot read /proc/%d/status: %s", (int)pid, strerror(-r));
		goto out;
	}
	kind = maps_jvm_kind(pid);
	if (kind < 0) {
		r = kind;
		if (r == -ESRCH)
			attach_res_set(res, r, "no_such_process", "no process %d", (int)pid);
		else
			attach_res_set(res, r, "internal", "cannot read /proc/%d/maps: %s", (int)pid, strerror(-r));
		goto out;
	}
	if (kind == 0) {
		r = -ENOEXEC;
		attach_res_set(res, r, "not_a_jvm", "process %d is not a JVM (no libjvm.so mapped)", (int)pid);
		goto out;
	}
	if (kind == 2) {
		r = -ENOEXEC;
		attach_res_set(res, r, "not_hotspot",
			"process %d is an OpenJ9 JVM; attaching to OpenJ9 is not supported", (int)pid);
		goto out;
	}
	/* Without a SIGQUIT handler (-Xrs, or ignored), the signal that starts
	 * the attach listener would kill the JVM or do nothing. */
	if (attach_status_field(status, "SigCgt", val, sizeof(val)) < 0 ||
	    sscanf(val, "%llx", &cgt) != 1) {
		r = -EIO;
		attach_res_set(res, r, "internal", "cannot parse SigCgt of /proc/%d/status", (int)pid);
		goto out;
	}
	opts = attach_disabled(pid);
	if (opts < 0) {
		r = opts;
		if (r == -ESRCH)
			attach_res_set(res, r, "no_such_process", "no process %d", (int)pid);
		else
			attach_res_set(res, r, "internal", "cannot read options of process %d: %s", (int)pid,
				strerror(-r));
		goto out;
	}
	if (opts & ATTACH_OPT_DISABLED) {
		r = -EPERM;
		attach_res_set(res, r, "attach_disabled",
			"JVM %d was started with -XX:+DisableAttachMechanism", (int)pid);
		goto out;
	}
	/* A JVM installs its handler early in its start-up: a young one
	 * without -Xrs is only not there yet. */
	if (!(cgt & (1ull << (SIGQUIT - 1))) && !(opts & ATTACH_OPT_RS) && attach_jvm_young(pid)) {
		r = -EAGAIN;
		attach_res_set(res, r, "jvm_starting", "JVM %d is still starting up (SIGQUIT not handled yet)",
			(int)pid);
		goto out;
	}
	if (!(cgt & (1ull << (SIGQUIT - 1)))) {
		r = -EPERM;
		attach_res_set(res, r, "no_sigquit_handler",
			"JVM %d does not handle SIGQUIT (started with -Xrs, or still starting up): attaching would need it",
			(int)pid);
		goto out;
	}
	r = 0;
out:
	free(status);
	return r;
}

