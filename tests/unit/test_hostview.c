#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hostview.h"
#include "store.h"

#define S (1000000000ull)
#define T0 (1000 * S)   /* a monotonic "now" well past 0, on a bucket boundary */

static const char HEX64[] = "4f1c2a9d0b3e5f6a7b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c";

static struct hostview *hv_make(unsigned bucket_s, unsigned retention_s, size_t max_bytes)
{
	struct hostview_config cfg = { bucket_s, retention_s, max_bytes };
	struct hostview *hv = NULL;

	ck_assert_int_eq(hostview_new(&cfg, NULL, &hv), 0);
	ck_assert_ptr_nonnull(hv);
	return hv;
}

/* Adds one sample of the stack main;<leaf> for pid/tid at now. */
static void add(struct hostview *hv, uint32_t pid, uint32_t tid, const char *leaf, uint64_t now)
{
	enum frame_kind kinds[2] = { FRAME_NATIVE, FRAME_NATIVE };
	const char *names[2] = { "main", leaf };
	const char *mods[2] = { "prog", "prog" };

	hostview_add_frames(hv, pid, tid, kinds, names, mods, 2, 1, 10000000, now);
}

struct leaf_count {
	uint64_t samples;
	uint64_t stacks;
};

static int count_leaf(const struct store_stack *s, void *arg)
{
	struct leaf_count *lc = arg;

	lc->stacks++;
	lc->samples += s->values[0];
	return 0;
}

static uint64_t total_samples(struct store *st)
{
	struct store_totals t;

	store_get_totals(st, &t);
	return t.values[0];
}

START_TEST(test_parse_cgroup_lines)
{
	char path[256];
	char self[4096];
	FILE *f;
	size_t n;

	ck_assert_int_eq(hostview_parse_cgroup("0::/system.slice/nginx.service\n", path, sizeof(path)), 0);
	ck_assert_str_eq(path, "/system.slice/nginx.service");
	/* Hybrid hierarchy: the unified line wins wherever it is. */
	ck_assert_int_eq(hostview_parse_cgroup("12:pids:/system.slice/a.service\n"
					       "1:name=systemd:/system.slice/b.service\n"
					       "0::/system.slice/c.service\n", path, sizeof(path)), 0);
	ck_assert_str_eq(path, "/system.slice/c.service");
	/* cgroup v1 only: systemd's hierarchy. */
	ck_assert_int_eq(hostview_parse_cgroup("4:memory:/docker/x\n1:name=systemd:/docker/y\n",
					       path, sizeof(path)), 0);
	ck_assert_str_eq(path, "/docker/y");
	ck_assert_int_eq(hostview_parse_cgroup("0::/\n", path, sizeof(path)), 0);
	ck_assert_str_eq(path, "/");
	ck_assert_int_eq(hostview_parse_cgroup("garbage\n", path, sizeof(path)), -ENOENT);
	ck_assert_int_eq(hostview_parse_cgroup("0::/a/very/long/path\n", path, 8), -ENAMETOOLONG);
	/* This process's own line, from the real file. */
	f = fopen("/proc/self/cgroup", "r");
	ck_assert_ptr_nonnull(f);
	n = fread(self, 1, sizeof(self) - 1, f);
	fclose(f);
	self[n] = '\0';
	ck_assert_int_eq(hostview_parse_cgroup(self, path, sizeof(path)), 0);
	ck_assert_int_eq(path[0], '/');
	ck_assert_ptr_null(strchr(path, '\n'));
}
END_TEST

START_TEST(test_parse_unit)
{
	char unit[128];

	ck_assert_int_eq(hostview_parse_unit("/system.slice/nginx.service", unit, sizeof(unit)), 0);
	ck_assert_str_eq(unit, "nginx.service");
	ck_assert_int_eq(hostview_parse_unit("/user.slice/user-1000.slice/user@1000.service/app.slice/"
					     "foo.service", unit, sizeof(unit)), 0);
	ck_assert_str_eq(unit, "foo.service");
	ck_assert_int_eq(hostview_parse_unit("/user.slice/user-1000.slice/session-3.scope", unit,
					     sizeof(unit)), 0);
	ck_assert_str_eq(unit, "session-3.scope");
	/* A sub-cgroup inside a service still belongs to it. */
	ck_assert_int_eq(hostview_parse_unit("/system.slice/jprof-test-x.service/worker", unit,
					     sizeof(unit)), 0);
	ck_assert_str_eq(unit, "jprof-test-x.service");
	ck_assert_int_eq(hostview_parse_unit("/", unit, sizeof(unit)), -ENOENT);
	ck_assert_int_eq(hostview_parse_unit("/system.slice", unit, sizeof(unit)), -ENOENT);
	ck_assert_int_eq(hostview_parse_unit("/x/.service", unit, sizeof(unit)), -ENOENT);
	ck_assert_str_eq(unit, "");
}
END_TEST

