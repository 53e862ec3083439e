/* authz: the kernel's ptrace read rule for unprivileged callers, one
 * condition at a time on made-up credentials, then on real processes. */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "authz.h"
#include "check_main.h"
#include "proc.h"

#define U 1000
#define G 1001

static const struct authz_peer user = { .pid = 1, .uid = U, .gid = G };
static const struct authz_peer admin = { .pid = 1, .uid = U, .gid = G, .privileged = true };

/* A process of the caller's own, as the rule wants it. */
static struct proc_creds own(void)
{
	return (struct proc_creds){
		.uid = { U, U, U, U }, .gid = { G, G, G, G }, .dump_owner = U, .start_ns = 1,
	};
}

static int allow(const struct authz_peer *peer, const struct proc_creds *c, char *why)
{
	why[0] = '\0';
	return authz_creds_allow(peer, c, why, 256);
}

START_TEST(test_rule_conditions)
{
	struct proc_creds c = own();
	char why[256];

	ck_assert_int_eq(allow(&user, &c, why), 0);
	for (int i = 0; i < 3; i++) {
		c = own();
		c.uid[i] = 0;  /* setuid root: effective or saved, or a real uid changed */
		ck_assert_int_eq(allow(&user, &c, why), -EPERM);
		ck_assert_ptr_nonnull(strstr(why, "uids"));
		ck_assert_int_eq(allow(&admin, &c, why), 0);
	}
	c = own();
	c.uid[3] = 0;  /* the filesystem uid is not part of the rule */
	ck_assert_int_eq(allow(&user, &c, why), 0);
	for (int i = 0; i < 3; i++) {
		c = own();
		c.gid[i] = 42;  /* setgid, e.g. ssh-agent */
		ck_assert_int_eq(allow(&user, &c, why), -EPERM);
		ck_assert_ptr_nonnull(strstr(why, "gids"));
	}
	c = own();
	c.dump_owner = 0;  /* prctl(PR_SET_DUMPABLE, 0), or a setid start */
	ck_assert_int_eq(allow(&user, &c, why), -EPERM);
	ck_assert_ptr_nonnull(strstr(why, "dumpable"));
	c.exited = true;   /* a zombie has nothing left to dump */
	ck_assert_int_eq(allow(&user, &c, why), 0);
	c = own();
	c.cap_prm = 1ull << 13;  /* file capabilities gained at exec */
	ck_assert_int_eq(allow(&user, &c, why), -EPERM);
	ck_assert_ptr_nonnull(strstr(why, "capabilities"));
	c = own();
	c.cap_eff = 1;
	ck_assert_int_eq(allow(&user, &c, why), -EPERM);
	/* In a user namespace: its capabilities are the namespace owner's. */
	c = own();
	c.other_userns = true;
	c.userns_owner = U;
	c.cap_prm = c.cap_eff = ~0ull;
	ck_assert_int_eq(allow(&user, &c, why), 0);
	c.userns_owner = 0;
	ck_assert_int_eq(allow(&user, &c, why), -EPERM);
	ck_assert_ptr_nonnull(strstr(why, "namespace"));
}
END_TEST

START_TEST(test_real_processes)
{
	struct authz_peer me = { .pid = getpid(), .uid = geteuid(), .gid = getegid() };
	struct authz_peer nobody = { .pid = 1, .uid = 65534, .gid = 65534 };
	struct proc_creds c;
	char why[256];
	pid_t pid;

	if (geteuid() != 0)
		return;  /* our own capabilities would be the question */
	ck_assert_int_eq(proc_read_creds(getpid(), &c), 0);
	/* Root holds capabilities: only the privileged may read it. */
	ck_assert_int_eq(authz_check_pid(&nobody, getpid(), 0, why, sizeof(why)), -EPERM);
	me.privileged = true;
	ck_assert_int_eq(authz_check_pid(&me, getpid(), 0, why, sizeof(why)), 0);
	ck_assert_int_eq(authz_check_pid(&me, getpid(), c.start_ns, why, sizeof(why)), 0);
	/* Another start time: that pid is some other process now. */
	ck_assert_int_eq(authz_check_pid(&me, getpid(), c.start_ns + 1, why, sizeof(why)), -ESRCH);
	ck_assert_str_eq(why, "no such process");

	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(0);
	waitpid(pid, NULL, 0);
	ck_assert_int_eq(authz_check_pid(&nobody, pid, 0, why, sizeof(why)), -ESRCH);
	ck_assert_int_eq(authz_check_pid(&me, pid, 0, why, sizeof(why)), -ESRCH);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("authz");
	TCase *tc = tcase_create("authz");

	tcase_add_test(tc, test_rule_conditions);
	tcase_add_test(tc, test_real_processes);
	suite_add_tcase(s, tc);
	return jprof_check_run(s);
}
