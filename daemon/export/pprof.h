/* The "pprof" format: a gzip-compressed perftools.profiles.Profile
 * (daemon/profile.proto), encoded with protobuf-c and compressed with zlib.
 * Sample types samples/count and cpu/nanoseconds; one location and one
 * function per frame; one mapping per module; labels thread, tid, pid and
 * comm on every sample. See docs/formats.md. */
#ifndef JPROF_PPROF_H
#define JPROF_PPROF_H

#include "buf.h"
#include "export.h"
#include "store.h"

int pprof_render(const struct store *st, const struct export_meta *meta, struct buf *out);

#endif
