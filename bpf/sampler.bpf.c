/* jprofd sampler: one perf_event program for per-CPU events (host view and
 * whole-host recordings) and one for per-thread events (recordings of one
 * process). Counts are aggregated in hash maps; stacks go to stack maps.
 * Both come in two generations: userspace flips jp_gen, waits for programs
 * that saw the old value to finish (an RCU grace period), then drains and
 * clears the old generation, so no sample is lost or counted twice. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "sampler.h"

#define PF_KTHREAD 0x00200000
#define CLONE_THREAD 0x00010000
#define EEXIST 17

char LICENSE[] SEC("license") = "GPL";

/* Drain epoch, written by userspace: its low bit selects the active
 * generation; off-CPU intervals remember it to know where their stacks are. */
volatile __u32 jp_gen;
/* A whole-host off-CPU recording (source 0: none). */
volatile __u32 jp_offcpu_all_source;
volatile __u64 jp_offcpu_all_threshold_ns;
/* The daemon's pid namespace (nsfs dev and inode), set before any event is
 * attached when the daemon does not run in the initial one (a container):
 * then ids are taken in that namespace, which is what its /proc speaks. */
volatile __u64 jp_pidns_dev;
volatile __u64 jp_pidns_ino;

struct counts_map {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct jp_count_key);
	__type(value, __u64);
};

struct stacks_map {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, JP_MAX_STACK_DEPTH * sizeof(__u64));
};

/* Off-CPU intervals, aggregated like CPU samples but valued {count, ns}:
 * maps of their own keep the CPU path's value a plain counter. */
struct offcounts_map {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct jp_count_key);
	__type(value, struct jp_offcpu_value);
};

struct counts_map counts0 SEC(".maps");
struct counts_map counts1 SEC(".maps");
struct offcounts_map offcounts0 SEC(".maps");
struct offcounts_map offcounts1 SEC(".maps");
struct stacks_map stacks0 SEC(".maps");
struct stacks_map stacks1 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct jp_counters);
} counters SEC(".maps");

/* tid -> source id of the per-thread event that feeds the host view. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u32);
} covered SEC(".maps");

/* tgids whose new threads userspace wants to hear about. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u32);
} watched SEC(".maps");

/* source -> least time between two records of one thread. An agent holds
 * copies of its record events and could shorten their period; this keeps
 * it from flooding the ring buffer that other recordings share. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} source_min_gap SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u64);
} thread_last SEC(".maps");

/* tgid (as the daemon sees it) -> the off-CPU recording of that process. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct jp_offcpu_target);
} offcpu_targets SEC(".maps");

/* Kernel tid -> a recorded task off the CPU since its switch-out. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct jp_offcpu_start);
} offcpu_start SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} events SEC(".maps");

/* Current tgid/tid as the daemon sees them; -1 for a task outside its pid
 * namespace. */
static __always_inline int current_ids(__u32 *tgid, __u32 *tid)
{
	struct bpf_pidns_info ns = {};
	__u64 id;

	if (!jp_pidns_ino) {
		id = bpf_get_current_pid_tgid();
		*tgid = id >> 32;
		*tid = (__u32)id;
		return 0;
	}
	if (bpf_get_ns_current_pid_tgid(jp_pidns_dev, jp_pidns_ino, &ns, sizeof(ns)))
		return -1;
	*tgid = ns.tgid;
	*tid = ns.pid;
	return 0;
}

static __always_inline struct jp_counters *get_counters(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&counters, &zero);
}

/* x86-64: kernel text lives in the upper canonical half, so the sign of the
 * interrupted IP tells the mode (perf context allows only 8-byte reads of
 * regs, which rules out testing cs). */
static __always_inline int in_user_mode(struct bpf_perf_event_data *ctx)
{
	return (long)ctx->regs.ip >= 0;
}

static __always_inline int is_kthread(void)
{
	struct task_struct *task = bpf_get_current_task_btf();

	return task->flags & PF_KTHREAD;
}

/* One stack of the current task into a stack map: its id, or -1 with the
 * failure counted. ctx is the program's context, of any type; skip: kernel
 * frames to leave out at the leaf (the tracing glue of a tracepoint
 * program). */
static __always_inline __s32 stack_id(void *ctx, void *stacks, __u64 user, __u64 skip,
				      struct jp_counters *c)
{
	long r = bpf_get_stackid(ctx, stacks,
				 user ? BPF_F_USER_STACK : (skip & BPF_F_SKIP_FIELD_MASK));

	if (r >= 0)
		return r;
	if (r == -EEXIST)
		c->collision++;
	else if (user)
		c->ustack_err++;
	else
		c->kstack_err++;
	return -1;
}

/* Reads both stacks into the generation's stack map; counts failures. */
static __always_inline void read_stacks(struct bpf_perf_event_data *ctx, void *stacks,
					struct jp_counters *c, __s32 *kstack, __s32 *ustack,
					__u32 *flags)
{
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
	*ustack = stack_id(ctx, stacks, 1, 0, c);
}

