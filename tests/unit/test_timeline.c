/* The time-ordered renderers (daemon/export/timeline.c) on synthetic stores
 * with sample times: Trace Event JSON and speedscope, each parsed back with
 * json-c (strict, UTF-8 validated) and checked for what a viewer shows. */
#include <check.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "export.h"
#include "synth_store.h"

#define MS 1000000ULL
#define T0 (5000 * MS)   /* CLOCK_MONOTONIC at the recording's start */

static const struct export_meta tl_meta = {
	.pid = 100, .comm = "app", .event = "cpu-clock", .start_unix_ns = 1700000000000000000ULL,
	.start_mono_ns = T0, .duration_ns = 1000 * MS,
	.period_type = { "cpu", "nanoseconds" }, .period = 10 * MS, .status = "complete",
};

static struct store *new_store(size_t max_times)
{
	struct store *st = store_new(NULL, NULL, 0);

	ck_assert_ptr_nonnull(st);
	ck_assert_int_eq(store_keep_times(st, max_times), 0);
	store_set_process_name(st, 100, "app");
	return st;
}

static uint32_t fr(struct store *st, enum frame_kind kind, const char *name)
{
	int id = store_frame_intern(st, kind, name, "");

	ck_assert_int_ge(id, 0);
	return (uint32_t)id;
}

/* One sample of pid 100 at T0 + at_ms. */
static void add(struct store *st, uint32_t tid, uint64_t at_ms, const uint32_t *frames, size_t n)
{
	const uint64_t values[2] = { 1, 10 * MS };

	ck_assert_int_ge(store_add(st, &(struct store_sample){ .pid = 100, .tid = tid,
		.frames = frames, .nframes = n, .values = values, .time_ns = T0 + at_ms * MS }), 0);
}

static struct json_object *render_parse(const struct store *st, enum jprof_format fmt)
{
	struct buf b = BUF_INIT;
	struct json_tokener *tok = json_tokener_new();
	struct json_object *o;

	ck_assert_int_eq(export_render(st, &tl_meta, NULL, fmt, &b), 0);
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	o = json_tokener_parse_ex(tok, b.data, (int)b.len);
	ck_assert_msg(o, "not JSON (%s): %s", json_tokener_error_desc(json_tokener_get_error(tok)),
		      b.data);
	json_tokener_free(tok);
	buf_release(&b);
	return o;
}

static struct json_object *member(struct json_object *o, const char *key)
{
	struct json_object *v = NULL;

	ck_assert_msg(json_object_object_get_ex(o, key, &v), "no member %s", key);
	return v;
}

static const char *str(struct json_object *o, const char *key)
{
	return json_object_get_string(member(o, key));
}

/* ---- Trace Event JSON ---------------------------------------------------- */

/* A slice as the test compares it: times in ms from the start. */
struct slice {
	char name[64];
	const char *cat;
	double ts_ms, dur_ms;
	int64_t samples;
};

/* The "X" events of tid, in file order, after checking the file's order
 * rules: metadata first, then non-decreasing ts. */
static size_t slices_of(struct json_object *doc, uint32_t tid, struct slice *out, size_t max)
{
	struct json_object *ev = member(doc, "traceEvents");
	double last = -1;
	bool meta_done = false;
	size_t n = 0;

	for (size_t i = 0; i < json_object_array_length(ev); i++) {
		struct json_object *e = json_object_array_get_idx(ev, i);
		const char *ph = str(e, "ph");

		if (!strcmp(ph, "M")) {
			ck_assert_msg(!meta_done, "metadata event after a timed one");
			continue;
		}
		meta_done = true;
		double ts = json_object_get_double(member(e, "ts"));
		ck_assert_msg(ts >= last, "ts goes back: %f after %f", ts, last);
		last = ts;
		if (strcmp(ph, "X") || json_object_get_int64(member(e, "tid")) != tid)
			continue;
		ck_assert_uint_lt(n, max);
		snprintf(out[n].name, sizeof(out[n].name), "%s", str(e, "name"));
		out[n].cat = str(e, "cat");
		out[n].ts_ms = ts / 1000.0;
		out[n].dur_ms = json_object_get_double(member(e, "dur")) / 1000.0;
		out[n].samples = json_object_get_int64(member(member(e, "args"), "samples"));
		n++;
	}
	return n;
}

