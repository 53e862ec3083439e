#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/auxv.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "procmaps.h"

START_TEST(test_self_maps)
{
	struct procmaps *m = NULL;
	const struct procmaps_entry *e;
	unsigned long vdso = getauxval(AT_SYSINFO_EHDR);

	ck_assert_int_eq(procmaps_read("/proc/self/maps", &m), 0);
	ck_assert_uint_gt(m->count, 3);
	ck_assert_uint_eq(m->skipped, 0);
	for (size_t i = 1; i < m->count; i++)
		ck_assert_uint_le(m->entries[i - 1].end, m->entries[i].start);

	e = procmaps_find(m, (uint64_t)(uintptr_t)&procmaps_parse_line);
	ck_assert_ptr_nonnull(e);
	ck_assert(e->perms & PROCMAPS_EXEC);
	ck_assert(!(e->perms & PROCMAPS_SHARED));
	ck_assert_ptr_nonnull(strstr(e->path, "test_procmaps"));
	ck_assert(!e->deleted);
	ck_assert_uint_ne(e->inode, 0);
	ck_assert(!procmaps_is_anon(e));

	/* AT_EXECFN points into the initial stack; a local might not (ASan's
	 * fake stack lives on the heap). */
	e = procmaps_find(m, (uint64_t)getauxval(AT_EXECFN));
	ck_assert_ptr_nonnull(e);
	ck_assert_str_eq(e->path, "[stack]");
	ck_assert(procmaps_is_anon(e));

	if (vdso) {
		e = procmaps_find(m, vdso);
		ck_assert_ptr_nonnull(e);
		ck_assert_str_eq(e->path, "[vdso]");
		ck_assert(!procmaps_is_anon(e));
	}
	ck_assert_ptr_null(procmaps_find(m, 0));
	procmaps_free(m);
}
END_TEST

START_TEST(test_tricky_lines)
{
	static const char text[] =
		"7f0000001000-7f0000002000 r-xp 00001000 fd:01 123456                     /opt/my app/lib foo.so (deleted)\n"
		"7f0000000000-7f0000001000 r--p 00000000 fd:01 123456 /opt/my app/lib foo.so\n"
		"7f0000003000-7f0000004000 rwxp 00000000 00:00 0 \n"
		"7f0000004000-7f0000005000 r-xs 00000000 00:00 0\n"
		"7f0000005000-7f0000006000 r-xp 00000000 00:00 0                          [anon:jit code]\n"
		"7f0000006000-7f0000007000 r-xp 00002000 103:0a 99 /path/with (deleted) inside\n"
		"ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]\n";
	struct procmaps *m = NULL;
	const struct procmaps_entry *e;

	ck_assert_int_eq(procmaps_parse(text, strlen(text), &m), 0);
	ck_assert_uint_eq(m->count, 7);
	ck_assert_uint_eq(m->skipped, 0);
	/* Sorted although the input was not. */
	ck_assert_uint_eq(m->entries[0].start, 0x7f0000000000ull);

	e = procmaps_find(m, 0x7f0000001800ull);
	ck_assert_ptr_nonnull(e);
	ck_assert_str_eq(e->path, "/opt/my app/lib foo.so");
	ck_assert(e->deleted);
	ck_assert_uint_eq(e->offset, 0x1000);
	ck_assert_uint_eq(e->dev_major, 0xfd);
	ck_assert_uint_eq(e->dev_minor, 1);
	ck_assert_uint_eq(e->inode, 123456);
	ck_assert_uint_eq(e->perms, PROCMAPS_READ | PROCMAPS_EXEC);

	e = procmaps_find(m, 0x7f0000003000ull);
	ck_assert_str_eq(e->path, "");
	ck_assert_uint_eq(e->perms, PROCMAPS_READ | PROCMAPS_WRITE | PROCMAPS_EXEC);
	ck_assert(procmaps_is_anon(e));

	e = procmaps_find(m, 0x7f0000004fffull);
	ck_assert(e->perms & PROCMAPS_SHARED);

	e = procmaps_find(m, 0x7f0000005000ull);
	ck_assert_str_eq(e->path, "[anon:jit code]");
	ck_assert(procmaps_is_anon(e));

	e = procmaps_find(m, 0x7f0000006000ull);
	ck_assert_str_eq(e->path, "/path/with (deleted) inside");
	ck_assert(!e->deleted);
	ck_assert_uint_eq(e->dev_major, 0x103);
	ck_assert_uint_eq(e->dev_minor, 0xa);

	e = procmaps_find(m, 0xffffffffff600000ull);
	ck_assert_str_eq(e->path, "[vsyscall]");
	ck_assert_uint_eq(e->perms, PROCMAPS_EXEC);

	ck_assert_ptr_null(procmaps_find(m, 0x7f0000007000ull));  /* end is exclusive */
	procmaps_free(m);
}
END_TEST

