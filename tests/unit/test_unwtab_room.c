/* Unit tests of the unwind table loader (daemon/unwind/unwtab.c) when rows
 * run out: a table refused for room is retried, an unsampled process's
 * tables give way to a sampled binary's, an evicted table is reloaded from
 * the daemon's copy. Real BPF maps; needs root, skipped otherwise. */
#include "unwtab_fixture.h"

/* What python3 needs (its binary's rows, tens of thousands, and its
 * libraries'), measured in an array with room to spare. */
static uint32_t python3_rows(void)
{
	struct unwtab_stats st;
	struct unwtab *u;
	pid_t a;

	make_maps(1u << 20);
	ck_assert_int_eq(unwtab_new(rows_fd, procs_fd, 1u << 20, &u), 0);
	unwtab_set_sweep(u, FAST_SWEEP_NS);
	a = spawn_prog("/usr/bin/python3", "-c", "import time; time.sleep(60)");
	load_when_mapped(u, a, "python3");
	unwtab_get_stats(u, &st);
	kill(a, SIGKILL);
	waitpid(a, NULL, 0);
	unwtab_free(u);
	close_maps();
	return (uint32_t)st.rows_used;
}

/* A table refused for want of room is built again once rows may have
 * freed up, and its process read again: tail cannot fit beside python3;
 * python3 exits (its tables idle, evicted for room, its own binary's a
 * hole big enough); within ROOM_RETRY_NS and a sweep tail's process has
 * its rows (before, it stayed without them for as long as the daemon ran). */
START_TEST(test_room_retried)
{
	struct unwtab_stats st;
	struct unwtab *u;
	uint32_t k;
	struct jp_unwind_proc *e = calloc(1, sizeof(*e));
	const struct jp_unwind_map *m = NULL;
	struct timespec ts = { 0, 100 * 1000 * 1000 };
	pid_t a, b;

	/* Room for python3 and not tail's 1,241. */
	k = python3_rows() + 500;
	make_maps(k);
	ck_assert_int_eq(unwtab_new(rows_fd, procs_fd, k, &u), 0);
	unwtab_set_sweep(u, FAST_SWEEP_NS);
	unwtab_set_room_retry(u, 500000000ull);
	a = spawn_prog("/usr/bin/python3", "-c", "import time; time.sleep(60)");
	load_when_mapped(u, a, "python3");
	b = spawn_prog("/usr/bin/tail", "-f", "/dev/null");
	load_when_mapped(u, b, "tail");
	unwtab_get_stats(u, &st);
	ck_assert_uint_ge(st.rows_full, 1);
	k = (uint32_t)b;
	ck_assert_int_eq(bpf_map_lookup_elem(procs_fd, &k, e), 0);
	m = map_of(e, exe_addr(b, "tail"));
	ck_assert_ptr_nonnull(m);
	ck_assert_uint_eq(m->row_count, 0);
	end_and_sweep(u, a);
	for (int i = 0; i < 400; i++) {
		ck_assert_int_eq(bpf_map_lookup_elem(procs_fd, &k, e), 0);
		m = map_of(e, exe_addr(b, "tail"));
		if (m && m->row_count)
			break;
		nanosleep(&ts, NULL);
	}
	ck_assert_ptr_nonnull(m);
	ck_assert_uint_gt(m->row_count, 0);
	unwtab_get_stats(u, &st);
	ck_assert_uint_ge(st.room_retries, 1);
	kill(b, SIGKILL);
	waitpid(b, NULL, 0);
	unwtab_free(u);
	close_maps();
	free(e);
}
END_TEST

/* pid's executable mapping's row count in its entry (0: none, or no entry). */
static uint32_t exe_row_count(pid_t pid, const char *name)
{
	struct jp_unwind_proc *e = calloc(1, sizeof(*e));
	uint32_t k = (uint32_t)pid, n = 0;
	const struct jp_unwind_map *m;

	if (e && bpf_map_lookup_elem(procs_fd, &k, e) == 0 &&
	    (m = map_of(e, exe_addr(pid, name))) != NULL)
		n = m->row_count;
	free(e);
	return n;
}