static void ck_slice(const struct slice *s, const char *name, double ts_ms, double dur_ms,
		     int64_t samples)
{
	ck_assert_str_eq(s->name, name);
	ck_assert_msg(s->ts_ms > ts_ms - 1e-6 && s->ts_ms < ts_ms + 1e-6, "%s: ts %f, want %f",
		      name, s->ts_ms, ts_ms);
	ck_assert_msg(s->dur_ms > dur_ms - 1e-6 && s->dur_ms < dur_ms + 1e-6, "%s: dur %f, want %f",
		      name, s->dur_ms, dur_ms);
	ck_assert_int_eq(s->samples, samples);
}

/* The name of a thread's thread_name metadata event, or NULL. */
static const char *thread_name_of(struct json_object *doc, uint32_t tid)
{
	struct json_object *ev = member(doc, "traceEvents");

	for (size_t i = 0; i < json_object_array_length(ev); i++) {
		struct json_object *e = json_object_array_get_idx(ev, i);

		if (!strcmp(str(e, "ph"), "M") && !strcmp(str(e, "name"), "thread_name") &&
		    json_object_get_int64(member(e, "tid")) == tid)
			return str(member(e, "args"), "name");
	}
	return NULL;
}

/* Thread 1 runs main;a for 100 ms then main;b for 100 ms, thread 2 runs
 * main;k (a kernel frame); samples added interleaved and out of order, as
 * the JVM join and per-CPU rings add them. */
static struct store *alternating_store(void)
{
	struct store *st = new_store(1000);
	uint32_t m = fr(st, FRAME_NATIVE, "main"), a = fr(st, FRAME_NATIVE, "a");
	uint32_t b = fr(st, FRAME_JAVA, "com.example.B.run"), k = fr(st, FRAME_KERNEL, "ksys_read");
	const uint32_t sa[] = { m, a }, sb[] = { m, b }, sk[] = { m, k };

	for (int i = 19; i >= 0; i--) {
		if (i >= 10)
			add(st, 1, 10 * (uint64_t)i, sb, 2);
		else
			add(st, 1, 10 * (uint64_t)i, sa, 2);
		add(st, 2, 5 + 10 * (uint64_t)i, sk, 2);
	}
	store_set_thread_name(st, 100, 1, "worker");
	return st;
}

START_TEST(trace_orders_and_merges)
{
	struct store *st = alternating_store();
	struct json_object *doc = render_parse(st, JPROF_FMT_TIMELINE);
	struct slice s[16];
	size_t n = slices_of(doc, 1, s, 16);

	/* One bar per run of identical stacks: main covers both, a then b. */
	ck_assert_uint_eq(n, 3);
	ck_slice(&s[0], "main", 0, 200, 20);
	ck_slice(&s[1], "a", 0, 100, 10);
	ck_slice(&s[2], "com.example.B.run", 100, 100, 10);
	ck_assert_str_eq(s[0].cat, "native");
	ck_assert_str_eq(s[2].cat, "java");
	n = slices_of(doc, 2, s, 16);
	ck_assert_uint_eq(n, 2);
	ck_slice(&s[0], "main", 5, 200, 20);
	ck_slice(&s[1], "ksys_read", 5, 200, 20);
	ck_assert_str_eq(s[1].cat, "kernel");
	ck_assert_str_eq(thread_name_of(doc, 1), "worker tid=1");
	ck_assert_str_eq(thread_name_of(doc, 2), "tid=2");
	ck_assert_str_eq(str(member(doc, "otherData"), "format"), "jprofd-timeline");
	ck_assert(!json_object_get_boolean(member(member(doc, "otherData"), "truncated")));
	json_object_put(doc);
	store_free(st);
}
END_TEST

/* A thread unsampled for longer than the join gap (two intervals, at least
 * 20 ms) past its last sample's end ends every slice there; identical stacks
 * after the gap start anew. A shorter gap is a wait for a CPU: the slice
 * goes on. */
