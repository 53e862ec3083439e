#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "event.h"
#include "sample.h"
#include "store.h"
#include "synth_store.h"

struct collect {
	const struct store_stack *s[256];
	size_t n;
	size_t stop_after;  /* 0 = never */
};

static int collect_cb(const struct store_stack *s, void *arg)
{
	struct collect *c = arg;

	if (c->n < 256)
		c->s[c->n] = s;
	c->n++;
	return c->stop_after && c->n == c->stop_after ? 42 : 0;
}

static int intern(struct store *st, enum frame_kind kind, const char *name, const char *module)
{
	int id = store_frame_intern(st, kind, name, module);

	ck_assert_int_ge(id, 0);
	return id;
}

START_TEST(test_dedup_sums_counts)
{
	struct store *st = store_new(NULL, NULL, 0);
	struct store_totals t;
	struct collect c = { 0 };
	uint32_t f[3];

	ck_assert_ptr_nonnull(st);
	f[0] = (uint32_t)intern(st, FRAME_NATIVE, "main", "app");
	f[1] = (uint32_t)intern(st, FRAME_NATIVE, "work", "app");
	f[2] = (uint32_t)intern(st, FRAME_KERNEL, "sys_read", NULL);

	ck_assert_int_eq(synth_add(st, 100, 101, f, 3, 2, 2000), 0);
	ck_assert_int_eq(synth_add(st, 100, 101, f, 3, 3, 3000), 0);

	store_get_totals(st, &t);
	ck_assert_uint_eq(t.stacks, 1);
	ck_assert_uint_eq(t.values[0], 5);
	ck_assert_uint_eq(t.values[1], 5000);
	ck_assert(!t.truncated);
	ck_assert_uint_eq(t.truncated_samples, 0);
	ck_assert_uint_gt(t.bytes, 0);

	ck_assert_int_eq(store_foreach_stack(st, collect_cb, &c), 0);
	ck_assert_uint_eq(c.n, 1);
	ck_assert_uint_eq(c.s[0]->pid, 100);
	ck_assert_uint_eq(c.s[0]->tid, 101);
	ck_assert_uint_eq(c.s[0]->nframes, 3);
	ck_assert_mem_eq(c.s[0]->frames, f, sizeof(f));
	ck_assert_uint_eq(c.s[0]->values[0], 5);
	ck_assert_uint_eq(c.s[0]->values[1], 5000);
	store_free(st);
}
END_TEST

START_TEST(test_distinct_keys_are_separate)
{
	struct store *st = store_new(NULL, NULL, 0);
	struct store_totals t;
	uint32_t f[2], rev[2];

	f[0] = (uint32_t)intern(st, FRAME_NATIVE, "a", NULL);
	f[1] = (uint32_t)intern(st, FRAME_NATIVE, "b", NULL);
	rev[0] = f[1];
	rev[1] = f[0];
	ck_assert_int_eq(synth_add(st, 1, 1, f, 2, 1, 10), 0);
	ck_assert_int_eq(synth_add(st, 1, 2, f, 2, 1, 10), 0);   /* other tid */
	ck_assert_int_eq(synth_add(st, 2, 1, f, 2, 1, 10), 0);   /* other pid */
	ck_assert_int_eq(synth_add(st, 1, 1, rev, 2, 1, 10), 0); /* other order */
	ck_assert_int_eq(synth_add(st, 1, 1, f, 1, 1, 10), 0);   /* prefix */
	ck_assert_int_eq(synth_add(st, 1, 1, NULL, 0, 1, 10), 0); /* empty stack */
	ck_assert_int_eq(synth_add(st, 1, 1, NULL, 0, 1, 10), 0);
	store_get_totals(st, &t);
	ck_assert_uint_eq(t.stacks, 6);
	ck_assert_uint_eq(t.values[0], 7);
	ck_assert_uint_eq(store_stack_get(st, 5)->values[0], 2);
	ck_assert_uint_eq(store_stack_get(st, 5)->nframes, 0);
	store_free(st);
}
END_TEST

START_TEST(test_frame_interning)
{
	struct store *st = store_new(NULL, NULL, 0);
	const struct store_frame *fr;
	char name[32] = "Foo.bar";
	uint32_t trunc = store_truncated_frame(st);
	int a, b, c, d, e;

	/* The marker frame exists before anything is interned. */
	ck_assert_uint_eq(store_frame_count(st), 1);
	fr = store_frame_get(st, trunc);
	ck_assert_ptr_nonnull(fr);
	ck_assert_str_eq(fr->name, "[truncated]");
	ck_assert_int_eq(fr->kind, FRAME_MARKER);
	ck_assert_str_eq(fr->module, "");
	ck_assert_int_eq(store_frame_intern(st, FRAME_MARKER, "[truncated]", NULL), (int)trunc);

	a = intern(st, FRAME_JAVA_JIT, name, NULL);
	b = intern(st, FRAME_JAVA_INTERP, name, NULL);  /* same name, other kind */
	c = intern(st, FRAME_JAVA_JIT, name, "x.jar");  /* same name, other module */
	d = intern(st, FRAME_NATIVE, "ab", "c");
	e = intern(st, FRAME_NATIVE, "a", "bc");        /* same bytes, split differently */
	ck_assert_int_eq(a, 1);
	ck_assert_int_eq(b, 2);
	ck_assert_int_eq(c, 3);
	ck_assert_int_eq(d, 4);
	ck_assert_int_eq(e, 5);
	/* The caller's buffer is borrowed: changing it later changes nothing. */
	strcpy(name, "changed");
	ck_assert_int_eq(store_frame_intern(st, FRAME_JAVA_JIT, "Foo.bar", ""), a);
	ck_assert_int_eq(store_frame_intern(st, FRAME_JAVA_INTERP, "Foo.bar", NULL), b);
	ck_assert_int_eq(store_frame_intern(st, FRAME_JAVA_JIT, "Foo.bar", "x.jar"), c);
	ck_assert_str_eq(store_frame_get(st, (uint32_t)a)->name, "Foo.bar");
	ck_assert_str_eq(store_frame_get(st, (uint32_t)c)->module, "x.jar");
	ck_assert_int_eq(store_frame_get(st, (uint32_t)b)->kind, FRAME_JAVA_INTERP);
	ck_assert_uint_eq(store_frame_count(st), 6);
	ck_assert_ptr_null(store_frame_get(st, 6));

	ck_assert_int_eq(store_frame_intern(st, FRAME_NATIVE, NULL, NULL), -EINVAL);
	ck_assert_int_eq(store_frame_intern(st, FRAME_KIND_COUNT, "x", NULL), -EINVAL);
	store_free(st);
}
END_TEST

