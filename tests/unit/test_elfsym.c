#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bigsym_fixture.h"
#include "elfsym.h"
#include "symbols.h"

/* No file in /usr/lib/debug can match the fixtures, but keep them out of
 * the picture anyway. */
#define NO_DEBUG_ROOT "/nonexistent-jprof-debug"

static const char *prog(const char *name)
{
	static char path[PATH_MAX];
	const char *dir = getenv("JPROF_PROGS_DIR");

	ck_assert_msg(dir != NULL, "JPROF_PROGS_DIR not set");
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return path;
}

static struct elfsym *load(const char *name, const char *debug_root)
{
	struct elfsym *e = NULL;
	int r = elfsym_open(prog(name), debug_root, &e);

	ck_assert_msg(r == 0, "elfsym_open(%s) = %d", name, r);
	return e;
}

/* st_value of any symbol (objects included), read with plain libelf so the
 * test does not trust the code under test. */
static uint64_t raw_symbol(const char *path, const char *want)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	Elf *elf;
	Elf_Scn *scn = NULL;
	uint64_t v = 0;

	ck_assert_int_ge(fd, 0);
	elf_version(EV_CURRENT);
	elf = elf_begin(fd, ELF_C_READ, NULL);
	ck_assert_ptr_nonnull(elf);
	while (!v && (scn = elf_nextscn(elf, scn)) != NULL) {
		GElf_Shdr sh;
		Elf_Data *d;

		gelf_getshdr(scn, &sh);
		if (sh.sh_type != SHT_SYMTAB)
			continue;
		d = elf_getdata(scn, NULL);
		for (size_t i = 0; i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Sym s;
			const char *n;

			gelf_getsym(d, (int)i, &s);
			n = elf_strptr(elf, sh.sh_link, s.st_name);
			if (n && strcmp(n, want) == 0) {
				v = s.st_value;
				break;
			}
		}
	}
	elf_end(elf);
	close(fd);
	ck_assert_msg(v != 0, "%s not in %s", want, path);
	return v;
}

static struct elfsym *load_path(const char *path)
{
	struct elfsym *e = NULL;
	int r = elfsym_open(path, NO_DEBUG_ROOT, &e);

	ck_assert_msg(r == 0, "elfsym_open(%s) = %d", path, r);
	return e;
}

static void assert_name_at(struct elfsym *e, uint64_t vaddr, const char *want)
{
	char name[ELFSYM_NAME_MAX];
	int r = elfsym_lookup(e, vaddr, name, sizeof(name), NULL);

	ck_assert_msg(r == 0, "no symbol at 0x%llx (want %s)", (unsigned long long)vaddr, want);
	ck_assert_str_eq(name, want);
}

static void assert_no_name_at(struct elfsym *e, uint64_t vaddr)
{
	char name[ELFSYM_NAME_MAX];
	int r = elfsym_lookup(e, vaddr, name, sizeof(name), NULL);

	ck_assert_msg(r == -ENOENT, "0x%llx resolved to %s", (unsigned long long)vaddr,
		      r == 0 ? name : "?");
}

static void check_fixture_symbols(const char *file)
{
	struct elfsym *e = load(file, NO_DEBUG_ROOT);
	uint64_t v, sz, start = 0;
	char name[ELFSYM_NAME_MAX];
	size_t bid_len;

	ck_assert_int_eq(elfsym_source(e), ELFSYM_SRC_SYMTAB);
	ck_assert_ptr_nonnull(elfsym_build_id(e, &bid_len));
	ck_assert_uint_eq(bid_len, 20);
	ck_assert_int_eq(elfsym_find(e, "jp_fixture_alpha", &v, &sz), 0);
	ck_assert_uint_eq(v, raw_symbol(prog(file), "jp_fixture_alpha"));
	ck_assert_uint_gt(sz, 1);
	assert_name_at(e, v, "jp_fixture_alpha");
	ck_assert_int_eq(elfsym_lookup(e, v + sz - 1, name, sizeof(name), &start), 0);
	ck_assert_str_eq(name, "jp_fixture_alpha");
	ck_assert_uint_eq(start, v);
	assert_name_at(e, raw_symbol(prog(file), "jp_fixture_local") + 1, "jp_fixture_local");
	assert_name_at(e, raw_symbol(prog(file), "jp_fixture_beta"), "jp_fixture_beta");
	assert_name_at(e, raw_symbol(prog(file), "main"), "main");
	/* Size-aware: a data address lies above every function, so a
	 * nearest-preceding lookup would wrongly name the last function. */
	assert_no_name_at(e, raw_symbol(prog(file), "jp_fixture_data"));
	assert_no_name_at(e, 0);
	elfsym_free(e);
}

