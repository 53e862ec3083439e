/* Separate debug files from debuginfod servers (DEBUGINFOD_URLS), for
 * stripped binaries: libdebuginfod on a worker thread, so a slow or dead
 * server never holds up the event loop. The symbolizer asks for a build-id
 * once (dbginfod_want); the worker downloads into libdebuginfod's cache and
 * reports the path, which the symbolizer takes in on a later call
 * (dbginfod_take). Each lookup is cut off after DBGINFOD_TIMEOUT_S.
 *
 * Lookups are charged to the uid whose process maps the file: each uid has
 * a budget that refills with time (DBGINFOD_UID_BURST, then one per
 * DBGINFOD_UID_REFILL_S), and the worker serves waiting uids in turn, so one
 * user mapping thousands of build-ids neither uses up lookups for good nor
 * holds back another user's. A build-id is asked once while remembered;
 * one that was not found may be asked again after DBGINFOD_RETRY_S. */
#ifndef JPROF_DBGINFOD_H
#define JPROF_DBGINFOD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DBGINFOD_TIMEOUT_S 30
#define DBGINFOD_UID_BURST 128        /* lookups a uid may start at once */
#define DBGINFOD_ROOT_BURST 1024      /* root's: every stripped file of a host */
#define DBGINFOD_UID_REFILL_S 30      /* then one more per this many seconds */
#define DBGINFOD_RETRY_S 3600         /* a build-id not found is asked again after */

struct dbginfod;

struct dbginfod_result {
	uint8_t build_id[64];
	size_t build_id_len;
	char path[4096];            /* the debug file in the client's cache */
};

struct dbginfod_stats {
	uint64_t requested, found, failed;
	uint64_t refused;           /* wants over their uid's budget (asked later) */
};

/* -ENOENT when DEBUGINFOD_URLS is unset or empty (then nothing is asked). */
int dbginfod_new(struct dbginfod **out);
void dbginfod_free(struct dbginfod *d);  /* NULL-safe; waits for a lookup in flight */

/* Asks for the debug file of build-id for a process of uid (never blocks).
 * 1: asked, now or before; 0: not now (uid's budget is spent, or the
 * queue is full): the caller may want it again later. */
int dbginfod_want(struct dbginfod *d, const uint8_t *bid, size_t len, uint32_t uid);
/* True when results wait (cheap: an atomic flag). */
bool dbginfod_pending(struct dbginfod *d);
/* Moves up to max results out; returns how many. */
size_t dbginfod_take(struct dbginfod *d, struct dbginfod_result *out, size_t max);
void dbginfod_get_stats(struct dbginfod *d, struct dbginfod_stats *out);

#endif
