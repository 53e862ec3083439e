/* jprofctl's pure helpers: what a user types on the command line, and the
 * format table it chooses from. Links the client's library (all of
 * jprofctl but main.c). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <check.h>

#include "args.h"
#include "ctl.h"
#include "jprof_formats.h"
#include "output.h"

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
		ck_assert_msg(args_parse_duration_ms(ok[i].text, &ms) == 0, "rejected %s", ok[i].text);
		ck_assert_uint_eq(ms, ok[i].ms);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(args_parse_duration_ms(bad[i], &ms) < 0, "accepted %s", bad[i]);
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
		ck_assert_msg(args_parse_interval_us(ok[i].text, &us) == 0, "rejected %s", ok[i].text);
		ck_assert_uint_eq(us, ok[i].us);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(args_parse_interval_us(bad[i], &us) < 0, "accepted %s", bad[i]);
}
END_TEST

START_TEST(test_threshold_and_event)
{
	uint64_t us = 0;
	unsigned ev = 0;
	char why[160];

	ck_assert_int_eq(args_parse_threshold_us("10us", &us), 0);
	ck_assert_uint_eq(us, 10);
	ck_assert_int_eq(args_parse_threshold_us("1.5ms", &us), 0);
	ck_assert_uint_eq(us, 1500);
	ck_assert_int_eq(args_parse_threshold_us("10s", &us), 0);
	ck_assert_int_eq(args_parse_threshold_us("0us", &us), -ERANGE);
	ck_assert_int_eq(args_parse_threshold_us("11s", &us), -ERANGE);
	ck_assert_int_lt(args_parse_threshold_us("10", &us), 0);
	ck_assert_int_eq(args_parse_events("cpu", &ev, why, sizeof(why)), 0);
	ck_assert_uint_eq(ev, 1u << 0);
	ck_assert_int_eq(args_parse_events("offcpu", &ev, why, sizeof(why)), 0);
	ck_assert_uint_eq(ev, 1u << 1);
	ck_assert_int_eq(args_parse_events("wall", &ev, why, sizeof(why)), 0);
	ck_assert_uint_eq(ev, 1u << 2);
	ck_assert_int_eq(args_parse_events("alloc", &ev, why, sizeof(why)), 0);
	ck_assert_uint_eq(ev, 1u << 3);
	ck_assert_int_eq(args_parse_events("lock", &ev, why, sizeof(why)), 0);
	ck_assert_uint_eq(ev, 1u << 4);
	ck_assert_int_eq(args_parse_events("cpu,alloc,lock", &ev, why, sizeof(why)), 0);
	ck_assert_uint_eq(ev, (1u << 0) | (1u << 3) | (1u << 4));
	ck_assert_int_eq(args_parse_events("walls", &ev, why, sizeof(why)), -EINVAL);
	ck_assert_str_eq(why, "unknown event \"walls\"");
	ck_assert_int_eq(args_parse_events("CPU", &ev, why, sizeof(why)), -EINVAL);
	ck_assert_int_eq(args_parse_events("cpu,,lock", &ev, why, sizeof(why)), -EINVAL);
	ck_assert_int_eq(args_parse_events("cpu,lock,cpu", &ev, why, sizeof(why)), -EINVAL);
	ck_assert_str_eq(why, "event \"cpu\" is given twice");
	ck_assert_int_eq(args_parse_events("alloc,wall,cpu", &ev, why, sizeof(why)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "wall cannot be combined with cpu"));
	ck_assert_int_eq(args_parse_events("offcpu,wall", &ev, why, sizeof(why)), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "with offcpu"));
}
END_TEST

START_TEST(test_alloc_bytes)
{
	static const struct { const char *s; uint64_t b; } ok[] = {
		{ "512k", 524288 }, { "512K", 524288 }, { "1m", 1048576 }, { "1g", 1073741824 },
		{ "1024", 1024 }, { "65536", 65536 }, { "1k", 1024 },
	};
	static const char *const bad[] = { "", "k", "-1k", "1.5m", "12q", "1kb", "1 k", "0x10k" };
	uint64_t b = 0;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		ck_assert_msg(args_parse_alloc_bytes(ok[i].s, &b) == 0, "refused %s", ok[i].s);
		ck_assert_uint_eq(b, ok[i].b);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_int_eq(args_parse_alloc_bytes(bad[i], &b), -EINVAL);
	ck_assert_int_eq(args_parse_alloc_bytes("1023", &b), -ERANGE);
	ck_assert_int_eq(args_parse_alloc_bytes("2g", &b), -ERANGE);
	ck_assert_int_eq(args_parse_alloc_bytes("1073741825", &b), -ERANGE);
	ck_assert_int_eq(args_parse_alloc_bytes("99999999999999999999999k", &b), -ERANGE);
}
END_TEST

START_TEST(test_pid)
{
	int32_t pid = 0;

	ck_assert_int_eq(args_parse_pid("1234", &pid), 0);
	ck_assert_int_eq(pid, 1234);
	ck_assert_int_eq(args_parse_pid("2147483647", &pid), 0);
	ck_assert_int_lt(args_parse_pid("2147483648", &pid), 0);
	ck_assert_int_lt(args_parse_pid("0", &pid), 0);
	ck_assert_int_lt(args_parse_pid("-1", &pid), 0);
	ck_assert_int_lt(args_parse_pid("12a", &pid), 0);
	ck_assert_int_lt(args_parse_pid("", &pid), 0);
}
END_TEST

START_TEST(test_format_for_path)
{
	ck_assert_str_eq(output_format_for_path("out.collapsed"), "collapsed");
	ck_assert_str_eq(output_format_for_path("dir.d/out.folded"), "collapsed");
	ck_assert_str_eq(output_format_for_path("p.json"), "json");
	ck_assert_str_eq(output_format_for_path("flame.html"), "html");
	ck_assert_str_eq(output_format_for_path("FLAME.HTML"), "html");
	ck_assert_str_eq(output_format_for_path("cpu.pb.gz"), "pprof");
	ck_assert_str_eq(output_format_for_path("cpu.pprof"), "pprof");
	ck_assert_str_eq(output_format_for_path("top.txt"), "text");
	ck_assert_str_eq(output_format_for_path("out.gz"), "collapsed");
	ck_assert_str_eq(output_format_for_path("profile"), "collapsed");
	ck_assert_str_eq(output_format_for_path(".json"), "collapsed");
	ck_assert_str_eq(output_format_for_path(NULL), "collapsed");
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

/* The one format table: names, aliases, extensions (longest match wins). */
START_TEST(test_format_table)
{
	static const char *const bad[] = { "", "svg", "PPROF", "Folded", "json ", "pb.gz" };
	const struct jprof_format_info *f;

	ck_assert_ptr_null(jprof_format_info(JPROF_FMT_COUNT));
	ck_assert_ptr_null(jprof_format_info((enum jprof_format)-1));
	for (int i = 0; i < JPROF_FMT_COUNT; i++) {
		f = jprof_format_info((enum jprof_format)i);
		ck_assert_ptr_nonnull(f);
		ck_assert_int_eq(f->id, i);
		ck_assert_int_eq(jprof_format_parse(f->name), i);
		ck_assert_msg(strstr(jprof_format_names(), f->name), "%s not in names", f->name);
		ck_assert_msg(f->summary && *f->summary, "%s has no summary", f->name);
		for (const char *const *a = f->aliases; a && *a; a++)
			ck_assert_int_eq(jprof_format_parse(*a), i);
		/* Every extension chooses its own format: no two formats claim one. */
		for (const char *const *e = f->extensions; e && *e; e++) {
			char path[64];

			ck_assert_int_eq((*e)[0], '.');
			snprintf(path, sizeof(path), "dir.d/p%s", *e);
			ck_assert_msg(jprof_format_for_path(path) == i, "%s is not %s", path, f->name);
		}
	}
	ck_assert_int_eq(jprof_format_parse("folded"), JPROF_FMT_COLLAPSED);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(jprof_format_parse(bad[i]) == -EINVAL, "parsed '%s'", bad[i]);
	ck_assert_int_eq(jprof_format_parse(NULL), -EINVAL);
	ck_assert(jprof_format_info(JPROF_FMT_PPROF)->binary);
	ck_assert(!jprof_format_info(JPROF_FMT_TEXT)->binary);

	ck_assert_int_eq(jprof_format_for_path("x.pb.gz"), JPROF_FMT_PPROF);
	ck_assert_int_eq(jprof_format_for_path("X.PB.GZ"), JPROF_FMT_PPROF);
	ck_assert_int_eq(jprof_format_for_path("x.raw.json"), JPROF_FMT_RAW);
	ck_assert_int_eq(jprof_format_for_path("x.json"), JPROF_FMT_JSON);
	ck_assert_int_eq(jprof_format_for_path("x.htm"), JPROF_FMT_HTML);
	ck_assert_int_eq(jprof_format_for_path("x.gz"), -ENOENT);
	ck_assert_int_eq(jprof_format_for_path("x.svg"), -ENOENT);
	ck_assert_int_eq(jprof_format_for_path("pb.gz"), -ENOENT);
	ck_assert_int_eq(jprof_format_for_path(".pb.gz"), -ENOENT);
	ck_assert_int_eq(jprof_format_for_path(""), -ENOENT);
	ck_assert_int_eq(jprof_format_for_path(NULL), -ENOENT);
}
END_TEST

