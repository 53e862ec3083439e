/* The tree-shaped and binary formats (calltree.c, flamegraph.c, pprof.c,
 * textreport.c), read back with real parsers: json-c (strict, UTF-8
 * validated) for the JSON tree and the page's embedded data, zlib inflate +
 * protobuf-c unpack for pprof. */
#include <check.h>
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "export.h"
#include "profile.pb-c.h"
#include "synth_store.h"

static const struct export_meta test_meta = {
	.pid = 10, .comm = "app", .event = "cpu-clock", .start_unix_ns = 1700000000123456789ULL,
	.duration_ns = 5000000000ULL, .period_type = { "cpu", "nanoseconds" }, .period = 10000000,
	.status = "complete",
};

static uint32_t intern(struct store *st, enum frame_kind kind, const char *name, const char *module)
{
	int id = store_frame_intern(st, kind, name, module);

	ck_assert_int_ge(id, 0);
	return (uint32_t)id;
}

/* main;work;spin (hot, two threads), main;work;read;sys_read [k], a Java
 * stack, an empty stack and a marker. */
static struct store *small_store(void)
{
	struct store *st = store_new(NULL, NULL, 0);
	uint32_t m = intern(st, FRAME_NATIVE, "main", "app");
	uint32_t w = intern(st, FRAME_NATIVE, "work", "app");
	uint32_t sp = intern(st, FRAME_NATIVE, "spin", "app");
	uint32_t rd = intern(st, FRAME_NATIVE, "read", "libc.so.6");
	uint32_t k = intern(st, FRAME_KERNEL, "sys_read", "");
	uint32_t irq = intern(st, FRAME_KERNEL, "nvme_irq", "nvme");
	uint32_t j1 = intern(st, FRAME_JAVA_INTERP, "Foo.run", "");
	uint32_t j2 = intern(st, FRAME_JAVA_JIT, "Foo.loop", "");
	uint32_t gc = intern(st, FRAME_MARKER, "[gc_active]", "");
	uint32_t s1[] = { m, w, sp }, s2[] = { m, w, rd, k }, s3[] = { j1, j2, irq };

	ck_assert_int_eq(synth_add(st, 10, 10, s1, 3, 50, 500000000), 0);
	ck_assert_int_eq(synth_add(st, 10, 11, s1, 3, 30, 300000000), 0);
	ck_assert_int_eq(synth_add(st, 10, 10, s2, 4, 10, 100000000), 0);
	ck_assert_int_eq(synth_add(st, 10, 10, s2, 2, 3, 30000000), 0);   /* main;work self */
	ck_assert_int_eq(synth_add(st, 10, 12, s3, 3, 4, 40000000), 0);
	ck_assert_int_eq(synth_add(st, 10, 12, NULL, 0, 1, 10000000), 0);
	ck_assert_int_eq(synth_add(st, 10, 12, &gc, 1, 2, 20000000), 0);
	ck_assert_int_eq(store_set_thread_name(st, 10, 10, "main"), 0);
	ck_assert_int_eq(store_set_thread_name(st, 10, 11, "worker-1"), 0);
	ck_assert_int_eq(store_set_process_name(st, 10, "app"), 0);
	return st;   /* 100 samples */
}

static void render(const struct store *st, const struct export_meta *meta,
		   const struct export_options *opt, enum jprof_format fmt, struct buf *b)
{
	buf_reset(b);
	ck_assert_int_eq(export_render(st, meta, opt, fmt, b), 0);
}

static struct json_object *parse_json(const char *text, size_t len)
{
	/* a call tree is as deep as its deepest stack, past json-c's default 32 */
	struct json_tokener *tok = json_tokener_new_ex(1000);
	struct json_object *o;

	ck_assert_ptr_nonnull(tok);
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	o = json_tokener_parse_ex(tok, text, (int)len);
	ck_assert_msg(o != NULL, "JSON parse failed: %s",
		      json_tokener_error_desc(json_tokener_get_error(tok)));
	/* nothing but the final newline may follow the document */
	ck_assert_uint_ge(json_tokener_get_parse_end(tok), len - 1);
	json_tokener_free(tok);
	return o;
}

static struct json_object *get(struct json_object *o, const char *key)
{
	struct json_object *v = NULL;

	ck_assert_msg(json_object_object_get_ex(o, key, &v), "missing key %s", key);
	return v;
}

static uint64_t get_u64(struct json_object *o, const char *key)
{
	return json_object_get_uint64(get(o, key));
}

/* Element i of the number list o[key]. */
static uint64_t get_at(struct json_object *o, const char *key, size_t i)
{
	return json_object_get_uint64(json_object_array_get_idx(get(o, key), i));
}

/* The page's embedded profile data, parsed; and the count of "</script"
 * in the whole page, which must be exactly the number of script elements. */
static struct json_object *html_data(const char *page)
{
	static const char open[] = "<script type=\"application/json\" id=\"profile-data\">";
	const char *p = strstr(page, open), *e;

