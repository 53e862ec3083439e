/* Synthetic profiles shared by test_formats.c and the make_profile fixture:
 * a large store with many distinct stacks, and a small one whose names need
 * escaping in every format. Header-only: two small users. */
#ifndef JPROF_TEST_SYNTH_STORE_H
#define JPROF_TEST_SYNTH_STORE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "store.h"

/* store_add of one stack with the CPU store's two values (sample count,
 * weight in ns): the shape most tests add samples in. */
static inline int synth_add(struct store *st, uint32_t pid, uint32_t tid, const uint32_t *frames,
			    size_t n, uint64_t samples, uint64_t weight_ns)
{
	const uint64_t values[2] = { samples, weight_ns };

	return store_add(st, &(struct store_sample){ .pid = pid, .tid = tid, .frames = frames,
						     .nframes = n, .values = values });
}

/* nstacks distinct stacks, 8..40 frames deep, over 5000 frames of mixed
 * kinds, shaped like a real program: few roots, wide in the middle. One
 * stack ("main;worker;hot_loop") gets a tenth of the samples. */
static inline struct store *synth_big_store(size_t nstacks)
{
	struct store_limits lim = { .max_stacks = nstacks + 16, .max_frames = 10000 };
	struct store *st = store_new(&lim, NULL, 0);
	static const enum frame_kind kinds[] = { FRAME_NATIVE, FRAME_NATIVE, FRAME_KERNEL,
		FRAME_JAVA_JIT, FRAME_JAVA_INLINED, FRAME_JAVA_INTERP, FRAME_NATIVE };
	uint32_t ids[5000], f[48], hot[3];
	uint64_t seed = 12345, added = 0;
	char name[64];
	size_t i, j, depth;

	if (!st)
		return NULL;
	for (i = 0; i < 5000; i++) {
		snprintf(name, sizeof(name), "pkg%zu.Class%zu.method_%zu", i % 17, i % 251, i);
		ids[i] = (uint32_t)store_frame_intern(st, kinds[i % 7], name, i % 7 == 2 ? "" : "libapp.so");
	}
	hot[0] = (uint32_t)store_frame_intern(st, FRAME_NATIVE, "main", "app");
	hot[1] = (uint32_t)store_frame_intern(st, FRAME_NATIVE, "worker", "app");
	hot[2] = (uint32_t)store_frame_intern(st, FRAME_NATIVE, "hot_loop", "app");
	while (added < nstacks) {
		seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
		depth = 8 + (seed >> 33) % 33;
		f[0] = hot[0];
		for (j = 1; j < depth; j++) {
			uint64_t x;

			seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
			x = seed >> 33;
			/* narrow near the root so stacks share prefixes */
			f[j] = ids[(j < 4 ? x % (j * 3) : x % 5000)];
		}
		if (synth_add(st, 1, 1 + (uint32_t)(added % 8), f, depth, 1 + (seed >> 40) % 5, 10000000) == 0)
			added++;
	}
	synth_add(st, 1, 1, hot, 3, nstacks / 2, nstacks / 2 * 10000000ULL);
	store_set_process_name(st, 1, "bigapp");
	store_set_thread_name(st, 1, 1, "main");
	return st;
}

/* Names that need care in some format, and how every format shows them
 * (export.h's naming rules: control bytes and invalid UTF-8 as \xNN). */
static const struct {
	const char *name;
	const char *shown;
} synth_hostile[] = {
	{ "semi;colon;name", "semi;colon;name" },
	{ "say \"hi\" 'there'", "say \"hi\" 'there'" },
	{ "List<Map<K,V>> & more", "List<Map<K,V>> & more" },
	{ "</script><script>alert(1)</script>", "</script><script>alert(1)</script>" },
	{ "line\nbreak\ttab", "line\\x0abreak\\x09tab" },
	{ "bad\xff\xfe utf8 \xc3", "bad\\xff\\xfe utf8 \\xc3" },
	{ "caf\xc3\xa9 \xe2\x98\x83", "caf\xc3\xa9 \xe2\x98\x83" },
	{ "evil\xe2\x80\xae)(lave \xc2\x9b" "2J", "evil\\u202e)(lave \\u009b2J" },
	{ "{{DATA}} {{TITLE}}", "{{DATA}} {{TITLE}}" },
};
#define SYNTH_HOSTILE_N (sizeof(synth_hostile) / sizeof(synth_hostile[0]))

/* One stack through every hostile name (root first, 5 samples) plus
 * "main;hostile_leaf" (1 sample); thread and process names hostile too. */
static inline struct store *synth_hostile_store(void)
{
	struct store *st = store_new(NULL, NULL, 0);
	uint32_t f[SYNTH_HOSTILE_N], m[2];
	size_t i;

	if (!st)
		return NULL;
	for (i = 0; i < SYNTH_HOSTILE_N; i++)
		f[i] = (uint32_t)store_frame_intern(st, FRAME_NATIVE, synth_hostile[i].name, "lib<&>.so");
	m[0] = (uint32_t)store_frame_intern(st, FRAME_NATIVE, "main", "app");
	m[1] = (uint32_t)store_frame_intern(st, FRAME_KERNEL, "hostile_leaf;<&>", "mod\"x");
	synth_add(st, 7, 8, f, SYNTH_HOSTILE_N, 5, 50000000);
	synth_add(st, 7, 8, m, 2, 1, 10000000);
	store_set_thread_name(st, 7, 8, "th;<\"&\">\xff");
	store_set_process_name(st, 7, "pr</script>&\n");
	return st;
}

#endif