/* The process's identity beside its pid: a sample drained after the process
 * exited must not be taken for one of a later process with the same pid. */
static __always_inline __u64 process_start(void)
{
	struct task_struct *task = bpf_get_current_task_btf();

	return task->group_leader->start_boottime;
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
	struct jp_count_key key = {
		.tgid = tgid,
		.tid = tid,
		.source = source,
		.flags = flags,
		.start_ns = process_start(),
	};

	if (jp_gen & 1) {
		read_stacks(ctx, &stacks1, c, &key.kstack, &key.ustack, &key.flags);
		count(&counts1, &key, c);
	} else {
		read_stacks(ctx, &stacks0, c, &key.kstack, &key.ustack, &key.flags);
		count(&counts0, &key, c);
	}
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
	if (gen)
		read_stacks(ctx, &stacks1, c, &m->kstack, &m->ustack, &m->flags);
	else
		read_stacks(ctx, &stacks0, c, &m->kstack, &m->ustack, &m->flags);
	/* Records are polled at drain time; no wakeup per sample. */
	bpf_ringbuf_submit(m, BPF_RB_NO_WAKEUP);
}

SEC("perf_event")
int sample_cpu(struct bpf_perf_event_data *ctx)
{
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
	return 0;
}

SEC("perf_event")
int sample_thread(struct bpf_perf_event_data *ctx)
{
	__u32 tgid, tid;
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 source = (__u32)cookie, flags = 0, *owner;
	struct jp_counters *c = get_counters();

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
	if (cookie & JP_COOKIE_RECORD) {
		__u64 now = bpf_ktime_get_ns(), *gap, *last;

		gap = bpf_map_lookup_elem(&source_min_gap, &source);
		if (gap) {
			last = bpf_map_lookup_elem(&thread_last, &tid);
			if (last && now - *last < *gap) {
				c->throttled++;
				return 0;  /* no record, and no signal either */
			}
			bpf_map_update_elem(&thread_last, &tid, &now, BPF_ANY);
		}
		emit_record(ctx, c, tgid, tid, source, flags);
	} else {
		aggregate(ctx, c, tgid, tid, source, flags);
	}
	return (cookie & JP_COOKIE_SIGNAL) ? 1 : 0;
}

/* Tells userspace that a thread of a watched tgid was created (type
 * JP_MSG_NEW_THREAD) or that the process exec'd (JP_MSG_EXEC). */
static __always_inline void report_task(__u32 type, __u32 tgid, __u32 tid)
{
	struct jp_msg_new_thread *m;

	if (!bpf_map_lookup_elem(&watched, &tgid))
		return;
	m = bpf_ringbuf_reserve(&events, sizeof(*m), 0);
	if (!m) {
		struct jp_counters *c = get_counters();

		if (c)
			c->ringbuf_full++;
		return;
	}
	m->type = type;
	m->tgid = tgid;
	m->tid = tid;
	m->pad = 0;
	m->time_ns = bpf_ktime_get_ns();
	bpf_ringbuf_submit(m, 0);
}

SEC("tp_btf/task_newtask")
int BPF_PROG(on_fork, struct task_struct *task, __u64 clone_flags)
{
	__u32 tgid, tid = task->pid, ctid;

	if (!(clone_flags & CLONE_THREAD))
		return 0;
	tgid = task->tgid;
	if (jp_pidns_ino) {
		/* The creator is a thread of the same process: its tgid in our
		 * namespace is the new thread's. The new tid we cannot name
		 * here, so userspace rescans the process. */
		if (current_ids(&tgid, &ctid))
			return 0;
		tid = 0;
	}
	report_task(JP_MSG_NEW_THREAD, tgid, tid);
	return 0;
}

/* After an exec has installed its credentials: the daemon checks again
 * that whoever records the process may still read it (a setuid program). */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *task, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tgid, tid;

	if (current_ids(&tgid, &tid))
		return 0;
	report_task(JP_MSG_EXEC, tgid, tid);
	return 0;
}

/* ---- off-CPU ----
 * One program on the scheduler switch. At switch-out of a recorded task it
 * runs in that task's context, so it reads both stacks then (into the
 * active generation) and keeps them with the time in offcpu_start. At the
 * task's switch-in it adds the interval to offcounts[gen] when the stacks
 * are of the same drain epoch; an interval that spans a drain cannot be
 * counted there (its stacks are in the other generation, cleared by the
 * drain), so it goes to the ring with its epoch and the daemon, which holds
 * the stacks of blocked tasks across drains, resolves it. Attached only
 * while an off-CPU recording runs. */