START_TEST(trace_gap_ends_slices)
{
	struct store *st = new_store(1000);
	uint32_t f[2] = { fr(st, FRAME_NATIVE, "main"), fr(st, FRAME_NATIVE, "spin") };
	struct json_object *doc;
	struct slice s[16];

	add(st, 1, 0, f, 2);
	add(st, 1, 10, f, 2);
	add(st, 1, 20, f, 2);
	add(st, 1, 39, f, 2);    /* 9 ms late: jitter, the slice goes on */
	add(st, 1, 69, f, 2);    /* 20 ms late: waited for a CPU, goes on */
	add(st, 1, 101, f, 2);   /* 22 ms late: off CPU */
	add(st, 1, 111, f, 2);
	doc = render_parse(st, JPROF_FMT_TIMELINE);
	ck_assert_uint_eq(slices_of(doc, 1, s, 16), 4);
	ck_slice(&s[0], "main", 0, 79, 5);
	ck_slice(&s[1], "spin", 0, 79, 5);
	ck_slice(&s[2], "main", 101, 20, 2);
	ck_slice(&s[3], "spin", 101, 20, 2);
	json_object_put(doc);
	store_free(st);
}
END_TEST

/* Only the frames that change reopen: main;x;y -> main;x;z keeps main and x. */
START_TEST(trace_shared_prefix_stays_open)
{
	struct store *st = new_store(1000);
	uint32_t m = fr(st, FRAME_NATIVE, "main"), x = fr(st, FRAME_NATIVE, "x");
	uint32_t y = fr(st, FRAME_NATIVE, "y"), z = fr(st, FRAME_NATIVE, "z");
	const uint32_t s1[] = { m, x, y }, s2[] = { m, x, z }, s3[] = { m };
	struct json_object *doc;
	struct slice s[16];

	add(st, 1, 0, s1, 3);
	add(st, 1, 10, s2, 3);
	add(st, 1, 20, s3, 1);
	add(st, 1, 30, NULL, 0);
	doc = render_parse(st, JPROF_FMT_TIMELINE);
	ck_assert_uint_eq(slices_of(doc, 1, s, 16), 5);
	ck_slice(&s[0], "main", 0, 30, 3);
	ck_slice(&s[1], "x", 0, 20, 2);
	ck_slice(&s[2], "y", 0, 10, 1);
	ck_slice(&s[3], "z", 10, 10, 1);
	ck_slice(&s[4], EXPORT_NO_STACK, 30, 10, 1);
	ck_assert_str_eq(s[4].cat, "marker");
	json_object_put(doc);
	store_free(st);
}
END_TEST

/* Names under the shared naming rules: quotes and '<' survive JSON, control
 * bytes and invalid UTF-8 read as \xNN, in frames, threads and processes. */
START_TEST(trace_hostile_names)
{
	struct store *st = new_store(1000);
	uint32_t f[SYNTH_HOSTILE_N];
	struct json_object *doc, *ev;
	struct slice s[SYNTH_HOSTILE_N + 1];
	bool proc = false;

	for (size_t i = 0; i < SYNTH_HOSTILE_N; i++)
		f[i] = fr(st, FRAME_NATIVE, synth_hostile[i].name);
	add(st, 7, 0, f, SYNTH_HOSTILE_N);
	store_set_thread_name(st, 100, 7, "th \"q\"\n\xff");
	store_set_process_name(st, 100, "pr</script>\x01");
	doc = render_parse(st, JPROF_FMT_TIMELINE);
	ck_assert_uint_eq(slices_of(doc, 7, s, SYNTH_HOSTILE_N + 1), SYNTH_HOSTILE_N);
	for (size_t i = 0; i < SYNTH_HOSTILE_N; i++)
		ck_assert_str_eq(s[i].name, synth_hostile[i].shown);
	ck_assert_str_eq(thread_name_of(doc, 7), "th \"q\"\\x0a\\xff tid=7");
	ev = member(doc, "traceEvents");
	for (size_t i = 0; i < json_object_array_length(ev); i++) {
		struct json_object *e = json_object_array_get_idx(ev, i);

		if (!strcmp(str(e, "name"), "process_name")) {
			ck_assert_str_eq(str(member(e, "args"), "name"), "pr</script>\\x01");
			proc = true;
		}
	}
	ck_assert(proc);
	json_object_put(doc);
	store_free(st);
}
END_TEST

