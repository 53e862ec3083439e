#include "textreport.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "calltree.h"

struct textreport_fn {
	uint32_t key;
	uint64_t self;
};

static int textreport_cmp_fn(const void *a, const void *b)
{
	const struct textreport_fn *x = a, *y = b;

	if (x->self != y->self)
		return x->self > y->self ? -1 : 1;
	return x->key < y->key ? -1 : x->key > y->key;
}

/* Heaviest leaf nodes first: each one is a distinct stack. */
static int textreport_cmp_self(const void *a, const void *b, void *arg)
{
	const struct calltree *t = arg;
	const struct calltree_node *x = calltree_node(t, *(const uint32_t *)a);
	const struct calltree_node *y = calltree_node(t, *(const uint32_t *)b);

	if (x->self != y->self)
		return x->self > y->self ? -1 : 1;
	return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : 1;
}

static double textreport_pct(uint64_t part, uint64_t total)
{
	return total ? 100.0 * (double)part / (double)total : 0.0;
}

/* "interval 10 ms" for a period in nanoseconds, "period <n> <unit>" for
 * another unit, "no fixed period" without one (lock waits, off-CPU
 * intervals: every event above a threshold is a sample). */
static int textreport_period(const struct export_meta *meta, struct buf *out)
{
	if (!meta->period)
		return buf_puts(out, "no fixed period");
	if (meta->period_type.unit && !export_interval_ns(meta))
		return buf_printf(out, "period %" PRIu64 " %s", meta->period, meta->period_type.unit);
	return buf_printf(out, "interval %.3g ms", (double)export_interval_ns(meta) / 1e6);
}

/* "total: 190 samples (1.900 s of cpu), 3 distinct stacks": the count, then
 * every other value. */
static int textreport_total(const struct store *st, const struct store_totals *tot,
			    struct buf *out)
{
	size_t i, n = store_value_count(st);
	int r;

	r = buf_puts(out, "total: ");
	if (r == 0)
		r = export_value_text(store_value_type(st, 0), tot->values[0], out);
	for (i = 1; r == 0 && i < n; i++) {
		r = buf_puts(out, i == 1 ? " (" : ", ");
		if (r == 0)
			r = export_value_text(store_value_type(st, i), tot->values[i], out);
		if (r == 0 && i + 1 == n)
			r = buf_putc(out, ')');
	}
	if (r == 0)
		r = buf_printf(out, ", %zu distinct stack%s\n", tot->stacks, tot->stacks == 1 ? "" : "s");
	return r;
}

static int textreport_header(const struct store *st, const struct export_meta *meta,
			     const struct store_totals *tot, struct buf *out)
{
	int r;

	r = buf_puts(out, "jprofd profile: ");
	if (r == 0)
		r = export_target_text(meta, out);
	if (r == 0)
		r = buf_printf(out, "\nevent %s, ", meta->event ? meta->event : "unknown");
	if (r == 0)
		r = textreport_period(meta, out);
	if (r == 0)
		r = buf_printf(out, ", duration %.2f s, status %s\n", (double)meta->duration_ns / 1e9,
			       meta->status ? meta->status : "unknown");
	if (r == 0 && !tot->values[0])
		r = buf_puts(out, "total: no samples\n");
	if (r == 0 && tot->values[0])
		r = textreport_total(st, tot, out);
	if (r == 0 && tot->truncated)
		r = buf_printf(out, "truncated: %" PRIu64 " samples went to [truncated] stacks "
			       "(the profile hit its size limit)\n", tot->truncated_samples);
	return r;
}

/* The top stacks and functions by the job's value. */
static int textreport_section(const struct export_job *job, const struct store_totals *tot,
			      struct buf *out)
{
	const struct sample_type *vt = store_value_type(job->st, job->value);
	struct textreport_fn *fns = NULL;
	uint32_t *leaves = NULL, i, node, nkeys;
	struct calltree *t = NULL;
	size_t n, nleaves = 0, k, shown;
	uint64_t all = tot->values[job->value];
	int r;

