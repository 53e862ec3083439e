/* Encoding pieces of the JFR writer (see jfr.h): the chunk's integers and
 * strings, events framed by their size, and the interning table every
 * constant pool of the recording is built from. */
#ifndef JPROF_JFR_ENC_H
#define JPROF_JFR_ENC_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "htab.h"

/* The chunk's compressed integers: 7 bits a byte, low bits first, the high
 * bit set while more follow; the ninth byte, if reached, carries 8 bits.
 * An int field is its 32-bit two's complement value (-1 = 0xffffffff). */
int jfr_put_varint(struct buf *out, uint64_t v);
static inline int jfr_put_int(struct buf *out, int32_t v)
{
	return jfr_put_varint(out, (uint32_t)v);
}
/* n varints in a row (event headers, pool entries; a boolean is the
 * one-byte varint 0 or 1). */
int jfr_put_varints(struct buf *out, const uint64_t *v, size_t n);
/* A string: NULL as null, "" as empty, else UTF-8 with its byte length.
 * Callers pass text already cleaned by export_text(). */
int jfr_put_string(struct buf *out, const char *s);
int jfr_put_string_n(struct buf *out, const char *s, size_t len);
/* Big-endian fixed-size integers (the chunk header). */
void jfr_patch_u64(struct buf *out, size_t at, uint64_t v);
/* Appends body framed as an event: its total size (including the size
 * field itself) first. 0 or -ENOMEM. */
int jfr_put_sized(struct buf *out, const struct buf *body);

/* Keys (any bytes) numbered in the order they were first seen, from 0:
 * symbols by their text, classes by (name, package), methods by
 * (class, name, descriptor), threads by (pid, tid). A pool entry's id in
 * the file is its number + 1, so 0 stays free for null. */
struct jfr_intern {
	struct buf keys;       /* the keys back to back */
	size_t *off;           /* key i starts at off[i] and ends at off[i + 1] */
	size_t n, cap;
	struct htab_index idx;
};

/* Number of key[0..len), added if new (*added set when not NULL); -errno. */
int64_t jfr_intern(struct jfr_intern *t, const void *key, size_t len, int *added);
/* Key i and its length. */
const char *jfr_intern_key(const struct jfr_intern *t, size_t i, size_t *len);
void jfr_intern_release(struct jfr_intern *t);

#endif