	ck_assert_ptr_nonnull(p);
	p += sizeof(open) - 1;
	e = strstr(p, "</script>");
	ck_assert_ptr_nonnull(e);
	return parse_json(p, (size_t)(e - p));
}

static size_t count(const char *hay, const char *needle)
{
	size_t n = 0;

	for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
		n++;
	return n;
}

static Perftools__Profiles__Profile *pprof_unpack(const struct buf *b)
{
	z_stream z = { 0 };
	size_t cap = 1 << 16, len = 0;
	unsigned char *out = malloc(cap);
	Perftools__Profiles__Profile *p;
	int zr;

	ck_assert(b->len > 18 && (unsigned char)b->data[0] == 0x1f && (unsigned char)b->data[1] == 0x8b);
	ck_assert_int_eq(inflateInit2(&z, 15 + 16), Z_OK);
	z.next_in = (Bytef *)b->data;
	z.avail_in = (uInt)b->len;
	do {
		if (len == cap)
			out = realloc(out, cap *= 2);
		z.next_out = out + len;
		z.avail_out = (uInt)(cap - len);
		zr = inflate(&z, Z_NO_FLUSH);
		len = cap - z.avail_out;
		ck_assert_msg(zr == Z_OK || zr == Z_STREAM_END, "inflate: %d", zr);
	} while (zr != Z_STREAM_END);
	ck_assert_uint_eq(z.avail_in, 0);
	inflateEnd(&z);
	p = perftools__profiles__profile__unpack(NULL, len, out);
	ck_assert_msg(p != NULL, "protobuf-c could not unpack the profile");
	free(out);
	return p;
}

static const char *pstr(const Perftools__Profiles__Profile *p, int64_t i)
{
	ck_assert(i >= 0 && (size_t)i < p->n_string_table);
	return p->string_table[i];
}

/* Sum of samples of the samples whose leaf function is named name. */
static uint64_t pprof_leaf_samples(const Perftools__Profiles__Profile *p, const char *name)
{
	uint64_t n = 0;

	for (size_t i = 0; i < p->n_sample; i++) {
		uint64_t loc = p->sample[i]->location_id[0];
		uint64_t fn = p->location[loc - 1]->line[0]->function_id;

		if (!strcmp(pstr(p, p->function[fn - 1]->name), name))
			n += (uint64_t)p->sample[i]->value[0];
	}
	return n;
}

/* ---- JSON tree ---------------------------------------------------------------- */

/* total == self + sum of the children's totals, everywhere. */
static uint64_t check_node(struct json_object *n, size_t depth)
{
	struct json_object *kids = get(n, "children");
	uint64_t sum = 0, prev = UINT64_MAX;

	ck_assert_uint_lt(depth, 1000);
	for (size_t i = 0; i < json_object_array_length(kids); i++) {
		struct json_object *c = json_object_array_get_idx(kids, i);
		uint64_t t = check_node(c, depth + 1);

		ck_assert_uint_le(t, prev);   /* heaviest first */
		prev = t;
		sum += t;
	}
	ck_assert_uint_eq(get_u64(n, "total"), get_u64(n, "self") + sum);
	return get_u64(n, "total");
}

static struct json_object *child(struct json_object *n, const char *name)
{
	struct json_object *kids = get(n, "children");

	for (size_t i = 0; i < json_object_array_length(kids); i++)
		if (!strcmp(json_object_get_string(get(json_object_array_get_idx(kids, i), "name")), name))
			return json_object_array_get_idx(kids, i);
	ck_abort_msg("no child %s", name);
	return NULL;
}

START_TEST(test_tree_json)
{
	struct store *st = small_store();
	struct buf b = BUF_INIT;
	struct json_object *root, *tree, *m, *n;

	render(st, &test_meta, NULL, JPROF_FMT_JSON, &b);
	root = parse_json(b.data, b.len);
	ck_assert_str_eq(json_object_get_string(get(root, "format")), "jprofd-tree");
	m = get(root, "meta");
	ck_assert_str_eq(json_object_get_string(get(m, "comm")), "app");
	ck_assert_uint_eq(get_u64(m, "samples"), 100);
	ck_assert_uint_eq(get_u64(m, "interval_ns"), 10000000);
	tree = get(root, "tree");
	ck_assert_str_eq(json_object_get_string(get(tree, "name")), "all");
	ck_assert_str_eq(json_object_get_string(get(tree, "kind")), "root");
	ck_assert_uint_eq(check_node(tree, 0), 100);
	/* threads merge: main;work;spin is one path with 80 samples */
	n = child(child(child(tree, "main"), "work"), "spin");
	ck_assert_uint_eq(get_u64(n, "self"), 80);
	ck_assert_str_eq(json_object_get_string(get(n, "module")), "app");
	n = child(child(child(child(tree, "main"), "work"), "read"), "sys_read");
	ck_assert_str_eq(json_object_get_string(get(n, "kind")), "kernel");
	n = child(child(child(tree, "Foo.run"), "Foo.loop"), "nvme_irq [nvme]");
	ck_assert_str_eq(json_object_get_string(get(n, "kind")), "kernel");
	ck_assert_str_eq(json_object_get_string(get(child(tree, "Foo.run"), "kind")), "java_interp");
	ck_assert_str_eq(json_object_get_string(get(child(tree, "Foo.run"), "name")), "Foo.run");
	ck_assert_uint_eq(get_u64(child(tree, "[no_stack]"), "self"), 1);
	ck_assert_str_eq(json_object_get_string(get(child(tree, "[gc_active]"), "kind")), "marker");
	json_object_put(root);

	/* thread root frames, as collapsed's --threads */
	render(st, &test_meta, &(struct export_options){ .thread_frames = true }, JPROF_FMT_JSON, &b);
	root = parse_json(b.data, b.len);
	tree = get(root, "tree");
	ck_assert_uint_eq(check_node(tree, 0), 100);
	ck_assert_uint_eq(get_u64(child(child(child(child(tree, "[worker-1 tid=11]"), "main"), "work"),
					  "spin"), "total"), 30);
	ck_assert_uint_eq(get_u64(child(tree, "[tid=12]"), "total"), 7);
	json_object_put(root);
	buf_release(&b);
	store_free(st);
}
END_TEST

