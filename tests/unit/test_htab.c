#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "htab.h"

/* ---- hash functions ---------------------------------------------------- */

START_TEST(test_hash_functions)
{
	/* FNV-1a of "a" from the standard offset basis. */
	ck_assert_uint_eq(htab_fnv1a_str(HTAB_FNV_SEED, "a"), 0xaf63dc4c8601ec8cULL);
	ck_assert_uint_eq(htab_fnv1a(HTAB_FNV_SEED, "abc", 3), htab_fnv1a_str(HTAB_FNV_SEED, "abc"));
	ck_assert_uint_eq(htab_fnv1a_byte(htab_fnv1a_str(HTAB_FNV_SEED, "ab"), 'c'),
			  htab_fnv1a_str(HTAB_FNV_SEED, "abc"));
	ck_assert_uint_eq(htab_fnv1a(HTAB_FNV_SEED, NULL, 0), HTAB_FNV_SEED);
	/* The mixer spreads neighbouring keys: their low bits differ. */
	ck_assert_uint_eq(htab_mix64(0), 0);
	ck_assert_uint_ne(htab_mix64(1) & 0xffff, htab_mix64(2) & 0xffff);
	ck_assert_uint_ne(htab_mix64(1ULL << 32) & 0xffff, htab_mix64(2ULL << 32) & 0xffff);
}
END_TEST

/* ---- index ------------------------------------------------------------- */

/* Entries the index points into: every candidate for hash h. */
static size_t index_candidates(const struct htab_index *t, uint32_t h, uint32_t *out, size_t max)
{
	struct htab_probe p;
	size_t n = 0;
	uint32_t i;

	for (i = htab_index_first(t, h, &p); i != HTAB_NONE; i = htab_index_next(t, &p))
		if (n < max)
			out[n++] = i;
	return n;
}

START_TEST(test_index_collisions)
{
	struct htab_index t = { 0 };
	uint32_t got[8];

	/* Empty: nothing, and no crash without slots. */
	ck_assert_uint_eq(index_candidates(&t, 7, got, 8), 0);
	/* Three entries under one hash, one under another that shares the
	 * home slot (equal low bits). */
	ck_assert_int_eq(htab_index_insert(&t, 7, 0), 0);
	ck_assert_int_eq(htab_index_insert(&t, 7 + (1u << 20), 1), 0);
	ck_assert_int_eq(htab_index_insert(&t, 7, 2), 0);
	ck_assert_int_eq(htab_index_insert(&t, 7, 3), 0);
	ck_assert_uint_eq(index_candidates(&t, 7, got, 8), 3);
	ck_assert_uint_eq(got[0], 0);
	ck_assert_uint_eq(got[1], 2);
	ck_assert_uint_eq(got[2], 3);
	ck_assert_uint_eq(index_candidates(&t, 7 + (1u << 20), got, 8), 1);
	ck_assert_uint_eq(got[0], 1);
	ck_assert_uint_eq(index_candidates(&t, 8, got, 8), 0);
	ck_assert_uint_eq(htab_index_count(&t), 4);
	ck_assert_int_eq(htab_index_insert(&t, 1, HTAB_NONE), -EINVAL);
	htab_index_release(&t);
	ck_assert_uint_eq(htab_index_count(&t), 0);
}
END_TEST

START_TEST(test_index_growth_and_bytes)
{
	size_t bytes = 100, cost, before, old;
	struct htab_index t = { .bytes = &bytes };
	uint32_t got[4];
	uint32_t i;

	for (i = 0; i < 100000; i++) {
		cost = htab_index_insert_cost(&t);
		before = bytes;
		old = t.cap * sizeof(struct htab_slot);
		ck_assert_int_eq(htab_index_insert(&t, i * 2654435761u, i), 0);
		/* The predicted cost is what the insert allocates; the old slots
		 * are freed after the copy. */
		ck_assert_uint_eq(bytes - before, cost ? cost - old : 0);
	}
	ck_assert_uint_eq(bytes, 100 + t.cap * sizeof(struct htab_slot));
	ck_assert_uint_le(htab_index_count(&t) * 2, t.cap);
	for (i = 0; i < 100000; i += 7) {
		ck_assert_uint_ge(index_candidates(&t, i * 2654435761u, got, 4), 1);
		ck_assert_uint_eq(got[0], i);
	}
	htab_index_release(&t);
	ck_assert_uint_eq(bytes, 100);
}
END_TEST

/* ---- map --------------------------------------------------------------- */

