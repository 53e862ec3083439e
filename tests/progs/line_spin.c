/* A hot loop on a known source line, inlined into its caller, for the
 * file:line test (test_lines.py): it finds the lines by the marker
 * comments. Built -O2 -g (progs.cmake), so the loop's address has a line
 * and an inlined-subroutine scope in DWARF.
 * Usage: line_spin [SECONDS]   (default 30) */
#include "progs.h"

static volatile unsigned long sink;

static inline __attribute__((always_inline)) void line_hot(unsigned long n)
{
	for (unsigned long i = 0; i < n; i++) sink += i * 7; /* LINES_HOT */
}

JPROF_FRAME void line_work(double end)
{
	while (progs_now() < end)
		line_hot(2000000); /* LINES_CALL */
	sink++;   /* work after the call: no tail call */
}

int main(int argc, char **argv)
{
	double secs = progs_arg_seconds(argc, argv, 1, 30);

	line_work(progs_now() + secs);
	return 0;
}
