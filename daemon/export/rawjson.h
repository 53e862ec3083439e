/* The "raw" format: jprofd-profile JSON, the lossless export (frames once,
 * every stack per thread with one value per sample type). */
#ifndef JPROF_RAWJSON_H
#define JPROF_RAWJSON_H

#include "buf.h"
#include "export_util.h"

int rawjson_render(const struct export_job *job, struct buf *out);

#endif
