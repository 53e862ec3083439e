#include "flamegraph.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "calltree.h"

/* Text for an HTML element or attribute: the clean text (export_text) with
 * the five characters that mean something in HTML as entities. */
static int flamegraph_html_text(const char *s, struct buf *out)
{
	const char *p;
	int r = 0;

	for (p = s; r == 0 && *p; p++) {
		switch (*p) {
		case '&':
			r = buf_puts(out, "&amp;");
			break;
		case '<':
			r = buf_puts(out, "&lt;");
			break;
		case '>':
			r = buf_puts(out, "&gt;");
			break;
		case '"':
			r = buf_puts(out, "&quot;");
			break;
		case '\'':
			r = buf_puts(out, "&#39;");
			break;
		default:
			r = buf_putc(out, *p);
			break;
		}
	}
	return r;
}

/* "spin_chain (pid 42): cpu-clock, 5.00 s, 500 samples" (clean text); the
 * amount is the shown value, the event defaults to the main value's type. */
static int flamegraph_title(const struct export_job *job, const struct store_totals *tot,
			    struct buf *out)
{
	const struct export_meta *meta = job->meta;
	const struct store *st = job->st;
	int r = 0;

	r = export_target_text(meta, out);
	if (r == 0)
		r = buf_printf(out, ": %s, %.2f s, ",
			       meta->event ? meta->event : export_main_type(st)->type,
			       (double)meta->duration_ns / 1e9);
	if (r == 0 && tot->values[0] && !job->value)
		r = buf_printf(out, "%" PRIu64 " samples", tot->values[0]);
	if (r == 0 && tot->values[0] && job->value)
		r = export_value_text(store_value_type(st, job->value), tot->values[job->value], out);
	if (r == 0 && !tot->values[0])
		r = buf_puts(out, "no samples");
	return r;
}

/* The node after i in depth-first order (children in the tree's order),
 * CALLTREE_NONE after the last. */
static uint32_t flamegraph_next(const struct calltree *t, uint32_t i)
{
	const struct calltree_node *n = calltree_node(t, i);

	if (n->first_child != CALLTREE_NONE)
		return n->first_child;
	while (i != CALLTREE_NONE && calltree_node(t, i)->next_sibling == CALLTREE_NONE)
		i = calltree_node(t, i)->parent;
	return i != CALLTREE_NONE ? calltree_node(t, i)->next_sibling : CALLTREE_NONE;
}

/* ,"views":[{"type":..,"unit":..,"totals":[per node, in the order of
 * "nodes"]},...]: one per event of a recording of several, for the page's
 * selector (the tree was built with every value). */
static int flamegraph_views(const struct calltree *t, const struct export_job *job,
			    struct buf *out)
{
	const struct export_options *opt = job->opt;
	int r, v;

	r = buf_puts(out, ",\"views\":[");
	for (size_t e = 0; r == 0 && e < opt->nevent_values; e++) {
		const struct sample_type *vt;

		v = store_value_find(job->st, opt->event_values[e]);
		if (v < 0)
			return -EINVAL;
		vt = store_value_type(job->st, (size_t)v);
		r = buf_puts(out, e ? ",{" : "{");
		if (r == 0)
			r = export_json_strfield(out, "type", vt->type, true);
		if (r == 0)
			r = export_json_strfield(out, "unit",
						 export_value_is_count(vt) ? "samples" : vt->unit, false);
		if (r == 0)
			r = buf_puts(out, ",\"totals\":[");
		for (uint32_t i = 0; r == 0 && i != CALLTREE_NONE; i = flamegraph_next(t, i))
			r = buf_printf(out, "%s%" PRIu64, i ? "," : "",
				       calltree_total_values(t, i)[v]);
		if (r == 0)
			r = buf_puts(out, "]}");
	}
	if (r == 0)
		r = buf_putc(out, ']');
	return r;
}

