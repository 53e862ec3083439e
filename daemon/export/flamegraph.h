/* The "html" format: one self-contained page (daemon/flamegraph.html,
 * embedded at build time) with the profile's call tree as JSON, drawn as an
 * interactive flame graph on a canvas. */
#ifndef JPROF_FLAMEGRAPH_H
#define JPROF_FLAMEGRAPH_H

#include <stddef.h>

#include "buf.h"
#include "export_util.h"
#include "store.h"

/* The page template, generated from flamegraph.html by cmake/embed.cmake. */
extern const char flamegraph_page[];
extern const size_t flamegraph_page_len;

int flamegraph_render(const struct export_job *job, struct buf *out);

#endif
