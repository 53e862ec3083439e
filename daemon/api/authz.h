/* Who may do what: peers are identified by SO_PEERCRED at connect time.
 * Root, or a member of the configured group (default "jprof"), may record
 * anything; any other uid only processes whose real, effective and saved
 * uids are its own and that are dumpable. */
#ifndef JPROF_AUTHZ_H
#define JPROF_AUTHZ_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

struct authz_peer {
	pid_t pid;
	uid_t uid;
	gid_t gid;
	bool privileged;   /* root or member of the group */
};

/* Reads the peer of a connected Unix socket. group: the authorized group,
 * or (gid_t)-1 for none. */
int authz_peer_from_fd(int fd, gid_t group, struct authz_peer *out);

/* 0 if peer may record pid; -ESRCH if there is no such process; -EPERM with a
 * reason in why otherwise. */
int authz_check_pid(const struct authz_peer *peer, pid_t pid, char *why, size_t len);

#endif
