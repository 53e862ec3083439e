/* attach: stopping the helper never waits for it. A JVM that does not
 * answer (stopped), a helper that hangs (stopped), one that not even
 * SIGKILL ends (frozen): "timeout" on time, the loop runs on throughout,
 * and every helper is reaped from the loop once it can die. */
#include "attach_fixture.h"

START_TEST(test_timeout_stopped_jvm)
{
	char trigger[64];
	struct jvm j;
	struct run r;

	jvm_start(&j, JDK17, NULL, NULL);
	ck_assert_int_eq(kill(j.pid, SIGSTOP), 0);
	run_attach(&r, j.pid, agent, "out=/dev/null", 1500);
	ck_assert_int_lt(r.res.status, 0);
	ck_assert_msg(strcmp(r.res.code, "timeout") == 0 || strcmp(r.res.code, "no_attach_socket") == 0,
		      "%s: %s", r.res.code, r.res.message);
	ck_assert_msg(r.ms < 1500 + 300, "took %.0f ms", r.ms);
	printf("stopped JVM: %s after %.0f ms\n", r.res.code, r.ms);
	ck_assert_int_eq(count_children(), 1);
	snprintf(trigger, sizeof(trigger), "/tmp/.attach_pid%d", (int)j.pid);
	ck_assert_int_ne(access(trigger, F_OK), 0);
	jvm_stop(&j);
}
END_TEST

static void on_quit(struct loop_source *src, void *arg)
{
	loop_quit(arg);
}

static void on_reaped_check(struct loop_source *src, void *arg)
{
	struct attach_stats st;

	attach_get_stats(&st);
	if (st.helpers_unreaped == 0)
		loop_quit(arg);
}

/* Runs the loop until every stopped helper is reaped (or limit_ms passed);
 * returns how long that took. */
static double run_until_reaped(struct loop *l, unsigned limit_ms)
{
	struct loop_source *check = NULL, *guard = NULL;
	double t0 = now_ms();

	ck_assert_int_eq(loop_add_timer(l, 5, 5, on_reaped_check, l, &check), 0);
	ck_assert_int_eq(loop_add_timer(l, limit_ms, 0, on_quit, l, &guard), 0);
	ck_assert_int_eq(loop_run(l), 0);
	loop_remove(check);
	loop_remove(guard);
	return now_ms() - t0;
}

/* Cancelling never waits: the helper gets SIGTERM (it removes its trigger
 * file) and the loop reaps it. */
START_TEST(test_cancel)
{
	char trigger[64];
	struct attach_req *req = NULL;
	struct attach_stats st;
	struct jvm j;
	struct run r;
	double t0;

	jvm_start(&j, JDK17, NULL, NULL);
	ck_assert_int_eq(kill(j.pid, SIGSTOP), 0);
	memset(&r, 0, sizeof(r));
	ck_assert_int_eq(loop_new(&r.loop), 0);
	ck_assert_int_eq(attach_start(r.loop, j.pid, agent, "", 10000, on_done, &r, &req), 0);
	ck_assert_int_eq(loop_add_timer(r.loop, 300, 0, on_quit, r.loop, NULL), 0);
	ck_assert_int_eq(loop_run(r.loop), 0);
	ck_assert_int_eq(count_children(), 2);  /* the JVM and the helper */
	t0 = now_ms();
	attach_cancel(req);
	ck_assert_msg(now_ms() - t0 < 20, "attach_cancel took %.1f ms", now_ms() - t0);
	ck_assert_msg(run_until_reaped(r.loop, 2000) < 200, "the helper was not reaped");
	ck_assert_int_eq(count_children(), 1);
	attach_get_stats(&st);
	ck_assert_uint_eq(st.helpers_abandoned, 0);
	/* The helper removed its trigger file on the way out. */
	snprintf(trigger, sizeof(trigger), "/tmp/.attach_pid%d", (int)j.pid);
	ck_assert_int_ne(access(trigger, F_OK), 0);
	ck_assert_int_eq(r.calls, 0);
	loop_free(r.loop);
	attach_cancel(NULL);
	jvm_stop(&j);
}
END_TEST

/* The helper itself hangs: "timeout" at the timeout, and the helper is
 * stopped in the background while the loop runs on. */
struct stuck {
	struct run *run;
	pid_t jvm, helper;
	int ticks;
	char freezer[128];   /* set: freeze the helper there instead of SIGSTOP */
};

static void write_file(const char *dir, const char *name, const char *text)
{
	char path[256];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

static void on_stop_helper(struct loop_source *src, void *arg)
{
	struct stuck *st = arg;
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)getpid(), (int)getpid());
	for (char *tok = strtok(slurp(path), " \n"); tok; tok = strtok(NULL, " \n"))
		if (atoi(tok) != st->jvm)
			st->helper = atoi(tok);
	ck_assert_int_gt(st->helper, 0);
	if (!st->freezer[0]) {
		ck_assert_int_eq(kill(st->helper, SIGSTOP), 0);
		return;
	}
	snprintf(path, sizeof(path), "%d", (int)st->helper);
	write_file(st->freezer, "cgroup.procs", path);
	write_file(st->freezer, "freezer.state", "FROZEN");
}

static void on_stuck_tick(struct loop_source *src, void *arg)
{
	struct stuck *st = arg;

	st->ticks++;
}

/* attach_start with a 1000 ms timeout whose helper on_stop_helper stops
 * after 200 ms; returns when done was called, with the loop still usable. */
