/* The exporter registry (export.h): a renderer per format. */
#include "export.h"

#include <errno.h>

#include "calltree.h"
#include "collapsed.h"
#include "flamegraph.h"
#include "jfr.h"
#include "pprof.h"
#include "rawjson.h"
#include "textreport.h"
#include "timeline.h"

/* ---- the registry ------------------------------------------------------------ */

static const struct export_renderer export_renderers[] = {
	{ JPROF_FMT_COLLAPSED, collapsed_render },
	{ JPROF_FMT_RAW, rawjson_render },
	{ JPROF_FMT_JSON, calltree_render_json },
	{ JPROF_FMT_HTML, flamegraph_render },
	{ JPROF_FMT_PPROF, pprof_render },
	{ JPROF_FMT_TEXT, textreport_render },
	{ JPROF_FMT_TIMELINE, timeline_render_trace },
	{ JPROF_FMT_SPEEDSCOPE, timeline_render_speedscope },
	{ JPROF_FMT_JFR, jfr_render },
};
_Static_assert(sizeof(export_renderers) / sizeof(export_renderers[0]) == JPROF_FMT_COUNT,
	       "every format of proto/jprof_formats.h needs a renderer");

const struct export_renderer *export_renderer(enum jprof_format id)
{
	for (size_t i = 0; i < JPROF_FMT_COUNT; i++)
		if (export_renderers[i].id == id)
			return &export_renderers[i];
	return NULL;
}

int export_render(const struct store *st, const struct export_meta *meta,
		  const struct export_options *opt, enum jprof_format fmt, struct buf *out)
{
	static const struct export_meta no_meta;
	static const struct export_options no_opt;
	const struct export_renderer *rd = export_renderer(fmt);
	struct export_job job = { st, meta ? meta : &no_meta, opt ? opt : &no_opt, 0 };
	size_t start;
	int r;

	if (!st || !out || !rd)
		return -EINVAL;
	r = export_value_index(st, opt);
	if (r < 0)
		return r;
	job.value = (size_t)r;
	start = out->len;
	r = rd->render(&job, out);
	/* No half-written profile: on failure the caller's buffer is as before. */
	if (r < 0 && out->data) {
		out->len = start;
		out->data[start] = '\0';
	}
	return r < 0 ? r : 0;
}

