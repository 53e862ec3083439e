/* The library unwind_chain dlopen()s (libunwind_dso.so): the same chain as
 * its own uw_a -> uw_b -> uw_c, without frame pointers, in code that was
 * not mapped when the recording started. */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "progs.h"

#define NOTAIL() __asm__ volatile("" ::: "memory")

static char buf[64 * 1024];
static volatile unsigned long total;

JPROF_FRAME void dso_c(int fd, double end)
{
	while (progs_now() < end) {
		ssize_t n = read(fd, buf, sizeof(buf));

		if (n < 0)
			exit(1);
		total += (unsigned long)n;
	}
}

JPROF_FRAME void dso_b(int fd, double end)
{
	dso_c(fd, end);
	NOTAIL();
}

JPROF_FRAME void dso_a(double end)
{
	int fd = open("/dev/zero", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		exit(1);
	dso_b(fd, end);
	NOTAIL();
	close(fd);
}
