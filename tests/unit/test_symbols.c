#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bigsym_fixture.h"
#include "elfsym.h"
#include "proc.h"
#include "procmaps.h"
#include "symbols.h"

#define NO_DEBUG_ROOT "/nonexistent-jprof-debug"

/* A running fixture and the addresses it printed. */
struct fixture {
	pid_t pid;
	int in_fd;    /* its stdin */
	int out_fd;   /* its stdout */
	char buf[4096];
	size_t len;
	uint64_t alpha, beta, local, data, fnmatch, getpid, dso;
};

static struct fixture fx = { .pid = -1, .in_fd = -1, .out_fd = -1 };
static struct symbols *syms;

static const char *prog(const char *name)
{
	static char path[PATH_MAX];
	const char *dir = getenv("JPROF_PROGS_DIR");

	ck_assert_msg(dir != NULL, "JPROF_PROGS_DIR not set");
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return path;
}

/* Reads fixture output until a line starting with until, with a timeout. */
static void fixture_read(const char *until)
{
	for (;;) {
		char *nl;
		struct pollfd p = { .fd = fx.out_fd, .events = POLLIN };
		ssize_t n;

		while ((nl = memchr(fx.buf, '\n', fx.len)) != NULL) {
			char name[32];
			unsigned long long v = 0;
			size_t line_len = (size_t)(nl - fx.buf) + 1;
			bool done;

			*nl = '\0';
			done = strncmp(fx.buf, until, strlen(until)) == 0;
			if (sscanf(fx.buf, "%31s %llx", name, &v) == 2) {
				uint64_t *slot = !strcmp(name, "alpha") ? &fx.alpha :
						 !strcmp(name, "beta") ? &fx.beta :
						 !strcmp(name, "local") ? &fx.local :
						 !strcmp(name, "data") ? &fx.data :
						 !strcmp(name, "fnmatch") ? &fx.fnmatch :
						 !strcmp(name, "getpid") ? &fx.getpid :
						 !strcmp(name, "dso") ? &fx.dso : NULL;
				if (slot)
					*slot = v;
			}
			memmove(fx.buf, fx.buf + line_len, fx.len - line_len);
			fx.len -= line_len;
			if (done)
				return;
		}
		ck_assert_msg(poll(&p, 1, 10000) == 1, "fixture silent");
		n = read(fx.out_fd, fx.buf + fx.len, sizeof(fx.buf) - fx.len);
		ck_assert_msg(n > 0, "fixture exited");
		fx.len += (size_t)n;
	}
}