START_TEST(test_parse_container)
{
	char path[256], id[80];

	snprintf(path, sizeof(path), "/system.slice/docker-%s.scope", HEX64);
	ck_assert_int_eq(hostview_parse_container(path, id, sizeof(id)), 0);
	ck_assert_str_eq(id, HEX64);
	snprintf(path, sizeof(path), "/kubepods.slice/kubepods-besteffort.slice/"
		 "kubepods-besteffort-pod1234.slice/cri-containerd-%s.scope", HEX64);
	ck_assert_int_eq(hostview_parse_container(path, id, sizeof(id)), 0);
	ck_assert_str_eq(id, HEX64);
	snprintf(path, sizeof(path), "/docker/%s", HEX64);
	ck_assert_int_eq(hostview_parse_container(path, id, sizeof(id)), 0);
	ck_assert_str_eq(id, HEX64);
	/* 63 or 65 digits are not an id. */
	snprintf(path, sizeof(path), "/docker/%.63s", HEX64);
	ck_assert_int_eq(hostview_parse_container(path, id, sizeof(id)), -ENOENT);
	snprintf(path, sizeof(path), "/docker/%s0", HEX64);
	ck_assert_int_eq(hostview_parse_container(path, id, sizeof(id)), -ENOENT);
	ck_assert_int_eq(hostview_parse_container("/system.slice/nginx.service", id, sizeof(id)), -ENOENT);
}
END_TEST

START_TEST(test_filters)
{
	struct hostview *hv = hv_make(10, 600, 0);
	uint32_t me = (uint32_t)getpid(), init = 1;
	struct hostview_filter f = { 0 };
	struct hostview_labels lab;
	struct leaf_count lc = { 0 };
	struct store *st = NULL;
	uint64_t from, to;
	char comm[64], cgroup[1024];

	/* The labels' strings live until the next call: keep copies. */
	ck_assert_int_eq(hostview_labels(hv, (pid_t)me, &lab), 0);
	snprintf(comm, sizeof(comm), "%s", lab.comm);
	snprintf(cgroup, sizeof(cgroup), "%s", lab.cgroup);
	ck_assert_str_ne(comm, "[exited]");
	ck_assert_int_eq(cgroup[0], '/');
	for (int i = 0; i < 5; i++)
		add(hv, me, me, "mine", T0 + S);
	for (int i = 0; i < 3; i++)
		add(hv, init, init, "init", T0 + 2 * S);

	ck_assert_int_eq(hostview_query(hv, 0, T0 + 5 * S, NULL, &st, &from, &to), 0);
	ck_assert_uint_eq(total_samples(st), 8);
	ck_assert_uint_eq(from, T0);
	ck_assert_uint_eq(to, T0 + 2 * S);  /* newest data, not the bucket's nominal end */
	store_free(st);

	f.pid = (pid_t)me;
	ck_assert_int_eq(hostview_query(hv, 0, UINT64_MAX, &f, &st, NULL, NULL), 0);
	ck_assert_uint_eq(total_samples(st), 5);
	ck_assert_str_eq(store_process_name(st, me), comm);
	store_foreach_stack(st, count_leaf, &lc);
	ck_assert_uint_eq(lc.stacks, 1);
	store_free(st);

	f = (struct hostview_filter){ .comm = comm };
	ck_assert_int_eq(hostview_query(hv, 0, UINT64_MAX, &f, &st, NULL, NULL), 0);
	ck_assert_uint_eq(total_samples(st), 5);
	store_free(st);

	/* Our own cgroup path selects us; a sibling path that merely shares a
	 * prefix does not. */
	f = (struct hostview_filter){ .cgroup = cgroup };
	ck_assert_int_eq(hostview_query(hv, 0, UINT64_MAX, &f, &st, NULL, NULL), 0);
	ck_assert_uint_ge(total_samples(st), 5);
	store_free(st);
	{
		char sib[1100];
		struct store_labels sl;

		snprintf(sib, sizeof(sib), "%sx", cgroup[1] ? cgroup : "/nonexistent");
		f = (struct hostview_filter){ .cgroup = sib };
		ck_assert_int_eq(hostview_query(hv, 0, UINT64_MAX, &f, &st, NULL, NULL), 0);
		ck_assert_uint_eq(total_samples(st), 0);
		store_free(st);
		f = (struct hostview_filter){ .pid = (pid_t)me };
		ck_assert_int_eq(hostview_query(hv, 0, UINT64_MAX, &f, &st, NULL, NULL), 0);
		ck_assert(store_process_labels(st, me, &sl));
		ck_assert_str_eq(sl.cgroup, cgroup);
		store_free(st);
	}

	f = (struct hostview_filter){ .unit = "no-such-unit.service" };
	ck_assert_int_eq(hostview_query(hv, 0, UINT64_MAX, &f, &st, NULL, NULL), 0);
	ck_assert_uint_eq(total_samples(st), 0);
	store_free(st);
	hostview_free(hv);
}
END_TEST

