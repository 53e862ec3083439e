#include "proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
	char path[64], line[256];
	FILE *f;
	int r = -EIO;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		unsigned a, b, c, d;

		if (strncmp(line, "Uid:", 4) != 0)
			continue;
		if (sscanf(line + 4, "%u %u %u %u", &a, &b, &c, &d) == 4) {
			uids[0] = a;
			uids[1] = b;
			uids[2] = c;
			uids[3] = d;
			r = 0;
		}
		break;
	}
	fclose(f);
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

int proc_dump_owner(pid_t pid, uid_t *out)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%d", (int)pid);
	if (stat(path, &st) < 0)
		return -errno;
	*out = st.st_uid;
	return 0;
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

int proc_read_start_boottime(pid_t pid, uint64_t *out_ns)
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
	if (!p || hz <= 0)
		return -EINVAL;
	p++;
	for (int field = 3; field < 22; field++) {
		p = strchr(p + 1, ' ');
		if (!p)
			return -EINVAL;
	}
	if (sscanf(p, " %llu", &ticks) != 1)
		return -EINVAL;
	*out_ns = ticks * (1000000000ull / (unsigned long long)hz);
	return 0;
}
