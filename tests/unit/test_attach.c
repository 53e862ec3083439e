/* attach: real JVMs (JDK 17 and 25) run as nobody, a test JVMTI agent
 * (tests/java/attach_test_agent.c) loaded through the real attach protocol.
 * Stopping helpers (timeouts, cancel) is test_attach_stop.c. */
#include <glob.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "attach_fixture.h"

static void attach_ok(const char *java, const char *label)
{
	struct jvm j;
	struct run r;
	char m[256], opts[300], expect[640];

	jvm_start(&j, java, NULL, NULL);
	ck_assert(attach_is_jvm(j.pid));
	marker_path(m, sizeof(m), strstr(java, "-17-") ? "ok17" : "ok25");
	unlink(m);
	snprintf(opts, sizeof(opts), "out=%s", m);
	run_attach(&r, j.pid, agent, opts, 10000);
	ck_assert_msg(r.res.status == 0, "%s: %s", r.res.code, r.res.message);
	ck_assert_str_eq(r.res.code, "");
	snprintf(expect, sizeof(expect), "%s\n", opts);
	ck_assert_str_eq(slurp(m), expect);
	printf("attach latency %s: %.1f ms\n", label, r.ms);
	ck_assert_int_eq(count_children(), 1);  /* only the JVM */
	/* A second attach finds the listener running (no SIGQUIT needed). */
	run_attach(&r, j.pid, agent, opts, 10000);
	ck_assert_msg(r.res.status == 0, "%s: %s", r.res.code, r.res.message);
	printf("second attach latency %s: %.1f ms\n", label, r.ms);
	snprintf(expect, sizeof(expect), "%s\n%s\n", opts, opts);
	ck_assert_str_eq(slurp(m), expect);
	ck_assert(!strstr(slurp(j.out), "Full thread dump"));
	jvm_stop(&j);
}

START_TEST(test_jdk17)
{
	attach_ok(JDK17, "JDK 17");
}
END_TEST

START_TEST(test_jdk25)
{
	attach_ok(JDK25, "JDK 25");
}
END_TEST

static void remove_copies(void)
{
	glob_t g;

	if (glob("/tmp/.jprofagent-65534-*.so", 0, NULL, &g) == 0)
		for (size_t i = 0; i < g.gl_pathc; i++)
			unlink(g.gl_pathv[i]);
	globfree(&g);
}

/* The one copy of the agent in /tmp for nobody; its stat in *st. */
static void the_copy(char *path, size_t len, struct stat *st)
{
	glob_t g;

	ck_assert_int_eq(glob("/tmp/.jprofagent-65534-*.so", 0, NULL, &g), 0);
	ck_assert_uint_eq(g.gl_pathc, 1);
	snprintf(path, len, "%s", g.gl_pathv[0]);
	globfree(&g);
	ck_assert_int_eq(lstat(path, st), 0);
}

