/* Helpers every renderer shares (export_util.h): numbers, frame and
 * thread names, escaping, JSON members, values and their units. */
#include "export_util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const char export_hex[] = "0123456789abcdef";

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

/* The code point of the well-formed n-byte sequence at p when it must not
 * reach a reader raw, else 0: C1 controls (U+0080..U+009F: a terminal
 * takes U+009B as CSI) and the bidirectional controls (U+061C, U+200E/F,
 * U+202A..U+202E, U+2066..U+2069), which reorder what a reader sees (a
 * function name that shows another name). */
static uint32_t export_unsafe_cp(const unsigned char *p, size_t n)
{
	if (n == 2 && p[0] == 0xc2 && p[1] < 0xa0)
		return p[1];
	if (n == 2 && p[0] == 0xd8 && p[1] == 0x9c)
		return 0x061c;
	if (n == 3 && p[0] == 0xe2 && p[1] == 0x80 &&
	    (p[2] == 0x8e || p[2] == 0x8f || (p[2] >= 0xaa && p[2] <= 0xae)))
		return 0x2000 + (p[2] - 0x80);
	if (n == 3 && p[0] == 0xe2 && p[1] == 0x81 && p[2] >= 0xa6 && p[2] <= 0xa9)
		return 0x2040 + (p[2] - 0x80);
	return 0;
}

/* The one walk over a string that escapes what its format cannot carry:
 * runs that need no escape are copied whole; escape() is asked about
 * every UTF-8 sequence (n its length, 0 for a byte that starts none) and
 * returns the length of the escape it wrote into e (at most 8 bytes), or 0
 * to pass the sequence through. An escape replaces the whole sequence (one
 * byte when n is 0). Inlined into each caller with its escape(). */
static inline int export_escaped(struct buf *out, const char *s, unsigned flags,
				 size_t (*escape)(const unsigned char *p, size_t n,
						  unsigned flags, char *e))
{
	const unsigned char *p = (const unsigned char *)s, *run = p;
	size_t left = strlen(s), n, k, len;
	char e[8];
	int r = 0;

	while (left) {
		n = export_utf8_len(p, left);
		k = n ? n : 1;
		len = escape(p, n, flags, e);
		if (len) {
			r = buf_append(out, run, (size_t)(p - run));
			if (r == 0)
				r = buf_append(out, e, len);
			if (r < 0)
				goto out;
			run = p + k;
		}
		p += k;
		left -= k;
	}
	r = buf_append(out, run, (size_t)(p - run));
out:
	return r;
}

/* export_text's rules for one sequence (export_escaped). */
static size_t export_text_escape(const unsigned char *p, size_t n, unsigned flags, char *e)
{
	bool semi = flags & EXPORT_NAME_NO_SEMICOLON;
	uint32_t cp;

	if (n == 1 && *p >= 0x20 && *p != 0x7f && !(semi && *p == ';'))
		return 0;
	cp = n > 1 ? export_unsafe_cp(p, n) : 0;
	if (n > 1 && !cp)
		return 0;
	if (cp) {
		e[0] = '\\';
		e[1] = 'u';
		e[2] = export_hex[cp >> 12];
		e[3] = export_hex[(cp >> 8) & 0xf];
		e[4] = export_hex[(cp >> 4) & 0xf];
		e[5] = export_hex[cp & 0xf];
		return 6;
	}
	e[0] = '\\';
	e[1] = 'x';
	e[2] = export_hex[*p >> 4];
	e[3] = export_hex[*p & 0xf];
	return 4;
}

/* Control bytes, DEL and bytes that are not UTF-8 become "\xNN", C1 and
 * bidirectional controls "\uXXXX" (so no format ever carries a terminal
 * escape, a line break or a reordering of the text inside a name), and
 * ';' too when asked (it separates frames in folded stacks). Spaces pass. */