START_TEST(test_many_frames_stay_stable)
{
	struct store *st = store_new(NULL, NULL, 0);
	char name[32];
	int i;

	/* Enough to grow the index several times; ids must not move. */
	for (i = 0; i < 50000; i++) {
		snprintf(name, sizeof(name), "fn_%d", i);
		ck_assert_int_eq(store_frame_intern(st, FRAME_NATIVE, name, "lib.so"), i + 1);
	}
	for (i = 0; i < 50000; i += 7) {
		snprintf(name, sizeof(name), "fn_%d", i);
		ck_assert_int_eq(store_frame_intern(st, FRAME_NATIVE, name, "lib.so"), i + 1);
		ck_assert_str_eq(store_frame_get(st, (uint32_t)i + 1)->name, name);
	}
	store_free(st);
}
END_TEST

START_TEST(test_add_rejects_bad_input)
{
	struct store *st = store_new(NULL, NULL, 0);
	uint32_t bad = 99;

	ck_assert_int_eq(synth_add(st, 1, 1, &bad, 1, 1, 1), -EINVAL);
	ck_assert_int_eq(synth_add(st, 1, 1, NULL, 2, 1, 1), -EINVAL);
	ck_assert_int_eq(synth_add(NULL, 1, 1, NULL, 0, 1, 1), -EINVAL);
	store_free(st);
}
END_TEST

START_TEST(test_stack_limit_keeps_every_sample)
{
	struct store_limits lim = { .max_stacks = 10 };
	struct store *st = store_new(&lim, NULL, 0);
	const struct store_stack *s;
	struct store_totals t;
	uint64_t added = 0, expect_trunc = 0, in_trunc = 0;
	uint32_t f[2], trunc;
	size_t i, ntrunc = 0;
	int r;

	ck_assert_ptr_nonnull(st);
	trunc = store_truncated_frame(st);
	f[0] = (uint32_t)intern(st, FRAME_NATIVE, "root", NULL);
	for (i = 0; i < 100; i++) {
		char name[16];

		snprintf(name, sizeof(name), "leaf%zu", i);
		f[1] = (uint32_t)intern(st, FRAME_NATIVE, name, NULL);
		r = synth_add(st, 7 + (uint32_t)(i % 2), 70 + (uint32_t)i, f, 2, i + 1, 1000 * (i + 1));
		ck_assert_int_eq(r, i < 10 ? 0 : 1);
		added += i + 1;
		if (i >= 10)
			expect_trunc += i + 1;
	}
	/* An existing stack keeps counting after the limit is hit. */
	f[1] = 2;
	ck_assert_int_eq(synth_add(st, 7, 70, f, 2, 5, 0), 0);
	added += 5;

	store_get_totals(st, &t);
	ck_assert_uint_eq(t.values[0], added);
	ck_assert(t.truncated);
	ck_assert_uint_gt(t.truncated_samples, 0);
	ck_assert_uint_eq(t.truncated_samples, expect_trunc);
	/* 10 real stacks plus one marker stack per process. */
	ck_assert_uint_eq(t.stacks, 12);
	for (i = 0; i < store_stack_count(st); i++) {
		s = store_stack_get(st, i);
		if (s->nframes == 1 && s->frames[0] == trunc) {
			ck_assert_uint_eq(s->tid, 0);
			ck_assert(s->pid == 7 || s->pid == 8);
			in_trunc += s->values[0];
			ntrunc++;
		}
	}
	ck_assert_uint_eq(ntrunc, 2);
	ck_assert_uint_eq(in_trunc, expect_trunc);
	store_free(st);
}
END_TEST

START_TEST(test_frame_limit)
{
	struct store_limits lim = { .max_frames = 3 };
	struct store *st = store_new(&lim, NULL, 0);
	struct store_totals t;

	ck_assert_int_eq(store_frame_intern(st, FRAME_NATIVE, "a", NULL), 1);
	ck_assert_int_eq(store_frame_intern(st, FRAME_NATIVE, "b", NULL), 2);
	ck_assert_int_eq(store_frame_intern(st, FRAME_NATIVE, "c", NULL), -ENOSPC);
	/* Known frames still resolve. */
	ck_assert_int_eq(store_frame_intern(st, FRAME_NATIVE, "a", NULL), 1);
	store_get_totals(st, &t);
	ck_assert(t.truncated);
	ck_assert_uint_eq(t.frames, 3);
	store_free(st);
}
END_TEST

START_TEST(test_byte_limit)
{
	struct store_limits lim = { .max_bytes = 512 << 10 };
	struct store *st = store_new(&lim, NULL, 0);
	struct store_totals t;
	uint32_t f[64];
	uint64_t added = 0;
	size_t i, j, stored = 0;
	int r;

	for (j = 0; j < 64; j++) {
		char name[16];

		snprintf(name, sizeof(name), "f%zu", j);
		f[j] = (uint32_t)intern(st, FRAME_NATIVE, name, NULL);
	}
	for (i = 0; i < 20000; i++) {
		f[0] = (uint32_t)(i % 64) + 1;
		f[1] = (uint32_t)(i / 64 % 64) + 1;
		f[2] = (uint32_t)(i / 4096) + 1;
		r = synth_add(st, 1, 2, f, 64, 1, 1);
		ck_assert_int_ge(r, 0);
		stored += r == 0;
		added++;
	}
	store_get_totals(st, &t);
	ck_assert(t.truncated);
	ck_assert_uint_gt(stored, 100);
	ck_assert_uint_lt(stored, 20000);
	ck_assert_uint_eq(t.values[0], added);
	ck_assert_uint_eq(t.truncated_samples, added - stored);
	ck_assert_uint_le(t.bytes, lim.max_bytes);
	store_free(st);
}
END_TEST

