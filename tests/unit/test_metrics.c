/* metrics.c: the exposition Prometheus reads. Fixed stats in, and the text
 * checked line by line against the exposition format's rules (promtool
 * checks the real daemon's output in tests/integration/test_http.py). */
#include <check.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "metrics.h"

static const struct sampler_stats ss = {
	.samples = 12345, .idle = 7, .kstack_err = 1, .ustack_err = 2, .collision = 3, .map_full = 4,
	.ringbuf_full = 5, .throttled = 6, .stack_missing = 0, .drains = 99,
	.drain_ns_total = 1500000000ull, .cpus = 2, .host_rate_hz = 19, .cpu_event_sets = 1,
	.last_drain_counts = 300, .last_drain_stacks = 200, .count_capacity = 65536,
	.stack_capacity = 16384,
	/* BPF time per sample: 4 at 2.x us, 5 at 11.x us, 1 beyond 63 us */
	.bpf_time = { .buckets = { [2] = 4, [11] = 5, [63] = 1 }, .count = 10, .sum_ns = 180000 },
};
static const struct symbols_stats sy = { .elf_cache_hits = 1000, .elf_cache_misses = 10, .cached_elfs = 9,
					 .lines_resolved = 77, .lines_mem_bytes = 4096 };
static const struct agentlink_stats as = { .connected = 1, .accepted = 3, .fds_passed = 40 };
static const struct hostview_stats hs = { .samples = 777, .buckets = 60, .bytes = 1 << 20,
	.evicted_age = 8, .evicted_memory = 1, .oldest_ns = 1000000000ull, .newest_ns = 601000000000ull };
static const struct metrics_http hh = { .requests = 5, .unauthorized = 2, .profiles_in_flight = 1 };
static const struct session_gate_stats gs = { .opened_ready = 41, .opened_deadline = 2,
	.wait_ms_total = 9120, .wait_ms_max = 2001 };
static const struct metrics_self me = { .cpu_user_s = 1.25, .cpu_system_s = 0.5, .rss_bytes = 8 << 20,
	.virtual_bytes = 100 << 20, .open_fds = 20, .start_time_s = 1700000000.5 };

static char *render(const struct metrics_input *in)
{
	struct buf b = BUF_INIT;
	size_t len;

	ck_assert_int_eq(metrics_render(in, &b), 0);
	return buf_steal(&b, &len);
}

static struct metrics_input full(void)
{
	return (struct metrics_input){ .version = "1.2.3", .sampler = &ss, .symbols = &sy, .agents = &as,
				       .hostview = &hs, .http = &hh, .self = &me, .gate = &gs, .sessions = 3,
				       .clients = 4 };
}

/* The value of the sample line "name{labels} value" (exact series), or -1. */
static double value_of(const char *text, const char *series)
{
	size_t n = strlen(series);

	for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
		if (strncmp(p, series, n) == 0 && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	}
	return -1;
}

