#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kallsyms.h"
#include "symbols.h"

static const char fixture[] =
	"0000000000000000 A fixed_percpu_data\n"
	"ffffffff81000000 T _stext\n"
	"ffffffff81000000 t _text_local_alias\n"
	"ffffffff81000100 t local_fn\n"
	"ffffffff81000200 T do_work\n"
	"ffffffff81000300 D some_data\n"
	"ffffffff81000400 W weak_fn\n"
	"this line is garbage\n"
	"ffffffff81001000 T _etext\n"
	"ffffffff82000000 t init_fn\n"
	"ffffffffc0001000 t mod_a_fn1\t[mod_a]\n"
	"ffffffffc0001080 T mod_a_fn2\t[mod_a]\n"
	"ffffffffc0005000 t mod_b_fn\t[mod_b]\n"
	"ffffffffc0005040 b mod_b_bss\t[mod_b]\n";

static char path[PATH_MAX];

static void write_file(const char *text)
{
	int fd;

	snprintf(path, sizeof(path), "/tmp/jprof-kallsyms-XXXXXX");
	fd = mkostemp(path, O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
}

static void assert_sym(const struct kallsyms *k, uint64_t addr, const char *name,
		       const char *module)
{
	const char *n = NULL, *m = NULL;
	int r = kallsyms_lookup(k, addr, &n, &m, NULL);

	ck_assert_msg(r == 0, "0x%llx unresolved (want %s)", (unsigned long long)addr, name);
	ck_assert_str_eq(n, name);
	ck_assert_str_eq(m, module);
}

static void assert_unresolved(const struct kallsyms *k, uint64_t addr)
{
	const char *n = NULL, *m = NULL;
	int r = kallsyms_lookup(k, addr, &n, &m, NULL);

	ck_assert_msg(r == -ENOENT, "0x%llx resolved to %s", (unsigned long long)addr,
		      r == 0 ? n : "?");
}

START_TEST(test_fixture)
{
	struct kallsyms *k = NULL;
	uint64_t a;

	write_file(fixture);
	ck_assert_int_eq(kallsyms_load(path, &k), 0);
	unlink(path);
	ck_assert(kallsyms_available(k));
	/* Text only: 'A', 'D', 'b' and _etext are left out; aliases merged. */
	ck_assert_uint_eq(kallsyms_count(k), 8);
	ck_assert_int_eq(kallsyms_find(k, "some_data", &a), -ENOENT);

	assert_sym(k, 0xffffffff81000000ull, "_stext", "");     /* global alias wins */
	assert_sym(k, 0xffffffff81000150ull, "local_fn", "");
	assert_sym(k, 0xffffffff81000300ull, "do_work", "");    /* data symbol ignored */
	assert_sym(k, 0xffffffff81000fffull, "weak_fn", "");    /* up to _etext */
	assert_unresolved(k, 0xffffffff81001000ull);            /* past _etext */
	assert_unresolved(k, 0xffffffff80ffffffull);            /* below the first */
	assert_sym(k, 0xffffffff82000010ull, "init_fn", "");
	assert_unresolved(k, 0xffffffff82000000ull + KALLSYMS_TAIL_SPAN);
	assert_sym(k, 0xffffffffc0001000ull, "mod_a_fn1", "mod_a");
	assert_sym(k, 0xffffffffc00010a0ull, "mod_a_fn2", "mod_a");
	assert_sym(k, 0xffffffffc0005010ull, "mod_b_fn", "mod_b");
	assert_unresolved(k, 0xffffffffc0005000ull + KALLSYMS_TAIL_SPAN);
	assert_unresolved(k, UINT64_MAX);
	kallsyms_free(k);
	kallsyms_free(NULL);
}
END_TEST

START_TEST(test_zero_addresses)
{
	static const char zeros[] =
		"0000000000000000 T _stext\n"
		"0000000000000000 T schedule\n"
		"0000000000000000 t mod_fn\t[mod]\n";
	struct kallsyms *k = NULL;
	struct symbols *s;
	struct sym_result r;
	const char *n, *m;

	ck_assert_int_eq(kallsyms_parse(zeros, strlen(zeros), &k), 0);
	ck_assert(!kallsyms_available(k));
	ck_assert_int_eq(kallsyms_lookup(k, 0xffffffff81000000ull, &n, &m, NULL), -ENODATA);
	ck_assert_int_eq(kallsyms_lookup(k, 0, &n, &m, NULL), -ENODATA);
	kallsyms_free(k);

	/* Through symbols: every address is "[kernel]", none is pinned on the
	 * one symbol all of them would be "nearest" to, and none shows its
	 * address (KASLR). */
	write_file(zeros);
	s = symbols_new(path, NULL);
	ck_assert_ptr_nonnull(s);
	ck_assert(!symbols_kernel_available(s));
	ck_assert_int_eq(symbols_resolve_kernel(s, 0xffffffff81234567ull, &r), 1);
	ck_assert_int_eq(r.kind, FRAME_KERNEL);
	ck_assert_str_eq(r.name, "[kernel]");
	ck_assert_str_eq(r.module, "");
	symbols_free(s);
	unlink(path);
}
END_TEST

START_TEST(test_symbols_kernel)
{
	struct symbols *s;
	struct sym_result r;
	struct symbols_stats st;

	write_file(fixture);
	s = symbols_new(path, NULL);
	ck_assert(symbols_kernel_available(s));
	ck_assert_int_eq(symbols_resolve_kernel(s, 0xffffffffc00010a0ull, &r), 0);
	ck_assert_int_eq(r.kind, FRAME_KERNEL);
	ck_assert_str_eq(r.name, "mod_a_fn2");
	ck_assert_str_eq(r.module, "mod_a");
	ck_assert_int_eq(symbols_resolve_kernel(s, 0xffffffff81000201ull, &r), 0);
	ck_assert_str_eq(r.name, "do_work");
	ck_assert_str_eq(r.module, "");
	/* Below every symbol, past a module's last function, past the end of
	 * the table: "[kernel]", with no address or offset. */
	ck_assert_int_eq(symbols_resolve_kernel(s, 0x1000, &r), 1);
	ck_assert_str_eq(r.name, "[kernel]");
	ck_assert_str_eq(r.module, "");
	ck_assert_int_eq(symbols_resolve_kernel(s, 0xffffffffc0001000ull + 2 * KALLSYMS_TAIL_SPAN, &r), 1);
	ck_assert_str_eq(r.name, "[kernel]");
	ck_assert_int_eq(symbols_resolve_kernel(s, UINT64_MAX, &r), 1);
	ck_assert_str_eq(r.name, "[kernel]");
	ck_assert_int_eq(r.kind, FRAME_KERNEL);
	symbols_get_stats(s, &st);
	ck_assert_uint_eq(st.kallsyms_loads, 1);   /* misses do not reload at once */
	ck_assert_int_eq(symbols_resolve_kernel(NULL, 0, &r), -EINVAL);
	symbols_free(s);
	unlink(path);
}
END_TEST

/* The real table: take a known symbol's address from the file and expect
 * the lookup to name it. Root sees real addresses; others see zeros. */
START_TEST(test_real_kallsyms)
{
	struct kallsyms *k = NULL;
	char line[512];
	unsigned long long addr = 0;
	FILE *f;
	const char *n, *m;

	ck_assert_int_eq(kallsyms_load(NULL, &k), 0);
	if (!kallsyms_available(k)) {
		ck_assert_int_ne(geteuid(), 0);
		fprintf(stderr, "kallsyms addresses hidden (not root): real lookup not checked\n");
		kallsyms_free(k);
		return;
	}
	ck_assert_uint_gt(kallsyms_count(k), 1000);
	f = fopen("/proc/kallsyms", "re");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f)) {
		char type, name[256];

		if (sscanf(line, "%llx %c %255s", &addr, &type, name) == 3 &&
		    strcmp(name, "schedule") == 0 && (type == 'T' || type == 't'))
			break;
		addr = 0;
	}
	fclose(f);
	ck_assert_uint_ne(addr, 0);
	ck_assert_int_eq(kallsyms_lookup(k, addr + 1, &n, &m, NULL), 0);
	ck_assert_str_eq(n, "schedule");
	ck_assert_str_eq(m, "");
	kallsyms_free(k);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("kallsyms");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_fixture);
	tcase_add_test(tc, test_zero_addresses);
	tcase_add_test(tc, test_symbols_kernel);
	tcase_add_test(tc, test_real_kallsyms);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
