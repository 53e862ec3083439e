/* Unit tests of the disk cache of built unwind tables
 * (daemon/unwind/unwcache.c): real binaries, real files in a temporary
 * directory. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_main.h"
#include "unwcache.h"

/* A binary every test machine has, with CFI and a build-id. */
#define BIN "/usr/bin/tail"

static char tmp[64];
static char dir[128];

static void setup(void)
{
	snprintf(tmp, sizeof(tmp), "/tmp/jprof-unwcache-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmp));
	snprintf(dir, sizeof(dir), "%s/cache", tmp);
}

static void teardown(void)
{
	char cmd[160];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
	ck_assert_int_eq(system(cmd), 0);
}

static void copy(const char *from, const char *to)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "cp %s %s", from, to);
	ck_assert_int_eq(system(cmd), 0);
}

static struct cfi_table *build(const char *path, struct unwcache *c, struct unwcache_key *key)
{
	struct cfi_table *t = NULL;
	enum cfi_error why;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(cfi_build_fd(fd, -1, &(struct cfi_limits){ .max_rows = 1u << 24 }, &t, &why), 0);
	if (c)
		ck_assert_int_eq(unwcache_key(c, fd, -1, key), 0);
	close(fd);
	return t;
}

static void assert_same(const struct cfi_table *a, const struct cfi_table *b)
{
	ck_assert_uint_eq(a->n, b->n);
	ck_assert_uint_eq(a->nsegs, b->nsegs);
	ck_assert_mem_eq(a->segs, b->segs, sizeof(a->segs));
	ck_assert_int_eq(memcmp(a->rows, b->rows, a->n * sizeof(*a->rows)), 0);
}

/* The file offset of section name's first byte. */
static uint64_t section_offset(const char *path, const char *name)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	Elf *elf;
	Elf_Scn *scn = NULL;
	size_t shstr;
	uint64_t off = 0;

	ck_assert_int_ge(fd, 0);
	elf_version(EV_CURRENT);
	elf = elf_begin(fd, ELF_C_READ, NULL);
	ck_assert_ptr_nonnull(elf);
	ck_assert_int_eq(elf_getshdrstrndx(elf, &shstr), 0);
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		const char *n;

		if (gelf_getshdr(scn, &sh) && (n = elf_strptr(elf, shstr, sh.sh_name)) &&
		    strcmp(n, name) == 0)
			off = sh.sh_offset;
	}
	elf_end(elf);
	close(fd);
	ck_assert_uint_ne(off, 0);
	return off;
}

/* Adds one to the byte at off. */
static void poke(const char *path, uint64_t off)
{
	int fd = open(path, O_RDWR | O_CLOEXEC);
	uint8_t b;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &b, 1, (off_t)off), 1);
	b++;
	ck_assert_int_eq(pwrite(fd, &b, 1, (off_t)off), 1);
	close(fd);
}

static const struct unwcache_src root_src = { .uid = 0, .root_only = true };

/* Written, then read back: the same rows and segments as the build; the
 * same key for a copy of the file elsewhere; found again after the cache
 * is opened anew (a restart). */
START_TEST(test_same_rows)
{
	struct unwcache *c;
	struct unwcache_key k1, k2;
	struct cfi_table *built, *got = NULL, *copy_t;
	struct unwcache_stats st;
	char other[128];

	ck_assert_int_eq(unwcache_open(dir, 0, &c), 0);
	ck_assert_ptr_nonnull(c);
	built = build(BIN, c, &k1);
	ck_assert_int_eq(unwcache_get(c, &k1, &root_src, 1u << 24, &got), -ENOENT);
	ck_assert_int_eq(unwcache_put(c, &k1, &root_src, built), 0);
	unwcache_free(c);

	ck_assert_int_eq(unwcache_open(dir, 0, &c), 0);
	ck_assert_int_eq(unwcache_get(c, &k1, &root_src, 1u << 24, &got), 0);
	assert_same(built, got);
	snprintf(other, sizeof(other), "%s/copy", tmp);
	copy(BIN, other);
	copy_t = build(other, c, &k2);
	ck_assert_mem_eq(k1.sha, k2.sha, sizeof(k1.sha));
	assert_same(copy_t, got);
	/* Fewer rows allowed than it has: not served. */
	cfi_table_free(got);
	got = NULL;
	ck_assert_int_eq(unwcache_get(c, &k1, &root_src, built->n - 1, &got), -EBADMSG);
	unwcache_get_stats(c, &st);
	ck_assert_uint_eq(st.hits, 1);
	ck_assert_uint_eq(st.rejected, 1);
	cfi_table_free(built);
	cfi_table_free(copy_t);
	unwcache_free(c);
}
END_TEST

