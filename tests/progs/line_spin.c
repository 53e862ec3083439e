/* A hot loop on a known source line, inlined into its caller, for the
 * file:line test (test_lines.py): it finds the lines by the marker
 * comments. Built -O2 -g (progs.cmake), so the loop's address has a line
 * and an inlined-subroutine scope in DWARF.
 * With "two", line_two instead: one function calling a helper from two
 * lines, taking turns (pprof keeps one location per sampled address, here
 * the two return addresses, so both lines show).
 * Usage: line_spin [SECONDS [two]]   (default 30) */
#include <string.h>

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

JPROF_FRAME void line_step(unsigned long n, unsigned long k)
{
	for (unsigned long i = 0; i < n; i++)
		sink += i * k;
}

JPROF_FRAME void line_two(double end)
{
	while (progs_now() < end) {
		/* Turns of microseconds, so a sampling interval spans many. */
		for (int k = 0; k < 1000; k++) {
			line_step(1000, 7);    /* LINES_TWO_A */
			line_step(1000, 13);   /* LINES_TWO_B */
		}
	}
	sink++;
}

int main(int argc, char **argv)
{
	double secs = progs_arg_seconds(argc, argv, 1, 30);

	if (argc > 2 && !strcmp(argv[2], "two"))
		line_two(progs_now() + secs);
	else
		line_work(progs_now() + secs);
	return 0;
}