START_TEST(test_many_stacks)
{
	struct store *st = store_new(NULL, NULL, 0);
	struct store_totals t;
	uint32_t f[8];
	size_t i, j;

	for (j = 0; j < 64; j++) {
		char name[16];

		snprintf(name, sizeof(name), "f%zu", j);
		intern(st, FRAME_NATIVE, name, NULL);
	}
	/* Every stack added twice, after the index has grown in between. */
	for (int pass = 0; pass < 2; pass++) {
		for (i = 0; i < 120000; i++) {
			for (j = 0; j < 8; j++)
				f[j] = (uint32_t)((i >> (2 * j)) & 63) + 1;
			ck_assert_int_eq(synth_add(st, 1000 + (uint32_t)(i % 3), 5, f, 8, 1, 10), 0);
		}
	}
	store_get_totals(st, &t);
	ck_assert_uint_eq(t.stacks, 120000);
	ck_assert_uint_eq(t.values[0], 240000);
	ck_assert(!t.truncated);
	for (i = 0; i < t.stacks; i += 997) {
		const struct store_stack *s = store_stack_get(st, i);

		ck_assert_uint_eq(s->values[0], 2);
		ck_assert_uint_eq(s->pid, 1000 + i % 3);
		ck_assert_uint_eq(s->frames[0], (i & 63) + 1);
	}
	store_free(st);
}
END_TEST

struct name_seen {
	uint32_t pid[8], tid[8];
	const char *name[8];
	size_t n;
};

static int thread_cb(uint32_t pid, uint32_t tid, const char *name, void *arg)
{
	struct name_seen *s = arg;

	s->pid[s->n] = pid;
	s->tid[s->n] = tid;
	s->name[s->n] = name;
	s->n++;
	return 0;
}

static int proc_cb(uint32_t pid, const char *comm, void *arg)
{
	return thread_cb(pid, 0, comm, arg);
}

START_TEST(test_names)
{
	struct store *st = store_new(NULL, NULL, 0);
	struct name_seen seen = { 0 };
	char buf[16] = "worker-1";

	ck_assert_ptr_null(store_thread_name(st, 1, 2));
	ck_assert_ptr_null(store_process_name(st, 1));
	ck_assert_int_eq(store_set_thread_name(st, 1, 2, buf), 0);
	strcpy(buf, "scribbled");
	ck_assert_str_eq(store_thread_name(st, 1, 2), "worker-1");
	ck_assert_int_eq(store_set_thread_name(st, 1, 3, "gc"), 0);
	ck_assert_int_eq(store_set_thread_name(st, 2, 2, "other-proc"), 0);
	ck_assert_int_eq(store_set_thread_name(st, 1, 2, "renamed"), 0);  /* latest wins */
	ck_assert_str_eq(store_thread_name(st, 1, 2), "renamed");
	ck_assert_str_eq(store_thread_name(st, 1, 3), "gc");
	ck_assert_str_eq(store_thread_name(st, 2, 2), "other-proc");
	ck_assert_ptr_null(store_thread_name(st, 2, 1));
	/* A named thread's Java id (JFR's javaThreadId); none for others. */
	ck_assert_int_eq(store_set_thread_java_id(st, 2, 1, 5), -ENOENT);
	ck_assert_uint_eq(store_thread_java_id(st, 1, 2), 0);
	ck_assert_int_eq(store_set_thread_java_id(st, 1, 2, 5), 0);
	ck_assert_uint_eq(store_thread_java_id(st, 1, 2), 5);
	ck_assert_uint_eq(store_thread_java_id(st, 1, 3), 0);

	ck_assert_int_eq(store_set_process_name(st, 1, "java"), 0);
	ck_assert_int_eq(store_set_process_name(st, 1, "java-app"), 0);
	ck_assert_str_eq(store_process_name(st, 1), "java-app");
	ck_assert_ptr_null(store_process_name(st, 2));
	ck_assert_int_eq(store_set_process_name(st, 1, NULL), -EINVAL);

	ck_assert_int_eq(store_foreach_thread(st, thread_cb, &seen), 0);
	ck_assert_uint_eq(seen.n, 3);
	ck_assert_uint_eq(seen.tid[0], 2);
	ck_assert_str_eq(seen.name[0], "renamed");
	ck_assert_uint_eq(seen.tid[1], 3);
	ck_assert_uint_eq(seen.pid[2], 2);
	seen.n = 0;
	ck_assert_int_eq(store_foreach_process(st, proc_cb, &seen), 0);
	ck_assert_uint_eq(seen.n, 1);
	ck_assert_str_eq(seen.name[0], "java-app");
	store_free(st);
}
END_TEST

START_TEST(test_foreach_insertion_order)
{
	struct store *st = store_new(NULL, NULL, 0);
	struct collect c = { 0 };
	uint32_t f;
	size_t i;

	f = (uint32_t)intern(st, FRAME_NATIVE, "x", NULL);
	/* pids descending so a sort by key would visibly reorder them */
	for (i = 0; i < 50; i++)
		ck_assert_int_eq(synth_add(st, 1000 - (uint32_t)i, 1, &f, 1, 1, 1), 0);
	ck_assert_int_eq(synth_add(st, 1000, 1, &f, 1, 1, 1), 0);
	ck_assert_int_eq(store_foreach_stack(st, collect_cb, &c), 0);
	ck_assert_uint_eq(c.n, 50);
	for (i = 0; i < 50; i++)
		ck_assert_uint_eq(c.s[i]->pid, 1000 - i);
	ck_assert_uint_eq(c.s[0]->values[0], 2);

	/* A non-zero return stops the walk and is passed back. */
	memset(&c, 0, sizeof(c));
	c.stop_after = 3;
	ck_assert_int_eq(store_foreach_stack(st, collect_cb, &c), 42);
	ck_assert_uint_eq(c.n, 3);
	store_free(st);
}
END_TEST

