/* Syscall-heavy workload: main -> do_reads -> read_block -> read(2) on
 * /dev/zero with a 64 KiB buffer, so most samples land in the kernel
 * (ksys_read -> vfs_read -> read_iter_zero).
 * Usage: read_zero [SECONDS]   (default 30) */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include "progs.h"

static char buf[64 * 1024];
static volatile unsigned long total;

/* libc's read() has no frame pointer, so a frame-pointer walk from inside
 * it skips its direct caller; this wrapper is that caller, which keeps
 * do_reads itself on the stack. */
JPROF_FRAME ssize_t read_block(int fd)
{
	ssize_t n = read(fd, buf, sizeof(buf));

	total += (unsigned long)n;
	return n;
}

JPROF_FRAME int do_reads(int fd, double end)
{
	while (progs_now() < end) {
		for (int i = 0; i < 64; i++)
			if (read_block(fd) < 0)
				return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	double secs = progs_arg_seconds(argc, argv, 1, 30);
	int fd = open("/dev/zero", O_RDONLY | O_CLOEXEC);
	int ret;

	if (fd < 0) {
		perror("read_zero: open /dev/zero");
		return 1;
	}
	ret = do_reads(fd, progs_now() + secs);
	if (ret < 0)
		perror("read_zero: read");
	close(fd);
	return ret < 0 ? 1 : 0;
}
