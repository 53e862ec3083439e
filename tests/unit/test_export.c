#include <check.h>
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "collapsed.h"
#include "export.h"
#include "synth_store.h"

static uint32_t intern(struct store *st, enum frame_kind kind, const char *name,
		       const char *module)
{
	int id = store_frame_intern(st, kind, name, module);

	ck_assert_int_ge(id, 0);
	return (uint32_t)id;
}

static char *render(const struct store *st, const struct export_meta *meta,
		    const struct export_options *opt, enum jprof_format fmt)
{
	struct buf b = BUF_INIT;

	ck_assert_int_eq(export_render(st, meta, opt, fmt, &b), 0);
	return buf_steal(&b, NULL);
}

static char *frame_text(enum frame_kind kind, const char *name, const char *module,
			bool java_types)
{
	struct store_frame f = { .kind = kind, .name = name, .module = module };
	struct buf b = BUF_INIT;

	ck_assert_int_eq(export_collapsed_frame(&f, java_types, &b), 0);
	return buf_steal(&b, NULL);
}

/* With --java-types (java_types); ck_frame_plain: without. */
#define ck_frame_text(kind, name, module, expect)                          \
	do {                                                               \
		char *t_ = frame_text(kind, name, module, true);           \
		ck_assert_str_eq(t_, expect);                              \
		free(t_);                                                  \
	} while (0)
#define ck_frame_plain(kind, name, module, expect)                         \
	do {                                                               \
		char *t_ = frame_text(kind, name, module, false);          \
		ck_assert_str_eq(t_, expect);                              \
		free(t_);                                                  \
	} while (0)

/* A recording of several events (cpu, alloc, lock): each format shows the
 * first event's value where it shows one, and says which event each number
 * belongs to. */
START_TEST(test_several_events)
{
	static const struct sample_type types[] = {
		{ "samples", "count" }, { "cpu", "nanoseconds" }, { "alloc_space", "bytes" },
		{ "lock_wait", "nanoseconds" },
	};
	static const char *const mains[] = { "cpu", "alloc_space", "lock_wait" };
	struct export_options opt = { .value = "cpu", .event_values = mains, .nevent_values = 3 };
	struct store *st = store_new(NULL, types, 4);
	uint32_t m = intern(st, FRAME_JAVA_JIT, "Main.run", NULL);
	uint32_t spin[] = { m, intern(st, FRAME_JAVA_JIT, "Main.spin", NULL) };
	uint32_t big[] = { m, intern(st, FRAME_JAVA_JIT, "Main.big", NULL),
			   intern(st, FRAME_JAVA, "byte[]", NULL) };
	uint32_t wait[] = { m, intern(st, FRAME_JAVA_JIT, "Main.waiter", NULL),
			    intern(st, FRAME_JAVA, "Main$Box", NULL) };
	char *out;

	ck_assert_int_eq(store_add(st, &(struct store_sample){ .pid = 1, .tid = 1, .frames = spin,
			 .nframes = 2, .values = (const uint64_t[]){ 3, 30000000, 0, 0 } }), 0);
	ck_assert_int_eq(store_add(st, &(struct store_sample){ .pid = 1, .tid = 1, .frames = big,
			 .nframes = 3, .values = (const uint64_t[]){ 5, 0, 4096, 0 } }), 0);
	ck_assert_int_eq(store_add(st, &(struct store_sample){ .pid = 1, .tid = 2, .frames = wait,
			 .nframes = 3, .values = (const uint64_t[]){ 2, 0, 0, 7000000 } }), 0);

	/* collapsed: the first event's value; the others' stacks are left out */
	out = render(st, NULL, &opt, JPROF_FMT_COLLAPSED);
	ck_assert_str_eq(out, "Main.run;Main.spin 30000000\n");
	free(out);

	/* text: one section per event, each with its own stacks and unit */
	out = render(st, NULL, &opt, JPROF_FMT_TEXT);
	ck_assert_ptr_nonnull(strstr(out, "total: 10 samples (0.030 s of cpu, 4096 bytes of "
					  "alloc_space, 0.007 s of lock_wait)"));
	ck_assert_ptr_nonnull(strstr(out, "##### cpu (nanoseconds) #####\n\n=== top 1 of 1 stacks"));
	ck_assert_ptr_nonnull(strstr(out, "##### alloc_space (bytes) #####\n\n=== top 1 of 1 stacks"
					  ", leaf first ===\n\n--- 1: 4096 bytes of alloc_space "
					  "(100.00%)\n  byte[]"));
	ck_assert_ptr_nonnull(strstr(out, "##### lock_wait (nanoseconds) #####\n\n=== top 1 of 1 "
					  "stacks, leaf first ===\n\n--- 1: 0.007 s of lock_wait "
					  "(100.00%)\n  Main$Box"));
	ck_assert_ptr_nonnull(strstr(out, "top functions by self lock_wait"));
	ck_assert(strstr(out, "lock_wait (nanoseconds) #####") >
		  strstr(out, "alloc_space (bytes) #####"));
	free(out);

	/* html: a view per event, totals in the order of the nodes */
	out = render(st, NULL, &opt, JPROF_FMT_HTML);
	ck_assert_ptr_nonnull(strstr(out, "\"views\":[{\"type\":\"cpu\",\"unit\":\"nanoseconds\","
					  "\"totals\":[30000000,"));
	ck_assert_ptr_nonnull(strstr(out, "{\"type\":\"alloc_space\",\"unit\":\"bytes\","
					  "\"totals\":[4096,"));
	ck_assert_ptr_nonnull(strstr(out, "{\"type\":\"lock_wait\",\"unit\":\"nanoseconds\","
					  "\"totals\":[7000000,"));
	free(out);

	/* json: every value named; no weight_ns when two values are nanoseconds */
	out = render(st, NULL, &opt, JPROF_FMT_JSON);
	ck_assert_ptr_nonnull(strstr(out, "{\"type\":\"alloc_space\",\"unit\":\"bytes\"}"));
	ck_assert_ptr_null(strstr(out, "weight_ns"));
	free(out);

	/* one event only: no sections, no views (as before) */
	opt.nevent_values = 1;
	out = render(st, NULL, &opt, JPROF_FMT_TEXT);
	ck_assert_ptr_null(strstr(out, "#####"));
	free(out);
	out = render(st, NULL, &opt, JPROF_FMT_HTML);
	ck_assert_ptr_null(strstr(out, "\"views\""));
	free(out);
	store_free(st);
}
END_TEST

