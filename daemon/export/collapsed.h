/* The "collapsed" format (also "folded"): one "root;...;leaf value" line per
 * distinct stack text, sorted by bytes, as flame-graph tools read it. */
#ifndef JPROF_COLLAPSED_H
#define JPROF_COLLAPSED_H

#include "buf.h"
#include "export_util.h"

int collapsed_render(const struct export_job *job, struct buf *out);

/* Collapsed-format text of one frame (kernel "_[k]"; with java_types Java JIT
 * "_[j]", C1 "_[1]", inlined "_[i]", interpreted "_[0]"; ';' written as "\x3b"),
 * appended to out. */
int export_collapsed_frame(const struct store_frame *f, bool java_types, struct buf *out);

#endif