START_TEST(test_pie)
{
	check_fixture_symbols("symfix_pie");
}
END_TEST

START_TEST(test_nopie)
{
	struct elfsym *e;
	uint64_t v, sz, vaddr;

	check_fixture_symbols("symfix_nopie");
	/* ld places non-PIE segments at 0x400000 + file offset. */
	e = load("symfix_nopie", NO_DEBUG_ROOT);
	ck_assert_int_eq(elfsym_find(e, "jp_fixture_alpha", &v, &sz), 0);
	ck_assert_uint_ge(v, 0x400000);
	ck_assert_int_eq(elfsym_offset_to_vaddr(e, v - 0x400000, &vaddr), 0);
	ck_assert_uint_eq(vaddr, v);
	ck_assert_int_eq(elfsym_offset_to_vaddr(e, 1ull << 40, &vaddr), -ENOENT);
	elfsym_free(e);
}
END_TEST

START_TEST(test_stripped_dynsym)
{
	struct elfsym *e = load("symfix_stripped", NO_DEBUG_ROOT);

	ck_assert_int_eq(elfsym_source(e), ELFSYM_SRC_DYNSYM);
	/* strip keeps addresses: the unstripped link is the reference. */
	assert_name_at(e, raw_symbol(prog("symfix_rdyn"), "jp_fixture_alpha"), "jp_fixture_alpha");
	assert_name_at(e, raw_symbol(prog("symfix_rdyn"), "jp_fixture_beta") + 3, "jp_fixture_beta");
	/* A static function is not in .dynsym and must not borrow a
	 * neighbour's name. */
	assert_no_name_at(e, raw_symbol(prog("symfix_rdyn"), "jp_fixture_local"));
	elfsym_free(e);
}
END_TEST

/* Unsymbolized code is named per function: the start of the function
 * holding an address, from .eh_frame_hdr, which strip keeps; the 4 KiB
 * page without one. */
START_TEST(test_function_regions)
{
	struct elfsym *e = load("symfix_stripped", NO_DEBUG_ROOT);
	uint64_t local = raw_symbol(prog("symfix_rdyn"), "jp_fixture_local");
	uint64_t alpha = raw_symbol(prog("symfix_rdyn"), "jp_fixture_alpha");
	uint64_t beta = raw_symbol(prog("symfix_rdyn"), "jp_fixture_beta");
	uint64_t start = 0;

	assert_no_name_at(e, local + 4);
	ck_assert_int_eq(elfsym_function_start(e, local, &start), 0);
	ck_assert_uint_eq(start, local);
	/* Every address of the static function: one key, its start. */
	for (uint64_t a = local; a < local + 16; a++)
		ck_assert_uint_eq(symbols_region(e, a), local);
	ck_assert_uint_eq(symbols_region(e, alpha + 5), alpha);
	ck_assert_uint_eq(symbols_region(e, beta + 9), beta);
	ck_assert_uint_ne(symbols_region(e, alpha + 5), symbols_region(e, beta + 9));
	/* Below the first function: no table entry. */
	ck_assert_int_eq(elfsym_function_start(e, 0, &start), -ENOENT);
	ck_assert_uint_eq(symbols_region(e, 0x123), 0);
	elfsym_free(e);
	/* No ELF (unreadable file): the page. */
	ck_assert_uint_eq(symbols_region(NULL, 0x12345), 0x12000);
	ck_assert_uint_eq(symbols_region(NULL, 0x12000), 0x12000);
	ck_assert_int_eq(elfsym_function_start(NULL, 0x12345, &start), -ENOENT);
}
END_TEST

static char tmpdir[PATH_MAX];

static void make_tmpdir(void)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/jprof-elfsym-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void mkdir_p(const char *path)
{
	char tmp[PATH_MAX];

	snprintf(tmp, sizeof(tmp), "%s", path);
	for (char *p = tmp + 1; *p; p++) {
		if (*p == '/') {
			*p = '\0';
			mkdir(tmp, 0755);
			*p = '/';
		}
	}
	mkdir(tmp, 0755);
}