START_TEST(test_null_safety)
{
	struct store_totals t;

	store_free(NULL);
	ck_assert_uint_eq(store_frame_count(NULL), 0);
	ck_assert_ptr_null(store_frame_get(NULL, 0));
	ck_assert_ptr_null(store_thread_name(NULL, 1, 1));
	ck_assert_int_eq(store_frame_intern(NULL, FRAME_NATIVE, "x", NULL), -EINVAL);
	store_get_totals(NULL, &t);
	ck_assert_uint_eq(t.values[0], 0);
}
END_TEST

static const struct sample_type offcpu_types[] = {
	{ "samples", "count" }, { "offcpu", "nanoseconds" }, { "switches", "count" },
};

START_TEST(test_sample_types)
{
	char type[16] = "offcpu", unit[16] = "nanoseconds";
	struct sample_type mine[2] = { { "samples", "count" }, { type, unit } };
	struct sample_type many[STORE_MAX_VALUES + 1];
	struct store *st;

	/* The CPU default. */
	st = store_new(NULL, NULL, 0);
	ck_assert_uint_eq(store_value_count(st), 2);
	ck_assert_str_eq(store_value_type(st, 0)->type, "samples");
	ck_assert_str_eq(store_value_type(st, 0)->unit, "count");
	ck_assert_str_eq(store_value_type(st, 1)->type, "cpu");
	ck_assert_str_eq(store_value_type(st, 1)->unit, "nanoseconds");
	ck_assert_ptr_null(store_value_type(st, 2));
	ck_assert_int_eq(store_value_find(st, "cpu"), 1);
	ck_assert_int_eq(store_value_find(st, "nanoseconds"), -ENOENT);
	store_free(st);

	/* The strings are copied. */
	st = store_new(NULL, mine, 2);
	ck_assert_ptr_nonnull(st);
	strcpy(type, "scribbled");
	strcpy(unit, "bytes");
	ck_assert_str_eq(store_value_type(st, 1)->type, "offcpu");
	ck_assert_str_eq(store_value_type(st, 1)->unit, "nanoseconds");
	store_free(st);

	/* Type 0 must be the count; 1..STORE_MAX_VALUES types; no NULLs. */
	ck_assert_ptr_null(store_new(NULL, offcpu_types + 1, 2));
	ck_assert_ptr_null(store_new(NULL, offcpu_types, 0));
	for (size_t i = 0; i < STORE_MAX_VALUES + 1; i++)
		many[i] = i ? (struct sample_type){ "x", "count" } : sample_type_count;
	ck_assert_ptr_null(store_new(NULL, many, STORE_MAX_VALUES + 1));
	st = store_new(NULL, many, STORE_MAX_VALUES);
	ck_assert_ptr_nonnull(st);
	store_free(st);
	mine[1].unit = NULL;
	ck_assert_ptr_null(store_new(NULL, mine, 2));
	st = store_new(NULL, &sample_type_count, 1);
	ck_assert_uint_eq(store_value_count(st), 1);
	store_free(st);
}
END_TEST

START_TEST(test_values_per_type)
{
	struct store_limits lim = { .max_stacks = 1 };
	struct store *st = store_new(&lim, offcpu_types, 3);
	struct store_totals t;
	uint32_t f[2];

	f[0] = (uint32_t)intern(st, FRAME_NATIVE, "main", NULL);
	f[1] = (uint32_t)intern(st, FRAME_KERNEL, "schedule", NULL);
	ck_assert_int_eq(store_add(st, &(struct store_sample){ 1, 2, f, 2,
			 (const uint64_t[]){ 1, 5000, 1 }, 0 }), 0);
	ck_assert_int_eq(store_add(st, &(struct store_sample){ 1, 2, f, 2,
			 (const uint64_t[]){ 2, 7000, 3 }, 0 }), 0);
	/* Past the stack limit: the marker stack gets every value. */
	ck_assert_int_eq(store_add(st, &(struct store_sample){ 1, 3, f, 1,
			 (const uint64_t[]){ 4, 100, 4 }, 0 }), 1);
	ck_assert_uint_eq(store_stack_get(st, 0)->values[0], 3);
	ck_assert_uint_eq(store_stack_get(st, 0)->values[1], 12000);
	ck_assert_uint_eq(store_stack_get(st, 0)->values[2], 4);
	ck_assert_uint_eq(store_stack_get(st, 1)->values[1], 100);
	store_get_totals(st, &t);
	ck_assert_uint_eq(t.values[0], 7);
	ck_assert_uint_eq(t.values[1], 12100);
	ck_assert_uint_eq(t.values[2], 8);
	ck_assert_uint_eq(t.values[3], 0);
	ck_assert_uint_eq(t.truncated_samples, 4);
	ck_assert_int_eq(store_add(st, &(struct store_sample){ 1, 2, f, 2, NULL, 0 }), -EINVAL);
	store_free(st);
}
END_TEST

struct times_seen {
	struct store_time t[16];
	uint64_t v[16][3];
	size_t n;
};

static int time_cb(const struct store_time *t, void *arg)
{
	struct times_seen *s = arg;

	s->t[s->n] = *t;
	memcpy(s->v[s->n], t->values, sizeof(s->v[0]));
	return ++s->n == 15 ? 7 : 0;
}

static void add_timed(struct store *st, uint32_t tid, uint32_t frame, uint64_t time_ns, uint64_t ns)
{
	ck_assert_int_ge(store_add(st, &(struct store_sample){ 1, tid, &frame, 1,
			 (const uint64_t[]){ 1, ns, 1 }, time_ns }), 0);
}

