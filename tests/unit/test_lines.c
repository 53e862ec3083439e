/* symbols/lines.c: file:line from DWARF, checked against binutils'
 * addr2line; the worker's cache (one file read per build-id, answers kept),
 * the build-id check, separate debug files by build-id, the memory cap and
 * deadlines. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check_main.h"
#include "elfsym.h"
#include "lines.h"

static const char *prog(const char *name)
{
	static char path[4][PATH_MAX];
	static unsigned n;
	const char *dir = getenv("JPROF_PROGS_DIR");
	char *p = path[n++ % 4];

	ck_assert_msg(dir != NULL, "JPROF_PROGS_DIR not set");
	snprintf(p, PATH_MAX, "%s/%s", dir, name);
	return p;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ELF address inside function raw of the fixture (a few bytes in). */
static uint64_t fn_vaddr(const char *file, const char *raw)
{
	struct elfsym *e = NULL;
	uint64_t v = 0, size = 0;

	ck_assert_int_eq(elfsym_open(prog(file), "/nonexistent-jprof-debug", &e), 0);
	ck_assert_int_eq(elfsym_find(e, raw, &v, &size), 0);
	ck_assert_uint_gt(size, 8);
	elfsym_free(e);
	return v + 8;
}

static void hexbid(const char *file, char *hex, size_t cap)
{
	struct elfsym *e = NULL;
	const uint8_t *b;
	size_t len, n = 0;

	ck_assert_int_eq(elfsym_open(prog(file), "/nonexistent-jprof-debug", &e), 0);
	b = elfsym_build_id(e, &len);
	ck_assert_uint_gt(len, 0);
	for (size_t i = 0; i < len && n + 3 < cap; i++)
		n += (size_t)snprintf(hex + n, cap - n, "%02x", b[i]);
	elfsym_free(e);
}

/* What binutils says: "file:line" of vaddr in file. */
static void addr2line(const char *file, uint64_t vaddr, char *out, size_t cap)
{
	char cmd[PATH_MAX + 64];
	FILE *p;

	snprintf(cmd, sizeof(cmd), "addr2line -e '%s' 0x%llx", prog(file), (unsigned long long)vaddr);
	p = popen(cmd, "r");
	ck_assert_ptr_nonnull(p);
	ck_assert_ptr_nonnull(fgets(out, (int)cap, p));
	out[strcspn(out, " \n")] = '\0';
	pclose(p);
}

static void check_like_addr2line(const char *file, uint64_t vaddr, const struct frame_line *fl)
{
	char want[PATH_MAX], got[PATH_MAX + 16];

	addr2line(file, vaddr, want, sizeof(want));
	snprintf(got, sizeof(got), "%s:%u", fl->file, fl->line);
	ck_assert_msg(strcmp(want, got) == 0, "addr2line says %s, lines %s", want, got);
}

START_TEST(file_lookup_matches_addr2line)
{
	struct frame_line fl[LINES_MAX_FRAMES];
	struct lines_file *f = NULL;
	const char *fns[] = { "jp_fixture_alpha", "jp_fixture_beta", "jp_fixture_local", "main" };
	int fd = open(prog("symfix_pie"), O_RDONLY | O_CLOEXEC);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(lines_file_open(fd, NULL, 0, LINES_MEM_DEFAULT, &f), 0);
	for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
		uint64_t v = fn_vaddr("symfix_pie", fns[i]);
		size_t n = lines_file_lookup(f, v, fl, LINES_MAX_FRAMES);

		ck_assert_uint_ge(n, 1);
		check_like_addr2line("symfix_pie", v, &fl[0]);
		ck_assert_str_eq(fl[n - 1].function, fns[i]);
	}
	/* An address outside every CU: nothing, not a neighbour's line. */
	ck_assert_uint_eq(lines_file_lookup(f, 0x10, fl, LINES_MAX_FRAMES), 0);
	lines_file_free(f);
	close(fd);
}
END_TEST

