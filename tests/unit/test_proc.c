/* proc: credentials as the ptrace check sees them, and process identities
 * that a recycled pid cannot take over (pidfd, or pid + start time). Real
 * child processes; the uid changes need root (skipped otherwise). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_main.h"
#include "proc.h"

#define NOBODY 65534

/* A child that runs setup (if any), reports on a pipe and sleeps until
 * killed. Returns its pid once it has reported. */
static pid_t child_start(void (*setup)(void))
{
	int p[2];
	char c;
	pid_t pid;

	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (setup)
			setup();
		if (write(p[1], "k", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(p[1]);
	ck_assert_int_eq(read(p[0], &c, 1), 1);
	close(p[0]);
	return pid;
}

static void child_kill(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

static int pidfd_of(pid_t pid)
{
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);

	ck_assert_msg(fd >= 0, "pidfd_open %d: %s", (int)pid, strerror(errno));
	return fd;
}

static void undumpable(void)
{
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

static void become_nobody(void)
{
	/* setresuid from root leaves it non-dumpable; say it may be read. */
	if (setresgid(NOBODY, NOBODY, NOBODY) < 0 || setresuid(NOBODY, NOBODY, NOBODY) < 0)
		_exit(1);
	prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
}

START_TEST(test_creds_of_self_and_children)
{
	struct proc_creds c;
	pid_t pid;

	ck_assert_int_eq(proc_read_creds(getpid(), &c), 0);
	ck_assert_int_eq(c.uid[1], geteuid());
	ck_assert_int_eq(c.gid[1], getegid());
	ck_assert(!c.exited);
	ck_assert(!c.other_userns);
	ck_assert_int_eq(c.dump_owner, geteuid());
	ck_assert_uint_gt(c.start_ns, 0);

	/* Non-dumpable: /proc gives its files to root. */
	if (geteuid() != 0) {
		pid = child_start(undumpable);
		ck_assert_int_eq(proc_read_creds(pid, &c), 0);
		ck_assert_int_eq(c.dump_owner, 0);
		child_kill(pid);
		return;
	}
	pid = child_start(become_nobody);
	ck_assert_int_eq(proc_read_creds(pid, &c), 0);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(c.uid[i], NOBODY);
		ck_assert_int_eq(c.gid[i], NOBODY);
	}
	ck_assert_int_eq(c.dump_owner, NOBODY);
	ck_assert_uint_eq(c.cap_prm, 0);
	ck_assert_uint_eq(c.cap_eff, 0);
	child_kill(pid);

	pid = child_start(undumpable);
	ck_assert_int_eq(proc_read_creds(pid, &c), 0);
	ck_assert_int_eq(c.dump_owner, 0);
	ck_assert_uint_ne(c.cap_prm, 0);  /* root's */
	child_kill(pid);
}
END_TEST

START_TEST(test_creds_of_zombie_and_gone)
{
	struct proc_creds c;
	pid_t pid = child_start(become_nobody);
	int fd = pidfd_of(pid);

	ck_assert_int_eq(proc_pidfd_running(fd), 1);
	kill(pid, SIGKILL);
	/* Exited, not reaped: a zombie still has credentials, no memory. */
	for (int i = 0; i < 200 && proc_pidfd_running(fd) == 1; i++)
		usleep(5000);
	ck_assert_int_eq(proc_pidfd_running(fd), 0);
	ck_assert_int_eq(proc_read_creds(pid, &c), 0);
	ck_assert(c.exited);
	waitpid(pid, NULL, 0);
	ck_assert_int_eq(proc_pidfd_running(fd), 0);
	ck_assert_int_eq(proc_read_creds(pid, &c), -ENOENT);
	close(fd);
}
END_TEST

/* A listening socket in a fresh directory, and its path. */
static int listen_tmp(char *path, size_t len)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char dir[] = "/tmp/jprof-proc-XXXXXX";
	int fd;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, len, "%s/s", dir);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(fd, 4), 0);
	return fd;
}

