/* sig_spin SECONDS: main -> sig_outer -> sig_wait_loop spins; a SIGALRM
 * every 20 ms runs sig_handler -> sig_handler_work, which spins 15 ms. Most
 * CPU time is in the handler, whose callers are the kernel's signal frame
 * (libc's __restore_rt) and the interrupted sig_wait_loop: an unwinder must
 * read the interrupted context out of the signal frame to get from the
 * handler to main (test_signal_frames.py). Built without frame pointers. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "progs.h"

static volatile unsigned long sink;

JPROF_FRAME void sig_handler_work(void)
{
	double end = progs_now() + 0.015;

	while (progs_now() < end)
		sink++;
}

JPROF_FRAME void sig_handler(int sig)
{
	(void)sig;
	sig_handler_work();
	sink++;
}

JPROF_FRAME void sig_wait_loop(double end)
{
	while (progs_now() < end)
		sink++;
}

JPROF_FRAME void sig_outer(double end)
{
	sig_wait_loop(end);
	sink++;
}

int main(int argc, char **argv)
{
	double secs = progs_arg_seconds(argc, argv, 1, 30);
	struct sigaction sa;
	struct itimerval it = { { 0, 20000 }, { 0, 20000 } };

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = sig_handler;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	if (sigaction(SIGALRM, &sa, NULL) < 0 || setitimer(ITIMER_REAL, &it, NULL) < 0)
		return 1;
	sig_outer(progs_now() + secs);
	return 0;
}
