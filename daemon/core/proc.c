#include "proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/nsfs.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77   /* Linux 6.5; libc headers may lag */
#endif

int proc_read_comm(pid_t pid, pid_t tid, char *buf, size_t len)
{
	char path[64];
	ssize_t n;
	int fd, r = 0;

	if (len == 0)
		return -EINVAL;
	if (tid > 0)
		snprintf(path, sizeof(path), "/proc/%d/task/%d/comm", (int)pid, (int)tid);
	else
		snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, len - 1);
	if (n < 0) {
		r = -errno;
		n = 0;
	}
	buf[n] = '\0';
	while (n > 0 && buf[n - 1] == '\n')
		buf[--n] = '\0';
	/* comm is chosen by the process: keep it printable for every format. */
	for (ssize_t i = 0; i < n; i++)
		if ((unsigned char)buf[i] < 0x20 || (unsigned char)buf[i] >= 0x7f)
			buf[i] = '?';
	close(fd);
	return r;
}

int proc_read_uids(pid_t pid, uid_t uids[4])
{
	struct proc_creds c;
	int r = proc_read_creds(pid, &c);

	if (r == 0)
		memcpy(uids, c.uid, sizeof(c.uid));
	return r;
}

/* Four ids after a "Uid:"/"Gid:" tag. */
static bool parse_ids(const char *p, unsigned out[4])
{
	return sscanf(p, "%u %u %u %u", &out[0], &out[1], &out[2], &out[3]) == 4;
}

/* The lines of /proc/PID/status the ptrace check needs; -EIO if one lacks. */
static int parse_status(FILE *f, struct proc_creds *c)
{
	char line[256];
	unsigned ids[4], seen = 0;
	unsigned long long caps;
	char state;

	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "State:", 6) == 0 && sscanf(line + 6, " %c", &state) == 1) {
			c->exited = state == 'Z' || state == 'X';
			seen |= 1;
		} else if (strncmp(line, "Uid:", 4) == 0 && parse_ids(line + 4, ids)) {
			for (int i = 0; i < 4; i++)
				c->uid[i] = ids[i];
			seen |= 2;
		} else if (strncmp(line, "Gid:", 4) == 0 && parse_ids(line + 4, ids)) {
			for (int i = 0; i < 4; i++)
				c->gid[i] = ids[i];
			seen |= 4;
		} else if (strncmp(line, "CapPrm:", 7) == 0 && sscanf(line + 7, "%llx", &caps) == 1) {
			c->cap_prm = caps;
			seen |= 8;
		} else if (strncmp(line, "CapEff:", 7) == 0 && sscanf(line + 7, "%llx", &caps) == 1) {
			c->cap_eff = caps;
			seen |= 16;
		}
	}
	return seen == 31 ? 0 : -EIO;
}

/* Whether pid lives in a user namespace other than ours, and who made it. */
static int read_userns(pid_t pid, struct proc_creds *c)
{
	struct stat ours, theirs;
	char path[64];
	int fd, r = 0;

	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)pid);
	if (stat("/proc/self/ns/user", &ours) < 0 || stat(path, &theirs) < 0)
		return -errno;
	c->other_userns = ours.st_dev != theirs.st_dev || ours.st_ino != theirs.st_ino;
	if (!c->other_userns)
		return 0;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (ioctl(fd, NS_GET_OWNER_UID, &c->userns_owner) < 0)
		r = -errno;
	close(fd);
	return r;
}

int proc_read_creds(pid_t pid, struct proc_creds *out)
{
	struct proc_creds c = { 0 };
	char path[64];
	struct stat st;
	FILE *f;
	int r;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	/* The owner is set as the file is opened (/proc revalidates it on
	 * every lookup); the directory itself keeps the euid either way. */
	if (fstat(fileno(f), &st) < 0) {
		r = -errno;
	} else {
		c.dump_owner = st.st_uid;
		r = parse_status(f, &c);
	}
	fclose(f);
	if (r == 0)
		r = read_userns(pid, &c);
	if (r == 0)
		r = proc_read_start_boottime(pid, &c.start_ns);
	if (r == 0)
		*out = c;
	return r;
}

int proc_foreach_task(pid_t pid, int (*fn)(pid_t tid, void *arg), void *arg)
{
	char path[64];
	struct dirent *de;
	DIR *d;
	int r = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		char *end;
		long tid = strtol(de->d_name, &end, 10);

		if (*end || tid <= 0)
			continue;
		r = fn((pid_t)tid, arg);
		if (r)
			break;
	}
	closedir(d);
	return r;
}

static int same_pid_ns(pid_t pid)
{
	struct stat a, b;
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)pid);
	if (stat(path, &a) < 0 || stat("/proc/self/ns/pid", &b) < 0)
		return -errno;
	return a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

struct ns_scan {
	pid_t pid, ns_tid, found;
};

static int ns_scan_task(pid_t tid, void *arg)
{
	struct ns_scan *sc = arg;
	char path[96], line[256];
	FILE *f;
	int hit = 0;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", (int)sc->pid, (int)tid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		char *last, *save = NULL, *tok;

		if (strncmp(line, "NSpid:", 6) != 0)
			continue;
		/* Outermost (ours) first, the process's own namespace last. */
		last = NULL;
		for (tok = strtok_r(line + 6, " \t\n", &save); tok; tok = strtok_r(NULL, " \t\n", &save))
			last = tok;
		if (last && atoi(last) == sc->ns_tid) {
			sc->found = tid;
			hit = 1;
		}
		break;
	}
	fclose(f);
	return hit;
}

