/* procinfo: process names and labels as samples carry them. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_main.h"
#include "proc.h"
#include "procinfo.h"

static const char HEX64[] = "4f1c2a9d0b3e5f6a7b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c";

START_TEST(test_parse_cgroup_lines)
{
	char path[256];
	char self[4096];
	FILE *f;
	size_t n;

	ck_assert_int_eq(procinfo_parse_cgroup("0::/system.slice/nginx.service\n", path, sizeof(path)), 0);
	ck_assert_str_eq(path, "/system.slice/nginx.service");
	/* Hybrid hierarchy: the unified line wins wherever it is. */
	ck_assert_int_eq(procinfo_parse_cgroup("12:pids:/system.slice/a.service\n"
					       "1:name=systemd:/system.slice/b.service\n"
					       "0::/system.slice/c.service\n", path, sizeof(path)), 0);
	ck_assert_str_eq(path, "/system.slice/c.service");
	/* cgroup v1 only: systemd's hierarchy. */
	ck_assert_int_eq(procinfo_parse_cgroup("4:memory:/docker/x\n1:name=systemd:/docker/y\n",
					       path, sizeof(path)), 0);
	ck_assert_str_eq(path, "/docker/y");
	ck_assert_int_eq(procinfo_parse_cgroup("0::/\n", path, sizeof(path)), 0);
	ck_assert_str_eq(path, "/");
	ck_assert_int_eq(procinfo_parse_cgroup("garbage\n", path, sizeof(path)), -ENOENT);
	ck_assert_int_eq(procinfo_parse_cgroup("0::/a/very/long/path\n", path, 8), -ENAMETOOLONG);
	/* This process's own line, from the real file. */
	f = fopen("/proc/self/cgroup", "r");
	ck_assert_ptr_nonnull(f);
	n = fread(self, 1, sizeof(self) - 1, f);
	fclose(f);
	self[n] = '\0';
	ck_assert_int_eq(procinfo_parse_cgroup(self, path, sizeof(path)), 0);
	ck_assert_int_eq(path[0], '/');
	ck_assert_ptr_null(strchr(path, '\n'));
}
END_TEST

START_TEST(test_parse_unit)
{
	char unit[128];

	ck_assert_int_eq(procinfo_parse_unit("/system.slice/nginx.service", unit, sizeof(unit)), 0);
	ck_assert_str_eq(unit, "nginx.service");
	ck_assert_int_eq(procinfo_parse_unit("/user.slice/user-1000.slice/user@1000.service/app.slice/"
					     "foo.service", unit, sizeof(unit)), 0);
	ck_assert_str_eq(unit, "foo.service");
	ck_assert_int_eq(procinfo_parse_unit("/user.slice/user-1000.slice/session-3.scope", unit,
					     sizeof(unit)), 0);
	ck_assert_str_eq(unit, "session-3.scope");
	/* A sub-cgroup inside a service still belongs to it. */
	ck_assert_int_eq(procinfo_parse_unit("/system.slice/jprof-test-x.service/worker", unit,
					     sizeof(unit)), 0);
	ck_assert_str_eq(unit, "jprof-test-x.service");
	ck_assert_int_eq(procinfo_parse_unit("/", unit, sizeof(unit)), -ENOENT);
	ck_assert_int_eq(procinfo_parse_unit("/system.slice", unit, sizeof(unit)), -ENOENT);
	ck_assert_int_eq(procinfo_parse_unit("/x/.service", unit, sizeof(unit)), -ENOENT);
	ck_assert_str_eq(unit, "");
}
END_TEST

START_TEST(test_parse_container)
{
	char path[256], id[80];

	snprintf(path, sizeof(path), "/system.slice/docker-%s.scope", HEX64);
	ck_assert_int_eq(procinfo_parse_container(path, id, sizeof(id)), 0);
	ck_assert_str_eq(id, HEX64);
	snprintf(path, sizeof(path), "/kubepods.slice/kubepods-besteffort.slice/"
		 "kubepods-besteffort-pod1234.slice/cri-containerd-%s.scope", HEX64);
	ck_assert_int_eq(procinfo_parse_container(path, id, sizeof(id)), 0);
	ck_assert_str_eq(id, HEX64);
	snprintf(path, sizeof(path), "/docker/%s", HEX64);
	ck_assert_int_eq(procinfo_parse_container(path, id, sizeof(id)), 0);
	ck_assert_str_eq(id, HEX64);
	/* 63 or 65 digits are not an id. */
	snprintf(path, sizeof(path), "/docker/%.63s", HEX64);
	ck_assert_int_eq(procinfo_parse_container(path, id, sizeof(id)), -ENOENT);
	snprintf(path, sizeof(path), "/docker/%s0", HEX64);
	ck_assert_int_eq(procinfo_parse_container(path, id, sizeof(id)), -ENOENT);
	ck_assert_int_eq(procinfo_parse_container("/system.slice/nginx.service", id, sizeof(id)), -ENOENT);
}
END_TEST

