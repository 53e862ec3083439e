#include "rawjson.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct json_list {
	struct buf *out;
	bool first;
	const struct store *st;
	const struct export_job *job;
};

/* Opens the next object of a list with its first member, "pid". */
static int rawjson_item(struct json_list *l, uint32_t pid)
{
	int r = 0;

	if (!l->first)
		r = buf_putc(l->out, ',');
	l->first = false;
	if (r == 0)
		r = buf_putc(l->out, '{');
	if (r == 0)
		r = export_json_u64(l->out, "pid", pid, true);
	return r;
}

static int rawjson_thread(uint32_t pid, uint32_t tid, const char *name, void *arg)
{
	struct json_list *l = arg;
	int r = rawjson_item(l, pid);

	if (r == 0)
		r = export_json_u64(l->out, "tid", tid, false);
	if (r == 0)
		r = export_json_strfield(l->out, "name", name, false);
	if (r == 0)
		r = buf_putc(l->out, '}');
	return r;
}

static int rawjson_process(uint32_t pid, const char *comm, void *arg)
{
	struct json_list *l = arg;
	struct store_labels pl;
	int r = rawjson_item(l, pid);

	if (r == 0)
		r = export_json_strfield(l->out, "comm", comm, false);
	if (r == 0 && l->st && store_process_labels(l->st, pid, &pl)) {
		/* Only continuous profiles carry labels; "" members are left out. */
		if (*pl.cgroup)
			r = export_json_strfield(l->out, "cgroup", pl.cgroup, false);
		if (r == 0 && *pl.unit)
			r = export_json_strfield(l->out, "unit", pl.unit, false);
		if (r == 0 && *pl.container)
			r = export_json_strfield(l->out, "container", pl.container, false);
	}
	if (r == 0)
		r = buf_putc(l->out, '}');
	return r;
}

static int rawjson_stack(const struct store_stack *s, void *arg)
{
	struct json_list *l = arg;
	struct buf *out = l->out;
	uint32_t i;
	int r;

	if (export_cancelled(l->job))
		return -ECANCELED;
	r = rawjson_item(l, s->pid);

	if (r == 0)
		r = export_json_u64(out, "tid", s->tid, false);
	if (r == 0)
		r = export_json_key(out, "frames", false);
	if (r == 0)
		r = buf_putc(out, '[');
	for (i = 0; r == 0 && i < s->nframes; i++) {
		if (i)
			r = buf_putc(out, ',');
		if (r == 0)
			r = export_put_u64(out, s->frames[i]);
	}
	if (r == 0)
		r = buf_putc(out, ']');
	if (r == 0)
		r = export_json_u64(out, "samples", s->values[0], false);
	if (r == 0)
		r = export_json_weight(out, l->st, s->values);
	if (r == 0)
		r = export_json_values(out, "values", s->values, store_value_count(l->st));
	if (r == 0)
		r = buf_putc(out, '}');
	return r;
}

int rawjson_render(const struct export_job *job, struct buf *out)
{
	const struct store *st = job->st;
	struct json_list list = { out, true, st, job };
	struct store_totals t;
	size_t i, n;
	int r;

	store_get_totals(st, &t);
	r = buf_puts(out, "{\"format\":\"jprofd-profile\",\"version\":1,\"meta\":{");
	if (r == 0)
		r = export_json_meta(out, job->meta);
	if (r == 0)
		r = buf_putc(out, '}');
	if (r == 0)
		r = export_json_sample_types(out, st);
	if (r == 0)
		r = buf_puts(out, ",\"totals\":{");
	if (r == 0)
		r = export_json_u64(out, "samples", t.values[0], true);
	if (r == 0)
		r = export_json_weight(out, st, t.values);
	if (r == 0)
		r = export_json_u64(out, "stacks", t.stacks, false);
	if (r == 0)
		r = export_json_u64(out, "frames", t.frames, false);
	if (r == 0)
		r = export_json_key(out, "truncated", false);
	if (r == 0)
		r = buf_puts(out, t.truncated ? "true" : "false");
	if (r == 0)
		r = export_json_u64(out, "truncated_samples", t.truncated_samples, false);
	if (r == 0)
		r = export_json_values(out, "values", t.values, store_value_count(st));
	if (r == 0)
		r = buf_puts(out, "},\"frames\":[");
	if (r < 0)
		goto out;

	n = store_frame_count(st);
	for (i = 0; i < n; i++) {
		const struct store_frame *f = store_frame_get(st, (uint32_t)i);

		r = buf_puts(out, i ? ",{" : "{");
		if (r == 0)
			r = export_json_strfield(out, "name", f->name, true);
		if (r == 0)
			r = export_json_strfield(out, "kind", frame_kind_name(f->kind), false);
		if (r == 0)
			r = export_json_strfield(out, "module", f->module ? f->module : "", false);
		if (r == 0)
			r = buf_putc(out, '}');
		if (r < 0)
			goto out;
	}

	r = buf_puts(out, "],\"threads\":[");
	if (r == 0)
		r = store_foreach_thread(st, rawjson_thread, &list);
	if (r < 0)
		goto out;
	list.first = true;
	r = buf_puts(out, "],\"processes\":[");
	if (r == 0)
		r = store_foreach_process(st, rawjson_process, &list);
	if (r < 0)
		goto out;
	list.first = true;
	r = buf_puts(out, "],\"stacks\":[");
	if (r == 0)
		r = store_foreach_stack(st, rawjson_stack, &list);
	if (r == 0)
		r = buf_puts(out, "]}\n");
out:
	return r;
}

