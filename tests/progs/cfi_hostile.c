/* A program whose unwind information is hostile to the daemon's table
 * builder (security/test_hostile_cfi.py, unit/test_cfi.c): linked with
 * cfi_hostile_long.S (one FDE of 65,000 rows, libdw's cost quadratic in
 * it) or cfi_hostile_regs.S (register numbers of a million and saved
 * states, libdw's register file copied at each). Its own main is ordinary:
 * it prints "ready", then runs in short bursts (so that sampling sees it
 * and asks for its tables) for SECONDS.
 * Usage: cfi_long|cfi_regs [SECONDS]   (default 60) */
#include <stdio.h>
#include <time.h>

#include "progs.h"

/* The function the hostile CFI describes: never called. */
void cfi_hostile_fn(void);

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

JPROF_FRAME static void burst(double secs)
{
	double end = now_s() + secs;

	while (now_s() < end)
		;
}

int main(int argc, char **argv)
{
	double end = now_s() + progs_arg_seconds(argc, argv, 1, 60);
	struct timespec nap = { 0, 80 * 1000000 };
	/* Keeps the hostile code linked in. */
	void (*volatile keep)(void) = cfi_hostile_fn;

	(void)keep;
	printf("ready\n");
	fflush(stdout);
	while (now_s() < end) {
		burst(0.02);
		nanosleep(&nap, NULL);
	}
	return 0;
}