START_TEST(test_time_range_and_empty)
{
	struct hostview *hv = hv_make(10, 600, 0);
	struct store *st = NULL;
	uint64_t from, to;

	ck_assert_int_eq(hostview_query(hv, 0, UINT64_MAX, NULL, &st, &from, &to), -ENOENT);
	ck_assert_ptr_null(st);
	add(hv, 100, 100, "early", T0 + 5 * S);
	add(hv, 100, 100, "late", T0 + 25 * S);
	add(hv, 100, 100, "late", T0 + 26 * S);
	hostview_tick(hv, T0 + 27 * S);
	/* Only the bucket of [T0+20, T0+30). */
	ck_assert_int_eq(hostview_query(hv, T0 + 20 * S, T0 + 27 * S, NULL, &st, &from, &to), 0);
	ck_assert_uint_eq(total_samples(st), 2);
	ck_assert_uint_eq(from, T0 + 20 * S);
	ck_assert_uint_eq(to, T0 + 27 * S);
	store_free(st);
	/* Both. */
	ck_assert_int_eq(hostview_query(hv, T0, T0 + 27 * S, NULL, &st, &from, &to), 0);
	ck_assert_uint_eq(total_samples(st), 3);
	store_free(st);
	/* Between the two buckets: nothing retained there. */
	ck_assert_int_eq(hostview_query(hv, T0 + 11 * S, T0 + 19 * S, NULL, &st, &from, &to), -ENOENT);
	ck_assert_int_eq(hostview_query(hv, T0 + 5 * S, T0 + 4 * S, NULL, &st, &from, &to), -EINVAL);
	hostview_free(hv);
}
END_TEST

struct first_frames {
	const struct store *st;
	int with_group;
	int total;
};

static int check_root(const struct store_stack *s, void *arg)
{
	struct first_frames *ff = arg;
	const struct store_frame *f = store_frame_get(ff->st, s->frames[0]);
	char want[64];

	snprintf(want, sizeof(want), "[%s pid=%u]", store_process_name(ff->st, s->pid), s->pid);
	ff->total++;
	if (f->kind == FRAME_MARKER && !strcmp(f->name, want))
		ff->with_group++;
	return 0;
}

START_TEST(test_group_by_pid)
{
	struct hostview *hv = hv_make(10, 600, 0);
	struct first_frames ff = { 0 };
	struct store *st = NULL;

	add(hv, (uint32_t)getpid(), (uint32_t)getpid(), "x", T0);
	add(hv, 1, 1, "y", T0);
	ck_assert_int_eq(hostview_query_grouped(hv, 0, UINT64_MAX, NULL, HOSTVIEW_GROUP_PID, &st, NULL,
						NULL), 0);
	ff.st = st;
	store_foreach_stack(st, check_root, &ff);
	ck_assert_int_eq(ff.total, 2);
	ck_assert_int_eq(ff.with_group, 2);
	store_free(st);
	ck_assert_int_eq(hostview_group_parse("unit"), HOSTVIEW_GROUP_UNIT);
	ck_assert_int_eq(hostview_group_parse("nope"), -EINVAL);
	hostview_free(hv);
}
END_TEST

