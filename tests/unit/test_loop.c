/* The event loop layer: what its callers rely on (see loop.h), on a real
 * sd-event loop with real pipes, timers, signals and children. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "loop.h"

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* A guard so that a test whose event never comes fails instead of hanging. */
static void on_guard(struct loop_source *src, void *arg)
{
	bool *fired = arg;

	*fired = true;
}

struct guard {
	struct loop *loop;
	bool fired;
};

static void on_guard_quit(struct loop_source *src, void *arg)
{
	struct guard *g = arg;

	g->fired = true;
	loop_quit(g->loop);
}

static void add_guard(struct loop *l, struct guard *g, uint64_t ms)
{
	g->loop = l;
	g->fired = false;
	ck_assert_int_eq(loop_add_timer(l, ms, 0, on_guard_quit, g, NULL), 0);
}

static void block(int signo)
{
	sigset_t m;

	sigemptyset(&m);
	sigaddset(&m, signo);
	ck_assert_int_eq(sigprocmask(SIG_BLOCK, &m, NULL), 0);
}

/* ---- io ------------------------------------------------------------------ */

struct io_run {
	struct loop *loop;
	int calls;
	uint32_t events;
	char byte;
};

static void on_readable(struct loop_source *src, int fd, uint32_t events, void *arg)
{
	struct io_run *r = arg;

	r->calls++;
	r->events = events;
	if (events & EPOLLIN)
		ck_assert_int_eq(read(fd, &r->byte, 1), 1);
	loop_quit(r->loop);
}

