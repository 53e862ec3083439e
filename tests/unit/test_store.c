#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