START_TEST(test_sample_times)
{
	struct store_limits lim = { .max_stacks = 2 };
	struct store *st = store_new(&lim, offcpu_types, 3);
	struct times_seen seen = { 0 };
	struct store_totals t;
	uint32_t a = (uint32_t)intern(st, FRAME_NATIVE, "a", NULL);
	size_t before;

	/* Off by default: times are ignored, not counted as dropped. */
	add_timed(st, 10, a, 1000, 5);
	store_get_totals(st, &t);
	ck_assert_uint_eq(t.times, 0);
	ck_assert_uint_eq(t.times_dropped, 0);
	before = t.bytes;

	ck_assert_int_eq(store_keep_times(st, 4), 0);
	add_timed(st, 11, a, 2000, 6);     /* stack 1 */
	add_timed(st, 10, a, 0, 7);        /* no time: nothing kept */
	add_timed(st, 10, a, 3000, 8);     /* stack 0 */
	add_timed(st, 12, a, 4000, 9);     /* past max_stacks: the marker stack */
	add_timed(st, 11, a, 5000, 10);
	add_timed(st, 11, a, 6000, 11);    /* past max times: dropped */
	store_get_totals(st, &t);
	ck_assert_uint_eq(t.times, 4);
	ck_assert_uint_eq(t.times_dropped, 1);
	ck_assert_uint_gt(t.bytes, before);

	ck_assert_int_eq(store_foreach_time(st, time_cb, &seen), 0);
	ck_assert_uint_eq(seen.n, 4);
	ck_assert_uint_eq(seen.t[0].time_ns, 2000);
	ck_assert_uint_eq(seen.t[0].stack, 1);
	ck_assert_uint_eq(seen.t[0].tid, 11);
	ck_assert_uint_eq(seen.v[0][1], 6);
	ck_assert_uint_eq(seen.t[1].time_ns, 3000);
	ck_assert_uint_eq(seen.t[1].stack, 0);
	ck_assert_uint_eq(seen.t[2].tid, 12);
	ck_assert_uint_eq(store_stack_get(st, seen.t[2].stack)->frames[0], store_truncated_frame(st));
	ck_assert_uint_eq(seen.v[2][1], 9);
	ck_assert_uint_eq(seen.t[3].time_ns, 5000);

	/* Off again: nothing more is kept or counted. */
	ck_assert_int_eq(store_keep_times(st, 0), 0);
	add_timed(st, 11, a, 7000, 12);
	store_get_totals(st, &t);
	ck_assert_uint_eq(t.times, 4);
	ck_assert_uint_eq(t.times_dropped, 1);
	ck_assert_int_eq(store_foreach_time(NULL, time_cb, &seen), -EINVAL);
	store_free(st);
}
END_TEST

START_TEST(test_sample_times_memory_bound)
{
	struct store_limits lim = { .max_bytes = 256 << 10 };
	struct store *st = store_new(&lim, offcpu_types, 3);
	struct times_seen seen = { 0 };
	struct store_totals t;
	uint32_t a = (uint32_t)intern(st, FRAME_NATIVE, "a", NULL);

	ck_assert_int_eq(store_keep_times(st, 10000000), 0);
	for (uint64_t i = 1; i <= 100000; i++)
		add_timed(st, 1, a, i, i);
	store_get_totals(st, &t);
	ck_assert_uint_gt(t.times, 1000);
	ck_assert_uint_gt(t.times_dropped, 0);
	ck_assert_uint_eq(t.times + t.times_dropped, 100000);
	ck_assert_uint_le(t.bytes, lim.max_bytes);
	ck_assert_uint_eq(t.values[0], 100000);   /* the samples themselves all count */
	/* A non-zero return stops the walk and is passed back. */
	ck_assert_int_eq(store_foreach_time(st, time_cb, &seen), 7);
	ck_assert_uint_eq(seen.n, 15);
	ck_assert_uint_eq(seen.t[14].time_ns, 15);
	store_free(st);
}
END_TEST

/* Merge filter: skips pid 3, and roots pid 2's stacks at the frame in arg. */
static bool merge_filter(const struct store *src, const struct store_stack *s, struct store *dst,
			 uint32_t *prefix, void *arg)
{
	(void)src;
	if (s->pid == 3)
		return false;
	if (s->pid == 2)
		*prefix = store_frame_ref(dst, FRAME_MARKER, arg, NULL);
	return true;
}

/* A recording of several events: one store with the union of their types,
 * each sample filling its own event's values only. */
