/* .gopclntab parsing (daemon/symbols/gopclntab.c): a table in the Go 1.18
 * layout built here, then broken one field at a time: every break is a
 * refusal, never a read outside the section. Real tables are read by
 * test_go.py (a stripped Go binary named by its .gopclntab). */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check_main.h"
#include "gopclntab.h"

/* Layout: header (8 + 8 words), names at 72, functab at 128 (3 funcs + end),
 * _func records at functab + 64. */
#define NAMES_AT 72
#define FTAB_AT 128
#define FUNC_AT 64   /* from FTAB_AT */
#define TEXT 0x401000ull

static uint8_t tab[256];

static void put32(size_t off, uint32_t v)
{
	memcpy(tab + off, &v, 4);
}

static void put64(size_t off, uint64_t v)
{
	memcpy(tab + off, &v, 8);
}

static void build(void)
{
	static const char names[] = "main.main\0main.work\0runtime.goexit\0";
	const uint32_t entries[4] = { 0x0, 0x40, 0x100, 0x180 };
	const uint32_t name_offs[3] = { 0, 10, 20 };

	memset(tab, 0, sizeof(tab));
	put32(0, 0xfffffff0u);
	tab[6] = 1;                     /* minLC */
	tab[7] = 8;                     /* ptrSize */
	put64(8, 3);                    /* nfunc */
	put64(16, 0);                   /* nfiles */
	put64(24, TEXT);                /* textStart */
	put64(32, NAMES_AT);            /* funcnameOffset */
	put64(40, NAMES_AT + sizeof(names));  /* cuOffset: the names end there */
	put64(48, 0);
	put64(56, 0);
	put64(64, FTAB_AT);             /* pclnOffset */
	memcpy(tab + NAMES_AT, names, sizeof(names));
	for (int i = 0; i < 4; i++) {
		put32(FTAB_AT + 8 * i, entries[i]);
		put32(FTAB_AT + 8 * i + 4, i < 3 ? FUNC_AT + 8 * i : 0);
	}
	for (int i = 0; i < 3; i++) {
		put32(FTAB_AT + FUNC_AT + 8 * i, entries[i]);
		put32(FTAB_AT + FUNC_AT + 8 * i + 4, name_offs[i]);
	}
}

START_TEST(test_go118_table)
{
	struct gopclntab t;

	build();
	ck_assert_int_eq(gopclntab_parse(tab, sizeof(tab), 0, &t), 0);
	ck_assert_uint_eq(t.nfuncs, 3);
	ck_assert_uint_eq(t.funcs[0].entry, TEXT);
	ck_assert_uint_eq(t.funcs[1].entry, TEXT + 0x40);
	ck_assert_uint_eq(t.funcs[3].entry, TEXT + 0x180);
	ck_assert_str_eq(t.names + t.funcs[1].name, "main.work");
	ck_assert_str_eq(t.names + t.funcs[2].name, "runtime.goexit");
	gopclntab_release(&t);
	/* A PIE's header leaves textStart to a relocation: .text stands in. */
	put64(24, 0);
	ck_assert_int_eq(gopclntab_parse(tab, sizeof(tab), 0x2000, &t), 0);
	ck_assert_uint_eq(t.funcs[0].entry, 0x2000);
	gopclntab_release(&t);
}
END_TEST

START_TEST(test_broken_tables_refused)
{
	struct gopclntab t;

	build();
	put32(0, 0x12345678u);           /* not a magic this parser knows */
	ck_assert_int_eq(gopclntab_parse(tab, sizeof(tab), 0, &t), -EINVAL);
	build();
	put64(8, 1000);                  /* more functions than the section holds */
	ck_assert_int_eq(gopclntab_parse(tab, sizeof(tab), 0, &t), -EINVAL);
	build();
	put64(8, (uint64_t)1 << 40);     /* absurd count */
	ck_assert_int_eq(gopclntab_parse(tab, sizeof(tab), 0, &t), -E2BIG);
	build();
	put64(64, 4096);                 /* functab past the end */
	ck_assert_int_eq(gopclntab_parse(tab, sizeof(tab), 0, &t), -EINVAL);
	build();
	put32(FTAB_AT + FUNC_AT + 4, 5000);  /* a name outside the names */
	ck_assert_int_eq(gopclntab_parse(tab, sizeof(tab), 0, &t), -EINVAL);
	build();
	put32(FTAB_AT + FUNC_AT + 4, (uint32_t)-8);  /* negative name offset */
	ck_assert_int_eq(gopclntab_parse(tab, sizeof(tab), 0, &t), -EINVAL);
	build();
	put32(FTAB_AT + 4, 10000);       /* a _func past the end */
	ck_assert_int_eq(gopclntab_parse(tab, sizeof(tab), 0, &t), -EINVAL);
	build();
	put32(FTAB_AT + 8, 0x1000);      /* entries out of order */
	ck_assert_int_eq(gopclntab_parse(tab, sizeof(tab), 0, &t), -EINVAL);
	build();
	tab[7] = 3;                      /* a pointer size that does not exist */
	ck_assert_int_eq(gopclntab_parse(tab, sizeof(tab), 0, &t), -EINVAL);
	build();
	/* The last name without its NUL: cuOffset cuts the names short. */
	put64(40, NAMES_AT + 24);
	ck_assert_int_eq(gopclntab_parse(tab, sizeof(tab), 0, &t), -EINVAL);
	/* Every truncation of a good table is refused, and read within bounds
	 * (ASan builds check the latter). */
	build();
	for (size_t n = 0; n < FTAB_AT + FUNC_AT + 24; n++) {
		uint8_t *copy = malloc(n ? n : 1);

		memcpy(copy, tab, n);
		ck_assert_int_lt(gopclntab_parse(copy, n, 0, &t), 0);
		free(copy);
	}
}
END_TEST

static Suite *gopclntab_suite(void)
{
	Suite *s = suite_create("gopclntab");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_go118_table);
	tcase_add_test(tc, test_broken_tables_refused);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return jprof_check_run(gopclntab_suite());
}