START_TEST(test_map_basic)
{
	struct htab_map m = { 0 };
	uint64_t *v, old = 0;

	ck_assert_ptr_null(htab_map_get(&m, 1));
	ck_assert(!htab_map_del(&m, 1, NULL));
	ck_assert_int_eq(htab_map_put(&m, 1, 10), 1);
	ck_assert_int_eq(htab_map_put(&m, 1, 11), 0);  /* replaced */
	ck_assert_int_eq(htab_map_put(&m, 0, 5), 1);   /* 0 is a key like any other */
	ck_assert_int_eq(htab_map_upsert(&m, 2, &v), 1);
	ck_assert_uint_eq(*v, 0);
	*v = 20;
	ck_assert_int_eq(htab_map_upsert(&m, 2, &v), 0);
	ck_assert_uint_eq(*v, 20);
	ck_assert_uint_eq(*htab_map_get(&m, 1), 11);
	ck_assert_uint_eq(*htab_map_get(&m, 0), 5);
	ck_assert_uint_eq(htab_map_count(&m), 3);
	ck_assert(htab_map_del(&m, 1, &old));
	ck_assert_uint_eq(old, 11);
	ck_assert_ptr_null(htab_map_get(&m, 1));
	ck_assert_uint_eq(htab_map_count(&m), 2);
	htab_map_release(&m);
	ck_assert_uint_eq(htab_map_count(&m), 0);
	ck_assert_ptr_null(htab_map_get(&m, 2));
}
END_TEST

START_TEST(test_map_all_ones_key)
{
	struct htab_map m = { 0 };
	uint64_t key, val, *v;
	size_t pos = 0, n = 0;

	/* The key that marks empty slots inside the table still works. */
	ck_assert_ptr_null(htab_map_get(&m, HTAB_MAP_EMPTY));
	ck_assert_int_eq(htab_map_put(&m, HTAB_MAP_EMPTY, 42), 1);
	ck_assert_int_eq(htab_map_put(&m, 3, 4), 1);
	ck_assert_int_eq(htab_map_upsert(&m, HTAB_MAP_EMPTY, &v), 0);
	ck_assert_uint_eq(*v, 42);
	ck_assert_uint_eq(htab_map_count(&m), 2);
	while (htab_map_next(&m, &pos, &key, &val)) {
		ck_assert(key == 3 ? val == 4 : key == HTAB_MAP_EMPTY && val == 42);
		n++;
	}
	ck_assert_uint_eq(n, 2);
	ck_assert(htab_map_del(&m, HTAB_MAP_EMPTY, NULL));
	ck_assert_ptr_null(htab_map_get(&m, HTAB_MAP_EMPTY));
	ck_assert_uint_eq(*htab_map_get(&m, 3), 4);
	htab_map_release(&m);
}
END_TEST

/* Keys whose mixed hashes share their low bits: all land in one run. */
static size_t colliding_keys(uint64_t *keys, size_t want, unsigned bits)
{
	size_t n = 0;

	for (uint64_t k = 1; n < want; k++)
		if ((htab_mix64(k) & ((1u << bits) - 1)) == 5)
			keys[n++] = k;
	return n;
}

START_TEST(test_map_delete_keeps_others_findable)
{
	struct htab_map m = { 0 };
	uint64_t keys[64];
	size_t i, j;

	/* Long collision runs (same home slot in a 64-slot table), then delete
	 * from the middle of the run, one key at a time, in every order that
	 * matters: each delete must shift the rest back into reach. */
	colliding_keys(keys, 24, 6);
	for (i = 0; i < 24; i++)
		ck_assert_int_eq(htab_map_put(&m, keys[i], i), 1);
	ck_assert_uint_eq(m.cap, 64);
	for (i = 0; i < 24; i += 2) {
		ck_assert(htab_map_del(&m, keys[i], NULL));
		for (j = 0; j < 24; j++) {
			uint64_t *v = htab_map_get(&m, keys[j]);

			if (j % 2 == 0 && j <= i) {
				ck_assert_ptr_null(v);
			} else {
				ck_assert_ptr_nonnull(v);
				ck_assert_uint_eq(*v, j);
			}
		}
	}
	ck_assert_uint_eq(htab_map_count(&m), 12);
	htab_map_release(&m);
}
END_TEST

START_TEST(test_map_wraparound_delete)
{
	struct htab_map m = { 0 };
	uint64_t keys[8];
	size_t n = 0;

	/* Keys homed in the last slot of a 16-slot table wrap to slot 0; a
	 * delete at the end must pull the wrapped ones back. */
	for (uint64_t k = 1; n < 5; k++)
		if ((htab_mix64(k) & 15) == 15)
			keys[n++] = k;
	for (size_t i = 0; i < 5; i++)
		ck_assert_int_eq(htab_map_put(&m, keys[i], 100 + i), 1);
	ck_assert_uint_eq(m.cap, 16);
	ck_assert(htab_map_del(&m, keys[0], NULL));
	for (size_t i = 1; i < 5; i++)
		ck_assert_uint_eq(*htab_map_get(&m, keys[i]), 100 + i);
	ck_assert(htab_map_del(&m, keys[2], NULL));
	ck_assert_uint_eq(*htab_map_get(&m, keys[1]), 101);
	ck_assert_uint_eq(*htab_map_get(&m, keys[3]), 103);
	ck_assert_uint_eq(*htab_map_get(&m, keys[4]), 104);
	htab_map_release(&m);
}
END_TEST