static void rm_rf(const char *path)
{
	char cmd[PATH_MAX + 32];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
	ck_assert_int_eq(system(cmd), 0);
}

/* <root>/.build-id/xx/rest.debug -> target */
static void link_build_id(const char *root, const uint8_t *bid, size_t len, const char *target)
{
	char dir[PATH_MAX + 32], path[PATH_MAX * 2];
	int n;

	snprintf(dir, sizeof(dir), "%s/.build-id/%02x", root, bid[0]);
	mkdir_p(dir);
	n = snprintf(path, sizeof(path), "%s/", dir);
	for (size_t i = 1; i < len; i++)
		n += snprintf(path + n, sizeof(path) - (size_t)n, "%02x", bid[i]);
	snprintf(path + n, sizeof(path) - (size_t)n, ".debug");
	ck_assert_int_eq(symlink(target, path), 0);
}

START_TEST(test_debuglink)
{
	char dir[PATH_MAX * 2], path[PATH_MAX * 3], debug[PATH_MAX];
	struct elfsym *e;
	uint64_t local = raw_symbol(prog("symfix_pie"), "jp_fixture_local");

	/* Without its debug file the stripped binary cannot name a static. */
	e = load("symfix_dbglink", NO_DEBUG_ROOT);
	ck_assert_int_ne(elfsym_source(e), ELFSYM_SRC_DEBUGLINK);
	assert_no_name_at(e, local);
	elfsym_free(e);

	make_tmpdir();
	snprintf(debug, sizeof(debug), "%s", prog("symfix.debug"));
	snprintf(dir, sizeof(dir), "%s%s", tmpdir, getenv("JPROF_PROGS_DIR"));
	mkdir_p(dir);
	snprintf(path, sizeof(path), "%s/symfix.debug", dir);
	ck_assert_int_eq(symlink(debug, path), 0);
	e = load("symfix_dbglink", tmpdir);
	ck_assert_int_eq(elfsym_source(e), ELFSYM_SRC_DEBUGLINK);
	assert_name_at(e, local, "jp_fixture_local");
	assert_name_at(e, raw_symbol(prog("symfix_pie"), "jp_fixture_alpha"), "jp_fixture_alpha");
	elfsym_free(e);
	rm_rf(tmpdir);
}
END_TEST

START_TEST(test_build_id_debug)
{
	struct elfsym *e, *ref;
	const uint8_t *bid;
	size_t len;
	char debug[PATH_MAX];
	uint64_t local = raw_symbol(prog("symfix_pie"), "jp_fixture_local");

	snprintf(debug, sizeof(debug), "%s", prog("symfix.debug"));
	ref = load("symfix_pie", NO_DEBUG_ROOT);
	e = load("symfix_dbglink", NO_DEBUG_ROOT);
	bid = elfsym_build_id(e, &len);
	ck_assert_ptr_nonnull(bid);
	{
		size_t rlen;
		const uint8_t *rbid = elfsym_build_id(ref, &rlen);

		ck_assert_uint_eq(len, rlen);
		ck_assert_mem_eq(bid, rbid, len);  /* strip and objcopy keep it */
	}
	make_tmpdir();
	link_build_id(tmpdir, bid, len, debug);
	elfsym_free(e);
	e = load("symfix_dbglink", tmpdir);
	ck_assert_int_eq(elfsym_source(e), ELFSYM_SRC_DEBUG_BUILD_ID);
	assert_name_at(e, local, "jp_fixture_local");
	elfsym_free(e);
	elfsym_free(ref);
	rm_rf(tmpdir);

	/* A debug file whose build-id differs from the binary is ignored. */
	e = load("symfix_stripped", NO_DEBUG_ROOT);
	bid = elfsym_build_id(e, &len);
	make_tmpdir();
	link_build_id(tmpdir, bid, len, debug);
	elfsym_free(e);
	e = load("symfix_stripped", tmpdir);
	ck_assert_int_eq(elfsym_source(e), ELFSYM_SRC_DYNSYM);
	elfsym_free(e);
	rm_rf(tmpdir);
}
END_TEST