START_TEST(test_garbage)
{
	static const char *bad[] = {
		"",
		"garbage",
		"7f00-",
		"7f00-7f10",
		"7f10-7f00 r-xp 00000000 00:00 0 /end-before-start",
		"7f00-7f10 rxp 00000000 00:00 0 /short-perms",
		"7f00-7f10 r-xq 00000000 00:00 0 /bad-perm",
		"7f00-7f10 r-xp zz 00:00 0 /bad-offset",
		"7f00-7f10 r-xp 0 0000 0 /no-colon",
		"7f00-7f10 r-xp 0 00:00 /no-inode",
		"7f00-7f10 r-xp 0 00:00 12x/glued",
		"11111111111111111111-7f10 r-xp 0 00:00 0 /overflow",
		"7f00-7f10 r-xp 0 00:00 99999999999999999999999 /inode-overflow",
	};
	struct procmaps_entry e;
	struct procmaps *m = NULL;
	char text[4096];
	size_t len = 0;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_int_eq(procmaps_parse_line(bad[i], strlen(bad[i]), &e), -EINVAL);
		len += (size_t)snprintf(text + len, sizeof(text) - len, "%s\n", bad[i]);
	}
	len += (size_t)snprintf(text + len, sizeof(text) - len,
				"1000-2000 r-xp 00000000 08:01 7 /good\n");
	ck_assert_int_eq(procmaps_parse(text, len, &m), 0);
	ck_assert_uint_eq(m->count, 1);
	ck_assert_uint_eq(m->skipped, sizeof(bad) / sizeof(bad[0]) - 1);  /* "" is no line */
	ck_assert_str_eq(m->entries[0].path, "/good");
	procmaps_free(m);

	/* NUL inside a line is rejected, not truncated into a shorter path. */
	ck_assert_int_eq(procmaps_parse_line("1000-2000 r-xp 0 00:00 0 /a\0b", 29, &e), -EINVAL);
}
END_TEST

START_TEST(test_random_bytes)
{
	char text[2048];
	unsigned seed = 12345;

	for (int iter = 0; iter < 2000; iter++) {
		struct procmaps *m = NULL;
		size_t len = (size_t)(rand_r(&seed) % (int)sizeof(text));

		for (size_t i = 0; i < len; i++) {
			int r = rand_r(&seed) % 8;

			/* Bias towards characters that appear in real lines. */
			text[i] = r == 0 ? '\n' : r == 1 ? ' ' : r == 2 ? '-' : r < 5 ?
				  "0123456789abcdef"[rand_r(&seed) % 16] : (char)rand_r(&seed);
		}
		ck_assert_int_eq(procmaps_parse(text, len, &m), 0);
		for (size_t i = 0; i < m->count; i++)
			ck_assert_uint_lt(m->entries[i].start, m->entries[i].end);
		procmaps_free(m);
	}
	procmaps_free(NULL);
}
END_TEST

START_TEST(test_fuse_devices)
{
	static const char text[] =
		"22 1 0:21 / /proc rw,nosuid - proc proc rw\n"
		"42 27 0:39 / /mnt/a rw,nosuid - fuse /src rw,user_id=0,group_id=0\n"
		"43 27 0:40 / /mnt/b rw - fuse.sshfs host:/ rw,user_id=1000\n"
		"44 27 8:1 / / rw - ext4 /dev/sda1 rw\n"
		"45 27 0:41 / /mnt/c rw - tmpfs fuse rw\n";
	char path[] = "/tmp/test_procmaps_mi_XXXXXX";
	struct procmaps_entry e = { .dev_major = 0, .dev_minor = 40 };
	unsigned devs[8];
	int fd = mkstemp(path);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, text, sizeof(text) - 1), (ssize_t)sizeof(text) - 1);
	close(fd);
	ck_assert_uint_eq(procmaps_fuse_devices(path, devs, 8), 2);
	ck_assert(procmaps_on_devices(&e, devs, 2));
	e.dev_minor = 41;  /* tmpfs whose source is named "fuse" */
	ck_assert(!procmaps_on_devices(&e, devs, 2));
	e.dev_major = 8;
	e.dev_minor = 1;
	ck_assert(!procmaps_on_devices(&e, devs, 2));
	ck_assert_uint_eq(procmaps_fuse_devices(path, devs, 1), 1);  /* bounded */
	unlink(path);
	ck_assert_uint_eq(procmaps_fuse_devices(path, devs, 8), 0);  /* unreadable: none */
}
END_TEST