START_TEST(test_format_names)
{
	ck_assert_int_eq(jprof_format_parse("collapsed"), JPROF_FMT_COLLAPSED);
	ck_assert_int_eq(jprof_format_parse("folded"), JPROF_FMT_COLLAPSED);
	ck_assert_int_eq(jprof_format_parse("raw"), JPROF_FMT_RAW);
	ck_assert_int_eq(jprof_format_parse("json"), JPROF_FMT_JSON);
	ck_assert_int_eq(jprof_format_parse("html"), JPROF_FMT_HTML);
	ck_assert_int_eq(jprof_format_parse("pprof"), JPROF_FMT_PPROF);
	ck_assert_int_eq(jprof_format_parse("text"), JPROF_FMT_TEXT);
	ck_assert_int_eq(jprof_format_parse("JSON"), -EINVAL);
	ck_assert_int_eq(jprof_format_parse("pb"), -EINVAL);
	ck_assert_int_eq(jprof_format_parse(""), -EINVAL);
	ck_assert_int_eq(jprof_format_parse(NULL), -EINVAL);
	ck_assert_str_eq(jprof_format_info(JPROF_FMT_COLLAPSED)->name, "collapsed");
	ck_assert_str_eq(jprof_format_info(JPROF_FMT_RAW)->name, "raw");
	ck_assert_str_eq(jprof_format_info(JPROF_FMT_JSON)->name, "json");
	ck_assert_str_eq(jprof_format_info(JPROF_FMT_PPROF)->name, "pprof");
	ck_assert(!jprof_format_info(JPROF_FMT_COLLAPSED)->binary);
	ck_assert(!jprof_format_info(JPROF_FMT_RAW)->binary);
	ck_assert(!jprof_format_info(JPROF_FMT_HTML)->binary);
	ck_assert(jprof_format_info(JPROF_FMT_PPROF)->binary);
}
END_TEST

