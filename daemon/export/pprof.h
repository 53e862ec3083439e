/* The "pprof" format: a gzip-compressed perftools.profiles.Profile
 * (daemon/export/profile.proto), encoded with protobuf-c and compressed
 * with zlib. The store's sample types (the last one the default), period
 * type and period from the meta; one location and one function per frame;
 * one mapping per module; labels thread, tid, pid and comm on every sample.
 * See docs/formats.md. */
#ifndef JPROF_PPROF_H
#define JPROF_PPROF_H

#include "buf.h"
#include "export.h"
#include "store.h"

int pprof_render(const struct export_job *job, struct buf *out);

#endif