START_TEST(test_names_and_labels_of_self)
{
	struct procinfo *pi = NULL;
	struct sample_names n;
	char comm[64], buf[64];

	ck_assert_int_eq(procinfo_new(&pi), 0);
	ck_assert_int_eq(procinfo_get(pi, getpid(), 0, 0, &n), 0);
	snprintf(comm, sizeof(comm), "%s", n.comm);
	ck_assert_str_eq(comm, "test_procinfo");
	ck_assert_int_eq(n.cgroup[0], '/');
	ck_assert_str_eq(procinfo_thread_name(getpid(), 0, getpid(), buf, sizeof(buf)), "test_procinfo");
	/* A pid that cannot exist: named, not an error. */
	ck_assert_int_eq(procinfo_get(pi, 0x3fffffff, 0, 0, &n), 0);
	ck_assert_str_eq(n.comm, "[exited]");
	ck_assert_str_eq(procinfo_thread_name(0x3fffffff, 0, 0x3fffffff, buf, sizeof(buf)), "[exited]");
	ck_assert_int_eq(procinfo_get(pi, 0, 0, 0, &n), -EINVAL);
	procinfo_free(pi);
}
END_TEST

/* A sample carries its process's start: names are those of that process,
 * never of another one that has the pid when the sample is built. */
START_TEST(test_names_follow_the_process_not_the_pid)
{
	struct procinfo *pi = NULL;
	struct sample_names n;
	uint64_t me, tick = 1000000000ull / (uint64_t)sysconf(_SC_CLK_TCK);
	char buf[64];

	ck_assert_int_eq(proc_read_start_boottime(getpid(), &me), 0);
	ck_assert_uint_eq(procinfo_start_identity(me), me);
	ck_assert_uint_eq(procinfo_start_identity(me + tick - 1), me);   /* a tick's resolution */
	ck_assert_uint_eq(procinfo_start_identity(me + tick), me + tick);
	ck_assert_int_eq(procinfo_new(&pi), 0);

	/* An earlier process with our pid (started a tick before us): its
	 * samples are drained now; they must not get our names. */
	ck_assert_int_eq(procinfo_get(pi, getpid(), me - tick, 0, &n), 0);
	ck_assert_str_eq(n.comm, "[exited]");
	ck_assert_str_eq(n.cgroup, "");
	/* Ours do, and the earlier one stays gone (cached: no /proc read). */
	ck_assert_int_eq(procinfo_get(pi, getpid(), me, 0, &n), 0);
	ck_assert_str_eq(n.comm, "test_procinfo");
	ck_assert_int_eq(n.cgroup[0], '/');
	ck_assert_int_eq(procinfo_get(pi, getpid(), me - tick, 0, &n), 0);
	ck_assert_str_eq(n.comm, "[exited]");
	ck_assert_int_eq(procinfo_get(pi, getpid(), me, 0, &n), 0);
	ck_assert_str_eq(n.comm, "test_procinfo");
	/* A later process than the one cached: not us either. */
	ck_assert_int_eq(procinfo_get(pi, getpid(), me + tick, 0, &n), 0);
	ck_assert_str_eq(n.comm, "[exited]");
	ck_assert_int_eq(procinfo_get(pi, getpid(), me, 0, &n), 0);
	ck_assert_str_eq(n.comm, "test_procinfo");

	ck_assert_str_eq(procinfo_thread_name(getpid(), me, getpid(), buf, sizeof(buf)), "test_procinfo");
	ck_assert_str_eq(procinfo_thread_name(getpid(), me + tick, getpid(), buf, sizeof(buf)),
			 "[exited]");
	procinfo_free(pi);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("procinfo");
	TCase *tc = tcase_create("procinfo");

	tcase_add_test(tc, test_parse_cgroup_lines);
	tcase_add_test(tc, test_parse_unit);
	tcase_add_test(tc, test_parse_container);
	tcase_add_test(tc, test_names_and_labels_of_self);
	tcase_add_test(tc, test_names_follow_the_process_not_the_pid);
	suite_add_tcase(s, tc);
	return jprof_check_run(s);
}