/* A copy with the same build-id whose .eh_frame differs by one byte has
 * another key: the cached table of the original is never its table. A
 * byte changed where the builder does not read (.text) keeps the key, and
 * the build of that file gives the same rows: same key, same rows. */
START_TEST(test_same_build_id_other_content)
{
	struct unwcache *c;
	struct unwcache_key k0, k1, k2;
	struct cfi_table *t0, *t2, *got = NULL;
	char a[128], b[128];
	uint8_t bid0[64], bid1[64];
	int fd, n0, n1;

	ck_assert_int_eq(unwcache_open(dir, 0, &c), 0);
	t0 = build(BIN, c, &k0);
	ck_assert_int_eq(unwcache_put(c, &k0, &root_src, t0), 0);

	snprintf(a, sizeof(a), "%s/eh", tmp);
	copy(BIN, a);
	poke(a, section_offset(a, ".eh_frame") + 64);
	fd = open(BIN, O_RDONLY | O_CLOEXEC);
	n0 = cfi_read_build_id(fd, bid0, sizeof(bid0));
	close(fd);
	fd = open(a, O_RDONLY | O_CLOEXEC);
	n1 = cfi_read_build_id(fd, bid1, sizeof(bid1));
	ck_assert_int_eq(unwcache_key(c, fd, -1, &k1), 0);
	close(fd);
	ck_assert_int_gt(n0, 0);
	ck_assert_int_eq(n0, n1);
	ck_assert_mem_eq(bid0, bid1, (size_t)n0);
	ck_assert_int_ne(memcmp(k0.sha, k1.sha, sizeof(k0.sha)), 0);
	ck_assert_int_eq(unwcache_get(c, &k1, &root_src, 1u << 24, &got), -ENOENT);

	snprintf(b, sizeof(b), "%s/text", tmp);
	copy(BIN, b);
	poke(b, section_offset(b, ".text") + 64);
	t2 = build(b, c, &k2);
	ck_assert_mem_eq(k0.sha, k2.sha, sizeof(k0.sha));
	assert_same(t0, t2);
	cfi_table_free(t0);
	cfi_table_free(t2);
	unwcache_free(c);
}
END_TEST

/* The entry of key, as a path. */
static void entry_path(const struct unwcache_key *k, const char *suffix, char *out, size_t len)
{
	size_t o = (size_t)snprintf(out, len, "%s/", dir);

	for (size_t i = 0; i < sizeof(k->sha); i++)
		o += (size_t)snprintf(out + o, len - o, "%02x", k->sha[i]);
	snprintf(out + o, len - o, "%s", suffix);
}

/* A corrupt entry (one byte of its rows changed), a truncated one, one
 * readable by others, a link in its place: each refused and removed (the
 * link too), and the table built again and written anew. */