/* A process outside the daemon's namespace (here: a fake proc root without
 * ns/mnt) has its own mountinfo read; one in it gets the daemon's list. */
START_TEST(test_fuse_cache_other_root)
{
	char root[] = "/tmp/test_procmaps_root_XXXXXX", path[256];
	struct procmaps_fuse_cache c;
	unsigned devs[8], self[8];
	size_t nself;
	bool fuse_free = true;
	FILE *f;

	ck_assert_ptr_nonnull(mkdtemp(root));
	snprintf(path, sizeof(path), "%s/77", root);
	ck_assert_int_eq(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/77/mountinfo", root);
	f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("42 27 0:39 / /mnt/a rw - fuse /src rw\n44 27 8:1 / / rw - ext4 /dev/sda1 rw\n", f);
	fclose(f);
	procmaps_fuse_cache_init(&c);
	ck_assert_uint_eq(procmaps_fuse_devices_of(&c, root, 77, devs, 8, &fuse_free), 1);
	ck_assert_uint_eq(devs[0], 0u << 20 | 39);
	ck_assert(!fuse_free);
	nself = procmaps_fuse_devices("/proc/self/mountinfo", self, 8);
	ck_assert_uint_eq(procmaps_fuse_devices_of(&c, "/proc", getpid(), devs, 8, &fuse_free), nself);
	ck_assert(fuse_free == (nself == 0));
	ck_assert_mem_eq(devs, self, nself * sizeof(*devs));
	procmaps_fuse_cache_release(&c);
	procmaps_fuse_cache_release(&c);  /* twice: harmless */
	unlink(path);
	snprintf(path, sizeof(path), "%s/77", root);
	rmdir(path);
	rmdir(root);
}
END_TEST

/* In a child with its own mount namespace: a FUSE mount made after the list
 * was cached is seen at the next call (the kernel's poll notice), so no file
 * on it is ever read. The mount needs no server: nothing touches it. */
static int fuse_cache_child(void)
{
	struct procmaps_fuse_cache c;
	unsigned devs[8];
	char dir[] = "/tmp/test_procmaps_fuse_XXXXXX", opts[128];
	bool fuse_free = false;
	size_t before, after;
	int fd;

	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return 77;
	fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (fd < 0 || !mkdtemp(dir))
		return 77;
	procmaps_fuse_cache_init(&c);
	before = procmaps_fuse_devices_of(&c, "/proc", getpid(), devs, 8, &fuse_free);
	/* Cached: the same answer without a change. */
	if (procmaps_fuse_devices_of(&c, "/proc", getpid(), devs, 8, NULL) != before)
		return 1;
	snprintf(opts, sizeof(opts), "fd=%d,rootmode=40000,user_id=0,group_id=0", fd);
	if (mount("jprof-test", dir, "fuse", MS_NOSUID | MS_NODEV, opts) < 0) {
		rmdir(dir);
		return 77;
	}
	after = procmaps_fuse_devices_of(&c, "/proc", getpid(), devs, 8, &fuse_free);
	umount2(dir, MNT_DETACH);
	rmdir(dir);
	procmaps_fuse_cache_release(&c);
	return after == before + 1 && !fuse_free ? 0 : 2;
}

START_TEST(test_fuse_cache_sees_new_mount)
{
	int st;
	pid_t pid;

	if (geteuid() != 0 || access("/dev/fuse", R_OK | W_OK) < 0)
		return;  /* needs root and /dev/fuse: checked by the root CI run */
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(fuse_cache_child());
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st));
	if (WEXITSTATUS(st) == 77)
		return;  /* no mount namespace or FUSE mount here */
	ck_assert_int_eq(WEXITSTATUS(st), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("procmaps");
	TCase *tc = tcase_create("core");
	SRunner *sr;
	int failed;

	tcase_add_test(tc, test_fuse_devices);
	tcase_add_test(tc, test_fuse_cache_other_root);
	tcase_add_test(tc, test_fuse_cache_sees_new_mount);
	tcase_add_test(tc, test_self_maps);
	tcase_add_test(tc, test_tricky_lines);
	tcase_add_test(tc, test_garbage);
	tcase_add_test(tc, test_random_bytes);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
