/* Symbol tables too big to read on the event loop (elfsym.h), read on a
 * worker thread instead. The symbolizer queues a file it has opened (the
 * fd is handed over) or a debug file's path, with the limits the table must
 * keep to; the worker loads it and reports the table, which the symbolizer
 * takes in on a later call (symload_take). Until then the file's frames
 * keep module+offset names, as a stripped file's would. One load at a time,
 * in the order queued; at most SYMLOAD_MAX_QUEUED wait. */
#ifndef JPROF_SYMLOAD_H
#define JPROF_SYMLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "elfsym.h"

#define SYMLOAD_MAX_QUEUED 64
#define SYMLOAD_PATH_MAX 4096

struct symload;

struct symload_result {
	uint64_t token;             /* as queued */
	struct elfsym *es;          /* the table (owned by the taker); NULL: unreadable */
	char path[SYMLOAD_PATH_MAX];
};

int symload_new(struct symload **out);
void symload_free(struct symload *l);  /* NULL-safe; waits for a load in flight */

/* Queues a load. fd >= 0: that file (taken: closed by the worker, or here
 * on failure), path is its name for debug file lookups; fd < 0: the
 * regular file at path (a debug file: no further lookups). 0, -EBUSY when
 * SYMLOAD_MAX_QUEUED loads wait, -ENAMETOOLONG, -ENOMEM. */
int symload_queue(struct symload *l, uint64_t token, int fd, const char *path,
		  const char *debug_root, const struct elfsym_limits *limits);
/* True when results wait (cheap: an atomic flag). */
bool symload_pending(struct symload *l);
/* Moves up to max results out; returns how many. */
size_t symload_take(struct symload *l, struct symload_result *out, size_t max);

#endif