int export_text(const char *s, unsigned flags, struct buf *out)
{
	if (!s || !out)
		return -EINVAL;
	return export_escaped(out, s, flags, export_text_escape);
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
		suffix = flags & EXPORT_NAME_JAVA_SUFFIX ? "_[j]" : NULL;
		break;
	case FRAME_JAVA_C1:
		suffix = flags & EXPORT_NAME_JAVA_SUFFIX ? "_[1]" : NULL;
		break;
	case FRAME_JAVA_INLINED:
		suffix = flags & EXPORT_NAME_JAVA_SUFFIX ? "_[i]" : NULL;
		break;
	case FRAME_JAVA_INTERP:
		suffix = flags & EXPORT_NAME_JAVA_SUFFIX ? "_[0]" : NULL;
		break;
	default:
		/* native, anonymous JIT code and markers keep their plain name */
		break;
	}
	if (suffix && (flags & (EXPORT_NAME_SUFFIX | EXPORT_NAME_JAVA_SUFFIX)))
		r = buf_puts(out, suffix);
out:
	return r;
}

/* ---- JSON ------------------------------------------------------------------ */

/* export_json_string's rules for one sequence (export_escaped). */
static size_t export_json_escape(const unsigned char *p, size_t n, unsigned flags, char *e)
{
	unsigned char ch = *p;

	(void)flags;
	if (n == 1 && ch >= 0x20 && ch != '"' && ch != '\\' && ch != '<' && ch != '>' && ch != '&')
		return 0;
	if (n == 3 && ch == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9)) {
		memcpy(e, p[2] == 0xa8 ? "\\u2028" : "\\u2029", 6);
		return 6;
	}
	if (n > 1)
		return 0;
	if (n == 0) {
		memcpy(e, "\\\\x", 3);
		e[3] = export_hex[ch >> 4];
		e[4] = export_hex[ch & 0xf];
		return 5;
	}
	if (ch == '"' || ch == '\\') {
		e[0] = '\\';
		e[1] = (char)ch;
		return 2;
	}
	memcpy(e, "\\u00", 4);
	e[4] = export_hex[ch >> 4];
	e[5] = export_hex[ch & 0xf];
	return 6;
}

/* A JSON string literal. Control characters become \u00XX; '<', '>', '&' and
 * U+2028/U+2029 are escaped too so the document can be embedded in an HTML
 * <script> as is. A byte that is not UTF-8 becomes the six characters
 * "\\xNN" (the decoded string then reads \xNN), which keeps the document
 * valid for strict parsers without dropping information. */
int export_json_string(struct buf *out, const char *s)
{
	int r;

	if (!s)
		return buf_append(out, "null", 4);
	r = buf_putc(out, '"');
	if (r == 0)
		r = export_escaped(out, s, 0, export_json_escape);
	if (r == 0)
		r = buf_putc(out, '"');
	return r;
}

int export_json_key(struct buf *out, const char *key, bool first)
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

int export_json_u64(struct buf *out, const char *key, uint64_t v, bool first)
{
	int r = export_json_key(out, key, first);

	return r < 0 ? r : export_put_u64(out, v);
}

int export_json_strfield(struct buf *out, const char *key, const char *v, bool first)
{
	int r = export_json_key(out, key, first);

	return r < 0 ? r : export_json_string(out, v);
}

int export_json_values(struct buf *out, const char *key, const uint64_t *v, size_t n)
{
	int r = export_json_key(out, key, false);

	if (r == 0)
		r = buf_putc(out, '[');
	for (size_t i = 0; r == 0 && i < n; i++) {
		if (i)
			r = buf_putc(out, ',');
		if (r == 0)
			r = export_put_u64(out, v[i]);
	}
	if (r == 0)
		r = buf_putc(out, ']');
	return r;
}

static int export_json_type(struct buf *out, const char *key, const struct sample_type *t)
{
	int r = export_json_key(out, key, false);

	if (r == 0)
		r = buf_putc(out, '{');
	if (r == 0)
		r = export_json_strfield(out, "type", t->type, true);
	if (r == 0)
		r = export_json_strfield(out, "unit", t->unit, false);
	if (r == 0)
		r = buf_putc(out, '}');
	return r;
}

int export_json_meta(struct buf *out, const struct export_meta *meta)
{
	int r = export_json_u64(out, "pid", meta->pid, true);

	if (r == 0)
		r = export_json_strfield(out, "comm", meta->comm, false);
	if (r == 0)
		r = export_json_strfield(out, "event", meta->event, false);
	if (r == 0)
		r = export_json_u64(out, "start_unix_ns", meta->start_unix_ns, false);
	if (r == 0)
		r = export_json_u64(out, "duration_ns", meta->duration_ns, false);
	if (r == 0)
		r = export_json_u64(out, "interval_ns", export_interval_ns(meta), false);
	if (r == 0)
		r = export_json_strfield(out, "status", meta->status, false);
	if (r == 0 && meta->period_type.type && meta->period_type.unit) {
		r = export_json_type(out, "period_type", &meta->period_type);
		if (r == 0)
			r = export_json_u64(out, "period", meta->period, false);
	}
	return r;
}