static void fixture_start(const char *path, const char *arg)
{
	int in[2], out[2];

	ck_assert_int_eq(pipe2(in, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
	fx.pid = fork();
	ck_assert_int_ge(fx.pid, 0);
	if (fx.pid == 0) {
		/* Dies with the test process even if an assertion ends it
		 * before the teardown runs. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(in[0], 0);
		dup2(out[1], 1);
		execl(path, path, arg, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	fx.in_fd = in[1];
	fx.out_fd = out[0];
	fixture_read("ready");
	ck_assert_uint_ne(fx.alpha, 0);
}

static void setup(void)
{
	syms = symbols_new(NULL, NULL);
	ck_assert_ptr_nonnull(syms);
	ck_assert_int_eq(symbols_set_debug_root(syms, NO_DEBUG_ROOT), 0);
}

static void teardown(void)
{
	if (fx.pid > 0) {
		kill(fx.pid, SIGKILL);
		waitpid(fx.pid, NULL, 0);
	}
	if (fx.in_fd >= 0)
		close(fx.in_fd);
	if (fx.out_fd >= 0)
		close(fx.out_fd);
	memset(&fx, 0, sizeof(fx));
	fx.pid = fx.in_fd = fx.out_fd = -1;
	symbols_free(syms);
	syms = NULL;
}

static void assert_resolves(pid_t pid, uint64_t addr, bool ret, const char *name,
			    const char *module)
{
	struct sym_result r;

	ck_assert_int_eq(symbols_resolve_user(syms, pid, 0, addr, ret, &r), 0);
	ck_assert_msg(strcmp(r.name, name) == 0, "0x%" PRIx64 ": got '%s', want '%s'", addr,
		      r.name, name);
	ck_assert_str_eq(r.module, module);
	ck_assert_int_eq(r.kind, FRAME_NATIVE);
}

static uint64_t file_symbol(const char *file, const char *name)
{
	struct elfsym *e = NULL;
	uint64_t v = 0, sz;

	ck_assert_int_eq(elfsym_open(prog(file), NO_DEBUG_ROOT, &e), 0);
	ck_assert_int_eq(elfsym_find(e, name, &v, &sz), 0);
	elfsym_free(e);
	return v;
}

static void check_main_fixture(const char *file)
{
	struct symbols_stats st1, st2;

	fixture_start(prog(file), NULL);
	assert_resolves(fx.pid, fx.alpha, false, "jp_fixture_alpha", file);
	/* A return address just past the function's last byte still names
	 * the caller: addr - 1 is looked up. */
	assert_resolves(fx.pid, fx.alpha + 1, true, "jp_fixture_alpha", file);
	assert_resolves(fx.pid, fx.beta + 4, true, "jp_fixture_beta", file);
	assert_resolves(fx.pid, fx.local, false, "jp_fixture_local", file);
	assert_resolves(fx.pid, fx.fnmatch, false, "fnmatch", "libc.so.6");
	/* getpid and __getpid share an address: the global one is named. */
	assert_resolves(fx.pid, fx.getpid, false, "__getpid", "libc.so.6");

	symbols_get_stats(syms, &st1);
	ck_assert_uint_eq(st1.maps_reads, 1);
	ck_assert_uint_eq(st1.cached_pids, 1);
	ck_assert_uint_ge(st1.cached_elfs, 2);
	ck_assert_uint_eq(st1.elf_errors, 0);
	for (int i = 0; i < 1000; i++)
		assert_resolves(fx.pid, fx.beta, false, "jp_fixture_beta", file);
	/* Repeated lookups use the caches: no new parse, no maps re-read. */
	symbols_get_stats(syms, &st2);
	ck_assert_uint_eq(st2.maps_reads, st1.maps_reads);
	ck_assert_uint_eq(st2.elf_cache_misses, st1.elf_cache_misses);
}

START_TEST(test_pie)
{
	check_main_fixture("symfix_pie");
}
END_TEST

START_TEST(test_nopie)
{
	check_main_fixture("symfix_nopie");
	ck_assert_uint_lt(fx.alpha, 0x1000000);  /* really loaded at its link address */
}
END_TEST

START_TEST(test_unknown_and_jit)
{
	struct sym_result r;
	void *jit;

	fixture_start(prog("symfix_pie"), NULL);
	ck_assert_int_eq(symbols_resolve_user(syms, fx.pid, 0, 0x10, false, &r), 0);
	ck_assert_str_eq(r.name, "[unknown]");
	ck_assert_int_eq(r.kind, FRAME_MARKER);
	/* Data is mapped, but not executable: not a code address. */
	ck_assert_int_eq(symbols_resolve_user(syms, fx.pid, 0, fx.data, false, &r), 0);
	ck_assert_str_eq(r.name, "[unknown]");

	/* Anonymous executable memory is JIT code (our own process). */
	jit = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ck_assert_ptr_ne(jit, MAP_FAILED);
	ck_assert_int_eq(symbols_resolve_user(syms, getpid(), 0, (uintptr_t)jit + 8, true, &r), 0);
	ck_assert_str_eq(r.name, "[jit]");
	ck_assert_str_eq(r.module, "");
	ck_assert_int_eq(r.kind, FRAME_JIT_UNKNOWN);
	munmap(jit, 4096);

	ck_assert_int_eq(symbols_resolve_user(syms, 0, 0, 0x1000, false, &r), -EINVAL);
	ck_assert_int_eq(symbols_resolve_user(NULL, 1, 0, 0x1000, false, &r), -EINVAL);
	ck_assert_int_eq(symbols_resolve_user(syms, 1, 0, 0x1000, false, NULL), -EINVAL);
}
END_TEST

START_TEST(test_stripped)
{
	struct sym_result r;
	char want[64];
	uint64_t local_vaddr = file_symbol("symfix_rdyn", "jp_fixture_local");

	fixture_start(prog("symfix_stripped"), NULL);
	assert_resolves(fx.pid, fx.alpha, false, "jp_fixture_alpha", "symfix_stripped");
	/* The static function is gone with .symtab: module+ELF vaddr, the
	 * form addr2line takes, never the neighbouring exported function. */
	ck_assert_int_eq(symbols_resolve_user(syms, fx.pid, 0, fx.local, false, &r), 0);
	snprintf(want, sizeof(want), "symfix_stripped+0x%" PRIx64, local_vaddr);
	ck_assert_str_eq(r.name, want);
	ck_assert_str_eq(r.module, "symfix_stripped");
	ck_assert_int_eq(r.kind, FRAME_NATIVE);
	/* Every address in it has that one name (its start, from
	 * .eh_frame_hdr), not one name per address. */
	for (uint64_t off = 1; off < 12; off++) {
		ck_assert_int_eq(symbols_resolve_user(syms, fx.pid, 0, fx.local + off, true, &r), 0);
		ck_assert_str_eq(r.name, want);
	}
	/* pprof still gets the sampled address (the looked-up one) and the
	 * file as mapped, marked unsymbolized. */
	ck_assert(r.has_loc);
	ck_assert_uint_eq(r.loc.addr, fx.local + 10);
	ck_assert(!r.loc.symbolized);
	ck_assert_str_eq(r.loc.path, prog("symfix_stripped"));
	ck_assert_uint_ge(r.loc.addr, r.loc.map_start);
	ck_assert_uint_lt(r.loc.addr, r.loc.map_limit);
	ck_assert_uint_eq(strlen(r.loc.build_id), 40);
	ck_assert_int_eq(symbols_resolve_user(syms, fx.pid, 0, fx.alpha, false, &r), 0);
	ck_assert(r.has_loc && r.loc.symbolized);
}
END_TEST

START_TEST(test_deleted_binary)
{
	char dir[] = "/tmp/jprof-symbols-XXXXXX", path[PATH_MAX];
	char buf[65536];
	ssize_t n;
	int in, out;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/symfix_gone", dir);
	in = open(prog("symfix_pie"), O_RDONLY | O_CLOEXEC);
	out = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0755);
	ck_assert_int_ge(in, 0);
	ck_assert_int_ge(out, 0);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		ck_assert_int_eq(write(out, buf, (size_t)n), n);
	close(in);
	close(out);

	fixture_start(path, NULL);
	ck_assert_int_eq(unlink(path), 0);
	ck_assert_int_eq(rmdir(dir), 0);
	/* Only /proc/PID/map_files can still open it. */
	assert_resolves(fx.pid, fx.alpha, false, "jp_fixture_alpha", "symfix_gone");
	assert_resolves(fx.pid, fx.local + 2, true, "jp_fixture_local", "symfix_gone");
}
END_TEST

/* A copy of symfix_pie at dir/name made by objcopy with args (e.g. symbols
 * renamed, the build-id note removed), owned by uid:uid. */
static void hostile_copy(const char *dir, const char *name, const char *args, uid_t uid,
			 char *out, size_t len)
{
	char cmd[PATH_MAX * 3];

	snprintf(out, len, "%s/%s", dir, name);
	snprintf(cmd, sizeof(cmd), "objcopy %s '%s' '%s'", args, prog("symfix_pie"), out);
	ck_assert_int_eq(system(cmd), 0);
	ck_assert_int_eq(chown(out, uid, uid), 0);
	ck_assert_int_eq(chmod(out, 0755), 0);
}

static void fixture_stop(void)
{
	kill(fx.pid, SIGKILL);
	waitpid(fx.pid, NULL, 0);
	close(fx.in_fd);
	close(fx.out_fd);
	memset(&fx, 0, sizeof(fx));
	fx.pid = fx.in_fd = fx.out_fd = -1;
}

#define POISON "--redefine-sym jp_fixture_alpha=jp_poisoned_alpha"

/* A binary without a build-id gets its own names, not those of whatever
 * was loaded last (the lookup once left its cursor at the list head). */
START_TEST(test_no_build_id_own_names)
{
	char dir[] = "/tmp/jprof-symbols-XXXXXX", other[PATH_MAX], nobid[PATH_MAX];

	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_eq(chmod(dir, 0755), 0);
	hostile_copy(dir, "other", POISON, 65534, other, sizeof(other));
	hostile_copy(dir, "nobid", "--remove-section .note.gnu.build-id", 0, nobid, sizeof(nobid));
	fixture_start(other, NULL);
	assert_resolves(fx.pid, fx.alpha, false, "jp_poisoned_alpha", "other");
	fixture_stop();
	fixture_start(nobid, NULL);
	assert_resolves(fx.pid, fx.alpha, false, "jp_fixture_alpha", "nobid");
	assert_resolves(fx.pid, fx.local, false, "jp_fixture_local", "nobid");
	unlink(other);
	unlink(nobid);
	rmdir(dir);
}
END_TEST

/* A user's file that claims the build-id of root's binary names neither
 * root's process nor is named by root's table: build-ids are shared only
 * between files no user could write. Both orders. */
START_TEST(test_claimed_build_id_not_shared)
{
	char dir[] = "/tmp/jprof-symbols-XXXXXX", fake[PATH_MAX], real[PATH_MAX];
	struct stat st;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_eq(chmod(dir, 0755), 0);
	hostile_copy(dir, "fake", POISON, 65534, fake, sizeof(fake));
	hostile_copy(dir, "real", "", 0, real, sizeof(real));
	ck_assert_int_eq(stat(real, &st), 0);
	ck_assert_int_eq(st.st_uid, 0);
	/* The user's file first: root's binary with the same build-id after. */
	fixture_start(fake, NULL);
	assert_resolves(fx.pid, fx.alpha, false, "jp_poisoned_alpha", "fake");
	fixture_stop();
	fixture_start(real, NULL);
	assert_resolves(fx.pid, fx.alpha, false, "jp_fixture_alpha", "real");
	fixture_stop();
	/* And the other way: the user's process keeps its own file's names. */
	fixture_start(fake, NULL);
	assert_resolves(fx.pid, fx.alpha, false, "jp_poisoned_alpha", "fake");
	unlink(fake);
	unlink(real);
	rmdir(dir);
}
END_TEST

/* A /proc of our own making for pid 4242 whose map_files cannot be opened,
 * so that symbols falls back to the mapping's path inside PID/root, which
 * the process's owner controls: one executable mapping of /bin/target at
 * 0x400000 with the device and inode given. */
#define FAKE_PID 4242
#define FAKE_BASE 0x400000ull

static void fake_proc(const char *top, const struct stat *as, uid_t owner)
{
	char path[PATH_MAX];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%d/root/bin", top, FAKE_PID);
	{
		char cmd[PATH_MAX + 16];

		snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", path);
		ck_assert_int_eq(system(cmd), 0);
	}
	snprintf(path, sizeof(path), "%s/%d", top, FAKE_PID);
	ck_assert_int_eq(chown(path, owner, owner), 0);
	snprintf(path, sizeof(path), "%s/%d/maps", top, FAKE_PID);
	f = fopen(path, "we");
	ck_assert_ptr_nonnull(f);
	fprintf(f, "%llx-%llx r-xp 00000000 %02x:%02x %llu /bin/target\n", FAKE_BASE,
		FAKE_BASE + (1ull << 20), major(as->st_dev), minor(as->st_dev),
		(unsigned long long)as->st_ino);
	fclose(f);
}

/* What symbols names jp_fixture_alpha of the fake process as. */
static void fake_resolve(const char *top, struct sym_result *r)
{
	struct symbols *s = symbols_new(NULL, top);

	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(symbols_set_debug_root(s, NO_DEBUG_ROOT), 0);
	ck_assert_int_eq(symbols_resolve_user(s, FAKE_PID, 0,
					      FAKE_BASE + file_symbol("symfix_pie", "jp_fixture_alpha"),
					      false, r), 0);
	symbols_free(s);
}

static void copy_prog(const char *dst, uid_t uid, mode_t mode)
{
	char cmd[PATH_MAX * 3];

	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", prog("symfix_pie"), dst);
	ck_assert_int_eq(system(cmd), 0);
	ck_assert_int_eq(chown(dst, uid, uid), 0);
	ck_assert_int_eq(chmod(dst, mode), 0);
}

/* The /proc/PID/root fallback opens only what the process's owner put
 * there and could read: the file itself when it is the one mapped; not a
 * symlink to root's 0700 binary, not a FIFO, not a file of the wrong
 * inode, not a file its owner could not read. */
START_TEST(test_root_fallback_not_redirected)
{
	char top[] = "/tmp/jprof-fakeproc-XXXXXX", target[PATH_MAX], secret[PATH_MAX];
	char cmd[PATH_MAX + 16];
	struct sym_result r;
	struct stat st;

	ck_assert_ptr_nonnull(mkdtemp(top));
	snprintf(target, sizeof(target), "%s/%d/root/bin/target", top, FAKE_PID);
	snprintf(secret, sizeof(secret), "%s/secret", top);

	/* The file itself, the process's own, readable: named. */
	fake_proc(top, &(struct stat){ 0 }, 65534);
	copy_prog(target, 65534, 0755);
	ck_assert_int_eq(stat(target, &st), 0);
	fake_proc(top, &st, 65534);
	fake_resolve(top, &r);
	ck_assert_str_eq(r.name, "jp_fixture_alpha");

	/* A symlink to root's 0700 copy, the maps line naming that copy. */
	copy_prog(secret, 0, 0700);
	ck_assert_int_eq(stat(secret, &st), 0);
	ck_assert_int_eq(unlink(target), 0);
	ck_assert_int_eq(symlink(secret, target), 0);
	fake_proc(top, &st, 65534);
	fake_resolve(top, &r);
	ck_assert_str_ne(r.name, "jp_fixture_alpha");

	/* A FIFO: not waited on, not read. */
	ck_assert_int_eq(unlink(target), 0);
	ck_assert_int_eq(mkfifo(target, 0644), 0);
	ck_assert_int_eq(stat(target, &st), 0);
	fake_proc(top, &st, 65534);
	fake_resolve(top, &r);
	ck_assert_str_ne(r.name, "jp_fixture_alpha");

	/* A readable file, but not the inode the mapping shows. */
	ck_assert_int_eq(unlink(target), 0);
	copy_prog(target, 65534, 0755);
	ck_assert_int_eq(stat(secret, &st), 0);
	fake_proc(top, &st, 65534);
	fake_resolve(top, &r);
	ck_assert_str_ne(r.name, "jp_fixture_alpha");

	/* The mapped file, but root's and 0700: its owner could not read it. */
	ck_assert_int_eq(chown(target, 0, 0), 0);
	ck_assert_int_eq(chmod(target, 0700), 0);
	ck_assert_int_eq(stat(target, &st), 0);
	fake_proc(top, &st, 65534);
	fake_resolve(top, &r);
	ck_assert_str_ne(r.name, "jp_fixture_alpha");
	/* ... which root's own process may. */
	fake_proc(top, &st, 0);
	fake_resolve(top, &r);
	ck_assert_str_eq(r.name, "jp_fixture_alpha");

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", top);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(test_dlopen)
{
	struct sym_result r;
	char lib[PATH_MAX];
	struct timespec pause_ts = { 1, 100000000 };

	snprintf(lib, sizeof(lib), "%s", prog("libsymfix_dso.so"));
	fixture_start(prog("symfix_pie"), lib);
	assert_resolves(fx.pid, fx.alpha, false, "jp_fixture_alpha", "symfix_pie");
	ck_assert_int_eq(write(fx.in_fd, "go\n", 3), 3);
	fixture_read("dso");
	ck_assert_uint_ne(fx.dso, 0);
	/* The library appeared after the maps were cached; once the re-read
	 * rate limit has passed, a miss must re-read them. */
	nanosleep(&pause_ts, NULL);
	assert_resolves(fx.pid, fx.dso, false, "jp_fixture_dso_fn", "libsymfix_dso.so");
	ck_assert_int_eq(symbols_resolve_user(syms, fx.pid, 0, fx.alpha, false, &r), 0);
	ck_assert_str_eq(r.name, "jp_fixture_alpha");
}
END_TEST

START_TEST(test_debug_root_and_shared_cache)
{
	char root[] = "/tmp/jprof-symbols-XXXXXX", dir[PATH_MAX * 2], link[PATH_MAX * 3];
	char target[PATH_MAX], cmd[PATH_MAX * 4];
	struct symbols_stats st;
	pid_t first;

	ck_assert_ptr_nonnull(mkdtemp(root));
	snprintf(dir, sizeof(dir), "%s%s", root, getenv("JPROF_PROGS_DIR"));
	snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", dir);
	ck_assert_int_eq(system(cmd), 0);
	snprintf(target, sizeof(target), "%s", prog("symfix.debug"));
	snprintf(link, sizeof(link), "%s/symfix.debug", dir);
	ck_assert_int_eq(symlink(target, link), 0);
	ck_assert_int_eq(symbols_set_debug_root(syms, root), 0);

	fixture_start(prog("symfix_dbglink"), NULL);
	assert_resolves(fx.pid, fx.local, false, "jp_fixture_local", "symfix_dbglink");
	first = fx.pid;

	/* symfix_pie has the same build-id: its table is shared, not
	 * parsed into a second copy. */
	fx.pid = -1;
	close(fx.in_fd);
	close(fx.out_fd);
	fixture_start(prog("symfix_pie"), NULL);
	assert_resolves(fx.pid, fx.alpha, false, "jp_fixture_alpha", "symfix_pie");
	kill(first, SIGKILL);
	waitpid(first, NULL, 0);

	symbols_get_stats(syms, &st);
	ck_assert_uint_eq(st.cached_pids, 2);
	symbols_forget_pid(syms, first);
	symbols_get_stats(syms, &st);
	ck_assert_uint_eq(st.cached_pids, 1);
	{
		size_t elfs = st.cached_elfs;

		/* Still referenced by the live pid: nothing is dropped. */
		symbols_expire(syms, 3600);
		symbols_get_stats(syms, &st);
		ck_assert_uint_eq(st.cached_elfs, elfs);
		ck_assert_uint_eq(st.cached_pids, 1);
	}
	symbols_expire(syms, 0);
	symbols_get_stats(syms, &st);
	ck_assert_uint_eq(st.cached_pids, 0);
	ck_assert_uint_eq(st.cached_elfs, 0);

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(test_vdso_and_self)
{
	unsigned long base = getauxval(AT_SYSINFO_EHDR);
	struct elfsym *vdso = NULL;
	struct procmaps *maps;
	const struct procmaps_entry *e;
	uint64_t v, sz;

	assert_resolves(getpid(), (uintptr_t)&symbols_resolve_user, false, "symbols_resolve_user",
			"test_symbols");
	if (!base)
		return;  /* no vdso on this system: nothing to check */
	/* The vdso's first PT_LOAD has offset 0 and vaddr 0, so an address is
	 * base + symbol value. */
	maps = NULL;
	ck_assert_int_eq(procmaps_read("/proc/self/maps", &maps), 0);
	e = procmaps_find(maps, base);
	ck_assert_ptr_nonnull(e);
	ck_assert_str_eq(e->path, "[vdso]");
	ck_assert_int_eq(elfsym_open_memory((const void *)base, e->end - e->start, &vdso), 0);
	procmaps_free(maps);
	ck_assert_int_eq(elfsym_find(vdso, "__vdso_clock_gettime", &v, &sz), 0);
	elfsym_free(vdso);
	assert_resolves(getpid(), base + v + 1, true, "__vdso_clock_gettime", "[vdso]");
}
END_TEST

/* A sample of a process that has exited and whose pid another process has
 * now is never named from the new process's binaries. */
START_TEST(test_other_process_with_the_pid)
{
	uint64_t me, tick = 1000000000ull / (uint64_t)sysconf(_SC_CLK_TCK);
	uint64_t addr = (uintptr_t)&symbols_resolve_user;
	struct sym_result r;

	ck_assert_int_eq(proc_read_start_boottime(getpid(), &me), 0);
	for (int round = 0; round < 2; round++) {
		/* Ours (cached after the first round), then an earlier process
		 * with our pid, a later one, and ours again. */
		ck_assert_int_eq(symbols_resolve_user(syms, getpid(), me, addr, false, &r), 0);
		ck_assert_str_eq(r.name, "symbols_resolve_user");
		ck_assert_int_eq(symbols_resolve_user(syms, getpid(), me - tick, addr, false, &r), 0);
		ck_assert_str_eq(r.name, "[unknown]");
		ck_assert_int_eq(r.kind, FRAME_MARKER);
		ck_assert_int_eq(symbols_resolve_user(syms, getpid(), me + tick, addr, false, &r), 0);
		ck_assert_str_eq(r.name, "[unknown]");
		ck_assert_int_eq(symbols_resolve_user(syms, getpid(), me, addr, false, &r), 0);
		ck_assert_str_eq(r.name, "symbols_resolve_user");
	}
}
END_TEST

/* A process whose maps were read before it exec'd (a launcher such as
 * setpriv, primed by its first samples) is named from the new image once
 * the exec is noted, not from the maps of the one it left. */
START_TEST(test_exec_rereads_maps)
{
	int in[2], out[2];
	uint64_t start;
	struct symbols_stats st1, st2;
	char go = 'x';

	ck_assert_int_eq(pipe2(in, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
	fx.pid = fork();
	ck_assert_int_ge(fx.pid, 0);
	if (fx.pid == 0) {
		char c;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(in[0], 0);
		dup2(out[1], 1);
		if (read(0, &c, 1) != 1)
			_exit(126);
		execl(prog("symfix_nopie"), prog("symfix_nopie"), (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	fx.in_fd = in[1];
	fx.out_fd = out[0];
	ck_assert_int_eq(proc_read_start_boottime(fx.pid, &start), 0);
	/* The maps of the image before the exec (this test's). */
	symbols_prime(syms, fx.pid, start);
	symbols_get_stats(syms, &st1);
	ck_assert_uint_eq(st1.maps_reads, 1);
	ck_assert_int_eq(write(fx.in_fd, &go, 1), 1);
	fixture_read("ready");
	ck_assert_uint_lt(fx.alpha, 0x1000000);
	symbols_note_exec(syms, fx.pid);
	assert_resolves(fx.pid, fx.alpha, false, "jp_fixture_alpha", "symfix_nopie");
	assert_resolves(fx.pid, fx.fnmatch, false, "fnmatch", "libc.so.6");
	symbols_get_stats(syms, &st2);
	ck_assert_uint_eq(st2.maps_reads, 2);
	/* Noted once: read once. */
	assert_resolves(fx.pid, fx.beta + 4, true, "jp_fixture_beta", "symfix_nopie");
	symbols_get_stats(syms, &st2);
	ck_assert_uint_eq(st2.maps_reads, 2);
}
END_TEST

/* ---- symbol table budget (symbols_set_max_memory) ---- */

#define BUDGET (4u << 20)  /* the smallest symbols_max_memory: 1 MiB per uid */

static char budget_dir[64];

/* A file of nsyms symbols whose names are suffixes of one name_len-byte
 * string of c: its table needs about nsyms * 16 + name_len bytes. */
static void budget_file(const char *name, size_t nsyms, size_t name_len, char c, char *path,
			size_t size)
{
	struct bigsym_spec sp = { .nsyms = nsyms, .text_size = nsyms * 16,
				  .name_of = bigsym_name_suffix, .bind = STB_GLOBAL };
	char *strtab = bigsym_one_name(name_len, c, &sp.strtab_len);

	if (!budget_dir[0]) {
		snprintf(budget_dir, sizeof(budget_dir), "/tmp/jprof-symbudget.XXXXXX");
		ck_assert_ptr_nonnull(mkdtemp(budget_dir));
		ck_assert_int_eq(chmod(budget_dir, 0755), 0);
	}
	sp.strtab = strtab;
	snprintf(path, size, "%s/%s", budget_dir, name);
	ck_assert_int_eq(bigsym_write(path, &sp), 0);
	ck_assert_int_eq(chmod(path, 0644), 0);
	free(strtab);
}

static void budget_cleanup(const char **names, size_t n)
{
	char path[128];

	for (size_t i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/%s", budget_dir, names[i]);
		unlink(path);
	}
	rmdir(budget_dir);
	budget_dir[0] = '\0';
}

static void *map_exec(const char *path, size_t *len)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	void *p;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fstat(fd, &st), 0);
	p = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
	ck_assert_ptr_ne(p, MAP_FAILED);
	close(fd);
	*len = (size_t)st.st_size;
	return p;
}

/* The name of the first function of the file mapped at base (by pid). */
static void first_function(pid_t pid, const void *base, struct sym_result *r)
{
	ck_assert_int_eq(symbols_resolve_user(syms, pid, 0, (uintptr_t)base + BIGSYM_TEXT + 4, false,
					      r), 0);
}

static struct symbols_stats stats(void)
{
	struct symbols_stats st;

	symbols_get_stats(syms, &st);
	return st;
}

/* A table bigger than the budget is not read: module+offset, counted. */
START_TEST(test_budget_over)
{
	const char *names[] = { "over" };
	char path[128];
	struct sym_result r;
	size_t len;
	void *base;

	symbols_set_max_memory(syms, BUDGET);
	budget_file("over", 60000, BUDGET, 'o', path, sizeof(path));
	base = map_exec(path, &len);
	first_function(getpid(), base, &r);
	ck_assert_str_eq(r.name, "over+0x1000");
	ck_assert_uint_eq(stats().over_budget, 1);
	ck_assert_uint_lt(stats().mem_bytes, 1u << 20);
	munmap(base, len);
	budget_cleanup(names, 1);
}
END_TEST

/* An unused table is dropped to make room for a new one. */
START_TEST(test_budget_evicts_unused)
{
	const char *names[] = { "one", "two" };
	char path[128];
	struct sym_result r;
	size_t len;
	void *base;

	symbols_set_max_memory(syms, BUDGET);
	budget_file("one", 50000, 1500000, 'a', path, sizeof(path));
	base = map_exec(path, &len);
	first_function(getpid(), base, &r);
	ck_assert_uint_eq(strspn(r.name, "a"), 1500000 < SYM_NAME_MAX ? 1500000 : SYM_NAME_MAX - 1);
	munmap(base, len);
	/* Our maps are read again: "one" is no longer mapped. */
	symbols_forget_pid(syms, getpid());
	budget_file("two", 50000, 1500000, 'b', path, sizeof(path));
	base = map_exec(path, &len);
	first_function(getpid(), base, &r);
	ck_assert_msg(r.name[0] == 'b', "%.40s", r.name);
	ck_assert_uint_eq(stats().evicted, 1);
	ck_assert_uint_eq(stats().over_budget, 0);
	ck_assert_uint_le(stats().mem_bytes, BUDGET);
	munmap(base, len);
	budget_cleanup(names, 2);
}
END_TEST

/* A table too big for the loop is read on the worker: module+offset names
 * until it is in, the function's name after. */
START_TEST(test_big_table_on_worker)
{
	const char *names[] = { "big" };
	char path[128];
	struct sym_result r;
	struct timespec t0, t;
	size_t len;
	void *base;

	budget_file("big", 200000, 255, 'w', path, sizeof(path));
	base = map_exec(path, &len);
	first_function(getpid(), base, &r);
	ck_assert_str_eq(r.name, "big+0x1000");
	ck_assert_uint_eq(stats().deferred_loads, 1);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		struct timespec ms = { 0, 1000000 };

		nanosleep(&ms, NULL);
		first_function(getpid(), base, &r);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while (r.name[0] != 'w' && t.tv_sec - t0.tv_sec < 30);
	ck_assert_msg(strspn(r.name, "w") == 255, "%s", r.name);
	munmap(base, len);
	budget_cleanup(names, 1);
}
END_TEST

/* nobody's process: its uid may hold a quarter of the budget, so a table of
 * 1.5 MB is refused for it; root's process mapping the same file then gets
 * it read (on the worker) for root. */
START_TEST(test_budget_uid_share)
{
	const char *names[] = { "share" };
	char path[128], c;
	struct sym_result r;
	struct timespec t0, t;
	int ready[2];
	size_t len;
	void *base;
	pid_t child;

	symbols_set_max_memory(syms, BUDGET);
	budget_file("share", 30000, 1000000, 's', path, sizeof(path));
	ck_assert_int_eq(pipe2(ready, O_CLOEXEC), 0);
	child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (setresgid(65534, 65534, 65534) < 0 || setresuid(65534, 65534, 65534) < 0)
			_exit(1);
		base = map_exec(path, &len);
		if (write(ready[1], "r", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(ready[1]);
	ck_assert_int_eq(read(ready[0], &c, 1), 1);
	close(ready[0]);
	base = map_exec(path, &len);  /* same address in the child: a fresh mapping each */
	{
		/* The child's mapping: find it by reading its maps through
		 * symbols: the file's first function is at the same file
		 * offset, so resolve by the child's own base. */
		struct procmaps *pm = NULL;
		char mp[64];
		uint64_t cbase = 0;

		snprintf(mp, sizeof(mp), "/proc/%d/maps", (int)child);
		ck_assert_int_eq(procmaps_read(mp, &pm), 0);
		for (size_t i = 0; i < pm->count; i++)
			if (strcmp(pm->entries[i].path, path) == 0 && pm->entries[i].offset == 0)
				cbase = pm->entries[i].start;
		procmaps_free(pm);
		ck_assert_uint_ne(cbase, 0);
		first_function(child, (const void *)(uintptr_t)cbase, &r);
	}
	ck_assert_str_eq(r.name, "share+0x1000");
	ck_assert_uint_eq(stats().over_budget, 1);
	/* Root's mapping of the same file: read for root. */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		struct timespec ms = { 0, 1000000 };

		first_function(getpid(), base, &r);
		nanosleep(&ms, NULL);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while (r.name[0] != 's' && t.tv_sec - t0.tv_sec < 30);
	ck_assert_msg(r.name[0] == 's', "%.40s", r.name);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	munmap(base, len);
	budget_cleanup(names, 1);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("symbols");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_pie);
	tcase_add_test(tc, test_nopie);
	tcase_add_test(tc, test_unknown_and_jit);
	tcase_add_test(tc, test_stripped);
	tcase_add_test(tc, test_deleted_binary);
	tcase_add_test(tc, test_dlopen);
	tcase_add_test(tc, test_no_build_id_own_names);
	tcase_add_test(tc, test_claimed_build_id_not_shared);
	tcase_add_test(tc, test_root_fallback_not_redirected);
	tcase_add_test(tc, test_debug_root_and_shared_cache);
	tcase_add_test(tc, test_vdso_and_self);
	tcase_add_test(tc, test_other_process_with_the_pid);
	tcase_add_test(tc, test_exec_rereads_maps);
	tcase_add_test(tc, test_budget_over);
	tcase_add_test(tc, test_budget_evicts_unused);
	tcase_add_test(tc, test_big_table_on_worker);
	if (geteuid() == 0)
		tcase_add_test(tc, test_budget_uid_share);  /* it becomes nobody */
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