static void listen_done(int fd, const char *path)
{
	char dir[108];

	close(fd);
	unlink(path);
	snprintf(dir, sizeof(dir), "%s", path);
	*strrchr(dir, '/') = '\0';
	rmdir(dir);
}

static char connect_path[108];

static void connect_back(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", connect_path);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		_exit(1);
}

static pid_t peer_pid(int sock)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	ck_assert_int_eq(getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len), 0);
	return cred.pid;
}

START_TEST(test_ident_of_socket_peer)
{
	struct proc_ident id = PROC_IDENT_INIT;
	int lfd = listen_tmp(connect_path, sizeof(connect_path)), cfd, fd;
	pid_t pid = child_start(connect_back), other;

	cfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	ck_assert_int_ge(cfd, 0);
	ck_assert_int_eq(peer_pid(cfd), pid);
	ck_assert_int_eq(proc_ident_from_socket(cfd, pid, &id), 0);
	ck_assert_int_eq(id.pid, pid);
	ck_assert_int_ge(id.pidfd, 0);  /* this kernel has SO_PEERPIDFD */
	ck_assert_int_eq(proc_ident_check(&id), 0);
	fd = pidfd_of(pid);
	ck_assert_int_eq(proc_ident_matches(&id, pid, fd), 0);
	/* Another process is not it. */
	other = child_start(NULL);
	close(fd);
	fd = pidfd_of(other);
	ck_assert_int_eq(proc_ident_matches(&id, other, fd), -ESRCH);
	child_kill(other);
	close(fd);

	/* The connecting process exits; the socket lives on here. */
	child_kill(pid);
	ck_assert_int_eq(proc_ident_check(&id), -ESRCH);
	proc_ident_release(&id);
	ck_assert_int_eq(id.pidfd, -1);
	/* Asked only now: the process that connected is gone. */
	ck_assert_int_eq(proc_ident_from_socket(cfd, pid, &id), -ESRCH);
	ck_assert_int_eq(id.pidfd, -1);
	close(cfd);
	listen_done(lfd, connect_path);
}
END_TEST

START_TEST(test_ident_fallback_start_time)
{
	struct proc_ident id = PROC_IDENT_INIT, forged;
	pid_t pid = child_start(NULL);
	int fd = pidfd_of(pid);

	ck_assert_int_eq(proc_ident_from_pid(pid, &id), 0);
	ck_assert_int_eq(id.pidfd, -1);
	ck_assert_uint_gt(id.start_ns, 0);
	ck_assert_int_eq(proc_ident_check(&id), 0);
	ck_assert_int_eq(proc_ident_matches(&id, pid, fd), 0);
	/* Same pid, other start time: what a successor looks like. */
	forged = id;
	forged.start_ns += 1000000000ull;
	ck_assert_int_eq(proc_ident_check(&forged), -ESRCH);
	ck_assert_int_eq(proc_ident_matches(&forged, pid, fd), -ESRCH);
	kill(pid, SIGKILL);
	for (int i = 0; i < 200 && proc_pidfd_running(fd) == 1; i++)
		usleep(5000);
	ck_assert_int_eq(proc_ident_check(&id), -ESRCH);  /* a zombie */
	waitpid(pid, NULL, 0);
	ck_assert_int_eq(proc_ident_check(&id), -ESRCH);
	ck_assert_int_eq(proc_ident_from_pid(pid, &id), -ESRCH);
	ck_assert_int_eq(proc_ident_from_pid(0, &id), -ESRCH);
	close(fd);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("proc");
	TCase *tc = tcase_create("proc");

	tcase_add_test(tc, test_creds_of_self_and_children);
	tcase_add_test(tc, test_creds_of_zombie_and_gone);
	tcase_add_test(tc, test_ident_of_socket_peer);
	tcase_add_test(tc, test_ident_fallback_start_time);
	suite_add_tcase(s, tc);
	return jprof_check_run(s);
}
