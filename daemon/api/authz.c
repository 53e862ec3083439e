#include "authz.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "proc.h"

#define AUTHZ_MAX_GROUPS 256

static bool peer_in_group(int fd, gid_t primary, gid_t group)
{
	gid_t groups[AUTHZ_MAX_GROUPS];
	socklen_t len = sizeof(groups);

	if (group == (gid_t)-1)
		return false;
	if (primary == group)
		return true;
	/* Supplementary groups of the peer as of connect(). */
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
		return false;
	for (size_t i = 0; i < len / sizeof(gid_t); i++)
		if (groups[i] == group)
			return true;
	return false;
}

int authz_peer_from_fd(int fd, gid_t group, struct authz_peer *out)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
		return -errno;
	out->pid = cred.pid;
	out->uid = cred.uid;
	out->gid = cred.gid;
	out->privileged = cred.uid == 0 || peer_in_group(fd, cred.gid, group);
	return 0;
}

int authz_check_pid(const struct authz_peer *peer, pid_t pid, char *why, size_t len)
{
	uid_t uids[4], owner;
	int r;

	r = proc_read_uids(pid, uids);
	if (r == -ENOENT || r == -ESRCH)
		return -ESRCH;
	if (r < 0) {
		snprintf(why, len, "cannot read the credentials of pid %d: %s", (int)pid, strerror(-r));
		return -EPERM;
	}
	if (peer->privileged)
		return 0;
	if (uids[0] != peer->uid || uids[1] != peer->uid || uids[2] != peer->uid) {
		snprintf(why, len,
			 "pid %d belongs to uid %u (real %u, effective %u, saved %u); uid %u may only record its own processes",
			 (int)pid, (unsigned)uids[1], (unsigned)uids[0], (unsigned)uids[1],
			 (unsigned)uids[2], (unsigned)peer->uid);
		return -EPERM;
	}
	r = proc_dump_owner(pid, &owner);
	if (r < 0)
		return r == -ENOENT ? -ESRCH : r;
	if (owner != peer->uid) {
		snprintf(why, len, "pid %d is not dumpable (it may hold secrets); only root may record it",
			 (int)pid);
		return -EPERM;
	}
	return 0;
}
