/* Wall-clock workload with a known truth. The main thread alternates
 * sleeping 70 ms in nap_a() and 30 ms in nap_b() (70% / 30% of its time);
 * a second thread spins in spin() all the time. A wall profile of the
 * process must show nap_a and nap_b in that ratio under [sleeping], and the
 * spinner's whole time under spin.
 * Usage: wall_split [SECONDS]   (default 30 s) */
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include "progs.h"

static volatile unsigned long spins;
static volatile int done;

JPROF_FRAME static void nap(long ms)
{
	struct timespec t = { 0, ms * 1000000L };

	while (nanosleep(&t, &t) != 0)
		;
}

JPROF_FRAME void nap_a(void)
{
	nap(70);
}

JPROF_FRAME void nap_b(void)
{
	nap(30);
}

JPROF_FRAME void spin(void)
{
	while (!done)
		spins++;
}

static void *spinner(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "spinner");
	spin();
	return NULL;
}

int main(int argc, char **argv)
{
	double end = progs_now() + progs_arg_seconds(argc, argv, 1, 30);
	pthread_t th;

	if (pthread_create(&th, NULL, spinner, NULL) != 0) {
		fprintf(stderr, "wall_split: pthread_create failed\n");
		return 1;
	}
	while (progs_now() < end) {
		nap_a();
		nap_b();
	}
	done = 1;
	pthread_join(th, NULL);
	return 0;
}