START_TEST(test_cxx_and_rust_demangling)
{
	struct elfsym *e = load("symfix_cxx", NO_DEBUG_ROOT);
	char out[ELFSYM_NAME_MAX];
	uint64_t v, sz;

	ck_assert_int_eq(elfsym_find(e, "_ZN5jpfix6Widget7computeEi", &v, &sz), 0);
	assert_name_at(e, v + 1, "jpfix::Widget::compute(int)");
	elfsym_free(e);

	elfsym_format_name("_ZN4core3fmt9Formatter3pad17h0123456789abcdefE", out, sizeof(out));
	ck_assert_str_eq(out, "core::fmt::Formatter::pad");  /* Rust legacy, hash dropped */
	elfsym_format_name("_RNvCs15kBYyAo9fc_7mycrate7example", out, sizeof(out));
	ck_assert_str_eq(out, "mycrate::example");            /* Rust v0 */
	elfsym_format_name("_RNvNtCs1234_7mycrate6module4func", out, sizeof(out));
	ck_assert_str_eq(out, "mycrate::module::func");
	elfsym_format_name("_ZN3foo3barEv", out, sizeof(out));
	ck_assert_str_eq(out, "foo::bar()");
	elfsym_format_name("main", out, sizeof(out));
	ck_assert_str_eq(out, "main");
	elfsym_format_name("_Znot_really_mangled", out, sizeof(out));
	ck_assert_str_eq(out, "_Znot_really_mangled");
}
END_TEST

START_TEST(test_sanitize)
{
	char out[64];

	elfsym_sanitize("a\x01" "b\x7f", 4, out, sizeof(out));
	ck_assert_str_eq(out, "a\\x01b\\x7f");
	elfsym_sanitize("caf\xc3\xa9", 5, out, sizeof(out));
	ck_assert_str_eq(out, "caf\xc3\xa9");                    /* valid UTF-8 kept */
	elfsym_sanitize("\xff\xc0\xaf", 3, out, sizeof(out));
	ck_assert_str_eq(out, "\\xff\\xc0\\xaf");                /* invalid, overlong */
	elfsym_sanitize("\xed\xa0\x80", 3, out, sizeof(out));
	ck_assert_str_eq(out, "\\xed\\xa0\\x80");                /* surrogate */
	elfsym_sanitize("\xc2\x85", 2, out, sizeof(out));
	ck_assert_str_eq(out, "\\xc2\\x85");                     /* C1 control */
	elfsym_sanitize("x\xe2\x82", 3, out, sizeof(out));
	ck_assert_str_eq(out, "x\\xe2\\x82");                    /* truncated sequence */
	/* Truncation never splits a character or an escape. */
	ck_assert_uint_eq(elfsym_sanitize("ab\xc3\xa9", 4, out, 4), 2);
	ck_assert_str_eq(out, "ab");
	ck_assert_uint_eq(elfsym_sanitize("a\x01", 2, out, 5), 1);
	ck_assert_str_eq(out, "a");
}
END_TEST

static void copy_file(const char *from, const char *to, size_t *size)
{
	char buf[65536];
	ssize_t n;
	int in = open(from, O_RDONLY | O_CLOEXEC);
	int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	ck_assert_int_ge(in, 0);
	ck_assert_int_ge(out, 0);
	*size = 0;
	while ((n = read(in, buf, sizeof(buf))) > 0) {
		ck_assert_int_eq(write(out, buf, (size_t)n), n);
		*size += (size_t)n;
	}
	close(in);
	close(out);
}

static void poke(const char *path, off_t off, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pwrite(fd, data, len, off), (ssize_t)len);
	close(fd);
}

/* Loads a damaged file and, if it loads at all, uses it: neither may crash
 * or read out of bounds (the ASan build checks the latter). */
static int exercise(const char *path)
{
	struct elfsym *e = NULL;
	char name[ELFSYM_NAME_MAX];
	uint64_t v;
	int r = elfsym_open(path, NO_DEBUG_ROOT, &e);

	if (r == 0) {
		for (uint64_t a = 0; a < 0x3000; a += 7)
			elfsym_lookup(e, a, name, sizeof(name), NULL);
		elfsym_offset_to_vaddr(e, 0x1000, &v);
		elfsym_free(e);
	} else {
		ck_assert_ptr_null(e);
	}
	return r;
}

