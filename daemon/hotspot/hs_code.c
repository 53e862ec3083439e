/* The code heap, read from outside: CodeCache::_heaps lists the heaps;
 * each is a VirtualSpace of segments (2^_log2_segment_size bytes) and a
 * segment map with one byte per segment: 0 at a block's first segment, a
 * backward hop count (1..0xFE) elsewhere in it, 0xFF in free space. A
 * block starts with a HeapBlock header (length in segments, used flag)
 * and the CodeBlob follows it. */
#include "hs_int.h"

#include "elfsym.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define HS_SEG_FREE 0xFF

/* The name last read for a blob: most blobs share a few name strings. */
struct hs_blobname {
	uint64_t ptr;
	char name[sizeof(((struct hs_blob *)0)->name)];
};

struct hs_heap {
	uint64_t low, high;          /* committed code */
	uint64_t segmap;             /* its segment map's first byte */
	uint64_t nseg;               /* segments in [low, high) */
	unsigned log2;
};

static bool hs_code_ready(const struct hs_offsets *o)
{
	return o->codecache_heaps && o->garray_len >= 0 && o->garray_data >= 0 &&
	       o->heap_memory >= 0 && o->heap_segmap >= 0 && o->heap_log2_seg >= 0 &&
	       o->vspace_low >= 0 && o->vspace_high >= 0 && o->hblock_length >= 0 &&
	       o->hblock_used >= 0 && o->hblock_size > 0 && o->blob_name >= 0 &&
	       o->blob_size >= 0 && o->blob_frame_size >= 0;
}

static int hs_vspace(struct hs *h, uint64_t vs, uint64_t *low, uint64_t *high)
{
	int ret = hs_read(h, vs + (uint64_t)h->off.vspace_low, low, 8);

	return ret < 0 ? ret : hs_read(h, vs + (uint64_t)h->off.vspace_high, high, 8);
}

/* The heaps as they are now (they commit more as code is added). */
static int hs_heaps(struct hs *h, struct hs_heap *heaps, unsigned *n)
{
	const struct hs_offsets *o = &h->off;
	uint64_t ga, data, ptrs[HS_HEAPS_MAX];
	int32_t len;
	int ret;

	*n = 0;
	if (!hs_code_ready(o))
		return -ENOENT;
	ret = hs_read(h, o->codecache_heaps, &ga, 8);
	if (ret < 0)
		return ret;
	ret = hs_read(h, ga + (uint64_t)o->garray_len, &len, 4);
	if (ret < 0)
		return ret;
	ret = hs_read(h, ga + (uint64_t)o->garray_data, &data, 8);
	if (ret < 0)
		return ret;
	if (len < 0 || len > HS_HEAPS_MAX)
		return -EBADMSG;
	ret = hs_read(h, data, ptrs, (size_t)len * 8);
	if (ret < 0)
		return ret;
	for (int32_t i = 0; i < len; i++) {
		struct hs_heap *hp = &heaps[*n];
		uint64_t smap_high;
		int32_t log2;

		ret = hs_vspace(h, ptrs[i] + (uint64_t)o->heap_memory, &hp->low, &hp->high);
		if (ret < 0)
			return ret;
		ret = hs_vspace(h, ptrs[i] + (uint64_t)o->heap_segmap, &hp->segmap, &smap_high);
		if (ret < 0)
			return ret;
		ret = hs_read(h, ptrs[i] + (uint64_t)o->heap_log2_seg, &log2, 4);
		if (ret < 0)
			return ret;
		if (log2 < 4 || log2 > 16 || hp->high < hp->low || hp->high - hp->low > (1ull << 34))
			return -EBADMSG;
		hp->log2 = (unsigned)log2;
		hp->nseg = (hp->high - hp->low) >> log2;
		/* The map is committed with the code it describes. */
		if (smap_high < hp->segmap || smap_high - hp->segmap < hp->nseg)
			return -EBADMSG;
		(*n)++;
	}
	return 0;
}

static enum hs_blob_kind hs_kind_by_name(const char *name)
{
	if (!strcmp(name, "nmethod"))
		return HS_BLOB_NMETHOD;
	if (!strcmp(name, "native nmethod"))
		return HS_BLOB_NATIVE;
	if (!strcmp(name, "Interpreter"))
		return HS_BLOB_INTERPRETER;
	if (strstr(name, "adapter") || strstr(name, "Adapter"))
		return HS_BLOB_ADAPTER;
	return HS_BLOB_STUB;
}