START_TEST(test_collapsed_frame_text)
{
	ck_frame_text(FRAME_NATIVE, "malloc", "libc.so.6", "malloc");
	ck_frame_text(FRAME_KERNEL, "do_sys_open", "", "do_sys_open_[k]");
	ck_frame_text(FRAME_KERNEL, "nvme_irq", "nvme", "nvme_irq [nvme]_[k]");
	ck_frame_text(FRAME_JAVA_JIT, "Foo.bar", NULL, "Foo.bar_[j]");
	ck_frame_text(FRAME_JAVA_C1, "Foo.tier1", NULL, "Foo.tier1_[1]");
	ck_frame_text(FRAME_JAVA_INLINED, "Foo.baz", NULL, "Foo.baz_[i]");
	ck_frame_text(FRAME_JAVA_INTERP, "Foo.main", NULL, "Foo.main_[0]");
	ck_frame_text(FRAME_JAVA, "Foo.unknown", NULL, "Foo.unknown");
	/* Without --java-types Java frames keep their plain names. */
	ck_frame_plain(FRAME_JAVA_JIT, "Foo.bar", NULL, "Foo.bar");
	ck_frame_plain(FRAME_JAVA_INLINED, "Foo.baz", NULL, "Foo.baz");
	ck_frame_plain(FRAME_JAVA_C1, "Foo.tier1", NULL, "Foo.tier1");
	ck_frame_plain(FRAME_JAVA_INTERP, "Foo.main", NULL, "Foo.main");
	ck_frame_plain(FRAME_KERNEL, "do_sys_open", "", "do_sys_open_[k]");
	ck_frame_text(FRAME_JIT_UNKNOWN, "[jit]", NULL, "[jit]");
	ck_frame_text(FRAME_MARKER, "[gc_active]", NULL, "[gc_active]");
	ck_frame_text(FRAME_NATIVE, "a;b;c", NULL, "a\\x3bb\\x3bc");
	ck_frame_text(FRAME_NATIVE, "line\nbreak\r", NULL, "line\\x0abreak\\x0d");
	ck_frame_text(FRAME_NATIVE, "operator new(unsigned long)", NULL,
		      "operator new(unsigned long)");
	ck_frame_text(FRAME_NATIVE, "caf\xc3\xa9", NULL, "caf\xc3\xa9");
	ck_frame_text(FRAME_NATIVE, "bad\xff", NULL, "bad\\xff");
	/* bidirectional and C1 controls: the name shows as it is stored */
	ck_frame_text(FRAME_NATIVE, "a\xe2\x80\xae" "b\xe2\x81\xa6" "c\xd8\x9c" "d\xc2\x9b" "e", NULL,
		      "a\\u202eb\\u2066c\\u061cd\\u009be");
	ck_frame_text(FRAME_NATIVE, "nbsp\xc2\xa0ok \xe2\x80\x8b", NULL, "nbsp\xc2\xa0ok \xe2\x80\x8b");
}
END_TEST

/* A small profile with every frame kind, two threads sharing a stack and a
 * name that needs escaping. */
static struct store *sample_store(void)
{
	struct store *st = store_new(NULL, NULL, 0);
	uint32_t main_ = intern(st, FRAME_NATIVE, "main", "app");
	uint32_t work = intern(st, FRAME_NATIVE, "do_work", "app");
	uint32_t rd = intern(st, FRAME_KERNEL, "sys_read", NULL);
	uint32_t weird = intern(st, FRAME_NATIVE, "weird;name", NULL);
	uint32_t run = intern(st, FRAME_JAVA_INTERP, "Foo.run", NULL);
	uint32_t loop = intern(st, FRAME_JAVA_JIT, "Foo.loop", NULL);
	uint32_t inl = intern(st, FRAME_JAVA_INLINED, "Foo.inl", NULL);
	uint32_t irq = intern(st, FRAME_KERNEL, "nvme_irq", "nvme");
	uint32_t gc = intern(st, FRAME_MARKER, "[gc_active]", NULL);
	uint32_t s1[] = { main_, work, rd };
	uint32_t s2[] = { main_, weird };
	uint32_t s3[] = { run, loop, inl, irq };

