/* What the attach tests share (test_attach.c: the protocol against real
 * JVMs; test_attach_stop.c: stopping helpers without waiting): a directory
 * nobody can traverse with AttachTarget.class and the test agent, JVMs run
 * as nobody, attach runs on a loop of their own. Header-only. */
#ifndef JPROF_TEST_ATTACH_FIXTURE_H
#define JPROF_TEST_ATTACH_FIXTURE_H

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "attach.h"
#include "loop.h"

#define JDK17 "/usr/lib/jvm/java-17-openjdk-amd64/bin/java"
#define JDK25 "/usr/lib/jvm/temurin-25-jdk-amd64/bin/java"
#define NOBODY 65534

/* Traversable by nobody: AttachTarget.class, the test agent, out/ (0777).
 * Not under /tmp, so that a JVM with a private /tmp still sees it. */
static char dir[64];
static char agent[128];

struct jvm {
	pid_t pid;
	int stdin_w;       /* the JVM exits when this closes, even if we crash */
	char out[160];     /* its stdout and stderr */
};

static inline double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static inline void copy_file(const char *from, const char *to, mode_t mode)
{
	char buf[65536];
	ssize_t n;
	int in = open(from, O_RDONLY | O_CLOEXEC), out;

	ck_assert_msg(in >= 0, "open %s: %s", from, strerror(errno));
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	ck_assert_msg(out >= 0, "open %s: %s", to, strerror(errno));
	while ((n = read(in, buf, sizeof(buf))) > 0)
		ck_assert_int_eq(write(out, buf, (size_t)n), n);
	fchmod(out, mode);
	close(in);
	close(out);
}

static char *slurp(const char *path)
{
	static char buf[1 << 16];
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	buf[0] = '\0';
	if (fd < 0)
		return buf;
	n = read(fd, buf, sizeof(buf) - 1);
	buf[n > 0 ? n : 0] = '\0';
	close(fd);
	return buf;
}

static inline void setup(void)
{
	const char *jd = getenv("JPROF_JAVA_DIR");
	char from[512], to[512];

	ck_assert_msg(jd != NULL, "JPROF_JAVA_DIR is not set");
	snprintf(dir, sizeof(dir), "/var/tmp/jprof-attach-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	chmod(dir, 0755);
	snprintf(from, sizeof(from), "%s/AttachTarget.class", jd);
	snprintf(to, sizeof(to), "%s/AttachTarget.class", dir);
	copy_file(from, to, 0644);
	snprintf(from, sizeof(from), "%s/libattach_test_agent.so", jd);
	snprintf(agent, sizeof(agent), "%s/libattach_test_agent.so", dir);
	copy_file(from, agent, 0755);
	snprintf(to, sizeof(to), "%s/out", dir);
	ck_assert_int_eq(mkdir(to, 0777), 0);
	chmod(to, 0777);
}

static inline void teardown(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", dir);
}

/* Starts `setpriv ... java [opt] -cp dir AttachTarget` as nobody and waits
 * for "ready". env_opts, if set, becomes JAVA_TOOL_OPTIONS. */
/* Set: the next JVM runs in its own mount namespace with its own /tmp. */
static bool jvm_private_tmp;

static inline void jvm_start(struct jvm *j, const char *java, const char *opt, const char *env_opts)
{
	static int seq;
	const char *argv[20];
	int p[2], fd, n = 0;
	double t0;

	snprintf(j->out, sizeof(j->out), "%s/jvm%d.out", dir, seq++);
	fd = open(j->out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	if (jvm_private_tmp) {
		argv[n++] = "unshare";
		argv[n++] = "--mount";
		argv[n++] = "--propagation=private";
		argv[n++] = "sh";
		argv[n++] = "-c";
		argv[n++] = "mount -t tmpfs -o mode=1777 tmpfs /tmp && exec \"$@\"";
		argv[n++] = "sh";
	}
	argv[n++] = "setpriv";
	argv[n++] = "--reuid=nobody";
	argv[n++] = "--regid=nogroup";
	argv[n++] = "--clear-groups";
	argv[n++] = java;
	if (opt)
		argv[n++] = opt;
	argv[n++] = "-cp";
	argv[n++] = dir;
	argv[n++] = "AttachTarget";
	argv[n] = NULL;
	j->pid = fork();
	ck_assert_int_ge(j->pid, 0);
	if (j->pid == 0) {
		dup2(p[0], 0);
		dup2(fd, 1);
		dup2(fd, 2);
		unsetenv("JAVA_TOOL_OPTIONS");
		unsetenv("JDK_JAVA_OPTIONS");
		unsetenv("_JAVA_OPTIONS");
		if (env_opts)
			setenv("JAVA_TOOL_OPTIONS", env_opts, 1);
		execvp(argv[0], (char **)argv);
		_exit(127);
	}
	close(p[0]);
	close(fd);
	j->stdin_w = p[1];
	t0 = now_ms();
	while (!strstr(slurp(j->out), "ready")) {
		ck_assert_msg(now_ms() - t0 < 30000, "JVM %s did not start: %s", java, slurp(j->out));
		ck_assert_msg(waitpid(j->pid, NULL, WNOHANG) == 0, "JVM exited: %s", slurp(j->out));
		usleep(20000);
	}
}

static inline bool jvm_alive(struct jvm *j)
{
	return waitpid(j->pid, NULL, WNOHANG) == 0;
}

static inline void sock_path(char *buf, size_t len, pid_t pid)
{
	snprintf(buf, len, "/tmp/.java_pid%d", (int)pid);
}

static inline void jvm_stop(struct jvm *j)
{
	char path[64];

	kill(j->pid, SIGCONT);
	kill(j->pid, SIGKILL);
	waitpid(j->pid, NULL, 0);
	close(j->stdin_w);
	/* A killed JVM leaves its attach socket behind. */
	sock_path(path, sizeof(path), j->pid);
	unlink(path);
}

/* Our children, from /proc: the attach helper must never outlive a request. */
static inline int count_children(void)
{
	char path[64], *s;
	int n = 0;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)getpid(), (int)getpid());
	s = slurp(path);
	for (char *tok = strtok(s, " \n"); tok; tok = strtok(NULL, " \n"))
		n++;
	return n;
}