int proc_ns_tid_to_host(pid_t pid, pid_t ns_tid, pid_t *host)
{
	struct ns_scan sc = { .pid = pid, .ns_tid = ns_tid };
	char path[64];
	struct stat st;
	int same = same_pid_ns(pid);

	if (ns_tid <= 0)
		return -ESRCH;
	if (same < 0)
		return same == -ENOENT ? -ESRCH : same;
	if (same) {
		snprintf(path, sizeof(path), "/proc/%d/task/%d", (int)pid, (int)ns_tid);
		if (stat(path, &st) < 0)
			return -ESRCH;
		*host = ns_tid;
		return 0;
	}
	if (proc_foreach_task(pid, ns_scan_task, &sc) <= 0)
		return -ESRCH;
	*host = sc.found;
	return 0;
}

/* State letter and start time (CLOCK_BOOTTIME ns) from /proc/PID/stat. */
static int read_stat(pid_t pid, char *state, uint64_t *start_ns)
{
	char path[64], text[1024], *p;
	unsigned long long ticks;
	long hz = sysconf(_SC_CLK_TCK);
	ssize_t n;
	int fd, r = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, text, sizeof(text) - 1);
	if (n < 0)
		r = -errno;
	close(fd);
	if (r < 0)
		return r;
	text[n] = '\0';
	/* The name may hold spaces and ')': fields follow the last ')'. Field 3
	 * is the state; starttime is field 22, i.e. the 20th after the name. */
	p = strrchr(text, ')');
	if (!p || hz <= 0 || sscanf(p + 1, " %c", state) != 1)
		return -EINVAL;
	p++;
	for (int field = 3; field < 22; field++) {
		p = strchr(p + 1, ' ');
		if (!p)
			return -EINVAL;
	}
	if (sscanf(p, " %llu", &ticks) != 1)
		return -EINVAL;
	*start_ns = ticks * (1000000000ull / (unsigned long long)hz);
	return 0;
}

int proc_read_start_boottime(pid_t pid, uint64_t *out_ns)
{
	char state;

	return read_stat(pid, &state, out_ns);
}

int proc_pidfd_running(int pidfd)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };
	int n = poll(&p, 1, 0);

	if (n < 0)
		return -errno;
	if (p.revents & POLLNVAL)
		return -EBADF;
	/* Readable (and hung up once reaped) when the process has exited. */
	return n == 0 ? 1 : 0;
}

int proc_ident_from_pid(pid_t pid, struct proc_ident *out)
{
	struct proc_ident id = PROC_IDENT_INIT;
	int r;

	*out = id;
	if (pid <= 0)
		return -ESRCH;
	id.pid = pid;
	r = proc_read_start_boottime(pid, &id.start_ns);
	if (r < 0)
		return r == -ENOENT ? -ESRCH : r;
	r = proc_ident_check(&id);
	if (r == 0)
		*out = id;
	return r;
}

int proc_ident_from_socket(int sock, pid_t pid, struct proc_ident *out)
{
	struct proc_ident id = PROC_IDENT_INIT;
	socklen_t len = sizeof(id.pidfd);
	int r;

	*out = id;
	if (pid <= 0)
		return -ESRCH;  /* not in our pid namespace */
	if (getsockopt(sock, SOL_SOCKET, SO_PEERPIDFD, &id.pidfd, &len) < 0) {
		r = -errno;
		id.pidfd = -1;
		/* Kernels before 6.5 do not know the option; newer ones fail
		 * (ESRCH, or EINVAL before 6.9) when the process is gone. */
		if (r == -ENOPROTOOPT || r == -EOPNOTSUPP)
			return proc_ident_from_pid(pid, out);
		return r == -EMFILE || r == -ENFILE || r == -ENOMEM ? r : -ESRCH;
	}
	id.pid = pid;
	r = proc_ident_check(&id);
	if (r < 0) {
		proc_ident_release(&id);
		return r;
	}
	*out = id;
	return 0;
}

int proc_ident_check(const struct proc_ident *id)
{
	uint64_t start;
	char state;
	int r;

	if (id->pidfd >= 0)
		return proc_pidfd_running(id->pidfd) == 1 ? 0 : -ESRCH;
	if (id->pid <= 0)
		return -ESRCH;
	r = read_stat(id->pid, &state, &start);
	if (r < 0 || state == 'Z' || state == 'X' || start != id->start_ns)
		return -ESRCH;
	return 0;
}

int proc_ident_matches(const struct proc_ident *id, pid_t pid, int pidfd)
{
	/* pidfd was taken before id is checked here (the caller's process was
	 * pinned first): both running now with the same pid is one process. */
	if (id->pid != pid || proc_ident_check(id) < 0 || proc_pidfd_running(pidfd) != 1)
		return -ESRCH;
	return 0;
}

void proc_ident_release(struct proc_ident *id)
{
	if (!id)
		return;
	if (id->pidfd >= 0)
		close(id->pidfd);
	id->pidfd = -1;
}

int proc_exec_id_read(pid_t pid, struct proc_exec_id *out)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	if (stat(path, &st) < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	out->uid = st.st_uid;
	out->gid = st.st_gid;
	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	if (stat(path, &st) < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	out->exe_dev = st.st_dev;
	out->exe_ino = st.st_ino;
	return 0;
}

int proc_exec_id_check(pid_t pid, const struct proc_exec_id *was)
{
	struct proc_exec_id now;
	int r = proc_exec_id_read(pid, &now);

	if (r < 0)
		return r == -ESRCH ? -ESRCH : -EPERM;
	if (now.exe_dev != was->exe_dev || now.exe_ino != was->exe_ino || now.uid != was->uid ||
	    now.gid != was->gid)
		return -EPERM;
	return 0;
}

bool proc_file_root_only(const struct stat *st)
{
	return S_ISREG(st->st_mode) && st->st_uid == 0 && !(st->st_mode & (S_IWGRP | S_IWOTH));
}
