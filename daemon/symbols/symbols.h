/* Layer symbols (daemon/symbols/): turns addresses into (kind, name,
 * module). Uses core only.
 *
 * Symbolization: user addresses via /proc/PID/maps + ELF symbol tables
 * (libelf), kernel addresses via /proc/kallsyms. Owns every cache (per-pid
 * maps, per-ELF symbol tables keyed by build-id, kallsyms).
 *
 * Name rules (shared by every output format):
 *  - names are valid UTF-8 with no control characters; other bytes are
 *    written as \xNN;
 *  - C++ and Rust names are demangled (libiberty's cplus_demangle);
 *  - an address with no covering symbol is "<module basename>+0x<hex>",
 *    where hex is, in the ELF file's own vaddr space (what addr2line
 *    wants), the start of the function holding it by .eh_frame_hdr, or
 *    without one there its 4 KiB page (symbols_region): one stable name per
 *    function, not one per address, never the nearest unrelated symbol;
 *  - an address in no mapping is "[unknown]" (FRAME_MARKER), one in an
 *    anonymous executable mapping is "[jit]" (FRAME_JIT_UNKNOWN, module ""),
 *    one in the vdso is symbolized from the vdso image or "[vdso]+0x..";
 *  - a kernel address is a function name, or "[kernel]" when kallsyms has
 *    no symbol for it (or only zeros: kptr_restrict, no CAP_SYSLOG): never
 *    an address or an offset, which would give away the kernel's load
 *    address (KASLR).
 */
#ifndef JPROF_SYMBOLS_H
#define JPROF_SYMBOLS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "frame.h"

#define SYM_NAME_MAX 1024
#define SYM_MODULE_MAX 256

#define SYM_PATH_MAX 4096
#define SYM_BUILD_ID_HEX_MAX 129      /* 64 bytes as hex, NUL */

struct sym_result {
	enum frame_kind kind;
	char name[SYM_NAME_MAX];      /* function, or module+0xoff */
	char module[SYM_MODULE_MAX];  /* basename of the ELF ("libc.so.6"), or
					 kernel module name ("" = vmlinux) */
	/* User frames in a file mapping: where the address lies (loc.path and
	 * loc.build_id point at path and build_id below); has_loc false for
	 * every other frame, and always for kernel frames. */
	bool has_loc;
	struct frame_loc loc;
	char path[SYM_PATH_MAX];
	char build_id[SYM_BUILD_ID_HEX_MAX];
};

struct symbols_stats {
	uint64_t elf_cache_hits;
	uint64_t elf_cache_misses;
	uint64_t elf_errors;          /* unreadable/corrupt ELF files */
	uint64_t maps_reads;          /* /proc/PID/maps parsed */
	uint64_t kallsyms_loads;
	uint64_t cached_elfs;
	uint64_t cached_pids;
	uint64_t untrusted_fs;        /* mappings of files on FUSE: not read, unnamed */
	uint64_t debuginfod_loaded;   /* stripped tables replaced by a debuginfod debug file */
	uint64_t debuginfod_requested;  /* lookups queued (dbginfod.h) */
	uint64_t debuginfod_failed;   /* lookups the server had no file for, or timed out */
	uint64_t debuginfod_refused;  /* wants over their uid's budget (asked again later) */
	/* Symbol table memory (symbols_set_max_memory). */
	uint64_t mem_bytes;           /* held by cached tables (and reserved for loads) */
	uint64_t over_budget;         /* tables not read: past the total or the uid's share */
	uint64_t evicted;             /* unused tables dropped to make room */
	uint64_t deferred_loads;      /* tables too big for the loop, read on the worker */
	uint64_t deferred_dropped;    /* such tables not read: the worker's queue was full */
	/* Source lines (lines.h), when symbols_set_lines gave a worker. */
	uint64_t lines_resolved;      /* addresses given a file:line */
	uint64_t lines_unresolved;    /* addresses the debug info had no line for, or none read */
	uint64_t lines_timeouts;      /* renderings that stopped waiting for an address */
	uint64_t lines_files_failed;  /* files with no DWARF, unreadable, or too big */
	uint64_t lines_mem_bytes;     /* debug sections held */
};

struct symbols;

/* kallsyms_path: NULL for /proc/kallsyms (tests pass a fixture file).
 * proc_root: NULL for "/proc" (tests may pass another root). */
struct symbols *symbols_new(const char *kallsyms_path, const char *proc_root);
void symbols_free(struct symbols *s);