static void run_stuck(struct stuck *st, struct jvm *j, struct run *r)
{
	struct attach_req *req = NULL;
	double t0;

	jvm_start(j, JDK17, NULL, NULL);
	ck_assert_int_eq(kill(j->pid, SIGSTOP), 0);
	memset(r, 0, sizeof(*r));
	st->run = r;
	st->jvm = j->pid;
	ck_assert_int_eq(loop_new(&r->loop), 0);
	ck_assert_int_eq(loop_add_timer(r->loop, 5000, 0, on_guard, r, NULL), 0);
	t0 = now_ms();
	ck_assert_int_eq(attach_start(r->loop, j->pid, agent, "", 1000, on_done, r, &req), 0);
	ck_assert_int_eq(loop_add_timer(r->loop, 200, 0, on_stop_helper, st, NULL), 0);
	ck_assert_int_eq(loop_add_timer(r->loop, 300, 10, on_stuck_tick, st, NULL), 0);
	ck_assert_int_eq(loop_run(r->loop), 0);
	r->ms = now_ms() - t0;
	ck_assert(!r->guard_fired);
	ck_assert_int_eq(r->calls, 1);
	ck_assert_msg(strcmp(r->res.code, "timeout") == 0, "%s: %s", r->res.code, r->res.message);
	ck_assert_int_eq(r->res.status, -ETIMEDOUT);
	ck_assert_msg(r->ms >= 990 && r->ms < 1000 + 200, "took %.0f ms", r->ms);
	ck_assert_msg(st->ticks >= 40, "the loop ticked %d times while the helper was stuck",
		      st->ticks);
}

START_TEST(test_timeout_helper_stuck)
{
	char trigger[64];
	struct attach_stats as;
	struct stuck st = { 0 };
	struct jvm j;
	struct run r;

	run_stuck(&st, &j, &r);
	/* SIGTERM waits while it is stopped; SIGKILL 100 ms later does not. */
	ck_assert_msg(run_until_reaped(r.loop, 2000) < 300, "the helper was not reaped");
	ck_assert_int_eq(count_children(), 1);
	attach_get_stats(&as);
	ck_assert_uint_eq(as.helpers_abandoned, 0);
	loop_free(r.loop);
	/* SIGKILL gave the helper no chance to remove its trigger file. */
	snprintf(trigger, sizeof(trigger), "/tmp/.attach_pid%d", (int)j.pid);
	unlink(trigger);
	jvm_stop(&j);
}
END_TEST

/* Whatever happens to this test, nothing stays frozen: a grandchild (not
 * one of our children) thaws the cgroup and removes it after 15 s. */
static void thaw_later(const char *freezer)
{
	char path[160];
	pid_t pid = fork();
	int fd;

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (fork() != 0)
			_exit(0);
		/* Holding the test's output open would make a reader wait for us. */
		fd = open("/dev/null", O_RDWR | O_CLOEXEC);
		if (fd >= 0) {
			dup2(fd, 0);
			dup2(fd, 1);
			dup2(fd, 2);
		}
		sleep(15);
		snprintf(path, sizeof(path), "%s/freezer.state", freezer);
		fd = open(path, O_WRONLY | O_CLOEXEC);
		if (fd >= 0 && write(fd, "THAWED", 6) < 0)
			fd = -1;
		sleep(1);
		rmdir(freezer);
		_exit(0);
	}
	waitpid(pid, NULL, 0);
}

/* A helper that even SIGKILL cannot end (frozen by the cgroup v1 freezer:
 * uninterruptible, like one waiting on a FUSE server that never answers)
 * is abandoned and counted, the loop never waits for it, and it is reaped
 * from the loop once it can die. */
START_TEST(test_abandon_unkillable_helper)
{
	char trigger[64];
	struct attach_stats as;
	struct stuck st = { 0 };
	struct jvm j;
	struct run r;

	snprintf(st.freezer, sizeof(st.freezer), "/sys/fs/cgroup/freezer/jprof-attach-%d",
		 (int)getpid());
	if (mkdir(st.freezer, 0755) < 0) {
		printf("no cgroup v1 freezer (%s): unkillable helper not tested\n", strerror(errno));
		return;
	}
	thaw_later(st.freezer);
	run_stuck(&st, &j, &r);
	ck_assert_int_eq(loop_add_timer(r.loop, 400, 0, on_quit, r.loop, NULL), 0);
	ck_assert_int_eq(loop_run(r.loop), 0);
	attach_get_stats(&as);
	ck_assert_uint_eq(as.helpers_abandoned, 1);
	ck_assert_uint_eq(as.helpers_stuck, 1);
	ck_assert_int_eq(count_children(), 2);
	write_file(st.freezer, "freezer.state", "THAWED");
	ck_assert_msg(run_until_reaped(r.loop, 2000) < 500, "the thawed helper was not reaped");
	attach_get_stats(&as);
	ck_assert_uint_eq(as.helpers_stuck, 0);
	ck_assert_uint_eq(as.helpers_abandoned, 1);
	ck_assert_int_eq(count_children(), 1);
	loop_free(r.loop);
	ck_assert_int_eq(rmdir(st.freezer), 0);
	snprintf(trigger, sizeof(trigger), "/tmp/.attach_pid%d", (int)j.pid);
	unlink(trigger);
	jvm_stop(&j);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("attach_stop");
	TCase *tc = tcase_create("core");

	tcase_add_unchecked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_timeout_stopped_jvm);
	tcase_add_test(tc, test_cancel);
	tcase_add_test(tc, test_timeout_helper_stuck);
	tcase_add_test(tc, test_abandon_unkillable_helper);
	suite_add_tcase(s, tc);
	return attach_fixture_main("test_attach_stop", s);
}
