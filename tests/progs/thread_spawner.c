/* Starts threads while being profiled, to test that threads created after
 * a recording started are sampled too.
 * Usage: thread_spawner START_S NTHREADS TOTAL_S
 * The main thread spins (main_spin) for START_S seconds, then starts
 * NTHREADS threads that each run worker_spin until TOTAL_S seconds after
 * start, while the main thread keeps spinning. Prints nothing. */
#include <pthread.h>
#include <stdlib.h>

#include "progs.h"

#define MAX_THREADS 64

static volatile unsigned long sink;
static double end_time;

JPROF_FRAME void worker_spin(void)
{
	while (progs_now() < end_time)
		for (unsigned long i = 0; i < 1000000; i++)
			sink += i;
	sink++;
}

static void *worker_main(void *arg)
{
	worker_spin();
	return arg;
}

JPROF_FRAME void main_spin(double until)
{
	while (progs_now() < until)
		for (unsigned long i = 0; i < 1000000; i++)
			sink += i;
	sink++;
}

int main(int argc, char **argv)
{
	double start = progs_now();
	double spawn_after = progs_arg_seconds(argc, argv, 1, 1.5);
	double nthreads = progs_arg_seconds(argc, argv, 2, 3);
	double total = progs_arg_seconds(argc, argv, 3, 5);
	pthread_t threads[MAX_THREADS];
	int n = (int)nthreads;
	int started = 0;
	int ret = 0;

	if (n > MAX_THREADS)
		return 2;
	end_time = start + total;
	main_spin(start + spawn_after);
	for (; started < n; started++) {
		if (pthread_create(&threads[started], NULL, worker_main, NULL) != 0) {
			ret = 1;
			break;
		}
	}
	main_spin(end_time);
	for (int i = 0; i < started; i++)
		pthread_join(threads[i], NULL);
	return ret;
}