	ck_assert_int_eq(synth_add(st, 10, 10, s1, 3, 3, 30), 0);
	ck_assert_int_eq(synth_add(st, 10, 11, s1, 3, 2, 20), 0);
	ck_assert_int_eq(synth_add(st, 10, 11, s2, 2, 1, 10), 0);
	ck_assert_int_eq(synth_add(st, 10, 12, s3, 4, 4, 40), 0);
	ck_assert_int_eq(synth_add(st, 10, 12, NULL, 0, 1, 10), 0);
	ck_assert_int_eq(synth_add(st, 10, 10, &gc, 1, 7, 70), 0);
	ck_assert_int_eq(synth_add(st, 10, 10, s1, 1, 1, 10), 0);
	ck_assert_int_eq(store_set_thread_name(st, 10, 10, "main-thread"), 0);
	ck_assert_int_eq(store_set_thread_name(st, 10, 12, "worker;1"), 0);
	ck_assert_int_eq(store_set_process_name(st, 10, "app"), 0);
	return st;
}

START_TEST(test_collapsed_exact)
{
	struct store *st = sample_store();
	struct export_options opt = { .java_types = true };
	char *out = render(st, NULL, &opt, JPROF_FMT_COLLAPSED);

	/* Byte order: 'F' < '[' < 'm'; "main" sorts before "main;..." */
	ck_assert_str_eq(out,
			 "Foo.run_[0];Foo.loop_[j];Foo.inl_[i];nvme_irq [nvme]_[k] 4\n"
			 "[gc_active] 7\n"
			 "[no_stack] 1\n"
			 "main 1\n"
			 "main;do_work;sys_read_[k] 5\n"
			 "main;weird\\x3bname 1\n");
	free(out);
	store_free(st);
}
END_TEST

START_TEST(test_collapsed_thread_frames)
{
	struct store *st = sample_store();
	struct export_options opt = { .thread_frames = true, .java_types = true };
	char *out = render(st, NULL, &opt, JPROF_FMT_COLLAPSED);

	ck_assert_str_eq(out,
			 "[main-thread tid=10];[gc_active] 7\n"
			 "[main-thread tid=10];main 1\n"
			 "[main-thread tid=10];main;do_work;sys_read_[k] 3\n"
			 "[tid=11];main;do_work;sys_read_[k] 2\n"
			 "[tid=11];main;weird\\x3bname 1\n"
			 "[worker\\x3b1 tid=12];Foo.run_[0];Foo.loop_[j];Foo.inl_[i];nvme_irq [nvme]_[k] 4\n"
			 "[worker\\x3b1 tid=12];[no_stack] 1\n");
	free(out);
	store_free(st);
}
END_TEST

START_TEST(test_collapsed_merges_identical_text)
{
	struct store *st = store_new(NULL, NULL, 0);
	/* Same name in two modules: the folded text cannot tell them apart. */
	uint32_t a = intern(st, FRAME_NATIVE, "memcpy", "libc.so.6");
	uint32_t b = intern(st, FRAME_NATIVE, "memcpy", "libfoo.so");
	char *out;

	ck_assert_int_eq(synth_add(st, 1, 1, &a, 1, 2, 0), 0);
	ck_assert_int_eq(synth_add(st, 2, 2, &b, 1, 3, 0), 0);
	out = render(st, NULL, NULL, JPROF_FMT_COLLAPSED);
	ck_assert_str_eq(out, "memcpy 5\n");
	free(out);
	store_free(st);
}
END_TEST

/* Lines must come out in byte order of their stack text even when names
 * hold bytes below and above ';' (space, '-', '~'), and never repeat. */