struct run {
	struct loop *loop;
	struct attach_result res;
	int calls;
	bool guard_fired;
	double ms;
};

static inline void on_done(const struct attach_result *res, void *arg)
{
	struct run *r = arg;

	r->res = *res;
	r->calls++;
	loop_quit(r->loop);
}

static inline void on_guard(struct loop_source *src, void *arg)
{
	struct run *r = arg;

	r->guard_fired = true;
	loop_quit(r->loop);
}

/* attach_start + loop until done (or a guard well past the timeout). */
static inline void run_attach(struct run *r, pid_t pid, const char *agent_path, const char *options,
		       unsigned timeout_ms)
{
	struct attach_req *req = NULL;
	double t0;

	memset(r, 0, sizeof(*r));
	ck_assert_int_eq(loop_new(&r->loop), 0);
	ck_assert_int_eq(loop_add_timer(r->loop, timeout_ms + 5000, 0, on_guard, r, NULL), 0);
	t0 = now_ms();
	ck_assert_int_eq(attach_start(r->loop, pid, agent_path, options, timeout_ms, on_done, r, &req), 0);
	ck_assert_ptr_nonnull(req);
	ck_assert_int_eq(loop_run(r->loop), 0);
	r->ms = now_ms() - t0;
	loop_free(r->loop);
	ck_assert_msg(!r->guard_fired, "done was not called");
	ck_assert_int_eq(r->calls, 1);
}

static inline void marker_path(char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/out/%s", dir, name);
}

/* The suites' main: root, both JDKs, SIGCHLD blocked as jprofd's main does
 * (attach watches its helper through the loop's child source). */
static inline int attach_fixture_main(const char *name, Suite *suite)
{
	SRunner *sr = srunner_create(suite);
	sigset_t chld;
	int failed;

	if (geteuid() != 0) {
		fprintf(stderr, "%s needs root (it attaches as the daemon does)\n", name);
		return 77;
	}
	if (access(JDK17, X_OK) != 0 || access(JDK25, X_OK) != 0) {
		fprintf(stderr, "%s needs %s and %s\n", name, JDK17, JDK25);
		return 77;
	}
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, NULL);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