#define TASK_RUNNING 0
#define TASK_UNINTERRUPTIBLE 2
#define TASK_DEAD 0x80
/* Kernel frames between the switch and the stack a switch-out reads: the
 * program itself and bpf_trace_run4 (kernel 6.x tp_btf). */
#define OFFCPU_GLUE_FRAMES 2

static __always_inline void offcpu_add(void *counts, struct jp_count_key *key, __u64 ns,
				       struct jp_counters *c)
{
	struct jp_offcpu_value one = { 1, ns }, *v;

	v = bpf_map_lookup_elem(counts, key);
	if (!v) {
		if (bpf_map_update_elem(counts, key, &one, BPF_NOEXIST) == 0)
			return;
		v = bpf_map_lookup_elem(counts, key);  /* lost a race, or full */
		if (!v) {
			c->map_full++;
			return;
		}
	}
	__sync_fetch_and_add(&v->count, 1);
	__sync_fetch_and_add(&v->ns, ns);
}

static __always_inline void offcpu_resume(struct task_struct *next, __u64 now, __u32 epoch,
					  struct jp_counters *c)
{
	__u32 ktid = next->pid;
	struct jp_offcpu_start *p = bpf_map_lookup_elem(&offcpu_start, &ktid);
	struct jp_offcpu_start st;
	struct jp_msg_offcpu *m;
	__u64 ns;

	if (!p)
		return;
	st = *p;
	bpf_map_delete_elem(&offcpu_start, &ktid);
	ns = now - st.ts;
	if (ns < st.threshold_ns) {
		c->offcpu_short++;
		return;
	}
	c->offcpu++;
	if (st.epoch == epoch) {
		struct jp_count_key key = {
			.tgid = st.tgid, .tid = st.tid, .kstack = st.kstack, .ustack = st.ustack,
			.source = st.source, .flags = st.flags, .start_ns = st.start_ns,
		};

		offcpu_add((epoch & 1) ? (void *)&offcounts1 : (void *)&offcounts0, &key, ns, c);
		return;
	}
	m = bpf_ringbuf_reserve(&events, sizeof(*m), 0);
	if (!m) {
		c->ringbuf_full++;
		return;
	}
	m->type = JP_MSG_OFFCPU;
	m->tgid = st.tgid;
	m->tid = st.tid;
	m->source = st.source;
	m->ns = ns;
	m->kstack = st.kstack;
	m->ustack = st.ustack;
	m->epoch = st.epoch;
	m->flags = st.flags;
	m->start_ns = st.start_ns;
	bpf_ringbuf_submit(m, BPF_RB_NO_WAKEUP);
}

static __always_inline void offcpu_leave(void *ctx, bool preempt, struct task_struct *prev,
					 __u64 now, __u32 epoch, struct jp_counters *c)
{
	struct jp_offcpu_start st = { .ts = now, .epoch = epoch, .kstack = -1, .ustack = -1 };
	struct jp_offcpu_target *t;
	void *stacks = (epoch & 1) ? (void *)&stacks1 : (void *)&stacks0;
	__u32 ktid = prev->pid;
	unsigned int state;

	if (!ktid)
		return;  /* idle */
	state = BPF_CORE_READ(prev, __state);
	if (state & TASK_DEAD)
		return;  /* exiting: it will not come back */
	if (current_ids(&st.tgid, &st.tid))  /* current is prev here */
		return;
	t = bpf_map_lookup_elem(&offcpu_targets, &st.tgid);
	if (t) {
		st.source = t->source;
		st.threshold_ns = t->threshold_ns;
	} else if (jp_offcpu_all_source) {
		st.source = jp_offcpu_all_source;
		st.threshold_ns = jp_offcpu_all_threshold_ns;
	} else {
		return;
	}
	st.flags = JP_KEY_KERNEL_MODE;
	if (preempt || state == TASK_RUNNING)
		st.flags |= JP_KEY_OFF_PREEMPTED;
	else if (state & TASK_UNINTERRUPTIBLE)
		st.flags |= JP_KEY_OFF_UNINTERRUPTIBLE;
	st.start_ns = process_start();
	/* Read from inside the tracepoint: the program's own frame and
	 * bpf_trace_run4 sit above __schedule; the stack starts there. */
	st.kstack = stack_id(ctx, stacks, 0, OFFCPU_GLUE_FRAMES, c);
	if (prev->flags & PF_KTHREAD)
		st.flags |= JP_KEY_KTHREAD;
	else
		st.ustack = stack_id(ctx, stacks, 1, 0, c);
	if (bpf_map_update_elem(&offcpu_start, &ktid, &st, BPF_ANY))
		c->offcpu_start_full++;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(offcpu_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	struct jp_counters *c = get_counters();
	__u64 now = bpf_ktime_get_ns();
	__u32 epoch = jp_gen;

	if (!c)
		return 0;
	offcpu_resume(next, now, epoch, c);
	offcpu_leave(ctx, preempt, prev, now, epoch, c);
	return 0;
}
