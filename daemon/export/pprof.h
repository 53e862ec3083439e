/* The "pprof" format: a gzip-compressed perftools.profiles.Profile
 * (daemon/export/profile.proto), encoded with protobuf-c and compressed
 * with zlib. The store's sample types (the last one the default), period
 * type and period from the meta; one location and one function per frame;
 * one mapping per module; labels thread, tid, pid and comm on every sample.
 * See docs/formats.md. */
#ifndef JPROF_PPROF_H
#define JPROF_PPROF_H

#include "buf.h"
#include "export_util.h"
#include "store.h"

int pprof_render(const struct export_job *job, struct buf *out);

/* Source lines of user frames (symbols/lines.h, wired by main.c: this layer
 * does not link symbols): fills up to max frames, innermost first, and
 * returns how many; deadline_ns 0 queues the lookup without waiting. With a
 * source set, each rendering waits for lines at most budget_ms in all
 * (0: never waits; renderings run on the event loop); frames not resolved
 * by then go without. fn NULL: no lines (the default). */
typedef size_t (*pprof_lines_fn)(void *arg, const struct frame_loc *loc, uint64_t deadline_ns,
				 struct frame_line *out, size_t max);
void pprof_set_lines(pprof_lines_fn fn, void *arg, unsigned budget_ms);
/* Queues the lines of st's user frames from index from on (a recording
 * calls it as its profile grows, so that the worker has answered by the
 * time the profile is rendered); returns the next index to start from. */
size_t pprof_lines_prefetch(const struct store *st, size_t from);

#endif
