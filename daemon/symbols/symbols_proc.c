/* The symbolizer's processes (symbols_int.h): their start times (pid
 * reuse), executable mappings read from /proc/PID/maps, and the files behind
 * them opened as the process's owner may read them. */
#include "symbols_int.h"

#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/openat2.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "dbginfod.h"
#include "elfsym.h"
#include "htab.h"
#include "kallsyms.h"
#include "lines.h"
#include "log.h"
#include "proc.h"
#include "procmaps.h"
#include "symload.h"


/* Field 22 (starttime, clock ticks since boot): with the pid it names one
 * process for the life of the host. 0 if unreadable. */
static uint64_t symbols_read_start_time(const struct symbols *s, pid_t pid)
{
	char path[4096], line[1024];
	const char *p;
	uint64_t v = 0;
	ssize_t n;
	int fd, field;

	snprintf(path, sizeof(path), "%s/%d/stat", s->proc_root, (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		goto out;
	n = read(fd, line, sizeof(line) - 1);
	close(fd);
	if (n <= 0)
		goto out;
	line[n] = '\0';
	/* comm may hold spaces and parentheses; it ends at the last ')'. */
	p = strrchr(line, ')');
	if (!p)
		goto out;
	p++;
	for (field = 2; field < 22 && *p; p++)
		if (*p == ' ')
			field++;
	if (field == 22)
		v = strtoull(p, NULL, 10);
out:
	return v;
}

static int symbols_map_cmp(const void *a, const void *b)
{
	const struct sym_map *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

/* An identical mapping in the previous table, whose ELF reference the new
 * table can take over instead of opening the file again. */
static struct sym_map *symbols_old_match(struct sym_map *old, size_t n, const struct sym_map *m)
{
	struct sym_map key = { .start = m->start };
	struct sym_map *o;

	if (n == 0)
		return NULL;
	o = bsearch(&key, old, n, sizeof(*old), symbols_map_cmp);
	if (o && o->end == m->end && o->offset == m->offset && strcmp(o->path, m->path) == 0)
		return o;
	return NULL;
}

/* Re-reads /proc/PID/maps, keeping only executable mappings. On failure
 * (process gone) the previous table stays: samples drained after exit must
 * still resolve. */
int symbols_read_maps(struct symbols *s, struct sym_proc *p, uint64_t now)
{
	struct procmaps *pm = NULL;
	struct sym_map *maps = NULL;
	size_t n = 0, nfuse;
	char path[4096];
	unsigned fuse[64];
	struct stat st;
	int ret;

	p->last_read_ms = now;
	p->execd = false;
	/* /proc/PID belongs to the process's effective ids (to root while it
	 * is not dumpable, e.g. setuid): whose files its mappings may show. */
	snprintf(path, sizeof(path), "%s/%d", s->proc_root, (int)p->pid);
	if (stat(path, &st) < 0) {
		ret = errno == ENOENT ? -ESRCH : -errno;
		goto out;
	}
	p->uid = st.st_uid;
	p->gid = st.st_gid;
	snprintf(path, sizeof(path), "%s/%d/maps", s->proc_root, (int)p->pid);
	ret = procmaps_read(path, &pm);
	if (ret < 0) {
		log_debug("symbols: pid %d: cannot read %s: %s", (int)p->pid, path, strerror(-ret));
		ret = ret == -ENOMEM ? ret : 0;
		goto out;
	}
	/* Files on FUSE are not read on the event loop: their server could
	 * make the read wait forever. They keep module+offset names. (After
	 * the maps: a process gone already costs no more reads.) */
	nfuse = procmaps_fuse_devices_of(&s->fuse, s->proc_root, (int)p->pid, fuse,
					 sizeof(fuse) / sizeof(fuse[0]), NULL);
	s->stats.maps_reads++;
	maps = calloc(pm->count ? pm->count : 1, sizeof(*maps));
	if (!maps) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < pm->count; i++) {
		const struct procmaps_entry *e = &pm->entries[i];
		struct sym_map *m = &maps[n];
		struct sym_map *o;
		const char *slash;

		if (!(e->perms & PROCMAPS_EXEC))
			continue;
		m->start = e->start;
		m->end = e->end;
		m->offset = e->offset;
		m->dev = makedev(e->dev_major, e->dev_minor);
		m->inode = e->inode;
		m->path = strdup(e->path);
		if (!m->path) {
			ret = -ENOMEM;
			goto out;
		}
		slash = strrchr(m->path, '/');
		m->base = slash ? slash + 1 : m->path;
		if (strcmp(e->path, "[vdso]") == 0)
			m->type = SYM_MAP_VDSO;
		else if (strcmp(e->path, "[vsyscall]") == 0)
			m->type = SYM_MAP_VSYSCALL;
		else if (procmaps_is_anon(e))
			m->type = SYM_MAP_ANON;
		else
			m->type = SYM_MAP_FILE;
		o = symbols_old_match(p->maps, p->nmaps, m);
		if (o) {
			m->elf = o->elf;
			m->elf_tried = o->elf_tried;
			o->elf = NULL;
		}
		if (m->type == SYM_MAP_FILE && procmaps_on_devices(e, fuse, nfuse)) {
			m->elf_tried = true;
			s->stats.untrusted_fs++;
		}
		n++;
	}
	symbols_maps_release(p->maps, p->nmaps);
	p->maps = maps;
	p->nmaps = n;
	p->last_hit = 0;
	maps = NULL;
	ret = 0;
out:
	if (maps)
		symbols_maps_release(maps, n);
	procmaps_free(pm);
	return ret;
}

static struct sym_proc *symbols_proc_find(const struct symbols *s, pid_t pid)
{
	uint64_t *v = htab_map_get(&s->procs, (uint64_t)(uint32_t)pid);

	return v ? (struct sym_proc *)(uintptr_t)*v : NULL;
}

/* start_ns (a sample's process identity, CLOCK_BOOTTIME ns at clock-tick
 * resolution) as /proc/PID/stat's field 22. */
uint64_t symbols_start_ticks(uint64_t start_ns)
{
	static uint64_t tick_ns;

	if (!tick_ns) {
		long hz = sysconf(_SC_CLK_TCK);

		tick_ns = hz > 0 ? 1000000000ull / (uint64_t)hz : 10000000ull;
	}
	return start_ns / tick_ns;
}

/* The cached maps of pid, for a sample of the process that started at
 * start (ticks; 0 = whichever has pid). -ESRCH when that process is not the
 * one that has pid now: its samples drained after it exited and another
 * process took its pid must not be named from the new one's binaries. */
int symbols_get_proc(struct symbols *s, pid_t pid, uint64_t start, uint64_t now,
		     struct sym_proc **out)
{
	struct sym_proc *p = symbols_proc_find(s, pid);
	int ret = 0;

	if (p) {
		bool other = start && p->start_time && start != p->start_time;

		if (other && start == p->gone_time) {
			ret = -ESRCH;
			goto out;
		}
		/* A sample that names its process's start (all BPF samples do)
		 * tells by itself whether the cached process is its own: /proc
		 * is asked only when they differ or the start is unknown. */
		if (other || ((!start || !p->start_time) &&
			      now - p->last_check_ms >= SYM_PID_CHECK_MS)) {
			uint64_t st = symbols_read_start_time(s, pid);

			p->last_check_ms = now;
			if (st && st != p->start_time) {
				/* Same pid, another process: nothing cached applies. */
				log_debug("symbols: pid %d reused, dropping its maps", (int)pid);
				symbols_maps_release(p->maps, p->nmaps);
				p->maps = NULL;
				p->nmaps = 0;
				p->start_time = st;
				ret = symbols_read_maps(s, p, now);
			}
		}
		if (ret == 0 && start && p->start_time && start != p->start_time) {
			p->gone_time = start;
			ret = -ESRCH;
		}
		/* The addresses of an image exec'd since are not in the maps
		 * of the one before (nor named from its files). */
		if (ret == 0 && p->execd)
			ret = symbols_read_maps(s, p, now);
		goto out;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		ret = -ENOMEM;
		goto out;
	}
	p->pid = pid;
	p->start_time = symbols_read_start_time(s, pid);
	p->last_check_ms = now;
	ret = htab_map_put(&s->procs, (uint64_t)(uint32_t)pid, (uint64_t)(uintptr_t)p);
	if (ret < 0) {
		free(p);
		p = NULL;
		goto out;
	}
	ret = symbols_read_maps(s, p, now);
	if (ret == 0 && start && p->start_time && start != p->start_time) {
		p->gone_time = start;
		ret = -ESRCH;
	}
out:
	if (p)
		p->last_used_ms = now;
	*out = p;
	return ret;
}

void symbols_note_exec(struct symbols *s, pid_t pid)
{
	struct sym_proc *p = s ? symbols_proc_find(s, pid) : NULL;

	if (p)
		p->execd = true;
}

struct sym_map *symbols_find_map(struct sym_proc *p, uint64_t addr)
{
	size_t lo = 0, hi = p->nmaps;

	if (p->last_hit < p->nmaps && addr >= p->maps[p->last_hit].start &&
	    addr < p->maps[p->last_hit].end)
		return &p->maps[p->last_hit];
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (p->maps[mid].start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0 || addr >= p->maps[lo - 1].end)
		return NULL;
	p->last_hit = lo - 1;
	return &p->maps[lo - 1];
}

bool symbols_key_eq(const struct sym_file_key *a, const struct sym_file_key *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
	       a->mtime_sec == b->mtime_sec && a->mtime_nsec == b->mtime_nsec;
}

int symbols_elf_add_key(struct sym_elf *e, const struct sym_file_key *key)
{
	struct sym_file_key *k = realloc(e->keys, (e->nkeys + 1) * sizeof(*k));

	if (!k)
		return -ENOMEM;
	e->keys = k;
	e->keys[e->nkeys++] = *key;
	return 0;
}

/* Whether a process running as uid:gid could read the file (mode bits;
 * supplementary groups and ACLs are not looked at, so a file readable only
 * through them is not read: names lost, never someone else's). */
static bool symbols_may_read(const struct stat *st, uid_t uid, gid_t gid)
{
	if (uid == 0)
		return true;
	if (st->st_uid == uid)
		return st->st_mode & S_IRUSR;
	if (st->st_gid == gid)
		return st->st_mode & S_IRGRP;
	return st->st_mode & S_IROTH;
}

/* The fallback when map_files cannot be opened: the mapping's path inside
 * the process's root, resolved so that the process's owner cannot redirect
 * it (no symlink, no magic link, no escape from that root; a FIFO or device
 * is not opened for reading). */
static int symbols_open_in_root(const struct symbols *s, pid_t pid, const char *path)
{
	struct open_how how = {
		.flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | O_NOFOLLOW,
		.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	char root[64];
	int rfd, fd;

	snprintf(root, sizeof(root), "%s/%d/root", s->proc_root, (int)pid);
	rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rfd < 0)
		return -errno;
	fd = (int)syscall(SYS_openat2, rfd, path, &how, sizeof(how));
	fd = fd < 0 ? -errno : fd;
	close(rfd);
	return fd;
}

/* Opens the file behind a mapping: map_files works for deleted or replaced
 * binaries and across mount namespaces, and is the mapped file itself; the
 * path inside <root>/PID/root is the fallback (no map_files access), used
 * only when it is the file mapped (device and inode of the maps line: on
 * overlayfs map_files' file may show other ones). Only a regular file that
 * the process's owner could read. -errno on failure. */
int symbols_open_mapping(const struct symbols *s, const struct sym_proc *p,
			 const struct sym_map *m)
{
	char path[4096];
	struct stat st;
	bool fallback = false;
	int fd, err;

	snprintf(path, sizeof(path), "%s/%d/map_files/%" PRIx64 "-%" PRIx64, s->proc_root,
		 (int)p->pid, m->start, m->end);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	err = fd < 0 ? errno : 0;
	if (fd < 0 && m->path[0] == '/') {
		fd = symbols_open_in_root(s, p->pid, m->path);
		err = fd < 0 ? -fd : 0;
		fallback = true;
	}
	if (fd < 0)
		return -err;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    (fallback && (st.st_ino != m->inode || st.st_dev != m->dev))) {
		close(fd);
		return -ENOEXEC;
	}
	if (!symbols_may_read(&st, p->uid, p->gid)) {
		close(fd);
		return -EACCES;
	}
	return fd;
}