START_TEST(test_io_readable_and_set_events)
{
	struct loop_source *src = NULL;
	struct io_run r = { 0 };
	struct guard g;
	int p[2];

	ck_assert_int_eq(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
	ck_assert_int_eq(loop_new(&r.loop), 0);
	ck_assert_int_eq(loop_add_io(r.loop, p[0], EPOLLIN, on_readable, &r, &src), 0);
	ck_assert_ptr_nonnull(src);
	ck_assert_int_eq(write(p[1], "x", 1), 1);
	add_guard(r.loop, &g, 2000);
	ck_assert_int_eq(loop_run(r.loop), 0);
	ck_assert(!g.fired);
	ck_assert_int_eq(r.calls, 1);
	ck_assert(r.events & EPOLLIN);
	ck_assert_int_eq(r.byte, 'x');

	/* The write end, watched for EPOLLOUT only after loop_set_events. */
	loop_remove(src);
	ck_assert_int_eq(loop_add_io(r.loop, p[1], 0, on_readable, &r, &src), 0);
	ck_assert_int_eq(loop_set_events(src, EPOLLOUT), 0);
	ck_assert_int_eq(loop_run(r.loop), 0);
	ck_assert_int_eq(r.calls, 2);
	ck_assert(r.events & EPOLLOUT);
	loop_remove(src);
	/* What epoll answered for a descriptor no longer watched. */
	ck_assert_int_eq(loop_set_events(src, EPOLLIN), -ENOENT);
	loop_free(r.loop);
	/* Borrowed: the loop did not close them. */
	ck_assert_int_ge(fcntl(p[0], F_GETFD), 0);
	ck_assert_int_ge(fcntl(p[1], F_GETFD), 0);
	close(p[0]);
	close(p[1]);
}
END_TEST

START_TEST(test_io_bad_fd_is_an_error)
{
	struct loop *l = NULL;
	struct loop_source *src = (struct loop_source *)&src;
	struct io_run r = { 0 };

	ck_assert_int_eq(loop_new(&l), 0);
	ck_assert_int_eq(loop_add_io(l, 1000000, EPOLLIN, on_readable, &r, &src), -EBADF);
	ck_assert_ptr_null(src);
	loop_free(l);
}
END_TEST

/* ---- removal inside a round ---------------------------------------------- */

struct pair {
	struct loop *loop;
	struct loop_source *src[2];
	int fds[2];
	int calls[2];
};

/* Each callback removes both sources, the other one first: its event is
 * pending in the same round, and must not be delivered. */
static void on_pair(struct loop_source *src, int fd, uint32_t events, void *arg)
{
	struct pair *p = arg;
	int me = src == p->src[1];

	p->calls[me]++;
	loop_remove(p->src[!me]);
	loop_remove(src);
	loop_remove(src);  /* twice in one round is harmless */
}

START_TEST(test_remove_pending_source_from_another_callback)
{
	struct pair p = { 0 };
	struct guard g;
	int a[2], b[2];

	ck_assert_int_eq(pipe2(a, O_CLOEXEC | O_NONBLOCK), 0);
	ck_assert_int_eq(pipe2(b, O_CLOEXEC | O_NONBLOCK), 0);
	ck_assert_int_eq(loop_new(&p.loop), 0);
	ck_assert_int_eq(loop_add_io(p.loop, a[0], EPOLLIN, on_pair, &p, &p.src[0]), 0);
	ck_assert_int_eq(loop_add_io(p.loop, b[0], EPOLLIN, on_pair, &p, &p.src[1]), 0);
	/* Both readable before the loop looks: one epoll wait sees both. */
	ck_assert_int_eq(write(a[1], "a", 1), 1);
	ck_assert_int_eq(write(b[1], "b", 1), 1);
	add_guard(p.loop, &g, 200);
	ck_assert_int_eq(loop_run(p.loop), 0);
	ck_assert(g.fired);
	ck_assert_int_eq(p.calls[0] + p.calls[1], 1);
	loop_free(p.loop);
	close(a[0]);
	close(a[1]);
	close(b[0]);
	close(b[1]);
}
END_TEST

struct reuse {
	struct loop *loop;
	struct loop_source *src;
	int fd, calls, new_fd;
	int add_result;
};

static void on_reuse_new(struct loop_source *src, int fd, uint32_t events, void *arg)
{
	struct reuse *r = arg;

	ck_assert_int_eq(fd, r->new_fd);
	loop_quit(r->loop);
}

/* Removing and closing an fd inside a callback, then watching a new fd that
 * got the same number, all in one round: the old watch is gone at once. */
static void on_reuse_old(struct loop_source *src, int fd, uint32_t events, void *arg)
{
	struct reuse *r = arg;
	int p[2];

	r->calls++;
	loop_remove(src);
	close(fd);
	ck_assert_int_eq(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
	if (p[0] != fd) {  /* keep the number the old watch had */
		ck_assert_int_eq(dup3(p[0], fd, O_CLOEXEC), fd);
		close(p[0]);
	}
	r->new_fd = fd;
	ck_assert_int_eq(write(p[1], "n", 1), 1);
	close(p[1]);
	r->add_result = loop_add_io(r->loop, fd, EPOLLIN, on_reuse_new, r, &r->src);
}

START_TEST(test_remove_then_reuse_fd_number)
{
	struct reuse r = { 0 };
	struct guard g;
	int p[2];

	ck_assert_int_eq(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
	ck_assert_int_eq(loop_new(&r.loop), 0);
	ck_assert_int_eq(loop_add_io(r.loop, p[0], EPOLLIN, on_reuse_old, &r, NULL), 0);
	ck_assert_int_eq(write(p[1], "o", 1), 1);
	add_guard(r.loop, &g, 2000);
	ck_assert_int_eq(loop_run(r.loop), 0);
	ck_assert_int_eq(r.add_result, 0);
	ck_assert_int_eq(r.calls, 1);
	ck_assert(!g.fired);
	loop_remove(r.src);
	close(r.new_fd);
	close(p[1]);
	loop_free(r.loop);
}
END_TEST

/* ---- timers -------------------------------------------------------------- */

struct tick {
	struct loop *loop;
	int calls, quit_after;
	double first_at, last_at;
};

static void on_tick(struct loop_source *src, void *arg)
{
	struct tick *t = arg;

	if (!t->calls)
		t->first_at = now_ms();
	t->last_at = now_ms();
	if (++t->calls == t->quit_after)
		loop_quit(t->loop);
}

START_TEST(test_timer_once)
{
	struct tick t = { .quit_after = 1 };
	struct loop_source *src = NULL;
	bool extra = false;
	double t0;

	ck_assert_int_eq(loop_new(&t.loop), 0);
	t0 = now_ms();
	ck_assert_int_eq(loop_add_timer(t.loop, 50, 0, on_tick, &t, &src), 0);
	ck_assert_int_eq(loop_run(t.loop), 0);
	ck_assert_int_eq(t.calls, 1);
	ck_assert_msg(t.first_at - t0 >= 49.5, "fired after %.1f ms", t.first_at - t0);
	/* Precise: not coalesced into a later wakeup. */
	ck_assert_msg(t.first_at - t0 < 150, "fired after %.1f ms", t.first_at - t0);
	/* Once: nothing more within 200 ms; the source stays until removed. */
	ck_assert_int_eq(loop_add_timer(t.loop, 200, 0, on_guard, &extra, NULL), 0);
	ck_assert_int_eq(loop_add_timer(t.loop, 210, 0, on_tick, &t, NULL), 0);
	t.quit_after = 2;
	ck_assert_int_eq(loop_run(t.loop), 0);
	ck_assert(extra);
	ck_assert_int_eq(t.calls, 2);
	loop_remove(src);
	loop_free(t.loop);
}
END_TEST

START_TEST(test_timer_zero_fires_at_once)
{
	struct tick t = { .quit_after = 1 };
	struct guard g;

	ck_assert_int_eq(loop_new(&t.loop), 0);
	ck_assert_int_eq(loop_add_timer(t.loop, 0, 0, on_tick, &t, NULL), 0);
	add_guard(t.loop, &g, 100);
	ck_assert_int_eq(loop_run(t.loop), 0);
	ck_assert(!g.fired);
	ck_assert_int_eq(t.calls, 1);
	loop_free(t.loop);
}
END_TEST

START_TEST(test_timer_repeating)
{
	struct tick t = { .quit_after = 20 };
	double t0, span;

	ck_assert_int_eq(loop_new(&t.loop), 0);
	t0 = now_ms();
	ck_assert_int_eq(loop_add_timer(t.loop, 30, 10, on_tick, &t, NULL), 0);
	ck_assert_int_eq(loop_run(t.loop), 0);
	ck_assert_int_eq(t.calls, 20);
	ck_assert_msg(t.first_at - t0 >= 29.5, "first after %.1f ms", t.first_at - t0);
	/* 30 ms, then 19 intervals of 10 ms: due at 220 ms (a fixed rate, so a
	 * late tick does not delay the next ones); not coalesced. */
	span = t.last_at - t0;
	ck_assert_msg(span >= 219.5 && span < 450, "20 ticks took %.1f ms", span);
	loop_free(t.loop);
}
END_TEST

struct self_remove {
	struct loop *loop;
	int calls;
};

static void on_tick_remove_self(struct loop_source *src, void *arg)
{
	struct self_remove *s = arg;

	s->calls++;
	loop_remove(src);
}

START_TEST(test_repeating_timer_removes_itself)
{
	struct self_remove s = { 0 };
	struct guard g;

	ck_assert_int_eq(loop_new(&s.loop), 0);
	ck_assert_int_eq(loop_add_timer(s.loop, 1, 1, on_tick_remove_self, &s, NULL), 0);
	add_guard(s.loop, &g, 100);
	ck_assert_int_eq(loop_run(s.loop), 0);
	ck_assert(g.fired);
	ck_assert_int_eq(s.calls, 1);
	loop_free(s.loop);
}
END_TEST

/* ---- quit ---------------------------------------------------------------- */

START_TEST(test_quit_and_run_again)
{
	struct tick t = { .quit_after = 1 };
	struct tick u = { .quit_after = 1 };
	double t0;

	ck_assert_int_eq(loop_new(&t.loop), 0);
	u.loop = t.loop;
	/* u is due long after t: loop_run returns after t alone. */
	ck_assert_int_eq(loop_add_timer(t.loop, 10, 0, on_tick, &t, NULL), 0);
	ck_assert_int_eq(loop_add_timer(t.loop, 300, 0, on_tick, &u, NULL), 0);
	t0 = now_ms();
	ck_assert_int_eq(loop_run(t.loop), 0);
	ck_assert_int_eq(t.calls, 1);
	ck_assert_int_eq(u.calls, 0);
	ck_assert(now_ms() - t0 < 250);
	/* And it runs again. */
	ck_assert_int_eq(loop_run(t.loop), 0);
	ck_assert_int_eq(u.calls, 1);
	loop_free(t.loop);
}
END_TEST

struct quitter {
	struct loop *loop;
	int calls;
};

static void on_ready_quit(struct loop_source *src, int fd, uint32_t events, void *arg)
{
	struct quitter *q = arg;
	char c;

	ck_assert_int_eq(read(fd, &c, 1), 1);
	q->calls++;
	loop_quit(q->loop);
}

/* Three fds ready at once: loop_quit in the first callback returns before
 * the others run; they run on the next loop_run, one per quit. */
START_TEST(test_quit_mid_batch)
{
	struct quitter q = { 0 };
	int p[3][2];

	ck_assert_int_eq(loop_new(&q.loop), 0);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(pipe2(p[i], O_CLOEXEC | O_NONBLOCK), 0);
		ck_assert_int_eq(loop_add_io(q.loop, p[i][0], EPOLLIN, on_ready_quit, &q, NULL), 0);
		ck_assert_int_eq(write(p[i][1], "q", 1), 1);
	}
	for (int run = 1; run <= 3; run++) {
		ck_assert_int_eq(loop_run(q.loop), 0);
		ck_assert_int_eq(q.calls, run);
	}
	loop_free(q.loop);
	for (int i = 0; i < 3; i++) {
		close(p[i][0]);
		close(p[i][1]);
	}
}
END_TEST

/* ---- signals ------------------------------------------------------------- */

struct sig_run {
	struct loop *loop;
	int signo, calls;
};

static void on_sig(struct loop_source *src, int signo, void *arg)
{
	struct sig_run *s = arg;

	s->signo = signo;
	s->calls++;
	loop_quit(s->loop);
}

START_TEST(test_signal_source)
{
	struct sig_run s = { 0 };
	struct guard g;

	ck_assert_int_eq(loop_new(&s.loop), 0);
	/* Unblocked, a signal could not wait for the loop. */
	ck_assert_int_eq(loop_add_signal(s.loop, SIGUSR1, on_sig, &s, NULL), -EBUSY);
	block(SIGUSR1);
	ck_assert_int_eq(loop_add_signal(s.loop, SIGUSR1, on_sig, &s, NULL), 0);
	ck_assert_int_eq(kill(getpid(), SIGUSR1), 0);
	add_guard(s.loop, &g, 2000);
	ck_assert_int_eq(loop_run(s.loop), 0);
	ck_assert(!g.fired);
	ck_assert_int_eq(s.calls, 1);
	ck_assert_int_eq(s.signo, SIGUSR1);
	loop_free(s.loop);
}
END_TEST

/* ---- children ------------------------------------------------------------ */

struct child_run {
	struct loop *loop;
	int pidfd, calls;
	siginfo_t si;
};

/* The owner closes its pidfd and removes the source from the callback, as
 * attach does; the loop must still reap the child. */
static void on_exit_child(struct loop_source *src, const siginfo_t *si, void *arg)
{
	struct child_run *c = arg;

	c->si = *si;
	c->calls++;
	loop_remove(src);
	close(c->pidfd);
	c->pidfd = -1;
	loop_quit(c->loop);
}

static pid_t child_exiting(unsigned delay_ms, int status, int *pidfd)
{
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		usleep(delay_ms * 1000);
		_exit(status);
	}
	*pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	ck_assert_int_ge(*pidfd, 0);
	return pid;
}

START_TEST(test_child_exit_source)
{
	struct child_run c = { 0 };
	struct guard g;
	pid_t pid;

	ck_assert_int_eq(loop_new(&c.loop), 0);
	pid = child_exiting(50, 7, &c.pidfd);
	ck_assert_int_eq(loop_add_child(c.loop, c.pidfd, on_exit_child, &c, NULL), -EBUSY);
	block(SIGCHLD);
	ck_assert_int_eq(loop_add_child(c.loop, c.pidfd, on_exit_child, &c, NULL), 0);
	add_guard(c.loop, &g, 5000);
	ck_assert_int_eq(loop_run(c.loop), 0);
	ck_assert(!g.fired);
	ck_assert_int_eq(c.calls, 1);
	ck_assert_int_eq(c.si.si_pid, pid);
	ck_assert_int_eq(c.si.si_code, CLD_EXITED);
	ck_assert_int_eq(c.si.si_status, 7);
	/* Reaped by the loop. */
	errno = 0;
	ck_assert_int_eq(waitpid(pid, NULL, WNOHANG), -1);
	ck_assert_int_eq(errno, ECHILD);
	loop_free(c.loop);
}
END_TEST

START_TEST(test_child_removed_early_is_left_alone)
{
	struct child_run c = { 0 };
	struct loop_source *src = NULL;
	struct guard g;
	int st = 0;
	pid_t pid;

	block(SIGCHLD);
	ck_assert_int_eq(loop_new(&c.loop), 0);
	pid = child_exiting(50, 3, &c.pidfd);
	ck_assert_int_eq(loop_add_child(c.loop, c.pidfd, on_exit_child, &c, &src), 0);
	loop_remove(src);
	add_guard(c.loop, &g, 300);
	ck_assert_int_eq(loop_run(c.loop), 0);
	ck_assert_int_eq(c.calls, 0);
	/* Neither killed nor reaped: its owner waits for it. */
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st));
	ck_assert_int_eq(WEXITSTATUS(st), 3);
	close(c.pidfd);
	loop_free(c.loop);
}
END_TEST