START_TEST(test_copy_when_unreadable)
{
	char priv[64], priv_agent[128], m[256], opts[300], copy[256], copy2[256], expect[640];
	struct stat st, st2, ag;
	struct jvm j;
	struct run r;

	snprintf(priv, sizeof(priv), "/tmp/jprof-attach-priv-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(priv));
	ck_assert_int_eq(chmod(priv, 0700), 0);
	snprintf(priv_agent, sizeof(priv_agent), "%s/libagent.so", priv);
	copy_file(agent, priv_agent, 0644);
	ck_assert_int_eq(stat(priv_agent, &ag), 0);
	remove_copies();

	jvm_start(&j, JDK17, NULL, NULL);
	marker_path(m, sizeof(m), "copy");
	snprintf(opts, sizeof(opts), "out=%s", m);
	run_attach(&r, j.pid, priv_agent, opts, 10000);
	ck_assert_msg(r.res.status == 0, "%s: %s", r.res.code, r.res.message);
	the_copy(copy, sizeof(copy), &st);
	ck_assert_ptr_nonnull(strstr(r.res.message, copy));
	ck_assert(S_ISREG(st.st_mode));
	ck_assert_uint_eq(st.st_uid, NOBODY);
	ck_assert_uint_eq(st.st_mode & 07777, 0644);
	ck_assert_int_eq(st.st_size, ag.st_size);

	run_attach(&r, j.pid, priv_agent, opts, 10000);
	ck_assert_msg(r.res.status == 0, "%s: %s", r.res.code, r.res.message);
	the_copy(copy2, sizeof(copy2), &st2);
	ck_assert_str_eq(copy, copy2);
	ck_assert_uint_eq(st.st_ino, st2.st_ino);
	snprintf(expect, sizeof(expect), "%s\n%s\n", opts, opts);
	ck_assert_str_eq(slurp(m), expect);
	jvm_stop(&j);
	unlink(copy);
	unlink(priv_agent);
	rmdir(priv);
}
END_TEST

/* A copy that is not ours is never used. */
START_TEST(test_copy_squatted)
{
	char priv[64], priv_agent[128], m[256], opts[300], copy[256];
	struct stat st;
	struct jvm j;
	struct run r;
	int fd;

	snprintf(priv, sizeof(priv), "/tmp/jprof-attach-priv-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(priv));
	snprintf(priv_agent, sizeof(priv_agent), "%s/libagent.so", priv);
	copy_file(agent, priv_agent, 0644);
	remove_copies();
	jvm_start(&j, JDK17, NULL, NULL);
	marker_path(m, sizeof(m), "squat");
	snprintf(opts, sizeof(opts), "out=%s", m);
	run_attach(&r, j.pid, priv_agent, opts, 10000);
	ck_assert_msg(r.res.status == 0, "%s: %s", r.res.code, r.res.message);
	the_copy(copy, sizeof(copy), &st);
	/* Same name, same owner, different content (as if tampered with). */
	fd = open(copy, O_WRONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pwrite(fd, "X", 1, 100), 1);
	close(fd);
	run_attach(&r, j.pid, priv_agent, opts, 10000);
	ck_assert_int_lt(r.res.status, 0);
	ck_assert_str_eq(r.res.code, "internal");
	ck_assert_ptr_nonnull(strstr(r.res.message, copy));
	jvm_stop(&j);
	unlink(copy);
	unlink(priv_agent);
	rmdir(priv);
}
END_TEST

static void attach_fails(const char *java)
{
	char m[256], opts[300], expect[640];
	struct jvm j;
	struct run r;

	jvm_start(&j, java, NULL, NULL);
	marker_path(m, sizeof(m), "fail");
	unlink(m);
	snprintf(opts, sizeof(opts), "out=%s;fail", m);
	run_attach(&r, j.pid, agent, opts, 10000);
	ck_assert_int_lt(r.res.status, 0);
	ck_assert_str_eq(r.res.code, "agent_load_failed");
	/* The JVM's own text: the agent's return code 7. */
	ck_assert_msg(strstr(r.res.message, "7") != NULL, "%s", r.res.message);
	snprintf(expect, sizeof(expect), "%s\n", opts);
	ck_assert_str_eq(slurp(m), expect);

	/* A library the JVM cannot load at all. */
	snprintf(expect, sizeof(expect), "%s/out/not-an-agent.so", dir);
	copy_file("/proc/self/cmdline", expect, 0644);
	run_attach(&r, j.pid, expect, opts, 10000);
	ck_assert_str_eq(r.res.code, "agent_load_failed");
	ck_assert_msg(strstr(r.res.message, "not-an-agent.so") != NULL, "%s", r.res.message);
	jvm_stop(&j);
}

START_TEST(test_agent_fails_jdk17)
{
	attach_fails(JDK17);
}
END_TEST

START_TEST(test_agent_fails_jdk25)
{
	attach_fails(JDK25);
}
END_TEST

START_TEST(test_not_a_jvm)
{
	struct attach_result res;
	struct run r;
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		execl("/bin/sleep", "sleep", "60", (char *)NULL);
		_exit(127);
	}
	usleep(100000);
	ck_assert(!attach_is_jvm(pid));
	ck_assert_int_eq(attach_probe(pid, &res), -ENOEXEC);
	ck_assert_str_eq(res.code, "not_a_jvm");
	run_attach(&r, pid, agent, "", 5000);
	ck_assert_str_eq(r.res.code, "not_a_jvm");
	usleep(100000);
	/* No SIGQUIT was sent: sleep would have died of it. */
	ck_assert_int_eq(waitpid(pid, NULL, WNOHANG), 0);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}
END_TEST

START_TEST(test_disable_attach_mechanism)
{
	struct attach_result res;
	struct jvm j;
	struct run r;

	jvm_start(&j, JDK17, "-XX:+DisableAttachMechanism", NULL);
	ck_assert(attach_is_jvm(j.pid));
	ck_assert_int_eq(attach_probe(j.pid, &res), -EPERM);
	ck_assert_str_eq(res.code, "attach_disabled");
	run_attach(&r, j.pid, agent, "", 5000);
	ck_assert_str_eq(r.res.code, "attach_disabled");
	usleep(300000);
	/* A SIGQUIT would have made it print a thread dump. */
	ck_assert(!strstr(slurp(j.out), "Full thread dump"));
	ck_assert(jvm_alive(&j));
	jvm_stop(&j);
}
END_TEST

START_TEST(test_xrs)
{
	struct attach_result res;
	struct jvm j;
	struct run r;

	jvm_start(&j, JDK17, "-Xrs", NULL);
	ck_assert_int_eq(attach_probe(j.pid, &res), -EPERM);
	ck_assert_str_eq(res.code, "no_sigquit_handler");
	run_attach(&r, j.pid, agent, "", 5000);
	ck_assert_str_eq(r.res.code, "no_sigquit_handler");
	usleep(300000);
	ck_assert(jvm_alive(&j));
	jvm_stop(&j);
}
END_TEST

START_TEST(test_java_tool_options)
{
	struct attach_result res;
	struct jvm j, k;

	jvm_start(&j, JDK17, NULL, "-Xmx64m -XX:+DisableAttachMechanism");
	ck_assert_int_eq(attach_probe(j.pid, &res), -EPERM);
	ck_assert_str_eq(res.code, "attach_disabled");
	/* The command line comes after JAVA_TOOL_OPTIONS: the last one wins. */
	jvm_start(&k, JDK17, "-XX:-DisableAttachMechanism", "-XX:+DisableAttachMechanism");
	ck_assert_int_eq(attach_probe(k.pid, &res), 0);
	jvm_stop(&j);
	jvm_stop(&k);
}
END_TEST

/* A socket file at the JVM's name; listening or not (stale). */
static int make_socket(pid_t pid, bool listening, uid_t owner)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	sock_path(sa.sun_path, sizeof(sa.sun_path), pid);
	unlink(sa.sun_path);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(chmod(sa.sun_path, 0777), 0);
	ck_assert_int_eq(chown(sa.sun_path, owner, owner), 0);
	if (listening) {
		ck_assert_int_eq(listen(fd, 4), 0);
		return fd;
	}
	close(fd);
	return -1;
}

