/* Shared helpers for the test workloads. The frame names these programs
 * produce are what the integration tests assert, so every function on the
 * asserted path must stay a real, separately named function: no inlining,
 * no cloning (".constprop"), no tail calls (progs.cmake adds
 * -fno-optimize-sibling-calls). */
#ifndef JPROF_PROGS_H
#define JPROF_PROGS_H

#include <stdlib.h>
#include <time.h>

#if defined(__clang__)
#define JPROF_FRAME __attribute__((noinline, used))
#else
#define JPROF_FRAME __attribute__((noinline, noclone, used))
#endif

/* Seconds from argv[i], or def when absent. Exits 2 on garbage so a typo in
 * a test shows up as a failed workload, not a silently different one. */
static inline double progs_arg_seconds(int argc, char **argv, int i, double def)
{
	char *end;
	double v;

	if (argc <= i)
		return def;
	v = strtod(argv[i], &end);
	if (end == argv[i] || *end != '\0' || v < 0)
		exit(2);
	return v;
}

static inline double progs_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#endif