	r = calltree_build(job, false, &t);
	if (r < 0)
		goto out;
	n = calltree_count(t);
	nkeys = calltree_key_count(t);
	leaves = malloc(n * sizeof(*leaves));
	fns = calloc(nkeys, sizeof(*fns));
	if (!leaves || !fns) {
		r = -ENOMEM;
		goto out;
	}
	for (i = 0; i < nkeys; i++)
		fns[i].key = i;
	for (i = 1; i < n; i++) {
		const struct calltree_node *nd = calltree_node(t, i);

		if (!nd->self)
			continue;
		leaves[nleaves++] = i;
		fns[nd->key].self += nd->self;
	}
	qsort_r(leaves, nleaves, sizeof(*leaves), textreport_cmp_self, t);
	qsort(fns, nkeys, sizeof(*fns), textreport_cmp_fn);

	shown = nleaves < TEXTREPORT_TOP_STACKS ? nleaves : TEXTREPORT_TOP_STACKS;
	r = buf_printf(out, "\n=== top %zu of %zu stacks, leaf first ===\n", shown, nleaves);
	for (k = 0; r == 0 && k < shown; k++) {
		const struct calltree_node *leaf = calltree_node(t, leaves[k]);

		r = buf_printf(out, "\n--- %zu: ", k + 1);
		if (r == 0)
			r = export_value_text(vt, leaf->self, out);
		if (r == 0)
			r = buf_printf(out, " (%.2f%%)\n", textreport_pct(leaf->self, all));
		for (node = leaves[k]; r == 0 && node != 0; node = calltree_node(t, node)->parent) {
			r = buf_puts(out, "  ");
			if (r == 0)
				r = calltree_key_text(t, calltree_node(t, node)->key,
						      EXPORT_NAME_SUFFIX | EXPORT_NAME_JAVA_SUFFIX, out);
			if (r == 0)
				r = buf_putc(out, '\n');
		}
	}
	if (r < 0)
		goto out;

	r = buf_printf(out, "\n=== top functions by self %s ===\n\n"
		       "  %10s  %8s  %s\n", vt->type, "self", "percent", "function");
	for (k = 0; r == 0 && k < nkeys && k < TEXTREPORT_TOP_FUNCTIONS && fns[k].self; k++) {
		r = buf_printf(out, "  %10" PRIu64 "  %7.2f%%  ", fns[k].self,
			       textreport_pct(fns[k].self, all));
		if (r == 0)
			r = calltree_key_text(t, fns[k].key,
					      EXPORT_NAME_SUFFIX | EXPORT_NAME_JAVA_SUFFIX, out);
		if (r == 0)
			r = buf_putc(out, '\n');
	}
out:
	free(leaves);
	free(fns);
	calltree_free(t);
	return r;
}

int textreport_render(const struct export_job *job, struct buf *out)
{
	const struct export_options *opt = job->opt;
	struct export_job sec = *job;
	struct store_totals tot;
	int r, v;

	store_get_totals(job->st, &tot);
	r = textreport_header(job->st, job->meta, &tot, out);
	if (r < 0 || !tot.values[0])
		return r;
	if (opt->nevent_values <= 1)
		return textreport_section(job, &tot, out);
	/* Several events: a section for each one's main value. */
	for (size_t e = 0; r == 0 && e < opt->nevent_values; e++) {
		v = store_value_find(job->st, opt->event_values[e]);
		if (v < 0)
			return -EINVAL;
		sec.value = (size_t)v;
		r = buf_printf(out, "\n##### %s (%s) #####\n", opt->event_values[e],
			       store_value_type(job->st, sec.value)->unit);
		if (r == 0 && !tot.values[sec.value])
			r = buf_puts(out, "\nno samples\n");
		else if (r == 0)
			r = textreport_section(&sec, &tot, out);
	}
	return r;
}