START_TEST(test_event_union)
{
	static const struct sample_names names = { "app", "", "", "" };
	struct sample_type types[STORE_MAX_VALUES];
	struct event_set set;
	struct store_totals t;
	struct store *st;
	size_t n, main;
	char why[128];
	const struct sample_frame fr = { FRAME_NATIVE, "work", "", NULL };
	struct {
		enum event_id ev;
		uint64_t v[3];
	} in[] = {
		{ EVENT_CPU, { 1, 10000000 } },
		{ EVENT_ALLOC, { 1, 3, 3072 } },
		{ EVENT_LOCK, { 1, 1, 500000 } },
		{ EVENT_CPU, { 2, 20000000 } },
	};

	ck_assert_int_eq(event_parse_list("alloc,cpu,lock", &set, why, sizeof(why)), 0);
	ck_assert_uint_eq(set.n, 3);
	ck_assert_int_eq(set.ids[0], EVENT_ALLOC);
	ck_assert_int_eq(set.ids[2], EVENT_LOCK);
	ck_assert_int_eq(event_set_types(&set, types, STORE_MAX_VALUES, &n, &main), 0);
	ck_assert_uint_eq(n, 6);
	ck_assert_str_eq(types[0].type, "samples");
	ck_assert_str_eq(types[1].type, "alloc_objects");
	ck_assert_str_eq(types[2].type, "alloc_space");
	ck_assert_str_eq(types[3].type, "cpu");
	ck_assert_str_eq(types[4].type, "lock");
	ck_assert_str_eq(types[5].type, "lock_wait");
	ck_assert_str_eq(types[5].unit, "nanoseconds");
	ck_assert_uint_eq(main, 2);   /* alloc's main value: alloc_space */
	ck_assert_int_eq(event_set_types(&set, types, 5, &n, &main), -ENOSPC);
	ck_assert_int_eq(event_set_types(&set, types, STORE_MAX_VALUES, &n, &main), 0);

	st = store_new(NULL, types, n);
	ck_assert_ptr_nonnull(st);
	for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
		struct built_sample bs = {
			.event = event_get(in[i].ev), .pid = 7, .tid = 7, .values = in[i].v,
			.frames = &fr, .nframes = 1, .names = &names,
		};

		ck_assert_int_eq(sample_store_add(st, &bs, NULL), 0);
	}
	store_get_totals(st, &t);
	ck_assert_uint_eq(t.values[0], 5);
	ck_assert_uint_eq(t.values[1], 3);
	ck_assert_uint_eq(t.values[2], 3072);
	ck_assert_uint_eq(t.values[3], 30000000);
	ck_assert_uint_eq(t.values[4], 1);
	ck_assert_uint_eq(t.values[5], 500000);
	store_free(st);

	ck_assert_int_eq(event_parse_list("cpu", &set, why, sizeof(why)), 0);
	ck_assert_int_eq(event_set_types(&set, types, STORE_MAX_VALUES, &n, &main), 0);
	ck_assert_uint_eq(n, 2);
	ck_assert_uint_eq(main, 1);
	/* Every allowed set fits a store: the largest is cpu,offcpu,alloc,lock. */
	ck_assert_int_eq(event_parse_list("cpu,offcpu,alloc,lock", &set, why, sizeof(why)), 0);
	ck_assert_int_eq(event_set_types(&set, types, STORE_MAX_VALUES, &n, &main), 0);
	ck_assert_uint_eq(n, 7);
	ck_assert_int_eq(event_parse_list("wall,alloc,lock", &set, why, sizeof(why)), 0);
	ck_assert_int_eq(event_parse_list("lock,alloc,lock", &set, why, sizeof(why)), -EINVAL);
	ck_assert_str_eq(why, "event \"lock\" is given twice");
	ck_assert_int_eq(event_parse_list("cpu,wall", &set, why, sizeof(why)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "wall already holds cpu and offcpu"));
	ck_assert_int_eq(event_parse_list("cpu,heap", &set, why, sizeof(why)), -EINVAL);
	ck_assert_str_eq(why, "unknown event \"heap\"");
	ck_assert_int_eq(event_parse_list("", &set, why, sizeof(why)), -EINVAL);
	ck_assert_int_eq(event_parse_list("cpu,", &set, why, sizeof(why)), -EINVAL);
}
END_TEST

/* A process is named as last sampled: first sampled between fork and exec
 * (its parent's name), then as the program it exec'd. */
START_TEST(test_sample_exec_rename)
{
	static const struct sample_names before = { "setpriv", "/a", "", "" };
	static const struct sample_names after = { "victim", "/b.slice/b.service", "b.service", "" };
	static const struct sample_names gone = { SAMPLE_NAME_EXITED, "", "", "" };
	const struct sample_frame fr = { FRAME_NATIVE, "work", "", NULL };
	uint64_t v[2] = { 1, 10000000 };
	struct store *st = store_new(NULL, NULL, 0);
	struct built_sample bs = {
		.event = event_get(EVENT_CPU), .pid = 9, .tid = 9, .values = v,
		.frames = &fr, .nframes = 1, .names = &before,
	};
	struct store_labels l;

	ck_assert_ptr_nonnull(st);
	ck_assert_int_eq(sample_store_add(st, &bs, NULL), 0);
	ck_assert_str_eq(store_process_name(st, 9), "setpriv");
	bs.names = &after;
	ck_assert_int_eq(sample_store_add(st, &bs, NULL), 0);
	ck_assert_str_eq(store_process_name(st, 9), "victim");
	ck_assert(store_process_labels(st, 9, &l));
	ck_assert_str_eq(l.cgroup, "/b.slice/b.service");
	ck_assert_str_eq(l.unit, "b.service");
	/* The same name again: nothing changes. */
	ck_assert_int_eq(sample_store_add(st, &bs, NULL), 0);
	ck_assert_str_eq(store_process_name(st, 9), "victim");
	/* A late sample of the process gone: its name stays. */
	bs.names = &gone;
	ck_assert_int_eq(sample_store_add(st, &bs, NULL), 0);
	ck_assert_str_eq(store_process_name(st, 9), "victim");
	/* ...but names a process known by nothing else. */
	bs.pid = bs.tid = 10;
	ck_assert_int_eq(sample_store_add(st, &bs, NULL), 0);
	ck_assert_str_eq(store_process_name(st, 10), SAMPLE_NAME_EXITED);
	store_free(st);
}
END_TEST