START_TEST(test_memory_cap_evicts_oldest)
{
	const size_t cap = (size_t)1 << 20;
	struct hostview *hv = hv_make(1, 3600, cap);
	struct hostview_stats stats;
	struct store *st = NULL;
	uint64_t from, to, now = T0;
	char leaf[64];

	/* 200 one-second buckets of 500 distinct stacks each (~several MiB
	 * unbounded): the cap must hold throughout, the oldest going first. */
	for (int b = 0; b < 200; b++) {
		for (int i = 0; i < 500; i++) {
			snprintf(leaf, sizeof(leaf), "fn_%d_%d_with_a_longish_symbol_name", b, i);
			add(hv, 100, 100, leaf, now);
		}
		now += S;
		hostview_tick(hv, now);
		hostview_get_stats(hv, &stats);
		ck_assert_uint_le(stats.bytes, cap);
	}
	hostview_get_stats(hv, &stats);
	ck_assert_uint_gt(stats.evicted_memory, 0);
	ck_assert_uint_eq(stats.evicted_age, 0);
	ck_assert_uint_eq(stats.samples, 200 * 500);
	ck_assert_uint_lt(stats.buckets, 200);
	ck_assert_uint_gt(stats.buckets, 0);
	/* What is left is the newest data. */
	ck_assert_int_eq(hostview_query(hv, 0, UINT64_MAX, NULL, &st, &from, &to), 0);
	ck_assert_uint_gt(from, T0 + 100 * S);
	ck_assert_uint_gt(total_samples(st), 0);
	store_free(st);
	hostview_free(hv);
}
END_TEST

START_TEST(test_retention)
{
	struct hostview *hv = hv_make(10, 30, 0);
	struct hostview_stats stats;
	struct store *st = NULL;

	add(hv, 100, 100, "a", T0 + S);
	add(hv, 100, 100, "b", T0 + 11 * S);
	hostview_tick(hv, T0 + 40 * S);  /* the first bucket ended at T0+10 */
	hostview_get_stats(hv, &stats);
	ck_assert_uint_eq(stats.buckets, 1);
	ck_assert_uint_eq(stats.evicted_age, 1);
	hostview_tick(hv, T0 + 100 * S);
	hostview_get_stats(hv, &stats);
	ck_assert_uint_eq(stats.buckets, 0);
	ck_assert_uint_eq(stats.evicted_age, 2);
	ck_assert_int_eq(hostview_query(hv, 0, UINT64_MAX, NULL, &st, NULL, NULL), -ENOENT);
	hostview_free(hv);
}
END_TEST

/* The pprof scrape window: exactly the samples added while a tap is open. */
START_TEST(test_taps_are_exact_windows)
{
	struct hostview *hv = hv_make(10, 600, 0);
	uint32_t me = (uint32_t)getpid();
	struct hostview_filter only_me = { .pid = (pid_t)me };
	struct hostview_tap *all = NULL, *mine = NULL, *next = NULL;
	struct store *st;

	add(hv, me, me, "before", T0 + S);                 /* before any tap */
	ck_assert_int_eq(hostview_tap_open(hv, NULL, &all), 0);
	ck_assert_int_eq(hostview_tap_open(hv, &only_me, &mine), 0);
	for (int i = 0; i < 4; i++)
		add(hv, me, me, "during", T0 + 2 * S);     /* same 10 s bucket as "before" */
	add(hv, 1, 1, "other", T0 + 3 * S);
	st = hostview_tap_close(all);
	ck_assert_uint_eq(total_samples(st), 5);           /* not the earlier sample of the bucket */
	store_free(st);
	/* A scrape right after the last one shares nothing with it. */
	ck_assert_int_eq(hostview_tap_open(hv, NULL, &next), 0);
	add(hv, me, me, "after", T0 + 4 * S);
	st = hostview_tap_close(mine);
	ck_assert_uint_eq(total_samples(st), 5);           /* 4 during + 1 after, pid filtered */
	ck_assert_ptr_nonnull(store_process_name(st, me));
	store_free(st);
	st = hostview_tap_close(next);
	ck_assert_uint_eq(total_samples(st), 1);
	store_free(st);
	ck_assert_ptr_null(hostview_tap_close(NULL));
	/* An open tap is closed by hostview_free (no leak under ASan). */
	ck_assert_int_eq(hostview_tap_open(hv, NULL, &all), 0);
	hostview_free(hv);
}
END_TEST

static Suite *hostview_suite(void)
{
	Suite *s = suite_create("hostview");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_parse_cgroup_lines);
	tcase_add_test(tc, test_parse_unit);
	tcase_add_test(tc, test_parse_container);
	tcase_add_test(tc, test_filters);
	tcase_add_test(tc, test_time_range_and_empty);
	tcase_add_test(tc, test_group_by_pid);
	tcase_add_test(tc, test_memory_cap_evicts_oldest);
	tcase_add_test(tc, test_retention);
	tcase_add_test(tc, test_taps_are_exact_windows);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(hostview_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
