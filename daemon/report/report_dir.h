/* The directory reporter: each closed window of the host view as a gzipped
 * pprof file in a directory, the newest REPORT_DIR_KEEP kept.
 *
 * The daemon runs as root, so the directory must be one no one else can
 * change: a directory (not a symlink) owned by root and not writable by
 * group or others; files are created there without following links, 0600,
 * under a temporary name and renamed when complete (a reader never sees a
 * partial file). Only files this reporter wrote are ever removed. */
#ifndef JPROF_REPORT_DIR_H
#define JPROF_REPORT_DIR_H

#include <stddef.h>

#include "report.h"

#define REPORT_DIR_KEEP 60

/* A sink writing into dir (an absolute path). keep: files kept, 0 for
 * REPORT_DIR_KEEP. 0, or -errno with the reason in err. */
int report_dir_open(const char *dir, unsigned keep, struct report_sink *out, char *err,
		    size_t errlen);

#endif
