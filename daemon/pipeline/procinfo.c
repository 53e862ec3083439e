#include "procinfo.h"

#include <ctype.h>
#include <stdbool.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "htab.h"
#include "proc.h"

#define PI_LABEL_TTL_NS (2ull * 1000000000ull)     /* cgroups change: re-read this often */
#define PI_LABEL_IDLE_NS (30ull * 1000000000ull)   /* drop cached labels unused this long */
#define PI_LABEL_MAX 32768                          /* cached processes */
#define PI_EXPIRE_NS (2ull * 1000000000ull)        /* how often the cache is trimmed */
#define PI_DEAD_GRACE_NS (2ull * 1000000000ull)    /* labels of an exited process: until drained */
#define PI_CGROUP_MAX 1024

struct pi_proc {
	pid_t pid;                  /* 0 = empty slot */
	uint64_t start_ns;          /* which process of that pid the names are of; 0 = unknown */
	uint64_t gone_ns;           /* a start of pid found gone: its samples get "[exited]" */
	uint64_t fetched_ns;
	uint64_t used_ns;
	char comm[32];
	char *cgroup;               /* one allocation: cgroup, unit, container, each */
	const char *unit;           /* NUL-terminated; "" when unknown */
	const char *container;
};

struct procinfo {
	struct htab_map procs;      /* pid -> struct pi_proc * */
	uint64_t last_expire_ns;
};

static struct pi_proc *pi_proc_ptr(uint64_t v)
{
	return (struct pi_proc *)(uintptr_t)v;
}

/* ---- label parsing ---- */

int procinfo_parse_cgroup(const char *text, char *path, size_t len)
{
	const char *line = text, *best = NULL;
	size_t best_len = 0;
	int best_rank = 0;

	if (!len)
		return -EINVAL;
	path[0] = '\0';
	/* "0::/path" is cgroup v2; on hybrid hosts systemd's own hierarchy
	 * ("N:name=systemd:/path") carries the same path; else any line. */
	while (line && *line) {
		const char *nl = strchr(line, '\n');
		const char *end = nl ? nl : line + strlen(line);
		const char *c1 = memchr(line, ':', (size_t)(end - line));
		const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(end - c1 - 1)) : NULL;

		if (c2) {
			int rank = 1;

			if (c1 - line == 1 && line[0] == '0' && c2 == c1 + 1)
				rank = 3;
			else if ((size_t)(c2 - c1 - 1) == strlen("name=systemd") &&
				 !strncmp(c1 + 1, "name=systemd", strlen("name=systemd")))
				rank = 2;
			if (rank > best_rank) {
				best_rank = rank;
				best = c2 + 1;
				best_len = (size_t)(end - c2 - 1);
			}
		}
		line = nl ? nl + 1 : NULL;
	}
	if (!best)
		return -ENOENT;
	if (best_len >= len)
		return -ENAMETOOLONG;
	memcpy(path, best, best_len);
	path[best_len] = '\0';
	return 0;
}

static bool pi_ends_with(const char *s, size_t n, const char *suffix)
{
	size_t k = strlen(suffix);

	return n > k && !memcmp(s + n - k, suffix, k);
}

int procinfo_parse_unit(const char *cgroup, char *unit, size_t len)
{
	const char *p = cgroup, *best = NULL;
	size_t best_len = 0;

	if (!len)
		return -EINVAL;
	unit[0] = '\0';
	/* The deepest .service or .scope component: "/system.slice/nginx.service",
	 * "/user.slice/user-1000.slice/user@1000.service/app.slice/foo.service". */
	while (*p) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);

		if (pi_ends_with(p, n, ".service") || pi_ends_with(p, n, ".scope")) {
			best = p;
			best_len = n;
		}
		p += n;
		if (*p == '/')
			p++;
	}
	if (!best)
		return -ENOENT;
	if (best_len >= len)
		return -ENAMETOOLONG;
	memcpy(unit, best, best_len);
	unit[best_len] = '\0';
	return 0;
}

int procinfo_parse_container(const char *cgroup, char *id, size_t len)
{
	const char *p = cgroup, *found = NULL;

	if (!len)
		return -EINVAL;
	id[0] = '\0';
	/* Docker, containerd, CRI-O and podman name a container's cgroup after
	 * its 64-hex-digit id ("docker-<id>.scope", "/docker/<id>",
	 * "cri-containerd-<id>.scope", "libpod-<id>.scope"); the deepest wins. */
	while (*p) {
		size_t n = 0;

		while (isxdigit((unsigned char)p[n]) && !isupper((unsigned char)p[n]))
			n++;
		if (n == 64)
			found = p;
		p += n ? n : 1;
	}
	if (!found)
		return -ENOENT;
	if (len <= 64)
		return -ENAMETOOLONG;
	memcpy(id, found, 64);
	id[64] = '\0';
	return 0;
}