START_TEST(file_without_dwarf_or_too_big)
{
	struct lines_file *f = NULL;
	int fd = open(prog("symfix_stripped"), O_RDONLY | O_CLOEXEC);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(lines_file_open(fd, NULL, 0, LINES_MEM_DEFAULT, &f), -ENOENT);
	ck_assert_ptr_null(f);
	close(fd);
	fd = open(prog("symfix_pie"), O_RDONLY | O_CLOEXEC);
	ck_assert_int_eq(lines_file_open(fd, NULL, 0, 1024, &f), -EFBIG);
	/* The build-id is checked before anything is read. */
	ck_assert_int_eq(lines_file_open(fd, (const uint8_t *)"\x01\x02\x03\x04", 4,
					 LINES_MEM_DEFAULT, &f), -EINVAL);
	ck_assert_int_eq(lines_file_open_memory("not an ELF file", 15, LINES_MEM_DEFAULT, &f), -EINVAL);
	close(fd);
}
END_TEST

/* A frame of this process as the symbolizer makes one, in a mapping of
 * file made here: the worker opens it through /proc/self/map_files. */
static struct frame_loc loc_of_path(const char *path, const char *bid, uint64_t vaddr)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	void *m;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fstat(fd, &st), 0);
	/* Left mapped: the worker may open it after the test returns here. */
	m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	ck_assert_ptr_ne(m, MAP_FAILED);
	close(fd);
	return (struct frame_loc){
		.addr = vaddr, .map_start = (uintptr_t)m,
		.map_limit = ((uintptr_t)m + (uint64_t)st.st_size + 4095) & ~(uint64_t)4095,
		.path = path, .build_id = bid, .pid = (uint32_t)getpid(), .vaddr = vaddr,
		/* As for a file a user could write: its answers are its own. */
		.build_id_shared = false, .file_dev = st.st_dev, .file_ino = st.st_ino,
	};
}

static struct frame_loc loc_of(const char *file, const char *bid, uint64_t vaddr)
{
	return loc_of_path(prog(file), bid, vaddr);
}

START_TEST(cache_answers_once_per_address)
{
	struct frame_line fl[LINES_MAX_FRAMES];
	struct lines_stats st;
	struct lines *l = NULL;
	char bid[130];
	uint64_t va = fn_vaddr("symfix_pie", "jp_fixture_beta");
	uint64_t vb = fn_vaddr("symfix_pie", "jp_fixture_alpha");
	struct frame_loc a, b;

	hexbid("symfix_pie", bid, sizeof(bid));
	a = loc_of("symfix_pie", bid, va);
	b = loc_of("symfix_pie", bid, vb);
	ck_assert_int_eq(lines_new(NULL, "/nonexistent-jprof-debug", 0, &l), 0);
	ck_assert_uint_ge(lines_lookup(l, &a, now_ns() + 10000000000ull, fl, LINES_MAX_FRAMES), 1);
	check_like_addr2line("symfix_pie", va, &fl[0]);
	/* Answered: no wait, no second queueing. */
	ck_assert_uint_ge(lines_lookup(l, &a, 0, fl, LINES_MAX_FRAMES), 1);
	check_like_addr2line("symfix_pie", va, &fl[0]);
	ck_assert_uint_ge(lines_lookup(l, &b, now_ns() + 10000000000ull, fl, LINES_MAX_FRAMES), 1);
	check_like_addr2line("symfix_pie", vb, &fl[0]);
	lines_get_stats(l, &st);
	ck_assert_uint_eq(st.queued, 2);
	ck_assert_uint_eq(st.resolved, 2);
	ck_assert_uint_eq(st.files_opened, 1);   /* one read per build-id */
	ck_assert_uint_gt(st.mem_bytes, 0);
	lines_free(l);
}
END_TEST