/* A socket left by a killed JVM that had the same pid is replaced. */
START_TEST(test_stale_socket)
{
	char m[256], opts[300];
	struct jvm j;
	struct run r;

	jvm_start(&j, JDK17, NULL, NULL);
	make_socket(j.pid, false, NOBODY);
	marker_path(m, sizeof(m), "stale");
	snprintf(opts, sizeof(opts), "out=%s", m);
	run_attach(&r, j.pid, agent, opts, 10000);
	ck_assert_msg(r.res.status == 0, "%s: %s", r.res.code, r.res.message);
	ck_assert_ptr_nonnull(strstr(slurp(m), opts));
	jvm_stop(&j);
}
END_TEST

/* Someone else listening at the JVM's socket name gets nothing. */
START_TEST(test_squatted_socket)
{
	char m[256], opts[300];
	struct jvm j;
	struct run r;
	int fd;

	jvm_start(&j, JDK17, NULL, NULL);
	fd = make_socket(j.pid, true, NOBODY);
	marker_path(m, sizeof(m), "squatsock");
	unlink(m);
	snprintf(opts, sizeof(opts), "out=%s", m);
	run_attach(&r, j.pid, agent, opts, 5000);
	ck_assert_str_eq(r.res.code, "attach_refused");
	ck_assert_int_ne(access(m, F_OK), 0);
	close(fd);
	ck_assert(jvm_alive(&j));
	jvm_stop(&j);
}
END_TEST

