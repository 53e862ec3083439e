/* Layer collect (daemon/collect/): the BPF collectors and their perf
 * events; emits raw samples (rawsample.h). Uses core only.
 *
 * The BPF sampler: owns the skeleton, the perf events and the drain.
 *
 * Samples leave as struct raw_sample (rawsample.h), with the event's typed
 * values: for cpu-clock, {count, count * the source's period}.
 *
 * Sources: every perf event carries a source id in its bpf_cookie.
 * JP_SRC_HOST (0) is the always-on host view, opened here at
 * sampler_config.host_rate_hz; recording sessions open their own per-CPU
 * (sampler_cpu_events_open) or per-thread (sampler_thread_event_open) events
 * under their own source id and receive exactly their samples. */
#ifndef JPROF_SAMPLER_H
#define JPROF_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "rawsample.h"
#include "samplehist.h"
#include "unwtab.h"
#include "hs_proc.h"

struct sampler;
struct sampler_events;

struct sampler_config {
	unsigned host_rate_hz;     /* 0 disables the host view */
	unsigned stack_entries;    /* per stack map generation; 0 = default */
	unsigned count_entries;    /* per count map generation; 0 = default */
	bool no_unwind;            /* frame pointers only: no CFI tables */
	unsigned unwind_rows;      /* rows of all CFI tables together; 0 = default */
	unsigned unwind_cold_s;    /* unwtab_set_cold; 0 = default */
	const char *unwind_cache_dir;  /* unwtab_set_cache; NULL, "": none */
	unsigned long long unwind_cache_max_bytes;
};


struct sampler_stats {
	uint64_t samples, idle, skipped_covered;
	uint64_t kstack_err, ustack_err, collision, map_full, ringbuf_full, throttled;
	uint64_t foreign_ns;       /* tasks outside the daemon's pid namespace */
	uint64_t offcpu;           /* off-CPU intervals counted */
	uint64_t offcpu_short;     /* off-CPU intervals below their threshold: skipped */
	uint64_t offcpu_start_full;  /* switch-outs lost: the blocked-task map was full */
	uint64_t offcpu_held_stacks; /* stacks kept for tasks blocked across drains */
	uint64_t stack_missing;    /* id counted but the stack was gone (should stay 0) */
	uint64_t drains;
	uint64_t drain_ns_total;   /* time spent draining */
	uint64_t last_drain_counts;  /* count map entries the last drain took */
	uint64_t last_drain_stacks;  /* stack map entries the last drain freed */
	uint64_t count_capacity;     /* entries of one count map generation */
	uint64_t stack_capacity;     /* buckets of one stack map generation */
	unsigned cpus;
	unsigned host_rate_hz;
	unsigned cpu_event_sets;
	unsigned thread_events;
	unsigned offcpu_targets;     /* off-CPU recordings (processes and the whole host) */
	/* DWARF unwinding (BPF side) */
	uint64_t uw_dwarf, uw_no_tables, uw_root, uw_frames, uw_fp_frames, uw_collision;
	uint64_t young_copied, young_copy_err;  /* samples sent with a stack copy (bpf: young_copy) */
	/* Java frames walked in BPF (bpf/hotspot.bpf.c) and the JVMs known */
	uint64_t hs_walks, hs_frames, hs_lost;
	struct hs_procs_stats hotspot;
	bool unwind_on;
	struct unwtab_stats unwind;  /* the tables (unwind/unwtab.h) */
	/* sampled binaries without tables (unwtab_missing) */
	struct unwtab_missing unwind_missing[8];
	size_t unwind_nmissing;
	/* BPF time of each sample since start, all CPUs (empty in a build
	 * with JPROF_BPF_TIMING=OFF) */
	struct samplehist bpf_time;
	struct samplehist bpf_time_java;  /* ... of them, those that walked Java frames */
};

struct sampler_callbacks {
	/* One aggregated entry (or one ring record) of a drain. */
	void (*sample)(const struct raw_sample *s, void *arg);
	/* A new thread of a watched tgid was created (tid 0: not known, the
	 * daemon runs in a pid namespace; rescan the process). */
	void (*new_thread)(uint32_t tgid, uint32_t tid, void *arg);
	/* A process exec'd (any tgid, watched or not: its credentials may
	 * have changed, and so have its maps). May be NULL. */
	void (*exec)(uint32_t tgid, void *arg);
	/* A process without unwind tables was sampled (start_ns: its start,
	 * CLOCK_BOOTTIME): its samples are delivered once unwound, maybe after
	 * it exited, so whatever names them is best read now. May be NULL. */
	void (*young)(uint32_t tgid, uint64_t start_ns, void *arg);
	void *sample_arg;
	void *new_thread_arg;
	void *exec_arg;
	void *young_arg;
};

int sampler_new(const struct sampler_config *cfg, const struct sampler_callbacks *cb,
		struct sampler **out);
/* The JVMs whose Java frames the BPF walk steps (hs_proc.h): what names
 * those frames (symbols_set_java). NULL with unwinding off. */
