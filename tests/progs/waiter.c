/* Off-CPU workload with a known truth: main -> waiter -> wait_byte ->
 * read(2) on a pipe that a child process (not part of this process, so
 * not recorded with it) feeds one byte every PERIOD. The process's one
 * thread spends nearly all its time blocked in that read, below waiter().
 * Usage: waiter [SECONDS [PERIOD]]   (defaults 30 and 0.1 s) */
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "progs.h"

static volatile unsigned long bytes;

/* libc's read() has no frame pointer, so a frame-pointer walk from inside
 * it skips its direct caller; this wrapper is that caller, which keeps
 * waiter itself on the stack. */
JPROF_FRAME ssize_t wait_byte(int fd)
{
	char c;
	ssize_t n = read(fd, &c, 1);

	if (n == 1)
		bytes++;
	return n;
}

JPROF_FRAME int waiter(int fd, double end)
{
	while (progs_now() < end)
		if (wait_byte(fd) <= 0)
			return -1;
	return 0;
}

/* The child: a byte every period until the reader is gone (EPIPE). */
static void feed(int fd, double period)
{
	struct timespec tick = { (time_t)period, (long)((period - (time_t)period) * 1e9) };

	signal(SIGPIPE, SIG_IGN);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	while (write(fd, "x", 1) == 1)
		nanosleep(&tick, NULL);
	_exit(0);
}

int main(int argc, char **argv)
{
	double secs = progs_arg_seconds(argc, argv, 1, 30);
	double period = progs_arg_seconds(argc, argv, 2, 0.1);
	int fds[2], ret;
	pid_t child;

	if (pipe(fds) < 0) {
		perror("waiter: pipe");
		return 1;
	}
	child = fork();
	if (child < 0) {
		perror("waiter: fork");
		return 1;
	}
	if (child == 0) {
		close(fds[0]);
		feed(fds[1], period);
	}
	close(fds[1]);
	ret = waiter(fds[0], progs_now() + secs);
	close(fds[0]);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	return ret < 0 ? 1 : 0;
}
