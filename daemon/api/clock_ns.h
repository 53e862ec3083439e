/* A clock read as nanoseconds, for the api layer's request handlers and the
 * HTTP listener. */
#ifndef JPROF_CLOCK_NS_H
#define JPROF_CLOCK_NS_H

#include <stdint.h>
#include <time.h>

static inline uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif
