#include "export.h"

#include "calltree.h"
#include "flamegraph.h"
#include "pprof.h"
#include "textreport.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const char export_hex[] = "0123456789abcdef";

int export_format_parse(const char *name)
{
	if (!name)
		return -EINVAL;
	if (!strcmp(name, "collapsed") || !strcmp(name, "folded"))
		return EXPORT_COLLAPSED;
	if (!strcmp(name, "raw"))
		return EXPORT_RAW;
	if (!strcmp(name, "json"))
		return EXPORT_JSON;
	if (!strcmp(name, "html"))
		return EXPORT_HTML;
	if (!strcmp(name, "pprof"))
		return EXPORT_PPROF;
	if (!strcmp(name, "text"))
		return EXPORT_TEXT;
	return -EINVAL;
}

const char *export_format_name(enum export_format fmt)
{
	switch (fmt) {
	case EXPORT_COLLAPSED:
		return "collapsed";
	case EXPORT_RAW:
		return "raw";
	case EXPORT_JSON:
		return "json";
	case EXPORT_HTML:
		return "html";
	case EXPORT_PPROF:
		return "pprof";
	case EXPORT_TEXT:
		return "text";
	default:
		return "unknown";
	}
}

bool export_format_is_binary(enum export_format fmt)
{
	return fmt == EXPORT_PPROF;
}

/* Length of the well-formed UTF-8 sequence at p (1..4), or 0 when the byte
 * at p does not start one: stray continuation bytes, overlong forms,
 * surrogates and code points past U+10FFFF are all rejected, so whatever we
 * pass through is text that strict decoders (python's json) accept. */
