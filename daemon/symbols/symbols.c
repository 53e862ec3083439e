#include "symbols.h"

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

/* A miss re-reads maps (dlopen) at most this often per pid, so a stream of
 * garbage addresses cannot turn into a stream of /proc reads. */
#define SYM_MAPS_REREAD_MS 1000
/* How often the pid's start time is re-checked to notice pid reuse. */
#define SYM_PID_CHECK_MS 1000
/* Kernel modules and BPF programs come and go: a miss reloads kallsyms at
 * most this often. */
#define SYM_KALLSYMS_RELOAD_MS 30000
/* Kernel pages that missed even in a fresh kallsyms (code without a symbol,
 * e.g. BPF trampolines) trigger no reload until this long has passed: a
 * stack that keeps hitting one would otherwise reload it every 30 s (tens
 * of ms of reading and sorting each time). */
#define SYM_KALLSYMS_MISSED_MS 600000
#define SYM_KALLSYMS_MISSED_MAX 64
/* A symbol table with more entries than this is read on the worker
 * (symload.h), not on the loop. Reading one costs about 0.2-0.5 us per
 * entry on this 2-core test machine (release build): cc1plus (31k
 * entries) 12 ms, libLLVM-15 (46k) 18 ms, node (110k) 50-60 ms, a crafted
 * 1M-entry table 170 ms. So at most ~30 ms of the loop per file; node and
 * libjvm (58-70k) are read on the worker, their first samples keeping
 * module+offset names for the tens of ms that takes. */
#define SYM_LOOP_MAX_ENTRIES 65536

/* Identifies a file without a build-id (and lets a second pid mapping the
 * same file find the cached table without parsing it again). */
struct sym_file_key {
	uint64_t dev;
	uint64_t ino;
	uint64_t size;
	int64_t mtime_sec;
	int64_t mtime_nsec;
};

struct sym_elf {
	struct sym_elf *next;
	struct elfsym *es;               /* NULL: the file failed to load */
	uint8_t build_id[ELFSYM_BUILD_ID_MAX];
	size_t build_id_len;
	struct sym_file_key *keys;       /* every file seen holding this ELF */
	size_t nkeys;
	bool shared;                     /* from a file no user could write: shared by build-id */
	bool dbg_asked;                  /* stripped: its debug file was asked of debuginfod */
	unsigned refcnt;                 /* mappings pointing here */
	uint64_t idle_since_ms;          /* refcnt 0 since (seen by a sweep); 0: in use */
	uint64_t last_used_ms;           /* last attached to a mapping: eviction order */
	uid_t uid;                       /* whose process loaded it: charged to that uid */
	uint64_t loading;                /* token of its load on the worker; 0: none */
	bool adopting;                   /* that load is a debuginfod file to adopt */
	bool refused;                    /* its table was not read: no room for its uid */
	size_t reserved;                 /* bytes reserved for that load */
};

enum sym_map_type { SYM_MAP_FILE, SYM_MAP_ANON, SYM_MAP_VDSO, SYM_MAP_VSYSCALL };

struct sym_map {
	uint64_t start;
	uint64_t end;
	uint64_t offset;
	char *path;
	const char *base;                /* basename, points into path */
	enum sym_map_type type;
	dev_t dev;                       /* the mapped file, as the maps line shows it */
	uint64_t inode;
	bool elf_tried;                  /* (also set for files on FUSE: never read) */
	struct sym_elf *elf;             /* holds one reference */
};

#define SYM_DEAD_GRACE_MS 2000
/* A primed process's (symbols_prime) samples may come after it exited,
 * once unwound: the sampler's age cap for them (3 s) and a drain or two. */
#define SYM_PRIMED_GRACE_MS 12000
#define SYM_ELF_KEEP_MS 30000            /* unreferenced ELF tables */

struct sym_proc {
	pid_t pid;
	uint64_t primed_ms;              /* symbols_prime read it then; 0: never */
	uint64_t start_time;             /* /proc/PID/stat field 22 */
	uint64_t gone_time;              /* a start time of pid found not to be its process now */
	uid_t uid;                       /* whose files it may read: owner of /proc/PID */
	gid_t gid;
	struct sym_map *maps;            /* executable mappings, sorted */
	size_t nmaps;
	size_t last_hit;
	uint64_t last_read_ms;
	uint64_t last_check_ms;
	uint64_t last_used_ms;
};

