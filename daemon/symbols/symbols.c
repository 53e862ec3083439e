#include "symbols.h"
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

void symbols_set_java(struct symbols *s, symbols_java_fn fn, void *arg)
{
	if (!s)
		return;
	s->java = fn;
	s->java_arg = arg;
}

static void symbols_elf_put(struct sym_elf *e)
{
	if (e && e->refcnt > 0)
		e->refcnt--;
}

void symbols_maps_release(struct sym_map *maps, size_t n)
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

void symbols_elf_free(struct sym_elf *e)
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
	if (addr & SYMBOLS_JAVA_METHOD) {
		ret = 0;
		if (!s->java || s->java(s->java_arg, pid, start_ns, addr & ~SYMBOLS_JAVA_METHOD,
					true, out) < 0)
			symbols_set(out, FRAME_MARKER, "[unknown]", "");
		goto out;
	}
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
		if (!s->java || s->java(s->java_arg, pid, start_ns, look, false, out) < 0)
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