START_TEST(test_collapsed_sorted_random)
{
	static const char alphabet[] = " -;a~";
	struct store *st = store_new(NULL, NULL, 0);
	uint32_t ids[40], f[4];
	char name[4], *out, *line, *prev = NULL, *save = NULL;
	uint64_t total = 0, sum = 0;
	size_t i, j, lines = 0;

	srand(7);
	for (i = 0; i < 40; i++) {
		for (j = 0; j < 3; j++)
			name[j] = alphabet[rand() % 5];
		name[rand() % 3 + 1] = '\0';
		ids[i] = intern(st, FRAME_NATIVE, name, NULL);
	}
	for (i = 0; i < 2000; i++) {
		size_t n = (size_t)rand() % 4;

		for (j = 0; j < n; j++)
			f[j] = ids[rand() % 40];
		ck_assert_int_eq(synth_add(st, 1, (uint32_t)rand() % 3, f, n, 1, 0), 0);
		total++;
	}
	out = render(st, NULL, NULL, JPROF_FMT_COLLAPSED);
	for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *sp = strrchr(line, ' ');

		ck_assert_ptr_nonnull(sp);
		*sp = '\0';
		sum += strtoull(sp + 1, NULL, 10);
		if (prev)
			ck_assert_int_lt(strcmp(prev, line), 0);
		prev = line;
		lines++;
	}
	ck_assert_uint_eq(sum, total);
	ck_assert_uint_gt(lines, 100);
	free(out);
	store_free(st);
}
END_TEST

START_TEST(test_empty_store)
{
	struct store *st = store_new(NULL, NULL, 0);
	struct buf b = BUF_INIT;
	struct json_object *root = NULL, *v;

	ck_assert_int_eq(export_render(st, NULL, NULL, JPROF_FMT_COLLAPSED, &b), 0);
	ck_assert_uint_eq(b.len, 0);
	ck_assert_int_eq(export_render(st, NULL, NULL, JPROF_FMT_RAW, &b), 0);
	root = json_tokener_parse(b.data);
	ck_assert_ptr_nonnull(root);
	ck_assert(json_object_object_get_ex(root, "stacks", &v));
	ck_assert_uint_eq(json_object_array_length(v), 0);
	ck_assert(json_object_object_get_ex(root, "frames", &v));
	ck_assert_uint_eq(json_object_array_length(v), 1);  /* the [truncated] marker */
	json_object_put(root);
	buf_release(&b);
	store_free(st);
}
END_TEST

START_TEST(test_render_errors_keep_buffer)
{
	struct store *st = store_new(NULL, NULL, 0);
	struct buf b = BUF_INIT;

	ck_assert_int_eq(buf_puts(&b, "keep"), 0);
	ck_assert_int_eq(export_render(st, NULL, NULL, JPROF_FMT_COUNT, &b), -EINVAL);
	ck_assert_int_eq(export_render(NULL, NULL, NULL, JPROF_FMT_RAW, &b), -EINVAL);
	ck_assert_str_eq(b.data, "keep");
	ck_assert_int_eq(export_render(st, NULL, NULL, JPROF_FMT_RAW, NULL), -EINVAL);
	ck_assert_int_eq(export_collapsed_frame(NULL, false, &b), -EINVAL);
	buf_release(&b);
	store_free(st);
}
END_TEST

/* Strict parse: json-c with UTF-8 validation, so invalid bytes would fail. */
static struct json_object *parse_strict(const char *text, size_t len)
{
	struct json_tokener *tok = json_tokener_new();
	struct json_object *o;

	ck_assert_ptr_nonnull(tok);
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	o = json_tokener_parse_ex(tok, text, (int)len);
	ck_assert_msg(o != NULL, "parse failed: %s",
		      json_tokener_error_desc(json_tokener_get_error(tok)));
	json_tokener_free(tok);
	return o;
}

static struct json_object *get(struct json_object *o, const char *key)
{
	struct json_object *v = NULL;

	ck_assert_msg(json_object_object_get_ex(o, key, &v), "missing key %s", key);
	return v;
}

