#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "quota.h"

static struct quota *make(uint64_t per_uid, uint64_t total)
{
	struct quota_limits lim = { 0 };
	struct quota *q;

	for (int k = 0; k < QUOTA_NKINDS; k++) {
		lim.per_uid[k] = per_uid;
		lim.total[k] = total;
	}
	ck_assert_int_eq(quota_new(&lim, &q), 0);
	return q;
}

START_TEST(test_per_uid)
{
	struct quota *q = make(3, 0);

	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(quota_take(q, 1000, QUOTA_CLIENTS, 1), 0);
	ck_assert_int_eq(quota_take(q, 1000, QUOTA_CLIENTS, 1), -EDQUOT);
	/* Nothing was charged by the refusal; other uids and kinds are apart. */
	ck_assert_uint_eq(quota_used(q, 1000, QUOTA_CLIENTS), 3);
	ck_assert_int_eq(quota_take(q, 1001, QUOTA_CLIENTS, 3), 0);
	ck_assert_int_eq(quota_take(q, 1000, QUOTA_AGENTS, 3), 0);
	ck_assert_int_eq(quota_take(q, 1000, QUOTA_AGENTS, 1), -EDQUOT);
	/* More than one unit at once counts whole. */
	ck_assert_int_eq(quota_take(q, 1002, QUOTA_OUTPUT, 4), -EDQUOT);
	ck_assert_uint_eq(quota_used(q, 1002, QUOTA_OUTPUT), 0);
	quota_give(q, 1000, QUOTA_CLIENTS, 1);
	ck_assert_int_eq(quota_take(q, 1000, QUOTA_CLIENTS, 1), 0);
	ck_assert_uint_eq(quota_used_total(q, QUOTA_CLIENTS), 6);
	/* Root has no per-uid quota. */
	ck_assert_uint_eq(quota_limit(q, 0, QUOTA_CLIENTS), 0);
	ck_assert_uint_eq(quota_limit(q, 1000, QUOTA_CLIENTS), 3);
	ck_assert_int_eq(quota_take(q, 0, QUOTA_CLIENTS, 100), 0);
	quota_free(q);
}
END_TEST

START_TEST(test_root_reserve)
{
	/* 32 in total: 2 kept for root. */
	struct quota *q = make(0, 32);

	ck_assert_int_eq(quota_take(q, 1000, QUOTA_SESSIONS, 20), 0);
	ck_assert_int_eq(quota_take(q, 1001, QUOTA_SESSIONS, 10), 0);
	ck_assert_int_eq(quota_take(q, 1002, QUOTA_SESSIONS, 1), -EUSERS);
	ck_assert_int_eq(quota_take(q, 0, QUOTA_SESSIONS, 2), 0);
	ck_assert_int_eq(quota_take(q, 0, QUOTA_SESSIONS, 1), -EUSERS);
	quota_give(q, 1000, QUOTA_SESSIONS, 20);
	ck_assert_int_eq(quota_take(q, 1002, QUOTA_SESSIONS, 1), 0);
	quota_free(q);

	/* A tiny total still keeps one for root. */
	q = make(0, 2);
	ck_assert_int_eq(quota_take(q, 1000, QUOTA_CLIENTS, 1), 0);
	ck_assert_int_eq(quota_take(q, 1000, QUOTA_CLIENTS, 1), -EUSERS);
	ck_assert_int_eq(quota_take(q, 0, QUOTA_CLIENTS, 1), 0);
	quota_free(q);
}
END_TEST

START_TEST(test_give_back)
{
	struct quota *q = make(10, 100);

	ck_assert_int_eq(quota_take(q, 7, QUOTA_PERF_EVENTS, 5), 0);
	ck_assert_int_eq(quota_take(q, 7, QUOTA_OUTPUT, 5), 0);
	/* More than was taken: never below zero, the total neither. */
	quota_give(q, 7, QUOTA_PERF_EVENTS, 9);
	ck_assert_uint_eq(quota_used(q, 7, QUOTA_PERF_EVENTS), 0);
	ck_assert_uint_eq(quota_used_total(q, QUOTA_PERF_EVENTS), 0);
	ck_assert_uint_eq(quota_used(q, 7, QUOTA_OUTPUT), 5);
	quota_give(q, 7, QUOTA_OUTPUT, 5);
	/* A uid that held nothing: no effect. */
	quota_give(q, 8, QUOTA_OUTPUT, 5);
	ck_assert_uint_eq(quota_used_total(q, QUOTA_OUTPUT), 0);
	quota_free(q);

	/* Many uids come and go. */
	q = make(10, 0);
	for (uid_t u = 1; u < 5000; u++)
		ck_assert_int_eq(quota_take(q, u, QUOTA_CLIENTS, u % 2 ? 1 : 0), 0);
	for (uid_t u = 1; u < 5000; u++)
		quota_give(q, u, QUOTA_CLIENTS, 1);
	ck_assert_uint_eq(quota_used_total(q, QUOTA_CLIENTS), 0);
	quota_free(q);
}
END_TEST

START_TEST(test_null_and_explain)
{
	struct quota *q = make(2, 32);
	char buf[256];

	ck_assert_int_eq(quota_take(NULL, 5, QUOTA_CLIENTS, 1000), 0);
	quota_give(NULL, 5, QUOTA_CLIENTS, 1000);
	ck_assert_uint_eq(quota_used(NULL, 5, QUOTA_CLIENTS), 0);

	ck_assert_int_eq(quota_take(q, 65534, QUOTA_CLIENTS, 2), 0);
	quota_explain(q, 65534, QUOTA_CLIENTS, quota_take(q, 65534, QUOTA_CLIENTS, 1), buf,
		      sizeof(buf));
	ck_assert_str_eq(buf, "uid 65534 holds 2 connections, its quota (max_clients_per_uid = 2)");
	quota_explain(q, 65534, QUOTA_PERF_EVENTS, -EUSERS, buf, sizeof(buf));
	ck_assert_str_eq(buf, "jprofd holds 0 perf events, all it gives to users other than root");
	quota_explain(q, 0, QUOTA_SESSIONS, -EUSERS, buf, sizeof(buf));
	ck_assert_str_eq(buf, "jprofd holds 0 recordings, its limit");
	quota_free(q);
	quota_free(NULL);
}
END_TEST

static Suite *quota_suite(void)
{
	Suite *s = suite_create("quota");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_per_uid);
	tcase_add_test(tc, test_root_reserve);
	tcase_add_test(tc, test_give_back);
	tcase_add_test(tc, test_null_and_explain);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return jprof_check_run(quota_suite());
}
