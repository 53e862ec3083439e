/* The time-ordered formats of a recording's sample times (store_keep_times):
 * "timeline", Trace Event JSON (Perfetto, chrome://tracing), and
 * "speedscope", speedscope's own file format. One track per thread, named
 * by thread name and tid; consecutive samples of a thread with the same
 * stack merge into one slice. See docs/formats.md. */
#ifndef JPROF_TIMELINE_H
#define JPROF_TIMELINE_H

#include "buf.h"
#include "export_util.h"

int timeline_render_trace(const struct export_job *job, struct buf *out);
int timeline_render_speedscope(const struct export_job *job, struct buf *out);

#endif
