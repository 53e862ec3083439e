/* Separate debug files from debuginfod servers (DEBUGINFOD_URLS), for
 * stripped binaries: libdebuginfod on a worker thread, so a slow or dead
 * server never holds up the event loop. The symbolizer asks for a build-id
 * once (dbginfod_want); the worker downloads into libdebuginfod's cache and
 * reports the path, which the symbolizer takes in on a later call
 * (dbginfod_take). Each lookup is cut off after DBGINFOD_TIMEOUT_S. */
#ifndef JPROF_DBGINFOD_H
#define JPROF_DBGINFOD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DBGINFOD_TIMEOUT_S 30

struct dbginfod;

struct dbginfod_result {
	uint8_t build_id[64];
	size_t build_id_len;
	char path[4096];            /* the debug file in the client's cache */
};

struct dbginfod_stats {
	uint64_t requested, found, failed;
};

/* -ENOENT when DEBUGINFOD_URLS is unset or empty (then nothing is asked). */
int dbginfod_new(struct dbginfod **out);
void dbginfod_free(struct dbginfod *d);  /* NULL-safe; waits for a lookup in flight */

/* Asks for the debug file of build-id (once per build-id; never blocks). */
void dbginfod_want(struct dbginfod *d, const uint8_t *bid, size_t len);
/* True when results wait (cheap: an atomic flag). */
bool dbginfod_pending(struct dbginfod *d);
/* Moves up to max results out; returns how many. */
size_t dbginfod_take(struct dbginfod *d, struct dbginfod_result *out, size_t max);
void dbginfod_get_stats(struct dbginfod *d, struct dbginfod_stats *out);

#endif
