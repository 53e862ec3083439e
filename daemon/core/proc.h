/* Small readers of /proc used by sessions and authorization. All take the
 * proc root ("/proc" normally) so tests can point elsewhere. */
#ifndef JPROF_PROC_H
#define JPROF_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Thread (tid > 0) or process (tid == 0) name from .../comm, newline
 * stripped, sanitized to printable ASCII. 0 or -errno. */
int proc_read_comm(pid_t pid, pid_t tid, char *buf, size_t len);

/* Real, effective, saved and filesystem uids from /proc/PID/status. */
int proc_read_uids(pid_t pid, uid_t uids[4]);

/* What the kernel's ptrace access check looks at, read from /proc/PID. */
struct proc_creds {
	uid_t uid[4];              /* real, effective, saved, filesystem */
	gid_t gid[4];
	uint64_t cap_prm, cap_eff; /* permitted and effective capabilities */
	/* Owner /proc gives the process's files (not its directory): its euid
	 * while it is dumpable, root (of its user namespace) when it is not. */
	uid_t dump_owner;
	bool exited;               /* a zombie: no memory left, so no dumpable flag */
	bool other_userns;         /* in a user namespace other than ours */
	uid_t userns_owner;        /* who created that namespace (other_userns) */
	uint64_t start_ns;         /* when it started (CLOCK_BOOTTIME), read last */
};

/* 0, -ENOENT/-ESRCH when there is no such process, or -errno. start_ns is
 * read after everything else, so a caller that knows the start time of the
 * process it means can tell whether these credentials were that process's. */
int proc_read_creds(pid_t pid, struct proc_creds *out);

/* Calls fn for every tid in /proc/PID/task; stops when fn returns non-zero
 * and returns that value. -errno if the directory cannot be read. */
int proc_foreach_task(pid_t pid, int (*fn)(pid_t tid, void *arg), void *arg);

/* Thread ns_tid of process pid as seen in pid's own pid namespace, in our
 * namespace. -ESRCH when pid has no such thread. */
int proc_ns_tid_to_host(pid_t pid, pid_t ns_tid, pid_t *host);

/* When pid started, as CLOCK_BOOTTIME nanoseconds (/proc/PID/stat). */
int proc_read_start_boottime(pid_t pid, uint64_t *out_ns);

/* 1 while the process of pidfd runs, 0 once it has exited (a zombie too),
 * or -errno. Never blocks. */
int proc_pidfd_running(int pidfd);

/* A process identity that cannot be reused: a pidfd where the kernel gives
 * one, else the pid and its start time (a reused pid has a later start, up
 * to the clock tick of /proc/PID/stat). */
struct proc_ident {
	pid_t pid;
	int pidfd;                 /* owned; -1: none, start_ns alone tells */
	uint64_t start_ns;         /* CLOCK_BOOTTIME; 0 with a pidfd */
};
#define PROC_IDENT_INIT { .pid = 0, .pidfd = -1, .start_ns = 0 }

/* The process that connected a Unix socket (pid: its SO_PEERCRED pid):
 * SO_PEERPIDFD (Linux 6.5+) names that very process; older kernels fall
 * back to the pid's start time read now. -ESRCH when it is gone already. */
int proc_ident_from_socket(int sock, pid_t pid, struct proc_ident *out);
/* The fallback alone: pid and its start time. */
int proc_ident_from_pid(pid_t pid, struct proc_ident *out);
/* 0 while the identified process runs; -ESRCH once it has exited (a zombie
 * too) or its pid belongs to another process. */
int proc_ident_check(const struct proc_ident *id);
/* 0 when id is the process pidfd refers to (pid must be its pid): both
 * run, and a pid names one running process at a time; -ESRCH otherwise. */
int proc_ident_matches(const struct proc_ident *id, pid_t pid, int pidfd);
/* Closes the pidfd; NULL-safe. */
void proc_ident_release(struct proc_ident *id);

/* Whether a file's content is one no user but root could have chosen: a
 * regular file of root's, writable by neither group nor others. What is
 * read from it may serve every process that claims the same build-id; from
 * any other file, only that file. */
struct stat;
bool proc_file_root_only(const struct stat *st);

/* What a process runs as: its executable (device, inode of /proc/PID/exe)
 * and the owner of /proc/PID (its effective ids; root while it is not
 * dumpable, as after a setuid exec). An exec of another program, or a
 * change of credentials, changes it. */
struct proc_exec_id {
	dev_t exe_dev;
	ino_t exe_ino;
	uid_t uid;
	gid_t gid;
};
/* 0, or -ESRCH when pid is gone, -errno otherwise. */
int proc_exec_id_read(pid_t pid, struct proc_exec_id *out);
/* 0 while pid still runs what `was` says; -EPERM once it differs, -ESRCH
 * when it is gone. */
int proc_exec_id_check(pid_t pid, const struct proc_exec_id *was);

#endif