START_TEST(test_choose_format)
{
	ck_assert_str_eq(output_choose_format("pprof", "top.txt"), "pprof");
	ck_assert_str_eq(output_choose_format(NULL, "flame.html"), "html");
	ck_assert_str_eq(output_choose_format(NULL, "host.raw.json"), "raw");
	ck_assert_str_eq(output_choose_format(NULL, "out.svg"), "collapsed");
	ck_assert_str_eq(output_choose_format(NULL, NULL),
			 isatty(STDOUT_FILENO) ? "text" : "collapsed");
}
END_TEST

/* -f's --help line names every format and extension of the table and
 * stays within 79 columns. */
START_TEST(test_help_format)
{
	char text[4096], *line, *save = NULL;
	FILE *tmp = tmpfile();
	int saved = dup(STDOUT_FILENO);
	size_t n;

	ck_assert_ptr_nonnull(tmp);
	ck_assert_int_ge(saved, 0);
	fflush(stdout);
	ck_assert_int_ge(dup2(fileno(tmp), STDOUT_FILENO), 0);
	output_help_format(NULL);
	fflush(stdout);
	ck_assert_int_ge(dup2(saved, STDOUT_FILENO), 0);
	close(saved);
	rewind(tmp);
	n = fread(text, 1, sizeof(text) - 1, tmp);
	fclose(tmp);
	text[n] = '\0';

	ck_assert_msg(strncmp(text, "  -f, --format FMT       ", 25) == 0, "%s", text);
	for (int i = 0; i < JPROF_FMT_COUNT; i++) {
		const struct jprof_format_info *f = jprof_format_info((enum jprof_format)i);

		ck_assert_msg(strstr(text, f->name), "no %s in:\n%s", f->name, text);
		for (const char *const *e = f->extensions; e && *e; e++)
			ck_assert_msg(strstr(text, *e), "no %s in:\n%s", *e, text);
	}
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		ck_assert_msg(strlen(line) <= 79, "line too long: '%s'", line);
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
	tcase_add_test(tc, test_threshold_and_event);
	tcase_add_test(tc, test_alloc_bytes);
	tcase_add_test(tc, test_pid);
	tcase_add_test(tc, test_format_for_path);
	tcase_add_test(tc, test_exit_codes);
	tcase_add_test(tc, test_span);
	suite_add_tcase(s, tc);
	tc = tcase_create("formats");
	tcase_add_test(tc, test_format_table);
	tcase_add_test(tc, test_choose_format);
	tcase_add_test(tc, test_help_format);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
