/* Who may do what: peers are identified by SO_PEERCRED at connect time.
 * Root, or a member of the configured group (default "jprof"), may record
 * anything. Any other uid may record a process only as the kernel would let
 * it read the process with ptrace (PTRACE_MODE_READ_FSCREDS, without
 * CAP_SYS_PTRACE): real, effective and saved uids all the caller's uid, real,
 * effective and saved gids all its gid, dumpable, and no capabilities the
 * caller lacks (an unprivileged caller is taken to hold none; in a user
 * namespace of its own, the caller holds them all there). */
#ifndef JPROF_AUTHZ_H
#define JPROF_AUTHZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct proc_creds;

struct authz_peer {
	pid_t pid;
	uid_t uid;
	gid_t gid;
	bool privileged;   /* root or member of the group */
};

/* Reads the peer of a connected Unix socket. group: the authorized group,
 * or (gid_t)-1 for none. */
int authz_peer_from_fd(int fd, gid_t group, struct authz_peer *out);

/* 0 if peer may read a process with credentials c; -EPERM with the reason
 * in why otherwise. */
int authz_creds_allow(const struct authz_peer *peer, const struct proc_creds *c, char *why,
		      size_t len);

/* 0 if peer may record pid; -ESRCH if there is no such process (or, with
 * start_ns non-zero, pid is no longer the process that started then);
 * -EPERM otherwise. why says which, naming the target's credentials: it is
 * for the audit log, not for an unprivileged caller. */
int authz_check_pid(const struct authz_peer *peer, pid_t pid, uint64_t start_ns, char *why,
		    size_t len);

#endif