static void add_five(struct store *st)
{
	uint32_t f = fr(st, FRAME_NATIVE, "main");

	for (uint64_t i = 0; i < 5; i++)
		add(st, 1, 10 * i, &f, 1);
}

START_TEST(trace_truncated_marker)
{
	struct store *st = new_store(3);
	struct json_object *doc, *ev, *other;
	struct store_totals t;
	int marks = 0;

	add_five(st);
	store_get_totals(st, &t);
	ck_assert_uint_eq(t.times_dropped, 2);
	doc = render_parse(st, JPROF_FMT_TIMELINE);
	ev = member(doc, "traceEvents");
	for (size_t i = 0; i < json_object_array_length(ev); i++) {
		struct json_object *e = json_object_array_get_idx(ev, i);

		if (strcmp(str(e, "ph"), "i"))
			continue;
		ck_assert_str_eq(str(e, "name"), "truncated at 3 samples");
		ck_assert_int_eq(json_object_get_int64(member(member(e, "args"), "samples_dropped")), 2);
		marks++;
	}
	ck_assert_int_eq(marks, 1);
	other = member(doc, "otherData");
	ck_assert(json_object_get_boolean(member(other, "truncated")));
	ck_assert_int_eq(json_object_get_int64(member(other, "truncated_at")), 3);
	json_object_put(doc);
	store_free(st);
}
END_TEST

START_TEST(trace_empty)
{
	struct store *st = new_store(1000);
	struct json_object *doc = render_parse(st, JPROF_FMT_TIMELINE), *ev;

	ev = member(doc, "traceEvents");
	/* Only the process's name: a valid trace with nothing on it. */
	ck_assert_uint_eq(json_object_array_length(ev), 1);
	ck_assert_str_eq(str(json_object_array_get_idx(ev, 0), "name"), "process_name");
	ck_assert_int_eq(json_object_get_int64(member(member(doc, "otherData"), "samples")), 0);
	json_object_put(doc);
	store_free(st);
}
END_TEST

/* ---- speedscope ------------------------------------------------------------ */

/* Checks a profile's events: balanced, nested, in time order, inside
 * [startValue, endValue]; returns how many times frame `name` opened. */
static int scope_check_profile(struct json_object *doc, struct json_object *p, const char *name)
{
	struct json_object *frames = member(member(doc, "shared"), "frames");
	struct json_object *ev = member(p, "events");
	int64_t stack[64], at, last = 0, end = json_object_get_int64(member(p, "endValue"));
	size_t depth = 0;
	int opens = 0;

	ck_assert_str_eq(str(p, "type"), "evented");
	ck_assert_str_eq(str(p, "unit"), "nanoseconds");
	for (size_t i = 0; i < json_object_array_length(ev); i++) {
		struct json_object *e = json_object_array_get_idx(ev, i);
		int64_t f = json_object_get_int64(member(e, "frame"));

		at = json_object_get_int64(member(e, "at"));
		ck_assert_int_ge(at, last);
		ck_assert_int_le(at, end);
		last = at;
		ck_assert_int_lt(f, (int64_t)json_object_array_length(frames));
		if (!strcmp(str(e, "type"), "O")) {
			ck_assert_uint_lt(depth, 64);
			stack[depth++] = f;
			if (!strcmp(str(json_object_array_get_idx(frames, (size_t)f), "name"), name))
				opens++;
		} else {
			ck_assert_str_eq(str(e, "type"), "C");
			ck_assert_uint_gt(depth, 0);
			ck_assert_int_eq(stack[--depth], f);
		}
	}
	ck_assert_uint_eq(depth, 0);
	return opens;
}

static struct json_object *scope_profile(struct json_object *doc, const char *name)
{
	struct json_object *ps = member(doc, "profiles");