START_TEST(test_json_structure)
{
	struct store *st = sample_store();
	struct export_meta meta = { .pid = 10, .comm = "app", .event = "cpu-clock",
				    .start_unix_ns = 1700000000123456789ULL,
				    .duration_ns = 30000000000ULL,
				    .period_type = { "cpu", "nanoseconds" }, .period = 10000000,
				    .status = "complete" };
	struct json_object *root, *m, *t, *frames, *stacks, *threads, *procs;
	struct store_totals tot;
	struct buf b = BUF_INIT;
	uint64_t sum = 0, wsum = 0;
	size_t i, j, nframes;

	ck_assert_int_eq(export_render(st, &meta, NULL, JPROF_FMT_RAW, &b), 0);
	ck_assert_uint_gt(b.len, 2);
	ck_assert_int_eq(b.data[b.len - 1], '\n');
	root = parse_strict(b.data, b.len);
	store_get_totals(st, &tot);

	ck_assert_str_eq(json_object_get_string(get(root, "format")), "jprofd-profile");
	ck_assert_int_eq(json_object_get_int(get(root, "version")), 1);
	m = get(root, "meta");
	ck_assert_int_eq(json_object_get_int(get(m, "pid")), 10);
	ck_assert_str_eq(json_object_get_string(get(m, "comm")), "app");
	ck_assert_str_eq(json_object_get_string(get(m, "event")), "cpu-clock");
	ck_assert_uint_eq(json_object_get_uint64(get(m, "start_unix_ns")), 1700000000123456789ULL);
	ck_assert_uint_eq(json_object_get_uint64(get(m, "duration_ns")), 30000000000ULL);
	ck_assert_uint_eq(json_object_get_uint64(get(m, "interval_ns")), 10000000);
	ck_assert_str_eq(json_object_get_string(get(m, "status")), "complete");

	frames = get(root, "frames");
	nframes = json_object_array_length(frames);
	ck_assert_uint_eq(nframes, tot.frames);
	for (i = 0; i < nframes; i++) {
		struct json_object *f = json_object_array_get_idx(frames, i);
		const struct store_frame *sf = store_frame_get(st, (uint32_t)i);

		ck_assert_str_eq(json_object_get_string(get(f, "name")), sf->name);
		ck_assert_str_eq(json_object_get_string(get(f, "kind")), frame_kind_name(sf->kind));
		ck_assert_str_eq(json_object_get_string(get(f, "module")), sf->module);
	}
	ck_assert_str_eq(json_object_get_string(get(json_object_array_get_idx(frames, 8), "kind")),
			 "kernel");

	stacks = get(root, "stacks");
	ck_assert_uint_eq(json_object_array_length(stacks), tot.stacks);
	for (i = 0; i < json_object_array_length(stacks); i++) {
		struct json_object *s = json_object_array_get_idx(stacks, i), *fa = get(s, "frames");

		for (j = 0; j < json_object_array_length(fa); j++) {
			int64_t id = json_object_get_int64(json_object_array_get_idx(fa, j));

			ck_assert(id >= 0 && (size_t)id < nframes);
		}
		sum += json_object_get_uint64(get(s, "samples"));
		wsum += json_object_get_uint64(get(s, "weight_ns"));
	}
	/* stacks[0] is main;do_work;sys_read of tid 10, root first */
	ck_assert_int_eq(json_object_get_int(get(json_object_array_get_idx(stacks, 0), "tid")), 10);
	ck_assert_int_eq(json_object_get_int(json_object_array_get_idx(
				 get(json_object_array_get_idx(stacks, 0), "frames"), 0)), 1);

	t = get(root, "totals");
	ck_assert_uint_eq(json_object_get_uint64(get(t, "samples")), sum);
	ck_assert_uint_eq(json_object_get_uint64(get(t, "weight_ns")), wsum);
	ck_assert_uint_eq(sum, 19);
	ck_assert_uint_eq(json_object_get_uint64(get(t, "stacks")), tot.stacks);
	ck_assert_uint_eq(json_object_get_uint64(get(t, "frames")), nframes);
	ck_assert(!json_object_get_boolean(get(t, "truncated")));
	ck_assert_uint_eq(json_object_get_uint64(get(t, "truncated_samples")), 0);

	threads = get(root, "threads");
	ck_assert_uint_eq(json_object_array_length(threads), 2);
	ck_assert_str_eq(json_object_get_string(get(json_object_array_get_idx(threads, 1), "name")),
			 "worker;1");
	procs = get(root, "processes");
	ck_assert_uint_eq(json_object_array_length(procs), 1);
	ck_assert_str_eq(json_object_get_string(get(json_object_array_get_idx(procs, 0), "comm")),
			 "app");
	json_object_put(root);
	buf_release(&b);
	store_free(st);
}
END_TEST