/* What BPF does at each CFI walk of pid: stamps its entry with the second. */
static void stamp_sampled(pid_t pid)
{
	struct jp_unwind_proc *e = calloc(1, sizeof(*e));
	uint32_t k = (uint32_t)pid;
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	if (e && bpf_map_lookup_elem(procs_fd, &k, e) == 0) {
		e->sampled_s = (uint32_t)ts.tv_sec;
		bpf_map_update_elem(procs_fd, &k, e, BPF_EXIST);
	}
	free(e);
}

/* Waits (stamping stamp's entry each round when it is not 0) until pid's
 * executable has rows (want) or has none (!want). */
static bool wait_rows(pid_t pid, const char *name, bool want, pid_t stamp)
{
	struct timespec ts = { 0, 100 * 1000 * 1000 };

	for (int i = 0; i < 400; i++) {
		if ((exe_row_count(pid, name) != 0) == want)
			return true;
		if (stamp)
			stamp_sampled(stamp);
		nanosleep(&ts, NULL);
	}
	return false;
}

/* Tables in use go by use, not by who came first: python3 holds nearly all
 * rows; tail finds none. While python3 is sampled (its entry stamped, as
 * the BPF walk does) it keeps them and tail waits; once python3 has gone
 * unsampled for the cold time, tail gets its rows (python3's taken back,
 * its entry pointing away from them), and when python3 is sampled again it
 * gets them back from tail, unsampled meanwhile. Before, tail stayed
 * without rows for as long as python3 lived. */
START_TEST(test_cold_rows_taken)
{
	struct unwtab_stats st;
	struct unwtab *u;
	uint32_t k;
	pid_t a, b;

	k = python3_rows() + 500;
	make_maps(k);
	ck_assert_int_eq(unwtab_new(rows_fd, procs_fd, k, &u), 0);
	unwtab_set_sweep(u, FAST_SWEEP_NS);
	unwtab_set_room_retry(u, 500000000ull);
	unwtab_set_cold(u, 2000000000ull);
	a = spawn_prog("/usr/bin/python3", "-c", "import time; time.sleep(120)");
	load_when_mapped(u, a, "python3");
	ck_assert_uint_gt(exe_row_count(a, "python3"), 0);
	stamp_sampled(a);
	b = spawn_prog("/usr/bin/tail", "-f", "/dev/null");
	wait_mapped(b, "tail");
	unwtab_request(u, (uint32_t)b, 0, false);
	/* python3 sampled all along: 4 s (past the cold time and a second
	 * stamp's rounding, several room retries and sweeps) without rows for
	 * tail. */
	for (int i = 0; i < 40; i++) {
		struct timespec ts = { 0, 100 * 1000 * 1000 };

		stamp_sampled(a);
		nanosleep(&ts, NULL);
	}
	ck_assert_uint_eq(exe_row_count(b, "tail"), 0);
	ck_assert_uint_gt(exe_row_count(a, "python3"), 0);
	unwtab_get_stats(u, &st);
	ck_assert_uint_ge(st.rows_full, 1);
	ck_assert_uint_eq(st.evicted_cold, 0);

	/* python3 unsampled, tail sampled (so the libraries both map are in
	 * use): tail's room retry takes python3's rows. */
	ck_assert(wait_rows(b, "tail", true, b));
	ck_assert_uint_eq(exe_row_count(a, "python3"), 0);
	unwtab_get_stats(u, &st);
	ck_assert_uint_ge(st.evicted_cold, 1);

	/* python3 sampled again, tail not: python3's rows come back. */
	ck_assert(wait_rows(a, "python3", true, a));
	unwtab_get_stats(u, &st);
	ck_assert_uint_ge(st.cold_reloads, 1);
	ck_assert_uint_ge(st.evicted_cold, 2);
	ck_assert_uint_eq(exe_row_count(b, "tail"), 0);
	kill(b, SIGKILL);
	waitpid(b, NULL, 0);
	kill(a, SIGKILL);
	waitpid(a, NULL, 0);
	unwtab_free(u);
	close_maps();
}
END_TEST

