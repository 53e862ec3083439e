/* The "text" format: a summary for a person at a terminal (total samples,
 * the heaviest stacks, the functions with the most self samples). */
#ifndef JPROF_TEXTREPORT_H
#define JPROF_TEXTREPORT_H

#include "buf.h"
#include "export.h"
#include "store.h"

#define TEXTREPORT_TOP_STACKS 10
#define TEXTREPORT_TOP_FUNCTIONS 20

int textreport_render(const struct store *st, const struct export_meta *meta,
		      const struct export_options *opt, struct buf *out);

#endif
