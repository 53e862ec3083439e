/* A tall, thin tower beside wide, flat work (test_flamegraph_screen.py):
 * each round recurses DEPTH calls deep through climb() and spins at the top
 * (about a fifth of the CPU), then runs four flat functions, main -> flat_N,
 * a fifth each. Its flame graph is deeper than any window (the stack is cut
 * at the daemon's depth limit) while most of the width is four frames high.
 * Usage: tower [SECONDS [DEPTH]]   (default 30 s, depth 300) */
#include "progs.h"

static volatile unsigned long sink;

/* About 2 ms of CPU per call. */
JPROF_FRAME static void burn(void)
{
	for (unsigned long i = 0; i < 400000; i++)
		sink += i;
}

JPROF_FRAME static void summit(void)
{
	burn();
	sink++;
}

JPROF_FRAME static void climb(unsigned depth)
{
	if (depth)
		climb(depth - 1);
	else
		summit();
	sink++;   /* work after the call: no tail call */
}

JPROF_FRAME static void flat_a(void) { burn(); sink++; }
JPROF_FRAME static void flat_b(void) { burn(); sink++; }
JPROF_FRAME static void flat_c(void) { burn(); sink++; }
JPROF_FRAME static void flat_d(void) { burn(); sink++; }

int main(int argc, char **argv)
{
	double end = progs_now() + progs_arg_seconds(argc, argv, 1, 30);
	long depth = argc > 2 ? strtol(argv[2], NULL, 10) : 300;

	if (depth < 1 || depth > 100000)
		return 2;
	while (progs_now() < end) {
		climb((unsigned)depth);
		flat_a();
		flat_b();
		flat_c();
		flat_d();
	}
	return 0;
}