int export_json_sample_types(struct buf *out, const struct store *st)
{
	size_t i, n = store_value_count(st);
	int r = export_json_key(out, "sample_types", false);

	if (r == 0)
		r = buf_putc(out, '[');
	for (i = 0; r == 0 && i < n; i++) {
		const struct sample_type *t = store_value_type(st, i);

		r = buf_puts(out, i ? ",{" : "{");
		if (r == 0)
			r = export_json_strfield(out, "type", t->type, true);
		if (r == 0)
			r = export_json_strfield(out, "unit", t->unit, false);
		if (r == 0)
			r = buf_putc(out, '}');
	}
	if (r == 0)
		r = buf_putc(out, ']');
	return r;
}

int export_json_weight(struct buf *out, const struct store *st, const uint64_t *values)
{
	int w = export_weight_index(st);

	return w < 0 ? 0 : export_json_u64(out, "weight_ns", values[w], false);
}

/* ---- values ------------------------------------------------------------------ */

int export_value_index(const struct store *st, const struct export_options *opt)
{
	int i;

	if (!opt || !opt->value)
		return 0;
	i = store_value_find(st, opt->value);
	return i < 0 ? -EINVAL : i;
}

static bool export_is_ns(const char *unit)
{
	return unit && !strcmp(unit, "nanoseconds");
}

uint64_t export_interval_ns(const struct export_meta *meta)
{
	return export_is_ns(meta->period_type.unit) ? meta->period : 0;
}

int export_weight_index(const struct store *st)
{
	size_t n = store_value_count(st), ns = 0;

	for (size_t i = 1; i < n; i++)
		ns += export_is_ns(store_value_type(st, i)->unit);
	/* Several values in nanoseconds (a recording of cpu and lock, say):
	 * no one of them is the weight; readers take sample_types instead. */
	if (n < 2 || ns != 1 || !export_is_ns(store_value_type(st, n - 1)->unit))
		return -1;
	return (int)(n - 1);
}

const struct sample_type *export_main_type(const struct store *st)
{
	return store_value_type(st, store_value_count(st) - 1);
}

bool export_value_is_count(const struct sample_type *t)
{
	return sample_type_eq(t, &sample_type_count);
}

int export_value_text(const struct sample_type *t, uint64_t v, struct buf *out)
{
	if (export_value_is_count(t))
		return buf_printf(out, "%" PRIu64 " sample%s", v, v == 1 ? "" : "s");
	if (export_is_ns(t->unit))
		return buf_printf(out, "%.3f s of %s", (double)v / 1e9, t->type);
	if (!strcmp(t->unit, "count"))
		return buf_printf(out, "%" PRIu64 " %s", v, t->type);
	return buf_printf(out, "%" PRIu64 " %s of %s", v, t->unit, t->type);
}

/* ---- thread frames ----------------------------------------------------------- */

int export_thread_frame(const struct store *st, uint32_t pid, uint32_t tid, unsigned flags,
			struct buf *out)
{
	const char *name = store_thread_name(st, pid, tid);
	int r;

	r = buf_putc(out, '[');
	if (r == 0 && name && *name) {
		r = export_text(name, flags, out);
		if (r == 0)
			r = buf_putc(out, ' ');
	}
	if (r == 0)
		r = buf_puts(out, "tid=");
	if (r == 0)
		r = export_put_u64(out, tid);
	if (r == 0)
		r = buf_putc(out, ']');
	return r;
}

int export_target_text(const struct export_meta *meta, struct buf *out)
{
	int r = 0;

	if (!meta->pid)
		return buf_puts(out, "all processes");
	if (meta->comm) {
		r = export_text(meta->comm, 0, out);
		if (r == 0)
			r = buf_putc(out, ' ');
	}
	if (r == 0)
		r = buf_printf(out, "(pid %" PRIu32 ")", meta->pid);
	return r;
}