START_TEST(wrong_build_id_gets_no_lines)
{
	struct frame_line fl[LINES_MAX_FRAMES];
	struct lines_stats st;
	struct lines *l = NULL;
	uint64_t va = fn_vaddr("symfix_pie", "jp_fixture_beta");
	/* The file at the path is not the one the frame came from. */
	struct frame_loc a = loc_of("symfix_pie", "0123456789abcdef0123456789abcdef01234567", va);

	ck_assert_int_eq(lines_new(NULL, "/nonexistent-jprof-debug", 0, &l), 0);
	ck_assert_uint_eq(lines_lookup(l, &a, now_ns() + 10000000000ull, fl, LINES_MAX_FRAMES), 0);
	lines_get_stats(l, &st);
	ck_assert_uint_eq(st.unresolved, 1);
	ck_assert_uint_eq(st.files_failed, 1);
	/* No build-id at all: not even queued. */
	a.build_id = "";
	ck_assert_uint_eq(lines_lookup(l, &a, now_ns() + 10000000000ull, fl, LINES_MAX_FRAMES), 0);
	lines_get_stats(l, &st);
	ck_assert_uint_eq(st.queued, 1);
	lines_free(l);
}
END_TEST

START_TEST(debug_file_by_build_id_and_cap)
{
	struct frame_line fl[LINES_MAX_FRAMES];
	struct lines_stats st;
	struct lines *l = NULL;
	char bid[130], root[] = "/tmp/jprof-lines-XXXXXX", dir[256], dbg[512];
	uint64_t va = fn_vaddr("symfix_pie", "jp_fixture_local");
	struct frame_loc a;

	hexbid("symfix_pie", bid, sizeof(bid));
	ck_assert_ptr_nonnull(mkdtemp(root));
	snprintf(dir, sizeof(dir), "%s/.build-id", root);
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	snprintf(dir, sizeof(dir), "%s/.build-id/%.2s", root, bid);
	ck_assert_int_eq(mkdir(dir, 0755), 0);
	snprintf(dbg, sizeof(dbg), "%s/%s.debug", dir, bid + 2);
	ck_assert_int_eq(symlink(prog("symfix.debug"), dbg), 0);
	/* The binary at the path has no DWARF: only the debug file can answer. */
	a = loc_of("symfix_stripped", bid, va);
	ck_assert_int_eq(lines_new(NULL, root, 0, &l), 0);
	ck_assert_uint_ge(lines_lookup(l, &a, now_ns() + 10000000000ull, fl, LINES_MAX_FRAMES), 1);
	check_like_addr2line("symfix_pie", va, &fl[0]);
	lines_free(l);
	/* Beyond the memory cap: not read at all. (The sections a lookup
	 * reads are 3.9 KiB; the location lists, not read, do not count.) */
	ck_assert_int_eq(lines_new(NULL, root, 2048, &l), 0);
	ck_assert_uint_eq(lines_lookup(l, &a, now_ns() + 10000000000ull, fl, LINES_MAX_FRAMES), 0);
	lines_get_stats(l, &st);
	ck_assert_uint_eq(st.files_too_big, 1);
	ck_assert_uint_eq(st.mem_bytes, 0);
	lines_free(l);
	unlink(dbg);
	rmdir(dir);
	snprintf(dir, sizeof(dir), "%s/.build-id", root);
	rmdir(dir);
	rmdir(root);
}
END_TEST

START_TEST(deadline_passed_does_not_wait)
{
	struct frame_line fl[LINES_MAX_FRAMES];
	struct lines *l = NULL;
	char bid[130];
	uint64_t va = fn_vaddr("symfix_pie", "jp_fixture_alpha"), t0;
	struct frame_loc a;

	hexbid("symfix_pie", bid, sizeof(bid));
	a = loc_of("symfix_pie", bid, va);
	ck_assert_int_eq(lines_new(NULL, "/nonexistent-jprof-debug", 0, &l), 0);
	t0 = now_ns();
	/* Queued, then answered later: a deadline in the past never waits. */
	lines_lookup(l, &a, t0 - 1, fl, LINES_MAX_FRAMES);
	ck_assert_uint_lt(now_ns() - t0, 50000000ull);
	ck_assert_uint_ge(lines_lookup(l, &a, now_ns() + 10000000000ull, fl, LINES_MAX_FRAMES), 1);
	lines_free(l);
}
END_TEST