/* The JSON tree's root total equals the collapsed output's sum. */
START_TEST(test_tree_total_matches_collapsed)
{
	struct store *st = synth_big_store(3000);
	struct buf b = BUF_INIT;
	struct json_object *root;
	uint64_t sum = 0;
	char *line, *save = NULL;

	render(st, NULL, NULL, JPROF_FMT_COLLAPSED, &b);
	for (line = strtok_r(b.data, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		sum += strtoull(strrchr(line, ' ') + 1, NULL, 10);
	render(st, NULL, NULL, JPROF_FMT_JSON, &b);
	root = parse_json(b.data, b.len);
	ck_assert_uint_gt(sum, 3000);
	ck_assert_uint_eq(check_node(get(root, "tree"), 0), sum);
	json_object_put(root);
	buf_release(&b);
	store_free(st);
}
END_TEST

/* ---- text --------------------------------------------------------------------- */

START_TEST(test_text)
{
	struct store *st = small_store();
	struct buf b = BUF_INIT;
	const char *self;

	render(st, &test_meta, NULL, JPROF_FMT_TEXT, &b);
	ck_assert_ptr_nonnull(strstr(b.data, "app (pid 10)"));
	ck_assert_ptr_nonnull(strstr(b.data, "total: 100 samples"));
	/* the heaviest stack first, leaf first, with its share */
	ck_assert_ptr_nonnull(strstr(b.data, "--- 1: 80 samples (80.00%)\n  spin\n  work\n  main\n"));
	ck_assert_ptr_nonnull(strstr(b.data, "--- 2: 10 samples (10.00%)\n  sys_read_[k]\n  read\n"));
	self = strstr(b.data, "=== top functions by self samples ===");
	ck_assert_ptr_nonnull(self);
	/* first row of the self table */
	ck_assert_ptr_nonnull(strstr(self, "percent  function\n          80    80.00%  spin\n"));
	ck_assert_ptr_nonnull(strstr(self, "nvme_irq [nvme]_[k]"));
	buf_release(&b);
	store_free(st);
}
END_TEST

/* ---- sample types ------------------------------------------------------------- */

/* Off-CPU-shaped profile: count, blocked ns, and a third count-typed value.
 * main;wait;futex 3 samples 3 s; main;read 1 sample 0.5 s (pid 20). */
static struct store *typed_store(void)
{
	static const struct sample_type types[] = {
		{ "samples", "count" }, { "offcpu", "nanoseconds" }, { "switches", "count" } };
	struct store *st = store_new(NULL, types, 3);
	uint32_t m = intern(st, FRAME_NATIVE, "main", "app");
	uint32_t w = intern(st, FRAME_NATIVE, "wait", "app");
	uint32_t fx = intern(st, FRAME_KERNEL, "futex", "");
	uint32_t rd = intern(st, FRAME_NATIVE, "read", "app");
	uint32_t s1[] = { m, w, fx }, s2[] = { m, rd };

	ck_assert_int_eq(store_add(st, &(struct store_sample){ 20, 21, s1, 3,
			 (const uint64_t[]){ 3, 3000000000ULL, 6 }, 0 }), 0);
	ck_assert_int_eq(store_add(st, &(struct store_sample){ 20, 21, s2, 2,
			 (const uint64_t[]){ 1, 500000000ULL, 1 }, 0 }), 0);
	return st;
}

START_TEST(test_value_choice_one_value_formats)
{
	struct store *st = typed_store();
	struct export_options off = { .value = "offcpu" }, bad = { .value = "cpu" };
	struct json_object *o;
	struct buf b = BUF_INIT;

	/* Default: the sample count, as flame-graph tools expect. */
	render(st, NULL, NULL, JPROF_FMT_COLLAPSED, &b);
	ck_assert_str_eq(b.data, "main;read 1\nmain;wait;futex_[k] 3\n");
	render(st, NULL, &off, JPROF_FMT_COLLAPSED, &b);
	ck_assert_str_eq(b.data, "main;read 500000000\nmain;wait;futex_[k] 3000000000\n");
	ck_assert_int_eq(export_value_index(st, &off), 1);
	ck_assert_int_eq(export_value_index(st, &bad), -EINVAL);
	ck_assert_int_eq(export_value_index(st, NULL), 0);
	/* A type the store lacks: refused, the buffer untouched. */
	buf_reset(&b);
	ck_assert_int_eq(buf_puts(&b, "kept"), 0);
	ck_assert_int_eq(export_render(st, NULL, &bad, JPROF_FMT_TEXT, &b), -EINVAL);
	ck_assert_str_eq(b.data, "kept");

	render(st, NULL, &off, JPROF_FMT_TEXT, &b);
	ck_assert_ptr_nonnull(strstr(b.data, "\ntotal: 4 samples (3.500 s of offcpu, 7 switches), "
					     "2 distinct stacks\n"));
	ck_assert_ptr_nonnull(strstr(b.data, "--- 1: 3.000 s of offcpu (85.71%)\n  futex_[k]\n  wait\n"));
	ck_assert_ptr_nonnull(strstr(b.data, "=== top functions by self offcpu ==="));
	ck_assert_ptr_nonnull(strstr(b.data, "  3000000000    85.71%  futex_[k]\n"));
	/* No meta: the event is unknown, no period. */
	ck_assert_ptr_nonnull(strstr(b.data, "event unknown, no fixed period,"));
	render(st, &(struct export_meta){ .event = "alloc", .period_type = { "space", "bytes" },
					  .period = 524288 }, NULL, JPROF_FMT_TEXT, &b);
	ck_assert_ptr_nonnull(strstr(b.data, "event alloc, period 524288 bytes, duration"));

	render(st, NULL, &off, JPROF_FMT_HTML, &b);
	o = html_data(b.data);
	ck_assert_str_eq(json_object_get_string(get(get(o, "meta"), "unit")), "nanoseconds");
	ck_assert_str_eq(json_object_get_string(get(get(o, "meta"), "value_type")), "offcpu");
	ck_assert_uint_eq(get_u64(get(o, "meta"), "samples"), 4);
	/* the root's total (fourth number of the first node) is the shown value;
	 * without an event the title names the main value's type */
	ck_assert_uint_eq(get_at(o, "nodes", 3),
			  3500000000ULL);
	ck_assert_ptr_nonnull(strstr(b.data, "<title>all processes: switches, 0.00 s, "
					     "3.500 s of offcpu</title>"));
	json_object_put(o);
	render(st, NULL, NULL, JPROF_FMT_HTML, &b);
	o = html_data(b.data);
	ck_assert_str_eq(json_object_get_string(get(get(o, "meta"), "unit")), "samples");
	json_object_put(o);
	buf_release(&b);
	store_free(st);
}
END_TEST

START_TEST(test_value_types_in_json)
{
	struct store *st = typed_store();
	struct store *counts = store_new(NULL, &sample_type_count, 1);
	struct export_options off = { .value = "offcpu" };
	struct json_object *o, *types, *stack, *root, *child;
	struct buf b = BUF_INIT;

	render(st, NULL, NULL, JPROF_FMT_RAW, &b);
	o = parse_json(b.data, b.len);
	types = get(o, "sample_types");
	ck_assert_uint_eq(json_object_array_length(types), 3);
	types = json_object_array_get_idx(types, 1);
	ck_assert_str_eq(json_object_get_string(get(types, "type")), "offcpu");
	ck_assert_str_eq(json_object_get_string(get(types, "unit")), "nanoseconds");
	stack = json_object_array_get_idx(get(o, "stacks"), 0);
	ck_assert_uint_eq(get_u64(stack, "samples"), 3);
	/* weight_ns: the main value when it is a time; here the last type
	 * counts switches, so there is none. */
	ck_assert(!json_object_object_get_ex(stack, "weight_ns", NULL));
	ck_assert_uint_eq(get_at(stack, "values", 1),
			  3000000000ULL);
	ck_assert_uint_eq(get_at(get(o, "totals"), "values", 2),
			  7);
	ck_assert(!json_object_object_get_ex(get(o, "meta"), "period_type", NULL));
	json_object_put(o);

	render(st, NULL, &off, JPROF_FMT_JSON, &b);
	o = parse_json(b.data, b.len);
	ck_assert_str_eq(json_object_get_string(get(get(o, "meta"), "unit")), "nanoseconds");
	ck_assert_uint_eq(get_u64(get(o, "meta"), "value"), 1);
	ck_assert_uint_eq(json_object_array_length(get(get(o, "meta"), "sample_types")), 3);
	root = get(o, "tree");
	ck_assert_uint_eq(get_u64(root, "total"), 3500000000ULL);
	ck_assert_uint_eq(get_at(root, "total_values", 0), 4);
	ck_assert_uint_eq(get_at(root, "total_values", 2), 7);
	child = json_object_array_get_idx(get(root, "children"), 0);   /* main */
	child = json_object_array_get_idx(get(child, "children"), 0);
	ck_assert_str_eq(json_object_get_string(get(child, "name")), "wait");
	ck_assert_uint_eq(get_at(child, "total_values", 1),
			  3000000000ULL);
	ck_assert(!json_object_object_get_ex(child, "self_values", NULL));
	json_object_put(o);

	/* A store with only the count: one value everywhere, no weight. */
	render(counts, NULL, NULL, JPROF_FMT_RAW, &b);
	o = parse_json(b.data, b.len);
	ck_assert(!json_object_object_get_ex(get(o, "totals"), "weight_ns", NULL));
	ck_assert_uint_eq(json_object_array_length(get(get(o, "totals"), "values")), 1);
	json_object_put(o);
	buf_release(&b);
	store_free(st);
	store_free(counts);
}
END_TEST

START_TEST(test_value_types_in_pprof)
{
	struct store *st = typed_store();
	struct buf b = BUF_INIT;
	Perftools__Profiles__Profile *p;

	render(st, &(struct export_meta){ .event = "offcpu" }, NULL, JPROF_FMT_PPROF, &b);
	p = pprof_unpack(&b);
	ck_assert_uint_eq(p->n_sample_type, 3);
	ck_assert_str_eq(pstr(p, p->sample_type[1]->type), "offcpu");
	ck_assert_str_eq(pstr(p, p->sample_type[2]->type), "switches");
	ck_assert_str_eq(pstr(p, p->default_sample_type), "switches");   /* the main value */
	ck_assert_ptr_null(p->period_type);                               /* not periodic */
	ck_assert_int_eq(p->period, 0);
	ck_assert_uint_eq(p->n_sample, 2);
	ck_assert_uint_eq(p->sample[0]->n_value, 3);
	ck_assert_int_eq(p->sample[0]->value[1], 3000000000LL);
	ck_assert_int_eq(p->sample[1]->value[2], 1);
	ck_assert_str_eq(pstr(p, p->comment[0]), "jprofd offcpu profile, status unknown");
	perftools__profiles__profile__free_unpacked(p, NULL);
	buf_release(&b);
	store_free(st);
}
END_TEST

/* ---- pprof -------------------------------------------------------------------- */

START_TEST(test_pprof)
{
	struct store *st = small_store();
	struct buf b = BUF_INIT;
	Perftools__Profiles__Profile *p;
	uint64_t samples = 0, ns = 0;
	bool kernel_mapping = false, saw_worker = false;
	size_t i, j;

	render(st, &test_meta, NULL, JPROF_FMT_PPROF, &b);
	p = pprof_unpack(&b);
	ck_assert_uint_ge(p->n_string_table, 1);
	ck_assert_str_eq(p->string_table[0], "");
	ck_assert_uint_eq(p->n_sample_type, 2);
	ck_assert_str_eq(pstr(p, p->sample_type[0]->type), "samples");
	ck_assert_str_eq(pstr(p, p->sample_type[0]->unit), "count");
	ck_assert_str_eq(pstr(p, p->sample_type[1]->type), "cpu");
	ck_assert_str_eq(pstr(p, p->sample_type[1]->unit), "nanoseconds");
	ck_assert_ptr_nonnull(p->period_type);
	ck_assert_str_eq(pstr(p, p->period_type->type), "cpu");
	ck_assert_int_eq(p->period, 10000000);
	ck_assert_int_eq(p->time_nanos, (int64_t)1700000000123456789ULL);
	ck_assert_int_eq(p->duration_nanos, 5000000000LL);
	/* ids dense from 1 */
	for (i = 0; i < p->n_function; i++)
		ck_assert_uint_eq(p->function[i]->id, i + 1);
	for (i = 0; i < p->n_location; i++) {
		ck_assert_uint_eq(p->location[i]->id, i + 1);
		ck_assert_uint_eq(p->location[i]->n_line, 1);
		ck_assert_uint_le(p->location[i]->mapping_id, p->n_mapping);
	}
	for (i = 0; i < p->n_mapping; i++) {
		ck_assert_uint_eq(p->mapping[i]->id, i + 1);
		ck_assert(p->mapping[i]->has_functions);
		if (!strcmp(pstr(p, p->mapping[i]->filename), "[kernel.kallsyms]"))
			kernel_mapping = true;
	}
	ck_assert(kernel_mapping);
	for (i = 0; i < p->n_sample; i++) {
		Perftools__Profiles__Sample *s = p->sample[i];
		const char *thread = NULL;
		int64_t tid = -1, pid = -1;

		ck_assert_uint_eq(s->n_value, 2);
		samples += (uint64_t)s->value[0];
		ns += (uint64_t)s->value[1];
		for (j = 0; j < s->n_label; j++) {
			const char *key = pstr(p, s->label[j]->key);

			if (!strcmp(key, "thread"))
				thread = pstr(p, s->label[j]->str);
			else if (!strcmp(key, "tid"))
				tid = s->label[j]->num;
			else if (!strcmp(key, "pid"))
				pid = s->label[j]->num;
			else if (!strcmp(key, "comm"))
				ck_assert_str_eq(pstr(p, s->label[j]->str), "app");
		}
		ck_assert_int_eq(pid, 10);
		ck_assert(tid >= 10 && tid <= 12);
		if (tid == 11) {
			ck_assert_str_eq(thread, "worker-1");
			saw_worker = true;
		}
	}
	ck_assert(saw_worker);
	ck_assert_uint_eq(samples, 100);
	ck_assert_uint_eq(ns, 1000000000);
	/* leaf first: spin is the leaf of 80 samples, main of none */
	ck_assert_uint_eq(pprof_leaf_samples(p, "spin"), 80);
	ck_assert_uint_eq(pprof_leaf_samples(p, "main"), 0);
	ck_assert_uint_eq(pprof_leaf_samples(p, "nvme_irq [nvme]"), 4);
	ck_assert_uint_eq(pprof_leaf_samples(p, "[no_stack]"), 1);
	perftools__profiles__profile__free_unpacked(p, NULL);
	buf_release(&b);
	store_free(st);
}
END_TEST

/* ---- html --------------------------------------------------------------------- */

/* Typed Java frames: the type in the function's system name, the innermost
 * Java frame's type as the sample's java_frame_type label. */
START_TEST(test_pprof_java_types)
{
	struct store *st = small_store();
	struct buf b = BUF_INIT;
	Perftools__Profiles__Profile *p;
	size_t i, j, typed = 0, funcs = 0;

	render(st, &test_meta, NULL, JPROF_FMT_PPROF, &b);
	p = pprof_unpack(&b);
	for (i = 0; i < p->n_function; i++) {
		const char *name = pstr(p, p->function[i]->name);
		const char *sys = pstr(p, p->function[i]->system_name);

		if (!strcmp(name, "Foo.loop")) {
			ck_assert_str_eq(sys, "Foo.loop_[j]");
			funcs++;
		} else if (!strcmp(name, "Foo.run")) {
			ck_assert_str_eq(sys, "Foo.run_[0]");
			funcs++;
		} else {
			ck_assert_str_eq(sys, name);
		}
	}
	ck_assert_uint_eq(funcs, 2);
	for (i = 0; i < p->n_sample; i++) {
		const Perftools__Profiles__Sample *s = p->sample[i];

		for (j = 0; j < s->n_label; j++) {
			if (strcmp(pstr(p, s->label[j]->key), "java_frame_type"))
				continue;
			ck_assert_str_eq(pstr(p, s->label[j]->str), "compiled");
			ck_assert_int_eq(s->value[0], 4);
			typed++;
		}
	}
	ck_assert_uint_eq(typed, 1);
	perftools__profiles__profile__free_unpacked(p, NULL);
	buf_release(&b);
	store_free(st);
}
END_TEST

START_TEST(test_html)
{
	struct store *st = small_store();
	struct buf b = BUF_INIT;
	struct json_object *d, *names, *nodes;
	size_t n;

	render(st, &test_meta, NULL, JPROF_FMT_HTML, &b);
	ck_assert(!strncmp(b.data, "<!DOCTYPE html>", 15));
	ck_assert_ptr_nonnull(strstr(b.data, "<title>app (pid 10): cpu-clock, 5.00 s, 100 samples</title>"));
	/* self-contained: nothing fetched from anywhere */
	ck_assert_ptr_null(strstr(b.data, "http://"));
	ck_assert_ptr_null(strstr(b.data, "https://"));
	ck_assert_ptr_null(strstr(b.data, "<script src"));
	ck_assert_ptr_null(strstr(b.data, "<link"));
	ck_assert_ptr_null(strstr(b.data, "{{"));
	d = html_data(b.data);
	ck_assert_uint_eq(get_u64(get(d, "meta"), "samples"), 100);
	names = get(d, "names");
	nodes = get(d, "nodes");
	n = json_object_array_length(nodes);
	ck_assert_uint_eq(n % 5, 0);
	/* the root first: depth 0, total 100 */
	ck_assert_int_eq(json_object_get_int(json_object_array_get_idx(nodes, 2)), 0);
	ck_assert_int_eq(json_object_get_int(json_object_array_get_idx(nodes, 3)), 100);
	/* every node's name and kind index resolve; spin has 80 */
	for (size_t i = 5; i < n; i += 5) {
		int name = json_object_get_int(json_object_array_get_idx(nodes, i));

		ck_assert((size_t)name < json_object_array_length(names));
		if (!strcmp(json_object_get_string(json_object_array_get_idx(names, (size_t)name)), "spin"))
			ck_assert_int_eq(json_object_get_int(json_object_array_get_idx(nodes, i + 3)), 80);
	}
	json_object_put(d);
	buf_release(&b);
	store_free(st);
}
END_TEST

/* ---- every format: empty and hostile input ---------------------------------------- */

START_TEST(test_empty_every_format)
{
	struct store *st = store_new(NULL, NULL, 0);
	struct buf b = BUF_INIT;
	struct json_object *o;
	Perftools__Profiles__Profile *p;
	bool labelled = false;

	render(st, &test_meta, NULL, JPROF_FMT_COLLAPSED, &b);
	ck_assert_uint_eq(b.len, 0);   /* documented: no lines */
	render(st, &test_meta, NULL, JPROF_FMT_RAW, &b);
	o = parse_json(b.data, b.len);
	ck_assert_uint_eq(get_u64(get(o, "totals"), "samples"), 0);
	json_object_put(o);
	render(st, &test_meta, NULL, JPROF_FMT_JSON, &b);
	o = parse_json(b.data, b.len);
	ck_assert_uint_eq(get_u64(get(o, "meta"), "samples"), 0);
	ck_assert_uint_eq(get_u64(get(o, "tree"), "total"), 0);
	ck_assert_uint_eq(json_object_array_length(get(get(o, "tree"), "children")), 0);
	json_object_put(o);
	render(st, &test_meta, NULL, JPROF_FMT_TEXT, &b);
	ck_assert_ptr_nonnull(strstr(b.data, "total: no samples\n"));
	ck_assert_ptr_null(strstr(b.data, "==="));
	render(st, &test_meta, NULL, JPROF_FMT_HTML, &b);
	ck_assert_ptr_nonnull(strstr(b.data, "<title>app (pid 10): cpu-clock, 5.00 s, no samples</title>"));
	o = html_data(b.data);
	ck_assert_uint_eq(json_object_array_length(get(o, "nodes")), 5);
	json_object_put(o);
	render(st, &test_meta, NULL, JPROF_FMT_PPROF, &b);
	p = pprof_unpack(&b);
	ck_assert_uint_eq(p->n_sample, 0);
	ck_assert_uint_eq(p->n_sample_type, 2);
	ck_assert_str_eq(p->string_table[0], "");
	for (size_t i = 0; i < p->n_comment; i++)
		labelled |= !strcmp(pstr(p, p->comment[i]), "no samples");
	ck_assert(labelled);
	perftools__profiles__profile__free_unpacked(p, NULL);
	buf_release(&b);
	store_free(st);
}
END_TEST

static bool json_array_has(struct json_object *a, const char *s)
{
	for (size_t i = 0; i < json_object_array_length(a); i++)
		if (!strcmp(json_object_get_string(json_object_array_get_idx(a, i)), s))
			return true;
	return false;
}

static bool tree_has(struct json_object *n, const char *name)
{
	struct json_object *kids = get(n, "children");

	if (!strcmp(json_object_get_string(get(n, "name")), name))
		return true;
	for (size_t i = 0; i < json_object_array_length(kids); i++)
		if (tree_has(json_object_array_get_idx(kids, i), name))
			return true;
	return false;
}

START_TEST(test_hostile_names_every_format)
{
	struct store *st = synth_hostile_store();
	struct export_meta meta = test_meta;
	struct buf b = BUF_INIT;
	struct json_object *o, *names;
	Perftools__Profiles__Profile *p;
	size_t i, j;
	bool found;

	meta.pid = 7;
	meta.comm = "pr</script>&\n";

	/* collapsed: one line per stack, the frame count intact */
	render(st, &meta, NULL, JPROF_FMT_COLLAPSED, &b);
	ck_assert_uint_eq(count(b.data, "\n"), 2);
	ck_assert_ptr_nonnull(strstr(b.data, "semi\\x3bcolon\\x3bname;"));
	ck_assert_ptr_nonnull(strstr(b.data, "line\\x0abreak\\x09tab;bad\\xff\\xfe utf8 \\xc3;"));

	/* json tree: strict parse, names as shown everywhere */
	render(st, &meta, NULL, JPROF_FMT_JSON, &b);
	ck_assert_ptr_null(strchr(b.data, '<'));
	o = parse_json(b.data, b.len);
	for (i = 0; i < SYNTH_HOSTILE_N; i++)
		ck_assert_msg(tree_has(get(o, "tree"), synth_hostile[i].shown), "%s", synth_hostile[i].shown);
	ck_assert(tree_has(get(o, "tree"), "hostile_leaf;<&> [mod\"x]"));
	ck_assert_str_eq(json_object_get_string(get(get(o, "meta"), "comm")), "pr</script>&\n");
	json_object_put(o);

	/* html: the data block cannot be closed early, the title is escaped,
	 * and the embedded JSON holds every name */
	render(st, &meta, NULL, JPROF_FMT_HTML, &b);
	ck_assert_uint_eq(count(b.data, "</script>"), 2);
	ck_assert_uint_eq(count(b.data, "<script"), 2);
	ck_assert_ptr_nonnull(strstr(b.data, "<title>pr&lt;/script&gt;&amp;\\x0a (pid 7)"));
	o = html_data(b.data);
	names = get(o, "names");
	for (i = 0; i < SYNTH_HOSTILE_N; i++)
		ck_assert_msg(json_array_has(names, synth_hostile[i].shown), "%s", synth_hostile[i].shown);
	json_object_put(o);

	/* text: names as shown, no raw control byte but the line ends */
	render(st, &meta, NULL, JPROF_FMT_TEXT, &b);
	for (i = 0; i < b.len; i++)
		ck_assert(b.data[i] == '\n' || ((unsigned char)b.data[i] >= 0x20 && b.data[i] != 0x7f));
	for (i = 0; i < SYNTH_HOSTILE_N; i++)
		ck_assert_msg(strstr(b.data, synth_hostile[i].shown), "%s", synth_hostile[i].shown);

	/* pprof: every string valid UTF-8 (json-c validates it) and the names intact */
	render(st, &meta, NULL, JPROF_FMT_PPROF, &b);
	p = pprof_unpack(&b);
	for (i = 0; i < p->n_string_table; i++) {
		struct buf q = BUF_INIT;

		ck_assert_int_eq(export_json_string(&q, p->string_table[i]), 0);
		json_object_put(parse_json(q.data, q.len));
		buf_release(&q);
		for (j = 0; p->string_table[i][j]; j++)
			ck_assert((unsigned char)p->string_table[i][j] >= 0x20);
	}
	for (i = 0; i < SYNTH_HOSTILE_N; i++) {
		found = false;
		for (j = 0; j < p->n_function; j++)
			found |= !strcmp(pstr(p, p->function[j]->name), synth_hostile[i].shown);
		ck_assert_msg(found, "%s", synth_hostile[i].shown);
	}
	found = false;
	for (j = 0; j < p->n_string_table; j++)
		found |= !strcmp(p->string_table[j], "th;<\"&\">\\xff");
	ck_assert(found);
	perftools__profiles__profile__free_unpacked(p, NULL);
	buf_release(&b);
	store_free(st);
}
END_TEST

/* ---- size: 100,000 distinct stacks ------------------------------------------------- */

START_TEST(test_100k_stacks)
{
	struct store *st = synth_big_store(100000);
	static const enum jprof_format fmts[] = { JPROF_FMT_COLLAPSED, JPROF_FMT_JSON, JPROF_FMT_HTML,
						   JPROF_FMT_PPROF, JPROF_FMT_TEXT };
	struct store_totals tot;
	struct buf b = BUF_INIT;
	struct timespec t0, t1;
	struct json_object *o;
	Perftools__Profiles__Profile *p;

	ck_assert_ptr_nonnull(st);
	store_get_totals(st, &tot);
	ck_assert(!tot.truncated);
	ck_assert_uint_eq(tot.stacks, 100001);
	for (size_t i = 0; i < sizeof(fmts) / sizeof(fmts[0]); i++) {
		clock_gettime(CLOCK_MONOTONIC, &t0);
		render(st, NULL, NULL, fmts[i], &b);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		/* measured, not asserted: see docs/formats.md */
		printf("100k stacks: %-9s %10zu bytes in %.3f s\n", jprof_format_info(fmts[i])->name, b.len,
		       (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
		if (fmts[i] == JPROF_FMT_HTML) {
			o = html_data(b.data);
			ck_assert_uint_eq(get_u64(get(o, "meta"), "samples"), tot.values[0]);
			json_object_put(o);
		} else if (fmts[i] == JPROF_FMT_PPROF) {
			p = pprof_unpack(&b);
			ck_assert_uint_eq(p->n_sample, tot.stacks);
			perftools__profiles__profile__free_unpacked(p, NULL);
		} else if (fmts[i] == JPROF_FMT_TEXT) {
			ck_assert_ptr_nonnull(strstr(b.data, "  hot_loop\n"));
		}
	}
	buf_release(&b);
	store_free(st);
}
END_TEST

static Suite *formats_suite(void)
{
	Suite *s = suite_create("formats");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_tree_json);
	tcase_add_test(tc, test_tree_total_matches_collapsed);
	tcase_add_test(tc, test_text);
	tcase_add_test(tc, test_pprof);
	tcase_add_test(tc, test_pprof_java_types);
	tcase_add_test(tc, test_html);
	tcase_add_test(tc, test_empty_every_format);
	tcase_add_test(tc, test_hostile_names_every_format);
	tcase_add_test(tc, test_100k_stacks);
	tcase_add_test(tc, test_value_choice_one_value_formats);
	tcase_add_test(tc, test_value_types_in_json);
	tcase_add_test(tc, test_value_types_in_pprof);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(formats_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