START_TEST(test_corrupt_rejected)
{
	struct unwcache *c;
	struct unwcache_key k;
	struct cfi_table *t, *got = NULL;
	struct unwcache_stats st;
	char path[256], moved[128];
	struct stat sb;

	ck_assert_int_eq(unwcache_open(dir, 0, &c), 0);
	t = build(BIN, c, &k);
	entry_path(&k, ".uwt", path, sizeof(path));

	ck_assert_int_eq(unwcache_put(c, &k, &root_src, t), 0);
	poke(path, 300);
	ck_assert_int_eq(unwcache_get(c, &k, &root_src, 1u << 24, &got), -EBADMSG);
	ck_assert_int_eq(stat(path, &sb), -1);

	ck_assert_int_eq(unwcache_put(c, &k, &root_src, t), 0);
	ck_assert_int_eq(stat(path, &sb), 0);
	ck_assert_int_eq(truncate(path, sb.st_size - 1), 0);
	ck_assert_int_eq(unwcache_get(c, &k, &root_src, 1u << 24, &got), -EBADMSG);

	ck_assert_int_eq(unwcache_put(c, &k, &root_src, t), 0);
	ck_assert_int_eq(chmod(path, 0644), 0);
	ck_assert_int_eq(unwcache_get(c, &k, &root_src, 1u << 24, &got), -EBADMSG);

	ck_assert_int_eq(unwcache_put(c, &k, &root_src, t), 0);
	snprintf(moved, sizeof(moved), "%s/moved", tmp);
	ck_assert_int_eq(rename(path, moved), 0);
	ck_assert_int_eq(symlink(moved, path), 0);
	ck_assert_int_eq(unwcache_get(c, &k, &root_src, 1u << 24, &got), -EBADMSG);
	ck_assert_int_eq(lstat(path, &sb), -1);
	ck_assert_ptr_null(got);

	ck_assert_int_eq(unwcache_put(c, &k, &root_src, t), 0);
	ck_assert_int_eq(unwcache_get(c, &k, &root_src, 1u << 24, &got), 0);
	assert_same(t, got);
	unwcache_get_stats(c, &st);
	ck_assert_uint_eq(st.rejected, 4);
	cfi_table_free(t);
	cfi_table_free(got);
	unwcache_free(c);
}
END_TEST

/* An entry from a user's file serves that user's files only: never a
 * root-owned file, never another user's. One from a root file serves all. */
START_TEST(test_owner)
{
	struct unwcache *c;
	struct unwcache_key k;
	struct cfi_table *t, *got = NULL;
	struct unwcache_src nobody = { .uid = 65534 }, other = { .uid = 1000 };
	char from[256], to[256];

	ck_assert_int_eq(unwcache_open(dir, 0, &c), 0);
	t = build(BIN, c, &k);
	ck_assert_int_eq(unwcache_put(c, &k, &nobody, t), 0);
	ck_assert_int_eq(unwcache_get(c, &k, &root_src, 1u << 24, &got), -ENOENT);
	ck_assert_int_eq(unwcache_get(c, &k, &other, 1u << 24, &got), -ENOENT);
	ck_assert_int_eq(unwcache_get(c, &k, &nobody, 1u << 24, &got), 0);
	cfi_table_free(got);
	got = NULL;
	/* Its header says whose it is: renamed as a root file's entry, or as
	 * another user's, it is refused all the same. */
	entry_path(&k, "-65534.uwt", from, sizeof(from));
	entry_path(&k, ".uwt", to, sizeof(to));
	ck_assert_int_eq(rename(from, to), 0);
	ck_assert_int_eq(unwcache_get(c, &k, &root_src, 1u << 24, &got), -EBADMSG);
	ck_assert_int_eq(unwcache_put(c, &k, &nobody, t), 0);
	entry_path(&k, "-1000.uwt", to, sizeof(to));
	ck_assert_int_eq(rename(from, to), 0);
	ck_assert_int_eq(unwcache_get(c, &k, &other, 1u << 24, &got), -EBADMSG);
	ck_assert_ptr_null(got);
	ck_assert_int_eq(unwcache_put(c, &k, &root_src, t), 0);
	ck_assert_int_eq(unwcache_get(c, &k, &other, 1u << 24, &got), 0);
	assert_same(t, got);
	cfi_table_free(got);
	cfi_table_free(t);
	unwcache_free(c);
}
END_TEST