START_TEST(test_corrupt)
{
	char path[PATH_MAX + 16];
	size_t size;
	static const size_t cuts[] = { 0, 4, 16, 63, 64, 200 };
	unsigned seed = 4242;

	make_tmpdir();
	snprintf(path, sizeof(path), "%s/bad", tmpdir);

	for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++) {
		copy_file(prog("symfix_pie"), path, &size);
		ck_assert_int_eq(truncate(path, (off_t)cuts[i]), 0);
		ck_assert_int_eq(exercise(path), -ENOEXEC);
	}
	/* Section headers live at the end: half a file has none to read. */
	copy_file(prog("symfix_pie"), path, &size);
	ck_assert_int_eq(truncate(path, (off_t)(size / 2)), 0);
	ck_assert_int_eq(exercise(path), -ENOEXEC);
	for (size_t cut = size / 2; cut < size; cut += 97) {
		copy_file(prog("symfix_pie"), path, &size);
		ck_assert_int_eq(truncate(path, (off_t)cut), 0);
		exercise(path);
	}

	/* Broken magic. */
	copy_file(prog("symfix_pie"), path, &size);
	poke(path, 1, "XYZ", 3);
	ck_assert_int_eq(exercise(path), -ENOEXEC);

	/* e_shoff far past the end of the file. */
	{
		uint64_t shoff = 1ull << 40;

		copy_file(prog("symfix_pie"), path, &size);
		poke(path, 0x28, &shoff, sizeof(shoff));
		ck_assert_int_eq(exercise(path), -ENOEXEC);
	}

	/* Random damage in the headers and in the tables at the end. */
	for (int iter = 0; iter < 300; iter++) {
		copy_file(prog("symfix_pie"), path, &size);
		for (int k = 0; k < 8; k++) {
			uint8_t byte = (uint8_t)rand_r(&seed);
			off_t off = k % 2 ? (off_t)(rand_r(&seed) % 256)
					  : (off_t)(size - 1 - (size_t)rand_r(&seed) % 4096);

			poke(path, off, &byte, 1);
		}
		exercise(path);
	}

	/* Not a regular file. */
	ck_assert_int_lt(exercise(tmpdir), 0);
	rm_rf(tmpdir);
}
END_TEST

/* 200,000 symbols sharing one 255-byte name over 1000 addresses (a 4.8 MB
 * file): held as 1000 entries and one copy of the name, and formatted once.
 * Each symbol copied its name before: 51 MB. */
START_TEST(test_shared_name)
{
	struct bigsym_spec sp = { .nsyms = 200000, .text_size = 16000, .name_of = bigsym_name_one,
				  .bind = STB_GLOBAL };
	char path[PATH_MAX + 16], want[300];
	struct elfsym *e;
	size_t after_load;
	char *strtab = bigsym_one_name(255, 'f', &sp.strtab_len);

	sp.strtab = strtab;
	make_tmpdir();
	snprintf(path, sizeof(path), "%s/shared", tmpdir);
	ck_assert_int_eq(bigsym_write(path, &sp), 0);
	e = load_path(path);
	ck_assert_uint_eq(elfsym_count(e), 1000);
	ck_assert_int_eq(elfsym_names(e), ELFSYM_NAMES_READ);
	after_load = elfsym_mem_bytes(e);
	ck_assert_msg(after_load < 64 * 1024, "holds %zu bytes", after_load);
	memset(want, 'f', 255);
	want[255] = '\0';
	for (uint64_t a = BIGSYM_TEXT; a < BIGSYM_TEXT + 16000; a += 16)
		assert_name_at(e, a + 3, want);
	/* One formatted name for all of them. */
	ck_assert_msg(elfsym_mem_bytes(e) < after_load + 4096 + 2048, "%zu bytes after lookups",
		      elfsym_mem_bytes(e));
	elfsym_free(e);
	free(strtab);
	rm_rf(tmpdir);
}
END_TEST

/* Every symbol names a different suffix of one 64 KiB string: the names
 * overlap, so copying each would take 2 GB; the string table is kept once. */
