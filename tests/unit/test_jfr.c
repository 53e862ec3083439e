/* The jfr renderer: synthetic stores with sample times rendered, then read
 * back with a small chunk walker (header, event sizes, types, times), and
 * once through the JDK's own `jfr` when JDK 17 is installed. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_main.h"
#include "export.h"
#include "jfr_meta.h"
#include "jfr_pools.h"
#include "synth_store.h"

#define JFR_TOOL "/usr/lib/jvm/java-17-openjdk-amd64/bin/jfr"

static uint64_t be64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

static uint64_t varint(const unsigned char *p, size_t *pos, size_t end)
{
	uint64_t v = 0;

	for (int i = 0; i < 9; i++) {
		ck_assert_uint_lt(*pos, end);
		unsigned char b = p[(*pos)++];

		if (i == 8)
			return v | (uint64_t)b << 56;
		v |= (uint64_t)(b & 0x7f) << (7 * i);
		if (!(b & 0x80))
			break;
	}
	return v;
}

/* What the walker saw in one chunk. */
struct chunk {
	size_t events[256];        /* by type id */
	uint64_t first_time, last_time;
	bool ordered;              /* sample times never go back */
	uint64_t dropped;          /* jprofd.RecordingTruncated's samplesDropped */
};

/* Checks the header against the bytes and walks every event. */
static void walk(const unsigned char *d, size_t len, struct chunk *c)
{
	size_t pos = 68;

	memset(c, 0, sizeof(*c));
	c->ordered = true;
	ck_assert_uint_ge(len, 68);
	ck_assert_mem_eq(d, "FLR\0\0\2\0\1", 8);
	ck_assert_uint_eq(be64(d + 8), len);                   /* chunk size */
	ck_assert_uint_eq(be64(d + 56), 1000000000);           /* ticks per second */
	ck_assert_int_eq(d[67], 3);                            /* compressed ints, final */
	while (pos < len) {
		size_t at = pos, end;
		uint64_t size = varint(d, &pos, len), type;

		ck_assert_uint_gt(size, 1);
		ck_assert_uint_le(at + size, len);
		end = at + size;
		type = varint(d, &pos, end);
		ck_assert_uint_lt(type, 256);
		c->events[type]++;
		if (type == 0)
			ck_assert_uint_eq(at, be64(d + 24));           /* metadata offset */
		if (type == 1)
			ck_assert_uint_eq(at, be64(d + 16));           /* constant pool offset */
		if (type == JFR_EVENT_EXECUTION_SAMPLE || type == JFR_EVENT_NATIVE_SAMPLE) {
			uint64_t t = varint(d, &pos, end);

			ck_assert_uint_ge(t, be64(d + 48));            /* not before the start */
			if (t < c->last_time)
				c->ordered = false;
			if (!c->first_time)
				c->first_time = t;
			c->last_time = t;
			varint(d, &pos, end);                          /* thread */
			varint(d, &pos, end);                          /* stack trace */
			ck_assert_uint_eq(varint(d, &pos, end), JFR_STATE_RUNNABLE);
			ck_assert_uint_eq(pos, end);
		}
		if (type == JFR_EVENT_TRUNCATED) {
			varint(d, &pos, end);                          /* time */
			ck_assert_int_eq(d[pos++], 3);                 /* UTF-8 message */
			pos += varint(d, &pos, end);
			varint(d, &pos, end);                          /* kept */
			c->dropped = varint(d, &pos, end);
			ck_assert_uint_eq(pos, end);
		}
		pos = end;
	}
	ck_assert_uint_eq(pos, len);
	ck_assert_uint_eq(c->events[0], 1);
	ck_assert_uint_eq(c->events[1], 1);
}

static struct buf render(const struct store *st, const struct export_meta *m)
{
	struct buf b = BUF_INIT;

	ck_assert_int_eq(export_render(st, m, NULL, JPROF_FMT_JFR, &b), 0);
	return b;
}

static bool has_bytes(const struct buf *b, const char *s)
{
	return memmem(b->data, b->len, s, strlen(s)) != NULL;
}

