/* Shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.c): a cursor that
 * turns the fuzzer's bytes into operations and their arguments, and the one
 * way a harness reports a broken invariant (an abort, which libFuzzer saves
 * as a crash input like any sanitizer finding). */
#ifndef JPROF_FUZZ_H
#define JPROF_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fuzz_in {
	const uint8_t *p;
	size_t left;
};

static inline bool fuzz_more(const struct fuzz_in *in)
{
	return in->left > 0;
}

/* Up to n bytes; fewer at the end of the input. */
static inline size_t fuzz_take(struct fuzz_in *in, void *out, size_t n)
{
	if (n > in->left)
		n = in->left;
	memcpy(out, in->p, n);
	in->p += n;
	in->left -= n;
	return n;
}

/* Little-endian integers; missing bytes read as zero, so every prefix of
 * an input is an input too. */
static inline uint64_t fuzz_uint(struct fuzz_in *in, size_t bytes)
{
	uint8_t b[8] = { 0 };
	uint64_t v = 0;

	fuzz_take(in, b, bytes > 8 ? 8 : bytes);
	for (size_t i = 8; i-- > 0;)
		v = (v << 8) | b[i];
	return v;
}

static inline uint8_t fuzz_u8(struct fuzz_in *in)
{
	return (uint8_t)fuzz_uint(in, 1);
}

static inline uint16_t fuzz_u16(struct fuzz_in *in)
{
	return (uint16_t)fuzz_uint(in, 2);
}

/* A pointer to the next n bytes (fewer at the end, *got says how many). */
static inline const uint8_t *fuzz_bytes(struct fuzz_in *in, size_t n, size_t *got)
{
	const uint8_t *p = in->p;

	if (n > in->left)
		n = in->left;
	in->p += n;
	in->left -= n;
	*got = n;
	return p;
}

#define fuzz_fail(...)                                                   \
	do {                                                             \
		fprintf(stderr, "fuzz invariant broken at %s:%d: ", __FILE__, \
			__LINE__);                                       \
		fprintf(stderr, __VA_ARGS__);                            \
		fputc('\n', stderr);                                     \
		abort();                                                 \
	} while (0)

#define fuzz_check(cond, ...)                 \
	do {                                  \
		if (!(cond))                  \
			fuzz_fail(__VA_ARGS__); \
	} while (0)

#endif