START_TEST(test_map_growth_random)
{
	size_t bytes = 0;
	struct htab_map m = { .bytes = &bytes };
	uint64_t *keys = malloc(200000 * sizeof(*keys)), seed = 99;
	size_t i;

	ck_assert_ptr_nonnull(keys);
	/* Random inserts and deletes against the truth kept in keys[]:
	 * present iff keys[i] is odd-indexed or not yet deleted. */
	for (i = 0; i < 200000; i++) {
		seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
		keys[i] = seed;
		ck_assert_int_eq(htab_map_put(&m, keys[i], i), 1);
		if (i % 3 == 2)
			ck_assert(htab_map_del(&m, keys[i - 1], NULL));
	}
	ck_assert_uint_eq(htab_map_count(&m), 200000 - 200000 / 3);
	ck_assert_uint_eq(bytes, m.cap * sizeof(struct htab_pair));
	for (i = 0; i < 200000; i++) {
		uint64_t *v = htab_map_get(&m, keys[i]);

		if (i % 3 == 1 && i + 1 < 200000) {
			ck_assert_ptr_null(v);
		} else {
			ck_assert_ptr_nonnull(v);
			ck_assert_uint_eq(*v, i);
		}
	}
	htab_map_release(&m);
	ck_assert_uint_eq(bytes, 0);
	free(keys);
}
END_TEST

START_TEST(test_map_iterate)
{
	struct htab_map m = { 0 };
	uint64_t key, val, sum = 0;
	size_t pos = 0, n = 0;
	unsigned char seen[1000] = { 0 };

	for (uint64_t k = 0; k < 1000; k++)
		ck_assert_int_eq(htab_map_put(&m, k, k * 3), 1);
	while (htab_map_next(&m, &pos, &key, &val)) {
		ck_assert_uint_lt(key, 1000);
		ck_assert_uint_eq(val, key * 3);
		ck_assert(!seen[key]);
		seen[key] = 1;
		sum += key;
		n++;
	}
	ck_assert_uint_eq(n, 1000);
	ck_assert_uint_eq(sum, 999 * 1000 / 2);
	htab_map_release(&m);
}
END_TEST

static bool keep_odd(uint64_t key, uint64_t *val, void *arg)
{
	unsigned *calls = arg;

	(*calls)++;
	*val += 1;
	return key % 2;
}

START_TEST(test_map_retain)
{
	struct htab_map m = { 0 };
	uint64_t keys[40];
	unsigned calls = 0;
	size_t even = 0;

	/* Colliding keys (two home slots in the final 2048-slot table) make
	 * deletes shift entries into the slot just visited: each entry must
	 * still be seen exactly once. */
	colliding_keys(keys, 40, 10);
	for (size_t i = 0; i < 40; i++) {
		ck_assert_int_eq(htab_map_put(&m, keys[i], keys[i] * 10), 1);
		even += keys[i] % 2 == 0;
	}
	for (uint64_t k = 1u << 30; k < (1u << 30) + 500; k++)
		ck_assert_int_eq(htab_map_put(&m, k, k * 10), 1);
	ck_assert_int_eq(htab_map_put(&m, HTAB_MAP_EMPTY, 7), 1);
	ck_assert_uint_eq(m.cap, 2048);
	ck_assert_uint_eq(htab_map_retain(&m, keep_odd, &calls), even + 250);
	ck_assert_uint_eq(calls, 40 + 500 + 1);
	ck_assert_uint_eq(htab_map_count(&m), 40 - even + 250 + 1);
	for (size_t i = 0; i < 40; i++) {
		uint64_t *v = htab_map_get(&m, keys[i]);

		if (keys[i] % 2) {
			ck_assert_ptr_nonnull(v);
			ck_assert_uint_eq(*v, keys[i] * 10 + 1);
		} else {
			ck_assert_ptr_null(v);
		}
	}
	for (uint64_t k = 1u << 30; k < (1u << 30) + 500; k++)
		ck_assert(k % 2 ? *htab_map_get(&m, k) == k * 10 + 1 : !htab_map_get(&m, k));
	ck_assert_uint_eq(*htab_map_get(&m, HTAB_MAP_EMPTY), 8);  /* odd: kept */
	htab_map_release(&m);
}
END_TEST

static Suite *htab_suite(void)
{
	Suite *s = suite_create("htab");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_hash_functions);
	tcase_add_test(tc, test_index_collisions);
	tcase_add_test(tc, test_index_growth_and_bytes);
	tcase_add_test(tc, test_map_basic);
	tcase_add_test(tc, test_map_all_ones_key);
	tcase_add_test(tc, test_map_delete_keeps_others_findable);
	tcase_add_test(tc, test_map_wraparound_delete);
	tcase_add_test(tc, test_map_growth_random);
	tcase_add_test(tc, test_map_iterate);
	tcase_add_test(tc, test_map_retain);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(htab_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