struct symbols {
	char *kallsyms_path;
	char *proc_root;
	char *debug_root;
	struct htab_map procs;           /* pid -> struct sym_proc * */
	struct sym_elf *elfs;
	size_t nelfs;
	struct kallsyms *ksyms;
	uint64_t ksyms_load_ms;
	uint64_t ksyms_missed[SYM_KALLSYMS_MISSED_MAX];  /* addr >> 12 */
	size_t nksyms_missed;
	uint64_t ksyms_missed_since;
	bool ksyms_tried;
	bool ksyms_warned;
	struct elfsym *vdso;
	uint64_t vdso_size;
	bool vdso_tried;
	struct dbginfod *dbg;            /* NULL: no DEBUGINFOD_URLS */
	struct symload *loader;          /* big tables; NULL: read on the loop */
	uint64_t next_token;
	uint64_t max_bytes;              /* symbols_set_max_memory */
	struct lines *lines;             /* borrowed; NULL: no file:line */
	struct symbols_stats stats;
	struct procmaps_fuse_cache fuse;
};

static uint64_t symbols_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

struct symbols *symbols_new(const char *kallsyms_path, const char *proc_root)
{
	struct symbols *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	procmaps_fuse_cache_init(&s->fuse);
	s->max_bytes = SYMBOLS_MAX_MEMORY_DEFAULT;
	s->proc_root = strdup(proc_root ? proc_root : "/proc");
	s->kallsyms_path = kallsyms_path ? strdup(kallsyms_path) : NULL;
	if (!s->proc_root || (kallsyms_path && !s->kallsyms_path)) {
		symbols_free(s);
		return NULL;
	}
	if (dbginfod_new(&s->dbg) == 0)
		log_info("symbols: stripped binaries' debug files from DEBUGINFOD_URLS=%s",
			 getenv("DEBUGINFOD_URLS"));
	if (symload_new(&s->loader) < 0)
		log_warn("symbols: no worker thread: big symbol tables are read on the loop");
	return s;
}

void symbols_set_max_memory(struct symbols *s, uint64_t bytes)
{
	if (s)
		s->max_bytes = bytes ? bytes : SYMBOLS_MAX_MEMORY_DEFAULT;
}

int symbols_set_debug_root(struct symbols *s, const char *dir)
{
	char *d = NULL;

	if (!s)
		return -EINVAL;
	if (dir) {
		d = strdup(dir);
		if (!d)
			return -ENOMEM;
	}
	free(s->debug_root);
	s->debug_root = d;
	return 0;
}

void symbols_set_lines(struct symbols *s, struct lines *l)
{
	if (s)
		s->lines = l;
}

static void symbols_elf_put(struct sym_elf *e)
{
	if (e && e->refcnt > 0)
		e->refcnt--;
}

static void symbols_maps_release(struct sym_map *maps, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		symbols_elf_put(maps[i].elf);
		free(maps[i].path);
	}
	free(maps);
}

static void symbols_proc_free(struct sym_proc *p)
{
	if (!p)
		return;
	symbols_maps_release(p->maps, p->nmaps);
	free(p);
}

static void symbols_elf_free(struct sym_elf *e)
{
	if (!e)
		return;
	elfsym_free(e->es);
	free(e->keys);
	free(e);
}

/* Frees ELF tables no mapping has referred to for keep_ms. Kept a while:
 * on a host that runs the same programs over and over (a compiler per
 * file), each new process would otherwise read and sort the same symbol
 * table again. */
static void symbols_elf_sweep(struct symbols *s, uint64_t now, uint64_t keep_ms)
{
	struct sym_elf **pp = &s->elfs;

	while (*pp) {
		struct sym_elf *e = *pp;

		if (e->refcnt == 0 && !e->idle_since_ms)
			e->idle_since_ms = now;
		if (e->refcnt)
			e->idle_since_ms = 0;
		if (e->refcnt == 0 && !e->loading && now - e->idle_since_ms >= keep_ms) {
			*pp = e->next;
			symbols_elf_free(e);
			s->nelfs--;
		} else {
			pp = &e->next;
		}
	}
}

static bool symbols_drop_proc(uint64_t key, uint64_t *val, void *arg)
{
	symbols_proc_free((struct sym_proc *)(uintptr_t)*val);
	return false;
}

