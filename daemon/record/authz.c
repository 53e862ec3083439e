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

int authz_creds_allow(const struct authz_peer *peer, const struct proc_creds *c, char *why,
		      size_t len)
{
	uid_t u = peer->uid;
	gid_t g = peer->gid;

	if (peer->privileged)
		return 0;
	if (c->uid[0] != u || c->uid[1] != u || c->uid[2] != u) {
		snprintf(why, len, "its uids are real %u, effective %u, saved %u; the caller is uid %u",
			 (unsigned)c->uid[0], (unsigned)c->uid[1], (unsigned)c->uid[2], (unsigned)u);
		return -EPERM;
	}
	if (c->gid[0] != g || c->gid[1] != g || c->gid[2] != g) {
		snprintf(why, len, "its gids are real %u, effective %u, saved %u; the caller is gid %u",
			 (unsigned)c->gid[0], (unsigned)c->gid[1], (unsigned)c->gid[2], (unsigned)g);
		return -EPERM;
	}
	/* A process that has exited has no memory left to protect: the kernel
	 * skips the dumpable test then, and so does this. */
	if (!c->exited && c->dump_owner != u) {
		snprintf(why, len, "it is not dumpable (setuid/setgid start or prctl)");
		return -EPERM;
	}
	if (c->other_userns) {
		/* Capabilities inside a namespace the caller created are its own. */
		if (c->userns_owner != u) {
			snprintf(why, len, "it runs in a user namespace of uid %u",
				 (unsigned)c->userns_owner);
			return -EPERM;
		}
	} else if (c->cap_prm || c->cap_eff) {
		snprintf(why, len, "it holds capabilities (permitted %llx, effective %llx)",
			 (unsigned long long)c->cap_prm, (unsigned long long)c->cap_eff);
		return -EPERM;
	}
	return 0;
}

int authz_check_pid(const struct authz_peer *peer, pid_t pid, uint64_t start_ns, char *why,
		    size_t len)
{
	struct proc_creds c;
	int r;

	r = proc_read_creds(pid, &c);
	if (r == -ENOENT || r == -ESRCH || (r == 0 && start_ns && c.start_ns != start_ns)) {
		snprintf(why, len, "no such process");
		return -ESRCH;
	}
	if (r < 0) {
		snprintf(why, len, "cannot read its credentials: %s", strerror(-r));
		return peer->privileged ? 0 : -EPERM;
	}
	return authz_creds_allow(peer, &c, why, len);
}