static int flamegraph_data(const struct calltree *t, const struct export_job *job,
			   const struct store_totals *tot, const char *title, struct buf *out)
{
	const struct export_meta *meta = job->meta;
	const struct sample_type *shown = store_value_type(job->st, job->value);
	uint32_t i, nkeys = calltree_key_count(t);
	int r;

	r = buf_puts(out, "{\"meta\":{\"title\":");
	if (r == 0)
		r = export_json_string(out, title);
	if (r == 0)
		r = buf_printf(out, ",\"pid\":%" PRIu32 ",\"comm\":", meta->pid);
	if (r == 0)
		r = export_json_string(out, meta->comm);
	if (r == 0)
		r = buf_puts(out, ",\"event\":");
	if (r == 0)
		r = export_json_string(out, meta->event);
	if (r == 0)
		r = buf_puts(out, ",\"status\":");
	if (r == 0)
		r = export_json_string(out, meta->status);
	if (r == 0)
		r = buf_printf(out, ",\"start_unix_ns\":%" PRIu64 ",\"duration_ns\":%" PRIu64
			       ",\"interval_ns\":%" PRIu64 ",\"samples\":%" PRIu64
			       ",\"truncated\":%s",
			       meta->start_unix_ns, meta->duration_ns, export_interval_ns(meta),
			       tot->values[0], tot->truncated ? "true" : "false");
	/* What the numbers count: the page labels them with it. */
	if (r == 0)
		r = export_json_strfield(out, "unit", export_value_is_count(shown) ? "samples" : shown->unit,
					 false);
	if (r == 0)
		r = export_json_strfield(out, "value_type", shown->type, false);
	if (r == 0)
		r = buf_puts(out, "},\"kinds\":[");
	for (i = 0; r == 0 && i < FRAME_KIND_COUNT; i++)
		r = buf_printf(out, "\"%s\",", frame_kind_name((enum frame_kind)i));
	if (r == 0)
		r = buf_puts(out, "\"root\"],\"names\":[");
	for (i = 0; r == 0 && i < nkeys; i++) {
		if (i)
			r = buf_putc(out, ',');
		if (r == 0)
			r = export_json_string(out, calltree_key_name(t, i));
	}
	if (r == 0)
		r = buf_puts(out, "],\"nodes\":[");
	if (r < 0)
		goto out;

	/* Depth first, children in name order: five numbers per node
	 * (name index, kind index, depth, total, self). */
	i = 0;
	while (i != CALLTREE_NONE) {
		const struct calltree_node *n = calltree_node(t, i);

		if (export_cancelled(job)) {
			r = -ECANCELED;
			goto out;
		}
		uint32_t kind = n->key == CALLTREE_ROOT_KEY ? FRAME_KIND_COUNT
							    : (uint32_t)calltree_key_frame_kind(t, n->key);

		r = buf_printf(out, "%s%" PRIu32 ",%" PRIu32 ",%" PRIu32 ",%" PRIu64 ",%" PRIu64,
			       i ? "," : "", n->key == CALLTREE_ROOT_KEY ? 0 : n->key, kind,
			       n->depth, n->total, n->self);
		if (r < 0)
			goto out;
		i = flamegraph_next(t, i);
	}
	r = buf_putc(out, ']');
	if (r == 0 && job->opt->nevent_values > 1)
		r = flamegraph_views(t, job, out);
	if (r == 0)
		r = buf_putc(out, '}');
out:
	return r;
}

int flamegraph_render(const struct export_job *job, struct buf *out)
{
	const char *p = flamegraph_page, *end = flamegraph_page + flamegraph_page_len, *mark;
	struct buf title = BUF_INIT;
	struct calltree *t = NULL;
	struct store_totals tot;
	int r;

	store_get_totals(job->st, &tot);
	r = calltree_build(job, job->opt->nevent_values > 1, &t);
	if (r == 0)
		r = calltree_sort(t, CALLTREE_BY_NAME);
	if (r == 0)
		r = flamegraph_title(job, &tot, &title);
	if (r < 0)
		goto out;
	while (p < end) {
		mark = memmem(p, (size_t)(end - p), "{{", 2);
		if (!mark)
			mark = end;
		r = buf_append(out, p, (size_t)(mark - p));
		if (r < 0 || mark == end)
			goto out;
		if (!strncmp(mark, "{{TITLE}}", 9)) {
			r = flamegraph_html_text(title.data, out);
			p = mark + 9;
		} else if (!strncmp(mark, "{{DATA}}", 8)) {
			r = flamegraph_data(t, job, &tot, title.data, out);
			p = mark + 8;
		} else {
			r = buf_append(out, "{{", 2);
			p = mark + 2;
		}
		if (r < 0)
			goto out;
	}
out:
	buf_release(&title);
	calltree_free(t);
	return r;
}