START_TEST(test_merge)
{
	struct store *src = store_new(NULL, NULL, 0), *dst = store_new(NULL, offcpu_types, 3);
	const struct sample_type both[] = { { "samples", "count" }, { "offcpu", "nanoseconds" },
					    { "cpu", "nanoseconds" } };
	struct store *dst2 = store_new(NULL, both, 3);
	struct store_labels l = { "/system.slice/x.service", "x.service", "" };
	struct times_seen seen = { 0 };
	const struct store_stack *s;
	struct store_totals t;
	uint32_t f[2], g;

	f[0] = (uint32_t)intern(src, FRAME_NATIVE, "main", "app");
	f[1] = (uint32_t)intern(src, FRAME_KERNEL, "read", NULL);
	ck_assert_int_eq(store_keep_times(src, 100), 0);
	ck_assert_int_eq(store_add(src, &(struct store_sample){ 1, 11, f, 2,
			 (const uint64_t[]){ 2, 20 }, 500 }), 0);
	ck_assert_int_eq(store_add(src, &(struct store_sample){ 2, 21, f, 1,
			 (const uint64_t[]){ 3, 30 }, 600 }), 0);
	ck_assert_int_eq(store_add(src, &(struct store_sample){ 3, 31, f, 2,
			 (const uint64_t[]){ 4, 40 }, 700 }), 0);
	store_set_process_name(src, 1, "one");
	store_set_process_labels(src, 1, &l);
	store_set_thread_name(src, 1, 11, "t11");
	store_set_process_name(src, 3, "three");

	/* dst knows a frame already: ids differ, names match. */
	g = (uint32_t)intern(dst, FRAME_NATIVE, "other", NULL);
	ck_assert_int_eq(store_merge(dst, src, merge_filter, "[group]"), 0);
	ck_assert_int_eq(store_merge(dst, src, merge_filter, "[group]"), 0);  /* adds up */
	store_get_totals(dst, &t);
	ck_assert_uint_eq(t.stacks, 2);
	ck_assert_uint_eq(t.values[0], 10);
	ck_assert_uint_eq(t.values[1], 0);   /* cpu is not a type of dst: dropped */
	s = store_stack_get(dst, 0);
	ck_assert_uint_eq(s->pid, 1);
	ck_assert_uint_eq(s->nframes, 2);
	ck_assert_uint_ne(s->frames[0], f[0]);
	ck_assert_uint_ne(s->frames[0], g);
	ck_assert_str_eq(store_frame_get(dst, s->frames[0])->name, "main");
	ck_assert_str_eq(store_frame_get(dst, s->frames[0])->module, "app");
	ck_assert_int_eq(store_frame_get(dst, s->frames[1])->kind, FRAME_KERNEL);
	ck_assert_uint_eq(s->values[0], 4);
	s = store_stack_get(dst, 1);
	ck_assert_uint_eq(s->pid, 2);
	ck_assert_uint_eq(s->nframes, 2);
	ck_assert_str_eq(store_frame_get(dst, s->frames[0])->name, "[group]");
	ck_assert_str_eq(store_frame_get(dst, s->frames[1])->name, "main");
	ck_assert_str_eq(store_process_name(dst, 1), "one");
	ck_assert(store_process_labels(dst, 1, &l));
	ck_assert_str_eq(l.unit, "x.service");
	ck_assert_str_eq(store_thread_name(dst, 1, 11), "t11");
	ck_assert_ptr_null(store_process_name(dst, 3));   /* filtered out */

	/* Values go by type and unit; times follow when dst keeps them. */
	ck_assert_int_eq(store_keep_times(dst2, 100), 0);
	ck_assert_int_eq(store_merge(dst2, src, NULL, NULL), 0);
	store_get_totals(dst2, &t);
	ck_assert_uint_eq(t.stacks, 3);
	ck_assert_uint_eq(t.values[0], 9);
	ck_assert_uint_eq(t.values[1], 0);
	ck_assert_uint_eq(t.values[2], 90);
	ck_assert_uint_eq(t.times, 3);
	ck_assert_int_eq(store_foreach_time(dst2, time_cb, &seen), 0);
	ck_assert_uint_eq(seen.t[1].time_ns, 600);
	ck_assert_uint_eq(seen.t[1].tid, 21);
	ck_assert_uint_eq(store_stack_get(dst2, seen.t[1].stack)->pid, 2);
	ck_assert_uint_eq(seen.v[1][2], 30);
	ck_assert_uint_eq(seen.v[1][0], 3);

	ck_assert_int_eq(store_merge(dst, dst, NULL, NULL), -EINVAL);
	ck_assert_int_eq(store_merge(NULL, src, NULL, NULL), -EINVAL);
	store_free(src);
	store_free(dst);
	store_free(dst2);
}
END_TEST

/* Merging older data first names a process as last sampled across stores
 * (host-view buckets: an exec between two buckets). */
START_TEST(test_merge_exec_rename)
{
	struct store *older = store_new(NULL, NULL, 0), *newer = store_new(NULL, NULL, 0);
	struct store *late = store_new(NULL, NULL, 0), *dst = store_new(NULL, NULL, 0);
	struct store_labels l = { "/b.slice/b.service", "b.service", "" };
	uint32_t f;

	ck_assert_ptr_nonnull(older);
	ck_assert_ptr_nonnull(newer);
	ck_assert_ptr_nonnull(late);
	ck_assert_ptr_nonnull(dst);
	f = (uint32_t)intern(older, FRAME_NATIVE, "work", NULL);
	ck_assert_int_eq(store_add(older, &(struct store_sample){ 9, 9, &f, 1, (const uint64_t[]){ 1, 10 }, 0 }), 0);
	store_set_process_name(older, 9, "setpriv");
	store_set_thread_name(older, 9, 9, "setpriv");
	f = (uint32_t)intern(newer, FRAME_NATIVE, "work", NULL);
	ck_assert_int_eq(store_add(newer, &(struct store_sample){ 9, 9, &f, 1, (const uint64_t[]){ 1, 10 }, 0 }), 0);
	store_set_process_name(newer, 9, "victim");
	store_set_process_labels(newer, 9, &l);
	store_set_thread_name(newer, 9, 9, "victim");
	f = (uint32_t)intern(late, FRAME_NATIVE, "work", NULL);
	ck_assert_int_eq(store_add(late, &(struct store_sample){ 9, 9, &f, 1, (const uint64_t[]){ 1, 10 }, 0 }), 0);
	store_set_process_name(late, 9, STORE_NAME_EXITED);

	ck_assert_int_eq(store_merge(dst, older, NULL, NULL), 0);
	ck_assert_str_eq(store_process_name(dst, 9), "setpriv");
	ck_assert_int_eq(store_merge(dst, newer, NULL, NULL), 0);
	ck_assert_str_eq(store_process_name(dst, 9), "victim");
	ck_assert(store_process_labels(dst, 9, &l));
	ck_assert_str_eq(l.unit, "b.service");
	/* A thread keeps its first name, as within one store. */
	ck_assert_str_eq(store_thread_name(dst, 9, 9), "setpriv");
	/* A bucket that only saw the process gone does not rename it. */
	ck_assert_int_eq(store_merge(dst, late, NULL, NULL), 0);
	ck_assert_str_eq(store_process_name(dst, 9), "victim");
	store_free(older);
	store_free(newer);
	store_free(late);
	store_free(dst);
}
END_TEST

START_TEST(test_frame_ref)
{
	struct store_limits lim = { .max_frames = 2 };
	struct store *st = store_new(&lim, NULL, 0);

	ck_assert_uint_eq(store_frame_ref(st, FRAME_NATIVE, "a", NULL), 1);
	ck_assert_uint_eq(store_frame_ref(st, FRAME_NATIVE, "a", ""), 1);
	/* Past the limit: the marker, and the store says it was truncated. */
	ck_assert_uint_eq(store_frame_ref(st, FRAME_NATIVE, "b", NULL), store_truncated_frame(st));
	store_free(st);
}
END_TEST

