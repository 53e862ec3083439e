/* Unit tests of the unwind table builder (daemon/unwind/cfi.c) on real
 * binaries: libc, this test's own executable, and corrupted copies. */
#include <check.h>
#include <gnu/libc-version.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cfi.h"
#include "check_main.h"

extern void _start(void);

static struct cfi_table *build_file(const char *path, size_t max_rows, int *rc,
				    enum cfi_error *why)
{
	struct cfi_table *t = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	ck_assert_int_ge(fd, 0);
	*rc = cfi_build_fd(fd, -1, &(struct cfi_limits){ .max_rows = max_rows }, &t, why);
	close(fd);
	return t;
}

/* The ELF address of a function of a loaded object, and that object's path. */
static uint64_t elf_addr_of(void *fn, char *path, size_t len)
{
	Dl_info info;
	struct link_map *lm = NULL;

	ck_assert(dladdr1(fn, &info, (void **)&lm, RTLD_DL_LINKMAP));
	snprintf(path, len, "%s", lm->l_name[0] ? lm->l_name : "/proc/self/exe");
	return (uint64_t)(uintptr_t)fn - lm->l_addr;
}

static void check_rows_sorted(const struct cfi_table *t)
{
	for (size_t i = 1; i < t->n; i++)
		ck_assert_uint_gt(t->rows[i].pc, t->rows[i - 1].pc);
}

START_TEST(test_libc)
{
	char path[4096];
	/* A libc function no sanitizer intercepts (ASan's read is its own). */
	uint64_t pc = elf_addr_of((void *)&gnu_get_libc_version, path, sizeof(path));
	enum cfi_error why = CFI_NERRORS;
	int rc;
	struct cfi_table *t = build_file(path, 1u << 22, &rc, &why);
	const struct jp_unwind_row *r;
	int rsp = 0, rbp_saved = 0, signal_rows = 0;

	ck_assert_int_eq(rc, 0);
	ck_assert_int_eq(why, CFI_OK);
	ck_assert_uint_gt(t->n, 1000);
	ck_assert_uint_gt(t->fdes, 500);
	ck_assert_uint_ge(t->build_id_len, 16);
	check_rows_sorted(t);
	/* At any function's first instruction the return address is at the
	 * stack pointer: CFA = rsp + 8. */
	r = cfi_lookup(t, pc);
	ck_assert_ptr_nonnull(r);
	ck_assert_uint_eq(r->pc, (uint32_t)pc);
	ck_assert_int_eq(r->kind, JP_UW_CFA_RSP);
	ck_assert_int_eq(r->cfa_off, 8);
	for (size_t i = 0; i < t->n; i++) {
		rsp += t->rows[i].kind == JP_UW_CFA_RSP;
		rbp_saved += t->rows[i].rbp_off != 0;
		ck_assert_int_le(t->rows[i].kind, JP_UW_SIGNAL);
		/* The signal trampoline (__restore_rt): the kernel's sigcontext,
		 * rsp at uc + 160, rip after it, rbp at uc + 120. */
		if (t->rows[i].kind == JP_UW_SIGNAL) {
			ck_assert_int_eq(t->rows[i].cfa_off, 160);
			ck_assert_int_eq(t->rows[i].rbp_off, 120);
			signal_rows++;
		}
	}
	ck_assert_int_eq(signal_rows, 1);
	/* Most of libc is rsp-based; functions that push rbp say where. */
	ck_assert_int_gt(rsp, (int)t->n / 2);
	ck_assert_int_gt(rbp_saved, 0);
	/* The executable segment maps offsets to ELF addresses. */
	ck_assert_uint_ge(t->nsegs, 1);
	cfi_table_free(t);
}
END_TEST

/* _start marks its return address undefined: the walk's root. */
START_TEST(test_start_is_outermost)
{
	char path[4096];
	uint64_t pc = elf_addr_of((void *)&_start, path, sizeof(path));
	enum cfi_error why;
	int rc;
	struct cfi_table *t = build_file("/proc/self/exe", 1u << 20, &rc, &why);
	const struct jp_unwind_row *r;

	ck_assert_int_eq(rc, 0);
	r = cfi_lookup(t, pc + 4);
	ck_assert_ptr_nonnull(r);
	ck_assert_int_eq(r->kind, JP_UW_END);
	cfi_table_free(t);
}
END_TEST