static size_t export_utf8_len(const unsigned char *p, size_t left)
{
	unsigned char c = p[0];
	size_t n, i;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4;
	else
		return 0;
	if (left < n)
		return 0;
	for (i = 1; i < n; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	if (c == 0xe0 && p[1] < 0xa0)        /* overlong 3-byte */
		return 0;
	if (c == 0xed && p[1] >= 0xa0)       /* UTF-16 surrogates */
		return 0;
	if (c == 0xf0 && p[1] < 0x90)        /* overlong 4-byte */
		return 0;
	if (c == 0xf4 && p[1] >= 0x90)       /* past U+10FFFF */
		return 0;
	return n;
}

static int export_put_hex_escape(struct buf *out, unsigned char c)
{
	char esc[4] = { '\\', 'x', export_hex[c >> 4], export_hex[c & 0xf] };

	return buf_append(out, esc, sizeof(esc));
}

/* Appends the decimal text of v without going through printf: a big JSON
 * profile has millions of numbers. */
int export_put_u64(struct buf *out, uint64_t v)
{
	char tmp[20];
	size_t i = sizeof(tmp);

	do {
		tmp[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	return buf_append(out, tmp + i, sizeof(tmp) - i);
}

/* ---- frame naming --------------------------------------------------------- */

/* Control bytes, DEL and bytes that are not UTF-8 become "\xNN" (so no
 * format ever carries a terminal escape or a line break inside a name), and
 * ';' too when asked (it separates frames in folded stacks). Spaces pass. */
int export_text(const char *s, unsigned flags, struct buf *out)
{
	const unsigned char *p = (const unsigned char *)s, *run = p;
	bool semi = flags & EXPORT_NAME_NO_SEMICOLON;
	size_t left, n;
	int r = 0;

	if (!s || !out)
		return -EINVAL;
	left = strlen(s);
	while (left) {
		n = export_utf8_len(p, left);
		if (n == 1 && *p >= 0x20 && *p != 0x7f && !(semi && *p == ';')) {
			p++;
			left--;
			continue;
		}
		if (n > 1) {
			p += n;
			left -= n;
			continue;
		}
		r = buf_append(out, run, (size_t)(p - run));
		if (r == 0)
			r = export_put_hex_escape(out, *p);
		if (r < 0)
			goto out;
		p++;
		left--;
		run = p;
	}
	r = buf_append(out, run, (size_t)(p - run));
out:
	return r;
}

int export_frame_name(const struct store_frame *f, unsigned flags, struct buf *out)
{
	const char *suffix = NULL;
	int r;

	if (!f || !out || !f->name)
		return -EINVAL;
	r = export_text(f->name, flags, out);
	if (r < 0)
		goto out;
	switch (f->kind) {
	case FRAME_KERNEL:
		if (f->module && *f->module) {
			r = buf_puts(out, " [");
			if (r == 0)
				r = export_text(f->module, flags, out);
			if (r == 0)
				r = buf_putc(out, ']');
			if (r < 0)
				goto out;
		}
		suffix = "_[k]";
		break;
	case FRAME_JAVA_JIT:
		suffix = "_[j]";
		break;
	case FRAME_JAVA_INLINED:
		suffix = "_[i]";
		break;
	case FRAME_JAVA_INTERP:
		suffix = "_[0]";
		break;
	default:
		/* native, anonymous JIT code and markers keep their plain name */
		break;
	}
	if (suffix && (flags & EXPORT_NAME_SUFFIX))
		r = buf_puts(out, suffix);
out:
	return r;
}

/* ---- collapsed ---------------------------------------------------------- */

int export_collapsed_frame(const struct store_frame *f, struct buf *out)
{
	return export_frame_name(f, EXPORT_NAME_SUFFIX | EXPORT_NAME_NO_SEMICOLON, out);
}

/* One line candidate: a stack plus its optional thread root frame. */
struct collapsed_item {
	const struct store_stack *s;
	size_t prefix_off;  /* into collapsed_ctx.prefix */
	size_t prefix_len;  /* 0 = no thread frame */
	uint64_t samples;
};

struct collapsed_ctx {
	struct buf text;     /* every frame's text, rendered once */
	size_t *text_off;    /* frame id -> offset in text; [nframes] = end */
	struct buf prefix;   /* thread frames */
};

static const char export_no_stack[] = "[no_stack]";

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
		*p = export_no_stack;
		*len = sizeof(export_no_stack) - 1;
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

static int collapsed_thread_frame(const struct store *st, const struct store_stack *s,
				  struct buf *out)
{
	const char *name = store_thread_name(st, s->pid, s->tid);
	int r;

	r = buf_putc(out, '[');
	if (r == 0 && name && *name) {
		r = export_text(name, EXPORT_NAME_NO_SEMICOLON, out);
		if (r == 0)
			r = buf_putc(out, ' ');
	}
	if (r == 0)
		r = buf_puts(out, "tid=");
	if (r == 0)
		r = export_put_u64(out, s->tid);
	if (r == 0)
		r = buf_putc(out, ']');
	return r;
}

static int export_collapsed(const struct store *st, const struct export_options *opt,
			    struct buf *out)
{
	struct collapsed_ctx c = { BUF_INIT, NULL, BUF_INIT };
	size_t nframes = store_frame_count(st), nstacks = store_stack_count(st), i, j, k;
	struct collapsed_item *items = NULL;
	bool thread_frames = opt && opt->thread_frames;
	uint64_t samples;
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
		r = export_collapsed_frame(store_frame_get(st, (uint32_t)i), &c.text);
		if (r < 0)
			goto out;
	}
	c.text_off[nframes] = c.text.len;
	for (i = 0; i < nstacks; i++) {
		items[i].s = store_stack_get(st, i);
		items[i].samples = items[i].s->samples;
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
		r = collapsed_thread_frame(st, items[i].s, &c.prefix);
		if (r < 0)
			goto out;
		items[i].prefix_len = c.prefix.len - items[i].prefix_off;
	}
	qsort_r(items, nstacks, sizeof(*items), collapsed_cmp, &c);

	/* Equal lines are adjacent now: stacks of different threads (or frames
	 * that differ only in what this format does not show) merge into one. */
	for (i = 0; i < nstacks; i = j) {
		samples = items[i].samples;
		for (j = i + 1; j < nstacks && !collapsed_cmp(&items[i], &items[j], &c); j++)
			samples += items[j].samples;
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
			r = export_put_u64(out, samples);
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

/* ---- raw JSON (jprofd-profile) --------------------------------------------------------------- */

/* A JSON string literal. Control characters become \u00XX; '<', '>', '&' and
 * U+2028/U+2029 are escaped too so the document can be embedded in an HTML
 * <script> as is. A byte that is not UTF-8 becomes the six characters
 * "\\xNN" (the decoded string then reads \xNN), which keeps the document
 * valid for strict parsers without dropping information. */
int export_json_string(struct buf *out, const char *s)
{
	const unsigned char *p = (const unsigned char *)s, *run;
	size_t left, n;
	char esc[6];
	int r;

	if (!s)
		return buf_append(out, "null", 4);
	left = strlen(s);
	r = buf_putc(out, '"');
	if (r < 0)
		goto out;
	run = p;
	while (left) {
		unsigned char ch = *p;

		n = export_utf8_len(p, left);
		if (n == 1 && ch >= 0x20 && ch != '"' && ch != '\\' && ch != '<' && ch != '>' &&
		    ch != '&') {
			p++;
			left--;
			continue;
		}
		if (n == 3 && ch == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9)) {
			r = buf_append(out, run, (size_t)(p - run));
			if (r == 0)
				r = buf_puts(out, p[2] == 0xa8 ? "\\u2028" : "\\u2029");
			if (r < 0)
				goto out;
			p += 3;
			left -= 3;
			run = p;
			continue;
		}
		if (n > 1) {
			p += n;
			left -= n;
			continue;
		}
		r = buf_append(out, run, (size_t)(p - run));
		if (r < 0)
			goto out;
		if (n == 0) {
			r = buf_puts(out, "\\\\x");
			if (r == 0)
				r = buf_append(out, (char[2]){ export_hex[ch >> 4], export_hex[ch & 0xf] }, 2);
		} else if (ch == '"' || ch == '\\') {
			esc[0] = '\\';
			esc[1] = (char)ch;
			r = buf_append(out, esc, 2);
		} else {
			memcpy(esc, "\\u00", 4);
			esc[4] = export_hex[ch >> 4];
			esc[5] = export_hex[ch & 0xf];
			r = buf_append(out, esc, 6);
		}
		if (r < 0)
			goto out;
		p++;
		left--;
		run = p;
	}
	r = buf_append(out, run, (size_t)(p - run));
	if (r == 0)
		r = buf_putc(out, '"');
out:
	return r;
}

/* Appends `"key":` (keys are our own literals: no escaping needed). */
static int export_json_key(struct buf *out, const char *key, bool first)
{
	int r = 0;

	if (!first)
		r = buf_putc(out, ',');
	if (r == 0)
		r = buf_putc(out, '"');
	if (r == 0)
		r = buf_puts(out, key);
	if (r == 0)
		r = buf_append(out, "\":", 2);
	return r;
}

static int export_json_u64(struct buf *out, const char *key, uint64_t v, bool first)
{
	int r = export_json_key(out, key, first);

	return r < 0 ? r : export_put_u64(out, v);
}

static int export_json_strfield(struct buf *out, const char *key, const char *v, bool first)
{
	int r = export_json_key(out, key, first);

	return r < 0 ? r : export_json_string(out, v);
}

struct json_list {
	struct buf *out;
	bool first;
	const struct store *st;
};

static int export_json_thread(uint32_t pid, uint32_t tid, const char *name, void *arg)
{
	struct json_list *l = arg;
	int r = 0;

	if (!l->first)
		r = buf_putc(l->out, ',');
	l->first = false;
	if (r == 0)
		r = buf_putc(l->out, '{');
	if (r == 0)
		r = export_json_u64(l->out, "pid", pid, true);
	if (r == 0)
		r = export_json_u64(l->out, "tid", tid, false);
	if (r == 0)
		r = export_json_strfield(l->out, "name", name, false);
	if (r == 0)
		r = buf_putc(l->out, '}');
	return r;
}

static int export_json_process(uint32_t pid, const char *comm, void *arg)
{
	struct json_list *l = arg;
	struct store_labels pl;
	int r = 0;

	if (!l->first)
		r = buf_putc(l->out, ',');
	l->first = false;
	if (r == 0)
		r = buf_putc(l->out, '{');
	if (r == 0)
		r = export_json_u64(l->out, "pid", pid, true);
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

static int export_json_stack(const struct store_stack *s, void *arg)
{
	struct json_list *l = arg;
	struct buf *out = l->out;
	uint32_t i;
	int r = 0;

	if (!l->first)
		r = buf_putc(out, ',');
	l->first = false;
	if (r == 0)
		r = buf_putc(out, '{');
	if (r == 0)
		r = export_json_u64(out, "pid", s->pid, true);
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
		r = export_json_u64(out, "samples", s->samples, false);
	if (r == 0)
		r = export_json_u64(out, "weight_ns", s->weight_ns, false);
	if (r == 0)
		r = buf_putc(out, '}');
	return r;
}

static int export_raw(const struct store *st, const struct export_meta *meta, struct buf *out)
{
	static const struct export_meta no_meta;
	struct json_list list = { out, true, st };
	struct store_totals t;
	size_t i, n;
	int r;

	if (!meta)
		meta = &no_meta;
	store_get_totals(st, &t);

	r = buf_puts(out, "{\"format\":\"jprofd-profile\",\"version\":1,\"meta\":{");
	if (r == 0)
		r = export_json_u64(out, "pid", meta->pid, true);
	if (r == 0)
		r = export_json_strfield(out, "comm", meta->comm, false);
	if (r == 0)
		r = export_json_strfield(out, "event", meta->event, false);
	if (r == 0)
		r = export_json_u64(out, "start_unix_ns", meta->start_unix_ns, false);
	if (r == 0)
		r = export_json_u64(out, "duration_ns", meta->duration_ns, false);
	if (r == 0)
		r = export_json_u64(out, "interval_ns", meta->interval_ns, false);
	if (r == 0)
		r = export_json_strfield(out, "status", meta->status, false);
	if (r == 0)
		r = buf_puts(out, "},\"totals\":{");
	if (r == 0)
		r = export_json_u64(out, "samples", t.samples, true);
	if (r == 0)
		r = export_json_u64(out, "weight_ns", t.weight_ns, false);
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
		r = store_foreach_thread(st, export_json_thread, &list);
	if (r < 0)
		goto out;
	list.first = true;
	r = buf_puts(out, "],\"processes\":[");
	if (r == 0)
		r = store_foreach_process(st, export_json_process, &list);
	if (r < 0)
		goto out;
	list.first = true;
	r = buf_puts(out, "],\"stacks\":[");
	if (r == 0)
		r = store_foreach_stack(st, export_json_stack, &list);
	if (r == 0)
		r = buf_puts(out, "]}\n");
out:
	return r;
}

int export_render(const struct store *st, const struct export_meta *meta,
		  const struct export_options *opt, enum export_format fmt, struct buf *out)
{
	size_t start;
	int r;

	if (!st || !out)
		return -EINVAL;
	start = out->len;
	switch (fmt) {
	case EXPORT_COLLAPSED:
		r = export_collapsed(st, opt, out);
		break;
	case EXPORT_RAW:
		r = export_raw(st, meta, out);
		break;
	case EXPORT_JSON:
		r = calltree_render_json(st, meta, opt, out);
		break;
	case EXPORT_HTML:
		r = flamegraph_render(st, meta, opt, out);
		break;
	case EXPORT_PPROF:
		r = pprof_render(st, meta, out);
		break;
	case EXPORT_TEXT:
		r = textreport_render(st, meta, opt, out);
		break;
	default:
		r = -EINVAL;
		break;
	}
	/* No half-written profile: on failure the caller's buffer is as before. */
	if (r < 0 && out->data) {
		out->len = start;
		out->data[start] = '\0';
	}
	return r < 0 ? r : 0;
}