/* A JVM with its own /tmp (a container): the helper enters its mount
 * namespace, finds the socket there, and copies the agent, which the JVM
 * cannot see, into that /tmp. */
START_TEST(test_mount_namespace)
{
	char tdir[64], tagent[128], m[256], opts[300], path[128];
	struct stat st_host, st_jvm;
	struct jvm j;
	struct run r;
	glob_t g;

	snprintf(tdir, sizeof(tdir), "/tmp/jprof-attach-ns-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tdir));
	chmod(tdir, 0755);
	snprintf(tagent, sizeof(tagent), "%s/lib.so", tdir);
	copy_file(agent, tagent, 0644);
	remove_copies();
	jvm_private_tmp = true;
	jvm_start(&j, JDK17, NULL, NULL);
	jvm_private_tmp = false;
	ck_assert_int_eq(stat("/proc/self/ns/mnt", &st_host), 0);
	snprintf(path, sizeof(path), "/proc/%d/ns/mnt", (int)j.pid);
	ck_assert_int_eq(stat(path, &st_jvm), 0);
	ck_assert_uint_ne(st_host.st_ino, st_jvm.st_ino);
	/* A JVM killed with SIGKILL leaves its socket file behind; one that had
	 * this pid before must not pass for ours in the host's /tmp below. */
	sock_path(path, sizeof(path), j.pid);
	unlink(path);

	marker_path(m, sizeof(m), "ns");
	snprintf(opts, sizeof(opts), "out=%s", m);
	run_attach(&r, j.pid, tagent, opts, 10000);
	ck_assert_msg(r.res.status == 0, "%s: %s", r.res.code, r.res.message);
	ck_assert_ptr_nonnull(strstr(r.res.message, "/tmp/.jprofagent-65534-"));
	ck_assert_ptr_nonnull(strstr(slurp(m), opts));
	/* Socket and copy are in the JVM's /tmp, not in ours. */
	ck_assert_int_ne(glob("/tmp/.jprofagent-65534-*.so", 0, NULL, &g), 0);
	globfree(&g);
	sock_path(path, sizeof(path), j.pid);
	ck_assert_int_ne(access(path, F_OK), 0);
	snprintf(path, sizeof(path), "/proc/%d/root/tmp/.java_pid%d", (int)j.pid, (int)j.pid);
	ck_assert_int_eq(access(path, F_OK), 0);
	jvm_stop(&j);
	unlink(tagent);
	rmdir(tdir);
}
END_TEST

START_TEST(test_dead_pid)
{
	struct attach_result res;
	struct run r;
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(0);
	waitpid(pid, NULL, 0);
	ck_assert(!attach_is_jvm(pid));
	ck_assert_int_eq(attach_probe(pid, &res), -ESRCH);
	ck_assert_str_eq(res.code, "no_such_process");
	run_attach(&r, pid, agent, "", 5000);
	ck_assert_int_eq(r.res.status, -ESRCH);
	ck_assert_str_eq(r.res.code, "no_such_process");
}
END_TEST

static void on_slow(const char *message, void *arg)
{
	ck_assert_msg(strstr(message, "starting") != NULL, "%s", message);
	(*(int *)arg)++;
}

/* A process that maps libjvm.so but never becomes a JVM: a JVM in its
 * start-up as the probe sees it (no SIGQUIT handler yet), for good. The
 * attach keeps trying without signalling it, says so after a second, and
 * reports no_such_process once it exits. */
START_TEST(test_starting_jvm)
{
	static const char libjvm[] = "/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so";
	struct attach_result res;
	struct attach_req *req = NULL;
	struct run r = { 0 };
	double t0 = now_ms();
	int slow = 0;
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		execl("/usr/bin/python3", "python3", "-c",
		      "import ctypes, sys, time; ctypes.CDLL(sys.argv[1]); time.sleep(60)", libjvm,
		      (char *)NULL);
		_exit(127);
	}
	while (!attach_is_jvm(pid) && now_ms() - t0 < 10000)
		usleep(10000);
	ck_assert(attach_is_jvm(pid));
	ck_assert_int_eq(attach_probe(pid, &res), 0);
	ck_assert_int_eq(loop_new(&r.loop), 0);
	ck_assert_int_eq(loop_add_timer(r.loop, 2500, 0, on_guard, &r, NULL), 0);
	ck_assert_int_eq(attach_start(r.loop, pid, agent, "", 5000, on_done, &r, &req), 0);
	attach_on_slow(req, on_slow, &slow);
	ck_assert_int_eq(loop_run(r.loop), 0);
	ck_assert_msg(r.guard_fired && r.calls == 0, "the attach ended: %s", r.res.message);
	ck_assert_int_eq(slow, 1);
	/* Never signalled: SIGQUIT would have killed it. */
	ck_assert_int_eq(waitpid(pid, NULL, WNOHANG), 0);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	r.guard_fired = false;
	ck_assert_int_eq(loop_add_timer(r.loop, 3000, 0, on_guard, &r, NULL), 0);
	ck_assert_int_eq(loop_run(r.loop), 0);
	ck_assert_msg(!r.guard_fired, "done was not called after the process exited");
	ck_assert_int_eq(r.calls, 1);
	ck_assert_str_eq(r.res.code, "no_such_process");
	loop_free(r.loop);
}
END_TEST

