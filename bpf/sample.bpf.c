/* Perf-event sampling: one program for per-CPU events (host view and
 * whole-host recordings) and one for per-thread events (recordings of one
 * process). Counts are aggregated in hash maps; stacks go to stack maps.
 * Both come in two generations: userspace flips jp_gen, waits for programs
 * that saw the old value to finish (an RCU grace period), then drains and
 * clears the old generation, so no sample is lost or counted twice.
 * Recordings that keep each sample's time send records on the ring instead. */
#include "jprof.bpf.h"

struct counts_map {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct jp_count_key);
	__type(value, __u64);
};

struct counts_map counts0 SEC(".maps");
struct counts_map counts1 SEC(".maps");

/* BPF time per sample (bpf/sampler.h). Built with -DJP_BPF_TIMING=0 (CMake
 * option JPROF_BPF_TIMING=OFF) the programs do not time themselves and the
 * histogram stays empty: the switch exists to measure what timing costs. */
#ifndef JP_BPF_TIMING
#define JP_BPF_TIMING 1
#endif

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);  /* JP_HIST_ALL, JP_HIST_JAVA */
	__type(key, __u32);
	__type(value, struct jp_sample_hist);
} sample_hist SEC(".maps");

/* tid -> source id of the per-thread event that feeds the host view. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u32);
} covered SEC(".maps");

/* source -> least time between two records of one thread. An agent holds
 * copies of its record events and could shorten their period; this keeps
 * it from flooding the ring buffer that other recordings share. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} source_min_gap SEC(".maps");

/* (source << 32 | tid) -> the time of that thread's last record of that
 * source: recordings that share a JVM's threads (one agent, several event
 * sets) are each held to their own gap. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u64);
} thread_last SEC(".maps");

/* A program's start, for sample_timed (0 when timing is compiled out). */
static __always_inline __u64 sample_clock(void)
{
	return JP_BPF_TIMING ? bpf_ktime_get_ns() : 0;
}

/* Adds the time since t0 to this CPU's histogram: once per counted sample,
 * at its end. A CPU runs one perf_event program at a time (the kernel's
 * recursion guard), so plain increments are exact. */
static __always_inline void sample_timed(__u64 t0)
{
	__u32 zero = 0, java = JP_HIST_JAVA;
	struct jp_uw_state *u;
	struct jp_sample_hist *h;
	__u64 ns, b;

	if (!JP_BPF_TIMING)
		return;
	ns = bpf_ktime_get_ns() - t0;
	h = bpf_map_lookup_elem(&sample_hist, &zero);
	if (!h)
		return;
	b = ns / JP_HIST_BUCKET_NS;
	if (b > JP_HIST_BUCKETS - 1)
		b = JP_HIST_BUCKETS - 1;
	h->buckets[b]++;
	h->sum_ns += ns;
	/* A JVM's samples apart too: the walk left its Java frame count in
	 * this CPU's scratch (cleared here, so a sample without a walk after
	 * it does not count again). */
	u = bpf_map_lookup_elem(&unwind_scratch, &zero);
	if (!u || !u->hs_frames)
		return;
	u->hs_frames = 0;
	h = bpf_map_lookup_elem(&sample_hist, &java);
	if (!h)
		return;
	h->buckets[b]++;
	h->sum_ns += ns;
}

/* x86-64: kernel text lives in the upper canonical half, so the sign of the
 * interrupted IP tells the mode (perf context allows only 8-byte reads of
 * regs, which rules out testing cs). */
static __always_inline int in_user_mode(struct bpf_perf_event_data *ctx)
{
	return (long)ctx->regs.ip >= 0;
}

/* Reads both stacks into the generation's stack maps; counts failures. */
static __always_inline void read_stacks(struct bpf_perf_event_data *ctx, __u32 gen, __u32 tgid,
					struct jp_counters *c, __s32 *kstack, __s32 *ustack,
					__u32 *flags)
{
	void *stacks = gen ? (void *)&stacks1 : (void *)&stacks0;

	*kstack = -1;
	*ustack = -1;
	if (!in_user_mode(ctx)) {
		*flags |= JP_KEY_KERNEL_MODE;
		*kstack = stack_id(ctx, stacks, 0, 0, c);
	}
	if (is_kthread()) {
		*flags |= JP_KEY_KTHREAD;
		return;
	}
	*ustack = user_stack_id(ctx, gen, tgid, c);
}

static __always_inline void count(void *counts, struct jp_count_key *key, struct jp_counters *c)
{
	__u64 one = 1, *v;

	v = bpf_map_lookup_elem(counts, key);
	if (v) {
		__sync_fetch_and_add(v, 1);
		return;
	}
	if (bpf_map_update_elem(counts, key, &one, BPF_NOEXIST) == 0)
		return;
	/* Lost a race with another CPU inserting the same key, or full. */
	v = bpf_map_lookup_elem(counts, key);
	if (v)
		__sync_fetch_and_add(v, 1);
	else
		c->map_full++;
}

