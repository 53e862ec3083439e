#include "report_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

#define REPORT_DIR_NAME_MAX 64

struct report_dir {
	int dirfd;
	char *path;
	unsigned keep;
	/* The names of the files written, oldest first: a ring of keep. */
	char (*names)[REPORT_DIR_NAME_MAX];
	unsigned first, count;
};

/* Writes all of data to fd. 0 or -errno. */
static int report_dir_write_all(int fd, const char *data, size_t len)
{
	while (len) {
		ssize_t n = write(fd, data, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		data += n;
		len -= (size_t)n;
	}
	return 0;
}

static int report_dir_deliver(void *ctx, const struct report_window *w, const struct buf *data)
{
	struct report_dir *d = ctx;
	char name[REPORT_DIR_NAME_MAX], tmp[REPORT_DIR_NAME_MAX + 8];
	int fd, ret;

	snprintf(name, sizeof(name), "jprofd-%" PRIu64 "-%06" PRIu64 ".pb.gz",
		 (uint64_t)(w->start_unix_ns / 1000000000u), w->seq);
	snprintf(tmp, sizeof(tmp), ".%s.tmp", name);
	fd = openat(d->dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	ret = report_dir_write_all(fd, data->data, data->len);
	if (close(fd) < 0 && ret == 0)
		ret = -errno;
	if (ret == 0 && renameat(d->dirfd, tmp, d->dirfd, name) < 0)
		ret = -errno;
	if (ret < 0) {
		unlinkat(d->dirfd, tmp, 0);
		return ret;
	}
	/* Retention: the oldest file this reporter wrote goes. */
	if (d->count == d->keep) {
		if (unlinkat(d->dirfd, d->names[d->first], 0) < 0 && errno != ENOENT)
			log_warn("report dir %s: cannot remove %s: %s", d->path, d->names[d->first],
				 strerror(errno));
		d->first = (d->first + 1) % d->keep;
		d->count--;
	}
	snprintf(d->names[(d->first + d->count) % d->keep], REPORT_DIR_NAME_MAX, "%s", name);
	d->count++;
	return 0;
}

static void report_dir_free(void *ctx)
{
	struct report_dir *d = ctx;

	if (!d)
		return;
	if (d->dirfd >= 0)
		close(d->dirfd);
	free(d->names);
	free(d->path);
	free(d);
}

int report_dir_open(const char *dir, unsigned keep, struct report_sink *out, char *err,
		    size_t errlen)
{
	struct report_dir *d = calloc(1, sizeof(*d));
	struct stat st;
	int ret = -ENOMEM;

	if (!d) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	d->dirfd = -1;
	d->keep = keep ? keep : REPORT_DIR_KEEP;
	d->path = strdup(dir);
	d->names = calloc(d->keep, sizeof(*d->names));
	if (!d->path || !d->names) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	d->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (d->dirfd < 0) {
		ret = -errno;
		snprintf(err, errlen, "report_dir %s: %s", dir, strerror(-ret));
		goto out;
	}
	if (fstat(d->dirfd, &st) < 0) {
		ret = -errno;
		snprintf(err, errlen, "report_dir %s: %s", dir, strerror(-ret));
		goto out;
	}
	/* Root writes there: nobody else may swap a name for a link. */
	if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) {
		ret = -EPERM;
		snprintf(err, errlen, "report_dir %s must be owned by uid %u and not writable by "
			 "group or others", dir, (unsigned)geteuid());
		goto out;
	}
	*out = (struct report_sink){
		.name = "dir", .format = JPROF_FMT_PPROF, .deliver = report_dir_deliver,
		.free = report_dir_free, .ctx = d,
	};
	d = NULL;
	ret = 0;
out:
	report_dir_free(d);
	return ret;
}
