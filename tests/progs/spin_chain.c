/* CPU-bound workload with a known stack: main -> a -> b -> spin.
 * Usage: spin_chain [SECONDS]   (default 30) */
#include "progs.h"

static volatile unsigned long sink;

/* Burns CPU for about 10 ms per call; the caller checks the clock. */
JPROF_FRAME void spin(void)
{
	for (unsigned long i = 0; i < 2000000; i++)
		sink += i;
}

JPROF_FRAME void b(double end)
{
	while (progs_now() < end)
		spin();
	sink++;   /* work after the call: no tail call even if flags change */
}

JPROF_FRAME void a(double end)
{
	b(end);
	sink++;
}

int main(int argc, char **argv)
{
	double secs = progs_arg_seconds(argc, argv, 1, 30);

	a(progs_now() + secs);
	return 0;
}
