/* Off-CPU recording: One program on the scheduler switch. At switch-out of a recorded task it
 * runs in that task's context, so it reads both stacks then (into the
 * active generation) and keeps them with the time in offcpu_start. At the
 * task's switch-in it adds the interval to offcounts[gen] when the stacks
 * are of the same drain epoch; an interval that spans a drain cannot be
 * counted there (its stacks are in the other generation, cleared by the
 * drain), so it goes to the ring with its epoch and the daemon, which holds
 * the stacks of blocked tasks across drains, resolves it. Attached only
 * while an off-CPU recording runs. */
#include "jprof.bpf.h"

/* Off-CPU intervals, aggregated like CPU samples but valued {count, ns}:
 * maps of their own keep the CPU path's value a plain counter. */
struct offcounts_map {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct jp_count_key);
	__type(value, struct jp_offcpu_value);
};

struct offcounts_map offcounts0 SEC(".maps");
struct offcounts_map offcounts1 SEC(".maps");

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

		__builtin_memcpy(key.comm, st.comm, sizeof(key.comm));
		__builtin_memcpy(key.tcomm, st.tcomm, sizeof(key.tcomm));

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
	__builtin_memcpy(m->comm, st.comm, sizeof(m->comm));
	__builtin_memcpy(m->tcomm, st.tcomm, sizeof(m->tcomm));
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
	process_comm(st.comm);
	bpf_get_current_comm(st.tcomm, sizeof(st.tcomm));  /* current is prev */
	/* Read from inside the tracepoint: the program's own frame and
	 * bpf_trace_run4 sit above __schedule; the stack starts there. */
	st.kstack = stack_id(ctx, stacks, 0, OFFCPU_GLUE_FRAMES, c);
	if (prev->flags & PF_KTHREAD)
		st.flags |= JP_KEY_KTHREAD;
	else
		st.ustack = user_stack_id(ctx, epoch & 1, st.tgid, c);
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