START_TEST(test_json_null_meta_and_truncation)
{
	struct store_limits lim = { .max_stacks = 1 };
	struct store *st = store_new(&lim, NULL, 0);
	uint32_t a = intern(st, FRAME_NATIVE, "a", NULL), b = intern(st, FRAME_NATIVE, "b", NULL);
	struct json_object *root, *m, *t;
	struct buf out = BUF_INIT;
	char *folded;

	ck_assert_int_eq(synth_add(st, 5, 6, &a, 1, 2, 0), 0);
	ck_assert_int_eq(synth_add(st, 5, 6, &b, 1, 3, 0), 1);
	ck_assert_int_eq(export_render(st, NULL, NULL, JPROF_FMT_RAW, &out), 0);
	root = parse_strict(out.data, out.len);
	m = get(root, "meta");
	ck_assert(json_object_get_type(get(m, "comm")) == json_type_null);
	ck_assert(json_object_get_type(get(m, "status")) == json_type_null);
	t = get(root, "totals");
	ck_assert(json_object_get_boolean(get(t, "truncated")));
	ck_assert_uint_eq(json_object_get_uint64(get(t, "truncated_samples")), 3);
	ck_assert_uint_eq(json_object_get_uint64(get(t, "samples")), 5);
	json_object_put(root);
	buf_release(&out);

	folded = render(st, NULL, NULL, JPROF_FMT_COLLAPSED);
	ck_assert_str_eq(folded, "[truncated] 3\na 2\n");
	free(folded);
	store_free(st);
}
END_TEST

/* Every name that needs care, with what a JSON reader must get back. */
static const struct {
	const char *name;
	const char *decoded;
} tricky[] = {
	{ "say \"hi\"", "say \"hi\"" },
	{ "C:\\path\\x", "C:\\path\\x" },
	{ "List<Map<K,V>> & more", "List<Map<K,V>> & more" },
	{ "</script><!--", "</script><!--" },
	{ "ctl\x01\x1f\t\n\r\x7f", "ctl\x01\x1f\t\n\r\x7f" },
	{ "caf\xc3\xa9 \xe2\x98\x83 \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x98\x83 \xf0\x9f\x98\x80" },
	{ "sep\xe2\x80\xa8" "x", "sep\xe2\x80\xa8" "x" },
	{ "bad\xff" "byte", "bad\\xffbyte" },
	{ "trunc\xc3", "trunc\\xc3" },
	{ "overlong\xc0\xaf", "overlong\\xc0\\xaf" },
	{ "surrogate\xed\xa0\x80", "surrogate\\xed\\xa0\\x80" },
};

START_TEST(test_json_escaping)
{
	struct store *st = store_new(NULL, NULL, 0);
	struct export_meta meta = { .comm = "we\"ird\\comm\x02", .event = "cpu-clock",
				    .status = "complete" };
	struct json_object *root, *frames;
	struct buf b = BUF_INIT;
	uint32_t ids[sizeof(tricky) / sizeof(tricky[0])];
	size_t i, n = sizeof(tricky) / sizeof(tricky[0]);

	for (i = 0; i < n; i++)
		ids[i] = intern(st, FRAME_NATIVE, tricky[i].name, tricky[i].name);
	ck_assert_int_eq(synth_add(st, 1, 2, ids, n, 1, 1), 0);
	ck_assert_int_eq(store_set_thread_name(st, 1, 2, "\"<&>\""), 0);
	ck_assert_int_eq(export_render(st, &meta, NULL, JPROF_FMT_RAW, &b), 0);

	/* Nothing raw that could break a line-oriented reader or an HTML page. */
	for (i = 0; i + 1 < b.len; i++) {
		ck_assert_msg((unsigned char)b.data[i] >= 0x20, "raw control byte at %zu", i);
		ck_assert_msg(b.data[i] != '<' && b.data[i] != '>', "raw angle bracket at %zu", i);
	}
	ck_assert_ptr_null(strstr(b.data, "\xe2\x80\xa8"));

	root = parse_strict(b.data, b.len);
	frames = get(root, "frames");
	for (i = 0; i < n; i++) {
		struct json_object *f = json_object_array_get_idx(frames, ids[i]);

		ck_assert_str_eq(json_object_get_string(get(f, "name")), tricky[i].decoded);
		ck_assert_str_eq(json_object_get_string(get(f, "module")), tricky[i].decoded);
	}
	ck_assert_str_eq(json_object_get_string(get(get(root, "meta"), "comm")),
			 "we\"ird\\comm\x02");
	ck_assert_str_eq(json_object_get_string(get(json_object_array_get_idx(
				 get(root, "threads"), 0), "name")), "\"<&>\"");
	json_object_put(root);
	buf_release(&b);
	store_free(st);
}
END_TEST