/* A build-id claimed by two files is not one key: a copy of symfix_pie
 * without its DWARF (same build-id) gets no lines from the original's
 * answers, which were cached first. A user's binary claiming another's
 * build-id once lent its file:line to the other's frames. */
START_TEST(claimed_build_id_keyed_by_file)
{
	struct frame_line fl[LINES_MAX_FRAMES];
	struct lines *l = NULL;
	char bid[130], dir[] = "/tmp/jprof-lines-XXXXXX", copy[PATH_MAX], cmd[PATH_MAX * 3];
	uint64_t va = fn_vaddr("symfix_pie", "jp_fixture_beta");
	struct frame_loc a, b;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(copy, sizeof(copy), "%s/nodwarf", dir);
	snprintf(cmd, sizeof(cmd), "objcopy --strip-debug '%s' '%s'", prog("symfix_pie"), copy);
	ck_assert_int_eq(system(cmd), 0);
	hexbid("symfix_pie", bid, sizeof(bid));
	a = loc_of("symfix_pie", bid, va);
	b = loc_of_path(copy, bid, va);
	ck_assert_int_eq(lines_new(NULL, "/nonexistent-jprof-debug", 0, &l), 0);
	ck_assert_uint_ge(lines_lookup(l, &a, now_ns() + 10000000000ull, fl, LINES_MAX_FRAMES), 1);
	ck_assert_uint_eq(lines_lookup(l, &b, now_ns() + 10000000000ull, fl, LINES_MAX_FRAMES), 0);
	/* The original still has its own; as a file no user could write (a
	 * shared build-id) it is found by build-id alone. */
	ck_assert_uint_ge(lines_lookup(l, &a, 0, fl, LINES_MAX_FRAMES), 1);
	a.build_id_shared = true;
	a.file_dev = a.file_ino = 0;
	ck_assert_uint_ge(lines_lookup(l, &a, now_ns() + 10000000000ull, fl, LINES_MAX_FRAMES), 1);
	check_like_addr2line("symfix_pie", va, &fl[0]);
	lines_free(l);
	unlink(copy);
	rmdir(dir);
}
END_TEST

/* A frame of a file with a build-id it claims but no file identity (no
 * dev, no inode) gets no lines, and the cache goes on answering: the
 * refusal once returned with the cache's lock held, and the next lookup
 * (and lines_free) hung. */
START_TEST(unkeyed_claim_leaves_cache_usable)
{
	struct frame_line fl[LINES_MAX_FRAMES];
	struct lines *l = NULL;
	char bid[130];
	uint64_t va = fn_vaddr("symfix_pie", "jp_fixture_beta");
	struct frame_loc a, unkeyed;

	hexbid("symfix_pie", bid, sizeof(bid));
	a = loc_of("symfix_pie", bid, va);
	unkeyed = a;
	unkeyed.build_id_shared = false;
	unkeyed.file_dev = unkeyed.file_ino = 0;
	ck_assert_int_eq(lines_new(NULL, "/nonexistent-jprof-debug", 0, &l), 0);
	ck_assert_uint_eq(lines_lookup(l, &unkeyed, now_ns() + 10000000000ull, fl, LINES_MAX_FRAMES), 0);
	ck_assert_uint_ge(lines_lookup(l, &a, now_ns() + 10000000000ull, fl, LINES_MAX_FRAMES), 1);
	check_like_addr2line("symfix_pie", va, &fl[0]);
	lines_free(l);
}
END_TEST

int main(void)
{
	const TTest *const tests[] = {
		file_lookup_matches_addr2line, file_without_dwarf_or_too_big,
		cache_answers_once_per_address, wrong_build_id_gets_no_lines,
		debug_file_by_build_id_and_cap, deadline_passed_does_not_wait,
		claimed_build_id_keyed_by_file, unkeyed_claim_leaves_cache_usable,
	};
	Suite *s = suite_create("lines");
	TCase *tc = tcase_create("core");

	/* Each test starts and joins a worker; a slow machine needs time. */
	tcase_set_timeout(tc, 60);
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++)
		tcase_add_test(tc, tests[i]);
	suite_add_tcase(s, tc);
	return jprof_check_run(s);
}