/* How many bytes from a block's start hold every field hs_blob_read
 * uses (header, CodeBlob, nmethod): all are read in one go. */
static size_t hs_block_span(const struct hs_offsets *o)
{
	const int32_t blob[] = { o->blob_size + 4, o->blob_frame_size + 4, o->blob_name + 8,
				 o->blob_kind + 1, o->nmethod_method + 8, o->nmethod_comp_level + 1 };
	size_t span = (size_t)(o->hblock_used + 1);

	if ((size_t)(o->hblock_length + o->hblock_length_size) > span)
		span = (size_t)(o->hblock_length + o->hblock_length_size);
	for (size_t i = 0; i < sizeof(blob) / sizeof(blob[0]); i++)
		if (blob[i] > 0 && (size_t)o->hblock_size + (size_t)blob[i] > span)
			span = (size_t)o->hblock_size + (size_t)blob[i];
	return span;
}

static uint64_t hs_field(const unsigned char *p, int32_t off, size_t width)
{
	uint64_t v = 0;

	memcpy(&v, p + off, width);  /* little-endian */
	return v;
}

/* The blob of the used block at segment seg: its header checked against
 * the heap, the blob's fields read (one read for all, one for a name not
 * seen last time). */
static int hs_blob_read(struct hs *h, const struct hs_heap *hp, uint64_t seg, struct hs_blob *b,
			struct hs_blobname *last)
{
	const struct hs_offsets *o = &h->off;
	uint64_t block = hp->low + (seg << hp->log2), blen, name_ptr, room;
	unsigned char raw[1024];
	const unsigned char *blob = raw + o->hblock_size;
	size_t span = hs_block_span(o);
	int32_t size;
	int ret;

	room = (hp->nseg - seg) << hp->log2;
	if (span > sizeof(raw))
		return -EBADMSG;
	/* A small last blob's span may end past the committed heap: what lies
	 * past it reads as zero (a size of 0 is refused below; the nmethod
	 * fields are used only for blobs as large as the span). */
	memset(raw, 0, span);
	ret = hs_read(h, block, raw, span < room ? span : (size_t)room);
	if (ret < 0)
		return ret;
	if (!raw[o->hblock_used])
		return -ENOENT;
	blen = hs_field(raw, o->hblock_length, (size_t)o->hblock_length_size);
	if (!blen || blen > hp->nseg - seg)
		return -EBADMSG;
	memset(b, 0, sizeof(*b));
	b->start = block + (uint64_t)o->hblock_size;
	size = (int32_t)hs_field(blob, o->blob_size, 4);
	b->frame_size = (int32_t)hs_field(blob, o->blob_frame_size, 4);
	name_ptr = hs_field(blob, o->blob_name, 8);
	/* The blob lies within its block. */
	if (size <= 0 || (uint64_t)size > (blen << hp->log2) - (uint64_t)o->hblock_size)
		return -EBADMSG;
	b->size = (uint32_t)size;
	if (name_ptr != last->ptr) {
		char name[HS_STR_MAX];
		int n = hs_read_str(h, name_ptr, name, sizeof(name));

		last->ptr = name_ptr;
		last->name[0] = '\0';
		if (n >= 0)
			elfsym_sanitize(name, (size_t)n, last->name, sizeof(last->name));
	}
	memcpy(b->name, last->name, sizeof(b->name));
	if (o->blob_kind >= 0 && o->kind_nmethod >= 0) {
		uint8_t k = blob[o->blob_kind];

		if (k == o->kind_nmethod)
			b->kind = strcmp(b->name, "native nmethod") ? HS_BLOB_NMETHOD : HS_BLOB_NATIVE;
		else if (k == o->kind_adapter)
			b->kind = HS_BLOB_ADAPTER;
		else
			b->kind = hs_kind_by_name(b->name);
		if ((b->kind == HS_BLOB_NMETHOD || b->kind == HS_BLOB_NATIVE) && k != o->kind_nmethod)
			b->kind = HS_BLOB_STUB;  /* named so, but not one */
	} else {
		b->kind = hs_kind_by_name(b->name);
	}
	if ((b->kind == HS_BLOB_NMETHOD || b->kind == HS_BLOB_NATIVE) && o->nmethod_method >= 0) {
		b->method = hs_field(blob, o->nmethod_method, 8);
		/* An int on JDK 17, a u1 enum later: the low byte either way. */
		if (o->nmethod_comp_level >= 0 && blob[o->nmethod_comp_level] <= 4)
			b->comp_level = blob[o->nmethod_comp_level];
	}
	return 0;
}

