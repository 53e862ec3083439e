/* Threads that live shorter than a drain: each names itself "short-N"
 * (pthread_setname_np), spins about 30 ms in thread_spin and exits; the
 * main thread starts them one after another and only waits.
 * Usage: short_threads SECONDS */
#include <pthread.h>
#include <stdio.h>

#include "progs.h"

static volatile unsigned long sink;

JPROF_FRAME void thread_spin(double end)
{
	while (progs_now() < end)
		for (unsigned long i = 0; i < 100000; i++)
			sink += i;
	sink++;
}

static void *thread_main(void *arg)
{
	char name[16];

	snprintf(name, sizeof(name), "short-%lu", (unsigned long)(size_t)arg % 1000);
	pthread_setname_np(pthread_self(), name);
	thread_spin(progs_now() + 0.03);
	return NULL;
}

int main(int argc, char **argv)
{
	double end = progs_now() + progs_arg_seconds(argc, argv, 1, 30);

	for (size_t i = 0; progs_now() < end; i++) {
		pthread_t t;

		if (pthread_create(&t, NULL, thread_main, (void *)i) != 0)
			return 1;
		pthread_join(t, NULL);
	}
	return 0;
}