struct hs_procs *sampler_hotspot(struct sampler *s);
/* Detaches and closes every event and program; NULL-safe. */
void sampler_free(struct sampler *s);

/* fd to poll for ring buffer messages (new threads); call
 * sampler_poll_ring() when it is readable. */
int sampler_ring_fd(const struct sampler *s);
int sampler_poll_ring(struct sampler *s);

/* Flips the generation, waits for running programs, delivers every sample of
 * the old generation (and pending ring records) through the callbacks.
 * Blocks for one RCU grace period (membarrier): for the end of a recording.
 * Completes a drain begun with sampler_drain_begin first. */
int sampler_drain(struct sampler *s);

/* The same without blocking: sampler_drain_begin flips the generation and
 * has a thread wait for the grace period; when sampler_drain_fd becomes
 * readable, sampler_drain_end delivers the old generation. begin returns 0
 * (nothing done) while a drain is still pending, 1 when it began; end
 * returns 1 when it completed a drain, 0 when there was none to complete
 * (sampler_drain completed it), -errno on failure. */
int sampler_drain_fd(const struct sampler *s);
int sampler_drain_begin(struct sampler *s);
int sampler_drain_end(struct sampler *s);

/* One event per online CPU, period_ns of CPU time, for source. flags:
 * JP_COOKIE_RECORD (a record per sample, with its time) or 0 (counts). */
int sampler_cpu_events_open(struct sampler *s, uint32_t source, uint64_t period_ns,
			    uint64_t flags, struct sampler_events **out);
/* One event on one thread (pid = tid, cpu = -1). flags: JP_COOKIE_RECORD,
 * JP_COOKIE_SIGNAL. -ESRCH if the thread is gone. */
int sampler_thread_event_open(struct sampler *s, uint32_t source, pid_t tid, uint64_t period_ns,
			      uint64_t flags, struct sampler_events **out);
/* The perf fd of a single-event set (for passing to an agent); -1 if none. */
int sampler_events_fd(const struct sampler_events *ev);
/* The CPU time the set's cpu-clock events counted while started (the
 * kernel's own count, whatever became of the samples): a thread's CPU time
 * over the recording, to compare samples with. 0 or -errno. */
int sampler_events_count_ns(const struct sampler_events *ev, uint64_t *ns);
/* Detaches the program and closes the fds; NULL-safe. */
void sampler_events_close(struct sampler_events *ev);
/* Stops (false) or starts (true) counting on every event of the set; an
 * agent's copy of an event (the same open file) follows. A stopped
 * cpu-clock event keeps the rest of its period. 0 or the first -errno. */
int sampler_events_enable(struct sampler_events *ev, bool on);

/* Builds tgid's unwind tables now (a recording starts) rather than on its
 * first sample; never blocks. */
void sampler_unwind_prepare(struct sampler *s, uint32_t tgid);
/* True while tgid's tables are queued or being built (a recording's start
 * gate waits for them); never blocks on a build. */
bool sampler_unwind_pending(struct sampler *s, uint32_t tgid);
/* Waits (up to timeout_ns) until every requested table is built (tests). */
int sampler_unwind_wait(struct sampler *s, uint64_t timeout_ns);

/* Ask for new-thread messages of tgid (reference counted). */
int sampler_watch_tgid(struct sampler *s, uint32_t tgid);
void sampler_unwatch_tgid(struct sampler *s, uint32_t tgid);
/* tid's per-thread event under source feeds the host view; the host events
 * skip it. */
int sampler_cover_tid(struct sampler *s, uint32_t tid, uint32_t source);
void sampler_uncover_tid(struct sampler *s, uint32_t tid, uint32_t source);

/* Record events of source fire at most once per gap_ns per thread (0 lifts
 * the limit); faster ones are dropped in BPF and counted as throttled. */
int sampler_set_min_gap(struct sampler *s, uint32_t source, uint64_t gap_ns);

/* Off-CPU recording (sampler_offcpu.c): every task of tgid (or, with
 * tgid 0, of the host) is timed from its switch-out to its switch-in;
 * intervals of at least threshold_ns arrive as EVENT_OFFCPU raw samples
 * of source, valued {intervals, nanoseconds}, with the stacks the task
 * left the CPU with. One target per tgid and one whole-host target at a
 * time (-EBUSY); a tgid target takes precedence over the whole-host one.
 * An interval still open when the target is removed is not counted. */
int sampler_offcpu_add(struct sampler *s, uint32_t source, uint32_t tgid, uint64_t threshold_ns);
/* Forgets when source's tasks blocked: intervals count from their next
 * switch-out (a recording whose time starts now). */
void sampler_offcpu_restart(struct sampler *s, uint32_t source);
/* Removes the target of source (NULL-safe on none); waits one grace period. */
void sampler_offcpu_remove(struct sampler *s, uint32_t source, uint32_t tgid);

void sampler_get_stats(const struct sampler *s, struct sampler_stats *out);

/* Routes libbpf's own messages through the daemon's log. */
void sampler_setup_logging(void);

#endif
