/* The JVMs the BPF walk knows (issue 30, step 2): for each HotSpot process
 * the sampler meets, what bpf/hotspot.bpf.c needs (code heaps, segment
 * maps, offsets) written into the BPF map hs_procs, kept current while the
 * process lives, dropped at its exec or exit; and the names of the Java
 * frames that walk recorded (compiled pcs, interpreted Method*s).
 *
 * Bounded: at most JP_HS_MAX_PROCS JVMs at once, at most HS_PROCS_LOOKS
 * processes' maps read and HS_PROCS_OPENS libjvm.so's VMStructs read per
 * tick, and a process that is no JVM (or does not
 * look like one) is tried a few times and then left alone until it execs.
 * Not thread-safe: the daemon's loop owns it (drain and symbolization both
 * run there). */
#ifndef JPROF_HS_PROC_H
#define JPROF_HS_PROC_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "symbols.h"

#define HS_PROCS_OPENS 4            /* JVMs read per tick at most */
#define HS_PROCS_LOOKS 128          /* processes looked at per tick (their maps) */
#define HS_PROCS_CANDIDATES 256     /* processes waiting for a (re)try */
#define HS_PROCS_TRIES 5            /* tries of one process (one a second) */
#define HS_PROCS_REFRESH_MS 1000    /* code heap bounds read again (they grow) */
#define HS_PROCS_RETRY_MS 10000     /* a process without libjvm.so looked at again */
#define HS_MEMO_SLOTS 1024          /* names kept for the rest of a drain interval */
#define HS_MEMO_NAME 192            /* ... if shorter than this */

struct hs_procs_stats {
	uint64_t jvms;            /* in the BPF map now */
	uint64_t opened;          /* JVMs written into the map, ever */
	uint64_t not_jvm;         /* tries that found no libjvm.so / VMStructs */
	uint64_t open_failed;     /* tries that found one that does not hold up */
	uint64_t full;            /* JVMs left out: the map was full */
	uint64_t busy;            /* processes not queued: every slot held a waiting one */
	uint64_t try_cpu_ns;      /* CPU time the tries took (maps, VMStructs, heaps) */
	uint64_t dropped;         /* entries removed (exit, exec, unreadable) */
	uint64_t named;           /* Java frames named */
	uint64_t unnamed;         /* Java frames whose blob or method did not hold up */
	uint64_t name_cpu_ns;     /* CPU time naming them took */
	uint64_t memo_hits;       /* frames named again in the same drain interval, not read */
};

struct hs_procs;

/* map_fd: the sampler's hs_procs map (borrowed); proc_root NULL: "/proc". */
int hs_procs_new(int map_fd, const char *proc_root, struct hs_procs **out);
void hs_procs_free(struct hs_procs *hp);

/* A process was sampled whose frames the walk could not all place (the
 * sampler's unwind-miss message): it is tried as a JVM at the next tick. */
void hs_procs_consider(struct hs_procs *hp, pid_t pid, uint64_t start_ns);
/* pid exec'd: its entry goes, and it may be tried again. */
void hs_procs_exec(struct hs_procs *hp, pid_t pid);
/* Opens the processes due, refreshes the JVMs' code heap bounds, drops the
 * ones gone. Call about once a second (every drain). */
void hs_procs_tick(struct hs_procs *hp);

/* A symbols_java_fn (symbols.h): names the Java frame at addr of process
 * pid (started start_ns): a compiled frame's pc (looked up as given) or,
 * with method, an interpreted frame's Method*. 0 and out filled; -ENOENT:
 * not a JVM the walk knows, or nothing holds up at addr. Read from the JVM
 * at most once per address between two ticks (one drain interval): the
 * samples of a drain are named by what the JVM holds at that drain. */
int hs_procs_symbolize(void *hp, pid_t pid, uint64_t start_ns, uint64_t addr, bool method,
		       struct sym_result *out);

void hs_procs_get_stats(const struct hs_procs *hp, struct hs_procs_stats *out);

#endif
