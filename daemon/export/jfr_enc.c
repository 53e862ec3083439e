#include "jfr_enc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* String encodings a JFR reader knows; the writer uses three of them. */
enum {
	JFR_STR_NULL = 0,
	JFR_STR_EMPTY = 1,
	JFR_STR_UTF8 = 3,
};

int jfr_put_varint(struct buf *out, uint64_t v)
{
	unsigned char b[9];
	size_t n = 0;

	while (n < 8 && v > 0x7f) {
		b[n++] = (unsigned char)(v | 0x80);
		v >>= 7;
	}
	b[n++] = (unsigned char)v;  /* the ninth byte holds the last 8 bits whole */
	return buf_append(out, b, n);
}

int jfr_put_varints(struct buf *out, const uint64_t *v, size_t n)
{
	size_t mark = out->len;
	int r = 0;

	for (size_t i = 0; r == 0 && i < n; i++)
		r = jfr_put_varint(out, v[i]);
	if (r < 0)
		out->len = mark;
	return r;
}

int jfr_put_string_n(struct buf *out, const char *s, size_t len)
{
	size_t mark = out->len;
	int r;

	if (!s)
		return buf_putc(out, JFR_STR_NULL);
	if (len == 0)
		return buf_putc(out, JFR_STR_EMPTY);
	r = buf_putc(out, JFR_STR_UTF8);
	if (r == 0)
		r = jfr_put_varint(out, len);
	if (r == 0)
		r = buf_append(out, s, len);
	if (r < 0)
		out->len = mark;
	return r;
}

int jfr_put_string(struct buf *out, const char *s)
{
	return jfr_put_string_n(out, s, s ? strlen(s) : 0);
}

void jfr_patch_u64(struct buf *out, size_t at, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		out->data[at + (size_t)i] = (char)(v & 0xff);
}

static size_t jfr_varint_len(uint64_t v)
{
	size_t n = 1;

	while (n < 9 && v > 0x7f) {
		v >>= 7;
		n++;
	}
	return n;
}

int jfr_put_sized(struct buf *out, const struct buf *body)
{
	size_t total = body->len + 1, mark = out->len;
	int r;

	/* The size counts its own bytes: grow until it covers them. */
	while (jfr_varint_len(total) + body->len != total)
		total = jfr_varint_len(total) + body->len;
	r = jfr_put_varint(out, total);
	if (r == 0)
		r = buf_append(out, body->data, body->len);
	if (r < 0)
		out->len = mark;
	return r;
}

static uint32_t jfr_key_hash(const void *key, size_t len)
{
	return (uint32_t)htab_mix64(htab_fnv1a(HTAB_FNV_SEED, key, len));
}

const char *jfr_intern_key(const struct jfr_intern *t, size_t i, size_t *len)
{
	*len = t->off[i + 1] - t->off[i];
	return t->keys.data + t->off[i];
}

int64_t jfr_intern(struct jfr_intern *t, const void *key, size_t len, int *added)
{
	uint32_t hash = jfr_key_hash(key, len), i;
	struct htab_probe p;
	int r;

	if (added)
		*added = 0;
	for (i = htab_index_first(&t->idx, hash, &p); i != HTAB_NONE; i = htab_index_next(&t->idx, &p)) {
		size_t have_len;
		const char *have = jfr_intern_key(t, i, &have_len);

		if (have_len == len && (len == 0 || !memcmp(have, key, len)))
			return i;
	}
	/* off has n + 1 entries: one past the last key marks its end. */
	if (t->n + 2 > t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 64;
		size_t *off = realloc(t->off, cap * sizeof(*off));

		if (!off)
			return -ENOMEM;
		if (!t->off)
			off[0] = 0;
		t->off = off;
		t->cap = cap;
	}
	if (t->n >= HTAB_NONE - 1)
		return -E2BIG;
	r = len ? buf_append(&t->keys, key, len) : 0;
	if (r == 0)
		r = htab_index_insert(&t->idx, hash, (uint32_t)t->n);
	if (r < 0) {
		t->keys.len = t->off[t->n];
		return r;
	}
	t->off[++t->n] = t->keys.len;
	if (added)
		*added = 1;
	return (int64_t)t->n - 1;
}

void jfr_intern_release(struct jfr_intern *t)
{
	buf_release(&t->keys);
	free(t->off);
	htab_index_release(&t->idx);
	memset(t, 0, sizeof(*t));
}
