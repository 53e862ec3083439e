/* The export layer's registry: renders a store into the output formats of
 * proto/jprof_formats.h, a renderer per format (export.c's table). The
 * renderers and what they share (export_util.h) sit below it. */
#ifndef JPROF_EXPORT_H
#define JPROF_EXPORT_H

#include "export_util.h"

/* Appends the rendering of st in format fmt (proto/jprof_formats.h) to out;
 * meta and opt may be NULL. 0, -EINVAL (no such format, or opt->value names
 * no sample type of st), -ENOMEM. On failure out is as before. */
int export_render(const struct store *st, const struct export_meta *meta,
		  const struct export_options *opt, enum jprof_format fmt, struct buf *out);

/* ---- the exporter registry ------------------------------------------------
 *
 * One row per format of proto/jprof_formats.h: its renderer. Adding a format
 * is a row in proto/jprof_formats.c, a renderer file here and a row in
 * export.c's table. A renderer is an export_render_fn (export_util.h). */

struct export_renderer {
	enum jprof_format id;
	export_render_fn render;
};

/* The row of a format; NULL if none. */
const struct export_renderer *export_renderer(enum jprof_format id);

#endif
