#include "collapsed.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int export_collapsed_frame(const struct store_frame *f, bool java_types, struct buf *out)
{
	return export_frame_name(f, EXPORT_NAME_SUFFIX | EXPORT_NAME_NO_SEMICOLON |
				 (java_types ? EXPORT_NAME_JAVA_SUFFIX : 0), out);
}

/* One line candidate: a stack plus its optional thread root frame. */
struct collapsed_item {
	const struct store_stack *s;
	size_t prefix_off;  /* into collapsed_ctx.prefix */
	size_t prefix_len;  /* 0 = no thread frame */
	uint64_t value;
};

struct collapsed_ctx {
	struct buf text;     /* every frame's text, rendered once */
	size_t *text_off;    /* frame id -> offset in text; [nframes] = end */
	struct buf prefix;   /* thread frames */
};

static const char collapsed_no_stack[] = EXPORT_NO_STACK;

static size_t collapsed_nseg(const struct collapsed_item *it)
{
	return (it->prefix_len ? 1 : 0) + (it->s->nframes ? it->s->nframes : 1);
}

static void collapsed_seg(const struct collapsed_ctx *c, const struct collapsed_item *it,
			  size_t i, const char **p, size_t *len)
{
	uint32_t id;

	if (it->prefix_len) {
		if (i == 0) {
			*p = c->prefix.data + it->prefix_off;
			*len = it->prefix_len;
			return;
		}
		i--;
	}
	if (!it->s->nframes) {
		*p = collapsed_no_stack;
		*len = sizeof(collapsed_no_stack) - 1;
		return;
	}
	id = it->s->frames[i];
	*p = c->text.data + c->text_off[id];
	*len = c->text_off[id + 1] - c->text_off[id];
}

/* Byte order of the joined line text "seg;seg;..." without building it:
 * frame texts never contain a raw ';', so when one segment ends before the
 * other, the separator (or end of line) decides against the other's byte. */
static int collapsed_cmp(const void *a, const void *b, void *arg)
{
	const struct collapsed_item *x = a, *y = b;
	const struct collapsed_ctx *c = arg;
	size_t nx = collapsed_nseg(x), ny = collapsed_nseg(y), i, lx, ly;
	const char *px, *py;
	int r, cx, cy;

	for (i = 0;; i++) {
		collapsed_seg(c, x, i, &px, &lx);
		collapsed_seg(c, y, i, &py, &ly);
		r = memcmp(px, py, lx < ly ? lx : ly);
		if (r)
			return r;
		if (lx != ly) {
			if (lx < ly) {
				cx = i + 1 < nx ? ';' : -1;
				cy = (unsigned char)py[lx];
			} else {
				cx = (unsigned char)px[ly];
				cy = i + 1 < ny ? ';' : -1;
			}
			return cx < cy ? -1 : 1;
		}
		if (i + 1 >= nx || i + 1 >= ny)
			return (i + 1 < nx) - (i + 1 < ny);
	}
}

int collapsed_render(const struct export_job *job, struct buf *out)
{
	const struct store *st = job->st;
	struct collapsed_ctx c = { BUF_INIT, NULL, BUF_INIT };
	size_t nframes = store_frame_count(st), nstacks = store_stack_count(st), i, j, k;
	struct collapsed_item *items = NULL;
	bool thread_frames = job->opt->thread_frames;
	uint64_t value;
	const char *p;
	size_t len;
	int r = 0;

	if (!nstacks)
		goto out;
	c.text_off = malloc((nframes + 1) * sizeof(*c.text_off));
	items = calloc(nstacks, sizeof(*items));
	if (!c.text_off || !items) {
		r = -ENOMEM;
		goto out;
	}
	for (i = 0; i < nframes; i++) {
		c.text_off[i] = c.text.len;
		r = export_collapsed_frame(store_frame_get(st, (uint32_t)i), job->opt->java_types,
					   &c.text);
		if (r < 0)
			goto out;
	}
	c.text_off[nframes] = c.text.len;
	for (i = 0; i < nstacks; i++) {
		items[i].s = store_stack_get(st, i);
		items[i].value = items[i].s->values[job->value];
		if (!thread_frames)
			continue;
		/* Consecutive stacks of one thread share one rendered frame. */
		if (i && items[i - 1].s->pid == items[i].s->pid &&
		    items[i - 1].s->tid == items[i].s->tid) {
			items[i].prefix_off = items[i - 1].prefix_off;
			items[i].prefix_len = items[i - 1].prefix_len;
			continue;
		}
		items[i].prefix_off = c.prefix.len;
		r = export_thread_frame(st, items[i].s->pid, items[i].s->tid, EXPORT_NAME_NO_SEMICOLON,
					&c.prefix);
		if (r < 0)
			goto out;
		items[i].prefix_len = c.prefix.len - items[i].prefix_off;
	}
	qsort_r(items, nstacks, sizeof(*items), collapsed_cmp, &c);

	/* Equal lines are adjacent now: stacks of different threads (or frames
	 * that differ only in what this format does not show) merge into one. */
	for (i = 0; i < nstacks; i = j) {
		if (export_cancelled(job)) {
			r = -ECANCELED;
			goto out;
		}
		value = items[i].value;
		for (j = i + 1; j < nstacks && !collapsed_cmp(&items[i], &items[j], &c); j++)
			value += items[j].value;
		/* Several events: a stack of another event has none of the value
		 * shown (a line of 0 would only be noise in a flame graph). */
		if (!value && job->opt->nevent_values > 1)
			continue;
		for (k = 0; k < collapsed_nseg(&items[i]); k++) {
			collapsed_seg(&c, &items[i], k, &p, &len);
			if (k) {
				r = buf_putc(out, ';');
				if (r < 0)
					goto out;
			}
			r = buf_append(out, p, len);
			if (r < 0)
				goto out;
		}
		r = buf_putc(out, ' ');
		if (r == 0)
			r = export_put_u64(out, value);
		if (r == 0)
			r = buf_putc(out, '\n');
		if (r < 0)
			goto out;
	}
out:
	free(items);
	free(c.text_off);
	buf_release(&c.text);
	buf_release(&c.prefix);
	return r;
}

