/* Renders a store into the output formats. One module, one set of naming
 * rules (see symbols.h for how names are made). */
#ifndef JPROF_EXPORT_H
#define JPROF_EXPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "buf.h"
#include "store.h"

enum export_format {
	EXPORT_COLLAPSED = 0,  /* folded stacks: "root;child;leaf count\n" */
	EXPORT_JSON,           /* jprofd-profile JSON, see docs/formats.md */
	EXPORT_FORMAT_COUNT
};

struct export_meta {
	uint32_t pid;              /* 0 = whole host */
	const char *comm;          /* process name, or NULL */
	const char *event;         /* "cpu-clock" */
	uint64_t start_unix_ns;    /* wall clock at start */
	uint64_t duration_ns;
	uint64_t interval_ns;
	const char *status;        /* "complete", "cancelled", "process_exited", ... */
};

struct export_options {
	bool thread_frames;        /* prefix each stack with "[<thread name> tid=<tid>]" */
};

/* "collapsed" (also "folded"), "json"; -EINVAL otherwise. */
int export_format_parse(const char *name);
const char *export_format_name(enum export_format fmt);
bool export_format_is_binary(enum export_format fmt);

/* Appends the rendering to out. 0 or -errno. */
int export_render(const struct store *st, const struct export_meta *meta,
		  const struct export_options *opt, enum export_format fmt, struct buf *out);

/* Collapsed-format text of one frame (kernel "_[k]", Java JIT "_[j]", inlined
 * "_[i]", interpreted "_[0]"; ';' written as "\x3b"), appended to out. */
int export_collapsed_frame(const struct store_frame *f, struct buf *out);

#endif
