/* Internals shared by the symbolizer's files: symbols.c (lifecycle,
 * lookups), symbols_proc.c (processes and their mappings) and symbols_elf.c
 * (symbol tables: memory per uid, loads on the worker, debuginfod). Not for
 * other modules. */
#ifndef JPROF_SYMBOLS_INT_H
#define JPROF_SYMBOLS_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "elfsym.h"
#include "htab.h"
#include "procmaps.h"
#include "symbols.h"

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
	bool execd;                      /* exec'd since its maps were read */
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
	symbols_java_fn java;            /* symbols_set_java; NULL: none */
	void *java_arg;
	struct symbols_stats stats;
	struct procmaps_fuse_cache fuse;
};


static inline uint64_t symbols_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* symbols.c */
void symbols_maps_release(struct sym_map *maps, size_t n);
void symbols_elf_free(struct sym_elf *e);

/* symbols_elf.c */
size_t symbols_elf_bytes(const struct sym_elf *e);
/* Attaches the cached (or newly loaded) symbol table to a file mapping.
 * Failures leave m->elf NULL; only -ENOMEM is returned. */
int symbols_attach_elf(struct symbols *s, const struct sym_proc *p, struct sym_map *m);
/* The daemon's own vdso: the kernel maps one image into every process of
 * the same ABI, so its symbols name the target's vdso addresses too. */
void symbols_load_vdso(struct symbols *s);
/* Debug files the debuginfod worker fetched: their symbols replace the
 * stripped tables of the same build-id, for every process mapping it. */
void symbols_take_debuginfod(struct symbols *s);
/* Finished loads of the worker: their tables replace the placeholders
 * (segments, build-id, function starts) the mappings used meanwhile. */
void symbols_take_loads(struct symbols *s);

/* symbols_proc.c */
/* Re-reads /proc/PID/maps, keeping only executable mappings. On failure
 * (process gone) the previous table stays: samples drained after exit must
 * still resolve. */
int symbols_read_maps(struct symbols *s, struct sym_proc *p, uint64_t now);
/* start_ns (a sample's process identity, CLOCK_BOOTTIME ns at clock-tick
 * resolution) as /proc/PID/stat's field 22. */
uint64_t symbols_start_ticks(uint64_t start_ns);
/* The cached maps of pid, for a sample of the process that started at
 * start (ticks; 0 = whichever has pid). -ESRCH when that process is not the
 * one that has pid now: its samples drained after it exited and another
 * process took its pid must not be named from the new one's binaries. */
int symbols_get_proc(struct symbols *s, pid_t pid, uint64_t start, uint64_t now,
		     struct sym_proc **out);
struct sym_map *symbols_find_map(struct sym_proc *p, uint64_t addr);
bool symbols_key_eq(const struct sym_file_key *a, const struct sym_file_key *b);
int symbols_elf_add_key(struct sym_elf *e, const struct sym_file_key *key);
/* Opens the file behind a mapping: map_files works for deleted or replaced
 * binaries and across mount namespaces, and is the mapped file itself; the
 * path inside <root>/PID/root is the fallback (no map_files access), used
 * only when it is the file mapped (device and inode of the maps line: on
 * overlayfs map_files' file may show other ones). Only a regular file that
 * the process's owner could read. -errno on failure. */
int symbols_open_mapping(const struct symbols *s, const struct sym_proc *p,
			 const struct sym_map *m);

#endif