/* A store with max_addrs keeps one frame per (process, address) of a
 * function, up to max_addrs, the rest on the function's own frame; a merge
 * into a store without addresses gives the stacks a per-function store has. */
START_TEST(test_address_frames)
{
	struct store *st = store_new(&(struct store_limits){ .max_addrs = 2 }, NULL, 0);
	struct store *fn = store_new(NULL, NULL, 0), *byname = store_new(NULL, NULL, 0);
	struct store *again = store_new(&(struct store_limits){ .max_addrs = 2 }, NULL, 0);
	struct frame_loc loc = { .addr = 0x1000, .map_start = 0x1000, .map_limit = 0x2000,
				 .path = "/bin/prog", .build_id = "ab", .pid = 7 };
	uint32_t a, b, a2, c, d, other, f[2];
	const struct store_frame *fr;
	struct store_totals t;

	a = store_frame_ref_at(st, FRAME_NATIVE, "hot", "prog", &loc);
	loc.addr = 0x1010;
	b = store_frame_ref_at(st, FRAME_NATIVE, "hot", "prog", &loc);
	loc.addr = 0x1000;
	a2 = store_frame_ref_at(st, FRAME_NATIVE, "hot", "prog", &loc);
	ck_assert_uint_ne(a, b);
	ck_assert_uint_eq(a, a2);
	fr = store_frame_get(st, b);
	ck_assert_str_eq(fr->name, "hot");
	ck_assert_str_eq(fr->module, "prog");
	ck_assert_uint_eq(fr->loc->addr, 0x1010);
	ck_assert_str_eq(fr->loc->path, "/bin/prog");
	ck_assert_uint_eq(fr->function, store_frame_get(st, a)->function);
	ck_assert_uint_ne(fr->function, b);
	ck_assert_ptr_null(store_frame_get(st, fr->function)->loc);
	/* A third address: the function's own frame, with that location. */
	loc.addr = 0x1020;
	c = store_frame_ref_at(st, FRAME_NATIVE, "hot", "prog", &loc);
	ck_assert_uint_eq(c, store_frame_get(st, a)->function);
	ck_assert_uint_eq(store_frame_get(st, c)->loc->addr, 0x1020);
	/* The cap is per process: another one has its own addresses. */
	loc.pid = 8;
	d = store_frame_ref_at(st, FRAME_NATIVE, "hot", "prog", &loc);
	ck_assert_uint_ne(d, c);
	ck_assert_uint_eq(store_frame_get(st, d)->loc->pid, 8);
	/* No location, or a store without addresses: per function. */
	other = store_frame_ref_at(st, FRAME_NATIVE, "hot", "prog", NULL);
	ck_assert_uint_eq(other, c);
	ck_assert_uint_eq(store_frame_ref_at(fn, FRAME_NATIVE, "hot", "prog", &loc),
			  store_frame_ref(fn, FRAME_NATIVE, "hot", "prog"));
	ck_assert_uint_eq(store_frame_get(fn, 1)->loc->pid, 8);

	/* Two stacks that differ only by the address of their leaf... */
	f[0] = (uint32_t)intern(st, FRAME_NATIVE, "main", "prog");
	f[1] = a;
	ck_assert_int_eq(store_add(st, &(struct store_sample){ 7, 7, f, 2, (const uint64_t[]){ 2, 20 }, 0 }), 0);
	f[1] = b;
	ck_assert_int_eq(store_add(st, &(struct store_sample){ 7, 7, f, 2, (const uint64_t[]){ 3, 30 }, 0 }), 0);
	store_get_totals(st, &t);
	ck_assert_uint_eq(t.stacks, 2);
	/* ...are one stack by name, and stay two where addresses are kept. */
	ck_assert_int_eq(store_merge(byname, st, NULL, NULL), 0);
	store_get_totals(byname, &t);
	ck_assert_uint_eq(t.stacks, 1);
	ck_assert_uint_eq(store_stack_get(byname, 0)->values[0], 5);
	ck_assert_uint_eq(store_frame_get(byname, store_stack_get(byname, 0)->frames[1])->loc->addr,
			  0x1000);
	ck_assert_int_eq(store_merge(again, st, NULL, NULL), 0);
	store_get_totals(again, &t);
	ck_assert_uint_eq(t.stacks, 2);
	ck_assert_uint_eq(store_frame_get(again, store_stack_get(again, 1)->frames[1])->loc->addr,
			  0x1010);
	store_free(st);
	store_free(fn);
	store_free(byname);
	store_free(again);
}
END_TEST

static Suite *store_suite(void)
{
	Suite *s = suite_create("store");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_dedup_sums_counts);
	tcase_add_test(tc, test_distinct_keys_are_separate);
	tcase_add_test(tc, test_frame_interning);
	tcase_add_test(tc, test_many_frames_stay_stable);
	tcase_add_test(tc, test_add_rejects_bad_input);
	tcase_add_test(tc, test_stack_limit_keeps_every_sample);
	tcase_add_test(tc, test_frame_limit);
	tcase_add_test(tc, test_byte_limit);
	tcase_add_test(tc, test_many_stacks);
	tcase_add_test(tc, test_names);
	tcase_add_test(tc, test_foreach_insertion_order);
	tcase_add_test(tc, test_null_safety);
	tcase_add_test(tc, test_sample_types);
	tcase_add_test(tc, test_values_per_type);
	tcase_add_test(tc, test_sample_times);
	tcase_add_test(tc, test_sample_times_memory_bound);
	tcase_add_test(tc, test_event_union);
	tcase_add_test(tc, test_sample_exec_rename);
	tcase_add_test(tc, test_merge);
	tcase_add_test(tc, test_merge_exec_rename);
	tcase_add_test(tc, test_frame_ref);
	tcase_add_test(tc, test_address_frames);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(store_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
