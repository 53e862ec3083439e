/* The symbolizer's symbol tables (symbols_int.h): the memory each uid's
 * tables may hold, loading a mapping's table (on the loop or the worker),
 * the vDSO, and the worker's and debuginfod's answers. */
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

/* ---- symbol table memory ----
 * Counted by walking the cached tables when a table is loaded (a miss):
 * a few hundred entries, and misses are rare, so no per-uid counters to
 * keep in step. A table's bytes are what it holds now (its formatted-name
 * cache grows with lookups) plus what is reserved for its load on the
 * worker. */

size_t symbols_elf_bytes(const struct sym_elf *e)
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
int symbols_attach_elf(struct symbols *s, const struct sym_proc *p, struct sym_map *m)
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
void symbols_load_vdso(struct symbols *s)
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
void symbols_take_debuginfod(struct symbols *s)
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
void symbols_take_loads(struct symbols *s)
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