/* python3's json module decodes strictly (UTF-8 first): the other reader
 * the brief names. Python 3 is a hard build dependency of the test suite. */
START_TEST(test_json_python_reads_it)
{
	struct store *st = sample_store();
	struct buf b = BUF_INIT;
	uint32_t id;
	FILE *p;
	int status;

	id = intern(st, FRAME_NATIVE, "bad\xff\"q\\\x01<&>\xed\xa0\x80", NULL);
	ck_assert_int_eq(synth_add(st, 10, 10, &id, 1, 1, 1), 0);
	ck_assert_int_eq(export_render(st, NULL, NULL, JPROF_FMT_RAW, &b), 0);
	p = popen("python3 -c 'import json,sys; d=json.loads(sys.stdin.buffer.read()"
		  ".decode(\"utf-8\")); assert d[\"frames\"][-1][\"name\"]=="
		  "\"bad\\\\xff\\\"q\\\\\\x01<&>\\\\xed\\\\xa0\\\\x80\", d[\"frames\"][-1];"
		  " assert d[\"totals\"][\"samples\"]==sum(s[\"samples\"] for s in d[\"stacks\"])'",
		  "w");
	ck_assert_ptr_nonnull(p);
	ck_assert_uint_eq(fwrite(b.data, 1, b.len, p), b.len);
	status = pclose(p);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "python3 rejected the JSON (status %d)", status);
	buf_release(&b);
	store_free(st);
}
END_TEST

START_TEST(test_registry)
{
	struct store *st = store_new(NULL, NULL, 0);
	struct buf b = BUF_INIT;

	/* Every format of proto/jprof_formats.h has its renderer, and each one
	 * renders an empty store. */
	for (int f = 0; f < JPROF_FMT_COUNT; f++) {
		const struct export_renderer *r = export_renderer((enum jprof_format)f);

		ck_assert_ptr_nonnull(r);
		ck_assert_int_eq(r->id, f);
		ck_assert_ptr_nonnull(r->render);
		buf_reset(&b);
		ck_assert_int_eq(export_render(st, NULL, NULL, (enum jprof_format)f, &b), 0);
		ck_assert_uint_gt(b.len + (f == JPROF_FMT_COLLAPSED), 0);
	}
	ck_assert_ptr_null(export_renderer(JPROF_FMT_COUNT));
	ck_assert_ptr_null(export_renderer((enum jprof_format)-1));
	buf_release(&b);
	store_free(st);
}
END_TEST

static Suite *export_suite(void)
{
	Suite *s = suite_create("export");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_format_names);
	tcase_add_test(tc, test_collapsed_frame_text);
	tcase_add_test(tc, test_collapsed_exact);
	tcase_add_test(tc, test_collapsed_thread_frames);
	tcase_add_test(tc, test_collapsed_merges_identical_text);
	tcase_add_test(tc, test_collapsed_sorted_random);
	tcase_add_test(tc, test_empty_store);
	tcase_add_test(tc, test_render_errors_keep_buffer);
	tcase_add_test(tc, test_json_structure);
	tcase_add_test(tc, test_json_null_meta_and_truncation);
	tcase_add_test(tc, test_registry);
	tcase_add_test(tc, test_several_events);
	tcase_add_test(tc, test_json_escaping);
	tcase_add_test(tc, test_json_python_reads_it);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(export_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
