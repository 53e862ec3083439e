#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "log.h"

/* stderr goes to a temporary file for the test; lines() reads it back. */
static char path[] = "/tmp/jprof-test-log-XXXXXX";
static int saved_err = -1;

static void setup(void)
{
	int fd = mkstemp(path);

	ck_assert_int_ge(fd, 0);
	fflush(stderr);
	saved_err = dup(2);
	dup2(fd, 2);
	close(fd);
	setvbuf(stderr, NULL, _IONBF, 0);
}

static void teardown(void)
{
	dup2(saved_err, 2);
	close(saved_err);
	unlink(path);
}

/* Lines written so far that contain needle (all lines for ""). */
static unsigned lines(const char *needle, char *last, size_t len)
{
	char line[1024];
	unsigned n = 0;
	FILE *f = fopen(path, "re");

	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f)) {
		if (!strstr(line, needle))
			continue;
		n++;
		if (last)
			snprintf(last, len, "%s", line);
	}
	fclose(f);
	return n;
}

START_TEST(test_flood_is_bounded)
{
	char last[1024];

	for (int i = 0; i < 1000; i++)
		log_warn("refused a connection of uid %u (pid %d)", 65534u, i);
	/* A burst of 20, the rest counted. */
	ck_assert_uint_eq(lines("refused a connection", NULL, 0), 20);
	ck_assert_uint_eq(lines("suppressed", NULL, 0), 0);
	log_flush_suppressed();
	ck_assert_uint_eq(lines("suppressed", last, sizeof(last)), 1);
	ck_assert_str_eq(last, "<4>980 similar messages suppressed (\"refused a connection of uid %u "
			       "(pid %d)\")\n");
	/* Said once a second at most: nothing new to say now. */
	log_flush_suppressed();
	ck_assert_uint_eq(lines("suppressed", NULL, 0), 1);
	/* Another site has its own budget. */
	log_warn("another message %d", 1);
	ck_assert_uint_eq(lines("another message 1", NULL, 0), 1);
}
END_TEST

START_TEST(test_refill_and_report_before_next)
{
	char last[1024];

	for (int i = 0; i < 25; i++)
		log_notice("audit: denied: uid %u asked %d", 1000u, i);
	ck_assert_uint_eq(lines("audit: denied", NULL, 0), 20);
	/* 10 a second after the burst: 150 ms frees one line, which first
	 * says what was suppressed; an audit summary is an audit line. */
	usleep(150000);
	log_notice("audit: denied: uid %u asked %d", 1000u, 99);
	ck_assert_uint_eq(lines("suppressed", last, sizeof(last)), 1);
	ck_assert_str_eq(last, "<5>audit: 5 similar messages suppressed (\"denied: uid %u asked %d\")\n");
	ck_assert_uint_eq(lines("asked 99", NULL, 0), 1);
}
END_TEST

START_TEST(test_levels_and_lines)
{
	log_set_level(LOG_LVL_INFO);
	/* Below the level: neither printed nor counted. */
	for (int i = 0; i < 100; i++)
		log_debug("debug %d", i);
	log_flush_suppressed();
	ck_assert_uint_eq(lines("", NULL, 0), 0);
	/* One message of several lines is one line of the budget. */
	for (int i = 0; i < 20; i++)
		log_info("first\nsecond %d", i);
	ck_assert_uint_eq(lines("second", NULL, 0), 20);
	ck_assert_uint_eq(lines("first", NULL, 0), 20);
}
END_TEST

static Suite *log_suite(void)
{
	Suite *s = suite_create("log");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_flood_is_bounded);
	tcase_add_test(tc, test_refill_and_report_before_next);
	tcase_add_test(tc, test_levels_and_lines);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return jprof_check_run(log_suite());
}
