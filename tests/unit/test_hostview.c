#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "event.h"
#include "hostview.h"
#include "procinfo.h"
#include "sample.h"
#include "store.h"

#define S (1000000000ull)
#define T0 (1000 * S)   /* a monotonic "now" well past 0, on a bucket boundary */


static struct hostview *hv_make(unsigned bucket_s, unsigned retention_s, size_t max_bytes)
{
	/* One tier of windows: the window mechanics at bucket_s (the fine
	 * windows and their compaction: test_fine_windows_compact). */
	struct hostview_config cfg = { bucket_s, retention_s, max_bytes, 0, bucket_s };
	struct hostview *hv = NULL;

	ck_assert_int_eq(hostview_new(&cfg, &hv), 0);
	ck_assert_ptr_nonnull(hv);
	return hv;
}

/* Names and labels as the pipeline reads them. */
static struct procinfo *pinfo(void)
{
	static struct procinfo *pi;

	if (!pi)
		ck_assert_int_eq(procinfo_new(&pi), 0);
	return pi;
}

static const char *thread_name(const struct built_sample *bs, char *buf, size_t len)
{
	return procinfo_thread_name((pid_t)bs->pid, bs->start_ns, (pid_t)bs->tid, buf, len);
}

/* Adds one sample of the stack main;<leaf> for pid/tid at now, as the
 * pipeline delivers it: one cpu sample of 10 ms. */
static void add(struct hostview *hv, uint32_t pid, uint32_t tid, const char *leaf, uint64_t now)
{
	const struct sample_frame frames[2] = {
		{ FRAME_NATIVE, "main", "prog", NULL }, { FRAME_NATIVE, leaf, "prog", NULL },
	};
	const uint64_t values[2] = { 1, 10000000 };
	struct sample_names names;
	struct built_sample bs = {
		.event = event_get(EVENT_CPU), .pid = pid, .tid = tid, .values = values,
		.frames = frames, .nframes = 2, .names = &names, .thread_name = thread_name,
	};

	ck_assert_int_eq(procinfo_get(pinfo(), (pid_t)pid, 0, 0, &names), 0);
	hostview_add(hv, &bs, now);
}

/* One sample main;<leaf> of process (pid, start), named "proc". */
static void add_proc(struct hostview *hv, uint32_t pid, uint64_t start, const char *leaf,
		     uint64_t now)
{
	const struct sample_frame frames[2] = {
		{ FRAME_NATIVE, "main", "prog", NULL }, { FRAME_NATIVE, leaf, "prog", NULL },
	};
	const uint64_t values[2] = { 1, 10000000 };
	const struct sample_names names = { "proc", "", "", "" };
	struct built_sample bs = {
		.event = event_get(EVENT_CPU), .pid = pid, .tid = pid, .start_ns = start,
		.values = values, .frames = frames, .nframes = 2, .names = &names,
	};

	hostview_add(hv, &bs, now);
}

struct leaf_filter {
	const struct store *st;
	const char *leaf;
	uint64_t samples;          /* of stacks ending in leaf */
};

static int match_leaf(const struct store_stack *s, void *arg)
{
	struct leaf_filter *lf = arg;
	const struct store_frame *f = store_frame_get(lf->st, s->frames[s->nframes - 1]);

	if (!strcmp(f->name, lf->leaf))
		lf->samples += s->values[0];
	return 0;
}