int hs_blob_at(struct hs *h, uint64_t pc, struct hs_blob *out)
{
	struct hs_heap heaps[HS_HEAPS_MAX], *hp = NULL;
	unsigned char win[4096];
	uint64_t seg, first, win_lo = 0, win_n = 0;
	unsigned n;
	int ret;

	ret = hs_heaps(h, heaps, &n);
	if (ret < 0)
		return ret;
	for (unsigned i = 0; i < n && !hp; i++)
		if (pc >= heaps[i].low && pc < heaps[i].low + (heaps[i].nseg << heaps[i].log2))
			hp = &heaps[i];
	if (!hp)
		return -ENOENT;
	seg = first = (pc - hp->low) >> hp->log2;
	/* Hop back to the block's first segment, the map read a window at a
	 * time, backwards. Every hop is >= 1; no blob spans more than
	 * HS_BLOB_SEGS_MAX segments, so a walk longer than that is a forged
	 * map, not a long one. */
	for (;;) {
		unsigned char v;

		if (first - seg > HS_BLOB_SEGS_MAX)
			return -EBADMSG;
		if (seg < win_lo || seg >= win_lo + win_n) {
			win_lo = seg >= sizeof(win) - 1 ? seg - (sizeof(win) - 1) : 0;
			win_n = seg - win_lo + 1;
			ret = hs_read(h, hp->segmap + win_lo, win, win_n);
			if (ret < 0)
				return ret;
		}
		v = win[seg - win_lo];
		if (v == HS_SEG_FREE)
			return -ENOENT;
		if (!v)
			break;
		if (v > seg)
			return -EBADMSG;
		seg -= v;
	}
	ret = hs_blob_read(h, hp, seg, out, &(struct hs_blobname){ 0 });
	if (ret < 0)
		return ret;
	return pc >= out->start && pc - out->start < out->size ? 0 : -ENOENT;
}

int hs_code_bounds(struct hs *h, uint64_t *low, uint64_t *high, unsigned max)
{
	struct hs_heap heaps[HS_HEAPS_MAX];
	unsigned n;
	int ret = hs_heaps(h, heaps, &n);

	if (ret < 0)
		return ret;
	for (unsigned i = 0; i < n && i < max; i++) {
		low[i] = heaps[i].low;
		high[i] = heaps[i].low + (heaps[i].nseg << heaps[i].log2);
	}
	return (int)n;
}

int hs_code_heaps(struct hs *h, struct hs_heap_info *out, unsigned max)
{
	struct hs_heap heaps[HS_HEAPS_MAX];
	unsigned n;
	int ret = hs_heaps(h, heaps, &n);

	if (ret < 0)
		return ret;
	for (unsigned i = 0; i < n && i < max; i++)
		out[i] = (struct hs_heap_info){
			.low = heaps[i].low,
			.high = heaps[i].low + (heaps[i].nseg << heaps[i].log2),
			.segmap = heaps[i].segmap,
			.log2 = heaps[i].log2,
		};
	return (int)n;
}

int hs_blobs_foreach(struct hs *h, int (*fn)(const struct hs_blob *b, void *arg), void *arg)
{
	struct hs_heap heaps[HS_HEAPS_MAX];
	struct hs_blobname last = { 0 };
	unsigned char *map = NULL;
	unsigned n;
	int ret;

	ret = hs_heaps(h, heaps, &n);
	if (ret < 0)
		return ret;
	for (unsigned i = 0; i < n; i++) {
		const struct hs_heap *hp = &heaps[i];

		if (hp->nseg > HS_SEGMAP_MAX) {
			ret = -EBADMSG;
			goto out;
		}
		free(map);
		map = malloc(hp->nseg ? hp->nseg : 1);
		if (!map) {
			ret = -ENOMEM;
			goto out;
		}
		ret = hs_read(h, hp->segmap, map, hp->nseg);
		if (ret < 0)
			goto out;
		for (uint64_t s = 0; s < hp->nseg; s++) {
			struct hs_blob b;

			if (map[s] != 0)
				continue;
			ret = hs_blob_read(h, hp, s, &b, &last);
			if (ret == -ENOENT || ret == -EBADMSG || ret == -EFAULT)
				continue;  /* freed or changing under us: the next one */
			if (ret < 0)
				goto out;
			ret = fn(&b, arg);
			if (ret)
				goto out;
		}
	}
	ret = 0;
out:
	free(map);
	return ret;
}