/* The address of a symbol in an ELF file (nm), 0 if absent. */
static uint64_t symbol_addr(const char *path, const char *sym)
{
	char cmd[4200], line[512], name[256], type[8];
	unsigned long long addr, found = 0;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "nm -P '%s'", path);
	f = popen(cmd, "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f))  /* undefined symbols have no address */
		if (sscanf(line, "%255s %7s %llx", name, type, &addr) == 3 && strcmp(name, sym) == 0)
			found = addr;
	pclose(f);
	return found;
}

static int kind_at(const char *path, int debug_fd, uint64_t pc)
{
	enum cfi_error why;
	struct cfi_table *t = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC), kind;
	const struct jp_unwind_row *r;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(cfi_build_fd(fd, debug_fd, &(struct cfi_limits){ .max_rows = 1u << 20 }, &t, &why), 0);
	close(fd);
	check_rows_sorted(t);
	r = cfi_lookup(t, pc);
	kind = r ? r->kind : -1;
	cfi_table_free(t);
	return kind;
}

/* Code built without unwind tables has its CFI in .debug_frame only: in
 * the file, or after stripping in its separate debug file. */
START_TEST(test_debug_frame)
{
	const char *dir = getenv("JPROF_PROGS_DIR");
	char prog[1024], tmp[] = "/tmp/test_cfi.XXXXXX", stripped[1100], dbg[1100], cmd[8192];
	uint64_t pc;
	int dfd;

	ck_assert_ptr_nonnull(dir);
	snprintf(prog, sizeof(prog), "%s/unwind_chain_dbgframe", dir);
	pc = symbol_addr(prog, "uw_c");
	ck_assert_uint_ne(pc, 0);
	/* Inside uw_c, past its entry: a CFA rule from .debug_frame. */
	ck_assert_int_eq(kind_at(prog, -1, pc + 4), JP_UW_CFA_RSP);

	ck_assert_ptr_nonnull(mkdtemp(tmp));
	snprintf(stripped, sizeof(stripped), "%s/stripped", tmp);
	snprintf(dbg, sizeof(dbg), "%s/prog.debug", tmp);
	snprintf(cmd, sizeof(cmd), "objcopy --only-keep-debug '%s' '%s' && objcopy --strip-debug "
		 "'%s' '%s'", prog, dbg, prog, stripped);
	ck_assert_int_eq(system(cmd), 0);
	/* Stripped: only frame pointers for uw_c... */
	ck_assert_int_eq(kind_at(stripped, -1, pc + 4), JP_UW_FP);
	/* ...unless its debug file is given. */
	dfd = open(dbg, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(dfd, 0);
	ck_assert_int_eq(kind_at(stripped, dfd, pc + 4), JP_UW_CFA_RSP);
	close(dfd);
	unlink(stripped);
	unlink(dbg);
	rmdir(tmp);
}
END_TEST

START_TEST(test_row_bound)
{
	char path[4096];
	enum cfi_error why;
	int rc;
	struct cfi_table *t;

	elf_addr_of((void *)&read, path, sizeof(path));
	t = build_file(path, 100, &rc, &why);
	ck_assert_int_eq(rc, -E2BIG);
	ck_assert_int_eq(why, CFI_ERR_TOO_BIG);
	ck_assert_ptr_null(t);
	ck_assert_str_eq(cfi_error_name(why), "too_big");
}
END_TEST

START_TEST(test_not_elf)
{
	static const char text[] = "#!/bin/sh\necho not an ELF file\n";
	struct cfi_table *t = NULL;
	enum cfi_error why;

	ck_assert_int_eq(cfi_build_memory(text, sizeof(text), &(struct cfi_limits){ .max_rows = 1000 }, &t, &why), -EINVAL);
	ck_assert_int_eq(why, CFI_ERR_NOT_ELF);
	ck_assert_ptr_null(t);
}
END_TEST

/* Random corruption of a real library: every outcome is a table that
 * keeps the invariants or a refusal with its cause, never a crash. */
START_TEST(test_corrupt_copies)
{
	char path[4096];
	struct stat sb;
	uint8_t *img, *copy;
	int fd, ok = 0, refused = 0;
	unsigned seed = 12345;

	elf_addr_of((void *)&read, path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(fstat(fd, &sb), 0);
	img = malloc((size_t)sb.st_size);
	copy = malloc((size_t)sb.st_size);
	ck_assert_int_eq(read(fd, img, (size_t)sb.st_size), sb.st_size);
	close(fd);
	for (int round = 0; round < 40; round++) {
		struct cfi_table *t = NULL;
		enum cfi_error why = CFI_OK;
		size_t size = (size_t)sb.st_size;
		int rc;

		memcpy(copy, img, size);
		if (round % 4 == 3)
			size = rand_r(&seed) % size;  /* truncated */
		for (int k = 0; k < 64; k++)
			copy[rand_r(&seed) % size] ^= (uint8_t)(1u << (rand_r(&seed) % 8));
		rc = cfi_build_memory(copy, size, &(struct cfi_limits){ .max_rows = 1u << 22 }, &t, &why);
		if (rc == 0) {
			ck_assert_ptr_nonnull(t);
			check_rows_sorted(t);
			ok++;
		} else {
			ck_assert_ptr_null(t);
			ck_assert_int_ne(why, CFI_OK);
			refused++;
		}
		cfi_table_free(t);
	}
	ck_assert_int_eq(ok + refused, 40);
	free(img);
	free(copy);
}
END_TEST

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A test program of tests/progs with hostile CFI, built within lim; the
 * thread's CPU time it took in *cpu_ns. */
static int build_hostile(const char *name, const struct cfi_limits *lim, enum cfi_error *why,
			 uint64_t *cpu_ns)
{
	const char *dir = getenv("JPROF_PROGS_DIR");
	struct cfi_table *t = NULL;
	char path[1024];
	uint64_t c0;
	int fd, rc;

	ck_assert_ptr_nonnull(dir);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	c0 = thread_cpu_ns();
	rc = cfi_build_fd(fd, -1, lim, &t, why);
	*cpu_ns = thread_cpu_ns() - c0;
	close(fd);
	ck_assert_ptr_null(t);
	return rc;
}

/* One FDE of 65,000 rows (libdw replays it per row: 6.7 s of CPU) stops at
 * the budget given, and at CFI_BUILD_CPU_NS by default. */
START_TEST(test_long_fde_budget)
{
	enum cfi_error why = CFI_OK;
	uint64_t ns;

	ck_assert_int_eq(build_hostile("cfi_long",
				       &(struct cfi_limits){ .max_rows = 1u << 22, .cpu_ns = 200000000ull },
				       &why, &ns), -ETIME);
	ck_assert_int_eq(why, CFI_ERR_BUDGET);
	ck_assert_str_eq(cfi_error_name(why), "over_budget");
	ck_assert_uint_ge(ns, 200000000ull);
	ck_assert_uint_lt(ns, 700000000ull);  /* the clock is read often enough */
	why = CFI_OK;
	ck_assert_int_eq(build_hostile("cfi_long", &(struct cfi_limits){ .max_rows = 1u << 22 },
				       &why, &ns), -ETIME);
	ck_assert_int_eq(why, CFI_ERR_BUDGET);
	ck_assert_uint_ge(ns, CFI_BUILD_CPU_NS);
	ck_assert_uint_lt(ns, CFI_BUILD_CPU_NS + 500000000ull);
}
END_TEST

/* A build stops as soon as it is cancelled (the daemon stopping): its
 * thread is joined at shutdown, which must not wait for a second of CPU. */
START_TEST(test_cancel)
{
	atomic_bool cancel = 1;
	enum cfi_error why = CFI_OK;
	uint64_t ns;

	ck_assert_int_eq(build_hostile("cfi_long",
				       &(struct cfi_limits){ .max_rows = 1u << 22, .cancel = &cancel },
				       &why, &ns), -ETIME);
	ck_assert_uint_lt(ns, 100000000ull);
}
END_TEST

/* Register 1,000,000 and 1,000 saved states (libdw copies a 16 MB register
 * file at each, per row: 6.8 s) are refused before libdw runs any of it. */
START_TEST(test_register_numbers)
{
	enum cfi_error why = CFI_OK;
	uint64_t ns;

	ck_assert_int_eq(build_hostile("cfi_regs", &(struct cfi_limits){ .max_rows = 1u << 22 },
				       &why, &ns), -EINVAL);
	ck_assert_int_eq(why, CFI_ERR_CORRUPT);
	ck_assert_uint_lt(ns, 100000000ull);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cfi");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_libc);
	tcase_add_test(tc, test_start_is_outermost);
	tcase_add_test(tc, test_debug_frame);
	tcase_add_test(tc, test_row_bound);
	tcase_add_test(tc, test_not_elf);
	tcase_add_test(tc, test_corrupt_copies);
	tcase_add_test(tc, test_long_fde_budget);
	tcase_add_test(tc, test_cancel);
	tcase_add_test(tc, test_register_numbers);
	suite_add_tcase(s, tc);
	return jprof_check_run(s);
}