static void add_at(struct store *st, uint32_t tid, const uint32_t *f, size_t n, uint64_t t)
{
	static const uint64_t one[2] = { 1, 10000000 };

	ck_assert_int_eq(store_add(st, &(struct store_sample){ .pid = 9, .tid = tid, .frames = f,
							       .nframes = n, .values = one, .time_ns = t }), 0);
}

/* A Java thread (tid 10) and a native one (tid 11), added out of time order. */
static struct store *mixed_store(size_t keep)
{
	struct store *st = store_new(NULL, NULL, 0);
	uint32_t j[4], n[2];

	ck_assert_ptr_nonnull(st);
	ck_assert_int_eq(store_keep_times(st, keep), 0);
	j[0] = (uint32_t)store_frame_intern(st, FRAME_JAVA, "com.example.Main.main", "");
	j[1] = (uint32_t)store_frame_intern(st, FRAME_JAVA_JIT, "com.example.Main.work:42", "");
	j[2] = (uint32_t)store_frame_intern(st, FRAME_NATIVE, "memcpy", "libc.so.6");
	j[3] = (uint32_t)store_frame_intern(st, FRAME_KERNEL, "do_syscall_64", "");
	n[0] = (uint32_t)store_frame_intern(st, FRAME_NATIVE, "start_thread", "libc.so.6");
	n[1] = (uint32_t)store_frame_intern(st, FRAME_NATIVE, "spin_leaf", "spin");
	for (uint64_t i = 0; i < 30; i++)
		add_at(st, 10, j, 2 + i % 3, 5000000000ULL + (29 - i) * 1000000);  /* latest first */
	for (uint64_t i = 0; i < 20; i++)
		add_at(st, 11, n, 2, 5000000000ULL + i * 1500000);
	store_set_thread_name(st, 9, 10, "main");
	return st;
}

static const struct export_meta meta = { .pid = 9, .start_unix_ns = 1700000000000000000ULL,
					  .start_mono_ns = 4999000000ULL, .duration_ns = 1000000000ULL };

START_TEST(test_samples_become_events_in_time_order)
{
	struct store *st = mixed_store(1000);
	struct buf b = render(st, &meta);
	struct chunk c;

	walk((const unsigned char *)b.data, b.len, &c);
	ck_assert_uint_eq(c.events[JFR_EVENT_EXECUTION_SAMPLE], 30);
	ck_assert_uint_eq(c.events[JFR_EVENT_NATIVE_SAMPLE], 20);
	ck_assert_uint_eq(c.events[JFR_EVENT_TRUNCATED], 0);
	ck_assert(c.ordered);
	ck_assert_uint_eq(c.first_time, 5000000000ULL);
	ck_assert_uint_eq(be64((const unsigned char *)b.data + 48), meta.start_mono_ns);
	ck_assert_uint_eq(be64((const unsigned char *)b.data + 32), meta.start_unix_ns);
	/* Classes in the JVM's internal form, with their package. */
	ck_assert(has_bytes(&b, "com/example/Main"));
	ck_assert(has_bytes(&b, "\3\13com/example"));
	ck_assert(has_bytes(&b, "spin_leaf"));
	ck_assert(has_bytes(&b, "JIT compiled"));
	ck_assert(has_bytes(&b, "jdk.ExecutionSample"));
	ck_assert(has_bytes(&b, "jdk.NativeMethodSample"));
	buf_release(&b);
	store_free(st);
}
END_TEST

START_TEST(test_samples_before_the_start_move_the_start)
{
	struct store *st = mixed_store(1000);
	struct export_meta late = meta;
	struct buf b;
	struct chunk c;

	late.start_mono_ns = 5010000000ULL;   /* after the first sample */
	b = render(st, &late);
	walk((const unsigned char *)b.data, b.len, &c);
	ck_assert_uint_eq(be64((const unsigned char *)b.data + 48), 5000000000ULL);
	ck_assert_uint_eq(be64((const unsigned char *)b.data + 32), meta.start_unix_ns - 10000000);
	ck_assert_uint_ge(be64((const unsigned char *)b.data + 40), 1010000000ULL);
	buf_release(&b);
	store_free(st);
}
END_TEST