/* A binary that runs again after its table was evicted for another one is
 * loaded from the daemon's encoded copy, not rebuilt, with the same rows:
 * sleep, then tail (which needs sleep's room), then sleep again, in an
 * array one row too small for both. */
START_TEST(test_evicted_reloaded)
{
	struct unwtab *u;
	struct unwtab_stats a, b, c;
	struct jp_unwind_row *orig, *again;
	uint32_t n_orig, n_again, cap;
	pid_t p;

	/* How many rows each needs, in an array with room for all. */
	make_maps(1u << 20);
	ck_assert_int_eq(unwtab_new(rows_fd, procs_fd, 1u << 20, &u), 0);
	unwtab_set_sweep(u, FAST_SWEEP_NS);
	p = spawn_sleeper();
	load_when_mapped(u, p, "sleep");
	unwtab_get_stats(u, &a);
	kill(p, SIGKILL);
	waitpid(p, NULL, 0);
	p = spawn_prog("/usr/bin/tail", "-f", "/dev/null");
	load_when_mapped(u, p, "tail");
	unwtab_get_stats(u, &b);
	kill(p, SIGKILL);
	waitpid(p, NULL, 0);
	unwtab_free(u);
	close_maps();
	ck_assert_uint_gt(b.rows_used, a.rows_used);  /* tail's own rows */
	cap = (uint32_t)b.rows_used - 1;

	make_maps(cap);
	ck_assert_int_eq(unwtab_new(rows_fd, procs_fd, cap, &u), 0);
	unwtab_set_sweep(u, FAST_SWEEP_NS);
	p = spawn_sleeper();
	load_when_mapped(u, p, "sleep");
	orig = exe_rows(p, "sleep", &n_orig);
	end_and_sweep(u, p);
	p = spawn_prog("/usr/bin/tail", "-f", "/dev/null");
	load_when_mapped(u, p, "tail");
	unwtab_get_stats(u, &a);
	ck_assert_uint_ge(a.evicted, 1);
	ck_assert_uint_gt(a.spill_bytes, 0);
	ck_assert_uint_eq(a.reloads, 0);
	end_and_sweep(u, p);
	p = spawn_sleeper();
	load_when_mapped(u, p, "sleep");
	unwtab_get_stats(u, &c);
	ck_assert_uint_ge(c.reloads, 1);
	ck_assert_uint_eq(c.builds, a.builds);  /* nothing built again */
	again = exe_rows(p, "sleep", &n_again);
	ck_assert_uint_eq(n_again, n_orig);
	ck_assert_int_eq(memcmp(again, orig, n_orig * sizeof(*orig)), 0);
	kill(p, SIGKILL);
	waitpid(p, NULL, 0);
	free(orig);
	free(again);
	unwtab_free(u);
	close_maps();
}
END_TEST

int main(void)
{
	Suite *s = suite_create("unwtab_room");
	TCase *tc = tcase_create("syscalls"), *tm = tcase_create("mapped");
	int fd;

	if (geteuid() != 0) {
		printf("test_unwtab_room: skipped: BPF maps need root\n");
		return 77;
	}
	fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, "t_probe", 4, 4, 1, NULL);
	if (fd < 0) {
		printf("test_unwtab_room: skipped: cannot create BPF maps (%s)\n", strerror(-fd));
		return 77;
	}
	close(fd);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_evicted_reloaded);
	suite_add_tcase(s, tc);
	tcase_set_timeout(tm, 120);
	tcase_add_checked_fixture(tm, use_mapping, NULL);
	tcase_add_test(tm, test_evicted_reloaded);
	tcase_add_test(tm, test_room_retried);
	tcase_add_test(tm, test_cold_rows_taken);
	suite_add_tcase(s, tm);
	return jprof_check_run(s);
}