START_TEST(test_values)
{
	struct metrics_input in = full();
	char *t = render(&in);

	ck_assert_double_eq(value_of(t, "jprofd_samples_total"), 12345);
	ck_assert_double_eq(value_of(t, "jprofd_samples_lost_total{cause=\"kernel_stack\"}"), 1);
	ck_assert_double_eq(value_of(t, "jprofd_samples_lost_total{cause=\"ringbuf_full\"}"), 5);
	ck_assert_double_eq(value_of(t, "jprofd_samples_lost_total{cause=\"throttled\"}"), 6);
	ck_assert_double_eq(value_of(t, "jprofd_drain_seconds_total"), 1.5);
	ck_assert_double_eq(value_of(t, "jprofd_bpf_map_entries{map=\"counts\"}"), 300);
	ck_assert_double_eq(value_of(t, "jprofd_bpf_map_capacity{map=\"stacks\"}"), 16384);
	ck_assert_double_eq(value_of(t, "jprofd_sessions"), 3);
	ck_assert_double_eq(value_of(t, "jprofd_clients"), 4);
	ck_assert_double_eq(value_of(t, "jprofd_record_gate_opened_total{reason=\"ready\"}"), 41);
	ck_assert_double_eq(value_of(t, "jprofd_record_gate_opened_total{reason=\"deadline\"}"), 2);
	ck_assert_double_eq(value_of(t, "jprofd_record_gate_wait_seconds_total"), 9.12);
	ck_assert_double_eq(value_of(t, "jprofd_agents"), 1);
	ck_assert_double_eq(value_of(t, "jprofd_hostview_buckets"), 60);
	ck_assert_double_eq(value_of(t, "jprofd_hostview_bytes"), 1 << 20);
	ck_assert_double_eq(value_of(t, "jprofd_hostview_evictions_total{reason=\"memory\"}"), 1);
	ck_assert_double_eq(value_of(t, "jprofd_hostview_retained_seconds"), 600);
	ck_assert_double_eq(value_of(t, "jprofd_symbols_cache_hits_total"), 1000);
	ck_assert_double_eq(value_of(t, "jprofd_symbols_cache_misses_total"), 10);
	ck_assert_double_eq(value_of(t, "jprofd_lines_resolved_total"), 77);
	ck_assert_double_eq(value_of(t, "jprofd_lines_memory_bytes"), 4096);
	ck_assert_double_eq(value_of(t, "jprofd_http_unauthorized_total"), 2);
	ck_assert_double_eq(value_of(t, "jprofd_process_cpu_seconds_total{mode=\"user\"}"), 1.25);
	ck_assert_double_eq(value_of(t, "jprofd_process_resident_memory_bytes"), 8 << 20);
	ck_assert_double_eq(value_of(t, "jprofd_process_start_time_seconds"), 1700000000.5);
	ck_assert_double_eq(value_of(t, "jprofd_build_info{version=\"1.2.3\"}"), 1);
	/* cumulative: le is a bucket's top, the 1 us buckets merged below it */
	ck_assert_double_eq(value_of(t, "jprofd_bpf_sample_duration_seconds_bucket{le=\"2e-06\"}"), 0);
	ck_assert_double_eq(value_of(t, "jprofd_bpf_sample_duration_seconds_bucket{le=\"3e-06\"}"), 4);
	ck_assert_double_eq(value_of(t, "jprofd_bpf_sample_duration_seconds_bucket{le=\"1e-05\"}"), 4);
	ck_assert_double_eq(value_of(t, "jprofd_bpf_sample_duration_seconds_bucket{le=\"1.2e-05\"}"), 9);
	ck_assert_double_eq(value_of(t, "jprofd_bpf_sample_duration_seconds_bucket{le=\"6.3e-05\"}"), 9);
	ck_assert_double_eq(value_of(t, "jprofd_bpf_sample_duration_seconds_bucket{le=\"+Inf\"}"), 10);
	ck_assert_double_eq(value_of(t, "jprofd_bpf_sample_duration_seconds_count"), 10);
	ck_assert_double_eq(value_of(t, "jprofd_bpf_sample_duration_seconds_sum"), 0.00018);
	free(t);
}
END_TEST

/* Every sample belongs to the family announced just before it by HELP and
 * TYPE; a family appears once; counters end in _total; names are jprofd_*
 * and valid; the text ends with a newline. */
