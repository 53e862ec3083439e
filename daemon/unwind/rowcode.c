/* Rows encoded compactly. See rowcode.h. */
#include "rowcode.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

/* Rows are sorted by pc and neighbours look alike: each is the pc's
 * distance from the previous one, then the CFA and rbp offsets as zigzag
 * varints (most fit one byte), then the kind. */
static size_t put(uint8_t *o, uint64_t v)
{
	size_t n = 0;

	do {
		o[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
		v >>= 7;
	} while (v);
	return n;
}

static bool get(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	uint64_t r = 0;

	for (unsigned sh = 0; *p < end && sh < 64; sh += 7) {
		uint8_t b = *(*p)++;

		r |= (uint64_t)(b & 0x7f) << sh;
		if (!(b & 0x80)) {
			*v = r;
			return true;
		}
	}
	return false;
}

static uint64_t zz(int64_t v)
{
	return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static int64_t unzz(uint64_t v)
{
	return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

uint8_t *rowcode_encode(const struct jp_unwind_row *rows, size_t n, size_t *len)
{
	uint8_t *o = malloc(n * ROWCODE_MAX_ROW + 1), *fit;  /* 5 + 10 + 5 + 1 bytes at worst */
	uint32_t pc = 0;
	size_t k = 0;

	if (!o)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		k += put(o + k, rows[i].pc - pc);
		k += put(o + k, zz(rows[i].cfa_off));
		k += put(o + k, zz(rows[i].rbp_off));
		o[k++] = rows[i].kind;
		pc = rows[i].pc;
	}
	fit = realloc(o, k ? k : 1);
	*len = k;
	return fit ? fit : o;
}

int rowcode_decode(const uint8_t *p, size_t len, struct jp_unwind_row *out, size_t n)
{
	const uint8_t *end = p + len;
	uint64_t d, c, b, pc = 0;

	for (size_t i = 0; i < n; i++) {
		int64_t cfa, rbp;

		if (!get(&p, end, &d) || !get(&p, end, &c) || !get(&p, end, &b) || p >= end)
			return -EINVAL;
		cfa = unzz(c);
		rbp = unzz(b);
		pc += d;
		if ((i && !d) || pc > UINT32_MAX || cfa < INT32_MIN || cfa > INT32_MAX ||
		    rbp < INT16_MIN || rbp > INT16_MAX || *p > JP_UW_SIGNAL)
			return -EINVAL;
		out[i] = (struct jp_unwind_row){ .pc = (uint32_t)pc, .cfa_off = (int32_t)cfa,
						 .rbp_off = (int16_t)rbp, .kind = *p++ };
	}
	return p == end ? 0 : -EINVAL;
}