static uint64_t leaf_samples(const struct store *st, const char *leaf)
{
	struct leaf_filter lf = { st, leaf, 0 };

	store_foreach_stack(st, match_leaf, &lf);
	return lf.samples;
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

/* Ticks at now; then buckets are retained, evicted_age were dropped for age. */
static void tick_expect(struct hostview *hv, uint64_t now, uint64_t buckets, uint64_t evicted_age)
{
	struct hostview_stats stats;

	hostview_tick(hv, now);
	hostview_get_stats(hv, &stats);
	ck_assert_uint_eq(stats.buckets, buckets);
	ck_assert_uint_eq(stats.evicted_age, evicted_age);
}

START_TEST(test_filters)
{
	struct hostview *hv = hv_make(10, 600, 0);
	uint32_t me = (uint32_t)getpid(), init = 1;
	struct hostview_filter f = { 0 };
	struct sample_names lab;
	struct leaf_count lc = { 0 };
	struct store *st = NULL;
	uint64_t from, to;
	char comm[64], cgroup[1024];

	/* The labels' strings live until the next call: keep copies. */
	ck_assert_int_eq(procinfo_get(pinfo(), (pid_t)me, 0, 0, &lab), 0);
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
	ck_assert_int_eq(hostview_query_grouped(hv, 0, UINT64_MAX, NULL, HOSTVIEW_GROUP_PID, false, &st,
						NULL, NULL), 0);
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

/* _i processes share pid 100 in every window (_i - 1 extra buckets each):
 * the buckets of the newest window are never evicted, older windows go. */
START_TEST(test_memory_cap_evicts_oldest)
{
	const size_t cap = (size_t)1 << 20;
	const unsigned nproc = (unsigned)_i;
	struct hostview *hv = hv_make(1, 3600, cap);
	struct hostview_filter last = { .pid = 100, .start_ns = nproc * S };
	struct hostview_stats stats;
	struct store *st = NULL;
	uint64_t from, to, now = T0;
	char leaf[64];

	/* 200 one-second buckets of 500 distinct stacks each (~several MiB
	 * unbounded): the cap must hold throughout, the oldest going first. */
	for (int b = 0; b < 200; b++) {
		for (unsigned i = 0; i < 500; i++) {
			snprintf(leaf, sizeof(leaf), "fn_%d_%u_with_a_longish_symbol_name", b, i);
			add_proc(hv, 100, (i % nproc + 1) * S, leaf, now);
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
	ck_assert_uint_eq(stats.reuse_buckets, (nproc - 1) * 200);
	ck_assert_uint_lt(stats.buckets, 200 * nproc);
	ck_assert_uint_gt(stats.buckets, 0);
	/* What is left is the newest data. */
	ck_assert_int_eq(hostview_query(hv, 0, UINT64_MAX, NULL, &st, &from, &to), 0);
	ck_assert_uint_gt(from, T0 + 100 * S);
	ck_assert_uint_gt(total_samples(st), 0);
	store_free(st);
	/* The last process of the newest window, and none of the others. */
	ck_assert_int_eq(hostview_query(hv, 0, UINT64_MAX, &last, &st, NULL, NULL), 0);
	ck_assert_uint_eq(leaf_samples(st, "fn_199_0_with_a_longish_symbol_name"), nproc == 1);
	snprintf(leaf, sizeof(leaf), "fn_199_%u_with_a_longish_symbol_name", nproc - 1);
	ck_assert_uint_eq(leaf_samples(st, leaf), 1);
	store_free(st);
	hostview_free(hv);
}
END_TEST

START_TEST(test_retention)
{
	struct hostview *hv = hv_make(10, 30, 0);
	struct store *st = NULL;

	add(hv, 100, 100, "a", T0 + S);
	add(hv, 100, 100, "b", T0 + 11 * S);
	tick_expect(hv, T0 + 40 * S, 1, 1);  /* the first bucket ended at T0+10 */
	tick_expect(hv, T0 + 100 * S, 0, 2);
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

/* The daemon drains every second: each drain delivers the samples taken
 * since the previous one, then ticks. A query reports the time its merged
 * buckets' samples were taken in, never the narrower range asked for: a
 * profile that merged 20 s of samples and said 10 s would show 200% of a
 * CPU. */
START_TEST(test_span_is_what_the_buckets_cover)
{
	struct hostview *hv = hv_make(10, 600, 0);
	struct hostview_tap *tap = NULL;
	struct store *st = NULL;
	uint64_t from, to, now;

	/* Drains at T0+3.5 .. T0+24.5: one sample each, then the tick. */
	for (now = T0 + 3 * S + S / 2; now <= T0 + 24 * S + S / 2; now += S) {
		add(hv, 100, 100, "busy", now);
		hostview_tick(hv, now);
		if (now == T0 + 14 * S + S / 2)
			ck_assert_int_eq(hostview_tap_open(hv, NULL, &tap), 0);
	}
	/* 11 s across a window boundary, most of each window in it: the open
	 * window's bucket and the one before it, 15 s of samples. */
	ck_assert_int_eq(hostview_query(hv, T0 + 12 * S, T0 + 23 * S, NULL, &st, &from, &to), 0);
	ck_assert_uint_eq(total_samples(st), 15);             /* T0+10.5 .. T0+24.5 */
	ck_assert_uint_eq(from, T0 + 9 * S + S / 2);         /* the drain before T0+10.5 */
	ck_assert_uint_eq(to, T0 + 24 * S + S / 2);          /* the last drain */
	store_free(st);
	/* Only the open window: its first drain brought samples taken since the
	 * previous drain, in the window before. */
	ck_assert_int_eq(hostview_query(hv, T0 + 21 * S, T0 + 22 * S, NULL, &st, &from, &to), 0);
	ck_assert_uint_eq(total_samples(st), 5);
	ck_assert_uint_eq(from, T0 + 19 * S + S / 2);
	ck_assert_uint_eq(to, T0 + 24 * S + S / 2);
	store_free(st);
	/* Everything: the first bucket starts at its window (no drain before). */
	ck_assert_int_eq(hostview_query(hv, 0, UINT64_MAX, NULL, &st, &from, &to), 0);
	ck_assert_uint_eq(total_samples(st), 22);
	ck_assert_uint_eq(from, T0);
	store_free(st);
	/* A tap opened after the drain at T0+14.5 holds the next 10 drains. */
	hostview_tap_span(tap, &from, &to);
	ck_assert_uint_eq(from, T0 + 14 * S + S / 2);
	ck_assert_uint_eq(to, T0 + 24 * S + S / 2);
	st = hostview_tap_close(tap);
	ck_assert_uint_eq(total_samples(st), 10);
	store_free(st);
	/* A window without samples: the next bucket starts at its own window,
	 * the previous one ends with its own. */
	add(hv, 100, 100, "late", T0 + 45 * S);
	ck_assert_int_eq(hostview_query(hv, T0 + 21 * S, T0 + 22 * S, NULL, &st, &from, &to), 0);
	ck_assert_uint_eq(to, T0 + 24 * S + S / 2);
	store_free(st);
	ck_assert_int_eq(hostview_query(hv, T0 + 41 * S, T0 + 45 * S, NULL, &st, &from, &to), 0);
	ck_assert_uint_eq(total_samples(st), 1);
	ck_assert_uint_eq(from, T0 + 40 * S);
	ck_assert_uint_eq(to, T0 + 45 * S);
	store_free(st);
	hostview_free(hv);

	/* The first drain brings what was taken since the sampler started,
	 * in the window before the one it lands in. */
	ck_assert_int_eq(hostview_new(&(struct hostview_config){ .start_ns = T0 + 9 * S }, &hv), 0);
	add(hv, 100, 100, "first", T0 + 10 * S + S / 2);
	ck_assert_int_eq(hostview_query(hv, 0, UINT64_MAX, NULL, &st, &from, &to), 0);
	ck_assert_uint_eq(from, T0 + 9 * S);
	ck_assert_uint_eq(to, T0 + 10 * S + S / 2);
	store_free(st);
	hostview_free(hv);
}
END_TEST

/* One sample main;memcpy of pid whose memcpy frame says where pid mapped
 * libc (address addr). */
static void add_loc(struct hostview *hv, uint32_t pid, uint64_t addr, uint64_t now)
{
	const struct frame_loc loc = {
		.addr = addr, .map_start = addr & ~0xfffffull, .map_limit = (addr & ~0xfffffull) + (1 << 20),
		.path = "/usr/lib/libc.so.6", .build_id = "abcd", .symbolized = true, .pid = pid,
	};
	const struct sample_frame frames[2] = {
		{ FRAME_NATIVE, "main", "prog", NULL }, { FRAME_NATIVE, "memcpy", "libc.so.6", &loc },
	};
	const uint64_t values[2] = { 1, 10000000 };
	const struct sample_names names = { "proc", "", "", "" };
	struct built_sample bs = {
		.event = event_get(EVENT_CPU), .pid = pid, .tid = pid, .values = values,
		.frames = frames, .nframes = 2, .names = &names,
	};

	hostview_add(hv, &bs, now);
}

/* The address of memcpy in a query's store (0 when it carries none). */
static uint64_t memcpy_addr(const struct store *st)
{
	for (size_t i = 0; i < store_frame_count(st); i++) {
		const struct store_frame *f = store_frame_get(st, (uint32_t)i);

		if (!strcmp(f->name, "memcpy"))
			return f->loc ? f->loc->addr : 0;
	}
	ck_abort_msg("no memcpy frame");
	return 0;
}

/* Buckets keep a frame per process and address: a profile of one process
 * shows its own address, never where another process mapped its libraries
 * (which ASLR hides from other users). */
START_TEST(test_addresses_stay_with_their_process)
{
	struct hostview *hv = hv_make(10, 600, 0);
	struct hostview_filter other = { .pid = 200 }, first = { .pid = 100 };
	struct store *st = NULL;

	add_loc(hv, 100, 0x7f0000001234, T0 + S);
	add_loc(hv, 200, 0x7f5555505678, T0 + 2 * S);
	ck_assert_int_eq(hostview_query(hv, 0, UINT64_MAX, &other, &st, NULL, NULL), 0);
	ck_assert_uint_eq(total_samples(st), 1);
	ck_assert_uint_eq(memcpy_addr(st), 0x7f5555505678);
	store_free(st);
	ck_assert_int_eq(hostview_query(hv, 0, UINT64_MAX, &first, &st, NULL, NULL), 0);
	ck_assert_uint_eq(memcpy_addr(st), 0x7f0000001234);
	store_free(st);
	/* The whole host: one address, of a process that is in it. */
	ck_assert_int_eq(hostview_query(hv, 0, UINT64_MAX, NULL, &st, NULL, NULL), 0);
	ck_assert_uint_eq(memcpy_addr(st), 0x7f0000001234);
	store_free(st);
	hostview_free(hv);
}
END_TEST

/* memcpy frames with an address in a query's store, and the samples of
 * stacks with memcpy at their leaf. */
struct memcpy_frames {
	const struct store *st;
	size_t n;
	uint64_t addrs[8];
	uint64_t samples;
};

static int count_memcpy_leaf(const struct store_stack *s, void *arg)
{
	struct memcpy_frames *m = arg;
	const struct store_frame *f = store_frame_get(m->st, s->frames[s->nframes - 1]);

	if (!strcmp(f->name, "memcpy"))
		m->samples += s->values[0];
	return 0;
}

static struct memcpy_frames memcpy_frames(const struct store *st)
{
	struct memcpy_frames m = { .st = st };

	for (size_t i = 0; i < store_frame_count(st); i++) {
		const struct store_frame *f = store_frame_get(st, (uint32_t)i);

		if (!strcmp(f->name, "memcpy") && f->loc && m.n < 8)
			m.addrs[m.n++] = f->loc->addr;
	}
	store_foreach_stack(st, count_memcpy_leaf, &m);
	return m;
}

/* Two hot addresses of one function over two windows: a pprof query (addrs)
 * keeps a frame for each, with its address, and every sample; other formats
 * get one frame for the function, as before. */
START_TEST(test_query_keeps_addresses_for_pprof)
{
	struct hostview *hv = hv_make(10, 600, 0);
	struct hostview_filter f = { .pid = 100 };
	struct memcpy_frames m;
	struct store *st = NULL;

	for (int i = 0; i < 3; i++) {
		add_loc(hv, 100, 0x7f0000001234, T0 + (uint64_t)(1 + 10 * i) * S);
		add_loc(hv, 100, 0x7f0000005678, T0 + (uint64_t)(2 + 10 * i) * S);
	}
	ck_assert_int_eq(hostview_query_grouped(hv, 0, UINT64_MAX, &f, HOSTVIEW_GROUP_NONE, true, &st,
						NULL, NULL), 0);
	m = memcpy_frames(st);
	ck_assert_uint_eq(m.n, 2);
	ck_assert_uint_eq(m.addrs[0] ^ m.addrs[1], 0x7f0000001234 ^ 0x7f0000005678);
	ck_assert_uint_eq(m.samples, 6);
	store_free(st);
	ck_assert_int_eq(hostview_query_grouped(hv, 0, UINT64_MAX, &f, HOSTVIEW_GROUP_NONE, false, &st,
						NULL, NULL), 0);
	m = memcpy_frames(st);
	ck_assert_uint_eq(m.n, 1);
	ck_assert_uint_eq(m.samples, 6);
	ck_assert_uint_eq(store_stack_count(st), 1);
	store_free(st);
	hostview_free(hv);
}
END_TEST

/* A pid held by two processes within one window (the first exited, another
 * took its pid): a query or tap for the process that has the pid now gets
 * none of the first one's samples, even those drained after the second
 * started. */
START_TEST(test_pid_reuse_in_one_window)
{
	const uint64_t old_start = 5 * S, new_start = 7 * S;
	struct hostview *hv = hv_make(10, 600, 0);
	struct hostview_filter f = { .pid = 4242, .start_ns = new_start };
	struct hostview_stats stats;
	struct hostview_tap *tap = NULL;
	struct store *st = NULL;

	add_proc(hv, 4242, old_start, "old_secret", T0 + S);
	ck_assert_int_eq(hostview_tap_open(hv, &f, &tap), 0);
	add_proc(hv, 4242, new_start, "new_own", T0 + 2 * S);
	add_proc(hv, 4242, old_start, "old_secret", T0 + 2 * S);   /* drained late */
	add_proc(hv, 4242, new_start, "new_own", T0 + 3 * S);
	add_proc(hv, 77, 1 * S, "other", T0 + 3 * S);

	ck_assert_int_eq(hostview_query(hv, 0, UINT64_MAX, &f, &st, NULL, NULL), 0);
	ck_assert_uint_eq(total_samples(st), 2);
	ck_assert_uint_eq(leaf_samples(st, "new_own"), 2);
	store_free(st);
	f.start_ns = old_start;
	ck_assert_int_eq(hostview_query(hv, 0, UINT64_MAX, &f, &st, NULL, NULL), 0);
	ck_assert_uint_eq(total_samples(st), 2);
	ck_assert_uint_eq(leaf_samples(st, "old_secret"), 2);
	store_free(st);
	f.start_ns = 0;   /* every process that had the pid */
	ck_assert_int_eq(hostview_query(hv, 0, UINT64_MAX, &f, &st, NULL, NULL), 0);
	ck_assert_uint_eq(total_samples(st), 4);
	store_free(st);
	st = hostview_tap_close(tap);
	ck_assert_uint_eq(total_samples(st), 2);
	ck_assert_uint_eq(leaf_samples(st, "new_own"), 2);
	store_free(st);

	hostview_get_stats(hv, &stats);
	ck_assert_uint_eq(stats.buckets, 2);
	ck_assert_uint_eq(stats.reuse_buckets, 1);
	ck_assert_uint_eq(stats.samples, 5);
	/* The next window starts with one bucket again. */
	add_proc(hv, 4242, new_start, "new_own", T0 + 11 * S);
	hostview_get_stats(hv, &stats);
	ck_assert_uint_eq(stats.buckets, 3);
	f.start_ns = new_start;
	ck_assert_int_eq(hostview_query(hv, 0, UINT64_MAX, &f, &st, NULL, NULL), 0);
	ck_assert_uint_eq(total_samples(st), 3);
	store_free(st);
	/* Retention drops both buckets of the first window, later everything. */
	tick_expect(hv, T0 + 610 * S, 1, 2);
	tick_expect(hv, T0 + 700 * S, 0, 3);
	ck_assert_int_eq(hostview_query(hv, 0, UINT64_MAX, NULL, &st, NULL, NULL), -ENOENT);
	/* And the view works again from empty. */
	add_proc(hv, 4242, new_start, "new_own", T0 + 701 * S);
	add_proc(hv, 4242, old_start, "old_secret", T0 + 701 * S);
	hostview_get_stats(hv, &stats);
	ck_assert_uint_eq(stats.buckets, 2);
	hostview_free(hv);
}
END_TEST

/* Default windows: 1 s for the newest 10 buckets, then compacted into
 * 10 s ones. The last 10 s is answered within a second of 10 s (it was 10
 * to 20 s with 10 s windows); a range reaching into the compacted past
 * within half a bucket; nothing is lost or mixed in the compaction, two
 * processes with one pid included. */
START_TEST(test_fine_windows_compact)
{
	struct hostview *hv = NULL;
	struct hostview_stats stats;
	struct hostview_filter f = { .pid = 4242, .start_ns = 5 * S };
	struct store *st = NULL;
	uint64_t from, to, now = 0;

	ck_assert_int_eq(hostview_new(&(struct hostview_config){ .bucket_s = 10,
								 .retention_s = 600 }, &hv), 0);
	for (now = T0 + S / 2; now <= T0 + 200 * S + S / 2; now += S) {
		add(hv, 100, 100, "busy", now);
		/* One pid, two processes, in one 10 s window that gets compacted. */
		if (now == T0 + 21 * S + S / 2)
			add_proc(hv, 4242, 5 * S, "first", now);
		if (now == T0 + 24 * S + S / 2)
			add_proc(hv, 4242, 7 * S, "second", now);
		hostview_tick(hv, now);
	}
	now -= S;
	hostview_get_stats(hv, &stats);
	ck_assert_uint_gt(stats.compacted, 80);
	ck_assert_uint_lt(stats.buckets, 130);   /* 200 fine windows had there been no compaction */
	ck_assert_uint_gt(stats.buckets, 100);

	ck_assert_int_eq(hostview_query(hv, now - 10 * S, now, NULL, &st, &from, &to), 0);
	ck_assert_uint_ge(to - from, 9 * S);
	ck_assert_uint_le(to - from, 11 * S);
	ck_assert_uint_ge(total_samples(st), 9);
	ck_assert_uint_le(total_samples(st), 11);
	store_free(st);

	ck_assert_int_eq(hostview_query(hv, now - 150 * S, now, NULL, &st, &from, &to), 0);
	ck_assert_uint_ge(to - from, 145 * S);
	ck_assert_uint_le(to - from, 155 * S);
	store_free(st);

	ck_assert_int_eq(hostview_query(hv, 0, UINT64_MAX, &f, &st, NULL, NULL), 0);
	ck_assert_uint_eq(total_samples(st), 1);
	ck_assert_uint_eq(leaf_samples(st, "first"), 1);
	store_free(st);
	f.start_ns = 7 * S;
	ck_assert_int_eq(hostview_query(hv, 0, UINT64_MAX, &f, &st, NULL, NULL), 0);
	ck_assert_uint_eq(total_samples(st), 1);
	ck_assert_uint_eq(leaf_samples(st, "second"), 1);
	store_free(st);
	ck_assert_int_eq(hostview_query(hv, 0, UINT64_MAX, NULL, &st, &from, &to), 0);
	ck_assert_uint_eq(total_samples(st), 201 + 2);
	ck_assert_uint_eq(from, T0);
	store_free(st);
	hostview_free(hv);
}
END_TEST

/* A second of a quiet host costs what its samples hold, not a fixed block:
 * the host view keeps the last 100 s as 1 s windows, each a store of its
 * own; with 64 KiB arena blocks 100 s of two samples a second took 7.0 MB
 * (2.1 MB with 16 KiB ones). */
START_TEST(test_fine_windows_cost_what_they_hold)
{
	struct hostview *hv = NULL;
	struct hostview_stats stats;

	ck_assert_int_eq(hostview_new(&(struct hostview_config){ .bucket_s = 10,
								 .retention_s = 600 }, &hv), 0);
	for (uint64_t now = T0 + S / 2; now < T0 + 100 * S; now += S) {
		add(hv, 100, 100, "busy", now);
		add(hv, 200, 200, "other", now);
		hostview_tick(hv, now);
	}
	hostview_get_stats(hv, &stats);
	ck_assert_uint_ge(stats.buckets, 90);
	ck_assert_msg(stats.bytes < stats.buckets * 32 * 1024,
		      "%llu bytes in %llu windows", (unsigned long long)stats.bytes,
		      (unsigned long long)stats.buckets);
	hostview_free(hv);
}
END_TEST

static Suite *hostview_suite(void)
{
	Suite *s = suite_create("hostview");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_filters);
	tcase_add_test(tc, test_time_range_and_empty);
	tcase_add_test(tc, test_group_by_pid);
	tcase_add_loop_test(tc, test_memory_cap_evicts_oldest, 1, 4);
	tcase_add_test(tc, test_retention);
	tcase_add_test(tc, test_taps_are_exact_windows);
	tcase_add_test(tc, test_pid_reuse_in_one_window);
	tcase_add_test(tc, test_fine_windows_compact);
	tcase_add_test(tc, test_fine_windows_cost_what_they_hold);
	tcase_add_test(tc, test_span_is_what_the_buckets_cover);
	tcase_add_test(tc, test_addresses_stay_with_their_process);
	tcase_add_test(tc, test_query_keeps_addresses_for_pprof);
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
