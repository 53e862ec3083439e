/* A hot loop on a known source line, inlined into its caller, for the
 * file:line test (test_lines.py): it finds the lines by the marker
 * comments. Built -O2 -g (progs.cmake), so the loop's address has a line
 * and an inlined-subroutine scope in DWARF.
 * With "two", line_two instead: two hot loops of one function, each on its
 * own line, taking turns (pprof keeps one location per sampled address, so
 * both lines show).
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

JPROF_FRAME void line_two(double end)
{
	while (progs_now() < end) {
		for (unsigned long i = 0; i < 1000000; i++) sink += i * 7;   /* LINES_TWO_A */
		for (unsigned long i = 0; i < 1000000; i++) sink ^= i * 13;  /* LINES_TWO_B */
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