static __always_inline void aggregate(struct bpf_perf_event_data *ctx, struct jp_counters *c,
				      __u32 tgid, __u32 tid, __u32 source, __u32 flags)
{
	__u32 gen = jp_gen & 1;
	struct jp_count_key key = {
		.tgid = tgid,
		.tid = tid,
		.source = source,
		.flags = flags,
		.start_ns = process_start(),
	};

	process_comm(key.comm);
	bpf_get_current_comm(key.tcomm, sizeof(key.tcomm));
	read_stacks(ctx, gen, tgid, c, &key.kstack, &key.ustack, &key.flags);
	/* A process without unwind tables yet (most are young): unwound in
	 * the daemon from a copy of its stack once they exist. The host view
	 * only: a recording's last such samples would come after it ended. */
	if (source == JP_SRC_HOST && !(key.flags & JP_KEY_KTHREAD) && young_copy(&key, gen, c))
		return;
	count(gen ? (void *)&counts1 : (void *)&counts0, &key, c);
}

static __always_inline void emit_record(struct bpf_perf_event_data *ctx, struct jp_counters *c,
					__u32 tgid, __u32 tid, __u32 source, __u32 flags)
{
	struct jp_msg_sample *m;
	__u32 gen = jp_gen & 1;

	m = bpf_ringbuf_reserve(&events, sizeof(*m), 0);
	if (!m) {
		c->ringbuf_full++;
		return;
	}
	m->type = JP_MSG_SAMPLE;
	m->tgid = tgid;
	m->tid = tid;
	m->source = source;
	m->time_ns = bpf_ktime_get_ns();
	m->gen = gen;
	m->flags = flags;
	m->start_ns = process_start();
	__builtin_memset(m->comm, 0, sizeof(m->comm));
	process_comm(m->comm);
	bpf_get_current_comm(m->tcomm, sizeof(m->tcomm));
	read_stacks(ctx, gen, tgid, c, &m->kstack, &m->ustack, &m->flags);
	/* Records are polled at drain time; no wakeup per sample. */
	bpf_ringbuf_submit(m, BPF_RB_NO_WAKEUP);
}

SEC("perf_event")
int sample_cpu(struct bpf_perf_event_data *ctx)
{
	__u64 t0 = sample_clock();
	__u32 tgid, tid;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 source = (__u32)cookie;
	struct jp_counters *c = get_counters();

	if (!c)
		return 0;
	if ((__u32)bpf_get_current_pid_tgid() == 0) {
		c->idle++;
		return 0;
	}
	if (current_ids(&tgid, &tid)) {
		c->foreign_ns++;
		return 0;
	}
	if (source == JP_SRC_HOST && bpf_map_lookup_elem(&covered, &tid)) {
		c->skipped_covered++;
		return 0;
	}
	c->samples++;
	if (cookie & JP_COOKIE_RECORD)  /* a recording that keeps sample times */
		emit_record(ctx, c, tgid, tid, source, 0);
	else
		aggregate(ctx, c, tgid, tid, source, source == JP_SRC_HOST ? JP_KEY_HOST_FEED : 0);
	sample_timed(t0);
	return 0;
}

/* A record event of source that fires sooner than its minimum gap after
 * the thread's last record: dropped (counted as throttled). */
static __always_inline bool record_throttled(__u32 source, __u32 tid, struct jp_counters *c)
{
	__u64 now = bpf_ktime_get_ns(), key = (__u64)source << 32 | tid, *gap, *last;

	gap = bpf_map_lookup_elem(&source_min_gap, &source);
	if (!gap)
		return false;
	last = bpf_map_lookup_elem(&thread_last, &key);
	if (last && now - *last < *gap) {
		c->throttled++;
		return true;
	}
	bpf_map_update_elem(&thread_last, &key, &now, BPF_ANY);
	return false;
}

SEC("perf_event")
int sample_thread(struct bpf_perf_event_data *ctx)
{
	__u64 t0 = sample_clock();
	__u32 tgid, tid;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 source = (__u32)cookie, flags = 0, *owner;
	struct jp_counters *c = get_counters();
	int ret = (cookie & JP_COOKIE_SIGNAL) ? 1 : 0;

	if (!c)
		return 0;
	if (current_ids(&tgid, &tid)) {
		c->foreign_ns++;
		return 0;
	}
	c->samples++;
	owner = bpf_map_lookup_elem(&covered, &tid);
	if (owner && *owner == source)
		flags |= JP_KEY_HOST_FEED;
	if (cookie & JP_COOKIE_SIGNAL)
		flags |= JP_KEY_AGENT;
	if (!(cookie & JP_COOKIE_RECORD))
		aggregate(ctx, c, tgid, tid, source, flags);
	else if (record_throttled(source, tid, c))
		ret = 0;  /* no record, and no signal either */
	else
		emit_record(ctx, c, tgid, tid, source, flags);
	sample_timed(t0);
	return ret;
}