	for (size_t i = 0; i < json_object_array_length(ps); i++)
		if (!strcmp(str(json_object_array_get_idx(ps, i), "name"), name))
			return json_object_array_get_idx(ps, i);
	ck_abort_msg("no profile %s", name);
	return NULL;
}

START_TEST(speedscope_profiles_per_thread)
{
	struct store *st = alternating_store();
	struct json_object *doc = render_parse(st, JPROF_FMT_SPEEDSCOPE), *p;

	ck_assert_str_eq(str(doc, "$schema"), "https://www.speedscope.app/file-format-schema.json");
	ck_assert_str_eq(str(doc, "name"), "app (pid 100)");
	ck_assert_uint_eq(json_object_array_length(member(doc, "profiles")), 2);
	p = scope_profile(doc, "worker tid=1");
	/* Merged: a and B.run open once each, main once for both. */
	ck_assert_int_eq(scope_check_profile(doc, p, "a"), 1);
	ck_assert_int_eq(scope_check_profile(doc, p, "com.example.B.run"), 1);
	ck_assert_int_eq(scope_check_profile(doc, p, "main"), 1);
	ck_assert_int_eq(json_object_get_int64(member(p, "endValue")), 205 * (int64_t)MS);
	p = scope_profile(doc, "tid=2");
	/* Kernel frames carry collapsed's suffix: speedscope has no kind field. */
	ck_assert_int_eq(scope_check_profile(doc, p, "ksys_read_[k]"), 1);
	json_object_put(doc);
	store_free(st);
}
END_TEST

START_TEST(speedscope_gap_and_hostile)
{
	struct store *st = new_store(1000);
	uint32_t f[SYNTH_HOSTILE_N];
	struct json_object *doc, *frames;

	for (size_t i = 0; i < SYNTH_HOSTILE_N; i++)
		f[i] = fr(st, FRAME_NATIVE, synth_hostile[i].name);
	add(st, 3, 0, f, SYNTH_HOSTILE_N);
	add(st, 3, 500, f, SYNTH_HOSTILE_N);
	store_set_thread_name(st, 100, 3, "t\x7f\"");
	doc = render_parse(st, JPROF_FMT_SPEEDSCOPE);
	ck_assert_int_eq(scope_check_profile(doc, scope_profile(doc, "t\\x7f\" tid=3"),
					     synth_hostile[0].shown), 2);
	frames = member(member(doc, "shared"), "frames");
	for (size_t i = 0; i < SYNTH_HOSTILE_N; i++)
		ck_assert_str_eq(str(json_object_array_get_idx(frames, f[i]), "name"),
				 synth_hostile[i].shown);
	json_object_put(doc);
	store_free(st);
}
END_TEST

START_TEST(speedscope_truncated_and_empty)
{
	struct store *st = new_store(3);
	struct json_object *doc, *ps;

	add_five(st);
	doc = render_parse(st, JPROF_FMT_SPEEDSCOPE);
	ck_assert_str_eq(str(doc, "name"), "app (pid 100) [truncated at 3 samples]");
	scope_profile(doc, "tid=1 [truncated at 3 samples]");
	json_object_put(doc);
	store_free(st);

	st = new_store(1000);
	doc = render_parse(st, JPROF_FMT_SPEEDSCOPE);
	ps = member(doc, "profiles");
	ck_assert_uint_eq(json_object_array_length(ps), 1);
	ck_assert_int_eq(scope_check_profile(doc, scope_profile(doc, "app (pid 100): no samples"),
					     "main"), 0);
	json_object_put(doc);
	store_free(st);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("timeline");
	TCase *tc = tcase_create("timeline");

	tcase_add_test(tc, trace_orders_and_merges);
	tcase_add_test(tc, trace_gap_ends_slices);
	tcase_add_test(tc, trace_shared_prefix_stays_open);
	tcase_add_test(tc, trace_hostile_names);
	tcase_add_test(tc, trace_truncated_marker);
	tcase_add_test(tc, trace_empty);
	tcase_add_test(tc, speedscope_profiles_per_thread);
	tcase_add_test(tc, speedscope_gap_and_hostile);
	tcase_add_test(tc, speedscope_truncated_and_empty);
	suite_add_tcase(s, tc);
	return jprof_check_run(s);
}