START_TEST(test_overlapping_names)
{
	struct bigsym_spec sp = { .nsyms = 65536, .text_size = 65536 * 16,
				  .name_of = bigsym_name_suffix, .bind = STB_GLOBAL };
	char path[PATH_MAX + 16], name[ELFSYM_NAME_MAX];
	struct elfsym *e;
	char *strtab = bigsym_one_name(65536, 'a', &sp.strtab_len);

	sp.strtab = strtab;
	make_tmpdir();
	snprintf(path, sizeof(path), "%s/overlap", tmpdir);
	ck_assert_int_eq(bigsym_write(path, &sp), 0);
	e = load_path(path);
	ck_assert_uint_eq(elfsym_count(e), 65536);
	ck_assert_msg(elfsym_mem_bytes(e) < 65536 * 16 + sp.strtab_len + 16384,
		      "holds %zu bytes", elfsym_mem_bytes(e));
	/* The last symbol's name is the shortest suffix, "a". */
	ck_assert_int_eq(elfsym_lookup(e, BIGSYM_TEXT + 65535 * 16, name, sizeof(name), NULL), 0);
	ck_assert_str_eq(name, "a");
	/* The first ones are 64 KiB long: shown up to the name limit. */
	ck_assert_int_eq(elfsym_lookup(e, BIGSYM_TEXT, name, sizeof(name), NULL), 0);
	ck_assert_uint_eq(strlen(name), ELFSYM_NAME_MAX - 1);
	elfsym_free(e);
	free(strtab);
	rm_rf(tmpdir);
}
END_TEST

/* A table past max_bytes or max_entries is not read; the file keeps its
 * segments, and says how much the table would have needed. */
START_TEST(test_limits)
{
	struct bigsym_spec sp = { .nsyms = 100000, .text_size = 16000, .name_of = bigsym_name_one,
				  .bind = STB_GLOBAL };
	size_t need = (sp.nsyms + 1) * 16 + 257 + 1;
	char path[PATH_MAX + 16];
	struct elfsym_limits lim = { 0 };
	struct elfsym *e;
	uint64_t v;
	int fd;
	char *strtab = bigsym_one_name(255, 'g', &sp.strtab_len);

	sp.strtab = strtab;
	make_tmpdir();
	snprintf(path, sizeof(path), "%s/big", tmpdir);
	ck_assert_int_eq(bigsym_write(path, &sp), 0);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);

	lim.max_bytes = need - 1;
	ck_assert_int_eq(elfsym_open_fd_limited(fd, path, NO_DEBUG_ROOT, &lim, &e), 0);
	ck_assert_int_eq(elfsym_names(e), ELFSYM_NAMES_OVER_BUDGET);
	ck_assert_uint_eq(elfsym_table_bytes(e), need);
	ck_assert_uint_eq(elfsym_count(e), 0);
	ck_assert_int_eq(elfsym_offset_to_vaddr(e, BIGSYM_TEXT + 5, &v), 0);
	ck_assert_uint_eq(v, BIGSYM_TEXT + 5);
	ck_assert_uint_lt(elfsym_mem_bytes(e), 16384);
	elfsym_free(e);

	lim.max_bytes = need;
	lim.max_entries = 65536;
	ck_assert_int_eq(elfsym_open_fd_limited(fd, path, NO_DEBUG_ROOT, &lim, &e), 0);
	ck_assert_int_eq(elfsym_names(e), ELFSYM_NAMES_DEFERRED);
	ck_assert_uint_eq(elfsym_count(e), 0);
	elfsym_free(e);

	lim.max_entries = 0;
	ck_assert_int_eq(elfsym_open_fd_limited(fd, path, NO_DEBUG_ROOT, &lim, &e), 0);
	ck_assert_int_eq(elfsym_names(e), ELFSYM_NAMES_READ);
	ck_assert_uint_eq(elfsym_count(e), 1000);
	ck_assert_uint_eq(elfsym_table_bytes(e), 0);
	elfsym_free(e);
	close(fd);
	free(strtab);
	rm_rf(tmpdir);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("elfsym");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	int failed;

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_pie);
	tcase_add_test(tc, test_nopie);
	tcase_add_test(tc, test_stripped_dynsym);
	tcase_add_test(tc, test_function_regions);
	tcase_add_test(tc, test_debuglink);
	tcase_add_test(tc, test_build_id_debug);
	tcase_add_test(tc, test_cxx_and_rust_demangling);
	tcase_add_test(tc, test_sanitize);
	tcase_add_test(tc, test_corrupt);
	tcase_add_test(tc, test_shared_name);
	tcase_add_test(tc, test_overlapping_names);
	tcase_add_test(tc, test_limits);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