/* ---- per-process label cache ---- */

static const char pi_empty[3] = "";

/* What a sample of a process that is gone (and uncached) is named. */
static const struct pi_proc pi_gone = {
	.comm = SAMPLE_NAME_EXITED, .cgroup = (char *)pi_empty, .unit = pi_empty, .container = pi_empty,
};

uint64_t procinfo_start_identity(uint64_t boottime_ns)
{
	static uint64_t tick_ns;

	if (!tick_ns) {
		long hz = sysconf(_SC_CLK_TCK);

		tick_ns = hz > 0 ? 1000000000ull / (uint64_t)hz : 10000000ull;
	}
	return boottime_ns - boottime_ns % tick_ns;
}

static void pi_proc_clear(struct pi_proc *p)
{
	if (p->cgroup != pi_empty)
		free(p->cgroup);
	p->cgroup = (char *)pi_empty;
	p->unit = p->container = pi_empty;
}

struct pi_trim {
	uint64_t keep_after;       /* drop entries unused since then */
	uint64_t dead_before;      /* and those unused since then whose process exited (0: none) */
};

static bool pi_keep(uint64_t key, uint64_t *val, void *arg)
{
	const struct pi_trim *t = arg;
	struct pi_proc *p = pi_proc_ptr(*val);

	/* Hosts that spawn processes all the time would otherwise keep the
	 * labels of thousands of exited ones for the idle period. */
	if (p->used_ns >= t->keep_after &&
	    !(p->used_ns < t->dead_before && kill(p->pid, 0) < 0 && errno == ESRCH))
		return true;
	pi_proc_clear(p);
	free(p);
	return false;
}

static void pi_trim(struct procinfo *pi, uint64_t keep_after, uint64_t dead_before)
{
	htab_map_retain(&pi->procs, pi_keep, &(struct pi_trim){ keep_after, dead_before });
}

/* The cgroup path and what it tells (unit, container) as one allocation of
 * three strings; NULL when pid has none readable or on ENOMEM. */
static char *pi_read_labels(pid_t pid)
{
	char path[64], text[4096], cg[PI_CGROUP_MAX], unit[256], cont[72], *out = NULL;
	size_t lc, lu, lk;
	ssize_t n = -1;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, text, sizeof(text) - 1);
		close(fd);
	}
	if (n <= 0)
		goto out;
	text[n] = '\0';
	if (procinfo_parse_cgroup(text, cg, sizeof(cg)) < 0)
		goto out;
	if (procinfo_parse_unit(cg, unit, sizeof(unit)) < 0)
		unit[0] = '\0';
	if (procinfo_parse_container(cg, cont, sizeof(cont)) < 0)
		cont[0] = '\0';
	lc = strlen(cg) + 1;
	lu = strlen(unit) + 1;
	lk = strlen(cont) + 1;
	out = malloc(lc + lu + lk);
	if (!out)
		goto out;
	memcpy(out, cg, lc);
	memcpy(out + lc, unit, lu);
	memcpy(out + lc + lu, cont, lk);
out:
	return out;
}

/* Runs between two reads of pid's start time; true when both are start_ns
 * (or, for start_ns 0, equal), so what fn read belongs to that process and
 * not to one that took its pid meanwhile. *seen: the start read first. */
static bool pi_same_process(pid_t pid, uint64_t start_ns, uint64_t *seen)
{
	uint64_t now;

	if (proc_read_start_boottime(pid, &now) < 0)
		return false;
	if (*seen == UINT64_MAX)
		*seen = now;
	return now == *seen && (!start_ns || now == start_ns);
}

/* (Re)reads the names of process (pid, start_ns) into p; -ESRCH, leaving p
 * as it was, when pid names no process or another one. */
static int pi_proc_fill(struct pi_proc *p, pid_t pid, uint64_t start_ns, uint64_t now)
{
	uint64_t seen = UINT64_MAX;
	char comm[sizeof(p->comm)], *labels = NULL;
	int r = -ESRCH;

	/* With the process's start known, one check after the reads tells
	 * whether they were all of it (a pid taken over before or between them
	 * shows another start); an unknown start needs the one before too. */
	if (!start_ns && !pi_same_process(pid, start_ns, &seen))
		goto out;
	if (proc_read_comm(pid, 0, comm, sizeof(comm)) < 0)
		goto out;
	labels = pi_read_labels(pid);
	if (!pi_same_process(pid, start_ns, &seen))
		goto out;
	pi_proc_clear(p);
	if (labels) {
		size_t lc = strlen(labels) + 1;

		p->cgroup = labels;
		p->unit = labels + lc;
		p->container = p->unit + strlen(p->unit) + 1;
		labels = NULL;
	}
	memcpy(p->comm, comm, sizeof(comm));
	p->start_ns = seen;
	p->fetched_ns = now;
	r = 0;
out:
	free(labels);
	return r;
}