START_TEST(test_bad_args)
{
	struct attach_req *req = (struct attach_req *)1;
	struct loop *l;

	ck_assert_int_eq(loop_new(&l), 0);
	ck_assert_int_eq(attach_start(l, getpid(), "relative.so", "", 1000, on_done, NULL, &req), -EINVAL);
	ck_assert_ptr_null(req);
	ck_assert_int_eq(attach_start(l, getpid(), agent, "", 0, on_done, NULL, &req), -EINVAL);
	loop_free(l);
}
END_TEST

static Suite *attach_suite(void)
{
	Suite *s = suite_create("attach");
	TCase *tc = tcase_create("core");

	tcase_add_unchecked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, test_jdk17);
	tcase_add_test(tc, test_jdk25);
	tcase_add_test(tc, test_copy_when_unreadable);
	tcase_add_test(tc, test_copy_squatted);
	tcase_add_test(tc, test_agent_fails_jdk17);
	tcase_add_test(tc, test_agent_fails_jdk25);
	tcase_add_test(tc, test_not_a_jvm);
	tcase_add_test(tc, test_disable_attach_mechanism);
	tcase_add_test(tc, test_xrs);
	tcase_add_test(tc, test_java_tool_options);
	tcase_add_test(tc, test_mount_namespace);
	tcase_add_test(tc, test_stale_socket);
	tcase_add_test(tc, test_squatted_socket);
	tcase_add_test(tc, test_dead_pid);
	tcase_add_test(tc, test_starting_jvm);
	tcase_add_test(tc, test_bad_args);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return attach_fixture_main("test_attach", attach_suite());
}