/* Resolves one user address of process pid, started at start_ns (a built
 * sample's start_ns; 0 = whichever process has pid): when pid now names
 * another process, the address is "[unknown]", never named from that
 * process's binaries. is_return_addr: the address is a return address
 * (every frame but the leaf), so addr-1 is looked up to land inside the
 * call instruction. Returns 0 with *out filled (an unresolvable address
 * still fills "[unknown]" or module+0xoff and returns 0); -errno only for
 * invalid arguments or allocation failure. */
int symbols_resolve_user(struct symbols *s, pid_t pid, uint64_t start_ns, uint64_t addr,
			 bool is_return_addr, struct sym_result *out);

/* Code without a symbol is named by region (see the name rules above):
 * the function start from .eh_frame_hdr, else the page of this size. */
#define SYMBOLS_REGION_PAGE 4096
struct elfsym;
/* The region key of vaddr in es (NULL: no ELF, pages only). */
uint64_t symbols_region(const struct elfsym *es, uint64_t vaddr);

/* The name of every kernel frame without a symbol. */
#define SYMBOLS_KERNEL_UNKNOWN "[kernel]"

/* Resolves a kernel address (FRAME_KERNEL; module = kernel module name or
 * ""). Returns 0 when resolved; 1 when not, with the name
 * SYMBOLS_KERNEL_UNKNOWN (no address); -EINVAL. */
int symbols_resolve_kernel(struct symbols *s, uint64_t addr, struct sym_result *out);

/* Reads pid's maps and opens its mapped files now, while it runs: the
 * samples of a young process may be named after it has exited (the
 * sampler's young samples, delivered once unwound). */
void symbols_prime(struct symbols *s, pid_t pid, uint64_t start_ns);

/* Process pid has called exec: its cached maps are of the image it left
 * (exec keeps the pid and the start time, the sample's identity), and are
 * read again before the next name. */
void symbols_note_exec(struct symbols *s, pid_t pid);

/* Process pid has exited or been re-exec'd: drop its cached maps. */
void symbols_forget_pid(struct symbols *s, pid_t pid);

/* Drops per-pid caches not used for max_idle_s seconds, or for 2 s when the
 * process has exited, and ELF tables no longer referenced; bounds memory on
 * long-running hosts and on hosts that spawn processes all the time. */
void symbols_expire(struct symbols *s, unsigned max_idle_s);

void symbols_get_stats(const struct symbols *s, struct symbols_stats *out);

/* Directory searched for separate debug info (".build-id/xx/rest.debug" and
 * "<dir of binary>/<debuglink name>"); NULL restores /usr/lib/debug. Applies
 * to ELF files loaded afterwards. 0 or -ENOMEM. */
int symbols_set_debug_root(struct symbols *s, const char *dir);

/* Symbol table memory: the bytes all cached tables may hold (default
 * SYMBOLS_MAX_MEMORY_DEFAULT). Processes of a uid other than root may hold
 * at most a quarter of it, and all of them together three quarters, so
 * that root's processes always have a quarter. Unused tables are dropped,
 * least recently attached first, to make room; a table that still does not
 * fit is not read (its frames get module+offset names) and is counted in
 * over_budget. */
#define SYMBOLS_MAX_MEMORY_DEFAULT ((uint64_t)1 << 30)
void symbols_set_max_memory(struct symbols *s, uint64_t bytes);

/* Where debug files a debuginfod server gives are also announced, for
 * their line info (lines.h; borrowed, outlives s; NULL: nowhere). */
struct lines;
void symbols_set_lines(struct symbols *s, struct lines *l);

/* Java frames of JVMs walked without an agent (issue 30; daemon/hotspot/
 * hs_proc.c answers): a user address in anonymous executable memory, and
 * one tagged SYMBOLS_JAVA_METHOD (an interpreted frame's Method*, not an
 * address: the BPF walk's JP_IP_JAVA_METHOD), are asked of fn first: 0 when
 * it filled out, < 0 when it has no name (then "[jit]", or "[unknown]" for a
 * Method*). fn runs on the caller's thread; arg is borrowed. */
#define SYMBOLS_JAVA_METHOD (1ULL << 61)
typedef int (*symbols_java_fn)(void *arg, pid_t pid, uint64_t start_ns, uint64_t addr,
			       bool method, struct sym_result *out);
void symbols_set_java(struct symbols *s, symbols_java_fn fn, void *arg);

/* Loads kallsyms if needed; false when kernel symbols are unavailable
 * (unreadable, or all addresses zero: kptr_restrict or no CAP_SYSLOG). */
bool symbols_kernel_available(struct symbols *s);

#endif
