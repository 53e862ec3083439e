/* The "collapsed" format (also "folded"): one "root;...;leaf value" line per
 * distinct stack text, sorted by bytes, as flame-graph tools read it. */
#ifndef JPROF_COLLAPSED_H
#define JPROF_COLLAPSED_H

#include "buf.h"
#include "export.h"

int collapsed_render(const struct export_job *job, struct buf *out);

#endif