START_TEST(test_empty_recording_is_a_valid_chunk)
{
	struct store *st = store_new(NULL, NULL, 0);
	struct buf b;
	struct chunk c;

	ck_assert_int_eq(store_keep_times(st, 100), 0);
	b = render(st, &meta);
	walk((const unsigned char *)b.data, b.len, &c);
	ck_assert_uint_eq(c.events[JFR_EVENT_EXECUTION_SAMPLE] + c.events[JFR_EVENT_NATIVE_SAMPLE], 0);
	buf_release(&b);
	store_free(st);
	/* No meta at all (zeroed defaults): still a chunk. */
	st = mixed_store(1000);
	b = render(st, NULL);
	walk((const unsigned char *)b.data, b.len, &c);
	ck_assert_uint_eq(c.events[JFR_EVENT_EXECUTION_SAMPLE], 30);
	buf_release(&b);
	store_free(st);
}
END_TEST

START_TEST(test_dropped_times_write_the_truncated_marker)
{
	struct store *st = mixed_store(25);
	struct buf b = render(st, &meta);
	struct chunk c;

	walk((const unsigned char *)b.data, b.len, &c);
	ck_assert_uint_eq(c.events[JFR_EVENT_EXECUTION_SAMPLE] + c.events[JFR_EVENT_NATIVE_SAMPLE], 25);
	ck_assert_uint_eq(c.events[JFR_EVENT_TRUNCATED], 1);
	ck_assert_uint_eq(c.dropped, 25);
	ck_assert(has_bytes(&b, "truncated at 25 samples"));
	buf_release(&b);
	store_free(st);
}
END_TEST

START_TEST(test_hostile_names_are_clean_utf8)
{
	struct store *st = store_new(NULL, NULL, 0);
	uint32_t f[SYNTH_HOSTILE_N];
	struct buf b;
	struct chunk c;

	ck_assert_int_eq(store_keep_times(st, 100), 0);
	for (size_t i = 0; i < SYNTH_HOSTILE_N; i++)
		f[i] = (uint32_t)store_frame_intern(st, i % 2 ? FRAME_JAVA : FRAME_NATIVE,
						    synth_hostile[i].name, "lib\xff.so");
	add_at(st, 12, f, SYNTH_HOSTILE_N, 5000000000ULL);
	add_at(st, 12, NULL, 0, 5000000001ULL);
	store_set_thread_name(st, 9, 12, "th;<\"&\">\xff");
	b = render(st, &meta);
	walk((const unsigned char *)b.data, b.len, &c);
	ck_assert_uint_eq(c.events[JFR_EVENT_EXECUTION_SAMPLE], 1);
	ck_assert_uint_eq(c.events[JFR_EVENT_NATIVE_SAMPLE], 1);    /* the empty stack */
	ck_assert(!has_bytes(&b, "bad\xff"));
	ck_assert(!has_bytes(&b, "lib\xff"));
	ck_assert(!has_bytes(&b, ">\xff"));
	ck_assert(has_bytes(&b, "bad\\xff\\xfe utf8 \\xc3"));
	ck_assert(has_bytes(&b, "line\\x0abreak\\x09tab"));
	ck_assert(has_bytes(&b, "th;<\"&\">\\xff"));
	ck_assert(has_bytes(&b, EXPORT_NO_STACK));
	buf_release(&b);
	store_free(st);
}
END_TEST

static void ck_split_bci(const char *name, const char *cls, const char *method, const char *desc,
			 int32_t line, int32_t bci)
{
	struct buf c = BUF_INIT, m = BUF_INIT, d = BUF_INIT;
	int32_t l, bc;

	ck_assert_int_eq(jfr_split_java_name(name, &c, &m, &d, &l, &bc), 0);
	ck_assert_int_eq(bc, bci);
	ck_assert_str_eq(c.data ? c.data : "", cls);
	ck_assert_str_eq(m.data ? m.data : "", method);
	ck_assert_str_eq(d.data ? d.data : "", desc);
	ck_assert_int_eq(l, line);
	buf_release(&c);
	buf_release(&m);
	buf_release(&d);
}