void symbols_free(struct symbols *s)
{
	if (!s)
		return;
	/* First: the worker may still hold a load. */
	symload_free(s->loader);
	htab_map_retain(&s->procs, symbols_drop_proc, NULL);
	htab_map_release(&s->procs);
	while (s->elfs) {
		struct sym_elf *e = s->elfs;

		s->elfs = e->next;
		symbols_elf_free(e);
	}
	dbginfod_free(s->dbg);
	kallsyms_free(s->ksyms);
	procmaps_fuse_cache_release(&s->fuse);
	elfsym_free(s->vdso);
	free(s->kallsyms_path);
	free(s->proc_root);
	free(s->debug_root);
	free(s);
}

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
static int symbols_read_maps(struct symbols *s, struct sym_proc *p, uint64_t now)
{
	struct procmaps *pm = NULL;
	struct sym_map *maps = NULL;
	size_t n = 0, nfuse;
	char path[4096];
	unsigned fuse[64];
	struct stat st;
	int ret;

	p->last_read_ms = now;
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
static uint64_t symbols_start_ticks(uint64_t start_ns)
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
static int symbols_get_proc(struct symbols *s, pid_t pid, uint64_t start, uint64_t now,
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

static struct sym_map *symbols_find_map(struct sym_proc *p, uint64_t addr)
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

static bool symbols_key_eq(const struct sym_file_key *a, const struct sym_file_key *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
	       a->mtime_sec == b->mtime_sec && a->mtime_nsec == b->mtime_nsec;
}

static int symbols_elf_add_key(struct sym_elf *e, const struct sym_file_key *key)
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
static int symbols_open_mapping(const struct symbols *s, const struct sym_proc *p,
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

/* ---- symbol table memory ----
 * Counted by walking the cached tables when a table is loaded (a miss):
 * a few hundred entries, and misses are rare, so no per-uid counters to
 * keep in step. A table's bytes are what it holds now (its formatted-name
 * cache grows with lookups) plus what is reserved for its load on the
 * worker. */

static size_t symbols_elf_bytes(const struct sym_elf *e)
{
	return elfsym_mem_bytes(e->es) + e->reserved;
}

static bool symbols_elf_idle(const struct sym_elf *e)
{
	return e->refcnt == 0 && !e->loading;
}

struct sym_usage {
	uint64_t all, uid, nonroot;
};

static void symbols_usage(const struct symbols *s, uid_t uid, bool with_idle, struct sym_usage *u)
{
	memset(u, 0, sizeof(*u));
	for (const struct sym_elf *e = s->elfs; e; e = e->next) {
		size_t b = symbols_elf_bytes(e);

		if (!with_idle && symbols_elf_idle(e))
			continue;
		u->all += b;
		u->uid += e->uid == uid ? b : 0;
		u->nonroot += e->uid != 0 ? b : 0;
	}
}

static uint64_t symbols_left(uint64_t limit, uint64_t used)
{
	return used < limit ? limit - used : 0;
}

/* What a new table of uid may take once unused tables are dropped: the
 * total, and for uids other than root a quarter of it each and three
 * quarters for all of them (root keeps a quarter whatever they hold). */
static uint64_t symbols_budget(const struct symbols *s, uid_t uid, const struct sym_usage *u)
{
	uint64_t left = symbols_left(s->max_bytes, u->all);

	if (uid != 0) {
		uint64_t a = symbols_left(s->max_bytes / 4, u->uid);
		uint64_t b = symbols_left(s->max_bytes / 4 * 3, u->nonroot);

		left = a < left ? a : left;
		left = b < left ? b : left;
	}
	return left;
}

static void symbols_elf_unlink(struct symbols *s, struct sym_elf *victim)
{
	for (struct sym_elf **pp = &s->elfs; *pp; pp = &(*pp)->next)
		if (*pp == victim) {
			*pp = victim->next;
			s->nelfs--;
			symbols_elf_free(victim);
			return;
		}
}

/* Drops unused tables, least recently attached first, until bytes more
 * for uid fit (or none is left to drop). Only tables that count against
 * a limit being exceeded are dropped. */
static void symbols_make_room(struct symbols *s, uid_t uid, uint64_t bytes,
			      const struct sym_elf *keep)
{
	for (;;) {
		struct sym_usage u;
		struct sym_elf *victim = NULL;
		bool all, mine, nonroot;

		symbols_usage(s, uid, true, &u);
		all = u.all + bytes > s->max_bytes;
		mine = uid != 0 && u.uid + bytes > s->max_bytes / 4;
		nonroot = uid != 0 && u.nonroot + bytes > s->max_bytes / 4 * 3;
		if (!all && !mine && !nonroot)
			return;
		for (struct sym_elf *e = s->elfs; e; e = e->next) {
			if (e == keep || !symbols_elf_idle(e) || !symbols_elf_bytes(e))
				continue;
			if (!all && !(mine && e->uid == uid) && !(nonroot && e->uid != 0))
				continue;
			if (!victim || e->last_used_ms < victim->last_used_ms)
				victim = e;
		}
		if (!victim)
			return;
		s->stats.evicted++;
		symbols_elf_unlink(s, victim);
	}
}

/* The limits of a load on the loop for uid's process. */
static struct elfsym_limits symbols_limits(const struct symbols *s, uid_t uid)
{
	struct sym_usage u;
	uint64_t left;

	symbols_usage(s, uid, false, &u);
	left = symbols_budget(s, uid, &u);
	return (struct elfsym_limits){
		/* max_bytes 0 means no limit: 1 lets nothing through. */
		.max_bytes = left ? (size_t)left : 1,
		.max_entries = s->loader ? SYM_LOOP_MAX_ENTRIES : 0,
	};
}

/* A table left unread by the limits of the loop: read on the worker if it
 * fits the budget (its bytes reserved meanwhile), else counted. fd is
 * taken; fd < 0: path is a debuginfod file, adopted when read (a refusal
 * then leaves e its own table, so it is not marked refused). */
static void symbols_defer(struct symbols *s, struct sym_elf *e, int fd, const char *path,
			  const char *what)
{
	struct elfsym_limits lim = symbols_limits(s, e->uid);
	size_t need = elfsym_table_bytes(e->es);
	int r;

	if (need > lim.max_bytes) {
		s->stats.over_budget++;
		e->refused = fd >= 0;
		log_info("symbols: %s: its symbol table needs up to %zu bytes, more than uid %u "
			 "may use now (%zu): module+offset names", what, need, (unsigned)e->uid,
			 lim.max_bytes > 1 ? lim.max_bytes : 0);
		if (fd >= 0)
			close(fd);
		return;
	}
	lim.max_entries = 0;
	lim.no_debug_files = fd < 0;
	e->loading = ++s->next_token;
	r = symload_queue(s->loader, e->loading, fd, path, s->debug_root, &lim);
	if (r < 0) {
		e->loading = 0;
		e->refused = fd >= 0;
		s->stats.deferred_dropped++;
		log_info("symbols: %s: not read: %s", what, strerror(-r));
		return;
	}
	s->stats.deferred_loads++;
	e->adopting = fd < 0;
	e->refused = false;
	e->reserved = need;
	symbols_make_room(s, e->uid, 0, e);
}

/* A table with its names (or loading them): one refused for another
 * uid's budget is not. */
static bool symbols_elf_named(const struct sym_elf *e)
{
	return !e->refused;
}

/* A cached table left without names for its loader's lack of room is read
 * again (on the worker) for a process whose uid has room: one user filling
 * its share must not leave root's processes, or another user's, unnamed
 * when they map the same file. Takes fd. */
static void symbols_elf_retry(struct symbols *s, struct sym_elf *e, uid_t uid, int fd,
			      const char *path)
{
	struct elfsym_limits lim;

	if (!e->es || symbols_elf_named(e) || e->loading) {
		close(fd);
		return;
	}
	lim = symbols_limits(s, uid);
	if (elfsym_table_bytes(e->es) > lim.max_bytes || !s->loader) {
		close(fd);
		return;
	}
	e->uid = uid;
	symbols_defer(s, e, fd, path, path);
}

/* Attaches the cached (or newly loaded) symbol table to a file mapping.
 * Failures leave m->elf NULL; only -ENOMEM is returned. */
static int symbols_attach_elf(struct symbols *s, const struct sym_proc *p, struct sym_map *m)
{
	struct sym_file_key key;
	struct elfsym_limits lim;
	struct elfsym *es = NULL;
	struct sym_elf *e;
	const uint8_t *bid;
	size_t bid_len;
	struct stat st;
	bool shared;
	int fd, ret = 0;

	m->elf_tried = true;
	fd = symbols_open_mapping(s, p, m);
	if (fd < 0) {
		log_debug("symbols: pid %d: cannot open %s: %s", (int)p->pid, m->path, strerror(-fd));
		goto out;
	}
	if (fstat(fd, &st) < 0)
		goto out;
	memset(&key, 0, sizeof(key));
	key.dev = st.st_dev;
	key.ino = st.st_ino;
	key.size = (uint64_t)st.st_size;
	key.mtime_sec = st.st_mtim.tv_sec;
	key.mtime_nsec = st.st_mtim.tv_nsec;
	for (e = s->elfs; e; e = e->next)
		for (size_t i = 0; i < e->nkeys; i++)
			if (symbols_key_eq(&e->keys[i], &key)) {
				s->stats.elf_cache_hits++;
				symbols_elf_retry(s, e, p->uid, fd, m->path);
				fd = -1;
				goto attach;
			}
	s->stats.elf_cache_misses++;
	lim = symbols_limits(s, p->uid);
	ret = elfsym_open_fd_limited(fd, m->path, s->debug_root, &lim, &es);
	if (ret == -ENOMEM)
		goto out;
	if (ret < 0) {
		s->stats.elf_errors++;
		log_debug("symbols: pid %d: %s: unreadable ELF", (int)p->pid, m->path);
		ret = 0;
	}
	/* Same build-id = same code, but only as far as a build-id can be
	 * trusted: a file a user could write claims any build-id it likes
	 * (and may have none). Tables are shared by build-id only between
	 * files no user could write (root's, not writable by group or others);
	 * any other file gets a table of its own, found again by its file key.
	 * A file without build-id is never shared. */
	bid = elfsym_build_id(es, &bid_len);
	shared = bid && proc_file_root_only(&st);
	for (e = shared ? s->elfs : NULL; e; e = e->next)
		if (e->es && e->shared && e->build_id_len == bid_len &&
		    memcmp(e->build_id, bid, bid_len) == 0 && symbols_elf_named(e))
			break;
	if (!e) {
		e = calloc(1, sizeof(*e));
		if (!e) {
			ret = -ENOMEM;
			goto out;
		}
		e->es = es;
		es = NULL;
		if (bid)
			memcpy(e->build_id, bid, bid_len);
		e->build_id_len = bid_len;
		e->shared = shared;
		e->uid = p->uid;
		e->next = s->elfs;
		s->elfs = e;
		s->nelfs++;
		if (elfsym_names(e->es) != ELFSYM_NAMES_READ) {
			symbols_defer(s, e, fd, m->path, m->path);
			fd = -1;
		} else {
			symbols_make_room(s, e->uid, 0, e);
		}
	}
	ret = symbols_elf_add_key(e, &key);
	if (ret < 0)
		goto out;
attach:
	/* Stripped: a debuginfod server may have its symbols (taken in by a
	 * later lookup, symbols_take_debuginfod). Charged to this process's
	 * uid; over its budget, the next process to map the file asks. */
	if (s->dbg && !e->dbg_asked && e->es && e->build_id_len && !e->loading &&
	    elfsym_names(e->es) == ELFSYM_NAMES_READ &&
	    (elfsym_source(e->es) == ELFSYM_SRC_DYNSYM ||
	     elfsym_source(e->es) == ELFSYM_SRC_NONE))
		e->dbg_asked = dbginfod_want(s->dbg, e->build_id, e->build_id_len, p->uid) > 0;
	e->refcnt++;
	e->last_used_ms = symbols_now_ms();
	m->elf = e;
out:
	elfsym_free(es);
	if (fd >= 0)
		close(fd);
	return ret;
}

/* The daemon's own vdso: the kernel maps one image into every process of
 * the same ABI, so its symbols name the target's vdso addresses too. */
static void symbols_load_vdso(struct symbols *s)
{
	struct procmaps *pm = NULL;
	unsigned long base;

	s->vdso_tried = true;
	base = getauxval(AT_SYSINFO_EHDR);
	if (!base || procmaps_read("/proc/self/maps", &pm) < 0)
		goto out;
	for (size_t i = 0; i < pm->count; i++) {
		const struct procmaps_entry *e = &pm->entries[i];

		if (e->start == base && strcmp(e->path, "[vdso]") == 0) {
			if (elfsym_open_memory((const void *)base, e->end - e->start, &s->vdso) == 0)
				s->vdso_size = e->end - e->start;
			break;
		}
	}
out:
	procmaps_free(pm);
}

/* Where addr lies in file mapping m, for exporters (pprof): the path as
 * mapped and the build-id of the ELF read once per binary. */
static void symbols_set_loc(struct sym_result *out, const struct sym_map *m, pid_t pid,
			    uint64_t addr)
{
	const struct sym_elf *e = m->elf;
	size_t n = 0;

	out->has_loc = true;
	out->loc = (struct frame_loc){
		.addr = addr, .map_start = m->start, .map_limit = m->end, .map_offset = m->offset,
		.path = out->path, .build_id = out->build_id, .pid = (uint32_t)pid,
		.build_id_shared = e && e->shared,
		.file_dev = e && e->nkeys ? e->keys[0].dev : 0,
		.file_ino = e && e->nkeys ? e->keys[0].ino : 0,
	};
	elfsym_sanitize(m->path, strlen(m->path), out->path, sizeof(out->path));
	/* Every user frame of every sample comes here: no snprintf per byte
	 * (it was 4.5% of the daemon's CPU under the host view). */
	for (size_t i = 0; e && i < e->build_id_len && n + 2 < sizeof(out->build_id); i++) {
		out->build_id[n++] = "0123456789abcdef"[e->build_id[i] >> 4];
		out->build_id[n++] = "0123456789abcdef"[e->build_id[i] & 15];
	}
	out->build_id[n] = '\0';
}

static void symbols_set(struct sym_result *out, enum frame_kind kind, const char *name,
			const char *module)
{
	out->kind = kind;
	elfsym_sanitize(name, strlen(name), out->name, sizeof(out->name));
	elfsym_sanitize(module, strlen(module), out->module, sizeof(out->module));
}

static void symbols_set_offset(struct sym_result *out, const char *module, uint64_t off)
{
	size_t n;

	out->kind = FRAME_NATIVE;
	elfsym_sanitize(module, strlen(module), out->module, sizeof(out->module));
	n = elfsym_sanitize(module, strlen(module), out->name, sizeof(out->name) - 20);
	snprintf(out->name + n, sizeof(out->name) - n, "+0x%" PRIx64, off);
}

uint64_t symbols_region(const struct elfsym *es, uint64_t vaddr)
{
	uint64_t start;

	/* One name per function, not per address: the function's start as
	 * .eh_frame_hdr has it; without CFI there, the 4 KiB page. */
	if (es && elfsym_function_start(es, vaddr, &start) == 0)
		return start;
	return vaddr & ~(uint64_t)(SYMBOLS_REGION_PAGE - 1);
}

static void symbols_debuginfod_taken(struct symbols *s, struct sym_elf *e, const char *path)
{
	s->stats.debuginfod_loaded++;
	/* Its DWARF gives lines too. */
	if (s->lines)
		lines_add_debug_file(s->lines, e->build_id, e->build_id_len, path);
	symbols_make_room(s, e->uid, 0, e);
}

/* Debug files the debuginfod worker fetched: their symbols replace the
 * stripped tables of the same build-id, for every process mapping it. */
static void symbols_take_debuginfod(struct symbols *s)
{
	struct dbginfod_result r[8];
	size_t n;

	while ((n = dbginfod_take(s->dbg, r, sizeof(r) / sizeof(r[0]))) > 0)
		for (size_t i = 0; i < n; i++)
			for (struct sym_elf *e = s->elfs; e; e = e->next) {
				struct elfsym_limits lim;
				int a;

				if (!e->es || e->loading || e->build_id_len != r[i].build_id_len ||
				    memcmp(e->build_id, r[i].build_id, e->build_id_len) != 0)
					continue;
				/* Within the budget of the table's uid, and on the
				 * worker when big, as any other table. */
				lim = symbols_limits(s, e->uid);
				a = elfsym_adopt_debug_file_limited(e->es, r[i].path, &lim);
				if (a > 0) {
					symbols_debuginfod_taken(s, e, r[i].path);
				} else if (elfsym_names(e->es) != ELFSYM_NAMES_READ) {
					symbols_defer(s, e, -1, r[i].path, r[i].path);
				}
			}
}

/* Finished loads of the worker: their tables replace the placeholders
 * (segments, build-id, function starts) the mappings used meanwhile. */
static void symbols_take_loads(struct symbols *s)
{
	struct symload_result r;

	while (symload_take(s->loader, &r, 1) > 0) {
		struct sym_elf *e = s->elfs;

		while (e && e->loading != r.token)
			e = e->next;
		if (!e) {
			elfsym_free(r.es);
			continue;
		}
		e->loading = 0;
		e->reserved = 0;
		if (!r.es) {
			s->stats.elf_errors++;
		} else if (e->adopting) {
			if (elfsym_adopt(e->es, r.es, ELFSYM_SRC_DEBUGINFOD) > 0)
				symbols_debuginfod_taken(s, e, r.path);
			elfsym_free(r.es);
		} else {
			if (elfsym_names(r.es) == ELFSYM_NAMES_OVER_BUDGET)
				s->stats.over_budget++;
			elfsym_free(e->es);
			e->es = r.es;
			/* Charged to the uid it was loaded for (see symbols_attach_elf). */
			if (s->dbg && !e->dbg_asked && e->build_id_len &&
			    elfsym_names(e->es) == ELFSYM_NAMES_READ &&
			    (elfsym_source(e->es) == ELFSYM_SRC_DYNSYM ||
			     elfsym_source(e->es) == ELFSYM_SRC_NONE))
				e->dbg_asked = dbginfod_want(s->dbg, e->build_id, e->build_id_len,
							     e->uid) > 0;
		}
		e->adopting = false;
		symbols_make_room(s, e->uid, 0, e);
	}
}

void symbols_prime(struct symbols *s, pid_t pid, uint64_t start_ns)
{
	struct sym_proc *p;

	if (!s || pid <= 0 ||
	    symbols_get_proc(s, pid, symbols_start_ticks(start_ns), symbols_now_ms(), &p) < 0)
		return;
	p->primed_ms = symbols_now_ms();
	for (size_t i = 0; i < p->nmaps; i++)
		if (p->maps[i].type == SYM_MAP_FILE && !p->maps[i].elf_tried &&
		    symbols_attach_elf(s, p, &p->maps[i]) < 0)
			break;
}

int symbols_resolve_user(struct symbols *s, pid_t pid, uint64_t start_ns, uint64_t addr,
			 bool is_return_addr, struct sym_result *out)
{
	struct sym_proc *p;
	struct sym_map *m;
	uint64_t now, look, file_off, vaddr;
	struct elfsym *es;
	int ret = -EINVAL;

	if (!s || !out || pid <= 0)
		goto out;
	if (s->dbg && dbginfod_pending(s->dbg))
		symbols_take_debuginfod(s);
	if (symload_pending(s->loader))
		symbols_take_loads(s);
	out->has_loc = false;
	now = symbols_now_ms();
	/* A return address points after the call; addr - 1 is inside it. */
	look = is_return_addr && addr > 0 ? addr - 1 : addr;
	ret = symbols_get_proc(s, pid, symbols_start_ticks(start_ns), now, &p);
	if (ret == -ESRCH) {
		symbols_set(out, FRAME_MARKER, "[unknown]", "");
		ret = 0;
		goto out;
	}
	if (ret < 0)
		goto out;
	m = symbols_find_map(p, look);
	if (!m && now - p->last_read_ms >= SYM_MAPS_REREAD_MS) {
		ret = symbols_read_maps(s, p, now);
		if (ret < 0)
			goto out;
		m = symbols_find_map(p, look);
	}
	ret = 0;
	if (!m) {
		symbols_set(out, FRAME_MARKER, "[unknown]", "");
		goto out;
	}
	file_off = look - m->start + m->offset;
	switch (m->type) {
	case SYM_MAP_ANON:
		symbols_set(out, FRAME_JIT_UNKNOWN, "[jit]", "");
		goto out;
	case SYM_MAP_VSYSCALL:
		symbols_set_offset(out, "[vsyscall]", look - m->start);
		goto out;
	case SYM_MAP_VDSO:
		if (!s->vdso_tried)
			symbols_load_vdso(s);
		es = s->vdso_size == m->end - m->start ? s->vdso : NULL;
		break;
	case SYM_MAP_FILE:
	default:
		if (!m->elf_tried) {
			ret = symbols_attach_elf(s, p, m);
			if (ret < 0)
				goto out;
		}
		es = m->elf ? m->elf->es : NULL;
		break;
	}
	vaddr = file_off;
	if (es && elfsym_offset_to_vaddr(es, file_off, &vaddr) < 0)
		vaddr = file_off;
	if (m->type == SYM_MAP_FILE) {
		symbols_set_loc(out, m, pid, look);
		out->loc.vaddr = vaddr;
	}
	out->kind = FRAME_NATIVE;
	if (es && elfsym_lookup(es, vaddr, out->name, sizeof(out->name), NULL) == 0) {
		elfsym_sanitize(m->base, strlen(m->base), out->module, sizeof(out->module));
		out->loc.symbolized = true;
		goto out;
	}
	symbols_set_offset(out, m->base, symbols_region(es, vaddr));
out:
	return ret;
}

static void symbols_load_kallsyms(struct symbols *s, uint64_t now)
{
	struct kallsyms *k = NULL;
	int r;

	s->ksyms_tried = true;
	s->ksyms_load_ms = now;
	r = kallsyms_load(s->kallsyms_path, &k);
	if (r < 0) {
		if (!s->ksyms_warned)
			log_warn("symbols: cannot read %s: %s; kernel frames stay unresolved",
				 s->kallsyms_path ? s->kallsyms_path : "/proc/kallsyms",
				 strerror(-r));
		s->ksyms_warned = true;
		return;
	}
	s->stats.kallsyms_loads++;
	kallsyms_free(s->ksyms);
	s->ksyms = k;
	if (!kallsyms_available(k) && !s->ksyms_warned) {
		log_warn("symbols: kernel symbols unavailable: %s lists only zero addresses "
			 "(kptr_restrict, or no CAP_SYSLOG)",
			 s->kallsyms_path ? s->kallsyms_path : "/proc/kallsyms");
		s->ksyms_warned = true;
	}
}

bool symbols_kernel_available(struct symbols *s)
{
	if (!s)
		return false;
	if (!s->ksyms_tried)
		symbols_load_kallsyms(s, symbols_now_ms());
	return kallsyms_available(s->ksyms);
}

/* addr's page missed in a kallsyms read after it was first seen. */
static bool symbols_kernel_missed(struct symbols *s, uint64_t addr, uint64_t now)
{
	if (now - s->ksyms_missed_since >= SYM_KALLSYMS_MISSED_MS) {
		s->nksyms_missed = 0;
		s->ksyms_missed_since = now;
	}
	for (size_t i = 0; i < s->nksyms_missed; i++)
		if (s->ksyms_missed[i] == addr >> 12)
			return true;
	return false;
}

int symbols_resolve_kernel(struct symbols *s, uint64_t addr, struct sym_result *out)
{
	const char *name, *module;
	uint64_t now;
	int r;

	if (!s || !out)
		return -EINVAL;
	out->has_loc = false;
	now = symbols_now_ms();
	if (!s->ksyms_tried)
		symbols_load_kallsyms(s, now);
	r = kallsyms_lookup(s->ksyms, addr, &name, &module, NULL);
	if (r < 0 && now - s->ksyms_load_ms >= SYM_KALLSYMS_RELOAD_MS &&
	    !symbols_kernel_missed(s, addr, now)) {
		symbols_load_kallsyms(s, now);
		r = kallsyms_lookup(s->ksyms, addr, &name, &module, NULL);
		if (r < 0 && s->nksyms_missed < SYM_KALLSYMS_MISSED_MAX)
			s->ksyms_missed[s->nksyms_missed++] = addr >> 12;
	}
	if (r == 0) {
		out->kind = FRAME_KERNEL;
		elfsym_sanitize(name, strlen(name), out->name, sizeof(out->name));
		elfsym_sanitize(module, strlen(module), out->module, sizeof(out->module));
		return 0;
	}
	/* No address and no offset: either would give away where the kernel
	 * is loaded (KASLR) to whoever reads the profile. */
	symbols_set(out, FRAME_KERNEL, SYMBOLS_KERNEL_UNKNOWN, "");
	return 1;
}

void symbols_forget_pid(struct symbols *s, pid_t pid)
{
	uint64_t v;

	if (s && htab_map_del(&s->procs, (uint64_t)(uint32_t)pid, &v))
		symbols_proc_free((struct sym_proc *)(uintptr_t)v);
}

struct sym_expire {
	uint64_t now, idle_ms;
};

static bool symbols_keep_proc(uint64_t key, uint64_t *val, void *arg)
{
	const struct sym_expire *e = arg;
	struct sym_proc *p = (struct sym_proc *)(uintptr_t)*val;
	uint64_t idle = e->now - p->last_used_ms;

	/* A process that has exited needs its maps only until its last samples
	 * are drained (a second); hosts that spawn processes all the time would
	 * otherwise hold thousands. */
	if (idle < e->idle_ms &&
	    !(idle >= SYM_DEAD_GRACE_MS && e->now - p->primed_ms >= SYM_PRIMED_GRACE_MS &&
	      kill(p->pid, 0) < 0 && errno == ESRCH))
		return true;
	symbols_proc_free(p);
	return false;
}

void symbols_expire(struct symbols *s, unsigned max_idle_s)
{
	uint64_t now, idle_ms = (uint64_t)max_idle_s * 1000;

	if (!s)
		return;
	now = symbols_now_ms();
	if (symload_pending(s->loader))
		symbols_take_loads(s);
	htab_map_retain(&s->procs, symbols_keep_proc, &(struct sym_expire){ now, idle_ms });
	symbols_elf_sweep(s, now, idle_ms < SYM_ELF_KEEP_MS ? idle_ms : SYM_ELF_KEEP_MS);
}

void symbols_get_stats(const struct symbols *s, struct symbols_stats *out)
{
	if (!out)
		return;
	memset(out, 0, sizeof(*out));
	if (!s)
		return;
	*out = s->stats;
	if (s->dbg) {
		struct dbginfod_stats ds;

		dbginfod_get_stats(s->dbg, &ds);
		out->debuginfod_requested = ds.requested;
		out->debuginfod_failed = ds.failed;
		out->debuginfod_refused = ds.refused;
	}
	for (const struct sym_elf *e = s->elfs; e; e = e->next)
		out->mem_bytes += symbols_elf_bytes(e);
	if (s->lines) {
		struct lines_stats ls;

		lines_get_stats(s->lines, &ls);
		out->lines_resolved = ls.resolved;
		out->lines_unresolved = ls.unresolved;
		out->lines_timeouts = ls.timeouts;
		out->lines_files_failed = ls.files_failed + ls.files_too_big;
		out->lines_mem_bytes = ls.mem_bytes;
	}
	out->cached_elfs = s->nelfs;
	out->cached_pids = htab_map_count(&s->procs);
}