/* A new entry for (pid, start_ns): its names, or "[exited]" until pid is
 * read again, when the process is gone already. */
static void pi_proc_init(struct pi_proc *p, pid_t pid, uint64_t start_ns, uint64_t now)
{
	p->pid = pid;
	p->gone_ns = 0;
	p->cgroup = (char *)pi_empty;
	p->unit = p->container = pi_empty;
	if (pi_proc_fill(p, pid, start_ns, now) == 0)
		return;
	snprintf(p->comm, sizeof(p->comm), "%s", SAMPLE_NAME_EXITED);
	p->start_ns = start_ns;
	p->fetched_ns = now;
}

/* The cached entry of pid for a sample of process start_ns. */
static const struct pi_proc *pi_proc_known(struct pi_proc *p, pid_t pid, uint64_t start_ns,
					   uint64_t now)
{
	if (start_ns && p->start_ns && start_ns != p->start_ns) {
		/* Another process than the cached one: the cached one has
		 * exited and the sample's took its pid, or the other way round
		 * (then the sample's process is gone, and stays gone). */
		if (start_ns == p->gone_ns || pi_proc_fill(p, pid, start_ns, now) < 0) {
			p->gone_ns = start_ns;
			return &pi_gone;
		}
	} else if (now < p->fetched_ns || now - p->fetched_ns > PI_LABEL_TTL_NS) {
		/* Gone since: the names it had stay its names. */
		if (pi_proc_fill(p, pid, p->start_ns, now) < 0)
			p->fetched_ns = now;
	}
	p->used_ns = now;
	return p;
}

static const struct pi_proc *pi_proc_get(struct procinfo *pi, pid_t pid, uint64_t start_ns,
					 uint64_t now)
{
	/* Cache full: labels read but not kept. */
	static struct pi_proc scratch = { .cgroup = (char *)pi_empty };
	uint64_t *v = htab_map_get(&pi->procs, (uint64_t)pid);
	struct pi_proc *p;

	if (v)
		return pi_proc_known(pi_proc_ptr(*v), pid, start_ns, now);
	/* Past the limit, forget processes not seen lately. */
	if (htab_map_count(&pi->procs) >= PI_LABEL_MAX)
		pi_trim(pi, now > PI_LABEL_IDLE_NS ? now - PI_LABEL_IDLE_NS : 0, 0);
	p = htab_map_count(&pi->procs) < PI_LABEL_MAX ? calloc(1, sizeof(*p)) : NULL;
	if (p && htab_map_put(&pi->procs, (uint64_t)pid, (uint64_t)(uintptr_t)p) < 0) {
		free(p);
		p = NULL;
	}
	if (!p) {
		pi_proc_clear(&scratch);
		p = &scratch;
	}
	pi_proc_init(p, pid, start_ns, now);
	p->used_ns = now;
	return p;
}

int procinfo_get(struct procinfo *pi, pid_t pid, uint64_t start_ns, uint64_t now_ns,
		 struct sample_names *out)
{
	const struct pi_proc *p;

	if (!pi || pid <= 0 || !out)
		return -EINVAL;
	p = pi_proc_get(pi, pid, start_ns, now_ns ? now_ns : clock_mono_ns());
	*out = (struct sample_names){
		.comm = p->comm, .cgroup = p->cgroup, .container = p->container, .unit = p->unit,
	};
	return 0;
}

const char *procinfo_thread_name(pid_t pid, uint64_t start_ns, pid_t tid, char *buf, size_t len)
{
	uint64_t seen = UINT64_MAX;

	if (!pi_same_process(pid, start_ns, &seen) || proc_read_comm(pid, tid, buf, len) < 0 ||
	    !pi_same_process(pid, start_ns, &seen))
		snprintf(buf, len, "%s", SAMPLE_NAME_EXITED);
	return buf;
}

void procinfo_expire(struct procinfo *pi, uint64_t now_ns)
{
	uint64_t keep, dead;

	if (!pi || now_ns - pi->last_expire_ns < PI_EXPIRE_NS)
		return;
	keep = now_ns > PI_LABEL_IDLE_NS ? now_ns - PI_LABEL_IDLE_NS : 0;
	dead = now_ns > PI_DEAD_GRACE_NS ? now_ns - PI_DEAD_GRACE_NS : 0;
	pi->last_expire_ns = now_ns;
	pi_trim(pi, keep, dead);
}

int procinfo_new(struct procinfo **out)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

void procinfo_free(struct procinfo *pi)
{
	if (!pi)
		return;
	pi_trim(pi, UINT64_MAX, 0);
	htab_map_release(&pi->procs);
	free(pi);
}