static void ck_split(const char *name, const char *cls, const char *method, const char *desc,
		     int32_t line)
{
	ck_split_bci(name, cls, method, desc, line, -1);
}

START_TEST(test_java_names_split)
{
	ck_split("com.example.Main.work", "com/example/Main", "work", "", -1);
	ck_split("com.example.Main.work:42", "com/example/Main", "work", "", 42);
	ck_split("com.example.Main.work(ILjava/lang/String;)V", "com/example/Main", "work",
		 "(ILjava/lang/String;)V", -1);
	ck_split("Main$Inner.<init>", "Main$Inner", "<init>", "", -1);
	ck_split("Main$$Lambda.0x1234.run:7", "Main$$Lambda/0x1234", "run", "", 7);
	ck_split("noclass", "", "noclass", "", -1);
	ck_split("a.B.m:x1", "a/B", "m:x1", "", -1);   /* not a line: part of the name */
	ck_split("a.B.m\x01", "a/B", "m\\x01", "", -1);
	/* JFR's positions: line and bytecode index, after a descriptor too. */
	ck_split_bci("a.B.m:42@17", "a/B", "m", "", 42, 17);
	ck_split_bci("a.B.m@0", "a/B", "m", "", -1, 0);
	ck_split_bci("a.B.m(I)V:9@3", "a/B", "m", "(I)V", 9, 3);
	ck_split_bci("a.B.m@x", "a/B", "m@x", "", -1, -1);
}
END_TEST

/* The count `jfr summary` shows for an event type; -1 if none. */
static long summary_count(const char *text, const char *type)
{
	char want[128];
	const char *at;

	snprintf(want, sizeof(want), " %s ", type);
	at = strstr(text, want);
	return at ? strtol(at + strlen(want), NULL, 10) : -1;
}

/* The JDK's reader: `jfr summary` counts what the walker counted, and
 * `jfr print` shows the Java method and the native function. */
START_TEST(test_jdk_jfr_reads_it)
{
	char path[] = "/tmp/test_jfr_XXXXXX.jfr", cmd[512];
	struct store *st;
	struct buf b, text = BUF_INIT;
	FILE *p;
	char line[512];
	int fd, status;

	if (access(JFR_TOOL, X_OK) != 0) {
		printf("skipped: %s not installed\n", JFR_TOOL);
		return;
	}
	st = mixed_store(1000);
	b = render(st, &meta);
	fd = mkstemps(path, 4);   /* jfr wants the .jfr suffix */
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, b.data, b.len), (ssize_t)b.len);
	close(fd);
	snprintf(cmd, sizeof(cmd), "%s summary %s && %s print --stack-depth 8 %s", JFR_TOOL, path,
		 JFR_TOOL, path);
	p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	while (fgets(line, sizeof(line), p))
		buf_puts(&text, line);
	status = pclose(p);
	unlink(path);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "jfr failed: %s", text.data);
	ck_assert_int_eq(summary_count(text.data, "jdk.ExecutionSample"), 30);
	ck_assert_int_eq(summary_count(text.data, "jdk.NativeMethodSample"), 20);
	ck_assert(strstr(text.data, "com.example.Main.work(?) line: 42"));
	ck_assert(strstr(text.data, "spin.spin_leaf()"));
	ck_assert(strstr(text.data, "sampledThread = \"main\""));
	buf_release(&text);
	buf_release(&b);
	store_free(st);
}
END_TEST

static Suite *jfr_suite(void)
{
	Suite *s = suite_create("jfr");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_samples_become_events_in_time_order);
	tcase_add_test(tc, test_samples_before_the_start_move_the_start);
	tcase_add_test(tc, test_empty_recording_is_a_valid_chunk);
	tcase_add_test(tc, test_dropped_times_write_the_truncated_marker);
	tcase_add_test(tc, test_hostile_names_are_clean_utf8);
	tcase_add_test(tc, test_java_names_split);
	tcase_add_test(tc, test_jdk_jfr_reads_it);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return jprof_check_run(jfr_suite());
}
