/* CPU-bound workload whose main thread alternates: about 100 ms of its own
 * CPU time in a(), then about 100 ms in b(), again and again. Thread CPU
 * time (not wall time) decides the switch, so on a loaded machine each phase
 * still holds about ten 10 ms samples. The timeline tests expect the main
 * thread's slices under main to alternate a, b, a, b...
 * Usage: alternate [SECONDS]   (default 30; wall time) */
#include "progs.h"

static volatile unsigned long sink;

static double thread_cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Burns CPU in the calling frame itself (no callee but the clock every
 * ~1 ms), so nearly every sample's leaf is a() or b(). */
JPROF_FRAME void a(double cpu_secs)
{
	double end = thread_cpu_now() + cpu_secs;

	while (thread_cpu_now() < end)
		for (unsigned long i = 0; i < 200000; i++)
			sink += i;
	sink++;
}

JPROF_FRAME void b(double cpu_secs)
{
	double end = thread_cpu_now() + cpu_secs;

	while (thread_cpu_now() < end)
		for (unsigned long i = 0; i < 200000; i++)
			sink ^= i;
	sink++;
}

int main(int argc, char **argv)
{
	double end = progs_now() + progs_arg_seconds(argc, argv, 1, 30);

	while (progs_now() < end) {
		a(0.1);
		b(0.1);
	}
	return 0;
}