/* Past its size the least recently used entries go (a hit counts as a
 * use); the directory stays within the bound. */
START_TEST(test_bounded_lru)
{
	struct unwcache *c;
	struct unwcache_key k[6];
	struct cfi_table *t, *got = NULL;
	struct unwcache_stats st;
	char path[256];
	struct stat sb;
	uint64_t one;

	ck_assert_int_eq(unwcache_open(dir, 0, &c), 0);
	t = build(BIN, c, &k[0]);
	ck_assert_int_eq(unwcache_put(c, &k[0], &root_src, t), 0);
	unwcache_get_stats(c, &st);
	one = st.bytes;
	unwcache_free(c);
	/* Room for three and a half. */
	ck_assert_int_eq(unwcache_open(dir, one * 7 / 2, &c), 0);
	for (int i = 1; i < 6; i++) {
		memcpy(&k[i], &k[0], sizeof(k[0]));
		k[i].sha[0] ^= (uint8_t)i;  /* other keys, the same table */
		usleep(10000);               /* mtimes apart */
		ck_assert_int_eq(unwcache_put(c, &k[i], &root_src, t), 0);
		if (i == 2)
			ck_assert_int_eq(unwcache_get(c, &k[0], &root_src, 1u << 24, &got), 0);
		cfi_table_free(got);
		got = NULL;
		if (i != 3)
			continue;
		/* Four entries: the least recently used went, k[1], not k[0]
		 * (written first, used after k[1] and k[2] were written). */
		entry_path(&k[0], ".uwt", path, sizeof(path));
		ck_assert_int_eq(stat(path, &sb), 0);
		entry_path(&k[1], ".uwt", path, sizeof(path));
		ck_assert_int_eq(stat(path, &sb), -1);
	}
	unwcache_get_stats(c, &st);
	ck_assert_uint_le(st.bytes, one * 7 / 2);
	ck_assert_uint_eq(st.files, 3);
	ck_assert_uint_ge(st.evicted, 3);
	entry_path(&k[5], ".uwt", path, sizeof(path));
	ck_assert_int_eq(stat(path, &sb), 0);   /* the newest */
	cfi_table_free(t);
	unwcache_free(c);
}
END_TEST

/* The directory is made 0700; under a parent others may write (not
 * sticky), or through a link, the cache is off. */
START_TEST(test_unsafe_dir)
{
	struct unwcache *c;
	char p[256], l[256];
	struct stat sb;

	ck_assert_int_eq(unwcache_open(dir, 0, &c), 0);
	ck_assert_ptr_nonnull(c);
	ck_assert_int_eq(stat(dir, &sb), 0);
	ck_assert_uint_eq(sb.st_mode & 07777, 0700);
	unwcache_free(c);

	snprintf(p, sizeof(p), "%s/open", tmp);
	ck_assert_int_eq(mkdir(p, 0777), 0);
	ck_assert_int_eq(chmod(p, 0777), 0);
	snprintf(p, sizeof(p), "%s/open/cache", tmp);
	ck_assert_int_eq(unwcache_open(p, 0, &c), 0);
	ck_assert_ptr_null(c);

	snprintf(l, sizeof(l), "%s/link", tmp);
	ck_assert_int_eq(symlink(dir, l), 0);
	ck_assert_int_eq(unwcache_open(l, 0, &c), 0);
	ck_assert_ptr_null(c);
	ck_assert_int_eq(unwcache_open("off", 0, &c), 0);
	ck_assert_ptr_null(c);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("unwcache");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_same_rows);
	tcase_add_test(tc, test_same_build_id_other_content);
	tcase_add_test(tc, test_corrupt_rejected);
	tcase_add_test(tc, test_owner);
	tcase_add_test(tc, test_bounded_lru);
	tcase_add_test(tc, test_unsafe_dir);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return jprof_check_run(suite());
}
