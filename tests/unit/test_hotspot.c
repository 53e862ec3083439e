/* daemon/hotspot: a HotSpot JVM read from outside. Real JVMs (JDK 17 and
 * 25) run as nobody: their VMStructs, the nmethod of a hot method named
 * through Method* -> Symbol, the blob at a pc. Forged processes (a fake
 * libjvm.so with hostile tables, tests/progs/hs_fakejvm.c) are refused
 * within bounded CPU time. Needs root (process_vm_readv of another user's
 * process). */
#include "check_main.h"
#include "hs.h"
#include "hs_proc.h"

#include <bpf/bpf.h>
#include <linux/types.h>
#include "bpf/sampler.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define JDK25_JAVA "/usr/lib/jvm/temurin-25-jdk-amd64/bin/java"
/* Waits (for a JIT under a loaded machine) are deadlines, not sleeps; one
 * deadline per JVM, so both JVM cases stay inside ctest's 120 s. */
#define WAIT_S 40

static double now_s(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* argv as nobody (setpriv), with env (NULL: ours); its stdout into
 * out_fd if >= 0. */
static pid_t spawn_nobody_out(char *const args[], char *const env[], int out_fd)
{
	posix_spawn_file_actions_t fa;
	char *argv[16] = { "/usr/bin/setpriv", "--reuid=65534", "--regid=65534",
			   "--clear-groups", "--" };
	size_t n = 5;
	pid_t p;

	for (size_t i = 0; args[i] && n < 15; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	posix_spawn_file_actions_init(&fa);
	if (out_fd >= 0)
		posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
	ck_assert_int_eq(posix_spawn(&p, argv[0], &fa, NULL, argv, env ? env : environ), 0);
	posix_spawn_file_actions_destroy(&fa);
	return p;
}

static pid_t spawn_nobody(char *const args[], char *const env[])
{
	return spawn_nobody_out(args, env, -1);
}

static void end_child(pid_t p)
{
	kill(p, SIGKILL);
	waitpid(p, NULL, 0);
}

static bool comm_is(pid_t pid, const char *want)
{
	char path[64], buf[64] = "";
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return false;
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = '\0';
	fclose(f);
	buf[strcspn(buf, "\n")] = '\0';
	return !strcmp(buf, want);
}

struct find {
	struct hs *h;
	const char *want;
	struct hs_blob found;
	bool have;
	unsigned nmethods, blobs;
	uint64_t methods[256];  /* of the first nmethods seen */
};

static int find_cb(const struct hs_blob *b, void *arg)
{
	struct find *f = arg;
	char name[512];

	f->blobs++;
	if (b->kind != HS_BLOB_NMETHOD)
		return 0;
	if (f->nmethods < 256)
		f->methods[f->nmethods] = b->method;
	f->nmethods++;
	if (!f->have && hs_method_name(f->h, b->method, name, sizeof(name)) == 0 &&
	    !strcmp(name, f->want)) {
		f->found = *b;
		f->have = true;
	}
	return 0;
}

/* pid's start (CLOCK_BOOTTIME ns, /proc's 10 ms ticks), as the sampler's
 * messages give it. */
static uint64_t proc_start_ns(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ticks = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_ptr_nonnull(fgets(buf, sizeof(buf), f));
	fclose(f);
	p = strrchr(buf, ')');
	ck_assert_ptr_nonnull(p);
	/* field 22, starttime: the 20th after the comm */
	for (int i = 0; i < 20 && p; i++)
		p = strchr(p + 1, ' ');
	ck_assert_ptr_nonnull(p);
	ticks = strtoull(p + 1, NULL, 10);
	return ticks * 10000000ull;
}

static int hs_map_new(void)
{
	int fd = bpf_map_create(BPF_MAP_TYPE_HASH, "hs_test", 4, sizeof(struct jp_hs_proc),
				JP_HS_MAX_PROCS, NULL);

	ck_assert_msg(fd >= 0, "bpf_map_create: %s", strerror(errno));
	return fd;
}

/* The entry hs_proc.c writes for a JVM (issue 30 step 2): its heaps as
 * hs_code_heaps reads them, the interpreter's range, the offsets; names of
 * a compiled pc and of a Method* as the symbolizer asks; gone at exec. */
static void check_hs_procs(struct hs *h, pid_t pid, const struct hs_blob *spin)
{
	struct hs_heap_info hi[JP_HS_MAX_HEAPS];
	struct hs_procs *hp = NULL;
	struct hs_procs_stats st;
	struct jp_hs_proc v;
	struct sym_result out;
	struct hs_blob ib;
	uint64_t start = proc_start_ns(pid);
	uint32_t key = (uint32_t)pid;
	int fd = hs_map_new(), n;

	ck_assert_int_eq(hs_procs_new(fd, NULL, &hp), 0);
	hs_procs_consider(hp, pid, start + 1234);
	hs_procs_tick(hp);
	hs_procs_get_stats(hp, &st);
	ck_assert_msg(bpf_map_lookup_elem(fd, &key, &v) == 0, "no entry (%llu tries failed)",
		      (unsigned long long)st.open_failed);
	ck_assert_uint_eq(st.jvms, 1);
	ck_assert_uint_eq(v.start_ns, start);
	n = hs_code_heaps(h, hi, JP_HS_MAX_HEAPS);
	ck_assert_int_ge(n, 1);
	ck_assert_uint_eq(v.nheaps, (unsigned)n);
	for (int i = 0; i < n; i++) {
		ck_assert_uint_eq(v.heaps[i].low, hi[i].low);
		ck_assert_uint_eq(v.heaps[i].segmap, hi[i].segmap);
		ck_assert_uint_eq(v.heaps[i].log2, hi[i].log2);
		ck_assert_uint_le(v.heaps[i].high, hi[i].high);  /* it may have grown since */
	}
	ck_assert_int_eq(v.hblock_size, hs_offsets(h)->hblock_size);
	ck_assert_int_eq(v.blob_frame_size, hs_offsets(h)->blob_frame_size);
	ck_assert_int_eq(v.iframe_method, -3);
	ck_assert_int_eq(v.iframe_sender_sp, -1);
	ck_assert_int_eq(hs_blob_at(h, v.interp_lo + (v.interp_hi - v.interp_lo) / 2, &ib), 0);
	ck_assert_int_eq(ib.kind, HS_BLOB_INTERPRETER);
	ck_assert_uint_eq(ib.start, v.interp_lo);

	ck_assert_int_eq(hs_procs_symbolize(hp, pid, start, spin->start + spin->size / 2, false,
					    &out), 0);
	ck_assert_str_eq(out.name, "Hot.spin");
	ck_assert(out.kind == FRAME_JAVA_JIT || out.kind == FRAME_JAVA_C1);
	ck_assert_int_eq(hs_procs_symbolize(hp, pid, start, spin->method, true, &out), 0);
	ck_assert_str_eq(out.name, "Hot.spin");
	ck_assert_int_eq(out.kind, FRAME_JAVA_INTERP);
	ck_assert_int_eq(hs_procs_symbolize(hp, pid, start, ib.start + 64, false,
					    &out), 0);
	ck_assert_str_eq(out.name, "[Interpreter]");
	/* Another process with this pid: nothing named from this JVM. */
	ck_assert_int_eq(hs_procs_symbolize(hp, pid, start + 50000000ull, spin->start + 64,
					    false, &out), -ENOENT);
	/* Not a Method*: refused, not a name made up. */
	ck_assert_int_eq(hs_procs_symbolize(hp, pid, start, spin->start, true, &out), -ENOENT);

	hs_procs_exec(hp, pid);
	ck_assert_int_ne(bpf_map_lookup_elem(fd, &key, &v), 0);
	hs_procs_get_stats(hp, &st);
	ck_assert_uint_eq(st.jvms, 0);
	ck_assert_uint_eq(st.dropped, 1);
	hs_procs_free(hp);
	close(fd);
}

/* java (JDK at java_bin) runs Hot as nobody until Hot.spin is compiled:
 * found by walking the code heap from here, which is the check. */
static void check_jvm(const char *java_bin)
{
	char cp[4096], missing[1024], name[512];
	const char *dir = getenv("JPROF_JAVA_DIR");
	char *args[] = { (char *)java_bin, "-XX:-UsePerfData", "-Xmx64m", "-cp", cp, "Hot", NULL };
	struct hs *h = NULL;
	struct find f = { .want = "Hot.spin" };
	struct hs_blob b, mid;
	double deadline, t0, t1;
	pid_t pid;
	int r = -1;

	ck_assert_ptr_nonnull(dir);
	snprintf(cp, sizeof(cp), "%s", dir);
	pid = spawn_nobody(args, NULL);
	deadline = now_s(CLOCK_MONOTONIC) + WAIT_S;
	while (now_s(CLOCK_MONOTONIC) < deadline) {
		t0 = now_s(CLOCK_MONOTONIC);
		r = hs_open(pid, NULL, &h);
		t1 = now_s(CLOCK_MONOTONIC);
		if (r == 0)
			break;
		usleep(20 * 1000);  /* polling for libjvm.so to be mapped */
	}
	ck_assert_msg(r == 0, "hs_open(%s): %s", java_bin, strerror(-r));
	printf("%s: VM %s: VMStructs loaded in %.2f ms, %llu bytes in %llu reads "
	       "(%u structs, %u types, %u int and %u long constants)\n",
	       java_bin, hs_vm_release(h), (t1 - t0) * 1e3,
	       (unsigned long long)hs_stats(h)->bytes_read,
	       (unsigned long long)hs_stats(h)->reads, hs_stats(h)->struct_entries,
	       hs_stats(h)->type_entries, hs_stats(h)->int_entries, hs_stats(h)->long_entries);
	ck_assert_msg(hs_offsets_missing(h, missing, sizeof(missing)) == 0, "%s lacks %s",
		      java_bin, missing);
	ck_assert_str_ne(hs_vm_release(h), "");

	f.h = h;
	while (!f.have && now_s(CLOCK_MONOTONIC) < deadline) {
		f.nmethods = f.blobs = 0;
		r = hs_blobs_foreach(h, find_cb, &f);
		ck_assert_msg(r == 0, "hs_blobs_foreach: %s", strerror(-r));
		if (!f.have)
			usleep(50 * 1000);  /* polling for the JIT */
	}
	ck_assert_msg(f.have, "no nmethod named Hot.spin in %u nmethods (%u blobs) after %d s",
		      f.nmethods, f.blobs, WAIT_S);
	printf("%s: Hot.spin at %#llx (%u bytes, frame %d words, level %d); %u nmethods, "
	       "%u blobs\n", java_bin, (unsigned long long)f.found.start, f.found.size,
	       f.found.frame_size, f.found.comp_level, f.nmethods, f.blobs);
	ck_assert_int_gt(f.found.frame_size, 0);
	ck_assert_int_ge(f.found.comp_level, 1);

	/* The blob at its start, and at a pc inside it. */
	r = hs_blob_at(h, f.found.start, &b);
	ck_assert_msg(r == 0, "hs_blob_at: %s", strerror(-r));
	ck_assert_uint_eq(b.start, f.found.start);
	ck_assert_int_eq(b.kind, HS_BLOB_NMETHOD);
	ck_assert_uint_eq(b.method, f.found.method);
	ck_assert_int_eq(hs_blob_at(h, f.found.start + f.found.size / 2, &mid), 0);
	ck_assert_uint_eq(mid.start, f.found.start);
	ck_assert_int_eq(hs_method_name(h, mid.method, name, sizeof(name)), 0);
	ck_assert_str_eq(name, "Hot.spin");

	/* The nmethods' names cold (a fresh context: no cache), then cached:
	 * every one named both times. CPU time, for the report. */
	{
		struct hs *h2 = NULL;
		unsigned n = f.nmethods < 256 ? f.nmethods : 256, ok = 0;

		ck_assert_int_eq(hs_open(pid, NULL, &h2), 0);
		t0 = now_s(CLOCK_THREAD_CPUTIME_ID);
		for (unsigned i = 0; i < n; i++)
			ok += hs_method_name(h2, f.methods[i], name, sizeof(name)) == 0;
		t1 = now_s(CLOCK_THREAD_CPUTIME_ID);
		printf("%s: %u of %u nmethods named, %.1f us each (CPU) cold\n", java_bin, ok, n,
		       (t1 - t0) * 1e6 / n);
		t0 = now_s(CLOCK_THREAD_CPUTIME_ID);
		for (unsigned i = 0; i < n; i++)
			hs_method_name(h2, f.methods[i], name, sizeof(name));
		t1 = now_s(CLOCK_THREAD_CPUTIME_ID);
		printf("%s: %.1f us each (CPU) cached (%llu hits)\n", java_bin, (t1 - t0) * 1e6 / n,
		       (unsigned long long)hs_stats(h2)->name_hits);
		/* A few may have been freed between the walk and the names. */
		ck_assert_uint_ge(ok + 2, n);
		hs_free(h2);
	}
	check_hs_procs(h, pid, &f.found);
	hs_free(h);
	end_child(pid);
}

START_TEST(test_jdk17)
{
	check_jvm("/usr/lib/jvm/java-17-openjdk-amd64/bin/java");
}
END_TEST

START_TEST(test_jdk25)
{
	if (access(JDK25_JAVA, X_OK) != 0) {
		printf("test_jdk25: no JDK 25 at %s: not run\n", JDK25_JAVA);
		return;
	}
	check_jvm(JDK25_JAVA);
}
END_TEST

static bool wait_comm(pid_t pid, const char *want)
{
	double deadline = now_s(CLOCK_MONOTONIC) + WAIT_S;

	while (!comm_is(pid, want) && now_s(CLOCK_MONOTONIC) < deadline)
		usleep(10 * 1000);
	return comm_is(pid, want);
}

/* hs_forged with the fake libjvm.so in mode mode, ready; *method (may be
 * NULL): the fake's Method*. */
static pid_t start_forged(const char *mode, uint64_t *method)
{
	char lib[4096], prog[4096], env[64], line[64] = "";
	const char *dir = getenv("JPROF_PROGS_DIR");
	char *args[] = { prog, lib, NULL }, *envp[] = { env, NULL };
	int fds[2];
	FILE *f;
	pid_t pid;

	ck_assert_ptr_nonnull(dir);
	snprintf(prog, sizeof(prog), "%s/hs_forged", dir);
	snprintf(lib, sizeof(lib), "%s/fakejvm/libjvm.so", dir);
	snprintf(env, sizeof(env), "HS_FORGE=%s", mode);
	ck_assert_int_eq(pipe2(fds, O_CLOEXEC), 0);
	pid = spawn_nobody_out(args, envp, fds[1]);
	close(fds[1]);
	f = fdopen(fds[0], "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_msg(fgets(line, sizeof(line), f), "hs_forged %s said nothing", mode);
	fclose(f);
	if (method)
		*method = strtoull(line, NULL, 16);
	ck_assert_msg(wait_comm(pid, "hs-forged-ready"), "hs_forged %s never got ready", mode);
	return pid;
}

/* A forged process that opens (the well-formed control) but has no
 * interpreter gets no entry in the walk's map: it is counted, not walked. */
static void check_forged_no_entry(pid_t pid)
{
	struct hs_procs *hp = NULL;
	struct hs_procs_stats st;
	struct jp_hs_proc v;
	uint32_t key = (uint32_t)pid;
	int fd = hs_map_new();

	ck_assert_int_eq(hs_procs_new(fd, NULL, &hp), 0);
	hs_procs_consider(hp, pid, proc_start_ns(pid));
	hs_procs_tick(hp);
	hs_procs_get_stats(hp, &st);
	ck_assert_int_ne(bpf_map_lookup_elem(fd, &key, &v), 0);
	ck_assert_uint_eq(st.jvms, 0);
	ck_assert_uint_eq(st.open_failed, 1);
	hs_procs_free(hp);
	close(fd);
}

/* Every forgery is refused, in well under a second of CPU; the well-formed
 * control is accepted (so a refusal is the forgery's, not the setup's). */
START_TEST(test_forged)
{
	static const char *const modes[] = { "valid", "stride0", "stride_huge", "offset_huge",
					     "no_terminator", "table_unmapped", "name_unmapped",
					     "name_self", "string_100m" };

	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		pid_t pid = start_forged(modes[i], NULL);
		struct hs *h = NULL;
		double c0, c1;
		int r;

		c0 = now_s(CLOCK_PROCESS_CPUTIME_ID);
		r = hs_open(pid, NULL, &h);
		c1 = now_s(CLOCK_PROCESS_CPUTIME_ID);
		printf("forged %-15s: %-26s %.2f ms CPU\n", modes[i], r ? strerror(-r) : "accepted",
		       (c1 - c0) * 1e3);
		if (i == 0) {
			ck_assert_msg(r == 0, "the valid control: %s", strerror(-r));
			ck_assert_uint_eq(hs_stats(h)->struct_entries, 21);
			check_forged_no_entry(pid);
		} else {
			ck_assert_msg(r < 0, "forgery %s accepted", modes[i]);
		}
		ck_assert_msg(c1 - c0 < 1.0, "forgery %s cost %.2f s of CPU", modes[i], c1 - c0);
		hs_free(h);
		end_child(pid);
	}
}
END_TEST

struct collect {
	unsigned n;
	struct hs_blob first;
};

static int collect_cb(const struct hs_blob *b, void *arg)
{
	struct collect *c = arg;

	if (!c->n++)
		c->first = *b;
	return 0;
}

/* A forged code heap: the well-formed one (one stub) is walked and found
 * at a pc; a map that hops one segment at a time across 16 Mi segments, a
 * heap list of 2^30 heaps and a block longer than its heap cost bounded
 * CPU and find nothing. */
START_TEST(test_forged_heap)
{
	static const char *const modes[] = { "valid", "heap_hops", "heap_many",
					     "heap_block_huge" };

	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		pid_t pid = start_forged(modes[i], NULL);
		struct hs *h = NULL;
		struct collect c = { 0 };
		struct hs_blob b;
		uint64_t low[8], high[8];
		int nh, walk, at = -ENOENT;
		double c0, c1;

		ck_assert_int_eq(hs_open(pid, NULL, &h), 0);
		c0 = now_s(CLOCK_PROCESS_CPUTIME_ID);
		nh = hs_code_bounds(h, low, high, 8);
		walk = hs_blobs_foreach(h, collect_cb, &c);
		/* Each heap's last byte (a walk back across the whole map) and a
		 * pc in its first block: the first answer that is not
		 * "nothing there" is kept. */
		for (int k = 0; k < nh && k < 8 && at == -ENOENT; k++) {
			at = hs_blob_at(h, high[k] - 1, &b);
			if (at == -ENOENT)
				at = hs_blob_at(h, low[k] + 100, &b);
		}
		c1 = now_s(CLOCK_PROCESS_CPUTIME_ID);
		printf("forged %-15s: %d heaps, walk %s (%u blobs), blob_at %s, %.2f ms CPU\n",
		       modes[i], nh, walk < 0 ? strerror(-walk) : "ok", c.n,
		       at < 0 ? strerror(-at) : "found", (c1 - c0) * 1e3);
		if (i == 0) {
			ck_assert_int_eq(nh, 1);
			ck_assert_int_eq(walk, 0);
			ck_assert_uint_eq(c.n, 1);
			ck_assert_str_eq(c.first.name, "FakeStub");
			ck_assert_int_eq(c.first.kind, HS_BLOB_STUB);
			ck_assert_int_eq(c.first.frame_size, 2);
			ck_assert_int_eq(at, 0);
			ck_assert_uint_eq(b.start, c.first.start);
		} else {
			ck_assert_uint_eq(c.n, 0);
			ck_assert_int_lt(at, 0);
		}
		/* The hop walk is refused by its length, not by where it ends. */
		if (!strcmp(modes[i], "heap_hops"))
			ck_assert_int_eq(at, -EBADMSG);
		ck_assert_msg(c1 - c0 < 1.0, "forged heap %s cost %.2f s of CPU", modes[i], c1 - c0);
		hs_free(h);
		end_child(pid);
	}
}
END_TEST

/* A cached name is not trusted: the fake's Method keeps its address while
 * what it names changes, as a freed Method's reused memory would (first the
 * class Symbol's bytes at the same address, then the pool slot). */
START_TEST(test_name_reuse)
{
	struct hs *h = NULL;
	uint64_t method = 0;
	pid_t pid = start_forged("valid", &method);
	char name[128];

	ck_assert_uint_ne(method, 0);
	ck_assert_int_eq(hs_open(pid, NULL, &h), 0);
	ck_assert_int_eq(hs_method_name(h, method, name, sizeof(name)), 0);
	ck_assert_str_eq(name, "pkg.Foo.bar");
	ck_assert_int_eq(hs_method_name(h, method, name, sizeof(name)), 0);
	ck_assert_str_eq(name, "pkg.Foo.bar");
	ck_assert_uint_eq(hs_stats(h)->name_hits, 1);

	kill(pid, SIGUSR1);
	ck_assert(wait_comm(pid, "hs-forged-gen1"));
	ck_assert_int_eq(hs_method_name(h, method, name, sizeof(name)), 0);
	ck_assert_str_eq(name, "pkg.Qux.bar");
	ck_assert_uint_eq(hs_stats(h)->name_stale, 1);

	kill(pid, SIGUSR1);
	ck_assert(wait_comm(pid, "hs-forged-gen2"));
	ck_assert_int_eq(hs_method_name(h, method, name, sizeof(name)), 0);
	ck_assert_str_eq(name, "pkg.Qux.baz");
	ck_assert_uint_eq(hs_stats(h)->name_stale, 2);
	ck_assert_int_eq(hs_method_name(h, method, name, sizeof(name)), 0);
	ck_assert_str_eq(name, "pkg.Qux.baz");
	ck_assert_uint_eq(hs_stats(h)->name_hits, 2);
	hs_free(h);
	end_child(pid);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("hotspot");
	TCase *tj = tcase_create("jvm"), *tf = tcase_create("forged");

	if (geteuid() != 0) {
		printf("test_hotspot: skipped: reading another user's JVM needs root\n");
		return 77;
	}
	tcase_set_timeout(tj, 200);
	tcase_add_test(tj, test_jdk17);
	tcase_add_test(tj, test_jdk25);
	suite_add_tcase(s, tj);
	tcase_set_timeout(tf, 100);
	tcase_add_test(tf, test_forged);
	tcase_add_test(tf, test_name_reuse);
	tcase_add_test(tf, test_forged_heap);
	suite_add_tcase(s, tf);
	return jprof_check_run(s);
}
