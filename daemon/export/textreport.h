/* The "text" format: a summary for a person at a terminal (the totals of
 * every value, the heaviest stacks and the functions with the most self of
 * the shown value; for several events a section per event's main value). */
#ifndef JPROF_TEXTREPORT_H
#define JPROF_TEXTREPORT_H

#include "buf.h"
#include "export_util.h"
#include "store.h"

#define TEXTREPORT_TOP_STACKS 10
#define TEXTREPORT_TOP_FUNCTIONS 20

int textreport_render(const struct export_job *job, struct buf *out);

#endif
