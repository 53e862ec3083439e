/* .gopclntab -> function names. See gopclntab.h. The layouts are those of
 * the Go runtime's pcHeader and _func (runtime/symtab.go, runtime2.go):
 *
 *   1.18+   magic, 0, 0, minLC, ptrSize, then ptrSize words: nfunc, nfiles,
 *           textStart, funcnameOffset, cuOffset, filetabOffset, pctabOffset,
 *           pclnOffset. At pclnOffset: nfunc + 1 pairs of uint32 (entry
 *           offset from textStart, _func offset from pclnOffset); a _func
 *           starts with its uint32 entry offset and int32 name offset (into
 *           the names at funcnameOffset, which end at cuOffset).
 *   1.16-17 the same without textStart; pairs and _func.entry are words
 *           (absolute addresses).
 *   1.2-15  magic, 0, 0, minLC, ptrSize, nfunc (a word), then nfunc + 1
 *           pairs of words (address, _func offset from the table start; the
 *           last address is the end of the text); _func: entry word, then
 *           int32 name offset from the table start. */
#include "gopclntab.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define GO_MAGIC_12 0xfffffffbu
#define GO_MAGIC_116 0xfffffffau
#define GO_MAGIC_118 0xfffffff0u
#define GO_MAGIC_120 0xfffffff1u

struct rd {
	const uint8_t *p;
	size_t size;
	unsigned ptr;        /* 4 or 8 */
	bool bad;
};

static uint32_t rd32(struct rd *r, uint64_t off)
{
	uint32_t v;

	if (off > r->size || r->size - off < 4) {
		r->bad = true;
		return 0;
	}
	memcpy(&v, r->p + off, 4);
	return v;
}

static uint64_t rdword(struct rd *r, uint64_t off)
{
	uint64_t v = 0;

	if (r->ptr == 4)
		return rd32(r, off);
	if (off > r->size || r->size - off < 8) {
		r->bad = true;
		return 0;
	}
	memcpy(&v, r->p + off, 8);
	return v;
}

/* Whether a name starts at off of [0, len) and ends there with a NUL. */
static bool name_ok(const char *names, size_t len, int64_t off)
{
	return off >= 0 && (uint64_t)off < len && names[off] != '\0' &&
	       memchr(names + off, '\0', len - (size_t)off) != NULL;
}

int gopclntab_parse(const uint8_t *data, size_t size, uint64_t text, struct gopclntab *out)
{
	struct rd r = { .p = data, .size = size };
	uint64_t nfunc, ftab, fbase, textstart = 0, nameoff = 0, namesend = size, stride;
	uint32_t magic;
	bool v118, v116;
	int ret = -EINVAL;

	memset(out, 0, sizeof(*out));
	if (!data || size < 16)
		goto out;
	magic = rd32(&r, 0);
	v118 = magic == GO_MAGIC_118 || magic == GO_MAGIC_120;
	v116 = magic == GO_MAGIC_116;
	if (!v118 && !v116 && magic != GO_MAGIC_12)
		goto out;
	if (data[4] != 0 || data[5] != 0 || (data[6] != 1 && data[6] != 2 && data[6] != 4) ||
	    (data[7] != 4 && data[7] != 8))
		goto out;
	r.ptr = data[7];
	nfunc = rdword(&r, 8);
	if (v118) {
		textstart = rdword(&r, 8 + 2 * r.ptr);
		nameoff = rdword(&r, 8 + 3 * r.ptr);
		namesend = rdword(&r, 8 + 4 * r.ptr);
		ftab = rdword(&r, 8 + 7 * r.ptr);
		fbase = ftab;
		stride = 8;
		if (!textstart)
			textstart = text;  /* PIE: filled by a relocation at run time */
	} else if (v116) {
		nameoff = rdword(&r, 8 + 2 * r.ptr);
		namesend = rdword(&r, 8 + 3 * r.ptr);
		ftab = rdword(&r, 8 + 6 * r.ptr);
		fbase = ftab;
		stride = 2ull * r.ptr;
	} else {
		ftab = 8 + r.ptr;
		fbase = 0;
		stride = 2ull * r.ptr;
	}
	if (r.bad || nfunc == 0 || nameoff >= namesend || namesend > size || ftab >= size)
		goto out;
	if (nfunc > GOPCLNTAB_MAX_FUNCS) {
		ret = -E2BIG;
		goto out;
	}
	if (nfunc + 1 > (size - ftab) / stride)
		goto out;  /* the table would run past the section */
	out->names = (const char *)data + nameoff;
	out->names_len = namesend - nameoff;
	out->funcs = malloc((nfunc + 1) * sizeof(*out->funcs));
	if (!out->funcs) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint64_t i = 0; i <= nfunc; i++) {
		uint64_t at = ftab + i * stride, entry, func, name_at;
		int32_t name;

		if (v118) {
			entry = textstart + rd32(&r, at);
			func = rd32(&r, at + 4);
		} else {
			entry = rdword(&r, at);
			func = rdword(&r, at + r.ptr);
		}
		if (r.bad || (i && entry < out->funcs[i - 1].entry))
			goto out;  /* the runtime's own lookup needs them sorted */
		out->funcs[i].entry = entry;
		out->funcs[i].name = 0;
		if (i == nfunc)
			break;  /* the end of the text: no _func */
		if (func > size - fbase)
			goto out;
		name_at = fbase + func + (v118 ? 4 : r.ptr);
		name = (int32_t)rd32(&r, name_at);
		if (r.bad || !name_ok(out->names, out->names_len, name))
			goto out;
		out->funcs[i].name = (uint32_t)name;
	}
	out->nfuncs = nfunc;
	ret = 0;
out:
	if (ret < 0)
		gopclntab_release(out);
	return ret;
}

void gopclntab_release(struct gopclntab *t)
{
	if (!t)
		return;
	free(t->funcs);
	memset(t, 0, sizeof(*t));
}
