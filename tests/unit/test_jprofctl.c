/* jprofctl's pure helpers: what a user types on the command line. The client
 * is one file, so the test includes it to reach its static functions. */
#define main jprofctl_main
#include "../../client/jprofctl.c"
#undef main

#include <check.h>

START_TEST(test_duration)
{
	static const struct {
		const char *text;
		uint64_t ms;
	} ok[] = {
		{ "30s", 30000 }, { "500ms", 500 }, { "2m", 120000 }, { "1h", 3600000 },
		{ "30", 30000 }, { "1", 1000 }, { "1.5s", 1500 }, { "0.25", 250 },
		{ "1ms", 1 }, { "24h", 86400000 }, { "1000us", 1 }, { "0.5m", 30000 },
	};
	static const char *const bad[] = {
		"", "s", "-1s", "+1s", "1x", "1 s", "1S", "1.s", ".5s", "1.5.5s", "0", "0s",
		"0.5ms", "1500us", "25h", "86400001ms", "99999999999999999999999s", "1e3",
		"0x10", "10sec",
	};
	uint64_t ms;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		ms = 0;
		ck_assert_msg(ctl_parse_duration_ms(ok[i].text, &ms) == 0, "rejected %s", ok[i].text);
		ck_assert_uint_eq(ms, ok[i].ms);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(ctl_parse_duration_ms(bad[i], &ms) < 0, "accepted %s", bad[i]);
}
END_TEST

START_TEST(test_interval)
{
	static const struct {
		const char *text;
		uint64_t us;
	} ok[] = {
		{ "10ms", 10000 }, { "1ms", 1000 }, { "250us", 250 }, { "1s", 1000000 },
		{ "100us", 100 }, { "10s", 10000000 }, { "0.5ms", 500 },
	};
	static const char *const bad[] = {
		"10", "99us", "11s", "1m", "0.5us", "ms", "10 ms", "-10ms",
	};
	uint64_t us;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		us = 0;
		ck_assert_msg(ctl_parse_interval_us(ok[i].text, &us) == 0, "rejected %s", ok[i].text);
		ck_assert_uint_eq(us, ok[i].us);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(ctl_parse_interval_us(bad[i], &us) < 0, "accepted %s", bad[i]);
}
END_TEST

START_TEST(test_pid)
{
	int32_t pid = 0;

	ck_assert_int_eq(ctl_parse_pid("1234", &pid), 0);
	ck_assert_int_eq(pid, 1234);
	ck_assert_int_eq(ctl_parse_pid("2147483647", &pid), 0);
	ck_assert_int_lt(ctl_parse_pid("2147483648", &pid), 0);
	ck_assert_int_lt(ctl_parse_pid("0", &pid), 0);
	ck_assert_int_lt(ctl_parse_pid("-1", &pid), 0);
	ck_assert_int_lt(ctl_parse_pid("12a", &pid), 0);
	ck_assert_int_lt(ctl_parse_pid("", &pid), 0);
}
END_TEST

START_TEST(test_format_for_path)
{
	ck_assert_str_eq(ctl_format_for_path("out.collapsed"), "collapsed");
	ck_assert_str_eq(ctl_format_for_path("dir.d/out.folded"), "collapsed");
	ck_assert_str_eq(ctl_format_for_path("p.json"), "json");
	ck_assert_str_eq(ctl_format_for_path("flame.html"), "html");
	ck_assert_str_eq(ctl_format_for_path("FLAME.HTML"), "html");
	ck_assert_str_eq(ctl_format_for_path("cpu.pb.gz"), "pprof");
	ck_assert_str_eq(ctl_format_for_path("cpu.pprof"), "pprof");
	ck_assert_str_eq(ctl_format_for_path("top.txt"), "text");
	ck_assert_str_eq(ctl_format_for_path("out.gz"), "collapsed");
	ck_assert_str_eq(ctl_format_for_path("profile"), "collapsed");
	ck_assert_str_eq(ctl_format_for_path(".json"), "collapsed");
	ck_assert_str_eq(ctl_format_for_path(NULL), "collapsed");
}
END_TEST

START_TEST(test_exit_codes)
{
	ck_assert_int_eq(ctl_exit_for_error("permission_denied"), 4);
	ck_assert_int_eq(ctl_exit_for_error("no_such_process"), 5);
	ck_assert_int_eq(ctl_exit_for_error("shutting_down"), 1);
	ck_assert_int_eq(ctl_exit_for_error(NULL), 1);
}
END_TEST

START_TEST(test_span)
{
	char buf[32];

	ctl_format_span(buf, sizeof(buf), 850);
	ck_assert_str_eq(buf, "850ms");
	ctl_format_span(buf, sizeof(buf), 12300);
	ck_assert_str_eq(buf, "12.3s");
	ctl_format_span(buf, sizeof(buf), 302000);
	ck_assert_str_eq(buf, "5m 02s");
	ctl_format_span(buf, sizeof(buf), 3723000);
	ck_assert_str_eq(buf, "1h 02m");
	ctl_format_span(buf, sizeof(buf), 90000000);
	ck_assert_str_eq(buf, "1d 01h");
	ctl_format_span(buf, sizeof(buf), -1);
	ck_assert_str_eq(buf, "?");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("jprofctl");
	TCase *tc = tcase_create("helpers");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_duration);
	tcase_add_test(tc, test_interval);
	tcase_add_test(tc, test_pid);
	tcase_add_test(tc, test_format_for_path);
	tcase_add_test(tc, test_exit_codes);
	tcase_add_test(tc, test_span);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
