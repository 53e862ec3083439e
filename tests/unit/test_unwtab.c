/* Unit tests of the unwind table loader (daemon/unwind/unwtab.c) against
 * real BPF maps of the shapes sampler.bpf.c declares: a process's entry,
 * its rows, sharing between processes, the row bound, and the release of
 * an exited process. Needs root (BPF maps); skipped otherwise. */
#include "unwtab_fixture.h"

/* A function of this executable; its ELF address and the loaded object's
 * base. */
__attribute__((noinline)) static int probe_function(int x)
{
	return x * 3 + 1;
}

START_TEST(test_own_process)
{
	struct unwtab *u;
	struct jp_unwind_proc *e = calloc(1, sizeof(*e));
	struct unwtab_stats st;
	struct cfi_table *t = NULL;
	enum cfi_error why;
	const struct jp_unwind_map *m;
	const struct jp_unwind_row *want;
	struct jp_unwind_row got;
	uint64_t addr = (uint64_t)(uintptr_t)&probe_function, elf_pc;
	uint32_t pid = (uint32_t)getpid(), lo, hi;
	int fd;

	make_maps(1u << 20);
	ck_assert_int_eq(unwtab_new(rows_fd, procs_fd, 1u << 20, &u), 0);
	unwtab_request(u, pid, 0, false);
	ck_assert_int_eq(unwtab_wait_idle(u, WAIT_NS), 0);
	ck_assert_int_eq(bpf_map_lookup_elem(procs_fd, &pid, e), 0);
	ck_assert_uint_gt(e->n, 2);
	for (uint32_t i = 1; i < e->n; i++)
		ck_assert_uint_le(e->maps[i - 1].end, e->maps[i].start);
	m = map_of(e, addr);
	ck_assert_ptr_nonnull(m);
	ck_assert_uint_gt(m->row_count, 10);

	/* The row BPF would find is the one the builder makes for that pc. */
	fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	ck_assert_int_eq(cfi_build_fd(fd, -1, &(struct cfi_limits){ .max_rows = 1u << 20 }, &t, &why), 0);
	close(fd);
	ck_assert_uint_eq(m->row_count, t->n);
	elf_pc = addr - m->bias;
	want = cfi_lookup(t, elf_pc);
	ck_assert_ptr_nonnull(want);
	ck_assert_int_eq(want->kind, JP_UW_CFA_RSP);  /* a function's entry: rsp + 8 */
	ck_assert_int_eq(want->cfa_off, 8);
	lo = 0;
	hi = m->row_count;
	while (lo < hi) {  /* as unwind_find_row does */
		uint32_t mid = (lo + hi) / 2, k = m->row_first + mid;

		ck_assert_int_eq(bpf_map_lookup_elem(rows_fd, &k, &got), 0);
		if (got.pc <= (uint32_t)elf_pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	ck_assert_uint_gt(lo, 0);
	lo = m->row_first + lo - 1;
	ck_assert_int_eq(bpf_map_lookup_elem(rows_fd, &lo, &got), 0);
	ck_assert_int_eq(memcmp(&got, want, sizeof(got)), 0);

	unwtab_get_stats(u, &st);
	ck_assert_uint_eq(st.procs, 1);
	ck_assert_uint_ge(st.tables, 2);  /* this test and libc at least */
	ck_assert_uint_ge(st.rows_used, m->row_count);
	ck_assert_uint_eq(st.requests, 1);
	ck_assert_uint_eq(st.proc_reads, 1);
	ck_assert_uint_eq(st.rows_uploaded, st.rows_used);
	ck_assert_uint_eq(st.rows_mapped, rows_mappable ? 1 : 0);
	ck_assert_int_eq(probe_function(1), 4);
	cfi_table_free(t);
	unwtab_free(u);
	close_maps();
	free(e);
}
END_TEST

/* Two processes of one binary share its table; when one exits its entry
 * goes (the sweep) and the table stays for the other. */
START_TEST(test_shared_and_released)
{
	struct unwtab *u;
	struct unwtab_stats a, b, c;
	struct jp_unwind_proc *e = calloc(1, sizeof(*e));
	pid_t p1 = spawn_sleeper(), p2 = spawn_sleeper();
	uint32_t k1 = (uint32_t)p1, k2 = (uint32_t)p2;
	struct timespec ts = { 0, 50 * 1000 * 1000 };
	int tries;

	make_maps(1u << 20);
	ck_assert_int_eq(unwtab_new(rows_fd, procs_fd, 1u << 20, &u), 0);
	unwtab_set_sweep(u, FAST_SWEEP_NS);
	/* Until each has exec'd sleep and the loader has mapped libc, its
	 * mappings are not the ones compared below. */
	for (tries = 0; tries < 400; tries++) {
		if (maps_have((int)p1, "libc.so") && maps_have((int)p2, "libc.so") &&
		    maps_have((int)p1, "sleep") && maps_have((int)p2, "sleep"))
			break;
		nanosleep(&ts, NULL);
	}
	ck_assert(maps_have((int)p1, "libc.so") && maps_have((int)p2, "libc.so"));
	unwtab_request(u, k1, 0, false);
	ck_assert_int_eq(unwtab_wait_idle(u, WAIT_NS), 0);
	unwtab_get_stats(u, &a);
	unwtab_request(u, k2, 0, false);
	ck_assert_int_eq(unwtab_wait_idle(u, WAIT_NS), 0);
	unwtab_get_stats(u, &b);
	ck_assert_uint_eq(b.procs, 2);
	ck_assert_uint_eq(b.tables, a.tables);      /* nothing built twice */
	ck_assert_uint_eq(b.rows_used, a.rows_used);
	ck_assert_uint_eq(b.builds, a.builds);

	kill(p1, SIGKILL);
	waitpid(p1, NULL, 0);
	/* The sweep (FAST_SWEEP_NS here) releases p1's entry. */
	for (tries = 0; tries < 400; tries++) {
		if (bpf_map_lookup_elem(procs_fd, &k1, e) < 0)
			break;
		nanosleep(&ts, NULL);
	}
	ck_assert_int_lt(bpf_map_lookup_elem(procs_fd, &k1, e), 0);
	ck_assert_int_eq(bpf_map_lookup_elem(procs_fd, &k2, e), 0);
	unwtab_request(u, k2, 0, false);  /* the stats are published after a request */
	ck_assert_int_eq(unwtab_wait_idle(u, WAIT_NS), 0);
	unwtab_get_stats(u, &c);
	ck_assert_uint_eq(c.procs, 1);
	ck_assert_uint_eq(c.tables, b.tables);      /* still mapped by p2 */
	kill(p2, SIGKILL);
	waitpid(p2, NULL, 0);
	unwtab_free(u);
	close_maps();
	free(e);
}
END_TEST

/* A copy of src at dst owned by uid, mode 0755. */
static void copy_file(const char *src, const char *dst, uid_t uid)
{
	char buf[65536];
	int in = open(src, O_RDONLY | O_CLOEXEC);
	int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
	ssize_t n;

	ck_assert_int_ge(in, 0);
	ck_assert_int_ge(out, 0);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		ck_assert_int_eq(write(out, buf, (size_t)n), n);
	close(in);
	close(out);
	ck_assert_int_eq(chown(dst, uid, uid), 0);
	ck_assert_int_eq(chmod(dst, 0755), 0);
}

static pid_t spawn_copy(const char *path)
{
	char *argv[] = { (char *)path, "60", NULL };

	return spawn_argv(argv);
}

/* Files with one build-id share a table only when no user could have
 * written them: two root-owned copies of sleep share one, a copy owned by
 * nobody (which could claim any build-id) gets a table of its own. */
START_TEST(test_build_id_trusted_only)
{
	char dir[] = "/tmp/jprof-unwtab-XXXXXX", a[64], b[64], c[64];
	struct unwtab_stats s1, s2, s3;
	struct timespec ts = { 0, 50 * 1000 * 1000 };
	struct unwtab *u;
	pid_t p[3];
	int tries;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_eq(chmod(dir, 0755), 0);
	snprintf(a, sizeof(a), "%s/root_a", dir);
	snprintf(b, sizeof(b), "%s/root_b", dir);
	snprintf(c, sizeof(c), "%s/user_c", dir);
	copy_file("/bin/sleep", a, 0);
	copy_file("/bin/sleep", b, 0);
	copy_file("/bin/sleep", c, 65534);
	p[0] = spawn_copy(a);
	p[1] = spawn_copy(b);
	p[2] = spawn_copy(c);
	/* Until each has exec'd its copy and the loader has mapped libc. */
	for (tries = 0; tries < 400; tries++) {
		if (maps_have((int)p[0], "root_a") && maps_have((int)p[1], "root_b") &&
		    maps_have((int)p[2], "user_c") && maps_have((int)p[0], "ld-linux") &&
		    maps_have((int)p[0], "libc.so") && maps_have((int)p[1], "libc.so") &&
		    maps_have((int)p[2], "libc.so"))
			break;
		nanosleep(&ts, NULL);
	}
	ck_assert(maps_have((int)p[0], "root_a") && maps_have((int)p[1], "root_b") &&
		  maps_have((int)p[2], "user_c"));
	make_maps(1u << 20);
	ck_assert_int_eq(unwtab_new(rows_fd, procs_fd, 1u << 20, &u), 0);
	unwtab_request(u, (uint32_t)p[0], 0, false);
	ck_assert_int_eq(unwtab_wait_idle(u, WAIT_NS), 0);
	unwtab_get_stats(u, &s1);
	unwtab_request(u, (uint32_t)p[1], 0, false);
	ck_assert_int_eq(unwtab_wait_idle(u, WAIT_NS), 0);
	unwtab_get_stats(u, &s2);
	unwtab_request(u, (uint32_t)p[2], 0, false);
	ck_assert_int_eq(unwtab_wait_idle(u, WAIT_NS), 0);
	unwtab_get_stats(u, &s3);
	ck_assert_uint_eq(s2.procs, 2);
	ck_assert_uint_eq(s2.builds, s1.builds);      /* root's copies share */
	ck_assert_uint_eq(s3.procs, 3);
	ck_assert_uint_eq(s3.builds, s2.builds + 1);  /* nobody's copy has its own */
	for (int i = 0; i < 3; i++) {
		kill(p[i], SIGKILL);
		waitpid(p[i], NULL, 0);
	}
	unwtab_free(u);
	close_maps();
	unlink(a);
	unlink(b);
	unlink(c);
	rmdir(dir);
}
END_TEST

/* A process asked for again and again with nothing new mapped (BPF's
 * misses from garbage frame pointers) has its maps read ever more rarely,
 * and a miss in between reads nothing; once its entry is gone from BPF
 * (an exec deletes it) the next request reads and loads it again. */
START_TEST(test_reread_backoff)
{
	struct unwtab *u;
	struct unwtab_stats a, b, c, d;
	struct jp_unwind_proc *e = calloc(1, sizeof(*e));
	struct timespec gap = { 0, 300 * 1000 * 1000 };
	uint32_t pid = (uint32_t)getpid();

	make_maps(1u << 20);
	ck_assert_int_eq(unwtab_new(rows_fd, procs_fd, 1u << 20, &u), 0);
	unwtab_request(u, pid, 0, false);
	ck_assert_int_eq(unwtab_wait_idle(u, WAIT_NS), 0);
	/* 300 ms later: past the first 250 ms, read again, unchanged. */
	nanosleep(&gap, NULL);
	unwtab_request(u, pid, 0, false);
	ck_assert_int_eq(unwtab_wait_idle(u, WAIT_NS), 0);
	unwtab_get_stats(u, &a);
	ck_assert_uint_eq(a.proc_reads, 2);
	ck_assert_uint_eq(a.maps_unchanged, 1);
	/* 550 ms later: past the doubled interval (500 ms), unchanged again. */
	nanosleep(&(struct timespec){ 0, 550 * 1000 * 1000 }, NULL);
	unwtab_request(u, pid, 0, false);
	ck_assert_int_eq(unwtab_wait_idle(u, WAIT_NS), 0);
	/* 300 ms later: more than the first 250 ms, within 1 s: not read.
	 * Not later: the worker, niced on a loaded machine, must take the
	 * request before the 1 s are up (700 ms to spare). */
	nanosleep(&(struct timespec){ 0, 300 * 1000 * 1000 }, NULL);
	unwtab_request(u, pid, 0, false);
	ck_assert_int_eq(unwtab_wait_idle(u, WAIT_NS), 0);
	unwtab_get_stats(u, &b);
	ck_assert_uint_eq(b.proc_reads, 3);
	ck_assert_uint_eq(b.maps_unchanged, 2);
	/* Its entry deleted (as an exec does): read at once, loaded again. */
	ck_assert_int_eq(bpf_map_delete_elem(procs_fd, &pid), 0);
	unwtab_request(u, pid, 0, false);
	ck_assert_int_eq(unwtab_wait_idle(u, WAIT_NS), 0);
	unwtab_get_stats(u, &c);
	ck_assert_uint_eq(c.proc_reads, 4);
	ck_assert_int_eq(bpf_map_lookup_elem(procs_fd, &pid, e), 0);
	/* From the tables it had: nothing built again. */
	ck_assert_uint_eq(c.builds, a.builds);
	unwtab_get_stats(u, &d);
	ck_assert_uint_eq(d.procs, 1);
	unwtab_free(u);
	close_maps();
	free(e);
}
END_TEST

/* Rows beyond the array: the binary is left to frame pointers, counted. */
START_TEST(test_rows_full)
{
	struct unwtab *u;
	struct unwtab_stats st;
	struct jp_unwind_proc *e = calloc(1, sizeof(*e));
	uint32_t pid = (uint32_t)getpid();
	const struct jp_unwind_map *m;

	make_maps(2000);
	ck_assert_int_eq(unwtab_new(rows_fd, procs_fd, 2000, &u), 0);
	unwtab_request(u, pid, 0, false);
	ck_assert_int_eq(unwtab_wait_idle(u, WAIT_NS), 0);
	unwtab_get_stats(u, &st);
	ck_assert_uint_gt(st.rows_full, 0);
	ck_assert_uint_le(st.rows_used, 2000);
	ck_assert_int_eq(bpf_map_lookup_elem(procs_fd, &pid, e), 0);
	m = map_of(e, (uint64_t)(uintptr_t)&read);  /* libc: ~28,000 rows */
	ck_assert_ptr_nonnull(m);
	ck_assert_uint_eq(m->row_count, 0);
	unwtab_free(u);
	close_maps();
	free(e);
}
END_TEST

/* path a1 as uid (and its group), through setpriv. */
static pid_t spawn_as(uid_t uid, const char *path, const char *a1)
{
	char ids[2][32];
	char *argv[] = { "/usr/bin/setpriv", ids[0], ids[1], "--clear-groups", "--",
			 (char *)path, (char *)a1, NULL };

	snprintf(ids[0], sizeof(ids[0]), "--reuid=%u", (unsigned)uid);
	snprintf(ids[1], sizeof(ids[1]), "--regid=%u", (unsigned)uid);
	return spawn_argv(argv);
}

static void end_all(pid_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		kill(p[i], SIGKILL);
		waitpid(p[i], NULL, 0);
	}
}

/* A binary whose CFI costs libdw seconds (tests/progs/cfi_long, owned by
 * nobody, run by root) is built once, stopped at the budget and counted;
 * another process of it builds nothing; another such file of the same
 * owner, asked for before a process of root's files (both queued while the
 * worker builds a root-owned copy, which root's charge does not limit),
 * waits while the owner's charge drains (root's are built meanwhile), and
 * is built (and stopped) then. */
START_TEST(test_hostile_build_bounded)
{
	const char *dir = getenv("JPROF_PROGS_DIR");
	char tmp[] = "/tmp/jprof-unwtab-XXXXXX", src[1024], h[3][64];
	struct timespec ts = { 0, 50 * 1000 * 1000 };
	struct unwtab_stats a, b, c, d;
	struct unwtab *u;
	pid_t p[5];
	int i;

	ck_assert_ptr_nonnull(dir);
	ck_assert_ptr_nonnull(mkdtemp(tmp));
	ck_assert_int_eq(chmod(tmp, 0755), 0);
	snprintf(src, sizeof(src), "%s/cfi_long", dir);
	for (i = 0; i < 3; i++) {
		snprintf(h[i], sizeof(h[i]), "%s/hostile%d", tmp, i);
		copy_file(src, h[i], i < 2 ? 65534 : 0);
	}
	make_maps(1u << 20);
	ck_assert_int_eq(unwtab_new(rows_fd, procs_fd, 1u << 20, &u), 0);
	p[0] = spawn_prog(h[0], "60", NULL);
	load_when_mapped(u, p[0], "hostile0");
	unwtab_get_stats(u, &a);
	ck_assert_uint_eq(a.rejected[CFI_ERR_BUDGET], 1);
	ck_assert_uint_ge(a.build_cpu_ns_total, CFI_BUILD_CPU_NS);
	ck_assert_uint_lt(a.build_cpu_ns_total, CFI_BUILD_CPU_NS + 1000000000ull);

	p[1] = spawn_prog(h[0], "60", NULL);
	load_when_mapped(u, p[1], "hostile0");
	unwtab_get_stats(u, &b);
	ck_assert_uint_eq(b.builds, a.builds);
	ck_assert_uint_eq(b.rejected[CFI_ERR_BUDGET], 1);

	p[2] = spawn_prog(h[1], "60", NULL);
	p[3] = spawn_sleeper();
	p[4] = spawn_prog(h[2], "60", NULL);
	wait_mapped(p[2], "hostile1");
	wait_mapped(p[3], "sleep");
	wait_mapped(p[4], "hostile2");
	unwtab_request(u, (uint32_t)p[4], 0, false);
	unwtab_request(u, (uint32_t)p[2], 0, false);
	unwtab_request(u, (uint32_t)p[3], 0, false);
	ck_assert_int_eq(unwtab_wait_idle(u, WAIT_NS), 0);
	unwtab_get_stats(u, &c);
	ck_assert_uint_ge(c.builds_deferred, 1);
	ck_assert_uint_gt(c.builds, b.builds);  /* sleep's own table */
	d = c;

	/* root's copy, and nobody's second once retried. */
	for (i = 0; i < 600 && d.rejected[CFI_ERR_BUDGET] < 3; i++) {
		nanosleep(&ts, NULL);
		unwtab_get_stats(u, &d);
	}
	ck_assert_uint_eq(d.rejected[CFI_ERR_BUDGET], 3);
	end_all(p, 5);
	unwtab_free(u);
	close_maps();
	for (i = 0; i < 3; i++)
		unlink(h[i]);
	rmdir(tmp);
}
END_TEST

/* A table its user's share has no room for is kept without rows: the next
 * process of the binary (nobody's sleep maps libc, 28,000 rows, half of
 * the array is 20,000) does not build it again. */
START_TEST(test_share_refused_kept)
{
	struct unwtab_stats a, b;
	struct unwtab *u;
	pid_t p[2];

	make_maps(40000);
	ck_assert_int_eq(unwtab_new(rows_fd, procs_fd, 40000, &u), 0);
	p[0] = spawn_as(65534, "/bin/sleep", "60");
	load_when_mapped(u, p[0], "sleep");
	unwtab_get_stats(u, &a);
	ck_assert_uint_ge(a.uid_share, 1);
	p[1] = spawn_as(65534, "/bin/sleep", "60");
	load_when_mapped(u, p[1], "sleep");
	unwtab_get_stats(u, &b);
	ck_assert_uint_eq(b.procs, 2);
	/* Each build of it would count again (the old code dropped the rows
	 * and built it anew, uncounted in builds). */
	ck_assert_uint_eq(b.uid_share, a.uid_share);
	ck_assert_uint_eq(b.builds, a.builds);
	end_all(p, 2);
	unwtab_free(u);
	close_maps();
}
END_TEST

static pid_t young_child(uint64_t *start)
{
	pid_t pid = spawn_prog("/bin/sleep", "30", NULL);

	ck_assert_int_eq(proc_read_start_boottime(pid, start), 0);
	return pid;
}

static void end_child(pid_t pid)
{
	kill(pid, SIGKILL);
	ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
}

/* A host-view request (BPF's miss) for a process younger than 100 ms waits
 * until the process is that old: one that exits before costs no read and
 * gets no entry; one still running is loaded then. A recording's (urgent)
 * request is served at once. */
START_TEST(test_young_deferred)
{
	struct unwtab *u;
	struct unwtab_stats a, b;
	struct jp_unwind_proc *e = calloc(1, sizeof(*e));
	uint64_t s1, s2, s3, due;
	pid_t p1, p2, p3;
	uint32_t k1, k2, k3;
	bool found;

	make_maps(1u << 20);
	ck_assert_int_eq(unwtab_new(rows_fd, procs_fd, 1u << 20, &u), 0);
	/* Runs past its 100 ms: loaded then, not before. */
	p1 = young_child(&s1);
	k1 = (uint32_t)p1;
	due = s1 + 100 * 1000000ull;
	unwtab_request(u, k1, s1, false);
	unwtab_get_stats(u, &a);
	ck_assert_uint_eq(a.requests, 1);
	ck_assert_uint_eq(a.deferred, 1);
	found = bpf_map_lookup_elem(procs_fd, &k1, e) == 0;
	ck_assert_msg(!found || clock_ns(CLOCK_BOOTTIME) >= due, "loaded before it was 100 ms old");
	ck_assert_int_eq(unwtab_wait_idle(u, WAIT_NS), 0);
	ck_assert_uint_ge(clock_ns(CLOCK_BOOTTIME), due);
	ck_assert_int_eq(bpf_map_lookup_elem(procs_fd, &k1, e), 0);
	ck_assert_uint_gt(e->n, 2);

	/* Exits before its 100 ms: nothing read, no entry. */
	p2 = young_child(&s2);
	k2 = (uint32_t)p2;
	unwtab_request(u, k2, s2, false);
	end_child(p2);
	if (clock_ns(CLOCK_BOOTTIME) < s2 + 100 * 1000000ull) {
		ck_assert_int_eq(unwtab_wait_idle(u, WAIT_NS), 0);
		unwtab_get_stats(u, &b);
		ck_assert_uint_eq(b.deferred, 2);
		ck_assert_uint_eq(b.deferred_gone, 1);
		ck_assert_uint_eq(b.proc_reads, a.proc_reads + 1);  /* p1's only */
		ck_assert_int_lt(bpf_map_lookup_elem(procs_fd, &k2, e), 0);
	} else {
		/* The machine stalled past its 100 ms before it exited. */
		printf("test_young_deferred: child exit took over 100 ms, exited case not checked\n");
	}

	/* Held, then a recording starts: loaded at once. */
	p3 = young_child(&s3);
	k3 = (uint32_t)p3;
	unwtab_request(u, k3, s3, false);
	unwtab_request(u, k3, 0, true);
	ck_assert_int_eq(unwtab_wait_idle(u, WAIT_NS), 0);
	ck_assert_int_eq(bpf_map_lookup_elem(procs_fd, &k3, e), 0);

	end_child(p1);
	end_child(p3);
	unwtab_free(u);
	close_maps();
	free(e);
}
END_TEST

/* One user's young samples (a fork loop's) fill at most half of the memory
 * young samples may hold: another user's are still held and walked. */
START_TEST(test_young_uid_share)
{
	struct jp_msg_ustack_copy *m = calloc(1, sizeof(*m));
	struct unwtab_stats st;
	struct unwtab *u;
	uint64_t start;
	pid_t p;
	int i, held = 0, r = 0;

	ck_assert_ptr_nonnull(m);
	make_maps(1u << 20);
	ck_assert_int_eq(unwtab_new(rows_fd, procs_fd, 1u << 20, &u), 0);
	unwtab_young_limits(u, 64 * 1024, 60 * 1000000000ull);
	p = spawn_as(65534, "/bin/sleep", "60");
	wait_mapped(p, "sleep");
	ck_assert_int_eq(proc_read_start_boottime(p, &start), 0);
	m->type = JP_MSG_USTACK_COPY;
	m->key.tgid = m->key.tid = (uint32_t)p;
	m->key.start_ns = start;
	m->len = 4096;
	/* Twice what the whole cap holds, all nobody's. */
	for (i = 0; i < 24; i++) {
		r = unwtab_young_add(u, m, NULL, 0, NULL, 0);
		held += r == 0;
	}
	unwtab_get_stats(u, &st);
	ck_assert_int_gt(held, 0);
	ck_assert_uint_ge(st.young_uid_share, 1);
	ck_assert_uint_le(st.young_held_bytes, 32 * 1024);
	ck_assert_uint_eq(st.young_over_memory, 0);
	/* root's (this process's) are still held. */
	ck_assert_int_eq(proc_read_start_boottime(getpid(), &start), 0);
	m->key.tgid = m->key.tid = (uint32_t)getpid();
	m->key.start_ns = start;
	ck_assert_int_eq(unwtab_young_add(u, m, NULL, 0, NULL, 0), 0);
	ck_assert_int_eq(unwtab_young_add(u, m, NULL, 0, NULL, 0), 0);
	end_child(p);
	unwtab_free(u);
	close_maps();
	free(m);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("unwtab");
	TCase *tc = tcase_create("syscalls"), *tm = tcase_create("mapped");
	int fd;

	if (geteuid() != 0) {
		printf("test_unwtab: skipped: BPF maps need root\n");
		return 77;
	}
	fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, "t_probe", 4, 4, 1, NULL);
	if (fd < 0) {
		printf("test_unwtab: skipped: cannot create BPF maps (%s)\n", strerror(-fd));
		return 77;
	}
	close(fd);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_own_process);
	tcase_add_test(tc, test_shared_and_released);
	tcase_add_test(tc, test_build_id_trusted_only);
	tcase_add_test(tc, test_rows_full);
	tcase_add_test(tc, test_reread_backoff);
	tcase_add_test(tc, test_young_deferred);
	tcase_add_test(tc, test_young_uid_share);
	tcase_add_test(tc, test_hostile_build_bounded);
	tcase_add_test(tc, test_share_refused_kept);
	suite_add_tcase(s, tc);
	tcase_set_timeout(tm, 120);
	tcase_add_checked_fixture(tm, use_mapping, NULL);
	tcase_add_test(tm, test_own_process);
	tcase_add_test(tm, test_shared_and_released);
	tcase_add_test(tm, test_rows_full);
	suite_add_tcase(s, tm);
	return jprof_check_run(s);
}
