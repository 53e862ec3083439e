/* Internals of the sampler module, shared by sampler.c (skeleton, events,
 * drain) and sampler_offcpu.c (off-CPU targets and the stacks held for
 * blocked tasks). Not for other modules; the only users of the skeleton. */
#ifndef JPROF_SAMPLER_INT_H
#define JPROF_SAMPLER_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "htab.h"
#include "rawsample.h"
#include "sampler.h"
#include "sampler.skel.h"
#include "unwtab.h"
#include "hs_proc.h"
#include "bpf/sampler.h"

#define SAMPLER_MAX_CPUS 4096
#define DRAIN_BATCH 4096
#define USTACK_BATCH 256          /* 1 KiB a stack */

struct sampler_events {
	struct sampler *owner;
	uint32_t source;
	bool has_period;          /* counted in the owner's periods */
	bool is_thread;
	unsigned n;
	int *fds;
	struct bpf_link **links;
};

struct watch {
	uint32_t tgid;
	uint32_t refs;
};

/* The sampling period of each source's events: a sample's weight. Kept
 * through the drain after its last events close, whose samples need it. */
struct source_period {
	uint32_t source;
	uint32_t refs;
	uint64_t period_ns;
	uint64_t retire_after;    /* refs 0: drop once drains reaches this */
};

/* A stack read during one drain, so each stack is fetched once. */
struct cached_stack {
	uint32_t n;
	uint64_t *ips;
};

/* Stacks of earlier drain epochs that off-CPU intervals still refer to:
 * (epoch << 32 | id) -> index in stacks. */
struct held_stacks {
	struct htab_map index;
	struct cached_stack *stacks;
	size_t n, cap;
};

struct sampler {
	struct sampler_bpf *skel;
	struct unwtab *unwind;          /* NULL: DWARF unwinding off */
	struct hs_procs *hotspot;       /* JVMs walked in BPF; NULL with unwinding off */
	struct ring_buffer *ring;
	struct sampler_callbacks cb;
	struct sampler_events *host;
	unsigned host_rate_hz;
	int cpus[SAMPLER_MAX_CPUS];
	unsigned ncpus;
	unsigned possible_cpus;
	bool membarrier_ok;
	bool in_pid_ns;
	struct watch *watches;
	size_t nwatches;
	struct source_period *periods;  /* one per open source: a few dozen at most */
	size_t nperiods;
	unsigned cpu_event_sets;
	unsigned thread_events;
	uint64_t drains, drain_ns_total, stack_missing;
	uint64_t last_drain_counts, last_drain_stacks;
	/* drain scratch */
	struct jp_count_key *keys;
	uint64_t *values;
	struct htab_map stack_cache;    /* gen << 32 | id -> index in cached (ids of
					   the two generations' maps are unrelated) */
	struct cached_stack *cached;
	size_t ncached, cached_cap;
	uint32_t *stack_ids;
	size_t stack_ids_cap;
	uint32_t *ustack_keys;          /* batch read of the unwinder's stacks */
	struct jp_ustack *ustack_vals;
	/* The grace period of a drain runs on its own thread (membarrier can
	 * take a second on a loaded host; the loop must not wait on it). */
	pthread_t grace_thread;
	bool grace_started;
	int grace_req_fd;           /* eventfd: 1 = wait one grace period, 2 = quit */
	int grace_done_fd;          /* eventfd: one count per grace period waited */
	bool drain_pending;         /* flipped, grace period not confirmed yet */
	unsigned pending_gen;       /* the generation that pending drain empties */
	uint64_t pending_t0;
	uint32_t pending_epoch;     /* jp_gen before that flip */
	/* off-CPU (sampler_offcpu.c) */
	struct bpf_link *offcpu_link;   /* the switch program, while a target exists */
	unsigned offcpu_targets;
	uint32_t offcpu_all_source;
	bool cleared_any;               /* some epoch's stacks have been cleared */
	uint32_t cleared_epoch;         /* the last one */
	struct held_stacks held;        /* for intervals still to come */
	struct held_stacks held_prev;   /* the previous drain's: records in flight */
	struct jp_offcpu_start *start_vals;  /* drain scratch */
	uint32_t *start_keys;
	struct jp_offcpu_value *off_values;
};

/* sampler_drain.c */
/* A stack of generation gen, fetched once per drain; NULL if gone. */
const uint64_t *sampler_get_stack(struct sampler *s, unsigned gen, int32_t id, uint32_t *n);
/* Reads and deletes every entry of a count map (keys jp_count_key) in
 * batches into s->keys and values, calling each(s, index) per entry. */
int sampler_drain_map(struct sampler *s, int fd, const char *what, void *values,
		      void (*each)(struct sampler *s, uint32_t i));
/* One raw sample of key k to the sample callback. */
void sampler_emit(struct sampler *s, const struct jp_count_key *k, enum event_id ev,
		  const uint64_t *values, uint64_t time_ns, const uint64_t *kips, uint32_t nk,
		  const uint64_t *uips, uint32_t nu);
/* A ring buffer record (libbpf's callback). */
int sampler_handle_ring_msg(void *ctx, void *data, size_t size);
/* Empties the per-drain stack cache, keeping its capacity. */
void sampler_stack_cache_reset(struct sampler *s);

/* sampler.c */
/* Waits one grace period of the BPF programs (membarrier, or 20 ms). */
void sampler_wait_for_programs(bool membarrier_ok);

/* sampler_offcpu.c */
/* During a drain of epoch pending_epoch, after its grace period and before
 * the ring is read: copies the stacks blocked tasks refer to. */
int sampler_offcpu_hold(struct sampler *s);
/* Delivers and empties the off-CPU counts of generation gen. */
int sampler_offcpu_drain(struct sampler *s, unsigned gen);
/* After the old generation's stacks were cleared. */
void sampler_offcpu_drained(struct sampler *s);
/* A JP_MSG_OFFCPU ring record. */
void sampler_offcpu_record(struct sampler *s, const struct jp_msg_offcpu *m);
void sampler_offcpu_free(struct sampler *s);

#endif
