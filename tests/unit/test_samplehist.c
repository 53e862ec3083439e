/* samplehist.c: quantiles of the BPF time per sample, from its 1 us
 * buckets, as `jprofctl status` shows them; they must agree with what
 * Prometheus' histogram_quantile() derives from the exported buckets. */
#include <check.h>
#include <math.h>

#include "check_main.h"
#include "samplehist.h"

static void add(struct samplehist *h, unsigned bucket, uint64_t n, uint64_t ns_each)
{
	h->buckets[bucket] += n;
	h->count += n;
	h->sum_ns += n * ns_each;
}

START_TEST(test_empty)
{
	struct samplehist h = { 0 };

	ck_assert(samplehist_quantile(&h, 0.5) < 0);
	ck_assert(samplehist_mean_us(&h) < 0);
}
END_TEST

START_TEST(test_bad_q)
{
	struct samplehist h = { 0 };

	add(&h, 3, 10, 3500);
	ck_assert(samplehist_quantile(&h, 0) < 0);
	ck_assert(samplehist_quantile(&h, 1.5) < 0);
	ck_assert(samplehist_quantile(&h, NAN) < 0);
	ck_assert(samplehist_quantile(&h, 1) >= 3 && samplehist_quantile(&h, 1) <= 4);
}
END_TEST

/* One bucket: every quantile lies inside it, in order. */
START_TEST(test_single_bucket)
{
	struct samplehist h = { 0 };
	double p50, p90;

	add(&h, 7, 100, 7300);
	p50 = samplehist_quantile(&h, 0.5);
	p90 = samplehist_quantile(&h, 0.9);
	ck_assert_double_eq_tol(p50, 7.5, 1e-9);
	ck_assert_double_eq_tol(p90, 7.9, 1e-9);
	ck_assert_double_eq_tol(samplehist_mean_us(&h), 7.3, 1e-9);
}
END_TEST

/* 90 fast samples (2 us) and 10 slow ones (20 us): the median sits with
 * the fast ones, p99 with the slow ones; empty buckets between are skipped. */
START_TEST(test_two_modes)
{
	struct samplehist h = { 0 };

	add(&h, 2, 90, 2500);
	add(&h, 20, 10, 20500);
	ck_assert_double_eq_tol(samplehist_quantile(&h, 0.5), 2 + 50.0 / 90, 1e-9);
	/* rank 90 is the last fast sample: the top of bucket 2, not bucket 20 */
	ck_assert_double_eq_tol(samplehist_quantile(&h, 0.9), 3.0, 1e-9);
	ck_assert_double_eq_tol(samplehist_quantile(&h, 0.99), 20.9, 1e-9);
	ck_assert_double_eq_tol(samplehist_mean_us(&h), (90 * 2.5 + 10 * 20.5) / 100, 1e-9);
}
END_TEST

/* The open last bucket (>= 63 us) gives its lower bound, never a made-up
 * upper one. */
START_TEST(test_overflow_bucket)
{
	struct samplehist h = { 0 };

	add(&h, 1, 50, 1500);
	add(&h, SAMPLEHIST_BUCKETS - 1, 50, 500000);
	ck_assert_double_eq_tol(samplehist_quantile(&h, 0.5), 2.0, 1e-9);
	ck_assert_double_eq_tol(samplehist_quantile(&h, 0.99), SAMPLEHIST_BUCKETS - 1, 1e-9);
	ck_assert_double_eq_tol(samplehist_mean_us(&h), (50 * 1.5 + 50 * 500.0) / 100, 1e-9);
}
END_TEST

/* Quantiles never decrease with q, whatever the shape. */
START_TEST(test_monotonic)
{
	struct samplehist h = { 0 };
	double last = 0;

	for (unsigned i = 0; i < SAMPLEHIST_BUCKETS; i += 3)
		add(&h, i, 1 + (i * 7919) % 13, i * 1000 + 500);
	for (int k = 1; k <= 1000; k++) {
		double v = samplehist_quantile(&h, k / 1000.0);

		ck_assert(v >= last);
		ck_assert(v <= SAMPLEHIST_BUCKETS - 1);
		last = v;
	}
}
END_TEST

/* A count that the buckets do not hold is refused, not read past. */
START_TEST(test_inconsistent)
{
	struct samplehist h = { 0 };

	add(&h, 4, 10, 4000);
	h.count = 20;
	ck_assert(samplehist_quantile(&h, 0.99) < 0);
	ck_assert_double_eq_tol(samplehist_quantile(&h, 0.25), 4.5, 1e-9);
}
END_TEST

static Suite *samplehist_suite(void)
{
	Suite *s = suite_create("samplehist");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_empty);
	tcase_add_test(tc, test_bad_q);
	tcase_add_test(tc, test_single_bucket);
	tcase_add_test(tc, test_two_modes);
	tcase_add_test(tc, test_overflow_bucket);
	tcase_add_test(tc, test_monotonic);
	tcase_add_test(tc, test_inconsistent);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return jprof_check_run(samplehist_suite());
}