/* ---- free ---------------------------------------------------------------- */

START_TEST(test_free_with_live_sources)
{
	struct loop *l = NULL;
	struct io_run r = { 0 };
	int p[2], pidfd;
	pid_t pid;

	block(SIGUSR2);
	block(SIGCHLD);
	ck_assert_int_eq(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
	ck_assert_int_eq(loop_new(&l), 0);
	pid = child_exiting(0, 0, &pidfd);
	ck_assert_int_eq(loop_add_io(l, p[0], EPOLLIN, on_readable, &r, NULL), 0);
	ck_assert_int_eq(loop_add_timer(l, 10, 10, on_tick, NULL, NULL), 0);
	ck_assert_int_eq(loop_add_signal(l, SIGUSR2, on_sig, NULL, NULL), 0);
	ck_assert_int_eq(loop_add_child(l, pidfd, on_exit_child, NULL, NULL), 0);
	loop_free(l);
	loop_free(NULL);
	loop_remove(NULL);
	ck_assert_int_ge(fcntl(p[0], F_GETFD), 0);
	ck_assert_int_ge(fcntl(pidfd, F_GETFD), 0);
	ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
	close(pidfd);
	close(p[0]);
	close(p[1]);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("loop");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_io_readable_and_set_events);
	tcase_add_test(tc, test_io_bad_fd_is_an_error);
	tcase_add_test(tc, test_remove_pending_source_from_another_callback);
	tcase_add_test(tc, test_remove_then_reuse_fd_number);
	tcase_add_test(tc, test_timer_once);
	tcase_add_test(tc, test_timer_zero_fires_at_once);
	tcase_add_test(tc, test_timer_repeating);
	tcase_add_test(tc, test_repeating_timer_removes_itself);
	tcase_add_test(tc, test_quit_and_run_again);
	tcase_add_test(tc, test_quit_mid_batch);
	tcase_add_test(tc, test_signal_source);
	tcase_add_test(tc, test_child_exit_source);
	tcase_add_test(tc, test_child_removed_early_is_left_alone);
	tcase_add_test(tc, test_free_with_live_sources);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