static void check_format(const char *t, unsigned min_samples)
{
	char family[128] = "", type[16] = "", seen[4096] = " ";
	const char *p = t;
	unsigned samples = 0;

	ck_assert(t[0] && t[strlen(t) - 1] == '\n');
	while (*p) {
		const char *nl = strchr(p, '\n');
		char line[512], name[128];
		size_t len = (size_t)(nl - p), n;

		ck_assert_ptr_nonnull(nl);
		ck_assert_uint_lt(len, sizeof(line));
		memcpy(line, p, len);
		line[len] = '\0';
		p = nl + 1;
		if (strncmp(line, "# HELP ", 7) == 0) {
			ck_assert_int_eq(sscanf(line + 7, "%127s", family), 1);
			ck_assert_msg(strncmp(family, "jprofd_", 7) == 0, "family %s", family);
			snprintf(name, sizeof(name), " %s ", family);
			ck_assert_msg(!strstr(seen, name), "family %s appears twice", family);
			ck_assert_uint_lt(strlen(seen) + strlen(name), sizeof(seen));
			strcat(seen, name + 1);
			ck_assert_uint_gt(strlen(line), 8 + strlen(family));  /* has a help text */
			type[0] = '\0';
			continue;
		}
		if (strncmp(line, "# TYPE ", 7) == 0) {
			ck_assert_int_eq(sscanf(line + 7, "%127s %15s", name, type), 2);
			ck_assert_str_eq(name, family);
			ck_assert_msg(!strcmp(type, "counter") || !strcmp(type, "gauge") ||
				      !strcmp(type, "histogram"), "type %s", type);
			if (!strcmp(type, "counter")) {
				n = strlen(family);
				ck_assert_msg(n > 6 && !strcmp(family + n - 6, "_total"),
					      "counter %s does not end in _total", family);
			}
			continue;
		}
		ck_assert_msg(line[0] != '#', "stray comment: %s", line);
		ck_assert_msg(type[0], "sample without HELP/TYPE: %s", line);
		n = strcspn(line, "{ ");
		if (!strcmp(type, "histogram")) {
			/* family_bucket{le="..."}, family_sum, family_count */
			size_t f = strlen(family);
			const char *suffix = line + f;

			ck_assert_msg(n > f && !strncmp(line, family, f), "sample %s outside family %s",
				      line, family);
			ck_assert_msg((n - f == 7 && !strncmp(suffix, "_bucket{le=\"", 12)) ||
				      (n - f == 4 && !strncmp(suffix, "_sum ", 5)) ||
				      (n - f == 6 && !strncmp(suffix, "_count ", 7)),
				      "histogram sample %s", line);
		} else {
			ck_assert_msg(n == strlen(family) && !strncmp(line, family, n),
				      "sample %s outside family %s", line, family);
		}
		for (size_t i = 0; i < n; i++)
			ck_assert(isalnum((unsigned char)line[i]) || line[i] == '_');
		if (line[n] == '{') {
			const char *close = strchr(line + n, '}');

			ck_assert_ptr_nonnull(close);
			ck_assert_int_eq(close[1], ' ');
			n = (size_t)(close - line) + 1;
		}
		ck_assert_int_eq(line[n], ' ');
		{
			char *end;
			double v = strtod(line + n + 1, &end);

			ck_assert_msg(*end == '\0' && end != line + n + 1, "bad value in %s", line);
			ck_assert(v >= 0);
		}
		samples++;
	}
	ck_assert_uint_ge(samples, min_samples);
}

START_TEST(test_format_rules)
{
	struct metrics_input in = full();
	char *t = render(&in);

	check_format(t, 50);
	free(t);
}
END_TEST

START_TEST(test_missing_modules_left_out)
{
	struct metrics_input in = { .sessions = 0 };
	char *t = render(&in);

	check_format(t, 3);
	ck_assert_ptr_null(strstr(t, "jprofd_samples_total"));
	ck_assert_ptr_null(strstr(t, "jprofd_hostview_"));
	ck_assert_ptr_null(strstr(t, "jprofd_record_gate_"));
	ck_assert_ptr_nonnull(strstr(t, "jprofd_build_info{version=\"unknown\"} 1\n"));
	ck_assert_double_eq(value_of(t, "jprofd_sessions"), 0);
	free(t);
}
END_TEST

START_TEST(test_read_self)
{
	struct metrics_self s = { .start_time_s = 42.0 };
	volatile unsigned long x = 0;

	for (unsigned long i = 0; i < 50000000ul; i++)  /* some CPU time to see */
		x += i;
	ck_assert_int_eq(metrics_read_self(&s), 0);
	ck_assert_double_eq(s.start_time_s, 42.0);
	ck_assert(s.cpu_user_s + s.cpu_system_s > 0);
	ck_assert_uint_gt(s.rss_bytes, 4096);
	ck_assert_uint_ge(s.virtual_bytes, s.rss_bytes);
	ck_assert_uint_ge(s.open_fds, 3);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("metrics");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_values);
	tcase_add_test(tc, test_format_rules);
	tcase_add_test(tc, test_missing_modules_left_out);
	tcase_add_test(tc, test_read_self);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
